"""Training curves from fairseq-train's log: ``curves.csv`` and ``curves.png``.

The recipes' train stage streams fairseq's ``simple`` log lines into
``WORKDIR/logs/train.log`` (:meth:`attn_kit.pipeline.stages.Context.sh`); at
every validation line and when training ends, :class:`CurveWriter` reads that
log again and writes, next to the checkpoints' workdir:

- ``curves.csv``: one row per logged point, ``split`` = train (fairseq's
  ``train_inner`` lines, every ``--log-interval`` updates) or valid; ``update``;
  ``hours`` of training (wall-clock time inside fairseq-train, summed over the
  runs of a resumed training, the time between runs left out); the smoothed
  ``loss`` and unsmoothed ``nll_loss`` (base 2, fairseq's), ``ppl``, the
  learning rate ``lr`` (eq. 3), ``tokens_per_s`` (fairseq's ``wps``: target
  tokens per second over all devices) and ``bleu`` where ``--eval-bleu`` logs it;
- ``curves.png``: loss (train and valid), learning rate and tokens/s, each
  against updates and against hours (needs matplotlib).

A resumed training repeats the updates after its last checkpoint; the points
the killed run logged past that checkpoint (fairseq's "Loaded checkpoint ...
(epoch E @ U updates)") are dropped, so every update appears once; all of them
when it was killed before its first checkpoint ("No existing checkpoint found").

    python -m attn_kit.pipeline.curves LOG [OUT_DIR]    # the same for any fairseq-train log
"""
import csv
import io
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Iterable, List, Optional

from ..cli import UsageError, atomic_output, log, main_guard, write_text_atomic

COLUMNS = ("split", "update", "hours", "loss", "nll_loss", "ppl", "lr", "tokens_per_s", "bleu")
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \| ")
_PAIRS = re.compile(r"(\w+)(?:=| )(-?[\d.]+(?:e-?\d+)?)(?=,|\s|$)")
_LOADED = re.compile(r"Loaded checkpoint \S+ \(epoch \d+ @ (\d+) updates\)|No existing checkpoint found ")
_FIELDS = {"loss": "loss", "nll_loss": "nll_loss", "ppl": "ppl", "lr": "lr", "wps": "tokens_per_s", "bleu": "bleu"}


def parse(lines: Iterable[str]) -> List[dict]:
    """The train (``train_inner``) and valid points of a fairseq-train log (``simple``
    format), in update order, each update once (see the module docstring).

    A line starting with ``$ `` (a command the recipe started) begins a new run;
    ``hours`` adds up each run's time from its first to its last time-stamped line."""
    points, offset, run_start, last_stamp = [], 0.0, None, None
    for line in lines:
        if line.startswith("$ "):
            if run_start is not None and last_stamp is not None:
                offset += (last_stamp - run_start).total_seconds()
            run_start = last_stamp = None
            continue
        m = _STAMP.match(line)
        if not m:
            continue
        stamp = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
        run_start = run_start or stamp
        last_stamp = stamp
        loaded = _LOADED.search(line)
        if loaded:  # training goes on from that update (0: from the start)
            points = [p for p in points if p["update"] <= int(loaded.group(1) or 0)]
            continue
        split = "train" if "| train_inner |" in line else "valid" if "| valid |" in line else None
        if split is None:
            continue
        fields = dict(_PAIRS.findall(line.split(f"| {'train_inner' if split == 'train' else 'valid'} |", 1)[1]))
        if "num_updates" not in fields:
            continue
        point = {"split": split, "update": int(float(fields["num_updates"])),
                 "hours": round((offset + (stamp - run_start).total_seconds()) / 3600, 5)}
        for key, column in _FIELDS.items():
            if key in fields and not (split == "valid" and key == "wps"):  # validation's own speed
                point[column] = float(fields[key])
        points.append(point)
    return points


