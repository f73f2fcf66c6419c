"""What a training run costs before it starts, as scripts/training_cost.py (:mod:`attn_kit.recipes.cost_report`)
and the recipes' --dry-run print it (:func:`describe_run`): the analytic FLOPs and Table 2's arithmetic
(:mod:`.cost`), wall time and GPU-hours from the fitted step time (:mod:`.step_model`: an estimate and a range,
each end with its source), with several GPUs the all-reduce (an estimate: no multi-GPU run measured) and the
node's layouts, the checkpoint interval as the paper's 10 minutes of updates, its writes and their disk."""
import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

from . import step_model
from .cost import GPUS, MEAN_LENGTH, NETWORK_GB_PER_S, TABLE2_ARCH, Shape, gpu, hours_text, train_flops_per_update
from .paper import (CHECKPOINT_INTERVAL_SECONDS, P100_SUSTAINED_TFLOPS, PAPER_STEP_SECONDS, TABLE2_FLOPS,
                    TABLE2_TRAINING)


def forward_for(shape: Shape, tokens_per_update: int, devices: int, gpu_name: str, precision: str) -> Tuple[int, int]:
    """(tokens per forward, forwards per update) as ``--max-tokens-per-gpu auto`` sizes them
    (step_model.size_forward), spread evenly over the forwards; on the paper's own 8 P100s the paper's
    split, one forward each (Sec. 5.1-5.2: its run held its ~3100 tokens per GPU)."""
    paper = TABLE2_TRAINING["attn_paper_base"]
    share = math.ceil(tokens_per_update / max(1, devices))
    cap = share if (gpu_name, devices) == (paper["gpu"], paper["gpus"]) else \
        step_model.size_forward(shape, tokens_per_update, devices, GPUS[gpu_name].memory_gib, precision)
    forwards = math.ceil(share / cap)
    return math.ceil(share / forwards), forwards


def gpu_hours_text(seconds: float, gpus: int) -> str:
    return f"{seconds * gpus / 3600:,.1f} GPU-hours"


# ---------------------------------------------------------------------------------------------- all-reduce
# Of a link's datasheet bandwidth, what NCCL's ring all-reduce reaches on large messages: an assumption
# (no multi-GPU run of the recipe has been measured), given as the two ends of the range.
ALLREDUCE_EFFICIENCY = (0.5, 0.8)
GRADIENT_BYTES = {"fp16": 2, "bf16": 4, "fp32": 4}  # fairseq keeps fp32 gradients under bf16 autocast


@dataclass(frozen=True)
class Link:
    """How ``gpus`` GPUs exchange gradients: ``gb_per_s`` per GPU and direction on the slowest hop, ``what``
    in words."""
    gpus: int
    gb_per_s: float
    what: str


def link_of(gpu_name: str, gpus: int, nodes: int, gb_per_s: Optional[float] = None) -> Link:
    """``gb_per_s`` (--interconnect-gb-per-s) where given, else the GPU's own link within a node
    (cost.GPUS) and :data:`~.cost.NETWORK_GB_PER_S` per node between nodes."""
    g = GPUS[gpu_name]
    if gb_per_s:
        return Link(gpus, gb_per_s, f"--interconnect-gb-per-s {gb_per_s:g}")
    if nodes > 1:
        return Link(gpus, min(g.link_gb_per_s, NETWORK_GB_PER_S),
                    f"the network between {nodes} nodes ({NETWORK_GB_PER_S:g} GB/s per node assumed, 200 Gb/s "
                    "InfiniBand; --interconnect-gb-per-s for yours)")
    return Link(gpus, g.link_gb_per_s, f"{g.link} ({g.link_gb_per_s:g} GB/s per GPU, datasheet)")


