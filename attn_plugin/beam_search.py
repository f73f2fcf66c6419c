"""Beam search that stops as the paper's code did (Sec. 6.1: beam 4, length penalty alpha,
maximum output length input + 50, "but terminate early when possible").

The paper's decoder is tensor2tensor's ``beam_search`` with ``stop_early=True``. Per step
it extends the alive hypotheses, takes the 2 x beam best extensions by log-probability,
and from them

- keeps as *finished* the beam best-scoring hypotheses among those already finished and
  this step's extensions that end in EOS (any of the 2 x beam, not only those ranked in
  the top beam), each scored log P(Y|X) / lp(|Y|), lp(n) = ((5 + n) / 6)^alpha (GNMT eq. 14,
  |Y| counting EOS);
- keeps as *alive* the beam best extensions that do not end in EOS;
- stops when, for every sentence of the batch, the lowest score among its finished
  hypotheses is higher than its best alive log-probability divided by the largest length
  penalty still possible, lp(max_len): no continuation can then enter the finished set.
  Otherwise it stops after max_len tokens.

The output is the best finished hypothesis (the alive ones where none finished).

fairseq's :class:`~fairseq.sequence_generator.SequenceGenerator` instead finalizes an EOS
only when it ranks among the top beam of the 2 x beam candidates and ends a sentence once
beam hypotheses are final; with alpha > 0 it can stop before a longer hypothesis that the
penalty would rank higher. The task option ``--beam-stop`` picks the rule
(attn_plugin/tasks/attn_translation.py).
"""
import logging
import math

import torch
from fairseq.sequence_generator import SequenceGenerator, SequenceGeneratorWithAlignment

logger = logging.getLogger(__name__)


