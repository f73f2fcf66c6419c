"""Average the parameters of several fairseq checkpoints (Sec. 6.1: base models average the last
5 checkpoints, big ones the last 20), with the flags of fairseq's own script::

    python scripts/average_checkpoints.py --inputs ckpts/ --num-update-checkpoints 5 --output avg.pt
    python scripts/average_checkpoints.py --inputs a.pt b.pt c.pt --output avg.pt

Unlike fairseq's script, --num-update-checkpoints N always ends at the final update (checkpoint_last.pt
when it is newer than the newest interval checkpoint). Inputs are read with torch's safe unpickler and
checked before anything is written; the average is written atomically. :func:`recover_last` replaces
a truncated checkpoint_last.pt by the newest intact one, so that training resumes.
"""
import argparse
import collections
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Optional

from ..cli import (ArgumentParser, Number, UsageError, UserError, add_force_option, add_output_option, atomic_output,
                   check_output, log, write_text_atomic)
from .plugin import standalone

UPDATE_CHECKPOINT = re.compile(r"checkpoint_(\d+)_(\d+)\.pt")  # fairseq's checkpoint_{epoch}_{update}.pt


def load_checkpoint(path, mmap: bool = False) -> dict:
    """:func:`attn_plugin.checkpoint.load_checkpoint` (torch's safe loading, the types fairseq checkpoints
    need allowed), without importing fairseq; its refusal is the same one line, as a :class:`UserError`."""
    safe = standalone("checkpoint")
    try:
        return safe.load_checkpoint(path, mmap=mmap)
    except safe.CheckpointError as exc:
        raise UserError(str(exc)) from None


def _numbered(directory, pattern, upper_bound=None):
    """[(number, path)] of the files in ``directory`` whose name ``pattern`` matches in full (the number is its
    last group, at most ``upper_bound``), ascending."""
    found = []
    for name in os.listdir(directory):
        m = pattern.fullmatch(name)
        if m and (upper_bound is None or int(m.groups()[-1]) <= upper_bound):
            found.append((int(m.groups()[-1]), os.path.join(directory, name)))
    return sorted(found)


def epoch_checkpoints(directory, n, upper_bound=None):
    """The newest ``n`` epoch checkpoints (``checkpoint{E}.pt``) in ``directory``, newest first."""
    if n < 1:
        raise UsageError(f"--num-epoch-checkpoints must be >= 1 (got {n})")
    found = _numbered(directory, re.compile(r"checkpoint(\d+)\.pt"), upper_bound)
    if len(found) < n:
        raise UserError(f"found {len(found)} epoch checkpoints in {directory}, need {n} "
                        "(files named checkpointE.pt)")
    return [path for _, path in found[-n:][::-1]]


def checkpoint_update(path):
    """The number of updates the model in checkpoint ``path`` has had (``optimizer_history[-1]["num_updates"]``)."""
    state = load_checkpoint(path, mmap=True)
    try:
        return int(state["optimizer_history"][-1]["num_updates"])
    except (KeyError, IndexError, TypeError, ValueError):
        raise UserError(f"{path} does not record its number of updates "
                        "(no optimizer_history[-1]['num_updates'])") from None


def update_checkpoints(directory, n, upper_bound=None, or_fewer=False, first: Optional[int] = None):
    """The ``n`` update checkpoints to average, [(update, path)] ascending, ending at the run's final update
    (:func:`update_candidates`); ``or_fewer``: all there are when fewer exist (at least one); ``first``: none
    before this update (a warm-up's, which drags the average down), the final model always kept."""
    if n < 1:
        raise UsageError(f"--num-update-checkpoints must be >= 1 (got {n})")
    found = update_candidates(directory, upper_bound)
    if or_fewer and not found:
        raise UserError(f"no update checkpoints in {directory}; did training run long enough?")
    if first is not None and found:
        early = [u for u, _ in found[:-1] if u < first]
        if early:
            log(f"leaving out the checkpoints at updates {', '.join(map(str, early))}: before update {first}, "
                "the warm-up's end")
        found = [(u, p) for u, p in found[:-1] if u >= first] + found[-1:]
    if or_fewer and len(found) < n:
        log(f"only {len(found)} update checkpoints; averaging those")
        n = len(found)
    if len(found) < n:
        raise UserError(f"found {len(found)} update checkpoints in {directory}, need {n} "
                        "(files named checkpoint_E_U.pt, and checkpoint_last.pt)")
    picked = found[-n:]
    check_evenly_spaced(directory, picked)
    return picked


