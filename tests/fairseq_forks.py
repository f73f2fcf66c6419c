"""Several fairseq-train runs for the price of one import of fairseq (~3.5 s CPU a process).

A test that trains several models one after the other, where the process boundary is not what it
checks, runs them through :class:`ForkedTrainings`: one interpreter imports fairseq-train's module
(fairseq_cli.train, what the fairseq-train console script runs), then forks a child for each training
it is sent; the child runs fairseq-train's own cli_main on the arguments, its stdout and stderr in a
file, and ends with fairseq-train's exit status (an uncaught exception: its traceback and 1). Nothing
runs in the parent before the fork but the import, so each child starts as a fresh fairseq-train would
(OMP_NUM_THREADS=1 and PYTHONWARNINGS=ignore as conftest.run sets them; --seed makes it the same run)."""
import json
import os
import subprocess
import sys
from pathlib import Path

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
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.environ.update(job["env"])
        sys.argv = ["fairseq-train", *job["argv"]]
        try:
            fairseq_cli.train.cli_main()
            status = 0
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        except BaseException:
            sys.excepthook(*sys.exc_info())
            status = 1
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(status)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), file=status_out, flush=True)
"""


class ForkedTrainings:
    """``train(cmd)``: ``cmd`` a fairseq-train command line (conftest.train_cmd), run in a child of
    the one interpreter; returns a CompletedProcess (stdout: the run's output, stderr empty)."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", RUNNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1"))

    def train(self, cmd, log: Path, env=None, check=True) -> subprocess.CompletedProcess:
        assert Path(cmd[0]).name == "fairseq-train", cmd[0]
        argv = [str(c) for c in cmd[1:]]
        self.proc.stdin.write(json.dumps({"argv": argv, "log": str(log), "env": env or {}}) + "\n")
        self.proc.stdin.flush()
        status = self.proc.stdout.readline()
        assert status, f"the runner died ({self.proc.poll()})"
        rc = int(status)
        out = Path(log).read_text()
        if check and rc != 0:
            raise AssertionError(f"fairseq-train failed ({rc}):\n{out[-3000:]}")
        return subprocess.CompletedProcess([cmd[0], *argv], rc, out, "")

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
