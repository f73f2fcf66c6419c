"""The recipes' settings, read from ``recipes/configs/<recipe>.yaml``.

A config file is a mapping of named sections, each a mapping of settings (recipe
option names with underscores). :func:`settings` merges the sections a run uses
in order (later ones win); the recipe's command-line options then override the
result (:func:`attn_kit.recipes.common.apply_settings`).
"""
from functools import lru_cache
from pathlib import Path
from typing import Optional

from ..cli import UserError

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO / "recipes" / "configs"


@lru_cache(maxsize=None)
def load(recipe: str) -> dict:
    """``recipes/configs/<recipe>.yaml`` as a dict (a UserError naming the file if it cannot be read)."""
    import yaml

    path = CONFIG_DIR / f"{recipe}.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read the recipe settings {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of sections")
    return data


def settings(recipe: str, *sections: Optional[str]) -> dict:
    """The merged settings of ``sections`` (``None`` entries skipped; ``"archs.NAME"``
    picks one entry of a nested section) of ``recipe``'s config."""
    cfg, out = load(recipe), {}
    for name in filter(None, sections):
        section = cfg
        for part in name.split("."):
            if not isinstance(section, dict) or part not in section:
                raise UserError(f"{CONFIG_DIR / (recipe + '.yaml')}: no section {name!r}")
            section = section[part]
        out.update(section or {})
    return out
