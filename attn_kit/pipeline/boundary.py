"""The work directory is a boundary: nothing the kit writes, truncates, appends to, moves or deletes at its own
paths there (lock, logs, stamps, set-asides, checkpoints) may resolve outside it through a symbolic link. A link
at such a path is one error line (:func:`refuse_links`, before anything is written), files are opened without
following a last link (:func:`open_no_follow`), and a folder is checked to lie inside before anything is removed
or moved into it (:func:`check_inside`). Links to the user's inputs keep working.
"""
import errno
import os
from pathlib import Path
from typing import Iterable

from ..cli import UserError

# The kit's own names in a work directory or data folder; a folder's entries are the kit's too.
OWN_FILES = (".lock",)
OWN_FOLDERS = (".stages", "logs", "stale", "checkpoints", "canary")


def _link_message(path: Path) -> str:
    return (f"{path} is a symbolic link (to {os.readlink(path)}): the kit keeps its own files there and does "
            "not write through links out of the work directory; remove the link and run again")


def refuse_links(root: Path, own_files: Iterable[str] = OWN_FILES, own_folders: Iterable[str] = OWN_FOLDERS):
    """One UserError if ``root`` holds a symbolic link at one of the kit's own paths: a name of ``own_files``
    or ``own_folders``, or anything below such a folder."""
    root = Path(root)
    for name in own_files:
        if (root / name).is_symlink():
            raise UserError(_link_message(root / name))
    for name in own_folders:
        folder = root / name
        if folder.is_symlink():
            raise UserError(_link_message(folder))
        if folder.is_dir():
            for dirpath, dirnames, filenames in os.walk(folder):  # os.walk does not follow links
                for entry in [*dirnames, *filenames]:
                    if os.path.islink(os.path.join(dirpath, entry)):
                        raise UserError(_link_message(Path(dirpath) / entry))


def open_no_follow(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags | O_NOFOLLOW)``: a link at ``path`` is a UserError, not a file elsewhere."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(_link_message(Path(path))) from None
        raise


def check_inside(path: Path, root: Path):
    """A UserError unless ``path`` (as links resolve) lies inside ``root``, and is not itself a link."""
    path, root = Path(path), Path(root)
    if path.is_symlink():
        raise UserError(_link_message(path))
    resolved, inside = path.resolve(), root.resolve()
    if resolved != inside and inside not in resolved.parents:
        raise UserError(f"{path} resolves to {resolved}, outside {inside}: the kit does not move or delete "
                        "files out of the work directory; remove the link on the way and run again")
