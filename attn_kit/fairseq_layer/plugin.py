"""The plugin, imported from the library's own commands.

Importing :mod:`attn_plugin` imports fairseq, which takes seconds, logs "Please
install tensorboardX" (its text_to_speech task, which translation never uses)
and sets up Python's logging at INFO level on import, after which every
library's debug and info lines reach the console. :func:`load` imports a plugin
module without those side effects; commands import the plugin through it, and
only when they need it.
"""
import functools
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


@functools.lru_cache(maxsize=None)
def standalone(module: str):
    """A plugin module that imports nothing (``beam_stop``), loaded from its file without importing the
    plugin package, which imports fairseq: the kit reads the plugin's own rule, not a copy, in a command
    that never loads a model."""
    import importlib.util

    package = importlib.util.find_spec("attn_plugin")  # finds the package without running its __init__
    name = f"attn_plugin_{module}"
    spec = importlib.util.spec_from_file_location(name, f"{package.submodule_search_locations[0]}/{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded
