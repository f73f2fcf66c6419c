"""The prepared GPU check (benchmarks/gpu_check.sh): what one call on a lent GPU machine measures,
built here and dry-run on CPU first, so that a rare GPU hour is not spent on a typo.

``prepare`` (here, with internet and ../shared): the WMT-shaped synthetic corpus (:mod:`lab.bench.corpus`)
through the recipe's data stages (``recipes/parallel.sh --stop-stage binarize``); what the GPU needs of it
(data-bin, the BPE'd test text, the stamps) copied to ``.gpu_check/data``.

``run`` (there; ``--dry-run`` here prints and checks every command): the measured bf16 matmul rate; the
recipe's own fairseq-train command at the paper's sizes and tokens per update, as it is and changed one way
at a time (the lean step's changes, forward sizes, ``--compile-layers``, fairseq's Adam); a profile; the
recipe's ``--canary``; the bundled run trained on the GPU and scored, then the paper's base size on it
(:func:`plan` says the order). Nothing starts past the deadline, and the results file is rewritten after
each step, so a run cut short keeps what it measured.

``rehearse`` (here, on a CPU, and in the tests): ``prepare`` on a small corpus shaped as the bundled data,
then ``run --rehearse``: the run's own code (forked trainings, profile, rates, the bundled run, the results
file) on the plan's first trainings with a model small enough for a CPU, before a GPU session spends on it.
"""
import argparse
import datetime
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import List, Optional

from attn_kit.planning import cost
from attn_kit.checkout import REPO
from attn_kit.cli import ArgumentParser, Number, UsageError, UserError, add_output_option, log, main_guard, write_json_atomic
from ..fairseq_forks import ForkedTrainings
from attn_kit.recipes import canary, common, parallel, translation
from attn_kit.recipes.sources import Layout
from attn_kit.recipes.wmt14_data import PAIRS, TRAIN_TO_NEWSTEST_BYTES
from attn_kit.recipes.wmt14_smoke import read_sample
from attn_kit.results import provenance
from . import measure, train
from .data_prep import SHARED, make_corpus

HERE = REPO / ".gpu_check"
TOKENS_PER_UPDATE = 28000  # the paper's ~25K + 25K tokens per update (recipes/configs/wmt14.yaml)


# ---------------------------------------------------------------------------------------------- prepare
def recipe_data_argv(corpus: Path, data_workdir: Path, workdir: Path, workers: int) -> List[str]:
    """recipes/parallel.sh's options for the synthetic EN-DE corpus: the paper's EN-DE BPE (35000 merges)."""
    return ["--src", "en", "--tgt", "de", *(x for split in ("train", "valid", "test")
                                               for x in (f"--{split}", str(corpus / split))),
            "--data-workdir", str(data_workdir), "--workdir", str(workdir), "--workers", str(workers),
            "--bpe-merges", "35000"]


def prepare(args) -> int:
    """The data-preparation benchmark's corpus (no joined long pairs: what every GPU check on file trained on),
    the recipe's data stages on it, and the part the GPU needs copied aside."""
    corpus, prep, data = args.dir / "corpus", args.dir / "prep", args.dir / "data"
    shapes = list(args.shapes or (SHARED / "wmt14" / "plain" / f"newstest{y}.en-de.{lang}"
                                  for lang in ("en", "de") for y in (2013, 2014)))
    for path in shapes:
        if not Path(path).exists():
            raise UserError(f"{path}: no such file (newstest's sentence shapes; give --shapes EN DE)")
    if not (corpus / "test.de").exists():
        make_corpus(corpus, shapes, [args.pairs], long_share=0.0)
    argv = recipe_data_argv(corpus, prep, args.dir / "prep-run", args.workers)
    parallel.main([*argv, "--ngpus", "0", "--stop-stage", "binarize"])
    lay = Layout.of(parallel.build(argv))
    shutil.rmtree(data, ignore_errors=True)
    for path in [lay.data_bin, *(lay.binarize_from / f"test.{lang}" for lang in ("en", "de")), prep / ".stages"]:
        target = data / path.relative_to(prep)
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if path.is_dir() else shutil.copy2)(path, target)
    size = sum(p.stat().st_size for p in data.rglob("*") if p.is_file())
    log(f"{data}: {size / 2 ** 20:.1f} MiB for the GPU machine (data-bin, the BPE'd test text, the stamps)")
    return 0


