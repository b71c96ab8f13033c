#!/usr/bin/env bash
# diag.sh BUNDLE -- run 2 of branch zipf: per-kernel time and DRAM bytes (ncu) of the split modes on
# the Zipf launches, and a knob sweep (tile width, L, LA) of the column casts.
set -uo pipefail
BD=${1:?bundle}; OUT=${OUT:-/tmp/zipf-out}; mkdir -p "$OUT"
U=/tmp/hipfp8-bundle; rm -rf "$U" && mkdir -p "$U" && xz -dc "$BD/payload.tar.xz" | tar -xf - -C "$U"
B=$U/bin/hipfp8-bench
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
: > "$OUT/ncu.log"
# SPLIT skip count : zipf (32768,7168) = 2nd shape, (32768,2048) = 4th; 13 calls per shape, 2 kernels with SPLIT=1
for c in "0 13 1 7168" "1 26 2 7168" "2 13 1 7168" "0 39 1 2048" "1 78 2 2048" "2 39 1 2048"; do
  set -- $c
  echo "##### SPLIT=$1 zipf (32768,$4)" | tee -a "$OUT/ncu.log"
  HIPFP8_COLWISE_SPLIT=$1 timeout 60 ncu --clock-control none --metrics $M -k regex:colwise -s $2 -c $3 "$B" --quick \
    --filter per_group_colwise > "$OUT/ncu-part.log" 2>&1
  cat "$OUT/ncu-part.log" >> "$OUT/ncu.log"
  grep -E "colwise_[a-z]+_kernel|gpu__time|dram__bytes" "$OUT/ncu-part.log" | sed 's/(ColWork.*//' | cut -c1-120
done
rm -f "$OUT/ncu-part.log"
: > "$OUT/knobs.log"
for kv in "HIPFP8_COLWISE_SPLIT=0" "HIPFP8_COLWISE_CG=8" "HIPFP8_COLWISE_SPLIT=1 HIPFP8_COLWISE_CG=8" \
          "HIPFP8_COLWISE_SPLIT=1 HIPFP8_COLWISE_L=1" "HIPFP8_COLWISE_SPLIT=2 HIPFP8_COLWISE_LA=1" \
          "HIPFP8_COLWISE_SPLIT=2 HIPFP8_COLWISE_CG=8" "HIPFP8_COLWISE_CG=16" "HIPFP8_COLWISE_SPLIT=1 HIPFP8_COLWISE_CG=16"; do
  echo "--- $kv" | tee -a "$OUT/knobs.log"
  env $kv timeout 60 "$B" --quick --filter per_group_colwise > "$OUT/k.log" 2>&1
  cat "$OUT/k.log" >> "$OUT/knobs.log"; grep -E "per_group|copy" "$OUT/k.log"
done
rm -f "$OUT/k.log"
