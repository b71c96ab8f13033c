#!/usr/bin/env bash
# Run a portable grouped-GEMM kernel source on the host, through a tiny emulation of HIP's
# thread model (tests/emu/port_emu.h), against a plain host definition. Not a GPU test.
#   scripts/emu-gg-ref.sh          the reference kernel (reference.hip, gg_ref_emu.cpp) vs an
#                                  f64 loop: indexing, offset clamping, tails, the skip mask;
#                                  EMU_MAX_BLOCKS (default "3 2048") caps its grid
#   scripts/emu-gg-ref.sh stage    the 2D x 2D operand staging (stage.hip, gg_stage_emu.cpp)
#                                  vs the padded layout of the groups it must copy; EMU_SMEM_GROUPS (default "1024 64")
#                                  sets the shared-memory table size (64: the global tables)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WHICH="${1:-ref}"
W="$(mktemp -d)"; trap 'rm -rf "$W"' EXIT
mkdir -p "$W/gen/grouped_gemm"
cp "$ROOT/tests/emu/port_emu.h" "$W/gen/port.h"
cp "$ROOT/hip/kernel_abi.h" "$W/gen/kernel_abi.h"
cp "$ROOT/hip/grouped_gemm/launchers.h" "$W/gen/grouped_gemm/launchers.h"
cp "$ROOT/hip/grouped_gemm/group_args.h" "$W/gen/grouped_gemm/group_args.h"
case "$WHICH" in
  ref) SRC=reference.hip; TEST=gg_ref_emu.cpp; DEF=HIPFP8_GG_REF_MAX_BLOCKS; VALS="${EMU_MAX_BLOCKS:-3 2048}" ;;
  stage) SRC=stage.hip; TEST=gg_stage_emu.cpp; DEF=HIPFP8_GG_STAGE_SMEM_GROUPS; VALS="${EMU_SMEM_GROUPS:-1024 64}" ;;
  *) echo "usage: $0 [ref|stage]" >&2; exit 2 ;;
esac
# Launch syntax `k<<<grid, threads, 0, stream>>>(args);` -> emu_launch(grid, threads, [&]{ k(args); });
perl -0pe 's/(\w+)<<<\s*([^,]+),\s*([^,]+),\s*[^,]+,\s*[^>]+>>>\((.*?)\);/emu_launch($2, $3, [&]{ $1($4); });/gs' \
  "$ROOT/hip/grouped_gemm/$SRC" > "$W/gen/grouped_gemm/$SRC"
cp "$ROOT/tests/emu/$TEST" "$W/"
for v in $VALS; do
${CXX:-g++} -D$DEF=$v -std=c++20 -O2 -pthread -I"$W" "$W/$TEST" -o "$W/emu"
echo "== $DEF=$v"; "$W/emu"
done