class PaperBeamSearch(SequenceGenerator):
    """fairseq's generator (its options, ensembles, output format) with the search loop above.

    Options of fairseq's generator that keep their meaning here: --beam, --max-len-a/-b (the
    length limit, from the padded source length as fairseq and tensor2tensor both compute
    it), --min-len (fairseq's: by default no empty output), --unkpen, --temperature,
    --no-repeat-ngram-size, --nbest (finished hypotheses first, then alive ones to fill the
    beam). Prefix tokens, constraints and a language model fall back to fairseq's search."""

    def __init__(self, models, tgt_dict, alpha: float = 0.0, **kwargs):
        super().__init__(models, tgt_dict, **kwargs)
        self.alpha = float(alpha) if self.normalize_scores else 0.0  # --unnormalized: no penalty

    def length_penalty(self, length) -> float:
        """lp(|Y|) = ((5 + |Y|) / 6)^alpha (GNMT eq. 14)."""
        return ((5.0 + length) / 6.0) ** self.alpha

    @torch.no_grad()
    def _generate(self, sample, prefix_tokens=None, constraints=None, bos_token=None):
        if prefix_tokens is not None or constraints is not None or self.lm_model is not None:
            return super()._generate(sample, prefix_tokens=prefix_tokens, constraints=constraints,
                                     bos_token=bos_token)
        net_input = sample["net_input"]
        src_tokens = net_input["src_tokens"]
        bsz, src_len = src_tokens.size()[:2]
        K, V, eos, pad = self.beam_size, self.vocab_size, self.eos, self.pad
        max_len = min(int(self.max_len_a * src_len + self.max_len_b), self.max_len - 1)
        device = src_tokens.device

        incremental_states = [{} for _ in range(self.model.models_size)]
        encoder_outs = self.model.forward_encoder(net_input)
        encoder_outs = self.model.reorder_encoder_out(
            encoder_outs, torch.arange(bsz, device=device).repeat_interleave(K))

        # Alive hypotheses: row b*K + k of `tokens` (BOS first), with their log P and per-token log P.
        tokens = torch.full((bsz * K, max_len + 2), pad, dtype=torch.long, device=device)
        tokens[:, 0] = eos if bos_token is None else bos_token
        token_logp = torch.zeros(bsz * K, max_len + 1, device=device)
        alive_logp = torch.full((bsz, K), -math.inf, device=device)
        alive_logp[:, 0] = 0.0  # the search starts from one hypothesis
        attn = None
        # Finished hypotheses: K slots per sentence; an empty slot scores -inf.
        fin = {"score": torch.full((bsz, K), -math.inf, device=device),
               "tokens": torch.full((bsz, K, max_len + 2), pad, dtype=torch.long, device=device),
               "token_logp": torch.zeros(bsz, K, max_len + 1, device=device),
               "length": torch.zeros(bsz, K, dtype=torch.long, device=device)}
        lowest_possible_penalty = self.length_penalty(max_len)
        active = list(range(bsz))  # the sentences still searched, in the order of the rows
        done = [None] * bsz

        steps = 0
        for step in range(max_len):
            steps, n = step + 1, len(active)
            first_row = (torch.arange(n, device=device) * K).unsqueeze(1)
            lprobs, avg_attn = self.model.forward_decoder(tokens[:, :step + 1], encoder_outs, incremental_states,
                                                          self.temperature)
            lprobs[lprobs != lprobs] = -math.inf
            lprobs[:, pad] = -math.inf
            lprobs[:, self.unk] -= self.unk_penalty
            if step < self.min_len:
                lprobs[:, eos] = -math.inf
            if self.token_indices_to_suppress is not None:
                lprobs[:, self.token_indices_to_suppress] = -math.inf
            if self.repeat_ngram_blocker is not None:
                lprobs = self.repeat_ngram_blocker(tokens, lprobs, n, K, step)
            if avg_attn is not None:
                if attn is None:
                    attn = torch.zeros(n * K, avg_attn.size(1), max_len + 2, device=device)
                    fin["attn"] = torch.zeros(n, K, avg_attn.size(1), max_len + 2, device=device)
                attn[:, :, step + 1] = avg_attn

            # The 2 x beam best extensions (same penalty for all at one step: rank by log P).
            cand_logp, cand = (lprobs.view(n, K, V) + alive_logp.unsqueeze(2)).view(n, K * V).topk(2 * K, dim=1)
            cand_rows = first_row + torch.div(cand, V, rounding_mode="floor")  # rows the extensions grow from
            cand_token = cand % V
            ends = cand_token.eq(eos)

            if ends.any():  # finished: the best K of those kept and this step's EOS extensions
                scores = (cand_logp / self.length_penalty(step + 1)).masked_fill(~ends, -math.inf)
                rows = cand_rows.view(-1)
                new = {"score": scores,
                       "tokens": tokens[rows].view(n, 2 * K, -1).clone(),
                       "token_logp": token_logp[rows].view(n, 2 * K, -1).clone(),
                       "length": torch.full((n, 2 * K), step + 1, dtype=torch.long, device=device)}
                new["tokens"][:, :, step + 1] = eos
                new["token_logp"][:, :, step] = lprobs[rows, eos].view(n, 2 * K)
                if attn is not None:
                    new["attn"] = attn[rows].view(n, 2 * K, *attn.shape[1:])
                best = torch.cat([fin["score"], new["score"]], dim=1).topk(K, dim=1).indices
                for key in fin:
                    both = torch.cat([fin[key], new[key]], dim=1)
                    index = best.view(n, K, *([1] * (both.dim() - 2))).expand(n, K, *both.shape[2:])
                    fin[key] = both.gather(1, index)

            # Alive: the best K extensions that do not end.
            alive_logp, pick = cand_logp.masked_fill(ends, -math.inf).topk(K, dim=1)
            rows = cand_rows.gather(1, pick).view(-1)
            picked = cand_token.gather(1, pick).view(-1)
            tokens = tokens[rows]
            tokens[:, step + 1] = picked
            token_logp = token_logp[rows]
            token_logp[:, step] = lprobs[rows, picked]
            if attn is not None:
                attn = attn[rows]

            # tensor2tensor's _is_finished (stop_early=True): the bound met for every sentence
            finished = fin["score"] > -math.inf
            lowest = fin["score"].masked_fill(~finished, math.inf).min(dim=1).values
            lowest = lowest.masked_fill(~finished.any(dim=1), -math.inf)
            met = lowest > alive_logp[:, 0] / lowest_possible_penalty
            if bool(met.all()):
                break
            # A sentence whose bound is met and whose K finished slots are full can gain nothing more:
            # later hypotheses score below the bound (log P only falls, and lp(max_len) is the largest
            # penalty), hence below every finished one. It leaves the batch, as in fairseq's search;
            # tensor2tensor decodes it on with the batch, to the same result.
            leave = met & finished.all(dim=1)
            if bool(leave.any()):
                for i in leave.nonzero().view(-1).tolist():
                    done[active[i]] = self._hypotheses(i, fin, tokens, token_logp, attn, alive_logp, steps)
                keep = (~leave).nonzero().view(-1)
                active = [active[i] for i in keep.tolist()]
                keep_rows = (keep.unsqueeze(1) * K + torch.arange(K, device=device)).view(-1)
                alive_logp, rows, tokens, token_logp = alive_logp[keep], rows[keep_rows], tokens[keep_rows], \
                    token_logp[keep_rows]
                fin = {key: value[keep] for key, value in fin.items()}
                if attn is not None:
                    attn = attn[keep_rows]
            self.model.reorder_incremental_state(incremental_states, rows)
            encoder_outs = self.model.reorder_encoder_out(encoder_outs, rows)

        for i, b in enumerate(active):
            done[b] = self._hypotheses(i, fin, tokens, token_logp, attn, alive_logp, steps)
        return done

    def _hypotheses(self, b, fin, tokens, token_logp, attn, alive_logp, steps):
        """Sentence ``b``'s K hypotheses in fairseq's format: the finished ones (best first), then
        alive ones (best first; EOS appended, log P 0) for slots no finished hypothesis filled."""
        out = []
        for k in range(self.beam_size):
            if fin["score"][b, k] > -math.inf:
                n = int(fin["length"][b, k])
                out.append(self._hypothesis(fin["tokens"][b, k, 1:n + 1], fin["score"][b, k],
                                            fin["token_logp"][b, k, :n],
                                            fin["attn"][b, k, :, 1:n + 1] if "attn" in fin else None))
        for k in range(self.beam_size - len(out)):
            row = b * self.beam_size + k
            seq = torch.cat([tokens[row, 1:steps + 1], tokens.new_tensor([self.eos])])
            logp = torch.cat([token_logp[row, :steps], token_logp.new_zeros(1)])
            score = alive_logp[b, k] / self.length_penalty(steps + 1)
            out.append(self._hypothesis(seq, score, logp, attn[row, :, 1:steps + 2] if attn is not None else None))
        return out

    @staticmethod
    def _hypothesis(seq, score, logp, attention):
        return {"tokens": seq, "score": score, "attention": attention if attention is not None else torch.empty(0),
                "alignment": torch.empty(0), "positional_scores": logp}


class PaperBeamSearchWithAlignment(SequenceGeneratorWithAlignment, PaperBeamSearch):
    """``--print-alignment`` with the paper's search: fairseq's alignment generator calls its base
    class's ``_generate``, which this order of bases makes :class:`PaperBeamSearch`'s."""
