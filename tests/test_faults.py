"""Fault injection: what a hostile-but-fair user (or a scheduler, or a full disk) does to a run,
and what must come out of it. Every case of lab.faults.CASES (docs/faults.md, "What happens when
things go wrong") is a test here; the recipe cases run on the WMT14 --smoke recipe, copying one
finished run (conftest.smoke_run) and comparing with it: same BLEU, the same averaged model bit
for bit, the same translations."""
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import RECIPE, REPO, SMOKE_RUN, USER_DIR, assert_one_error_line, assert_same_results, cli, command

from attn_kit.fairseq_layer import checkpoints

from lab import faults
from attn_kit.cli import UsageError, UserError
from attn_kit.pipeline.lock import workdir_lock

INJECT = [sys.executable, str(REPO / "tests" / "faults" / "inject.py")]
ENOSPC_SHIM = REPO / "tests" / "faults" / "enospc"
STAGES = ["download", "extract", "tokenize", "bpe", "binarize", "train", "average", "generate", "score"]
# The chain of signals (tests/faults/inject.py), in order: each run is stopped at one point and the next resumes
# from there. Every stage gets SIGTERM in the middle of it (mid-command or between steps), then SIGKILL. Training,
# where the recipe does most of its own work while a command runs, gets a signal at each kind of moment of it;
# SIGNAL@group goes to the recipe's whole process group, as Ctrl-C in a terminal does (fairseq-train gets it too).
KILLS = [(stage, sig, trigger) for stage, trigger in (
    ("download", "step:2"), ("extract", "step:1"), ("tokenize", "step:1"), ("bpe", "step:1"),
    ("binarize", r"line:train\.en: \d+ sents")) for sig in ("SIGTERM", "SIGKILL")] + [
    ("train", "SIGINT@group", r"line:dictionary: \d+ types"),  # fairseq-train starting up
    ("train", "SIGTERM", "import:matplotlib.rcsetup"),  # the first curves refresh, halfway through import matplotlib
    ("train", "SIGINT@group", "import:matplotlib.rcsetup"),  # the same, Ctrl-C
    ("train", "SIGTERM", "line:Saved checkpoint"),  # a checkpoint written
    ("train", "SIGKILL", "line:Loaded checkpoint"),  # training resumed from it
    ("train", "SIGINT@group", "import:torch._C"),  # the next run reading the checkpoints first (importing torch)
    ("train", "SIGTERM", "line:done training"),  # fairseq-train's last line: the final curves and the stamp to come
    ("train", "SIGINT@group", "import:matplotlib.rcsetup"),  # nothing left to train: the final curves refresh
] + [(stage, sig, trigger) for stage, trigger in (
    ("average", "line:^averaging"), ("generate", "line:loading model"), ("score", "step:1"))
    for sig in ("SIGTERM", "SIGKILL")] + [
    ("score", "SIGINT@group", "report"),  # every stage done: the final report
]
EXIT = {"SIGTERM": (143, "terminated (SIGTERM); finished stages are kept, run the same command again to resume"),
        "SIGINT": (130, "interrupted; finished stages are kept, run the same command again to resume")}


def env(**extra):
    return dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", **extra)


def recipe(work, *extra, prefix=RECIPE, environ=None, timeout=900, session=False):
    """The smoke recipe on ``work``; ``session``: in a process group of its own (for SIGNAL@group)."""
    return subprocess.run([*prefix, *SMOKE_RUN, "--workdir", str(work), *map(str, extra)], capture_output=True,
                          text=True, env=environ or env(), timeout=timeout, start_new_session=session)


def copy_of(smoke_run, tmp_path) -> Path:
    work = tmp_path / "w"
    shutil.copytree(smoke_run, work)
    return work


def partial_files(work: Path):
    return sorted(str(p.relative_to(work)) for p in work.rglob("*.partial"))


