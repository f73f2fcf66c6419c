"""Timing, peak memory and model FLOPs of the benchmarks' work."""
import contextlib
import statistics
import time
import weakref

from attn_kit.planning.cost import Shape, Side, Utilization, batch_train_flops
from lab.pairs import MODELS
from .models import SHAPES


def synchronize(device: str):
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def autocast(device: str, dtype: str):
    import torch

    if dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device, dtype=torch.bfloat16 if dtype == "bf16" else torch.float16)


def torch_dtype(dtype: str):
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (tied weights count once)."""
    seen, total = set(), 0
    for t in tensors:
        if t is None:
            continue
        st = t.untyped_storage()
        if st.data_ptr() not in seen:
            seen.add(st.data_ptr())
            total += st.nbytes()
    return total


def resident_tensors(model, optimizer=None):
    """Parameters, their gradients and the optimizer's state tensors."""
    import torch

    out = []
    for p in model.parameters():
        out += [p, p.grad]
    if optimizer is not None:
        for state in optimizer.state.values():
            out += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return out


class PeakMemory:
    """Peak bytes of live tensor storages while ops run (for CPU, where torch keeps no allocator statistics). Use as
    a context manager; ``track`` the tensors that exist already (parameters, optimizer state) first. Every storage
    an op returns is counted until it is freed, so views and in-place results cost nothing; the count is taken after
    each op. It slows ops down, so timings never run under it."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_map_only
        from torch.utils.weak import WeakIdKeyDictionary

        tracker = self
        self.current = self.peak = 0
        self._seen = WeakIdKeyDictionary()

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                tree_map_only(__import__("torch").Tensor, tracker.track, out)
                return out

        self._mode = _Mode()

    def track(self, tensor):
        if tensor is None:
            return
        st = tensor.untyped_storage()
        if st in self._seen:
            return
        n = st.nbytes()
        self._seen[st] = n
        self.current += n
        weakref.finalize(st, self._release, n)
        self.peak = max(self.peak, self.current)

    def _release(self, n):
        self.current -= n

    def __enter__(self):
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self._mode.__exit__(*exc)


def measure_peak(device: str, own_resident, fn):
    """Peak bytes held while ``fn()`` runs: ``own_resident`` tensors (this
    model's parameters, gradients, optimizer state) plus what ``fn`` allocates."""
    import torch

    if device == "cuda":
        synchronize(device)
        others = torch.cuda.memory_allocated() - storage_bytes(own_resident)
        torch.cuda.reset_peak_memory_stats()
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated() - others
    tracker = PeakMemory()
    with tracker:
        for t in own_resident:
            tracker.track(t)
        fn()
    return tracker.peak


def time_calls(device: str, fn, n: int) -> float:
    """Seconds for ``n`` calls of ``fn`` (the device synchronized before and after)."""
    synchronize(device)
    start = time.perf_counter()
    for _ in range(n):
        fn()
    synchronize(device)
    return time.perf_counter() - start


def train_utilization(shape: str, sample, steps_per_second: float, matmul: float):
    """Model FLOP utilization of training steps on ``sample`` at ``steps_per_second``
    (:class:`attn_kit.planning.cost.Utilization`): the model FLOPs of the sample's real source and target tokens
    (:func:`attn_kit.planning.cost.batch_train_flops`: every matmul against weights, the output layer over the
    vocabulary and eq. 1's scores and values, causal self-attention counted half, as the fused kernels skip the
    masked half) over the ``matmul`` FLOP/s measured on the device; the padded positions' count beside it."""
    dims, V = SHAPES[shape].dims, SHAPES[shape].vocab
    net = sample["net_input"]
    B, S = net["src_tokens"].shape
    T = net["prev_output_tokens"].shape[1]
    real_src, real_tgt = int(net["src_lengths"].sum()), int(sample["ntokens"])
    side = Side(dims.layers, dims.d_model, dims.d_ff, dims.h, dims.d_model // dims.h, dims.d_model // dims.h)
    model = Shape(side, side, V)
    return Utilization.of(batch_train_flops(model, real_src, real_tgt, B), batch_train_flops(model, B * S, B * T, B),
                          real_src + real_tgt, B * (S + T), 1 / steps_per_second, matmul)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def alternating_trials(rate, repeats: int, log, shape: str, unit: str, spec: str):
    """(each model's rates, each trial's ratio plugin/stock): ``repeats`` trials that run ``rate(model)`` (its rate
    in ``unit``, printed with ``spec``) for both models, plugin first, then stock first, ..."""
    rates, ratios = {w: [] for w in MODELS}, []
    for r in range(repeats):
        trial = {w: rate(w) for w in (MODELS if r % 2 == 0 else MODELS[::-1])}
        for w in MODELS:
            rates[w].append(trial[w])
        ratios.append(trial["plugin"] / trial["stock"])
        log(f"  {shape} trial {r + 1}/{repeats}: plugin {trial['plugin']:{spec}} {unit}, "
            f"stock {trial['stock']:{spec}} {unit}, ratio {ratios[-1]:.3f}")
    return rates, ratios


def rotating_trials(names, rate, repeats: int, log, label: str = ""):
    """(sentences/s of each engine in each trial, each trial's ratio to the first engine's): ``repeats`` trials that
    run every engine of ``names`` once (``rate(name)``: its sentences/s), the engine that goes first rotating."""
    sps = {name: [] for name in names}
    ratios = {name: [] for name in names[1:]}
    for r in range(repeats):
        order = names[r % len(names):] + names[:r % len(names)]
        trial = {name: rate(name) for name in order}
        for name in names:
            sps[name].append(trial[name])
        for name in names[1:]:
            ratios[name].append(trial[name] / trial[names[0]])
        log(f"  {label}trial {r + 1}/{repeats}: " + ", ".join(f"{n} {trial[n]:.1f}" for n in names) + " sent/s")
    return sps, ratios
