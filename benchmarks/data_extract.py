#!/usr/bin/env python
"""The WMT14 recipes' extract stage on this machine: how fast an archive is checked (sha256) and
unpacked and its text joined, and how much Moses tokenization grows a pair's text; the recipes'
--dry-run projects extraction time and disk from its results file.

    python benchmarks/data_extract.py         # archives of 192 MB of newstest text, 3 repeats

The benchmark is lab.bench.data_extract (``--help`` says how it measures); the projections
are attn_kit.planning.prep_cost.
"""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from lab.bench.data_extract import main
from attn_kit.cli import main_guard

if __name__ == "__main__":
    main_guard(main)
