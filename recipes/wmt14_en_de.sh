#!/usr/bin/env bash
# WMT14 English-German with attn_plugin. `bash recipes/wmt14_en_de.sh --help` for options.
#   bash recipes/wmt14_en_de.sh --bundled    # bundled Tatoeba EN-DE, ~15 min on a 2-core CPU
# Runs from any directory (a relative --workdir is relative to where you are).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
exec "$ATTN_PY" "$ATTN_ROOT/recipes/wmt14.py" --pair en-de "$@"
