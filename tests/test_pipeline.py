"""The stage library (attn_kit.pipeline.stages) that every recipe runs on: skipping
finished stages, failing cleanly, stage ranges, dry runs (no training here)."""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import assert_one_error_line

from attn_kit.cli import UserError
from attn_kit.pipeline.stages import Context, Pipeline, Stage


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


# --------------------------------------------------------------------------- stamps that notice changes
def chain(root, calls, options=None, resumable=(), check=None):
    """upper: src.txt -> upper.txt (its text in capitals); count: upper.txt -> count.txt (its
    number of lines); each appends its name to ``calls`` when it runs."""
    def upper(ctx):
        calls.append("upper")
        with ctx.output(root / "upper.txt") as tmp:
            tmp.write_text((root / "src.txt").read_text().upper())

    def count(ctx):
        calls.append("count")
        with ctx.output(root / "count.txt") as tmp:
            tmp.write_text(str(len((root / "upper.txt").read_text().splitlines())))

    return [Stage("upper", upper, inputs=[root / "src.txt"], outputs=[root / "upper.txt"],
                  options=options or {}, resumable=resumable, check=check),
            Stage("count", count, inputs=[root / "upper.txt"], outputs=[root / "count.txt"])]


def test_a_changed_input_reruns_its_stage_and_the_stages_after_it(tmp_path, capsys):
    calls = []
    (tmp_path / "src.txt").write_text("a\nb\n")
    Pipeline(tmp_path, chain(tmp_path, calls)).run()
    (tmp_path / "src.txt").write_text("a\nb\nc\n")
    Pipeline(tmp_path, chain(tmp_path, calls)).run()
    assert calls == ["upper", "count", "upper", "count"]
    out = capsys.readouterr().out
    assert "stage 1/2 upper: input src.txt changed since the stage ran (4 -> 6 bytes); starting it over " \
           f"(its old outputs moved to {tmp_path / 'stale' / 'upper'}/)" in out
    assert "stage 2/2 count: input upper.txt changed since the stage ran (4 -> 6 bytes); starting it over" in out
    assert (tmp_path / "count.txt").read_text() == "3"
    assert (tmp_path / "stale" / "count" / "count.txt").read_text() == "2"  # nothing deleted


def test_setting_aside_a_file_inside_its_folder_moves_both_whole_or_nothing(tmp_path, capsys, monkeypatch):
    """A changed training option on a finished run: checkpoint_last.pt was set aside on its own, then
    moving checkpoints/ onto it failed (Directory not empty), and the next run deleted that half set-aside,
    the old model with it. The folder now takes its files along; a move that fails (here the second)
    puts back what was moved and ends in one line, every output and the earlier set-aside as they were;
    a move to another file system copies, then removes."""
    from attn_kit.cli import UserError

    def stage(lr, calls):
        def train(ctx):
            calls.append(lr)
            (tmp_path / "ckpt").mkdir(exist_ok=True)
            (tmp_path / "ckpt" / "last.pt").write_text(f"lr {lr}")
            (tmp_path / "train.log").write_text(f"log {lr}")
        return [Stage("train", train, inputs=[tmp_path / "src.txt"], outputs=[tmp_path / "ckpt" / "last.pt"],
                      scratch=[tmp_path / "ckpt", tmp_path / "train.log"], options={"lr": lr})]

    (tmp_path / "src.txt").write_text("a\n")
    calls = []
    Pipeline(tmp_path, stage(1, calls)).run()
    (tmp_path / "ckpt" / "interval_10.pt").write_text("an interval checkpoint")
    Pipeline(tmp_path, stage(2, calls)).run()
    aside = tmp_path / "stale" / "train"
    assert calls == [1, 2] and (aside / "ckpt" / "last.pt").read_text() == "lr 1"
    assert (aside / "ckpt" / "interval_10.pt").exists() and (aside / "train.log").read_text() == "log 1"
    assert (tmp_path / "ckpt" / "last.pt").read_text() == "lr 2"
    # the third set-aside fails on its second move: nothing moved, nothing removed
    real, moves = shutil.move, []

    def failing(src, dst):
        moves.append(src)
        if len(moves) == 2:
            raise OSError(28, "No space left on device", src)
        return real(src, dst)

    monkeypatch.setattr(shutil, "move", failing)
    with pytest.raises(UserError, match=r"stage train: could not set its old outputs aside in .*stale/train "
                                        r"\(No space left on device: .*train.log\); nothing was moved or removed"):
        Pipeline(tmp_path, stage(3, calls)).run()
    assert (tmp_path / "ckpt" / "last.pt").read_text() == "lr 2" and (tmp_path / "train.log").read_text() == "log 2"
    assert (aside / "ckpt" / "last.pt").read_text() == "lr 1" and not (tmp_path / "stale" / ".train.partial").exists()
    # another file system: os.rename refuses (EXDEV), shutil.move copies and removes
    monkeypatch.setattr(shutil, "move", real)
    rename = os.rename

    def cross_device(src, dst, *a, **k):
        if "stale" in str(dst) and ".partial" in str(dst):
            raise OSError(18, "Invalid cross-device link", src)
        return rename(src, dst, *a, **k)

    monkeypatch.setattr(os, "rename", cross_device)
    Pipeline(tmp_path, stage(3, calls)).run()
    assert calls == [1, 2, 3] and (aside.with_name("train.2") / "ckpt" / "last.pt").read_text() == "lr 2"
    assert (tmp_path / "ckpt" / "last.pt").read_text() == "lr 3"
    # the earlier set-aside is kept whole (a user's file in checkpoints/ went with it: it was deleted)
    assert (aside / "ckpt" / "last.pt").read_text() == "lr 1" and (aside / "ckpt" / "interval_10.pt").exists()


