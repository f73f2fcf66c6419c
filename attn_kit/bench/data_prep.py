"""The WMT14 recipes' data stages at growing corpus sizes: time and peak memory of every part,
fits of how each grows, and projections for WMT14 EN-DE and EN-FR.

    python benchmarks/data_prep.py                          # 30K, 100K, 300K, 1M pairs; --workers = CPUs
    python benchmarks/data_prep.py --sizes 2000,5000 --bpe-merges 2000 --out /tmp/small.json

What runs is the recipe's own code (attn_kit.recipes.wmt14's stages, built by
recipes/parallel.sh's argument parser on the benchmark's corpus), each stage in a fresh Python
process: ``tokenize`` (sacremoses normalization and tokenization, --workers processes),
``bpe`` (subword-nmt learn-joint-bpe-and-vocab, apply-bpe on every split, clean-corpus-n) and
``binarize`` (fairseq-preprocess --joined-dictionary), with the recipe's settings (35000
merges by default, --workers = CPUs, BPE learned on every pair: --bpe-learn-pairs 0). A
context around the recipe's steps times each part: tokenize, learn_bpe, apply_bpe, clean,
binarize. Besides, at every size: learn_bpe on one worker (what the recipe ran before it
passed --num-workers), and ``sample``, the --bpe-learn-pairs pass (a quarter of the pairs
drawn); at --reference-size, every stage on one worker too: Amdahl's serial share of each
part (attn_kit.prep_cost).

Peak memory: a thread in the stage's process reads /proc every 0.2 s and sums the
proportional set size (PSS: shared pages split between the processes that share them) and
the RSS of the process and all its descendants (pool workers, subword-nmt, fairseq-preprocess)
during each part; ``maxrss_mb`` is getrusage's peak of the largest single process of the stage
(RUSAGE_SELF and RUSAGE_CHILDREN of the fresh process).

The corpus is synthetic (attn_kit.bench.corpus: real newstest sentence shapes, words from
wordfreq's Zipfian lists, ``pip install wordfreq``), generated once with --seed into --scratch
(not the repository); its type/token growth is compared with the real newstest2013+2014 and
Tatoeba text (../shared/data) in the results file. The first N pairs of the largest size are
the corpus of size N. Every stage's load average (``os.getloadavg``) before and after is
recorded: on a shared machine other work slows the stages down.

Fits and projections: attn_kit.prep_cost (``seconds = a * pairs^b`` per part, Amdahl's law
for the workers), fitted from the second size on when there are three or more (the smallest is
measured and shown, but start-up costs that do not grow, fairseq-preprocess importing torch,
dominate it); ``--refit FILE`` fits a filed run's measurements again. Projections for WMT14 EN-DE (4.5M pairs) and EN-FR (36M) on 2 and 16 cores,
before the recipe's speed-ups (BPE learned on every pair in one process, apply-bpe in one
process) and after (--num-workers for both, BPE learned on --bpe-learn-pairs pairs).
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List

from ..cli import UsageError, UserError, add_force_option, check_output, log, write_json_atomic
from ..results import REPO, provenance
from .. import prep_cost
from . import corpus as C
from .harness import markdown_table

SHARED = REPO.parent / "shared" / "data"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "cpu2core_data_prep.json"
PARTIAL = REPO / "runs" / "benchmarks" / "data_prep.partial.json"  # the measurements so far
SIZES = (30000, 100000, 300000, 1000000)
HELD_OUT = 3000  # synthetic valid and test pairs (newstest's size)
PROJECTED_CORES = (2, 16)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default=",".join(map(str, SIZES)),
                   help=f"training pairs per measurement, comma-separated (default {','.join(map(str, SIZES))})")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="the recipe's --workers (default: this machine's CPUs)")
    p.add_argument("--bpe-merges", type=int, default=35000, help="joint BPE merges (default 35000, EN-DE's)")
    p.add_argument("--reference-size", type=int,
                   help="the size measured on one worker too, for each part's serial share (default: the "
                        "second size)")
    p.add_argument("--seed", type=int, default=1, help="the corpus's seed (default 1)")
    p.add_argument("--shapes", type=Path, nargs=2, metavar=("EN", "DE"),
                   help="sentence-shape text, two line-aligned files (default: newstest2013+2014 EN-DE from "
                        "../shared/data/wmt14/plain)")
    p.add_argument("--scratch", type=Path,
                   help="where the corpus and the stages' work directories go (default: a new folder in "
                        "$TMPDIR; removed at the end unless --keep)")
    p.add_argument("--keep", action="store_true", help="keep --scratch")
    p.add_argument("--refit", type=Path, metavar="FILE",
                   help="measure nothing: the fits, projections and table again from FILE's measurements (a "
                        f"results file of this benchmark, or {PARTIAL.relative_to(REPO)}, which the measurements "
                        "go to as they come), e.g. after a change of the recipe's default --bpe-learn-pairs")
    p.add_argument("--out", type=Path, help=f"JSON results (default {DEFAULT_OUT.relative_to(REPO)})")
    add_force_option(p, "an --out file")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # one stage, in a fresh process
    args = p.parse_args(argv)
    if args.child:
        return args
    if args.refit:
        saved = json.loads(args.refit.read_text())
        args.saved = saved
        for key, value in saved["result"]["settings"].items():
            setattr(args, key, value)
        args.out = check_output(args.out or DEFAULT_OUT, "--out", args.force or args.out is None
                                and args.refit.resolve() == DEFAULT_OUT.resolve())
        return args
    try:
        args.sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    except ValueError:
        raise UsageError(f"--sizes {args.sizes!r}: give pair counts, e.g. 30000,100000") from None
    if len(args.sizes) < 2 or args.sizes[0] < 100:
        raise UsageError("--sizes: at least two sizes of >= 100 pairs (a fit needs two)")
    args.reference_size = args.reference_size or args.sizes[1]
    if args.reference_size not in args.sizes:
        raise UsageError(f"--reference-size {args.reference_size} is not one of --sizes")
    if args.workers < 2:
        raise UsageError("--workers must be >= 2 (a serial share needs one worker and more)")
    if args.shapes is None:
        plain = SHARED / "wmt14" / "plain"
        args.shapes = [plain / f"newstest{y}.en-de.{l}" for l in ("en", "de") for y in (2013, 2014)]
    else:
        args.shapes = [args.shapes[0], args.shapes[1]]
    for path in args.shapes:
        if not Path(path).exists():
            raise UserError(f"{path}: no such file (the sentence shapes; give --shapes EN DE)")
    args.out = check_output(args.out or DEFAULT_OUT, "--out", args.force)
    return args


# ---------------------------------------------------------------------------------------------- one stage
def _descendants(root: int) -> List[int]:
    children: Dict[int, List[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def _memory(pid: int):
    """(RSS, PSS) of ``pid`` in kB, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            rss = pss = 0
            for line in f:
                if line.startswith(b"Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith(b"Pss:"):
                    pss = int(line.split()[1])
            return rss, pss
    except (OSError, ValueError):
        return None


class Sampler(threading.Thread):
    """Peak memory of this process and its descendants, per part (:attr:`part` names the running one)."""

    def __init__(self, interval: float = 0.2):
        super().__init__(daemon=True)
        self.interval, self.part, self.peaks, self._done = interval, "other", {}, threading.Event()

    def run(self):
        me = os.getpid()
        while not self._done.is_set():
            self.sample(me)
            self._done.wait(self.interval)

    def sample(self, me: int):
        rss = pss = biggest = n = 0
        for pid in _descendants(me):
            m = _memory(pid)
            if m:
                rss, pss, biggest, n = rss + m[0], pss + m[1], max(biggest, m[0]), n + 1
        peak = self.peaks.setdefault(self.part, {"pss_mb": 0.0, "rss_mb": 0.0, "largest_process_rss_mb": 0.0,
                                                 "processes": 0})
        peak["pss_mb"] = max(peak["pss_mb"], pss / 1024)
        peak["rss_mb"] = max(peak["rss_mb"], rss / 1024)
        peak["largest_process_rss_mb"] = max(peak["largest_process_rss_mb"], biggest / 1024)
        peak["processes"] = max(peak["processes"], n)

    def stop(self):
        self._done.set()
        self.join()


def part_of_step(description: str) -> str:
    if "sacremoses" in description:
        return "tokenize"
    if "--bpe-learn-pairs" in description:
        return "sample"
    if description.startswith(("clean-corpus-n", "copy ")):
        return "clean"
    return "other"


def part_of_command(cmd: List[str]) -> str:
    if "learn-joint-bpe-and-vocab" in cmd:
        return "learn_bpe"
    if "apply-bpe" in cmd:
        return "apply_bpe"
    if cmd and cmd[0].endswith("fairseq-preprocess"):
        return "binarize"
    return "other"


def timing_context(workdir: Path, stage: str, sampler: Sampler):
    """The recipe's :class:`attn_kit.pipeline.stages.Context`, timing each command and step by part."""
    from ..pipeline.stages import Context

    class Timing(Context):
        def timed(self, part: str, fn, *args, **kwargs):
            sampler.part = part
            sampler.sample(os.getpid())
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.part_seconds[part] = self.part_seconds.get(part, 0.0) + time.perf_counter() - t0
                sampler.sample(os.getpid())
                sampler.part = "other"

        def sh(self, cmd, *args, **kwargs):
            return self.timed(part_of_command([str(c) for c in cmd]), super().sh, cmd, *args, **kwargs)

        def step(self, description, fn, *args, **kwargs):
            return self.timed(part_of_step(description), super().step, description, fn, *args, **kwargs)

    ctx = Timing(workdir, dry_run=False, stage=stage)
    ctx.part_seconds = {}
    return ctx


def run_child(spec_path: Path):
    """One measurement, in this (fresh) process: ``spec["what"]`` is a stage of the recipe
    (tokenize, bpe, binarize), ``learn`` (learn-joint-bpe-and-vocab alone) or ``sample``."""
    spec = json.loads(spec_path.read_text())
    from ..recipes import parallel, wmt14

    args = parallel.parse_args(spec["argv"])
    stages = {s.name: s for s in wmt14.stages(args)}
    sampler = Sampler()
    sampler.start()
    ctx = timing_context(args.workdir, spec["what"], sampler)
    t0 = time.perf_counter()
    what = spec["what"]
    if what in stages:
        stages[what].run(ctx)
    else:
        tok = Path(stages["bpe"].inputs[0]).parent
        bpe = Path(stages["bpe"].outputs[0]).parent
        bpe.mkdir(parents=True, exist_ok=True)
        train = [tok / f"train.{lang}" for lang in ("en", "de")]
        if what == "learn":
            with ctx.output(bpe / "codes-learn") as codes:
                ctx.sh(wmt14.learn_bpe_command(train, codes, [bpe / "vocab-learn.en", bpe / "vocab-learn.de"],
                                               args.bpe_merges, args.workers))
        elif what == "sample":
            from ..pipeline.text import sample_pairs

            ctx.step("sample (--bpe-learn-pairs)", sample_pairs, *train,
                     bpe / "learn-sample.en", bpe / "learn-sample.de", spec["sample_pairs"], wmt14.BPE_SAMPLE_SEED)
    seconds = time.perf_counter() - t0
    sampler.stop()
    maxrss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                 resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    parts = {part: {"seconds": round(s, 3), **{k: round(v, 1) for k, v in sampler.peaks.get(part, {}).items()}}
             for part, s in ctx.part_seconds.items()}
    write_json_atomic(Path(spec["result"]), {"seconds": round(seconds, 2), "maxrss_mb": round(maxrss, 1),
                                             "parts": parts})


# ---------------------------------------------------------------------------------------------- the benchmark
def load_average() -> List[float]:
    return [round(x, 2) for x in os.getloadavg()]


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return f"load average: {', '.join(map(str, load_average()))}"


def make_corpus(args, folder: Path) -> dict:
    """The synthetic corpus (train: the largest size; valid, test: HELD_OUT pairs each) and its check."""
    shapes = C.read_shapes(args.shapes[0], args.shapes[2]) + C.read_shapes(args.shapes[1], args.shapes[3]) \
        if len(args.shapes) == 4 else C.read_shapes(*args.shapes)
    vocab = (C.wordfreq_vocabulary("en"), C.wordfreq_vocabulary("de"))
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for name, n, seed in (("train", max(args.sizes), args.seed), ("valid", HELD_OUT, args.seed + 1),
                          ("test", HELD_OUT, args.seed + 2)):
        C.write_corpus(C.generate(shapes, vocab, n, seed), folder / f"{name}.en", folder / f"{name}.de")
    log(f"corpus: {max(args.sizes)} training pairs in {time.perf_counter() - t0:.0f} s ({folder})")
    return {"shapes": [str(p) for p in args.shapes], "shape_pairs": len(shapes), "seed": args.seed,
            "wordfreq": C.wordfreq_version(), "burstiness": C.BURSTINESS, "document_sentences": C.DOCUMENT,
            "tail": {"en": round(vocab[0].tail, 5), "de": round(vocab[1].tail, 5)},
            "list_words": {"en": len(vocab[0].words), "de": len(vocab[1].words)},
            "method": C.__doc__}


def corpus_check(args, folder: Path) -> dict:
    """Types against tokens (Heaps' law) of the synthetic corpus and the real newstest and Tatoeba text."""
    def lines(*paths):
        for path in paths:
            with open(path, encoding="utf-8") as f:
                yield from f

    texts = {}
    for i, lang in enumerate(("en", "de")):
        texts[f"synthetic {lang}"] = lambda lang=lang: lines(folder / f"train.{lang}")
        news = [SHARED / "wmt14" / "plain" / f"newstest{y}.en-de.{lang}" for y in (2013, 2014)]
        if all(p.exists() for p in news):
            texts[f"newstest2013+2014 {lang}"] = lambda news=news: lines(*news)
        tatoeba = SHARED / "tatoeba" / "deu-eng.txt"
        if tatoeba.exists():
            texts[f"Tatoeba {lang}"] = lambda i=i: (line.split("\t")[i] for line in lines(tatoeba))
    growth = {name: C.type_growth(make()) for name, make in texts.items()}
    heaps = {name: {k: round(v, 4) for k, v in C.heaps_fit(g).items()} for name, g in growth.items()}
    compared = {}
    for lang in ("en", "de"):
        syn = growth[f"synthetic {lang}"]
        for real in (f"newstest2013+2014 {lang}", f"Tatoeba {lang}"):
            if real not in growth:
                continue
            tokens, types = growth[real][-1]
            at = C.types_at(syn, tokens)
            small = C.heaps_fit([p for p in syn if p[0] <= tokens])
            compared[f"synthetic / {real}"] = {
                "tokens": tokens, "real_types": types, "synthetic_types": round(at) if at else None,
                "ratio": round(at / types, 3) if at else None, "real_beta": heaps[real]["beta"],
                "synthetic_beta_same_range": round(small["beta"], 4)}
    return {"growth": {k: [list(p) for p in v] for k, v in growth.items()}, "heaps": heaps,
            "compared_at_real_size": compared,
            "tokens": "\\w+ runs, case kept (the same count for every text)"}


def recipe_argv(args, corpus: Path, workdir: Path, workers: int) -> List[str]:
    return ["--src", "en", "--tgt", "de", *(x for split in ("train", "valid", "test")
                                               for x in (f"--{split}", str(corpus / split))),
            "--workdir", str(workdir), "--workers", str(workers), "--bpe-merges", str(args.bpe_merges),
            "--bpe-learn-pairs", "0", "--ngpus", "0"]


def lay_out(args, corpus: Path, workdir: Path, n: int):
    """The recipe's raw text of ``n`` training pairs where its tokenize stage reads it."""
    from ..recipes import parallel, wmt14

    rargs = parallel.parse_args(recipe_argv(args, corpus, workdir, args.workers))
    raw = {Path(p).name: Path(p) for p in next(s for s in wmt14.stages(rargs) if s.name == "tokenize").inputs}
    for name, path in raw.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        split = name.split(".")[0]
        with open(corpus / name, "rb") as fin, open(path, "wb") as fout:
            for i, line in enumerate(fin):
                if split == "train" and i >= n:
                    break
                fout.write(line)


def measure(args, corpus: Path, workdir: Path, what: str, workers: int, n: int, **extra) -> dict:
    spec = workdir / f"spec.{what}.{workers}.json"
    result = workdir / f"result.{what}.{workers}.json"
    spec.write_text(json.dumps({"argv": recipe_argv(args, corpus, workdir, workers), "what": what,
                                "result": str(result), **extra}))
    before = load_average()
    log(f"{n} pairs, {what}, {workers} worker(s) (load {before[0]}) ...")
    with open(workdir / f"child.{what}.{workers}.log", "w") as out:
        rc = subprocess.run([sys.executable, "-m", "attn_kit.bench.data_prep", "--child", str(spec)], cwd=REPO,
                            stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        tail = (workdir / f"child.{what}.{workers}.log").read_text(errors="replace").strip().splitlines()[-3:]
        raise UserError(f"the {what} measurement at {n} pairs failed (exit {rc}): {' | '.join(tail)}")
    r = json.loads(result.read_text())
    r.update(pairs=n, workers=workers, what=what, load_before=before, load_after=load_average())
    log(f"  {r['seconds']:.1f} s: " + ", ".join(f"{p} {v['seconds']:.1f} s {v.get('pss_mb', 0):.0f} MB"
                                                 for p, v in r["parts"].items()))
    return r


def fits_of(args, runs: List[dict]) -> dict:
    """prep_cost's fits from the measurements (see attn_kit.prep_cost)."""
    W = args.workers

    def points(part, workers=None, key="seconds"):  # workers None: every run of the part (one-process parts)
        return [(r["pairs"], r["parts"][part][key]) for r in runs if part in r["parts"] and r["pairs"] >= fitted
                and r["parts"][part][key] > 0 and (workers is None or r["workers"] == workers)]

    def at(part, workers, n, key="seconds"):
        found = [r["parts"][part][key] for r in runs
                 if r["workers"] == workers and r["pairs"] == n and part in r["parts"]]
        return found[0] if found else None

    fitted = args.sizes[1] if len(args.sizes) > 2 else args.sizes[0]
    fits = {"workers": W, "fitted_from_pairs": fitted, "time": {}, "memory": {}, "serial_share": {},
            "worker_memory_share": {}}
    for part in prep_cost.PARTS:
        serial = part in prep_cost.SERIAL
        pts = points(part, None if serial else W)
        if len({n for n, _ in pts}) < 2 or len({n for n, _ in points(part, None if serial else W, "pss_mb")}) < 2:
            continue
        fits["time"][part] = prep_cost.fit_power(pts)
        fits["memory"][part] = prep_cost.fit_power(points(part, None if serial else W, "pss_mb"))
        if serial:
            fits["serial_share"][part], fits["worker_memory_share"][part] = 1.0, 0.0
            continue
        both = [n for n in args.sizes if at(part, 1, n) and at(part, W, n)]
        if both:
            n = max(both)  # the largest size measured on one worker and on W
            fits["serial_share"][part] = round(prep_cost.serial_share(at(part, 1, n), at(part, W, n), W), 4)
            fits["worker_memory_share"][part] = round(prep_cost.worker_share(
                at(part, 1, n, "pss_mb"), at(part, W, n, "pss_mb"), W), 4)
    ones = points("learn_bpe", 1)
    if len({n for n, _ in ones}) >= 2 and len({n for n, _ in points("learn_bpe", 1, "pss_mb")}) >= 2:
        fits["time"]["learn_bpe@1"] = prep_cost.fit_power(ones)
        fits["memory"]["learn_bpe@1"] = prep_cost.fit_power(points("learn_bpe", 1, "pss_mb"))
    for kind in ("time", "memory"):
        fits[kind] = {k: {"a": float(f"{v['a']:.6g}"), "b": round(v["b"], 4)} for k, v in fits[kind].items()}
    return fits


def projections(fits: dict) -> dict:
    """WMT14 EN-DE and EN-FR on 2 and 16 cores (workers = cores), before and after the speed-ups."""
    from ..recipes import config
    from ..recipes.wmt14_data import PAIRS

    default = config.settings("wmt14", "paper")["bpe_learn_pairs"]
    out = {"bpe_learn_pairs": default}
    for name, pair in PAIRS.items():
        for cores in PROJECTED_CORES:
            for when, legacy in (("before", True), ("after", False)):
                p = prep_cost.project(fits, pair.train_pairs, cores, default, legacy=legacy)
                out[f"{name} {cores} cores {when}"] = {
                    "pair": name, "train_pairs": pair.train_pairs, "cores": cores, "when": when,
                    "learn_pairs": p["learn_pairs"], "seconds": {k: round(v) for k, v in p["seconds"].items()},
                    "total_seconds": round(p["total_seconds"]), "peak_mb": {k: round(v) for k, v in p["peak_mb"].items()},
                    "peak_mb_max": round(p["peak_mb_max"])}
    return out


TABLE_PARTS = ("tokenize", "learn_bpe", "apply_bpe", "clean", "binarize")


def measured_table(runs: List[dict], workers: int) -> str:
    rows = []
    by_size: Dict[int, dict] = {}
    for r in runs:
        if r["workers"] == workers and r["what"] in ("tokenize", "bpe", "binarize"):
            by_size.setdefault(r["pairs"], {}).update(r["parts"])
            by_size[r["pairs"]].setdefault("_load", []).append(r["load_before"][0])
    for n, parts in sorted(by_size.items()):
        cells = [f"{parts[p]['seconds']:.1f} s, {parts[p]['pss_mb']:.0f} MB" if p in parts else "-"
                 for p in TABLE_PARTS]
        rows.append([f"{n:,}", *cells, f"{max(parts['_load']):.2f}"])
    return markdown_table(["pairs", *TABLE_PARTS, "load (1 min, highest)"], rows)


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        run_child(args.child)
        return 0
    if args.refit:
        saved = args.saved
        results = saved["result"]
        results["fits"] = fits_of(args, results["measurements"])
        results["projections"] = projections(results["fits"])
        refit = {k: v for k, v in provenance().items() if k != "machine"}
        out = {**saved, "refitted": refit, "result": results,
               "table": measured_table(results["measurements"], args.workers)}
        return report(args, out)
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="attn_data_prep_"))
    scratch.mkdir(parents=True, exist_ok=True)
    start_uptime = uptime()
    log(f"scratch: {scratch}; {start_uptime}")
    corpus = scratch / "corpus"
    settings = {"sizes": args.sizes, "workers": args.workers, "bpe_merges": args.bpe_merges,
                "reference_size": args.reference_size, "seed": args.seed}
    head = {"benchmark": "data_prep", **provenance(), "environment": environment()}
    try:
        about = make_corpus(args, corpus)
        about["check"] = corpus_check(args, corpus)
        runs = []
        for n in args.sizes:
            plan = [(args.workers, ("tokenize", "bpe", "binarize"))]
            if n == args.reference_size:
                plan.append((1, ("tokenize", "bpe", "binarize")))
            for workers, stages in plan:
                workdir = scratch / f"n{n}_w{workers}"
                lay_out(args, corpus, workdir, n)
                todo = [(what, workers, {}) for what in stages]
                if workers == args.workers:
                    todo += [("learn", 1, {})] if n != args.reference_size else []
                    todo += [("sample", 1, {"sample_pairs": max(1, n // 4)})]
                for what, w, extra in todo:
                    runs.append(measure(args, corpus, workdir, what, w, n, **extra))
                    PARTIAL.parent.mkdir(parents=True, exist_ok=True)
                    write_json_atomic(PARTIAL, {**head, "result": {"settings": settings, "uptime": {
                        "start": start_uptime}, "corpus": about, "measurements": runs}})
                shutil.rmtree(workdir)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    results = {"settings": settings, "uptime": {"start": start_uptime, "end": uptime()}, "corpus": about,
               "measurements": runs}
    results["fits"] = fits_of(args, runs)
    results["projections"] = projections(results["fits"])
    report(args, {**head, "result": results, "table": measured_table(runs, args.workers)})
    PARTIAL.unlink()
    return 0


def report(args, out: dict) -> int:
    write_json_atomic(args.out, out)
    r = out["result"]
    print(f"The WMT14 recipe's data stages on {out['environment']['cpu_count']} CPUs, --workers {args.workers}: "
          f"seconds and peak memory (PSS of all the stage's processes)\n")
    print(out["table"])
    print()
    print(projection_table(r["projections"]))
    print(f"\n{r['uptime']['start']}\n{r['uptime'].get('end', '')}\nwrote {args.out}")
    return 0


def projection_table(projected: dict) -> str:
    rows = []
    for key, p in projected.items():
        if not isinstance(p, dict):
            continue
        rows.append([p["pair"], f"{p['train_pairs'] / 1e6:g}M", p["cores"], p["when"],
                     *(prep_cost.minutes_text(p["seconds"][k]) if k in p["seconds"] else "-"
                       for k in ("tokenize", "sample", "learn_bpe", "apply_bpe", "clean", "binarize")),
                     f"**{prep_cost.minutes_text(p['total_seconds'])}**", f"{p['peak_mb_max'] / 1024:.1f} GB"])
    return markdown_table(["pair", "pairs", "cores", "recipe", "tokenize", "sample", "learn BPE", "apply BPE",
                           "clean", "binarize", "total", "peak memory"], rows)


def environment() -> dict:
    import platform
    from importlib.metadata import version

    env = {"python": platform.python_version(), "cpu_count": os.cpu_count()}
    for name in ("sacremoses", "subword-nmt", "fairseq-fixed", "wordfreq"):
        try:
            env[name] = version(name)
        except Exception:
            env[name] = None
    return env


if __name__ == "__main__":
    from ..cli import main_guard

    main_guard(main)
