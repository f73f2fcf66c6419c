"""The WMT14 recipes' data stages at growing corpus sizes: time and peak memory of every part, fits of how each
grows, and projections for WMT14 EN-DE and EN-FR.

    python benchmarks/data_prep.py                          # 30K, 100K, 300K, 1M pairs; --workers = CPUs
    python benchmarks/data_prep.py --sizes 2000,5000 --bpe-merges 2000 --output /tmp/small.json

What runs is the recipe's own code (attn_kit.recipes.translation's stages, built by recipes/parallel.sh's parser),
each stage in a fresh process with the recipe's settings (35000 merges by default, --workers = CPUs, BPE learned on
every pair: --bpe-learn-pairs 0): ``tokenize`` (sacremoses, --workers processes), ``bpe`` (subword-nmt
learn-joint-bpe-and-vocab, apply-bpe on every split, clean-corpus-n), ``binarize`` (fairseq-preprocess
--joined-dictionary), and ``sample``, the --bpe-learn-pairs pass (a quarter of the pairs drawn). Each part
(tokenize, learn_bpe, apply_bpe, clean, binarize, sample) is measured in:

- wall seconds;
- CPU seconds of all its processes (getrusage of the stage's process and of the children it waited for) and of its
  main process (for a command, also the command's own process, read from /proc every 0.2 s): the rest is the
  workers'. The projections use CPU seconds, so that other work on a shared machine does not enter them;
- peak memory: the proportional set size (PSS: shared pages split between their processes) of the process and all
  its descendants, read from /proc every 0.2 s, split into the main processes and the workers at the largest sum;
  ``maxrss_mb`` is getrusage's peak of the largest single process of the stage.

The corpus is synthetic (lab.bench.corpus: real newstest sentence shapes of --pair, words from wordfreq's Zipfian
lists, ``pip install wordfreq``), generated once with --seed into --scratch; its type/token growth is compared with
the real newstest2013+2014 and Tatoeba text of the pair (../shared/data) in the results file. ``--long-share`` and
``--noise`` add crawled text (corpus.generate, step 6): by default as many long pairs as give the WMT14 training
text's words per pair (attn_kit.recipes.wmt14_data), and an assumed 2% of their words noise (no crawl sample is at
hand to measure it). The first N pairs of the largest size are the corpus of size N. Every stage's load average
before and after is recorded, and ``uptime`` at the start and the end.

Fits and projections: attn_kit.planning.prep_cost (on w workers serial + parallel / w), fitted from the second size
on when there are three or more (start-up costs that do not grow, fairseq-preprocess importing torch, dominate the
smallest); ``--refit FILE`` fits a filed run's measurements again. Projections for WMT14 EN-DE (4.5M pairs) and
EN-FR (36M) on 2 and 16 cores, before the recipe's speed-ups (BPE learned on every pair, apply-bpe, in one process)
and after; beside them, the projection for --workers at each measured size against its measured wall time, which
says how much the machine's other work stretched the measurements.
"""
import argparse
import itertools
import json
import math
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from attn_kit.cli import (ArgumentParser, Number, UsageError, UserError, add_force_option, add_output_option,
                          check_output, log, main_guard, write_json_atomic)
from attn_kit.checkout import REPO
from attn_kit.results import provenance
from attn_kit.planning import prep_cost
from attn_kit.planning.prep_cost import PARTS
from attn_kit.pipeline.process import cpu_ticks, descendants
from attn_kit.pipeline.stages import Context
from attn_kit.pipeline.text import sample_pairs
from attn_kit.recipes import config, parallel, translation
from attn_kit.recipes.wmt14_data import PAIRS
from . import corpus as C
from .harness import markdown_table
from ..calibration import RESULTS

SHARED = REPO.parent / "shared" / "data"
DEFAULT_OUT = RESULTS / prep_cost.RESULTS.name  # EN-DE's; --pair en-fr: prep_cost.results_path's name
TATOEBA = {"de": "deu-eng.txt", "fr": "fra-eng.txt"}  # ../shared/data/tatoeba: English<TAB>other
NOISE = 0.02  # of a long pair's words (an assumption: no crawled sample here to measure it on)
PARTIAL = REPO / "runs" / "benchmarks" / "data_prep.partial.json"  # the measurements so far
SIZES = (30000, 100000, 300000, 1000000)
HELD_OUT = 3000  # synthetic valid and test pairs (newstest's size)
PROJECTED_CORES = (2, 16)


