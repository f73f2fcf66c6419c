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

The loss is computed from the decoder's logits z in one fused step
(:class:`SmoothedCrossEntropy`) whose gradient is written out,
d loss / d z = p - q' (p = softmax(z)). Nothing of size tokens x K is kept
for the backward pass but the logits themselves, where stock fairseq keeps
fp32 log-probabilities and autograd's intermediates.

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


@dataclass
class AttnLabelSmoothedCrossEntropyConfig(LabelSmoothedCrossEntropyCriterionConfig):
    label_smoothing: float = field(
        default=0.1,
        metadata={"help": "eps_ls: probability mass spread uniformly over all K classes "
                          "(Sec. 5.4; the paper uses 0.1, which is the default here)"},
    )


class SmoothedCrossEntropy(torch.autograd.Function):
    """Summed Szegedy-smoothed loss and summed NLL of N x K ``logits``
    (unnormalized; log-probabilities work too, as log_softmax leaves them
    unchanged) against N ``target`` indices, skipping ``target == ignore_index``.

    Forward, per kept row, with log p = log_softmax(z): nll = -log p(y);
    loss = (1 - eps) nll + (eps / K) sum_k -log p(k).
    Backward: d loss / d z = p - q' with p = softmax(z) recomputed,
    q' = (1 - eps) onehot(y) + eps / K; d nll / d z = p - onehot(y).
    Arithmetic is in fp32 whatever the logits' dtype; the gradient is
    returned in the logits' dtype.
    """

    @staticmethod
    def forward(ctx, logits, target, eps: float, ignore_index):
        K = logits.size(-1)
        keep = target.ne(ignore_index) if ignore_index is not None else torch.ones_like(target, dtype=torch.bool)
        target = target.masked_fill(~keep, 0)  # any valid index; those rows are masked out
        lprobs = torch.log_softmax(logits, dim=-1, dtype=torch.float32)  # one fused pass; freed below
        nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1).masked_fill(~keep, 0.0).sum()
        uniform = -lprobs.sum(dim=-1).masked_fill(~keep, 0.0).sum()  # sum_k -log p(k)
        loss = (1.0 - eps) * nll + (eps / K) * uniform
        ctx.save_for_backward(logits, target, keep)
        ctx.eps = eps
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):
        logits, target, keep = ctx.saved_tensors
        eps, K = ctx.eps, logits.size(-1)
        keep = keep.unsqueeze(-1).float()
        # grad = keep * ((g_loss + g_nll) p - g_loss eps/K - (g_loss (1-eps) + g_nll) onehot(y))
        p = torch.softmax(logits, dim=-1, dtype=torch.float32)
        grad = torch.addcmul(keep * (-grad_loss * (eps / K)), p, keep * (grad_loss + grad_nll))
        del p
        at_target = keep * -(grad_loss * (1.0 - eps) + grad_nll)
        grad.scatter_add_(-1, target.unsqueeze(-1), at_target)
        return grad.to(logits.dtype), None, None, None


def szegedy_smoothed_nll_loss(logits, target, eps_ls, ignore_index):
    """Summed smoothed loss and summed NLL over non-padding targets.

    ``logits``: N x K scores (or log-probabilities); ``target``: N class indices.
    """
    return SmoothedCrossEntropy.apply(logits, target, eps_ls, ignore_index)


@register_criterion("attn_label_smoothed_cross_entropy", dataclass=AttnLabelSmoothedCrossEntropyConfig)
class AttnLabelSmoothedCrossEntropy(LabelSmoothedCrossEntropyCriterion):
    """Cross-entropy against Szegedy-smoothed targets (see the module docstring)."""

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
        return szegedy_smoothed_nll_loss(logits, target, self.eps, self.padding_idx)

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
