"""Training curves from fairseq-train's log: the loss curve results.json keeps (:func:`loss_curve`),
``curves.csv`` (:data:`COLUMNS`: hours summed over a resumed training's runs, losses in bits, tokens_per_s is
fairseq's wps) and ``curves.png`` (needs matplotlib), refreshed at every validation (the PNG at most every
minute: :class:`CurveWriter`).
Each update appears once (a resumed training's repeated updates replace the killed run's).

    python -m attn_kit.fairseq_layer.curves LOG [OUT_DIR]    # for any fairseq-train --log-format json log
"""
import csv
import io
import sys
import time
from pathlib import Path
from typing import Iterable, List, Optional

from ..cli import UsageError, atomic_output, log, main_guard, write_text_atomic
from .fairseq_log import echo_text, read

PNG_SECONDS = 60  # the training curves' PNG is redrawn at most this often during training
COLUMNS = ("split", "update", "hours", "loss", "nll_loss", "ppl", "lr", "tokens_per_s", "bleu")
_FIELDS = {"loss": "loss", "nll_loss": "nll_loss", "ppl": "ppl", "lr": "lr", "wps": "tokens_per_s", "bleu": "bleu"}
_SPLITS = {"train_inner": "train", "valid": "valid"}


def parse(lines: Iterable[str]) -> List[dict]:
    """The train (``train_inner``) and valid points of a fairseq-train log, each update once; a ``$ `` line
    begins a new run, and ``hours`` adds up each run's time from its first to its last time-stamped line."""
    points, offset, run_start, last_stamp = [], 0.0, None, None
    for line in lines:
        entry = read(line)
        if entry.command:
            if run_start is not None and last_stamp is not None:
                offset += (last_stamp - run_start).total_seconds()
            run_start = last_stamp = None
            continue
        if entry.stamp is None:
            continue
        run_start = run_start or entry.stamp
        last_stamp = entry.stamp
        if entry.loaded is not None:  # training goes on from that update (0: from the start)
            points = [p for p in points if p["update"] <= entry.loaded]
            continue
        split = _SPLITS.get(entry.tag)
        if split is None or entry.update is None:
            continue
        point = {"split": split, "update": entry.update,
                 "hours": round((offset + (entry.stamp - run_start).total_seconds()) / 3600, 5)}
        for key, column in _FIELDS.items():
            if key in entry.stats and not (split == "valid" and key == "wps"):  # validation's own speed
                point[column] = float(entry.stats[key])
        points.append(point)
    return points


def loss_curve(log_path: Path) -> dict:
    """The loss in bits of a fairseq-train log as results.json keeps it: ``{"train": [[update, loss], ...],
    "valid": [[update, loss, nll_loss], ...]}`` (train: the mean over --log-interval); empty for no log."""
    try:
        points = parse(Path(log_path).read_text(encoding="utf-8", errors="replace").splitlines())
    except OSError:
        points = []
    return {"train": [[p["update"], p["loss"]] for p in points if p["split"] == "train" and "loss" in p],
            "valid": [[p["update"], p["loss"], p.get("nll_loss")] for p in points
                      if p["split"] == "valid" and "loss" in p]}


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


def write(log_path: Path, out_dir: Path, title: str = "", png: bool = True) -> Optional[List[dict]]:
    """``out_dir/curves.csv`` and (``png``) ``curves.png`` (where matplotlib imports) from the fairseq-train
    log ``log_path``; None if it has no point yet."""
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
        if png:
            plot(points, out_dir / "curves.png", title)
    except ImportError:
        pass  # the CSV holds the same numbers; the set-up (scripts/env.sh) installs matplotlib
    return points


class CurveWriter:
    """A ``tail`` filter for :meth:`Context.sh` around another (``tail``): at every validation line it rewrites
    the curves from ``log_path`` into ``out_dir`` (the PNG at most every :data:`PNG_SECONDS`: drawing it
    costs a CPU-second, and a small run validates every few seconds). As a context manager around the training
    (``final``: False with --dry-run) it writes them once more when the block ends, also when training failed,
    but not after Ctrl-C or SIGTERM (a signal that cut short ``import matplotlib`` would leave it half-loaded)."""

    def __init__(self, log_path: Path, out_dir: Path, tail, title: str = "", final: bool = True):
        self.log_path, self.out_dir, self.tail, self.title = Path(log_path), Path(out_dir), tail, title
        self.final = final
        self.written, self.drawn = False, None  # drawn: time.monotonic() of the last PNG

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, traceback):
        if self.final and not (kind and issubclass(kind, KeyboardInterrupt)):
            self.finish()
        return False

    def __call__(self, line: str):
        echo = self.tail(line) if callable(self.tail) else False
        if read(line).tag == "valid":
            self.finish(png=self.drawn is None or time.monotonic() - self.drawn >= PNG_SECONDS)
        return echo_text(line) if echo is True else echo

    def finish(self, png: bool = True):
        if png:
            self.drawn = time.monotonic()
        if write(self.log_path, self.out_dir, self.title, png) and not self.written:
            log(f"training curves: {self.out_dir / 'curves.png'} and curves.csv (refreshed at each validation, the "
                "PNG at most every minute)")
            self.written = True


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not 1 <= len(argv) <= 2 or argv[0].startswith("-"):
        raise UsageError("usage: python -m attn_kit.fairseq_layer.curves FAIRSEQ_TRAIN_LOG [OUT_DIR]")
    log_path = Path(argv[0])
    out = Path(argv[1]) if len(argv) > 1 else log_path.parent
    if not log_path.is_file():
        raise UsageError(f"{log_path}: no such file")
    if write(log_path, out, log_path.name) is None:
        raise UsageError(f"{log_path}: no train_inner or valid lines with num_updates (fairseq-train "
                         "--log-format json)")
    print(f"wrote {out / 'curves.csv'} and {out / 'curves.png'}")


if __name__ == "__main__":
    main_guard(main)
