#!/usr/bin/env python
"""Average the parameters of several fairseq checkpoints (Sec. 6.1), with
fairseq's flags; the last N always end at the run's final update.

    python scripts/average_checkpoints.py --inputs ckpts/ --num-update-checkpoints 5 --output avg.pt

Everything is in :mod:`attn_kit.fairseq_layer.checkpoints` (``--help`` lists the flags).
"""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from attn_kit.fairseq_layer.checkpoints import main
from attn_kit.cli import main_guard

if __name__ == "__main__":
    main_guard(main)
