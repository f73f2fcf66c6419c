"""Progress lines with an ETA for the recipes' long stages: :class:`Progress`, and :func:`watch_lines` for a
command that writes its output into a file (apply-bpe, fairseq-generate). Training has its own
(:class:`attn_kit.fairseq_layer.fairseq_log.TrainProgress`), downloads too (:mod:`attn_kit.pipeline.download`).
"""
import threading
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Callable, Optional

from ..cli import log
from .text import count_lines


def clock_text(seconds: float) -> str:
    """A duration as 42s, 3m05s or 2h07m."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    """``label: done/total unit (P%), rate/s, ETA 1h02m`` at most every ``every`` seconds."""

    def __init__(self, label: str, total: Optional[int], unit: str = "lines", every: float = 10.0,
                 clock: Callable[[], float] = time.time, out: Callable[[str], None] = log):
        self.label, self.total, self.unit, self.every, self.clock, self.out = label, total, unit, every, clock, out
        self.start = self.last = clock()
        self.done = 0

    def line(self, done: int) -> str:
        """``label: done/total unit (P%), rate/s, ETA ...`` for ``done`` units so far."""
        elapsed = max(self.clock() - self.start, 1e-9)
        rate = done / elapsed
        text = f"{self.label}: {done}"
        if self.total:
            text += f"/{self.total} {self.unit} ({100 * done / self.total:.0f}%)"
        else:
            text += f" {self.unit}"
        text += f", {rate:.0f} {self.unit}/s"
        if self.total and rate > 0 and done < self.total:
            text += f", ETA {clock_text((self.total - done) / rate)}"
        return text

    def update(self, done: int, force: bool = False):
        """Report ``done`` units if ``every`` seconds passed since the last report (or ``force``)."""
        self.done = done
        now = self.clock()
        if force or now - self.last >= self.every:
            self.last = now
            self.out(self.line(done))

    def finish(self):
        self.out(f"{self.label}: {self.done} {self.unit} in {clock_text(self.clock() - self.start)}")


def count_complete_lines(path: Path, offset: int, prefix: bytes = b"") -> tuple:
    """(complete lines of ``path`` from byte ``offset`` on starting with ``prefix``, offset after the last)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return 0, offset
    end = data.rfind(b"\n") + 1
    lines = data[:end].split(b"\n")[:-1]
    n = sum(1 for line in lines if line.startswith(prefix)) if prefix else len(lines)
    return n, offset + end


@contextmanager
def watch_lines(path: Path, total: Optional[int], label: str, unit: str = "lines", prefix: bytes = b"",
                every: float = 10.0):
    """While the block runs, report every ``every`` seconds how many lines (starting with ``prefix``) out of
    ``total`` a command has written into ``path``."""
    progress = Progress(label, total, unit, every=every)
    stop = threading.Event()
    state = {"n": 0, "offset": 0}

    def poll():
        while not stop.wait(every):
            n, state["offset"] = count_complete_lines(path, state["offset"], prefix)
            state["n"] += n
            progress.update(state["n"], force=True)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield progress
    finally:
        stop.set()
        thread.join()


def watch_output(ctx, out: Path, source: Path, label: str, unit: str = "lines", prefix: bytes = b""):
    """:func:`watch_lines` of a step writing a line of ``out`` per line of ``source``; none with --dry-run."""
    if ctx.dry_run:
        return nullcontext()
    return watch_lines(out, count_lines(source), label, unit, prefix)
