"""How long a training update takes and how much GPU memory a forward needs, fitted to what ran on
a GPU (the GPU check: the recipe's own training command at several forward sizes), so that --dry-run,
scripts/training_cost.py and the recipes' batch sizing read the same numbers. The fits are data the
package owns (calibration.json beside this module, :func:`fits`): the lab fits them from the GPU
check's results files (``python -m lab.calibration``; a test checks the table against the files), so
what a recipe does never depends on which measurement files a checkout holds.

**Time.** One forward + backward of F model FLOPs on a GPU takes

    seconds = c + F / R

c, the fixed cost of a forward (the host launching about a thousand kernels, fairseq's own work per
step: it does not shrink with the batch), and R, the rate at which the GPU does the arithmetic once
it is busy. An update is ``--update-freq`` of them. c and R are fitted per measured model (least
squares over the runs' seconds per forward against FLOPs per forward); R is kept as a share e of the
matmul rate measured in the same run, so that another GPU is that GPU's dense peak x (measured /
datasheet matmul rate of the measured GPU) x e. c is scaled by the layers (it counts kernel
launches) and kept as measured on another GPU: it is the host's, and a slower host makes it larger.

**The paper's GPUs.** For the paper's own run (8 P100s, fp32) the paper gives the step time itself
(Sec. 5.2: base 0.4 s, big 1.0 s): :func:`paper_utilization` is the model FLOP utilization those
imply, a second calibration for GPUs with no measurement, and the check that the model above
(measured on an H200 in bf16) predicts the paper's own hardware.

**Memory.** A forward of t tokens holds 16 bytes per parameter (fp32 weights and gradients, Adam's
two moments) + a fixed part + t x m bytes of activations; m is fitted per measured model from the
allocator's reserved peak, interpolated in d_model for other widths, and doubled for fp32 training
(not measured: activations are twice as wide).
"""
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

from .cost import GPUS, gpu_of_device, model_shape, train_flops_per_update
from .paper import PAPER_STEP_SECONDS, TABLE2_TRAINING

BYTES_PER_PARAMETER = 16  # fp32 weights, gradients, Adam's exp_avg and exp_avg_sq
MEMORY_SHARE = 0.6  # of the GPU's memory a forward is sized for: longer batches, fragmentation, CUDA's own
FP32_ACTIVATIONS = 2.0  # fp32 training's activations against bf16 autocast's (assumed, not measured)


@dataclass(frozen=True)
class Fit:
    """One model measured on one GPU: c and e of the time model, m of the memory model."""
    source: str                   # the results file
    gpu: str                      # as torch named it
    model: str                    # base | big
    d_model: int
    layers: int                   # encoder + decoder
    matmul_tflops: float          # bf16 matmul rate measured in the same run
    datasheet_tflops: float       # the GPU's dense bf16 peak
    forward_seconds: float        # c
    efficiency: float             # e: R / the measured matmul rate
    bytes_per_token: float        # m
    fixed_bytes: float            # reserved memory beyond 16 bytes per parameter, at no tokens
    points: int                   # runs fitted


CALIBRATION = Path(__file__).with_name("calibration.json")


@functools.lru_cache(maxsize=1)
def calibration() -> dict:
    """The package's calibration table (read once per process)."""
    return json.loads(CALIBRATION.read_text(encoding="utf-8"))


def fits() -> Tuple[Fit, ...]:
    """Every fit of the GPU check's measurements, as the calibration table holds them."""
    return tuple(Fit(**fit) for fit in calibration()["gpu_step"])


# ---------------------------------------------------------------------------------------------- time
@dataclass(frozen=True)
class Estimate:
    seconds_per_update: float
    source: str  # where it comes from, in words
    calibration: str  # "measured" (a fit, on this GPU's chip), "scaled" (a fit, another GPU's peak) or "paper"
    model: str  # the measured model (base, big) or the paper's arch it comes from


def update_seconds(shape, tokens_per_forward: float, forwards: int, gpu_name: str, precision: str,
                   mean_length: float) -> List[Estimate]:
    """Seconds per update on one of ``gpu_name`` (data parallel: each device's share) by each fit,
    and by the paper's step times for GPUs with no measurement."""
    g = GPUS[gpu_name]
    peak = g.peak(precision)
    if peak is None:
        return []
    flops = train_flops_per_update(shape, tokens_per_forward, mean_length)
    layers = shape.encoder.layers + shape.decoder.layers
    out = []
    measured = any(_same_chip(gpu_name, f.gpu) for f in fits())
    for f in fits():
        rate = peak * 1e12 * (f.matmul_tflops / f.datasheet_tflops) * f.efficiency
        c = f.forward_seconds * layers / f.layers
        scaled = "" if measured else f", scaled to the {gpu_name}'s dense {precision} peak"
        out.append(Estimate(forwards * (c + flops / rate),
                            f"the recipe's training of {f.model} measured on an {f.gpu} ({f.source}): "
                            f"{c * 1e3:.0f} ms fixed per forward + the arithmetic at {f.efficiency:.0%} of the "
                            f"measured matmul rate{scaled}", "measured" if measured else "scaled", f.model))
    if not measured:
        host = min(fits(), key=lambda f: abs(f.d_model - shape.encoder.d_model), default=None)
        c = host.forward_seconds * layers / host.layers if host else 0.0
        for arch, u in paper_utilization(mean_length).items():
            out.append(Estimate(forwards * (c + flops / (peak * 1e12 * u)),
                                f"the arithmetic at the paper's own rate for {arch} on its P100s (its step time, Sec. "
                                f"5.2: {u:.0%} of the dense peak) + {c * 1e3:.0f} ms fixed per forward (measured"
                                f"{f' on an {host.gpu}' if host else ''})", "paper", arch))
    return out


