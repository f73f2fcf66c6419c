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
import pickle
import re

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


def describe_load_error(path, exc: BaseException) -> str:
    """One line saying why ``path`` could not be loaded as a checkpoint."""
    msg = str(exc)
    if isinstance(exc, (FileNotFoundError, IsADirectoryError)):
        return f"checkpoint not found: {path}"
    if isinstance(exc, pickle.UnpicklingError):
        unsafe = re.search(r"GLOBAL ([\w.]+)", msg) or re.search(r"Unsupported global: ([\w.]+)", msg)
        what = f"'{unsafe.group(1)}'" if unsafe else "a type"
        return (f"refused to load {path}: its pickle asks for {what}, which fairseq checkpoints never contain "
                "(loading it could run code); nothing from it was executed")
    if isinstance(exc, (RuntimeError, EOFError, ValueError)) and re.search(
            r"zip archive|PytorchStreamReader|Ran out of input|EOF|invalid load key|magic number", msg):
        return f"{path} is truncated or not a PyTorch checkpoint ({msg.splitlines()[0][:120]})"
    if isinstance(exc, (KeyError, TypeError, AttributeError)):
        return f"{path} is not a fairseq checkpoint (unexpected content: {type(exc).__name__}: {msg[:120]})"
    return f"cannot load checkpoint {path}: {type(exc).__name__}: {msg.splitlines()[0][:200] if msg else ''}"


def load_checkpoint(path, mmap: bool = False) -> dict:
    """``torch.load`` a fairseq checkpoint safely; raise CheckpointError if it is not one.
    ``mmap``: map the tensors instead of reading them (cheap when only metadata is wanted)."""
    allow_fairseq_checkpoint_types()
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
