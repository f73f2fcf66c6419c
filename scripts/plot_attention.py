#!/usr/bin/env python
"""The paper's Figures 3-5 for any sentence: a run's attention weights as Fig. 3's lines and
as heatmaps, and as numbers (``--dump``): ``python scripts/plot_attention.py RUN_DIR --sentence "..."
--output fig.png``. The code is attn_kit.inference.attention."""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from attn_kit.cli import main_guard
from attn_kit.inference.attention import main

if __name__ == "__main__":
    main_guard(main)
