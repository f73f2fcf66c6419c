#!/usr/bin/env bash
# Run attn_plugin's test suite (sets up ./.venv first if no suitable environment is active).
# Two tiers, marked by tests/conftest.py: slow (a test that trains a model, decodes with a trained one
# or runs a recipe end to end) and quick (every other test: the plugin and the libraries, in a few minutes).
#   bash scripts/test.sh                        # everything (CI: .ci/run)
#   bash scripts/test.sh --quick                # the quick tier only: pytest -m quick
#   bash scripts/test.sh -k parity              # extra arguments go to pytest
#   bash scripts/test.sh tests/test_model.py    # named files or tests instead of the whole suite
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/env.sh
where=(tests)
args=()
for arg in "$@"; do
  case "$arg" in
    --quick) args+=(-m quick) ;;
    tests/*|./tests/*) where=(); args+=("$arg") ;;
    *) args+=("$arg") ;;
  esac
done
# Every test process runs one thread (tests/conftest.py sets OMP_NUM_THREADS=1 unless set), so one pytest worker per
# core (at most 4) uses the machine; whole files go to a worker, which makes their module fixtures once
# (conftest.made_once makes the session ones once for all workers).
# The suite starts hundreds of Python processes (recipes, fairseq commands, the kit's commands); with
# PYTHONDONTWRITEBYTECODE set (some containers set it) each compiles the project's modules again
# (__pycache__ is git-ignored)
unset PYTHONDONTWRITEBYTECODE
workers=()
if "$ATTN_PY" -c 'import xdist' 2>/dev/null; then
  cores=$("$ATTN_PY" -c 'import os; print(min(4, len(os.sched_getaffinity(0))))')
  [ "$cores" -gt 1 ] && workers=(-n "$cores" --dist loadfile)
fi
exec "$ATTN_PY" -m pytest -q -p no:cacheprovider "${workers[@]}" "${where[@]}" "${args[@]}"
