#!/usr/bin/env bash
# One device run for the grouped GEMM: GPU correctness tests, then the benchmark against torch,
# from a bundle built here (scripts/gpu-bundle-gemm.sh) at $BUNDLE (default .gpu/gemm). Logs
# and results go to $OUT (the device tool's output folder). GG_MODE=sweep|table|both picks the
# benchmark (bench/compare_grouped_gemm.py); GG_TESTS=0 skips the tests.
set -uo pipefail
BUNDLE="${BUNDLE:-.gpu/gemm}"
OUT="${OUT:-/tmp/gemm-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  echo "== $(date -u) $(uname -srm)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv || true
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' || true
} 2>&1 | tee "$OUT/env.log"
if [ "${GG_TESTS:-1}" = 1 ]; then
  # A GPU must be found (HIPFP8_REQUIRE_GPU=1 turns a skip into a failure).
  echo "== tests" | tee "$OUT/tests.log"
  HIPFP8_REQUIRE_GPU=1 timeout "${GG_TEST_TIMEOUT:-120}" "$BUNDLE"/gpu_grouped_gemm --test-threads=2 --nocapture 2>&1 | tee -a "$OUT/tests.log"
  echo "exit ${PIPESTATUS[0]} for gpu_grouped_gemm" | tee -a "$OUT/tests.log"
fi
for mode in ${GG_MODE:-table}; do
  echo "== bench $mode" | tee -a "$OUT/bench.log"
  GG_MODE=$mode timeout "${GG_BENCH_TIMEOUT:-200}" python3 "$BUNDLE"/compare_grouped_gemm.py "$BUNDLE/libhipfp8.so" "$OUT" 2>&1 | tee -a "$OUT/bench.log"
  echo "bench $mode exit ${PIPESTATUS[0]}" | tee -a "$OUT/bench.log"
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv 2>&1 | tee -a "$OUT/env.log"