def test_the_dry_run_of_a_finished_pipeline_says_what_a_run_would_do_and_sets_nothing_aside(tmp_path, capsys):
    """A dry run on a finished work directory printed each stage as if nothing had run: it now says
    which stages a run would skip and which it would start over (and why), and that stages after one
    that runs may run too; it changes no stamp and sets nothing aside."""
    def said(out):
        return {name: line.split("(dry run", 1)[1] for line in out.splitlines()
                for name in ("upper", "count") if f"/2 {name}:" in line}

    calls = []
    (tmp_path / "src.txt").write_text("a\nb\n")
    Pipeline(tmp_path, chain(tmp_path, calls)).run()
    capsys.readouterr()
    stamps = {p: p.read_bytes() for p in (tmp_path / ".stages").iterdir()}
    Pipeline(tmp_path, chain(tmp_path, calls), dry_run=True).run()
    assert said(capsys.readouterr().out) == {"upper": "; done: a run would skip it)",
                                             "count": "; done: a run would skip it)"}
    (tmp_path / "src.txt").write_text("a\nb\nc\n")
    Pipeline(tmp_path, chain(tmp_path, calls), dry_run=True).run()
    assert said(capsys.readouterr().out) == {
        "upper": "; input src.txt changed since the stage ran (4 -> 6 bytes): a run would start it over, its old "
                 "outputs set aside in stale/)",
        "count": "; done: a run would skip it unless a stage before it changes its inputs)"}
    assert {p: p.read_bytes() for p in (tmp_path / ".stages").iterdir()} == stamps
    assert not (tmp_path / "stale").exists() and (tmp_path / "upper.txt").read_text() == "A\nB\n"


def test_an_output_made_again_identical_leaves_later_stages_done(tmp_path):
    """Content, not time: a stage run again that makes the same bytes does not make later stages stale."""
    calls = []
    (tmp_path / "src.txt").write_text("a\nb\n")
    Pipeline(tmp_path, chain(tmp_path, calls)).run()
    (tmp_path / "src.txt").write_text("A\nB\n")  # same capitals
    Pipeline(tmp_path, chain(tmp_path, calls)).run()
    assert calls == ["upper", "count", "upper"]


def test_options_start_a_stage_over_and_resumable_ones_run_it_on_its_outputs(tmp_path, capsys):
    calls = []
    (tmp_path / "src.txt").write_text("a\n")
    Pipeline(tmp_path, chain(tmp_path, calls, {"merges": 10, "updates": 5}, resumable=["updates"])).run()
    Pipeline(tmp_path, chain(tmp_path, calls, {"merges": 10, "updates": 8}, resumable=["updates"])).run()
    assert "stage 1/2 upper: option updates changed (5 -> 8); running it again on top of its outputs" \
        in capsys.readouterr().out
    assert not (tmp_path / "stale").exists()
    Pipeline(tmp_path, chain(tmp_path, calls, {"merges": 20, "updates": 8}, resumable=["updates"])).run()
    assert "stage 1/2 upper: option merges changed (10 -> 20); starting it over" in capsys.readouterr().out
    Pipeline(tmp_path, chain(tmp_path, calls, {"merges": 20, "updates": 8}, resumable=["updates"])).run()
    assert calls == ["upper", "count", "upper", "upper"]  # count's input came out the same each time


