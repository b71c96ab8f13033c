#!/usr/bin/env bash
# One device run for the grouped GEMM (issue 6): GPU correctness tests, then the benchmark
# against torch, from a bundle built here (scripts/gpu-bundle-gemm.sh) at $BUNDLE
# (default .gpu/gemm). Logs and results go to $OUT (the device tool's output folder).
set -uo pipefail
BUNDLE="${BUNDLE:-.gpu/gemm}"
OUT="${OUT:-/tmp/gemm-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  echo "== $(date -u) $(uname -srm)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv || true
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' || true
  ldd "$BUNDLE"/gpu_grouped_gemm | head -8
} 2>&1 | tee "$OUT/env.log"
# Tests: a GPU must be found (HIPFP8_REQUIRE_GPU=1 turns a skip into a failure).
echo "== tests" | tee "$OUT/tests.log"
for t in "$BUNDLE"/gpu_*; do
  HIPFP8_REQUIRE_GPU=1 timeout 80 "$t" --test-threads=1 --nocapture 2>&1 | tee -a "$OUT/tests.log"
  echo "exit $? for $t" | tee -a "$OUT/tests.log"
done
echo "== bench" | tee "$OUT/bench.log"
timeout 170 python3 "$BUNDLE"/compare_grouped_gemm.py "$BUNDLE/libhipfp8.so" "$OUT" 2>&1 | tee -a "$OUT/bench.log"
echo "bench exit ${PIPESTATUS[0]}" | tee -a "$OUT/bench.log"
