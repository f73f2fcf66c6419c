#!/usr/bin/env bash
# Your own parallel corpus with attn_plugin, through the WMT14 recipe's stages.
# `bash recipes/parallel.sh --help` for options; settings: `files:` in recipes/configs/wmt14.yaml.
#   bash recipes/parallel.sh --src en --tgt de --train data/train --valid data/valid --test data/test
#       (raw text files data/train.en, data/train.de, ...; the paper's base model on 8 GPUs)
#   bash recipes/parallel.sh ... --preset small --train-minutes 30
#       (a corpus of ~10K-1M pairs on a CPU: a small model, batch and schedule; --ngpus 1 for one GPU)
#   bash recipes/parallel.sh ... --ngpus 1 --layers 3 --d-model 256 --d-ff 1024 --h 4 --bpe-merges 8000
# Runs from any directory (relative paths are relative to where you are).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/env.sh"
exec "$ATTN_PY" -m attn_kit.recipes.parallel "$@"
