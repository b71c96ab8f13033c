// ck_grouped_gemm_mixed.h -- Composable Kernel grouped GEMM for the mixed FP8 pairs
// (E4M3 x E5M2, E5M2 x E4M3), shared by gfx942_mixed.hip (FNUZ) and gfx950_mixed.hip (OCP).
//
// Why not ck_grouped_gemm_impl.h's DeviceOp: with CK 7.2 that device op's blockwise pipelines
// (blockwise_gemm_pipeline_xdlops_base.hpp: one ComputeDataType for both operands) copy the B
// tile from LDS into registers as ComputeTypeA, and there is no bf8 -> f8 type_convert, so a
// <f8, bf8> instance does not compile (no CK grouped device op in 7.2 passes a separate B
// compute type down: DeviceGroupedGemm_Xdl and the fixed-NK ops use one ComputeType).
// CK's own f8 x bf8 GEMM (example/01_gemm/gemm_xdl_fp8_bf8.cpp) uses the v1 gridwise GEMM,
// whose blockwise GEMM (BlockwiseGemmXdlops_k0mk1_k0nk1_m0n0m1n1m2m3m4n2_v1) keeps
// ComputeTypeA and ComputeTypeB apart and selects the mixed MFMA (MfmaSelector<f8, .., bf8>:
// v_mfma_f32_32x32x16_fp8_bf8 / _bf8_fp8 on gfx942, v_mfma_scale_f32_32x32x64_f8f6f4 with the
// operand format fields on gfx950).
//
// So this file runs CK's GridwiseGemmMultipleD_xdl_cshuffle (unmodified, CK 7.2 headers) from
// a persistent tile-loop kernel of our own, the loop of CK's
// DeviceGroupedGemmMultipleDXdlCShuffleTileLoop: it walks the same device array of
// GroupedGemmKernelArgument<2> (written by impl.h's build_2d3d / build_2d2d, per-group M or K
// never leave the device), maps each tile with CK's OffsettedBlockToCTileMap2, and calls the
// gridwise GEMM's Run(M, N, K, strides) overload. Epilogue as impl.h: E = bf16(C * D0 * D1),
// D0 per-column scale_b (Row, stride 0), D1 per-row scale_a (Col, stride 0).
//
// One difference in the epilogue: the v1 gridwise GEMM has one vector width for C, every D and
// E (impl.h's v3 op has one per tensor, S<8, 8, 1>). D1 is a per-row broadcast (stride 0 along
// N), which a vector read along N would read as 8 different rows, so the width is 1 for all
// (scalar bf16 stores, 32 lanes along N so a wave still writes contiguous 64-byte runs).
//
// The launcher rules (K % 16, N % 8, K > 256, ...), the workspace layout and the 2D x 2D
// routing to the reference kernel are impl.h's: every pair has the same shape rules.
#pragma once

#include "ck_grouped_gemm_impl.h"

#include "ck/tensor_operation/gpu/grid/block_to_ctile_map.hpp"
#include "ck/tensor_operation/gpu/grid/gridwise_gemm_multiple_d_xdl_cshuffle.hpp"
#include "ck/utility/loop_scheduler.hpp"

