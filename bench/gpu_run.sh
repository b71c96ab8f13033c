#!/usr/bin/env bash
# gpu_run.sh -- one device call for the quantization kernels: correctness (GPU == CPU tests),
# the bench binary, the torchao comparison, compute-sanitizer memcheck + racecheck.
#
#   bash bench/gpu_run.sh BUNDLE_DIR [steps]    # steps: any of test,bench,compare,sanitize (default all)
#
# BUNDLE_DIR holds gpu_quant (test binary), hipfp8-bench, libhipfp8.so, built here with nvcc
# (cudart static) by bench/build_bundle.sh; torchao's wheel comes from .whl/ (see
# BENCHMARKS.md "How the anchors were run"). Logs and JSON go to $OUT.
set -uo pipefail
B=${1:?bundle dir}
STEPS=${2:-test,bench,compare,sanitize}
OUT=${OUT:-/tmp/hipfp8-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 RUST_BACKTRACE=1
t0=$(date +%s)
stamp() { echo "=== [+$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv,noheader

if [[ $STEPS == *test* ]]; then
  stamp "tests: GPU == CPU (HIPFP8_REQUIRE_GPU=1)"
  HIPFP8_REQUIRE_GPU=1 PROPTEST_CASES=${CASES:-64} timeout 240 "$B/gpu_quant" --test-threads=4 --nocapture \
    > "$OUT/tests.log" 2>&1
  echo "tests rc=$?"
  grep -E "^test |test result|codec |panicked|MISMATCH|differ" "$OUT/tests.log" | head -60
fi

if [[ $STEPS == *bench* ]]; then
  stamp "bench binary"
  timeout 200 "$B/hipfp8-bench" --json "$OUT/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -60
fi

if [[ $STEPS == *compare* ]]; then
  stamp "torchao comparison"
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/torchao-*.whl; then
    PYTHONPATH=/tmp/site HIPFP8_LIB="$B/libhipfp8.so" timeout 300 python3 "$B/compare_torchao.py" ${COMPARE_ARGS:-} \
      > "$OUT/compare.log" 2>&1
    echo "compare rc=$?"
    grep -vE "^\s+(File|raise|return|\^)" "$OUT/compare.log" | tail -45
  fi
fi

if [[ $STEPS == *sanitize* ]]; then
  stamp "compute-sanitizer memcheck + racecheck (odd shapes, empty groups, few cases)"
  for tool in memcheck racecheck; do
    HIPFP8_REQUIRE_GPU=1 PROPTEST_CASES=${SAN_CASES:-3} timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 \
      "$B/gpu_quant" --test-threads=1 --skip codec_hw --skip big_groups > "$OUT/sanitizer-$tool.log" 2>&1
    echo "$tool rc=$?"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result|Invalid|Race" "$OUT/sanitizer-$tool.log" | head -8
  done
fi
stamp "done"
