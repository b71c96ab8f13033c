#!/usr/bin/env bash
# zpack-run.sh BUNDLE -- device run for branch zpack: gpu_quant whole binary (default PACK=0),
# the column-cast tests with HIPFP8_COLWISE_PACK=1 / 2, bench of the column casts per PACK.
set -uo pipefail
BD=${1:?bundle}
OUT=${OUT:-/tmp/zpack-out}; mkdir -p "$OUT"
U=/tmp/hipfp8-bundle
t0=$(date +%s); stamp() { echo "=== [+$(( $(date +%s) - t0 ))s] $*"; }
stamp "gpu_quant (default), whole binary"
ONLY='^gpu_quant$' TEST_TIMEOUT=150 PROPTEST_CASES=${CASES:-24} bash "$BD/run-gpu-bundle.sh" "$BD" 2>&1 | tail -25
TQ=$U/tests/gpu_quant; BENCH=$U/bin/hipfp8-bench
for pk in 1 2; do
  stamp "gpu_quant column casts PACK=$pk"
  (cd "$U/crate" && HIPFP8_COLWISE_PACK=$pk HIPFP8_REQUIRE_GPU=1 PROPTEST_CASES=16 \
    timeout 100 "$TQ" --test-threads=4 colwise rowwise_3d bad_device) > "$OUT/tests-pack$pk.log" 2>&1
  echo "rc=$?"; grep -E "^test |test result" "$OUT/tests-pack$pk.log"
done
: > "$OUT/bench.log"
for pk in 1 0 2; do
  stamp "bench PACK=$pk"
  echo "--- PACK=$pk" >> "$OUT/bench.log"
  HIPFP8_COLWISE_PACK=$pk timeout 80 "$BENCH" --quick --filter ${FILTER:-per_group_colwise,rowwise_3d,colwise_3d,mxfp8_dim1} >> "$OUT/bench.log" 2>&1
  echo "rc=$?"
done
grep -E "^---|per_group_colwise|rowwise_3d|colwise_3d|dim1|copy" "$OUT/bench.log"
stamp done
