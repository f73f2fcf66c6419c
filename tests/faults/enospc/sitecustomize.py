"""Test-only (tests/test_faults.py): a full disk for some files.

With this folder first on PYTHONPATH, every Python process of a run (the recipe,
fairseq-train, fairseq-preprocess, the averaging script, ...) imports this
module at start-up (the ``sitecustomize`` hook of Python's ``site``). A write
to a file opened for writing (``open``, ``io.open``, ``Path.open``) whose path
matches the glob in ``$ATTN_TEST_ENOSPC`` fails with ENOSPC, as on a full
disk; everything else is untouched.
"""
import builtins
import errno
import fnmatch
import io
import os

_PATTERN = os.environ.get("ATTN_TEST_ENOSPC")


class _FullDisk:
    """A writable file whose every write fails as on a full disk."""

    def __init__(self, f, path):
        self._f, self._path = f, path

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._path)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()
        return False


def _open(file, mode="r", *args, **kwargs):
    f = _real_open(file, mode, *args, **kwargs)
    if isinstance(file, (str, bytes, os.PathLike)) and any(c in mode for c in "wax+") \
            and fnmatch.fnmatch(os.fsdecode(file), _PATTERN):
        return _FullDisk(f, os.fsdecode(file))
    return f


if _PATTERN:
    _real_open = io.open
    builtins.open = io.open = _open
