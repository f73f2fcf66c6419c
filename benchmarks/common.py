"""Shared pieces of the plugin-vs-stock-fairseq benchmarks.

Both benchmarks build attn_plugin's Transformer and stock fairseq's
``transformer`` at the same shape through fairseq's own option parser, task and
registries (exactly what ``fairseq-train`` / ``fairseq-generate`` build), run
them on the same synthetic batch in the same process, alternating which goes
first, and report medians over the repeats.

Peak memory ("peak bytes") is the most memory one model's work held at once:
its parameters, gradients and optimizer state plus everything allocated while
it ran. On CUDA it comes from ``torch.cuda.max_memory_allocated`` (with the
other model's resident tensors subtracted, since both live on the device); on
CPU, where torch keeps no allocator statistics, :class:`PeakMemory` counts the
bytes of every tensor storage alive, op by op, in an untimed extra pass.
"""
import argparse
import contextlib
import json
import logging
import os
import platform
import statistics
import sys
import time
import weakref
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
USER_DIR = str(REPO / "attn_plugin")
sys.path.insert(0, str(REPO))

# Model shapes: (layers per side, d_model, d_ff, heads, dropout, shared vocabulary).
# base and big are Table 3's; small is the bundled recipe's CPU configuration.
SHAPES = {
    "small": dict(layers=2, d_model=256, d_ff=1024, heads=4, dropout=0.1, vocab=8000),
    "base": dict(layers=6, d_model=512, d_ff=2048, heads=8, dropout=0.1, vocab=32000),
    "big": dict(layers=6, d_model=1024, d_ff=4096, heads=16, dropout=0.3, vocab=32000),
}
# The stock fairseq architecture each shape starts from (the plugin: attn_paper_base / attn_paper_big).
STOCK_ARCH = {"small": "transformer_wmt_en_de", "base": "transformer_wmt_en_de",
              "big": "transformer_vaswani_wmt_en_de_big"}
PLUGIN_ARCH = {"small": "attn_paper_base", "base": "attn_paper_base", "big": "attn_paper_big"}
MODELS = ("plugin", "stock")


def quiet_fairseq():
    """fairseq logs a line per model build and warns about optional packages."""
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)


