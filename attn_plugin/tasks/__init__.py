"""Tasks: fairseq's translation task with the paper's decoding (Sec. 6.1)."""
from . import attn_translation  # noqa: F401
