"""How long the WMT14 recipes' data stages take and how much memory they hold, projected
from the measurements of benchmarks/data_prep.py (attn_kit.bench.data_prep), which files
its fits in ``benchmarks/results/cpu2core_data_prep.json``; the recipes' ``--dry-run``,
README's planning table and the benchmark's own projections all read them through
:func:`project`, so every projection comes from the one file.

The model, per part of the data stages (``tokenize``, ``learn_bpe``, ``apply_bpe``, ``clean``,
``binarize``, and ``sample``, the pass that draws --bpe-learn-pairs pairs), from CPU time
rather than wall time, so that other work on a shared machine does not enter the projection:

- ``serial``: the CPU seconds of the part's main process (the recipe's process for the steps
  it runs itself, the command's own process for subword-nmt and fairseq-preprocess), which
  one worker more does not shorten; ``parallel``: the CPU seconds of the worker processes
  (the rest). Each is fitted as ``a * pairs^b``, a least-squares line through log seconds
  against log pairs (:func:`fit_power`).
- On w workers with a core each: ``seconds(w) = serial + parallel / w``, except for work the
  main process shares with its workers: fairseq-preprocess 0.12 binarizes a file in a pool of
  w - 1 processes and *then* the first of its w chunks in its main process, so that chunk,
  c / w of the file's work c, counts twice on the critical path: ``seconds(w) = (serial - c/W)
  + (parallel + c/W) / w + c / w``, where ``c = main_chunk_share * (serial + parallel)`` and the
  share is measured by running the part with a second worker count (the main process's CPU
  falls by c (1/W - 1/W2)); only for :data:`MAIN_CHUNK_PARTS`. On one worker every part is its
  whole CPU time, serial + parallel.
- The workers' memory is projected as growing in proportion to their number, as if each worker
  held what one held on W workers; it grew 1.4-1.6x from 2 to 4 workers at 100K pairs (a worker's
  share of the text, and of the types it caches, shrinks), so the projection errs high.
- Peak memory (proportional set size, PSS, at the sample where the stage's processes held the
  most): ``main + workers * w / W``, each fitted the same way, W the benchmark's --workers.

``learn_bpe`` runs on ``min(pairs, bpe_learn_pairs)`` pairs; ``sample`` runs only when that
is fewer than all. ``legacy=True`` projects the recipe as it was before --bpe-learn-pairs:
learn-joint-bpe-and-vocab on every pair in one process, and the ``subword-nmt apply-bpe``
command, which runs in one process whatever --num-workers says: their serial + parallel seconds.
"""
import json
import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple
from .checkout import REPO

RESULTS = REPO / "benchmarks" / "results" / "cpu2core_data_prep.json"
PARTS = ("tokenize", "sample", "learn_bpe", "apply_bpe", "clean", "binarize")
# the parts that run in one process whatever --workers is (learn-joint-bpe-and-vocab's merges are
# one loop, but its reading and its pass over the text use --num-workers: measured, not assumed)
SERIAL = ("sample", "clean")
# the parts whose tool does a worker's share in its main process (fairseq-preprocess 0.12: the first
# chunk of every file, after its pool); the other tools' main processes only read, hand out and merge,
# and what the main process's CPU seemed to lose with more workers there was the noise of CPU time on
# a shared machine (up to 15% between the runs on 2 and 4 workers), not a share of the work
MAIN_CHUNK_PARTS = ("binarize",)


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


def power(fit: Optional[Dict[str, float]], x: float) -> float:
    """``a * x^b`` of ``fit``; 0 for no fit (a part with no such share)."""
    return fit["a"] * x ** fit["b"] if fit else 0.0


def part_seconds(fits: dict, part: str, pairs: float, workers: int) -> float:
    """Seconds of ``part`` on ``pairs`` pairs with ``workers`` workers, a core each."""
    serial, parallel = power(fits["cpu_serial"].get(part), pairs), power(fits["cpu_parallel"].get(part), pairs)
    if workers == 1:
        return serial + parallel
    chunk = fits.get("main_chunk_share", {}).get(part, 0.0) * (serial + parallel)  # c
    own = chunk / fits["workers"]  # the main process's chunk when it was measured
    return serial - own + (parallel + own) / workers + chunk / workers


def part_peak_mb(fits: dict, part: str, pairs: float, workers: int) -> float:
    """Peak MB (PSS) of ``part``'s processes on ``pairs`` pairs with ``workers`` workers."""
    return (power(fits["memory_main"].get(part), pairs)
            + power(fits["memory_workers"].get(part), pairs) * workers / fits["workers"])


def project(fits: dict, pairs: int, workers: int, bpe_learn_pairs: Optional[int] = None,
            legacy: bool = False) -> dict:
    """Seconds and peak MB of each part for ``pairs`` training pairs on ``workers`` workers, from
    ``fits`` (the results file's ``fits``): ``{"seconds": {part: s}, "peak_mb": {part: MB},
    "total_seconds", "peak_mb_max", "learn_pairs"}``. ``bpe_learn_pairs``: 0 or None learns on
    every pair. ``legacy``: the recipe before its speed-ups (see the module's docstring)."""
    learn_pairs = pairs if legacy or not bpe_learn_pairs else min(pairs, bpe_learn_pairs)
    seconds, peak = {}, {}
    for part in PARTS:
        measured = part in fits["cpu_serial"] or part in fits["cpu_parallel"]
        if not measured or (part == "sample" and learn_pairs >= pairs):
            continue
        n = learn_pairs if part == "learn_bpe" else pairs
        w = 1 if part in SERIAL or (legacy and part in ("learn_bpe", "apply_bpe")) else workers
        seconds[part] = part_seconds(fits, part, n, w)
        peak[part] = part_peak_mb(fits, part, n, w)
    return {"seconds": seconds, "peak_mb": peak, "total_seconds": sum(seconds.values()),
            "peak_mb_max": max(peak.values()) if peak else None, "learn_pairs": learn_pairs}


def planning_table(fits: dict, pairs: dict, bpe_learn_pairs: int, cores=(2, 16)) -> str:
    """The projections for ``pairs`` (name -> attn_kit.recipes.wmt14_data.Pair) on ``cores`` (workers =
    cores), the recipe before its speed-ups and now, as a markdown table (README's, the benchmark's)."""
    parts = ("tokenize", "sample", "learn_bpe", "apply_bpe", "clean", "binarize")
    lines = ["| pair | training pairs | cores | recipe | " + " | ".join(p.replace("_", " ") for p in parts)
             + " | all data stages | peak memory |", "|" + "---|" * (len(parts) + 6)]
    for name, pair in pairs.items():
        for n in cores:
            for legacy in (True, False):
                p = project(fits, pair.train_pairs, n, bpe_learn_pairs, legacy=legacy)
                recipe = ("before: BPE learned on every pair; learn and apply in one process" if legacy else
                          f"now: BPE learned on {p['learn_pairs'] / 1e6:g}M sampled pairs; --workers {n}")
                cells = [prep_cost_cell(p, k) for k in parts]
                lines.append(f"| {name.upper()} | {pair.train_pairs / 1e6:g}M | {n} | {recipe} | " + " | ".join(cells)
                             + f" | **{minutes_text(p['total_seconds'])}** | {p['peak_mb_max'] / 1024:.1f} GB |")
    return "\n".join(lines)


def prep_cost_cell(p: dict, part: str) -> str:
    return minutes_text(p["seconds"][part]) if part in p["seconds"] else "-"


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
