#!/usr/bin/env bash
# On a GPU machine without network (torch, transformers, peft, accelerate installed): install the wheels that
# scripts/gpu_bundle.sh gathered into /tmp/site, then run the GPU tests and benchmarks/gpu_step.py.
# Results go to $OUT (default /tmp/agentr1-gpu): gpu_tests.log, gpu_tests.xml, gpu_step.json, gpu_step.log.
# Usage: bash scripts/gpu_run.sh [--tests-only|--bench-only] [extra gpu_step.py flags]
# (GPU_TEST_K: a pytest -k expression choosing some of the tests, e.g. GPU_TEST_K="lora or masks";
#  GPU_TESTS_TIMEOUT_S and GPU_BENCH_TIMEOUT_S: the two parts' limits, default 180 and 340 s)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/agentr1-gpu}
mkdir -p "$OUT"
what=all
case "${1:-}" in --tests-only|--bench-only) what=$1; shift;; esac
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "gpu_run: installing .whl/ failed (run scripts/gpu_bundle.sh first)" >&2; exit 1; }
export PYTHONPATH=$PWD:$PWD/adapters/trl:/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers, peft, trl, gymnasium; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'trl', trl.__version__)" | tee -a "$OUT/gpu.txt"
rc=0
if [ "$what" != "--bench-only" ]; then
  timeout "${GPU_TESTS_TIMEOUT_S:-180}" python3 -m pytest -m gpu tests/trl/test_gpu.py -q -p no:cacheprovider -o addopts="" -rs ${GPU_TEST_K:+-k "$GPU_TEST_K"} \
    --junitxml "$OUT/gpu_tests.xml" 2>&1 | tee "$OUT/gpu_tests.log"
  rc=${PIPESTATUS[0]}
fi
if [ "$what" != "--tests-only" ]; then
  timeout "${GPU_BENCH_TIMEOUT_S:-340}" python3 benchmarks/gpu_step.py --json "$OUT/gpu_step.json" "$@" 2>&1 | grep -v Warning | tee "$OUT/gpu_step.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
exit $rc
