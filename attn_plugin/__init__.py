"""attn_plugin: "Attention Is All You Need" (Vaswani et al., 2017) for fairseq.

``fairseq-train --user-dir attn_plugin ...`` imports this package, which
registers the model and its architectures (``attn_plugin.models``), the
criterion (``attn_plugin.criterions``) and the learning-rate schedule
(``attn_plugin.lr_scheduler``), the translation task with the paper's
length penalty (``attn_plugin.tasks``), and lets fairseq load checkpoints with torch's
safe unpickler on (``attn_plugin.checkpoint``).
"""
from . import criterions, lr_scheduler, models, tasks  # noqa: F401
from .checkpoint import allow_fairseq_checkpoint_types, patch_fairseq_broadcast, patch_fairseq_loader
from .errors import install_excepthook

allow_fairseq_checkpoint_types()
patch_fairseq_loader()
patch_fairseq_broadcast()
install_excepthook()

__version__ = "0.1.0"
