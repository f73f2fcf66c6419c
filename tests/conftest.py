"""Shared fixtures: a tiny synthetic parallel corpus binarized with the real
fairseq-preprocess, and small models trained with the real fairseq-train, each made once per
test run (shared by pytest-xdist's workers); and the two tiers, quick and slow."""
import fcntl
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from attn_kit.planning.sizes import SIZES
from lab import fairseq_forks

# One thread per process unless told otherwise (before torch is imported here or in any command a test
# starts): scripts/test.sh runs one pytest worker per core, and torch's threads, one per core by default,
# spin against each other and the other worker. A test of a thread setting passes its own.
for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

REPO = Path(__file__).resolve().parents[1]
USER_DIR = str(REPO / "attn_plugin")
BIN = Path(sys.executable).parent
SHARED = REPO.parent / "shared"


def cli(name):
    """Path of a console script (fairseq-train, ...) of the running environment."""
    path = BIN / name
    return str(path) if path.exists() else shutil.which(name)


def run_env():
    return dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")


_FORKS = {}


def forks(env) -> fairseq_forks.ForkedCommands:
    """This worker's runner of fairseq commands (lab.fairseq_forks) for ``env``'s start-up
    variables (:func:`run_env`'s or the test process's), started when first used."""
    key = tuple(sorted(fairseq_forks.startup(env).items()))
    if key not in _FORKS:
        _FORKS[key] = fairseq_forks.ForkedCommands(env=env)
    return _FORKS[key]


def pytest_sessionfinish(session):
    for runner in _FORKS.values():
        runner.close()


def command(cmd, env, cwd=None, timeout=600, input_text=None, fork=False):
    """``cmd`` run to its end in the environment ``env`` with ``input_text`` (text or bytes) on its stdin:
    a CompletedProcess of its exit status and text output. ``fork``: forked from this worker's interpreter
    that preloaded what fairseq imports (:func:`forks`), which starts a fairseq command, or a script that
    imports fairseq, as a process of its own would, seconds sooner; for a command whose imports are not what
    the test checks. Another start-up environment than :func:`run_env`'s or the test process's: a process."""
    cmd = [str(c) for c in cmd]
    common = [fairseq_forks.startup(e) for e in (run_env(), os.environ)]  # a runner for another is not worth it
    if not (fork and fairseq_forks.ForkedCommands.job(cmd) and fairseq_forks.startup(env) in common):
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=timeout,
                              input=input_text.encode() if isinstance(input_text, str) else input_text)
        return subprocess.CompletedProcess(cmd, proc.returncode, proc.stdout.decode(), proc.stderr.decode())
    with tempfile.TemporaryDirectory(prefix="forked-") as folder:
        stdin, stdout, stderr = (Path(folder) / name for name in ("stdin", "stdout", "stderr"))
        if input_text is not None:
            stdin.write_bytes(input_text if isinstance(input_text, bytes) else input_text.encode())
        rc = forks(env).run(cmd, stdout, stderr, stdin=stdin if input_text is not None else None, env=env, cwd=cwd,
                            timeout=timeout)
        return subprocess.CompletedProcess(cmd, rc, stdout.read_text(), stderr.read_text())


def run(cmd, cwd=None, check=True, timeout=600, input_text=None, fork=None, env=None):
    """:func:`command` in :func:`run_env` plus ``env``; a fairseq command is forked unless ``fork=False``.
    ``check``: a non-zero exit fails the test, with the command's output."""
    fork = Path(str(cmd[0])).name in fairseq_forks.FAIRSEQ_COMMANDS if fork is None else fork
    proc = command(cmd, {**run_env(), **(env or {})}, cwd, timeout, input_text, fork)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd[0]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def assert_one_error_line(proc, *fragments):
    """Non-zero exit, exactly one line on stderr starting with 'error: ', no traceback anywhere."""
    assert proc.returncode != 0
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def run_main(main, *argv, stdin=b""):
    """``main_guard(main, ARGV)`` in this process, as a script runs it, with ``stdin`` (text or bytes):
    a CompletedProcess of its exit status, stdout and stderr (warnings shown as a fresh interpreter
    shows them). For a command's other bad inputs once a real subprocess test checks its process-level
    contract (assert_one_error_line on the script): no fairseq import of ~3.5 s CPU each. main_guard's
    signal handlers, sys.unraisablehook and stdin are restored after."""
    import contextlib
    import io
    import warnings

    from attn_kit import cli as kit_cli

    saved = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), sys.unraisablehook, sys.stdin,
             list(kit_cli._GUARDED), list(kit_cli._SIGNALLED))
    out, err, status = io.StringIO(), io.StringIO(), 0
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode() if isinstance(stdin, str) else stdin))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()  # what a new interpreter shows
            warnings.simplefilter("default")
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)
            try:
                kit_cli.main_guard(main, [str(a) for a in argv])
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        for w in caught:
            err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line))
    finally:
        signal.signal(signal.SIGINT, saved[0])
        signal.signal(signal.SIGTERM, saved[1])
        sys.unraisablehook, sys.stdin = saved[2], saved[3]
        kit_cli._GUARDED[:], kit_cli._SIGNALLED[:] = saved[4], saved[5]
    return subprocess.CompletedProcess([getattr(main, "__module__", "main"), *map(str, argv)], status,
                                       out.getvalue(), err.getvalue())


