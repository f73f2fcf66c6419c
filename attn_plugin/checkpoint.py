"""Loading fairseq checkpoints with torch's safe unpickler switched on.

torch >= 2.6 loads with ``weights_only=True``: the unpickler rebuilds tensors
and plain containers only, and refuses any other global a pickle names (a
pickle that names ``os.system`` could otherwise run it). Checkpoints written by
fairseq's main branch hold only such plain data; older fairseq (0.10-0.12.2)
and its published models also pickle the training options as an
``argparse.Namespace``, and meters may hold numpy scalars. Exactly those types
are added to torch's allow-list (:data:`FAIRSEQ_CHECKPOINT_GLOBALS`); the safe
loading stays on. Anything else is refused with a :class:`CheckpointError`
that names the file and the offending global, before any of it runs.

Data-parallel resume: rank 0 loads the checkpoint (safely, as above) and sends
the loaded state to the other ranks with ``torch.save``/``torch.load``; by then
fairseq has turned the options into an omegaconf ``DictConfig``. The receiving
``torch.load`` keeps ``weights_only=True`` and is allowed exactly the omegaconf
container types of that state (:func:`broadcast_state_globals`), only while it runs.

This module holds the loading rules and both allow-lists; importing the plugin
(``--user-dir attn_plugin``) applies them to fairseq's own loader, which
fairseq-train (resume), fairseq-generate and fairseq-interactive all use, and
to its broadcast: see :mod:`attn_plugin.fairseq_patches`.
"""
import argparse
import os
import pickle
import re
import zipfile
from typing import Optional

import numpy as np
import torch

from .errors import CheckpointError

FAIRSEQ_CHECKPOINT_GLOBALS = [
    argparse.Namespace,  # state["args"] in checkpoints of fairseq <= 0.12.2
    np.dtype,  # numpy scalars in logged meters: a scalar pickles as (dtype, bytes)
    type(np.dtype(np.float64)),
    type(np.dtype(np.float32)),
    type(np.dtype(np.int64)),
]
try:  # numpy >= 2 names the scalar reconstructor numpy._core.multiarray.scalar
    from numpy._core.multiarray import scalar as _np_scalar
except ImportError:  # numpy 1.x
    from numpy.core.multiarray import scalar as _np_scalar
FAIRSEQ_CHECKPOINT_GLOBALS.append(_np_scalar)


def allow_fairseq_checkpoint_types():
    """Add the types fairseq checkpoints contain to torch's safe-load allow-list."""
    torch.serialization.add_safe_globals(FAIRSEQ_CHECKPOINT_GLOBALS)


LEGACY_TORCH_MAGIC = bytes.fromhex("80028a0a6cfc9c46f9206aa85019")  # how torch's pre-1.6 format begins


