#!/usr/bin/env bash
# build_bundle.sh -- build (nvcc, cudart static) what bench/gpu_run.sh needs on the GPU machine
# and copy it into DEST (default /work/main/.gpu/kernels, git-ignored; name it in `carry`):
# bundle.tar.xz (gpu_quant test binary, hipfp8-bench, libhipfp8.so), gpu_run.sh,
# compare_torchao.py. On the GPU machine: tar -C DEST -xJf DEST/bundle.tar.xz first.
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
# The three binaries each embed the same ~20 MB of device code: one xz stream with a dictionary
# larger than a binary stores it once (~13 MB instead of 72).
rm -rf "$DEST" && mkdir -p "$DEST"
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
cp "$test_bin" "$STAGE/gpu_quant"
cp "$CARGO_TARGET_DIR/release/hipfp8-bench" "$CARGO_TARGET_DIR/release/libhipfp8.so" "$STAGE/"
strip --strip-debug "$STAGE/gpu_quant" "$STAGE/hipfp8-bench" "$STAGE/libhipfp8.so"
tar -C "$STAGE" -cf - gpu_quant hipfp8-bench libhipfp8.so | xz -T1 --lzma2=preset=6,dict=96MiB > "$DEST/bundle.tar.xz"
cp bench/gpu_run.sh bench/compare_torchao.py "$DEST/"
git rev-parse HEAD > "$DEST/COMMIT"
ls -la "$DEST"; du -sh "$DEST"
