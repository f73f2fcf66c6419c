"""scripts/training_cost.py: what a training run costs before it starts (attn_kit.planning.training_cost's
lines), with the WMT14 recipes' defaults (recipes/configs/wmt14.yaml), so that this script and a
recipe's --dry-run plan the same run.

    python scripts/training_cost.py                      # the paper's base and big, Table 2's arithmetic
    python scripts/training_cost.py --arch attn_paper_big --gpu H100 --ngpus 8
    python scripts/training_cost.py --gpu P100 --precision fp32      # the paper's own hardware
    python scripts/training_cost.py --arch transformer_wmt_en_de --max-update 50000 -- --encoder-layers 8
"""
import argparse
import sys

from ..fairseq_layer.fairseq_commands import batch_plan
from ..planning import training_cost
from ..cli import ArgumentParser, Number, UsageError, main_guard
from ..planning.cost import GPUS, MEAN_LENGTH, describe_table2, gpu_name, model_shape, paper_updates
from ..planning.paper import EN_DE_VOCAB
from . import config


def check_args(args):
    """What the options' ranges (their types) cannot say: one UsageError naming the options."""
    if args.utilization is not None and not (args.gpu or args.gpu_tflops):
        raise UsageError("--utilization needs --gpu NAME or --gpu-tflops X (the peak it is a share of)")
    if args.gpu:
        gpu_name(args.gpu)  # an unknown name: one line listing the known ones
    if args.ngpus % args.nnodes:
        raise UsageError(f"--ngpus {args.ngpus} (GPUs in all) is not a multiple of --nnodes {args.nnodes}")


def main(argv=None):
    p = ArgumentParser(prog="scripts/training_cost.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="attn_paper_base", help="any fairseq Transformer arch (default attn_paper_base)")
    p.add_argument("--max-update", type=Number(int, minimum=1),
                   help="updates (default: the paper's for base and big, 100000 / 300000)")
    paper, archs = config.settings("wmt14", "paper"), config.load("wmt14")["archs"]
    p.add_argument("--tokens-per-update", type=Number(int, minimum=1), default=paper["tokens_per_update"],
                   help="padded tokens per update over all devices, fairseq's --max-tokens x devices x "
                        f"--update-freq, as the recipes' --tokens-per-update (default {paper['tokens_per_update']}, "
                        "the WMT14 recipes' paper setting, recipes/configs/wmt14.yaml)")
    p.add_argument("--average", type=Number(int, minimum=1),
                   help="checkpoints averaged, for the disk they take (default: the recipes', "
                                               + ", ".join(f"{a} {v['average']}" for a, v in archs.items()) + ")")
    p.add_argument("--vocab", type=Number(int, minimum=1), default=EN_DE_VOCAB,
                   help=f"vocabulary (default {EN_DE_VOCAB}, Sec. 5.1)")
    p.add_argument("--mean-length", type=Number(float, above=0), default=MEAN_LENGTH,
                   help=f"tokens per sentence, for the attention terms (default {MEAN_LENGTH})")
    p.add_argument("--ngpus", type=Number(int, minimum=1), default=8, help="GPUs in all, over every node (default 8)")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32"], help="default bf16")
    p.add_argument("--gpu", metavar="NAME", help=f"one of {', '.join(GPUS)}")
    p.add_argument("--gpu-tflops", type=Number(float, above=0), metavar="X", help="the GPU's dense peak at --precision")
    p.add_argument("--utilization", type=Number(float, above=0, maximum=1),
                   help="share of the peak reached, for the arithmetic alone (default: "
                                                        "attn_kit.planning.step_model's estimate and range)")
    p.add_argument("--nnodes", type=Number(int, minimum=1), default=1,
                   help="nodes the GPUs are spread over, for the all-reduce (default 1)")
    p.add_argument("--interconnect-gb-per-s", type=Number(float, above=0), metavar="X",
                   help="the all-reduce's slowest link, GB/s per GPU and direction (default: the GPU's own within a "
                        "node, the assumed network between nodes), as the recipes' option")
    p.add_argument("--save-interval-updates", type=Number(int, minimum=1), metavar="N",
                   help="a checkpoint every N updates (default: the recipes' auto, the paper's 10 minutes of the "
                        "estimated updates, with --gpu)")
    p.add_argument("--max-tokens-per-gpu", type=Number(int, minimum=1), metavar="N",
                   help="tokens per forward on each GPU (default: with --gpu, the largest its memory holds, at most "
                        "its share of an update, as the recipes' auto; without, each GPU kind's)")
    p.add_argument("--table2", action="store_true", help="only Table 2's arithmetic beside the analytic counts")
    p.add_argument("--gpus", action="store_true", help="list the GPUs and their dense peaks")
    argv = list(sys.argv[1:] if argv is None else argv)
    flags = argv[argv.index("--") + 1:] if "--" in argv else []  # fairseq-train's model flags, after --
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)  # a typo is an error, not a flag
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
    forward = None  # as the recipes' --max-tokens-per-gpu sizes it; None: no GPU known, each kind's
    if args.max_tokens_per_gpu:
        p = batch_plan(args.tokens_per_update, args.ngpus, args.max_tokens_per_gpu)
        forward = (p.max_tokens, p.update_freq)
    elif name:
        forward = training_cost.forward_for(shape, args.tokens_per_update, args.ngpus, name, args.precision)
    interval = args.save_interval_updates
    if not interval and forward and name:
        link = training_cost.link_of(name, args.ngpus, args.nnodes, args.interconnect_gb_per_s)
        found = training_cost.estimated_save_interval(shape, forward, name, args.precision, link)
        interval = found[0] if found else training_cost.paper_save_interval(args.arch)
    hw = training_cost.Devices(args.ngpus, args.precision, name, args.gpu_tflops, args.utilization, args.nnodes,
                               args.interconnect_gb_per_s)
    for line in training_cost.describe_run(shape, args.arch, args.tokens_per_update, updates, hw,
                                           mean_length=args.mean_length, forward=forward,
                                           checkpoints=training_cost.Checkpoints(average, interval)):
        print(line)


if __name__ == "__main__":
    main_guard(main)
