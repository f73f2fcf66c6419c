#!/usr/bin/env bash
# Table 3 of the paper as one command: every variation of the base model trained on the EN-DE
# recipe's data, evaluated on the dev set as Sec. 6.2 says, and tabled beside the paper's numbers.
# `bash recipes/table3.sh --help` for options; settings: recipes/configs/table3.yaml.
#   bash recipes/table3.sh --bundled                  # all rows, small, on the bundled data, CPU
#   bash recipes/table3.sh --bundled --rows base,A,C  # some groups or rows
#   bash recipes/table3.sh --ngpus 8 --dry-run        # the paper-scale commands of every row
# Runs from any directory (a relative --workdir is relative to where you are).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
exec "$ATTN_PY" -m attn_kit.recipes.table3 "$@"
