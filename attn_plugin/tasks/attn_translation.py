"""``--task attn_translation``: fairseq's ``translation`` task plus the paper's
length penalty for beam search and real bf16 training on GPUs.

Sec. 6.1: "We used beam search with a beam size of 4 and length penalty
alpha = 0.6" (Sec. 6.3, parsing: beam 21, alpha = 0.3). The penalty is the one
of Wu et al. (2016), GNMT eq. 14:

    lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha

and a finished hypothesis is ranked by  log P(Y|X) / lp(Y).

fairseq's ``--lenpen`` is a different penalty: it ranks by log P(Y|X) / |Y|^lenpen.
``--gnmt-alpha A`` switches beam search to the paper's penalty; without it the
task behaves exactly like ``translation`` (and ``--lenpen`` applies as usual).

With ``--gnmt-alpha``, beam search also stops as the paper's code did (tensor2tensor's
``stop_early``: attn_plugin/beam_search.py); ``--beam-stop fairseq`` keeps fairseq's rule.
Sampling, diverse beam search, ``--match-source-len``, constraints and prefix functions
are fairseq's searches: they run with fairseq's rule, said in one log line.

|Y| counts the end-of-sentence token, as fairseq's ``--lenpen`` and the
paper's reference implementation (tensor2tensor's beam search) both do.

``--bf16-autocast`` trains under ``torch.autocast`` with bfloat16: the weights (and Adam's state) stay fp32, the matmuls run in bf16,
the normalizations and the loss (the criterion's log-softmax is fp32) in fp32,
with no loss scaling, which bf16's fp32-sized exponent does not need. The paper's
P100s trained in single precision (Table 2 counts their fp32 rate); this keeps
fp32's dynamic range at half precision's speed on bf16 hardware. fairseq 0.12 has no such path:
its ``--bf16`` implies ``--tpu`` (and fails on GPUs), its ``--fp16`` and
``--amp`` use fp16 with loss scaling ("minimum loss scale reached" ends such
runs). The two ways of training in bf16, bf16 weights with an fp32 master
copy (fairseq's ``--fp16`` way) and autocast, are compared in
benchmarks/results/h100_train_bf16*.json; autocast needs neither a master copy
nor loss scaling. The option works on CPU too (torch's CPU autocast), which is
how the tests check it.

Validation and decoding run in fp32 whatever the training precision: the option is saved
in every checkpoint, and a model evaluated or used (fairseq-validate, ``from_pretrained``,
translate.py) would otherwise decode in the training's bf16 without anyone asking for it.
``--bf16-inference`` asks for bf16 autocast in validation and decoding.
"""
import logging
import time
from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq.data import BaseWrapperDataset
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from .. import run_stats
from ..beam_stop import RULES, stop_rule
from ..errors import ConfigError

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
    beam_stop: Optional[ChoiceEnum(list(RULES))] = field(
        default=None,
        metadata={"help": "when beam search stops: t2t = as the paper's code (tensor2tensor, stop_early): "
                          "until no alive hypothesis can beat the worst finished one under the length "
                          "penalty, with EOS hypotheses taken from all 2 x beam candidates; fairseq = "
                          "fairseq's rule (a sentence ends once beam hypotheses finished among the top beam). "
                          "Default: t2t with --gnmt-alpha, else fairseq"},
    )
    bf16_autocast: bool = field(
        default=False,
        metadata={"help": "train under torch.autocast(bfloat16): fp32 weights and optimizer state, bf16 "
                          "matmuls, no loss scaling (use instead of --fp16; fairseq's own --bf16 means TPU). On "
                          "GPUs without bf16 (before Ampere) use --fp16. Validation and decoding stay fp32 "
                          "(--bf16-inference for bf16 there too)"},
    )
    bf16_inference: bool = field(
        default=False,
        metadata={"help": "validate and decode under torch.autocast(bfloat16) (default: fp32, whatever the "
                          "training precision)"},
    )


class Bf16Autocast:
    """A criterion whose calls run under bf16 autocast on the model's device.

    fairseq's ``train_step`` calls ``criterion(model, sample)`` inside
    ``torch.cuda.amp.autocast(enabled=False)`` (unless ``--amp``), so autocast has
    to be entered inside that call, not around the step: this wrapper is what the
    task hands fairseq instead of the criterion. Backward then runs each op in
    the dtype its forward used, outside autocast."""

    def __init__(self, criterion):
        self.criterion = criterion

    def __call__(self, model, sample, *args, **kwargs):
        with bf16_autocast(model):
            return self.criterion(model, sample, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.criterion, name)


def bf16_autocast(model):
    """``torch.autocast`` with bfloat16 on the device of ``model``'s parameters."""
    device = next(model.parameters()).device.type
    return torch.autocast(device_type=device, dtype=torch.bfloat16)


# What a batch says of its sources, computed on the CPU as the batch is made (HostFacts).
SRC_PADDED, NSRC_TOKENS = "src_padded", "nsrc_tokens"


