#!/usr/bin/env bash
# run-gpu-bundle.sh -- run a bundle made by scripts/build-gpu-bundle.sh on a GPU machine.
# Needs no Rust and no network: bash, coreutils, the GPU driver (python3 only for the
# cdylib load check).
#
#   bash run-gpu-bundle.sh [BUNDLE_DIR] [-- LIBTEST_ARGS...]     # BUNDLE_DIR defaults to this script's dir
#
# Every test binary runs with HIPFP8_REQUIRE_GPU=1: GPU tests that find no GPU FAIL instead of
# skipping. A test that skips for another reason (a kernel not in the build) prints
# `HIPFP8_SKIP`; those are listed and counted apart, never as passes. Tests that really
# ran on the GPU print `HIPFP8_GPU_TEST` and are counted.
# Full output goes to $OUT/gpu-tests.log (or BUNDLE_DIR/logs/); the console gets a summary.
# Env: TEST_THREADS (default 4), TEST_TIMEOUT seconds per binary (default 480),
#      ONLY (a regex of test binary names to run), FIRST (names of binaries to run first, in
#      order; default "gpu_runtime gpu_quant ffi_gpu gpu_grouped_gemm"), UNPACK_ONLY=1 (unpack
#      and link the build paths, run nothing).
set -uo pipefail
B=${1:-$(dirname "$0")}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
B=$(cd "$B" && pwd)
LOGDIR=${OUT:-$B/logs}
# A packed bundle (scripts/build-gpu-bundle.sh): unpack it outside the checkout.
if [ -f "$B/payload.tar.xz" ]; then
  U=${BUNDLE_UNPACK_DIR:-${TMPDIR:-/tmp}/hipfp8-bundle}
  rm -rf "$U" && mkdir -p "$U"
  if command -v xz >/dev/null; then
    xz -dc "$B/payload.tar.xz" | tar -xf - -C "$U"
  else
    python3 -c 'import lzma, sys, tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])' \
      "$B/payload.tar.xz" "$U"
  fi || { echo "cannot unpack $B/payload.tar.xz" >&2; exit 1; }
  B=$U
fi
export HIPFP8_REQUIRE_GPU=${HIPFP8_REQUIRE_GPU:-1}
export RUST_BACKTRACE=${RUST_BACKTRACE:-1}
# Tests embed build-machine paths at compile time (env!("CARGO_MANIFEST_DIR") for data files,
# env!("CARGO_BIN_EXE_<bin>") for the CLI): make those paths lead into the bundle when they
# do not exist here. Nothing that exists is touched.
build_root=$(sed -n 's/^build_root: //p' "$B/MANIFEST" 2>/dev/null)
if [ -n "$build_root" ] && [ ! -e "$build_root" ]; then
  mkdir -p "$(dirname "$build_root")" && ln -s "$B/crate" "$build_root"
fi
if [ -f "$B/testbin/paths.tsv" ]; then
  while IFS=$'\t' read -r name orig; do
    [ -e "$orig" ] || { mkdir -p "$(dirname "$orig")" && ln -s "$B/testbin/$name" "$orig"; }
  done < "$B/testbin/paths.tsv"
fi
# The C-ABI tests link the bundle's libraries (tests/ffi_examples.rs).
if [ -f "$B/lib/libhipfp8.so" ]; then export HIPFP8_LIB_DIR="$B/lib"; fi
# UNPACK_ONLY=1: stop here (bundle unpacked, build paths linked) for callers that run single
# binaries themselves (bench/gpu_session.sh).
if [ "${UNPACK_ONLY:-0}" = 1 ]; then echo "bundle unpacked at $B"; exit 0; fi
mkdir -p "$LOGDIR"
LOG="$LOGDIR/gpu-tests.log"
: > "$LOG"
THREADS=${TEST_THREADS:-4}
TMO=${TEST_TIMEOUT:-480}

say() { echo "$*" | tee -a "$LOG"; }
say "=== hipfp8 GPU bundle run: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
[ -f "$B/MANIFEST" ] && sed -n '1,5p' "$B/MANIFEST" | tee -a "$LOG"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | sed 's/^/GPU: /' | tee -a "$LOG"
elif command -v rocm-smi >/dev/null; then
  rocm-smi --showproductname 2>&1 | tee -a "$LOG"
fi