def planning_table(fits: dict, pairs: dict, bpe_learn_pairs: int, cores=(2, 16),
                   fitted_words: Optional[float] = None, own: Optional[Dict[str, tuple]] = None) -> str:
    """The projections for ``pairs`` (name -> wmt14_data.Pair) on ``cores`` (workers = cores), the recipe
    before its speed-ups and now, as docs/scaling.md's markdown table. ``fitted_words``: the benchmark
    corpus's words per pair; then each cell is a range, from it to the pair's. ``own``: name -> (fits,
    fitted_words) of the pairs measured on a corpus of their own, used instead of ``fits``."""
    lines = ["| pair | training pairs | cores | recipe | " + " | ".join(p.replace("_", " ") for p in PARTS)
             + " | all data stages | peak memory |", "|" + "---|" * (len(PARTS) + 6)]
    for name, pair in pairs.items():
        fit, words = (own or {}).get(name, (fits, fitted_words))
        scales = (1.0, pair.words_per_pair / words) if words else (1.0,)
        for n in cores:
            for legacy in (True, False):
                ps = [prep_cost.project(fit, pair.train_pairs, n, bpe_learn_pairs, legacy=legacy, words_scale=x)
                      for x in sorted(scales)]  # low to high: a corpus may have longer pairs than the pair's
                recipe = ("before: BPE learned on every pair; learn and apply in one process" if legacy else
                          f"now: BPE learned on {ps[0]['learn_pairs'] / 1e6:g}M sampled pairs; --workers {n}")
                parts, total, memory = prep_cost.spans(ps)
                lines.append(f"| {name.upper()} | {pair.train_pairs / 1e6:g}M | {n} | {recipe} | "
                             + " | ".join(parts.get(k, "-") for k in PARTS) + f" | **{total}** | {memory} GB |")
    return "\n".join(lines)