def base_parser(description: str, default_out: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", help="comma-separated model shapes from small, base, big, or 'all' "
                                    "(default: small,base on CPU; base,big on CUDA)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where to run (default cpu)")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"],
                   help="precision; bf16/fp16 need --device cuda (default fp32)")
    p.add_argument("--repeats", type=int, help="alternating plugin/stock trials per shape; medians are "
                                               "reported (default 7 on CUDA; on CPU 5 for training, 9 for "
                                               "generation, whose short trials vary more)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=1, help="seed for weights and the synthetic batch (default 1)")
    p.add_argument("--out", type=Path, help=f"JSON output path (default {default_out})")
    return p


class UsageError(Exception):
    """Bad command-line input: reported as one ``error:`` line."""


def check_common_args(args, default_shapes_cpu="small,base", default_shapes_cuda="base,big", default_repeats_cpu=5):
    import torch

    if args.dtype != "fp32" and args.device != "cuda":
        raise UsageError(f"--dtype {args.dtype} needs --device cuda (CPU runs in fp32)")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA GPU is visible to torch")
    if args.dtype == "bf16" and args.device == "cuda" and not torch.cuda.is_bf16_supported():
        raise UsageError("--dtype bf16: this GPU does not support bfloat16; use --dtype fp16")
    spec = args.shapes or (default_shapes_cuda if args.device == "cuda" else default_shapes_cpu)
    shapes = list(SHAPES) if spec == "all" else [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown or not shapes:
        raise UsageError(f"unknown shape {unknown[0] if unknown else spec!r}; choose from {', '.join(SHAPES)} or all")
    args.shapes = shapes
    if args.repeats is None:
        args.repeats = 7 if args.device == "cuda" else default_repeats_cpu
    if args.repeats < 1:
        raise UsageError("--repeats must be >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    return args


def main_guard(fn):
    """Run ``fn()``; a UsageError or a missing file is one ``error:`` line, exit 2/1."""
    try:
        sys.exit(fn() or 0)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)


# ---------------------------------------------------------------------------
# Building the two models through fairseq
# ---------------------------------------------------------------------------
def shape_flags(shape: str):
    s = SHAPES[shape]
    flags = []
    for side in ("encoder", "decoder"):
        flags += [f"--{side}-layers", s["layers"], f"--{side}-embed-dim", s["d_model"],
                  f"--{side}-ffn-embed-dim", s["d_ff"], f"--{side}-attention-heads", s["heads"]]
    return [str(f) for f in flags + ["--dropout", s["dropout"]]]


def model_flags(which: str, shape: str, sinusoid_layout: str = "paper", plugin_extra=()):
    """fairseq-train flags for the plugin or stock fairseq at ``shape`` (same sizes and dropout);
    ``plugin_extra``: more flags for the plugin only (e.g. --compile-layers)."""
    if which == "plugin":
        return ["--user-dir", USER_DIR, "--arch", PLUGIN_ARCH[shape], "--criterion",
                "attn_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                "--sinusoid-layout", sinusoid_layout, *shape_flags(shape), *plugin_extra]
    return ["--arch", STOCK_ARCH[shape], "--share-all-embeddings", "--criterion", "label_smoothed_cross_entropy",
            "--label-smoothing", "0.1", *shape_flags(shape)]


def make_dictionary(vocab: int):
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(vocab - len(d)):
        d.add_symbol(f"tok{i}")
    return d


def build(which: str, shape: str, dictionary, seed: int, sinusoid_layout: str = "paper", plugin_extra=()):
    """(model, criterion) as fairseq-train builds them from the command line."""
    import torch
    from fairseq import options
    from fairseq.tasks.translation import TranslationTask

    argv = ["unused-data-dir", "--task", "translation", *model_flags(which, shape, sinusoid_layout, plugin_extra)]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    task = TranslationTask(args, dictionary, dictionary)
    torch.manual_seed(seed)
    model = task.build_model(args)
    criterion = task.build_criterion(args)
    return model, criterion


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def make_sample(dictionary, n_sentences: int, src_len: int, tgt_len: int, seed: int, device):
    """A fairseq translation batch: left-padded sources with lengths between
    70% and 100% of ``src_len``, right-padded targets likewise (as fairseq
    batches them), random tokens."""
    import torch

    g = torch.Generator().manual_seed(seed)
    pad, eos, V = dictionary.pad(), dictionary.eos(), len(dictionary)

    def lengths(n):
        return torch.randint(max(1, int(0.7 * n)), n + 1, (n_sentences,), generator=g)

    src_lengths, tgt_lengths = lengths(src_len), lengths(tgt_len)
    src = torch.full((n_sentences, src_len), pad)
    target = torch.full((n_sentences, tgt_len), pad)
    prev = torch.full((n_sentences, tgt_len), pad)
    for i in range(n_sentences):
        s, t = int(src_lengths[i]), int(tgt_lengths[i])
        src[i, src_len - s:] = torch.randint(dictionary.nspecial, V, (s,), generator=g)
        src[i, -1] = eos
        target[i, :t] = torch.randint(dictionary.nspecial, V, (t,), generator=g)
        target[i, t - 1] = eos
        prev[i, 0] = eos
        prev[i, 1:t] = target[i, : t - 1]
    sample = {
        "id": torch.arange(n_sentences), "nsentences": n_sentences, "ntokens": int(tgt_lengths.sum()),
        "net_input": {"src_tokens": src, "src_lengths": src_lengths, "prev_output_tokens": prev},
        "target": target,
    }
    return move(sample, device)


def move(obj, device):
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: move(v, device) for k, v in obj.items()}
    return obj


# ---------------------------------------------------------------------------
# Timing and memory
# ---------------------------------------------------------------------------
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
    """Peak bytes of live tensor storages while ops run (for CPU, where torch
    keeps no allocator statistics). Use as a context manager; ``track`` the
    tensors that exist already (parameters, optimizer state) first. Every
    storage an op returns is counted until it is freed, so views and in-place
    results cost nothing; the count is taken after each op. It slows ops
    down, so timings never run under it.
    """

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


def matmul_rate(device: str, dtype: str) -> float:
    """Measured dense matmul FLOP/s at this precision: the best of several timed
    square products (8192 on CUDA, 1024 on CPU)."""
    import torch

    n = 8192 if device == "cuda" else 1024
    a = torch.randn(n, n, device=device, dtype=torch_dtype(dtype))
    b = torch.randn(n, n, device=device, dtype=torch_dtype(dtype))
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(5):
        reps = 10 if device == "cuda" else 3
        best = min(best, time_calls(device, lambda: a @ b, reps) / reps)
    return 2 * n ** 3 / best


def train_flops_per_step(shape: str, sample) -> float:
    """Model FLOPs of one training step (forward + backward = 3x forward) on
    ``sample``: every matmul against weights, the output layer over the
    vocabulary and attention scores/values (causal self-attention counted
    half, as the fused kernels skip the masked half). Padding counted as work."""
    s = SHAPES[shape]
    d, f, n, V = s["d_model"], s["d_ff"], s["layers"], s["vocab"]
    src, prev = sample["net_input"]["src_tokens"], sample["net_input"]["prev_output_tokens"]
    B, S = src.shape
    T = prev.shape[1]
    enc = n * B * S * (2 * 4 * d * d + 2 * 2 * d * f + 2 * 2 * S * d)
    dec = n * B * T * (2 * 4 * d * d + 2 * 4 * d * d + 2 * 2 * d * f + 2 * 2 * T * d / 2 + 2 * 2 * S * d)
    out = B * T * 2 * d * V
    return 3.0 * (enc + dec + out)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def alternating(repeats: int):
    """The order of the two models in each trial: plugin first, then stock first, ..."""
    for r in range(repeats):
        yield r, (MODELS if r % 2 == 0 else MODELS[::-1])


def environment(args) -> dict:
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__, "device": args.device,
           "dtype": args.dtype, "threads": torch.get_num_threads(), "cpu": platform.processor() or platform.machine(),
           "cpu_count": os.cpu_count()}
    try:
        import fairseq

        env["fairseq"] = fairseq.__version__
    except Exception:
        pass
    if args.device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
    return env


def run_shapes(args, bench_shape, what: str) -> dict:
    """``bench_shape(shape, args, log)`` for every shape of ``args.shapes``, with progress on stderr."""
    import torch

    results = {}
    for shape in args.shapes:
        log(f"{shape}: building both models, {args.repeats} trials of {what} ...")
        results[shape] = bench_shape(shape, args, log)
        if args.device == "cuda":
            torch.cuda.empty_cache()
    return results


def report(name: str, args, env: dict, title: str, header, rows, settings: dict, results: dict):
    """Print ``title`` and the markdown table; write everything to ``args.out`` as JSON."""
    table = markdown_table(header, rows)
    print(f"{title}, plugin vs stock fairseq ({args.device}, {args.dtype}, {env['threads']} threads, "
          f"median of {args.repeats} alternating trials)\n")
    print(table)
    from attn_kit.results import provenance

    write_json(args.out, {"benchmark": name, **provenance(), "environment": env,
                          "settings": {**settings, "repeats": args.repeats, "seed": args.seed, "shapes": args.shapes},
                          "results": results, "table": table})
    print(f"\nwrote {args.out}")


def log(msg: str):
    print(msg, file=sys.stderr, flush=True)


def write_json(path: Path, data: dict):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def default_out(name: str, args) -> Path:
    return REPO / "runs" / "benchmarks" / f"{name}_{args.device}_{args.dtype}.json"


def fmt_bytes(n) -> str:
    return f"{n / 2 ** 20:.0f} MiB" if n is not None else "-"


def markdown_table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)

