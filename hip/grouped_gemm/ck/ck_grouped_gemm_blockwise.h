// ck_grouped_gemm_blockwise.h -- Composable Kernel blockwise-scaled (DeepSeek-V3 recipe) FP8
// grouped GEMM, 2D x 3D (docs/OPS.md grouped_gemm_blockwise_2d3d), shared by
// gfx942_blockwise.hip (E4M3FNUZ) and gfx950_blockwise.hip (E4M3FN).
//
// Semantics, per group g = rows [lo, hi) of a / out and expert g of b (a K-major "TN" product):
//   out[i, j] = bf16( sum_q  (sum_{k in block q} a[i,k] * b[g,j,k])  *  (sa[i,q] * sb[g,j/128,q]) )
// The f32 accumulator takes, every reduction block of 128, the block's MFMA partial sum times
// the block's scales (applied in the main loop, not after it): CK's ab_scale pipeline
// (blockwise_gemm_pipeline_xdlops_v3_ab_scale.hpp) zeroes a per-block accumulator, runs the
// block's MFMAs into it, then adds partial * (sa * sb) to the tile's accumulator.
// Arithmetic differs from the CPU / portable reference in the rounding order only (the
// reference sums each block in eight f32 lanes and adds (partial * sa) * sb; here the MFMA's
// own summation order and partial * (sa * sb)): compared with the f64 reference within the
// blockwise GEMM tolerance, never bit for bit.
//
// Scale layouts (the same as the CUTLASS sm_90 instance and the reference kernel; one group's
// grids are contiguous from its pointers, which is what CK's scale descriptors assume):
//   sa (M, K/128) row-major: group g's grid starts at sa + lo * (K/128), CK's A scale grid
//     for RowMajor A with ScaleBlockM = 1, ScaleBlockK = 128: (M_g, K/128), strides (K/128, 1),
//     i.e. sa[(lo + i) * (K/128) + q].
//   sb (E, N/128, K/128) row-major: group g's grid starts at sb + g * (N/128) * (K/128), CK's
//     B scale grid for ColumnMajor B (b[g] is N x K, K contiguous) with ScaleBlockN = 128,
//     ScaleBlockK = 128: (N/128, K/128), strides (K/128, 1), i.e.
//     sb[g * (N/128) * (K/128) + (j / 128) * (K/128) + q].
// b is (E, N, K): b[g * N * K + j * K + k] (the reference kernel's and CUTLASS's indexing).
//
// Kernel: CK's GridwiseGemmMultiD_ABScale_xdl_cshuffle_v3 (CK 7.2 headers, unmodified), run
// from a persistent tile loop of our own over the device argument array (CkArg, written on the
// device by build_bw_2d3d: per-group M never leaves the device), as ck_grouped_gemm_mixed.h does
// for the mixed pairs. CK 7.2 has no grouped ab_scale device op, and this gridwise GEMM's Run
// takes no tile map: it maps `get_block_1d_id()` to a tile of the one problem it is given. So
// this file includes the gridwise header with `get_block_1d_id()` defined as a macro that
// reads the tile index our loop stores in the problem it passes (BwProblem::tile, a field of a
// struct derived from CK's Problem, read through the `problem` parameter of Run: if a future
// CK renames it or calls get_block_1d_id() elsewhere, this fails to compile rather than
// silently mapping tiles to block ids). Every header the gridwise header includes is included
// before, so the macro rewrites that one header's body only.
//
// Tile: 256 threads, 128 x 128 x 128 (KPerBlock = ScaleBlockK: one scale block per K step,
// one B scale per tile per K step since NPerBlock = ScaleBlockN), 16x16 MFMA tiles, 4 x 4
// per wave (kXdlGfx942 / kXdlGfx950 say why not 32x32), 16-byte loads (AK1 = BK1 = 16),
// pipeline v3 (which needs K / 128 > 2 K steps), epilogue E = bf16(acc) through the C
// shuffle, 8 bf16 per store.
//
// Not here: the 2D x 2D (wgrad) blockwise op. Its B operand (the output columns) has one scale
// per column per token block (ScaleBlockN = 1); CK 7.2's ab_scale pipelines apply the B scale
// per XDL tile of a wave (v1: c_scale[k][m0][n0 * ScaleSliceN / NRepeat], the same value for
// every column a lane holds; v3: static_assert ScaleSliceSizeN == 1), so a per-column B scale
// is not expressible without a pipeline of our own. On ROCm the blockwise 2D x 2D op runs the
// portable kernel (src/grouped_gemm/gpu.rs says why in its plan).
#pragma once

