#!/usr/bin/env bash
# setup-nvcc.sh -- CUDA 13.0 nvcc (sm_90 capable) from PyPI wheels: no NVIDIA installer, no GPU.
# Idempotent: an existing working install at PREFIX is left alone (a few ms).
#
#   scripts/setup-nvcc.sh                 # installs into /opt/cudatc (root) or ~/.local/cudatc
#   source "$PREFIX/env.sh"               # CUDA_HOME, PATH, NVCC_CCBIN
#
# Env: PREFIX (venv dir), PYTHON (python3), WITH_TOOLS=1 (cuobjdump + nvdisasm 13.2: no 13.0
# wheels exist; they read 13.0 objects), HIPFP8_TOOLCHAIN_CACHE (pip download cache,
# default ~/.cache/hipfp8-toolchains), FORCE=1 (reinstall), SKIP_CHECK=1 (no test compile).
set -euo pipefail

if [ -z "${PREFIX:-}" ]; then
  if [ "$(id -u)" = 0 ]; then PREFIX=/opt/cudatc; else PREFIX="$HOME/.local/cudatc"; fi
fi
PYTHON=${PYTHON:-python3}
WITH_TOOLS=${WITH_TOOLS:-1}
CACHE=${HIPFP8_TOOLCHAIN_CACHE:-$HOME/.cache/hipfp8-toolchains}
t0=$(date +%s)
log() { echo "[setup-nvcc +$(( $(date +%s) - t0 ))s] $*" >&2; }

# The CUDA 13.0 update 2 set. Every part is pinned: nvidia-cuda-nvcc depends on nvvm, crt and
# runtime WITHOUT pins, so pinning nvcc alone pulls a newer cicc/cudart whose PTX the r580
# (CUDA 13.0) driver on the H200 cannot JIT. cccl is needed because cuda_fp16.h includes
# nv/target.
PKGS=(
  "nvidia-cuda-nvcc==13.0.88"
  "nvidia-nvvm==13.0.88"
  "nvidia-cuda-crt==13.0.88"
  "nvidia-cuda-runtime==13.0.96"
  "nvidia-cuda-cccl==13.0.85"
)
TOOLS=("nvidia-cuda-cuobjdump==13.2.86" "nvidia-cuda-nvdisasm==13.2.86")

installed_ok() {
  [ -f "$PREFIX/env.sh" ] && [ -x "$PREFIX/cuda/bin/nvcc" ] || return 1
  [ -e "$PREFIX/cuda/lib64/libcudart_static.a" ] || return 1
  "$PREFIX/cuda/bin/nvcc" --version 2>/dev/null | grep -q "release 13.0" || return 1
  if [ "$WITH_TOOLS" = 1 ]; then [ -x "$PREFIX/cuda/bin/cuobjdump" ] || return 1; fi
}

if [ "${FORCE:-0}" != 1 ] && installed_ok; then
  log "nvcc 13.0 already installed at $PREFIX (FORCE=1 reinstalls): source $PREFIX/env.sh"
  exit 0
fi

retry() {  # retry N cmd...: network steps fail now and then
  local n=$1 i; shift
  for ((i = 1; i <= n; i++)); do
    "$@" && return 0
    log "attempt $i/$n failed: $*"
    [ "$i" -lt "$n" ] && sleep $((i * 10))
  done
  return 1
}

mkdir -p "$CACHE/pip"
if [ ! -x "$PREFIX/bin/python" ]; then
  log "creating venv $PREFIX"
  "$PYTHON" -m venv "$PREFIX"
fi
pkgs=("${PKGS[@]}")
[ "$WITH_TOOLS" = 1 ] && pkgs+=("${TOOLS[@]}")
log "pip install ${pkgs[*]}"
retry 3 "$PREFIX/bin/python" -m pip install -q --disable-pip-version-check --retries 5 --timeout 60 \
  --cache-dir "$CACHE/pip" "${pkgs[@]}"

SP=$("$PREFIX/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
CU="$SP/nvidia/cu13"
[ -x "$CU/bin/nvcc" ] || { echo "nvcc not found under $CU" >&2; exit 1; }

# Give the wheel tree the shape of a CUDA_HOME:
#  - nvcc.profile links from lib64/, the wheel ships lib/            -> lib64 symlink
#  - tools looking in targets/x86_64-linux/{include,lib}             -> symlinks
#  - -lcudart (shared) wants the unversioned name                    -> symlink
ln -sfn lib "$CU/lib64"
mkdir -p "$CU/targets/x86_64-linux"
ln -sfn ../../include "$CU/targets/x86_64-linux/include"
ln -sfn ../../lib "$CU/targets/x86_64-linux/lib"
ln -sfn libcudart.so.13 "$CU/lib/libcudart.so"
ln -sfn "$CU" "$PREFIX/cuda"

cat > "$PREFIX/env.sh.tmp" <<EOF
# source me: CUDA 13.0 nvcc from PyPI wheels (scripts/setup-nvcc.sh)
export CUDA_HOME="$PREFIX/cuda"
export CUDA_PATH="\$CUDA_HOME"
export CUDA_TOOLKIT_ROOT_DIR="\$CUDA_HOME"
export PATH="\$CUDA_HOME/bin:\$PATH"
export NVCC_CCBIN="\${NVCC_CCBIN:-g++}"
EOF
mv "$PREFIX/env.sh.tmp" "$PREFIX/env.sh"

if [ "${SKIP_CHECK:-0}" != 1 ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cat > "$tmp/t.cu" <<'EOF'
#include <cuda_runtime.h>
#include <cuda_fp8.h>
__global__ void k(const float2* in, __nv_fp8x2_storage_t* a, __nv_fp8x2_storage_t* b) {
  a[threadIdx.x] = __nv_cvt_float2_to_fp8x2(in[threadIdx.x], __NV_SATFINITE, __NV_E4M3);
  b[threadIdx.x] = __nv_cvt_float2_to_fp8x2(in[threadIdx.x], __NV_SATFINITE, __NV_E5M2);
}
int main() { int n = 0; (void)cudaGetDeviceCount(&n); return 0; }
EOF
  # A full link against cudart_static proves the lib64 layout; the SASS check proves sm_90
  # hardware conversion is emitted.
  "$CU/bin/nvcc" -ccbin "${NVCC_CCBIN:-g++}" -std=c++17 -gencode 'arch=compute_90,code=[sm_90,compute_90]' \
    "$tmp/t.cu" -o "$tmp/t"
  if [ -x "$CU/bin/cuobjdump" ]; then
    n=$("$CU/bin/cuobjdump" -sass "$tmp/t" | grep -c 'F2FP.SATFINITE' || true)
    [ "$n" -ge 2 ] || { echo "expected F2FP.SATFINITE in SASS, found $n" >&2; exit 1; }
  fi
fi
log "$("$CU/bin/nvcc" --version | tail -1); source $PREFIX/env.sh"
