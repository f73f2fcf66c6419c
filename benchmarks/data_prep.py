#!/usr/bin/env python
"""The WMT14 recipes' data stages at growing corpus sizes: seconds and peak memory of each part
(tokenize, learn BPE, apply BPE, clean, binarize), fits of how each grows, and projections for
WMT14 EN-DE and EN-FR on 2 and 16 cores.

    pip install wordfreq      # the synthetic corpus's word frequencies (requirements-env.txt has it)
    python benchmarks/data_prep.py                    # 30K, 100K, 300K, 1M pairs; --workers = CPUs

The benchmark is lab.bench.data_prep (``--help`` says how it measures); the corpus is
lab.bench.corpus; the fits and projections are attn_kit.planning.prep_cost.
"""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from lab.bench.data_prep import main
from attn_kit.cli import main_guard

if __name__ == "__main__":
    main_guard(main)
