"""``--tokenizer attn_moses``: Moses punctuation normalization and tokenization
(sacremoses) as the recipes run them, and Moses detokenization of the output.

fairseq's own ``moses`` tokenizer skips normalize-punctuation.perl and escapes
``& < > ' "`` as HTML entities by default; a model trained on the recipes'
text (normalized, unescaped, ``-a``) then sees input it was not trained on.
Each step is a flag, so any Moses set-up can be described."""
from dataclasses import dataclass, field

from fairseq.data.encoders import register_tokenizer
from fairseq.dataclass import FairseqDataclass


@dataclass
class AttnMosesConfig(FairseqDataclass):
    source_lang: str = field(default="en", metadata={"help": "source language (Moses rules for tokenizing)"})
    target_lang: str = field(default="en", metadata={"help": "target language (Moses rules for detokenizing)"})
    moses_no_normalize: bool = field(default=False, metadata={
        "help": "skip Moses' punctuation normalization (normalize-punctuation.perl), which the recipes apply "
                "before tokenizing"})
    moses_escape: bool = field(default=False, metadata={
        "help": "escape & < > ' \" | [ ] as HTML entities (tokenizer.perl's default; the recipes do not)"})
    moses_no_dash_splits: bool = field(default=False, metadata={
        "help": "keep hyphenated words whole (the recipes split them: tokenizer.perl -a, a-b -> a @-@ b)"})


@register_tokenizer("attn_moses", dataclass=AttnMosesConfig)
class AttnMosesTokenizer:
    def __init__(self, cfg: AttnMosesConfig):
        from sacremoses import MosesDetokenizer, MosesPunctNormalizer, MosesTokenizer

        self.cfg = cfg
        self.normalizer = None if cfg.moses_no_normalize else MosesPunctNormalizer(lang=cfg.source_lang)
        self.tok = MosesTokenizer(lang=cfg.source_lang)
        self.detok = MosesDetokenizer(lang=cfg.target_lang)

    def encode(self, x: str) -> str:
        x = x.strip()
        if self.normalizer is not None:
            x = self.normalizer.normalize(x)
        return self.tok.tokenize(x, escape=self.cfg.moses_escape,
                                 aggressive_dash_splits=not self.cfg.moses_no_dash_splits, return_str=True)

    def decode(self, x: str) -> str:
        return self.detok.detokenize(x.split())
