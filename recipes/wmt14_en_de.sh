#!/usr/bin/env bash
# WMT14 English-German with attn_plugin. `bash recipes/wmt14_en_de.sh --help` for options.
#   bash recipes/wmt14_en_de.sh --bundled    # bundled Tatoeba EN-DE, ~15 min on a 2-core CPU
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/env.sh
exec "$ATTN_PY" recipes/wmt14.py --pair en-de "$@"
