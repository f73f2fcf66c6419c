"""Every fairseq command the kit runs, built in one place: fairseq-train (the paper's
optimizer, schedule and criterion; batch per device; precision; the launcher: plain,
torchrun, our CPU data-parallel launcher or Slurm's srun), fairseq-generate,
fairseq-validate, fairseq-preprocess, and the thread environment of each process.

Builders take explicit keyword arguments (no Namespace). Training logs in fairseq's
JSON format (read by :mod:`attn_kit.fairseq_layer.fairseq_log`). fairseq-interactive's command is
built from a run card by :func:`attn_plugin.hub.interactive_command` (the plugin
cannot import the kit).
"""
import json
import math
import os
import shutil
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from ..checkout import PLUGIN_DIR
from ..cli import UsageError, UserError
from ..pipeline.process import console_script

TASK = ["--task", "attn_translation"]
# The longest sentence fairseq's translation task (and the plugin's model) takes, in positions, </s> included:
# fairseq-generate refuses a longer test sentence (after training) unless told to skip it.
MAX_POSITIONS = 1024
MAX_LEN_A = 1  # the longest output is MAX_LEN_A x input length + max_len_b


# ---------------------------------------------------------------------------------------------- environment
def thread_env(threads: Optional[int]) -> Optional[dict]:
    """OMP/MKL threads of a training or decoding process; None when ``threads`` is not set."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)} if threads else None


# ---------------------------------------------------------------------------------------------- batch
@dataclass
class BatchPlan:
    devices: int
    max_tokens: int   # per device, per forward/backward
    update_freq: int

    @property
    def tokens_per_update(self) -> int:
        return self.devices * self.max_tokens * self.update_freq


def batch_plan(tokens_per_update: int, devices: int, max_tokens_per_device: int) -> BatchPlan:
    """--max-tokens and --update-freq for ``devices`` devices (CPU processes count as devices)
    so that an update holds ~``tokens_per_update`` padded tokens (Sec. 5.1: about 25000 source
    and 25000 target tokens): the smallest --update-freq that keeps --max-tokens within what
    one device holds, the budget then spread evenly."""
    devices = max(1, devices)
    update_freq = max(1, math.ceil(tokens_per_update / (devices * max_tokens_per_device)))
    max_tokens = math.ceil(tokens_per_update / (devices * update_freq))
    return BatchPlan(devices, max_tokens, update_freq)


# ---------------------------------------------------------------------------------------------- optimization
ADAM_SETTINGS = ["--adam-betas", "(0.9, 0.98)", "--adam-eps", "1e-9"]  # Sec. 5.3
# The recipes' Adam: the plugin's attn_adam, fairseq's arithmetic in multi-tensor kernels (the same
# parameters bit for bit on a CPU; far fewer GPU kernel launches per update: attn_plugin/optim).
PAPER_ADAM = ["--optimizer", "attn_adam", *ADAM_SETTINGS]


def paper_optimization(warmup_updates: int, lr_scale: float = 1.0, label_smoothing: float = 0.1,
                       optimizer: str = "attn_adam") -> List[str]:
    """fairseq-train flags for the paper's optimizer, schedule and criterion:
    Adam (0.9, 0.98, 1e-9) (Sec. 5.3; ``optimizer``: attn_adam, or fairseq's own adam), eq. 3 with
    ``warmup_updates`` (times ``lr_scale``), label smoothing eps_ls (Sec. 5.4). ``--lr 1`` only
    satisfies fairseq's parser: attn_inverse_sqrt computes the rate from eq. 3."""
    return ["--optimizer", optimizer, *ADAM_SETTINGS, "--lr-scheduler", "attn_inverse_sqrt",
            "--warmup-updates", str(warmup_updates), "--lr", "1",
            *(["--lr-scale", f"{lr_scale:g}"] if lr_scale != 1 else []),
            "--criterion", "attn_label_smoothed_cross_entropy", "--label-smoothing", f"{label_smoothing:g}"]


def log_flags(interval) -> List[str]:
    """fairseq-train's logging: JSON lines every ``interval`` updates (:mod:`attn_kit.fairseq_layer.fairseq_log`)."""
    return ["--log-format", "json", "--log-interval", str(interval), "--no-progress-bar"]


# ---------------------------------------------------------------------------------------------- precision
PRECISIONS = ("auto", "bf16", "fp16", "fp32")

# The plugin task's option that trains (and validates) under bf16 autocast: fp32 master weights,
# matmuls in bf16, no loss scaling (attn_plugin/tasks/attn_translation.py). fairseq 0.12's own
# --bf16 "implies --tpu" and fails on GPUs (seen on an H100: no xla_device), so it is never used.
BF16_FLAG = "--bf16-autocast"


def visible_gpus() -> int:
    """How many CUDA GPUs torch sees on this machine (after CUDA_VISIBLE_DEVICES); 0 without
    CUDA (a login node, a laptop) or with a broken CUDA set-up."""
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 -- a broken CUDA setup is "no GPU visible"
        return 0


def visible_gpu_memory_gib() -> Optional[float]:
    """The memory of the smallest CUDA GPU torch sees here, in GiB; None where none is visible."""
    try:
        import torch

        count = visible_gpus()
        return min(torch.cuda.get_device_properties(i).total_memory for i in range(count)) / 2 ** 30 if count else None
    except Exception:  # noqa: BLE001 -- a broken CUDA setup is "no GPU visible"
        return None


def visible_gpu_name() -> Optional[str]:
    """The name torch gives the first CUDA GPU here ("NVIDIA H100 80GB HBM3"); None where none is visible."""
    try:
        import torch

        return torch.cuda.get_device_name(0) if visible_gpus() else None
    except Exception:  # noqa: BLE001 -- a broken CUDA setup is "no GPU visible"
        return None


def gpu_supports_bf16() -> Optional[bool]:
    """Whether the GPUs torch sees here compute in bf16 natively (compute capability >= 8.0:
    A100, H100, L4, ...); None when no GPU is visible (a login node, a --dry-run elsewhere)."""
    try:
        import torch

        count = visible_gpus()
        return all(torch.cuda.get_device_capability(i)[0] >= 8 for i in range(count)) if count else None
    except Exception:  # noqa: BLE001 -- a broken CUDA setup is "no GPU visible"
        return None


_DETECT = object()


def used_precision(precision: str, gpus: int, bf16_ok=_DETECT) -> str:
    """What ``--precision auto|bf16|fp16|fp32`` trains in on ``gpus`` GPUs (0: CPU).

    - ``auto``: bf16 on GPUs that support it (``bf16_ok``; by default detected here, and
      assumed when no GPU is visible, as on a login node: a job re-resolves it on its node),
      fp16 on older GPUs, fp32 on CPU;
    - ``bf16``: bf16 autocast with fp32 master weights and no loss scaling (:data:`BF16_FLAG`),
      on GPUs and on CPU alike (torch has bf16 autocast on CPU);
    - ``fp16``: fairseq's fp16 mixed precision with loss scaling on GPUs; fp32 on CPU, where
      fairseq's fp16 does not run;
    - ``fp32``: fp32, the paper's (it trained on P100s in fp32)."""
    if precision not in PRECISIONS:
        raise UsageError(f"unknown --precision {precision!r}; choose {', '.join(PRECISIONS)}")
    if precision == "bf16" or precision == "fp32":
        return precision
    if gpus == 0:
        return "fp32"
    if precision == "fp16":
        return "fp16"
    if bf16_ok is _DETECT:
        bf16_ok = gpu_supports_bf16()
    return "fp16" if bf16_ok is False else "bf16"


def flags_for(used: str) -> List[str]:
    """fairseq-train flags of a precision :func:`used_precision` returned: ``--fp16``,
    :data:`BF16_FLAG` (the plugin task's; needs ``--task attn_translation``) or none."""
    return {"fp16": ["--fp16"], "bf16": [BF16_FLAG]}.get(used, [])


def precision_of(argv: List[str]) -> str:
    """The precision a fairseq-train command line trains in (its last precision flag wins)."""
    used = "fp32"
    for arg in argv:
        if arg == "--fp16":
            used = "fp16"
        elif arg == BF16_FLAG:
            used = "bf16"
    return used


def recorded_flag(record: Path, flag: str) -> Optional[str]:
    """The value of ``flag`` in the fairseq-train command a training recorded (its train_command.json,
    attn_kit.recipes.common.run_training); None where there is no record or no such flag."""
    try:
        argv = [str(a) for a in json.loads(Path(record).read_text())["argv"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    i = argv.index(flag) + 1 if flag in argv else len(argv)
    return argv[i] if i < len(argv) else None


def cpu_flag(gpus: int) -> List[str]:
    """``--cpu`` where no GPU is used."""
    return [] if gpus else ["--cpu"]


# ---------------------------------------------------------------------------------------------- launchers
LAUNCHERS = ("torchrun", "slurm", "srun")
DEFAULT_PORT = 29500
CPU_LAUNCHER = "attn_kit.fairseq_layer.fairseq_cpu_ddp"  # python -m CPU_LAUNCHER --nprocs N -- fairseq-train ...


def launcher(gpus: int, cpu_procs: int, nnodes: int = 1, node_rank: int = 0,
             master_addr: Optional[str] = None, master_port: Optional[int] = None, log_dir: str = ".",
             module: str = "fairseq_cli.train", kind: str = "torchrun") -> List:
    """The command that starts fairseq-train on the chosen devices; the caller
    appends fairseq-train's arguments. One device: ``fairseq-train``. Several GPUs
    or nodes: ``torchrun ... -m fairseq_cli.train`` (fairseq reads RANK, WORLD_SIZE
    and LOCAL_RANK from torchrun's environment; ``module`` names another entry point
    that runs fairseq-train, such as the comparison's worker). Several CPU processes:
    :mod:`attn_kit.fairseq_layer.fairseq_cpu_ddp`. ``kind="srun"`` (inside a Slurm allocation): :func:`srun_launcher`."""
    if kind == "srun":
        return srun_launcher(gpus, cpu_procs, nnodes, master_port)
    if gpus > 1 or nnodes > 1:
        run = [console_script("torchrun"), "--nproc-per-node", gpus]
        if nnodes > 1:
            run += ["--nnodes", nnodes, "--node-rank", node_rank,
                    "--master-addr", master_addr, "--master-port", master_port or DEFAULT_PORT]
        else:
            run += ["--standalone"]
        return run + ["-m", module]
    train = console_script("fairseq-train")
    if gpus == 0 and cpu_procs > 1:
        return [sys.executable, "-m", CPU_LAUNCHER, "--nprocs", cpu_procs, "--log-dir", log_dir, "--", train]
    return [train]


def slurm_port(master_port: Optional[int] = None) -> int:
    """The rendezvous port of a Slurm job's training: ``master_port`` if given, else one
    derived from SLURM_JOB_ID (as fairseq does for its own single-node case), so that
    two jobs sharing a node do not collide."""
    if master_port:
        return master_port
    job = os.environ.get("SLURM_JOB_ID", "")
    return 20000 + int(job) % 20000 if job.isdigit() else DEFAULT_PORT


def srun_launcher(gpus: int, cpu_procs: int, nnodes: int = 1, master_port: Optional[int] = None) -> List:
    """fairseq-train as ``nnodes`` x (``gpus`` or ``cpu_procs``) Slurm tasks, one per device.

    fairseq's own Slurm discovery (``fairseq.distributed.utils.infer_init_method``)
    sets up the process group from srun's variables: the first node of
    SLURM_STEP_NODELIST at ``--distributed-port``, rank SLURM_PROCID, device
    SLURM_LOCALID; ``--distributed-world-size`` must equal the number of tasks. CPU
    tasks train together with gloo and fairseq's legacy DDP (its default DDP wrapper
    rejects CPU modules); the plugin lets fairseq's discovery run without CUDA
    (attn_plugin.fairseq_patches, patch 5)."""
    per_node = gpus if gpus else cpu_procs
    cmd = ["srun", "--nodes", nnodes, "--ntasks-per-node", per_node, "--kill-on-bad-exit=1",
           console_script("fairseq-train")]
    if nnodes * per_node > 1:
        cmd += ["--distributed-world-size", nnodes * per_node, "--distributed-port", slurm_port(master_port)]
        if not gpus:
            cmd += ["--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp"]
    return cmd


# ---------------------------------------------------------------------------------------------- fairseq-train
def _option(fingerprint=True, when_set=False, **kwargs):
    """A :class:`TrainPlan` field; ``fingerprint``: whether (and under which name) a change of it
    changes what the train stage makes (its ``options``, attn_kit.pipeline.stages): True, a key, or False;
    ``when_set``: a field added after runs recorded their options, fingerprinted only when it is not its
    default, so that their finished train stages stay finished."""
    return field(metadata={"fingerprint": fingerprint, "when_set": when_set}, **kwargs)


@dataclass(frozen=True)
class TrainPlan:
    """How a run trains: built once from its settings (:func:`attn_kit.recipes.common.train_plan`);
    fairseq-train's command (:meth:`command`) and the train stage's fingerprint (:meth:`fingerprint`)
    both come from it, each field declaring whether it changes what training makes (where the run
    trains, on how many devices in how many forwards, does not: resuming may change it)."""
    arch: str = _option()
    warmup_updates: int = _option()            # eq. 3's warmup_steps
    max_tokens: int = _option(False)           # per device and forward (BatchPlan)
    update_freq: int = _option(False)
    tokens_per_update: int = _option()         # the setting the batch comes from (not a flag)
    max_update: int = _option()
    seed: int = _option()
    save_interval_updates: int = _option()
    keep_interval_updates: int = _option(False)
    log_interval: int = _option(False)
    model: Tuple[str, ...] = _option(default=())   # flags that size --arch
    lr_scale: float = _option(default=1.0)     # eq. 3's multiplier (a --tune trial's own)
    clip_norm: float = _option(when_set=True, default=0.0)  # gradient-norm clipping; 0: none, the paper's
    # Table 3's row D is the only caller that varies eps_ls, and fingerprints it as eps_ls
    label_smoothing: float = _option(False, default=0.1)
    # a checkpoint of one Adam does not resume under the other (fairseq refuses its state); stamps from
    # before it was recorded: the run's train_command.json says (attn_kit.recipes.common.recorded_option)
    optimizer: str = _option(default="attn_adam")
    train_flags: Tuple[str, ...] = _option(default=())  # the recipe's own
    precision: str = _option(default="fp32")  # as used_precision returned it
    gpus: int = _option(False, default=0)
    world_size: Optional[int] = _option(False, default=None)  # fairseq's, where torchrun's processes form one job
    train_minutes: Optional[float] = _option(default=None)
    validate_interval_updates: Optional[int] = _option(False, default=None)
    extra: Tuple[str, ...] = _option("fairseq_extra_args", default=())  # the user's options after --

    def command(self, launch: Sequence, data_bin, save_dir) -> List[str]:
        """The recipes' fairseq-train after ``launch`` (:func:`launcher`): the plugin's task and
        ``arch`` sized by ``model``, the paper's optimization (:func:`paper_optimization`), the batch
        per device, ``train_flags``, the precision, ``world_size``, a budget of ``max_update``
        updates or ``train_minutes``, interval checkpoints (the last ``keep_interval_updates``
        kept), JSON logs, then ``extra``."""
        cmd = [*launch, data_bin, "--user-dir", PLUGIN_DIR, *TASK, "--arch", self.arch, *self.model,
               *paper_optimization(self.warmup_updates, self.lr_scale, self.label_smoothing, self.optimizer),
               *(["--clip-norm", f"{self.clip_norm:g}"] if self.clip_norm else []),
               "--max-tokens", self.max_tokens, "--update-freq", self.update_freq, *self.train_flags,
               *flags_for(self.precision), *cpu_flag(self.gpus),
               *(["--distributed-world-size", self.world_size] if self.world_size else []),
               "--max-update", self.max_update, "--seed", self.seed,
               *(["--stop-time-hours", f"{self.train_minutes / 60:.4f}"] if self.train_minutes else []),
               "--save-dir", save_dir, "--save-interval-updates", self.save_interval_updates,
               "--keep-interval-updates", self.keep_interval_updates, "--no-epoch-checkpoints",
               *(["--validate-interval-updates", self.validate_interval_updates]
                 if self.validate_interval_updates else []),
               *log_flags(self.log_interval), *self.extra]
        return [str(c) for c in cmd]

    def fingerprint(self) -> dict:
        """What shapes the training run, as the train stage's ``options``: the fields that declare so."""
        out = {}
        for f in fields(self):
            key, value = f.metadata["fingerprint"], getattr(self, f.name)
            if key and not (f.metadata["when_set"] and value == f.default):
                out[f.name if key is True else key] = list(value) if isinstance(value, tuple) else value
        return out


# ---------------------------------------------------------------------------------------------- decoding
@dataclass(frozen=True)
class DecodePlan:
    """How a run decodes: built once from its settings (:func:`attn_kit.recipes.common.decode_plan`)
    or read from its run card (:meth:`from_card`); fairseq-generate's flags (:meth:`flags`) and
    inference.json's decoding (:meth:`card`) both come from it, so neither is parsed back from the
    other. Sec. 6.1: beam 4, GNMT alpha 0.6, outputs up to input + 50 (Sec. 6.3: + 300)."""
    beam: int
    max_len_b: int
    batch_size: int
    alpha: Optional[float] = None  # GNMT's length penalty (the plugin task's --gnmt-alpha); None: fairseq's --lenpen
    lenpen: float = 1.0  # fairseq's length penalty, where alpha is None
    beam_stop: Optional[str] = None  # with GNMT: t2t (the paper's rule, the task's default) or fairseq
    min_len: int = 1  # fairseq's default: no empty translation (0: as the paper's code)

    def penalty_flags(self) -> List[str]:
        """The length penalty and stopping rule as fairseq-generate options."""
        if self.alpha is None:
            return ["--lenpen", str(self.lenpen)]
        return ["--gnmt-alpha", str(self.alpha), *(["--beam-stop", self.beam_stop] if self.beam_stop else [])]

    def flags(self) -> List[str]:
        """fairseq-generate's decoding options: beam, penalty, stopping rule, output length, batch."""
        return ["--beam", str(self.beam), *self.penalty_flags(), "--max-len-a", str(MAX_LEN_A),
                "--max-len-b", str(self.max_len_b), *(["--min-len", str(self.min_len)] if self.min_len != 1 else []),
                "--batch-size", str(self.batch_size)]

    def describe(self) -> str:
        return f"GNMT alpha {self.alpha:g}" if self.alpha is not None else f"fairseq lenpen {self.lenpen:g}"

    def card(self) -> Tuple[dict, dict]:
        """(the task's arguments, the generation options) of inference.json."""
        args = {} if self.alpha is None else {"gnmt_alpha": float(self.alpha),
                                              **({"beam_stop": self.beam_stop} if self.beam_stop else {})}
        generation = {"beam": int(self.beam), "max_len_a": MAX_LEN_A, "max_len_b": int(self.max_len_b),
                      **({"lenpen": float(self.lenpen)} if self.alpha is None else {}),
                      **({"min_len": int(self.min_len)} if self.min_len != 1 else {})}
        return args, generation

    @classmethod
    def from_card(cls, info: dict, batch_size: int) -> "DecodePlan":
        """The plan inference.json (``info``) records, at ``batch_size`` sentences a batch."""
        gen, alpha = info["generation"], info["args"].get("gnmt_alpha")
        gnmt = alpha is not None and "lenpen" not in gen
        return cls(beam=int(gen["beam"]), max_len_b=int(gen["max_len_b"]), batch_size=int(batch_size),
                   alpha=float(alpha) if gnmt else None, lenpen=float(gen.get("lenpen", 1.0)),
                   beam_stop=info["args"].get("beam_stop") if gnmt else None, min_len=int(gen.get("min_len", 1)))


def generate_command(data_bin, checkpoint, *, subset: str, plan: DecodePlan, gpus: int,
                     remove_bpe: Optional[str] = None, program: str = "fairseq-generate") -> List[str]:
    """fairseq-generate with the plugin's task, decoding as ``plan`` says, BPE removed
    (``remove_bpe``: fairseq's name of the scheme, default '@@ '), on CPU without ``gpus``.
    ``--required-batch-size-multiple 1``: fairseq's main branch drops a last batch that is not a
    multiple of it (default 8), up to 7 test sentences."""
    cmd = [program, data_bin, "--user-dir", PLUGIN_DIR, *TASK, "--path", checkpoint, "--gen-subset", subset,
           *plan.flags(), "--required-batch-size-multiple", "1",
           "--remove-bpe", *([remove_bpe] if remove_bpe else []), *cpu_flag(gpus)]
    return [str(c) for c in cmd]


def installed(program: str) -> str:
    """The absolute path of ``program`` (a console script of this Python, else on PATH)."""
    found = console_script(program)
    found = found if os.path.isabs(found) else shutil.which(found)
    if not found:
        raise UserError(f"{program} not found next to this Python or on PATH")
    return found


def validate_command(data_bin, checkpoint, *, subset: str = "valid", max_tokens: int, gpus: int) -> List[str]:
    """fairseq-validate of ``checkpoint`` on ``subset``: its unsmoothed loss (nll_loss, bits per
    target word piece)."""
    cmd = ["fairseq-validate", data_bin, "--user-dir", PLUGIN_DIR, *TASK, "--path", checkpoint,
           "--valid-subset", subset, "--max-tokens", max_tokens, *cpu_flag(gpus)]
    return [str(c) for c in cmd]


# ---------------------------------------------------------------------------------------------- data
def preprocess_command(src: str, tgt: str, destdir, prefixes: dict, *, joined_dictionary: bool = False,
                       only_source: bool = False, srcdict=None, workers: int = 1,
                       program: str = "fairseq-preprocess") -> List[str]:
    """fairseq-preprocess into ``destdir`` of the splits ``prefixes`` names (train, valid, test:
    PREFIX of PREFIX.SRC and PREFIX.TGT)."""
    cmd = [program, "--source-lang", src, "--target-lang", tgt, *(["--only-source"] if only_source else [])]
    for split in ("train", "valid", "test"):
        cmd += [f"--{split}pref", prefixes[split]] if split in prefixes else []
    cmd += ["--destdir", destdir, *(["--srcdict", srcdict] if srcdict is not None else []),
            *(["--joined-dictionary"] if joined_dictionary else []), "--workers", workers]
    return [str(c) for c in cmd]


def binarize(ctx, src: str, tgt: str, text_dir: Path, dest: Path, workers: int):
    """A stage step (``ctx``: attn_kit.pipeline.stages.Context): fairseq-preprocess of
    ``text_dir/{train,valid,test}.{src,tgt}`` into ``dest`` with one dictionary for both sides
    (the shared embeddings of Sec. 3.4 need it)."""
    with ctx.output(dest) as tmp:
        ctx.sh(preprocess_command(src, tgt, tmp, {split: text_dir / split for split in ("train", "valid", "test")},
                                  joined_dictionary=True, workers=workers),
               workers=workers > 1)


# ---------------------------------------------------------------------------------------------- averaging
def average_checkpoints(ctx, ckpt_dir: Path, output: Path, n: int, warmup_updates: int):
    """A stage step: average the last ``n`` update checkpoints of ``ckpt_dir`` into ``output``
    (Sec. 6.1) with :mod:`attn_kit.fairseq_layer.checkpoints`, fewer if fewer exist, none from before the end of
    the warm-up (a run that a time budget stopped early; the final model alone if need be). The
    averaged set always ends at the run's final update (checkpoint_last.pt when the run did not
    end on a checkpoint interval); the paths and update numbers averaged go to
    :func:`averaged_info_path`."""
    info = averaged_info_path(output)
    with ctx.output(output) as tmp:  # the command counts the checkpoints: this process loads none (no torch)
        ctx.sh([sys.executable, "-m", "attn_kit.fairseq_layer.checkpoints", "--inputs", ckpt_dir, "--num-update-checkpoints", n,
                "--or-fewer", "--from-update", warmup_updates, "--output", tmp, "--info-json", info,
                "--force"])  # --force: a killed run's files


def averaged_info_path(output: Path) -> Path:
    """Where :func:`average_checkpoints` records what it averaged into ``output``."""
    return Path(output).with_suffix(".json")


def read_averaged(output: Path) -> Optional[dict]:
    """``{"paths": [...], "updates": [...]}`` (updates ascending, the last the
    final update) of the average in ``output``, or None if it was not recorded."""
    try:
        return json.loads(averaged_info_path(output).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
