"""attn_plugin: "Attention Is All You Need" (Vaswani et al., 2017) for fairseq.

``fairseq-train --user-dir attn_plugin ...`` imports this package, which
registers the model and its architectures (``attn_plugin.models``), the
criterion (``attn_plugin.criterions``) and the learning-rate schedule
(``attn_plugin.lr_scheduler``), the translation task with the paper's
length penalty (``attn_plugin.tasks``), the tokenizers and BPE that reproduce
the recipes' pre-processing (``attn_plugin.encoders``), and applies the plugin's few changes to
torch, fairseq and Python, all listed in :mod:`attn_plugin.fairseq_patches`
(fairseq loads checkpoints with torch's safe unpickler on; a refused or broken
checkpoint is one ``error:`` line).

The plugin is self-contained: it imports nothing from ``attn_kit`` (the library
of the recipes, scripts and tests), which may import it.
"""
import logging as _logging

# Importing fairseq imports its text_to_speech task, which logs "Please install tensorboardX" (an optional
# package of a task translation never uses): held back while the plugin imports fairseq, its level after as before
_tts = _logging.getLogger("fairseq.tasks.text_to_speech")
_tts_level = _tts.level
_tts.setLevel(max(_tts_level, _logging.WARNING))
try:
    from . import fairseq_patches

    fairseq_patches.refuse_second_copy(__name__)  # before anything registers: fairseq registers each name once
    from . import criterions, encoders, lr_scheduler, models, optim, tasks  # noqa: F401
finally:
    _tts.setLevel(_tts_level)

fairseq_patches.install()

__version__ = "0.1.0"
