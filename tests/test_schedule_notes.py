"""--dry-run says when a run's schedule cannot fit it (attn_kit.recipes.scale.schedule_notes): a
warm-up longer than the run, and that a --train-minutes budget's reach is unknown until the rate is
measured (the canary measures it: attn_kit.recipes.canary.schedule_warnings). Dry runs only."""
import pytest
from test_preset import SMALL, dry_run

from attn_kit.recipes.scale import schedule_notes


def notes(out: str):
    return [line.split("] ", 1)[1] for line in out.splitlines() if "] note: " in line]


def test_dry_run_notes_a_warmup_longer_than_the_run(tmp_path):
    out = dry_run("--preset", "small", "--max-update", "300", cwd=tmp_path)
    assert notes(out) == [f"note: --warmup-updates {SMALL['warmup_updates']} is longer than --max-update 300: training "
                          "ends 75% of the way through eq. 3's warm-up, before the learning rate reaches its peak; "
                          "give a --warmup-updates below --max-update"]
    assert notes(dry_run("--preset", "small", cwd=tmp_path)) == []  # the preset's own schedule fits


def test_dry_run_notes_that_a_budgets_reach_is_unknown_until_measured(tmp_path):
    found = notes(dry_run("--preset", "small", "--train-minutes", "8", cwd=tmp_path))
    assert len(found) == 1 and found[0].startswith(
        f"note: --train-minutes 8: how many of the {SMALL['max_update']} updates (and of the "
        f"{SMALL['warmup_updates']}-update warm-up) fit in the budget is unknown") and "--canary" in found[0]


@pytest.mark.parametrize("budget", [False, True])
def test_a_run_notes_only_what_is_known_before_it_runs(budget):
    class Args:
        warmup_updates, max_update, train_minutes = 4000, 1000, 8.0
    found = schedule_notes(Args, budget=budget)
    assert len(found) == 1 + budget and found[0].startswith("--warmup-updates 4000 is longer than --max-update 1000")
