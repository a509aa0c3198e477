#!/usr/bin/env bash
# A learning run's `prepare` stage (the plain evaluation, the oracle warm start, the evaluation after it) on the GPU
# machine, for a run whose RL arms then train on a CPU: benchmarks/learning.py prepare --device cuda --backend hf.
# Run there after the wheels are installed in /tmp/site (scripts/gpu_run.sh, or the pip line in docs/training/gpu.md)
# and every part of the model but the last is kept (scripts/gpu_model.sh keep .gmK) in earlier calls on the same warm
# machine; this call carries the last part.
#   bash scripts/gpu_prepare.sh TASK LAST_PART_DIR [SEED_DIR] -- [more learning.py flags]
# SEED_DIR (optional): files copied into the run's WORKDIR/TASK first, e.g. a plain.json made on the CPU, which
# prepare then reuses instead of evaluating the plain model again.
# Results in $OUT (default /tmp/agentr1-gpu): prepare.log, start.json, the after-warm-start episodes, the adapter
# (sft_adapter_model.safetensors, sft_adapter_config.json) and, whatever the end, sft-progress.pt: a prepare killed
# by the time limit resumes from it on any machine (put it in WORKDIR/TASK and run prepare again).
# PREPARE_TIMEOUT_S: the limit, default 520 s.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/agentr1-gpu}
task=${1:?usage: gpu_prepare.sh TASK LAST_PART_DIR [SEED_DIR] -- [flags]}
last=${2:?usage: gpu_prepare.sh TASK LAST_PART_DIR [SEED_DIR] -- [flags]}
shift 2
seed=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then seed=$1; shift; fi
[ "${1:-}" = "--" ] && shift
WORK=/tmp/agentr1-prepare
mkdir -p "$OUT" "$WORK/$task"
[ -n "$seed" ] && cp "$seed"/* "$WORK/$task/"
gguf=$(bash scripts/gpu_model.sh join "$last") || exit 1
export AGENTR1_SMOLLM2_GGUF=$gguf AGENTR1_CACHE=/tmp/agentr1-cache PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 \
  TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 PYTHONPATH=$PWD:$PWD/adapters/trl:/tmp/site
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
timeout "${PREPARE_TIMEOUT_S:-520}" python3 benchmarks/learning.py prepare --task "$task" --device cuda --backend hf \
  --workdir "$WORK" "$@" 2>&1 | grep -v -E "Warning|warn\(" | tee "$OUT/prepare.log"
rc=${PIPESTATUS[0]}
d=$WORK/$task
for f in start.json sft-progress.pt after_sft.episodes.jsonl; do [ -f "$d/$f" ] && cp "$d/$f" "$OUT/"; done
for f in "$d"/sft/adapter_model.safetensors "$d"/sft/adapter_config.json; do [ -f "$f" ] && cp "$f" "$OUT/sft_$(basename "$f")"; done
ls -l "$OUT"
exit "$rc"
