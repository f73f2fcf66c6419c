"""Label-smoothed cross-entropy as the paper uses it (Sec. 5.4, eps_ls = 0.1).

Szegedy et al. (2016) replace the one-hot target with
q'(k) = (1 - eps_ls) * [k == y] + eps_ls / K, so the target class gets
1 - eps_ls + eps_ls/K and every other class eps_ls/K. The loss per target
token is the cross-entropy with q'::

    loss = (1 - eps_ls) * (-log p(y)) + (eps_ls / K) * sum_k (-log p(k))

K is the number of classes of the output softmax: the whole target
dictionary, special symbols (<s>, <pad>, </s>, <unk>) included, because the
model puts probability on all of them. Positions whose target is padding are
excluded from the loss, from ``nll_loss`` and from the token count.

The loss is computed from the decoder's logits z (:class:`SmoothedCrossEntropy`)
with its gradient written out, d loss / d z = p - q' (p = softmax(z)), in fp32
whatever the logits' dtype. Rows are taken ``--loss-chunk-tokens`` at a time
(0: all at once), forward and backward, so the largest fp32 temporary is
chunk x K, never tokens x K; between the passes only the logits are kept, and
the backward writes each chunk's gradient into one tensor of the logits'
dtype. Stock fairseq keeps fp32 log-probabilities of every token and
autograd's intermediates. Each row is computed as the whole batch was before
chunking, so the gradients are the same bit for bit whatever the chunk (and
the bundled run's BLEU with them). ``--compile-loss`` runs the per-chunk steps
through torch.compile, which fuses the cast, reductions and gradient into few
kernels (rounding may then differ). Neither is in the paper: both are speed
and memory only.

fairseq's ``label_smoothed_cross_entropy`` differs: it gives the target 1-eps
and every other symbol eps/(K-1). Everything else (logging, accuracy, sentence
averaging) is fairseq's: ``loss`` and ``nll_loss`` are logged in base 2 per
token and ``ppl`` = 2^nll_loss, so logs compare line by line with stock runs.
One addition: ``src_wpb``, the real (unpadded) source tokens per update, beside
fairseq's ``wpb`` (target tokens per update), because Sec. 5.1 sizes batches by
both ("approximately 25000 source tokens and 25000 target tokens").
"""
from dataclasses import dataclass, field

import torch
from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)

from ..errors import ConfigError


@dataclass
class AttnLabelSmoothedCrossEntropyConfig(LabelSmoothedCrossEntropyCriterionConfig):
    label_smoothing: float = field(
        default=0.1,
        metadata={"help": "eps_ls: probability mass spread uniformly over all K classes "
                          "(Sec. 5.4; the paper uses 0.1, which is the default here)"},
    )
    loss_chunk_tokens: int = field(
        default=8192,
        metadata={"help": "speed and memory only, not in the paper: target positions per chunk of the loss "
                          "(forward and backward), so that its largest fp32 temporary is this many rows x the "
                          "vocabulary, not all target tokens x the vocabulary; 0: all at once. Results equal "
                          "the unchunked loss's to fp32 rounding"},
    )
    compile_loss: bool = field(
        default=False,
        metadata={"help": "speed only, not in the paper: run the loss's per-chunk forward and backward through "
                          "torch.compile, which fuses the fp32 cast, exp, reductions and gradient into few "
                          "kernels; compiles on the first batch. Results equal the eager loss's to fp32 rounding"},
    )


_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)  # torch < 2.3: no


def _chunk_forward(logits, target, keep):
    """One chunk of rows: (sum of -log p(y), sum of sum_k -log p(k)) over the rows where ``keep``, in
    fp32, with log p = log_softmax(z) (one fused pass per row, as the whole batch had it before chunks:
    each row's numbers are the same whatever the chunk)."""
    lprobs = torch.log_softmax(logits, dim=-1, dtype=torch.float32)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1).masked_fill(~keep, 0.0).sum()
    uniform = -lprobs.sum(dim=-1).masked_fill(~keep, 0.0).sum()  # sum_k -log p(k)
    return nll, uniform


