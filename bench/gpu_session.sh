#!/usr/bin/env bash
# gpu_session.sh -- one device call over a bundle from scripts/build-gpu-bundle.sh: any of
#   tests    the whole test suite (run-gpu-bundle.sh, HIPFP8_REQUIRE_GPU=1)
#   cgtests  gpu_quant's column-cast tests once per tile width HIPFP8_COLWISE_CG (CGS_TEST lists
#            them; the launcher's own choice is run by `tests`)
#   cg       bench binary over the column casts for every tile width (CGS)
#   ncu      Nsight Compute (--clock-control none) on one launch of each kernel below 90%
#            (NCU_ONLY=name1,name2: just those)
#   bench    the bench binary, every op
#   compare  bench/compare_torchao.py --quick (torchao wheel unpacked from .whl/)
#   sanitize compute-sanitizer memcheck + racecheck over gpu_quant (3 cases)
#   knob     A/B of one launcher knob in one call: KNOB=NAME, KNOB_VALUES (default "1 0 1 0"),
#            gpu_quant's tests KNOB_TESTS (default the column casts) once per distinct value,
#            then the bench binary over KNOB_FILTER once per value, alternating
#
#   bash bench/gpu_session.sh BUNDLE_DIR STEPS        # STEPS: comma-separated, in the order above
# Logs go to $OUT (the device tool returns that folder).
set -uo pipefail
BD=${1:?bundle dir}
STEPS=${2:-tests,bench,compare}
OUT=${OUT:-/tmp/hipfp8-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 RUST_BACKTRACE=1
t0=$(date +%s)
stamp() { echo "=== [+$(( $(date +%s) - t0 ))s] $*"; }
U=/tmp/hipfp8-bundle
has() { [[ ",$STEPS," == *",$1,"* ]]; }

if has tests; then
  stamp "test suite"
  TEST_TIMEOUT=${TEST_TIMEOUT:-180} PROPTEST_CASES=${CASES:-24} bash "$BD/run-gpu-bundle.sh" "$BD" 2>&1 | tail -30
else
  BUNDLE_UNPACK_DIR=$U UNPACK_ONLY=1 bash "$BD/run-gpu-bundle.sh" "$BD" || exit 1
fi
BENCH=$U/bin/hipfp8-bench
TQ=$U/tests/gpu_quant

if has cgtests; then
  for cg in ${CGS_TEST:-2 4 8 16}; do
    stamp "gpu_quant column casts with HIPFP8_COLWISE_CG=$cg"
    (cd "$U/crate" && export HIPFP8_COLWISE_CG=$cg HIPFP8_REQUIRE_GPU=1 \
      PROPTEST_CASES=${CASES:-24} && timeout 200 "$TQ" --test-threads=4 colwise rowwise_3d bad_device mxfp8 &&
      timeout 100 "$U/tests/gpu_cast_mx" --test-threads=4 mx) > "$OUT/cgtests-$cg.log" 2>&1
    echo "CG=$cg rc=$?"; grep -E "^test |test result" "$OUT/cgtests-$cg.log"
  done
fi

if has cg; then
  stamp "column-cast tile width sweep"
  : > "$OUT/cg-sweep.log"
  for cg in ${CGS:-2 4 8 16}; do
    echo "--- CG=$cg" >> "$OUT/cg-sweep.log"
    HIPFP8_COLWISE_CG=$cg timeout 90 "$BENCH" --quick \
      --filter per_group_colwise,rowwise_3d_transpose_rhs >> "$OUT/cg-sweep.log" 2>&1
  done
  grep -E "^---|per_group_colwise|rowwise_3d|mxfp8_dim1|copy" "$OUT/cg-sweep.log"
fi

if has ncu; then
  stamp "ncu --clock-control none"
  SECT="--section SpeedOfLight --section Occupancy --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats"
  : > "$OUT/ncu.log"
  prof() {  # name filter kernel-regex [launches]; NCU_ONLY=name1,name2 profiles just those
    [ -n "${NCU_ONLY:-}" ] && [[ ",$NCU_ONLY," != *",$1,"* ]] && return 0
    echo "##### $1" >> "$OUT/ncu.log"
    timeout 120 ncu --clock-control none $SECT -k "regex:$3" -s 6 -c "${4:-1}" "$BENCH" --quick --filter "$2" \
      >> "$OUT/ncu.log" 2>&1 || echo "ncu $1 rc=$?" >> "$OUT/ncu.log"
  }
  prof rowwise_2d rowwise_2d rowwise_vec_kernel
  prof per_group_colwise per_group_colwise colwise_vec_kernel
  prof rowwise_3d_transpose_rhs rowwise_3d_transpose_rhs colwise_vec_kernel
  prof per_group_rowwise per_group_rowwise per_group_rowwise_kernel
  prof mxfp8_dim1 mxfp8 "mx_dim1_(lds_)?kernel"
  prof tensorwise tensorwise "tensor_(amax|cast)_kernel" 2
  prof cast_transpose cast_transpose "ct_(amax|cast|cast_lds)_kernel" 2
  prof tensorwise_scaled tensorwise_scaled tensor_scaled_kernel
  prof cast_transpose_scaled cast_transpose_scaled "ct_cast_(lds_)?kernel"
  # DRAM bytes moved per kernel against the minimal bytes (excess traffic shows here)
  echo "##### dram bytes" >> "$OUT/ncu.log"
  for f in "rowwise_2d rowwise_vec_kernel" "per_group_colwise colwise_vec_kernel" "mxfp8 mx_dim1_lds_kernel" \
           "cast_transpose ct_cast_kernel" "per_group_rowwise per_group_rowwise_kernel" \
           "cast_transpose_scaled ct_cast_kernel" "tensorwise_scaled tensor_scaled_kernel"; do
    set -- $f
    [ -n "${NCU_ONLY:-}" ] && [[ ",$NCU_ONLY," != *",$1,"* ]] && continue
    timeout 90 ncu --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
      -k "regex:$2" -s 6 -c 1 "$BENCH" --quick --filter "$1" >> "$OUT/ncu.log" 2>&1
  done
  grep -E "^#####|==PROF==|Duration|dram__bytes|gpu__time|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy|Block Limit|Warp Cycles Per Issued|rc=" "$OUT/ncu.log" | head -150
fi

if has bench; then
  stamp "bench binary"
  # BENCH_FILTER=op1,op2: a subset (the binary's --filter)
  timeout 200 "$BENCH" ${BENCH_FILTER:+--filter "$BENCH_FILTER"} > "$OUT/bench.log" 2>&1; echo "bench rc=$?"
  cat "$OUT/bench.log"
fi

if has compare; then
  stamp "torchao comparison"
  if [ ! -d /tmp/site/torchao ]; then
    mkdir -p /tmp/site && python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
      .whl/torchao-0.18.0-*.whl /tmp/site
  fi
  # COMPARE_ONLY=op1,op2: a subset, written as h200-partial.{json,md}
  PYTHONPATH=/tmp/site HIPFP8_LIB=$U/lib/libhipfp8.so timeout ${COMPARE_TIMEOUT:-500} python3 bench/compare_torchao.py --quick \
    ${COMPARE_ONLY:+--only "$COMPARE_ONLY" --tag partial} > "$OUT/compare.log" 2>&1
  echo "compare rc=$?"; tail -45 "$OUT/compare.log"
fi

if has sanitize; then
  for tool in memcheck racecheck; do
    stamp "compute-sanitizer $tool"
    echo "##### compute-sanitizer --tool $tool" >> "$OUT/sanitize.log"
    (cd "$U/crate" && HIPFP8_REQUIRE_GPU=1 PROPTEST_CASES=3 timeout 240 compute-sanitizer --tool $tool \
      --error-exitcode 9 "$TQ" --test-threads=1 --skip codec_hw --skip big_groups) > "$OUT/sanitize-part.log" 2>&1
    echo "$tool rc=$?" | tee -a "$OUT/sanitize.log"
    cat "$OUT/sanitize-part.log" >> "$OUT/sanitize.log"; rm -f "$OUT/sanitize-part.log"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test result" "$OUT/sanitize.log" | tail -3
  done
fi
if has knob; then
  : "${KNOB:?KNOB=NAME for the knob step}"
  vals=${KNOB_VALUES:-1 0 1 0}
  for v in $(echo $vals | tr ' ' '\n' | awk '!seen[$0]++'); do
    stamp "gpu_quant ${KNOB_TESTS:-colwise rowwise_3d} with $KNOB=$v"
    (cd "$U/crate" && export $KNOB=$v HIPFP8_REQUIRE_GPU=1 PROPTEST_CASES=${CASES:-24} &&
      timeout 200 "$TQ" --test-threads=4 ${KNOB_TESTS:-colwise rowwise_3d}) > "$OUT/$KNOB-tests-$v.log" 2>&1
    echo "$KNOB=$v tests rc=$?"; grep -E "^test |test result" "$OUT/$KNOB-tests-$v.log"
  done
  : > "$OUT/$KNOB-bench.log"
  for v in $vals; do
    stamp "bench with $KNOB=$v"
    echo "--- $KNOB=$v" >> "$OUT/$KNOB-bench.log"
    env $KNOB=$v timeout 120 "$BENCH" --quick --filter "${KNOB_FILTER:-per_group_colwise,rowwise_3d_transpose_rhs}" \
      >> "$OUT/$KNOB-bench.log" 2>&1
  done
  grep -E "^---|copy|%" "$OUT/$KNOB-bench.log"
fi
stamp done
