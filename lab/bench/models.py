"""The benchmarks' model shapes, both models of a shape built through fairseq, and
the synthetic batch they run on."""
from dataclasses import dataclass
from typing import Optional, Sequence

from attn_kit.fairseq_layer.build import build_model
from lab.pairs import arch_size, model_flags
from attn_kit.planning.sizes import SIZES, ModelSize


@dataclass(frozen=True)
class Shape:
    pair: str                         # lab.pairs.PAIRS: the plugin's arch and stock fairseq's
    vocab: int                        # the shared vocabulary of the synthetic batches
    size: Optional[ModelSize] = None  # None: the archs' own (Table 3's base / big)

    @property
    def dims(self) -> ModelSize:
        """N, d_model, d_ff, h and P_drop the models have."""
        return self.size or arch_size(self.pair)


SHAPES = {
    # The bundled model (attn_kit.planning.sizes.SIZES["bundled"]) at P_drop 0.1, the benchmark's own setting:
    # benchmarks/results/ were measured with it (the bundled recipe has trained with P_drop 0 since).
    "small": Shape("base", 8000, SIZES["bundled"].replace(p_drop=0.1)),
    # Table 3's base and big: attn_paper_base / attn_paper_big against their stock archs, each at its own sizes.
    "base": Shape("base", 32000),
    "big": Shape("big", 32000),
}


def shape_flags(which: str, shape: str, sinusoid_layout: str = "paper", plugin_extra: Sequence[str] = ()):
    """fairseq-train flags for the plugin or stock fairseq at ``shape`` (same sizes, dropout and
    label smoothing 0.1); ``plugin_extra``: more flags for the plugin only (e.g. --compile-layers)."""
    s = SHAPES[shape]
    return model_flags(which, s.pair, s.size, label_smoothing=0.1,
                       plugin_extra=["--sinusoid-layout", sinusoid_layout, *plugin_extra])


def build(which: str, shape: str, dictionary, seed: int, sinusoid_layout: str = "paper", plugin_extra=()):
    """(model, criterion) as fairseq-train builds them from the command line, weights from ``seed``."""
    import torch

    torch.manual_seed(seed)
    return build_model(shape_flags(which, shape, sinusoid_layout, plugin_extra), dictionary, criterion=True)


def make_sample(dictionary, n_sentences: int, src_len: int, tgt_len: int, seed: int, device):
    """A fairseq translation batch: left-padded sources with lengths between 70% and 100% of ``src_len``,
    right-padded targets likewise (as fairseq batches them), random tokens."""
    import torch
    from fairseq.utils import apply_to_sample

    g = torch.Generator().manual_seed(seed)
    pad, eos, V = dictionary.pad(), dictionary.eos(), len(dictionary)

    def lengths(n):
        return torch.randint(max(1, int(0.7 * n)), n + 1, (n_sentences,), generator=g)

    src_lengths, tgt_lengths = lengths(src_len), lengths(tgt_len)
    src = torch.full((n_sentences, src_len), pad)
    target = torch.full((n_sentences, tgt_len), pad)
    prev = torch.full((n_sentences, tgt_len), pad)
    for i in range(n_sentences):
        s, t = int(src_lengths[i]), int(tgt_lengths[i])
        src[i, src_len - s:] = torch.randint(dictionary.nspecial, V, (s,), generator=g)
        src[i, -1] = eos
        target[i, :t] = torch.randint(dictionary.nspecial, V, (t,), generator=g)
        target[i, t - 1] = eos
        prev[i, 0] = eos
        prev[i, 1:t] = target[i, : t - 1]
    sample = {
        "id": torch.arange(n_sentences), "nsentences": n_sentences, "ntokens": int(tgt_lengths.sum()),
        "net_input": {"src_tokens": src, "src_lengths": src_lengths, "prev_output_tokens": prev},
        "target": target,
    }
    return apply_to_sample(lambda t: t.to(device), sample)
