"""Shared fixtures: a tiny synthetic parallel corpus binarized with the real
fairseq-preprocess, and small models trained with the real fairseq-train."""
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from attn_kit.sizes import SIZES

REPO = Path(__file__).resolve().parents[1]
USER_DIR = str(REPO / "attn_plugin")
BIN = Path(sys.executable).parent
SHARED = REPO.parent / "shared"



def cli(name):
    """Path of a console script (fairseq-train, ...) of the running environment."""
    path = BIN / name
    return str(path) if path.exists() else shutil.which(name)


def run(cmd, cwd=None, check=True, timeout=600, input_text=None):
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, input=input_text)
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


def last_line(proc):
    """The last line a failed command printed on stderr (fairseq logs to stdout)."""
    lines = [line for line in (proc.stderr or proc.stdout).strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


# The quick tier (bash scripts/test.sh --quick): every test but those that train or decode with a
# trained model, i.e. that use one of these fixtures or are marked slow (pytest.mark.slow).
SLOW_FIXTURES = {"plugin_run", "smoke_run", "stock_checkpoint", "smoke", "smoke_tune"}  # smoke*: WSJ runs


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true",
                     help="the quick tier: leave out the tests that train models (fixtures " + ", ".join(
                         sorted(SLOW_FIXTURES)) + ", or marked slow)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: trains a model (left out by --quick)")
    # pytest-xdist's workers ignore SIGINT and a child inherits an ignored signal, so the recipes the
    # fault tests interrupt would never see their Ctrl-C: the workers catch it again, as a shell's child does
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--quick"):
        return
    slow = [item for item in items
            if item.get_closest_marker("slow") or SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item not in slow]


# Small model flags on top of --arch attn_paper_base (or a stock fairseq arch).
TINY_MODEL = SIZES["tiny"].flags()


@pytest.fixture(scope="session")
def data_bin(tmp_path_factory):
    """Reverse-the-sentence task over 30 words, binarized with a joined dictionary."""
    root = tmp_path_factory.mktemp("tiny")
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
    return root / "bin"


def train_cmd(data, save_dir, arch_flags, extra=()):
    return [cli("fairseq-train"), data, *arch_flags, *TINY_MODEL, "--optimizer", "adam",
            "--adam-betas", "(0.9, 0.98)", "--adam-eps", "1e-9", "--max-tokens", "400", "--cpu",
            "--seed", "1", "--no-progress-bar", "--log-format", "simple", "--log-interval", "5",
            "--save-dir", save_dir, *extra]


@pytest.fixture(scope="session")
def plugin_run(data_bin, tmp_path_factory):
    """fairseq-train --user-dir attn_plugin --arch attn_paper_base, 40 updates."""
    save = tmp_path_factory.mktemp("plugin_ckpt")
    proc = run(train_cmd(data_bin, save, ["--user-dir", USER_DIR, "--arch", "attn_paper_base"],
                         ["--lr", "1", "--lr-scheduler", "attn_inverse_sqrt", "--warmup-updates", "20",
                          "--lr-scale", "2", "--criterion", "attn_label_smoothed_cross_entropy",
                          "--max-update", "40", "--save-interval-updates", "10", "--no-epoch-checkpoints"]))
    return save, proc.stdout + proc.stderr


# A --smoke run of the WMT14 recipe small enough to repeat: 25 updates, checkpoints at 10 and 20, and the
# average of the last 2 (checkpoint_1_20.pt and the final checkpoint_last.pt).
SMOKE_RUN = ["--pair", "en-de", "--smoke", "--max-update", "25", "--save-interval-updates", "10", "--average", "2"]
RECIPE = [sys.executable, "-m", "attn_kit.recipes.wmt14"]


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """A finished run of the WMT14 recipe with SMOKE_RUN, shared by the tests that compare with
    it or copy it (tests/test_recipe_wmt14.py, tests/test_faults.py); none may change it."""
    work = tmp_path_factory.mktemp("smoke_run") / "w"
    run([*RECIPE, *SMOKE_RUN, "--workdir", work], timeout=900)
    return work


@pytest.fixture(scope="session")
def stock_checkpoint(data_bin, tmp_path_factory):
    """A checkpoint of stock fairseq's transformer, trained with stock fairseq-train."""
    save = tmp_path_factory.mktemp("stock_ckpt")
    run(train_cmd(data_bin, save, ["--arch", "transformer", "--share-all-embeddings"],
                  ["--lr", "0.001", "--criterion", "label_smoothed_cross_entropy", "--max-update", "10"]))
    return save / "checkpoint_last.pt"
