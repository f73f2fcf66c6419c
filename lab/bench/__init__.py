"""The plugin-vs-stock-fairseq benchmarks (``benchmarks/train_throughput.py``,
``benchmarks/generate_throughput.py``): both models built at the same shape exactly as
fairseq-train / fairseq-generate build them, run on the same synthetic batch in one process,
alternating which goes first; medians over the repeats, and peak memory (CUDA: the allocator's
peak less the other model's resident tensors; CPU: :class:`lab.bench.measure.PeakMemory`).

Modules: models (shapes, models, batch), measure (timing, memory, FLOPs), harness (command
line, trials, table, results file), train and generate (the benchmarks), ctranslate2 and
ctranslate2_run (generate's ``--ctranslate2`` rows), corpus and data_prep (data preparation),
decode_rules (a trained run's test set under each beam-search stopping rule).
"""
