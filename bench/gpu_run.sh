#!/usr/bin/env bash
# gpu_run.sh -- one device call for the quantization kernels: correctness (GPU == CPU tests),
# variant timings of the column casts, the bench binary, the torchao comparison,
# compute-sanitizer memcheck + racecheck.
#
#   bash bench/gpu_run.sh BUNDLE_DIR [steps]   # steps: any of test,variants,bench,compare,sanitize
#
# BUNDLE_DIR holds gpu_quant (test binary), hipfp8-bench, libhipfp8.so (bench/build_bundle.sh,
# nvcc, cudart static) and compare_torchao.py; torchao's wheel comes from .whl/ (BENCHMARKS.md
# "How the anchors were run"). At most 8 files go to $OUT (the device tool's limit).
set -uo pipefail
B=${1:?bundle dir}
STEPS=${2:-test,variants,bench,compare,sanitize}
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
  grep -E "^test |test result|codec |panicked|MISMATCH|differ" "$OUT/tests.log" | head -40
fi

if [[ $STEPS == *variants* ]]; then
  # rows per work item of the column casts: L x 1024 (L > 1 re-reads L-1 sub-chunks from L2
  # instead of making blocks wait for each other); the best L per family is used below
  stamp "column-cast variants (HIPFP8_COLWISE_L / HIPFP8_COLWISE3D_L)"
  : > "$OUT/variants.log"
  for L in 1 2 4; do
    echo "--- L=$L" >> "$OUT/variants.log"
    HIPFP8_COLWISE_L=$L HIPFP8_COLWISE3D_L=$L timeout 60 "$B/hipfp8-bench" --quick \
      --filter per_group_colwise,rowwise_3d_transpose_rhs >> "$OUT/variants.log" 2>&1
  done
  read -r BEST BEST3D < <(python3 - "$OUT/variants.log" <<'EOF'
import sys, re
tot, tot3 = {}, {}
L = None
for line in open(sys.argv[1]):
    m = re.match(r"--- L=(\d+)", line)
    if m:
        L = int(m.group(1)); continue
    m = re.match(r"(\S+)\s+\S+\s+(?:\S+\s+)?([\d.]+) us", line)
    if m and L:
        d = tot3 if m.group(1).startswith("rowwise_3d") else tot
        d[L] = d.get(L, 0.0) + float(m.group(2))
print(min(tot, key=tot.get) if tot else 1, min(tot3, key=tot3.get) if tot3 else 1)
EOF
)
  export HIPFP8_COLWISE_L=${BEST:-1} HIPFP8_COLWISE3D_L=${BEST3D:-1}
  echo "chosen: HIPFP8_COLWISE_L=$HIPFP8_COLWISE_L HIPFP8_COLWISE3D_L=$HIPFP8_COLWISE3D_L" | tee -a "$OUT/variants.log"
  grep -E "^(---|per_group|rowwise_3d)" "$OUT/variants.log"
fi

if [[ $STEPS == *bench* ]]; then
  stamp "bench binary"
  timeout 200 "$B/hipfp8-bench" --json "$OUT/bench.json" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
  tail -42 "$OUT/bench.log"
fi

if [[ $STEPS == *compare* ]]; then
  stamp "torchao comparison"
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/torchao-*.whl; then
    PYTHONPATH=/tmp/site HIPFP8_LIB="$B/libhipfp8.so" timeout 300 python3 "$B/compare_torchao.py" ${COMPARE_ARGS:-} \
      > "$OUT/compare.log" 2>&1
    echo "compare rc=$?"
    grep -vE "^\s+(File|raise|return|\^)|SyntaxWarning|Configuration class" "$OUT/compare.log" | tail -40
  fi
fi

if [[ $STEPS == *sanitize* ]]; then
  stamp "compute-sanitizer memcheck + racecheck (odd shapes, empty groups, few cases)"
  : > "$OUT/sanitizer.log"
  for tool in memcheck racecheck; do
    echo "##### compute-sanitizer --tool $tool" >> "$OUT/sanitizer.log"
    HIPFP8_REQUIRE_GPU=1 PROPTEST_CASES=${SAN_CASES:-3} timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 \
      "$B/gpu_quant" --test-threads=1 --skip codec_hw --skip big_groups >> "$OUT/sanitizer.log" 2>&1
    echo "$tool rc=$?" | tee -a "$OUT/sanitizer.log"
  done
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result|rc=" "$OUT/sanitizer.log"
fi
stamp "done"
