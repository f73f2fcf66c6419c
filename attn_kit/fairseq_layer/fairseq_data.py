"""fairseq's binarized data read back: the check a binarize stage's output passes before it is trusted
(:func:`binarized`), a UserError naming the file and what is wrong."""
import struct
from pathlib import Path
from typing import Iterable

from ..cli import UserError

MMAP_MAGIC = b"MMIDIDX\x00\x00"
_HEADER = len(MMAP_MAGIC) + 8 + 1 + 8
# fairseq.data.indexed_dataset._code_to_dtype: code -> bytes per token
_ITEMSIZE = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 8, 7: 8, 8: 2, 9: 4, 10: 8}


def fairseq_dataset(prefix: Path) -> int:
    """The number of sentences in ``prefix.idx`` / ``prefix.bin`` after checking that the two agree.
    fairseq-preprocess's ``mmap`` format: the ``.idx`` holds the header (magic, version 1 ``<Q``, dtype code
    ``<B``, N ``<Q``), N int32 sizes and N int64 byte offsets; the ``.bin`` exactly sum(sizes) tokens."""
    import numpy as np

    idx, bin_ = Path(f"{prefix}.idx"), Path(f"{prefix}.bin")
    for path in (idx, bin_):
        if not path.is_file():
            raise UserError(f"{path} is missing")
    with open(idx, "rb") as f:
        header = f.read(_HEADER)
    if len(header) < _HEADER or header[:len(MMAP_MAGIC)] != MMAP_MAGIC:
        what = "too short" if len(header) < _HEADER else "no MMIDIDX header"
        raise UserError(f"{idx} is not a fairseq index (mmap format): {what}")
    version, code, n = struct.unpack("<QBQ", header[len(MMAP_MAGIC):])
    if version != 1 or code not in _ITEMSIZE:
        raise UserError(f"{idx}: unknown index version {version} or dtype code {code}")
    expected_idx = _HEADER + 12 * n
    if idx.stat().st_size != expected_idx:
        raise UserError(f"{idx} is {idx.stat().st_size} bytes but its header says {n} sentences "
                        f"({expected_idx} bytes): truncated or damaged")
    sizes = np.fromfile(idx, dtype="<i4", count=n, offset=_HEADER).astype(np.int64)
    pointers = np.fromfile(idx, dtype="<i8", count=n, offset=_HEADER + 4 * n)
    item = _ITEMSIZE[code]
    if n and (sizes.min() < 0 or pointers[0] != 0 or np.any(pointers[1:] != pointers[:-1] + sizes[:-1] * item)):
        raise UserError(f"{idx}: sentence sizes and offsets disagree: damaged")
    expected_bin = int(sizes.sum()) * item
    if bin_.stat().st_size != expected_bin:
        raise UserError(f"{bin_} is {bin_.stat().st_size} bytes but {idx} describes {n} sentences in "
                        f"{expected_bin} bytes: truncated, or the two come from different runs")
    return n


def binarized(data_bin: Path, src: str, tgt: str, splits: Iterable[str]):
    """Both dictionaries are there, and every split's two sides are consistent datasets of as many sentences."""
    for lang in (src, tgt):
        if not (Path(data_bin) / f"dict.{lang}.txt").is_file():
            raise UserError(f"{Path(data_bin) / f'dict.{lang}.txt'} is missing")
    for split in splits:
        base = Path(data_bin) / f"{split}.{src}-{tgt}"
        n_src, n_tgt = fairseq_dataset(Path(f"{base}.{src}")), fairseq_dataset(Path(f"{base}.{tgt}"))
        if n_src != n_tgt:
            raise UserError(f"{base}.{src}.idx holds {n_src} sentences but {base}.{tgt}.idx {n_tgt}")
