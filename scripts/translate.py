#!/usr/bin/env python
"""Translate raw text with a recipe run's model, exactly as the recipe translated
its test set: ``python scripts/translate.py RUN_DIR < in.txt > out.txt``
(``--help`` for the options). The code is attn_kit.inference.translate."""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from attn_kit.cli import main_guard
from attn_kit.inference.translate import main

if __name__ == "__main__":
    main_guard(main)
