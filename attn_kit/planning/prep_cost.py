"""How long the WMT14 recipes' data stages take and how much memory they hold, projected from
the fits benchmarks/data_prep.py files in ``benchmarks/results/cpu2core_data_prep.json``; the
recipes' ``--dry-run``, docs/scaling.md's planning table and the benchmark all project through
:func:`project`, so every projection comes from the one file.

Per part (tokenize, sample, learn_bpe, apply_bpe, clean, binarize), CPU seconds (not wall time,
which other work on a shared machine changes) of the main process (serial) and of its workers
(parallel); on w workers ``serial + parallel / w`` (see :func:`part_seconds` for
fairseq-preprocess's main chunk). The parts that do the same work for every token (every part but
learning BPE, whose cost follows the sample's word types) are fitted as ``c + k * pairs`` with
c >= 0 (:data:`PER_TOKEN`): a power law fitted over 0.1-1M pairs gave them exponents as low as 0.37
and, for binarize on 16 cores, a negative serial term, far below their cost at WMT's millions of
pairs. Learning BPE and the memory peaks are fitted as ``a * pairs^b``. The pairs are the benchmark
corpus's, of newstest's lengths (:func:`fitted_words_per_pair` words each): a corpus of longer pairs
is projected as that many more of them (``words_scale``), as a range from the benchmark's length to
the corpus's estimated one until its size is known (:func:`recipe_lines`). The model in full:
docs/scaling.md.
"""
import json
import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..checkout import REPO

RESULTS = REPO / "benchmarks" / "results" / "cpu2core_data_prep.json"  # measured on the EN-DE-shaped corpus
PARTS = ("tokenize", "sample", "learn_bpe", "apply_bpe", "clean", "binarize")
# the parts that run in one process whatever --workers is (learn-joint-bpe-and-vocab's merges are
# one loop, but its reading and its pass over the text use --num-workers: measured, not assumed)
SERIAL = ("sample", "clean")
# the parts whose tool does a worker's share in its main process (fairseq-preprocess 0.12: the first
# chunk of every file, after its pool); the other tools' main processes only read, hand out and merge,
# and what the main process's CPU seemed to lose with more workers there was the noise of CPU time on
# a shared machine, not a share of the work
MAIN_CHUNK_PARTS = ("binarize",)
# the parts whose CPU time is per token: fitted linear with a floor (fit_linear), never sublinear
PER_TOKEN = ("tokenize", "sample", "apply_bpe", "clean", "binarize")


def fit_linear(points: Sequence[Tuple[float, float]]) -> Dict[str, float]:
    """``y = c + k * x`` through ``points`` (x, y) by least squares with c >= 0 and k >= 0 (through
    the origin when the free fit's c would be negative): ``{"c", "k"}``."""
    pts = [(x, y) for x, y in points if x > 0]
    if len({x for x, _ in pts}) < 2:
        raise ValueError("a linear fit needs two different x")
    n = len(pts)
    mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
    k = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    c = my - k * mx
    if c < 0 or k < 0:
        c, k = 0.0, max(0.0, sum(x * y for x, y in pts) / sum(x * x for x, _ in pts))
    return {"c": c, "k": k}


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
    """``fit`` at ``x``: ``c + k * x`` (:func:`fit_linear`) or ``a * x^b`` (:func:`fit_power`); 0 for
    no fit (a part with no such share)."""
    if not fit:
        return 0.0
    return fit["c"] + fit["k"] * x if "k" in fit else fit["a"] * x ** fit["b"]


def part_seconds(fits: dict, part: str, pairs: float, workers: int) -> float:
    """Seconds of ``part`` on ``pairs`` pairs with ``workers`` workers, a core each: serial +
    parallel / w, except that fairseq-preprocess binarizes the first of its w chunks in its main
    process after its pool, so that chunk (c / w, c = main_chunk_share x the part's CPU) counts
    twice on the critical path."""
    serial, parallel = power(fits["cpu_serial"].get(part), pairs), power(fits["cpu_parallel"].get(part), pairs)
    if workers == 1:
        return serial + parallel
    chunk = fits.get("main_chunk_share", {}).get(part, 0.0) * (serial + parallel)  # c
    own = chunk / fits["workers"]  # the main process's chunk when it was measured
    return serial - own + (parallel + own) / workers + chunk / workers


