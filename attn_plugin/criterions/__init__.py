"""Criteria: the paper's label-smoothed cross-entropy."""
from . import attn_label_smoothed_cross_entropy  # noqa: F401