def _chunk_backward(logits, target, keep, grad_loss, grad_nll, eps: float):
    """One chunk's gradient, computed in fp32, returned in the logits' dtype:
    keep * ((g_loss + g_nll) p - g_loss eps/K - (g_loss (1 - eps) + g_nll) onehot(y)), p = softmax(z)
    recomputed. Run plainly, the one-hot term is added in place (scatter_add_: no second fp32
    temporary); compiled, it is a select against an iota, which torch.compile fuses with the rest."""
    K = logits.size(-1)
    keep = keep.unsqueeze(-1).float()
    p = torch.softmax(logits, dim=-1, dtype=torch.float32)
    grad = torch.addcmul(keep * (-grad_loss * (eps / K)), p, keep * (grad_loss + grad_nll))
    del p
    at_target = keep * -(grad_loss * (1.0 - eps) + grad_nll)
    if _is_compiling():
        is_target = torch.arange(K, device=logits.device) == target.unsqueeze(-1)
        grad = torch.where(is_target, grad + at_target, grad)
    else:
        grad.scatter_add_(-1, target.unsqueeze(-1), at_target)
    return grad.to(logits.dtype)


_COMPILED = None  # (forward, backward) compiled once per process, on first use with compile=True


def _steps(compile: bool):
    """The per-chunk functions: plain, or (``--compile-loss``) torch.compile'd ones, made on first use
    for any number of rows (``dynamic``: batches change size at nearly every step)."""
    global _COMPILED
    if not compile:
        return _chunk_forward, _chunk_backward
    if _COMPILED is None:
        try:
            _COMPILED = (torch.compile(_chunk_forward, dynamic=True), torch.compile(_chunk_backward, dynamic=True))
        except Exception as exc:  # no torch.compile, or one that refuses this Python
            raise _compile_error(exc) from exc
    return _COMPILED


def _compile_error(exc) -> ConfigError:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    return ConfigError(f"--compile-loss: torch.compile cannot compile the loss here ({type(exc).__name__}: "
                       f"{first}); run without --compile-loss")


def _run(step, compiled: bool, *args):
    """``step(*args)``; with ``compiled``, a failure of torch.compile to compile it is one clear error."""
    if not compiled:
        return step(*args)
    try:
        return step(*args)
    except torch._dynamo.exc.TorchDynamoException as exc:  # includes the backend's (inductor's) failures
        raise _compile_error(exc) from exc


def _row_chunks(n: int, chunk: int):
    """(start, end) of the row chunks: ``chunk`` rows each (the last fewer); one chunk of all rows for 0."""
    step = chunk if chunk > 0 else max(n, 1)
    return [(start, min(start + step, n)) for start in range(0, n, step)]


class SmoothedCrossEntropy(torch.autograd.Function):
    """Summed Szegedy-smoothed loss and summed NLL of N x K ``logits``
    (unnormalized; log-probabilities work too, as log_softmax leaves them
    unchanged) against N ``target`` indices, skipping ``target == ignore_index``
    (``None``: no row skipped).

    Forward, per kept row, with log p = log_softmax(z): nll = -log p(y);
    loss = (1 - eps) nll + (eps / K) sum_k -log p(k).
    Backward: d loss / d z = p - q' with p = softmax(z) recomputed,
    q' = (1 - eps) onehot(y) + eps / K; d nll / d z = p - onehot(y).
    Both take ``chunk`` rows at a time (0: all rows at once), so no fp32 tensor
    has more than chunk x K elements; each row's gradient is the same bit for bit
    whatever the chunk (the summed loss and nll add the chunks' sums: rounding
    apart, the same). ``compile``: the per-chunk steps through torch.compile.
    Arithmetic is in fp32 whatever the logits' dtype; the gradient is returned
    in the logits' dtype.
    """

    @staticmethod
    def forward(ctx, logits, target, eps: float, ignore_index, chunk: int = 0, compile: bool = False):
        if chunk < 0:
            raise ValueError(f"chunk must be >= 0 (0: all rows at once), not {chunk}")
        N, K = logits.shape
        keep = target.ne(ignore_index) if ignore_index is not None else torch.ones_like(target, dtype=torch.bool)
        target = target.masked_fill(~keep, 0)  # any valid index; those rows are masked out
        forward_step = _steps(compile)[0]
        nll = torch.zeros((), dtype=torch.float32, device=logits.device)
        uniform = torch.zeros((), dtype=torch.float32, device=logits.device)
        for start, end in _row_chunks(N, chunk):
            part_nll, part_uniform = _run(forward_step, compile, logits[start:end], target[start:end],
                                          keep[start:end])
            nll, uniform = nll + part_nll, uniform + part_uniform
        loss = (1.0 - eps) * nll + (eps / K) * uniform
        ctx.save_for_backward(logits, target, keep)
        ctx.eps, ctx.chunk, ctx.compile = eps, chunk, compile
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):
        logits, target, keep = ctx.saved_tensors
        backward_step = _steps(ctx.compile)[1]
        grad = torch.empty_like(logits)
        for start, end in _row_chunks(logits.size(0), ctx.chunk):
            grad[start:end] = _run(backward_step, ctx.compile, logits[start:end], target[start:end],
                                   keep[start:end], grad_loss, grad_nll, ctx.eps)
        return grad, None, None, None, None, None


