"""The package's calibration table (attn_kit/planning/calibration.json), made from the results files.

The recipes plan with numbers measured elsewhere: the step time and memory of the GPU check's runs
(attn_kit.planning.step_model). They read them from the table the package owns, never from ``benchmarks/results``,
so what a recipe does cannot depend on which results files a checkout holds. This module fits the table from the
files and writes it; ``--check`` (and tests/test_calibration.py) says whether the table is what the files give.

    python -m lab.calibration            # rewrite attn_kit/planning/calibration.json
    python -m lab.calibration --check    # exit 1 when it differs from what the results files give
"""
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path
from typing import List

import numpy as np

from attn_kit.checkout import REPO
from attn_kit.cli import ArgumentParser, main_guard, write_text_atomic
from attn_kit.planning.cost import GPUS, gpu_of_device, model_shape
from attn_kit.planning.sizes import ARCH_SIZES
from attn_kit.planning.step_model import BYTES_PER_PARAMETER, CALIBRATION, Fit

RESULTS = REPO / "benchmarks" / "results"
GPU_CHECKS = "*gpu_check*.json"


def padded_tflops(run: dict) -> float:
    """The FLOP/s a GPU check run computed, padded positions counted as work (what the time model fits: the GPU does
    that arithmetic). Files before the real tokens were counted apart name it ``model_tflops_per_second``."""
    return run.get("padded_position_tflops_per_second") or run["model_tflops_per_second"]


def plain_runs(data: dict, model: str) -> List[dict]:
    """The runs a fit reads: timed, no --compile-layers, no padding, not the profiled one; either Adam."""
    return [r for r in data["sweep"] if r["model"] == model and r.get("seconds_per_update")
            and not r["compile_layers"] and r["pad_to_multiple"] == 1 and not r["name"].endswith("_profile")]


def fits_of(path: Path) -> List[Fit]:
    """The fits of one GPU check results file (attn_kit.planning.step_model's time and memory models):
    per model, its plain runs at two or more forward sizes."""
    data = json.loads(Path(path).read_text())
    env = data["environment"]
    matmul = env["measured_bf16_matmul_tflops"]
    name = gpu_of_device(env.get("gpu", ""))
    out = []
    for model in sorted({r["model"] for r in data["sweep"]}):
        runs = plain_runs(data, model)
        if len({r["max_tokens"] for r in runs}) < 2:
            continue
        # seconds per update = forwards x (c + FLOPs per forward / R) + o (fairseq's Adam, its thousands
        # of launches, against attn_adam's: the runs of either optimizer fit one c and R)
        rows = [[r["update_freq"], padded_tflops(r) * 1e12 * r["seconds_per_update"],
                 float(r["optimizer"] != "attn_adam")] for r in runs]
        if not any(row[2] for row in rows):
            rows = [row[:2] for row in rows]
        # relative errors, each run weighted by the updates it timed (a 12-second run of 4K-token forwards
        # times ~15 updates, one of 28K-token forwards ~60)
        y = np.array([r["seconds_per_update"] for r in runs])
        w = np.sqrt([r["timed_updates"] for r in runs]) / y
        coef = np.linalg.lstsq(np.array(rows) * w[:, None], y * w, rcond=None)[0]
        c, inv_rate = float(coef[0]), float(coef[1])
        per_token, base_mem = statistics.linear_regression([r["max_tokens"] for r in runs],
                                                           [r["peak_reserved_gib"] * 2 ** 30 for r in runs])
        size = ARCH_SIZES[f"attn_paper_{model}"]
        params = model_shape(f"attn_paper_{model}").parameters()
        out.append(Fit(source=Path(path).name, gpu=env.get("gpu", "?"), model=model, d_model=size.d_model,
                       layers=2 * size.layers, matmul_tflops=matmul,
                       datasheet_tflops=GPUS[name].bf16 if name else matmul,
                       forward_seconds=max(0.0, c), efficiency=1 / inv_rate / (matmul * 1e12),
                       bytes_per_token=per_token, fixed_bytes=base_mem - BYTES_PER_PARAMETER * params,
                       points=len(runs)))
    return out


# What attn_kit.planning.prep_cost reads of benchmarks/data_prep.py's and data_extract.py's results files
DATA_PREP_KEYS = {"machine": None, "cpu": None, "result": {"fits": None, "settings": {"sizes": None}, "corpus": None}}
DATA_EXTRACT_KEYS = {"machine": None, "cpu": None, "result": {"rates_mb_per_cpu_s": None, "tokenized": None}}


def pruned(data: dict, keys: dict) -> dict:
    """``data`` with only ``keys`` (a key's None: its whole value; a dict: those of its keys)."""
    return {k: data[k] if sub is None else pruned(data[k], sub) for k, sub in keys.items() if k in data}


def filed(pattern: str, keys: dict) -> dict:
    """{file name: what is read of it, with the path it was filed at} of the results files ``pattern``."""
    return {p.name: {"source": str(p.relative_to(REPO)), **pruned(json.loads(p.read_text()), keys)}
            for p in sorted(RESULTS.glob(pattern))}


def table() -> dict:
    """The calibration table the results files give."""
    gpu = [dataclasses.asdict(fit) for path in sorted(RESULTS.glob(GPU_CHECKS)) for fit in fits_of(path)]
    return {"about": "made by `python -m lab.calibration` from benchmarks/results (tests/test_calibration.py "
                     "checks it); read by attn_kit.planning.step_model and prep_cost",
            "gpu_step": gpu, "data_prep": filed("cpu2core_data_prep*.json", DATA_PREP_KEYS),
            "data_extract": filed("*data_extract*.json", DATA_EXTRACT_KEYS)}


def same(a, b) -> bool:
    """Whether two tables hold the same values, numbers to 1e-9 relative (a least-squares fit's last
    digits follow the BLAS it ran on)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9)
    return a == b


def main(argv=None):
    p = ArgumentParser(prog="python -m lab.calibration", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 when the table differs from what the files give")
    args = p.parse_args(argv)
    want = table()
    if args.check:
        ok = CALIBRATION.exists() and same(json.loads(CALIBRATION.read_text(encoding="utf-8")), want)
        print(f"{CALIBRATION.relative_to(REPO)}: " + ("as the results files give" if ok else
                                                       "differs from the results files: run python -m lab.calibration"))
        sys.exit(0 if ok else 1)
    write_text_atomic(CALIBRATION, json.dumps(want, indent=1) + "\n")
    print(f"wrote {CALIBRATION.relative_to(REPO)}")


if __name__ == "__main__":
    main_guard(main)