#include "ck_grouped_gemm_impl.h"

// Everything gridwise_gemm_xdl_cshuffle_v3_multi_d_ab_scale.hpp includes, first: the macro
// below must only rewrite that header's own text.
#include "ck/tensor_description/multi_index_transform_helper.hpp"
#include "ck/tensor_description/tensor_descriptor.hpp"
#include "ck/tensor_description/tensor_descriptor_helper.hpp"
#include "ck/tensor_operation/gpu/block/blockwise_gemm_pipeline_xdlops_ab_scale_selector.hpp"
#include "ck/tensor_operation/gpu/block/thread_group_tensor_slice_transfer_v4r1.hpp"
#include "ck/tensor_operation/gpu/block/thread_group_tensor_slice_transfer_v6r1.hpp"
#include "ck/tensor_operation/gpu/block/thread_group_tensor_slice_transfer_v7r3.hpp"
#include "ck/tensor_operation/gpu/element/element_wise_operation.hpp"
#include "ck/tensor_operation/gpu/grid/block_to_ctile_map.hpp"
#include "ck/tensor_operation/gpu/thread/threadwise_tensor_slice_transfer.hpp"
#include "ck/utility/common_header.hpp"

namespace hipfp8_gg_ck_bw {
// The tile of the current group that the block computes, carried by the Problem our loop
// passes to Run (BwProblem below); the gridwise header reads it instead of the block id.
template <class P>
__device__ inline ck::index_t tile_of(const P& problem);
}  // namespace hipfp8_gg_ck_bw

#ifdef get_block_1d_id
#error "get_block_1d_id is already a macro"
#endif
#define get_block_1d_id() ::hipfp8_gg_ck_bw::tile_of(problem)
#include "ck/tensor_operation/gpu/grid/gridwise_gemm_xdl_cshuffle_v3_multi_d_ab_scale.hpp"
#undef get_block_1d_id

