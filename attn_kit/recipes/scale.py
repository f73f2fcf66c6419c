"""Training the way users run it, for every recipe: the precision that really runs (``--precision``),
Slurm (``--launcher slurm``: the data stages as a CPU job, the rest as a job after it, requeued
before its time limit), fairseq-train options passed through after ``--`` (those that would break
the recipe's bookkeeping refused: :data:`REFUSED`), ``--dry-run``'s cost estimate (:mod:`attn_kit.planning.cost`),
and the devices checked before the first stage (:func:`check_devices`).
"""
import argparse
import dataclasses
import json
import os
import re
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from ..options import AUTO, GPU_TASK_CPUS, OPTIONS, PREP_CPUS, PREP_MEM, SBATCH_ONLY, SIGNAL_SECONDS, TRAIN_MEM
from ..planning import cost, step_model, training_cost
from ..cli import UsageError, log
from ..planning.cost import gpu
from ..fairseq_layer.fairseq_commands import (batch_plan, gpu_supports_bf16, used_precision,
                                              recorded_flag, visible_gpu_memory_gib, visible_gpu_name,
                                              visible_gpus)
from ..pipeline import slurm
from ..pipeline.stages import Pipeline, run_recipe

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
    "--log-format": "the recipe reads fairseq's json log format (progress, curves, tokens per update)",
    **{flag: _PRECISION for flag in ("--fp16", "--bf16", "--amp", "--memory-efficient-fp16",
                                     "--memory-efficient-bf16", "--bf16-autocast", "--cpu", "--tpu")},
    **{flag: _LAUNCH for flag in ("--distributed-world-size", "--distributed-rank", "--distributed-init-method",
                                  "--distributed-port", "--distributed-backend", "--distributed-no-spawn",
                                  "--device-id", "--local-rank", "--nprocs-per-node")},
}


# ---------------------------------------------------------------------------------------------- checks
def check(s):
    """Check the options of this module, as composed (typed settings or a Namespace)."""
    if s.launcher == "torchrun" and s.nnodes > 1 and not s.master_addr:
        raise UsageError("--nnodes > 1 needs --master-addr (the address of node 0) with torchrun; or use "
                         "--launcher slurm")
    if s.launcher == "torchrun":
        for name in SBATCH_ONLY:
            if getattr(s, name) not in (None, False):
                raise UsageError(f"{OPTIONS[name].flag} is an sbatch option: it needs --launcher slurm")
    for option, size in (("--mem", s.mem), ("--prep-mem", s.prep_mem)):
        if size is not None and not re.fullmatch(r"\d+[KMGT]?", size, re.I):
            raise UsageError(f"{option} {size}: give a size as sbatch takes it: 64G, 64000M, or 0 (all of a node's "
                             "memory)")
    if s.gpu:
        gpu(s.gpu)  # an unknown name is one line listing the known ones


def resolve_precision(precision: str, ngpus: int, launcher: str, dry_run: bool) -> str:
    """What ``--precision`` trains in on ``ngpus`` GPUs per node (0: CPU). With auto on GPUs, a Slurm
    job decides on its own GPUs; where none is visible here, bf16 hardware is assumed (said once)."""
    bf16_ok = None
    if precision == "auto" and ngpus > 0:
        bf16_ok = None if launcher == "slurm" else gpu_supports_bf16()
        if bf16_ok is None and (dry_run or launcher == "slurm"):  # a run here: check_devices says it
            log("--precision auto: no GPU visible here; the commands assume bf16 GPUs (compute capability 8.0 "
                "or newer; older GPUs train in fp16)" + (", and the Slurm job decides on its own GPUs"
                                                        if launcher == "slurm" else ""))
    return used_precision(precision, ngpus, bf16_ok=bf16_ok)


