"""scripts/training_cost.py: what a training run costs before it starts (attn_kit.planning.training_cost's
lines), with the WMT14 recipes' defaults (recipes/configs/wmt14.yaml), so that this script and a
recipe's --dry-run plan the same run.

    python scripts/training_cost.py                      # the paper's base and big, Table 2's arithmetic
    python scripts/training_cost.py --arch attn_paper_big --gpu H100 --ngpus 8
    python scripts/training_cost.py --gpu P100 --precision fp32      # the paper's own hardware
    python scripts/training_cost.py --arch transformer_wmt_en_de --max-update 50000 -- --encoder-layers 8
"""
import argparse

from ..fairseq_layer.fairseq_commands import batch_plan
from ..planning import training_cost
from ..cli import ArgumentParser, Number, UsageError, main_guard
from ..planning.cost import GPUS, MEAN_LENGTH, describe_table2, gpu_name, model_shape, paper_updates
from ..planning.paper import EN_DE_VOCAB
from .. import options
from . import config, scale


def check_args(args):
    """What the options' ranges (their types) cannot say: one UsageError naming the options."""
    if args.utilization is not None and not (args.gpu or args.gpu_tflops):
        raise UsageError("--utilization needs --gpu NAME or --gpu-tflops X (the peak it is a share of)")
    if args.gpu:
        gpu_name(args.gpu)  # an unknown name: one line listing the known ones
    if not args.ngpus:
        raise UsageError("--ngpus 0: the cost is that of GPUs; give --ngpus 1 or more")


def main(argv=None):
    p = ArgumentParser(prog="scripts/training_cost.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    here = dict(checked="here")
    options.add(p, "arch", "any fairseq Transformer arch; default attn_paper_base", default="attn_paper_base")
    options.add(p, "max_update", "default: the paper's for base and big, 100000 / 300000", **here)
    paper, archs = config.settings("wmt14", "paper"), config.load("wmt14")["archs"]
    options.add(p, "tokens_per_update", f"default {paper['tokens_per_update']}, the WMT14 recipes' paper setting, "
                                        "recipes/configs/wmt14.yaml", default=paper["tokens_per_update"], **here)
    options.add(p, "average", "for the disk they take; default: the recipes', "
                              + ", ".join(f"{a} {v['average']}" for a, v in archs.items()), **here)
    options.add(p, "vocab", f"default {EN_DE_VOCAB}, Sec. 5.1", default=EN_DE_VOCAB, **here)
    p.add_argument("--mean-length", type=Number(float, above=0), default=MEAN_LENGTH,
                   help=f"tokens per sentence, for the attention terms (default {MEAN_LENGTH})")
    options.add(p, "ngpus", "default 8", default=8, **here)
    options.add(p, "nnodes", "the all-reduce crosses the network between them; default 1", default=1, **here)
    options.add(p, "precision", "default bf16", default="bf16", choices=("bf16", "fp16", "fp32"))
    options.add(p, "gpu", ", ".join(GPUS))
    for name in ("gpu_tflops", "utilization", "interconnect_gb_per_s"):
        options.add(p, name, **here)
    options.add(p, "save_interval_updates", "default: the recipes' auto, with --gpu", **here)
    options.add(p, "max_tokens_per_gpu", "default: with --gpu, the recipes' auto; without, each GPU kind's", **here)
    p.add_argument("--table2", action="store_true", help="only Table 2's arithmetic beside the analytic counts")
    p.add_argument("--gpus", action="store_true", help="list the GPUs and their dense peaks")
    own, flags = scale.split_passthrough(argv)  # fairseq-train's model flags, after --
    args = p.parse_args(own)  # a typo is an error, not a flag
    check_args(args)
    if args.gpus:
        print("| GPU | bf16 | fp16 | fp32 (TFLOPS, dense) |\n|---|---|---|---|")
        for name, g in GPUS.items():
            print(f"| {name} | {g.bf16 or '-'} | {g.fp16} | {g.fp32} |")
        return
    if not args.table2:  # the run's arch and updates checked before anything is printed
        updates = args.max_update or paper_updates(args.arch)
        shape = model_shape(args.arch, flags, args.vocab)
        if not updates:
            raise UsageError(f"give --max-update for --arch {args.arch} (the paper's steps are known for base and big)")
    print("Table 2's training cost (time x GPUs x sustained single-precision TFLOPS), recomputed:")
    print("\n".join(describe_table2(args.mean_length)))
    if args.table2:
        return
    print()
    average = args.average or archs.get(args.arch, {}).get("average")
    name = gpu_name(args.gpu) if args.gpu else None
    gpus = args.ngpus * args.nnodes  # --ngpus per node, as the recipes'
    forward = None  # as the recipes' --max-tokens-per-gpu sizes it; None: no GPU known, each kind's
    if args.max_tokens_per_gpu:
        p = batch_plan(args.tokens_per_update, gpus, args.max_tokens_per_gpu)
        forward = (p.max_tokens, p.update_freq)
    elif name:
        forward = training_cost.forward_for(shape, args.tokens_per_update, gpus, name, args.precision)
    interval = args.save_interval_updates
    if not interval and forward and name:
        link = training_cost.link_of(name, gpus, args.nnodes, args.interconnect_gb_per_s)
        found = training_cost.estimated_save_interval(shape, forward, name, args.precision, link)
        interval = found[0] if found else training_cost.paper_save_interval(args.arch)
    hw = training_cost.Devices(gpus, args.precision, name, args.gpu_tflops, args.utilization, args.nnodes,
                               args.interconnect_gb_per_s)
    for line in training_cost.describe_run(shape, args.arch, args.tokens_per_update, updates, hw,
                                           mean_length=args.mean_length, forward=forward,
                                           checkpoints=training_cost.Checkpoints(average, interval)):
        print(line)


if __name__ == "__main__":
    main_guard(main)
