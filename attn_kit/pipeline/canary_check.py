"""A ``--canary``'s prediction beside the finished run in the same work directory (canary.json's
``checked_against``), made by whichever ends last: the canary (:mod:`attn_kit.recipes.canary`), else the run
(:func:`check_earlier`, called by :func:`attn_kit.pipeline.stages.run_recipe` for every recipe).
"""
import json
from pathlib import Path
from typing import Optional, Sequence

from ..cli import log, write_json_atomic
from .download import read_json_or


def data_seconds(workdir: Path, data_stages: Sequence[str]) -> Optional[float]:
    """The data stages' wall time as they ran in this work directory (their stage stamps)."""
    total = 0.0
    for name in data_stages:
        try:
            total += json.loads((workdir / ".stages" / f"{name}.done").read_text())["seconds"]
        except (OSError, ValueError, KeyError):
            return None
    return round(total, 1)


def checked_against(workdir: Path, data_workdir: Path, data_stages: Sequence[str], predicted: dict) -> Optional[dict]:
    """The prediction beside the finished run's stage times (results.json; the data stages' from their
    stamps), part by part, and the error of each."""
    try:
        seconds = json.loads((workdir / "results.json").read_text())["stage_seconds"]
    except (OSError, ValueError, KeyError):
        return None
    data = data_seconds(data_workdir, data_stages) if data_workdir != workdir else None
    measured = {"data_preparation": data if data is not None else sum(seconds.get(s, 0.0) for s in data_stages),
                "training + validations + checkpoint_writes": seconds.get("train"),
                "averaging": seconds.get("average"),
                "generation + scoring": sum(v for k, v in seconds.items()  # generate, score (WSJ: trees)
                                            if k not in ("train", "average", *data_stages))}
    measured["total"] = sum(v or 0.0 for v in measured.values())
    guess = {"data_preparation": predicted["data_preparation"],
             "training + validations + checkpoint_writes":
                 predicted["training"] + predicted["validations"] + predicted["checkpoint_writes"],
             "averaging": predicted["averaging"], "generation + scoring": predicted["generation"],
             "total": predicted["total"]}
    return {"measured_seconds": measured,
            "predicted_seconds": {k: round(v, 1) for k, v in guess.items() if v is not None},
            "error": {k: round(guess[k] / v - 1, 4) for k, v in measured.items() if v and guess.get(k) is not None}}


def check_earlier(workdir: Path, data_workdir: Optional[Path] = None) -> Optional[dict]:
    """After a full run in ``workdir`` (its data stages in ``data_workdir``, default the same): an earlier
    canary there gets its ``checked_against`` (which it left null). Returns it, or None."""
    path = workdir / "canary" / "canary.json"
    result = read_json_or(path, {})
    if result.get("checked_against") or not result.get("predicted_seconds") or "data_stages" not in result:
        return None  # checked already, failed, or from before canaries recorded their data stages
    result["checked_against"] = checked_against(workdir, data_workdir or workdir, result["data_stages"],
                                                result["predicted_seconds"])
    if result["checked_against"]:
        write_json_atomic(path, result)
        log(f"{path}: its prediction checked against this run (checked_against)")
    return result["checked_against"]
