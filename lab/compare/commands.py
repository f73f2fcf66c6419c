"""The comparison's command lines: fairseq-train for each side of the pair (through
the worker, :mod:`lab.compare.worker`) and fairseq-generate, the same for both.

Functions take the parsed command line of :func:`lab.compare.cli.parse_args`:
``arch`` (a pair of :data:`lab.pairs.PAIRS`), ``size`` (a ModelSize, or None
for the archs' own), the budget, batch, schedule and evaluation settings, and
``precision`` (what is used: fp32, fp16 or bf16).
"""
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from attn_kit.fairseq_layer import fairseq_commands
from attn_kit.checkout import PLUGIN_DIR, REPO
from attn_kit.planning.paper import PAPER_MAX_LEN_B
from attn_kit.fairseq_layer.fairseq_commands import ADAM_SETTINGS, cpu_flag, flags_for, launcher, log_flags
from ..pairs import arch_size, model_flags as pair_flags
from attn_kit.recipes.config import settings

WORKER = "lab.compare.worker"  # python -m WORKER STATS_JSON FAIRSEQ_TRAIN_ARGS...
ADAM = ["--optimizer", "adam", *ADAM_SETTINGS]  # fairseq's own: both sides of a comparison with stock fairseq


@dataclass(frozen=True)
class ComparisonPlan:
    """How one side of the comparison trains: ``model`` (the side's model, criterion, schedule and
    task flags), fairseq's Adam, the batch, a budget of ``max_update`` updates or ``train_minutes``,
    no checkpoints but the last (without the optimizer's state), validations every
    ``validate_every`` updates only, JSON logs every ``log_every``."""
    model: Tuple[str, ...]
    max_tokens: int
    update_freq: int
    seed: int
    validate_every: int
    log_every: int
    max_update: Optional[int] = None
    train_minutes: Optional[float] = None
    precision: str = "fp32"
    gpus: int = 0

    def command(self, launch: Sequence, data, save_dir) -> List[str]:
        """fairseq-train after ``launch`` (the comparison's worker)."""
        budget = (["--max-update", str(self.max_update)] if self.max_update
                  else ["--stop-time-hours", repr(self.train_minutes / 60)])
        cmd = [*launch, data, *self.model, *ADAM,
               "--max-tokens", self.max_tokens, "--update-freq", self.update_freq,
               "--required-batch-size-multiple", "1", "--seed", self.seed, *budget, *cpu_flag(self.gpus),
               *flags_for(self.precision), "--save-dir", save_dir, "--no-epoch-checkpoints",
               "--no-save-optimizer-state",
               "--save-interval", "1000000", "--validate-interval", "1000000",  # no per-epoch saves/validations
               "--validate-interval-updates", self.validate_every, *log_flags(self.log_every)]
        return [str(c) for c in cmd]


def _recipe_training(mode=None) -> dict:
    """The WMT14 recipe's batch and schedule (recipes/configs/wmt14.yaml), in ``mode``."""
    s = settings("wmt14", "paper", mode)
    return dict(max_tokens=s["max_tokens_per_gpu"], warmup_updates=s["warmup_updates"], lr_scale=s["lr_scale"])


# --bundled compares at the bundled recipe's batch (--max-tokens, one device, --update-freq 1), warmup_steps
# of eq. 3 and --lr-scale (its model is attn_kit.planning.sizes.SIZES["bundled"]); without it, at the paper's warmup
# (Sec. 5.3) and eq. 3 as written, 4096 tokens per device.
BUNDLED_TRAINING = _recipe_training("bundled")
DEFAULT_TRAINING = _recipe_training()


def d_model(args) -> int:
    """The models' d_model: their size's (--d-model, or --bundled's) or the arch's."""
    return (args.size or arch_size(args.arch)).d_model


def peak_lr(args) -> float:
    """The peak of eq. 3 (at step = warmup) for this d_model: what stock fairseq's --lr must be."""
    return args.lr_scale * d_model(args) ** -0.5 * args.warmup_updates ** -0.5


def warmup_init_lr(args) -> float:
    """Stock fairseq's --warmup-init-lr: eq. 3 at step 1, so that stock's first update uses it too."""
    return peak_lr(args) / args.warmup_updates


def model_flags(which: str, args, joined: bool) -> List[str]:
    """The model, criterion and schedule flags of one side: the pair's flags at the
    comparison's size, then eq. 3 for the plugin, inverse_sqrt at eq. 3's values for stock."""
    flags = pair_flags(which, args.arch, args.size, label_smoothing=args.label_smoothing, joined=joined)
    if which == "plugin":
        return flags + ["--lr-scheduler", "attn_inverse_sqrt", "--warmup-updates", str(args.warmup_updates),
                        "--lr-scale", str(args.lr_scale), "--lr", "1"]
    return flags + ["--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(args.warmup_updates),
                    "--lr", repr(peak_lr(args)), "--warmup-init-lr", repr(warmup_init_lr(args))]


def precision_task(which: str, args) -> List[str]:
    """bf16 trains both sides under attn_plugin's task (``--task attn_translation
    --bf16-autocast``): stock fairseq 0.12 has no bf16 path on GPUs. The task is fairseq's
    translation task otherwise, so the stock model, criterion and schedule stay stock."""
    if args.precision != "bf16":
        return []
    return [*(["--user-dir", str(PLUGIN_DIR)] if which == "stock" else []), "--task", "attn_translation"]


def train_command(which: str, args, data: Path, joined: bool, seed: int, run_dir: Path) -> List[str]:
    """fairseq-train of one side for one seed, run by the worker (through torchrun
    with several GPUs); the worker writes its numbers to ``run_dir/stats.json``."""
    launch = launcher(args.ngpus, 0, module=WORKER) if args.ngpus > 1 else [sys.executable, "-m", WORKER]
    plan = ComparisonPlan(
        model=(*model_flags(which, args, joined), *precision_task(which, args)), max_tokens=args.max_tokens,
        update_freq=args.update_freq, seed=seed, max_update=args.max_update,
        train_minutes=None if args.max_update else args.train_minutes, precision=args.precision, gpus=args.ngpus,
        validate_every=args.validate_every, log_every=args.log_every)
    return plan.command([*launch, run_dir / "stats.json"], data, run_dir / "checkpoints")


def generate_command(args, data: Path, checkpoint: Path, subset: str) -> List[str]:
    """fairseq-generate as the paper decodes (Sec. 6.1), the same for both checkpoints, in fp32
    whatever the training's precision."""
    return fairseq_commands.generate_command(
        data, checkpoint, subset=subset,
        plan=fairseq_commands.DecodePlan(beam=args.beam, max_len_b=PAPER_MAX_LEN_B, batch_size=128, alpha=args.alpha),
        gpus=args.ngpus, remove_bpe=args.remove_bpe,
        program=fairseq_commands.installed("fairseq-generate"))


def child_env(args) -> dict:
    """The environment of every training and generation: this checkout's attn_kit
    first on the path (the worker is ``python -m lab.compare.worker``), and
    --threads as OMP/MKL threads."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONWARNINGS="ignore", PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    env.update(fairseq_commands.thread_env(args.threads) or {})
    return env