def not_a_checkpoint(path) -> Optional[str]:
    """Why the file ``path`` cannot be a checkpoint ``torch.save`` wrote, judged by its size and
    first bytes only (cheap), or None. Checked before ``torch.load`` sees a file: torch reads
    anything else as a raw pickle, with a warning of its own before the refusal."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(LEGACY_TORCH_MAGIC))
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not head:
        return "is empty (0 bytes): it was created but never written"
    if head != LEGACY_TORCH_MAGIC and not head.startswith(b"PK"):
        return f"is not a PyTorch checkpoint: it begins with {head[:8]!r}, not the zip archive torch.save writes"
    return None


def damaged(path) -> Optional[str]:
    """Why the file ``path`` is not a complete checkpoint as ``torch.save`` writes it (a zip
    archive holding ``data.pkl``, each member passing its CRC check), in words, or None if it
    is one. Reads the file but unpickles nothing. Files in torch's legacy format cannot be
    checked without loading them and count as complete."""
    what = not_a_checkpoint(path)
    if what:
        return what
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            if f.read(len(LEGACY_TORCH_MAGIC)) == LEGACY_TORCH_MAGIC:
                return None
        with zipfile.ZipFile(path) as archive:
            if not any(name == "data.pkl" or name.endswith("/data.pkl") for name in archive.namelist()):
                return "is a zip archive but not a PyTorch checkpoint (no data.pkl in it)"
            bad = archive.testzip()
            if bad:
                return f"is damaged: its member {bad} fails its CRC check"
    except zipfile.BadZipFile:
        return f"is truncated: not a complete zip archive ({size} bytes)"
    except (OSError, EOFError) as exc:
        return f"cannot be read ({exc})"
    return None


def describe_load_error(path, exc: BaseException) -> str:
    """One line saying why ``path`` could not be loaded as a checkpoint."""
    msg = str(exc)
    if isinstance(exc, (FileNotFoundError, IsADirectoryError)):
        return f"checkpoint not found: {path}"
    unsafe = re.search(r"Unsupported global: GLOBAL ([\w.]+)", msg) or re.search(r"GLOBAL ([\w.]+)", msg)
    if isinstance(exc, pickle.UnpicklingError) and unsafe:
        return (f"refused to load {path}: its pickle asks for '{unsafe.group(1)}', which fairseq checkpoints never "
                "contain (loading it could run code); nothing from it was executed")
    what = damaged(path) if os.path.isfile(path) else None
    if what:
        hint = ("; a run killed or a disk filled while saving leaves such files: use another checkpoint"
                if what.startswith(("is truncated", "is empty", "is damaged")) else "")
        return f"{path} {what}{hint}"
    if isinstance(exc, (KeyError, TypeError, AttributeError)):
        return f"{path} is not a fairseq checkpoint (unexpected content: {type(exc).__name__}: {msg[:120]})"
    if isinstance(exc, (EOFError, pickle.UnpicklingError)):
        return f"{path} is truncated or not a PyTorch checkpoint ({type(exc).__name__}: {msg.splitlines()[0][:120] if msg else 'ran out of input'})"
    return f"cannot load checkpoint {path}: {type(exc).__name__}: {msg.splitlines()[0][:200] if msg else ''}"


_SIZE_MISMATCH = re.compile(r"size mismatch for ([\w.]+): copying a param with shape torch\.Size\((\[[^\]]*\])\) "
                            r"from checkpoint, the shape in current model is torch\.Size\((\[[^\]]*\])\)")


def describe_model_error(paths, exc: BaseException) -> Optional[str]:
    """One line for the two ways building a model from checkpoint ``paths`` fails on the
    user's input (fairseq's ``load_model_ensemble_and_task``), or None for anything else:
    a file that is not there, and weights that do not fit the model the data and options
    make (a checkpoint trained with another dictionary: fairseq's size-mismatch traceback)."""
    missing = re.fullmatch(r"Model file not found: (.*)", str(exc))
    if isinstance(exc, OSError) and missing:
        return f"checkpoint not found: {missing.group(1)} (--path)"
    mismatch = _SIZE_MISMATCH.search(str(exc))
    if isinstance(exc, RuntimeError) and mismatch:
        name, theirs, ours = mismatch.groups()
        vocab = " (the vocabulary: it was trained with another dictionary)" if "embed_tokens" in name else ""
        return (f"{':'.join(map(str, paths))} does not fit this data and model: {name} is {theirs} in the checkpoint "
                f"but {ours} here{vocab}; use the data-bin and options it was trained with")
    return None


def load_checkpoint(path, mmap: bool = False) -> dict:
    """``torch.load`` a fairseq checkpoint safely; raise CheckpointError if it is not one.
    ``mmap``: map the tensors instead of reading them (cheap when only metadata is wanted)."""
    allow_fairseq_checkpoint_types()
    what = not_a_checkpoint(path) if os.path.isfile(path) else None
    if what:
        raise CheckpointError(f"{path} {what}")
    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        except RuntimeError:
            if not mmap:  # a file in torch's legacy format cannot be mapped: read it whole
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 -- every failure becomes one clear line
        raise CheckpointError(describe_load_error(path, exc)) from None
    if not isinstance(state, dict) or "model" not in state:
        raise CheckpointError(f"{path} is not a fairseq checkpoint (no 'model' entry)")
    return state


def broadcast_state_globals() -> list:
    """What a rank > 0 may unpickle of the checkpoint state rank 0 broadcasts:
    fairseq's placeholder for each tensor (the tensors travel separately), the
    omegaconf containers of the options, and the plain types they hold."""
    import collections
    import typing

    from fairseq.distributed.utils import _TensorPlaceholder
    from omegaconf import DictConfig, ListConfig
    from omegaconf.base import ContainerMetadata, Metadata
    from omegaconf.nodes import AnyNode

    return [_TensorPlaceholder, DictConfig, ListConfig, ContainerMetadata, Metadata, AnyNode, typing.Any,
            collections.defaultdict, dict, list, int]
