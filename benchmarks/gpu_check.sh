#!/usr/bin/env bash
# The prepared GPU check: one command on a GPU machine that measures the recipe's GPU path and writes
# one results file (lab/bench/gpu_check.py says what runs and in what order).
#
#   bash benchmarks/gpu_check.sh --prepare     # here (internet, ../shared): wheels for the GPU machine's
#                                              # Python 3.12 and the WMT-shaped data, into .gpu_check/
#   bash benchmarks/gpu_check.sh --dry-run     # anywhere: print every command it would run, check each parses
#   bash benchmarks/gpu_check.sh --rehearse    # anywhere: the run's own code on the CPU, on a small corpus
#                                              # with a tiny model (into .gpu_check/rehearsal/, a minute)
#   bash benchmarks/gpu_check.sh [--output FILE] [--seconds N] [--commit SHA] [--only NAME,...]
#                                              # on the GPU machine (no internet; .gpu_check/ carried there):
#                                              # install as docs/scaling.md tells users, then measure
#                                              # (--only: those runs of the plan, as --dry-run names them)
#
# On the GPU machine it installs fairseq and this package exactly as docs/scaling.md says (with
# --no-index --find-links .gpu_check/wheels, the machine having no internet), so the check tests
# those instructions too; its install log, nvidia-smi's samples and the runs' logs go next to --output.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
HERE=.gpu_check
WHEELS=$HERE/wheels
OUT_FILE=""
SECONDS_ALLOWED=540
COMMIT=""
ONLY=""
MODE=run
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare) MODE=prepare ;;
    --dry-run) MODE=dry ;;
    --rehearse) MODE=rehearse ;;
    --output|--out) OUT_FILE="$2"; shift ;;
    --seconds) SECONDS_ALLOWED="$2"; shift ;;
    --commit) COMMIT="$2"; shift ;;
    --only) ONLY="$2"; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (--prepare, --dry-run, --rehearse, --output FILE, --seconds N, --commit SHA," \
            "--only NAME,...)" >&2; exit 2 ;;
  esac
  shift
done
case "$SECONDS_ALLOWED" in ''|*[!0-9]*) echo "error: --seconds takes a whole number of seconds" >&2; exit 2 ;; esac

# What the GPU machine lacks (its image has torch, numpy, sacrebleu, scikit-learn, pyyaml, click, joblib,
# regex, tqdm, setuptools): fairseq-fixed's sdist, built there against its torch, and pure-Python or cp312
# wheels of the rest.
WHEEL_PINS=(hydra-core==1.3.2 omegaconf==2.3.0 bitarray cffi pycparser sacremoses subword-nmt mock nltk defusedxml)
PLATFORM=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
FIND=(--no-index --find-links "$WHEELS")

if [ "$MODE" = prepare ]; then
  source scripts/env.sh || exit 1
  mkdir -p "$WHEELS"
  "$ATTN_PY" -m pip download -q --no-deps --only-binary=:all: "${PLATFORM[@]}" -d "$WHEELS" "${WHEEL_PINS[@]}" \
    || { echo "error: pip download of ${WHEEL_PINS[*]} failed" >&2; exit 1; }
  # sdists: fairseq-fixed is built on the GPU machine; antlr4 (omegaconf's parser runtime) has no wheel
  "$ATTN_PY" -m pip download -q --no-deps --no-binary=:all: --no-build-isolation -d "$HERE/sdist" \
    antlr4-python3-runtime==4.9.3 fairseq-fixed==0.12.3.1 || { echo "error: pip download of the sdists failed" >&2; exit 1; }
  cp "$HERE"/sdist/fairseq_fixed-0.12.3.1.tar.gz "$WHEELS"/
  "$ATTN_PY" -m pip wheel -q --no-deps --no-build-isolation -w "$WHEELS" "$HERE"/sdist/antlr4-python3-runtime-4.9.3.tar.gz \
    || { echo "error: could not build antlr4-python3-runtime's wheel" >&2; exit 1; }
  "$ATTN_PY" -m lab.bench.gpu_check prepare || exit 1
  du -sh "$WHEELS" "$HERE/data"
  echo "carry to the GPU machine: $WHEELS $HERE/data (then: bash benchmarks/gpu_check.sh --output \$OUT/gpu_check.json)"
  exit 0
fi

