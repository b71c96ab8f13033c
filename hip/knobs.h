// knobs.h -- the registry of hipfp8's runtime knobs: environment variables that choose which
// code path runs (for benchmark A/B sweeps and debugging). None changes a result: every path
// gives the same bytes. Each knob is one X(...) line here and nowhere else: the launchers read
// kernel knobs through hipfp8::knob(kKnob_ID) (hip/quant/common.hip), the Rust side reads host
// knobs through src/knobs.rs, and `hipfp8 --knobs` and the README's knob table are printed
// from this file (tests/knobs.rs checks that the README matches and that no code reads a
// HIPFP8_* variable missing here).
//
// X(ID, "NAME", "type", default, "when read", "what it changes")
#pragma once

// Kernel knobs: integers (atoi), read once per process by the launchers; `default` applies
// when the variable is unset.
#define HIPFP8_KERNEL_KNOBS(X)                                                                     \
  X(COLWISE_CG, "HIPFP8_COLWISE_CG", "int", 0, "once",                                             \
    "2, 4, 8 or 16: every group of the column casts takes that tile width; other values: each group its own") \
  X(COLWISE_PERGROUP, "HIPFP8_COLWISE_PERGROUP", "bool", 1, "once",                               \
    "0: jagged column-cast groups all take the tile of the mean group instead of each its own")   \
  X(COLWISE_L, "HIPFP8_COLWISE_L", "int", 0, "once",                                               \
    "1..64: sub-chunks per work item of the jagged column casts (other values: the built-in 2)")  \
  X(COLWISE3D_L, "HIPFP8_COLWISE3D_L", "int", 0, "once",                                           \
    "1..64: sub-chunks per work item of the 3D column casts (other values: the built-in 1)")      \
  X(PGR_BLOCKS_PER_SM, "HIPFP8_PGR_BLOCKS_PER_SM", "int", 0, "once",                               \
    "1..64: per_group_rowwise grid of that many blocks per SM instead of the resident count")     \
  X(PGR_TWO_BARRIER, "HIPFP8_PGR_TWO_BARRIER", "bool", 0, "once",                                  \
    "1: per_group_rowwise with few groups takes the many-groups path (scales through shared memory)") \
  X(MXDIM1_LDS, "HIPFP8_MXDIM1_LDS", "bool", 1, "once",                                            \
    "0: MXFP8 dim1 through the register transpose instead of LDS")                                \
  X(CT_LDS, "HIPFP8_CT_LDS", "bool", 1, "once",                                                    \
    "0: the cast phase of cast_transpose(_scaled) through the register transpose instead of LDS") \
  X(MOE_COL_SPLIT, "HIPFP8_MOE_COL_SPLIT", "bool", 1, "once",                                      \
    "0: the fused MoE casts reduce their columns in a column kernel (col_kernel) instead of in the row pass + a codes kernel") \
  X(MOE_ROW_BLOCKS_PER_SM, "HIPFP8_MOE_ROW_BLOCKS_PER_SM", "int", 0, "once",                       \
    "1..64: blocks per SM of the fused MoE casts' row pass (other values: 1024 threads' worth)") \
  X(MOE_CODES_RPT, "HIPFP8_MOE_CODES_RPT", "int", 0, "once",                                     \
    "4, 8 or 16: rows per thread of the fused MoE casts' codes kernel, at most the source's 16 / 8 / 4 (other values: 8)") \
  X(ROUTE_COL_PASSES, "HIPFP8_ROUTE_COL_PASSES", "int", 0, "once",                                 \
    "1: the routing column kernel loads one row per thread per step instead of 4 (other values: 4)")

// Host knobs: read by the Rust side on every call (benchmarks switch them inside one process).
#define HIPFP8_HOST_KNOBS(X)                                                                       \
  X(GROUPED_GEMM_BACKEND, "HIPFP8_GROUPED_GEMM_BACKEND", "auto|reference|library", "auto", "every call", \
    "overrides GemmBackend::Auto of the grouped GEMMs (the C ABI has no backend argument)")       \
  X(CUTLASS_CONFIG, "HIPFP8_CUTLASS_CONFIG", "auto|cooperative|pingpong|KIND[:m|n[:SWIZZLE]]", "auto", \
    "every call", "which CUTLASS sm_90 grouped-GEMM instance and raster/swizzle run (auto: src/grouped_gemm/rule.rs)") \
  X(GG_STAGE, "HIPFP8_GG_STAGE", "auto|off", "auto", "every call",                               \
    "off: 2D x 2D grouped GEMMs on a library never stage their operands to 16-token group starts (groups off the boundary run on the reference kernel)") \
  X(MOE_DUAL, "HIPFP8_MOE_DUAL", "auto|fused", "auto", "every call",                               \
    "fused: moe_weights_dual and moe_act_dual run the fused row + codes passes instead of the single-purpose casts they fuse (colwise_3d + rowwise_3d_transpose_rhs, rowwise_2d + per_group_colwise)")
