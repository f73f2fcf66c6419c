#!/usr/bin/env bash
# WSJ constituency parsing (Sec. 6.3, Table 4) with attn_plugin. `bash recipes/wsj_parsing.sh --help` for options;
# settings of every mode: recipes/configs/wsj.yaml.
#   bash recipes/wsj_parsing.sh --smoke --workdir W   # every stage on the repo's own tiny trees, minutes on a CPU
#   bash recipes/wsj_parsing.sh --ptb /data/treebank_3 # WSJ only, the paper's setting (8 GPUs)
#   bash recipes/wsj_parsing.sh --ptb /data/treebank_3 --tune   # tune on section 22 as Sec. 6.3, then test once
# Runs from any directory (a relative --workdir or --ptb is relative to where you are).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
exec "$ATTN_PY" -m attn_kit.recipes.wsj "$@"
