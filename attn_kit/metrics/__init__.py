"""Scores, each checked against the official tool's rules: BLEU (multi-bleu.perl and tensor2tensor's
get_ende_bleu.sh), EVALB (COLLINS.prm), and the tree linearization of Vinyals et al. (2015) with its repairs."""
