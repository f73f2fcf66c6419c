#!/usr/bin/env bash
# WMT14 English-German with attn_plugin. `bash recipes/wmt14_en_de.sh --help` for options;
# settings of every mode: recipes/configs/wmt14.yaml.
#   bash recipes/wmt14_en_de.sh --bundled    # bundled Tatoeba EN-DE, ~15 min on a 2-core CPU
#   bash recipes/wmt14_en_de.sh --smoke --workdir /tmp/w     # every WMT14 stage on CPU in minutes
#   bash recipes/wmt14_en_de.sh --ngpus 8    # the paper's base model on WMT14 (--arch attn_paper_big)
# Runs from any directory (a relative --workdir is relative to where you are).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
ATTN_RECIPE_PAIR=en_de exec "$ATTN_PY" -m attn_kit.recipes.translation --pair en-de "$@"