def save_interval_updates(path) -> Optional[int]:
    """The ``--save-interval-updates`` the run of checkpoint ``path`` trained with (None if unknown)."""
    state = load_checkpoint(path, mmap=True)
    cfg, args = state.get("cfg"), state.get("args")
    try:
        value = cfg["checkpoint"]["save_interval_updates"] if cfg else getattr(args, "save_interval_updates")
        return int(value) if value else None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def check_evenly_spaced(directory, picked) -> None:
    """The paper averages checkpoints written at equal intervals (Sec. 6.1): refuse, in one line, ``picked``
    ([(update, path)] ascending) unless they are the last multiples of the run's ``--save-interval-updates``
    (read from the final checkpoint) and the final update."""
    interval = save_interval_updates(picked[-1][1])
    if not interval:
        return
    final, updates = picked[-1][0], [u for u, _ in picked]
    expected = [final] if final % interval else []
    expected += list(range(final - final % interval, 0, -interval))
    expected = sorted(expected[:len(picked)])
    if updates != expected:
        missing = sorted(set(expected) - set(updates))
        raise UserError(f"the last {len(picked)} checkpoints in {directory} are at updates {updates}, not every "
                        f"{interval} updates: {', '.join(map(str, missing))} missing (removed, or not kept by a "
                        "fairseq run without attn_plugin, which skips an interval that ends an epoch); give the "
                        "files to average with --inputs A.pt B.pt ... to average them anyway")


def update_candidates(directory, upper_bound=None):
    """Every update checkpoint of the run in ``directory`` as [(update, path)] ascending, the last the final
    model: ``checkpoint_last.pt`` (saved when training stops) when it is newer than the newest
    ``checkpoint_E_U.pt``, else the interval checkpoint of its update. Only updates <= ``upper_bound`` count."""
    found = _numbered(directory, UPDATE_CHECKPOINT, upper_bound)
    last = os.path.join(directory, "checkpoint_last.pt")
    if os.path.exists(last):
        final = checkpoint_update(last)
        if (upper_bound is None or final <= upper_bound) and final not in {u for u, _ in found}:
            found = [(u, p) for u, p in found if u < final] + [(final, last)]
    return found


def check_inputs(paths) -> None:
    """Raise UserError unless every one of ``paths`` loads as a fairseq checkpoint whose ``model`` holds only
    tensors, with the same names and shapes as the first's."""
    import torch

    first = None
    for path in paths:
        model = load_checkpoint(path, mmap=True)["model"]
        if not isinstance(model, dict):
            raise UserError(f"{path}: its 'model' is a {type(model).__name__}, not a dict of tensors; "
                            "not a fairseq checkpoint")
        for name, value in model.items():
            if not isinstance(value, torch.Tensor):
                raise UserError(f"{path}: model entry {name!r} is a {type(value).__name__}, not a tensor; "
                                "cannot average it")
        shapes = {name: tuple(value.shape) for name, value in model.items()}
        if first is None:
            first = (path, shapes)
            continue
        ref_path, ref = first
        if shapes != ref:
            name = next((n for n in ref if n not in shapes), None) or next((n for n in shapes if n not in ref), None)
            if name is not None:
                where = path if name not in shapes else ref_path
                raise UserError(f"{path} and {ref_path} hold different parameters ({name!r} is missing from "
                                f"{where}); cannot average them")
            name = next(n for n in ref if ref[n] != shapes[n])
            raise UserError(f"{path} and {ref_path} hold models of different shapes ({name}: "
                            f"{list(shapes[name])} vs {list(ref[name])}); cannot average them")


def average_checkpoints(paths):
    """Element-wise mean of the ``model`` tensors of ``paths`` (in float64, then the original dtype; integer
    tensors must agree); metadata from the first path. Call :func:`check_inputs` first."""
    import torch

    total, newest = collections.OrderedDict(), None
    for path in paths:
        state = load_checkpoint(path)
        if newest is None:
            newest = state
        params = state["model"]
        if total and list(params) != list(total):
            raise UserError(f"{path} holds different parameters than {paths[0]}; cannot average them")
        for name, tensor in params.items():
            value = tensor.double() if tensor.is_floating_point() else tensor
            if name not in total:
                total[name] = value.clone()
            elif tensor.is_floating_point():
                total[name] += value
            elif not torch.equal(total[name], value):
                raise UserError(f"integer tensor {name} differs between {paths[0]} and {path}")
    averaged = collections.OrderedDict()
    for name, value in total.items():
        dtype = newest["model"][name].dtype
        averaged[name] = (value / len(paths)).to(dtype) if value.is_floating_point() else value
    newest["model"] = averaged
    newest["last_optimizer_state"] = None
    return newest


