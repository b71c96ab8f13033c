#!/usr/bin/env bash
# build-wheel.sh -- build the `hipfp8` Python wheel (python/hipfp8 + libhipfp8.so) in one command.
#
#   scripts/build-wheel.sh [cpu|cuda|rocm] [OUT_DIR]     # default: cpu, target/wheels/
#   pip install target/wheels/hipfp8-0.1.0+cpu-py3-none-manylinux_2_NN_x86_64.whl
#
# One wheel per backend, for every CPython >= 3.10 and every torch >= 2.6: the package is pure
# Python over the C ABI (ctypes), the bundled libhipfp8.so links no libtorch and no Python, so
# the tag is py3-none-<platform>; the platform tag is manylinux_2_<N>_x86_64 with N the newest
# glibc symbol version the library needs (checked with objdump). The local version label says
# the backend: +cpu, +cuda (nvcc, sm_90 by default: HIPFP8_CUDA_ARCH; cudart linked statically,
# the library needs only the driver's libcuda.so.1), +rocm (hipcc; needs ROCm's libamdhip64 at
# run time).
#   cpu:  cargo, no GPU toolchain.
#   cuda: nvcc 13 + CUTLASS from scripts/setup-nvcc.sh (default prefix /opt/cudatc).
#   rocm: hipcc inside the Debian sid root (scripts/setup-hip-sid.sh, `hip-sid-run`), or a
#         host ROCm when hipcc and libamdhip64 are found.
# Env: CARGO_TARGET_DIR (default target/wheel-<backend>), PYTHON (default python3).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BACKEND=${1:-cpu}
OUT=$(mkdir -p "${2:-$ROOT/target/wheels}" && cd "${2:-$ROOT/target/wheels}" && pwd)
PY=${PYTHON:-python3}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target/wheel-$BACKEND}

case "$BACKEND" in
cpu)
  HIPFP8_BACKEND=cpu cargo build --release --lib --locked
  ;;
cuda)
  prefix=${NVCC_PREFIX:-/opt/cudatc}
  if [ ! -f "$prefix/env.sh" ]; then PREFIX="$prefix" WITH_CUTLASS=1 "$ROOT/scripts/setup-nvcc.sh"; fi
  # shellcheck disable=SC1091
  source "$prefix/env.sh"
  HIPFP8_BACKEND=cuda HIPFP8_STRICT=1 cargo build --release --lib --locked
  ;;
rocm)
  if command -v hipcc >/dev/null 2>&1 && [ -n "$(ls "${ROCM_PATH:-/opt/rocm}"/lib/libamdhip64.so* 2>/dev/null)" ]; then
    HIPFP8_BACKEND=rocm HIPFP8_STRICT=1 cargo build --release --lib --locked
  else
    command -v hip-sid-run >/dev/null 2>&1 || "$ROOT/scripts/setup-hip-sid.sh"
    # The sid root's own cargo (WITH_CARGO=1), offline: crates are fetched here first.
    cargo fetch -q --locked
    HIPFP8_BACKEND=rocm HIPFP8_STRICT=1 HIP_SID_BINDS="$ROOT" \
      hip-sid-run cargo build --release --lib --offline --locked
  fi
  ;;
*)
  echo "build-wheel.sh: backend must be cpu, cuda or rocm, got '$BACKEND'" >&2
  exit 2
  ;;
esac

SO="$CARGO_TARGET_DIR/release/libhipfp8.so"
[ -f "$SO" ] || { echo "build-wheel.sh: $SO was not built" >&2; exit 1; }
"$PY" "$ROOT/python/make_wheel.py" --lib "$SO" --backend "$BACKEND" --out "$OUT"
