#!/usr/bin/env bash
# gpu-session.sh -- everything a device session verifies and measures, in one call of the
# device tool (device time is scarce: one machine start, every step bounded).
#
#   bash scripts/gpu-session.sh BUNDLE_DIR [PY_WHEELS_DIR]
#
# BUNDLE_DIR: a bundle of scripts/build-gpu-bundle.sh (carried); PY_WHEELS_DIR: the Python
# wheels for the GPU machine (torchao, torchtitan and their small deps; default .gpu/pyw).
# Steps (STEPS, default all, in this order; each bounded by its own timeout):
#   tests    every GPU test binary of the bundle (scripts/run-gpu-bundle.sh)
#   isolate  grouped-GEMM cases one per process on every CUTLASS kind (bench/isolate_grouped_gemm.py)
#   python   the package's GPU pytest, host overhead and dense benchmark (python/ci/gpu-run.sh)
#   gemm     grouped GEMM vs torch, the result table (bench/compare_grouped_gemm.py)
#   sweep    every CUTLASS configuration per grouped GEMM shape (only when named): h200-gemm-sweep.json
#   gaps     host time and GPU idle time inside one timed grouped GEMM call, ours and torch's
#            (only when named): h200-gemm-gaps.json
#   bench    hipfp8-bench --quick rows (the casts, the fused MoE casts) against copy bandwidth
#   ab       hipfp8-bench --quick --filter moe_ once per knob setting of AB (a process each: the
#            kernel knobs are read once per process; default "HIPFP8_MOE_COL_SPLIT=0
#            HIPFP8_MOE_ROW_BLOCKS_PER_SM=2"): ab-1.log, ab-2.log, ... (first line: the setting)
#   moe      MoE end to end through the Python package: projection, experts block, torchtitan
#            layer vs BF16 and torchao (bench/moe_e2e.py; MOE_ARGS adds flags): h200-moe.{json,md}
#   sanitize compute-sanitizer over the GPU test binaries (only when named: it takes minutes)
# One device command runs 10 minutes at most: split the steps over two calls, e.g.
# STEPS="tests isolate gemm" then STEPS="python bench" then STEPS=moe (the machine stays warm).
# Results and logs go to $OUT; the console gets one line per step and the last lines of each.
set -uo pipefail
B=$(cd "${1:?usage: gpu-session.sh BUNDLE_DIR [PY_WHEELS_DIR]}" && pwd)
W=${2:-.gpu/pyw}
OUT=${OUT:-/tmp/hipfp8-session}
STEPS=${STEPS:-tests isolate python gemm bench ab moe}
U=${BUNDLE_UNPACK_DIR:-/tmp/hipfp8-bundle}
LIB=$U/lib/libhipfp8.so
mkdir -p "$OUT"
t0=$SECONDS
say() { echo "[gpu-session +$((SECONDS - t0))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader 2>/dev/null
BUNDLE_UNPACK_DIR=$U UNPACK_ONLY=1 bash "$B/run-gpu-bundle.sh" "$B" >/dev/null 2>&1 || { say "cannot unpack $B"; exit 1; }
status=0
step() {  # step NAME TIMEOUT CMD...: run, log to $OUT/NAME.log, report
  local name=$1 limit=$2
  shift 2
  say "$name ..."
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && status=1
  say "$name rc=$rc"
  tail -n "${TAIL:-12}" "$OUT/$name.log" | cut -c1-220
}
for s in $STEPS; do
  case $s in
    tests) step tests ${TESTS_TIMEOUT:-560} env BUNDLE_UNPACK_DIR=$U OUT=$OUT bash "$B/run-gpu-bundle.sh" "$B" ;;
    isolate) step isolate 150 python3 bench/isolate_grouped_gemm.py "$LIB" "$OUT" ;;
    python) step python 420 env HIPFP8_LIB="$LIB" OUT="$OUT" bash python/ci/gpu-run.sh "$W" ;;
    gemm) step gemm 240 env GG_MODE=table python3 bench/compare_grouped_gemm.py "$LIB" "$OUT" ;;
    sweep) step sweep 300 env GG_MODE=sweep python3 bench/compare_grouped_gemm.py "$LIB" "$OUT" ;;
    gaps) step gaps 150 env GG_MODE=gaps python3 bench/compare_grouped_gemm.py "$LIB" "$OUT" ;;
    bench) step bench 180 "$U/bin/hipfp8-bench" --quick ;;
    ab)
      i=0
      for kv in ${AB:-HIPFP8_MOE_COL_SPLIT=0 HIPFP8_MOE_ROW_BLOCKS_PER_SM=2}; do
        i=$((i + 1))
        echo "$kv" >"$OUT/ab-$i.log"
        say "ab $i: $kv"
        env "$kv" timeout 120 "$U/bin/hipfp8-bench" --quick --filter moe_ >>"$OUT/ab-$i.log" 2>&1 || status=1
        grep -E '^moe_' "$OUT/ab-$i.log" | cut -c1-130
      done
      ;;
    moe) step moe 420 env HIPFP8_LIB="$LIB" OUT="$OUT" bash python/ci/site-env.sh "$W" \
      python3 bench/moe_e2e.py --out "$OUT" --budget-s "${MOE_BUDGET:-300}" ${MOE_ARGS:-} ;;
    sanitize) step sanitize 600 env OUT=$OUT SAN_TIMEOUT=400 bash scripts/sanitize-gpu.sh "$B" ;;
    *) say "unknown step $s"; status=1 ;;
  esac
done
say "done, status $status"
exit $status
