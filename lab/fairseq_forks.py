"""Several fairseq commands for about the price of one import of what fairseq imports (seconds of CPU a process:
torch, and the scientific libraries fairseq's task registry pulls in).

One interpreter imports those libraries (:data:`PRELOAD`, none of which configures anything as it is imported), then
forks a child for each command it is sent: a fairseq console script (run as its entry point, fairseq-train's
cli_main for fairseq-train), ``python SCRIPT.py ...`` or ``python -m MODULE ...`` (run as ``__main__``). The child
imports fairseq and the command itself, as the fresh command would (fairseq's modules set up logging as they are
imported, each command its own way), reads and writes the files it is given as its stdin, stdout and stderr, runs in
the given folder and environment, and ends as the interpreter would (its non-daemon threads joined, its exit
handlers run: attn_plugin.run_stats writes its record), with the command's exit status (an uncaught exception: its
traceback and 1). Nothing runs in the parent but the imports, so CUDA starts in each child, as in a fresh command.
What differs is only what an interpreter reads when it starts (the ``PYTHON*`` variables, the preloaded C libraries,
the thread counts): a command whose environment differs from the runner's there needs a process of its own
(:meth:`ForkedCommands.fits`). Used by the GPU check (lab.bench.gpu_check) and by the tests (tests/conftest.py)."""
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

from attn_kit.cli import UserError

FAIRSEQ_COMMANDS = ("fairseq-train", "fairseq-generate", "fairseq-interactive", "fairseq-preprocess",
                    "fairseq-validate")
# What an interpreter reads from its environment as it starts (or torch as it is imported): a child
# forked from the runner has the runner's
STARTUP_VARIABLES = ("PYTHON", "LD_", "OMP_", "MKL_", "MALLOC")
# Most of what importing fairseq costs, and nothing that logs or sets anything up when imported
# (fairseq's own modules configure logging, so each command imports them itself)
PRELOAD = ("torch", "numpy", "scipy.stats", "sklearn.metrics", "omegaconf", "hydra", "sacrebleu")

RUNNER = r"""
import importlib.metadata, io, json, os, runpy, sys, threading
status_out = os.fdopen(os.dup(1), "w")  # the pids and statuses; fd 1 is each child's stdout
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
entries = {e.name: e for e in importlib.metadata.entry_points(group="console_scripts") if e.name in NAMES}
for name in PRELOAD:
    importlib.import_module(name)
sys.stdout.flush(), sys.stderr.flush()
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        for fd, path, flags in ((0, job["stdin"] or os.devnull, os.O_RDONLY),
                                (1, job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            if fd == 2 and path == job["stdout"]:
                os.dup2(1, 2)  # one file for both: one offset, as 2>&1
            else:
                opened = os.open(path, flags, 0o644)
                os.dup2(opened, fd), os.close(opened)
        status_out.close()
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                                     encoding=sys.stdin.encoding, errors=sys.stdin.errors)
        os.environ.clear(), os.environ.update(job["env"])
        if job["cwd"]:
            os.chdir(job["cwd"])
        argv, kind = job["argv"], job["kind"]
        if job.get("profile"):
            from lab.bench.gpu_check import profile_steps
            profile_steps(job["profile"])
        try:
            if kind == "module":  # python -m MODULE ARGS: sys.path[0] is the folder it runs in
                sys.argv, sys.path[0] = argv, os.getcwd()
                runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
            elif kind == "script":  # python SCRIPT ARGS: sys.path[0] is the script's folder
                sys.argv, sys.path[0] = argv, os.path.dirname(os.path.abspath(argv[0]))
                runpy.run_path(argv[0], run_name="__main__")
            else:  # a console script: its entry point, as the script's own sys.exit(main()) runs it
                sys.argv, sys.path[0] = argv, os.path.dirname(argv[0])
                sys.exit(entries[kind].load()())
            status = 0
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
        except BaseException:
            sys.excepthook(*sys.exc_info())
            status = 1
        threading._shutdown()  # what the interpreter does at exit: non-daemon threads, then atexit
        import atexit
        atexit._run_exitfuncs()
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(status)
    print(pid, file=status_out, flush=True)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), file=status_out, flush=True)
"""


