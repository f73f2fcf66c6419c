#!/usr/bin/env python
"""Average the parameters of several fairseq checkpoints (Sec. 6.1).

The paper's base models are the average of the last 5 checkpoints, the big
ones of the last 20. Flags are those of fairseq's own script (which the pip
package does not ship)::

    python scripts/average_checkpoints.py --inputs ckpts/ --num-update-checkpoints 5 --output avg.pt
    python scripts/average_checkpoints.py --inputs ckpts/ --num-epoch-checkpoints 5 --output avg.pt
    python scripts/average_checkpoints.py --inputs a.pt b.pt c.pt --output avg.pt

Checkpoints are read with torch's safe unpickler (attn_plugin.checkpoint): a
file that is not a plain fairseq checkpoint is refused, never executed. The
result keeps the newest input's options and metadata with averaged weights and
no optimizer state, and is written atomically (temp file, then rename).
"""
import argparse
import collections
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from attn_plugin.checkpoint import load_checkpoint  # noqa: E402
from attn_plugin.errors import AttnPluginError  # noqa: E402


def last_checkpoints(directory, n, kind, upper_bound=None):
    """The newest ``n`` checkpoints in ``directory``: ``checkpoint{E}.pt`` for
    kind "epoch", ``checkpoint_{E}_{U}.pt`` for kind "update"."""
    pattern = re.compile(r"checkpoint(\d+)\.pt$" if kind == "epoch" else r"checkpoint_\d+_(\d+)\.pt$")
    found = []
    for name in os.listdir(directory):
        m = pattern.fullmatch(name)
        if m and (upper_bound is None or int(m.group(1)) <= upper_bound):
            found.append((int(m.group(1)), os.path.join(directory, name)))
    if len(found) < n:
        raise AttnPluginError(f"found {len(found)} {kind} checkpoints in {directory}, need {n} "
                              f"(files named {'checkpointE.pt' if kind == 'epoch' else 'checkpoint_E_U.pt'})")
    return [path for _, path in sorted(found, reverse=True)[:n]]


def average_checkpoints(paths):
    """Element-wise mean of the ``model`` tensors of ``paths``; metadata from the first path."""
    total, newest = collections.OrderedDict(), None
    for i, path in enumerate(paths):
        state = load_checkpoint(path)
        if newest is None:
            newest = state
        params = state["model"]
        if total and list(params) != list(total):
            raise AttnPluginError(f"{path} holds different parameters than {paths[0]}; cannot average them")
        for name, tensor in params.items():
            value = tensor.double() if tensor.is_floating_point() else tensor
            if name not in total:
                total[name] = value.clone()
            elif tensor.is_floating_point():
                total[name] += value
            elif not torch.equal(total[name], value):
                raise AttnPluginError(f"integer tensor {name} differs between {paths[0]} and {path}")
    averaged = collections.OrderedDict()
    for name, value in total.items():
        dtype = newest["model"][name].dtype
        averaged[name] = (value / len(paths)).to(dtype) if value.is_floating_point() else value
    newest["model"] = averaged
    newest["last_optimizer_state"] = None
    return newest


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", required=True, nargs="+",
                        help="checkpoint files, or one directory to pick the last checkpoints from")
    parser.add_argument("--output", required=True, help="where to write the averaged checkpoint")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--num-epoch-checkpoints", type=int,
                       help="average the last N epoch checkpoints (checkpointE.pt) in the --inputs directory")
    group.add_argument("--num-update-checkpoints", type=int,
                       help="average the last N update checkpoints (checkpoint_E_U.pt) in the --inputs directory")
    parser.add_argument("--checkpoint-upper-bound", type=int,
                        help="ignore checkpoints after this epoch / update number")
    args = parser.parse_args(argv)
    try:
        n = args.num_epoch_checkpoints or args.num_update_checkpoints
        if n is not None:
            if len(args.inputs) != 1 or not os.path.isdir(args.inputs[0]):
                raise AttnPluginError("--num-epoch/update-checkpoints needs --inputs to be one directory")
            kind = "epoch" if args.num_epoch_checkpoints else "update"
            paths = last_checkpoints(args.inputs[0], n, kind, args.checkpoint_upper_bound)
        else:
            paths = args.inputs
        print(f"averaging {len(paths)} checkpoints: {', '.join(paths)}", file=sys.stderr)
        state = average_checkpoints(paths)
        tmp = f"{args.output}.tmp{os.getpid()}"
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        torch.save(state, tmp)
        os.replace(tmp, args.output)
        print(f"wrote {args.output}", file=sys.stderr)
    except AttnPluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
