"""attn_kit.fairseq_layer.fairseq_commands, the one place the kit's fairseq command lines are built: the recipes' and
the comparison's training (lab.compare.commands, on the kit's pieces) share the paper's Adam settings and log JSON
lines that attn_kit.fairseq_layer.fairseq_log reads."""
from pathlib import Path

import pytest

from attn_kit.fairseq_layer import fairseq_commands as fc
from attn_kit.fairseq_layer.fairseq_log import read
from lab.compare.commands import ADAM, ComparisonPlan


PLAN = fc.TrainPlan(arch="attn_paper_base", warmup_updates=4000, max_tokens=4096, update_freq=1,
                    tokens_per_update=4096, max_update=10, seed=1, save_interval_updates=5, keep_interval_updates=2,
                    log_interval=10)


def contains(cmd, part):
    return any(cmd[i:i + len(part)] == part for i in range(len(cmd)))


def test_both_training_commands_share_adam_and_log_json():
    recipe = PLAN.command(["fairseq-train"], "bin", "ckpt")
    compare = ComparisonPlan(model=("--arch", "transformer"), max_tokens=4096, update_freq=1, seed=1,
                             max_update=10, validate_every=5, log_every=10).command(["worker"], "bin", "ckpt")
    for cmd, adam in ((recipe, fc.PAPER_ADAM), (compare, ADAM)):  # the plugin's Adam; fairseq's for comparisons
        assert contains(cmd, adam) and contains(cmd, ["--log-format", "json"]) and "--cpu" in cmd
        assert all(isinstance(c, str) for c in cmd)
    assert contains(recipe, ["--lr-scheduler", "attn_inverse_sqrt", "--warmup-updates", "4000", "--lr", "1"])
    assert "--lr-scale" not in recipe and "--stop-time-hours" not in recipe  # eq. 3 as written; no time budget
    timed = ComparisonPlan(model=(), max_tokens=1, update_freq=1, seed=1, train_minutes=3.0, precision="bf16",
                           gpus=1, validate_every=5, log_every=10).command(["worker"], "bin", "ckpt")
    assert contains(timed, ["--stop-time-hours", repr(0.05), fc.BF16_FLAG]) and "--cpu" not in timed


def test_the_train_stages_fingerprint_is_every_field_that_declares_it():
    """The train stage's options come from the plan's fields (each declares whether it changes what
    training makes), not from a hand list: changing a declared field changes the fingerprint, under
    its own name or the one it declares; where and in how many forwards it trains does not (a resumed
    run may change devices); the options a run resumes across are in it."""
    import dataclasses

    from attn_kit.recipes.common import RESUMABLE_TRAIN_OPTIONS

    base = PLAN.fingerprint()
    other = {int: 7, float: 0.123, str: "bf16", tuple: ("--x", "1")}
    changed = set()
    for f in dataclasses.fields(fc.TrainPlan):
        value = getattr(PLAN, f.name)
        kind = type(value) if value is not None else (float if f.name == "train_minutes" else int)
        after = dataclasses.replace(PLAN, **{f.name: other[kind]}).fingerprint()
        declared = f.metadata["fingerprint"]
        assert (after != base) == bool(declared), f.name
        if declared:
            changed.add(f.name if declared is True else declared)
    # a field added after runs recorded their options is in it only when set (clip_norm)
    since = {f.name for f in dataclasses.fields(fc.TrainPlan) if f.metadata["when_set"]}
    assert since == {"clip_norm"} and changed == set(base) | since and set(RESUMABLE_TRAIN_OPTIONS) <= changed
    # the keys every run's train stage has recorded (a renamed key would go unchecked on a resumed run)
    assert set(base) == {"arch", "model", "warmup_updates", "lr_scale", "tokens_per_update", "seed", "precision",
                         "train_flags", "fairseq_extra_args", "max_update", "train_minutes", "save_interval_updates",
                         "optimizer"}  # optimizer: stamps from before it read it from their train_command.json
    assert {"max_tokens", "update_freq", "gpus", "world_size"}.isdisjoint(changed)
    assert base["fairseq_extra_args"] == [] and isinstance(base["model"], list)  # as it reads back from JSON


