"""Training the way users run it, for every recipe: the precision that really runs,
Slurm, fairseq-train flags passed through after ``--``, and the cost up front.

- ``--precision auto|bf16|fp16|fp32`` (:func:`attn_kit.pipeline.launch.used_precision`):
  bf16 is the plugin task's ``--bf16-autocast``; ``results.json`` records what ran.
- ``--launcher slurm`` (:mod:`attn_kit.pipeline.slurm`): the stages before training
  run here, the rest as a Slurm job that trains with srun (``--launcher srun``).
- ``RECIPE [options] -- [fairseq-train options]``: the options after ``--`` are
  appended to the training command (:func:`split_passthrough`); those that would
  break what the recipe keeps track of are refused (:data:`REFUSED`).
- ``--dry-run`` prints the run's analytic training FLOPs beside the paper's
  Table 2 cost and a wall-time estimate (:mod:`attn_kit.cost`).
- devices (:func:`check_devices`): a ``--ngpus`` this machine cannot provide is one
  line before the first stage, where a training stage would start here.
"""
import argparse
import os
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from ..cli import UsageError, log
from ..pipeline.launch import LAUNCHERS, gpu_supports_bf16, used_precision, visible_gpus

USAGE = "%(prog)s [options] [-- fairseq-train options]"

# fairseq-train options the recipes set themselves, refused after "--": why each would break the run's
# bookkeeping. Options that are also recipe options (--max-update, --seed, --arch, ...) are refused too,
# pointing at the recipe's own option, which the ETA, averaging and results.json follow.
_FILES = "checkpoints stay in WORKDIR/checkpoints, where resuming, averaging and decoding find them"
_RESUME = "the recipe resumes from WORKDIR/checkpoints/checkpoint_last.pt; this would apply again at every resume"
_AVERAGE = "averaging needs the last --average checkpoints (use --average and --save-interval-updates)"
_PRECISION = "use --precision (auto, bf16, fp16, fp32) and --ngpus; results.json records what ran"
_LAUNCH = "the launcher sets it (--ngpus, --nnodes, --cpu-procs, --launcher)"
_BATCH = "use --tokens-per-update and --max-tokens-per-gpu: the recipe spreads an update's tokens over the devices"
REFUSED = {
    "--save-dir": _FILES, "--restore-file": _RESUME, "--finetune-from-model": _RESUME,
    "--reset-optimizer": _RESUME, "--reset-lr-scheduler": _RESUME, "--reset-dataloader": _RESUME,
    "--reset-meters": _RESUME, "--no-save": _AVERAGE, "--keep-interval-updates": _AVERAGE,
    "--save-interval-updates": "use the recipe's --save-interval-updates", "--no-last-checkpoints": _AVERAGE,
    "--user-dir": "the recipes train attn_plugin's model", "--task": "the recipes train with --task "
    "attn_translation (the paper's length penalty, bf16 autocast)",
    "--stop-time-hours": "use --train-minutes", "--max-tokens": _BATCH, "--update-freq": _BATCH,
    "--log-format": "the recipe reads fairseq's simple log format (progress, curves, tokens per update)",
    **{flag: _PRECISION for flag in ("--fp16", "--bf16", "--amp", "--memory-efficient-fp16",
                                     "--memory-efficient-bf16", "--bf16-autocast", "--cpu", "--tpu")},
    **{flag: _LAUNCH for flag in ("--distributed-world-size", "--distributed-rank", "--distributed-init-method",
                                  "--distributed-port", "--distributed-backend", "--distributed-no-spawn",
                                  "--device-id", "--local-rank", "--nprocs-per-node")},
}


# ---------------------------------------------------------------------------------------------- options
def add_options(g):
    """The options of this module, in a recipe's training group."""
    g.add_argument("--launcher", default="torchrun", choices=LAUNCHERS,
                   help="torchrun (default: fairseq-train, torchrun for several GPUs or nodes, our gloo launcher "
                        "for --cpu-procs); slurm: prepare the data here, then write WORKDIR/train.sbatch and submit "
                        "it with sbatch (--dry-run prints it): the job trains --nnodes x --ngpus with srun and "
                        "evaluates; srun: train with srun inside a Slurm allocation you hold (the job uses it)")
    g.add_argument("--partition", help="--launcher slurm: the Slurm partition (sbatch --partition)")
    g.add_argument("--time", dest="time_limit", metavar="TIME",
                   help="--launcher slurm: the job's time limit, e.g. 3-12:00:00 (sbatch --time); a job that "
                        "runs out resumes from its last checkpoint when you run the same command again")
    g.add_argument("--account", help="--launcher slurm: the account charged (sbatch --account)")
    g.add_argument("--gpu", metavar="NAME",
                   help="the GPU for --dry-run's wall-time estimate, by name (its dense bf16/fp16/fp32 peak, "
                        "python scripts/training_cost.py --gpus lists them)")
    g.add_argument("--gpu-tflops", type=float, metavar="X",
                   help="the GPU's dense peak in TFLOPS at the run's precision, for a GPU not in the list")
    g.add_argument("--utilization", type=float,
                   help="the share of that peak the run reaches (default: measured on an H100: 0.08 for d_model "
                        "< 1024, 0.26 from 1024; attn_kit.cost)")


