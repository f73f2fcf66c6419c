"""Errors the plugin reports to a user as one line, without a traceback.

Importing the plugin installs :func:`excepthook` as ``sys.excepthook``
(:mod:`attn_plugin.fairseq_patches` lists it with the other patches): an
uncaught :class:`AttnPluginError` in fairseq-train, fairseq-generate, ... is
printed as the one line :func:`error_line` makes and the process exits with
status 1; any other exception keeps Python's usual report.

The library reports the same errors from its own commands
(``attn_kit.cli.main_guard``) with ``attn_kit.cli.error_line``. The plugin
cannot import the library (``--user-dir attn_plugin`` loads the plugin
alone), so the two functions are written twice and must agree:
tests/test_registration.py checks that both print the same line for the same
message.
"""
import sys


class AttnPluginError(Exception):
    """A problem with the user's input that the message fully explains."""


class ConfigError(AttnPluginError, ValueError):
    """Options that do not fit together (or with the data)."""


class CheckpointError(AttnPluginError, RuntimeError):
    """A checkpoint file that is missing, truncated, foreign or unsafe."""


def error_line(message) -> str:
    """The one line a failure is reported as: ``error: <message>`` (newlines
    folded). Must agree with ``attn_kit.cli.error_line`` (see the module docstring)."""
    text = " ".join(str(message).split("\n")).strip()
    return text if text.startswith("error: ") else f"error: {text}"


def excepthook(exc_type, exc, tb, _previous=sys.excepthook):
    """``sys.excepthook``: an :class:`AttnPluginError` as one line, anything else as Python reports it."""
    if issubclass(exc_type, AttnPluginError):
        print(error_line(exc), file=sys.stderr, flush=True)
        return
    _previous(exc_type, exc, tb)
