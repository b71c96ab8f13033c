// policy.h -- the launch policy of the quantization family, in one place: which block size and
// registers per thread a row takes, how large the persistent grids are, which tile a column
// cast takes, and which path (LDS or registers, one barrier or two) a launch runs, with the
// knobs (hip/knobs.h) that override a choice. Pure functions of the problem's facts (lengths,
// group counts, the resident block count a launcher measured for its kernel); the launchers in
// rowwise.hip, colwise.hip, tensorwise_cast_transpose.hip and blockwise_mxfp8.hip turn each
// choice into their template instance. Every path is exact, so a choice changes speed only.
// (Alignment decides between the vector and the element-wise kernels: that is a precondition of
// the vector loads, checked by each launcher, not a choice.)
#pragma once

#include <type_traits>

#include "common.h"

namespace hipfp8 {

// `f(std::integral_constant<int, i>{})` for a runtime index 0 <= i < N: how a launcher turns a
// table index of this file into a template instance.
template <int N, int I = 0, class Fn>
inline auto with_index(int i, Fn&& f) {
  if constexpr (I + 1 == N) {
    return f(std::integral_constant<int, I>{});
  } else {
    if (i == I) return f(std::integral_constant<int, I>{});
    return with_index<N, I + 1>(i, static_cast<Fn&&>(f));
  }
}

// ---------------------------------------------------------------- rows held in registers
// BLOCK threads x VPT 16-byte vectors per thread hold one row.
struct RowCfg {
  int block;
  int vpt;
};

// rowwise_2d (and colwise_3d, the same kernel over E*N rows), by the row's vector count nv:
// the smallest block that holds the row. Longer rows (> 4096 vectors: K > 32768 bf16) keep the
// first 4096 vectors in registers and re-read the rest (L2-resident): a 1024-thread variant
// needs more than the 128 VGPRs a 1024-thread workgroup gets on CDNA and spills to scratch there.
constexpr int kRowwiseCfgCount = 5;
constexpr RowCfg kRowwiseCfgs[kRowwiseCfgCount] = {{64, 4}, {128, 4}, {256, 4}, {256, 8}, {512, 8}};
inline int rowwise_cfg(int64_t nv) {
  if (nv <= 256) return 0;
  if (nv <= 512) return 1;
  if (nv <= 1024) return 2;
  if (nv <= 2048) return 3;
  return 4;
}

// The grouped row kernels (per_group_rowwise, rowwise_2d_padded) by nv; the element-wise path
// of per_group_rowwise takes kGroupedRowScalarCfg.
constexpr int kGroupedRowCfgCount = 4;
constexpr RowCfg kGroupedRowCfgs[kGroupedRowCfgCount] = {{128, 4}, {256, 4}, {256, 8}, {512, 8}};
constexpr RowCfg kGroupedRowScalarCfg = {256, 4};
inline int grouped_row_cfg(int64_t nv) {
  if (nv <= 512) return 0;
  if (nv <= 1024) return 1;
  if (nv <= 2048) return 2;
  return 3;
}

// A knob of per_group_rowwise, read once per process: values outside 0..64 are 0 (unset).
inline int pgr_knob(KnobId id) {
  const int x = knob(id);
  return x < 0 || x > 64 ? 0 : x;
}

// Blocks per SM of per_group_rowwise's persistent grid: HIPFP8_PGR_BLOCKS_PER_SM, or 0 for the
// resident count (the launcher measures it for its instance).
inline int pgr_blocks_per_sm() { return pgr_knob(kKnob_PGR_BLOCKS_PER_SM); }

// per_group_rowwise with few groups (at most a wavefront's lanes) computes each group's scale
// in every wavefront's own table (one barrier per row), unless HIPFP8_PGR_TWO_BARRIER sends it
// through the many-groups path (scales through shared memory, a second barrier).
inline bool pgr_small_groups(int G) { return G <= HIPFP8_WAVE && pgr_knob(kKnob_PGR_TWO_BARRIER) == 0; }

// per_group_rowwise past kRowwiseMaxGroups (one wavefront per (row, group) task, `per_block`
// tasks per block): 8 blocks per SM, fewer when there are fewer tasks.
inline int64_t pgr_global_grid(int64_t tasks, int64_t per_block) {
  int64_t grid = (int64_t)device_sm_count() * 8;
  if (grid > (tasks + per_block - 1) / per_block) grid = (tasks + per_block - 1) / per_block;
  return grid;
}

// rowwise_2d_padded: the blocks resident at once (each walks rows blockIdx.x, +gridDim.x, ...;
// more would run their whole share of rows as a last, mostly empty wave), at most one per row.
inline int64_t padded_grid(int64_t resident, int64_t rows_bound) {
  int64_t grid = resident;
  if (grid > rows_bound) grid = rows_bound;
  if (grid < 1) grid = 1;
  return grid;
}

// ---------------------------------------------------------------- column casts (colwise.hip)
// Smallest L (sub-chunks per work item) for jagged groups (L = 2: best or equal of 1, 2, 4;
// bench/NOTES.md, "Kernel design decisions") and for the 3D op's uniform groups of N rows
// (L = 1: 14 % faster than 2 on 7168-row groups, the same elsewhere; bench/NOTES.md, session
// 23's sweep), or HIPFP8_COLWISE_L / HIPFP8_COLWISE3D_L (1..64).
constexpr int kColDefaultL = 2;
constexpr int kCol3dDefaultL = 1;
inline int colwise_min_L(bool is3d) {
  const int r = knob(is3d ? kKnob_COLWISE3D_L : kKnob_COLWISE_L);
  if (r < 1 || r > 64) return is3d ? kCol3dDefaultL : kColDefaultL;
  return r;
}

// The tile geometry (0..3: CG = 2, 4, 8, 16 vectors across) for a group of `rows` rows: a slab
// that is ONE sub-chunk (no L2 re-read, no waiting for other blocks) is what pays, so the tile
// is the narrowest whose sub-chunk covers the group; groups longer than 2048 rows are
// multi-chunk with any tile and take CG=8. Chosen per group on the device: a launch with skewed
// groups gives each group its own tile (bench/NOTES.md, "Kernel design decisions").
__host__ __device__ inline int col_geo_for_rows(int64_t rows) {
  if (rows <= 256) return 3;
  if (rows <= 512) return 2;
  if (rows <= 1024) return 1;
  if (rows <= 2048) return 0;
  return 2;
}

// The geometry of a whole launch, or -1 for per group: 3D launches (uniform groups of
// `group_rows`) take their group's tile, compiled for it; jagged launches (`jagged`, M rows in
// G groups) let each group take its own. Bench / test knobs (read once per process):
//   HIPFP8_COLWISE_CG = 2, 4, 8, 16  every group takes that tile (compiled for it);
//   HIPFP8_COLWISE_PERGROUP = 0      jagged groups all take the tile of the MEAN group (M / G
//                                    rows), compiled for it.
inline int colwise_fixed_geo(bool jagged, int64_t group_rows, int64_t M, int G) {
  const int r = knob(kKnob_COLWISE_CG);
  if (r == 2) return 0;
  if (r == 4) return 1;
  if (r == 8) return 2;
  if (r == 16) return 3;
  if (!jagged) return col_geo_for_rows(group_rows);
  if (knob(kKnob_COLWISE_PERGROUP) == 0) return col_geo_for_rows(G > 0 ? (M + G - 1) / G : M);
  return -1;
}

// per_group_colwise_dual_padded: every group takes its own tile (col_geo_for_rows, the jagged
// default); the bench knobs above do not apply (no padded instances compiled for them).
//
// Its tail zeroing (rows from the last padded end to m_cap, unknown to the host): a grid-stride
// kernel of `block` threads over k columns x m_cap / 16 units (the worst case), at most 4 blocks
// per multiprocessor.
inline int64_t colwise_pad_tail_grid(int64_t k, int64_t m_cap, int block) {
  const int64_t units = k * ((m_cap + 15) / 16);
  int64_t grid = (units + block - 1) / block;
  const int64_t most = (int64_t)device_sm_count() * 4;
  if (grid > most) grid = most;
  return grid < 1 ? 1 : grid;
}

// ---------------------------------------------------------------- routing (route.hip)
// Passes per step of the routing column kernel (rows each thread loads before the first is
// encoded): 4, or 1 under HIPFP8_ROUTE_COL_PASSES=1 (read once per process).
inline int route_col_passes() { return knob(kKnob_ROUTE_COL_PASSES) == 1 ? 1 : 4; }

// ---------------------------------------------------------------- two-phase casts
// Grid of a grid-stride tensor kernel: one block per `per_block` chunks, capped at the blocks
// resident at once (`resident`, from resident_grid for that kernel): a cap above it would leave a
// last partial wave doing a full share of the work.
inline int tensor_grid(int64_t nchunk, int64_t per_block, int resident) {
  int64_t g = (nchunk + per_block - 1) / per_block;
  if (g > resident) g = resident;
  return g < 1 ? 1 : (int)g;
}

// cast_transpose's cast phase through shared memory (ct_cast_lds_kernel, `lds_row_tiles`
// 256-row tiles) unless HIPFP8_CT_LDS=0 (A/B knob); the register kernel also takes launches
// whose row tiles would exceed 65535 grid rows.
inline bool ct_cast_lds(int64_t lds_row_tiles) { return knob(kKnob_CT_LDS) != 0 && lds_row_tiles <= 65535; }

// ---------------------------------------------------------------- MXFP8
// mxfp8_dim1 transposes through shared memory (mx_dim1_lds_kernel, the default, faster
// (bench/NOTES.md, "Kernel design decisions")) unless HIPFP8_MXDIM1_LDS=0 (the register
// transpose, mx_dim1_kernel).
inline bool mx_dim1_lds() { return knob(kKnob_MXDIM1_LDS) != 0; }

}  // namespace hipfp8
