"""Beam search stops as the paper's code did (tensor2tensor's stop_early; attn_plugin/beam_search.py),
checked against outcomes worked out by hand from that rule and from fairseq's.

A toy decoder whose next-token distribution depends on the prefix only (tokens a, b, EOS):

    after BOS:      a  1
    after a:        EOS 0.52   b 0.48
    after a b:      EOS 0.99   a 0.01
    after a b a:    EOS 0.99   a 0.01

Beam 1, GNMT alpha 2, at most 5 tokens (--max-len-a 0 --max-len-b 5; lp(n) = ((5 + n) / 6)^2):

* fairseq's rule: at step 2 the two candidates are "a EOS" (log P = ln 0.52 = -0.6539) and "a b"
  (ln 0.48 = -0.7340); EOS ranks first, is finalized, and with one finished hypothesis (the beam)
  the sentence ends: output "a", score -0.6539 / (7/6)^2 = -0.4804.
* tensor2tensor's rule: "a EOS" is finished (-0.4804), "a b" alive; the bound is the best alive
  log P over the largest penalty, -0.7340 / (10/6)^2 = -0.2642, and -0.4804 is not above it: go on.
  Next step "a b EOS" has log P -0.7340 + ln 0.99 = -0.7440, score -0.7440 / (8/6)^2 = -0.4185,
  better than "a EOS"; the alive "a b a" has -5.3392, bound -1.9221 < -0.4185: stop.
  Output "a b", score -0.4185.

Where the two must agree (alpha 0, no better hypothesis pending), after BOS a 1, after a: b 0.6,
EOS 0.4, after a b: a 0.7, EOS 0.3, after a b a: EOS 0.99:
* fairseq: "a EOS" ranks second of two at step 2 and is not finalized; "a b a EOS" is the first
  EOS to rank first: output "a b a", log P ln 0.6 + ln 0.7 + ln 0.99 = -0.8774.
* tensor2tensor: finished "a EOS" (-0.9163) and later "a b EOS" (-1.7148) and "a b a EOS" (-0.8774),
  the best of which is kept; after it the alive "a b a a" (-5.4755) cannot beat it: "a b a", -0.8774.
"""
import math
from argparse import Namespace

import pytest
import torch
from conftest import USER_DIR, cli, run
from fairseq.data import Dictionary
from fairseq.models import FairseqEncoderDecoderModel
from toy_models import ToyDecoder, ToyEncoder

from attn_plugin.beam_search import PaperBeamSearch
from attn_plugin.errors import ConfigError
from attn_plugin.tasks.attn_translation import AttnTranslationConfig, AttnTranslationTask

DIFFER = {(): {"a": 1.0}, ("a",): {"</s>": 0.52, "b": 0.48}}
AGREE = {(): {"a": 1.0}, ("a",): {"b": 0.6, "</s>": 0.4}, ("a", "b"): {"a": 0.7, "</s>": 0.3}}
DEFAULT = {"</s>": 0.99, "a": 0.01}  # any other prefix


class _TableDecoder(ToyDecoder):
    """Next-token probabilities from a table keyed by the prefix (tokens after BOS); -40 logits elsewhere."""

    def __init__(self, dictionary, table):
        super().__init__(dictionary)
        self.table = table

    def logits(self, prev_output_tokens):
        bsz, steps = prev_output_tokens.shape
        logits = torch.full((bsz, steps, len(self.dictionary)), -40.0)
        for row in range(bsz):
            for t in range(steps):
                prefix = tuple(self.dictionary[i] for i in prev_output_tokens[row, 1:t + 1].tolist())
                for word, p in self.table.get(prefix, DEFAULT).items():
                    logits[row, t, self.dictionary.index(word)] = math.log(p)
        return logits


def decode(table, alpha, beam_stop=None, beam=1):
    d = Dictionary()
    for word in ("a", "b"):
        d.add_symbol(word)
    task = AttnTranslationTask(AttnTranslationConfig(gnmt_alpha=alpha, beam_stop=beam_stop), d, d)
    model = FairseqEncoderDecoderModel(ToyEncoder(d), _TableDecoder(d, table))
    sample = {"net_input": {"src_tokens": torch.tensor([[d.index("a"), d.eos()]]), "src_lengths": torch.tensor([2])},
              "id": torch.tensor([0])}
    args = Namespace(beam=beam, max_len_a=0, max_len_b=5, min_len=1, lenpen=1.0, unnormalized=False, unkpen=0,
                     temperature=1.0, match_source_len=False, no_repeat_ngram_size=0)
    generator = task.build_generator([model], args)
    best = task.inference_step(generator, [model], sample)[0][0]
    return d.string(best["tokens"]), float(best["score"]), generator


def test_the_paper_rule_finds_the_longer_hypothesis_fairseqs_rule_stops_before():
    words, score, generator = decode(DIFFER, alpha=2.0)  # the default with a GNMT alpha
    assert isinstance(generator, PaperBeamSearch)
    assert words == "a b" and score == pytest.approx((math.log(0.48) + math.log(0.99)) / (8 / 6) ** 2, abs=1e-4)
    words, score, generator = decode(DIFFER, alpha=2.0, beam_stop="fairseq")
    assert not isinstance(generator, PaperBeamSearch)
    assert words == "a" and score == pytest.approx(math.log(0.52) / (7 / 6) ** 2, abs=1e-4)


def test_both_rules_agree_where_no_better_hypothesis_is_pending():
    expected = math.log(0.6) + math.log(0.7) + math.log(0.99)
    for rule in ("t2t", "fairseq"):
        words, score, _ = decode(AGREE, alpha=0.0, beam_stop=rule)
        assert words == "a b a" and score == pytest.approx(expected, abs=1e-4), rule


def test_without_gnmt_alpha_fairseqs_rule_and_penalty_apply():
    _, _, generator = decode(DIFFER, alpha=None)
    assert not isinstance(generator, PaperBeamSearch)
    with pytest.raises(ConfigError, match="--beam-stop t2t needs --gnmt-alpha"):
        decode(DIFFER, alpha=None, beam_stop="t2t")


def test_fairseq_generate_decodes_with_the_paper_rule_and_its_options(plugin_run, data_bin):
    """On a trained model through fairseq-generate: the rule is said, every sentence gets --nbest
    hypotheses, --print-alignment works with it, and --sampling keeps fairseq's own search."""
    save, _ = plugin_run
    base = [cli("fairseq-generate"), data_bin, "--user-dir", USER_DIR, "--task", "attn_translation",
            "--path", save / "checkpoint_last.pt", "--gen-subset", "test", "--cpu", "--beam", "4",
            "--gnmt-alpha", "0.6", "--max-len-a", "1", "--max-len-b", "50", "--batch-size", "8",
            "--required-batch-size-multiple", "1"]
    out = run([*base, "--nbest", "2", "--print-alignment"])
    text = out.stdout + out.stderr
    assert "stops as the paper's code did" in text
    hypos = [line for line in out.stdout.splitlines() if line.startswith("H-")]
    assert len(hypos) == 2 * 21
    assert sum(line.startswith("A-") for line in out.stdout.splitlines()) == 2 * 21
    sampled = run([*base, "--sampling", "--beam", "1", "--seed", "1"])
    assert "--sampling: fairseq's search" in sampled.stdout + sampled.stderr
    assert "stops as the paper's code did" not in sampled.stdout + sampled.stderr
