"""The stage library (attn_kit.pipeline.stages) that every recipe runs on: skipping
finished stages, failing cleanly, stage ranges, dry runs (no training here)."""
import subprocess
import sys

import pytest
from conftest import assert_one_error_line

from attn_kit.cli import UserError
from attn_kit.pipeline.stages import Pipeline, Stage


def counting_stages(calls, fail_at=None):
    def make(name):
        def body(ctx):
            calls.append(name)
            with ctx.output(ctx.workdir / f"{name}.txt") as tmp:
                if name == fail_at:
                    raise UserError(f"{name} broke")
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
    with pytest.raises(UserError):
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


def test_a_failing_command_is_one_line_with_exit_status_last_line_and_log(tmp_path):
    script = ("import sys; print('working...'); sys.stdout.flush(); "
              "print('fatal: the last thing it said', file=sys.stderr); sys.exit(3)")
    stage = Stage("fake", lambda ctx: ctx.sh([sys.executable, "-c", script]), "fails")
    with pytest.raises(UserError) as info:
        Pipeline(tmp_path, [stage]).run()
    log = tmp_path / "logs" / "fake.log"
    assert str(info.value) == f"stage fake failed (exit 3): fatal: the last thing it said; log: {log}"
    assert "working..." in log.read_text()
    assert not (tmp_path / ".stages" / "fake.done").exists()


def test_a_tools_own_error_line_is_not_prefixed_twice(tmp_path):
    """attn_plugin and scripts/ print 'error: ...' themselves; the stage error quotes it once."""
    script = "import sys; print('error: found 0 update checkpoints', file=sys.stderr); sys.exit(1)"
    stage = Stage("average", lambda ctx: ctx.sh([sys.executable, "-c", script]))
    with pytest.raises(UserError, match=r"^stage average failed \(exit 1\): found 0 update checkpoints; log: "):
        Pipeline(tmp_path, [stage]).run()


def test_main_guard_prints_one_line_for_a_failed_stage(tmp_path):
    program = (
        "import sys\n"
        "from attn_kit.cli import main_guard\n"
        "from attn_kit.pipeline.stages import Pipeline, Stage\n"
        "stage = Stage('train', lambda ctx: ctx.sh([sys.executable, '-c', 'import sys; sys.exit(1)']))\n"
        "main_guard(lambda: Pipeline(%r, [stage]).run() and None)\n" % str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert_one_error_line(proc, "stage train failed (exit 1)", f"log: {tmp_path / 'logs' / 'train.log'}")


def test_a_stage_range_can_be_named_by_an_alias(tmp_path):
    """Old stage names stay valid: an alias names a range (first, last) of the current stages."""
    calls = []
    stages = [Stage(n, lambda ctx, n=n: calls.append(n)) for n in ("extract", "tokenize", "bpe", "binarize")]
    aliases = {"prepare": ("extract", "bpe")}
    Pipeline(tmp_path, stages, first="prepare", last="prepare", aliases=aliases).run()
    assert calls == ["extract", "tokenize", "bpe"]
    Pipeline(tmp_path / "2", stages, first="prepare", last="binarize", aliases=aliases).run()
    assert calls[3:] == ["extract", "tokenize", "bpe", "binarize"]


def test_a_stage_whose_output_disappeared_is_redone(tmp_path):
    calls = []

    def make(name):
        def body(ctx):
            calls.append(name)
            with ctx.output(tmp_path / f"{name}.txt") as tmp:
                ctx.step(f"write {name}", tmp.write_text, name)
        return Stage(name, body, f"make {name}.txt", outputs=[tmp_path / f"{name}.txt"])

    stages = [make("a"), make("b")]
    Pipeline(tmp_path, stages).run()
    (tmp_path / "b.txt").unlink()
    Pipeline(tmp_path, stages).run()
    assert calls == ["a", "b", "b"]
    assert (tmp_path / "b.txt").read_text() == "b"


def test_stage_range_by_name_and_timings(tmp_path):
    calls = []
    stages = [Stage(n, lambda ctx, n=n: calls.append(n)) for n in ("one", "two", "three")]
    timings = Pipeline(tmp_path, stages, first="two", last="two").run()
    assert calls == ["two"] and list(timings) == ["two"]
    assert set(Pipeline(tmp_path, stages).stage_seconds()) == {"two"}


def test_dry_run_runs_nothing_even_for_finished_stages(tmp_path):
    calls = []
    stage = Stage("s", lambda ctx: ctx.step("would do it", calls.append, "ran"))
    Pipeline(tmp_path / "w", [stage], dry_run=True).run()
    assert calls == [] and not (tmp_path / "w").exists()
