#!/usr/bin/env python
"""What training costs before it starts: analytic FLOPs of any arch and flags, beside the
paper's Table 2 cost (whose arithmetic it reproduces), and a wall-time estimate on a GPU:
``python scripts/training_cost.py --help``. The code is attn_kit.recipes.cost_report."""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from attn_kit.cli import main_guard
from attn_kit.recipes.cost_report import main

if __name__ == "__main__":
    main_guard(main)