def precision_help() -> str:
    return ("training precision: auto (default) = bf16 on GPUs that support it (A100, H100, ...), fp16 on older "
            "GPUs, fp32 on CPU; bf16 = bf16 autocast with fp32 weights and no loss scaling (the plugin task's "
            "--bf16-autocast; also on CPU); fp16 = fairseq's fp16 mixed precision with loss scaling (fp32 on "
            "CPU); fp32. results.json records the precision that ran")


def check(args):
    """Check and resolve the options of this module (after the recipe's settings are applied)."""
    if args.launcher == "torchrun" and args.nnodes > 1 and not args.master_addr:
        raise UsageError("--nnodes > 1 needs --master-addr (the address of node 0) with torchrun; or use "
                         "--launcher slurm")
    if args.launcher == "torchrun":
        for name in ("partition", "time_limit", "account"):
            if getattr(args, name):
                raise UsageError(f"--{'time' if name == 'time_limit' else name} is an sbatch option: it needs "
                                 "--launcher slurm")
    if args.gpu_tflops is not None and args.gpu_tflops <= 0:
        raise UsageError("--gpu-tflops must be > 0")
    if args.utilization is not None and not 0 < args.utilization <= 1:
        raise UsageError("--utilization must be in (0, 1]")
    if args.gpu:
        from ..cost import gpu

        gpu(args.gpu)  # an unknown name is one line listing the known ones
    bf16_ok = None
    if args.precision == "auto" and args.ngpus > 0:
        # a Slurm job resolves auto on its own GPUs; where none is visible, assume bf16 hardware
        bf16_ok = None if args.launcher == "slurm" else gpu_supports_bf16()
        if bf16_ok is None and (args.dry_run or args.launcher == "slurm"):  # a run here: check_devices says it
            log("--precision auto: no GPU visible here; the commands assume bf16 GPUs (compute capability 8.0 "
                "or newer; older GPUs train in fp16)" + (", and the Slurm job decides on its own GPUs"
                                                        if args.launcher == "slurm" else ""))
    args.precision_used = used_precision(args.precision, args.ngpus, bf16_ok=bf16_ok)


# ---------------------------------------------------------------------------------------------- devices
def is_training(stage) -> bool:
    """Whether a recipe stage runs fairseq-train: ``train``, and the WSJ recipe's ``tune-*`` trials."""
    return stage.name == "train" or stage.name.startswith("tune-")


def device_problem(args, visible: int) -> Optional[str]:
    """Why ``visible`` GPUs cannot train on ``--ngpus`` (per node), saying what to pass; None if they can."""
    if not args.ngpus or visible >= args.ngpus:
        return None
    default = " (the default)" if "ngpus" in getattr(args, "defaulted", ()) else ""
    where = "this node" if args.nnodes > 1 else "this machine"
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        where += f" (CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r})"
    if not visible:
        return (f"--ngpus {args.ngpus}{default}: no CUDA GPU is visible on {where}; pass --ngpus 0 to train on its "
                f"CPU (--cpu-procs N for N data-parallel processes), or run where {args.ngpus} GPUs are "
                "(--launcher slurm submits the training from here)")
    return (f"--ngpus {args.ngpus}{default}: {visible} CUDA GPU{'s' if visible > 1 else ''} visible on {where}; "
            f"pass --ngpus {visible} (an update keeps its {args.tokens_per_update} tokens: --update-freq makes up "
            f"the difference), or run where {args.ngpus} GPUs are")


def check_devices(args, stages, aliases=None, training=is_training):
    """Before the first stage: when a ``training`` stage among --stage..--stop-stage would start
    on this machine, refuse a --ngpus it cannot provide (:func:`device_problem`) in one line.
    Where nothing trains here it is not checked: ``--launcher slurm`` submits from a login node
    (the job's recipe, ``--launcher srun``, checks on its node) and ``--dry-run`` runs nothing
    (it prints the plan, with the line as a note); with ``--nnodes`` each node's recipe checks
    its own GPUs. The training processes check that they form one job themselves
    (``attn_plugin.fairseq_patches``, patch 8)."""
    if args.launcher == "slurm" or not args.ngpus:
        return
    from ..pipeline.stages import Pipeline

    span = Pipeline(args.workdir, stages, True, args.stage, args.stop_stage, aliases)  # checks the range
    if not any(training(stage) for stage in stages[span.first - 1:span.last]):
        return
    problem = device_problem(args, visible_gpus())
    if problem and args.dry_run:
        log(f"note: a run on this machine would stop before its first stage: {problem}")
    elif problem:
        raise UsageError(problem)


