#!/usr/bin/env python
"""Print Table 3's rows as attn_plugin flags with their parameter counts.

    python scripts/param_table.py            # markdown table for the README

Counts use a shared 37000-token vocabulary (Sec. 5.1) and are compared with
the paper's "params x 10^6" column where the paper gives one.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab-size", type=int, default=37000, help="shared vocabulary size (default 37000)")
    args = parser.parse_args()
    import logging

    logging.disable(logging.INFO)
    from attn_plugin.table3 import TABLE3_ROWS, build_for_counting, count_parameters

    print("| Table 3 row | change from base | flags on `--arch attn_paper_base` | params (plugin) | params (paper) |")
    print("|---|---|---|---|---|")
    for row, change, flags, paper in TABLE3_ROWS:
        n = count_parameters(build_for_counting(flags, args.vocab_size)) / 1e6
        paper_s = f"{paper}M ({(n - paper) / paper:+.1%})" if paper else "-"
        print(f"| {row} | {change} | `{' '.join(flags) or '(none)'}` | {n:.1f}M | {paper_s} |", flush=True)


if __name__ == "__main__":
    main()
