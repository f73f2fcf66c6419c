#!/usr/bin/env python
"""Real source and target tokens per update under fairseq's batching (``attn_kit.planning.tokens_per_update``; ``--help`` for its options)."""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from attn_kit.cli import main_guard
from attn_kit.planning.tokens_per_update import main

if __name__ == "__main__":
    main_guard(main)