def this_python(program: str) -> bool:
    """Whether ``program`` is this environment's Python (its python, python3 or python3.N)."""
    names = ("python", f"python{sys.version_info[0]}", "python{}.{}".format(*sys.version_info[:2]))
    return os.path.dirname(os.path.abspath(program)) == os.path.dirname(os.path.abspath(sys.executable)) and \
        os.path.basename(program) in names


def startup(env: Dict[str, str]) -> Dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_VARIABLES)}


class ForkedCommands:
    """``run(cmd, stdout, stderr)``: the command line ``cmd`` (a fairseq console script, or this
    Python with a script or ``-m`` module) run in a child of the one interpreter; returns its exit
    status. One command at a time."""

    def __init__(self, env: Optional[Dict[str, str]] = None, cwd: Optional[Path] = None):
        self.env = dict(os.environ if env is None else env)
        program = f"NAMES, PRELOAD = {FAIRSEQ_COMMANDS!r}, {PRELOAD!r}\n" + RUNNER
        self.proc = subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     bufsize=0, env=self.env, cwd=cwd)
        self._pending = b""

    @staticmethod
    def job(cmd: List) -> Optional[dict]:
        """What the runner runs for ``cmd`` ({"kind", "argv"}), or None for a command it does not run."""
        cmd = [str(c) for c in cmd]
        if Path(cmd[0]).name in FAIRSEQ_COMMANDS:
            return {"kind": Path(cmd[0]).name, "argv": cmd}
        if this_python(cmd[0]) and len(cmd) > 1:
            if cmd[1] == "-m" and len(cmd) > 2:
                return {"kind": "module", "argv": cmd[2:]}
            if cmd[1].endswith(".py"):
                return {"kind": "script", "argv": cmd[1:]}
        return None

    def fits(self, cmd: List, env: Optional[Dict[str, str]] = None) -> bool:
        """Whether ``cmd`` run here starts as it would in a process of its own, in ``env``."""
        return self.job(cmd) is not None and startup(self.env if env is None else env) == startup(self.env)

    def run(self, cmd: List, stdout: Path, stderr: Path, stdin: Optional[Path] = None,
            env: Optional[Dict[str, str]] = None, cwd: Optional[Path] = None, timeout: Optional[float] = None,
            profile: Optional[str] = None) -> int:
        """``env``: the command's whole environment (default the runner's). ``timeout``: seconds, after
        which the command is killed and subprocess.TimeoutExpired raised. ``profile``: a file for
        :func:`lab.bench.gpu_check.profile_steps`'s summary."""
        job = self.job(cmd)
        if not self.fits(cmd, env):
            raise UserError(f"not a command a fork of the fairseq runner starts as its own process would: {cmd[0]}")
        job.update(stdin=str(stdin) if stdin else None, stdout=str(stdout), stderr=str(stderr),
                   env=self.env if env is None else dict(env), cwd=str(cwd) if cwd else None, profile=profile)
        self.proc.stdin.write((json.dumps(job) + "\n").encode())
        pid = self._number()
        status = self._number(timeout)
        if status is None:
            os.kill(pid, signal.SIGKILL)
            self._number()
            raise subprocess.TimeoutExpired([str(c) for c in cmd], timeout)
        return status

    def _number(self, timeout: Optional[float] = None) -> Optional[int]:
        """The runner's next line (a pid or an exit status), or None after ``timeout`` seconds without it."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._pending:
            if timeout is not None and not select.select([fd], [], [], timeout)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise UserError(f"the fairseq command runner died ({self.proc.poll()})")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return int(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


class ForkedTrainings(ForkedCommands):
    """``run(cmd, log)``: ``cmd`` a fairseq-train command line, its output (stdout and stderr) in
    ``log``; ``env``: variables added to the runner's environment. Returns its exit status."""

    def run(self, cmd: List, log: Path, env: Optional[Dict[str, str]] = None,  # type: ignore[override]
            profile: Optional[str] = None) -> int:
        if Path(str(cmd[0])).name != "fairseq-train":
            raise UserError(f"not a fairseq-train command: {cmd[0]}")
        return super().run(cmd, log, log, env={**self.env, **(env or {})}, profile=profile)
