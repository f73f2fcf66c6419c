"""Models built exactly as ``fairseq-train`` builds them from its command line (Table 3's parameter counts, the
benchmarks, the tests). Everything here imports fairseq, so it is imported only where a model is built.
"""
from typing import Sequence
from ..checkout import PLUGIN_DIR


def make_dictionary(vocab_size: int):
    """A fairseq Dictionary of ``vocab_size`` symbols (the 4 special ones included)."""
    from fairseq.data import Dictionary

    d = Dictionary()
    for i in range(vocab_size - len(d)):
        d.add_symbol(f"tok{i}")
    return d


def parse_train_args(flags: Sequence[str]):
    """fairseq-train's parsed options for ``flags`` (a data directory is not needed)."""
    from fairseq import options

    argv = ["unused-data-dir", *map(str, flags)]
    return options.parse_args_and_arch(options.get_training_parser(), argv)


def build_model(flags: Sequence[str], dictionary=None, vocab_size: int = 37000, criterion: bool = False):
    """The model (with ``criterion``: ``(model, criterion)``) fairseq-train builds from ``flags``, with one
    shared dictionary (``dictionary`` or ``vocab_size`` symbols)."""
    from fairseq.tasks.translation import TranslationTask

    args = parse_train_args(flags)
    dictionary = dictionary if dictionary is not None else make_dictionary(vocab_size)
    task = TranslationTask(args, dictionary, dictionary)
    model = task.build_model(args)
    return (model, task.build_criterion(args)) if criterion else model


def plugin_flags(*flags: str, arch: str = "attn_paper_base") -> list:
    """``flags`` on top of ``--user-dir attn_plugin --arch ARCH`` and the paper's criterion."""
    return ["--user-dir", str(PLUGIN_DIR), "--arch", arch, "--criterion", "attn_label_smoothed_cross_entropy",
            *flags]


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