def last_line(proc):
    """The last line a failed command printed on stderr (fairseq logs to stdout)."""
    lines = [line for line in (proc.stderr or proc.stdout).strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


# The two tiers. slow: a test that trains a model (or times one), decodes with a trained one or runs a
# recipe's stages for real, i.e. uses one of SLOW_FIXTURES (directly or through another fixture) or is
# marked pytest.mark.slow;
# quick: every other test (bash scripts/test.sh --quick, i.e. pytest -m quick). Each test gets one of
# the two marks at collection, so a new test is in the right tier by the fixtures it uses.
SLOW_FIXTURES = {"plugin_run", "smoke_run", "stock_checkpoint", "smoke", "smoke_tune"}  # smoke*: WSJ runs


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: trains or times a model, decodes with a trained one or runs a recipe's "
                                       "stages for real (set by conftest on the tests that use " + ", ".join(
                                           sorted(SLOW_FIXTURES)) + ")")
    config.addinivalue_line("markers", "quick: every test that is not slow (set by conftest): pytest -m quick")
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist >= 3.7 would order the files by test count
        config.option.loadscopereorder = False
    # pytest-xdist's workers ignore SIGINT and a child inherits an ignored signal, so the recipes the
    # fault tests interrupt would never see their Ctrl-C: the workers catch it again, as a shell's child does
    signal.signal(signal.SIGINT, signal.default_int_handler)


# The files that take longest (recipes run end to end, several times) run first, longest first, so that
# pytest-xdist's workers (whole files each, in this order) do not end on one of them while the others are idle.
# The order is the per-file sum of `bash scripts/test.sh --durations=80` on the 2-core AMD EPYC (a file over
# about 15 s belongs here: one left to run last, alphabetically, was the suite's idle tail).
LONGEST_FIRST = ("test_faults.py", "test_recipe_wsj.py", "test_recipe_wmt14.py", "test_table3.py", "test_step_model.py",
                 "test_canary.py", "test_compare_baselines.py", "test_data_workdir.py", "test_slurm.py",
                 "test_export_hf.py", "test_decode_rules.py", "test_translate.py", "test_data_parallel.py",
                 "test_sync_free_step.py", "test_corpus_source.py", "test_model.py", "test_registration.py",
                 "test_ctranslate2.py", "test_pipeline.py", "test_interval_checkpoints.py", "test_devices.py",
                 "test_checkpoint.py")


@pytest.hookimpl(tryfirst=True)  # before pytest's -m selection reads the marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        slow = item.get_closest_marker("slow") or SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))
        item.add_marker(pytest.mark.slow if slow else pytest.mark.quick)
    missing = [name for name in LONGEST_FIRST if not (Path(__file__).parent / name).is_file()]
    if missing:  # a renamed file would silently run last again
        raise pytest.UsageError(f"tests/conftest.py LONGEST_FIRST names no such file: {', '.join(missing)}")
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's tests keep their order