def to_csv(points: List[dict]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for p in points:
        writer.writerow({k: p.get(k, "") for k in COLUMNS})
    return out.getvalue()


def plot(points: List[dict], path: Path, title: str = ""):
    """curves.png: loss, learning rate and tokens/s against updates (left) and hours (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [p for p in points if p["split"] == "train"]
    valid = [p for p in points if p["split"] == "valid"]
    fig, axes = plt.subplots(3, 2, figsize=(11, 9), sharex="col")
    rows = [("loss", "loss (base 2)", [("train", train, "loss"), ("valid", valid, "loss")]),
            ("lr", "learning rate (eq. 3)", [("train", train, "lr")]),
            ("tokens_per_s", "target tokens/s", [("train", train, "tokens_per_s")])]
    for r, (_, label, series) in enumerate(rows):
        for c, x in enumerate(("update", "hours")):
            ax = axes[r][c]
            for name, pts, key in series:
                xy = [(p[x], p[key]) for p in pts if key in p]
                if xy:
                    ax.plot(*zip(*xy), marker="o" if name == "valid" else None, markersize=3, label=name)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
            if r == 0:
                ax.legend()
            if r == 2:
                ax.set_xlabel("updates" if x == "update" else "training time (hours)")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format="png", dpi=90)
    plt.close(fig)


def write(log_path: Path, out_dir: Path, title: str = "") -> Optional[List[dict]]:
    """``out_dir/curves.csv`` and ``out_dir/curves.png`` from the fairseq-train log
    ``log_path`` (the PNG only where matplotlib imports); None if the log has no point yet."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            points = parse(f)
    except OSError:
        return None
    if not points:
        return None
    out_dir = Path(out_dir)
    write_text_atomic(out_dir / "curves.csv", to_csv(points))
    try:
        plot(points, out_dir / "curves.png", title)
    except ImportError:
        pass  # the CSV holds the same numbers; README's environment installs matplotlib
    return points


class CurveWriter:
    """A ``tail`` filter for :meth:`Context.sh` wrapped around another (``tail``, e.g.
    :class:`attn_kit.pipeline.stages.TrainProgress`): at every validation line it
    rewrites the curves from ``log_path`` into ``out_dir``; :meth:`finish` writes them
    once more when training has ended.

    As a context manager around the training (``final``: False with --dry-run), it calls
    :meth:`finish` when the block ends, also when training failed (the curves up to the
    failure show how it went), but not after Ctrl-C or SIGTERM: a signal means stop now, and
    one that cut short a refresh's ``import matplotlib`` would have it imported again half-loaded
    (tracebacks instead of one line). The rerun writes the curves."""

    def __init__(self, log_path: Path, out_dir: Path, tail, title: str = "", final: bool = True):
        self.log_path, self.out_dir, self.tail, self.title = Path(log_path), Path(out_dir), tail, title
        self.final = final
        self.written = False

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, traceback):
        if self.final and not (kind and issubclass(kind, KeyboardInterrupt)):
            self.finish()
        return False

    def __call__(self, line: str) -> bool:
        echo = self.tail(line) if callable(self.tail) else False
        if "| valid |" in line:
            self.finish()
        return echo

    def finish(self):
        if write(self.log_path, self.out_dir, self.title) and not self.written:
            log(f"training curves: {self.out_dir / 'curves.png'} and curves.csv (refreshed at each validation)")
            self.written = True


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not 1 <= len(argv) <= 2 or argv[0].startswith("-"):
        raise UsageError("usage: python -m attn_kit.pipeline.curves FAIRSEQ_TRAIN_LOG [OUT_DIR]")
    log_path = Path(argv[0])
    out = Path(argv[1]) if len(argv) > 1 else log_path.parent
    if not log_path.is_file():
        raise UsageError(f"{log_path}: no such file")
    if write(log_path, out, log_path.name) is None:
        raise UsageError(f"{log_path}: no train_inner or valid lines with num_updates (fairseq-train "
                         "--log-format simple)")
    print(f"wrote {out / 'curves.csv'} and {out / 'curves.png'}")


if __name__ == "__main__":
    main_guard(main)