def long_share_for(shapes, pair: str) -> float:
    """The share of joined (two-sentence) pairs that gives the corpus the WMT14 training text's words
    per pair: joining a share x of pairs makes (1 + x) times the shapes' own words per pair."""
    own = sum(len(s) + len(t) for s, t in shapes) / len(shapes)
    return round(max(0.0, PAIRS[pair].words_per_pair / own - 1), 4)


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pair", choices=("en-de", "en-fr"), default="en-de",
                   help="the corpus's languages and shapes: newstest2013+2014 of the pair, the other language's "
                        "word list (default en-de; en-fr writes its own results file)")
    p.add_argument("--long-share", type=Number(float, minimum=0.0), default=None,
                   help="share of pairs that are two pairs joined, as crawled text's long lines (default: as many "
                        "as give the WMT14 training text's words per pair; 0: none, the corpus before this option)")
    p.add_argument("--noise", type=Number(float, minimum=0.0), default=NOISE,
                   help=f"share of a long pair's words that are random strings (default {NOISE}, an assumption)")
    p.add_argument("--check-only", action="store_true",
                   help="make the corpus and compare its type growth with the real text; measure nothing")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)),
                   help=f"training pairs per measurement, comma-separated (default {','.join(map(str, SIZES))})")
    p.add_argument("--workers", type=Number(int, minimum=1), default=os.cpu_count() or 1,
                   help="the recipe's --workers (default: this machine's CPUs)")
    p.add_argument("--bpe-merges", type=Number(int, minimum=1), default=35000,
                   help="joint BPE merges (default 35000, EN-DE's)")
    p.add_argument("--seed", type=Number(int, minimum=0), default=1, help="the corpus's seed (default 1)")
    p.add_argument("--shapes", type=Path, nargs=2, metavar=("EN", "OTHER"),
                   help="sentence-shape text, two line-aligned files (default: newstest2013+2014 of --pair from "
                        "../shared/data/wmt14/plain)")
    p.add_argument("--scratch", type=Path,
                   help="where the corpus and the stages' work directories go (default: a new folder in "
                        "$TMPDIR; removed at the end unless --keep)")
    p.add_argument("--keep", action="store_true", help="keep --scratch")
    p.add_argument("--more-workers", type=Number(int, minimum=1), metavar="N",
                   help="the stages once more at the second size on N workers (default 2 x --workers; 0: not): "
                        "how much of its work a tool's main process does itself (fairseq-preprocess binarizes "
                        "one chunk in its main process), which shrinks with more workers")
    p.add_argument("--refit", type=Path, nargs="+", metavar="FILE",
                   help="measure nothing: the fits, projections and table again from the measurements of the "
                        f"FILEs (results files of this benchmark, or {PARTIAL.relative_to(REPO)}, which the "
                        "measurements go to as they come; the first FILE's settings), e.g. after a change of "
                        "the recipe's default --bpe-learn-pairs, or with a --more-workers run made apart")
    add_output_option(p, f"JSON results (default {DEFAULT_OUT.relative_to(REPO)})")
    add_force_option(p, "an --output file")
    p.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # one stage, in a fresh process
    args = p.parse_args(argv)
    if args.child:
        return args
    if args.refit:
        saved = [json.loads(path.read_text()) for path in args.refit]
        for other in saved[1:]:  # more measurements of the same corpus (another worker count)
            saved[0]["result"]["measurements"] += other["result"]["measurements"]
        out = check_output(args.out or DEFAULT_OUT, "--output", args.force or args.out is None
                           and args.refit[0].resolve() == DEFAULT_OUT.resolve())
        # the measured run's settings, as it recorded them, with this command line's --refit and --output
        return argparse.Namespace(**{**vars(args), **saved[0]["result"]["settings"], "saved": saved[0], "out": out})
    try:
        args.sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    except ValueError:
        raise UsageError(f"--sizes {args.sizes!r}: give pair counts, e.g. 30000,100000") from None
    if not args.sizes or args.sizes[0] < 100:
        raise UsageError("--sizes: sizes of >= 100 pairs (two or more for fits; one measures only)")
    args.more_workers = 2 * args.workers if args.more_workers is None else args.more_workers
    args.tgt = args.pair.split("-")[1]
    if args.shapes is None:
        plain = SHARED / "wmt14" / "plain"
        args.shapes = [plain / f"newstest{y}.{args.pair}.{l}" for l in ("en", args.tgt) for y in (2013, 2014)]
    for path in args.shapes:
        if not Path(path).exists():
            raise UserError(f"{path}: no such file (the sentence shapes; give --shapes EN DE)")
    args.out = check_output(args.out or RESULTS / prep_cost.results_path(args.pair).name, "--output",
                            args.force or args.check_only)
    return args


# ---------------------------------------------------------------------------------------------- one stage
TICK = os.sysconf("SC_CLK_TCK")


def _processes(root: int) -> Dict[int, Tuple[int, int]]:
    """``{pid: (depth below root, CPU ticks so far)}`` of ``root`` and its descendants."""
    depth = {root: 0}
    for pid, parent in descendants(root).items():  # each after its parent
        depth[pid] = depth[parent] + 1
    return {pid: (d, cpu_ticks([pid])) for pid, d in depth.items()}


