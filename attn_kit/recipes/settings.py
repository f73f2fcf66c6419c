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

from .. import options
from ..options import AUTO  # sized for the GPU (attn_kit.recipes.scale: size_forward, size_save_interval)
from ..cli import UsageError, UserError
from ..fairseq_layer.fairseq_commands import paper_optimization
from ..planning.sizes import ModelSize
from ..pipeline.text import CLEAN_MAX_LEN
from . import scale

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
    check_run(view, getattr(config, "source", None))
    values["precision_used"] = scale.resolve_precision(view.precision, view.ngpus, view.launcher, view.dry_run)
    if values.get("max_tokens_per_gpu") == AUTO:
        values["max_tokens_per_gpu"] = scale.size_forward(SimpleNamespace(**values))
    if values.get("save_interval_updates") == AUTO:
        values["save_interval_updates"] = scale.size_save_interval(SimpleNamespace(**values))
    return cls(**values)


def option_of(name: str) -> str:
    """The option of a setting (or of a --tune-grid key: dropout is --p-drop)."""
    name = {"dropout": "p_drop"}.get(name, name)
    return options.OPTIONS[name].flag if name in options.OPTIONS else f"--{name.replace('_', '-')}"


def _named(name: str, defaulted, source) -> str:
    """How a message names a setting: the YAML key and its file, or the command-line option."""
    if name in defaulted:
        return f"{source or 'the recipe settings'}: {name}"
    return option_of(name)


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


# ---------------------------------------------------------------------------------------------- options
def add_run_options(p: argparse.ArgumentParser, default_workdir: str):
    options.add(p, "workdir", f"default {default_workdir}")
    p.add_argument("--dry-run", action="store_true", help="print every command, run nothing")
    p.add_argument("--stage", default="1", help="first stage to run: a 1-based number or a stage name (default 1)")
    p.add_argument("--stop-stage", help="last stage to run: a number or a stage name (default: the last)")


def add_device_options(g, cpu_modes: str = "--smoke and --bundled",
                       minutes: str = "default: none, a fixed number of updates"):
    """Where training runs (GPUs, nodes with torchrun, or data-parallel CPU processes), its seed,
    threads and time budget, the launcher (attn_kit.recipes.scale) and the canary. ``cpu_modes``:
    the recipe's modes that train on the CPU, as --ngpus's help names them; ``minutes``: --train-minutes's note."""
    options.add(g, "ngpus", f"default 8, the paper's; {cpu_modes}: 0. The default does not follow the machine, so "
                            "that --dry-run and --launcher slurm plan the same run wherever they are typed; a run "
                            "that trains here checks it before its first stage (fewer GPUs visible than asked is "
                            "one error line saying what to pass)")
    options.add(g, "nnodes", "default 1", default=1)
    options.add(g, "node_rank", default=0)
    options.add(g, "master_addr")
    options.add(g, "master_port")
    options.add(g, "cpu_procs", "default 1", default=1)
    options.add(g, "precision", "default auto", default="auto")
    options.add(g, "seed", "of training; default 1", default=1)
    options.add(g, "clip_norm", "default 0", default=0.0)
    options.add(g, "threads", "default: the mode's, see the config; GPU runs: torch's choice")
    options.add(g, "train_minutes", minutes)
    options.add(g, "launcher", default="torchrun")
    for name in (*options.SBATCH_ONLY, "gpu", "gpu_tflops", "interconnect_gb_per_s", "utilization"):
        options.add(g, name)
    options.add(g, "canary")
    options.add(g, "canary_minutes", default=options.CANARY_MINUTES)
    for name in ("canary_min_utilization", "canary_min_tokens_per_second", "canary_epoch_pairs"):
        options.add(g, name)


# ---------------------------------------------------------------------------------------------- checks
def check_run(s, source=None):
    """The values every recipe shares, as composed (typed settings or a Namespace; ``source``: the YAML
    file): one UsageError."""
    for option in ("workdir", "data_workdir"):  # fairseq reads a data path with ':' as a list of folders
        folder = getattr(s, option, None)
        if folder is not None and ":" in str(Path(folder).resolve()):
            raise UsageError(f"--{option.replace('_', '-')} {folder}: its path holds ':', which fairseq-train reads "
                             "as a list of data folders (it would fail after the data stages); choose a folder "
                             "whose path has no ':'")
    defaulted = getattr(s, "defaulted", ())
    options.check_ranges(vars(s), lambda name: _named(name, defaulted, source))
    if s.nnodes > 1 and s.ngpus == 0:
        raise UsageError("multi-node training needs GPUs (--ngpus >= 1)")
    if not s.node_rank < s.nnodes:
        raise UsageError(f"--node-rank must be in 0..{s.nnodes - 1}")
    scale.check(s)
    if getattr(s, "clean", False) and s.max_tokens_per_gpu not in (None, AUTO) \
            and s.max_tokens_per_gpu <= CLEAN_MAX_LEN:
        raise UsageError(f"--max-tokens-per-gpu {s.max_tokens_per_gpu}: the data keeps sentences of up to "
                         f"{CLEAN_MAX_LEN} tokens, and fairseq-train needs a batch to hold one (and its end of "
                         f"sentence): give more than {CLEAN_MAX_LEN}")
    if getattr(s, "lenpen", None) is not None and "lenpen" not in defaulted \
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
    options.check_ranges({name: getattr(size, name) for name in ("layers", "d_model", "d_ff", "h", "p_drop")})
    if size.d_model % size.h:
        raise UsageError(f"--h {size.h} does not divide --d-model {size.d_model}: the heads split d_model "
                         "(d_k = d_v = d_model / h, Sec. 3.2.2)")
