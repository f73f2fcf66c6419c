"""The plugin-vs-stock-fairseq benchmarks (``benchmarks/train_throughput.py``,
``benchmarks/generate_throughput.py``) and what they share.

Both benchmarks build attn_plugin's Transformer and stock fairseq's
``transformer`` at the same shape through fairseq's own option parser, task and
registries (exactly what ``fairseq-train`` / ``fairseq-generate`` build), run
them on the same synthetic batch in the same process, alternating which goes
first, and report medians over the repeats.

Peak memory ("peak bytes") is the most memory one model's work held at once:
its parameters, gradients and optimizer state plus everything allocated while
it ran. On CUDA it comes from ``torch.cuda.max_memory_allocated`` (with the
other model's resident tensors subtracted, since both live on the device); on
CPU, where torch keeps no allocator statistics,
:class:`attn_kit.bench.measure.PeakMemory` counts the bytes of every tensor
storage alive, op by op, in an untimed extra pass.

Modules: models (the shapes, both models, the synthetic batch), measure
(timing, peak memory, FLOPs), harness (the shared command line, the trials,
the table and the JSON results file), train and generate (the two benchmarks);
ctranslate2 and ctranslate2_run (generate's ``--ctranslate2`` rows: the plugin
against CTranslate2 on a synthetic batch, and a trained run's fairseq-generate
against CTranslate2 on its test set).
"""
