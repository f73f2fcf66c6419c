"""The recipe stage library and the bundled recipe's command line (no training here)."""
import subprocess
import sys

import pytest
from conftest import REPO, run

from attn_kit.pipeline.stages import Pipeline, RecipeError, Stage

RECIPE = [sys.executable, str(REPO / "recipes" / "wmt14.py")]


def counting_stages(calls, fail_at=None):
    def make(name):
        def body(ctx):
            calls.append(name)
            with ctx.output(ctx.workdir / f"{name}.txt") as tmp:
                if name == fail_at:
                    raise RecipeError(f"{name} broke")
                ctx.step(f"write {name}", tmp.write_text, name)
        return Stage(name, body, f"make {name}.txt")
    return [make("a"), make("b"), make("c")]


def test_finished_stages_are_skipped(tmp_path):
    calls = []
    Pipeline(tmp_path, counting_stages(calls)).run()
    Pipeline(tmp_path, counting_stages(calls)).run()
    assert calls == ["a", "b", "c"]
    assert (tmp_path / "c.txt").read_text() == "c"


def test_a_failed_stage_leaves_no_output_and_reruns(tmp_path):
    calls = []
    with pytest.raises(RecipeError):
        Pipeline(tmp_path, counting_stages(calls, fail_at="b")).run()
    assert (tmp_path / "a.txt").exists() and not (tmp_path / "b.txt").exists()
    Pipeline(tmp_path, counting_stages(calls)).run()
    assert calls == ["a", "b", "b", "c"]  # a is not redone, b is


def test_stage_range_and_dry_run(tmp_path):
    calls = []
    Pipeline(tmp_path, counting_stages(calls), first=2, last=2).run()
    assert calls == ["b"] and not (tmp_path / "a.txt").exists()
    Pipeline(tmp_path / "dry", counting_stages(calls), dry_run=True).run()
    assert not (tmp_path / "dry").exists()


def test_bundled_dry_run_prints_the_fairseq_commands_and_creates_nothing(tmp_path):
    work = tmp_path / "w"
    proc = run([*RECIPE, "--bundled", "--dry-run", "--workdir", work])
    for command in ("subword-nmt learn-joint-bpe-and-vocab", "fairseq-preprocess", "fairseq-train",
                    "--user-dir", "--arch attn_paper_base", "average_checkpoints.py", "fairseq-generate",
                    "--beam 4", "--lr-scheduler attn_inverse_sqrt", "--criterion attn_label_smoothed_cross_entropy"):
        assert command in proc.stdout, command
    assert not work.exists()


@pytest.mark.parametrize("argv,message", [
    (["--bundled", "--arch", "attn_paper_huge"], "unknown --arch 'attn_paper_huge'"),
    (["--bundled", "--stage", "9"], "--stage/--stop-stage"),
])
def test_bad_options_are_one_error_line(tmp_path, argv, message):
    proc = subprocess.run([*RECIPE, *argv, "--workdir", tmp_path / "w"], capture_output=True, text=True)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


def test_missing_bundled_data_is_one_error_line(tmp_path, monkeypatch):
    """A clone without data/ gets one line naming the missing file."""
    import recipes.wmt14 as wmt14

    monkeypatch.setattr(wmt14, "REPO", tmp_path)
    with pytest.raises(RecipeError, match="bundled data missing: .*train.en-de.tsv.xz"):
        wmt14.extract_bundled(tmp_path / "data", tmp_path, "en", "de")