def test_clip_norm_reaches_fairseq_train_only_when_set_and_fingerprints_only_then():
    """--clip-norm (issue 39's three-file option): fairseq-train's flag, which its own parser reads, and
    the stage's fingerprint when set; at its default (0, no clipping, the paper's) neither changes, so
    a run's finished train stage stays finished."""
    import dataclasses

    from attn_kit.fairseq_layer.build import parse_train_args

    clipped = dataclasses.replace(PLAN, clip_norm=0.5)
    assert "--clip-norm" not in PLAN.command(["fairseq-train"], "bin", "ckpt") and "clip_norm" not in PLAN.fingerprint()
    cmd = clipped.command(["fairseq-train"], "bin", "ckpt")
    assert contains(cmd, ["--clip-norm", "0.5"]) and clipped.fingerprint()["clip_norm"] == 0.5
    assert parse_train_args(cmd[2:]).clip_norm == 0.5  # after the command and its data directory
    assert parse_train_args(PLAN.command(["fairseq-train"], "bin", "ckpt")[2:]).clip_norm == 0


def test_decoding_validation_and_binarizing_commands():
    gen = fc.generate_command("bin", "c.pt", subset="test", plan=fc.DecodePlan(beam=4, max_len_b=50, batch_size=128,
                                                                               alpha=0.6),
                              gpus=0, remove_bpe="subword_nmt")
    assert gen[:2] == ["fairseq-generate", "bin"] and contains(gen, ["--gnmt-alpha", "0.6", "--max-len-a", "1"])
    assert gen[-3:] == ["--remove-bpe", "subword_nmt", "--cpu"]
    assert fc.validate_command("bin", "c.pt", max_tokens=500, gpus=1)[-2:] == ["--max-tokens", "500"]
    pre = fc.preprocess_command("en", "de", Path("out"), {"valid": "t/valid", "train": "t/train"},
                                joined_dictionary=True, workers=2)
    assert pre == ["fairseq-preprocess", "--source-lang", "en", "--target-lang", "de", "--trainpref", "t/train",
                   "--validpref", "t/valid", "--destdir", "out", "--joined-dictionary", "--workers", "2"]
    assert fc.thread_env(2) == {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"} and fc.thread_env(None) is None


def test_a_json_log_line_reads_back_without_fairseqs_tag_prefix():
    entry = read('2026-01-01 10:00:22 | INFO | valid | {"epoch": 1, "valid_loss": "8.1", "valid_num_updates": "20"}')
    assert (entry.tag, entry.stats, entry.update) == ("valid", {"epoch": 1, "loss": "8.1", "num_updates": "20"}, 20)
    assert read("2026-01-01 10:00:22 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.1").stats is None
    assert read("$ fairseq-train bin").command and read("no stamp").stamp is None


@pytest.mark.parametrize("plan", [
    fc.DecodePlan(beam=4, max_len_b=50, batch_size=128, alpha=0.6),
    fc.DecodePlan(beam=4, max_len_b=50, batch_size=128, alpha=0.6, beam_stop="fairseq"),
    fc.DecodePlan(beam=21, max_len_b=300, batch_size=16, alpha=0.3, min_len=0),
    fc.DecodePlan(beam=5, max_len_b=50, batch_size=64, lenpen=1.4),
])
def test_a_decoding_plan_reads_back_from_its_run_card_and_gives_fairseqs_flags(plan):
    """Issue 39: the run card was written by parsing the penalty flags back (dict(zip(flags[::2], ...)))
    and read by rebuilding them. Now one plan gives both; the card reads back to the same plan."""
    args, generation = plan.card()
    assert fc.DecodePlan.from_card({"args": args, "generation": generation}, plan.batch_size) == plan
    flags = plan.flags()
    assert flags[:2] == ["--beam", str(plan.beam)] and contains(flags, ["--max-len-b", str(plan.max_len_b)])
    assert contains(flags, ["--gnmt-alpha", str(plan.alpha)] if plan.alpha is not None else ["--lenpen", str(plan.lenpen)])
    assert ("--lenpen" in flags) == (plan.alpha is None) and ("--min-len" in flags) == (plan.min_len != 1)
    assert ("--beam-stop" in flags) == (plan.beam_stop is not None)
