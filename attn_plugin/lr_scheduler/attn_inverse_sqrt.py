"""The paper's learning-rate schedule, eq. 3 (Sec. 5.3)::

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

linear warm-up for ``warmup_steps`` steps, then decay with the inverse square
root of the step. The peak, at step = warmup_steps, is
d_model^-0.5 * warmup_steps^-0.5 (7.0e-4 for the base model, 4.9e-4 for big).

fairseq's ``inverse_sqrt`` is parameterized by the peak ``--lr`` instead, and
warms up from ``--warmup-init-lr``; it matches eq. 3 only when both are set
just so. Here ``--lr`` is not used: eq. 3 sets the rate at every step.
"""
from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II

from ..errors import ConfigError


@dataclass
class AttnInverseSqrtConfig(FairseqDataclass):
    warmup_updates: int = field(default=4000, metadata={"help": "warmup_steps of eq. 3 (the paper: 4000)"})
    d_model: Optional[int] = field(
        default=None,
        metadata={"help": "d_model of eq. 3; default: the trained model's --encoder-embed-dim"},
    )
    lr_scale: float = field(
        default=1.0,
        metadata={"help": "multiply eq. 3 by this factor (1 = the paper). fairseq's --lr is ignored by this "
                          "schedule (fairseq still requires a value; any will do): to change the peak "
                          "rate, change this scale or --warmup-updates"},
    )
    # The model's width, read from the model config; not a command-line option.
    model_d_model: Optional[int] = II("oc.select:model.encoder_embed_dim,null")


def noam_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """Eq. 3 at training step ``step`` (1-based)."""
    step = max(step, 1)
    return scale * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@register_lr_scheduler("attn_inverse_sqrt", dataclass=AttnInverseSqrtConfig)
class AttnInverseSqrtSchedule(FairseqLRScheduler):
    """Eq. 3; ``step`` is the 1-based number of the update about to be applied,
    so the first update uses lrate(1) (fairseq's warm-up starts its first
    update at ``--warmup-init-lr``, 0 by default)."""

    def __init__(self, cfg: AttnInverseSqrtConfig, optimizer):
        super().__init__(cfg, optimizer)
        d_model = cfg.d_model or cfg.model_d_model
        if not d_model:
            raise ConfigError("attn_inverse_sqrt cannot tell d_model from this model: pass --d-model")
        if cfg.warmup_updates <= 0:
            raise ConfigError("--warmup-updates must be positive for attn_inverse_sqrt (eq. 3)")
        self.d_model, self.warmup, self.scale = int(d_model), cfg.warmup_updates, cfg.lr_scale
        self.step_update(0)

    def step(self, epoch, val_loss=None):
        """Eq. 3 depends on the update number only, not on the epoch."""
        super().step(epoch, val_loss)
        return self.optimizer.get_lr()

    def step_update(self, num_updates):
        """Called after each update with the number of updates done so far."""
        lr = noam_lr(num_updates + 1, self.d_model, self.warmup, self.scale)
        self.optimizer.set_lr(lr)
        return lr
