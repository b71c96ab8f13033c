#!/usr/bin/env bash
# The Composable Kernel grouped GEMM's host-side decisions, checked without an AMD GPU:
# builds tests/emu/ck_host_check.cpp with the sid root's hipcc (host code only; once per
# target: gfx942 FNUZ, gfx950 OCP) and runs it. It evaluates the launchers' shape rules and
# the host part of CK's IsSupportedArgument on the descriptors the launchers build, for every
# pair CK has (E4M3 x E4M3, E4M3 x E5M2, E5M2 x E4M3; and the blockwise-scaled E4M3 x E4M3 2D x 3D
# instance) and every benchmark shape (DeepSeek-V3,
# gpt-oss K = 2880, small experts), and fails when a decision differs from what README.md
# says. Called by .ci/gpu-compile-checks.sh (~6 s per target).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$ROOT"
for t in gfx942 gfx950; do
  flags=()
  [ "$t" = gfx950 ] && flags=(-DCK_USE_OCP_FP8=1 -DHIPFP8_CK_OCP)
  HIP_SID_BINDS="$ROOT:$WORK" hip-sid-run hipcc -x hip --offload-arch="$t" --offload-host-only -std=c++17 -O1 \
    "${flags[@]}" -Ihip tests/emu/ck_host_check.cpp -o "$WORK/ck_host_check_$t"
  HIP_SID_BINDS="$ROOT:$WORK" hip-sid-run "$WORK/ck_host_check_$t"
done
