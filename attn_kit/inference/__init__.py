"""Using a trained run: translate raw text (:mod:`.translate`), look at its
attention (:mod:`.attention`), export it to CTranslate2 (:mod:`.ctranslate2`) or to Hugging Face
transformers (:mod:`.hf_export`).

All of it starts from a recipe's run directory and its ``inference.json``
(:mod:`attn_plugin.hub`), so raw text goes through exactly the run's
pre-processing and decoding. A run directory is data, never code: its cards
are checked against their schema (:mod:`attn_plugin.run_cards`) before any
use, and no output replaces a folder, or a file without ``--force``
(:func:`attn_kit.cli.check_output`, before any work).
"""