# --------------------------------------------------------------------------- kills
def test_sigterm_then_sigkill_in_every_stage_then_rerun(smoke_run, tmp_path):
    """The chain of KILLS: SIGTERM, SIGKILL and Ctrl-C (SIGINT to the process group) at its point
    of a stage, each run resuming what the one before was stopped in. A signal it can handle ends
    a run with exactly one line and exit 143 (SIGTERM) or 130 (Ctrl-C), whatever the recipe was
    doing: reading a command's output, importing a module, refreshing the curves, reporting. The
    last run (no signal) must end exactly as the uninterrupted reference run: the same scores,
    translations, averaged model (bit for bit) and training curves (each update once), and no
    command's scratch folder is left in the temporary folder (a SIGKILLed run's goes at the next run)."""
    work, tmp = tmp_path / "w", tmp_path / "tmp"
    tmp.mkdir()
    environ = env(TMPDIR=str(tmp))
    before = None
    for stage, sig, trigger in KILLS:
        i = STAGES.index(stage)
        proc = recipe(work, prefix=[*INJECT, stage, sig, trigger, "--"], session=True, environ=environ)
        where = (stage, sig, trigger, proc.stdout[-3000:], proc.stderr[-2000:])
        assert f"stage {i + 1}/9 {stage}: " in proc.stdout, where
        name = sig.split("@")[0]
        if name == "SIGKILL":
            assert proc.returncode == -signal.SIGKILL, where
        else:
            assert proc.returncode == EXIT[name][0], where
            assert_one_error_line(proc, EXIT[name][1])
            assert partial_files(work) == [], where  # temporary files removed on the way out
        done = {s for s in STAGES if (work / ".stages" / f"{s}.done").exists()}
        if trigger == "report":
            assert done == set(STAGES) and "sacreBLEU = " not in proc.stdout, where
        else:
            assert done == set(STAGES[:i]), where  # the stage it was stopped in is not marked done
            assert (work / ".stages" / f"{stage}.started").exists(), where
        if before:  # the run resumed the stage the one before it was stopped in
            j = STAGES.index(before[0])
            assert f"stage {j + 1}/9 {before[0]}: an earlier run stopped during this stage; resuming it" \
                in proc.stdout, where
            if before[1] == "SIGKILL":  # the lock the SIGKILLed run left was taken over, saying so
                assert "stopped without releasing it; taking over" in proc.stdout, where
        before = (stage, sig)
    final = recipe(work, environ=environ)
    assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-2000:]
    assert final.stdout.count("done already, skipping") == len(STAGES) and "sacreBLEU = " in final.stdout
    assert partial_files(work) == []  # what a kill left half-written was removed or finished by the reruns
    assert sorted(p.name for p in tmp.iterdir() if p.name.startswith("attn-")) == []
    assert_same_results(work, smoke_run)
    assert curve_points(work) == curve_points(smoke_run)


def curve_points(work: Path):
    """curves.csv without what depends on the clock (hours, tokens/s)."""
    with open(work / "curves.csv", encoding="utf-8") as f:
        return [{k: v for k, v in row.items() if k not in ("hours", "tokens_per_s")} for row in csv.DictReader(f)]


SIGNALLED = """import os, signal, sys
from attn_kit.cli import UserError, main_guard
from attn_kit.pipeline.process import stream

class Lost:  # the signal comes while Python finalizes an object: the exception it raises there is dropped
    def __del__(self):
        os.kill(os.getpid(), signal.{sig})

def main():
    {body}

main_guard(main, interrupted="interrupted; finished stages are kept")
"""
# A package like matplotlib: the signal comes while it imports its second submodule, once; the first
# stays loaded, bound to the package whose import was cut short, so importing it again fails.
HALFWAY = {"__init__.py": "from . import first, second\ndef data_path():\n    return 'here'\nfirst.check()\n",
           "first.py": "import halfway\ndef check():\n    return halfway.data_path()\n",
           "second.py": "import os, signal\nif not os.path.exists('sent'):\n    open('sent', 'w').close()\n"
                        "    os.kill(os.getpid(), signal.{sig})\n"}
