#!/usr/bin/env python
"""How the code is built (lines per folder, longest functions, args/setattr counts, import
cycles, README lines): ``python scripts/code_stats.py [--root CHECKOUT] [--json]``."""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from attn_kit.cli import main_guard
from lab.code_stats import main

if __name__ == "__main__":
    main_guard(main)
