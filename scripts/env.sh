# shellcheck shell=bash
# Find or build the Python environment that attn_plugin's scripts run in.
#
#   source scripts/env.sh     # then: "$ATTN_PY" ..., fairseq-train ... (on PATH)
#
# 1. If an environment is already active (VIRTUAL_ENV or CONDA_PREFIX) and its
#    python imports fairseq, sacremoses, subword_nmt and sacrebleu, use it as is.
#    This is how a GPU user runs: install the torch build for your GPU, then
#    fairseq and this package, activate, and run the recipes.
# 2. Otherwise create (or reuse) ./.venv next to the repo and install into it:
#    torch==2.13.0 (a CPU wheel; pinned so that pip never pulls a multi-GB CUDA
#    build here), fairseq-fixed (fairseq's main branch with the Python 3.11
#    fixes, built from source against that torch: about 5 minutes once), the
#    packages in requirements-env.txt and this package (editable).
# A stamp file records a finished install, so later calls cost nothing; an
# interrupted install is simply redone (pip skips what is already there).
ATTN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export ATTN_ROOT

_attn_env_ok() {
  (cd / && "$1" -c 'import fairseq, sacremoses, subword_nmt, sacrebleu, torch' >/dev/null 2>&1)
}

# The stamped ./.venv passed _attn_env_ok when it was set up; later calls only check that the packages
# are still there, without importing fairseq and torch (seconds, paid by every recipe command).
_attn_env_present() {
  (cd / && "$1" -c 'import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in ("fairseq", "sacremoses", "subword_nmt", "sacrebleu", "torch")))' \
    >/dev/null 2>&1)
}

_attn_env_setup() {
  local venv="$ATTN_ROOT/.venv" stamp="$ATTN_ROOT/.venv/.attn_plugin_env"
  local want
  want="$(cat "$ATTN_ROOT/requirements-env.txt" "$ATTN_ROOT/setup.py" | cksum)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && _attn_env_present "$venv/bin/python"; then
    ATTN_PY="$venv/bin/python"
    return 0
  fi
  local base_py="${ATTN_BASE_PYTHON:-}"
  if [ -z "$base_py" ]; then
    for cand in python3.11 python3 python; do
      if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] < (3, 8))' 2>/dev/null; then
        base_py="$cand"; break
      fi
    done
  fi
  if [ -z "$base_py" ]; then
    echo "error: no python3 found; install Python 3.11 (or set ATTN_BASE_PYTHON)" >&2
    return 1
  fi
  echo "[env] setting up $venv (once; building fairseq takes about 5 minutes)" >&2
  if [ ! -x "$venv/bin/python" ]; then
    "$base_py" -m venv "$venv" || { echo "error: could not create $venv with $base_py -m venv" >&2; return 1; }
  fi
  local pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q)
  if ! "$venv/bin/python" -c 'import torch' >/dev/null 2>&1; then
    echo "[env] installing torch==2.13.0 (CPU)" >&2
    "${pip[@]}" torch==2.13.0 || { echo "error: pip could not install torch==2.13.0 into $venv" >&2; return 1; }
  fi
  echo "[env] installing build tools and fairseq's runtime dependencies" >&2
  "${pip[@]}" setuptools wheel -r "$ATTN_ROOT/requirements-env.txt" \
    || { echo "error: pip could not install requirements-env.txt into $venv" >&2; return 1; }
  if ! (cd / && "$venv/bin/python" -c 'import fairseq' >/dev/null 2>&1); then
    echo "[env] building fairseq-fixed==0.12.3.1 against the installed torch" >&2
    "${pip[@]}" --no-build-isolation --no-deps fairseq-fixed==0.12.3.1 \
      || { echo "error: pip could not build fairseq-fixed==0.12.3.1 (needs gcc and Python headers)" >&2; return 1; }
  fi
  "${pip[@]}" --no-deps -e "$ATTN_ROOT" || { echo "error: pip could not install attn_plugin from $ATTN_ROOT" >&2; return 1; }
  _attn_env_ok "$venv/bin/python" || { echo "error: $venv is set up but cannot import fairseq" >&2; return 1; }
  echo "$want" > "$stamp"
  echo "[env] ready: $venv" >&2
  ATTN_PY="$venv/bin/python"
}

if [ -n "${VIRTUAL_ENV:-}${CONDA_PREFIX:-}" ] && command -v python >/dev/null 2>&1 \
    && [ "$(cd / && python -c 'import sys; print(sys.prefix)' 2>/dev/null)" != "$ATTN_ROOT/.venv" ] \
    && _attn_env_ok python; then
  ATTN_PY="$(command -v python)"
else
  _attn_env_setup || return 1 2>/dev/null || exit 1
fi
export ATTN_PY
PATH="$(dirname "$ATTN_PY"):$PATH"
export PATH
