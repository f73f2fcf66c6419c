"""One run per work directory: :func:`workdir_lock`, a kernel ``flock`` on ``WORKDIR/.lock`` that a second run
meets as one error line, that a killed run never leaves stale, and that the commands a run starts inherit."""
import errno
import fcntl
import os
import shlex
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, List, Optional

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


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        pass
    return True


def _alive(info: dict) -> bool:
    """Whether the pid of ``info`` is a live process on this host."""
    try:
        return pid_alive(int(info["pid"]))
    except (KeyError, ValueError):
        return False


def describe(info: dict) -> str:
    """``pid N on HOST, started TIME: COMMAND`` (what is known of a lock's owner)."""
    if not info.get("pid"):
        return "owner unknown"
    host = f" on {info['host']}" if info.get("host") and info["host"] != socket.gethostname() else ""
    text = f"pid {info['pid']}{host}, started {info.get('started', '?')}"
    return text + (f": {info['command'][:160]}" if info.get("command") else "")


@contextmanager
def workdir_lock(workdir, option: str = "--workdir", wait: bool = False):
    """Hold the lock of ``workdir`` (created if needed) while the block runs; re-entrant within a process.
    Another run holding it is one :class:`UserError` line naming it (``wait``, for a shared ``--data-workdir``:
    wait for it instead), and so is a ``workdir`` that cannot be created or written (naming ``option``).
    The file names the owner (pid, host, start, command). The kernel drops a flock when its last holder ends,
    so a killed run's lock is never stale; the commands a run starts inherit it (:func:`inherited_fds`), and a
    new run waits up to :data:`LEFTOVER_WAIT` for those of an ended run. Without flock (some network mounts)
    the file's pid and host decide: a live pid on this host holds it, a dead one is taken over, another host's
    is refused."""
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


def _flock(fd: int) -> Optional[bool]:
    """Try to flock ``fd``: True when taken, False when another holds it, None on a file system without flock."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise
        return None


def _take(fd: int, workdir: Path):
    """Lock ``fd`` or raise UserError naming the owner. The file is never removed: a run that opened it just
    before a removal would hold a lock no later run can see."""
    flock = _flock(fd)
    if flock is False:
        _wait_for_leftovers(fd, workdir, _read(fd))  # returns holding the flock
    previous = _read(fd)
    if flock is None and previous.get("pid"):  # no flock: the file's pid and host decide
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
    """Block until no live run holds ``workdir``'s lock (then taken, if flock works); the holder named once."""
    said = False
    while True:
        flock = _flock(fd)
        if flock:
            return
        owner = _read(fd)
        if flock is False and not (owner.get("pid") and (_alive(owner) or owner.get("host") != socket.gethostname())):
            return  # leftovers of an ended run: _take waits for them, as for any lock
        if flock is None and not (owner.get("pid") and owner.get("host") == socket.gethostname() and _alive(owner)
                                  and int(owner["pid"]) != os.getpid()):
            return  # _take decides (another host's pid is refused there)
        if not said:
            log(f"{workdir} is in use by another run ({describe(owner)}); waiting for it to finish")
            said = True
        time.sleep(poll)


def _wait_for_leftovers(fd: int, workdir: Path, owner: dict):
    """The lock is held: by another run if its owner lives (or is on another host): raise at once; else by
    commands the ended owner started, which die with it: wait up to :data:`LEFTOVER_WAIT` for them."""
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
