"""Train attn_plugin's Transformer and its stock fairseq counterpart the same way, and compare them.

    python scripts/compare_baselines.py --bundled --train-minutes 2.5
    python scripts/compare_baselines.py data-bin/wmt14_en_de --arch big --ngpus 8 --max-update 20000
    python scripts/compare_baselines.py --bundled --max-update 300 --seeds 1 2 3   # seed-to-seed noise

Both sides get the same data, batch, Adam, learning-rate values (eq. 3; stock's inverse_sqrt set to
match it), label smoothing, seed, sizes and budget, train one after the other, and are scored the
same way; WORKDIR/comparison.{md,json,png} hold the result. What each side runs and how the budget,
precision and scores work: docs/benchmarks.md, "Comparing with stock fairseq".
"""
