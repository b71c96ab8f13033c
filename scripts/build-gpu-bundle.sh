#!/usr/bin/env bash
# build-gpu-bundle.sh -- build, with nvcc, everything a GPU machine without Rust runs:
# every test binary (unit + integration), the release cdylib/staticlib, every binary and
# bench target, plus the tracked sources the tests may read, into a git-ignored folder.
#
#   scripts/build-gpu-bundle.sh [BUNDLE_DIR]      # default .gpu/bundle
#   # copy BUNDLE_DIR to the checkout the GPU run ships (e.g. /work/main/.gpu/<name>/),
#   # name it in the run's `carry`, and run there:  bash .gpu/<name>/run-gpu-bundle.sh
#
# Env: HIPFP8_CUDA_ARCH (default 90), CARGO_TARGET_DIR (default target/gpu-cuda),
#      BUNDLE_NO_STRIP=1 (keep debug info: bigger, better backtraces),
#      BUNDLE_TESTS="gpu_moe gpu_recipe ..." (pack only these test binaries, no static
#      library unless ffi_examples is named and no CLI test binaries unless cli is: a smaller
#      payload that fits the device carry with other files; the build and stage are the same).
# Binaries link cudart statically: on the GPU machine they need only the driver's libcuda.so.1.
# The bundle is BUNDLE_DIR/{payload.tar.xz,MANIFEST,run-gpu-bundle.sh}; the runner unpacks it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BUNDLE=$(mkdir -p "${1:-$ROOT/.gpu/bundle}" && cd "${1:-$ROOT/.gpu/bundle}" && pwd)
t0=$(date +%s)
log() { echo "[gpu-bundle +$(( $(date +%s) - t0 ))s] $*" >&2; }

# CUTLASS headers when a translation unit asks for them and none are configured.
WITH_CUTLASS=0
if grep -rqsE '^// hipfp8-build: *requires=.*cutlass' hip && [ -z "${HIPFP8_CUTLASS_DIR:-}${CUTLASS_DIR:-}" ]; then
  WITH_CUTLASS=1
fi
if ! command -v nvcc >/dev/null || [ $WITH_CUTLASS = 1 ]; then
  prefix=${NVCC_PREFIX:-/opt/cudatc}
  PREFIX="$prefix" WITH_CUTLASS=$WITH_CUTLASS "$ROOT/scripts/setup-nvcc.sh"
  # shellcheck disable=SC1091
  source "$prefix/env.sh"
fi
export HIPFP8_BACKEND=cuda HIPFP8_STRICT=1
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target/gpu-cuda}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# artifacts MODE < cargo JSON: "<dest>\t<name>\t<path>" per artifact. MODE tests: test
# executables -> tests/; release: binaries -> bin/, cdylib/staticlib -> lib/; bench: -> bin/.
artifacts() {
  python3 -c '
import json, sys
mode = sys.argv[1]
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact":
        continue
    t = m["target"]
    kinds = t["kind"]
    exe = m.get("executable")
    if mode == "tests" and exe and not m["profile"]["test"] and "bin" in kinds:
        # the binary integration tests run through env!("CARGO_BIN_EXE_<name>")
        print("testbin\t%s\t%s" % (t["name"], exe))
    elif mode == "tests" and exe and m["profile"]["test"]:
        # unit tests of the lib are named lib<crate>, integration tests by their file
        is_lib = bool(set(kinds) & {"lib", "rlib", "cdylib", "staticlib", "dylib"})
        print("tests\t%s\t%s" % (("lib" + t["name"]) if is_lib else t["name"], exe))
    elif mode in ("release", "bench") and exe:
        print("bin\t%s\t%s" % (t["name"], exe))
    elif mode == "release" and ("cdylib" in kinds or "staticlib" in kinds):
        # both: the C examples link each (tests/ffi_examples.rs, HIPFP8_LIB_DIR)
        for f in m["filenames"]:
            if f.endswith((".so", ".a")):
                print("lib\t%s\t%s" % (t["name"], f))
' "$1"
}

log "test binaries (HIPFP8_BACKEND=cuda, arch ${HIPFP8_CUDA_ARCH:-90})"
# Benches are left out here on purpose: in test mode a harness=false bench runs its main().
cargo test --no-run --lib --bins --tests --message-format=json-render-diagnostics > "$WORK/tests.json"
log "release library and binaries"
cargo build --release --lib --bins --message-format=json-render-diagnostics > "$WORK/release.json"
if grep -qE '^\[\[bench\]\]' Cargo.toml || [ -d benches ]; then
  cargo bench --no-run --message-format=json-render-diagnostics > "$WORK/bench.json"