def test_a_damaged_output_is_set_aside_and_made_again(tmp_path, capsys):
    calls = []
    (tmp_path / "src.txt").write_text("a\nb\n")
    Pipeline(tmp_path, chain(tmp_path, calls)).run()
    (tmp_path / "upper.txt").write_text("A\n")
    Pipeline(tmp_path, chain(tmp_path, calls)).run()
    assert calls == ["upper", "count", "upper"]
    assert "stage 1/2 upper: output upper.txt changed since the stage made it (4 -> 2 bytes); running it again " \
           f"(moved to {tmp_path / 'stale' / 'upper'}/)" in capsys.readouterr().out
    assert (tmp_path / "upper.txt").read_text() == "A\nB\n" and (tmp_path / "stale/upper/upper.txt").read_text() == "A\n"


def test_a_finished_run_reads_no_file_again(tmp_path, monkeypatch):
    """Rerunning a finished pipeline costs a stat per file: no hash is computed again."""
    from attn_kit.pipeline import fingerprint

    (tmp_path / "src.txt").write_text("a\nb\n")
    Pipeline(tmp_path, chain(tmp_path, [])).run()
    hashed = []
    monkeypatch.setattr(fingerprint, "sha256_of", lambda path: hashed.append(path) or "x")
    calls = []
    Pipeline(tmp_path, chain(tmp_path, calls)).run()
    assert calls == [] and hashed == []
    os.utime(tmp_path / "src.txt")  # touched, same bytes: hashed again, found unchanged
    monkeypatch.undo()
    Pipeline(tmp_path, chain(tmp_path, calls)).run()
    assert calls == []


def test_an_incomplete_output_is_not_stamped(tmp_path):
    def check():
        raise UserError("upper.txt has 2 lines but src.txt has 3")

    (tmp_path / "src.txt").write_text("a\nb\n")
    with pytest.raises(UserError, match=r"^stage upper made incomplete output: upper.txt has 2 lines but .* \(its "
                                        r"outputs moved to .*stale/upper/\)$"):
        Pipeline(tmp_path, chain(tmp_path, [], check=check)).run()
    assert not (tmp_path / ".stages" / "upper.done").exists() and not (tmp_path / "upper.txt").exists()
    assert (tmp_path / "stale" / "upper" / "upper.txt").exists()


def test_a_stage_stopped_half_way_starts_over_if_its_input_changed_meanwhile(tmp_path, capsys):
    (tmp_path / "src.txt").write_text("a\n")

    def broken(ctx):
        (tmp_path / "upper.txt").write_text("A\n")  # some of its work, then it stops
        raise UserError("stopped")

    stages = chain(tmp_path, [])
    with pytest.raises(UserError):
        Pipeline(tmp_path, [Stage("upper", broken, inputs=[tmp_path / "src.txt"], outputs=[tmp_path / "upper.txt"]),
                            stages[1]]).run()
    (tmp_path / "src.txt").write_text("b\n")
    Pipeline(tmp_path, stages).run()
    assert "stage 1/2 upper: input src.txt changed since the stage ran (same size, different content); starting " \
           "it over" in capsys.readouterr().out
    assert (tmp_path / "upper.txt").read_text() == "B\n"


# --------------------------------------------------------------------------- completeness checks
def test_parallel_text_must_have_equal_line_counts(tmp_path):
    from attn_kit.pipeline import verify

    (tmp_path / "a.en").write_text("1\n2\n")
    (tmp_path / "a.de").write_text("1\n")
    with pytest.raises(UserError, match=r"a.en has 2 lines but .*a.de has 1; parallel files"):
        verify.parallel_text([(tmp_path / "a.en", tmp_path / "a.de")])


