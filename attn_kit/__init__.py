"""attn_kit: the library behind attn_plugin's recipes, scripts, benchmarks and tests.

Layers, each importing only the ones below it (tests/test_imports.py):

- attn_kit.tools: development and benchmarking tools no recipe imports (bench, compare, readme_tables,
  code_stats, faults);
- attn_kit.recipes and attn_kit.inference: the commands (the recipes, translate, attention);
- the runtime under them: attn_kit.fairseq_layer (every fairseq command, log, checkpoint and data
  file the kit handles), attn_kit.planning (sizes, the paper's numbers, cost and time projections),
  attn_kit.metrics (BLEU, EVALB), attn_kit.pipeline (the stage engine), and the modules every layer
  shares: cli (one-line errors, atomic writes), checkout, textio, results.

attn_plugin (the fairseq plugin, loaded alone by ``--user-dir attn_plugin``) imports nothing from here.
It runs from a git checkout (:mod:`attn_kit.checkout`). Modules import fairseq and torch where they
need them, so that light tools (BLEU, EVALB) start fast.
"""