def rehearse(args) -> int:
    """``prepare`` in ``args.dir`` on 1000 pairs shaped as the bundled valid split's first 300, then
    ``run --rehearse`` on it."""
    shapes = [args.dir / "shapes.en", args.dir / "shapes.de"]
    args.dir.mkdir(parents=True, exist_ok=True)
    pairs = read_sample("de", "valid", 300)
    for i, path in enumerate(shapes):
        path.write_text("".join(pair[i].strip() + "\n" for pair in pairs), encoding="utf-8")
    main(["prepare", "--pairs", "1000", "--workers", "1", "--shapes", *map(str, shapes), "--dir", str(args.dir)])
    return main(["run", "--rehearse", "--dir", str(args.dir), "--output", str(args.out), "--seconds", str(args.seconds),
                 *(["--only", ",".join(args.only)] if args.only else [])])


# ---------------------------------------------------------------------------------------------- what runs
MODELS = {"base": "attn_paper_base", "big": "attn_paper_big"}
CANARY_MINUTES = 0.3
SWEEP_SECONDS = 12  # of training per sweep run (fairseq's --stop-time-hours; start-up comes on top)
COMPILE_SECONDS = 60  # --compile-layers compiles in its first updates, and for new shapes (30 s was all compiling)
STARTUP_SECONDS = 12  # a sweep run's start (CUDA, data, model) and end, for the deadline
CANARY_OVERHEAD_SECONDS = 75  # recipe start, fairseq-train start, validation, checkpoint, averaging, generation
PROFILE_STEPS = (12, 17)  # trainer.train_step calls profiled: [start, stop)
# run --rehearse: the recipe's training command with a model this small, on the CPU, this many updates
REHEARSAL_MODEL = ["--cpu", *(f for side in ("encoder", "decoder") for f in (
    f"--{side}-layers", "1", f"--{side}-embed-dim", "32", f"--{side}-ffn-embed-dim", "64",
    f"--{side}-attention-heads", "2"))]
REHEARSAL_UPDATES = PROFILE_STEPS[1] + 1  # the profile ends at its last step
REHEARSAL_MINUTES = 0.2  # bundled:base's budget, rehearsed
# Variant's switches and the fairseq-train options each adds, in this order
SWITCHES = {"compile_layers": ["--compile-layers"], "pad8": ["--required-seq-len-multiple", "8"],
            "whole_loss": ["--loss-chunk-tokens", "0"], "compile_loss": ["--compile-loss"],
            "sync_every_update": ["--check-finite-every-update"], "bf16_residual": ["--bf16-residual"]}


@dataclass(frozen=True)
class Variant:
    """One run of the recipe's training command, changed in one respect."""
    name: str
    model: str                      # base | big
    max_tokens_per_gpu: int = 28000
    optimizer: str = "attn_adam"    # the recipe's; "adam": fairseq's own
    compile_layers: bool = False
    pad8: bool = False              # --required-seq-len-multiple 8
    whole_loss: bool = False        # --loss-chunk-tokens 0: the loss over the whole batch in one pass, as before
    compile_loss: bool = False      # --compile-loss
    sync_every_update: bool = False  # --check-finite-every-update: fairseq's check of the gradients, a host sync
    bf16_residual: bool = False     # --bf16-residual: the residual stream in bf16 under autocast
    seconds: int = SWEEP_SECONDS    # the time budget (--stop-time-hours)
    profile: bool = False
    updates: Optional[int] = None   # stop at this many updates (--max-update) if the budget lasts that long

    def extra(self) -> List[str]:
        return [flag for name, flags in SWITCHES.items() if getattr(self, name) for flag in flags]


