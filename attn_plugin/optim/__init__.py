"""Optimizers: the paper's Adam (Sec. 5.3) in torch's fused kernels."""
from . import attn_adam  # noqa: F401
