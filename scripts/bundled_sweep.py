#!/usr/bin/env python
"""The sweep that chose the bundled run's settings (``lab.sweep``; ``--help`` for its options)."""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from attn_kit.cli import main_guard
from lab.sweep import main

if __name__ == "__main__":
    main_guard(main)
