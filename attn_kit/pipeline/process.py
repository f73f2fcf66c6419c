"""Running the tools a recipe or a comparison starts: one way to find them and
one way to follow their output.

:func:`stream` is the one subprocess streamer of attn_kit: the recipe stages
(:meth:`attn_kit.pipeline.stages.Context.sh`) and the plugin-vs-stock
comparison (:mod:`attn_kit.compare`) both hand each output line of a command
to a function as it comes (to a log file, to the console, to a parser of
fairseq's JSON log lines) and report a failure by its last line.

A command it starts dies with the process that started it
(:func:`die_with_parent`) and inherits the work directory's lock
(:func:`attn_kit.pipeline.lock.inherited_fds`): a fairseq-train whose recipe
was killed neither trains on alone nor lets a second run start while it does.
"""
import ctypes
import getpass
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional, Sequence, Tuple

from ..cli import raise_if_signalled
from .lock import inherited_fds

try:  # Linux: prctl(PR_SET_PDEATHSIG, SIGTERM), looked up before any fork
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def die_with_parent():
    """``preexec_fn`` of a child: the kernel sends it SIGTERM when the process that
    started it ends, however it ends (on Linux; elsewhere nothing)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG


def console_script(program: str) -> str:
    """A console script (fairseq-train, torchrun, subword-nmt, ...) of the running
    Python's environment, even when that environment is not activated; else the
    name as given, for the PATH to resolve."""
    if os.sep not in program:
        candidate = Path(sys.executable).parent / program
        if candidate.exists():
            return str(candidate)
    return program


def stream(cmd: Sequence, on_line: Callable[[str], None], env: Optional[dict] = None,
           stdin: Optional[Path] = None, stdout: Optional[Path] = None) -> Tuple[int, str]:
    """Run ``cmd`` and hand each line it prints to ``on_line`` as it comes: stdout
    and stderr together, or stderr alone when ``stdout`` (a file) takes stdout.
    ``stdin`` is a file to read, else nothing. Ctrl-C stops the command too.

    Returns (exit status, its last non-empty output line without an ``error: ``
    prefix: the one-line errors of attn_kit's commands read as the reason).
    Raises FileNotFoundError if the program does not exist.

    The command's TMPDIR is a folder of its own, removed when it ends, so that what its
    tools leave there goes too: each DataLoader worker of fairseq-train and -generate
    makes a ``pymp-*`` folder and is ended with SIGTERM, which leaves the folder behind."""
    cmd = [str(c) for c in cmd]
    scratch = tempfile.mkdtemp(prefix="attn-")
    env = dict(os.environ if env is None else env)
    if len(scratch) <= _SOCKET_ROOM:
        env["TMPDIR"] = scratch
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", _inductor_cache())  # compiled kernels outlive the command
    fin = open(stdin, "rb") if stdin else subprocess.DEVNULL
    fout = open(stdout, "wb") if stdout else subprocess.PIPE
    try:
        proc = subprocess.Popen([console_script(cmd[0]), *cmd[1:]], stdin=fin, stdout=fout,
                                stderr=subprocess.PIPE if stdout else subprocess.STDOUT, env=env,
                                pass_fds=inherited_fds(), preexec_fn=die_with_parent)
        last = ""
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
        if stdin:
            fin.close()
        if stdout:
            fout.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return rc, last.removeprefix("error: ")


# The longest TMPDIR that has room for a DataLoader worker's socket, pymp-*/listener-*, in an AF_UNIX
# path (107 bytes): in a longer one the worker cannot send a batch, and the command waits forever.
_SOCKET_ROOM = 107 - len("/pymp-12345678/listener-12345678")


def _inductor_cache() -> str:
    """torch.compile's cache folder as torch picks it by default, in the usual TMPDIR
    (torch._inductor.runtime.cache_dir_utils.default_cache_dir, without importing torch)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
