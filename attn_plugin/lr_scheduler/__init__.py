"""Learning-rate schedules: the paper's eq. 3."""
from . import attn_inverse_sqrt  # noqa: F401
