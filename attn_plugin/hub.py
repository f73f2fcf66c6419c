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
     "paths": ["bpe_codes", "bpe_vocabulary"],   # args that name files in RUN_DIR
     "generation": {"beam": 4, "max_len_a": 1, "max_len_b": 50},
     "batch_size": 128}

``AttnTransformerModel.from_pretrained(RUN_DIR)`` reads it and returns
fairseq's hub interface (:class:`AttnHubInterface`), whose ``translate`` runs
the same tokenizer, BPE, checkpoint and decoding settings as the recipe's test
set; keyword arguments override any of them (``beam=5``, ``gnmt_alpha=1.0``,
``checkpoint_file="checkpoints/checkpoint_last.pt"``, ``tokenizer=None`` for
text that is already tokenized). :func:`interactive_command` is the
fairseq-interactive command line that does the same.
"""
import json
import os
from pathlib import Path
from typing import List, Optional

from fairseq.hub_utils import GeneratorHubInterface, from_pretrained as fairseq_from_pretrained

from .errors import ConfigError

RUN_CARD = "inference.json"
USER_DIR = str(Path(__file__).resolve().parent)


def read_run_card(run_dir) -> dict:
    """``RUN_DIR/inference.json``, or a one-line :class:`ConfigError` saying what is missing."""
    run_dir = Path(run_dir)
    card = run_dir / RUN_CARD
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such run directory (give the --workdir of a recipe run)")
    if not card.is_file():
        raise ConfigError(f"{run_dir} has no {RUN_CARD}: it is written when a recipe run has averaged its "
                          "checkpoints (the average stage); finish the run first")
    try:
        info = json.loads(card.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {card}: {exc}") from None
    checkpoint = run_dir / info["checkpoint"]
    if not checkpoint.is_file():
        raise ConfigError(f"{checkpoint} is missing: the run has not averaged its checkpoints yet (or it was "
                          "deleted); run the recipe's average stage")
    return info


def resolved_args(run_dir, info: dict) -> dict:
    """The card's fairseq options, with the files it names made absolute paths in ``run_dir``."""
    args = dict(info["args"])
    for name in info.get("paths", []):
        if args.get(name):
            args[name] = str(Path(run_dir).resolve() / args[name])
    return args


class AttnHubInterface(GeneratorHubInterface):
    """fairseq's :class:`GeneratorHubInterface` whose ``translate`` decodes with the
    run's beam size unless told otherwise (fairseq's defaults to 5)."""

    def translate(self, sentences, beam: Optional[int] = None, verbose: bool = False, **kwargs):
        return self.sample(sentences, beam or self.cfg.generation.beam, verbose, **kwargs)


def from_pretrained(run_dir, checkpoint_file: Optional[str] = None, data_name_or_path: Optional[str] = None,
                    **overrides) -> AttnHubInterface:
    """Load RUN_DIR's evaluated model with its pre-processing and decoding settings
    (see the module docstring); ``overrides`` are fairseq options (``beam``,
    ``gnmt_alpha``, ``lenpen``, ``max_len_b``, ``tokenizer``, ``bpe``, ``cpu``, ...)."""
    info = read_run_card(run_dir)
    run_dir = Path(run_dir).resolve()
    generation = dict(info.get("generation", {}))
    for key in list(overrides):
        if key in ("beam", "max_len_a", "max_len_b", "lenpen", "nbest", "sampling", "unkpen"):
            generation[key] = overrides.pop(key)
    kwargs = {**resolved_args(run_dir, info), **overrides}
    if "lenpen" in generation and "gnmt_alpha" not in overrides:
        kwargs["gnmt_alpha"] = None  # fairseq's --lenpen asked for: the GNMT penalty steps aside
    if info.get("batch_size"):
        kwargs.setdefault("batch_size", info["batch_size"])
        kwargs.setdefault("max_tokens", None)
    loaded = fairseq_from_pretrained(
        str(run_dir), checkpoint_file=checkpoint_file or info["checkpoint"],
        data_name_or_path=data_name_or_path or str(run_dir / info["data"]), generation_args=generation, **kwargs)
    return AttnHubInterface(loaded["args"], loaded["task"], loaded["models"])


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
    for name, value in info.get("generation", {}).items():
        cmd += _flag(name, value)
    batch = str(info.get("batch_size") or 32)
    return cmd + ["--buffer-size", batch, "--batch-size", batch] + ([] if _cuda() else ["--cpu"])


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available() and not os.environ.get("CUDA_VISIBLE_DEVICES") == ""