def allreduce_seconds(shape: Shape, link: Link, precision: str) -> Tuple[float, float]:
    """(fast, slow) seconds of one ring all-reduce of the gradients: each GPU sends and receives
    2 (n - 1) / n of their bytes, at each end of :data:`ALLREDUCE_EFFICIENCY`."""
    if link.gpus <= 1:
        return 0.0, 0.0
    moved = 2 * (link.gpus - 1) / link.gpus * shape.parameters() * GRADIENT_BYTES[precision]
    return tuple(moved / (link.gb_per_s * 1e9 * e) for e in reversed(ALLREDUCE_EFFICIENCY))


@dataclass(frozen=True)
class UpdateTime:
    """Seconds per update with the all-reduce: the estimate adds it whole at the fast end (DDP overlaps
    it with the backward pass only in part); the low end hides it behind the backward pass (2/3 of the
    compute); the high end adds it whole at the slow end."""
    estimate: float
    low: float
    high: float
    allreduce: float  # the estimate's all-reduce seconds
    prediction: step_model.Prediction

    @classmethod
    def of(cls, shape: Shape, forward: Tuple[int, int], gpu_name: str, precision: str, link: Link,
           mean_length: float = MEAN_LENGTH) -> Optional["UpdateTime"]:
        p = step_model.predict(shape, forward[0], forward[1], gpu_name, precision, mean_length)
        if p is None:
            return None
        fast, slow = allreduce_seconds(shape, link, precision)
        low = p.low.seconds_per_update
        return cls(p.estimate.seconds_per_update + fast, low + max(0.0, fast - 2 / 3 * low),
                   p.high.seconds_per_update + slow, fast, p)


def wall_time_lines(shape: Shape, updates: int, devices: int, gpu_name: str, precision: str,
                    forward: Tuple[int, int], link: Link, t: UpdateTime, mean_length: float) -> List[str]:
    """The training's wall time on ``devices`` x ``gpu_name`` (``t``): the estimate and the range, each
    end with its source, hours and GPU-hours; with several GPUs, the all-reduce over ``link``."""
    peak = GPUS[gpu_name].peak(precision)
    flops = forward[1] * train_flops_per_update(shape, forward[0], mean_length)

    def one(seconds, e):
        return f"{hours_text(updates * seconds)}, {gpu_hours_text(updates * seconds, devices)} ({seconds:.3f} s " \
               f"per update, {flops / seconds / (peak * 1e12):.0%} of the dense peak), from {e.source}"

    p = t.prediction
    lines = [f"training wall time on {devices} x {gpu_name} ({forward[0]}-token forwards, {forward[1]} per update, "
             f"{precision}): {one(t.estimate, p.estimate)}",
             f"  range: {one(t.low, p.low)}", f"  to {one(t.high, p.high)}"]
    if devices > 1:
        fast, slow = allreduce_seconds(shape, link, precision)
        lo, hi = ALLREDUCE_EFFICIENCY
        gb = shape.parameters() * GRADIENT_BYTES[precision] / 1e9
        lines.append(f"all-reduce of the gradients per update: {gb:.2f} GB over {link.what} at {lo:.0%}-{hi:.0%} of "
                     f"it: {fast * 1e3:.1f}-{slow * 1e3:.1f} ms, {t.allreduce / t.estimate:.0%} of the estimate's "
                     "update (no multi-GPU run measured: the range spans it hidden behind the backward pass to it "
                     "added whole)")
    return lines


def gpu_seconds(shape: Shape, updates: int, forward: Optional[Tuple[int, int]], precision: str,
                mean_length: float = MEAN_LENGTH, tokens_per_update: int = 0, devices: int = 1) -> dict:
    """{GPU name: estimated training seconds of ``updates`` updates} for every GPU that computes in
    ``precision``; ``forward`` None: as each GPU's memory sizes it (:func:`forward_for`)."""
    out = {}
    for name, g in GPUS.items():
        if g.peak(precision):
            f = forward or forward_for(shape, tokens_per_update, devices, name, precision)
            p = step_model.predict(shape, *f, name, precision, mean_length)
            out[name] = updates * p.estimate.seconds_per_update
    return out


