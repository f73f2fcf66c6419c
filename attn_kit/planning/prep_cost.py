"""How long the WMT14 recipes' data stages take and how much memory they hold, projected from the fits
benchmarks/data_prep.py files (:data:`RESULTS`; the calibration table holds what is read of them); the
recipes' --dry-run, docs/scaling.md's planning table and the benchmark all project through :func:`project`.
Per part, CPU seconds (not wall time, which other work on a shared machine changes) of the main process
(serial) and of its workers (parallel), per pair of the benchmark corpus (a corpus of longer pairs counts as
that many more: ``words_scale``); before them the download and extraction (:class:`Fetch`), and the disk
every stage's output takes (:func:`disk_bytes`). The model in full: docs/scaling.md.
"""
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..pipeline.download import read_json_or
from .step_model import calibration

# The results files the projections read: by name, what the calibration table holds of them ("data_prep",
# "data_extract"); a path is read itself (a benchmark's own)
RESULTS = Path("cpu2core_data_prep.json")  # measured on the EN-DE-shaped corpus
PARTS = ("tokenize", "sample", "learn_bpe", "apply_bpe", "clean", "binarize")
# the parts that run in one process whatever --workers is (learn-joint-bpe-and-vocab's reading and its pass
# over the text use --num-workers: measured, not assumed)
SERIAL = ("sample", "clean")
# the parts whose tool does a worker's share in its main process (fairseq-preprocess 0.12: the first chunk
# of every file, after its pool); the other tools' main processes only read, hand out and merge
MAIN_CHUNK_PARTS = ("binarize",)
# the parts whose CPU time is per token: fitted c + k * pairs with c >= 0 (fit_linear), never sublinear (a
# power law over 0.1-1M pairs gave them exponents as low as 0.37, far below their cost at WMT's millions of
# pairs); learning BPE (its cost follows the sample's word types) and the memory peaks: a * pairs^b (fit_power)
PER_TOKEN = ("tokenize", "sample", "apply_bpe", "clean", "binarize")

# ---- download, extraction and disk
EXTRACT_RESULTS = Path("cpu2core_amd_data_extract.json")  # benchmarks/data_extract.py
MB = 1 << 20  # rates are in MB of 2^20 bytes, as the download's own log counts them; disk in GB of 10^9
# Until a download has been measured in the data folder: an assumption (no WMT14 download has run where this
# was written), about what one HTTP stream from statmt.org gives
ASSUMED_DOWNLOAD_MB_S = 10.0
MIN_MEASURED_BYTES = 64 * MB  # less measured than this is mostly connection set-up: the assumption stands
# BPE tokens per Moses token of WMT14's text under the recipe's joint BPE (30000-35000 merges learned
# on 1M pairs): a range assumed, not measured (no WMT-sized corpus has been through the bpe stage here)
BPE_TOKENS_PER_TOKEN = (1.05, 1.35)
BPE_SPLIT_BYTES = 3  # "@@ ": what subword-nmt adds for each piece of a word but its last
TOKEN_BYTES = 2  # fairseq-preprocess stores a token as uint16 (a dictionary under 65500 entries)
INDEX_BYTES = 12  # fairseq's mmap index per sentence and side: its size (int32) and offset (int64)


def fit_linear(points: Sequence[Tuple[float, float]]) -> Dict[str, float]:
    """``y = c + k * x`` by least squares with c >= 0 and k >= 0 (through the origin when the free fit's c
    would be negative): ``{"c", "k"}``."""
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
    """``y = a * x^b``, least squares in log space: ``{"a", "b"}``."""
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
    """``fit`` at ``x`` (:func:`fit_linear` or :func:`fit_power`); 0 for no fit (a part with no such share)."""
    if not fit:
        return 0.0
    return fit["c"] + fit["k"] * x if "k" in fit else fit["a"] * x ** fit["b"]


def part_seconds(fits: dict, part: str, pairs: float, workers: int) -> float:
    """Seconds of ``part`` on ``workers`` workers, a core each: serial + parallel / w, except that
    fairseq-preprocess binarizes the first of its w chunks in its main process after its pool, so that
    chunk (c / w, c = main_chunk_share x the part's CPU) counts twice on the critical path."""
    serial, parallel = power(fits["cpu_serial"].get(part), pairs), power(fits["cpu_parallel"].get(part), pairs)
    if workers == 1:
        return serial + parallel
    chunk = fits.get("main_chunk_share", {}).get(part, 0.0) * (serial + parallel)  # c
    own = chunk / fits["workers"]  # the main process's chunk when it was measured
    return serial - own + (parallel + own) / workers + chunk / workers


