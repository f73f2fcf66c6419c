"""Completeness checks of a stage's outputs (:attr:`attn_kit.pipeline.stages.Stage.check`; binarized data:
:func:`attn_kit.fairseq_layer.fairseq_data.binarized`), each a UserError naming the file and what is wrong."""
from pathlib import Path
from typing import Iterable, Tuple

from ..cli import UserError
from .text import count_lines


def parallel_text(pairs: Iterable[Tuple[Path, Path]]):
    """Each (source, target) pair of files has one line per sentence pair on both sides."""
    for a, b in pairs:
        na, nb = count_lines(a), count_lines(b)
        if na != nb:
            raise UserError(f"{a} has {na} lines but {b} has {nb}; parallel files must have one line per "
                            "sentence pair")
