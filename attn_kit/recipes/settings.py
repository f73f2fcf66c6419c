"""A recipe's settings as one frozen, typed object, built once from its YAML and its command line.

A recipe subclasses :class:`TrainSettings` (frozen, keyword-only; one field per option dest and YAML
key it reads) and builds it in one place (the model: attn_kit.recipes.translation.build):
``compose(MySettings, scale.parse(parser, argv), config.settings("my", "paper", mode), derive)``.
A field takes, first to last: ``derive(values)`` (computed from a read-only view of the merged values),
the command line (when not None), the YAML (named in ``.defaulted``), its default; :func:`check_run`
checks the values every recipe shares (one-line UsageError). Nothing is written back: a value derived
later is a property, a changed copy (a canary's budget, a Slurm job's stages) is ``dataclasses.replace``.
"""
import argparse
import math
import os
import dataclasses
import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Mapping, Optional, Sequence

from ..cli import UsageError, UserError
from ..fairseq_layer.fairseq_commands import PRECISIONS, paper_optimization
from ..planning.sizes import ModelSize
from ..pipeline.text import CLEAN_MAX_LEN
from . import scale

DEFAULT_CANARY_MINUTES = 10.0
# options that must be >= 1 where a recipe has them
POSITIVE = ("max_update", "warmup_updates", "save_interval_updates", "average", "tokens_per_update",
            "max_tokens_per_gpu", "beam", "workers", "bpe_merges", "log_interval", "validate_interval_updates",
            "prep_cpus")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSettings:
    """What every recipe has: where and how far it runs, its devices, launcher and canary."""
    workdir: Path
    dry_run: bool
    stage: str
    stop_stage: Optional[str]
    ngpus: int
    nnodes: int
    node_rank: int
    master_addr: Optional[str]
    master_port: Optional[int]
    cpu_procs: int
    precision: str
    precision_used: str  # what --precision resolves to on these devices (scale.resolve_precision)
    seed: int
    threads: Optional[int]
    train_minutes: Optional[float]
    workers: int  # processes of the data stages (a Slurm data job asks for as many CPUs)
    # --launcher slurm and --dry-run's cost (attn_kit.recipes.scale)
    launcher: str
    partition: Optional[str]
    time_limit: Optional[str]
    account: Optional[str]
    mem: Optional[str]
    cpus_per_task: Optional[int]
    signal_seconds: Optional[int]
    prepare_here: bool
    prep_partition: Optional[str]
    prep_time: Optional[str]
    prep_mem: Optional[str]
    prep_cpus: Optional[int]
    gpu: Optional[str]
    gpu_tflops: Optional[float]
    interconnect_gb_per_s: Optional[float]
    utilization: Optional[float]
    # --canary (attn_kit.recipes.canary)
    canary: bool
    canary_minutes: float
    canary_min_utilization: Optional[float]
    canary_min_tokens_per_second: Optional[float]
    canary_epoch_pairs: Optional[int]
    # the fairseq-train options after "--", the recipe's own as typed, and its module (Slurm jobs rerun it)
    fairseq_extra: Sequence[str]
    recipe_argv: Sequence[str]
    recipe_module: str
    defaulted: frozenset = frozenset()  # the fields the YAML filled


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainSettings(RunSettings):
    """What a recipe that trains and decodes with the paper's optimizer and schedule has (Sec. 5-6)."""
    arch: str
    size: Optional[ModelSize]  # the model's size, None: the arch's own
    max_update: int
    warmup_updates: int
    lr_scale: float
    clip_norm: float  # --clip-norm (add_device_options)
    tokens_per_update: int
    max_tokens_per_gpu: int  # or AUTO: the job sizes it at its start
    save_interval_updates: int  # or AUTO, as max_tokens_per_gpu
    validate_interval_updates: Optional[int]
    log_interval: int
    train_flags: Sequence[str]
    average: int
    beam: int
    length_penalty: str
    alpha: float
    beam_stop: Optional[str]

    @property
    def model(self) -> list:
        """The fairseq-train flags that size the arch."""
        return self.size.flags() if self.size else []


def default_workers() -> int:
    """Processes of the data stages by default: the machine's CPUs, at most 8."""
    return min(8, os.cpu_count() or 1)


