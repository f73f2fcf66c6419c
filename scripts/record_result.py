#!/usr/bin/env python
"""Run a command and file what it printed as a results file for README (``attn_kit.results``;
``--help`` for its options)."""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from attn_kit.cli import main_guard
from attn_kit.results import record_main

if __name__ == "__main__":
    main_guard(record_main)
