"""The plugin, imported from the library's own commands.

Importing :mod:`attn_plugin` imports fairseq, which takes seconds, logs "Please
install tensorboardX" (its text_to_speech task, which translation never uses)
and sets up Python's logging at INFO level on import, after which every
library's debug and info lines reach the console. :func:`load` imports a plugin
module without those side effects; commands import the plugin through it, and
only when they need it.
"""
import importlib
import importlib.util
import logging
import sys
import types
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


# The plugin's folder as a package of another name: its modules that import no fairseq, loaded without running
# attn_plugin/__init__.py (which imports fairseq, seconds of CPU, and registers the plugin's components)
STANDALONE = "attn_plugin_standalone"


def standalone(module: str):
    """A plugin module that imports no fairseq (``beam_stop``; ``checkpoint``, with the ``errors`` it imports)
    as a submodule of :data:`STANDALONE`: the kit applies the plugin's own rules, not copies of them, in
    commands that never build a model. Its classes are not the plugin's (``attn_plugin.errors.CheckpointError``
    is another class than this copy's)."""
    if STANDALONE not in sys.modules:
        package = types.ModuleType(STANDALONE, "attn_plugin's modules that import no fairseq")
        package.__path__ = list(importlib.util.find_spec("attn_plugin").submodule_search_locations)  # runs no code
        sys.modules[STANDALONE] = package
    return importlib.import_module(f"{STANDALONE}.{module}")
