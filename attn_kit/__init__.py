"""attn_kit: the library behind attn_plugin's recipes, scripts, benchmarks and tests.

Layers, each importing only the ones above it::

    attn_plugin        the fairseq plugin (--user-dir): model, criterion, schedule, task
    attn_kit           this library: command-line helpers, named model sizes,
                       the paper's numbers, metrics, the recipe pipeline, comparisons
    recipes/ scripts/ benchmarks/ tests/
                       thin entry points and checks over attn_kit

Nothing in attn_kit is needed by fairseq itself: ``--user-dir attn_plugin``
loads the plugin alone. Modules that use fairseq or torch import them where
they are needed, so that light tools (BLEU, EVALB) start fast.
"""
