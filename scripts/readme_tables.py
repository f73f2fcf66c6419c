#!/usr/bin/env python
"""The tables of README.md and docs/*.md, made from the committed results files (``lab.readme_tables``; ``--help`` for its options)."""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from attn_kit.cli import main_guard
from lab.readme_tables import main

if __name__ == "__main__":
    main_guard(main)
