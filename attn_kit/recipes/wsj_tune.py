"""The WSJ recipe's --tune (Sec. 6.3: dropout, learning rates and beam size chosen on section 22): a trial is
one training setting (TRAIN_KEYS), decoded on section 22 with every decoding setting (DECODE_KEYS); the best dev
F1 over all of them is selected."""
import itertools
import json
import math
from pathlib import Path
from typing import List, Optional

from ..fairseq_layer.build import parse_train_args, plugin_flags
from ..cli import UsageError, UserError, log, write_json_atomic
from ..metrics.evalb import parse_summary
from .. import options
from ..pipeline.download import read_json_or
from . import common
from .settings import option_of

# training keys (one training each) and decoding keys (tried on section 22 with every trained model,
# no retraining); the default grids are in recipes/configs/wsj.yaml
TRAIN_KEYS = ("dropout", "attention_dropout", "lr_scale")
DECODE_KEYS = ("beam", "alpha")
KEY_ALIASES = {"p_drop": "dropout", "gnmt_alpha": "alpha"}  # the recipe's option names for two keys
HELP = ("the --tune grid: 'KEY=V,V,...;KEY=V,...' or a JSON file {\"KEY\": [V, ...], ...}; keys "
        "dropout (or p_drop), attention_dropout, lr_scale (one training per combination), beam, alpha (or "
        "gnmt_alpha) (each tried on section 22 with every trained model). A key left out is fixed at its option's "
        f"value ({', '.join(map(option_of, TRAIN_KEYS + DECODE_KEYS))}). Implies --tune. An option given on the "
        "command line fixes its key in the default grid (recipes/configs/wsj.yaml). E.g. "
        "'dropout=0.1,0.2,0.3;beam=21'.")
SELECTION = ("the highest section 22 (dev) EVALB F1 over every training x decoding setting; "
             "a tie goes to the earlier setting in trials")


def grid_spec(grid: dict) -> str:
    """A grid as --tune-grid's SPEC: 'dropout=0.1,0.2;beam=21'."""
    return ";".join(f"{k}={','.join(f'{v:g}' for v in values)}" for k, values in grid.items())


def _grid_value(key: str, text, where: str):
    """One value of a --tune-grid key, checked; a UserError names ``where``."""
    try:
        if isinstance(text, bool):
            raise ValueError
        if key == "beam":
            value = int(text) if not isinstance(text, float) or text.is_integer() else None
            if value is None or value < 1:
                raise ValueError
            return value
        value = float(text)
        if not math.isfinite(value):
            raise ValueError
    except (TypeError, ValueError):
        kind = "an integer >= 1" if key == "beam" else "a number"
        raise UserError(f"--tune-grid {where}: {key} value {text!r} is not {kind}") from None
    option = options.OPTIONS[{"dropout": "p_drop"}.get(key, key)]  # the range of the option that fixes the key
    if not option.in_range(value):
        raise UserError(f"--tune-grid {where}: {key} {value:g} {'is not' if 'dropout' in key else 'must be'} "
                        f"{option.range_text()}")
    return value


def _spec_items(spec: str):
    """(items [(key, [values])], how errors name the spec) of a --tune-grid SPEC or JSON file."""
    path = Path(spec).expanduser()
    try:
        is_file = path.is_file()
    except OSError:  # e.g. a long KEY=V list is too long a file name
        is_file = False
    if spec.strip().endswith(".json") or is_file:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise UserError(f"--tune-grid {spec}: cannot read it ({exc.strerror or exc})") from None
        except ValueError as exc:
            raise UserError(f"--tune-grid {spec}: not valid JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise UserError(f"--tune-grid {spec}: expected a JSON object such as "
                            '{"dropout": [0.1, 0.2], "beam": [10, 21]}')
        return [(str(k), v if isinstance(v, list) else [v]) for k, v in raw.items()], spec
    items = []
    for part in filter(str.strip, spec.split(";")):
        key, eq, values = part.partition("=")
        if not eq:
            raise UserError(f"--tune-grid {spec!r}: {part.strip()!r} is not KEY=V,V,... "
                            "(e.g. dropout=0.1,0.2;beam=10,21)")
        items.append((key, [v.strip() for v in values.split(",")]))
    return items, repr(spec)