namespace hipfp8_gg_ck {

// 256 threads, 128 x 128 x 128 block tile, 32x32 XDL, 2x2 per wave (impl.h's tile), no LDS
// pad row (32 KB of LDS: two blocks per CU on gfx942), pipeline v1 with one prefetch stage.
// K1 (elements per LDS row along K) picks the MFMA: CK selects the double-rate
// v_mfma_scale_f32_32x32x64_f8f6f4 on gfx950 only when lcm(AK1, BK1) >= 32, and gfx942 has
// only the 32x32x16 forms (K1 = 16, as CK's f8 x bf8 example). 16-byte global loads either
// way. FA / FB are the operand and compute types (the last template argument is
// BComputeDataType).
template <class FA, class FB, ck::index_t K1>
using MixedGridwise = ck::GridwiseGemmMultipleD_xdl_cshuffle<
    FA, FB, FA, F32, F32, ck::Tuple<F32, F32>, BF16,  // A, B, A compute, Acc, CShuffle, Ds, E
    PassThrough, PassThrough, MultiplyMultiply,
    1,                                                // NumGemmKPrefetchStage
    256, 128, 128, 128,                               // BlockSize, MPerBlock, NPerBlock, KPerBlock
    K1, K1,                                           // AK1, BK1
    32, 32, 2, 2,                                     // MPerXdl, NPerXdl, MXdlPerWave, NXdlPerWave
    S<128 / K1, 256 * K1 / 128, 1>, S<1, 0, 2>, S<1, 0, 2>, 2, 16, 16, false, 0,  // A block transfer
    S<128 / K1, 256 * K1 / 128, 1>, S<1, 0, 2>, S<1, 0, 2>, 2, 16, 16, false, 0,  // B block transfer
    1, 1, S<1, 8, 1, 32>, 1,                          // CShuffle, CDE cluster, CDE vector
    ck::LoopScheduler::Default, ck::PipelineVersion::v1, FB>;

// K1 of each target's TU (tests/emu/ck_host_check.cpp checks the same instances).
constexpr ck::index_t kMixedK1Gfx942 = 16;
constexpr ck::index_t kMixedK1Gfx950 = 32;

constexpr ck::index_t kMixedKPerBlock = 128;
constexpr int kMixedBlockSize = 256;
using MixedTileMap = ck::BlockToCTileMap_Grouped_M00_N0_M01Adapt<8, 128, 128>;
using MixedOffsetTileMap = ck::OffsettedBlockToCTileMap2<MixedTileMap>;
using DsLayout = ck::Tuple<Row, Col>;

// The persistent tile loop of CK's kernel_grouped_gemm_multiple_d_xdl (tile-loop device op):
// block b takes tiles b, b + grid, b + 2 grid, ... of the groups laid end to end.
template <class GG>
__global__ void __launch_bounds__(kMixedBlockSize, CK_MIN_BLOCK_PER_CU)
    mixed_tile_loop(const KernelArg* __restrict__ args, int group_count) {
#if defined(__gfx9__)
  __shared__ char p_shared[GG::GetSharedMemoryNumberOfByte()];
  ck::index_t tile_id = ck::get_block_1d_id();
  ck::index_t tile_offset = 0;
  ck::index_t group_id = -1;
  ck::index_t group_offset = 0;
  ck::index_t grid_size_grp = 0;
  ck::index_t tile_start = 0, tile_end = 0;
  auto map = MixedOffsetTileMap(MixedTileMap(1, 1), 1, 1);
  bool first = true;
  do {
    while (!(tile_id >= tile_start && tile_id < tile_end) && group_id < group_count) {
      group_offset += grid_size_grp;
      group_id++;
      if (group_id >= group_count) return;
      const KernelArg& g = args[group_id];
      if (g.M == 0 || g.N == 0 || g.K == 0) {
        grid_size_grp = 0;
        continue;
      }
      map = MixedOffsetTileMap(MixedTileMap(g.M, g.N, 4), group_offset, tile_offset);
      grid_size_grp = map.CalculateGridSize(g.M, g.N);
      tile_start = group_offset;
      tile_end = group_offset + grid_size_grp;
    }
    const KernelArg& g = args[group_id];
    typename GG::DsGridPointer p_ds;
    p_ds(ck::Number<0>{}) = static_cast<const F32*>(g.p_ds_grid[0]);
    p_ds(ck::Number<1>{}) = static_cast<const F32*>(g.p_ds_grid[1]);
    const ck::index_t k_padded =
        (g.K + kMixedKPerBlock - 1) / kMixedKPerBlock * kMixedKPerBlock;
    map.UpdateTileOffset(tile_offset);
    // The previous tile's epilogue reads LDS (C shuffle) until its last store; the next
    // tile's prologue writes A/B into the same LDS.
    if (!first) ck::block_sync_lds();
    first = false;
    if (GG::CalculateHasMainKBlockLoop(k_padded)) {
      GG::template Run<true, ck::InMemoryDataOperationEnum::Set, kGemmSpec, Row, Col, DsLayout,
                       Row>(g.p_a_grid, g.p_b_grid, p_ds, g.p_e_grid, p_shared, PassThrough{},
                            PassThrough{}, MultiplyMultiply{}, g.M, g.N, g.K, g.StrideA,
                            g.StrideB, g.StrideDs, g.StrideE, map);
    } else {
      GG::template Run<false, ck::InMemoryDataOperationEnum::Set, kGemmSpec, Row, Col, DsLayout,
                       Row>(g.p_a_grid, g.p_b_grid, p_ds, g.p_e_grid, p_shared, PassThrough{},
                            PassThrough{}, MultiplyMultiply{}, g.M, g.N, g.K, g.StrideA,
                            g.StrideB, g.StrideDs, g.StrideE, map);
    }
    tile_id += ck::get_grid_size();
    tile_offset += ck::get_grid_size();
  } while (group_id < group_count);
#else
  (void)args;
  (void)group_count;
#endif
}

// The host part of the support check (pure host code; tests/emu/ck_host_check.cpp runs it):
// what CK's DeviceGemmMultipleD_Xdl_CShuffle::IsSupportedArgument checks for this gridwise
// GEMM (vector widths of A, B, E and the tile / pipeline / 2 GB checks of CheckValidity) on
// the descriptors the kernel builds, for every placeholder descriptor of the call.
template <class FA, class FB, ck::index_t K1>
bool host_supported_mixed(int groups, int64_t cols, int64_t red, int64_t lda, int64_t ldb,
                          int64_t ldo) {
  using GG = MixedGridwise<FA, FB, K1>;
  for (const auto& d : host_descs(groups, cols, red, lda, ldb, ldo)) {
    if (!GG::template CheckTensorTransfersValidity<Row, Col, Row>(d.M_, d.N_, d.K_)) return false;
    const auto a = GG::template MakeAGridDescriptor_M_K<Row, kGemmSpec>(d.M_, d.K_, d.stride_A_);
    const auto b = GG::template MakeBGridDescriptor_N_K<Col, kGemmSpec>(d.K_, d.N_, d.stride_B_);
    const auto ds = GG::template MakeDsGridDescriptor_M_N<DsLayout, kGemmSpec>(
        {d.M_, d.M_}, {d.N_, d.N_}, {0, 0});
    const auto e = GG::template MakeEGridDescriptor_M_N<Row, kGemmSpec>(d.M_, d.N_, d.stride_C_);
    if (!GG::CheckValidity(a, b, ds, e, MixedTileMap(d.M_, d.N_))) return false;
  }
  return true;
}

template <class FA, class FB, ck::index_t K1>
bool host_accepts_2d3d_mixed(int groups, int64_t M, int64_t N, int64_t K) {
  return launcher_accepts_2d3d(M, N, K) && host_supported_mixed<FA, FB, K1>(groups, N, K, K, K, N);
}
template <class FA, class FB, ck::index_t K1>
bool host_accepts_2d2d_mixed(int groups, int64_t N, int64_t Mt, int64_t K) {
  return launcher_accepts_2d2d(N, Mt, K) &&
         host_supported_mixed<FA, FB, K1>(groups, K, kHostRed2d2d, Mt, Mt, K);
}

// impl.h's run_op for the mixed kernel: check supported, then launch one persistent block
// per resident slot (occupancy x CUs, as CK's tile-loop op) on the caller's stream.
template <class FA, class FB, ck::index_t K1>
int run_mixed(int groups, int64_t cols, int64_t red, int64_t lda, int64_t ldb, int64_t ldo,
              void* dev_args, hipStream_t stream) {
  if (!ck::is_xdl_wmma_supported<FA, FB, 32, 32>() || ck::get_warp_size() != 64 ||
      !host_supported_mixed<FA, FB, K1>(groups, cols, red, lda, ldb, ldo))
    return HIPFP8_KSTATUS_UNSUPPORTED;
  const auto kernel = mixed_tile_loop<MixedGridwise<FA, FB, K1>>;
  int occupancy = 0, dev = 0, cus = 0;
  hipError_t e = hipOccupancyMaxActiveBlocksPerMultiprocessor(&occupancy, kernel,
                                                              kMixedBlockSize, 0);
  if (e == hipSuccess) e = hipGetDevice(&dev);
  if (e == hipSuccess) e = hipDeviceGetAttribute(&cus, hipDeviceAttributeMultiprocessorCount, dev);
  if (e != hipSuccess) return (int)e;
  if (occupancy < 1 || cus < 1) return HIPFP8_KSTATUS_UNSUPPORTED;
  kernel<<<occupancy * cus, kMixedBlockSize, 0, stream>>>(static_cast<const KernelArg*>(dev_args),
                                                         groups);
  return (int)hipGetLastError();
}

}  // namespace hipfp8_gg_ck