def _same_chip(gpu_name: str, device: str) -> bool:
    """Whether a measurement on ``device`` (torch's name) measured ``gpu_name``'s arithmetic: the same
    GPU, or H100 and H200, one chip (the H200's memory is larger and faster)."""
    measured = gpu_of_device(device)
    return measured == gpu_name or {gpu_name, measured} <= {"H100", "H200"}


def paper_utilization(mean_length: float) -> dict:
    """{arch: model FLOP utilization of the paper's P100s}: our FLOP count of an update of the
    paper's ~25000 + 25000 tokens, over 8 P100s' fp32 dense peak x the step time of Sec. 5.2."""
    out = {}
    for arch, seconds in PAPER_STEP_SECONDS.items():
        t = TABLE2_TRAINING[arch]
        flops = train_flops_per_update(model_shape(arch), 25000, mean_length)
        out[arch] = flops / (t["gpus"] * GPUS[t["gpu"]].fp32 * 1e12 * seconds)
    return out


# ---------------------------------------------------------------------------------------------- memory
def forward_bytes(shape, tokens: float, precision: str) -> Optional[float]:
    """GPU memory a training process holds at forwards of ``tokens`` (the largest fit's GPU
    sizes, interpolated in d_model); None without a fit."""
    all_fits = fits()
    if not all_fits:
        return None
    d = shape.encoder.d_model
    lo, hi = min(all_fits, key=lambda f: f.d_model), max(all_fits, key=lambda f: f.d_model)
    if hi.d_model == lo.d_model:
        per_token = lo.bytes_per_token * d / lo.d_model
    else:  # linear in d_model through the two widths measured, at least half the narrower one's
        w = (d - lo.d_model) / (hi.d_model - lo.d_model)
        per_token = max(0.5 * lo.bytes_per_token, lo.bytes_per_token + w * (hi.bytes_per_token - lo.bytes_per_token))
    fixed = max(f.fixed_bytes for f in all_fits)
    layers = (shape.encoder.layers + shape.decoder.layers) / 12
    per_token *= layers * (FP32_ACTIVATIONS if precision == "fp32" else 1)
    return BYTES_PER_PARAMETER * shape.parameters() + fixed + tokens * per_token


def max_tokens_for(shape, memory_gib: float, precision: str, cap: int, floor: int = 1024) -> Optional[int]:
    """The largest forward (tokens, a multiple of 128, at most ``cap``) whose memory is within
    :data:`MEMORY_SHARE` of ``memory_gib``; None without a fit."""
    one = forward_bytes(shape, 1, precision)
    if one is None:
        return None
    fixed = forward_bytes(shape, 0, precision)
    per_token = one - fixed
    budget = MEMORY_SHARE * memory_gib * 2 ** 30 - fixed
    tokens = int(budget / per_token) // 128 * 128 if per_token > 0 else cap
    return max(floor, min(cap, tokens))


# ---------------------------------------------------------------------------------------------- a run
@dataclass(frozen=True)
class Prediction:
    """Seconds per update: the estimate, and the range's two ends, each with where it comes from."""
    estimate: Estimate
    low: Estimate
    high: Estimate


def predict(shape, tokens_per_forward: float, forwards: int, gpu_name: str, precision: str,
            mean_length: float) -> Optional[Prediction]:
    """The estimate for ``gpu_name``: on a measured GPU (or its chip), the fit of the measured model
    nearer in width; elsewhere the paper's step time of its model nearer in width (base below
    d_model 1024); the range: every estimate :func:`update_seconds` makes."""
    estimates = update_seconds(shape, tokens_per_forward, forwards, gpu_name, precision, mean_length)
    if not estimates:
        return None
    wide = shape.encoder.d_model >= 1024
    all_fits = fits()
    if any(_same_chip(gpu_name, f.gpu) for f in all_fits):
        nearest = min(all_fits, key=lambda f: abs(f.d_model - shape.encoder.d_model))
        primary = next(e for e in estimates if e.calibration == "measured" and e.model == nearest.model)
    else:
        arch = "attn_paper_big" if wide else "attn_paper_base"
        primary = next(e for e in estimates if e.calibration == "paper" and e.model == arch)
    return Prediction(primary, min(estimates, key=lambda e: e.seconds_per_update),
                      max(estimates, key=lambda e: e.seconds_per_update))


def predicted_utilization(shape, tokens_per_forward: float, forwards: int, gpu_name: str, precision: str,
                          mean_length: float) -> Optional[float]:
    """The estimate's model FLOP utilization of the GPU's dense peak."""
    p = predict(shape, tokens_per_forward, forwards, gpu_name, precision, mean_length)
    peak = GPUS[gpu_name].peak(precision)
    if p is None or not peak:
        return None
    flops = forwards * train_flops_per_update(shape, tokens_per_forward, mean_length)
    return flops / (p.estimate.seconds_per_update * peak * 1e12)


PAPER_MAX_TOKENS = 4096  # per GPU: the paper's batch on its 8 GPUs; where nothing says how much memory a device has


def size_forward(shape, tokens_per_update: int, devices: int, memory_gib: Optional[float], precision: str) -> int:
    """``--max-tokens-per-gpu auto``: the largest forward a device of ``memory_gib`` holds
    (:func:`max_tokens_for`), at most its share of an update (one forward per update);
    :data:`PAPER_MAX_TOKENS` where the memory is unknown (the CPU, no GPU visible and no --gpu)."""
    share = math.ceil(tokens_per_update / max(1, devices))
    if not memory_gib:
        return min(share, PAPER_MAX_TOKENS)
    found = max_tokens_for(shape, memory_gib, precision, cap=share)
    return found if found else min(share, PAPER_MAX_TOKENS)
