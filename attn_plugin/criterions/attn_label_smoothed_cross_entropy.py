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

fairseq's ``label_smoothed_cross_entropy`` differs: it gives the target 1-eps
and every other symbol eps/(K-1). Everything else (logging, accuracy, sentence
averaging) is fairseq's: ``loss`` and ``nll_loss`` are logged in base 2 per
token and ``ppl`` = 2^nll_loss, so logs compare line by line with stock runs.
"""
from dataclasses import dataclass, field

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


def szegedy_smoothed_nll_loss(lprobs, target, eps_ls, ignore_index):
    """Summed smoothed loss and summed NLL over non-padding targets.

    ``lprobs``: N x K log-probabilities; ``target``: N class indices.
    """
    target = target.unsqueeze(-1)
    nll = -lprobs.gather(dim=-1, index=target).squeeze(-1)
    uniform = -lprobs.sum(dim=-1)  # sum_k -log p(k)
    keep = target.squeeze(-1).ne(ignore_index)
    nll_loss = nll.masked_fill(~keep, 0.0).sum()
    uniform_loss = uniform.masked_fill(~keep, 0.0).sum()
    K = lprobs.size(-1)
    loss = (1.0 - eps_ls) * nll_loss + (eps_ls / K) * uniform_loss
    return loss, nll_loss


@register_criterion("attn_label_smoothed_cross_entropy", dataclass=AttnLabelSmoothedCrossEntropyConfig)
class AttnLabelSmoothedCrossEntropy(LabelSmoothedCrossEntropyCriterion):
    """Cross-entropy against Szegedy-smoothed targets (see the module docstring)."""

    def compute_loss(self, model, net_output, sample, reduce=True):
        if not reduce:
            raise NotImplementedError("attn_label_smoothed_cross_entropy only computes summed losses")
        lprobs, target = self.get_lprobs_and_target(model, net_output, sample)
        return szegedy_smoothed_nll_loss(lprobs, target, self.eps, self.padding_idx)
