#!/usr/bin/env bash
# Run the portable grouped-GEMM reference kernel on the host, through a tiny emulation of
# HIP's thread model (tests/emu/port_emu.h), against an f64 loop. Checks indexing, offset
# clamping, tails and the skip mask on a machine without a GPU; it is not a GPU test.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
W="$(mktemp -d)"; trap 'rm -rf "$W"' EXIT
mkdir -p "$W/gen/grouped_gemm"
cp "$ROOT/tests/emu/port_emu.h" "$W/gen/port.h"
cp "$ROOT/hip/kernel_abi.h" "$W/gen/kernel_abi.h"
cp "$ROOT/hip/grouped_gemm/launchers.h" "$W/gen/grouped_gemm/launchers.h"
# Launch syntax `k<<<grid, threads, 0, stream>>>(args);` -> emu_launch(grid, threads, [&]{ k(args); });
perl -0pe 's/(\w+)<<<\s*([^,]+),\s*([^,]+),\s*[^,]+,\s*[^>]+>>>\((.*?)\);/emu_launch($2, $3, [&]{ $1($4); });/gs' \
  "$ROOT/hip/grouped_gemm/reference.hip" > "$W/gen/grouped_gemm/reference.hip"
cp "$ROOT/tests/emu/gg_ref_emu.cpp" "$W/"
for mb in ${EMU_MAX_BLOCKS:-3 2048}; do
${CXX:-g++} -DHIPFP8_GG_REF_MAX_BLOCKS=$mb -std=c++20 -O2 -pthread -I"$W" "$W/gg_ref_emu.cpp" -o "$W/emu"
echo "== max blocks $mb"; "$W/emu"
done
