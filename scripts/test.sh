#!/usr/bin/env bash
# Run attn_plugin's test suite (sets up ./.venv first if no suitable environment is active).
#   bash scripts/test.sh            # everything
#   bash scripts/test.sh -k parity  # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/env.sh
exec "$ATTN_PY" -m pytest -q -p no:cacheprovider tests "$@"
