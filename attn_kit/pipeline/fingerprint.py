"""What a file or folder holds, without reading it twice: size and sha256, cached with
the size, mtime and inode it had when hashed (:class:`Fingerprints`), so that a stage's
stamp can tell whether its inputs and outputs are as it left them."""
import json
import os
from pathlib import Path
from typing import Dict, Optional, Sequence

from ..cli import write_json_atomic
from .download import sha256_of


class Fingerprints:
    """Fingerprints of paths under ``root``, cached in ``cache``.

    A stage's stamp records the fingerprints of what it read and what it made
    (:mod:`attn_kit.pipeline.stages`); a later run compares them with the files as
    they are now. Hashing a WMT corpus takes seconds per GB, so each file's sha256
    is cached in ``WORKDIR/.stages/fingerprints.json`` with the size, mtime and
    inode it had when hashed, and computed again only when one of those changed:
    rerunning a finished recipe costs a ``stat`` per file. A file rewritten with
    the same bytes (a stage run again after a kill) keeps its fingerprint, so what
    was made from it stays valid.

    Paths inside the work directory are recorded relative to it, so a copied work
    directory compares equal to the original; so are paths in the folders named ``near``
    (a run's prepared data folder, ``--data-workdir``: ``../wmt14_en_de_data/data-bin/...``),
    so that a run copied together with its data folder does too.
    """

    def __init__(self, root: Path, cache: Path, near: Sequence[Path] = ()):
        self.root, self.cache_path = Path(root), Path(cache)
        self.near = [Path(folder) for folder in near if Path(folder) != self.root]
        try:
            self.cache: Dict[str, dict] = json.loads(self.cache_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self.cache = {}
        self.dirty = False

    def key(self, path) -> str:
        """``path`` relative to the root when it is inside it or in a ``near`` folder
        (``../DATA/...``), else absolute."""
        path = Path(path)
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            pass
        if any(path == folder or folder in path.parents for folder in self.near):
            return Path(os.path.relpath(path, self.root)).as_posix()
        return str(path)

    def _file(self, path: Path) -> dict:
        st = path.stat()
        key = self.key(path)
        seen = self.cache.get(key)
        if not (seen and (seen["size"], seen["mtime_ns"], seen.get("ino")) == (st.st_size, st.st_mtime_ns, st.st_ino)):
            seen = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, "sha256": sha256_of(path)}
            self.cache[key] = seen
            self.dirty = True
        return {"size": seen["size"], "sha256": seen["sha256"]}

    def of(self, path) -> Optional[dict]:
        """A file's ``{"size", "sha256"}``; a folder's ``{"files": {relative path: ...}}``
        (every file below it); None if ``path`` does not exist."""
        path = Path(path)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file())
            return {"files": {p.relative_to(path).as_posix(): self._file(p) for p in files}}
        if not path.exists():
            return None
        return self._file(path)

    def record(self, paths: Sequence) -> Dict[str, Optional[dict]]:
        return {self.key(p): self.of(p) for p in paths}

    def save(self):
        if self.dirty:
            try:
                self.cache_path.parent.mkdir(parents=True, exist_ok=True)
                write_json_atomic(self.cache_path, self.cache)
            except PermissionError:  # a read-only shared folder: the cache only saves hashing next time
                pass
            self.dirty = False


def difference(key: str, before: Optional[dict], now: Optional[dict], since: str = "") -> Optional[str]:
    """How ``key`` changed from ``before`` to ``now`` (fingerprints of :meth:`Fingerprints.of`)
    in words (``since``: when ``before`` was taken, e.g. "since it ran"), or None if it did not."""
    if before == now:
        return None
    if now is None:
        return f"{key} is missing"
    if before is None:
        return f"{key} appeared {since}".rstrip()
    if "files" in before or "files" in now:
        old, new = before.get("files", {}), now.get("files", {})
        for name in sorted(set(old) | set(new)):
            change = difference(f"{key}/{name}", old.get(name), new.get(name), since)
            if change:
                return change
        return f"{key} changed {since}".rstrip()
    detail = (f"{before['size']} -> {now['size']} bytes" if before["size"] != now["size"]
              else "same size, different content")
    return f"{key} changed {since} ({detail})".replace("  ", " ")
