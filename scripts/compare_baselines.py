#!/usr/bin/env python
"""Train attn_plugin's Transformer and its stock fairseq counterpart the same way, and compare them.

    python scripts/compare_baselines.py --bundled --train-minutes 2.5
    python scripts/compare_baselines.py --bundled --max-update 200 --seeds 1 2 3 --threads 1
    python scripts/compare_baselines.py data-bin/wmt14_en_de --arch big --ngpus 8 --max-update 20000

The comparison is lab.compare (``--help`` says everything it does).
"""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from lab.compare.cli import entry

if __name__ == "__main__":
    entry()
