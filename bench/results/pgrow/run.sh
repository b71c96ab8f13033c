#!/bin/bash
# device driver for branch pgrow: GPU tests of the touched op, before/after bench, knobs, ncu, racecheck
set -u
B=.gpu/pgrow
U=/tmp/hipfp8-bundle
T0=$(date +%s)
t() { echo "[t+$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
t tests
ONLY='^(gpu_quant|ffi_gpu|gpu_runtime)$' TEST_TIMEOUT=150 PROPTEST_CASES=24 bash $B/run-gpu-bundle.sh $B > $OUT/tests.log 2>&1
echo "tests rc=$?"; grep -E "^(gpu_quant|ffi_gpu|gpu_runtime) |passed|FAIL|panicked" $OUT/tests.log | head -20
grep -E "per_group_rowwise" $OUT/tests.log | grep -E "ok|FAIL" | head
t bench-before
.gpu/pgrow/bench-before --filter per_group_rowwise,rowwise_2d > $OUT/bench-before.log 2>&1
t bench-after
$U/bin/hipfp8-bench --filter per_group_rowwise,rowwise_2d > $OUT/bench-after.log 2>&1
t knobs
HIPFP8_PGR_TWO_BARRIER=1 $U/bin/hipfp8-bench --filter per_group_rowwise > $OUT/bench-after-2bar.log 2>&1
HIPFP8_PGR_BLOCKS_PER_SM=8 $U/bin/hipfp8-bench --filter per_group_rowwise > $OUT/bench-after-grid8.log 2>&1
for f in before after after-2bar after-grid8; do echo "== $f"; grep -E "^copy|^per_group_rowwise|^rowwise_2d " $OUT/bench-$f.log; done
t ncu
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
if [ -n "$NCU" ]; then
  timeout 90 $NCU --clock-control none -k regex:per_group_rowwise --launch-skip 4 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
    $U/bin/hipfp8-bench --filter per_group_rowwise --quick > $OUT/ncu.log 2>&1
  echo "ncu rc=$?"; grep -E "Duration|Throughput|Achieved Occupancy|Theoretical Occupancy|Registers|Stall|Warp Cycles|Block Limit|Waves" $OUT/ncu.log | head -40
fi
t racecheck
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$CS" ]; then
  (cd $U/crate && CARGO_MANIFEST_DIR=$U/crate PROPTEST_CASES=2 HIPFP8_REQUIRE_GPU=1 timeout 60 $CS --tool racecheck --error-exitcode 9 $U/tests/gpu_quant --test-threads=1 per_group_rowwise) > $OUT/racecheck.log 2>&1
  echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|hazard|test result|ERROR" $OUT/racecheck.log | head
fi
t done
