"""fairseq-train runs of the tests in children of one interpreter that imported fairseq once
(attn_kit.tools.fairseq_forks): a test that trains several models one after the other, where the process
boundary is not what it checks, runs them through :class:`ForkedTrainings` (OMP_NUM_THREADS=1 and
PYTHONWARNINGS=ignore as conftest.run sets them; --seed makes it the same run)."""
import os
import subprocess
from pathlib import Path

from attn_kit.tools import fairseq_forks


class ForkedTrainings:
    """``train(cmd)``: ``cmd`` a fairseq-train command line (conftest.train_cmd), run in a child of
    the one interpreter; returns a CompletedProcess (stdout: the run's output, stderr empty)."""

    def __init__(self):
        self.forks = fairseq_forks.ForkedTrainings(env=dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1"))

    def train(self, cmd, log: Path, env=None, check=True) -> subprocess.CompletedProcess:
        rc = self.forks.run(cmd, log, env)
        out = Path(log).read_text()
        if check and rc != 0:
            raise AssertionError(f"fairseq-train failed ({rc}):\n{out[-3000:]}")
        return subprocess.CompletedProcess([str(c) for c in cmd], rc, out, "")

    def close(self):
        self.forks.close()
