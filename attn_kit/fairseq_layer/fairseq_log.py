"""fairseq-train's log read back, in one place: the kit trains with ``--log-format json``, so each stats line is
``STAMP | INFO | TAG | {...}`` (TAG: train_inner, valid, train); :func:`read` parses one line for the curves,
:class:`TrainProgress` and :func:`train_log_summary`. A log in fairseq's ``simple`` format (older runs) gives no
curves and no tokens per update, and nothing fails.
"""
import json
import re
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \| ")
_STATS = re.compile(r"(?:\| |:)(\w+)(?: \| |:)(\{.*\})\s*$")  # "| INFO | valid | {...}" or "INFO:valid:{...}"
_LOADED = re.compile(r"Loaded checkpoint \S+ \(epoch \d+ @ (\d+) updates\)|No existing checkpoint found ")
_AT_UPDATE = re.compile(r"@ (\d+) updates")  # "Saved checkpoint ... (epoch 1 @ 712 updates, ...)", "Loaded ..."


# what of a fairseq command's output a stage echoes under its line (attn_kit.pipeline's Context.sh tail)
PROGRESS = ("| train_inner |", "| valid |", "| train |", "Translated", "BLEU", "Stopping training", "Loaded checkpoint",
            "done training")


def progress_line(line: str) -> bool:
    """Whether ``line`` of a fairseq command's output shows its progress or result (a ``tail`` for Context.sh)."""
    return any(word in line for word in PROGRESS)


@dataclass
class Entry:
    """One line of a training log: ``command`` (a ``$ `` line the recipe wrote: a new run starts), ``stamp``,
    ``loaded`` (the update training goes on from: 0 without a checkpoint), ``tag`` and ``stats`` (a JSON stats
    line, keys without fairseq's ``TAG_`` prefix, values as fairseq wrote them)."""
    command: bool = False
    stamp: Optional[datetime] = None
    loaded: Optional[int] = None
    tag: Optional[str] = None
    stats: Optional[dict] = None

    @property
    def update(self) -> Optional[int]:
        """The stats line's ``num_updates``."""
        value = (self.stats or {}).get("num_updates")
        return None if value is None else int(float(value))


def read(line: str) -> Entry:
    """What ``line`` of a fairseq-train log says (see :class:`Entry`)."""
    if line.startswith("$ "):
        return Entry(command=True)
    m = _STAMP.match(line)
    entry = Entry(stamp=datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S") if m else None)
    loaded = _LOADED.search(line)
    if loaded:
        entry.loaded = int(loaded.group(1) or 0)
        return entry
    found = _STATS.search(line)
    if found:
        try:
            raw = json.loads(found.group(2))
        except ValueError:
            return entry
        if isinstance(raw, dict):
            prefix = found.group(1) + "_"
            entry.tag = found.group(1)
            entry.stats = {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in raw.items()}
    return entry


def stats_lines(lines: Iterable[str], tag: str) -> Iterator[dict]:
    """The stats of the lines logged under ``tag``."""
    for line in lines:
        entry = read(line)
        if entry.tag == tag:
            yield entry.stats


def simple_form(entry: Entry) -> str:
    """A stats line as fairseq's ``simple`` format words it (what the recipes echo), without its time stamp or
    a train_inner line's position in the epoch."""
    stats = dict(entry.stats)
    epoch = stats.pop("epoch", None)
    stats.pop("update", None)
    head = f"epoch {epoch:03d}" if isinstance(epoch, int) else ""
    if entry.tag == "train_inner":
        return f"{head}: " + ", ".join(f"{k}={v}" for k, v in stats.items())
    if entry.tag != "train":
        head += (" | " if head else "") + f"valid on '{entry.tag}' subset"
    return " | ".join([head, *(f"{k} {v}" for k, v in stats.items())])


def echo_text(line: str) -> str:
    """``line`` as the recipes echo it: a stats line in :func:`simple_form` after its head, others as they are."""
    entry = read(line)
    if entry.stats is None:
        return line
    head = _STATS.search(line)
    return line[:head.start()].rstrip() + f" | {entry.tag} | " + simple_form(entry)


class TrainProgress:
    """A ``tail`` filter for :meth:`attn_kit.pipeline.stages.Context.sh` on fairseq-train: echoes validation
    and end-of-training lines, and for each train_inner line ``updates done/total, s/update, ETA`` from the rate
    since this run's first such line. With a time budget (``minutes``, --train-minutes) the ETA counts to
    whichever ends first; a budget that ends inside eq. 3's ``warmup`` gets one warning line as soon as the rate
    shows it."""

    def __init__(self, total: int, clock: Callable[[], float] = time.time, minutes: Optional[float] = None,
                 warmup: Optional[int] = None):
        self.total, self.clock, self.start = total, clock, None
        self.minutes, self.warmup, self.warned = minutes, warmup, False

    def __call__(self, line: str):
        entry = read(line)
        if entry.tag != "train_inner" or entry.update is None:
            if entry.tag == "valid":
                return echo_text(line)
            return any(k in line for k in ("Stopping training", "Loaded checkpoint", "done training"))
        done, now = entry.update, self.clock()
        if self.start is None:
            self.start = (now, done)
            print(f"    {done}/{self.total} updates", flush=True)
            return False
        t0, u0 = self.start
        rate = (now - t0) / max(1, done - u0)
        eta, note = max(0, self.total - done) * rate, ""
        if self.minutes is not None:
            spent = now - t0 + u0 * rate  # this run's first u0 updates at the same rate
            left = self.minutes * 60 - spent
            end = done + max(0.0, left) / rate
            if end < self.total:
                eta, note = max(0.0, left), f" (the {self.minutes:g}-minute budget ends first, near update {end:.0f})"
            if self.warmup and end < self.warmup and not self.warned:
                self.warned = True
                needed = (self.warmup - done) * rate + spent
                print(f"    warning: at {rate:.2f} s/update the {self.minutes:g}-minute budget ends near update "
                      f"{end:.0f}, inside the {self.warmup}-update warm-up (the learning rate still rising; the "
                      f"average will hold the final model alone): the warm-up alone takes about "
                      f"{needed / 60:.0f} minutes here; give more --train-minutes, or fewer --warmup-updates",
                      flush=True)
        print(f"    {done}/{self.total} updates, {rate:.2f} s/update, ETA {int(eta // 60)}m{int(eta % 60):02d}s"
              f"{note}", flush=True)
        return False


def train_log_summary(train_log: Path) -> dict:
    """From a fairseq-train log: ``updates`` (the last one reached) and ``tokens_per_update``, the mean real
    target (``wpb``) and source (``src_wpb``) tokens per update, each train_inner line weighted by the updates
    it covers (absent without JSON stats lines)."""
    try:
        text = Path(train_log).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {"updates": None}
    entries = [read(line) for line in text.splitlines()]
    last = _AT_UPDATE.findall(text) or [e.update for e in entries if e.update is not None]
    out = {"updates": int(last[-1]) if last else None}
    sums, weight, previous = {"tgt": 0.0, "src": 0.0}, 0, 0
    for entry in entries:
        if entry.tag != "train_inner" or entry.update is None or "wpb" not in entry.stats:
            continue
        n = entry.update
        w = n - previous if n > previous else 1
        previous = n
        sums["tgt"] += w * float(entry.stats["wpb"])
        sums["src"] += w * float(entry.stats.get("src_wpb", "nan"))
        weight += w
    if weight:
        out["tokens_per_update"] = {"target": round(sums["tgt"] / weight, 1),
                                    "source": None if sums["src"] != sums["src"] else round(sums["src"] / weight, 1),
                                    "updates_measured": weight}
    return out