# docs/scaling.md's commands (offline: --no-index --find-links), each with a fallback that skips pip's
# dependency resolution, so that a failed instruction is recorded (install.log, the results file) and
# the measurement still runs
INSTALL=(
  "python3 -m pip install ${FIND[*]} --no-deps $WHEELS/*.whl"
  "env -u CUDA_HOME python3 -m pip install ${FIND[*]} --no-build-isolation fairseq-fixed==0.12.3.1"
  "python3 -m pip install ${FIND[*]} --no-build-isolation -e ."
)
FALLBACK=(
  ""
  "env -u CUDA_HOME python3 -m pip install ${FIND[*]} --no-deps --no-build-isolation fairseq-fixed==0.12.3.1"
  "export PYTHONPATH=$PWD"
)

if [ "$MODE" = rehearse ]; then
  source scripts/env.sh || exit 1
  exec "$ATTN_PY" -m lab.bench.gpu_check rehearse ${OUT_FILE:+--output "$OUT_FILE"}
fi

if [ "$MODE" = dry ]; then
  echo "# on the GPU machine, in an activated environment with the GPU's torch (docs/scaling.md):"
  printf '  $ %s\n' "${INSTALL[@]}"
  source scripts/env.sh || exit 1
  exec "$ATTN_PY" -m lab.bench.gpu_check run --dry-run ${ONLY:+--only "$ONLY"}
fi

# ---- on the GPU machine
T0=$(date +%s)
t() { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
OUT_FILE=${OUT_FILE:-$HERE/gpu_check.json}
OUT_DIR=$(dirname "$OUT_FILE")
mkdir -p "$OUT_DIR"
[ -d "$WHEELS" ] && [ -d "$HERE/data/data-bin" ] \
  || { echo "error: $WHEELS and $HERE/data are not here: run bash benchmarks/gpu_check.sh --prepare where the internet and ../shared are, and carry .gpu_check/wheels and .gpu_check/data" >&2; exit 2; }
if [ -z "${VIRTUAL_ENV:-}${CONDA_PREFIX:-}" ]; then  # the python3 that holds the GPU's torch, in its venv
  activate="$(dirname "$(command -v python3)")/activate"
  [ -f "$activate" ] && source "$activate"
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
export PYTHONUNBUFFERED=1 PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 MAX_JOBS="$(nproc)"
t "install (docs/scaling.md's commands, offline)"
AS_DOCUMENTED=yes
for i in "${!INSTALL[@]}"; do
  cmd=${INSTALL[$i]}
  echo "  \$ $cmd" | tee -a "$OUT_DIR/install.log"
  eval "$cmd" >>"$OUT_DIR/install.log" 2>&1 && continue
  tail -15 "$OUT_DIR/install.log"
  cmd=${FALLBACK[$i]}
  [ -n "$cmd" ] || { echo "error: the install failed (log: $OUT_DIR/install.log)" >&2; exit 3; }
  AS_DOCUMENTED=no
  echo "  \$ $cmd   # the documented command failed; without pip's dependency resolution:" | tee -a "$OUT_DIR/install.log"
  eval "$cmd" >>"$OUT_DIR/install.log" 2>&1 \
    || { tail -25 "$OUT_DIR/install.log"; echo "error: the install failed: $cmd (log: $OUT_DIR/install.log)" >&2; exit 3; }
done
INSTALL_SECONDS=$(( $(date +%s) - T0 ))
t "installed"
SMI_PID=""
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw --format=csv,noheader -lms 500 \
    > "$OUT_DIR/smi.csv" 2>/dev/null &
  SMI_PID=$!
fi
LEFT=$(( SECONDS_ALLOWED - INSTALL_SECONDS - 20 ))
[ "$LEFT" -lt 60 ] && LEFT=60
python3 -m lab.bench.gpu_check run --output "$OUT_FILE" --seconds "$LEFT" \
  --install-seconds "$INSTALL_SECONDS" --script-seconds "$SECONDS_ALLOWED" --install-as-documented "$AS_DOCUMENTED" ${COMMIT:+--commit "$COMMIT"} \
  ${ONLY:+--only "$ONLY"}
rc=$?
[ -n "$SMI_PID" ] && kill "$SMI_PID" 2>/dev/null
tar czf "$OUT_DIR/runs.tgz" --exclude='*.pt' --exclude=generate.out -C "$HERE" runs 2>/dev/null
t "done (exit $rc)"
exit $rc