# Order: the binaries named in FIRST (in that order), then every other one alphabetically:
# a run cut short by its time limit has then still run the GPU suites.
FIRST=${FIRST:-gpu_runtime gpu_quant ffi_gpu gpu_grouped_gemm}
tests=()
for n in $FIRST; do [ -x "$B/tests/$n" ] && tests+=("$B/tests/$n"); done
for t in "$B"/tests/*; do
  [ -x "$t" ] || continue
  [[ " $FIRST " == *" $(basename "$t") "* ]] && continue
  tests+=("$t")
done
if [ -n "${ONLY:-}" ]; then
  sel=()
  for t in "${tests[@]}"; do [[ $(basename "$t") =~ $ONLY ]] && sel+=("$t"); done
  tests=("${sel[@]}")
fi
[ ${#tests[@]} -gt 0 ] || { say "no test binaries in $B/tests"; exit 1; }
missing=$(ldd "${tests[0]}" 2>&1 | grep "not found" || true)
[ -z "$missing" ] || say "WARNING: missing libraries: $missing"

tot_pass=0 tot_fail=0 tot_ign=0 tot_gpu=0 tot_skip=0 bad=0
rows=()
for t in "${tests[@]}"; do
  name=$(basename "$t")
  out="$LOGDIR/.run.$name"
  s=$(date +%s.%N)
  (cd "$B/crate" && CARGO_MANIFEST_DIR="$B/crate" timeout "$TMO" "$t" --test-threads="$THREADS" --show-output "$@") > "$out" 2>&1
  rc=$?
  secs=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $s}")
  { echo; echo "=================== $name (rc=$rc, ${secs}s)"; cat "$out"; } >> "$LOG"
  res=$(grep -E '^test result:' "$out" | tail -1)
  p=$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<< "$res"); p=${p:-0}
  f=$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<< "$res"); f=${f:-0}
  i=$(sed -nE 's/.* ([0-9]+) ignored.*/\1/p' <<< "$res"); i=${i:-0}
  g=$(grep -c '^HIPFP8_GPU_TEST ' "$out" || true)
  k=$(grep -c '^HIPFP8_SKIP ' "$out" || true)
  status=ok
  if [ "$rc" = 124 ]; then status="TIMEOUT after ${TMO}s"; bad=1
  elif [ "$rc" != 0 ] || [ "$f" != 0 ] || [ -z "$res" ]; then status="FAILED (rc=$rc)"; bad=1; fi
  # A skipped test passes in libtest's count: move it to the skip column.
  p=$((p - k))
  tot_pass=$((tot_pass + p)); tot_fail=$((tot_fail + f)); tot_ign=$((tot_ign + i))
  tot_gpu=$((tot_gpu + g)); tot_skip=$((tot_skip + k))
  rows+=("$(printf '%-28s %6s %6s %6s %6s %6s %7ss  %s' "$name" "$p" "$f" "$i" "$k" "$g" "$secs" "$status")")
  if [ "$status" != ok ]; then
    say "--- $name: $status; failing tests and panics:"
    grep -E '^test .* FAILED$|panicked at|^---- .* stdout ----$' "$out" | head -40 | tee -a "$LOG"
    tail -n 15 "$out" | tee -a "$LOG"
  fi
  # What the GPU tests printed (device, timings, case counts), minus libtest's framing.
  if [ "$g" != 0 ]; then
    say "--- $name: output of GPU tests"
    sed -n '/^successes:$/,/^successes:$/p' "$out" | grep -vE '^(successes:|---- .* stdout ----|HIPFP8_GPU_TEST .*)?$' | head -60 | tee -a "$LOG"
  fi
  grep '^HIPFP8_SKIP ' "$out" | sed "s/^/  [$name] /" | tee -a "$LOG"
  rm -f "$out"
done

# The C ABI library must load with this machine's libc and driver.
lib_status="no cdylib in bundle"
so=$(ls "$B"/lib/*.so 2>/dev/null | head -1)
if [ -n "$so" ]; then
  if python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$so" >> "$LOG" 2>&1; then
    lib_status="$(basename "$so") loads"
  else
    lib_status="$(basename "$so") FAILED to load"; bad=1
  fi
fi

say ""
say "=== summary ($LOG)"
say "$(printf '%-28s %6s %6s %6s %6s %6s %8s  %s' binary passed failed ignored skipped on-gpu time status)"
for r in "${rows[@]}"; do say "$r"; done
say "cdylib: $lib_status"
say "GPU tests that ran on the GPU: $tot_gpu; skipped (not counted as passed): $tot_skip"
say "$tot_pass passed, $tot_fail failed, $tot_skip skipped"
exit $bad
