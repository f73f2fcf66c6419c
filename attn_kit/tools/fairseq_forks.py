"""Several fairseq-train runs for the price of one import of fairseq (seconds of CPU a process).

One interpreter imports fairseq-train's module (fairseq_cli.train, what the fairseq-train console
script runs), then forks a child for each training it is sent; the child runs fairseq-train's own
cli_main on the arguments, its stdout and stderr in a log file, its exit handlers run (so that
attn_plugin.run_stats writes its record), and ends with fairseq-train's exit status (an uncaught
exception: its traceback and 1). Nothing runs in the parent before the fork but the import, so
each child starts as a fresh fairseq-train would: CUDA too, which the parent never touches. Used by
the GPU check (attn_kit.tools.bench.gpu_check) and by tests that train several small models."""
import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

from ..cli import UserError

RUNNER = r"""
import json, os, sys
status_out = os.fdopen(os.dup(1), "w")  # the statuses; what importing fairseq logs goes nowhere
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
import fairseq_cli.train
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1), os.dup2(fd, 2)
        os.environ.update(job["env"])
        sys.argv = ["fairseq-train", *job["argv"]]
        if job.get("profile"):
            from attn_kit.tools.bench.gpu_check import profile_steps
            profile_steps(job["profile"])
        try:
            fairseq_cli.train.cli_main()
            status = 0
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        except BaseException:
            sys.excepthook(*sys.exc_info())
            status = 1
        import atexit
        atexit._run_exitfuncs()
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(status)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), file=status_out, flush=True)
"""


class ForkedTrainings:
    """``run(cmd, log)``: ``cmd`` a fairseq-train command line, run in a child of the one interpreter,
    its output in ``log``; returns its exit status."""

    def __init__(self, env: Optional[Dict[str, str]] = None, cwd: Optional[Path] = None):
        self.proc = subprocess.Popen([sys.executable, "-c", RUNNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, cwd=cwd)

    def run(self, cmd: List, log: Path, env: Optional[Dict[str, str]] = None, profile: Optional[str] = None) -> int:
        """``profile``: a file for :func:`attn_kit.tools.bench.gpu_check.profile_steps`'s summary."""
        if Path(str(cmd[0])).name != "fairseq-train":
            raise UserError(f"not a fairseq-train command: {cmd[0]}")
        self.proc.stdin.write(json.dumps({"argv": [str(c) for c in cmd[1:]], "log": str(log), "env": env or {},
                                          "profile": profile}) + "\n")
        self.proc.stdin.flush()
        status = self.proc.stdout.readline()
        if not status:
            raise UserError(f"the fairseq-train runner died ({self.proc.poll()})")
        return int(status)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
