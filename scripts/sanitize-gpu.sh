#!/usr/bin/env bash
# sanitize-gpu.sh -- compute-sanitizer memcheck, racecheck, initcheck and synccheck over every
# GPU test binary of a bundle (scripts/build-gpu-bundle.sh), on a GPU machine.
#
#   bash scripts/sanitize-gpu.sh BUNDLE_DIR [TOOLS]     # TOOLS default "memcheck racecheck initcheck synccheck"
#
# compute-sanitizer: $COMPUTE_SANITIZER, else on PATH, else unpacked from a
# nvidia-cuda-sanitizer-api wheel found in $SANITIZER_WHEEL_DIR (default: the bundle dir and
# .whl/). The test binaries run with HIPFP8_REQUIRE_GPU=1 (a GPU test that finds no GPU fails),
# few property cases (PROPTEST_CASES, default 1), a short soak (HIPFP8_SOAK_CALLS, default 300),
# one test thread, and skip what is only slow under the tools (SKIP adds more). Every
# (tool, binary) pair runs side by side (PAR bounds how many at once), each bounded by
# SAN_TIMEOUT seconds (default 150). The binaries named in SPLIT (default: the two grouped GEMM
# suites, whose CUTLASS kernels are slow under racecheck) run one invocation per test
# (`--exact NAME`), so their tests run side by side too; a test named in SHARDS
# (`BIN::TEST=N ...`, default: the test of every CUTLASS instance, 6 shards) runs as N
# invocations with HIPFP8_TEST_SHARD=i/N, each covering every N-th of its cases.
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

