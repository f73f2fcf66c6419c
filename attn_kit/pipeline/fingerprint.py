"""What a file or folder holds, without reading it twice (:class:`Fingerprints`), so that a stage's stamp can
tell whether its inputs and outputs are as it left them."""
import os
from pathlib import Path
from typing import Dict, Optional, Sequence

from ..cli import write_json_atomic
from .download import read_json_or, sha256_of


class Fingerprints:
    """Fingerprints (size, sha256) of paths under ``root``. Each file's sha256 is cached in ``cache``
    (``WORKDIR/.stages/fingerprints.json``) with the size, mtime and inode it had when hashed and computed again
    only when one of those changed: rerunning a finished recipe costs a ``stat`` per file, and a file rewritten
    with the same bytes keeps its fingerprint. Paths inside ``root`` or a ``near`` folder (``--data-workdir``)
    are recorded relative to ``root``, so a work directory copied with its data folder compares equal.
    """

    def __init__(self, root: Path, cache: Path, near: Sequence[Path] = ()):
        self.root, self.cache_path = Path(root), Path(cache)
        self.near = [Path(folder) for folder in near if Path(folder) != self.root]
        self.cache: Dict[str, dict] = read_json_or(self.cache_path, {})
        self.dirty = False

    def key(self, path) -> str:
        """``path`` relative to the root when inside it or a ``near`` folder (``../DATA/...``), else absolute."""
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
        """A file's ``{"size", "sha256"}``; a folder's ``{"files": {relative path: ...}}``; None if missing."""
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
    """How ``key`` changed from ``before`` to ``now`` (:meth:`Fingerprints.of`) ``since`` when, in words, or None."""
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
