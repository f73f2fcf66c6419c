"""What a training run costs, before it starts, as scripts/training_cost.py
(:mod:`attn_kit.recipes.cost_report`) and the recipes' --dry-run print it (:func:`describe_run`): the
analytic FLOPs and the paper's Table 2 arithmetic (:mod:`attn_kit.planning.cost`), the training's wall time on
a GPU from the step time fitted to what ran (:mod:`attn_kit.planning.step_model`: an estimate and a range, each
end with its source), and the disk the kept checkpoints take."""
import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

from . import step_model
from .cost import (GPUS, MEAN_LENGTH, TABLE2_ARCH, Shape, checkpoint_lines, gpu, hours_text,
                   train_flops_per_update)
from .paper import P100_SUSTAINED_TFLOPS, TABLE2_FLOPS, TABLE2_TRAINING


def paper_share(shape: Shape) -> float:
    """The model FLOP utilization the paper's step times imply on its P100s, of its model nearer in
    width (attn_kit.planning.step_model.paper_utilization)."""
    shares = step_model.paper_utilization(MEAN_LENGTH)
    return shares["attn_paper_big" if shape.encoder.d_model >= 1024 else "attn_paper_base"]


def wall_time_lines(shape: Shape, updates: int, devices: int, gpu_name: str, precision: str, per_forward: int,
                    forwards: int, mean_length: float = MEAN_LENGTH) -> List[str]:
    """The training's wall time on ``devices`` x ``gpu_name`` from attn_kit.planning.step_model: the estimate and
    the range, each end with its source."""
    p = step_model.predict(shape, per_forward, forwards, gpu_name, precision, mean_length)
    if p is None:
        return [f"no estimate for {gpu_name} in {precision}"]
    peak = GPUS[gpu_name].peak(precision)
    flops = forwards * train_flops_per_update(shape, per_forward, mean_length)

    def one(e):
        return f"{hours_text(updates * e.seconds_per_update)} ({e.seconds_per_update:.3f} s per update, " \
               f"{flops / e.seconds_per_update / (peak * 1e12):.0%} of the dense peak)"

    return [f"training wall time on {devices} x {gpu_name} ({per_forward}-token forwards, {forwards} per update, "
            f"{precision}): {one(p.estimate)}, from {p.estimate.source}",
            f"  range: {one(p.low)}, from {p.low.source}",
            f"  to {one(p.high)}, from {p.high.source}"]


def gpu_seconds(shape: Shape, updates: int, per_forward: int, forwards: int, precision: str,
                mean_length: float = MEAN_LENGTH) -> dict:
    """{GPU name: the estimated training seconds of ``updates`` updates} (attn_kit.planning.step_model), for
    every GPU of attn_kit.planning.cost.GPUS that computes in ``precision``."""
    out = {}
    for name, g in GPUS.items():
        p = step_model.predict(shape, per_forward, forwards, name, precision, mean_length) if g.peak(precision) \
            else None
        if p:
            out[name] = updates * p.estimate.seconds_per_update
    return out


def paper_gpu_seconds(shape: Shape, tokens_per_update: int, updates: int, mean_length: float = MEAN_LENGTH) -> float:
    """The estimated training seconds on the paper's 8 P100s in fp32 (its batch split over them)."""
    t = TABLE2_TRAINING["attn_paper_base"]  # base and big trained on the same 8 P100s
    p = step_model.predict(shape, math.ceil(tokens_per_update / t["gpus"]), 1, t["gpu"], "fp32", mean_length)
    return updates * p.estimate.seconds_per_update


@dataclass(frozen=True)
class Devices:
    """What a run trains on, for :func:`describe_run`: ``gpus`` (0: CPU) in ``precision``; ``name``
    (a GPU of attn_kit.planning.cost.GPUS) or the user's own ``tflops`` peak and ``utilization`` of it."""
    gpus: int
    precision: str
    name: Optional[str] = None
    tflops: Optional[float] = None
    utilization: Optional[float] = None