def merge(cls, given: argparse.Namespace, config: Mapping) -> dict:
    """The values of ``cls``'s fields from the command line (``given``, None = not given) over the
    YAML settings ``config`` (each key a field); ``"defaulted"``: the names the YAML filled. Fields
    neither names stay out."""
    given, values, defaulted = vars(given), {}, set()
    unknown = set(config) - {f.name for f in dataclasses.fields(cls)}
    if unknown:  # a key no field reads would be silently ignored
        raise UserError(f"recipe settings: {', '.join(sorted(unknown))} {'is' if len(unknown) == 1 else 'are'} "
                        f"not a setting of {cls.__name__}")
    for f in dataclasses.fields(cls):
        if given.get(f.name) is not None:
            values[f.name] = given[f.name]
        elif f.name in config:
            values[f.name] = config[f.name]
            defaulted.add(f.name)
        elif f.name in given:
            values[f.name] = given[f.name]
    return {**values, "defaulted": frozenset(defaulted)}


def compose(cls, given: argparse.Namespace, config: Mapping, derive: Optional[Callable] = None):
    """``cls`` from the command line over the YAML (:func:`merge`) and ``derive(values)``'s values
    (computed from a read-only view of the merged ones), checked (:func:`check_run`), with the
    precision its devices train in."""
    values = merge(cls, given, config)
    values.update(derive(SimpleNamespace(**values)) if derive else {})
    check_types(cls, values, getattr(config, "source", None))
    view = SimpleNamespace(**values)
    check_run(view)
    values["precision_used"] = scale.resolve_precision(view.precision, view.ngpus, view.launcher, view.dry_run)
    if values.get("max_tokens_per_gpu") == AUTO:
        values["max_tokens_per_gpu"] = scale.size_forward(SimpleNamespace(**values))
    if values.get("save_interval_updates") == AUTO:
        values["save_interval_updates"] = scale.size_save_interval(SimpleNamespace(**values))
    return cls(**values)


AUTO = scale.AUTO


# settings (and --tune-grid keys) whose option is not --NAME
OPTION_OF = {"alpha": "--gnmt-alpha", "time_limit": "--time", "dropout": "--p-drop"}


def _named(name: str, defaulted, source) -> str:
    """How a message names a setting: the YAML key and its file, or the command-line option."""
    if name in defaulted:
        return f"{source or 'the recipe settings'}: {name}"
    return OPTION_OF.get(name, f"--{name.replace('_', '-')}")


def check_types(cls, values: dict, source=None):
    """Every number a whole number or a finite one, every text a text, as ``cls`` declares them,
    whether the command line or the YAML (``source``, its file) gave it: one UsageError naming the
    option or the key and the file. NaN and infinity pass no range check (``nan <= 0`` is false),
    so they are refused here, once, for every recipe."""
    hints = typing.get_type_hints(cls)
    defaulted = values.get("defaulted", ())
    for name, value in values.items():
        want = hints.get(name)
        if value is None or want is None or value == AUTO:
            continue
        args = [a for a in typing.get_args(want) if a is not type(None)]
        if typing.get_origin(want) is typing.Union and len(args) == 1:
            want = args[0]
        where = _named(name, defaulted, source)
        if want is bool and not isinstance(value, bool):
            raise UsageError(f"{where}: {value!r} is not true or false")
        if want is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise UsageError(f"{where}: {value!r} is not a whole number")
        if want is float and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not math.isfinite(value)):
            raise UsageError(f"{where}: {value!r} is not a finite number")
        if want is str and not isinstance(value, str):
            raise UsageError(f"{where}: {value!r} is not a text")


def tokens_or_auto(text: str):
    """--max-tokens-per-gpu's and --save-interval-updates' value: a number, or auto (sized for the GPU:
    scale.size_forward, scale.size_save_interval)."""
    if text == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"give a number or auto, not {text!r}") from None


MAX_TOKENS_HELP = ("most tokens one device holds per forward; --update-freq makes up the rest of --tokens-per-update. "
                   "auto: the largest forward a GPU's memory holds (--gpu NAME's, else the GPU here; a Slurm job "
                   "decides on its own), at most its share of an update; {cpu} on a CPU or with no GPU known "
                   "(attn_kit.planning.step_model, sized from the GPU check's measured memory)")


# ---------------------------------------------------------------------------------------------- options
def add_run_options(p: argparse.ArgumentParser, default_workdir: str):
    p.add_argument("--workdir", type=Path, help=f"where everything goes (default {default_workdir}); "
                                               "use a fresh one when you change options")
    p.add_argument("--dry-run", action="store_true", help="print every command, run nothing")
    p.add_argument("--stage", default="1", help="first stage to run: a 1-based number or a stage name (default 1)")
    p.add_argument("--stop-stage", help="last stage to run: a number or a stage name (default: the last)")


