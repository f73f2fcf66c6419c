"""Imported first by every entry script under scripts/ and benchmarks/ (benchmarks/_environment.py
links here): run by a Python that lacks the project's packages (a system python3, another
environment), the script says in one line which command sets it up, instead of an import traceback.
It looks the packages up without importing them, so it costs nothing where they are."""
import importlib.util
import sys

NEEDED = ("attn_kit", "attn_plugin", "lab", "fairseq", "torch", "yaml")  # the project, and what importing it needs


def check():
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        sys.exit(f"error: this Python ({sys.executable}) lacks the project's environment (no {', '.join(missing)}): "
                 "in the checkout, `source scripts/env.sh` sets it up (./.venv, once) and puts it first on PATH; "
                 "then run the command again")


check()
