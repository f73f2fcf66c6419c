"""Prepare once, train many (issue 27, item 4): the WMT14 recipes' data stages live in
--data-workdir (by default wmt14_<pair>_data beside the work directory), shared by base, big
and Table 3; a folder prepared with other data options is refused; results.json and
inference.json name files relative to the run, so a run copied with its data folder works
where it lands and one copied without it is one error line, never a read of the old place."""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import conftest
from conftest import DATA_STAGES, REPO, SMOKE_RUN, assert_one_error_line, assert_same_results

from attn_kit.cli import UserError
from attn_kit.pipeline.lock import workdir_lock
from attn_kit.pipeline.stages import Pipeline, Stage
from attn_kit.recipes import table3, translation

RECIPE = [sys.executable, "-m", "attn_kit.recipes.translation"]
TRANSLATE = [sys.executable, str(REPO / "scripts" / "translate.py")]


def command(cmd, *args, timeout=900):
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)


def dry_run(main, *args):
    """A recipe's --dry-run through its main() in this process (conftest.run_main): what it prints is the
    check, and each recipe's process costs ~2 s of CPU (it imports torch); the recipes' processes run in
    the --smoke tests below and in their own test files."""
    return conftest.run_main(main, *args)


def stage_lines(out: str) -> dict:
    """{stage name: the lines a --dry-run printed for it (its log line and its commands)}."""
    stages, name = {}, None
    for line in out.splitlines():
        if "] stage " in line:
            name = line.split("] stage ", 1)[1].split(":")[0].split()[1]
            stages[name] = [line.split("] ", 1)[1]]
        elif name and line.startswith("  "):
            stages[name].append(line)
    return stages


# --------------------------------------------------------------------------------------------- --dry-run
def test_base_and_big_dry_runs_prepare_one_data_folder_and_train_in_their_own(tmp_path):
    runs = tmp_path / "runs"
    out = {}
    for arch, name in (("attn_paper_base", "base"), ("attn_paper_big", "big")):
        proc = dry_run(translation.main, "--pair", "en-de", "--dry-run", "--ngpus", "8", "--arch", arch,
                       "--workdir", runs / f"wmt14_en_de_{name}")
        assert proc.returncode == 0, proc.stderr
        out[name] = stage_lines(proc.stdout)
    data = runs / "wmt14_en_de_data"
    for stage in DATA_STAGES:  # the same commands, into the one shared folder
        assert out["base"][stage] == out["big"][stage], stage
        assert f"in {data})" in out["base"][stage][0]
        commands = "\n".join(out["base"][stage][1:])
        assert (str(data) in commands or stage == "extract") and "wmt14_en_de_b" not in commands
    for name in ("base", "big"):  # training, averaging and decoding in the run's own folder, on the shared data
        train = "\n".join(out[name]["train"])
        assert f"{data}/data-bin " in train and f"--save-dir {runs / f'wmt14_en_de_{name}'}/checkpoints" in train
        assert str(runs / f"wmt14_en_de_{name}" / "checkpoint_avg.pt") in "\n".join(out[name]["average"])
        assert str(runs / f"wmt14_en_de_{name}" / "inference.json") in "\n".join(out[name]["generate"])
    assert not runs.exists()  # a dry run creates nothing
    # Table 3's rows train on the same folder by default
    proc = dry_run(table3.main, "--dry-run", "--ngpus", "8", "--rows", "base", "--workdir", runs / "table3")
    assert proc.returncode == 0, proc.stderr
    assert f"--data-workdir {data} --stop-stage binarize" in proc.stdout
    assert f"{data}/data-bin " in proc.stdout and str(runs / "wmt14_en_de_base") not in proc.stdout


def test_bundled_and_smoke_keep_their_data_in_the_work_directory_unless_told(tmp_path):
    for mode in ("--bundled", "--smoke"):
        proc = dry_run(translation.main, mode, "--dry-run", "--workdir", tmp_path / "w")
        assert proc.returncode == 0, proc.stderr
        assert f"{tmp_path / 'w'}/data-bin" in proc.stdout and "_data" not in proc.stdout
        proc = dry_run(translation.main, mode, "--dry-run", "--workdir", tmp_path / "w", "--data-workdir",
                       tmp_path / "d")
        assert proc.returncode == 0, proc.stderr
        data = stage_lines(proc.stdout)["binarize"]
        assert f"in {tmp_path / 'd'})" in data[0] and f"--destdir {tmp_path / 'd'}/data-bin" in data[1]