def _gpu_memory(s):
    """(GiB, in words) of the GPU a training process gets: --gpu NAME's, else the GPU visible here
    (not for --launcher slurm, whose job decides on its own GPUs); (None, "") where neither is known."""
    if s.ngpus and s.gpu:
        return cost.gpu(s.gpu).memory_gib, f"--gpu {s.gpu}"
    if s.ngpus and s.launcher != "slurm":
        memory = visible_gpu_memory_gib()
        return memory, "the GPU here" if memory else ""
    return None, ""


def size_forward(s):
    """``--max-tokens-per-gpu auto`` for the composed settings ``s``: the largest forward the GPU holds
    (attn_kit.planning.step_model.size_forward) for --gpu NAME, else the GPU visible here, at most each
    device's share of --tokens-per-update; the paper's 4096 on a CPU. With GPUs and none known (a dry
    run, a Slurm submission without --gpu) it stays auto: the job sizes it at its start."""
    devices = s.ngpus * s.nnodes if s.ngpus else s.cpu_procs
    memory, where = _gpu_memory(s)
    if s.ngpus and not memory:
        log("--max-tokens-per-gpu auto: no GPU is known here, so the "
            + ("Slurm job" if s.launcher == "slurm" else "run") + " sizes the forward for its GPU at its start "
            "(--gpu NAME sizes it here; the dry run's cost lists each GPU kind's)")
        return AUTO
    shape = cost.model_shape(s.arch, [*(s.size.flags() if s.size else []), *s.fairseq_extra])
    tokens = step_model.size_forward(shape, s.tokens_per_update, devices, memory, s.precision_used)
    if s.ngpus:
        log(f"--max-tokens-per-gpu auto: {tokens} tokens per forward for {where} ({memory:.0f} GiB)")
    return tokens


def recorded_save_interval(workdir: Path) -> Optional[int]:
    """The --save-interval-updates the run's training started with (WORKDIR/train_command.json), so
    that a resumed run (another GPU after a requeue, a canary measured since) keeps its interval."""
    value = recorded_flag(Path(workdir) / "train_command.json", "--save-interval-updates")
    return int(value) if value and value.isdigit() else None


def canary_measured(workdir: Path) -> Optional[dict]:
    """WORKDIR/canary/canary.json of a canary that passed, or None."""
    try:
        c = json.loads((Path(workdir) / "canary" / "canary.json").read_text())
    except (OSError, ValueError):
        return None
    return c if isinstance(c, dict) and not c.get("failed") and c.get("seconds_per_update") else None


def size_save_interval(s):
    """``--save-interval-updates auto``: the paper's 10-minute interval (Sec. 6.1) in this run's updates
    (attn_kit.planning.training_cost.save_interval): the interval the run started with when it resumes,
    else at the seconds per update a canary measured in WORKDIR, else the plan's estimate for the GPU
    (--gpu NAME, the GPU here); on a CPU the paper's own (its step time on its P100s); auto where no
    GPU is known yet (the job sizes it at its start)."""
    recorded = recorded_save_interval(s.workdir)
    if recorded:
        return recorded
    measured = canary_measured(s.workdir)
    if measured:
        seconds, source = measured["seconds_per_update"], f"as the canary measured ({s.workdir / 'canary'})"
    elif s.ngpus and s.max_tokens_per_gpu != AUTO:
        shape = cost.model_shape(s.arch, [*(s.size.flags() if s.size else []), *s.fairseq_extra])
        where = _gpu_memory(s)[1]
        name = cost.gpu_name(s.gpu) if s.gpu else cost.gpu_of_device(visible_gpu_name() or "")
        p = batch_plan(s.tokens_per_update, s.ngpus * s.nnodes, s.max_tokens_per_gpu)
        link = training_cost.link_of(name, s.ngpus * s.nnodes, s.nnodes, s.interconnect_gb_per_s) if name else None
        found = training_cost.estimated_save_interval(shape, (p.max_tokens, p.update_freq), name, s.precision_used,
                                                      link)
        if found is None:
            interval = training_cost.paper_save_interval(s.arch)
            log(f"--save-interval-updates auto: {interval}, the paper's (no step-time estimate for {where})")
            return interval
        seconds, source = found[1], f"estimated for {where}"
    elif s.ngpus:
        return AUTO
    else:
        return training_cost.paper_save_interval(s.arch)
    interval = training_cost.save_interval(seconds)
    log(f"--save-interval-updates auto: {interval} updates, the paper's 10 minutes at {seconds:.3f} s per update "
        f"{source}")
    return interval


