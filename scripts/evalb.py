#!/usr/bin/env python
"""EVALB with COLLINS.prm settings: ``python scripts/evalb.py GOLD TEST`` prints what
``evalb -p COLLINS.prm GOLD TEST`` prints. The code is attn_kit.metrics.evalb."""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from attn_kit.cli import main_guard
from attn_kit.metrics.evalb import main

if __name__ == "__main__":
    main_guard(main)