MOMENTS = {
    # the cleanup after the signal imports the half-loaded package again, as the train stage's final
    # curves refresh did with matplotlib: an AttributeError on the way out
    "import": "try:\n        import halfway\n    finally:\n        import halfway",
    # lost in a finalizer; what the recipe saw next was its command's end (killed by the same signal)
    "finalizer": "Lost()\n    raise UserError('stage train failed (exit -15)')",
    # lost while a command runs: the command is stopped at its next line (it would write "late")
    "command": "stream([sys.executable, '-c', 'import time; print(1, flush=True); time.sleep(2); print(2, flush=True); "
               "open(\"late\", \"w\")'], lambda line: Lost())",
    # the work is done and main has returned: the signal comes while Python exits
    "exit": "import atexit, time\n    atexit.register(lambda: (os.kill(os.getpid(), signal.{sig}), time.sleep(5)))",
}


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("moment", MOMENTS)
def test_a_signal_at_any_moment_is_one_line_and_its_exit_status(tmp_path, name, moment):
    """main_guard's promise at the moments the recipe chain cannot aim at: whatever a signal leaves
    behind (an error on the way out, nothing at all), one line and exit 143 or 130."""
    (tmp_path / "halfway").mkdir()
    for file, text in HALFWAY.items():
        (tmp_path / "halfway" / file).write_text(text.format(sig=name))
    program = SIGNALLED.format(sig=name, body=MOMENTS[moment].format(sig=name))
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=tmp_path,
                          env=env(), timeout=60)
    status, line = EXIT[name]
    assert proc.returncode == status, proc.stderr
    assert_one_error_line(proc, line.split(";")[0] + "; finished stages are kept")
    assert not (tmp_path / "late").exists()


# --------------------------------------------------------------------------- the lock
HOLD = ("import sys, time\nfrom attn_kit.pipeline.lock import workdir_lock\n"
        "with workdir_lock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(120)\n")


def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path, capsys):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(UserError, match=rf"^{tmp_path} is in use by another run \(pid {holder.pid}, started "):
            with workdir_lock(tmp_path):
                pass
    finally:
        holder.kill()  # SIGKILL: no chance to release anything
        holder.wait()
    with workdir_lock(tmp_path):  # the kernel dropped the dead run's lock: taken over at once
        assert f"pid: {os.getpid()}" in (tmp_path / ".lock").read_text()
    assert f"the run that held it (pid {holder.pid}, " in capsys.readouterr().out
    assert (tmp_path / ".lock").read_text() == ""  # released cleanly: nothing for the next run to take over