# ---------------------------------------------------------------------------------------------- devices
def is_training(stage) -> bool:
    """Whether a recipe stage runs fairseq-train: ``train``, ``canary`` and the WSJ recipe's ``tune-*`` trials."""
    return stage.name in ("train", "canary") or stage.name.startswith("tune-")


def device_problem(s, visible: int) -> Optional[str]:
    """Why ``visible`` GPUs cannot train on ``--ngpus`` (per node), saying what to pass; None if they can."""
    if not s.ngpus or visible >= s.ngpus:
        return None
    default = " (the default)" if "ngpus" in getattr(s, "defaulted", ()) else ""
    where = "this node" if s.nnodes > 1 else "this machine"
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        where += f" (CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r})"
    if not visible:
        return (f"--ngpus {s.ngpus}{default}: no CUDA GPU is visible on {where}; pass --ngpus 0 to train on its "
                f"CPU (--cpu-procs N for N data-parallel processes), or run where {s.ngpus} GPUs are "
                "(--launcher slurm submits the training from here)")
    return (f"--ngpus {s.ngpus}{default}: {visible} CUDA GPU{'s' if visible > 1 else ''} visible on {where}; "
            f"pass --ngpus {visible} (an update keeps its {s.tokens_per_update} tokens: --update-freq makes up "
            f"the difference), or run where {s.ngpus} GPUs are")


def check_devices(s, stages, aliases=None, training=is_training):
    """Before the first stage: when a ``training`` stage among --stage..--stop-stage would start
    on this machine, refuse a --ngpus it cannot provide (:func:`device_problem`) in one line.
    Where nothing trains here it is not checked: ``--launcher slurm`` submits from a login node
    (the job's recipe, ``--launcher srun``, checks on its node) and ``--dry-run`` runs nothing
    (it prints the plan, with the line as a note); with ``--nnodes`` each node's recipe checks
    its own GPUs. The training processes check that they form one job themselves
    (``attn_plugin.fairseq_patches``, patch 8)."""
    if s.launcher == "slurm" or not s.ngpus:
        return
    span = Pipeline(s.workdir, stages, True, s.stage, s.stop_stage, aliases)  # checks the range
    if not any(training(stage) for stage in stages[span.first - 1:span.last]):
        return
    problem = device_problem(s, visible_gpus())
    if problem and s.dry_run:
        log(f"note: a run on this machine would stop before its first stage: {problem}")
    elif problem:
        raise UsageError(problem)


