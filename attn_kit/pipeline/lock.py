"""One run per work directory: :func:`workdir_lock`, a kernel ``flock`` on ``WORKDIR/.lock``
that a second run meets as one error line, that a killed run never leaves stale, and that
the commands a run starts inherit."""
import errno
import fcntl
import os
import shlex
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, List

from .boundary import open_no_follow, refuse_links
from ..cli import UserError, log

LOCK_NAME = ".lock"
LEFTOVER_WAIT = 60  # seconds a new run waits for the commands of a run that ended to exit
_HELD: Dict[Path, int] = {}  # work directory -> descriptor of its locked .lock file (this process)


def inherited_fds() -> List[int]:
    """Descriptors of the locks this process holds, for the commands it starts to inherit."""
    return list(_HELD.values())


def _read(fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 4096).decode("utf-8", "replace")
    info = {}
    for line in text.splitlines():
        key, _, value = line.partition(": ")
        if value:
            info[key] = value
    return info


def _write(fd: int):
    info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": shlex.join([os.path.basename(sys.executable), *sys.argv])}
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, "".join(f"{k}: {v}\n" for k, v in info.items()).encode())
    os.fsync(fd)


def _alive(info: dict) -> bool:
    """Whether the pid of ``info`` is a live process on this host."""
    try:
        os.kill(int(info["pid"]), 0)
    except (KeyError, ValueError, ProcessLookupError):
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def describe(info: dict) -> str:
    """``pid N on HOST, started TIME: COMMAND`` (what is known of a lock's owner)."""
    if not info.get("pid"):
        return "owner unknown"
    host = f" on {info['host']}" if info.get("host") and info["host"] != socket.gethostname() else ""
    text = f"pid {info['pid']}{host}, started {info.get('started', '?')}"
    return text + (f": {info['command'][:160]}" if info.get("command") else "")


@contextmanager
def workdir_lock(workdir, option: str = "--workdir", wait: bool = False):
    """Hold the lock of ``workdir`` (created if needed) while the block runs.

    Re-entrant within a process. Raises :class:`UserError` (one line) when another
    run holds it (``wait``: waits for that run to release it instead), or when ``workdir``
    cannot be created or written (naming ``option``).

    Every command that writes a work directory (each recipe through
    :func:`attn_kit.pipeline.stages.run_recipe`, the plugin-vs-stock comparison,
    anything else that fills a ``--workdir``) holds :func:`workdir_lock` while it
    writes. A second run on the same directory stops at once with one line::

        error: WORKDIR is in use by another run (pid N on HOST, started 2026-11-25 08:30:12: COMMAND)

    The lock is the kernel's: ``fcntl.flock`` on ``WORKDIR/.lock``, which holds
    the owner's pid, host, start time and command as text. The kernel drops a
    flock when the last process holding it ends, however it ends (kill -9
    included), so the lock of a killed run is never stale: the next run takes it
    over and says so. The commands a run starts (fairseq-train, ...) inherit the
    lock (:func:`inherited_fds`, passed on by :func:`attn_kit.pipeline.process.stream`),
    so a run whose own process was killed while its fairseq-train goes on still
    counts as running until that ends (it is told to stop:
    :func:`attn_kit.pipeline.process.die_with_parent`); a new run waits for such
    leftovers of a run that has ended (seconds: fairseq's data-loader workers
    notice their parent is gone), up to a minute. On a file system without
    flock (some network mounts) the pid and host in the file decide: a live pid on
    this host holds it, a dead one is taken over, another host's is refused with a
    hint to remove the file.

    A folder several runs share (the prepared data of ``--data-workdir``) is locked with
    ``wait=True``: a second run waits, saying for whom, until the first has finished with it,
    then finds its stages done.
    """
    workdir = Path(workdir).resolve()
    if workdir in _HELD:
        yield
        return
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        refuse_links(workdir)  # before anything is written there: a link at the kit's own paths is one line
        fd = open_no_follow(workdir / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        raise UserError(f"{option} {workdir}: cannot {'create' if not workdir.is_dir() else 'write in'} it "
                        f"({exc.strerror or exc})") from None
    try:
        if wait:
            _wait_for_owner(fd, workdir)
        _take(fd, workdir)
    except BaseException:
        os.close(fd)
        raise
    _HELD[workdir] = fd
    try:
        yield
    finally:
        del _HELD[workdir]
        os.ftruncate(fd, 0)  # an empty file: released cleanly (the file stays, see _take)
        os.close(fd)  # closing drops the flock


def _take(fd: int, workdir: Path):
    """Lock ``fd`` or raise UserError naming the owner. The file is never removed: a run
    that opened it just before a removal would hold a lock no later run can see."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        flock = True
    except BlockingIOError:
        _wait_for_leftovers(fd, workdir, _read(fd))
        flock = True
    except OSError as exc:
        if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise
        flock = False  # no flock on this file system: the file's pid and host decide
    previous = _read(fd)
    if not flock and previous.get("pid"):
        if previous.get("host") != socket.gethostname():
            raise UserError(f"{workdir} is in use by another run ({describe(previous)}; this file system has no "
                            f"locks, so if that run is gone, remove {workdir / LOCK_NAME})")
        if _alive(previous) and int(previous["pid"]) != os.getpid():
            raise UserError(f"{workdir} is in use by another run ({describe(previous)})")
    if previous.get("pid"):
        log(f"{workdir}: the run that held it ({describe(previous)}) stopped without releasing it; "
            "taking over")
    _write(fd)


def _wait_for_owner(fd: int, workdir: Path, poll: float = 1.0):
    """Block until no live run holds ``workdir``'s lock (the lock is then taken: a flock, or the
    file's pid on a file system without flock). Whoever holds it is named once."""
    said = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            owner = _read(fd)
            if not (owner.get("pid") and (_alive(owner) or owner.get("host") != socket.gethostname())):
                return  # leftovers of an ended run: _take waits for them, as for any lock
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            owner = _read(fd)
            if not (owner.get("pid") and owner.get("host") == socket.gethostname() and _alive(owner)
                    and int(owner["pid"]) != os.getpid()):
                return  # _take decides (another host's pid is refused there)
        if not said:
            log(f"{workdir} is in use by another run ({describe(owner)}); waiting for it to finish")
            said = True
        time.sleep(poll)


def _wait_for_leftovers(fd: int, workdir: Path, owner: dict):
    """The lock is held. If its owner lives (or is on another host), another run is going on:
    raise at once. If the owner is gone, what holds the lock are commands it started (they
    inherit it), which die with it: wait up to LEFTOVER_WAIT seconds for them to exit."""
    if owner.get("pid") and (_alive(owner) or owner.get("host") != socket.gethostname()):
        raise UserError(f"{workdir} is in use by another run ({describe(owner)}); wait for it to finish or stop it, "
                        "or use another --workdir")
    whose = f"the run that held it ({describe(owner)})" if owner.get("pid") else "the run that held it"
    log(f"{workdir}: {whose} has ended; waiting for the commands it started to exit")
    deadline = time.time() + LEFTOVER_WAIT
    while time.time() < deadline:
        time.sleep(0.2)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            continue
    raise UserError(f"{workdir} is in use: {whose} has ended, but commands it started still run after "
                    f"{LEFTOVER_WAIT}s; find them with: fuser -v {workdir / LOCK_NAME}")