# --------------------------------------------------------------------------------------------- the pipeline
def _stages(work: Path, data: Path, merges=10, calls=None, home=True):
    """A data stage in ``data`` (its own home) and a training stage in ``work`` that reads it."""
    calls = [] if calls is None else calls

    def prepare(ctx):
        calls.append("prepare")
        with ctx.output(data / "bin.txt") as tmp:
            ctx.step("prepare", tmp.write_text, f"merges {merges}")

    def train(ctx):
        calls.append("train")
        with ctx.output(work / "model.txt") as tmp:
            ctx.step("train", tmp.write_text, (data / "bin.txt").read_text())

    return [Stage("prepare", prepare, "the data", outputs=[data / "bin.txt"], options={"merges": merges},
                  home=data if home else None),
            Stage("train", train, "the model", inputs=[data / "bin.txt"], outputs=[work / "model.txt"])]


def test_a_shared_stage_runs_once_keeps_its_stamp_there_and_refuses_other_options(tmp_path, capsys):
    data, calls = tmp_path / "data", []
    Pipeline(tmp_path / "base", _stages(tmp_path / "base", data, calls=calls)).run()
    Pipeline(tmp_path / "big", _stages(tmp_path / "big", data, calls=calls)).run()
    assert calls == ["prepare", "train", "train"]  # prepared once, trained twice
    assert "stage 1/2 prepare: done already, skipping (in" in capsys.readouterr().out
    assert (data / ".stages" / "prepare.done").is_file() and not (tmp_path / "base" / ".stages" / "prepare.done").exists()
    stamp = json.loads((tmp_path / "big" / ".stages" / "train.done").read_text())
    assert list(stamp["inputs"]) == ["../data/bin.txt"]  # relative: a copy of both folders compares equal
    with pytest.raises(UserError) as caught:  # another run's data under the first two: refused, untouched
        Pipeline(tmp_path / "other", _stages(tmp_path / "other", data, merges=20, calls=calls)).run()
    message = str(caught.value)
    assert "--data-workdir" in message and "option merges changed (10 -> 20)" in message and str(data) in message
    assert (data / "bin.txt").read_text() == "merges 10" and not (data / "stale").exists()
    assert calls == ["prepare", "train", "train"]


def test_a_run_copied_with_its_data_folder_is_done_and_one_on_other_data_trains_again(tmp_path):
    calls = []
    Pipeline(tmp_path / "a" / "run", _stages(tmp_path / "a" / "run", tmp_path / "a" / "data", calls=calls)).run()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    Pipeline(tmp_path / "b" / "run", _stages(tmp_path / "b" / "run", tmp_path / "b" / "data", calls=calls)).run()
    assert calls == ["prepare", "train"]  # the copy: nothing to do
    # the run pointed at another data folder holding other data: it trains again, saying why
    Pipeline(tmp_path / "c", _stages(tmp_path / "c", tmp_path / "c", merges=30, calls=calls, home=False)).run()
    calls.clear()
    Pipeline(tmp_path / "b" / "run", _stages(tmp_path / "b" / "run", tmp_path / "c", merges=30, calls=calls)).run()
    assert calls == ["train"]
    assert (tmp_path / "b" / "run" / "model.txt").read_text() == "merges 30"


def test_a_second_run_waits_for_the_one_preparing_the_data(tmp_path, capsys):
    data = tmp_path / "data"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from attn_kit.pipeline.lock import workdir_lock\n"
        f"with workdir_lock({str(data)!r}):\n    print('held', flush=True); time.sleep(3)")],
        stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert holder.stdout.readline().strip() == "held"
    start = time.time()
    Pipeline(tmp_path / "run", _stages(tmp_path / "run", data)).run()
    assert time.time() - start > 1  # it waited for the lock instead of failing or preparing beside it
    assert holder.wait(timeout=30) == 0
    out = capsys.readouterr().out
    assert "is in use by another run" in out and "waiting for it to finish" in out
    with workdir_lock(data):  # released after the data stages
        pass


