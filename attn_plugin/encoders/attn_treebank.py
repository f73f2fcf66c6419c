"""``--tokenizer attn_treebank``: raw English split into Penn Treebank tokens
(NLTK's TreebankWordTokenizer: ``"`` -> `````/``''``, ``don't`` -> ``do n't``,
brackets -> ``-LRB-`` ...), the input of the parsing model (Sec. 6.3), whose
training words are the treebank's own. Its output, a bracket sequence, is
left as it is."""
from dataclasses import dataclass

from fairseq.data.encoders import register_tokenizer
from fairseq.dataclass import FairseqDataclass


@dataclass
class AttnTreebankConfig(FairseqDataclass):
    pass


@register_tokenizer("attn_treebank", dataclass=AttnTreebankConfig)
class AttnTreebankTokenizer:
    def __init__(self, cfg: AttnTreebankConfig):
        from nltk.tokenize.treebank import TreebankWordTokenizer

        self.tok = TreebankWordTokenizer()

    def encode(self, x: str) -> str:
        return " ".join(self.tok.tokenize(x.strip(), convert_parentheses=True))

    def decode(self, x: str) -> str:
        return x
