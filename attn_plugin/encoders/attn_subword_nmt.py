"""``--bpe attn_subword_nmt``: subword-nmt's BPE as ``subword-nmt apply-bpe``
runs it, vocabulary filter included.

The recipes learn joint BPE with ``learn-joint-bpe-and-vocab`` and apply it
with ``--vocabulary vocab.LANG --vocabulary-threshold 50``: a merge whose result
occurs fewer than 50 times in that language's training text is undone, so rare
subwords become known smaller ones. fairseq's ``subword_nmt`` BPE cannot read
a vocabulary, so on raw input it makes segmentations the model never saw."""
from dataclasses import dataclass, field
from typing import Optional

from fairseq.data.encoders import register_bpe
from fairseq.dataclass import FairseqDataclass

from ..errors import ConfigError


@dataclass
class AttnSubwordNMTConfig(FairseqDataclass):
    bpe_codes: str = field(default="???", metadata={"help": "BPE codes (subword-nmt learn-bpe's output)"})
    bpe_separator: str = field(default="@@", metadata={"help": "BPE continuation marker"})
    bpe_vocabulary: Optional[str] = field(default=None, metadata={
        "help": "apply-bpe --vocabulary: the source language's vocabulary file of learn-joint-bpe-and-vocab "
                "(word and count per line); only subwords it holds at least --bpe-vocabulary-threshold times "
                "are produced"})
    bpe_vocabulary_threshold: Optional[int] = field(default=None, metadata={
        "help": "apply-bpe --vocabulary-threshold (the recipes: 50)"})


@register_bpe("attn_subword_nmt", dataclass=AttnSubwordNMTConfig)
class AttnSubwordNMTBPE:
    def __init__(self, cfg: AttnSubwordNMTConfig):
        from subword_nmt.apply_bpe import BPE, read_vocabulary

        if not cfg.bpe_codes or cfg.bpe_codes == "???":
            raise ConfigError("--bpe attn_subword_nmt needs --bpe-codes (the codes file the recipe learned)")
        vocab = None
        try:
            if cfg.bpe_vocabulary:
                with open(cfg.bpe_vocabulary, encoding="utf-8") as f:
                    vocab = read_vocabulary(f, cfg.bpe_vocabulary_threshold)
            with open(cfg.bpe_codes, encoding="utf-8") as codes:
                self.bpe = BPE(codes, separator=cfg.bpe_separator, vocab=vocab)
        except OSError as exc:
            raise ConfigError(f"cannot read {exc.filename}: {exc.strerror}") from None
        self.bpe_symbol = cfg.bpe_separator + " "

    def encode(self, x: str) -> str:
        return self.bpe.process_line(x)

    def decode(self, x: str) -> str:
        return (x + " ").replace(self.bpe_symbol, "").rstrip()
