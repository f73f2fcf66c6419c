"""Where the kit finds the checkout it runs from, defined once.

attn_kit is used from a git checkout (``pip install -e .``): the recipes' settings, the
bundled data, the results files and ``runs/`` live beside the code, not inside a wheel.
:func:`require` turns a missing one into one error line that says so.
"""
from pathlib import Path

from .cli import UserError

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = REPO / "attn_plugin"  # fairseq's --user-dir
CONFIG_DIR = REPO / "recipes" / "configs"


def require(path: Path) -> Path:
    """``path`` (part of the checkout), or a UserError saying the kit runs from a checkout."""
    if not Path(path).exists():
        raise UserError(f"{path} is missing: attn_kit runs from a git checkout of this project "
                        "(git clone, then pip install -e .), not from an installed copy")
    return Path(path)