def describe_run(shape: Shape, arch: str, tokens_per_update: int, updates: int, hw: Devices, *,
                 vocab_note: str = "", mean_length: float = MEAN_LENGTH, average: Optional[int] = None,
                 forward: Optional[Tuple[int, int]] = None) -> List[str]:
    """The cost lines of a run, the same for scripts/training_cost.py and a recipe's --dry-run:
    analytic FLOPs, the paper's Table 2 cost, the compute-only wall time, the checkpoints' disk
    (``average``: the checkpoints averaged), and where the whole run's time comes from (the canary).
    ``tokens_per_update``: padded positions per update, fairseq's --max-tokens x devices x --update-freq,
    the recipes' --tokens-per-update; ``forward``: (tokens per device and forward, forwards per update)."""
    gpus, precision, gpu_name, gpu_tflops, utilization = hw.gpus, hw.precision, hw.name, hw.tflops, hw.utilization
    max_tokens_per_device, forwards = forward or (None, None)
    per_update = train_flops_per_update(shape, tokens_per_update, mean_length)
    total = per_update * updates
    lines = [f"training cost (analytic, attn_kit.planning.cost): {per_update:.3g} FLOPs per update (forward + backward = "
             f"3 x forward; {shape.describe()}{vocab_note}; {tokens_per_update} source and {tokens_per_update} "
             f"target positions per update, padding included, in sentences of ~{mean_length:g} tokens) x "
             f"{updates} updates = {total:.2e} FLOPs"]
    paper = TABLE2_ARCH.get(arch)
    if paper:
        t = TABLE2_TRAINING[paper]
        lines.append(f"the paper's Table 2 for {paper}: {TABLE2_FLOPS[paper]:.1e} FLOPs = {t['time']} x {t['gpus']} "
                     f"{t['gpu']} x {P100_SUSTAINED_TFLOPS:g} TFLOPS (hardware time at the single-precision rate, not "
                     f"model FLOPs; this run's analytic count is {total / TABLE2_FLOPS[paper]:.0%} of it)")
    else:
        lines.append(f"the paper's Table 2 gives no cost for {arch}")
    devices = gpus or (1 if gpu_tflops or gpu_name else 0)
    forwards = forwards or 1
    per_forward = max_tokens_per_device or math.ceil(tokens_per_update / max(1, devices * forwards))
    batch = f"{per_forward}-token forwards, {forwards} per update"
    if utilization or gpu_tflops:  # the user's own assumption: the arithmetic alone at that utilization
        peak = gpu_tflops or gpu(gpu_name).peak(precision)
        u = utilization or paper_share(shape)
        if peak:
            source = "--utilization" if utilization else "the paper's own step time (Sec. 5.2) on its P100s"
            lines.append(f"training wall time on {devices} x {peak:g} TFLOPS at {u:.0%} of it ({source}; the "
                         f"arithmetic alone): {hours_text(total / (devices * peak * 1e12 * u))}")
    elif gpu_name and gpu(gpu_name).peak(precision) is None:
        lines.append(f"{gpu_name} has no {precision} units: choose --precision fp16 for it")
    elif gpu_name:
        lines += wall_time_lines(shape, updates, devices, gpu_name, precision, per_forward, forwards, mean_length)
    elif gpus:
        seconds = gpu_seconds(shape, updates, per_forward, forwards, precision, mean_length)
        times = [f"{name} {hours_text(s)}" for name, s in seconds.items()]
        lines.append(f"training wall time on {gpus} GPUs ({batch}, {precision}; attn_kit.planning.step_model, --gpu NAME for "
                     f"the range and its sources): {', '.join(times)}")
    paper = TABLE2_TRAINING.get(TABLE2_ARCH.get(arch, ""))
    if paper and not (gpu_name == paper["gpu"] and precision == "fp32" and devices == paper["gpus"]):
        p = step_model.predict(shape, math.ceil(tokens_per_update / paper["gpus"]), 1, paper["gpu"], "fp32", mean_length)
        lines.append(f"on the paper's {paper['gpus']} {paper['gpu']}s (fp32) the same model predicts "
                     f"{hours_text(updates * p.estimate.seconds_per_update)} (range "
                     f"{hours_text(updates * p.low.seconds_per_update)} - {hours_text(updates * p.high.seconds_per_update)}"
                     f"); the paper: {paper['time']}")
    if average:
        lines += checkpoint_lines(shape, average)
    lines.append("training only, and data parallel without its all-reduce (not yet measured); the whole run adds "
                 "data preparation, validations, checkpoint writes, averaging and generation: the recipe's --canary "
                 "measures them on your machine and predicts each")
    return lines
