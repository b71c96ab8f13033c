#!/usr/bin/env bash
# setup-nvcc.sh -- CUDA 13.0 nvcc (sm_90 capable) from PyPI wheels: no NVIDIA installer, no GPU.
# Idempotent: an existing working install at PREFIX is left alone (a few ms).
#
#   scripts/setup-nvcc.sh                 # installs into /opt/cudatc (root) or ~/.local/cudatc
#   source "$PREFIX/env.sh"               # CUDA_HOME, PATH, NVCC_CCBIN (+ HIPFP8_CUTLASS_DIR)
#
# Env: PREFIX (venv dir), PYTHON (python3), WITH_TOOLS=1 (cuobjdump + nvdisasm 13.2: no 13.0
# wheels exist; they read 13.0 objects), WITH_CUTLASS=1 (CUTLASS headers from the
# nvidia-cutlass wheel; env.sh then exports HIPFP8_CUTLASS_DIR for build.rs),
# HIPFP8_TOOLCHAIN_CACHE (pip download cache, default ~/.cache/hipfp8-toolchains),
# FORCE=1 (reinstall), SKIP_CHECK=1 (no test compile).
set -euo pipefail

if [ -z "${PREFIX:-}" ]; then
  if [ "$(id -u)" = 0 ]; then PREFIX=/opt/cudatc; else PREFIX="$HOME/.local/cudatc"; fi
fi
PYTHON=${PYTHON:-python3}
WITH_TOOLS=${WITH_TOOLS:-1}
WITH_CUTLASS=${WITH_CUTLASS:-0}
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
CUTLASS_PKG="nvidia-cutlass==4.2.0.0"   # only its headers (cutlass_library/source) are used

installed_ok() {
  [ -f "$PREFIX/env.sh" ] && [ -x "$PREFIX/cuda/bin/nvcc" ] || return 1
  [ -e "$PREFIX/cuda/lib64/libcudart_static.a" ] || return 1
  "$PREFIX/cuda/bin/nvcc" --version 2>/dev/null | grep -q "release 13.0" || return 1
  if [ "$WITH_TOOLS" = 1 ]; then [ -x "$PREFIX/cuda/bin/cuobjdump" ] || return 1; fi
}

retry() {  # retry N cmd...: network steps fail now and then
  local n=$1 i; shift
  for ((i = 1; i <= n; i++)); do
    "$@" && return 0
    log "attempt $i/$n failed: $*"
    [ "$i" -lt "$n" ] && sleep $((i * 10))
  done
  return 1
}

pip_install() {
  mkdir -p "$CACHE/pip"
  retry 3 "$PREFIX/bin/python" -m pip install -q --disable-pip-version-check --retries 5 --timeout 60 \
    --cache-dir "$CACHE/pip" "$@"
}

cutlass_dir() {  # the wheel's header tree, or nothing
  "$PREFIX/bin/python" -c '
import importlib.util, os
s = importlib.util.find_spec("cutlass_library")
d = os.path.join(os.path.dirname(s.origin), "source") if s else ""
print(d if os.path.isfile(os.path.join(d, "include/cutlass/cutlass.h")) else "")' 2>/dev/null || true
}

add_cutlass() {
  if [ "$WITH_CUTLASS" = 1 ] && [ -z "$(cutlass_dir)" ]; then
    log "pip install $CUTLASS_PKG (headers; --no-deps: not the Python CUDA bindings it would pull)"
    pip_install --no-deps "$CUTLASS_PKG"
  fi
}

write_env() {  # rewritten only when the content changes, and atomically
  local cdir="" tmp="$PREFIX/env.sh.tmp.$$"
  if [ "$WITH_CUTLASS" = 1 ]; then cdir=$(cutlass_dir); fi
  {
    echo "# source me: CUDA 13.0 nvcc from PyPI wheels (hipfp8 scripts/setup-nvcc.sh)"
    echo "export CUDA_HOME=\"$PREFIX/cuda\""
    echo 'export CUDA_PATH="$CUDA_HOME"'
    echo 'export CUDA_TOOLKIT_ROOT_DIR="$CUDA_HOME"'
    echo 'export PATH="$CUDA_HOME/bin:$PATH"'
    echo 'export NVCC_CCBIN="${NVCC_CCBIN:-g++}"   # nvcc reads it when no -ccbin is given'
    if [ -n "$cdir" ]; then echo "export HIPFP8_CUTLASS_DIR=\"$cdir\""; fi
  } > "$tmp"
  if [ -f "$PREFIX/env.sh" ] && { cmp -s "$tmp" "$PREFIX/env.sh" || { [ -z "$cdir" ] && grep -q 'CUDA_HOME="'"$PREFIX"'/cuda"' "$PREFIX/env.sh"; }; }; then
    rm -f "$tmp"   # same content, or an equivalent env.sh someone else wrote: keep it
  else
    mv "$tmp" "$PREFIX/env.sh"
  fi
}

if [ "${FORCE:-0}" != 1 ] && installed_ok; then
  add_cutlass
  write_env
  log "nvcc 13.0 already installed at $PREFIX (FORCE=1 reinstalls): source $PREFIX/env.sh"
  exit 0
fi

if [ ! -x "$PREFIX/bin/python" ]; then
  log "creating venv $PREFIX"
  "$PYTHON" -m venv "$PREFIX"
fi
pkgs=("${PKGS[@]}")
[ "$WITH_TOOLS" = 1 ] && pkgs+=("${TOOLS[@]}")
log "pip install ${pkgs[*]}"
pip_install "${pkgs[@]}"
add_cutlass

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
write_env

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
    "$CU/bin/cuobjdump" -sass "$tmp/t" > "$tmp/t.sass"
    n=$(grep -c 'F2FP.SATFINITE' "$tmp/t.sass" || true)
    [ "$n" -ge 2 ] || { echo "expected F2FP.SATFINITE in SASS, found $n" >&2; exit 1; }
  fi
fi
v=$("$CU/bin/nvcc" --version)
log "${v##*$'\n'}; source $PREFIX/env.sh"