def part_peak_mb(fits: dict, part: str, pairs: float, workers: int) -> float:
    """Peak MB (PSS) of ``part``'s processes on ``pairs`` pairs with ``workers`` workers: the main
    process's, and the workers' as measured on the benchmark's workers, grown by the factor measured
    per doubling of the workers (``memory_workers_per_doubling``: their pages are shared in part, PSS
    counts each shared page once), else in proportion to the workers (the upper bound)."""
    growth = fits.get("memory_workers_per_doubling", {}).get(part)
    scale = workers / fits["workers"] if growth is None else growth ** math.log2(workers / fits["workers"])
    return power(fits["memory_main"].get(part), pairs) + power(fits["memory_workers"].get(part), pairs) * scale


def project(fits: dict, pairs: int, workers: int, bpe_learn_pairs: Optional[int] = None,
            legacy: bool = False, words_scale: float = 1.0) -> dict:
    """Seconds and peak MB of each part for ``pairs`` training pairs on ``workers`` workers, from
    ``fits`` (the results file's ``fits``): ``{"seconds": {part: s}, "peak_mb": {part: MB},
    "total_seconds", "peak_mb_max", "learn_pairs"}``. ``bpe_learn_pairs``: 0 or None learns on
    every pair. ``legacy``: the recipe before --bpe-learn-pairs (BPE learned on every pair, learn and
    apply-bpe in one process). ``words_scale``: the corpus's words per pair over the benchmark
    corpus's (:func:`fitted_words_per_pair`): the parts work per word (and learning BPE on the words
    of its sample), so a corpus of longer pairs counts as that many more of the benchmark's pairs."""
    learn_pairs = pairs if legacy or not bpe_learn_pairs else min(pairs, bpe_learn_pairs)
    seconds, peak = {}, {}
    for part in PARTS:
        measured = part in fits["cpu_serial"] or part in fits["cpu_parallel"]
        if not measured or (part == "sample" and learn_pairs >= pairs):
            continue
        n = (learn_pairs if part == "learn_bpe" else pairs) * words_scale
        w = 1 if part in SERIAL or (legacy and part in ("learn_bpe", "apply_bpe")) else workers
        seconds[part] = part_seconds(fits, part, n, w)
        peak[part] = part_peak_mb(fits, part, n, w)
    return {"seconds": seconds, "peak_mb": peak, "total_seconds": sum(seconds.values()),
            "peak_mb_max": max(peak.values()) if peak else None, "learn_pairs": learn_pairs}


def planning_table(fits: dict, pairs: dict, bpe_learn_pairs: int, cores=(2, 16),
                   fitted_words: Optional[float] = None, own: Optional[Dict[str, tuple]] = None) -> str:
    """The projections for ``pairs`` (name -> attn_kit.recipes.wmt14_data.Pair) on ``cores`` (workers =
    cores), the recipe before its speed-ups and now, as a markdown table (docs/scaling.md's, the benchmark's).
    ``fitted_words``: the benchmark corpus's words per pair; then each cell is a range, from the
    benchmark corpus's words per pair to the pair's (``Pair.words_per_pair``). ``own``: name ->
    (fits, fitted_words) of the pairs measured on a corpus of their own, used instead of ``fits``."""
    parts = ("tokenize", "sample", "learn_bpe", "apply_bpe", "clean", "binarize")
    lines = ["| pair | training pairs | cores | recipe | " + " | ".join(p.replace("_", " ") for p in parts)
             + " | all data stages | peak memory |", "|" + "---|" * (len(parts) + 6)]
    for name, pair in pairs.items():
        fit, words = (own or {}).get(name, (fits, fitted_words))
        scales = (1.0, pair.words_per_pair / words) if words else (1.0,)
        for n in cores:
            for legacy in (True, False):
                ps = [project(fit, pair.train_pairs, n, bpe_learn_pairs, legacy=legacy, words_scale=x)
                      for x in sorted(scales)]  # low to high: a corpus may have longer pairs than the pair's
                recipe = ("before: BPE learned on every pair; learn and apply in one process" if legacy else
                          f"now: BPE learned on {ps[0]['learn_pairs'] / 1e6:g}M sampled pairs; --workers {n}")
                cells = [span([minutes_text(p["seconds"][k]) for p in ps]) if k in ps[0]["seconds"] else "-"
                         for k in parts]
                lines.append(f"| {name.upper()} | {pair.train_pairs / 1e6:g}M | {n} | {recipe} | " + " | ".join(cells)
                             + f" | **{span([minutes_text(p['total_seconds']) for p in ps])}** | "
                             + span([f"{p['peak_mb_max'] / 1024:.1f}" for p in ps]) + " GB |")
    return "\n".join(lines)