else
  : > "$WORK/bench.json"
fi

# Assemble in a staging tree, then pack it: every test binary embeds the same kernel fatbins
# (~10 MB), so the tree is ~20x larger than a solid xz archive of it (the GPU run carries
# at most 64 MiB).
STAGE="$CARGO_TARGET_DIR/gpu-bundle-stage"
rm -rf "$STAGE"
mkdir -p "$STAGE"/{tests,bin,lib,crate,testbin}
strip_copy() {  # strip debug info unless asked not to: test binaries are ~10 MB each with it
  cp "$1" "$2"
  [ "${BUNDLE_NO_STRIP:-0}" = 1 ] || strip --strip-debug "$2"
}
while IFS=$'\t' read -r kind name path; do
  case $kind in
    tests | bin) strip_copy "$path" "$STAGE/$kind/$name" ;;
    testbin)
      strip_copy "$path" "$STAGE/testbin/$name"
      printf '%s\t%s\n' "$name" "$path" >> "$STAGE/testbin/paths.tsv" ;;
    lib) strip_copy "$path" "$STAGE/lib/$(basename "$path")" ;;
  esac
done < <(artifacts tests < "$WORK/tests.json"; artifacts release < "$WORK/release.json"; artifacts bench < "$WORK/bench.json")
rmdir "$STAGE/bin" 2>/dev/null || true   # no binary targets yet
# What the payload leaves out of the stage (the stage keeps everything, for repacking).
LEAVE=()
if [ -n "${BUNDLE_TESTS:-}" ]; then
  for t in $BUNDLE_TESTS; do [ -f "$STAGE/tests/$t" ] || { log "BUNDLE_TESTS: no test binary $t"; exit 1; }; done
  for t in "$STAGE"/tests/*; do
    [[ " $BUNDLE_TESTS " == *" $(basename "$t") "* ]] || LEAVE+=("--exclude=./tests/$(basename "$t")")
  done
  [[ " $BUNDLE_TESTS " == *" ffi_examples "* ]] || LEAVE+=("--exclude=./lib/libhipfp8.a")
  [[ " $BUNDLE_TESTS " == *" cli "* ]] || LEAVE+=("--exclude=./testbin")
fi

# The tracked sources (test data, headers, examples): tests run with this as their cwd and
# CARGO_MANIFEST_DIR, as under cargo.
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$STAGE/crate"

{
  echo "hipfp8 GPU bundle"
  echo "built:   $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "commit:  $(git rev-parse HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "backend: cuda, arch ${HIPFP8_CUDA_ARCH:-90}; $(nvcc --version | tail -1)"
  echo "rustc:   $(rustc --version)"
  # Tests embed these absolute paths (env!("CARGO_MANIFEST_DIR"), env!("CARGO_BIN_EXE_*")):
  # the runner links them to the bundle where they do not exist.
  echo "build_root: $ROOT"
  echo "files:"
  (cd "$STAGE" && { find tests bin lib -type f 2>/dev/null || true; } | sort | while read -r f; do
    [[ " ${LEAVE[*]} " == *" --exclude=./$f "* ]] && continue
    printf '  %-40s %8d KiB\n' "$f" $(( $(stat -c %s "$f") / 1024 ))
  done)
} > "$STAGE/MANIFEST"
log "packing $(du -sm "$STAGE" | cut -f1) MiB (solid xz; identical fatbins compress away)"
rm -rf "$BUNDLE"/{tests,bin,lib,crate,MANIFEST,run-gpu-bundle.sh,payload.tar.xz}
# One xz stream with a dictionary larger than the largest file (a test binary, ~70 MiB), so a
# binary's repeat of the one before it is found (a dictionary smaller than that packs ~10x larger).
big=$(find "$STAGE" -type f -printf '%s\n' | sort -n | tail -1)
dict=$(( (big >> 20) + 32 ))
[ "$dict" -ge 64 ] || dict=64
tar -C "$STAGE" "${LEAVE[@]}" -cf - . | xz -T1 --lzma2=preset=6,dict=${dict}MiB > "$BUNDLE/payload.tar.xz"
cp "$STAGE/MANIFEST" "$BUNDLE/MANIFEST"
cp "$ROOT/scripts/run-gpu-bundle.sh" "$BUNDLE/run-gpu-bundle.sh"
size=$(du -sm "$BUNDLE" | cut -f1)
log "bundle in $BUNDLE: ${size} MiB (payload.tar.xz + run-gpu-bundle.sh + MANIFEST)"
cat "$BUNDLE/MANIFEST"
[ "$size" -lt 60 ] || log "WARNING: ${size} MiB is close to the 64 MiB a GPU run can carry"
