"""attn_kit: the library behind attn_plugin's recipes, scripts, benchmarks and tests.

Layers, each importing only the ones above it: attn_plugin (the fairseq plugin, loaded alone by
``--user-dir attn_plugin``), attn_kit (command-line helpers, sizes, the paper's numbers, metrics, the
recipe pipeline, comparisons), then recipes/, scripts/, benchmarks/, tests/. It runs from a git
checkout (:mod:`attn_kit.checkout`). Modules import fairseq and torch where they need them, so that
light tools (BLEU, EVALB) start fast.
"""