def parse_args(argv=None):
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", required=True, nargs="+",
                        help="checkpoint files, or one directory to pick the last checkpoints from")
    add_output_option(parser, "where to write the averaged checkpoint", dest="output", out_too=False, required=True)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--num-epoch-checkpoints", type=Number(int, minimum=1),
                       help="average the last N epoch checkpoints (checkpointE.pt) in the --inputs directory")
    group.add_argument("--num-update-checkpoints", type=Number(int, minimum=1),
                       help="average the last N update checkpoints in the --inputs directory, ending at the final "
                            "update: checkpoint_E_U.pt files, and checkpoint_last.pt when it is newer")
    parser.add_argument("--or-fewer", action="store_true",
                        help="with --num-update-checkpoints N: average all the update checkpoints there are when "
                             "fewer than N exist (at least one), instead of stopping with an error")
    parser.add_argument("--from-update", type=Number(int, minimum=0), metavar="N",
                        help="with --num-update-checkpoints: leave out the checkpoints before update N (a warm-up's; "
                             "the final model is always kept, alone if need be); the recipes give their "
                             "--warmup-updates")
    parser.add_argument("--checkpoint-upper-bound", type=Number(int, minimum=1),
                        help="ignore checkpoints after this epoch / update number")
    parser.add_argument("--info-json", metavar="FILE",
                        help="also write FILE: the averaged paths and, with --num-update-checkpoints, their "
                             "update numbers (ascending; the last is the run's final update)")
    add_force_option(parser, "--output and --info-json")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    """``scripts/average_checkpoints.py``, run under :func:`attn_kit.cli.main_guard` (one ``error:`` line)."""
    args = parse_args(argv)
    check_output(args.output, "--output", args.force, inputs=args.inputs)
    if args.info_json:
        check_output(args.info_json, "--info-json", args.force, inputs=args.inputs)
    resolved = [Path(p).resolve() for p in args.inputs]
    repeated = sorted({str(p) for p, r in zip(args.inputs, resolved) if resolved.count(r) > 1})
    if repeated:  # said, not refused: the canary times averaging on copies of one checkpoint
        log(f"warning: --inputs names {', '.join(repeated)} more than once: it is weighed that many times in the "
            "average", stream=sys.stderr)
    n = args.num_epoch_checkpoints if args.num_epoch_checkpoints is not None else args.num_update_checkpoints
    updates = None
    if n is not None:
        if len(args.inputs) != 1 or not os.path.isdir(args.inputs[0]):
            raise UsageError("--num-epoch/update-checkpoints needs --inputs to be one directory")
        if args.num_update_checkpoints is not None:
            picked = update_checkpoints(args.inputs[0], n, args.checkpoint_upper_bound, args.or_fewer,
                                        args.from_update)
            updates, paths = [u for u, _ in picked], [p for _, p in reversed(picked)]  # newest first
        else:
            paths = epoch_checkpoints(args.inputs[0], n, args.checkpoint_upper_bound)
    else:
        paths = args.inputs
    print(f"averaging {len(paths)} checkpoints: {', '.join(paths)}", flush=True)
    if updates:
        print(f"at updates: {', '.join(map(str, updates))}", flush=True)
    check_inputs(paths)
    state = average_checkpoints(paths)
    save(state, args.output)
    if args.info_json:
        ordered = paths[::-1] if updates else paths  # ascending, as the update numbers
        info = {"paths": [os.path.abspath(p) for p in ordered], "updates": updates,
                **({"from_update": args.from_update} if args.from_update is not None else {})}
        write_text_atomic(args.info_json, json.dumps(info, indent=2))
    print(f"wrote {args.output}", flush=True)
    return 0


def save(state: dict, output):
    """``torch.save`` to ``output`` atomically: a failed write (a full disk too) is one line and leaves nothing."""
    import torch

    try:
        with atomic_output(output) as tmp, open(tmp, "wb") as f:
            torch.save(state, f)
    except OSError as exc:
        raise UserError(f"cannot write {output}: {exc.strerror or exc}") from None


# ---------------------------------------------------------------------------------------------- resuming
def _aside(path: str) -> str:
    """Move ``path`` to the first free ``PATH.bad``, ``PATH.bad2``, ...; return the new name."""
    n, target = 1, f"{path}.bad"
    while os.path.exists(target):
        n += 1
        target = f"{path}.bad{n}"
    os.replace(path, target)
    return target


def recover_last(directory) -> None:
    """Before fairseq-train resumes in ``directory``: if ``checkpoint_last.pt`` is damaged (moved aside as
    ``checkpoint_last.pt.bad``) or missing while interval checkpoints are there, copy the newest intact
    ``checkpoint_E_U.pt`` there; say what was done in one line."""
    directory = str(directory)
    last = os.path.join(directory, "checkpoint_last.pt")
    interval = _numbered(directory, UPDATE_CHECKPOINT)[::-1] if os.path.isdir(directory) else []  # newest first
    if not interval and not os.path.exists(last):
        return  # a first start
    damaged = standalone("checkpoint").damaged
    if os.path.exists(last):
        why = damaged(last)
        if why is None:
            return
        what = f"{last} {why}; moved it to {os.path.basename(_aside(last))}"
    else:
        what = f"{last} is missing"
    for update, path in interval:
        if damaged(path) is None:
            with atomic_output(last) as tmp:
                shutil.copyfile(path, tmp)
            log(f"{what}; resuming from {os.path.basename(path)} (update {update}), the newest intact checkpoint")
            return
        log(f"{path} {damaged(path)}; not resuming from it")
    log(f"{what}, and no intact checkpoint is left: training starts from the beginning")


if __name__ == "__main__":  # python -m attn_kit.fairseq_layer.checkpoints: what the recipes' average stage runs
    from ..cli import main_guard

    main_guard(main)