def part_peak_mb(fits: dict, part: str, pairs: float, workers: int) -> float:
    """Peak MB (PSS) of ``part``'s processes: the main process's, and the workers' grown by the factor
    measured per doubling of the workers (``memory_workers_per_doubling``: their pages are shared in part),
    else in proportion to the workers (the upper bound)."""
    growth = fits.get("memory_workers_per_doubling", {}).get(part)
    scale = workers / fits["workers"] if growth is None else growth ** math.log2(workers / fits["workers"])
    return power(fits["memory_main"].get(part), pairs) + power(fits["memory_workers"].get(part), pairs) * scale


def project(fits: dict, pairs: int, workers: int, bpe_learn_pairs: Optional[int] = None,
            legacy: bool = False, words_scale: float = 1.0) -> dict:
    """``{"seconds": {part: s}, "peak_mb": {part: MB}, "total_seconds", "peak_mb_max", "learn_pairs"}`` for
    ``pairs`` training pairs on ``workers`` workers; ``bpe_learn_pairs`` 0 or None learns on every pair;
    ``legacy``: the recipe before --bpe-learn-pairs (BPE learned on every pair, learn and apply-bpe in one
    process); ``words_scale``: the corpus's words per pair over the benchmark corpus's."""
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


def span(texts: Sequence[str]) -> str:
    """A value, or a range "low to high" of two that differ as printed."""
    return texts[0] if len(set(texts)) == 1 else " to ".join(texts)


def spans(ps: Sequence[dict], before: float = 0.0) -> Tuple[Dict[str, str], str, str]:
    """Over projections ``ps`` (low to high), as :func:`span`: each part's time, the total's (with ``before``
    seconds added) and the peak memory's, in GB."""
    return ({part: span([minutes_text(p["seconds"][part]) for p in ps]) for part in ps[0]["seconds"]},
            span([minutes_text(p["total_seconds"] + before) for p in ps]),
            span([f"{p['peak_mb_max'] / 1024:.1f}" for p in ps]))


def results_path(pair: str) -> Path:
    """The results file measured on ``pair``'s corpus shape (benchmarks/data_prep.py --pair)."""
    return RESULTS if pair == "en-de" else RESULTS.with_name(f"cpu2core_data_prep_{pair.replace('-', '_')}.json")


def load(path: Optional[Path] = None) -> Optional[dict]:
    """A results file of benchmarks/data_prep.py or data_extract.py (default :data:`RESULTS`): as the
    calibration table holds it (by name), or the file at ``path`` itself; None when neither has it."""
    path = Path(path or RESULTS)
    if path == Path(path.name):  # a bare name: the calibration table's
        table = calibration()
        return table["data_prep"].get(path.name) or table["data_extract"].get(path.name)
    return read_json_or(path)


def _read(path: Path) -> Tuple[Optional[dict], str]:
    """A results file (:func:`load`) and how the dry run names it: the path it was filed at, as the
    calibration table says."""
    results = load(path)
    return results, (results or {}).get("source") or str(path)


