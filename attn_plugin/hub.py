"""A recipe's run directory as a model you load once and use: fairseq's hub
convention (``from_pretrained``) and the matching fairseq-interactive command.

Every recipe writes ``RUN_DIR/inference.json`` (:data:`RUN_CARD`) next to the
checkpoint it evaluated. It says, in fairseq's own option names, how the run
turned raw text into model input and decoded it::

    {"kind": "translation",                 # or "parsing"
     "checkpoint": "checkpoint_avg.pt",      # the average the recipe scored
     "data": "data-bin",                     # the dictionaries
     "args": {"task": "attn_translation", "source_lang": "en", "target_lang": "de",
              "tokenizer": "attn_moses", "bpe": "attn_subword_nmt",
              "bpe_codes": "bpe/codes", "bpe_vocabulary": "bpe/vocab.en",
              "bpe_vocabulary_threshold": 50, "gnmt_alpha": 0.6},
     "paths": ["bpe_codes", "bpe_vocabulary"],   # args that name files (relative to RUN_DIR)
     "generation": {"beam": 4, "max_len_a": 1, "max_len_b": 50},
     "batch_size": 128}

A run directory may come from anyone, so the card is data, never code: it is checked against
its schema (:mod:`attn_plugin.run_cards`: known keys and types only, no ``user_dir``, every file
it names inside RUN_DIR and of the right kind) before anything of it is used. A run whose data
was prepared in a shared ``--data-workdir`` names that folder as ``"data_workdir":
"../wmt14_en_de_data"`` and its data and BPE files in it (``"../wmt14_en_de_data/data-bin"``):
relative to RUN_DIR, so that a run copied with its data folder beside it loads where it lands.

``AttnTransformerModel.from_pretrained(RUN_DIR)`` reads it and returns
fairseq's hub interface (:class:`AttnHubInterface`), whose ``translate`` runs
the same tokenizer, BPE, checkpoint and decoding settings as the recipe's test
set; keyword arguments override any of them (``beam=5``, ``gnmt_alpha=1.0``,
``checkpoint_file="checkpoints/checkpoint_last.pt"``, ``tokenizer=None`` for
text that is already tokenized). :func:`interactive_command` is the
fairseq-interactive command line that does the same.
"""
import contextlib
import logging
import os
import warnings
from pathlib import Path
from typing import List, Optional, Sequence

from fairseq.hub_utils import GeneratorHubInterface

from .checkpoint import not_a_checkpoint
from .errors import CheckpointError
from .run_cards import RUN_CARD, read_run_card, resolved_args  # noqa: F401 -- the card's schema and reader

USER_DIR = str(Path(__file__).resolve().parent)
# torch's warning that fairseq's data loader asks for pinned memory on a machine without an accelerator
_PIN_MEMORY = "'pin_memory' argument is set as true"


@contextlib.contextmanager
def quiet(loggers: Sequence[str] = ("fairseq", "attn_plugin")):
    """While a model loads or decodes for the caller: the info lines of ``loggers`` held back (their
    warnings, which ask for an action, still pass) and torch's pinned-memory warning (nothing to act
    on). Only those loggers change, and only until the block ends: the root logger and the caller's
    other loggers are left as they are."""
    saved = [(logger, logger.level) for logger in map(logging.getLogger, loggers)]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_PIN_MEMORY, category=UserWarning)
        try:
            for logger, _ in saved:
                logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
            yield
        finally:
            for logger, level in saved:
                logger.setLevel(level)


class AttnHubInterface(GeneratorHubInterface):
    """fairseq's :class:`GeneratorHubInterface` whose ``translate`` decodes with the
    run's beam size unless told otherwise (fairseq's defaults to 5), quietly (:func:`quiet`;
    ``verbose=True`` still logs each sentence, as fairseq's does)."""

    def translate(self, sentences, beam: Optional[int] = None, verbose: bool = False, **kwargs):
        return self.sample(sentences, beam or self.cfg.generation.beam, verbose, **kwargs)

    def generate(self, *args, **kwargs):
        with quiet(["attn_plugin"]):  # the task's notes on the beam search it builds
            return super().generate(*args, **kwargs)

    def _build_batches(self, *args, **kwargs):
        with quiet():  # fairseq's batching notes; its data loader's pinned memory
            return super()._build_batches(*args, **kwargs)


def from_pretrained(run_dir, checkpoint_file: Optional[str] = None, data_name_or_path: Optional[str] = None,
                    ignore_changed_files: bool = False, **overrides) -> AttnHubInterface:
    """Load RUN_DIR's evaluated model with its pre-processing and decoding settings
    (see the module docstring); ``overrides`` are fairseq options (``beam``,
    ``gnmt_alpha``, ``lenpen``, ``max_len_b``, ``tokenizer``, ``bpe``, ``cpu``, ...).
    The run's dictionaries and BPE files must hold what the run made (``ignore_changed_files``: load
    them all the same)."""
    from fairseq import checkpoint_utils

    info = read_run_card(run_dir, check_files=not ignore_changed_files)
    run_dir = Path(run_dir).resolve()
    generation = dict(info["generation"])
    for key in list(overrides):
        if key in ("beam", "max_len_a", "max_len_b", "lenpen", "nbest", "sampling", "unkpen"):
            generation[key] = overrides.pop(key)
    kwargs = {**resolved_args(run_dir, info), **overrides}
    if "lenpen" in generation and "gnmt_alpha" not in overrides:
        kwargs["gnmt_alpha"] = None  # fairseq's --lenpen asked for: the GNMT penalty steps aside
    if info["batch_size"]:
        kwargs.setdefault("batch_size", info["batch_size"])
        kwargs.setdefault("max_tokens", None)
    checkpoint = run_dir / (checkpoint_file or info["checkpoint"])
    if checkpoint_file:  # the card's own was checked with the card; torch never sees a raw pickle
        if not checkpoint.is_file():
            raise CheckpointError(f"checkpoint not found: {checkpoint}")
        what = not_a_checkpoint(checkpoint)
        if what:
            raise CheckpointError(f"{checkpoint} {what}")
    kwargs["data"] = data_name_or_path or str(run_dir / info["data"])
    # what fairseq's hub_utils.from_pretrained does, without what it adds: importing a --user-dir,
    # taking BPE files found in the folder (code, bpecodes, ...) over the card's, archives and URLs
    with quiet():
        models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)], arg_overrides=kwargs)
    for key, value in generation.items():
        setattr(cfg["generation"], key, value)
    return AttnHubInterface(cfg, task, models)


def _flag(name: str, value) -> List[str]:
    if value is None or value is False:
        return []
    if value is True:
        return [f"--{name.replace('_', '-')}"]
    return [f"--{name.replace('_', '-')}", str(value)]


def interactive_command(run_dir) -> List[str]:
    """The fairseq-interactive command that translates raw text on stdin as RUN_DIR's
    recipe did its test set (one translation a line with ``grep ^D-``)."""
    info = read_run_card(run_dir)
    run_dir = Path(run_dir).resolve()
    args = resolved_args(run_dir, info)
    cmd = ["fairseq-interactive", str(run_dir / info["data"]), "--user-dir", USER_DIR,
           "--path", str(run_dir / info["checkpoint"])]
    for name, value in args.items():
        cmd += _flag(name, value)
    for name, value in info["generation"].items():
        cmd += _flag(name, value)
    batch = str(info["batch_size"] or 32)
    return cmd + ["--buffer-size", batch, "--batch-size", batch] + ([] if _cuda() else ["--cpu"])


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available() and not os.environ.get("CUDA_VISIBLE_DEVICES") == ""
