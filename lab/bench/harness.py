"""What the two benchmarks share around their measurements: the command line, the
trials over shapes, the table and the JSON results file (with provenance)."""
import argparse
import logging
import os
import platform
import sys
import warnings
from pathlib import Path

from attn_kit.cli import (ArgumentParser, Number, UsageError, add_force_option, add_output_option, check_output, log,
                   write_json_atomic)
from attn_kit.checkout import REPO
from attn_kit.results import provenance
from .models import SHAPES


def quiet_fairseq():
    """fairseq logs a line per model build and warns about optional packages."""
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)


def base_parser(description: str, default_out: str) -> argparse.ArgumentParser:
    p = ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", help="comma-separated model shapes from small, base, big, or 'all' "
                                    "(default: small,base on CPU; base,big on CUDA)")
    # the recipes' names for the device and the precision; --device and --dtype, the names before, still work
    p.add_argument("--ngpus", type=int, default=0, choices=(0, 1), help="1: run on the GPU (default 0: the CPU)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"],
                   help="bf16/fp16 need --ngpus 1 (default fp32)")
    p.add_argument("--device", choices=["cpu", "cuda"], help=argparse.SUPPRESS)
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], help=argparse.SUPPRESS)
    p.add_argument("--repeats", type=Number(int, minimum=1),
                   help="alternating plugin/stock trials per shape; medians are reported (default 7 on CUDA; "
                        "on CPU 5 for training, 9 for generation, whose short trials vary more)")
    p.add_argument("--threads", type=Number(int, minimum=1), help="torch CPU threads (default: torch's choice)")
    p.add_argument("--seed", type=Number(int, minimum=0), default=1,
                   help="seed for weights and the synthetic batch (default 1)")
    add_output_option(p, f"JSON output path (default {default_out}, which a rerun replaces)")
    add_force_option(p, "an --output file")
    return p


def check_common_args(args, default_repeats_cpu=5):
    import torch

    # --ngpus/--precision, or the old --device/--dtype; the code below reads device and dtype
    args.device = args.device or ("cuda" if args.ngpus else "cpu")
    args.dtype = args.dtype or args.precision
    if args.dtype != "fp32" and args.device != "cuda":
        raise UsageError(f"--precision {args.dtype} needs --ngpus 1 (CPU runs in fp32)")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--ngpus 1: no CUDA GPU is visible to torch")
    if args.dtype == "bf16" and args.device == "cuda" and not torch.cuda.is_bf16_supported():
        raise UsageError("--precision bf16: this GPU does not support bfloat16; use --precision fp16")
    spec = args.shapes or ("base,big" if args.device == "cuda" else "small,base")
    shapes = list(SHAPES) if spec == "all" else [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown or not shapes:
        raise UsageError(f"unknown shape {unknown[0] if unknown else spec!r}; "
                         f"choose from {', '.join(SHAPES)} or all")
    args.shapes = shapes
    if args.repeats is None:
        args.repeats = 7 if args.device == "cuda" else default_repeats_cpu
    if args.threads:
        torch.set_num_threads(args.threads)
    return args


def start(args) -> dict:
    """Quiet fairseq, seed torch with --seed; the environment to record."""
    quiet_fairseq()
    import torch

    torch.manual_seed(args.seed)
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
    """``bench_shape(shape, args, progress)`` for every shape of ``args.shapes``, with progress on stderr."""
    import torch

    results = {}
    for shape in args.shapes:
        progress(f"{shape}: building both models, {args.repeats} trials of {what} ...")
        results[shape] = bench_shape(shape, args, progress)
        if args.device == "cuda":
            torch.cuda.empty_cache()
    return results


def report(name: str, args, env: dict, title: str, header, rows, settings: dict, results: dict):
    """Print ``title`` and the markdown table; write everything to ``args.out`` as JSON."""
    publish(name, args.out, env, f"{title}, plugin vs stock fairseq ({args.device}, {args.dtype}, {env['threads']} "
            f"threads, median of {args.repeats} alternating trials)", markdown_table(header, rows),
            {**settings, "repeats": args.repeats, "seed": args.seed, "shapes": args.shapes}, results)


def publish(name: str, out: Path, env: dict, title: str, table: str, settings: dict, results: dict):
    """Print ``title`` and ``table``; write them, the settings and results to ``out`` as JSON, with provenance."""
    print(f"{title}\n")
    print(table)
    write_json_atomic(out, {"benchmark": name, **provenance(), "environment": env, "settings": settings,
                            "results": results, "table": table})
    print(f"\nwrote {out}")


def progress(message: str):
    """A progress line on stderr (the table goes to stdout)."""
    log(message, sys.stderr)


def resolve_out(args, name: str) -> Path:
    """``--output``, checked before any work (an existing file is replaced only with ``--force``); without
    it the benchmark's own file, runs/benchmarks/NAME_DEVICE_DTYPE.json, which a rerun replaces."""
    if args.out is None:
        path = REPO / "runs" / "benchmarks" / f"{name}_{args.device}_{args.dtype}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path
    return check_output(args.out, "--output", args.force)


def table_header(unit: str) -> list:
    """The columns both benchmarks' tables start with, for a rate in ``unit`` (tok/s, sent/s)."""
    return ["shape", "params", f"plugin {unit}", f"stock {unit}", f"ratio {unit} (median)",
            "plugin peak", "stock peak", "ratio peak mem"]


def table_row(shape: str, r: dict, rate: str, spec: str) -> list:
    """The cells under :func:`table_header` for ``shape``'s result ``r``: its parameters, each
    model's median ``rate`` (formatted by ``spec``), the median ratio, the peak bytes and their ratio."""
    return [shape, f"{r['plugin']['params'] / 1e6:.1f}M", format(r["plugin"][rate], spec),
            format(r["stock"][rate], spec), f"**{r['ratio_' + rate]:.3f}**", fmt_bytes(r["plugin"]["peak_bytes"]),
            fmt_bytes(r["stock"]["peak_bytes"]), f"{r['ratio_peak_bytes']:.3f}"]


def fmt_bytes(n) -> str:
    return f"{n / 2 ** 20:.0f} MiB" if n is not None else "-"


def markdown_table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
