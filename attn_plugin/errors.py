"""Errors the plugin reports to a user as one line, without a traceback.

Importing the plugin installs a ``sys.excepthook`` that prints an uncaught
:class:`AttnPluginError` as ``error: <message>`` and exits with status 1; any
other exception keeps Python's usual report.
"""
import sys


class AttnPluginError(Exception):
    """A problem with the user's input that the message fully explains."""


class ConfigError(AttnPluginError, ValueError):
    """Options that do not fit together (or with the data)."""


class CheckpointError(AttnPluginError, RuntimeError):
    """A checkpoint file that is missing, truncated, foreign or unsafe."""


def _excepthook(exc_type, exc, tb, _previous=sys.excepthook):
    if issubclass(exc_type, AttnPluginError):
        print(f"error: {exc}", file=sys.stderr)
        return
    _previous(exc_type, exc, tb)


def install_excepthook():
    if sys.excepthook is not _excepthook:
        sys.excepthook = _excepthook