def add_device_options(g, cpu_modes: str = "--smoke and --bundled"):
    """Where training runs (GPUs, nodes with torchrun, or data-parallel CPU processes), its seed,
    threads and time budget, the launcher (attn_kit.recipes.scale) and the canary. ``cpu_modes``:
    the recipe's modes that train on the CPU, as --ngpus's help names them."""
    g.add_argument("--ngpus", type=int,
                   help=f"GPUs per node (default 8, the paper's; {cpu_modes}: 0 = CPU). The default does not "
                        "follow the machine, so that --dry-run and --launcher slurm plan the same run wherever they "
                        "are typed; a run that trains here checks it before its first stage (fewer GPUs visible "
                        "than asked is one error line saying what to pass)")
    g.add_argument("--nnodes", type=int, default=1, help="nodes, each with --ngpus GPUs (torchrun; default 1)")
    g.add_argument("--node-rank", type=int, default=0, help="this node's rank, 0..nnodes-1 (torchrun)")
    g.add_argument("--master-addr", help="address of node 0, needed with --nnodes > 1 (torchrun)")
    g.add_argument("--master-port", type=int, help="port on node 0 (torchrun: default 29500; --launcher slurm: "
                                                   "default 20000 + the job id modulo 20000)")
    g.add_argument("--cpu-procs", type=int, default=1,
                   help="with --ngpus 0: data-parallel CPU processes (gloo; default 1)")
    g.add_argument("--precision", default="auto", choices=PRECISIONS, help=scale.precision_help())
    g.add_argument("--seed", type=int, default=1, help="random seed of training (default 1)")
    g.add_argument("--clip-norm", type=float, default=0.0,
                   help="clip the gradients' norm at this value (fairseq-train's --clip-norm; default 0: no "
                        "clipping, as the paper, which names none, and tensor2tensor's transformer_base)")
    g.add_argument("--threads", type=int,
                   help="CPU threads per process (OMP_NUM_THREADS) for training and decoding (default: the "
                        "mode's, see the config; GPU runs: torch's choice); results are bitwise reproducible for "
                        "the same thread count")
    g.add_argument("--train-minutes", type=float,
                   help="opt-in wall-clock training budget in minutes (fairseq's --stop-time-hours); training then "
                        "stops at --max-update or the budget, whichever comes first, so the result depends on "
                        "the machine's speed. Default: none, a fixed number of updates")
    scale.add_options(g)
    add_canary_options(g)


def add_canary_options(g):
    g.add_argument("--canary", action="store_true",
                   help="run the data stages, then train as the real run would for --canary-minutes and write "
                        "WORKDIR/canary/canary.json: tokens/s, model FLOP utilization, memory headroom, loss, the cost of a "
                        "validation and a checkpoint, and the predicted wall time of the whole run, part by part; "
                        "exits non-zero with one line when the run would fail or waste the machine")
    g.add_argument("--canary-minutes", type=float, default=DEFAULT_CANARY_MINUTES,
                   help=f"how long the canary trains (default {DEFAULT_CANARY_MINUTES:g})")
    g.add_argument("--canary-min-utilization", type=float, metavar="X",
                   help="the canary fails when the model FLOPs of its real (non-padding) tokens fall below this "
                        "share of the GPU's datasheet dense peak (default: half the share attn_kit.planning.step_model "
                        "predicts for the GPU and the run's forwards; not checked on CPUs or GPUs it does not list)")
    g.add_argument("--canary-min-tokens-per-second", type=float, metavar="N",
                   help="the canary fails below N target tokens/s over all devices (default: no floor)")
    g.add_argument("--canary-epoch-pairs", type=int, metavar="N",
                   help="predict the whole run's epoch-end validations and checkpoints for epochs of N training "
                        "pairs, as long on average as the canary's own (default: the corpus the canary trains on, "
                        "the run's own; for a canary on a stand-in corpus)")