def plan() -> List[object]:
    """What runs, what no GPU measured yet first (the deadline may cut the list): the recipe's training as it
    is (one 28K-token forward, attn_adam, the lean step) profiled and timed at base size, each change of the
    lean step off (or on) alone, big; ``bundled:gpu``; the canaries; the compiled layers; one more forward
    size per model for the time model's fits; ``bundled:base`` for the minutes left; then what earlier
    checks measured (fairseq's Adam, the paper's 4K forwards)."""
    out: List[object] = [Variant("base_28k_profile", "base", profile=True, seconds=10), Variant("base_28k", "base"),
                         Variant("base_28k_sync_every_update", "base", sync_every_update=True),
                         Variant("base_28k_whole_loss", "base", whole_loss=True),
                         Variant("base_28k_bf16_residual", "base", bf16_residual=True),
                         Variant("base_28k_compile_loss", "base", compile_loss=True, seconds=COMPILE_SECONDS // 2),
                         Variant("big_28k", "big"), Variant("big_28k_bf16_residual", "big", bf16_residual=True),
                         "bundled:gpu", "canary:base"]
    out += [Variant(f"{model}_28k_compile", model, compile_layers=True, seconds=COMPILE_SECONDS)
            for model in ("big", "base")]
    # where the time goes once the layers are compiled (the runs before it leave their kernels in the compiler's
    # cache; run without them, as with --only, it compiles from nothing: it stops at its updates, the budget a cap)
    out += [Variant("base_28k_compile_profile", "base", compile_layers=True, profile=True, seconds=COMPILE_SECONDS,
                    updates=PROFILE_STEPS[1] + 6)]
    out += ["canary:big", *(Variant(f"{model}_8k", model, 8192) for model in ("base", "big")), "bundled:base"]
    # measured by the earlier checks: the model's own step beside stock fairseq's, the baselines, the sweep
    out += ["bench:base", *(Variant(f"{model}_4k_fairseq_adam", model, 4096, optimizer="adam") for model in ("base", "big"))]
    out += [Variant(f"{model}_28k_fairseq_adam", model, optimizer="adam") for model in ("base", "big")]
    out += [Variant(f"{model}_{f // 1000}k", model, f) for model in ("base", "big") for f in (4096, 16384)]
    out += [Variant("base_28k_pad8", "base", pad8=True)]
    return out


# benchmarks/train_throughput.py at one forward of the recipe's size: 437 sentences x 64 tokens = 27968
BENCH_SENTENCES, BENCH_LENGTH, BENCH_SECONDS = 437, 64, 90


def bench_argv(model: str, out: Path) -> List[str]:
    """benchmarks/train_throughput.py on the GPU, bf16 autocast (the recipe's precision), one shape."""
    return [sys.executable, str(REPO / "benchmarks" / "train_throughput.py"), "--ngpus", "1", "--precision",
            "bf16", "--mixed", "autocast", "--shapes", model, "--sentences", str(BENCH_SENTENCES), "--length",
            str(BENCH_LENGTH), "--steps", "20", "--warmup", "5", "--repeats", "3", "--output", str(out), "--force"]


def item_name(item) -> str:
    return item if isinstance(item, str) else item.name


def recipe_argv(data: Path, model: str, workdir: Path, max_tokens_per_gpu: int = 28000,
                extra: List[str] = ()) -> List[str]:
    """recipes/parallel.sh on the prepared data folder (the data stages ran at ``prepare``): the paper's model,
    tokens per update and schedule, one GPU, bf16."""
    argv = [*recipe_data_argv(data.parent / "corpus", data, workdir, 4), "--arch", MODELS[model],
            "--ngpus", "1", "--precision", "bf16", "--tokens-per-update", str(TOKENS_PER_UPDATE),
            "--max-tokens-per-gpu", str(max_tokens_per_gpu)]
    return [*argv, "--", *extra] if extra else argv


def canary_argv(data: Path, model: str, runs: Path) -> List[str]:
    """The recipe's --canary, its epoch WMT14 EN-DE's in newstest-shaped pairs (as many bytes as its 4.5M training
    pairs), so that the canaries predict the paper's run with WMT14's epochs, not the synthetic corpus's short ones."""
    epoch_pairs = round(PAIRS["en-de"].train_pairs * TRAIN_TO_NEWSTEST_BYTES["de"])
    return [*recipe_argv(data, model, runs / f"canary_{model}"), "--canary", "--canary-minutes", str(CANARY_MINUTES),
            "--canary-epoch-pairs", str(epoch_pairs), "--stage", "canary"]


def sweep_command(data: Path, v: Variant, runs: Path) -> List[str]:
    """The recipe's own fairseq-train command (attn_kit.recipes.common.train_command) for ``v``,
    with a time budget of ``v.seconds``, no checkpoints and no validation."""
    s = parallel.build(recipe_argv(data, v.model, runs / v.name, v.max_tokens_per_gpu, v.extra()))
    s = replace(s, precision_used="bf16", train_minutes=v.seconds / 60, log_interval=10,
                **({"max_update": v.updates} if v.updates else {}))
    cmd = common.train_command(s, Layout.of(s).data_bin, runs / v.name / "checkpoints", s.model)
    cmd = [*cmd, "--no-save", "--disable-validation"]
    if v.optimizer != "attn_adam":
        cmd[cmd.index("attn_adam")] = v.optimizer
    return cmd


# ---------------------------------------------------------------------------------------------- running
def profile_steps(path: str, steps=PROFILE_STEPS):
    """In a fairseq-train child: profile trainer.train_step calls ``steps`` (torch.profiler, CPU and CUDA) and
    write where their time went to ``path``."""
    import torch
    from fairseq.trainer import Trainer

    original, calls = Trainer.train_step, [0]
    cuda = torch.cuda.is_available()
    activities = [torch.profiler.ProfilerActivity.CPU, *([torch.profiler.ProfilerActivity.CUDA] if cuda else [])]
    prof = torch.profiler.profile(activities=activities)
    clock, device = {}, "cuda" if cuda else "cpu"

    def train_step(self, samples, raise_oom=False):
        calls[0] += 1
        if calls[0] == steps[0]:
            measure.synchronize(device)
            prof.start()
            clock["start"] = time.perf_counter()
        out = original(self, samples, raise_oom)
        if calls[0] == steps[1] - 1:
            measure.synchronize(device)
            seconds = time.perf_counter() - clock["start"]
            prof.stop()
            write_json_atomic(Path(path), profile_summary(prof, seconds, steps[1] - steps[0]))
        return out

    Trainer.train_step = train_step


def profile_summary(prof, seconds: float, steps: int) -> dict:
    """Wall time, GPU kernel time, launches and host waits for the GPU per update; the top CPU and GPU entries."""
    rows = prof.key_averages()

    def device_self(e):
        return getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0) or 0

    from torch.autograd import DeviceType

    # the kernels: CPU-side rows (an aten op, an annotation) carry their kernels' time too, and an annotation
    # such as "forward" also has a GPU-side row of its name, not a kernel
    cpu_keys = {e.key for e in rows if e.device_type == DeviceType.CPU}
    kernels = [e for e in rows if e.device_type == DeviceType.CUDA and e.key not in cpu_keys]
    gpu_us = sum(device_self(e) for e in kernels)
    launches = sum(e.count for e in rows if e.key in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
                                                      "cudaGraphLaunch"))
    # the host waiting for the GPU (an .item(), a bool of a tensor, a copy to the host that is not asynchronous)
    syncs = sum(e.count for e in rows if e.key in ("cudaStreamSynchronize", "cudaDeviceSynchronize",
                                                   "cudaEventSynchronize"))
    top_gpu = sorted(kernels, key=device_self, reverse=True)[:20]
    top_cpu = sorted(rows, key=lambda e: e.cpu_time_total, reverse=True)[:25]
    return {"updates": steps, "wall_ms_per_update": round(1e3 * seconds / steps, 2),
            "gpu_kernel_ms_per_update": round(gpu_us / 1e3 / steps, 2),
            "gpu_busy_share": round(gpu_us / 1e6 / seconds, 3) if seconds else None,
            "kernel_launches_per_update": round(launches / steps),
            "host_syncs_per_update": round(syncs / steps, 1),
            "top_gpu": [{"name": e.key[:120], "calls_per_update": round(e.count / steps, 1),
                         "ms_per_update": round(device_self(e) / 1e3 / steps, 3)} for e in top_gpu],
            "top_cpu_total": [{"name": e.key[:120], "calls_per_update": round(e.count / steps, 1),
                               "ms_per_update": round(e.cpu_time_total / 1e3 / steps, 3),
                               "self_ms_per_update": round(e.self_cpu_time_total / 1e3 / steps, 3)}
                              for e in top_cpu]}