namespace hipfp8_gg_ck_bw {

using hipfp8_gg_ck::BF16;
using hipfp8_gg_ck::Col;
using hipfp8_gg_ck::F32;
using hipfp8_gg_ck::KernelArg;
using hipfp8_gg_ck::PassThrough;
using hipfp8_gg_ck::Row;
using hipfp8_gg_ck::S;

constexpr ck::index_t kBlock = 128;     // scale block edge; also the tile's M, N and K
constexpr int kBlockSize = 256;         // threads
constexpr int64_t kVecN = 8;            // bf16 per epilogue store
// Pipeline v3 runs K / 128 > PrefetchStages (2) K steps (CheckValidity refuses fewer, and CK
// has no v3 kernel without a main loop): K >= 384.
constexpr int64_t kMinK = 3 * kBlock;
// M is padded (arbitrary group sizes); N and K are whole blocks (launcher rule), padding them
// costs nothing and keeps CK's checks on the same path as impl.h's.
constexpr auto kGemmSpec = ck::tensor_operation::device::GemmSpecialization::MNKPadding;

// Xdl: the MFMA tile edge, 32 (2 x 2 MFMA tiles per wave) or 16 (4 x 4); one C shuffle step
// writes 32 (Xdl = 16) or 64 rows x 64 columns through LDS either way.
template <class F8, ck::index_t Xdl>
using BwGridwise = ck::GridwiseGemmMultiD_ABScale_xdl_cshuffle_v3<
    Row, Col, ck::Tuple<>, Row,                  // A, B, Ds, E layouts
    F8, F8, F32, F32, ck::Tuple<>, BF16,         // A, B, Acc, CShuffle, Ds, E
    PassThrough, PassThrough, PassThrough, kGemmSpec,
    kBlockSize, 1, kBlock, kBlock,               // BlockSize, ScaleBlockM, ScaleBlockN, ScaleBlockK
    kBlock, kBlock, kBlock,                      // MPerBlock, NPerBlock, KPerBlock
    16, 16,                                      // AK1, BK1
    Xdl, Xdl, 64 / Xdl, 64 / Xdl,                // MPerXdl, NPerXdl, MXdlPerWave, NXdlPerWave
    S<8, 32, 1>, S<1, 0, 2>, S<1, 0, 2>, 2, 16, 16, false, 0,  // A block transfer
    S<8, 32, 1>, S<1, 0, 2>, S<1, 0, 2>, 2, 16, 16, false, 0,  // B block transfer
    1, 32 / Xdl,                                 // CShuffle M / N MFMA tiles per wave per step
    S<1, 32, 1, 8>, S<8>,                        // CDE cluster, E vector
    ck::BlockGemmPipelineScheduler::Intrawave, ck::BlockGemmPipelineVersion::v3, F8, F8>;

// The MFMA tile edge of each target's TU (tests/emu/ck_host_check.cpp checks the same): 16 on
// both. With 32 (impl.h's tile), gfx950's choice of v_mfma_f32_32x32x64_f8f6f4 plus the
// pipeline's 16-register per-scale-block accumulator took 256 VGPRs and spilled 7 (32 bytes
// of scratch per lane), which CI's ISA check refuses; 16 x 16 keeps 4 per-block registers
// (gfx942 229 VGPRs, gfx950 212, no scratch: bench/NOTES-gemm.md "Session 25").
constexpr ck::index_t kXdlGfx942 = 16;
constexpr ck::index_t kXdlGfx950 = 16;

// CK's Problem P (M, N, K, strides and the padded sizes its descriptors use) plus the tile.
// Built on the device from the host's prototype (CK's Problem constructor is host-only; its
// copy constructor is not): N, K and the strides are the call's, M and its padded sizes the
// group's.
template <class P>
struct BwProblem : P {
  __device__ BwProblem(const P& proto, ck::index_t m, ck::index_t t) : P(proto), tile(t) {
    this->M = m;
    this->MPadded = (m + kBlock - 1) / kBlock * kBlock;
    this->MBlock = (m + kBlock - 1) / kBlock;
  }
  ck::index_t tile;
};

template <class P>
__device__ inline ck::index_t tile_of(const P& problem) {
  // `problem` is the Problem& Run was given: always a BwProblem<P>'s base (bw_tile_loop).
  return static_cast<const BwProblem<P>&>(problem).tile;
}

// Group g's arguments in the CkArg layout (group_args.h group_bw_2d3d): A = a + lo*K, B =
// b[g] (N x K), E = out + lo*N; the two scale grids in the places CK's rowwise ops keep their
// D tensors: p_ds[0] = sb + g*(N/128)*(K/128) (weights, 128 x 128 blocks), p_ds[1] =
// sa + lo*(K/128) (activations, 1 x 128 blocks). static: one definition per TU.
static __global__ void build_bw_2d3d(hipfp8_gg::CkArg* args, const uint8_t* a, const uint8_t* b,
                                     const int32_t* offs, int groups, const float* sa,
                                     const float* sb, uint16_t* out, int64_t M, int64_t N,
                                     int64_t K) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  int64_t lo, hi;
  hipfp8_gg::clamped_range(offs, g, M, &lo, &hi);
  args[g] = hipfp8_gg::ck_arg(hipfp8_gg::group_bw_2d3d(g, lo, hi, N, K), a, b, sa, sb, out);
}