# ---------------------------------------------------------------------------------------------- after "--"
def split_passthrough(argv: Optional[Sequence[str]]) -> Tuple[List[str], List[str]]:
    """(recipe options, fairseq-train options): ``argv`` split at its first ``--``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def check_passthrough(extra: List[str], parser: argparse.ArgumentParser):
    """Refuse, with one line, an option after ``--`` that would break the recipe's bookkeeping
    (:data:`REFUSED`) or that is one of the recipe's own options."""
    own = {s for action in parser._actions for s in action.option_strings}
    for arg in extra:
        if not arg.startswith("--") or arg == "--":
            continue
        flag = arg.split("=", 1)[0]
        if flag in REFUSED:
            raise UsageError(f"{flag} after --: {REFUSED[flag]}")
        if flag in own:
            raise UsageError(f"{flag} after --: it is a recipe option; give it before -- (the recipe's "
                             f"progress, averaging and results.json follow it)")


def parse(parser: argparse.ArgumentParser, argv=None):
    """``parser.parse_args`` on the options before ``--``; the fairseq-train options after it,
    checked, on ``args.fairseq_extra``; the recipe options as given on ``args.recipe_argv``."""
    own, extra = split_passthrough(argv)
    args = parser.parse_args(own)
    check_passthrough(extra, parser)
    args.fairseq_extra, args.recipe_argv = extra, own
    return args


# ---------------------------------------------------------------------------------------------- Slurm
def run(args, stages, report, aliases=None, first_training: Optional[str] = None):
    """Run the recipe's ``stages``: all of them here, or with ``--launcher slurm`` those before
    the first training stage (``first_training``; default: the first stage named train or
    tune-*) here and the rest as a Slurm job."""
    from ..pipeline.stages import Pipeline, run_recipe

    check_devices(args, stages, aliases)
    if args.launcher != "slurm":
        return run_recipe(args, stages, report, aliases)
    first_training = first_training or next(s.name for s in stages if is_training(s))
    cut = [s.name for s in stages].index(first_training) + 1  # the 1-based number of the job's first stage
    span = Pipeline(args.workdir, stages, True, args.stage, args.stop_stage, aliases)  # checks the range
    if span.first < cut:
        here = argparse.Namespace(**vars(args))
        here.stage, here.stop_stage = span.first, min(span.last, cut - 1)
        run_recipe(here, stages, report, aliases)
    if span.last >= cut:
        first, last = stages[max(span.first, cut) - 1].name, stages[span.last - 1].name
        submit_job(args, first, last)
        if args.dry_run:  # what the job will run, as its own dry run would print it
            log("the job runs (--launcher srun, on the first node of its allocation):")
            args.launcher, args.stage, args.stop_stage = "srun", first, last
            run_recipe(args, stages, report, aliases)


# Recipe options the job's command line sets itself (the rest of the command line is passed on as given).
JOB_SETS = {"--dry-run": 0, "--launcher": 1, "--workdir": 1, "--stage": 1, "--stop-stage": 1}


def without(argv: Sequence[str], options: dict) -> List[str]:
    """``argv`` without ``options`` (name: how many values follow it; ``--name=value`` too)."""
    out, skip = [], 0
    for arg in argv:
        if skip:
            skip -= 1
        elif arg.split("=", 1)[0] in options:
            skip = options[arg] if "=" not in arg else 0
        else:
            out.append(arg)
    return out


def submit_job(args, first: str, last: str):
    """Write (and submit) the sbatch script that runs stages ``first``..``last`` of this recipe."""
    from ..pipeline import slurm

    command = [sys.executable, "-m", args.recipe_module, *without(args.recipe_argv, JOB_SETS),
               "--launcher", "srun", "--workdir", str(args.workdir), "--stage", first, "--stop-stage", last]
    if args.fairseq_extra:
        command += ["--", *args.fairseq_extra]
    per_node = args.ngpus if args.ngpus else args.cpu_procs
    script = slurm.sbatch_script(command, args.workdir, args.nnodes, per_node, args.ngpus, args.partition,
                                 args.time_limit, args.account, cpus_per_task=args.threads,
                                 env=slurm.job_environment(), cwd=Path.cwd())
    log(f"Slurm job: stages {first}..{last} on {args.nnodes} node(s) x "
        f"{f'{args.ngpus} GPU(s)' if args.ngpus else f'{args.cpu_procs} CPU task(s)'}"
        + (" (dry run)" if args.dry_run else ""))
    slurm.submit(script, args.workdir, args.dry_run)


# ---------------------------------------------------------------------------------------------- cost
def print_cost(args, model_flags: Sequence[str], vocab: int, vocab_note: str):
    """--dry-run: the run's analytic training FLOPs, the paper's Table 2 cost and a wall-time estimate."""
    from .. import cost

    shape = cost.model_shape(args.arch, [*model_flags, *args.fairseq_extra], vocab)
    lines = cost.describe_run(shape, args.arch, args.tokens_per_update, args.max_update,
                              gpus=args.ngpus * args.nnodes, precision=args.precision_used, gpu_name=args.gpu,
                              gpu_tflops=args.gpu_tflops, utilization=args.utilization, vocab_note=vocab_note)
    for line in lines:
        print(f"  # {line}", flush=True)
