#!/usr/bin/env python
"""Tokenized BLEU as Moses' multi-bleu.perl prints it, and the paper's protocol
(tensor2tensor's get_ende_bleu.sh): ``python scripts/score_bleu.py --help``.
The code is attn_kit.metrics.bleu."""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from attn_kit.cli import main_guard
from attn_kit.metrics.bleu import main

if __name__ == "__main__":
    main_guard(main)