def paper_update_time(shape: Shape, tokens_per_update: int, mean_length: float = MEAN_LENGTH) -> UpdateTime:
    """An update on the paper's 8 P100s in fp32 (its batch split over them; their all-reduce)."""
    t = TABLE2_TRAINING["attn_paper_base"]  # base and big trained on the same 8 P100s
    forward = forward_for(shape, tokens_per_update, t["gpus"], t["gpu"], "fp32")
    return UpdateTime.of(shape, forward, t["gpu"], "fp32", link_of(t["gpu"], t["gpus"], 1), mean_length)


# ---------------------------------------------------------------------------------------------- layouts
@dataclass(frozen=True)
class Layout:
    """``gpus`` GPUs per run, ``runs`` of them side by side on the node(s); its forward and update time."""
    gpus: int
    runs: int
    forward: Tuple[int, int]
    time: UpdateTime


def layouts(shape: Shape, tokens_per_update: int, gpus_per_node: int, nodes: int, gpu_name: str, precision: str,
            gb_per_s: Optional[float] = None, mean_length: float = MEAN_LENGTH) -> List[Layout]:
    """Ways to spend the nodes' GPUs: one data-parallel job on all of them, then halving the GPUs per
    run (fuller forwards, fewer all-reduces, more runs side by side) down to one GPU per run."""
    total = k = gpus_per_node * nodes
    out = []
    while k >= 1:
        if total % k == 0:
            forward = forward_for(shape, tokens_per_update, k, gpu_name, precision)
            link = link_of(gpu_name, k, math.ceil(k / gpus_per_node), gb_per_s)
            t = UpdateTime.of(shape, forward, gpu_name, precision, link, mean_length)
            if t is None:
                return []
            out.append(Layout(k, total // k, forward, t))
        k //= 2
    return out


def layout_lines(shape: Shape, tokens_per_update: int, updates: int, gpus_per_node: int, nodes: int, gpu_name: str,
                 precision: str, gb_per_s: Optional[float] = None, mean_length: float = MEAN_LENGTH) -> List[str]:
    """The :func:`layouts` with hours and GPU-hours per run, naming the one that spends the fewest
    GPU-hours (and the fastest for one run, where it differs)."""
    found = layouts(shape, tokens_per_update, gpus_per_node, nodes, gpu_name, precision, gb_per_s, mean_length)
    if len(found) < 2:
        return []
    total = gpus_per_node * nodes
    lines = [f"layouts of the {nodes} x {gpus_per_node} {gpu_name} for this model ({tokens_per_update} tokens per "
             "update, the same updates; hours and GPU-hours per run, estimate and range):"]
    for lay in found:
        t = lay.time
        what = "one data-parallel job (this command)" if lay.gpus == total else \
            f"{lay.runs} runs side by side" + (" (e.g. Table 2's four models, Table 3's rows)" if lay.gpus == 1 else "")
        lines.append(f"  {lay.gpus} GPU{'s' if lay.gpus > 1 else ''} per run, {what}: {lay.forward[0]} x "
                     f"{lay.forward[1]} forwards, {hours_text(updates * t.estimate)} "
                     f"({hours_text(updates * t.low)} - {hours_text(updates * t.high)}), "
                     f"{gpu_hours_text(updates * t.estimate, lay.gpus)}"
                     + (f", all-reduce {t.allreduce / t.estimate:.0%} of an update" if lay.gpus > 1 else ""))
    cheapest = min(found, key=lambda lay: lay.gpus * lay.time.estimate)
    fastest = min(found, key=lambda lay: lay.time.estimate)
    whole = found[0]
    ratio = whole.gpus * whole.time.estimate / (cheapest.gpus * cheapest.time.estimate)
    lines.append(f"fewest GPU-hours: {cheapest.gpus} GPU{'s' if cheapest.gpus > 1 else ''} per run "
                 f"({gpu_hours_text(updates * cheapest.time.estimate, cheapest.gpus)}"
                 + (f", {ratio:.1f}x fewer than one job on all {total}" if cheapest is not whole else "") + ")"
                 + (f"; fastest for one run: {fastest.gpus} GPUs ({hours_text(updates * fastest.time.estimate)})"
                    if fastest is not cheapest else "")
                 + "; --ngpus (and --nnodes) choose the layout")
    return lines


# ---------------------------------------------------------------------------------------------- checkpoints
CHECKPOINT_WRITE_GB_PER_S = 1.0  # where no canary timed a write: an assumed disk rate
# Bytes a parameter takes in a fairseq checkpoint: fp32 weights and Adam's two fp32 moments (exp_avg,
# exp_avg_sq); an averaged checkpoint keeps the weights only.
CHECKPOINT_BYTES_PER_PARAMETER, AVERAGED_BYTES_PER_PARAMETER = 12, 4


def save_interval(seconds_per_update: float) -> int:
    """``--save-interval-updates auto``: the paper's 10-minute checkpoint interval (Sec. 6.1) in updates,
    a multiple of 100 (at least 100), so that averaging the last 5 or 20 averages the paper's last 50 or
    200 minutes."""
    return max(100, round(CHECKPOINT_INTERVAL_SECONDS / seconds_per_update / 100) * 100)


def estimated_save_interval(shape: Shape, forward: Tuple[int, int], gpu_name: Optional[str], precision: str,
                            link: Optional[Link]) -> Optional[Tuple[int, float]]:
    """(the auto interval, the seconds per update it is sized at) from ``gpu_name``'s estimate; None without."""
    t = UpdateTime.of(shape, forward, gpu_name, precision, link) if gpu_name and link else None
    return (save_interval(t.estimate), t.estimate) if t else None


def paper_save_interval(arch: str) -> int:
    """The interval of the paper's own run (its step time, Sec. 5.2) for the paper model nearer ``arch``."""
    return save_interval(PAPER_STEP_SECONDS["attn_paper_big" if "big" in arch else "attn_paper_base"])


def checkpoint_write_lines(shape: Shape, updates: int, interval: int, seconds_per_update: Optional[float],
                           write_seconds: Optional[float] = None) -> List[str]:
    """The interval in time, the writes, their bytes and time (``write_seconds``: one write as the canary
    timed it, else at :data:`CHECKPOINT_WRITE_GB_PER_S`)."""
    each = shape.parameters() * CHECKPOINT_BYTES_PER_PARAMETER
    writes = updates // interval + 1  # fairseq also saves at the last update
    one = write_seconds if write_seconds is not None else each / (CHECKPOINT_WRITE_GB_PER_S * 1e9)
    source = "one write as the canary timed it" if write_seconds is not None else \
        f"at {CHECKPOINT_WRITE_GB_PER_S:g} GB/s, assumed: --canary times a write"
    every = f" = {hours_text(interval * seconds_per_update)} at the estimated {seconds_per_update:.3f} s per update " \
            f"(the paper saved every {CHECKPOINT_INTERVAL_SECONDS // 60} minutes, Sec. 6.1)" if seconds_per_update else ""
    return [f"checkpoint writes: every {interval} updates{every}; {writes} writes of {each / 1e9:.2f} GB = "
            f"{writes * each / 1e12:.2f} TB written, {hours_text(writes * one)} of writing ({one:.1f} s each, {source})"]


def checkpoint_lines(shape: Shape, average: int) -> List[str]:
    """The disk the kept checkpoints take: ``average`` of the interval's, the last, the best, the average."""
    n = shape.parameters()
    each, avg = n * CHECKPOINT_BYTES_PER_PARAMETER, n * AVERAGED_BYTES_PER_PARAMETER
    kept = (average + 2) * each + avg
    return [f"checkpoints: {each / 1e9:.2f} GB each ({n / 1e6:.1f}M parameters x {CHECKPOINT_BYTES_PER_PARAMETER} "
            f"bytes: fp32 weights and Adam's two moments); the run keeps {average + 2} (--average {average}, "
            f"checkpoint_last.pt, checkpoint_best.pt) and the average ({avg / 1e9:.2f} GB): {kept / 1e9:.1f} GB"]


# ---------------------------------------------------------------------------------------------- a run
@dataclass(frozen=True)
class Devices:
    """What a run trains on: ``gpus`` in all (0: CPU) on ``nodes`` nodes; ``name`` (a GPU of cost.GPUS)
    or the user's own ``tflops`` peak and ``utilization`` of it; ``gb_per_s``: the user's interconnect."""
    gpus: int
    precision: str
    name: Optional[str] = None
    tflops: Optional[float] = None
    utilization: Optional[float] = None
    nodes: int = 1
    gb_per_s: Optional[float] = None


@dataclass(frozen=True)
class Checkpoints:
    """``average`` averaged, one every ``interval`` updates (None: sized at the job's start),
    ``write_seconds`` as a canary timed one write."""
    average: Optional[int] = None
    interval: Optional[int] = None
    write_seconds: Optional[float] = None


def per_kind_lines(shape: Shape, tokens_per_update: int, updates: int, gpus: int, precision: str,
                   mean_length: float) -> List[str]:
    """No GPU known where the plan is made: per GPU kind, the forward the job would size at its start
    and the training's hours and GPU-hours."""
    parts = []
    for name, g in GPUS.items():
        if g.peak(precision) and name != "P100":
            forward = forward_for(shape, tokens_per_update, gpus, name, precision)
            s = updates * UpdateTime.of(shape, forward, name, precision, link_of(name, gpus, 1), mean_length).estimate
            parts.append(f"{name} ({g.memory_gib:g} GiB) {forward[0]} x {forward[1]}: {hours_text(s)}, "
                         f"{gpu_hours_text(s, gpus)}")
    return [f"training wall time on {gpus} GPU{'s' if gpus > 1 else ''} ({precision}): no GPU is known here, so the "
            "job sizes the forward for its own GPU at its start (--gpu NAME plans it here, with the range, the "
            "all-reduce and the layouts); per GPU kind, tokens per forward x forwards per update "
            "(attn_kit.planning.step_model): " + "; ".join(parts)]


def describe_run(shape: Shape, arch: str, tokens_per_update: int, updates: int, hw: Devices, *,
                 vocab_note: str = "", mean_length: float = MEAN_LENGTH, checkpoints: Checkpoints = Checkpoints(),
                 forward: Optional[Tuple[int, int]] = None) -> List[str]:
    """The cost lines of a run, the same for scripts/training_cost.py and a recipe's --dry-run.
    ``tokens_per_update``: padded positions per update (--max-tokens x devices x --update-freq);
    ``forward``: (tokens per device and forward, forwards per update), None where the job sizes it."""
    gpus, precision, gpu_name = hw.gpus, hw.precision, hw.name
    per_update = train_flops_per_update(shape, tokens_per_update, mean_length)
    total = per_update * updates
    lines = [f"training cost (analytic, attn_kit.planning.cost): {per_update:.3g} FLOPs per update (forward + backward = "
             f"3 x forward; {shape.describe()}{vocab_note}; {tokens_per_update} source and {tokens_per_update} "
             f"target positions per update, padding included, in sentences of ~{mean_length:g} tokens) x "
             f"{updates} updates = {total:.2e} FLOPs"]
    table2 = TABLE2_ARCH.get(arch)
    if table2:
        t = TABLE2_TRAINING[table2]
        lines.append(f"the paper's Table 2 for {table2}: {TABLE2_FLOPS[table2]:.1e} FLOPs = {t['time']} x {t['gpus']} "
                     f"{t['gpu']} x {P100_SUSTAINED_TFLOPS:g} TFLOPS (hardware time at the single-precision rate, not "
                     f"model FLOPs; this run's analytic count is {total / TABLE2_FLOPS[table2]:.0%} of it)")
    else:
        lines.append(f"the paper's Table 2 gives no cost for {arch}")
    devices = gpus or (1 if hw.tflops or gpu_name else 0)
    seconds = None  # the estimated seconds per update, for the checkpoint interval's minutes
    if hw.utilization or hw.tflops:  # the user's own assumption: the arithmetic alone at that utilization
        peak = hw.tflops or gpu(gpu_name).peak(precision)
        # else the utilization the paper's step times imply on its P100s, of its model nearer in width
        u = hw.utilization or step_model.paper_utilization(MEAN_LENGTH)[step_model.paper_arch(shape)]
        if peak:
            source = "--utilization" if hw.utilization else "the paper's own step time (Sec. 5.2) on its P100s"
            seconds = total / updates / (devices * peak * 1e12 * u)
            lines.append(f"training wall time on {devices} x {peak:g} TFLOPS at {u:.0%} of it ({source}; the "
                         f"arithmetic alone): {hours_text(seconds * updates)}, "
                         f"{gpu_hours_text(seconds * updates, devices)}")
    elif gpu_name and gpu(gpu_name).peak(precision) is None:
        lines.append(f"{gpu_name} has no {precision} units: choose --precision fp16 for it")
    elif gpu_name:
        forward = forward or forward_for(shape, tokens_per_update, devices, gpu_name, precision)
        link = link_of(gpu_name, devices, hw.nodes, hw.gb_per_s)
        t = UpdateTime.of(shape, forward, gpu_name, precision, link, mean_length)
        seconds = t.estimate
        lines += wall_time_lines(shape, updates, devices, gpu_name, precision, forward, link, t, mean_length)
        if devices > 1:
            lines += layout_lines(shape, tokens_per_update, updates, devices // hw.nodes, hw.nodes, gpu_name,
                                  precision, hw.gb_per_s, mean_length)
    elif gpus and forward is None:
        lines += per_kind_lines(shape, tokens_per_update, updates, gpus, precision, mean_length)
    elif gpus:
        times = [f"{name} {hours_text(s)} ({gpu_hours_text(s, gpus)})"
                 for name, s in gpu_seconds(shape, updates, forward, precision, mean_length).items()]
        lines.append(f"training wall time on {gpus} GPU{'s' if gpus > 1 else ''} ({forward[0]}-token forwards, "
                     f"{forward[1]} per update, {precision}; attn_kit.planning.step_model, --gpu NAME for the range, "
                     f"its sources, the all-reduce and the layouts): {', '.join(times)}")
    paper = TABLE2_TRAINING.get(table2)
    if paper and not (gpu_name == paper["gpu"] and precision == "fp32" and devices == paper["gpus"]):
        p = paper_update_time(shape, tokens_per_update, mean_length)
        lines.append(f"on the paper's {paper['gpus']} {paper['gpu']}s (fp32) the same model predicts "
                     f"{hours_text(updates * p.estimate)} (range {hours_text(updates * p.low)} - "
                     f"{hours_text(updates * p.high)}); the paper: {paper['time']}")
    if checkpoints.interval:
        lines += checkpoint_write_lines(shape, updates, checkpoints.interval, seconds, checkpoints.write_seconds)
    elif gpus and forward is None:
        lines.append(f"checkpoint writes: the job sets --save-interval-updates at its start to "
                     f"{CHECKPOINT_INTERVAL_SECONDS // 60} minutes of its GPU's updates (Sec. 6.1)")
    if checkpoints.average:
        lines += checkpoint_lines(shape, checkpoints.average)
    lines.append("training only" + (", the all-reduce estimated (no multi-GPU run measured)" if devices > 1 else "")
                 + "; the whole run adds data preparation, validations, averaging and generation: the recipe's "
                   "--canary measures them on your machine and predicts each")
    return lines
