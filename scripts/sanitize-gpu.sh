#!/usr/bin/env bash
# sanitize-gpu.sh -- compute-sanitizer memcheck, racecheck, initcheck and synccheck over every
# GPU test binary of a bundle (scripts/build-gpu-bundle.sh), on a GPU machine.
#
#   bash scripts/sanitize-gpu.sh BUNDLE_DIR [TOOLS]     # TOOLS default "memcheck racecheck initcheck synccheck"
#
# compute-sanitizer: $COMPUTE_SANITIZER, else on PATH, else unpacked from a
# nvidia-cuda-sanitizer-api wheel found in $SANITIZER_WHEEL_DIR (default: the bundle dir and
# .whl/). The test binaries run with HIPFP8_REQUIRE_GPU=1 (a GPU test that finds no GPU fails),
# few property cases (PROPTEST_CASES, default 2), a short soak (HIPFP8_SOAK_CALLS, default 300),
# one test thread, and skip what is only slow under the tools (the exhaustive codec sweep, the
# 65536-group cases: SKIP adds more). The tools run side by side (one process each, PARALLEL=0
# runs them one after the other), each over the binaries in turn, each invocation bounded by
# SAN_TIMEOUT seconds (default 150).
# Output: $OUT/sanitize-<tool>.log per tool and a summary table on stdout (tool, binary,
# tests passed, errors / hazards reported, exit status). Exit status 0 only when every
# invocation passed its tests and reported 0 errors.
set -uo pipefail
B=${1:?bundle dir}
TOOLS=${2:-memcheck racecheck initcheck synccheck}
OUT=${OUT:-/tmp/hipfp8-sanitize}
mkdir -p "$OUT"
B=$(cd "$B" && pwd)
U=${BUNDLE_UNPACK_DIR:-/tmp/hipfp8-bundle}
if [ ! -d "$U/tests" ]; then
  BUNDLE_UNPACK_DIR=$U UNPACK_ONLY=1 bash "$B/run-gpu-bundle.sh" "$B" >/dev/null || { echo "cannot unpack $B"; exit 1; }
fi

CS=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || true)}
if [ -z "$CS" ]; then
  whl=$(ls "${SANITIZER_WHEEL_DIR:-$B}"/nvidia_cuda_sanitizer_api-*.whl .whl/nvidia_cuda_sanitizer_api-*.whl 2>/dev/null | head -1)
  if [ -n "$whl" ]; then
    mkdir -p /tmp/hipfp8-cs && python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$whl" /tmp/hipfp8-cs
    CS=$(find /tmp/hipfp8-cs -name compute-sanitizer -type f | head -1)
    chmod +x "$CS" 2>/dev/null
  fi
fi
if [ -z "$CS" ] || ! "$CS" --version >/dev/null 2>&1; then
  echo "compute-sanitizer not found (set COMPUTE_SANITIZER or put the nvidia-cuda-sanitizer-api wheel in the bundle dir)"
  exit 2
fi
echo "compute-sanitizer: $CS ($("$CS" --version | tail -1))"

# Every GPU test binary of the bundle (the ones whose tests call gpu_for_tests).
BINS=${BINS:-"gpu_runtime gpu_quant gpu_cast_mx gpu_grouped_gemm ffi_gpu gpu_groups gpu_soak"}
SKIP_ARGS=(--skip codec_hw --skip big_groups)
for s in ${SKIP:-}; do SKIP_ARGS+=(--skip "$s"); done
export HIPFP8_REQUIRE_GPU=1 PROPTEST_CASES=${PROPTEST_CASES:-2} HIPFP8_SOAK_CALLS=${HIPFP8_SOAK_CALLS:-300}
export HIPFP8_GROUP_COUNTS_MAX=${HIPFP8_GROUP_COUNTS_MAX:-6145}

run_tool() {  # run_tool TOOL: every binary under TOOL, one line per binary in $OUT/sanitize-TOOL.tsv
  local tool=$1 log="$OUT/sanitize-$tool.log" tsv="$OUT/sanitize-$tool.tsv"
  : > "$log"; : > "$tsv"
  local extra=()
  # initcheck: track unused memory too would flag the library's padding; the default is reads of
  # uninitialised device memory, which is what we want.
  [ "$tool" = racecheck ] && extra=(--racecheck-report all)
  for b in $BINS; do
    [ -x "$U/tests/$b" ] || { printf '%s\t%s\tmissing\t-\t-\n' "$tool" "$b" >> "$tsv"; continue; }
    local t0 part rc passed errs
    t0=$(date +%s)
    part=$(mktemp)
    (cd "$U/crate" && timeout "${SAN_TIMEOUT:-150}" "$CS" --tool "$tool" --error-exitcode 9 "${extra[@]}" \
      "$U/tests/$b" --test-threads=1 "${SKIP_ARGS[@]}") > "$part" 2>&1
    rc=$?
    passed=$(grep -oE 'test result: [a-z]+\. [0-9]+ passed' "$part" | grep -oE '[0-9]+ passed' | head -1)
    errs=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|INITCHECK SUMMARY|SYNCCHECK SUMMARY' "$part" | tail -1)
    { echo "##### $tool $b rc=$rc $(( $(date +%s) - t0 ))s"; cat "$part"; } >> "$log"
    printf '%s\t%s\t%s\t%s\t%s\t%ss\n' "$tool" "$b" "${passed:-0 passed}" "${errs:-no summary}" "rc=$rc" \
      "$(( $(date +%s) - t0 ))" >> "$tsv"
    rm -f "$part"
  done
}

pids=()
for tool in $TOOLS; do
  if [ "${PARALLEL:-1}" = 1 ]; then run_tool "$tool" & pids+=($!); else run_tool "$tool"; fi
done
for p in "${pids[@]}"; do wait "$p"; done

status=0
echo "tool	binary	tests	summary	exit	time"
for tool in $TOOLS; do
  cat "$OUT/sanitize-$tool.tsv"
  while IFS=$'\t' read -r _ _ _ summary rc _; do
    [ "$rc" = "rc=0" ] || status=1
    case "$summary" in *" 0 errors"*|*" 0 hazards"*) ;; *) status=1 ;; esac
  done < "$OUT/sanitize-$tool.tsv"
done
echo "sanitize-gpu: $([ $status = 0 ] && echo "all clean" || echo "FINDINGS or failures (see $OUT/sanitize-*.log)")"
exit $status