def made_once(tmp_path_factory, name, make):
    """The folder ``name`` made by ``make(folder)`` once per test run: the first pytest-xdist worker
    to ask makes it under a lock, the others wait for it and share it (none may change it)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above every worker's own
    folder, done = root / "made_once" / name, root / "made_once" / f"{name}.done"
    folder.parent.mkdir(exist_ok=True)
    with open(root / "made_once" / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes (or its worker dies)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a worker that failed to make it left
            folder.mkdir()
            make(folder)
            done.touch()
    return folder


# Small model flags on top of --arch attn_paper_base (or a stock fairseq arch).
TINY_MODEL = SIZES["tiny"].flags()


def make_data_bin(root):
    """Reverse-the-sentence task over 30 words, binarized with a joined dictionary (root/bin)."""
    rng = random.Random(0)
    words = [f"w{i}" for i in range(30)]
    for split, n in [("train", 600), ("valid", 40), ("test", 21)]:
        with open(root / f"{split}.src", "w") as fs, open(root / f"{split}.tgt", "w") as ft:
            for _ in range(n):
                s = [rng.choice(words) for _ in range(rng.randint(3, 9))]
                fs.write(" ".join(s) + "\n")
                ft.write(" ".join(reversed(s)) + "\n")
    run([cli("fairseq-preprocess"), "--source-lang", "src", "--target-lang", "tgt",
         "--trainpref", root / "train", "--validpref", root / "valid", "--testpref", root / "test",
         "--destdir", root / "bin", "--joined-dictionary", "--workers", "1"])


@pytest.fixture(scope="session")
def data_bin(tmp_path_factory):
    return made_once(tmp_path_factory, "tiny", make_data_bin) / "bin"


def train_cmd(data, save_dir, arch_flags, extra=()):
    return [cli("fairseq-train"), data, *arch_flags, *TINY_MODEL, "--optimizer", "adam",
            "--adam-betas", "(0.9, 0.98)", "--adam-eps", "1e-9", "--max-tokens", "400", "--cpu",
            "--seed", "1", "--no-progress-bar", "--log-format", "simple", "--log-interval", "5",
            "--save-dir", save_dir, *extra]


@pytest.fixture(scope="session")
def plugin_run(data_bin, tmp_path_factory):
    """fairseq-train --user-dir attn_plugin --arch attn_paper_base, 40 updates: (save dir, its log)."""
    def make(folder):
        proc = run(train_cmd(data_bin, folder / "plugin_ckpt", ["--user-dir", USER_DIR, "--arch", "attn_paper_base"],
                             ["--lr", "1", "--lr-scheduler", "attn_inverse_sqrt", "--warmup-updates", "20",
                              "--lr-scale", "2", "--criterion", "attn_label_smoothed_cross_entropy",
                              "--max-update", "40", "--save-interval-updates", "10", "--no-epoch-checkpoints"]))
        (folder / "train.log").write_text(proc.stdout + proc.stderr)

    folder = made_once(tmp_path_factory, "plugin_run", make)
    return folder / "plugin_ckpt", (folder / "train.log").read_text()


# A --smoke run of the WMT14 recipe small enough to repeat: 25 updates, checkpoints at 10 and 20, and the
# average of the last 2 (checkpoint_1_20.pt and the final checkpoint_last.pt).
SMOKE_RUN = ["--pair", "en-de", "--smoke", "--max-update", "25", "--save-interval-updates", "10", "--average", "2"]
RECIPE = [sys.executable, "-m", "attn_kit.recipes.translation"]


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """A finished run of the WMT14 recipe with SMOKE_RUN, shared by the tests that compare with
    it or copy it (tests/test_recipe_wmt14.py, tests/test_faults.py, ...); none may change it."""
    return made_once(tmp_path_factory, "smoke_run",
                     lambda folder: run([*RECIPE, *SMOKE_RUN, "--workdir", folder / "w"], timeout=900)) / "w"


# The WMT14 recipe's data stages and the folders they write in a work directory.
DATA_STAGES = ("download", "extract", "tokenize", "bpe", "binarize")
DATA_FOLDERS = ("downloads", "orig", "raw", "tok", "bpe", "prep", "data-bin")


def assert_same_results(work: Path, reference: Path):
    """The run in ``work`` ended as the reference run did: the same scores, the same
    translations, and the same averaged model, bit for bit."""
    import torch

    a, b = (json.loads((w / "results.json").read_text()) for w in (reference, work))
    for key in ("bleu_t2t", "sacrebleu", "bleu_tokenized", "bleu_compound_split", "updates", "averaged_updates"):
        assert a[key] == b[key], key
    assert (work / "gen" / "test.out").read_bytes() == (reference / "gen" / "test.out").read_bytes()
    ma, mb = (torch.load(w / "checkpoint_avg.pt", weights_only=True)["model"] for w in (reference, work))
    assert ma.keys() == mb.keys() and all(torch.equal(ma[k], mb[k]) for k in ma)


def copy_prepared(work: Path, dst: Path) -> Path:
    """A new work directory holding the finished data stages of ``work`` (their folders and stamps)
    and nothing else: a run in it skips download..binarize and starts at training."""
    for folder in DATA_FOLDERS:
        shutil.copytree(work / folder, dst / folder)
    (dst / ".stages").mkdir()
    for stage in DATA_STAGES:
        shutil.copy(work / ".stages" / f"{stage}.done", dst / ".stages")
    return dst


@pytest.fixture(scope="session")
def stock_checkpoint(data_bin, tmp_path_factory):
    """A checkpoint of stock fairseq's transformer, trained with stock fairseq-train."""
    def make(folder):
        run(train_cmd(data_bin, folder, ["--arch", "transformer", "--share-all-embeddings"],
                      ["--lr", "0.001", "--criterion", "label_smoothed_cross_entropy", "--max-update", "10"]))

    return made_once(tmp_path_factory, "stock_ckpt", make) / "checkpoint_last.pt"