# ---------------------------------------------------------------------------------------------- checks
def check_run(s):
    """The values every recipe shares, as composed (typed settings or a Namespace): one UsageError."""
    for option in ("workdir", "data_workdir"):  # fairseq reads a data path with ':' as a list of folders
        folder = getattr(s, option, None)
        if folder is not None and ":" in str(Path(folder).resolve()):
            raise UsageError(f"--{option.replace('_', '-')} {folder}: its path holds ':', which fairseq-train reads "
                             "as a list of data folders (it would fail after the data stages); choose a folder "
                             "whose path has no ':'")
    for name in POSITIVE:
        if getattr(s, name, None) not in (None, AUTO) and getattr(s, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1")
    if s.threads is not None and s.threads < 1:
        raise UsageError("--threads must be >= 1")
    if s.lr_scale <= 0 or (s.train_minutes is not None and s.train_minutes <= 0):
        raise UsageError("--lr-scale and --train-minutes must be > 0")
    if s.ngpus < 0 or s.nnodes < 1 or s.cpu_procs < 1:
        raise UsageError("--ngpus must be >= 0, --nnodes and --cpu-procs >= 1")
    if s.nnodes > 1 and s.ngpus == 0:
        raise UsageError("multi-node training needs GPUs (--ngpus >= 1)")
    if not 0 <= s.node_rank < s.nnodes:
        raise UsageError(f"--node-rank must be in 0..{s.nnodes - 1}")
    scale.check(s)
    if s.canary_minutes <= 0:
        raise UsageError("--canary-minutes must be > 0")
    if s.canary_min_tokens_per_second is not None and s.canary_min_tokens_per_second < 0:
        raise UsageError("--canary-min-tokens-per-second must be >= 0")
    if s.canary_epoch_pairs is not None and s.canary_epoch_pairs < 1:
        raise UsageError("--canary-epoch-pairs must be >= 1")
    if getattr(s, "alpha", None) is not None and s.alpha < 0:
        raise UsageError("--gnmt-alpha must be >= 0 (0: no length penalty)")
    if getattr(s, "lenpen", None) is not None and s.lenpen < 0:
        raise UsageError("--lenpen must be >= 0 (fairseq's exponent of the length; 1: none)")
    if getattr(s, "bpe_learn_pairs", None) is not None and s.bpe_learn_pairs < 0:
        raise UsageError("--bpe-learn-pairs must be >= 0 (0: learn on every pair)")
    if getattr(s, "clean", False) and s.max_tokens_per_gpu not in (None, AUTO) \
            and s.max_tokens_per_gpu <= CLEAN_MAX_LEN:
        raise UsageError(f"--max-tokens-per-gpu {s.max_tokens_per_gpu}: the data keeps sentences of up to "
                         f"{CLEAN_MAX_LEN} tokens, and fairseq-train needs a batch to hold one (and its end of "
                         f"sentence): give more than {CLEAN_MAX_LEN}")
    if s.canary_min_utilization is not None and not 0 < s.canary_min_utilization <= 1:
        raise UsageError("--canary-min-utilization must be in (0, 1]")
    if s.master_port is not None and not 1 <= s.master_port <= 65535:
        raise UsageError("--master-port must be in 1..65535")
    if s.seed < 0:
        raise UsageError("--seed must be >= 0")
    if getattr(s, "clip_norm", 0.0) < 0:
        raise UsageError("--clip-norm must be >= 0 (0: no clipping)")
    if getattr(s, "lenpen", None) is not None and "lenpen" not in getattr(s, "defaulted", ()) \
            and getattr(s, "length_penalty", None) == "gnmt":
        raise UsageError("--lenpen is fairseq's length penalty: it applies with --length-penalty fairseq; the "
                         "paper's GNMT penalty takes --gnmt-alpha")
    check_size(getattr(s, "size", None))
    check_overrides(s)


def check_overrides(s):
    """An option after ``--`` that the recipe's own fairseq-train command also sets would win silently
    (fairseq takes the last): one line naming the recipe's option for it. ``--lr`` too: eq. 3 sets the
    rate at every update and attn_inverse_sqrt ignores fairseq's --lr."""
    extra = {str(a).split("=", 1)[0] for a in getattr(s, "fairseq_extra", ()) if str(a).startswith("--")}
    own = [*(getattr(s, "model", None) or []), *getattr(s, "train_flags", ()), *paper_optimization(1)]
    for flag in sorted(extra & {str(a) for a in own if str(a).startswith("--")}):
        why = {"--lr": "eq. 3 sets the learning rate at every update (--lr-scale, --warmup-updates)",
               "--dropout": "use --p-drop", "--label-smoothing": "the paper's eps_ls is 0.1 (Sec. 5.4)"}.get(
            flag, "the recipe's own command sets it (its settings: recipes/configs/)")
        raise UsageError(f"{flag} after --: {why}; an option after -- that the recipe also sets would override it "
                         "silently")


def check_size(size):
    """A model size that fairseq can build (before the data stages, not after them)."""
    if size is None:
        return
    for name in ("layers", "d_model", "d_ff", "h"):
        if getattr(size, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1")
    if size.d_model % size.h:
        raise UsageError(f"--h {size.h} does not divide --d-model {size.d_model}: the heads split d_model "
                         "(d_k = d_v = d_model / h, Sec. 3.2.2)")
    if size.p_drop is not None and not (math.isfinite(size.p_drop) and 0 <= size.p_drop < 1):
        raise UsageError(f"--p-drop {size.p_drop}: a dropout rate is in [0, 1)")

