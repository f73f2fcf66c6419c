"""What the WMT14 and WSJ recipes share: their common options, settings from the
config files, the fairseq-train and fairseq-generate command lines, and reading
what a run did back from its files.

Every recipe trains with the paper's optimizer, schedule and criterion (Sec. 5.3,
5.4) through :func:`train_command`, on ``--ngpus`` GPUs x ``--nnodes`` nodes (or
``--cpu-procs`` CPU processes), with the batch of :func:`attn_kit.fairseq_layer.fairseq_commands.batch_plan`.
"""
import json
import os
import shlex
from pathlib import Path
from typing import Iterable, List, Optional

from ..fairseq_layer.checkpoints import checkpoint_update, recover_last
from ..cli import UsageError, UserError, log, write_json_atomic
from ..fairseq_layer import fairseq_commands
from ..fairseq_layer.curves import CurveWriter, loss_curve
from ..fairseq_layer.fairseq_commands import DecodePlan, TrainPlan, batch_plan, launcher, precision_of, read_averaged
from ..fairseq_layer.plugin import standalone
from ..fairseq_layer.fairseq_log import TrainProgress, train_log_summary
from ..pipeline import text
from ..pipeline.download import sha256_of
from ..planning.sizes import ARCH_SIZES, SIZES
from . import scale


