#!/usr/bin/env bash
# A learning run on the GPU machine within one lease (issue 62): SmolLM2-135M-Instruct on the shop, the warm start,
# GRPO for a few minutes, the held-out evaluation (benchmarks/learning.py --device cuda, static-cache decoding).
# Run there after scripts/gpu_run.sh (the wheels in /tmp/site) and `scripts/gpu_model.sh keep` of every part of the
# model but the last in earlier calls on the same warm machine; this call carries the last part (default .gm2).
# Results in $OUT: gpu_learning.json/.png/.log.
# Usage: bash scripts/gpu_learning.sh [LAST_PART_DIR] [extra learning.py flags]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/agentr1-gpu}
WORK=/tmp/agentr1-learn
mkdir -p "$OUT"
last=.gm2
case "${1:-}" in .gm[0-9]*) last=$1; shift ;; esac
gguf=$(bash scripts/gpu_model.sh join "$last") || exit 1
export AGENTR1_SMOLLM2_GGUF=$gguf AGENTR1_CACHE=/tmp/agentr1-cache PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 \
  TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 PYTHONPATH=$PWD:$PWD/adapters/trl:/tmp/site
timeout "${LEARN_TIMEOUT_S:-330}" python3 benchmarks/learning.py all --task webshop --algos grpo --device cuda \
  --backend hf --bf16 --max-new-tokens 64 --lr 1e-4 --sft-episodes 48 --sft-epochs 2 --sft-lr 1e-3 \
  --plain-episodes 50 --eval-episodes 200 --eval-batch 64 --generations 8 --groups 4 --minutes "${LEARN_MINUTES:-2.5}" \
  --workdir "$WORK" --json "$OUT/gpu_learning.json" --plot "$OUT/gpu_learning.png" "$@" 2>&1 \
  | grep -v -E "Warning|warn\(" | tee "$OUT/gpu_learning.log"
rc=${PIPESTATUS[0]}
# the stages' own files, whatever the end (a timeout leaves the report unwritten)
for f in "$WORK"/webshop/start.json "$WORK"/webshop/grpo.json; do [ -f "$f" ] && cp "$f" "$OUT/learning_$(basename "$f")"; done
exit "$rc"