// The persistent tile loop (CK's tile-loop device op's, as ck_grouped_gemm_mixed.h): block b
// takes tiles b, b + grid, ... of the groups laid end to end; a group's tile t (row-major over
// its ceil(M_g/128) x N/128 tiles, in CK's Block2CTileMap order) is run by the gridwise GEMM
// with BwProblem::tile = t. N, K and the strides come from `proto` (the call's), M from the
// group's argument.
template <class F8, ck::index_t Xdl>
__global__ void __launch_bounds__(kBlockSize, CK_MIN_BLOCK_PER_CU)
    bw_tile_loop(const KernelArg* __restrict__ args, int group_count,
                 typename BwGridwise<F8, Xdl>::Problem proto) {
  using GG = BwGridwise<F8, Xdl>;
#if defined(__gfx9__)
  if constexpr (GG::template IsValidCompilationParameter<ck::InMemoryDataOperationEnum::Set>()) {
    __shared__ char p_shared[GG::GetSharedMemoryNumberOfByte()];
    const ck::index_t grid = ck::get_grid_size();
    const ck::index_t n_tiles = (proto.N + kBlock - 1) / kBlock;
    ck::index_t tile = ck::get_block_1d_id();
    ck::index_t first = 0;  // the current group's first tile
    bool ran = false;
    typename GG::DsGridPointer p_ds;  // no D tensors
    for (int g = 0; g < group_count; ++g) {
      const KernelArg& arg = args[g];
      const ck::index_t tiles = (arg.M + kBlock - 1) / kBlock * n_tiles;
      for (; tile < first + tiles; tile += grid) {
        // The previous tile's epilogue reads LDS (C shuffle) until its last store; the next
        // tile's prologue writes A/B into the same LDS.
        if (ran) ck::block_sync_lds();
        ran = true;
        const BwProblem<typename GG::Problem> problem(proto, arg.M, tile - first);
        GG::template Run<true, ck::InMemoryDataOperationEnum::Set, ck::TailNumber::Full>(
            static_cast<const F8*>(arg.p_a_grid),
            static_cast<const F8*>(arg.p_b_grid), p_ds,
            static_cast<BF16*>(arg.p_e_grid), static_cast<const float*>(arg.p_ds_grid[1]),
            static_cast<const float*>(arg.p_ds_grid[0]), p_shared, problem, PassThrough{},
            PassThrough{}, PassThrough{});
      }
      first += tiles;
    }
  }
#else
  (void)args;
  (void)group_count;
  (void)proto;
#endif
}

// The launcher's whole-call shape rules (pure; pointers and workspace are checked apart):
// whole 128-blocks along N and K (one B scale per tile per K step), K >= 384 (pipeline v3),
// CK's int32 extents, and each group's A and E within CK's 32-bit buffer ranges (M*K bytes of A,
// 2*M*N bytes of E: checked for the whole M, which bounds every group).
inline bool launcher_accepts_bw_2d3d(int64_t M, int64_t N, int64_t K) {
  return K % kBlock == 0 && N % kBlock == 0 && K >= kMinK && M <= INT32_MAX && N <= INT32_MAX &&
         K <= INT32_MAX && M * K <= INT32_MAX && 2 * M * N <= INT32_MAX;
}

// The host part of CK's DeviceGemmMultiD_ABScale_Xdl_CShuffle_V3::IsSupportedArgument on a
// wave64 target, without its device query (is_xdl_wmma_supported): K % AK1 and the gridwise
// GEMM's CheckValidity on the argument of one group (N, K and strides are every group's; M is
// a placeholder, MNKPadding takes any), plus what bw_tile_loop assumes: a main K loop and a
// full tail (the Run<true, Set, Full> it instantiates). Pure host code:
// tests/emu/ck_host_check.cpp runs it for every benchmark shape on a machine without a GPU.
template <class F8, ck::index_t Xdl>
bool host_supported_bw(int64_t N, int64_t K) {
  using GG = BwGridwise<F8, Xdl>;
  const typename GG::Argument arg(nullptr, nullptr, {}, nullptr, kBlock, (ck::index_t)N,
                                  (ck::index_t)K, (ck::index_t)K, (ck::index_t)K, {},
                                  (ck::index_t)N, nullptr, nullptr, 1, PassThrough{},
                                  PassThrough{}, PassThrough{});
  return K % 16 == 0 && GG::CheckValidity(arg) && GG::CalculateHasMainKBlockLoop(arg.KPadded) &&
         GG::CalculateKBlockLoopTailNum(arg.KPadded) == ck::TailNumber::Full;
}

