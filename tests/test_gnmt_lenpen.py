"""The paper's length penalty (Sec. 6.1; GNMT eq. 14) in fairseq's beam search,
checked against a hand-computed ranking.

A toy model whose next-token distribution depends only on the step makes beam
search (beam 3) finish exactly three hypotheses, "w w eos" style, of lengths
|Y| = 2, 3, 4 (EOS counted), with log-probabilities we choose:

    log P:  s2 = -2.00,  s3 = -2.10,  s4 = -2.75

Hand-computed rankings:
  * no normalization:            s2 > s3 > s4                 -> |Y|=2 wins
  * fairseq --lenpen 1 (s/|Y|):  -1.000, -0.700, -0.6875      -> |Y|=4 wins
  * GNMT alpha 0.6 (s/lp):       lp = ((5+|Y|)/6)^0.6 = 1.0969, 1.1886, 1.2754
                                 -> -1.8233, -1.7668, -2.1562 -> |Y|=3 wins
"""
import math
from argparse import Namespace

import pytest
import torch

from fairseq.data import Dictionary
from fairseq.models import FairseqEncoderDecoderModel
from toy_models import ToyDecoder, ToyEncoder

from attn_plugin.tasks.attn_translation import AttnTranslationConfig, AttnTranslationTask, GNMTLengthPenalty

S = {2: -2.00, 3: -2.10, 4: -2.75}  # log P of the finished hypotheses of length |Y|
# Per-step EOS probabilities e_t that give those log-probabilities
# (s2 = ln e1, s3 = ln(1-e1) + ln e2, s4 = ln(1-e1) + ln(1-e2) + ln e3).
E1 = math.exp(S[2])
E2 = math.exp(S[3] - math.log(1 - E1))
E3 = math.exp(S[4] - math.log(1 - E1) - math.log(1 - E2))


class _StepDecoder(ToyDecoder):
    """Step 0: token w with probability ~1. Step t >= 1: EOS with e_t, w with 1 - e_t.
    Every other token gets a logit of -30."""

    def __init__(self, dictionary, word):
        super().__init__(dictionary)
        self.word = word

    def logits(self, prev_output_tokens):
        bsz, steps = prev_output_tokens.shape
        logits = torch.full((bsz, steps, len(self.dictionary)), -30.0)
        for t in range(steps):
            e = {1: E1, 2: E2, 3: E3}.get(t, 1e-6)
            if t == 0:
                logits[:, t, self.word] = 0.0
            else:
                logits[:, t, self.dictionary.eos()] = math.log(e)
                logits[:, t, self.word] = math.log(1 - e)
        return logits


def _setup():
    d = Dictionary()
    word = d.add_symbol("w")
    task = AttnTranslationTask(AttnTranslationConfig(), d, d)
    model = FairseqEncoderDecoderModel(ToyEncoder(d), _StepDecoder(d, word))
    sample = {"net_input": {"src_tokens": torch.tensor([[word, d.eos()]]), "src_lengths": torch.tensor([2])},
              "id": torch.tensor([0])}
    return task, model, sample


def _decode(alpha=None, lenpen=1.0):
    task, model, sample = _setup()
    task.cfg.gnmt_alpha = alpha
    args = Namespace(beam=3, max_len_a=0, max_len_b=10, min_len=1, lenpen=lenpen, unnormalized=False,
                     unkpen=0, temperature=1.0, match_source_len=False, no_repeat_ngram_size=0)
    generator = task.build_generator([model], args)
    hypos = task.inference_step(generator, [model], sample)[0]
    return [(len(h["tokens"]), float(h["score"])) for h in hypos]


def test_penalty_formula():
    lp = GNMTLengthPenalty(0.6)
    assert lp(4) == pytest.approx((9 / 6) ** 0.6)
    assert 4 ** lp == pytest.approx(1.2754, abs=1e-4)  # fairseq's `(step + 1) ** len_penalty`
    assert GNMTLengthPenalty(0.0)(17) == 1.0


def test_toy_search_finishes_the_three_hypotheses():
    lengths = sorted(n for n, _ in _decode(alpha=0.0))  # alpha 0: lp = 1, raw log-probabilities
    assert lengths == [2, 3, 4]
    scores = dict(_decode(alpha=0.0))
    for n in (2, 3, 4):
        assert scores[n] == pytest.approx(S[n], abs=1e-4)


def test_gnmt_alpha_ranks_as_hand_computed():
    hypos = _decode(alpha=0.6)
    assert [n for n, _ in hypos] == [3, 2, 4]
    expected = {2: -1.8233, 3: -1.7668, 4: -2.1562}
    for n, score in hypos:
        assert score == pytest.approx(expected[n], abs=1e-3)


def test_without_gnmt_alpha_fairseq_lenpen_applies():
    hypos = _decode(alpha=None, lenpen=1.0)
    assert [n for n, _ in hypos] == [4, 3, 2]
    for n, score in hypos:
        assert score == pytest.approx(S[n] / n, abs=1e-4)
    assert [n for n, _ in _decode(alpha=None, lenpen=0.0)] == [2, 3, 4]
