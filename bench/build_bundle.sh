#!/usr/bin/env bash
# build_bundle.sh -- build (nvcc, cudart static) what bench/gpu_run.sh needs on the GPU machine
# and copy it into DEST (default /work/main/.gpu/kernels, git-ignored; name it in `carry`):
# gpu_quant (test binary), hipfp8-bench, libhipfp8.so, gpu_run.sh, compare_torchao.py.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-/work/main/.gpu/kernels}
cd "$ROOT"
command -v nvcc >/dev/null || source /opt/cudatc/env.sh
export HIPFP8_BACKEND=cuda CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target/gpu-cuda}
nice cargo build --release --lib --bins
json=$(nice cargo test --release --test gpu_quant --no-run --message-format=json 2>/dev/null)
test_bin=$(python3 -c 'import json,sys
for l in sys.stdin:
    try: m=json.loads(l)
    except ValueError: continue
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="gpu_quant": print(m["executable"])' <<< "$json")
mkdir -p "$DEST"
cp "$test_bin" "$DEST/gpu_quant"
cp "$CARGO_TARGET_DIR/release/hipfp8-bench" "$CARGO_TARGET_DIR/release/libhipfp8.so" "$DEST/"
strip --strip-debug "$DEST/gpu_quant" "$DEST/hipfp8-bench" "$DEST/libhipfp8.so"
cp bench/gpu_run.sh bench/compare_torchao.py "$DEST/"
git rev-parse HEAD > "$DEST/COMMIT"
ls -la "$DEST"; du -sh "$DEST"