def parse_tune_grid(spec: str) -> dict:
    """``--tune-grid``: 'dropout=0.1,0.2;lr_scale=0.5,1;beam=21' or the path of a JSON file {"dropout": [0.1,
    0.2], "beam": 21, ...} -> {key: [values]} in the order given, repeated values dropped. Keys: TRAIN_KEYS +
    DECODE_KEYS (- or _; KEY_ALIASES)."""
    keys = TRAIN_KEYS + DECODE_KEYS
    items, where = _spec_items(spec)
    grid = {}
    for key, values in items:
        name = key.strip().replace("-", "_")
        name = KEY_ALIASES.get(name, name)
        if name not in keys:
            raise UserError(f"--tune-grid {where}: unknown key {key.strip()!r}; keys: {', '.join(keys)}")
        if name in grid:
            raise UserError(f"--tune-grid {where}: {name} is given twice")
        if not values or values == [""]:
            raise UserError(f"--tune-grid {where}: {name} has no values")
        grid[name] = list(dict.fromkeys(_grid_value(name, v, where) for v in values))
    if not grid:
        raise UserError(f"--tune-grid {where}: empty; give e.g. dropout=0.1,0.2;beam=10,21")
    return grid


def arch_dropouts(arch: str) -> dict:
    """``arch``'s own dropout and attention dropout, as fairseq-train parses them (for keys nothing sets)."""
    parsed = parse_train_args(plugin_flags(arch=arch))
    return {"dropout": parsed.dropout, "attention_dropout": parsed.attention_dropout}


def tune_grid(given_grid: Optional[dict], default_grid: dict, fixed: dict, fallback: dict, arch: str) -> dict:
    """The full --tune grid: ``given_grid`` (--tune-grid's), else ``default_grid``; ``fixed`` (each key's option
    as given on the command line, None where not) fixes its key (an error if --tune-grid also sets it); keys still
    unset take ``fallback`` (lr_scale, beam, alpha: the options' values), the dropouts ``arch``'s."""
    grid = dict(given_grid) if given_grid else {k: list(v) for k, v in default_grid.items()}
    for key, value in fixed.items():
        if value is None:
            continue
        if given_grid and key in given_grid:
            raise UsageError(f"{option_of(key)} and --tune-grid both set {key}; give it in one place")
        grid[key] = [value]
    fallback = dict(fallback)
    if any(key not in grid for key in ("dropout", "attention_dropout")):
        fallback.update(arch_dropouts(arch))
    return {key: grid[key] if key in grid else [fallback[key]] for key in TRAIN_KEYS + DECODE_KEYS}


def tune_trials(grid: dict) -> List[dict]:
    """The training settings of ``grid`` in grid order: name (its folder in WORKDIR/tune), stage, TRAIN_KEYS."""
    out = []
    for d, a, lr in itertools.product(*(grid[k] for k in TRAIN_KEYS)):
        name = f"d{d:g}-a{a:g}-lr{lr:g}"
        out.append({"name": name, "stage": f"tune-{name}", "dropout": d, "attention_dropout": a, "lr_scale": lr})
    return out


def decode_settings(grid: dict) -> List[dict]:
    """The decoding settings of ``grid``: name, beam, alpha."""
    return [{"name": f"beam{b}-alpha{al:g}", "beam": b, "alpha": al}
            for b, al in itertools.product(grid["beam"], grid["alpha"])]


def _clean(summary: dict) -> dict:
    """EVALB's numbers rounded as it prints them; NaN (an F1 of 0/0) as null."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else round(v, 2) if isinstance(v, float) else v)
            for k, v in summary.items()}


def evalb_blocks(path: Path):
    """EVALB's ``-- All --`` and ``-- len<=40 --`` blocks of the report in ``path``, cleaned."""
    try:
        summary = parse_summary(path.read_text(encoding="latin-1"))
    except ValueError as exc:
        raise UserError(f"{path}: {exc}") from None
    return _clean(summary["all"]), _clean(summary.get("len<=40", {}))