# ---------------------------------------------------------------------------------------------- options
def model_size(settings: dict, overrides: dict, arch: str):
    """The named size of ``settings["size"]`` (None: the arch's own) with the size options the
    command line gave (``overrides``: layers, d_model, d_ff, h, p_drop; None = not given). Without a
    named size the options change ``arch``'s own (the paper's model with --p-drop 0.2: fairseq's
    --dropout), so they mean the same on every recipe at every size."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if not settings.get("size"):
        return ARCH_SIZES[arch].replace(**given) if given else None
    return SIZES[settings["size"]].replace(**given)


# ---------------------------------------------------------------------------------------------- training
def thread_env(s) -> Optional[dict]:
    """OMP_NUM_THREADS for every training and decoding process, if --threads is set."""
    return fairseq_commands.thread_env(s.threads)


def devices(s) -> int:
    return s.ngpus * s.nnodes if s.ngpus else s.cpu_procs


def plan(s):
    """How an update's tokens are spread over devices and accumulation steps (Sec. 5.1); where the job
    sizes the forward at its start (--max-tokens-per-gpu auto, no GPU known: a dry run, a Slurm
    submission), --max-tokens and --update-freq are ``auto`` in the commands printed."""
    if s.max_tokens_per_gpu == scale.AUTO:
        return fairseq_commands.BatchPlan(devices(s), s.max_tokens_per_gpu, s.max_tokens_per_gpu)
    return batch_plan(s.tokens_per_update, devices(s), s.max_tokens_per_gpu)


def train_budget(s) -> str:
    budget = f"{s.max_update} updates"
    return budget + (f" or {s.train_minutes:g} minutes, whichever comes first" if s.train_minutes else "")


def train_plan(s, model: Iterable[str] = (), lr_scale: float = None, label_smoothing: float = 0.1) -> TrainPlan:
    """How the run trains (Sec. 5.3-5.4: the paper's optimizer, schedule and criterion), from its
    settings; ``model``: flags that size the arch; ``lr_scale``: eq. 3's multiplier when it differs
    from --lr-scale (a --tune trial's); ``label_smoothing``: eps_ls (Table 3 row D varies it)."""
    p = plan(s)
    # torchrun's processes join one job only when fairseq's world size is not 1; its default is the GPUs
    # visible on one node, so one GPU on each of several nodes would otherwise train as separate jobs
    world = devices(s) if s.launcher == "torchrun" and s.ngpus and devices(s) > 1 else None
    return TrainPlan(
        arch=s.arch, model=tuple(model), warmup_updates=s.warmup_updates,
        lr_scale=s.lr_scale if lr_scale is None else lr_scale, label_smoothing=label_smoothing, clip_norm=s.clip_norm,
        max_tokens=p.max_tokens, update_freq=p.update_freq, tokens_per_update=s.tokens_per_update,
        train_flags=tuple(s.train_flags), precision=s.precision_used, gpus=s.ngpus, world_size=world,
        max_update=s.max_update, seed=s.seed, train_minutes=s.train_minutes,
        save_interval_updates=s.save_interval_updates, keep_interval_updates=s.average,
        validate_interval_updates=s.validate_interval_updates, log_interval=s.log_interval,
        extra=tuple(s.fairseq_extra))


def train_command(s, data_bin: Path, save_dir: Path, model: Iterable[str] = (), lr_scale: float = None,
                  label_smoothing: float = 0.1) -> list:
    """fairseq-train of :func:`train_plan`, launched on the run's devices."""
    launch = launcher(s.ngpus, s.cpu_procs, s.nnodes, s.node_rank, s.master_addr, s.master_port,
                      log_dir=str(s.workdir / "logs"), kind=s.launcher)
    return train_plan(s, model, lr_scale, label_smoothing).command(launch, data_bin, save_dir)


# Options of a training stage that run it again on top of its checkpoints when changed: fairseq-train
# resumes from checkpoint_last.pt and trains on to the new --max-update (any other change starts over).
RESUMABLE_TRAIN_OPTIONS = ("max_update", "train_minutes", "save_interval_updates")


def train_options(s, model: Iterable[str] = (), **changes) -> dict:
    """What shapes a training run, as a stage's ``options`` (attn_kit.pipeline.stages): the train
    plan's fingerprint (:meth:`TrainPlan.fingerprint`); ``changes``: a --tune trial's own values."""
    return {**train_plan(s, model).fingerprint(), **changes}


def train_records(s, record: Optional[Path] = None) -> list:
    """What a training run writes besides its checkpoints (its log, command and curves), which
    go aside with them when training starts over."""
    record = Path(record or s.workdir / "train_command.json")
    return [s.workdir / "logs" / "train.log", record, record.parent / "curves.csv", record.parent / "curves.png"]


def run_training(ctx, s, cmd: list, tail=None, record: Optional[Path] = None, model: Iterable[str] = (),
                 env: Optional[dict] = None):
    """Run ``cmd`` (from :func:`train_command`) showing updates done / total and an ETA,
    writing curves.csv / curves.png next to ``record`` at each validation; record the exact
    command and the options given after ``--`` in ``record`` (default WORKDIR/train_command.json;
    :func:`training_record` reads the precision back from the command). --dry-run also prints the run's cost (``model``: the size flags).
    ``env``: more environment for the training processes (the canary's ATTN_RUN_STATS).
    A damaged or missing checkpoint_last.pt is replaced by the newest intact checkpoint first
    (:func:`attn_kit.fairseq_layer.checkpoints.recover_last`), so that training resumes from there."""
    p = plan(s)
    record = Path(record or s.workdir / "train_command.json")
    auto = p.max_tokens == scale.AUTO
    log(f"{p.devices} device(s) x --max-tokens {p.max_tokens} x --update-freq {p.update_freq} "
        f"= {s.tokens_per_update if auto else p.tokens_per_update} tokens per update (at most; padding included"
        + ("; auto: sized for the job's GPU at its start" if auto else "") + f"); precision {s.precision_used}")
    reached = 0
    if not ctx.dry_run:
        last = Path(cmd[cmd.index("--save-dir") + 1]) / "checkpoint_last.pt"
        recover_last(last.parent)
        reached = checkpoint_update(last) if last.exists() else 0
        write_json_atomic(record, {"argv": cmd, "env": thread_env(s) or {},
                                   "fairseq_extra_args": list(s.fairseq_extra)})
    progress = tail or TrainProgress(s.max_update, minutes=s.train_minutes, warmup=s.warmup_updates)
    with CurveWriter(ctx.log_dir / f"{ctx.stage}.log", record.parent, progress,
                     f"{s.arch}, {record.parent.name}", final=not ctx.dry_run) as curves:
        if reached and reached >= int(cmd[cmd.index("--max-update") + 1]):  # fairseq-train would add an update
            log(f"{last} is at update {reached} already (a run stopped after training ended): nothing to train")
        else:
            ctx.sh(cmd, tail=curves, env={**(thread_env(s) or {}), **(env or {})} or None)
    if ctx.dry_run:
        vocab, note = vocabulary_estimate(s)
        scale.print_cost(s, model, vocab, note)


def vocabulary_estimate(s):
    """(vocabulary size, how it is known) for the cost estimate: the binarized dictionary's size,
    else the recipe's estimate (``args.vocab_estimate``: size, note)."""
    dictionary = next(iter(sorted((s.workdir / "data-bin").glob("dict.*.txt"))), None) \
        if (s.workdir / "data-bin").is_dir() else None
    if dictionary:
        return dictionary_size(dictionary), f" ({dictionary.parent.name}'s dictionary)"
    return s.vocab_estimate


def training_record(path: Path) -> dict:
    """What the training of ``path`` (a train_command.json) really ran: its precision (from its
    flags) and the fairseq-train options given after ``--``."""
    try:
        saved = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return {"precision": precision_of(saved["argv"]), "fairseq_extra_args": saved.get("fairseq_extra_args", [])}


def recorded_option(path: Path):
    """``legacy`` of a train stage (attn_kit.pipeline.stages.Stage): an option its stamp lacks (written
    before the option was recorded), as the training's own command (``path``, a train_command.json) says."""
    def legacy(name: str):
        flag = {"optimizer": "--optimizer"}.get(name)
        return fairseq_commands.recorded_flag(path, flag) if flag else None

    return legacy


def recorded_train_command(path: Path) -> Optional[str]:
    """The training command line saved by :func:`run_training`, as a shell would take it."""
    try:
        saved = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return " ".join([*(f"{k}={v}" for k, v in saved.get("env", {}).items()), *map(shlex.quote, saved["argv"])])


# ---------------------------------------------------------------------------------------------- decoding
BEAM_STOP_NAMES = {"t2t": "the paper's stopping rule (tensor2tensor's)", "fairseq": "fairseq's stopping rule"}


def beam_stop(s) -> str:
    """The stopping rule the run's beam search uses: the plugin's rule (attn_plugin/beam_stop.py) for
    ``--beam-stop`` and ``--length-penalty``."""
    try:
        return standalone("beam_stop").stop_rule(getattr(s, "beam_stop", None),
                                                 getattr(s, "length_penalty", "gnmt") == "gnmt")
    except ValueError as exc:
        raise UsageError(f"--beam-stop t2t needs --length-penalty gnmt: {exc}") from None


def decode_plan(s, beam: int, max_len_b: int, batch_size: int, alpha: Optional[float] = None) -> DecodePlan:
    """How the run decodes (:class:`attn_kit.fairseq_layer.fairseq_commands.DecodePlan`): ``beam`` and GNMT's length
    penalty (Sec. 6.1, ``alpha``, default the run's ``--gnmt-alpha``; the paper's stopping rule unless
    ``--beam-stop fairseq``) or fairseq's ``--lenpen`` (with fairseq's rule), outputs up to input +
    ``max_len_b``. A contradictory ``--beam-stop`` is one error line here. ``beam`` and ``alpha`` may be
    --dry-run's placeholders of a --tune run's selection (printed as they are)."""
    stop = beam_stop(s)
    if getattr(s, "length_penalty", "gnmt") == "gnmt":
        return DecodePlan(beam=beam, max_len_b=max_len_b, batch_size=batch_size,
                          alpha=s.alpha if alpha is None else alpha, beam_stop="fairseq" if stop == "fairseq" else None)
    return DecodePlan(beam=beam, max_len_b=max_len_b, batch_size=batch_size, lenpen=s.lenpen)


def generate_command(s, data_bin: Path, checkpoint, subset: str, plan: DecodePlan) -> list:
    """fairseq-generate of the run (:func:`attn_kit.fairseq_layer.fairseq_commands.generate_command`) on its devices."""
    return fairseq_commands.generate_command(data_bin, checkpoint, subset=subset, plan=plan, gpus=s.ngpus)


def run_path(workdir: Path, path: Path) -> str:
    """``path`` relative to the run directory ``workdir`` (``../DATA/...`` for a shared data folder
    beside it), as results.json and inference.json name files: a run copied elsewhere (with its
    data folder, where it has one) still finds them, and never the old location."""
    return Path(os.path.relpath(Path(path).resolve(), Path(workdir).resolve())).as_posix()


def write_run_card(workdir: Path, kind: str, checkpoint: Path, data_bin: Path, src: str, tgt: str,
                   preprocessing: dict, plan: DecodePlan, data_workdir: Optional[Path] = None):
    """``WORKDIR/inference.json`` (:mod:`attn_plugin.hub`): how raw text reaches the model
    evaluated in ``workdir`` and how it decodes, as fairseq options, so that
    scripts/translate.py, ``from_pretrained`` and fairseq-interactive translate new text
    exactly as :func:`generate_command` translated the test set. ``preprocessing``: the
    tokenizer and BPE options; those ending in ``_codes``/``_vocabulary`` are files in ``workdir``
    or in ``data_workdir``, the run's prepared data folder (--data-workdir), which the card then
    names as ``data_workdir``. Every path is relative to ``workdir`` (:func:`run_path`)."""
    rel = lambda path: run_path(workdir, path)  # noqa: E731
    # the precision generate_command decoded in (fp32: the plugin task's bf16_inference off), whatever
    # the training's; translate.py and from_pretrained decode as the card says
    decoding, generation = plan.card()
    args = {"task": "attn_translation", "source_lang": src, "target_lang": tgt, "bf16_inference": False, **decoding}
    paths = [k for k, v in preprocessing.items() if k.endswith(("_codes", "_vocabulary")) and v]
    args.update({k: rel(v) if k in paths else v for k, v in preprocessing.items()})
    shared = {"data_workdir": rel(data_workdir)} if data_workdir and Path(data_workdir).resolve() != \
        Path(workdir).resolve() else {}
    # what the model's token ids mean: checked whenever the card is read (an edited dictionary translates wrongly)
    meaning = [Path(data_bin) / f"dict.{lang}.txt" for lang in dict.fromkeys((src, tgt))]
    meaning += [Path(preprocessing[k]) for k in paths]
    write_json_atomic(workdir / "inference.json", {
        "kind": kind, "checkpoint": rel(checkpoint), "data": rel(data_bin), **shared, "args": args, "paths": paths,
        "generation": generation, "batch_size": int(plan.batch_size),
        "checksums": {rel(f): sha256_of(f) for f in meaning}})


def read_hypotheses(gen_out: Path, expected: int) -> List[str]:
    """The hypotheses (``D-`` lines) of fairseq-generate's output, in input order."""
    hyps = {}
    with open(gen_out, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            if line.startswith("D-"):
                fields = line.rstrip("\n").split("\t")
                hyps[int(fields[0][2:])] = fields[2] if len(fields) > 2 else ""
    if len(hyps) != expected:
        raise UserError(f"{gen_out} holds {len(hyps)} translations but the test set has {expected} sentences: they "
                        "do not belong together (translate the test set again: rerun the generate stage)")
    return [hyps[i] for i in range(expected)]


# ---------------------------------------------------------------------------------------------- records
def last_update(train_log: Path) -> Optional[int]:
    """The last update a fairseq-train log reached (None if it shows none)."""
    return train_log_summary(train_log).get("updates")


def averaged_record(avg: Path, workdir: Optional[Path] = None) -> dict:
    """What was averaged into ``avg``: the checkpoints' paths (relative to ``workdir`` if given)
    and update numbers (ascending; the last is the run's final update), and the update from which
    checkpoints were taken (the warm-up's end; None: any), as the average stage recorded them."""
    info = read_averaged(avg) or {}
    paths = info.get("paths")
    if paths and workdir is not None:
        paths = [run_path(workdir, p) for p in paths]
    return {"averaged_checkpoints": paths, "averaged_updates": info.get("updates"),
            "averaged_from_update": info.get("from_update")}


def run_record(s, train_log: Path, avg: Path, command: Path) -> dict:
    """What a reader needs to repeat the run: the exact training command, seed, threads,
    updates, the real tokens per update and the loss curve (from the training log) and what was
    averaged (the checkpoints relative to the run directory; the command as it ran)."""
    record = {"seed": s.seed, "threads": s.threads, "max_update": s.max_update,
              "train_minutes": s.train_minutes}
    line = recorded_train_command(command)
    if line:
        record["train_command"] = line
    record.update(training_record(command))
    record.update(train_log_summary(train_log))
    record["loss_curve"] = loss_curve(train_log)
    record["checkpoint"] = run_path(s.workdir, avg)
    record.update(averaged_record(avg, s.workdir))
    return record


def report_training(r: dict):
    """The lines every recipe's report ends with: the precision training ran in and the
    fairseq-train options given after ``--``."""
    if r.get("precision"):
        print(f"  training precision: {r['precision']}")
    if r.get("fairseq_extra_args"):
        print(f"  fairseq-train options after --: {' '.join(map(shlex.quote, r['fairseq_extra_args']))}")


def count_lines(path: Path) -> int:
    return text.count_lines(path)


def dictionary_size(path: Path) -> Optional[int]:
    """Symbols of a fairseq dictionary file, with fairseq's 4 special ones."""
    return count_lines(path) + 4 if Path(path).exists() else None
