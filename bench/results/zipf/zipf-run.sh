#!/usr/bin/env bash
# zipf-run.sh BUNDLE -- device run for branch zipf: gpu_quant (default path, whole binary),
# the column-cast tests under each split mode, bench of the column casts per mode.
# TCFGS / BCFGS: comma-separated SPLIT:LAG:LA triples.
set -uo pipefail
BD=${1:?bundle}
OUT=${OUT:-/tmp/zipf-out}; mkdir -p "$OUT"
U=/tmp/hipfp8-bundle
t0=$(date +%s); stamp() { echo "=== [+$(( $(date +%s) - t0 ))s] $*"; }
if [ "${SKIP_FULL:-0}" = 1 ]; then
  rm -rf "$U" && mkdir -p "$U" && xz -dc "$BD/payload.tar.xz" | tar -xf - -C "$U"
else
  stamp "gpu_quant (default), whole binary"
  ONLY='^gpu_quant$' TEST_TIMEOUT=150 PROPTEST_CASES=${CASES:-24} bash "$BD/run-gpu-bundle.sh" "$BD" 2>&1 | tail -6
fi
TQ=$U/tests/gpu_quant; BENCH=$U/bin/hipfp8-bench
IFS=, read -ra TC <<< "${TCFGS:-1:100:4,2:100:4,2:0:1}"
for cfg in "${TC[@]}"; do
  IFS=: read -r sp lag la <<< "$cfg"
  s3=0; [ "$sp" = 2 ] && s3=2
  stamp "gpu_quant column casts SPLIT=$sp LAG=$lag LA=$la 3DSPLIT=$s3"
  (cd "$U/crate" && HIPFP8_COLWISE_SPLIT=$sp HIPFP8_COLWISE3D_SPLIT=$s3 HIPFP8_COLWISE_LAG=$lag HIPFP8_COLWISE_LA=$la \
    HIPFP8_REQUIRE_GPU=1 PROPTEST_CASES=${CASES2:-16} \
    timeout 120 "$TQ" --test-threads=4 colwise rowwise_3d bad_device) > "$OUT/tests-s$sp-lag$lag-la$la.log" 2>&1
  echo "rc=$?"; grep -E "^test |test result" "$OUT/tests-s$sp-lag$lag-la$la.log"
done
: > "$OUT/bench.log"
IFS=, read -ra BC <<< "${BCFGS:-0:100:4,1:100:4,2:100:4,2:200:4,2:50:4}"
for cfg in "${BC[@]}"; do
  IFS=: read -r sp lag la <<< "$cfg"
  s3=0; [ "$sp" = 2 ] && s3=2
  stamp "bench SPLIT=$sp LAG=$lag LA=$la 3DSPLIT=$s3"
  echo "--- SPLIT=$sp LAG=$lag LA=$la 3DSPLIT=$s3" >> "$OUT/bench.log"
  HIPFP8_COLWISE_SPLIT=$sp HIPFP8_COLWISE3D_SPLIT=$s3 HIPFP8_COLWISE_LAG=$lag HIPFP8_COLWISE_LA=$la \
    timeout 90 "$BENCH" --quick --filter ${FILTER:-per_group_colwise,rowwise_3d_transpose_rhs} >> "$OUT/bench.log" 2>&1
  echo "rc=$?"
done
grep -E "^---|per_group_colwise|rowwise_3d|copy" "$OUT/bench.log"
stamp done