def szegedy_smoothed_nll_loss(logits, target, eps_ls, ignore_index, chunk: int = 0, compile: bool = False):
    """Summed smoothed loss and summed NLL over non-padding targets.

    ``logits``: N x K scores (or log-probabilities); ``target``: N class indices;
    ``chunk``: rows per chunk (0: all at once); ``compile``: torch.compile the per-chunk steps.
    """
    return SmoothedCrossEntropy.apply(logits, target, eps_ls, ignore_index, chunk, compile)


@register_criterion("attn_label_smoothed_cross_entropy", dataclass=AttnLabelSmoothedCrossEntropyConfig)
class AttnLabelSmoothedCrossEntropy(LabelSmoothedCrossEntropyCriterion):
    """Cross-entropy against Szegedy-smoothed targets (see the module docstring)."""

    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0, report_accuracy=False,
                 loss_chunk_tokens=8192, compile_loss=False):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size=ignore_prefix_size,
                         report_accuracy=report_accuracy)
        if loss_chunk_tokens < 0:
            raise ConfigError(f"--loss-chunk-tokens must be >= 0 (target positions per chunk of the loss; "
                              f"0: all at once), not {loss_chunk_tokens}")
        self.loss_chunk_tokens, self.compile_loss = loss_chunk_tokens, compile_loss

    def compute_loss(self, model, net_output, sample, reduce=True):
        if not reduce:
            raise NotImplementedError("attn_label_smoothed_cross_entropy only computes summed losses")
        logits = net_output[0] if isinstance(net_output, (tuple, list)) else None
        if not torch.is_tensor(logits) or getattr(model.decoder, "adaptive_softmax", None) is not None:
            # Not plain logits (e.g. an adaptive softmax): let the model normalize.
            logits, target = self.get_lprobs_and_target(model, net_output, sample)
        else:
            target = model.get_targets(sample, net_output)
            if self.ignore_prefix_size > 0:
                logits, target = logits[:, self.ignore_prefix_size:], target[:, self.ignore_prefix_size:]
            logits, target = logits.reshape(-1, logits.size(-1)), target.reshape(-1)
        return szegedy_smoothed_nll_loss(logits, target, self.eps, self.padding_idx,
                                         chunk=self.loss_chunk_tokens, compile=self.compile_loss)

    def forward(self, model, sample, reduce=True):
        loss, sample_size, logging_output = super().forward(model, sample, reduce=reduce)
        src_lengths = sample["net_input"].get("src_lengths")
        if "nsrc_tokens" in sample:  # counted as the batch was made (attn_translation's HostFacts): no GPU wait
            logging_output["nsrc_tokens"] = sample["nsrc_tokens"]
        elif src_lengths is not None:
            logging_output["nsrc_tokens"] = int(src_lengths.sum())
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        """fairseq's metrics, plus ``src_wpb``: source tokens (padding excluded,
        </s> included, as in fairseq's ``wpb``) summed over the update's batches."""
        super().reduce_metrics(logging_outputs)
        if any("nsrc_tokens" in log for log in logging_outputs):
            metrics.log_scalar("src_wpb", sum(log.get("nsrc_tokens", 0) for log in logging_outputs),
                               priority=181, round=1)
