#!/usr/bin/env bash
# Gather what the GPU machine lacks as wheels into .whl/ (git-ignored: the device tool carries it, at most 64 MiB a
# call with the working tree). The machine has Python 3.12, torch, transformers, peft and accelerate but no network,
# TRL, gymnasium or vLLM; this adds the pure-Python or cp312 wheels of the rest, at the versions tested here
# (agentr1-gym itself runs from the working tree: scripts/gpu_run.sh puts it on PYTHONPATH), gguf, which
# transformers needs to read SmolLM2's GGUF file (scripts/gpu_model.sh carries the file itself), and bfcl-eval with
# the one module of its dependencies that BFCL's envs import (html2text; mpmath is in the image).
# Then: run `bash scripts/gpu_run.sh` there (see docs/training/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.whl}
rm -rf "$DEST" && mkdir -p "$DEST"
PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  PLATFORMS+=(--platform "$p")
done
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]}" -d "$DEST" \
  trl==1.16.0 transformers==5.19.0 peft==0.21.2 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 \
  gymnasium==1.4.0 farama-notifications==0.0.6 gguf==0.19.0 \
  pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2 \
  bfcl-eval==2026.3.23 html2text==2025.4.15
size=$(du -sm "$DEST" | cut -f1)
echo "gpu_bundle: $(ls "$DEST" | wc -l) wheels, ${size} MiB in $DEST"
if [ "$size" -gt 40 ]; then echo "gpu_bundle: over the 40 MiB left beside the tree and a model part" >&2; exit 1; fi
