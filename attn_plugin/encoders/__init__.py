"""Tokenizers and BPE that reproduce the recipes' pre-processing inside fairseq
(``--tokenizer``/``--bpe`` of fairseq-interactive, ``from_pretrained``'s hub):

- ``attn_moses``: sacremoses punctuation normalization, then tokenization,
  with the recipes' settings (no HTML escaping, ``-a`` dash splits);
- ``attn_subword_nmt``: subword-nmt BPE with apply-bpe's vocabulary filter
  (``--vocabulary``, ``--vocabulary-threshold``), which fairseq's ``subword_nmt`` lacks;
- ``attn_treebank``: Penn Treebank tokenization of raw English for the parser.
"""
from . import attn_moses, attn_subword_nmt, attn_treebank  # noqa: F401
