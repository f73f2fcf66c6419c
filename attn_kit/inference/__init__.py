"""Using a trained run: translate raw text (:mod:`.translate`), look at its
attention (:mod:`.attention`), export it to CTranslate2 (:mod:`.ctranslate2`).

All of it starts from a recipe's run directory and its ``inference.json``
(:mod:`attn_plugin.hub`), so raw text goes through exactly the run's
pre-processing and decoding.
"""
