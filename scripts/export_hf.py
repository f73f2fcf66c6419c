#!/usr/bin/env python
"""Export a recipe run's evaluated model as a Hugging Face transformers model with its tokenizer:
``python scripts/export_hf.py RUN_DIR --output DIR``, then
``AutoModelForSeq2SeqLM.from_pretrained(DIR)`` and ``AutoTokenizer.from_pretrained(DIR)``
(``--help`` for the options). The code is attn_kit.inference.hf_export."""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from attn_kit.cli import main_guard
from attn_kit.inference.hf_export import main

if __name__ == "__main__":
    main_guard(main)