def span(texts: Sequence[str]) -> str:
    """A value, or a range "low to high" of two that differ as printed."""
    return texts[0] if len(set(texts)) == 1 else " to ".join(texts)


def results_path(pair: str) -> Path:
    """The results file measured on ``pair``'s corpus shape (benchmarks/data_prep.py --pair)."""
    return RESULTS if pair == "en-de" else RESULTS.with_name(f"cpu2core_data_prep_{pair.replace('-', '_')}.json")


def results_for(pair: str) -> Path:
    """The file ``pair``'s projections read: its own corpus's where filed, else the EN-DE corpus's."""
    own = results_path(pair)
    return own if own.exists() else RESULTS


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


def fitted_words_per_pair(results: dict) -> Optional[float]:
    """Whitespace words per pair (both sides) of the benchmark's corpus at its largest size: the unit
    its fits are in (the corpus has newstest2013+2014 EN-DE's sentence lengths); None where the file
    does not record it."""
    counted = results["result"].get("corpus", {}).get("words_per_pair") or {}
    return counted.get(str(max(results["result"]["settings"]["sizes"])))


def machine_of(results: dict) -> str:
    """The machine a results file was measured on, with its CPU's clock and family/model/stepping
    where the file recorded them (/proc/cpuinfo), so that a user can place their own."""
    cpu = results.get("cpu") or {}
    return results["machine"] + (f" at {cpu['mhz']:.0f} MHz" if cpu.get("mhz") else "") + (
        f" (family/model/stepping {cpu['family_model_stepping']})" if cpu.get("family_model_stepping") else "")


def recipe_lines(pair: str, train_pairs: int, workers: int, bpe_learn_pairs: Optional[int],
                 path: Optional[Path] = None, words_per_pair: Optional[Tuple[float, str]] = None,
                 counted: bool = False) -> List[str]:
    """The recipe's --dry-run lines: the data stages of ``pair`` (``train_pairs`` training pairs)
    projected on this run's --workers and --bpe-learn-pairs. ``words_per_pair``: (words per pair of
    the corpus, where that number comes from). A range: from the benchmark corpus's own (news-shaped)
    words per pair, the low end, to ``words_per_pair``, the high end; ``counted``: the corpus's size is
    known, one projection at it."""
    path = Path(path or results_for(pair))
    results = load(path)
    name = path.relative_to(REPO) if Path(path).is_relative_to(REPO) else path
    if results is None:
        return [f"data preparation: no projection ({name} is not filed; benchmarks/data_prep.py makes it)"]
    fits, fitted = results["result"]["fits"], fitted_words_per_pair(results)
    corpus = results["result"].get("corpus", {})
    shape = f"{corpus.get('pair', 'en-de').upper()} newstest shapes" + (
        f", {corpus['long_share']:.0%} of pairs joined as crawled long lines" if corpus.get("long_share") else "")
    ends = [(1.0, f"{fitted:.1f} words per pair as the benchmark's corpus ({shape})" if fitted else
             f"the benchmark corpus's pairs ({shape})")]
    if words_per_pair and fitted:
        high = (words_per_pair[0] / fitted, f"{words_per_pair[0]:.1f} words per pair ({words_per_pair[1]})")
        ends = [high] if counted else [*ends, high]
    projections = [(project(fits, train_pairs, workers, bpe_learn_pairs, words_scale=scale), why)
                   for scale, why in sorted(ends, key=lambda end: end[0])]  # low to high
    first = projections[0][0]
    learn = ("every pair" if first["learn_pairs"] >= train_pairs else f"{first['learn_pairs']} sampled pairs")
    total = span([minutes_text(p["total_seconds"]) for p, _ in projections])
    parts = ", ".join(f"{part.replace('_', ' ')} " + span([minutes_text(p["seconds"][part]) for p, _ in projections])
                      for part in first["seconds"])
    memory = span([f"{p['peak_mb_max'] / 1024:.1f}" for p, _ in projections])
    machine = machine_of(results)
    return [f"data preparation, projected for WMT14 {pair} (~{train_pairs / 1e6:g}M pairs) on --workers {workers}, "
            f"BPE learned on {learn}: {total} ({parts}); peak memory {memory} GB",
            "  (" + "; ".join(("at " if len(projections) == 1 else ("low end at ", "high end at ")[i]) + why
                              for i, (_, why) in enumerate(projections)) + ")",
            f"  (fits of {name}, measured up to {max(results['result']['settings']['sizes']) / 1e6:g}M pairs on "
            f"{machine}, per word; another CPU differs; download and extraction not included)"]
