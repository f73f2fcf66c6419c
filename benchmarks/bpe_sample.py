#!/usr/bin/env python
"""What learning BPE on a sample of the training pairs costs in BLEU: the bundled run's settings on a
Tatoeba corpus, BPE learned on every pair and on the WMT14 recipe's share of them, the same seeds.

    python benchmarks/bpe_sample.py --source ../shared/data/tatoeba/fra-eng.txt --lang fr

The benchmark is lab.bench.bpe_sample (``--help`` says what runs); README's statement of the
sample's cost is generated from its results file (recipes/results/bpe_sample_en_fr.json).
"""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from lab.bench.bpe_sample import main
from attn_kit.cli import main_guard

if __name__ == "__main__":
    main_guard(main)
