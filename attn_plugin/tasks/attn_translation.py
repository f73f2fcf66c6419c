"""``--task attn_translation``: fairseq's ``translation`` task plus the paper's
length penalty for beam search.

Sec. 6.1: "We used beam search with a beam size of 4 and length penalty
alpha = 0.6" (Sec. 6.3, parsing: beam 21, alpha = 0.3). The penalty is the one
of Wu et al. (2016), GNMT eq. 14:

    lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha

and a finished hypothesis is ranked by  log P(Y|X) / lp(Y).

fairseq's ``--lenpen`` is a different penalty: it ranks by log P(Y|X) / |Y|^lenpen.
``--gnmt-alpha A`` switches beam search to the paper's penalty; without it the
task behaves exactly like ``translation`` (and ``--lenpen`` applies as usual).

|Y| counts the end-of-sentence token, as fairseq's ``--lenpen`` and the
paper's reference implementation (tensor2tensor's beam search) both do.
"""
import logging
from dataclasses import dataclass, field
from typing import Optional

from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

logger = logging.getLogger(__name__)


class GNMTLengthPenalty:
    """The GNMT length penalty as a drop-in for fairseq's ``len_penalty``.

    fairseq's beam search normalizes a finished hypothesis of length L (EOS
    included) with ``score /= L ** len_penalty``. Python evaluates
    ``L ** obj`` as ``obj.__rpow__(L)`` when ``L`` is a number, so this object
    turns that line into ``score /= ((5 + L) / 6) ** alpha`` without touching
    the rest of fairseq's search.
    """

    def __init__(self, alpha: float):
        self.alpha = float(alpha)

    def __call__(self, length):
        """lp(Y) for |Y| = ``length`` (GNMT eq. 14)."""
        return ((5.0 + length) / 6.0) ** self.alpha

    def __rpow__(self, length):
        return self(length)

    def __repr__(self):
        return f"GNMTLengthPenalty(alpha={self.alpha})"


@dataclass
class AttnTranslationConfig(TranslationConfig):
    gnmt_alpha: Optional[float] = field(
        default=None,
        metadata={"help": "beam search ranks finished hypotheses by log P / ((5+|Y|)/6)^alpha, the GNMT "
                          "length penalty the paper uses (Sec. 6.1: alpha 0.6 for translation; Sec. 6.3: 0.3 "
                          "for parsing); replaces fairseq's --lenpen, which divides by |Y|^lenpen. "
                          "Default: off (fairseq's --lenpen applies)"},
    )


@register_task("attn_translation", dataclass=AttnTranslationConfig)
class AttnTranslationTask(TranslationTask):
    """Translation with the paper's decoding options (see the module docstring)."""

    cfg: AttnTranslationConfig

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        generator = super().build_generator(models, args, seq_gen_cls=seq_gen_cls,
                                            extra_gen_cls_kwargs=extra_gen_cls_kwargs,
                                            prefix_allowed_tokens_fn=prefix_allowed_tokens_fn)
        alpha = self.cfg.gnmt_alpha
        if alpha is not None and hasattr(generator, "len_penalty"):
            if getattr(args, "lenpen", 1) not in (1, 1.0):
                logger.warning("--gnmt-alpha %s replaces --lenpen %s", alpha, args.lenpen)
            if getattr(args, "unnormalized", False):
                logger.warning("--unnormalized turns off every length penalty, --gnmt-alpha included")
            generator.len_penalty = GNMTLengthPenalty(alpha)
            logger.info("beam search ranks hypotheses with the GNMT length penalty, alpha=%s", alpha)
        return generator
