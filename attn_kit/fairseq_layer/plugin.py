"""The plugin, imported from the library's own commands.

Importing :mod:`attn_plugin` imports fairseq, which takes seconds, logs "Please
install tensorboardX" (its text_to_speech task, which translation never uses)
and sets up Python's logging at INFO level on import, after which every
library's debug and info lines reach the console. :func:`load` imports a plugin
module without those side effects; commands import the plugin through it, and
only when they need it.
"""
import importlib
import logging
import warnings


def load(module: str = "attn_plugin"):
    """Import ``module`` (``attn_plugin`` or one of its submodules) quietly; return it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)
    try:
        return importlib.import_module(module)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def quiet_inference():
    """No fairseq info lines and no torch warning about pinned memory on a CPU-only machine
    while a command loads and runs a model for the user (its own progress lines stay)."""
    logging.getLogger("fairseq").setLevel(logging.WARNING)
    logging.getLogger("attn_plugin").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
