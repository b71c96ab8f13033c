#!/usr/bin/env bash
# Build the grouped-GEMM GPU bundle here (nvcc 13.0, sm_90 + sm_90a CUTLASS, cudart static)
# and copy it to DEST (default <repo>/.gpu/gemm): the GPU test binary, the cdylib, the bench
# harness and the run script. On the device: `BUNDLE=DEST bash DEST/gpu-run-gemm.sh`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="${1:-$ROOT/.gpu/gemm}"
cd "$ROOT"
# The caller's CUTLASS dir wins over env.sh's (a different dir means different compiler
# arguments: every kernel object misses the cache and recompiles).
CALLER_CUTLASS_DIR="${HIPFP8_CUTLASS_DIR:-}"
: "${CUDA_HOME:=/opt/cudatc/cuda}"
[ -f /opt/cudatc/env.sh ] && source /opt/cudatc/env.sh
export HIPFP8_BACKEND=cuda
export HIPFP8_CUTLASS_DIR="${CALLER_CUTLASS_DIR:-$(dirname "$(scripts/fetch-cutlass.sh)")}"
nice cargo build --release
BIN=$(nice cargo test --release --no-run --test gpu_grouped_gemm --message-format=json 2>/dev/null |
  python3 -c 'import sys, json
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "gpu_grouped_gemm":
        print(m["executable"])')
mkdir -p "$DEST"
cp "$BIN" "$DEST/gpu_grouped_gemm"
cp target/release/libhipfp8.so "$DEST/"
cp bench/compare_grouped_gemm.py bench/hipfp8_gemm_abi.py scripts/gpu-run-gemm.sh "$DEST/"
echo "bundle: $DEST ($(du -sh "$DEST" | cut -f1)); commit $(git rev-parse --short HEAD)"