def schedule_notes(s, budget: bool = True) -> List[str]:
    """What the run's schedule cannot do, as far as it is known before anything runs: a warm-up
    longer than the run (eq. 3's rate never reaches its peak) and, with ``budget``, that how
    far --train-minutes reaches is unknown until a rate is measured (the canary measures it and
    warns: attn_kit.recipes.canary.schedule_warnings). ``scale.run`` prints them as ``note:`` lines
    (the budget's under --dry-run only)."""
    warmup, updates, minutes = (getattr(s, k, None) for k in ("warmup_updates", "max_update", "train_minutes"))
    notes = []
    if warmup and updates and warmup > updates:
        notes.append(f"--warmup-updates {warmup} is longer than --max-update {updates}: training ends "
                     f"{updates / warmup:.0%} of the way through eq. 3's warm-up, before the learning rate reaches "
                     "its peak; give a --warmup-updates below --max-update")
    if budget and minutes:
        notes.append(f"--train-minutes {minutes:g}: how many of the {updates} updates"
                     + (f" (and of the {warmup}-update warm-up)" if warmup else "")
                     + " fit in the budget is unknown until the rate is measured; --canary measures it and says "
                       "what does not fit")
    return notes


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
def run(s, stages, report, aliases=None, first_training: Optional[str] = None):
    """Run the recipe's ``stages``: all of them here, or with ``--launcher slurm`` as two Slurm
    jobs (:mod:`attn_kit.pipeline.slurm`): the stages before the first training stage
    (``first_training``; default: the first :func:`is_training` stage) as a CPU job, unless they
    are done or ``--prepare-here`` runs them here, and the rest as a job that starts after it.
    ``stages``: a function of the settings that makes them; ``report``: what prints the results
    (:func:`attn_kit.recipes.canary.report` for a ``--canary`` run)."""
    made = stages(s)
    check_devices(s, made, aliases)
    for note in schedule_notes(s, budget=s.dry_run):
        log(f"note: {note}")
    if s.launcher != "slurm":
        return run_recipe(s, made, report, aliases)
    if not s.dry_run:
        slurm.check_no_job(s.workdir)  # before anything runs here (--prepare-here)
    first_training = first_training or next(st.name for st in made if is_training(st))
    cut = [st.name for st in made].index(first_training) + 1  # the 1-based number of the job's first stage
    span = Pipeline(s.workdir, made, True, s.stage, s.stop_stage, aliases)  # checks the range
    jobs = []  # (script name and text, first stage, last stage) of each job
    if span.first < cut:
        data = made[span.first - 1:min(span.last, cut - 1)]
        if s.prepare_here:
            run_recipe(dataclasses.replace(s, stage=data[0].name, stop_stage=data[-1].name), made, report, aliases)
        elif all_done(span, data):
            log(f"stages {data[0].name}..{data[-1].name} are done already: no data job")
        else:
            first, last = data[0].name, data[-1].name
            cpus = data_job_cpus(s)
            command = job_command(s, first, last, workers=cpus)
            where = getattr(s, "data_workdir", None)  # the data stages' folder (--data-workdir)
            jobs.append((prep_script(s, command, cpus, f"stages {first}..{last}"
                                     + (f" in {where}" if where and where != s.workdir else ""), watch=where),
                         first, last))
    if span.last >= cut:
        first, last = made[max(span.first, cut) - 1].name, made[span.last - 1].name
        jobs.append((train_script(s, first, last), first, last))
    if jobs:
        slurm.submit([script for script, _, _ in jobs], s.workdir, s.dry_run)
    if s.dry_run:  # what each job will run, as its own dry run would print it
        for (name, _), first, last in jobs:
            log(f"the job of {name} runs (--launcher srun, on the first node of its allocation):")
            job = dataclasses.replace(s, launcher="srun", stage=first, stop_stage=last,
                                      **({"workers": data_job_cpus(s)} if name == slurm.PREP_SCRIPT else {}))
            run_recipe(job, stages(job), report, aliases)


def data_job_cpus(s) -> int:
    """The Slurm data job's CPUs and --workers: --prep-cpus, else --workers where the command line gave
    it, else :data:`PREP_CPUS`."""
    typed = any(a == "--workers" or a.startswith("--workers=") for a in s.recipe_argv)
    return s.prep_cpus or (s.workers if typed else PREP_CPUS)


def all_done(pipeline, stages=None) -> bool:
    """Whether a run of ``pipeline`` would skip each of ``stages`` (default: its selected ones): each
    finished, with its inputs, options and outputs as it recorded them."""
    stages = pipeline.stages[pipeline.first - 1:pipeline.last] if stages is None else stages
    return all(pipeline.status(stage)[0] in ("skip", "adopt") for stage in stages)


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


def job_command(s, first: str, last: str, workers: Optional[int] = None) -> List[str]:
    """This recipe's command line as a Slurm job runs it: stages ``first``..``last`` with ``--launcher
    srun`` (and ``--workers``, where given, set to what the job asked for); the rest as typed."""
    sets = {"--launcher": "srun", "--workdir": s.workdir, "--stage": first, "--stop-stage": last,
            **({"--workers": workers} if workers else {})}
    typed = without(s.recipe_argv, {"--dry-run": 0, **{name: 1 for name in sets}})
    command = [sys.executable, "-m", s.recipe_module, *typed, *(str(x) for item in sets.items() for x in item)]
    return command + (["--", *s.fairseq_extra] if s.fairseq_extra else [])


