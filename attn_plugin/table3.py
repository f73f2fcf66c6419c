"""Table 3 of the paper as command-line flags on ``attn_paper_base``.

Each row: (row label, change from base as the paper states it, extra flags,
the paper's parameter count in millions or None where the paper gives none).
``scripts/param_table.py`` prints the README's table from these rows and the
tests check every count against the paper's column.
"""

TABLE3_ROWS = [
    ("base", "N=6 d_model=512 d_ff=2048 h=8 d_k=d_v=64", [], 65),
    ("A", "h=1, d_k=d_v=512", ["--encoder-attention-heads", "1", "--decoder-attention-heads", "1"], None),
    ("A", "h=4, d_k=d_v=128", ["--encoder-attention-heads", "4", "--decoder-attention-heads", "4"], None),
    ("A", "h=16, d_k=d_v=32", ["--encoder-attention-heads", "16", "--decoder-attention-heads", "16"], None),
    ("A", "h=32, d_k=d_v=16", ["--encoder-attention-heads", "32", "--decoder-attention-heads", "32"], None),
    ("B", "d_k=16", ["--attention-key-dim", "16"], 58),
    ("B", "d_k=32", ["--attention-key-dim", "32"], 60),
    ("C", "N=2", ["--encoder-layers", "2", "--decoder-layers", "2"], 36),
    ("C", "N=4", ["--encoder-layers", "4", "--decoder-layers", "4"], 50),
    ("C", "N=8", ["--encoder-layers", "8", "--decoder-layers", "8"], 80),
    ("C", "d_model=256, d_k=d_v=32", ["--encoder-embed-dim", "256", "--decoder-embed-dim", "256",
                                       "--attention-key-dim", "32", "--attention-value-dim", "32"], 28),
    ("C", "d_model=1024, d_k=d_v=128", ["--encoder-embed-dim", "1024", "--decoder-embed-dim", "1024",
                                         "--attention-key-dim", "128", "--attention-value-dim", "128"], 168),
    ("C", "d_ff=1024", ["--encoder-ffn-embed-dim", "1024", "--decoder-ffn-embed-dim", "1024"], 53),
    ("C", "d_ff=4096", ["--encoder-ffn-embed-dim", "4096", "--decoder-ffn-embed-dim", "4096"], 90),
    ("D", "P_drop=0.0", ["--dropout", "0.0"], None),
    ("D", "P_drop=0.2", ["--dropout", "0.2"], None),
    ("D", "eps_ls=0.0 (criterion flag)", ["--label-smoothing", "0.0"], None),
    ("D", "eps_ls=0.2 (criterion flag)", ["--label-smoothing", "0.2"], None),
    ("E", "learned positional embedding", ["--positional-encoding", "learned"], None),
    ("big", "N=6 d_model=1024 d_ff=4096 h=16 P_drop=0.3", ["--arch", "attn_paper_big"], 213),
]

VOCAB_SIZE = 37000  # the shared EN-DE BPE vocabulary of Sec. 5.1


def build_for_counting(flags, vocab_size=VOCAB_SIZE):
    """Build the model that ``flags`` (on top of ``--arch attn_paper_base``)
    describe, with a shared dictionary of ``vocab_size`` symbols."""
    import os

    from fairseq import options
    from fairseq.data import Dictionary
    from fairseq.tasks.translation import TranslationTask

    dictionary = Dictionary()
    for i in range(vocab_size - len(dictionary)):
        dictionary.add_symbol(f"tok{i}")
    user_dir = os.path.dirname(os.path.abspath(__file__))
    argv = ["unused-data-dir", "--user-dir", user_dir, "--arch", "attn_paper_base",
            "--criterion", "attn_label_smoothed_cross_entropy", *flags]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    task = TranslationTask(args, dictionary, dictionary)
    return task.build_model(args)


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
