"""Every interval checkpoint kept (attn_plugin patch 7), so that "the last N checkpoints" are the
last N multiples of --save-interval-updates (Sec. 6.1's checkpoints at equal intervals), also
where an interval update ends an epoch, which fairseq alone does not keep."""
import re
import shutil
import sys
from pathlib import Path

import pytest
from conftest import REPO, USER_DIR, assert_one_error_line, run, train_cmd

from attn_kit.fairseq_layer import checkpoints
from attn_kit.cli import UserError

pytestmark = pytest.mark.slow  # trains models (left out by scripts/test.sh --quick)

# At --max-tokens 2000 the tiny corpus is a few updates per epoch, so epochs end on interval updates.
TRAIN = ["--user-dir", USER_DIR, "--arch", "attn_paper_base"]


def train(data_bin, save_dir, *extra):
    cmd = train_cmd(data_bin, save_dir, TRAIN, ["--lr", "0.001", "--no-epoch-checkpoints", "--disable-validation",
                                                *extra])
    cmd[cmd.index("--max-tokens") + 1] = "2000"
    Path(save_dir).mkdir(parents=True, exist_ok=True)
    proc = run(cmd)  # forked from the worker's preloaded interpreter (conftest.run)
    (Path(save_dir) / "train.log").write_text(proc.stdout + proc.stderr)
    return proc.stdout + proc.stderr


def epoch_ends(log: str):
    """The update counts at which epochs ended: fairseq's epoch summary lines ("| train | epoch 003 | ...")."""
    return [int(m.group(1)) for m in re.finditer(r"\| train \| epoch \d+ \|.*?\| num_updates (\d+)", log)]


def last_multiples(final, interval, n):
    """The paper's rule worked by hand: the last n multiples of the interval, ending at the final update."""
    want = [final] if final % interval else []
    return sorted((want + list(range(final - final % interval, 0, -interval)))[:n])


def averaged(save_dir, n):
    return [u for u, _ in checkpoints.update_checkpoints(str(save_dir), n)]


@pytest.fixture(scope="module")
def every_update(data_bin, tmp_path_factory):
    """15 updates, a checkpoint every update, the last 6 kept."""
    save = tmp_path_factory.mktemp("every_update")
    log = train(data_bin, save, "--max-update", "15", "--save-interval-updates", "1",
                "--keep-interval-updates", "6")
    return save, log


def test_an_interval_that_ends_an_epoch_is_averaged(every_update):
    save, log = every_update
    ends = epoch_ends(log)
    assert any(11 <= e < 15 for e in ends), ends  # the case: an epoch ends inside the last 5 updates
    assert averaged(save, 5) == last_multiples(15, 1, 5) == [11, 12, 13, 14, 15]
    names = sorted(p.name for p in save.glob("checkpoint_*_*.pt"))
    assert len(names) == 6, names  # --keep-interval-updates holds at an epoch's end too


def test_every_interval_ends_an_epoch(data_bin, every_update, tmp_path):
    """An interval of one epoch's length: every interval checkpoint, the final one too, ends an epoch."""
    # the epoch's length: where every_update's first epoch ended (the same data, batches and seed as
    # this run's; checkpoints do not change the batches), not a run of its own
    per_epoch = epoch_ends(every_update[1])[0]
    log = train(data_bin, tmp_path / "run", "--max-update", str(5 * per_epoch), "--save-interval-updates",
                str(per_epoch))
    assert epoch_ends(log)[-1] == 5 * per_epoch
    assert averaged(tmp_path / "run", 5) == last_multiples(5 * per_epoch, per_epoch, 5)


def test_a_resume_after_a_kill_between_the_two_writes_keeps_it(data_bin, tmp_path):
    """Killed after fairseq wrote checkpoint_last.pt at an epoch-ending interval, before the copy:
    the resumed run makes the interval checkpoint from the state it resumed from."""
    save = tmp_path / "ck"
    log = train(data_bin, save, "--max-update", "12", "--save-interval-updates", "1")
    assert 12 in epoch_ends(log)
    (lost,) = save.glob("checkpoint_*_12.pt")
    lost.unlink()
    train(data_bin, save, "--max-update", "15", "--save-interval-updates", "1")
    assert checkpoints.checkpoint_update(str(lost)) == 12
    assert averaged(save, 5) == [11, 12, 13, 14, 15]


def test_averaging_refuses_checkpoints_that_are_not_evenly_spaced(every_update, tmp_path):
    save = tmp_path / "ck"
    shutil.copytree(every_update[0], save)
    next(save.glob("checkpoint_*_13.pt")).unlink()
    with pytest.raises(UserError, match=r"not every 1 updates: 13 missing"):
        checkpoints.update_checkpoints(str(save), 5)
    proc = run([sys.executable, REPO / "scripts" / "average_checkpoints.py", "--inputs", save,
                "--num-update-checkpoints", "5", "--output", tmp_path / "avg.pt"], check=False, fork=True)
    assert_one_error_line(proc, "13 missing")
    assert not (tmp_path / "avg.pt").exists()
