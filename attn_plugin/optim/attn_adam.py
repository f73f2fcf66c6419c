"""The paper's optimizer (Sec. 5.3), Adam with beta_1 = 0.9, beta_2 = 0.98 and eps = 1e-9, as
fairseq's ``--optimizer adam`` computes it, with every parameter updated in one multi-tensor call::

    m_t = beta_1 m_{t-1} + (1 - beta_1) g_t          v_t = beta_2 v_{t-1} + (1 - beta_2) g_t^2
    theta_t = theta_{t-1} - lrate * sqrt(1 - beta_2^t) / (1 - beta_1^t) * m_t / (sqrt(v_t) + eps)

(Kingma & Ba's Algorithm 1 in the "more efficient" order of their Sec. 2, fairseq's formula.)

Why not fairseq's own: without NVIDIA's apex, fairseq's Adam updates the parameters one at a
time, about ten GPU kernels each, and takes the gradient norm it logs at every step one
parameter at a time too: a few thousand kernel launches per update for the base model, which on
a GPU whose update takes tens of milliseconds is a large share of it. Here the same elementwise
operations run as ``torch._foreach_*`` calls over all parameters at once (a few dozen launches),
and the norm is ``torch._foreach_norm``. On a CPU the multi-tensor calls run the same per-tensor
operations in the same order, so training gives the same parameters bit for bit as fairseq's Adam
(tests/test_optim.py); on a GPU, the same to float32 rounding.

Resuming a checkpoint that fairseq's ``adam`` wrote with ``attn_adam`` (or the reverse) is refused
by fairseq, which checks the optimizer's name: finish such a run with the optimizer it started with.
"""
import math
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, List

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.optim import FairseqOptimizer, register_optimizer
from omegaconf import II, OmegaConf


@dataclass
class AttnAdamConfig(FairseqDataclass):
    adam_betas: Any = field(default=(0.9, 0.98), metadata={"help": "beta_1, beta_2 (Sec. 5.3: 0.9, 0.98)"})
    adam_eps: float = field(default=1e-9, metadata={"help": "eps (Sec. 5.3: 1e-9)"})
    weight_decay: float = field(default=0.0, metadata={"help": "decoupled weight decay, as fairseq's adam "
                                                                "(the paper: none)"})
    lr: List[float] = II("optimization.lr")


def _betas(value) -> tuple:
    if isinstance(value, str):
        value = value.strip("()[] ").split(",")
    elif not isinstance(value, (tuple, list)):
        value = OmegaConf.to_container(value)
    return tuple(float(b) for b in value)


class MultiTensorAdam(torch.optim.Optimizer):
    """fairseq's Adam update (fairseq.optim.adam.Adam, without amsgrad) over all parameters of a
    device and dtype at once. State per parameter as fairseq's: ``step`` (an int), ``exp_avg``,
    ``exp_avg_sq``. fp32 parameters only (the plugin trains fp32 weights, bf16 under autocast)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @property
    def supports_memory_efficient_fp16(self):
        return False

    @property
    def supports_flat_params(self):
        return True

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            # parameters that took the same number of steps share a step size (all of them, but
            # for one that had no gradient on some update)
            buckets = defaultdict(lambda: ([], [], [], []))
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("Adam does not support sparse gradients")
                if p.dtype != torch.float32:
                    raise RuntimeError(f"attn_adam updates fp32 parameters; got {p.dtype} (train with "
                                       "--bf16-autocast, or use --optimizer adam)")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                bucket = buckets[(p.device, state["step"])]
                for holder, tensor in zip(bucket, (p, p.grad, state["exp_avg"], state["exp_avg_sq"])):
                    holder.append(tensor)
            for (_, step), (params, grads, exp_avg, exp_avg_sq) in buckets.items():
                torch._foreach_mul_(exp_avg, beta1)
                torch._foreach_add_(exp_avg, grads, alpha=1 - beta1)
                torch._foreach_mul_(exp_avg_sq, beta2)
                torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1 - beta2)
                denom = torch._foreach_sqrt(exp_avg_sq)
                torch._foreach_add_(denom, group["eps"])
                step_size = group["lr"] * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
                if group["weight_decay"] != 0:
                    torch._foreach_add_(params, params, alpha=-group["weight_decay"] * group["lr"])
                torch._foreach_addcdiv_(params, exp_avg, denom, value=-step_size)
        return loss


@register_optimizer("attn_adam", dataclass=AttnAdamConfig)
class AttnAdam(FairseqOptimizer):
    """Adam of Sec. 5.3 with fairseq's arithmetic in multi-tensor kernels (:class:`MultiTensorAdam`)."""

    def __init__(self, cfg: AttnAdamConfig, params):
        super().__init__(cfg)
        self._optimizer = MultiTensorAdam(params, **self.optimizer_config)

    @property
    def optimizer_config(self):
        """The settings that override a checkpoint's (fairseq's convention): lr, betas, eps, weight decay."""
        lr = self.cfg.lr[0] if isinstance(self.cfg.lr, Collection) else self.cfg.lr
        return {"lr": lr, "betas": _betas(self.cfg.adam_betas), "eps": self.cfg.adam_eps,
                "weight_decay": self.cfg.weight_decay}

    def clip_grad_norm(self, max_norm, aggregate_norm_fn=None):
        """The L2 norm of all gradients (fairseq logs it as gnorm at every update), clipped to
        ``max_norm`` when it is > 0 (the paper clips nothing): fairseq's arithmetic (each
        gradient's norm in fp32, then the norm of those) in multi-tensor calls."""
        grads = [p.grad.detach() for p in self.params if p.grad is not None]
        if not grads:
            return torch.tensor(0.0)
        total = torch.norm(torch.stack(torch._foreach_norm(grads, 2, dtype=torch.float32)))
        if aggregate_norm_fn is not None:
            total = aggregate_norm_fn(total)
        if max_norm > 0:
            torch._foreach_mul_(grads, (float(max_norm) / (total + 1e-6)).clamp_(max=1))
        return total
