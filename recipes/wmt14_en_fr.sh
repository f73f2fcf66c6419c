#!/usr/bin/env bash
# WMT14 English-French with attn_plugin. `bash recipes/wmt14_en_fr.sh --help` for options;
# settings of every mode: recipes/configs/wmt14.yaml.
#   bash recipes/wmt14_en_fr.sh --smoke --workdir /tmp/w     # every stage on CPU in minutes
#   bash recipes/wmt14_en_fr.sh --arch attn_paper_big        # the paper's big EN-FR model on 8 GPUs
# Runs from any directory (a relative --workdir is relative to where you are).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
ATTN_RECIPE_PAIR=en_fr exec "$ATTN_PY" -m attn_kit.recipes.translation --pair en-fr "$@"
