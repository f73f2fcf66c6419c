#!/usr/bin/env python
"""Print Table 3's rows as attn_plugin flags with their parameter counts.

    python scripts/param_table.py            # markdown table for the README

Counts use a shared 37000-token vocabulary (Sec. 5.1) and are compared with
the paper's "params x 10^6" column where the paper gives one.
"""
if __name__ == "__main__":
    import _environment  # noqa: F401 -- one line, not a traceback, where this Python lacks the project
import argparse
import logging

from attn_kit.fairseq_layer.build import build_model, count_parameters, plugin_flags
from attn_kit.cli import ArgumentParser, Number, main_guard
from attn_kit.planning.paper import EN_DE_VOCAB, TABLE3


def main(argv=None):
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab-size", type=Number(int, minimum=1), default=EN_DE_VOCAB,
                        help=f"shared vocabulary size (default {EN_DE_VOCAB})")
    args = parser.parse_args(argv)
    logging.disable(logging.INFO)
    print("| Table 3 row | change from base | flags on `--arch attn_paper_base` | params (plugin) | params (paper) |")
    print("|---|---|---|---|---|")
    for row in TABLE3:
        n = count_parameters(build_model(plugin_flags(*row.flags()), vocab_size=args.vocab_size)) / 1e6
        paper = f"{row.params}M ({(n - row.params) / row.params:+.1%})" if row.params else "-"
        print(f"| {row.group} | {row.describe()} | `{' '.join(row.flags()) or '(none)'}` | {n:.1f}M | {paper} |",
              flush=True)


if __name__ == "__main__":
    main_guard(main)