def test_a_binarized_dataset_must_match_its_index(data_bin, tmp_path):
    """fairseq-preprocess's real output passes; a .bin cut short, an index cut short and a
    .bin from another split fail, each naming the file."""
    from attn_kit.fairseq_layer import fairseq_data

    copy = tmp_path / "bin"
    shutil.copytree(data_bin, copy)
    fairseq_data.binarized(copy, "src", "tgt", ["train", "valid", "test"])
    assert fairseq_data.fairseq_dataset(copy / "train.src-tgt.src") == 600
    train = copy / "train.src-tgt.tgt.bin"
    data = train.read_bytes()
    train.write_bytes(data[:len(data) // 2])
    with pytest.raises(UserError, match=rf"^{train} is {len(data) // 2} bytes but .*idx describes 600 sentences in "
                                        rf"{len(data)} bytes"):
        fairseq_data.binarized(copy, "src", "tgt", ["train"])
    idx = copy / "valid.src-tgt.src.idx"
    idx.write_bytes(idx.read_bytes()[:-8])
    with pytest.raises(UserError, match=rf"^{idx} is \d+ bytes but its header says 40 sentences"):
        fairseq_data.fairseq_dataset(copy / "valid.src-tgt.src")
    shutil.copy(copy / "train.src-tgt.src.bin", copy / "test.src-tgt.src.bin")
    with pytest.raises(UserError, match="test.src-tgt.src.bin is .* bytes but"):
        fairseq_data.fairseq_dataset(copy / "test.src-tgt.src")


def _signal_dispositions(lang, line):
    """Stands in for a tokenization worker's line function: what the worker does on SIGTERM and Ctrl-C."""
    import signal
    name = {signal.SIG_DFL: "default", signal.SIG_IGN: "ignore"}
    return " ".join(name.get(signal.getsignal(s), "python-handler") for s in (signal.SIGTERM, signal.SIGINT))


def test_tokenization_workers_end_on_sigterm_by_default_not_through_the_recipes_handler(tmp_path, monkeypatch):
    """A recipe's SIGTERM handler (main_guard's) is inherited by the workers of the tokenization
    pool it forks. A worker must not run it: Python ends a pool by sending SIGTERM to its workers,
    and a worker still in that handler could miss the signal and hang the run forever (it hung the
    CI run once). So each worker gets the default SIGTERM action and ignores Ctrl-C (the recipe
    stops the pool), and a finished pool is closed, not signalled."""
    import signal

    from attn_kit import cli
    from attn_kit.pipeline import text

    monkeypatch.setattr(text, "_moses_line", _signal_dispositions)
    monkeypatch.setattr(cli, "_GUARDED", [os.getpid()])
    previous = signal.signal(signal.SIGTERM, cli._terminate)
    try:
        (tmp_path / "in.txt").write_text("a\nb\nc\n")
        text.moses_tokenize(tmp_path / "in.txt", tmp_path / "out.txt", "en", workers=2)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert (tmp_path / "out.txt").read_text().splitlines() == ["default ignore"] * 3


# What fairseq-train and fairseq-generate do with their DataLoaders: a worker process fetches a batch,
# and the program ends without shutting the worker down (multiprocessing ends it with SIGTERM).
DATALOADER = """
import glob, os, tempfile, torch
batches = iter(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(8.)), num_workers=1))
next(batches)
print("pymp folders:", len(glob.glob(os.path.join(tempfile.gettempdir(), "pymp-*"))))
"""


def test_a_stage_command_leaves_no_multiprocessing_folder_in_tmp(tmp_path, monkeypatch):
    """Each DataLoader worker makes a pymp-* folder in TMPDIR (multiprocessing's, for the file
    descriptors of the tensors it sends) and, ended with SIGTERM, never removes it: three were left
    in /tmp by every recipe run. A stage's command gets a TMPDIR of its own, removed when it ends."""
    tmp = Path(tempfile.mkdtemp(dir="/tmp"))  # short: a socket path in it has 107 bytes (tmp_path's is too long)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # this process's temp folder too
    try:
        Context(tmp_path / "w", dry_run=False, stage="generate").sh([sys.executable, "-c", DATALOADER])
        assert "pymp folders: 1\n" in (tmp_path / "w" / "logs" / "generate.log").read_text()  # the worker made one
        assert list(tmp.rglob("pymp-*")) == []
        assert [p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_")] == []
    finally:
        shutil.rmtree(tmp)


def _kill_self_at(lang, line):
    """A tokenizer that dies the way the out-of-memory killer ends a worker, at the line 'boom'."""
    import signal

    if line.strip() == "boom":
        os.kill(os.getpid(), signal.SIGKILL)
    return line.strip().upper()


@pytest.mark.parametrize("order", [(-9, -15), (-15, -9)])
def test_the_worker_killed_is_named_not_the_ones_the_broken_pool_then_ended(order):
    """A worker killed (SIGKILL) breaks the pool, whose executor then ends the others with SIGTERM:
    whichever comes first among the workers, the line names SIGKILL (it once said SIGTERM)."""
    from attn_kit.pipeline import text

    class Ended:
        def __init__(self, code):
            self.exitcode = code

        def join(self, timeout=None):
            pass

    said = text._killed({i: Ended(code) for i, code in enumerate(order)})
    assert said.startswith("a worker process was killed by SIGKILL (the kernel's out-of-memory killer"), said
    assert text._killed({0: Ended(-15)}) == "a worker process was killed by SIGTERM"


@pytest.mark.parametrize("booms", [1, 2])  # one worker killed, and both
def test_a_tokenization_worker_killed_from_outside_is_one_line_not_a_hang(tmp_path, monkeypatch, booms):
    """Issue 36: SIGKILL of a worker left the recipe waiting forever in multiprocessing.Pool.imap (and,
    with both killed, deaf to SIGTERM). Now it is one UserError naming the file and the signal, the
    other workers are stopped, and a rerun (without the fault) makes the whole output."""
    import threading

    from attn_kit.pipeline import text

    monkeypatch.setattr(text, "CHUNK", 10)
    lines = [f"line {i}" for i in range(200)]
    for k in range(booms):
        lines[50 + 60 * k] = "boom"
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(text, "_moses_line", _kill_self_at)
    caught = []

    def tokenize():
        try:
            text.moses_tokenize(tmp_path / "in.txt", tmp_path / "out.txt", "en", workers=2)
        except UserError as exc:
            caught.append(str(exc))

    worker = threading.Thread(target=tokenize, daemon=True)
    worker.start()
    worker.join(timeout=60)  # a hang fails here instead of hanging the suite
    assert not worker.is_alive(), "the tokenization hung after its worker was killed"
    assert len(caught) == 1 and caught[0].startswith("tokenizing in.txt: a worker process was killed by SIGKILL")
    assert "run the same command again to resume" in caught[0]
    (tmp_path / "in.txt").write_text("\n".join(line.replace("boom", "fine") for line in lines) + "\n")
    text.moses_tokenize(tmp_path / "in.txt", tmp_path / "out.txt", "en", workers=2)
    assert (tmp_path / "out.txt").read_text().splitlines() == [line.replace("boom", "fine").upper() for line in lines]


# A tool with a multiprocessing pool, as subword-nmt and fairseq-preprocess run theirs: its workers take
# slow tasks; the parent waits for every result (a task lost with a killed worker is waited for forever).
# a pool of two workers over argv[2] tasks of argv[1] seconds each; with argv[3], each task then waits
# (up to 120 s) until that file exists, so that a test decides when the work can end
POOL_TOOL = """
import multiprocessing, os, sys, time
def work(i):
    time.sleep(float(sys.argv[1]))
    end = time.time() + 120
    while len(sys.argv) > 3 and not os.path.exists(sys.argv[3]) and time.time() < end:
        time.sleep(0.05)
    return i
if __name__ == "__main__":
    with multiprocessing.Pool(2) as pool:
        for i in pool.imap(work, range(int(sys.argv[2]))):
            print("done", i, flush=True)
"""


def stage_in_thread(tmp_path, body, caught):
    """A one-stage pipeline running ``body`` in a thread of its own (started): a test can kill what it
    starts meanwhile; its UserError's message goes to ``caught``."""
    import threading

    def run():
        try:
            Pipeline(tmp_path, [Stage("bpe", body)]).run()
        except UserError as exc:
            caught.append(str(exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow  # waits out the watch's idle time
def test_a_pool_worker_killed_inside_an_external_tool_ends_its_stage_in_one_line(tmp_path, monkeypatch):
    """Issue 36: a worker of a tool's own pool (subword-nmt's, fairseq-preprocess's) killed from outside
    is replaced by the pool, the work it held never returns, and the tool (so the recipe) waits
    forever. The stage's commands that run pools are watched: one line within seconds."""
    import signal
    import time

    from attn_kit.pipeline import process
    from attn_kit.pipeline.process import WATCH_SECONDS, descendants

    monkeypatch.setattr(process, "IDLE_SECONDS", 3.0)  # the tool hangs from the kill on: no need to wait 10 s
    calls, caught = [], []
    gate = tmp_path / "killed"

    def body(ctx):
        # the tasks wait for the gate, which opens once a worker is killed: the kill always comes while tasks
        # are left (with a fixed amount of work, a loaded CI machine once finished it all before the kill),
        # and the tree falls idle right after it (the watch then waits IDLE_SECONDS)
        ctx.sh([sys.executable, "-c", POOL_TOOL, "0", "60", gate], workers=True)

    thread = stage_in_thread(tmp_path, body, caught)
    workers = {}
    for _ in range(200):  # the tool's two pool workers, once they run
        workers = {pid: parent for pid, parent in descendants(os.getpid()).items()
                   if parent in descendants(os.getpid()) and open(f"/proc/{pid}/cmdline", "rb").read().find(b"python") >= 0}
        if len(workers) >= 2:
            break
        time.sleep(0.05)
    assert len(workers) >= 2, workers
    time.sleep(3 * WATCH_SECONDS)  # a worker the watch has seen (the out-of-memory killer strikes mid-run)
    os.kill(sorted(workers)[-1], signal.SIGKILL)
    gate.touch()
    thread.join(timeout=60)  # a hang is forever (it was a replacement worker left running: see end_tree)
    assert not thread.is_alive(), "the stage hung after its tool's worker was killed"
    assert len(caught) == 1 and caught[0].startswith("stage bpe: python") and "ended while it ran" in caught[0]
    assert "run the same command again to resume" in caught[0] and calls == []


# A pool that replaces a worker the moment it ends (multiprocessing.Pool's handler does within 0.1 s) in a tool
# that takes its time to stop on SIGTERM: a replacement started while the watch ends the tree holds the
# command's output open, and the stage would wait for it forever
RESPAWNING_TOOL = """
import os, signal, sys
signal.signal(signal.SIGTERM, lambda *_: signal.alarm(1))  # stops a second after SIGTERM, replacing workers till then
signal.signal(signal.SIGALRM, lambda *_: os._exit(0))
def worker():
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)", "respawned-worker"])
print("worker", os.fork() or worker(), flush=True)
while True:
    os.wait()
    os.fork() or worker()
"""


@pytest.mark.slow
def test_the_watch_ends_a_tool_that_replaces_its_workers_and_leaves_nothing_running(tmp_path, monkeypatch):
    """The watch stops the whole tree before it kills any of it (SIGSTOP, then SIGKILL): a tool that
    replaces the workers the watch ends, and only then stops, would otherwise leave a replacement
    holding its output, and the stage hangs (a 2-core suite once did with a real pool)."""
    import signal
    import time

    from attn_kit.pipeline import process

    monkeypatch.setattr(process, "IDLE_SECONDS", 2.0)  # the tool sits idle from the kill on: no need to wait 10 s
    caught = []
    lines = []

    def body(ctx):
        ctx.sh([sys.executable, "-c", RESPAWNING_TOOL], workers=True, tail=lines.append)

    thread = stage_in_thread(tmp_path, body, caught)
    for _ in range(200):
        if any(line.startswith("worker ") for line in lines):
            break
        time.sleep(0.05)
    first = int(next(line for line in lines if line.startswith("worker ")).split()[1])
    time.sleep(3 * process.WATCH_SECONDS)  # a worker the watch has seen
    os.kill(first, signal.SIGKILL)
    thread.join(timeout=30)
    left = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
            if _cmdline(pid).endswith(b"respawned-worker\0")]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not thread.is_alive(), "the stage hung: a replaced worker holds the tool's output"
    assert left == [], "processes the watch's end left running"
    assert len(caught) == 1 and "ended while it ran and another took its place" in caught[0]


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


@pytest.mark.slow
def test_a_watched_pool_that_ends_well_is_not_an_error(tmp_path):
    def body(ctx):
        ctx.sh([sys.executable, "-c", POOL_TOOL, "0.01", "300"], workers=True)

    Pipeline(tmp_path, [Stage("bpe", body)]).run()
    assert (tmp_path / "logs" / "bpe.log").read_text().count("done ") == 300


# pools one after the other under one parent, as fairseq-preprocess binarizes file after file
POOLS_IN_TURN = """
import multiprocessing, sys, time
def work(i):
    return sum(range(20000 * (i % 7 + 1)))
if __name__ == "__main__":
    for round in range(6):
        with multiprocessing.Pool(2) as pool:
            print("pool", round, sum(pool.map(work, range(400))), flush=True)
        time.sleep(1.2)  # the watch sees each pool's workers
"""


@pytest.mark.slow
def test_pools_run_one_after_the_other_are_not_taken_for_a_killed_worker(tmp_path):
    def body(ctx):
        ctx.sh([sys.executable, "-c", POOLS_IN_TURN], workers=True)

    Pipeline(tmp_path, [Stage("binarize", body)]).run()
    assert (tmp_path / "logs" / "binarize.log").read_text().count("pool ") == 6


def test_a_file_no_run_made_where_a_stage_would_write_is_refused_before_anything_runs(tmp_path, capsys):
    """A user's own results.json in the folder given as a new run's --workdir was replaced without --force.
    A stage's output that is there with no stamp of the stage: one line, nothing run, the file as it was;
    once the stage has run (stamped), its own output is its to replace."""
    from attn_kit.cli import UserError

    calls = []
    (tmp_path / "src.txt").write_text("a\n")
    (tmp_path / "count.txt").write_text("my own notes")
    with pytest.raises(UserError, match=r"count.txt is there, but no run of stage count made it .*nothing was touched"):
        Pipeline(tmp_path, chain(tmp_path, calls)).run()
    assert calls == [] and (tmp_path / "count.txt").read_text() == "my own notes"
    (tmp_path / "count.txt").unlink()
    Pipeline(tmp_path, chain(tmp_path, calls)).run()
    (tmp_path / "src.txt").write_text("a\nb\n")
    Pipeline(tmp_path, chain(tmp_path, calls)).run()  # its own outputs: replaced (set aside) as before
    assert calls == ["upper", "count", "upper", "count"] and (tmp_path / "count.txt").read_text() == "2"


def test_a_read_only_shared_folder_whose_stages_are_done_is_read_without_its_lock(tmp_path, monkeypatch, capsys):
    """A read-only --data-workdir whose stages are done was refused (its lock cannot be written) though the
    run only reads it: it is read as it is, said in a line; one whose stage would run still takes the lock
    (and fails in one line where it cannot)."""
    from attn_kit.pipeline import stages

    shared, work = tmp_path / "data", tmp_path / "run"
    (tmp_path / "src.txt").write_text("a\nb\n")

    def prepare(ctx):
        with ctx.output(shared / "prepared.txt") as tmp:
            tmp.write_text((tmp_path / "src.txt").read_text().upper())

    def use(ctx):
        with ctx.output(work / "used.txt") as tmp:
            tmp.write_text((shared / "prepared.txt").read_text())

    def pipeline():
        return Pipeline(work, [Stage("prepare", prepare, inputs=[tmp_path / "src.txt"], outputs=[shared / "prepared.txt"],
                                     home=shared),
                               Stage("use", use, inputs=[shared / "prepared.txt"], outputs=[work / "used.txt"])])

    pipeline().run()
    (work / "used.txt").unlink()
    (work / ".stages" / "use.done").unlink()
    locked = []
    real_lock, real_access = stages.workdir_lock, os.access

    def lock(folder, *args, **kwargs):  # a read-only folder's lock cannot be created (as root, chmod cannot show it)
        locked.append(Path(folder))
        if Path(folder) == shared:
            raise UserError(f"{folder}: cannot create its .lock (Read-only file system)")
        return real_lock(folder, *args, **kwargs)

    monkeypatch.setattr(stages, "workdir_lock", lock)
    monkeypatch.setattr(stages.os, "access", lambda p, mode: False if Path(p) == shared else real_access(p, mode))
    pipeline().run()
    assert (work / "used.txt").read_text() == "A\nB\n" and shared not in locked
    assert f"--data-workdir {shared}: read-only, its stages done: read as it is" in capsys.readouterr().out
    (tmp_path / "src.txt").write_text("a\nb\nc\n")  # now its stage would run: the lock is taken, and refused
    with pytest.raises(UserError, match="Read-only file system"):
        pipeline().run()