// What a blockwise 2D x 3D call decides on the host (launcher rules, then CK's host check).
template <class F8, ck::index_t Xdl>
bool host_accepts_bw_2d3d(int groups, int64_t M, int64_t N, int64_t K) {
  (void)groups;  // every group has the call's N and K
  return launcher_accepts_bw_2d3d(M, N, K) && host_supported_bw<F8, Xdl>(N, K);
}

inline size_t workspace_bytes(int groups) {
  return hipfp8_gg_ck::round_up((size_t)groups * sizeof(KernelArg));
}

// Check supported, build the per-group arguments on the device, launch one persistent block
// per resident slot (occupancy x CUs, as CK's tile-loop op) on the caller's stream.
// `fmt_expected`: the kernel format id of F8 (E4M3FNUZ on gfx942, E4M3FN on gfx950).
template <class F8, ck::index_t Xdl>
int grouped_bw_2d3d(int fmt_expected, const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
                    const int32_t* offs, int groups, const float* sa, const float* sb,
                    void* out, int64_t M, int64_t N, int64_t K, void* ws, size_t ws_bytes,
                    hipStream_t stream) noexcept {
  using GG = BwGridwise<F8, Xdl>;
  if (fmt_a != fmt_expected || fmt_b != fmt_expected) return HIPFP8_KSTATUS_UNSUPPORTED;
  if (groups < 0 || M < 0 || N < 0 || K < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (groups == 0 || M == 0 || N == 0) return 0;
  if (ws == nullptr || ws_bytes < workspace_bytes(groups) || !hipfp8_gg_ck::aligned16(ws))
    return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (!launcher_accepts_bw_2d3d(M, N, K) || !hipfp8_gg_ck::aligned16(a) ||
      !hipfp8_gg_ck::aligned16(b) || !hipfp8_gg_ck::aligned16(out))
    return HIPFP8_KSTATUS_UNSUPPORTED;
  try {
    if (!ck::is_xdl_wmma_supported<F8, F8, Xdl, Xdl>() || ck::get_warp_size() != 64 ||
        !host_supported_bw<F8, Xdl>(N, K))
      return HIPFP8_KSTATUS_UNSUPPORTED;
    auto* args = static_cast<hipfp8_gg::CkArg*>(ws);
    build_bw_2d3d<<<(groups + 127) / 128, 128, 0, stream>>>(args, a, b, offs, groups, sa, sb,
                                                             (uint16_t*)out, M, N, K);
    hipError_t e = hipGetLastError();
    if (e != hipSuccess) return (int)e;
    const typename GG::Problem proto(kBlock, (ck::index_t)N, (ck::index_t)K, (ck::index_t)K,
                                     (ck::index_t)K, {}, (ck::index_t)N, 1);
    const auto kernel = bw_tile_loop<F8, Xdl>;
    int occupancy = 0, dev = 0, cus = 0;
    e = hipOccupancyMaxActiveBlocksPerMultiprocessor(&occupancy, kernel, kBlockSize, 0);
    if (e == hipSuccess) e = hipGetDevice(&dev);
    if (e == hipSuccess)
      e = hipDeviceGetAttribute(&cus, hipDeviceAttributeMultiprocessorCount, dev);
    if (e != hipSuccess) return (int)e;
    if (occupancy < 1 || cus < 1) return HIPFP8_KSTATUS_UNSUPPORTED;
    kernel<<<occupancy * cus, kBlockSize, 0, stream>>>(static_cast<const KernelArg*>(ws), groups,
                                                       proto);
    return (int)hipGetLastError();
  } catch (...) {
    return hipfp8_gg_ck::status_from_exception();
  }
}

}  // namespace hipfp8_gg_ck_bw