def test_the_commands_of_a_killed_run_die_with_it_and_hold_its_lock_until_then(tmp_path):
    """A recipe killed with SIGKILL cannot stop its fairseq-train: the kernel does (SIGTERM),
    and until the command has exited it holds the run's lock, so no new run starts beside it."""
    program = ("import os, sys\nfrom attn_kit.pipeline.lock import workdir_lock\n"
               "from attn_kit.pipeline.process import stream\n"
               "with workdir_lock(sys.argv[1]):\n"
               "    stream([sys.executable, '-c', 'import os, time; print(os.getpid(), flush=True); time.sleep(60)'],\n"
               "           lambda line: (print(line, end='', flush=True), os.kill(os.getpid(), 9)))\n")
    run = subprocess.run([sys.executable, "-c", program, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == -signal.SIGKILL
    child = int(run.stdout.split()[0])
    start = time.time()
    while os.path.exists(f"/proc/{child}") and open(f"/proc/{child}/stat").read().split()[2] != "Z":
        assert time.time() - start < 10, "the command outlived the run that started it"
        time.sleep(0.1)
    with workdir_lock(tmp_path):  # free again
        pass


def test_an_uncreatable_workdir_is_one_line_naming_the_option(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    proc = recipe(tmp_path / "file" / "w")
    assert_one_error_line(proc, f"--workdir {tmp_path / 'file' / 'w'}: cannot create it")


# --------------------------------------------------------------------------- damaged outputs, a second run
DAMAGE = {  # stage: (output truncated to half, output deleted)
    "download": (None, "downloads/test-full.tgz"),
    "extract": ("raw/test.de", None),  # a reference with fewer lines than the hypotheses
    "tokenize": ("tok/train.de", "tok/valid.en"),
    "bpe": ("prep/train.de", "bpe/codes"),  # halving prep/train.de: the stale data-bin
    "binarize": ("data-bin/train.en-de.de.bin", "data-bin/dict.en.txt"),
    "train": ("checkpoints/checkpoint_last.pt", None),  # resumes from the newest intact checkpoint
    "average": ("checkpoint_avg.json", "checkpoint_avg.pt"),
    "generate": (None, "gen/test.out"),
    "score": ("results.json", None),
}


def test_damaged_outputs_are_made_again_and_a_second_run_is_refused(smoke_run, tmp_path):
    work = copy_of(smoke_run, tmp_path)
    for truncated, deleted in DAMAGE.values():
        if truncated:
            data = (work / truncated).read_bytes()
            (work / truncated).write_bytes(data[:len(data) // 2])
        if deleted:
            (work / deleted).unlink()
    first = subprocess.Popen([*RECIPE, *SMOKE_RUN, "--workdir", str(work)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env())
    try:
        while f"pid: {first.pid}" not in (work / ".lock").read_text():  # the first run holds the lock
            assert first.poll() is None, first.communicate()
            time.sleep(0.1)
        start = time.time()
        second = recipe(work)
        seconds = time.time() - start
        out, err = first.communicate(timeout=900)
    finally:
        first.kill()
    # the second run stops at once, naming the first; it changed nothing
    line = assert_one_error_line(second, f"{work} is in use by another run (pid {first.pid}, started ")
    assert "test_faults" not in line and seconds < 30
    assert first.returncode == 0, out[-3000:] + err[-2000:]
    for i, (stage, (truncated, deleted)) in enumerate(DAMAGE.items(), 1):
        said = next(line for line in out.splitlines() if f"stage {i}/9 {stage}: " in line)
        if stage in ("average", "generate", "score"):  # after train, which made its checkpoints again
            assert f"stage {i}/9 {stage}: input " in said and "starting it over" in said, said
        else:
            assert any(f"stage {i}/9 {stage}: output {name} {how}" in said for name, how in (
                (truncated, "changed since the stage made it"), (deleted, "is missing")) if name), said
            assert "running it again" in said, said
        if truncated:  # set aside, not deleted
            assert (work / "stale" / stage / truncated).stat().st_size == (smoke_run / truncated).stat().st_size // 2
    assert "checkpoint_last.pt is missing; resuming from checkpoint_1_20.pt (update 20)" in out
    assert partial_files(work) == []
    assert_same_results(work, smoke_run)
    for name in ("raw/test.de", "prep/train.de", "data-bin/train.en-de.de.bin"):
        assert (work / name).read_bytes() == (smoke_run / name).read_bytes()


def test_a_truncated_checkpoint_last_resumes_from_the_newest_intact_checkpoint(tmp_path, capsys):
    """What a kill (or a full disk) during fairseq's copy to checkpoint_last.pt leaves: the file
    is moved aside, not deleted, and the newest intact interval checkpoint takes its place."""
    ckpt = tmp_path / "checkpoints"
    ckpt.mkdir()
    for update in (10, 20, 30):
        torch.save({"model": {"w": torch.tensor([float(update)])}, "optimizer_history": [{"num_updates": update}]},
                   ckpt / f"checkpoint_1_{update}.pt")
    last = (ckpt / "checkpoint_1_30.pt").read_bytes()
    (ckpt / "checkpoint_last.pt").write_bytes(last[:len(last) // 2])
    (ckpt / "checkpoint_1_30.pt").write_bytes(last[:-40])  # the newest interval checkpoint is damaged too
    checkpoints.recover_last(ckpt)
    out = capsys.readouterr().out
    assert (ckpt / "checkpoint_last.pt").read_bytes() == (ckpt / "checkpoint_1_20.pt").read_bytes()
    assert (ckpt / "checkpoint_last.pt.bad").read_bytes() == last[:len(last) // 2]
    assert "checkpoint_last.pt is truncated" in out and "moved it to checkpoint_last.pt.bad" in out
    assert "checkpoint_1_30.pt is truncated" in out and "not resuming from it" in out
    assert "resuming from checkpoint_1_20.pt (update 20), the newest intact checkpoint" in out
    checkpoints.recover_last(ckpt)  # an intact checkpoint_last.pt is left alone
    assert capsys.readouterr().out == "" and not (ckpt / "checkpoint_last.pt.bad2").exists()


def test_a_changed_option_reruns_its_stage_and_everything_after_it(smoke_run, tmp_path):
    """--average 1 on a finished run: the average stage starts over (its old output set aside),
    and generate and score, whose inputs it changed, start over too; the rest is skipped."""
    work = copy_of(smoke_run, tmp_path)
    proc = recipe(work, "--average", "1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.stdout.count("done already, skipping") == 6
    assert "stage 7/9 average: option average changed (2 -> 1); starting it over" in proc.stdout
    assert "stage 8/9 generate: input checkpoint_avg.pt changed since the stage ran" in proc.stdout
    assert "stage 9/9 score: input " in proc.stdout
    assert json.loads((work / "results.json").read_text())["averaged_updates"] == [25]
    assert (work / "stale" / "average" / "checkpoint_avg.pt").read_bytes() == \
        (smoke_run / "checkpoint_avg.pt").read_bytes()


def test_a_run_trained_with_another_optimizer_before_it_was_recorded_is_trained_again(smoke_run, tmp_path):
    """A run made by an older commit (fairseq's adam, a train stamp without the optimizer) counted its train
    stage as done, then failed on a raised --max-update with fairseq's AssertionError (one Adam's state does
    not resume under the other). The stamp lacks the key: the run's own train_command.json says which Adam
    trained it, and the dry run says training would start over; a run the same Adam trained stays done."""
    work = copy_of(smoke_run, tmp_path)
    stamp = work / ".stages" / "train.done"
    done = json.loads(stamp.read_text())
    del done["options"]["optimizer"]
    stamp.write_text(json.dumps(done))
    same = recipe(work, "--dry-run")
    train = next(line for line in same.stdout.splitlines() if "stage 6/9 train: " in line)
    assert train.endswith("(dry run; done: a run would skip it)"), train
    record = work / "train_command.json"
    saved = json.loads(record.read_text())
    saved["argv"][saved["argv"].index("attn_adam")] = "adam"
    record.write_text(json.dumps(saved))
    other = recipe(work, "--dry-run", "--max-update", "80")
    assert other.returncode == 0, other.stderr[-2000:]
    assert "option optimizer changed (adam -> attn_adam, as the stage's own records say): a run would start it " \
           "over" in other.stdout


@pytest.mark.slow  # trains the smoke model again
def test_a_changed_training_option_sets_the_old_model_aside_whole(smoke_run, tmp_path):
    """--lr-scale 1.5 on a finished run: checkpoint_last.pt was set aside on its own, moving checkpoints/
    onto it then failed (Directory not empty), and the same command again deleted that half set-aside,
    the old model with it. Now the train stage starts over with its old checkpoints, log and curves in
    stale/train/, the old model there bit for bit."""
    work = copy_of(smoke_run, tmp_path)
    proc = recipe(work, "--lr-scale", "1.5")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert (f"stage 6/9 train: option lr_scale changed (2.0 -> 1.5); starting it over (its old outputs moved to "
            f"{work / 'stale' / 'train'}/)") in proc.stdout
    old = work / "stale" / "train" / "checkpoints"
    assert (old / "checkpoint_last.pt").read_bytes() == (smoke_run / "checkpoints" / "checkpoint_last.pt").read_bytes()
    assert sorted(p.name for p in old.iterdir()) == sorted(p.name for p in (smoke_run / "checkpoints").iterdir())
    assert (work / "checkpoints" / "checkpoint_last.pt").exists() and not (work / "stale" / ".train.partial").exists()


def test_scoring_against_a_reference_with_fewer_lines_is_one_line(smoke_run, tmp_path):
    """--stage score alone (the stages that would make the reference again are not run)."""
    work = copy_of(smoke_run, tmp_path)
    ref = work / "raw" / "test.de"
    ref.write_text("".join(ref.read_text().splitlines(keepends=True)[:150]))
    proc = recipe(work, "--stage", "score")
    assert_one_error_line(proc, f"{work / 'gen' / 'test.out'} holds 200 translations but the test set has 150 "
                                "sentences", "rerun the generate stage")
    assert "stage 9/9 score: input raw/test.de changed since the stage ran" in proc.stdout


# --------------------------------------------------------------------------- a full disk
def test_a_full_disk_in_a_stage_is_one_line_and_the_rerun_completes(smoke_run, tmp_path):
    work = copy_of(smoke_run, tmp_path)
    (work / "tok" / "test.de").unlink()
    full = recipe(work, environ=env(PYTHONPATH=f"{ENOSPC_SHIM}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                                    ATTN_TEST_ENOSPC="*/tok/test.de.partial"))
    assert_one_error_line(full, f"no space left on the device to write {work / 'tok' / 'test.de'}",
                          "free some space and run the same command again")
    assert partial_files(work) == [] and not (work / "tok" / "test.de").exists()
    again = recipe(work)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
    assert again.stdout.count("done already, skipping") == 8  # the tokens came out the same: nothing else reran
    assert (work / "tok" / "test.de").read_bytes() == (smoke_run / "tok" / "test.de").read_bytes()


# --------------------------------------------------------------------------- bad checkpoints
def generate(data_bin, path):
    """fairseq-generate forked from the worker's preloaded interpreter (conftest.command): its output and exit
    status are the fresh command's (tests/test_fairseq_forks.py), ~3 s of CPU sooner."""
    return command([cli("fairseq-generate"), data_bin, "--user-dir", USER_DIR, "--path", path, "--cpu",
                    "--beam", "2", "--required-batch-size-multiple", "1"], env(), timeout=300, fork=True)


def test_generate_with_a_missing_checkpoint(data_bin, tmp_path):
    proc = generate(data_bin, tmp_path / "missing.pt")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"error: checkpoint not found: {tmp_path / 'missing.pt'} (--path)"


def test_generate_with_a_checkpoint_for_another_dictionary(data_bin, smoke_run):
    """The smoke run's model (its dictionary: hundreds of symbols) on the tiny test data (30 words)."""
    proc = generate(data_bin, smoke_run / "checkpoint_avg.pt")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: {smoke_run / 'checkpoint_avg.pt'} does not fit this data and model: ")
    shapes = re.search(r"embed_tokens\.weight is \[(\d+), 64\] in the checkpoint but \[(\d+), 64\] here", line)
    assert shapes and shapes.group(1) != shapes.group(2), line  # the two vocabulary sizes
    assert "another dictionary" in line


@pytest.mark.parametrize("kind,reason", [
    ("empty", "is empty (0 bytes)"),
    ("random", "is not a PyTorch checkpoint: it begins with b'\\x00\\x01"),
    ("truncated", "is truncated: not a complete zip archive"),
])
def test_a_file_that_is_not_a_checkpoint_says_what_it_is(plugin_run, tmp_path, kind, reason):
    """Through fairseq's own loader (patched by the plugin: fairseq-generate, -train and
    -interactive load with it): random bytes are not reported as a refused pickle."""
    import attn_plugin  # noqa: F401  (installs the patches)
    from fairseq import checkpoint_utils

    from attn_plugin.errors import CheckpointError

    real = (plugin_run[0] / "checkpoint_last.pt").read_bytes()
    bad = tmp_path / "bad.pt"
    bad.write_bytes({"empty": b"", "random": bytes(range(256)) * 8, "truncated": real[:len(real) // 2]}[kind])
    with pytest.raises(CheckpointError) as info:
        checkpoint_utils.load_checkpoint_to_cpu(str(bad))
    assert str(info.value).startswith(f"{bad} {reason}") and "could run code" not in str(info.value)


@pytest.fixture
def two_checkpoints(plugin_run, tmp_path):
    """A real checkpoint's state (the tiny plugin model of conftest) and an empty folder."""
    save, _ = plugin_run
    return torch.load(save / "checkpoint_last.pt", weights_only=True), tmp_path


def average(*argv):
    checkpoints.main([str(a) for a in argv])


@pytest.mark.parametrize("change,message", [
    ("shape", "hold models of different shapes (encoder.embed.embed_tokens.weight: [3, 64] vs "),
    ("non-tensor", "model entry 'encoder.version' is a str, not a tensor"),
    ("keys", "hold different parameters"),
])
def test_averaging_checks_every_input_before_writing(two_checkpoints, change, message):
    state, tmp = two_checkpoints
    torch.save(state, tmp / "a.pt")
    other = dict(state, model=dict(state["model"]))
    if change == "shape":
        other["model"]["encoder.embed.embed_tokens.weight"] = torch.zeros(3, 64)
    elif change == "non-tensor":
        other["model"]["encoder.version"] = "2"
    else:
        del other["model"][next(iter(other["model"]))]
    torch.save(other, tmp / "b.pt")
    with pytest.raises(UserError) as info:
        average("--inputs", tmp / "a.pt", tmp / "b.pt", "--output", tmp / "avg.pt")
    assert message in str(info.value)
    assert sorted(p.name for p in tmp.iterdir()) == ["a.pt", "b.pt"]  # nothing written, no temporary file


@pytest.mark.parametrize("argv,usage,message", [
    (["--num-update-checkpoints", "0"], True, "argument --num-update-checkpoints: 0 is not >= 1"),
    (["--num-update-checkpoints", "-1"], True, "argument --num-update-checkpoints: -1 is not >= 1"),
    (["--output", "{tmp}"], True, "is a folder; give a file path"),
    (["--output", "{tmp}/a.pt/avg.pt"], True, "a.pt is a file, not a folder"),
    (["--output", "{tmp}/a.pt"], True, "a.pt is {tmp}/a.pt, which this command reads"),
    (["--output", "{tmp}/b.pt"], True, "the file exists; pass --force to replace it"),
])
def test_averaging_refuses_a_bad_command_line_before_reading(two_checkpoints, argv, usage, message):
    state, tmp = two_checkpoints
    torch.save(state, tmp / "a.pt")
    if "{tmp}/b.pt" in argv:  # an existing file that is not an input
        torch.save(state, tmp / "b.pt")
    argv, message = [a.format(tmp=tmp) for a in argv], message.format(tmp=tmp)
    base = ["--inputs", str(tmp if "--num-update-checkpoints" in argv else tmp / "a.pt")]
    if "--output" not in argv:
        base += ["--output", str(tmp / "avg.pt")]
    with pytest.raises(UsageError if usage else UserError) as info:
        average(*base, *argv)
    assert message in str(info.value)
    assert sorted(p.name for p in tmp.iterdir()) == ["a.pt", *(["b.pt"] if "b.pt" in str(argv) else [])]


def test_averaging_or_fewer_takes_every_checkpoint_there_is_and_none_is_one_line(plugin_run, tmp_path, capsys):
    """The recipes' average stage (--or-fewer): the last N update checkpoints, all there are when fewer
    exist (plugin_run kept updates 10, 20, 30, 40), saying so; none at all is the error its run reports."""
    save, _ = plugin_run
    average("--inputs", save, "--num-update-checkpoints", "50", "--or-fewer", "--output", tmp_path / "avg.pt",
            "--info-json", tmp_path / "avg.json")
    assert "only 4 update checkpoints; averaging those" in capsys.readouterr().out
    assert json.loads((tmp_path / "avg.json").read_text())["updates"] == [10, 20, 30, 40]
    with pytest.raises(UserError, match="found 4 update checkpoints in .*, need 50"):  # without it: refused
        average("--inputs", save, "--num-update-checkpoints", "50", "--output", tmp_path / "other.pt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"no update checkpoints in .*empty; did training run long enough\?"):
        average("--inputs", tmp_path / "empty", "--num-update-checkpoints", "5", "--or-fewer",
                "--output", tmp_path / "none.pt")
    assert not (tmp_path / "other.pt").exists() and not (tmp_path / "none.pt").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere: no folder is unwritable to it")
def test_averaging_into_an_unwritable_folder_is_refused_before_reading(two_checkpoints):
    state, tmp = two_checkpoints
    torch.save(state, tmp / "a.pt")
    (tmp / "ro").mkdir(mode=0o500)
    with pytest.raises(UserError, match=r"(?i)--output .*ro/avg.pt: cannot write in .*ro \(permission denied\)"):
        average("--inputs", tmp / "a.pt", "--output", tmp / "ro" / "avg.pt")
    assert list((tmp / "ro").iterdir()) == []


def test_averaging_on_a_full_disk_is_one_line_and_leaves_nothing(plugin_run, tmp_path):
    """The command itself, with every write to the output failing (ENOSPC): one error line on
    stderr, nothing else there (no "Please install tensorboardX"), no file left."""
    save, _ = plugin_run
    out = tmp_path / "avg.pt"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "average_checkpoints.py"), "--inputs", save,
                           "--num-update-checkpoints", "2", "--output", out], capture_output=True, text=True,
                          env=env(PYTHONPATH=f"{ENOSPC_SHIM}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                                  ATTN_TEST_ENOSPC=f"{out}*"), timeout=300)
    assert_one_error_line(proc, f"no space left on the device to write {out}")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- the cases and README
def test_every_case_has_its_test_and_readme_lists_them():
    names = {name for name, value in globals().items() if name.startswith("test_") and callable(value)}
    for case in faults.CASES:  # a test of this file, or FILE::test of another file under tests/
        file, _, name = case.test.split("[")[0].rpartition("::")
        if file:
            assert f"def {name}(" in (REPO / file).read_text(encoding="utf-8"), case.test
        else:
            assert name in names, case.test
    from lab import readme_tables

    text = (readme_tables.DOCS / "faults.md").read_text(encoding="utf-8")
    assert readme_tables.faults() in text