def _memory(pid: int):
    """(RSS, PSS) of ``pid`` in kB, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            kb = {line.split()[0]: int(line.split()[1]) for line in f if line.startswith((b"Rss:", b"Pss:"))}
        return kb.get(b"Rss:", 0), kb.get(b"Pss:", 0)
    except (OSError, ValueError):
        return None


class Sampler(threading.Thread):
    """Every ``interval`` seconds, the memory of this process and its descendants, by part (:meth:`begin`):
    the main process (this one; for a command, its own process too) and the workers; a command's CPU ticks."""

    def __init__(self, interval: float = 0.2):
        super().__init__(daemon=True)
        self.interval, self._done, self._lock = interval, threading.Event(), threading.Lock()
        self.part, self.command, self.peaks, self.command_ticks = "other", False, {}, {}

    def run(self):
        while not self._done.is_set():
            self.sample()
            self._done.wait(self.interval)

    def begin(self, part: str, command: bool):
        with self._lock:
            self.part, self.command, self.command_ticks = part, command, {}
        self.sample()

    def end(self) -> float:
        """The CPU seconds of the command's own process(es) in the part that ends."""
        self.sample()
        with self._lock:
            seconds = sum(self.command_ticks.values()) / TICK
            self.part, self.command = "other", False
        return seconds

    def sample(self):
        with self._lock:
            part, command = self.part, self.command
            main_depth = 1 if command else 0
            rss = pss = main = biggest = n = 0
            for pid, (depth, ticks) in _processes(os.getpid()).items():
                if command and depth == 1:
                    self.command_ticks[pid] = ticks
                m = _memory(pid)
                if m:
                    rss, pss, biggest, n = rss + m[0], pss + m[1], max(biggest, m[0]), n + 1
                    main += m[1] if depth <= main_depth else 0
            peak = self.peaks.setdefault(part, {"pss_mb": 0.0, "main_pss_mb": 0.0, "workers_pss_mb": 0.0,
                                                "rss_mb": 0.0, "largest_process_rss_mb": 0.0, "processes": 0})
            if pss / 1024 > peak["pss_mb"]:  # the parts of the largest total
                peak.update(pss_mb=pss / 1024, main_pss_mb=main / 1024, workers_pss_mb=(pss - main) / 1024)
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
    if "apply-bpe" in cmd or "subword_nmt.apply_bpe" in cmd:
        return "apply_bpe"
    if cmd and cmd[0].endswith("fairseq-preprocess"):
        return "binarize"
    return "other"


