"""Toy fairseq models for the beam-search tests: an encoder that passes its input through and a
decoder whose next-token log-probabilities a test defines (``logits(prev_output_tokens)``)."""
import torch
from fairseq.models import FairseqEncoder, FairseqIncrementalDecoder


class ToyEncoder(FairseqEncoder):
    def forward(self, src_tokens, src_lengths=None):
        return {"encoder_out": [src_tokens.float().unsqueeze(-1)]}

    def reorder_encoder_out(self, encoder_out, new_order):
        return {"encoder_out": [encoder_out["encoder_out"][0].index_select(0, new_order)]}


class ToyDecoder(FairseqIncrementalDecoder):
    """Recomputes every step from the whole prefix (no state to reorder); subclasses give ``logits``."""

    def logits(self, prev_output_tokens) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None):
        logits = self.logits(prev_output_tokens)
        if incremental_state is not None:
            logits = logits[:, -1:]
        return logits, {"attn": [None]}

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return torch.log_softmax(net_output[0], dim=-1) if log_probs else torch.softmax(net_output[0], dim=-1)

    def max_positions(self):
        return 1024