# Every GPU test binary of the bundle: the integration tests whose source calls gpu_for_tests
# (BINS overrides the list).
if [ -z "${BINS:-}" ]; then
  BINS=$(grep -l gpu_for_tests "$U"/crate/tests/*.rs | xargs -n1 basename | sed 's/\.rs$//' | tr '\n' ' ')
fi
[ -n "$BINS" ] || { echo "no GPU test sources under $U/crate/tests"; exit 1; }
# Left out under the tools: only slow there (the exhaustive codec sweep, the biggest shapes and
# group counts, timing runs), or incompatible with the tools (the device-OOM test holds all
# device memory while the other tools run; tests/reliability.rs's `oom::` tests re-run the binary
# under a lowered RLIMIT_AS, too small for the tool injected into it). Each runs without the
# tools in the suite.
SKIP_ARGS=()
for s in codec_hw big_groups large_tensors gpu_timings library_large_k device_oom oom:: ${SKIP:-}; do
  SKIP_ARGS+=(--skip "$s")
done
export HIPFP8_REQUIRE_GPU=1 PROPTEST_CASES=${PROPTEST_CASES:-1} HIPFP8_SOAK_CALLS=${HIPFP8_SOAK_CALLS:-300}
export HIPFP8_GROUP_COUNTS_MAX=${HIPFP8_GROUP_COUNTS_MAX:-4097}
# Other processes share the device: the soak's device-memory flatness bound does not apply.
export HIPFP8_SOAK_FLAT_MIB=${HIPFP8_SOAK_FLAT_MIB:-1000000}

unit_file() { local u=${1//::/.}; u=${u//\//-}; echo "${u//%/.shard}"; }
run_one() {  # run_one TOOL UNIT: one invocation, one summary line in $OUT/.san-TOOL-UNIT.tsv
  # UNIT is a test binary, BIN::TEST for one test of it, or BIN::TEST%i/N for one shard.
  local tool=$1 unit=${2%%\%*} shard= b=${2%%::*} f
  [ "$2" != "$unit" ] && shard=${2#*%}
  f=$(unit_file "$2")
  local tsv="$OUT/.san-$tool-$f.tsv" part="$OUT/.san-$tool-$f.log"
  local extra=() filter=() t0 rc passed errs
  [ "$unit" != "$b" ] && filter=(--exact "${unit#*::}")
  [ "$tool" = racecheck ] && extra=(--racecheck-report all)
  # The tests provoke runtime API errors on purpose (an invalid device ordinal, host pointers)
  # and check the statuses the library returns for them; memory errors are all reported.
  [ "$tool" = memcheck ] && extra=(--report-api-errors no)
  if [ ! -x "$U/tests/$b" ]; then printf '%s\t%s\tmissing\t-\trc=-\t0s\n' "$tool" "$unit" > "$tsv"; return; fi
  t0=$(date +%s)
  (cd "$U/crate" && HIPFP8_TEST_SHARD=$shard timeout "${SAN_TIMEOUT:-150}" "$CS" --tool "$tool" --error-exitcode 9 "${extra[@]}" \
    "$U/tests/$b" --test-threads=1 "${SKIP_ARGS[@]}" "${filter[@]}") > "$part" 2>&1
  rc=$?
  passed=$(grep -oE 'test result: [a-zA-Z]+\. [0-9]+ passed' "$part" | grep -oE '[0-9]+ passed' | head -1)
  errs=$(grep -E '(ERROR|RACECHECK|INITCHECK|SYNCCHECK) SUMMARY' "$part" | tail -1 | sed 's/^========= //')
  # A test that makes no GPU call (a CPU-only test of a GPU binary): the tool exits 255 with
  # this line and has nothing to check; it counts as clean when the tests passed.
  if [ -z "$errs" ] && [ "$rc" = 255 ] && grep -q 'terminated before first instrumented API call' "$part" \
     && grep -qE 'test result: ok\.' "$part"; then
    errs="no GPU call: 0 errors"; rc=0
  fi
  printf '%s\t%s\t%s\t%s\trc=%s\t%ss\n' "$tool" "$2" "${passed:-0 passed}" "${errs:-no summary}" "$rc" \
    "$(( $(date +%s) - t0 ))" > "$tsv"
}

# The units: every binary, or each test of a SPLIT binary (its `--list`, less the skipped ones).
UNITS=()
for b in $BINS; do
  case " ${SPLIT-gpu_grouped_gemm gpu_grouped_gemm_blockwise} " in
    *" $b "*)
      if [ -x "$U/tests/$b" ]; then
        for t in $(cd "$U/crate" && "$U/tests/$b" --list "${SKIP_ARGS[@]}" 2>/dev/null | sed -n 's/: test$//p'); do
          n=1
          for sh in ${SHARDS-gpu_grouped_gemm::every_cutlass_instance_and_pair=6}; do
            [ "${sh%=*}" = "$b::$t" ] && n=${sh#*=}
          done
          if [ "$n" -gt 1 ]; then
            for ((i = 0; i < n; i++)); do UNITS+=("$b::$t%$i/$n"); done
          else
            UNITS+=("$b::$t")
          fi
        done
        continue
      fi ;;
  esac
  UNITS+=("$b")
done

# Every (tool, unit) pair side by side, at most PAR at once (default: all).
pairs=()
for tool in $TOOLS; do for b in "${UNITS[@]}"; do pairs+=("$tool $b"); done; done
running=0
for pr in "${pairs[@]}"; do
  # shellcheck disable=SC2086
  run_one $pr &
  running=$((running + 1))
  if [ "$running" -ge "${PAR:-${#pairs[@]}}" ]; then wait -n; running=$((running - 1)); fi
done
wait

status=0
echo "tool	binary	tests	summary	exit	time"
for tool in $TOOLS; do
  : > "$OUT/sanitize-$tool.log"
  for b in "${UNITS[@]}"; do
    f="$OUT/.san-$tool-$(unit_file "$b")"
    cat "$f.tsv"
    IFS=$'\t' read -r _ _ _ summary rc _ < "$f.tsv"
    [ "$rc" = "rc=0" ] || status=1
    case "$summary" in *" 0 errors"*|*" 0 hazards"*) ;; *) status=1 ;; esac
    { echo "##### $tool $b"; cat "$f.log" 2>/dev/null; } >> "$OUT/sanitize-$tool.log"
    rm -f "$f.tsv" "$f.log"
  done
done
echo "sanitize-gpu: $([ $status = 0 ] && echo "all clean" || echo "FINDINGS or failures (see $OUT/sanitize-*.log)")"
exit $status