# --------------------------------------------------------------------------------------------- the readers
def _scored_run(root: Path, absolute=False) -> Path:
    """A run (root/run) scored on data in root/data, as write_results names its files."""
    run, data = root / "run", root / "data"
    for path in (data / "raw" / "test.en", data / "raw" / "test.de", run / "gen" / "test.detok.de"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("a\n", encoding="utf-8")
    (data / ".stages").mkdir()
    name = (lambda p: str(root / p)) if absolute else (lambda p: os.path.relpath(root / p, run))
    results = {"test_source": name("data/raw/test.en"), "test_output": name("run/gen/test.detok.de"),
               "test_reference": name("data/raw/test.de")}
    if not absolute:
        results["data_workdir"] = "../data"
    (run / "results.json").write_text(json.dumps(results))
    return run


def test_results_name_files_relative_to_the_run_and_a_copy_reads_only_itself(tmp_path):
    from attn_plugin.errors import ConfigError
    from attn_plugin.run_cards import read_results

    run = _scored_run(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    r = read_results(tmp_path / "b" / "run")
    assert r["test_source"] == str(tmp_path / "b" / "data" / "raw" / "test.en")
    assert r["test_output"] == str(tmp_path / "b" / "run" / "gen" / "test.detok.de")
    shutil.rmtree(tmp_path / "b" / "data")  # copied without its data folder: one line, the old one is not read
    with pytest.raises(ConfigError) as caught:
        read_results(tmp_path / "b" / "run")
    line = str(caught.value)
    assert str(tmp_path / "b" / "run" / "results.json") in line and "'data_workdir'" in line
    assert str(tmp_path / "b" / "data") in line and "does not exist" in line and "\n" not in line
    # a data_workdir that is not a prepared data folder, a file outside both folders: refused
    shutil.rmtree(run.parent / "data" / ".stages")
    with pytest.raises(ConfigError, match="no .stages"):
        read_results(run)
    (run.parent / "data" / ".stages").mkdir()
    results = json.loads((run / "results.json").read_text())
    (run / "results.json").write_text(json.dumps({**results, "test_reference": "../../elsewhere.de"}))
    (tmp_path / "elsewhere.de").write_text("a\n")
    with pytest.raises(ConfigError, match="'test_reference' points outside"):
        read_results(run)


def test_an_older_results_file_with_absolute_paths_is_read_in_place_and_refused_when_moved(tmp_path):
    from attn_plugin.errors import ConfigError
    from attn_plugin.run_cards import read_results

    (tmp_path / "a").mkdir()
    run = _scored_run(tmp_path / "a", absolute=True)
    (tmp_path / "a" / "data").rename(run / "data")  # the single-folder layout: the data in the run
    results = json.loads((run / "results.json").read_text())
    for key in ("test_source", "test_reference"):
        results[key] = results[key].replace(str(tmp_path / "a" / "data"), str(run / "data"))
    (run / "results.json").write_text(json.dumps(results))
    assert read_results(run)["test_source"] == str(run / "data" / "raw" / "test.en")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    with pytest.raises(ConfigError, match="points outside"):  # never the original's files
        read_results(tmp_path / "b" / "run")


# --------------------------------------------------------------------------------------------- --smoke runs
@pytest.mark.slow
def test_two_smoke_runs_share_one_data_folder_and_a_copied_run_translates(tmp_path, smoke_run):
    runs, data = tmp_path / "runs", tmp_path / "runs" / "data"
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    # at once: one prepares the data, the other waits for it; b stops there (what it would train, a trains: the
    # suite's time)
    procs = [subprocess.Popen([*RECIPE, *SMOKE_RUN, "--workdir", str(runs / name), "--data-workdir", str(data), *stop],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for name, stop in (("a", []), ("b", ["--stop-stage", "binarize"]))]
    outs = [p.communicate(timeout=1200) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out[-3000:] + err[-2000:]
    logs = [out for out, _ in outs]
    for i, stage in enumerate(DATA_STAGES, 1):
        ran = [log for log in logs if f"stage {i}/9 {stage}: finished in" in log]
        skipped = [log for log in logs if f"stage {i}/9 {stage}: done already, skipping (in {data})" in log]
        assert len(ran) == 1 and len(skipped) == 1, stage
    assert "stage 6/9 train: fairseq-train" in logs[0] and "updates, " in logs[0]  # training shows its progress
    assert "stage 6/9" not in logs[1] and not (runs / "b" / "checkpoints").exists()
    # the same data, seed and command as the single-folder smoke run: the same numbers, translations and
    # averaged model, bit for bit (the recipe's "same command, same numbers": a fresh run here)
    r, single = (json.loads((w / "results.json").read_text()) for w in (runs / "a", smoke_run))
    assert_same_results(runs / "a", smoke_run)
    assert r["vocabulary"] == single["vocabulary"]
    assert r["data_workdir"] == "../data" and r["test_source"] == "../data/raw/test.en"
    assert r["test_output"] == "gen/test.detok.de" and r["checkpoint"] == "checkpoint_avg.pt"
    assert r["averaged_checkpoints"] == ["checkpoints/checkpoint_1_20.pt", "checkpoints/checkpoint_last.pt"]
    card = json.loads((runs / "a" / "inference.json").read_text())
    assert (card["data_workdir"], card["data"], card["args"]["bpe_codes"]) == ("../data", "../data/data-bin",
                                                                               "../data/bpe/codes")
    # other data options on the shared folder: one line, before anything of it changes
    before = {p: p.stat().st_mtime_ns for p in data.rglob("*") if p.is_file() and ".lock" not in p.name}
    other = command(RECIPE, *SMOKE_RUN, "--bpe-merges", "123", "--workdir", runs / "c", "--data-workdir", data)
    line = assert_one_error_line(other, f"--data-workdir {data}", "bpe_merges", "other runs may use it")
    assert "remove" in line and not (runs / "c" / "checkpoints").exists()
    assert {p: p.stat().st_mtime_ns for p in data.rglob("*") if p.is_file() and ".lock" not in p.name} == before
    # the run and its data folder copied elsewhere, the originals moved away: the copy translates its test set
    # as the recipe did, reading only the copy
    copy = tmp_path / "elsewhere" / "runs"
    shutil.copytree(runs, copy, ignore=shutil.ignore_patterns("checkpoints", "downloads", "orig", "mirror*", "c"))
    runs.rename(tmp_path / "moved-away")
    check = conftest.command([*TRANSLATE, copy / "a", "--check-test-set", "--quiet"], conftest.run_env(), fork=True)
    assert check.returncode == 0, check.stderr
    report = json.loads(check.stdout.strip().splitlines()[-1])
    assert report["test_source"] == str(copy / "data" / "raw" / "test.en")
    assert report["sentences"] == 200 and report["identical_lines"] >= 198
    assert abs(report["sacrebleu_translate"] - report["sacrebleu_recipe"]) <= 0.1
    # and without its data folder: one line naming the card, the key and the missing folder
    shutil.rmtree(copy / "data")
    gone = conftest.command([*TRANSLATE, copy / "a", "--check-test-set"], conftest.run_env(), fork=True)
    assert_one_error_line(gone, str(copy / "a" / "inference.json"), "'data_workdir'", str(copy / "data"),
                          "does not exist")
    assert str(tmp_path / "runs") not in gone.stderr


def test_another_recipes_data_folder_is_refused_in_one_line(tmp_path, smoke_run):
    """Issue 36: recipes/parallel.sh given a folder that wmt14_en_de.sh --smoke prepared found every
    data stage done (its copy stage skipped the raw files there) and would have trained and scored on
    the WMT text, exit 0. Now one line names the folder and both recipes' stages, before anything
    runs or is written there; the dry run says the same."""
    from conftest import assert_one_error_line, run_main

    from attn_kit.recipes import parallel

    corpus = tmp_path / "c"
    corpus.mkdir()
    for split in ("train", "valid", "test"):
        (corpus / f"{split}.en").write_text("a b\nc d\n")
        (corpus / f"{split}.de").write_text("x y\nz w\n")
    before = sorted((p.relative_to(smoke_run), p.stat().st_mtime_ns) for p in smoke_run.rglob("*"))
    for dry in ([], ["--dry-run"]):
        proc = run_main(parallel.main, "--src", "en", "--tgt", "de", *(x for s in ("train", "valid", "test")
                                                                       for x in (f"--{s}", corpus / s)),
                        "--data-workdir", smoke_run, "--workdir", tmp_path / "w", "--ngpus", "0", *dry)
        assert_one_error_line(proc, f"--data-workdir {smoke_run} holds data another recipe or corpus prepared",
                              "download, extract", "check, copy")
    assert sorted((p.relative_to(smoke_run), p.stat().st_mtime_ns) for p in smoke_run.rglob("*")) == before
