"""The commands' scratch folders (attn_kit.pipeline.process.scratch_folder): the kit removes only
the ones it provably made for processes that have ended (a marker naming this machine, boot and PID
namespace, the process and when it started), never a user's folder of a similar name, a live
command's, or one another PID namespace made; and a TMPDIR too long for the sockets of fairseq's
data-loader workers (which then wait forever) is replaced by a short one, saying so."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from attn_kit.pipeline import process
from attn_kit.pipeline.process import SCRATCH_MARKER, scratch_folder, stream


@pytest.fixture
def tmp(monkeypatch):
    """A temporary folder short enough to hold the scratch folders itself (pytest's are too long)."""
    short = Path(tempfile.mkdtemp(dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(short))
    yield short
    shutil.rmtree(short, ignore_errors=True)


def ended_process():
    """(pid, start time) of a process that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    start = process._start_time(child.pid)
    child.wait()
    return child.pid, start


def made(folder, **changes):
    """A scratch folder ``folder`` as scratch_folder makes it, for an ended process unless ``changes`` say."""
    host, boot, pidns = process._identity()
    pid, start = ended_process()
    folder.mkdir()
    owner = {"host": host, "boot": boot, "pidns": pidns, "pid": pid, "start": start, **changes}
    (folder / SCRATCH_MARKER).write_text(json.dumps(owner))
    (folder / "pymp-abc").mkdir()
    return folder


def test_only_the_kits_folders_of_ended_processes_go(tmp):
    notes = tmp / "attn-2017-notes"  # a user's folder: the old rule (attn-PID-*, PID not running) deleted it
    notes.mkdir()
    (notes / "draft.txt").write_text("mine")
    ended = made(tmp / "attn-12-abcdefgh")
    live = made(tmp / "attn-13-abcdefgh", pid=os.getpid(), start=process._start_time(os.getpid()))
    reused = made(tmp / "attn-14-abcdefgh", pid=os.getpid(), start=0)  # its PID now another process's
    other_ns = made(tmp / "attn-15-abcdefgh", pidns="pid:[1]")  # a container sharing /tmp: its PIDs are not ours
    other_boot = made(tmp / "attn-16-abcdefgh", boot="an earlier boot")
    other_host = made(tmp / "attn-17-abcdefgh", host="another-node")  # a shared file system
    target = made(tmp / "elsewhere")
    (tmp / "attn-18-link").symlink_to(target)  # a link is never followed
    new = scratch_folder()
    assert os.path.dirname(new) == str(tmp) and os.path.isfile(os.path.join(new, SCRATCH_MARKER))
    assert not ended.exists() and not reused.exists()
    kept = [notes, live, other_ns, other_boot, other_host, target, tmp / "attn-18-link"]
    assert all(p.exists() for p in kept) and (notes / "draft.txt").read_text() == "mine"
    assert (target / SCRATCH_MARKER).exists()
    assert json.loads((tmp / os.path.basename(new) / SCRATCH_MARKER).read_text())["pid"] == os.getpid()


def test_a_long_tmpdir_is_replaced_by_a_short_one_saying_so(tmp_path, monkeypatch, capsys):
    """An 87-character TMPDIR: fairseq-train's workers could not make their sockets there and waited
    forever at 0% CPU. The command's scratch folder goes to /tmp instead (one line, once), and the
    command sees it as its TMPDIR."""
    long = tmp_path / ("x" * max(1, 88 - len(str(tmp_path))))
    long.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    monkeypatch.setattr(process, "_SAID_LONG", set())
    seen = []
    rc, _ = stream([sys.executable, "-c", "import os; print(os.environ['TMPDIR'])"], on_line=seen.append)
    assert rc == 0 and os.path.dirname(seen[0].strip()) == "/tmp" and not os.path.exists(seen[0].strip())
    stream([sys.executable, "-c", "pass"], on_line=lambda line: None)
    assert capsys.readouterr().out.count(f"TMPDIR {long} is too long for the sockets") == 1
    assert not any(p.name.startswith("attn-") for p in long.iterdir())
