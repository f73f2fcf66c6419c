#!/usr/bin/env python
"""Make the bundled EN-DE corpus (data/tatoeba-en-de/) and the EN-FR smoke sample from Tatoeba (``attn_kit.recipes.bundled_data``; ``--help`` for its options)."""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from attn_kit.cli import main_guard
from attn_kit.recipes.bundled_data import main

if __name__ == "__main__":
    main_guard(main)