def task_cpus(s) -> int:
    """--cpus-per-task of the training job (see its help)."""
    need = (s.threads or 1) + 1  # the compute threads and fairseq's data-loader worker
    return s.cpus_per_task or (max(GPU_TASK_CPUS, need) if s.ngpus else need)


def _signal_seconds(s) -> int:
    return SIGNAL_SECONDS if s.signal_seconds is None else s.signal_seconds


def prep_script(s, command: List[str], workers: int, what: str, watch: Optional[Path] = None) -> Tuple[str, str]:
    """(file name, text) of the data job: ``command`` (which runs ``what``, in words) on one CPU task
    of ``workers`` CPUs; ``watch``: the folder it works in (default WORKDIR)."""
    log(f"Slurm data job: {what} on {workers} CPU(s)")
    alloc = slurm.Allocation(cpus_per_task=workers, mem=s.prep_mem or PREP_MEM,
                             partition=s.prep_partition or s.partition, time_limit=s.prep_time or s.time_limit,
                             account=s.account)
    return slurm.PREP_SCRIPT, slurm.sbatch_script(command, s.workdir, slurm.PREP_SCRIPT, alloc, _signal_seconds(s),
                                                  env=slurm.job_environment(), cwd=Path.cwd(), watch=watch)


def train_script(s, first: str, last: str) -> Tuple[str, str]:
    """(file name, text) of the training job: stages ``first``..``last`` on --nnodes x (--ngpus or
    --cpu-procs) tasks."""
    per_node = s.ngpus if s.ngpus else s.cpu_procs
    log(f"Slurm training job: stages {first}..{last} on {s.nnodes} node(s) x "
        f"{f'{s.ngpus} GPU(s)' if s.ngpus else f'{s.cpu_procs} CPU task(s)'} of {task_cpus(s)} CPUs")
    alloc = slurm.Allocation(s.nnodes, per_node, s.ngpus, task_cpus(s), s.mem or TRAIN_MEM, s.partition,
                             s.time_limit, s.account)
    return slurm.SCRIPT, slurm.sbatch_script(job_command(s, first, last), s.workdir, slurm.SCRIPT, alloc,
                                             _signal_seconds(s), env=slurm.job_environment(), cwd=Path.cwd())


# ---------------------------------------------------------------------------------------------- cost
def print_cost(s, model_flags: Sequence[str], vocab: int, vocab_note: str):
    """--dry-run: the run's analytic training FLOPs, the paper's Table 2 cost, the wall time and GPU-hours
    (the layouts compared on several GPUs), the checkpoints' writes and disk."""
    shape = cost.model_shape(s.arch, [*model_flags, *s.fairseq_extra], vocab)
    forward = None
    if s.max_tokens_per_gpu != AUTO:
        p = batch_plan(s.tokens_per_update, s.ngpus * s.nnodes if s.ngpus else s.cpu_procs, s.max_tokens_per_gpu)
        forward = (p.max_tokens, p.update_freq)
    hw = training_cost.Devices(s.ngpus * s.nnodes, s.precision_used, cost.gpu_name(s.gpu) if s.gpu else None,
                               s.gpu_tflops, s.utilization, s.nnodes, s.interconnect_gb_per_s)
    measured = canary_measured(s.workdir) or {}
    interval = getattr(s, "save_interval_updates", None)
    checkpoints = training_cost.Checkpoints(getattr(s, "average", None), None if interval == AUTO else interval,
                                            (measured.get("checkpoint") or {}).get("write_seconds"))
    lines = training_cost.describe_run(shape, s.arch, s.tokens_per_update, s.max_update, hw, vocab_note=vocab_note,
                                       checkpoints=checkpoints, forward=forward)
    for line in lines:
        print(f"  # {line}", flush=True)
