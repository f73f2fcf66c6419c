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

The non-finite gradient check without waiting for the device. fairseq's trainer asks, at every update,
whether the gradient norm is finite (``torch.isfinite(grad_norm)`` read on the host) and raises
``FloatingPointError("gradients are Nan/Inf")`` before the optimizer step when it is not: on a GPU the
host then waits for every kernel queued so far, and cannot queue the next update's meanwhile. In
fairseq-train (``attn_plugin/fairseq_patches.py``, patch 10: attn_adam the trainer's optimizer itself,
not under ``--check-finite-every-update``) attn_adam checks instead without that wait: the flag
"the norm is finite" stays on the device, where :class:`MultiTensorAdam` applies an update only when it
holds (and none after a non-finite one), and its copy to the host is read once it has arrived, a few
updates later, or before a checkpoint is written, or at the end of an epoch; the error then names the
update. The parameters and Adam's moments stay those before that update, as fairseq leaves them.

Resuming a checkpoint that fairseq's ``adam`` wrote with ``attn_adam`` (or the reverse) is refused
by fairseq, which checks the optimizer's name: finish such a run with the optimizer it started with.
"""
import math
from collections import defaultdict, deque
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional

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
    check_finite_every_update: bool = field(default=False, metadata={
        "help": "check the gradients for NaN/Inf as fairseq does, waiting for the GPU at every update "
                "(default: checked on the device, which skips a non-finite update and those after it, "
                "the error raised once the host has the answer, at the latest before a checkpoint)"})
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
    ``exp_avg_sq``. fp32 parameters only (the plugin trains fp32 weights, bf16 under autocast).

    ``finite``: None, or a 0-dim bool tensor on the parameters' device (:meth:`AttnAdam.clip_grad_norm`
    sets it): the update is applied only where it is True, decided on the device, without reading it
    on the host. A skipped update leaves parameters, ``exp_avg`` and ``exp_avg_sq`` as they were, bit for
    bit; the host's ``step`` counts it all the same (the host cannot know): see :meth:`step`."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.finite: Optional[torch.Tensor] = None

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
                # Without a flag: fairseq's arithmetic. With one, the same operations with the flag's
                # values as device tensors; a skipped update (the flag False) zeroes the gradients, takes
                # beta_1 = beta_2 = 1 (the moments stay as they were) and divides the update by an infinite
                # denominator (the parameters move by 0). An applied one multiplies by beta as a tensor and
                # divides by 1: no bit changes.
                b1, b2, keep = beta1, beta2, None
                if self.finite is not None:
                    finite = self.finite.to(params[0].device)
                    grads = _zeroed_unless(finite, grads)
                    b1, b2 = torch.where(finite, beta1, 1.0), torch.where(finite, beta2, 1.0)
                    keep = torch.where(finite, 1.0, 0.0)
                torch._foreach_mul_(exp_avg, b1)
                torch._foreach_add_(exp_avg, grads, alpha=1 - beta1)
                torch._foreach_mul_(exp_avg_sq, b2)
                torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1 - beta2)
                denom = torch._foreach_sqrt(exp_avg_sq)
                torch._foreach_add_(denom, group["eps"])
                step_size = group["lr"] * math.sqrt(1 - beta2 ** step) / (1 - beta1 ** step)
                if group["weight_decay"] != 0:
                    decay = params if keep is None else torch._foreach_mul(params, keep)
                    torch._foreach_add_(params, decay, alpha=-group["weight_decay"] * group["lr"])
                if keep is not None:
                    torch._foreach_div_(denom, keep)  # > 0 (eps): by 0, inf, and m / inf = 0
                torch._foreach_addcdiv_(params, exp_avg, denom, value=-step_size)
        # A skipped update still counted in each parameter's "step" above (a host int; the host learns of
        # the skip only later). That is the least wrong of what the host can do without waiting: the
        # moments it would bias-correct are untouched, and fairseq-train ends on the error that follows
        # (AttnAdam.check_deferred), so the count only shows in the crash.pt fairseq then writes, ahead
        # by the updates skipped (fairseq's own check raises before the step: its count is not).
        return loss


def _zeroed_unless(finite: torch.Tensor, grads: List[torch.Tensor]) -> List[torch.Tensor]:
    """Copies of ``grads``, all zeros unless ``finite`` (a 0-dim bool tensor), decided on the device.

    No multi-tensor operation selects (``0 * nan`` is nan): the gradients go into one flat vector,
    which one masked fill zeroes (a copy of the gradients, a few kernels, whatever their number)."""
    flat = torch.cat([g.reshape(-1) for g in grads]).masked_fill_(finite.logical_not(), 0.0)
    return [part.view_as(g) for part, g in zip(flat.split([g.numel() for g in grads]), grads)]


@register_optimizer("attn_adam", dataclass=AttnAdamConfig)
class AttnAdam(FairseqOptimizer):
    """Adam of Sec. 5.3 with fairseq's arithmetic in multi-tensor kernels (:class:`MultiTensorAdam`)."""

    def __init__(self, cfg: AttnAdamConfig, params):
        super().__init__(cfg)
        self._optimizer = MultiTensorAdam(params, **self.optimizer_config)
        self._update_number: Optional[Callable[[], int]] = None  # set by defer_finite_check
        self._pending = deque()  # (update, host copy of the flag, CUDA event after the copy or None)

    @property
    def optimizer_config(self):
        """The settings that override a checkpoint's (fairseq's convention): lr, betas, eps, weight decay."""
        lr = self.cfg.lr[0] if isinstance(self.cfg.lr, Collection) else self.cfg.lr
        return {"lr": lr, "betas": _betas(self.cfg.adam_betas), "eps": self.cfg.adam_eps,
                "weight_decay": self.cfg.weight_decay}

    def multiply_grads(self, c):
        """Multiplies every gradient by ``c`` (a number, or a tensor, moved to the gradients' device) in
        one multi-tensor call, fairseq's arithmetic: fairseq <= 0.12.2 (the Python < 3.11 install)
        multiplies them one at a time, a kernel each; fairseq-fixed 0.12.3 once per device and dtype."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, c.to(grads[0].device) if torch.is_tensor(c) else c)

    def clip_grad_norm(self, max_norm, aggregate_norm_fn=None):
        """The L2 norm of all gradients (fairseq logs it as gnorm at every update), clipped to
        ``max_norm`` when it is > 0 (the paper clips nothing): fairseq's arithmetic (each
        gradient's norm in fp32, then the norm of those) in multi-tensor calls.

        With the check deferred (:meth:`defer_finite_check`), the flags of earlier updates that have
        reached the host are checked first (:meth:`check_deferred`), then this update's is recorded."""
        grads = [p.grad.detach() for p in self.params if p.grad is not None]
        if not grads:
            return torch.tensor(0.0)
        total = torch.norm(torch.stack(torch._foreach_norm(grads, 2, dtype=torch.float32)))
        if aggregate_norm_fn is not None:
            total = aggregate_norm_fn(total)
        if self.defers_finite_check:
            self.check_deferred(wait=False)
            self._record_finite(total)
        if max_norm > 0:
            torch._foreach_mul_(grads, (float(max_norm) / (total + 1e-6)).clamp_(max=1))
        return total

    # ---- the non-finite gradient check without waiting for the device (module docstring)
    def defer_finite_check(self, update_number: Callable[[], int]):
        """Check gradients for NaN/Inf without waiting for the device from now on (fairseq-train:
        fairseq_patches' patch 10). ``update_number()``: the number of the update being computed."""
        self._update_number = update_number

    @property
    def defers_finite_check(self) -> bool:
        return self._update_number is not None

    def _record_finite(self, total: torch.Tensor):
        """Record, on the device, whether ``total`` (this update's gradient norm) and every norm before
        it were finite; the step reads it there (MultiTensorAdam.finite), the host from a copy."""
        finite = torch.isfinite(total)
        if self._optimizer.finite is not None:  # after a non-finite update, none is applied
            finite = finite.logical_and_(self._optimizer.finite.to(finite.device))
        self._optimizer.finite = finite
        if finite.is_cuda:  # the copy arrives while the host goes on; the event says when
            host = torch.empty((), dtype=torch.bool, pin_memory=True).copy_(finite, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
        else:  # on the CPU it is there at once (another device: a copy that waits)
            host, event = finite.cpu(), None
        self._pending.append((self._update_number(), host, event))
        total._attn_adam_checks_finite = True  # fairseq's trainer answers isfinite(total) from the host (patch 10)

    def check_deferred(self, wait: bool):
        """Raise fairseq's ``FloatingPointError("gradients are Nan/Inf ...")``, naming the update, if the
        flag of an earlier update that has reached the host (all of them, when ``wait``: a wait for
        the device) says its gradient norm was not finite."""
        while self._pending:
            update, host, event = self._pending[0]
            if event is not None and not event.query():
                if not wait:
                    return
                event.synchronize()
            self._pending.popleft()
            if not host.tolist():  # a host tensor, its copy done: no wait
                self._pending.clear()
                raise FloatingPointError(
                    f"gradients are Nan/Inf at update {update} (attn_adam checks them without waiting for the "
                    "device: neither that update nor any after it was applied; --check-finite-every-update "
                    "checks at every update)")
