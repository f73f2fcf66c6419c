#!/usr/bin/env python
"""Decoding with the paper's and fairseq's beam-search stopping rules on a trained run: BLEU every
way and sentences/s, and the cost of --print-alignment (lab.bench.decode_rules; --help)."""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from lab.bench.decode_rules import main
from attn_kit.cli import main_guard

if __name__ == "__main__":
    main_guard(main)
