"""How long a training update takes and how much GPU memory a forward needs, fitted to what ran on a GPU
(the GPU check: the recipe's own training command at several forward sizes); --dry-run,
scripts/training_cost.py and the recipes' batch sizing read the same numbers. The fits are data the package
owns (calibration.json, :func:`fits`; ``python -m lab.calibration`` fits them from the results files), so
what a recipe does never depends on which measurement files a checkout holds. The model in full:
docs/scaling.md.
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
    """Seconds per update on one of ``gpu_name`` (data parallel: each device's share): a forward + backward
    of F model FLOPs takes ``c + F / R``, c the fixed cost of a forward (the host's, scaled by the layers),
    R a share of the matmul rate measured in the same run (scaled to another GPU's dense peak); by each fit,
    and for GPUs with no measurement by the rate the paper's step times imply (Sec. 5.2)."""
    peak = GPUS[gpu_name].peak(precision)
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
        host = _nearest(shape)
        c = host.forward_seconds * layers / host.layers if host else 0.0
        for arch, u in paper_utilization(mean_length).items():
            out.append(Estimate(forwards * (c + flops / (peak * 1e12 * u)),
                                f"the arithmetic at the paper's own rate for {arch} on its P100s (its step time, Sec. "
                                f"5.2: {u:.0%} of the dense peak) + {c * 1e3:.0f} ms fixed per forward (measured"
                                f"{f' on an {host.gpu}' if host else ''})", "paper", arch))
    return out


def _nearest(shape) -> Optional[Fit]:
    """The fit of the measured model nearer in width."""
    return min(fits(), key=lambda f: abs(f.d_model - shape.encoder.d_model), default=None)


def paper_arch(shape) -> str:
    """The paper's model nearer in width (base below d_model 1024)."""
    return "attn_paper_big" if shape.encoder.d_model >= 1024 else "attn_paper_base"


def _same_chip(gpu_name: str, device: str) -> bool:
    """Whether a measurement on ``device`` (torch's name) measured ``gpu_name``'s arithmetic: the same
    GPU, or H100 and H200, one chip (the H200's memory is larger and faster)."""
    measured = gpu_of_device(device)
    return measured == gpu_name or {gpu_name, measured} <= {"H100", "H200"}


def paper_utilization(mean_length: float) -> dict:
    """{arch: model FLOP utilization of the paper's P100s}: our FLOP count of an update of the
    paper's ~25000 + 25000 tokens, over 8 P100s' fp32 dense peak x the step time of Sec. 5.2."""
    return {arch: train_flops_per_update(model_shape(arch), 25000, mean_length)
            / (TABLE2_TRAINING[arch]["gpus"] * GPUS[TABLE2_TRAINING[arch]["gpu"]].fp32 * 1e12 * seconds)
            for arch, seconds in PAPER_STEP_SECONDS.items()}


# ---------------------------------------------------------------------------------------------- memory
def forward_bytes(shape, tokens: float, precision: str) -> Optional[float]:
    """GPU memory a training process holds at forwards of ``tokens``: 16 bytes per parameter, a fixed part,
    activations per token fitted per model, interpolated in d_model, doubled for fp32; None without a fit."""
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
    per_token *= (shape.encoder.layers + shape.decoder.layers) / 12 * (FP32_ACTIVATIONS if precision == "fp32" else 1)
    return BYTES_PER_PARAMETER * shape.parameters() + max(f.fixed_bytes for f in all_fits) + tokens * per_token


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
    nearer in width; elsewhere the paper's step time of its model nearer in width (:func:`paper_arch`);
    the range: every estimate :func:`update_seconds` makes."""
    estimates = update_seconds(shape, tokens_per_forward, forwards, gpu_name, precision, mean_length)
    if not estimates:
        return None
    # update_seconds puts the fits first, "measured" where one is of this GPU's chip
    want = ("measured", _nearest(shape).model) if estimates[0].calibration == "measured" else \
        ("paper", paper_arch(shape))
    primary = next(e for e in estimates if (e.calibration, e.model) == want)
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
    """``--max-tokens-per-gpu auto``: the largest forward (a multiple of 128, at least 1024) whose memory is
    within :data:`MEMORY_SHARE` of a device of ``memory_gib``, at most its share of an update (one forward per
    update); :data:`PAPER_MAX_TOKENS` where the memory is unknown (the CPU, no GPU visible and no --gpu)."""
    share = math.ceil(tokens_per_update / max(1, devices))
    fixed = forward_bytes(shape, 0, precision) if memory_gib else None
    if fixed is None:  # no memory known, or no fit
        return min(share, PAPER_MAX_TOKENS)
    per_token = forward_bytes(shape, 1, precision) - fixed
    tokens = int((MEMORY_SHARE * memory_gib * 2 ** 30 - fixed) / per_token) // 128 * 128 if per_token > 0 else share
    return max(1024, min(share, tokens))