def timed_updates(ends: dict):
    """(first, last): the updates whose span is timed, the first 30% (at least 3: start-up, allocator growth,
    compilation) left out. ``ends``: {update: when it ended} (canary.update_times)."""
    updates = list(ends)
    return updates[max(3, math.ceil(0.3 * len(updates))) - 1], updates[-1]


def sweep_result(v: Variant, cmd: List[str], folder: Path, rc: int, matmul: Optional[float]) -> dict:
    """What one sweep run did: updates, seconds per update, target and padded tokens/s, model FLOP utilization
    of the real tokens (against the measured matmul rate: ``mfu``; and the datasheet's), padding, peak memory."""
    out = {"name": v.name, "model": v.model, "max_tokens": int(cmd[cmd.index("--max-tokens") + 1]),
           "update_freq": int(cmd[cmd.index("--update-freq") + 1]), "optimizer": v.optimizer,
           "compile_layers": v.compile_layers, "pad_to_multiple": 8 if v.pad8 else 1, "train_seconds": v.seconds,
           "exit_status": rc}
    records = canary.read_stats(folder / "stats")
    log_path = folder / "train.log"
    if rc != 0 or not records:
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        out["log_tail"] = text.splitlines()[-12:]
        return out
    ends = canary.update_times(records[0])
    if len(ends) < 6:
        out["updates"] = len(ends)
        return out
    first, last = timed_updates(ends)
    window = ends[last] - ends[first]
    steps = [st for st in records[0]["steps"] if first < st[0] + 1 <= last]
    vocab = common.dictionary_size(next(iter(sorted(Path(cmd[1]).glob("dict.*.txt")))))
    shape = cost.model_shape(cmd[cmd.index("--arch") + 1], cmd[2:], vocab)
    peak = canary.device_peak(records[0], "bf16")
    u = canary.utilization(records, first, last, shape, window, matmul, peak and peak * 1e12)
    rec = records[0]
    out.update({
        "updates": len(ends), "timed_updates": last - first, "seconds_per_update": round(window / (last - first), 5),
        "target_tokens_per_second": round(sum(st[2] for st in steps) / window, 1),
        "padded_tokens_per_second": round(sum(st[3] + st[4] for st in steps) / 2 / window, 1),
        "target_tokens_per_update": round(sum(st[2] for st in steps) / (last - first), 1),
        **u.fields(),
        "peak_allocated_gib": round(rec.get("peak_allocated_bytes", 0) / 2 ** 30, 2),
        "peak_reserved_gib": round(rec.get("peak_reserved_bytes", 0) / 2 ** 30, 2),
        "device": rec.get("device"), "total_memory_gib": round(rec.get("total_bytes", 0) / 2 ** 30, 1),
        "loss_bits_first_last": [round(v, 3) for v in (steps[0][6] / steps[0][7] / math.log(2),
                                                       steps[-1][6] / steps[-1][7] / math.log(2))],
    })
    return out


