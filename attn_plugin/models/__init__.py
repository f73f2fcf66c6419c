"""Models: the paper's Transformer (``attn_transformer``) and its architectures."""
from . import attn_transformer  # noqa: F401