def _cpu(who) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def timing_context(workdir: Path, stage: str, sampler: Sampler):
    """The recipe's :class:`attn_kit.pipeline.stages.Context`, measuring each command and step by part: wall
    seconds, CPU seconds of all its processes and of its main process (see the module's docstring)."""
    class Timing(Context):
        def timed(self, part: str, command: bool, fn, *args, **kwargs):
            sampler.begin(part, command)
            t0, self0, children0 = time.perf_counter(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
            try:
                return fn(*args, **kwargs)
            finally:
                own = sampler.end()
                mine, theirs = _cpu(resource.RUSAGE_SELF) - self0, _cpu(resource.RUSAGE_CHILDREN) - children0
                got = self.parts.setdefault(part, {"seconds": 0.0, "cpu_seconds": 0.0, "main_cpu_seconds": 0.0})
                got["seconds"] += time.perf_counter() - t0
                got["cpu_seconds"] += mine + theirs
                got["main_cpu_seconds"] += mine + min(own, theirs)

        def sh(self, cmd, *args, **kwargs):
            return self.timed(part_of_command([str(c) for c in cmd]), True, super().sh, cmd, *args, **kwargs)

        def step(self, description, fn, *args, **kwargs):
            return self.timed(part_of_step(description), False, super().step, description, fn, *args, **kwargs)

    ctx = Timing(workdir, dry_run=False, stage=stage)
    ctx.parts = {}
    return ctx


def run_child(spec_path: Path):
    """One measurement, in this (fresh) process: ``spec["what"]``, a stage of the recipe or ``sample``."""
    spec = json.loads(spec_path.read_text())
    args = parallel.parse_args(spec["argv"])
    stages = {s.name: s for s in translation.stages(args)}
    sampler, what = Sampler(), spec["what"]
    sampler.start()
    ctx = timing_context(args.workdir, what, sampler)
    t0 = time.perf_counter()
    if what in stages:
        stages[what].run(ctx)
    elif what == "sample":
        tok = Path(stages["bpe"].inputs[0]).parent
        bpe = Path(stages["bpe"].outputs[0]).parent
        bpe.mkdir(parents=True, exist_ok=True)
        src, tgt = args.src, args.tgt
        ctx.step("sample (--bpe-learn-pairs)", sample_pairs, tok / f"train.{src}", tok / f"train.{tgt}",
                 bpe / f"learn-sample.{src}", bpe / f"learn-sample.{tgt}", spec["sample_pairs"], translation.BPE_SAMPLE_SEED)
    seconds = time.perf_counter() - t0
    sampler.stop()
    maxrss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                 resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    parts = {part: {**{k: round(v, 3) for k, v in got.items()},
                    **{k: round(v, 1) for k, v in sampler.peaks.get(part, {}).items()}}
             for part, got in ctx.parts.items()}
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


def words_per_pair(prefix: Path, sizes, tgt: str = "de") -> dict:
    """{N: whitespace words per pair, both sides, of the first N pairs of PREFIX.en/.TGT}: the corpus's size
    in the unit the projections scale by (the token-bound stages' work is per token)."""
    out, words, pairs = {}, 0, 0
    with open(f"{prefix}.en", encoding="utf-8") as en, open(f"{prefix}.{tgt}", encoding="utf-8") as other:
        for a, b in zip(en, other):
            words += len(a.split()) + len(b.split())
            pairs += 1
            if pairs in sizes:
                out[str(pairs)] = round(words / pairs, 3)
    return out


def make_corpus(folder: Path, shape_files: List[Path], sizes: List[int], pair: str = "en-de", seed: int = 1,
                long_share: Optional[float] = None, noise: float = NOISE) -> dict:
    """The synthetic corpus of ``pair`` (train: the largest of ``sizes``; valid, test: HELD_OUT pairs each) with
    the sentence shapes of ``shape_files`` (EN, OTHER, or EN, EN, OTHER, OTHER), and what it is. ``long_share``:
    pairs joined as crawled long lines (None: as many as give WMT14's words per pair)."""
    shapes = C.read_shapes(shape_files[0], shape_files[2]) + C.read_shapes(shape_files[1], shape_files[3]) \
        if len(shape_files) == 4 else C.read_shapes(*shape_files)
    tgt = pair.split("-")[1]
    vocab = (C.wordfreq_vocabulary("en"), C.wordfreq_vocabulary(tgt))
    given = long_share
    long_share = long_share_for(shapes, pair) if long_share is None else long_share
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for name, n, split_seed in (("train", max(sizes), seed), ("valid", HELD_OUT, seed + 1),
                                ("test", HELD_OUT, seed + 2)):
        C.write_corpus(C.generate(shapes, vocab, n, split_seed, long_share=long_share, noise=noise),
                       folder / f"{name}.en", folder / f"{name}.{tgt}")
    log(f"corpus: {max(sizes)} training pairs in {time.perf_counter() - t0:.0f} s ({folder})")
    return {"pair": pair, "words_per_pair": words_per_pair(folder / "train", sizes, tgt),
            "shapes": [str(p) for p in shape_files], "shape_pairs": len(shapes), "seed": seed,
            "long_share": long_share, "noise": noise if long_share else 0.0,
            "long_share_from": "given" if given is not None else
            "the WMT14 training text's words per pair (attn_kit.recipes.wmt14_data) over the shapes' own",
            "wordfreq": C.version_of("wordfreq"), "burstiness": {k: C.BURSTINESS[k] for k in ("en", tgt)},
            "document_sentences": C.DOCUMENT,
            "tail": {"en": round(vocab[0].tail, 5), tgt: round(vocab[1].tail, 5)},
            "list_words": {"en": len(vocab[0].words), tgt: len(vocab[1].words)},
            "method": C.__doc__}


def corpus_check(args, folder: Path) -> dict:
    """Types against tokens (Heaps' law) of the synthetic corpus and the real newstest and Tatoeba text."""
    def lines(*paths):
        for path in paths:
            with open(path, encoding="utf-8") as f:
                yield from f

    texts = {}
    langs = ("en", args.tgt)
    for i, lang in enumerate(langs):
        texts[f"synthetic {lang}"] = lambda lang=lang: lines(folder / f"train.{lang}")
        news = [SHARED / "wmt14" / "plain" / f"newstest{y}.{args.pair}.{lang}" for y in (2013, 2014)]
        if all(p.exists() for p in news):
            texts[f"newstest2013+2014 {lang}"] = lambda news=news: lines(*news)
        tatoeba = SHARED / "tatoeba" / TATOEBA[args.tgt]
        if tatoeba.exists():
            texts[f"Tatoeba {lang}"] = lambda i=i, tatoeba=tatoeba: (line.split("\t")[i] for line in lines(tatoeba))
    growth = {name: C.type_growth(make()) for name, make in texts.items()}
    heaps = {name: {k: round(v, 4) for k, v in C.heaps_fit(g).items()} for name, g in growth.items()}
    compared = {}
    for lang in langs:
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


def print_check(about: dict):
    """--check-only: the synthetic corpus's types against the real text's, at the real text's size."""
    print(f"{about['pair']}: {about['words_per_pair']} words per pair; long share {about['long_share']}, noise "
          f"{about['noise']}; burstiness {about['burstiness']}")
    for name, c in about["check"]["compared_at_real_size"].items():
        print(f"  {name}: {c['tokens']} tokens, real types {c['real_types']}, synthetic {c['synthetic_types']} "
              f"(ratio {c['ratio']}); Heaps beta real {c['real_beta']}, synthetic {c['synthetic_beta_same_range']}")


def recipe_argv(args, corpus: Path, workdir: Path, workers: int) -> List[str]:
    return ["--src", "en", "--tgt", args.tgt, *(x for split in ("train", "valid", "test")
                                               for x in (f"--{split}", str(corpus / split))),
            "--workdir", str(workdir), "--workers", str(workers), "--bpe-merges", str(args.bpe_merges),
            "--bpe-learn-pairs", "0", "--ngpus", "0"]


def lay_out(args, corpus: Path, workdir: Path, n: int):
    """The recipe's raw text of ``n`` training pairs where its tokenize stage reads it."""
    rargs = parallel.parse_args(recipe_argv(args, corpus, workdir, args.workers))
    raw = {Path(p).name: Path(p) for p in next(s for s in translation.stages(rargs) if s.name == "tokenize").inputs}
    for name, path in raw.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(corpus / name, "rb") as fin, open(path, "wb") as fout:
            fout.writelines(itertools.islice(fin, n) if name.split(".")[0] == "train" else fin)


def measure(args, corpus: Path, workdir: Path, what: str, workers: int, n: int, **extra) -> dict:
    spec = workdir / f"spec.{what}.{workers}.json"
    result = workdir / f"result.{what}.{workers}.json"
    spec.write_text(json.dumps({"argv": recipe_argv(args, corpus, workdir, workers), "what": what,
                                "result": str(result), **extra}))
    before = load_average()
    log(f"{n} pairs, {what}, {workers} worker(s) (load {before[0]}) ...")
    with open(workdir / f"child.{what}.{workers}.log", "w") as out:
        rc = subprocess.run([sys.executable, "-m", "lab.bench.data_prep", "--child", str(spec)], cwd=REPO,
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
    """prep_cost's fits from the measurements: per part, serial and parallel CPU seconds (``c + k * pairs``,
    c >= 0, for the per-token parts; ``a * pairs^b`` for learning BPE) and the main processes' and the workers'
    peak MB (``a * pairs^b``), from the second size on when there are three or more."""
    fitted, W = (args.sizes[1] if len(args.sizes) > 2 else args.sizes[0]), args.workers
    fits = {"workers": W, "fitted_from_pairs": fitted, "cpu_serial": {}, "cpu_parallel": {},
            "memory_main": {}, "memory_workers": {}, "memory_workers_per_doubling": {}, "main_chunk_share": {}}
    values = {"cpu_serial": lambda p: p["main_cpu_seconds"],
              "cpu_parallel": lambda p: p["cpu_seconds"] - p["main_cpu_seconds"],
              "memory_main": lambda p: p["main_pss_mb"], "memory_workers": lambda p: p["workers_pss_mb"]}
    for part in prep_cost.PARTS:
        for kind, value in values.items():
            points = [(r["pairs"], value(r["parts"][part])) for r in runs
                      if part in r["parts"] and r["pairs"] >= fitted and r["workers"] == W]
            # a share that is nothing (a step with no workers) has no fit: it counts 0
            floor = 1.0 if kind.startswith("memory") else 0.01
            if len({n for n, _ in points}) >= 2 and all(v >= floor for _, v in points):
                if kind.startswith("cpu") and part in prep_cost.PER_TOKEN:
                    f = prep_cost.fit_linear(points)
                    fits[kind][part] = {"c": round(f["c"], 3), "k": float(f"{f['k']:.6g}")}
                else:
                    f = prep_cost.fit_power(points)
                    fits[kind][part] = {"a": float(f"{f['a']:.6g}"), "b": round(f["b"], 4)}
        # the workers' memory per doubling of the workers, measured on W and on more workers at one size
        base = {r["pairs"]: r["parts"][part] for r in runs if r["workers"] == W and part in r["parts"]}
        for r in runs:
            one = base.get(r["pairs"])
            if r["workers"] > W and part in r["parts"] and one and one["workers_pss_mb"] > 0:
                ratio = r["parts"][part]["workers_pss_mb"] / one["workers_pss_mb"]
                fits["memory_workers_per_doubling"][part] = round(ratio ** (1 / math.log2(r["workers"] / W)), 4)
        # the main process's own chunk c: main(w) = S + c / w, measured on W and on more workers at one size
        if part not in prep_cost.MAIN_CHUNK_PARTS:
            continue
        for r in runs:
            if r["workers"] > W and part in r["parts"] and r["pairs"] in base:
                one, more = base[r["pairs"]], r["parts"][part]
                chunk = (one["main_cpu_seconds"] - more["main_cpu_seconds"]) / (1 / W - 1 / r["workers"])
                fits["main_chunk_share"][part] = round(max(0.0, chunk / one["cpu_seconds"]), 4)
    return fits


def projections(fits: dict, runs: List[dict]) -> dict:
    """WMT14 EN-DE and EN-FR on 2 and 16 cores (workers = cores), before and after the speed-ups;
    and the projection for the benchmark's own runs beside their wall time."""
    default = config.settings("wmt14", "paper")["bpe_learn_pairs"]
    out = {"bpe_learn_pairs": default, "wmt14": {}, "measured_against_projected": []}
    for name, pair in PAIRS.items():
        for cores in PROJECTED_CORES:
            for when, legacy in (("before", True), ("after", False)):
                p = prep_cost.project(fits, pair.train_pairs, cores, default, legacy=legacy)
                out["wmt14"][f"{name} {cores} cores {when}"] = {
                    "pair": name, "train_pairs": pair.train_pairs, "cores": cores, "when": when,
                    "learn_pairs": p["learn_pairs"], "seconds": {k: round(v) for k, v in p["seconds"].items()},
                    "total_seconds": round(p["total_seconds"]),
                    "peak_mb": {k: round(v) for k, v in p["peak_mb"].items()}, "peak_mb_max": round(p["peak_mb_max"])}
    for r in runs:
        for part, got in r["parts"].items():
            fitted = part in fits["cpu_serial"] or part in fits["cpu_parallel"]
            if fitted and r["pairs"] >= fits["fitted_from_pairs"]:
                projected = prep_cost.part_seconds(fits, part, r["pairs"], r["workers"])
                out["measured_against_projected"].append({
                    "pairs": r["pairs"], "workers": r["workers"], "part": part, "wall_seconds": round(got["seconds"], 1),
                    "projected_seconds": round(projected, 1), "ratio": round(got["seconds"] / projected, 3),
                    "load_before": r["load_before"][0]})
    return out


TABLE_PARTS = ("tokenize", "learn_bpe", "apply_bpe", "clean", "binarize")


def measured_table(runs: List[dict], workers: int) -> str:
    """Sizes x parts: wall seconds, CPU seconds (main process + workers), peak MB (PSS, all processes)."""
    by_size: Dict[int, dict] = {}
    for r in runs:
        if r["workers"] == workers and r["what"] in ("tokenize", "bpe", "binarize"):
            by_size.setdefault(r["pairs"], {}).update(r["parts"])
            by_size[r["pairs"]].setdefault("_load", []).append(r["load_before"][0])

    def cell(p):
        return (f"{p['seconds']:.0f} s (CPU {p['main_cpu_seconds']:.0f} + {p['cpu_seconds'] - p['main_cpu_seconds']:.0f}), "
                f"{p['pss_mb']:.0f} MB")

    rows = [[f"{n:,}", *(cell(parts[p]) if p in parts else "-" for p in TABLE_PARTS), f"{max(parts['_load']):.2f}"]
            for n, parts in sorted(by_size.items())]
    return markdown_table(["pairs", *(p.replace("_", " ") for p in TABLE_PARTS), "load average (1 min), highest"],
                          rows)


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        run_child(args.child)
        return 0
    if args.refit:
        refit = {k: v for k, v in provenance().items() if k not in ("machine", "cpu")}  # the measurement's
        return report(args, fitted(args, {**args.saved, "refitted": refit}, args.saved["result"]))
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="attn_data_prep_"))
    scratch.mkdir(parents=True, exist_ok=True)
    start_uptime = uptime()
    log(f"scratch: {scratch}; {start_uptime}")
    corpus = scratch / "corpus"
    settings = {"pair": args.pair, "sizes": args.sizes, "workers": args.workers, "bpe_merges": args.bpe_merges,
                "seed": args.seed}
    head = {"benchmark": "data_prep", **provenance(), "environment": environment()}
    try:
        about = make_corpus(corpus, args.shapes, args.sizes, args.pair, args.seed, args.long_share, args.noise)
        about["check"] = corpus_check(args, corpus)
        if args.check_only:
            print_check(about)
            return 0
        runs = []
        plan = [(n, args.workers) for n in args.sizes]
        if args.more_workers and len(args.sizes) > 1:
            plan.append((args.sizes[1], args.more_workers))
        for n, workers in plan:
            workdir = scratch / f"n{n}_w{workers}"
            lay_out(args, corpus, workdir, n)
            todo = [("tokenize", {}), ("bpe", {}), ("binarize", {})]
            todo += [("sample", {"sample_pairs": max(1, n // 4)})] if workers == args.workers else []
            for what, extra in todo:
                runs.append(measure(args, corpus, workdir, what, workers, n, **extra))
                write_json_atomic(PARTIAL, {**head, "result": {"settings": settings, "uptime": {
                    "start": start_uptime}, "corpus": about, "measurements": runs}})
            shutil.rmtree(workdir)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    results = {"settings": settings, "uptime": {"start": start_uptime, "end": uptime()}, "corpus": about,
               "measurements": runs}
    if len(args.sizes) < 2:  # measurements only, for --refit with a run of more sizes
        write_json_atomic(args.out, {**head, "result": results})
        print(f"wrote {args.out} (one size: measurements only)")
    else:
        report(args, fitted(args, head, results))
    PARTIAL.unlink()
    return 0


def fitted(args, head: dict, results: dict) -> dict:
    """``head`` with ``results`` (their fits and projections added) and the table of their measurements."""
    runs = results["measurements"]
    results["fits"] = fits_of(args, runs)
    results["projections"] = projections(results["fits"], runs)
    return {**head, "result": results, "table": measured_table(runs, args.workers)}


def report(args, out: dict) -> int:
    write_json_atomic(args.out, out)
    r = out["result"]
    print(f"The WMT14 recipe's data stages on {out['environment']['cpu_count']} CPUs, --workers {args.workers}: "
          f"seconds and peak memory (PSS of all the stage's processes)\n")
    print(out["table"])
    print()
    print(planning_table(r["fits"], PAIRS, config.settings("wmt14", "paper")["bpe_learn_pairs"],
                                   fitted_words=prep_cost.fitted_words_per_pair(out)))
    print(f"\n{r['uptime']['start']}\n{r['uptime'].get('end', '')}\nwrote {args.out}")
    return 0


def environment() -> dict:
    return {"python": platform.python_version(), "cpu_count": os.cpu_count(),
            **{name: C.version_of(name) for name in ("sacremoses", "subword-nmt", "fairseq-fixed", "wordfreq")}}


if __name__ == "__main__":
    main_guard(main)
