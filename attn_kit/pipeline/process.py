"""Running the tools a recipe or a comparison starts: :func:`stream`, attn_kit's one subprocess streamer (the
recipe stages and :mod:`lab.compare`), hands each output line of a command to a function as it comes
and reports a failure by its last line. A command it starts dies with the process that started it
(:func:`die_with_parent`) and inherits the work directory's lock (:func:`attn_kit.pipeline.lock.inherited_fds`):
a fairseq-train whose recipe was killed neither trains on alone nor lets a second run start while it does.
"""
import ctypes
import getpass
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Set, Tuple

from ..cli import UserError, log, raise_if_signalled
from .lock import inherited_fds, pid_alive

try:  # Linux: prctl(PR_SET_PDEATHSIG, SIGTERM), looked up before any fork
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def die_with_parent():
    """``preexec_fn`` of a child: the kernel sends it SIGTERM when its parent ends, however (Linux only)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG


def console_script(program: str) -> str:
    """A console script (fairseq-train, subword-nmt, ...) of the running Python's environment, even when it is
    not activated; else the name as given, for the PATH to resolve."""
    if os.sep not in program:
        candidate = Path(sys.executable).parent / program
        if candidate.exists():
            return str(candidate)
    return program


def descendants(pid: int) -> Dict[int, int]:
    """{pid: parent pid} of every process below ``pid`` (Linux's /proc; {} elsewhere)."""
    found, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    children = [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
            for child in children:
                if child not in found:
                    found[child] = parent
                    todo.append(child)
    return found


def _stat(pid: int) -> list:
    """The fields of /proc/PID/stat after the command name (proc(5)'s field 3 on), [] once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def cpu_ticks(pids) -> int:
    """CPU time (user + system, clock ticks) the processes ``pids`` have used; ones gone count 0."""
    total = 0
    for pid in pids:
        fields = _stat(pid)
        try:
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
        except (ValueError, IndexError):
            continue
    return total


class WorkerWatch(threading.Thread):
    """Watches a command's worker pool (subword-nmt's, fairseq-preprocess's) every :data:`WATCH_SECONDS`. A pool
    replaces a worker killed from outside (the out-of-memory killer) and the dead one's work never comes back:
    the command waits forever. A replacement followed by :data:`IDLE_SECONDS` without a tick of CPU in the whole
    tree (not the next of several pools, which goes on working) ends the command (:func:`end_tree`);
    :attr:`reason` says why."""

    def __init__(self, proc: subprocess.Popen, name: str):
        super().__init__(daemon=True)
        self.proc, self.name, self.reason = proc, name, None
        self.stopped = threading.Event()

    def run(self):
        known: Dict[int, int] = {}
        replaced, cpu, idle = None, -1, 0.0
        while not self.stopped.wait(WATCH_SECONDS) and self.proc.poll() is None:
            now = descendants(self.proc.pid)
            for pid, parent in known.items():
                if pid not in now and parent in (self.proc.pid, *now) and \
                        any(q not in known and now[q] == parent for q in now):
                    replaced = pid
            used = cpu_ticks([self.proc.pid, *now])
            idle = idle + WATCH_SECONDS if used == cpu else 0.0
            cpu, known = used, now
            if replaced is not None and idle >= IDLE_SECONDS:
                self.reason = (f"{self.name}: its worker process {replaced} ended while it ran and another took its "
                               f"place, and it has done nothing for {idle:.0f} s since (a worker killed from outside? "
                               "the out-of-memory killer sends SIGKILL); it would have waited forever")
                end_tree(self.proc.pid)  # the whole tree: the pool's workers hold the command's output open
                return


def end_tree(pid: int) -> None:
    """Kill ``pid`` and every process below it, none able to start another meanwhile (a pool's replacement
    would hold the command's output open): each is stopped first (SIGSTOP), the tree read again until no new
    one appears, then all get SIGKILL."""
    stopped: Set[int] = set()
    while True:
        tree = {pid, *descendants(pid)} - stopped
        if not tree:
            break
        for p in tree:
            _signal(p, signal.SIGSTOP)
        stopped |= tree
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and not all(map(_stopped_or_gone, tree)):
            time.sleep(0.005)  # stopping is asynchronous: a fork finishing now shows in the next read
    for p in stopped:
        _signal(p, signal.SIGKILL)


def _stopped_or_gone(pid: int) -> bool:
    state = _stat(pid)[:1]  # proc(5)'s state letter: T stopped, t stopped by a tracer, Z ended
    return not state or state[0] in "TtZ"


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:  # ended meanwhile
        pass


WATCH_SECONDS = 1.0
IDLE_SECONDS = 10.0  # a tool working hard does not sit idle this long


def stream(cmd: Sequence, on_line: Callable[[str], None], env: Optional[dict] = None,
           stdin: Optional[Path] = None, stdout: Optional[Path] = None,
           watch_workers: bool = False) -> Tuple[int, str]:
    """Run ``cmd`` and hand each line it prints to ``on_line`` as it comes: stdout and stderr together, or
    stderr alone when ``stdout`` (a file) takes stdout; ``stdin``: a file to read. Ctrl-C stops the command
    too. Returns (exit status, its last non-empty line without an ``error: `` prefix); FileNotFoundError if
    the program does not exist. Its TMPDIR is a folder of its own (:func:`scratch_folder`), removed when it
    ends (fairseq's DataLoader workers leave ``pymp-*`` folders). ``watch_workers``: see :class:`WorkerWatch`."""
    cmd = [str(c) for c in cmd]
    scratch = scratch_folder()
    env = dict(os.environ if env is None else env)
    env["TMPDIR"] = scratch
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", _inductor_cache())  # compiled kernels outlive the command
    fin = open(stdin, "rb") if stdin else subprocess.DEVNULL
    fout = open(stdout, "wb") if stdout else subprocess.PIPE
    try:
        proc = subprocess.Popen([console_script(cmd[0]), *cmd[1:]], stdin=fin, stdout=fout,
                                stderr=subprocess.PIPE if stdout else subprocess.STDOUT, env=env,
                                pass_fds=inherited_fds(), preexec_fn=die_with_parent)
        last = ""
        watch = WorkerWatch(proc, Path(cmd[0]).name) if watch_workers else None
        if watch:
            watch.start()
        try:
            for raw in proc.stderr if stdout else proc.stdout:
                line = raw.decode("utf-8", "replace")
                if line.strip():
                    last = line.strip()
                on_line(line)
                raise_if_signalled()  # a Ctrl-C or SIGTERM that on_line's work lost (a finalizer, C code)
            raise_if_signalled()
            rc = proc.wait()
        except BaseException:  # Ctrl-C (or SIGTERM made KeyboardInterrupt): stop the child, then go on
            proc.terminate()
            proc.wait()
            raise
        finally:
            if watch:
                watch.stopped.set()
                watch.join()
        if watch and watch.reason:
            raise UserError(watch.reason + "; finished stages are kept, run the same command again to resume")
    finally:
        if stdin:
            fin.close()
        if stdout:
            fout.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return rc, last.removeprefix("error: ")


def scratch_folder() -> str:
    """A new folder ``attn-PID-*`` for a command's TMPDIR (:func:`_scratch_root`), after removing those this kit
    made for processes that have ended (killed with SIGKILL): only where its marker says this machine, boot and
    PID namespace made it for a process that is gone; nothing else is touched, whatever its name."""
    root = _scratch_root()
    me = _identity()
    for name in os.listdir(root):
        path = os.path.join(root, name)
        owner = _owner(path) if name.startswith("attn-") and me else None
        if owner and [owner.get(k) for k in ("host", "boot", "pidns")] == list(me) \
                and not _running(owner.get("pid"), owner.get("start")):
            shutil.rmtree(path, ignore_errors=True)
    folder = tempfile.mkdtemp(prefix=f"attn-{os.getpid()}-", dir=root)
    if me:
        with open(os.path.join(folder, SCRATCH_MARKER), "w") as f:
            json.dump({"host": me[0], "boot": me[1], "pidns": me[2], "pid": os.getpid(),
                       "start": _start_time(os.getpid())}, f)
    return folder


SCRATCH_MARKER = ".attn-scratch"  # in each scratch folder: who made it (scratch_folder)
_SAID_LONG: Set[str] = set()  # the long TMPDIRs a line has been printed for


def _scratch_root() -> str:
    """The temporary folder, or where that is too long for a socket in a scratch folder (fairseq-train's workers
    would wait forever), the first of /tmp and /dev/shm, said in a line."""
    root = tempfile.gettempdir()
    longest = len("/attn-4194304-12345678")
    if len(root) + longest <= _SOCKET_ROOM:
        return root
    for short in ("/tmp", "/dev/shm"):
        if len(short) + longest <= _SOCKET_ROOM and os.path.isdir(short) and os.access(short, os.W_OK | os.X_OK):
            if root not in _SAID_LONG:
                _SAID_LONG.add(root)
                log(f"TMPDIR {root} is too long for the sockets of fairseq's data-loader workers ({len(root)} "
                    f"characters): the commands' scratch folders go in {short}")
            return short
    raise UserError(f"TMPDIR {root} is {len(root)} characters long: fairseq's data-loader workers put sockets "
                    f"in it, which need a path under 108 bytes, and /tmp is not writable; set TMPDIR to a "
                    f"folder of at most {_SOCKET_ROOM - longest} characters")


def _identity() -> Optional[Tuple[str, str, str]]:
    """(host name, boot id, PID namespace) of this process; None without Linux's /proc (then no scratch folder
    is removed but by its own command)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return socket.gethostname(), boot, os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _start_time(pid: int) -> Optional[int]:
    """When process ``pid`` started (ticks after boot, /proc/PID/stat's field 22; a reused PID starts later)."""
    fields = _stat(pid)
    try:
        return int(fields[19])
    except (ValueError, IndexError):
        return None


def _owner(path: str) -> Optional[dict]:
    """The marker of the scratch folder ``path`` (a folder of this user, not a link); None for anything else."""
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            return None
        with open(os.path.join(path, SCRATCH_MARKER)) as f:
            owner = json.load(f)
        return owner if isinstance(owner, dict) else None
    except (OSError, ValueError):
        return None


def _running(pid, start) -> bool:
    """Whether the process that made a scratch folder runs: its PID is in use by one that started when it did."""
    if not isinstance(pid, int) or not pid_alive(pid):
        return False
    return start is None or _start_time(pid) in (start, None)


# The longest TMPDIR that has room for a DataLoader worker's socket, pymp-*/listener-*, in an AF_UNIX
# path (107 bytes): in a longer one the worker cannot send a batch, and the command waits forever.
_SOCKET_ROOM = 107 - len("/pymp-12345678/listener-12345678")


def _inductor_cache() -> str:
    """torch.compile's default cache folder in the usual TMPDIR (torch._inductor's), without importing torch."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