def select_trial(workdir: Path, grid: dict) -> dict:
    """Gather every trial's section-22 F1, pick the best, write WORKDIR/tune/selected.json."""
    trials, wanted = [], [d["name"] for d in decode_settings(grid)]
    for t in tune_trials(grid):
        info = json.loads((workdir / "tune" / t["name"] / "trial.json").read_text())
        done = {dec["name"]: dec for dec in info["decodings"]}
        missing = [name for name in wanted if name not in done]
        if missing:
            raise UserError(f"{t['stage']}: no section 22 score for {missing[0]}; run the stage {t['stage']} again")
        for dec in (done[name] for name in wanted):
            trials.append({"name": f"{t['stage']}/{dec['name']}", "stage": t["stage"], "workdir": info["workdir"],
                           **{k: t[k] for k in TRAIN_KEYS}, "beam": dec["beam"], "alpha": dec["alpha"],
                           "dev_f1": dec["dev_f1"], "dev_output": dec["output"], "updates": info["updates"],
                           "checkpoint": info["checkpoint"], "averaged_updates": info.get("averaged_updates")})
    # the highest dev F1 (an undefined F1 lowest); max() keeps the first of equals: a tie goes to the earlier trial
    best = max(trials, key=lambda trial: (trial["dev_f1"] is not None, trial["dev_f1"] or 0.0))
    selected = {"grid": grid, "selection": SELECTION, "trials": trials, "selected": best}
    write_json_atomic(workdir / "tune" / "selected.json", selected)
    f1 = "n/a" if best["dev_f1"] is None else f"{best['dev_f1']:.2f}"
    log(f"selected {best['name']}: dev F1 {f1} (best of {len(trials)})")
    return selected


def forget_stale_selection(workdir: Path, grid: dict):
    """Remove WORKDIR/tune/selected.json when ``grid`` differs from the one it was chosen from, or a trial was
    scored again since, so that the select stage and the section 23 stages after it run again (trained trials
    are kept)."""
    path = workdir / "tune" / "selected.json"
    if not path.exists():
        return
    if (read_json_or(path) or {}).get("grid") != json.loads(json.dumps(grid)):
        log("the --tune grid changed since the last selection: selecting again")
        path.unlink()
        return
    chosen = path.stat().st_mtime
    for t in tune_trials(grid):
        trial = workdir / "tune" / t["name"] / "trial.json"
        if trial.exists() and trial.stat().st_mtime > chosen:
            log(f"{t['stage']} was scored again since the last selection: selecting again")
            path.unlink()
            return


def write_trial(trial: dict, folder: Path, decodings: list):
    """WORKDIR/tune/NAME/trial.json: the training setting, its updates, the section 22 F1 of each decoding."""
    avg = folder / "checkpoint_avg.pt"
    done = json.loads((folder / "train.done").read_text())
    info = {"name": trial["name"], "stage": trial["stage"], "workdir": str(folder),
            **{k: trial[k] for k in TRAIN_KEYS}, "updates": done.get("updates"), "checkpoint": str(avg),
            **common.averaged_record(avg), "decodings": []}
    for dec, repairs in decodings:
        all_, short = evalb_blocks(folder / "eval" / f"valid.{dec['name']}.evalb")
        info["decodings"].append({**dec, "dev_f1": all_.get("f1"),
                                  "output": str(folder / "gen" / f"valid.{dec['name']}.out"),
                                  "evalb_all": all_, "evalb_len<=40": short, "repairs": repairs})
    write_json_atomic(folder / "trial.json", info)
    log(f"{trial['stage']}: dev F1 " + ", ".join(
        f"{d['name']} {'n/a' if d['dev_f1'] is None else format(d['dev_f1'], '.2f')}" for d in info["decodings"]))