def smi_utilization(smi: Path, start: float, end: float) -> Optional[float]:
    """The median of nvidia-smi's utilization.gpu samples in ``smi`` ("2026/11/27 15:15:48.820, 37 %, ...",
    local time; gpu_check.sh writes them) from ``start`` to ``end``: the share of time a kernel ran."""
    samples = []
    try:
        lines = smi.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = [f.strip() for f in line.split(",")]
        try:
            when = datetime.datetime.strptime(fields[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            busy = float(fields[1].rstrip(" %"))
        except (ValueError, IndexError):
            continue
        if start <= when <= end:
            samples.append(busy)
    return statistics.median(samples) if samples else None


def add_utilization(entry: dict, folder: Path, smi: Path):
    """``entry["gpu_utilization_percent_median"]``: from ``smi`` over the timed updates of the run in ``folder``."""
    records = canary.read_stats(folder / "stats")
    ends = canary.update_times(records[0]) if records else {}
    if len(ends) >= 6:
        first, last = timed_updates(ends)
        busy = smi_utilization(smi, ends[first], ends[last])
        if busy is not None:
            entry["gpu_utilization_percent_median"] = busy


def environment() -> dict:
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import fairseq

        env["fairseq"] = fairseq.__version__
    except ImportError:
        env["fairseq"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update({"gpu": props.name, "gpu_memory_gib": round(props.total_memory / 2 ** 30, 1),
                    "multiprocessors": props.multi_processor_count})
    return env


# ---------------------------------------------------------------------------------------------- the bundled run
BUNDLED_SECONDS = 210  # bundled:gpu, for the deadline: its data stages, 1000 updates, averaging, decoding, scoring
BASE_MIN_MINUTES = 2  # bundled:base trains at least this long, or is skipped
BASE_OVERHEAD_SECONDS = 100  # bundled:base beside its training: starting, averaging, decoding the test set, scoring
PAPER_BASE = ["--layers", "6", "--d-model", "512", "--d-ff", "2048", "--h", "8", "--p-drop", "0.1"]  # Table 3


def bundled_argv(kind: str, runs: Path, rehearse: bool, minutes: float = BASE_MIN_MINUTES) -> List[str]:
    """recipes/wmt14_en_de.sh's options for ``bundled:gpu``, the bundled run's settings on one GPU in bf16 (does
    the model the GPU trained translate?), and ``bundled:base``, the paper's base size on its data for ``minutes``;
    rehearsed on the CPU with --smoke's data and model."""
    argv = ["--smoke", "--ngpus", "0"] if rehearse else ["--bundled", "--ngpus", "1", "--precision", "bf16"]
    argv += ["--workdir", str(runs / f"bundled_{kind}"), "--data-workdir", str(runs / "bundled_data")]
    if kind == "base":  # a checkpoint (730 MB at the paper's base size) and a validation every 500 updates
        argv += [*([] if rehearse else PAPER_BASE), "--max-update", "100000", "--train-minutes", f"{minutes:.2f}",
                 "--save-interval-updates", "500", "--validate-interval-updates", "1000"]
    return argv


# ---------------------------------------------------------------------------------------------- the run
def item_seconds(item) -> float:
    """How long ``item`` is expected to take, for the deadline."""
    if isinstance(item, Variant):
        return item.seconds + STARTUP_SECONDS
    kind, what = item.split(":")
    if kind == "bundled":
        return BUNDLED_SECONDS if what == "gpu" else BASE_MIN_MINUTES * 60 + BASE_OVERHEAD_SECONDS  # at least
    return BENCH_SECONDS if kind == "bench" else CANARY_MINUTES * 60 + CANARY_OVERHEAD_SECONDS


def chosen_items(args) -> List[object]:
    """The plan, or its --only part; rehearsing, the plan's first trainings at base size, uncompiled
    (compiling takes minutes on a CPU): the profile, the lean step and each of its changes off, each to its
    updates (the time budget only a cap: a busy CPU must not cut them short); and the bundled runs."""
    chosen = [item for item in plan() if not args.only or item_name(item) in args.only]
    if args.rehearse:
        first = chosen[:next((i for i, item in enumerate(chosen) if not isinstance(item, Variant)), len(chosen))]
        trainings = [replace(v, seconds=120, updates=REHEARSAL_UPDATES) for v in first
                     if v.model == "base" and not v.compile_layers and not v.compile_loss]
        chosen = trainings + [item for item in chosen if item_name(item).startswith("bundled:")]
    return chosen


class Check:
    """One call of ``run``: its items, the results file it rewrites after each, the deadline."""

    def __init__(self, args):
        self.args, self.data, self.runs = args, args.dir / "data", args.dir / "runs"
        self.start = time.time()
        self.deadline = self.start + args.seconds
        self.items = chosen_items(args)
        self.result = {**provenance(args.command_line), "commit": args.commit or provenance()["commit"],
                       "benchmark": "gpu_check", "environment": environment(), "seconds_allowed": args.seconds,
                       "install_seconds": args.install_seconds, "install_as_documented": args.install_as_documented,
                       "tokens_per_update": TOKENS_PER_UPDATE, "canary": {}, "sweep": [], "bundled": {},
                       "skipped": []}
        self.matmul = None

    def command(self, item, minutes: float = BASE_MIN_MINUTES) -> List[str]:
        if isinstance(item, Variant):
            return sweep_command(self.data, item, self.runs) + (REHEARSAL_MODEL if self.args.rehearse else [])
        kind, what = item.split(":")
        if kind == "bundled":
            return bundled_argv(what, self.runs, self.args.rehearse, minutes)
        if kind == "canary":
            return canary_argv(self.data, what, self.runs)
        return bench_argv(what, self.runs / f"{kind}_{what}.json")

    def save(self):
        self.result["seconds"] = round(time.time() - self.start, 1)
        write_json_atomic(self.args.out, self.result)

    @staticmethod
    def call(cmd: List[str], written: Path, key: str, timeout: Optional[float] = None) -> dict:
        """What a command did: its exit status ("timeout" after ``timeout`` seconds), its seconds, last 25 lines
        of output, and the JSON file it wrote (a bundled run's results.json, a canary's canary.json), if any,
        under ``key``."""
        t0 = time.time()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            status, output = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            status, output = "timeout", str(exc.stdout or "") + str(exc.stderr or "")
        entry = {"exit_status": status, "seconds": round(time.time() - t0, 1), "output_tail": output.splitlines()[-25:]}
        if written.exists():
            entry[key] = json.loads(written.read_text())
        return entry

    def recipe(self, script: str, argv: List[str], written: Path, key: str) -> dict:
        return self.call(["bash", str(REPO / "recipes" / script), *argv], written, key)

    def bench(self, model: str, cmd: List[str]):
        entry = {"command": " ".join(cmd[1:]),
                 **self.call(cmd, Path(cmd[cmd.index("--output") + 1]), "result", timeout=3 * BENCH_SECONDS)}
        self.result.setdefault("bench", {})[model] = entry
        log(f"bench:{model}: exit {entry['exit_status']} in {entry['seconds']} s")

    def canary(self, model: str, cmd: List[str]):
        written = self.runs / f"canary_{model}" / "canary" / "canary.json"
        entry = self.result["canary"][model] = self.recipe("parallel.sh", cmd, written, "canary")
        log(f"canary {model}: exit {entry['exit_status']} in {entry['seconds']} s")

    def bundled(self, kind: str):
        minutes = REHEARSAL_MINUTES if self.args.rehearse else max(
            BASE_MIN_MINUTES, (self.deadline - time.time() - BASE_OVERHEAD_SECONDS) / 60)
        argv = self.command(f"bundled:{kind}", minutes)
        results = Path(argv[argv.index("--workdir") + 1]) / "results.json"
        entry = self.result["bundled"][kind] = {"command": "bash recipes/wmt14_en_de.sh " + " ".join(argv),
                                                **self.recipe("wmt14_en_de.sh", argv, results, "results")}
        log(f"bundled:{kind}: exit {entry['exit_status']} in {entry['seconds']} s, sacreBLEU "
            f"{entry.get('results', {}).get('sacrebleu')}")

    def sweep(self, v: Variant, cmd: List[str], forks):
        folder = self.runs / v.name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        profile = str(folder / "profile.json") if v.profile else None
        rc = forks.run(cmd, folder / "train.log", {"ATTN_RUN_STATS": str(folder / "stats")}, profile)
        entry = sweep_result(v, cmd, folder, rc, self.matmul)
        add_utilization(entry, folder, self.args.out.parent / "smi.csv")
        if profile and Path(profile).exists():
            summary = {"run": v.name, **json.loads(Path(profile).read_text())}
            self.result.setdefault("profile", summary)  # the first: the plain layers'
            self.result.setdefault("profiles", {})[v.name] = summary
        self.result["sweep"].append(entry)
        log(f"{v.name}: " + ", ".join(f"{k} {entry.get(k)}" for k in (
            "exit_status", "updates", "seconds_per_update", "target_tokens_per_second", "mfu", "padding_share",
            "peak_reserved_gib")))

    def measure(self):
        """Every item in order, each started only if it ends before the deadline."""
        env = self.result["environment"]
        env["measured_bf16_matmul_tflops"] = round(
            canary.matmul_rate("cpu" if self.args.rehearse else "cuda", "bf16") / 1e12, 3 if self.args.rehearse else 1)
        self.matmul = env["measured_bf16_matmul_tflops"] * 1e12
        log(f"bf16 matmul: {self.matmul / 1e12:.3g} TFLOP/s")
        self.save()
        forks = ForkedTrainings(cwd=REPO)
        try:
            for item in self.items:
                if time.time() + item_seconds(item) > self.deadline:
                    self.result["skipped"].append(item_name(item))
                    continue
                kind, _, what = item_name(item).partition(":")
                if isinstance(item, Variant):
                    self.sweep(item, self.command(item), forks)
                elif kind == "bundled":
                    self.bundled(what)
                else:
                    getattr(self, kind)(what, self.command(item))
                self.save()
        finally:
            forks.close()
        self.save()
        log(f"wrote {self.args.out}")


def show(check: Check):
    """Print every command of the plan; with --dry-run, check that each parses (fairseq-train's parser, the
    recipe's dry run, the benchmark's parser)."""
    log(f"the GPU check: {len(check.items)} runs (the recipe's training command changed one way at a time, "
        f"canaries, the bundled run), none started later than {check.args.seconds} s after the start")
    scripts = {"canary": "bash recipes/parallel.sh ", "bundled": "bash recipes/wmt14_en_de.sh "}
    for item in check.items:
        print(f"  $ [{item_name(item)}] {scripts.get(item_name(item).split(':')[0], '')}"
              + " ".join(map(str, check.command(item))), flush=True)


def dry_run(check: Check) -> int:
    from fairseq import options

    trainings = [check.command(item) for item in check.items if isinstance(item, Variant)]
    for cmd in trainings:  # fairseq-train's own parser (the plugin's options included) accepts each
        try:
            options.parse_args_and_arch(options.get_training_parser(), input_args=[str(c) for c in cmd[1:]])
        except SystemExit:
            raise UserError(f"fairseq-train does not parse: {' '.join(map(str, cmd))}") from None
    log(f"fairseq-train's parser accepts the {len(trainings)} training commands")
    for item in check.items:
        name = item_name(item)
        if name.startswith("canary:"):
            log(f"the recipe's dry run of {name}:")
            parallel.main([*check.command(item), "--dry-run"])
        elif name.startswith("bundled:"):
            log(f"the recipe's dry run of {name}:")
            translation.main([*check.command(item), "--dry-run", "--gpu", "H200"])
        elif name.startswith("bench:"):
            train.parser().parse_args(check.command(item)[2:])  # the benchmark's own parser takes the options
            log(f"benchmarks/train_throughput.py's parser accepts the options of {name}")
    return 0


def run(args) -> int:
    check = Check(args)
    show(check)
    if args.dry_run:
        return dry_run(check)
    if not check.data.joinpath("data-bin").exists():
        raise UserError(f"{check.data}/data-bin: not there; run bash benchmarks/gpu_check.sh --prepare first (where "
                        "../shared is) and carry .gpu_check/data")
    check.measure()
    return 0


# ---------------------------------------------------------------------------------------------- command line
def add_only_option(p):
    p.add_argument("--only", type=lambda text: text.split(","), metavar="NAME,...",
                   help="run only these of the plan (names as --dry-run prints them: base_28k_compile, canary:base)")


def parse_args(argv=None):
    p = ArgumentParser(prog="python -m lab.bench.gpu_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    pp = sub.add_parser("prepare", help="the synthetic corpus and its data-bin, here (needs ../shared and wordfreq)")
    pp.add_argument("--pairs", type=Number(int, minimum=1000), default=200000,
                    help="training pairs of the synthetic corpus (default 200000)")
    pp.add_argument("--workers", type=Number(int, minimum=1), default=os.cpu_count() or 1,
                    help="the data stages' --workers")
    pp.add_argument("--shapes", type=Path, nargs=2, metavar=("EN", "DE"),
                    help="sentence-shape text (default: newstest2013+2014 EN-DE from ../shared)")
    pp.add_argument("--dir", type=Path, default=HERE, help=f"where (default {HERE})")
    rh = sub.add_parser("rehearse", help="prepare a small corpus in --dir and run --rehearse on it (a CPU, minutes)")
    rh.add_argument("--dir", type=Path, default=HERE / "rehearsal", help=f"where (default {HERE / 'rehearsal'})")
    add_output_option(rh, "the results file", default=HERE / "rehearsal" / "gpu_check.json")
    rh.add_argument("--seconds", type=Number(int, minimum=60), default=300, help="run's --seconds (default 300)")
    add_only_option(rh)
    pr = sub.add_parser("run", help="measure on the GPU (--dry-run: print and check every command, on any machine)")
    pr.add_argument("--dry-run", action="store_true", help="print every command and check that it parses; run none")
    pr.add_argument("--rehearse", action="store_true",
                    help="run the plan's first trainings at base size (one profiled) with a tiny model on the CPU, "
                         "and the bundled runs with --smoke's data, through the same code as on the GPU (the "
                         "rehearse command runs it on a small corpus)")
    pr.add_argument("--seconds", type=Number(int, minimum=60), default=420,
                    help="stop starting runs that would end later than this many seconds after the start (default 420)")
    add_output_option(pr, "the results file", default=HERE / "gpu_check.json")
    add_only_option(pr)
    pr.add_argument("--commit", help="the commit the tree is at (the GPU machine's copy has no .git)")
    pr.add_argument("--dir", type=Path, default=HERE, help=f"the prepared folder (default {HERE})")
    pr.add_argument("--install-seconds", type=Number(int, minimum=0),
                    help="how long the install took (gpu_check.sh measures it)")
    pr.add_argument("--install-as-documented", choices=("yes", "no"),
                    help="whether docs/scaling.md's install commands worked as written (gpu_check.sh)")
    pr.add_argument("--script-seconds", type=Number(int, minimum=0),
                    help="gpu_check.sh's own --seconds (install included), for the command the results file records")
    args = p.parse_args(argv)
    if args.command in ("run", "rehearse") and args.only:
        names = [item_name(item) for item in plan()]
        unknown = [name for name in args.only if name not in names]
        if unknown:
            raise UsageError(f"--only: not in the plan: {', '.join(unknown)} (the plan: {', '.join(names)})")
    args.command_line = "bash benchmarks/gpu_check.sh" + (" --dry-run" if getattr(args, "dry_run", False) else "") \
        + (" --rehearse" if args.command == "rehearse" or getattr(args, "rehearse", False) else "") \
        + (f" --seconds {args.script_seconds}" if getattr(args, "script_seconds", None) else "") \
        + (f" --only {','.join(args.only)}" if getattr(args, "only", None) else "")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    return {"prepare": prepare, "rehearse": rehearse, "run": run}[args.command](args)


if __name__ == "__main__":
    sys.exit(main_guard(main))
