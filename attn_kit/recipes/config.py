"""The recipes' settings, read from ``recipes/configs/<recipe>.yaml``.

A config file is a mapping of named sections, each a mapping of settings (recipe
option names with underscores). :func:`settings` merges the sections a run uses
in order (later ones win); the recipe's command-line options then override the
result (:func:`attn_kit.recipes.settings.compose`). A section whose ``preset``
key names an entry of the file's ``presets`` section is that preset's settings
with the section's own on top (one fact in one place: ``bundled`` is ``presets.small``
on the bundled corpus).
"""
from functools import lru_cache
from typing import Optional

from ..cli import UserError
from ..checkout import CONFIG_DIR, require



@lru_cache(maxsize=None)
def load(recipe: str) -> dict:
    """``recipes/configs/<recipe>.yaml`` as a dict (a UserError naming the file if it cannot be read)."""
    import yaml

    path = require(CONFIG_DIR) / f"{recipe}.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read the recipe settings {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of sections")
    return data


def section(recipe: str, name: str) -> dict:
    """The settings of one section of ``recipe``'s config (``"archs.NAME"`` picks one entry of a
    nested section), a ``preset`` it names expanded (the preset's settings, then its own)."""
    found = load(recipe)
    for part in name.split("."):
        if not isinstance(found, dict) or part not in found:
            raise UserError(f"{CONFIG_DIR / (recipe + '.yaml')}: no section {name!r}")
        found = found[part]
    own = dict(found or {})
    preset = own.pop("preset", None)
    return {**section(recipe, f"presets.{preset}"), **own} if preset else own


class Settings(dict):
    """Merged settings that know their file (``source``), for messages naming a bad value."""
    source = None


def settings(recipe: str, *sections: Optional[str]) -> Settings:
    """The merged settings of ``sections`` (``None`` entries skipped; ``"archs.NAME"``
    picks one entry of a nested section) of ``recipe``'s config."""
    out = Settings()
    out.source = CONFIG_DIR / f"{recipe}.yaml"
    for name in filter(None, sections):
        out.update(section(recipe, name))
    return out


def presets(recipe: str) -> dict:
    """``recipe``'s presets by name (``paper``, the recipe's own defaults, is none of them)."""
    return {name: section(recipe, f"presets.{name}") for name in load(recipe).get("presets", {})}
