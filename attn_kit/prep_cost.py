"""How long the WMT14 recipes' data stages take and how much memory they hold, projected
from the measurements of benchmarks/data_prep.py (attn_kit.bench.data_prep), which files
its fits in ``benchmarks/results/cpu2core_data_prep.json``; the recipes' ``--dry-run``,
README's planning table and the benchmark's own projections all read them through
:func:`project`, so every projection comes from the one file.

The model, per part of the data stages (``tokenize``, ``learn_bpe``, ``apply_bpe``, ``clean``,
``binarize``, and ``sample``, the pass that draws --bpe-learn-pairs pairs):

- time at the benchmark's worker count W: ``seconds = a * pairs^b``, a least-squares line
  through log seconds against log pairs (:func:`fit_power`);
- on w workers, Amdahl's law with the part's serial share s (the share of its one-worker time
  that one worker more did not shorten, measured at one size):
  ``seconds(w) = seconds(W) * (s + (1 - s) / w) / (s + (1 - s) / W)``;
- peak memory (the summed proportional set size of the stage's processes) at W workers:
  ``MB = a * pairs^b``, and on w workers ``MB(w) = MB(W) * (1 + r * (w - W))``, r the share
  of it one worker adds (measured at one size, as s);
- a part measured on w workers at every size (``learn_bpe@1``) has its own fits for w.

``learn_bpe`` runs on ``min(pairs, bpe_learn_pairs)`` pairs; ``sample`` runs only when that
is fewer than all. ``legacy=True`` projects the recipe as it was before --bpe-learn-pairs
(learn-joint-bpe-and-vocab on every pair in one process, apply-bpe fed on stdin, which
subword-nmt runs in one process whatever --num-workers says).
"""
import json
import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "cpu2core_data_prep.json"
PARTS = ("tokenize", "sample", "learn_bpe", "apply_bpe", "clean", "binarize")
# the parts that run one process whatever --workers is (learn-joint-bpe-and-vocab's merges are
# one loop, but its reading and its pass over the text use --num-workers: measured, not assumed)
SERIAL = ("sample", "clean")


def fit_power(points: Sequence[Tuple[float, float]]) -> Dict[str, float]:
    """``y = a * x^b`` through ``points`` (x, y), least squares in log space: ``{"a", "b"}``."""
    pts = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len(pts) < 2:
        raise ValueError("a power-law fit needs two points with x, y > 0")
    n = len(pts)
    mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx == 0:
        raise ValueError("a power-law fit needs two different x")
    b = sum((x - mx) * (y - my) for x, y in pts) / sxx
    return {"a": math.exp(my - b * mx), "b": b}


def power(fit: Dict[str, float], x: float) -> float:
    return fit["a"] * x ** fit["b"]


def serial_share(one: float, many: float, workers: int = 2) -> float:
    """Amdahl's serial share s from the seconds on one worker and on ``workers``:
    many = one * (s + (1 - s) / workers), kept in [0, 1] (noise can push it out)."""
    g = 1 / workers
    return min(1.0, max(0.0, (many / one - g) / (1 - g)))


def amdahl(seconds: float, share: float, measured_workers: int, workers: int) -> float:
    """``seconds`` measured on ``measured_workers`` workers, on ``workers``."""
    g = lambda w: share + (1 - share) / w  # noqa: E731
    return seconds * g(workers) / g(measured_workers)


def worker_share(one: float, many: float, workers: int = 2) -> float:
    """r, the share of the peak on ``workers`` workers that each worker beyond the first adds
    (MB(1) = MB(workers) * (1 + r * (1 - workers))), in [0, 1]."""
    if many <= 0 or workers < 2:
        return 0.0
    return min(1.0, max(0.0, (1 - one / many) / (workers - 1)))


def project(fits: dict, pairs: int, workers: int, bpe_learn_pairs: Optional[int] = None,
            legacy: bool = False) -> dict:
    """Seconds and peak MB of each part for ``pairs`` training pairs on ``workers`` workers,
    from ``fits`` (the results file's ``fits``): ``{"seconds": {part: s}, "peak_mb": {part: MB},
    "total_seconds", "peak_mb_max", "learn_pairs"}``. ``bpe_learn_pairs``: 0 or None learns on
    every pair. ``legacy``: the recipe before its speed-ups (see the module's docstring)."""
    W = fits["workers"]
    learn_pairs = pairs if legacy or not bpe_learn_pairs else min(pairs, bpe_learn_pairs)
    seconds, peak = {}, {}
    for part in PARTS:
        if part == "sample" and learn_pairs >= pairs:
            continue
        if part not in fits["time"]:
            continue
        n = learn_pairs if part == "learn_bpe" else pairs
        w = 1 if part in SERIAL or (legacy and part in ("learn_bpe", "apply_bpe")) else workers
        own = f"{part}@{w}"  # a part measured on w workers at every size has its own fit
        if own in fits["time"]:
            seconds[part] = power(fits["time"][own], n)
        else:
            seconds[part] = amdahl(power(fits["time"][part], n), fits["serial_share"].get(part, 1.0), W, w)
        memory = fits.get("memory", {})
        if own in memory:
            peak[part] = power(memory[own], n)
        elif part in memory:
            peak[part] = power(memory[part], n) * (1 + fits["worker_memory_share"].get(part, 0.0) * (w - W))
    return {"seconds": seconds, "peak_mb": peak, "total_seconds": sum(seconds.values()),
            "peak_mb_max": max(peak.values()) if peak else None, "learn_pairs": learn_pairs}


def load(path: Optional[Path] = None) -> Optional[dict]:
    """The results file of benchmarks/data_prep.py, or None when it is not filed."""
    try:
        return json.loads(Path(path or RESULTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def minutes_text(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def recipe_lines(pair: str, train_pairs: int, workers: int, bpe_learn_pairs: Optional[int],
                 path: Optional[Path] = None) -> List[str]:
    """The recipe's --dry-run lines: the data stages of ``pair`` (``train_pairs`` training pairs)
    projected on this run's --workers and --bpe-learn-pairs."""
    path = Path(path or RESULTS)
    results = load(path)
    name = path.relative_to(REPO) if Path(path).is_relative_to(REPO) else path
    if results is None:
        return [f"data preparation: no projection ({name} is not filed; benchmarks/data_prep.py makes it)"]
    p = project(results["result"]["fits"], train_pairs, workers, bpe_learn_pairs)
    parts = ", ".join(f"{part.replace('_', ' ')} {minutes_text(s)}" for part, s in p["seconds"].items())
    learn = ("every pair" if p["learn_pairs"] >= train_pairs else f"{p['learn_pairs']} sampled pairs")
    return [f"data preparation, projected for WMT14 {pair} (~{train_pairs / 1e6:g}M pairs) on --workers {workers}, "
            f"BPE learned on {learn}: {minutes_text(p['total_seconds'])} ({parts}); peak memory "
            f"{p['peak_mb_max'] / 1024:.1f} GB",
            f"  (fits of {name}, measured up to {max(results['result']['settings']['sizes']) / 1e6:g}M pairs on "
            f"{results['machine']}; download and extraction not included)"]
