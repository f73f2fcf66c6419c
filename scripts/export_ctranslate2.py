#!/usr/bin/env python
"""Export a recipe run's evaluated model to CTranslate2:
``python scripts/export_ctranslate2.py RUN_DIR OUT_DIR [--quantization int8]``, then
``python scripts/translate.py --engine ctranslate2 OUT_DIR < in.txt > out.txt``
(``--help`` for the options). The code is attn_kit.inference.ctranslate2."""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
from attn_kit.cli import main_guard
from attn_kit.inference.ctranslate2 import main

if __name__ == "__main__":
    main_guard(main)
