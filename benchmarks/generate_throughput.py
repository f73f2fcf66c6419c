#!/usr/bin/env python
"""Beam-search generation throughput: attn_plugin's Transformer against stock fairseq's.

    python benchmarks/generate_throughput.py                           # CPU, shapes small and base
    python benchmarks/generate_throughput.py --ngpus 1 --precision bf16    # GPU, shapes base and big

The benchmark is lab.bench.generate (``--help`` says everything it measures).
"""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from lab.bench.generate import main
from attn_kit.cli import main_guard

if __name__ == "__main__":
    main_guard(main)