class HostFacts(BaseWrapperDataset):
    """A dataset whose batches also say, as plain Python values, whether any source sentence is
    padded (``src_padded``) and how many source tokens they hold (``nsrc_tokens``). On a GPU the
    model and the criterion would otherwise read both from the batch's GPU tensors at every forward
    (``mask.any()``, ``int(lengths.sum())``), and each read waits for the GPU to finish all the work
    queued before it, so the host cannot queue the next kernels while the GPU runs these."""

    def collater(self, samples):
        sample = super().collater(samples)
        net_input = sample.get("net_input") if isinstance(sample, dict) else None
        if net_input and torch.is_tensor(net_input.get("src_lengths")):
            lengths, tokens = net_input["src_lengths"], net_input["src_tokens"]
            sample[SRC_PADDED] = bool((lengths < tokens.size(1)).any())  # a shorter sentence is padded
            sample[NSRC_TOKENS] = int(lengths.sum())
        return sample

    def __getattr__(self, name):  # the wrapped dataset's own attributes (src, tgt, ...), as before
        if name == "dataset":
            raise AttributeError(name)
        return getattr(self.dataset, name)


def _takes_host_facts(model) -> bool:
    from ..models.attn_transformer import AttnTransformerModel

    while hasattr(model, "module"):  # DDP and fairseq's wrappers
        model = model.module
    return isinstance(model, AttnTransformerModel)


def with_host_facts(sample, model):
    """``sample`` with its ``src_padded`` passed to the plugin's model (stock models take no such input)."""
    if isinstance(sample, dict) and SRC_PADDED in sample and "net_input" in sample and _takes_host_facts(model):
        sample["net_input"]["src_padded"] = sample[SRC_PADDED]
    return sample


@register_task("attn_translation", dataclass=AttnTranslationConfig)
class AttnTranslationTask(TranslationTask):
    """Translation with the paper's decoding options (see the module docstring)."""

    cfg: AttnTranslationConfig

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        self.datasets[split] = HostFacts(self.datasets[split])

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        sample = with_host_facts(sample, model)
        criterion = Bf16Autocast(criterion) if self.cfg.bf16_autocast else criterion
        loss, sample_size, logging_output = super().train_step(sample, model, criterion, optimizer, update_num,
                                                               ignore_grad=ignore_grad)
        stats = run_stats.recorder()  # ATTN_RUN_STATS: the recipes' --canary reads what training did
        if stats and not ignore_grad:  # fairseq's dummy batches (ignore_grad) are no work of the run
            stats.train_step(update_num, sample, logging_output.get("loss", loss), sample_size)
        return loss, sample_size, logging_output

    def valid_step(self, sample, model, criterion):
        sample = with_host_facts(sample, model)
        criterion = Bf16Autocast(criterion) if self.cfg.bf16_inference else criterion
        start = time.time()
        out = super().valid_step(sample, model, criterion)
        stats = run_stats.recorder()
        if stats:
            stats.valid.append([start, time.time()])
        return out

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        if not self.cfg.bf16_inference:
            return super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens,
                                          constraints=constraints)
        with bf16_autocast(models[0]):
            return super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens,
                                          constraints=constraints)

    def beam_stop(self, args, prefix_allowed_tokens_fn=None) -> str:
        """The stopping rule beam search runs with for generation options ``args`` (see the module
        docstring); fairseq's searches other than beam search keep fairseq's rule."""
        try:
            rule = stop_rule(self.cfg.beam_stop, self.cfg.gnmt_alpha is not None)
        except ValueError as exc:
            raise ConfigError(f"--beam-stop t2t needs --gnmt-alpha: {exc} (fairseq's --lenpen goes with "
                              "--beam-stop fairseq)") from None
        if rule == "t2t":
            other = [flag for flag, on in [
                ("--sampling", getattr(args, "sampling", False)),
                ("--diverse-beam-groups", getattr(args, "diverse_beam_groups", -1) > 0),
                ("--diversity-rate", getattr(args, "diversity_rate", -1) > -1),
                ("--match-source-len", getattr(args, "match_source_len", False)),
                ("--constraints", getattr(args, "constraints", False)),
                ("a prefix function", prefix_allowed_tokens_fn is not None)] if on]
            if other:
                logger.info("%s: fairseq's search and stopping rule (the paper's rule is for beam search)",
                            ", ".join(other))
                rule = "fairseq"
        return rule

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        alpha = self.cfg.gnmt_alpha
        if seq_gen_cls is None and self.beam_stop(args, prefix_allowed_tokens_fn) == "t2t":
            from ..beam_search import PaperBeamSearch, PaperBeamSearchWithAlignment

            extra_gen_cls_kwargs = dict(extra_gen_cls_kwargs or {}, alpha=alpha or 0.0)
            seq_gen_cls = PaperBeamSearch
            if getattr(args, "print_alignment", False):
                seq_gen_cls = PaperBeamSearchWithAlignment
                extra_gen_cls_kwargs["print_alignment"] = args.print_alignment
            logger.info("beam search stops as the paper's code did (tensor2tensor, stop_early), alpha=%s",
                        alpha or 0.0)
        generator = super().build_generator(models, args, seq_gen_cls=seq_gen_cls,
                                            extra_gen_cls_kwargs=extra_gen_cls_kwargs,
                                            prefix_allowed_tokens_fn=prefix_allowed_tokens_fn)
        if alpha is not None and hasattr(generator, "len_penalty"):
            if getattr(args, "lenpen", 1) not in (1, 1.0):
                logger.warning("--gnmt-alpha %s replaces --lenpen %s", alpha, args.lenpen)
            if getattr(args, "unnormalized", False):
                logger.warning("--unnormalized turns off every length penalty, --gnmt-alpha included")
            generator.len_penalty = GNMTLengthPenalty(alpha)
            logger.info("beam search ranks hypotheses with the GNMT length penalty, alpha=%s", alpha)
        return generator
