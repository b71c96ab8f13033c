#!/usr/bin/env bash
# setup-hip-sid.sh -- a gfx942/gfx950 ROCm compiler on Debian 12: a Debian sid root filesystem
# with hipcc 7.2 / clang-22 / HIP 7.2 headers and runtime / Composable Kernel 7.2 (and, for
# the ROCm link step, Debian's cargo), plus host wrappers that run its tools in place.
# Compile-only: no GPU, no kernel driver. Needs root (mmdebstrap --mode=root, chroot).
#
#   sudo scripts/setup-hip-sid.sh
#   hipcc --offload-arch=gfx942 ...            # wrapper in $WRAPPER_DIR
#   hip-sid-run cargo build ...                # any tool of the root, cwd and paths kept
#
# Env:
#   SIDROOT=/opt/sidroot       the root filesystem
#   WRAPPER_DIR=/usr/local/bin hipcc, hipconfig, llvm-objdump, ... wrappers (never `cargo`:
#                              that would shadow the host's); existing wrappers are kept
#   WITH_CK=1                  libcomposable-kernel-dev (experimental only)
#   WITH_CARGO=1               Debian's cargo + rustc + gcc inside the root (added to an
#                              existing root without touching its files)
#   HIP_STACK=experimental     experimental: hipcc 7.2.4, clang-22, HIP 7.2.4 (hardware FP8
#                              conversion on gfx950); sid: hipcc 7.0.2, clang-21, HIP 6.4.3
#   MIRROR=http://deb.debian.org/debian
#   FORCE_WRAPPERS=1           rewrite the wrappers even if present
# Idempotent: a complete root and existing wrappers make this a check that takes seconds.
set -euo pipefail
SIDROOT=${SIDROOT:-/opt/sidroot}
WRAPPER_DIR=${WRAPPER_DIR:-/usr/local/bin}
WITH_CK=${WITH_CK:-1}
WITH_CARGO=${WITH_CARGO:-1}
HIP_STACK=${HIP_STACK:-experimental}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
t0=$(date +%s)
log() { echo "[setup-hip-sid +$(( $(date +%s) - t0 ))s] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [ "$HIP_STACK" = experimental ]; then LLVM_VER=22; else LLVM_VER=21; fi
ROCM_PKGS="base-files,bash,dash,coreutils,hipcc,libamdhip64-dev,rocm-device-libs-$LLVM_VER"
[ "$WITH_CK" = 1 ] && ROCM_PKGS="$ROCM_PKGS,libcomposable-kernel-dev"
CARGO_PKGS="cargo,rustc,gcc,g++,libc6-dev,binutils"
# The ROCm packages come from experimental (priority 990), everything else from sid.
if [ "$HIP_STACK" = experimental ]; then
  PIN="hipcc libamdhip64* libhiprtc* libamd-comgr* libhsa-runtime* rocm-device-libs* libcomposable-kernel*"
else
  PIN="libcomposable-kernel*"
fi

rocm_ok() {
  [ -x "$SIDROOT/usr/bin/hipcc" ] && [ -e "$SIDROOT/usr/lib/x86_64-linux-gnu/libamdhip64.so" ] || return 1
  if [ "$WITH_CK" = 1 ]; then [ -e "$SIDROOT/usr/include/ck/ck.hpp" ] || return 1; fi
}
cargo_ok() { [ -x "$SIDROOT/usr/bin/cargo" ] && [ -x "$SIDROOT/usr/bin/cc" ]; }

retry() {  # retry N cmd...: the archive and the network fail now and then
  local n=$1 i; shift
  for ((i = 1; i <= n; i++)); do
    "$@" && return 0
    log "attempt $i/$n failed"
    [ "$i" -lt "$n" ] && sleep $((i * 15))
  done
  return 1
}

# extract DIR PKGS: unpack PKGS and their dependencies into a new directory DIR.
# --variant=extract unpacks without running maintainer scripts (fast; no apt inside).
# Check-Valid-Until=false: the reachable archive can be a frozen snapshot whose Release
# file has expired.
extract() {
  local dir=$1 pkgs=$2
  rm -rf "$dir"
  mmdebstrap --mode=root --variant=extract \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --aptopt='APT::Install-Recommends "false"' \
    --aptopt='Acquire::Retries "5"' \
    --setup-hook="mkdir -p \"\$1/etc/apt/preferences.d\"; printf 'Package: $PIN\nPin: release a=experimental\nPin-Priority: 990\n' > \"\$1/etc/apt/preferences.d/rocm-experimental\"" \
    --include="$pkgs" sid "$dir" "deb $MIRROR sid main" "deb $MIRROR experimental main"
}

need_bootstrap=0
rocm_ok || need_bootstrap=1
need_cargo=0
if [ "$WITH_CARGO" = 1 ] && ! cargo_ok; then need_cargo=1; fi

if [ $need_bootstrap = 1 ] || [ $need_cargo = 1 ]; then
  [ "$(id -u)" = 0 ] || die "building $SIDROOT needs root"
  command -v mmdebstrap >/dev/null || {
    log "installing mmdebstrap"
    retry 3 apt-get update -qq
    DEBIAN_FRONTEND=noninteractive retry 3 apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
  }
fi

if [ $need_bootstrap = 1 ]; then
  pkgs=$ROCM_PKGS
  [ "$WITH_CARGO" = 1 ] && pkgs="$pkgs,$CARGO_PKGS"
  log "bootstrapping sid ($HIP_STACK ROCm, CK=$WITH_CK, cargo=$WITH_CARGO) into $SIDROOT"
  # Build next to the target and move it into place: never leave a half-made root behind.
  retry 3 extract "$SIDROOT.new" "$pkgs" || die "mmdebstrap failed"
  if [ -e "$SIDROOT" ]; then mv "$SIDROOT" "$SIDROOT.old.$$"; rm -rf "$SIDROOT.old.$$"; fi
  mv "$SIDROOT.new" "$SIDROOT"
  need_cargo=0
elif [ $need_cargo = 1 ]; then
  # Unpack cargo's closure separately and copy in only files the root lacks: every file
  # already there (same archive snapshot) stays untouched, so tools running from the root
  # meanwhile never see a file disappear.
  log "adding Debian cargo to $SIDROOT"
  retry 3 extract "$SIDROOT.cargo.$$" "$CARGO_PKGS" || die "mmdebstrap (cargo) failed"
  cp -a --no-clobber "$SIDROOT.cargo.$$/." "$SIDROOT/"
  rm -rf "$SIDROOT.cargo.$$"
fi

if [ $need_bootstrap = 1 ] || [ "${need_cargo:-0}" = 1 ]; then
  # CK ships a 2 GB prebuilt convolution library for gfx11/gfx12 only: useless here.
  rm -rf "$SIDROOT/usr/lib/x86_64-linux-gnu/libdevice_conv_operations.a" \
    "$SIDROOT"/usr/share/doc/* "$SIDROOT"/usr/share/man/* "$SIDROOT"/usr/share/locale/*
  [ -e "$SIDROOT/usr/bin/sh" ] || ln -s dash "$SIDROOT/usr/bin/sh"     # hipcc runs clang via sh
  [ -e "$SIDROOT/usr/bin/cc" ] || { [ -x "$SIDROOT/usr/bin/gcc" ] && ln -s gcc "$SIDROOT/usr/bin/cc"; } || true
  [ -e "$SIDROOT/usr/bin/c++" ] || { [ -x "$SIDROOT/usr/bin/g++" ] && ln -s g++ "$SIDROOT/usr/bin/c++"; } || true
  # Unpacked without maintainer scripts: the gcc-N/binutils alternatives are not made, so
  # point the plain names at the versioned tools.
  for t in gcc g++ cpp; do
    if [ ! -e "$SIDROOT/usr/bin/$t" ]; then
      v=$(cd "$SIDROOT/usr/bin" && ls "$t"-[0-9]* 2>/dev/null | sort -V | tail -1 || true)
      [ -n "$v" ] && ln -s "$v" "$SIDROOT/usr/bin/$t"
    fi
  done
  cp /etc/resolv.conf "$SIDROOT/etc/resolv.conf" 2>/dev/null || true
fi
rocm_ok || die "$SIDROOT has no complete ROCm stack"

# ------------------------------------------------------------------------------- wrappers
write_wrapper() {
  local tmp
  tmp=$(mktemp "$WRAPPER_DIR/.hip-sid-run.XXXXXX")
  cat > "$tmp" <<EOF
#!/bin/bash
# Generated by hipfp8 scripts/setup-hip-sid.sh: run a tool of the sid root $SIDROOT as if it
# were installed here. Paths visible inside at the same absolute place: /tmp, \$HOME, \$PWD,
# \$OUT_DIR, \$CARGO_MANIFEST_DIR, \$CARGO_TARGET_DIR, \$CARGO_HOME and \$HIP_SID_BINDS (':'-separated).
# HIP_SID_MODE: chroot (root; private mount namespace), bwrap or proot (no root needed).
DEFAULT_ROOT=$SIDROOT
LLVM_BIN=/usr/lib/llvm-$LLVM_VER/bin
EOF
  cat >> "$tmp" <<'EOF'
set -eu
ROOT=${HIP_SIDROOT:-$DEFAULT_ROOT}
PATHS=/usr/local/bin:/usr/bin:/bin:$LLVM_BIN
self=$(basename "$0")
if [ "$self" = hip-sid-run ]; then tool=$1; shift; else tool=$self; fi
binds="/tmp:${HOME:-}:$PWD:${OUT_DIR:-}:${CARGO_MANIFEST_DIR:-}:${CARGO_TARGET_DIR:-}:${CARGO_HOME:-}:${HIP_SID_BINDS:-}"
mode=${HIP_SID_MODE:-}
if [ -z "$mode" ]; then
  if [ "$(id -u)" = 0 ]; then mode=chroot; elif command -v bwrap >/dev/null; then mode=bwrap; else mode=proot; fi
fi
case $mode in
chroot)
  export HSR_ROOT=$ROOT HSR_BINDS=$binds HSR_CWD=$PWD HSR_TOOL=$tool HSR_PATH=$PATHS
  exec unshare --mount --propagation private /bin/bash -c '
    set -e
    IFS=: read -ra dirs <<< "$HSR_BINDS"
    for d in "${dirs[@]}"; do
      [ -n "$d" ] && [ -d "$d" ] || continue
      r=$(readlink -f "$d"); [ "$r" = / ] && continue
      mountpoint -q "$HSR_ROOT$r" 2>/dev/null && continue
      mkdir -p "$HSR_ROOT$r" && mount --rbind "$r" "$HSR_ROOT$r"
      if [ "$d" != "$r" ]; then mkdir -p "$HSR_ROOT$d" && mount --rbind "$r" "$HSR_ROOT$d"; fi
    done
    mount -t proc proc "$HSR_ROOT/proc"
    mount --rbind /dev "$HSR_ROOT/dev"
    exec chroot "$HSR_ROOT" /usr/bin/env -C "$HSR_CWD" PATH="$HSR_PATH" "$HSR_TOOL" "$@"
  ' hip-sid-run "$@" ;;
bwrap)
  IFS=: read -ra dirs <<< "$binds"
  args=(--ro-bind "$ROOT" / --proc /proc --dev /dev)
  for d in "${dirs[@]}"; do [ -n "$d" ] && [ -d "$d" ] && args+=(--bind "$d" "$d"); done
  exec bwrap "${args[@]}" --chdir "$PWD" --setenv PATH "$PATHS" "$tool" "$@" ;;
proot)
  IFS=: read -ra dirs <<< "$binds"
  args=(-R "$ROOT" -w "$PWD")
  for d in "${dirs[@]}"; do [ -n "$d" ] && [ -d "$d" ] && args+=(-b "$d"); done
  exec proot "${args[@]}" /usr/bin/env PATH="$PATHS" "$tool" "$@" ;;
*) echo "hip-sid-run: unknown HIP_SID_MODE=$mode" >&2; exit 2 ;;
esac
EOF
  chmod 755 "$tmp"
  mv "$tmp" "$WRAPPER_DIR/hip-sid-run"   # atomic: a running wrapper keeps its old file
}

mkdir -p "$WRAPPER_DIR"
if [ ! -x "$WRAPPER_DIR/hip-sid-run" ] || [ "${FORCE_WRAPPERS:-0}" = 1 ]; then
  log "writing wrappers to $WRAPPER_DIR"
  write_wrapper
else
  log "keeping existing $WRAPPER_DIR/hip-sid-run (FORCE_WRAPPERS=1 rewrites it)"
fi
for t in hipcc hipconfig llvm-objdump llvm-readelf llvm-nm llvm-objcopy llvm-mc clang-offload-bundler; do
  [ -e "$WRAPPER_DIR/$t" ] || ln -s hip-sid-run "$WRAPPER_DIR/$t"
done

# ------------------------------------------------------------------------------- smoke test
log "smoke test: gfx942 + gfx950 code objects with v_cvt_pk_fp8_f32"
tmp=$(mktemp -d /tmp/hip-sid-smoke.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/k.hip" <<'EOF'
#include <hip/hip_runtime.h>
__global__ void k(const float4* in, unsigned* out) {
  float4 v = in[threadIdx.x];
  int r = __builtin_amdgcn_cvt_pk_fp8_f32(v.x, v.y, 0, false);
  r = __builtin_amdgcn_cvt_pk_fp8_f32(v.z, v.w, r, true);
  out[threadIdx.x] = r;
}
EOF
(
  cd "$tmp"
  for a in gfx942 gfx950; do
    "$WRAPPER_DIR/hipcc" -O3 --genco --no-gpu-bundle-output --offload-arch=$a k.hip -o k.$a.co
    "$WRAPPER_DIR/llvm-objdump" -d --mcpu=$a k.$a.co > k.$a.s   # (no pipe into grep -q: pipefail + SIGPIPE)
    grep -q v_cvt_pk_fp8_f32 k.$a.s || { echo "no v_cvt_pk_fp8_f32 for $a" >&2; exit 1; }
  done
)
ver=$("$WRAPPER_DIR/hipcc" --version); ver=${ver%%$'\n'*}
if [ "$WITH_CARGO" = 1 ]; then
  cv=$("$WRAPPER_DIR/hip-sid-run" cargo --version) || die "cargo does not run inside $SIDROOT"
  ver="$ver; $cv"
fi
log "OK: $ver; root $(du -sxh "$SIDROOT" 2>/dev/null | cut -f1)"