def minutes_text(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def fitted_words_per_pair(results: dict) -> Optional[float]:
    """Whitespace words per pair (both sides) of the benchmark's corpus at its largest size, the unit its
    fits are in; None where the file does not record it."""
    counted = results["result"].get("corpus", {}).get("words_per_pair") or {}
    return counted.get(str(max(results["result"]["settings"]["sizes"])))


def machine_of(results: dict) -> str:
    """The machine a results file was measured on, with its CPU's clock and family/model/stepping where
    recorded (/proc/cpuinfo), so that a user can place their own."""
    cpu = results.get("cpu") or {}
    return results["machine"] + (f" at {cpu['mhz']:.0f} MHz" if cpu.get("mhz") else "") + (
        f" (family/model/stepping {cpu['family_model_stepping']})" if cpu.get("family_model_stepping") else "")


def recipe_lines(pair: str, train_pairs: int, workers: int, bpe_learn_pairs: Optional[int],
                 path: Optional[Path] = None, words_per_pair: Optional[Tuple[float, str]] = None,
                 counted: bool = False, fetch: Optional["Fetch"] = None,
                 extract_path: Optional[Path] = None) -> List[str]:
    """The recipe's --dry-run lines: the data stages of ``pair`` projected on this run's --workers and
    --bpe-learn-pairs; a range from the benchmark corpus's words per pair to ``words_per_pair`` (that
    number, where it comes from), or one projection at it where the corpus is ``counted``. ``fetch``: the
    download and extraction before them, added to the time (:func:`fetch_lines`), and the disk."""
    own = results_path(pair)  # read where filed, else the EN-DE corpus's
    results, name = _read(Path(path or (own if load(own) is not None else RESULTS)))
    before, more = fetch_lines(fetch, bpe_learn_pairs or 0, extract_path) if fetch else ({}, [])
    if results is None:
        return [f"data preparation: no projection ({name} is not filed; benchmarks/data_prep.py makes it)", *more]
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
    learn = "every pair" if first["learn_pairs"] >= train_pairs else f"{first['learn_pairs']} sampled pairs"
    each, total, memory = spans([p for p, _ in projections], sum(before.values()))
    parts = ", ".join([f"{part} {minutes_text(s)}" for part, s in before.items()]
                      + [f"{part.replace('_', ' ')} {text}" for part, text in each.items()])
    left = ("" if "extract" in before else "extraction not included; ") if fetch else \
        "download and extraction not included; "
    return [f"data preparation, projected for WMT14 {pair} (~{train_pairs / 1e6:g}M pairs) on --workers {workers}, "
            f"BPE learned on {learn}: {total} ({parts}); peak memory {memory} GB",
            "  (" + "; ".join(("at " if len(projections) == 1 else ("low end at ", "high end at ")[i]) + why
                              for i, (_, why) in enumerate(projections)) + ")",
            f"  ({left}fits of {name}, measured up to {max(results['result']['settings']['sizes']) / 1e6:g}M pairs on "
            f"{machine_of(results)}, per word; another CPU differs)", *("  " + line for line in more)]


# ---------------------------------------------------------------------------------------------- fetch and disk
@dataclass
class Fetch:
    """What the download and extract stages handle for ``pair``, for their projection."""
    pair: str
    # (name, bytes, layout: "tgz" or "tar_of_gz", how the size is known: "" when published, else the basis)
    archives: List[Tuple[str, int, str, str]]
    text_bytes: float  # the training text they unpack to, and where its size comes from (text_basis)
    text_pairs: int
    text_basis: str
    mb_s: float  # the download rate, and where it comes from
    mb_s_basis: str
    clean: bool = True  # the bpe stage keeps a cleaned copy
    folder: str = ""  # the data folder and the bytes its files take now
    on_disk: int = 0

    @property
    def archive_bytes(self) -> int:
        return sum(size for _, size, _, _ in self.archives)


def download_rate(measured: Optional[Tuple[int, float, List[str]]], where: str = "the data folder") -> Tuple[float, str]:
    """(MB/s, why): ``measured`` ((bytes, seconds, hosts) of earlier downloads) from :data:`MIN_MEASURED_BYTES`
    on, else :data:`ASSUMED_DOWNLOAD_MB_S`."""
    if measured and measured[0] >= MIN_MEASURED_BYTES and measured[1] > 0:
        return (measured[0] / MB / measured[1],
                f"measured: {measured[0] / 1e9:.2f} GB downloaded from {', '.join(measured[2])} into {where}")
    return ASSUMED_DOWNLOAD_MB_S, ("assumed, not measured: the download stage records its rate in "
                                   f"{where} and later dry runs use it")


def extract_seconds(rates: Dict[str, float], fetch: Fetch) -> float:
    """CPU seconds of the extract stage: each archive hashed and unpacked at its layout's rate, then the
    training text joined (``rates``: MB per CPU second)."""
    unpack = sum(size / MB * (1 / rates["sha256"] + 1 / rates[f"extract_{layout}"])
                 for _, size, layout, _ in fetch.archives)
    return unpack + fetch.text_bytes / MB / rates["concatenate"]


def disk_bytes(fetch: Fetch, tokenized: Dict[str, float], learn_pairs: int) -> Dict[str, Tuple[float, float]]:
    """Bytes each stage's output takes, (low, high): the archives; their text twice (orig/, raw/);
    tokenized (``tokenized``'s growth and bytes per token, measured on newstest); BPE, with the learning
    sample of ``learn_pairs`` (0: none); clean-corpus-n's copy, at most the BPE text; binarized data."""
    pairs = fetch.text_pairs
    tok = fetch.text_bytes * tokenized["growth"]
    tokens = tok / tokenized["bytes_per_token"]  # Moses tokens, both sides, each with its space or line end
    bpe = [tok + BPE_SPLIT_BYTES * tokens * (r - 1) for r in BPE_TOKENS_PER_TOKEN]
    sample = tok * learn_pairs / pairs if 0 < learn_pairs < pairs else 0.0
    binarized = [TOKEN_BYTES * (tokens * r + 2 * pairs) + 2 * INDEX_BYTES * pairs for r in BPE_TOKENS_PER_TOKEN]
    out = {"downloads": (fetch.archive_bytes,) * 2, "extracted text (orig/, raw/)": (2 * fetch.text_bytes,) * 2,
           "tokenized (tok/)": (tok, tok), "BPE (bpe/, with its learning sample)": (bpe[0] + sample, bpe[1] + sample)}
    if fetch.clean:
        out["cleaned copy (prep/)"] = tuple(bpe)
    out["binarized (data-bin/)"] = tuple(binarized)
    return out


def gb_text(low: float, high: float) -> str:
    return span([f"{low / 1e9:.1f}", f"{high / 1e9:.1f}"]) + " GB"


def fetch_lines(fetch: Fetch, learn_pairs: int, path: Optional[Path] = None) -> Tuple[Dict[str, float], List[str]]:
    """({"download": s, "extract": s} of those projected, the dry run's lines on download, extraction and
    disk); extraction and disk read the rates of ``path`` (:data:`EXTRACT_RESULTS`)."""
    results, name = _read(Path(path or EXTRACT_RESULTS))
    estimated = [f"{n} ~{size / 1e6:.0f} MB ({why})" for n, size, _, why in fetch.archives if why]
    seconds = {"download": fetch.archive_bytes / MB / fetch.mb_s}
    lines = [f"download: {fetch.archive_bytes / 1e9:.2f} GB, {len(fetch.archives)} archives (sizes as published"
             + (f"; estimated: {', '.join(estimated)}" if estimated else "") + f") at {fetch.mb_s:.1f} MB/s "
             f"({fetch.mb_s_basis}): {minutes_text(seconds['download'])}"]
    if results is None:
        return seconds, lines + [f"extraction and disk: no projection ({name} is not filed; benchmarks/data_extract.py "
                                 "makes it)"]
    r = results["result"]
    rates = r["rates_mb_per_cpu_s"]
    seconds["extract"] = extract_seconds(rates, fetch)
    lines.append(f"extraction: each archive's sha256 checked ({rates['sha256']:.0f} MB/s) and unpacked (.tgz "
                 f"{rates['extract_tgz']:.0f} MB/s, .tar of .gz {rates['extract_tar_of_gz']:.0f} MB/s of archive), "
                 f"{fetch.text_bytes / 1e9:.2f} GB of text joined ({rates['concatenate']:.0f} MB/s): "
                 f"{minutes_text(seconds['extract'])} (CPU rates of {name}, on {machine_of(results)}; "
                 "a cold disk adds its reading)")
    t = r["tokenized"][fetch.pair]
    disk = disk_bytes(fetch, t, learn_pairs)
    total = [sum(v[i] for v in disk.values()) for i in (0, 1)]
    lines.append(f"disk: {gb_text(*total)} in {fetch.folder or 'the data folder'}: "
                 + ", ".join(f"{k} {gb_text(*v)}" for k, v in disk.items())
                 + (f"; {fetch.on_disk / 1e9:.1f} GB there now" if fetch.on_disk else ""))
    lines.append(f"  (disk from: the archives' sizes; {fetch.text_basis}; Moses tokenization x{t['growth']:.3f}, "
                 f"{t['bytes_per_token']:.2f} bytes a token (newstest, {name}); {BPE_TOKENS_PER_TOKEN[0]:g}-"
                 f"{BPE_TOKENS_PER_TOKEN[1]:g} BPE pieces a token (assumed); fairseq-preprocess {TOKEN_BYTES} bytes "
                 f"a token, {INDEX_BYTES} a sentence and side)")
    return seconds, lines
