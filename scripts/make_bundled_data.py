#!/usr/bin/env python
"""Make the bundled EN-DE corpus (data/tatoeba-en-de/) and the EN-FR smoke sample from Tatoeba (``lab.bundled_data``; ``--help`` for its options)."""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from attn_kit.cli import main_guard
from lab.bundled_data import main

if __name__ == "__main__":
    main_guard(main)
