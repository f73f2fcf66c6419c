"""attn_kit: the library behind attn_plugin's recipes and scripts, all that a user's run needs. The
project's own measuring and describing code (benchmarks, the GPU check, the generated tables) is the
top-level package ``lab`` (with the comparison with stock fairseq, scripts/compare_baselines.py), which
imports the kit; nothing here imports it (tests/test_imports.py).

Layers, each importing only the ones below it (tests/test_imports.py):

- attn_kit.recipes and attn_kit.inference: the commands (the recipes, translate, attention);
- the runtime under them: attn_kit.fairseq_layer (every fairseq command, log, checkpoint and data
  file the kit handles), attn_kit.planning (sizes, the paper's numbers, cost and time projections),
  attn_kit.metrics (BLEU, EVALB), attn_kit.pipeline (the stage engine), and the modules every layer
  shares: cli (one-line errors, atomic writes), checkout, textio, results.

attn_plugin (the fairseq plugin, loaded alone by ``--user-dir attn_plugin``) imports nothing from here.
It runs from a git checkout (:mod:`attn_kit.checkout`). Modules import fairseq and torch where they
need them, so that light tools (BLEU, EVALB) start fast.
"""
