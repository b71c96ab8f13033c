// bw_mainloop.h -- the split-promotion consumer main loop of the blockwise-scaled CUTLASS sm_90
// grouped GEMM (sm90_blockwise.hip), for scale granularity 1 x 1 (a scale per row of A and per
// column of B, every 128-long reduction block: the 2D x 2D wgrad instance). CUDA only (CUTLASS).
//
// It is CUTLASS 4.2's pointer-array blockwise main loop
// (collective/sm90_mma_array_tma_gmma_ss_warpspecialized_fp8_blockwise_scaling.hpp, `Base`
// here: the producer side, shared memory, pipeline, tensor maps and parameters are all its)
// with a different consumer `mma`. CUTLASS's consumer issues a k-tile's WGMMAs into one
// temporary accumulator, waits for all of them, then promotes: every accumulator
// `acc += tmp * sa * sb` (its row's and its column's scale), with the tensor cores idle for
// this warpgroup meanwhile. Here each warpgroup's 64 x 128 tile is issued as two 64 x 64
// halves H0 and H1, each into its own temporary (the same 64 registers the 128-wide temporary
// takes), committed as separate WGMMA groups and software-pipelined:
//
//   k-tile 0: load its scales, issue H0, H1; wait for H0, promote H0; wait for H1
//   each next k-tile t:
//     wait for t's stage, issue H0(t)
//     promote H1(t-1) (with t-1's scales); release t-1's stage
//     load t's scales, issue H1(t); wait for H0(t); promote H0(t); wait for H1(t)
//   promote H1 of the last k-tile (whose stage mma_tail releases, as in CUTLASS)
//
// so every promotion but k-tile 0's first and the last one runs while WGMMAs of the same
// warpgroup are in flight; between k-tiles this warpgroup has none in flight only from the
// wait for H1(t) to the issue of H0(t+1). The
// promotion is CUTLASS's expression, element for element (`acc += tmp * sa * sb`, the same
// operands, the same order, the same source expression), and a 64 x 64 WGMMA computes each
// output element as the 64 x 128 one does, so the result is meant to be the same bytes as the
// stock instance (the GPU test compares both paths to the reference; bench/NOTES-gemm.md).
// The one difference: the accumulator starts at an explicit zero (CUTLASS adds to the
// fragment the kernel declares without initialising).
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/collective/collective_builder.hpp"

namespace hipfp8_gg_cutlass_bw {

template <class Base>
struct SplitPromotionMainloop : Base {
  using TileShape = typename Base::TileShape;
  using TiledMma = typename Base::TiledMma;
  using MainloopPipeline = typename Base::MainloopPipeline;
  using PipelineState = typename Base::PipelineState;
  using TensorStorage = typename Base::TensorStorage;
  using Params = typename Base::Params;
  using SmemLayoutA = typename Base::SmemLayoutA;
  using SmemLayoutB = typename Base::SmemLayoutB;
  using SmemLayoutSFA = typename Base::SmemLayoutSFA;
  using SmemLayoutSFB = typename Base::SmemLayoutSFB;
  using ElementBlockScale = typename Base::ElementBlockScale;
  using ElementA = typename TiledMma::ValTypeA;
  using ElementB = typename TiledMma::ValTypeB;
  using ElementAccumulator = typename Base::ElementAccumulator;

  static_assert(Base::ScaleMsPerTile == cute::size<0>(TileShape{}) &&
                    Base::ScaleNsPerTile == cute::size<1>(TileShape{}),
                "split promotion: scale granularity 1 x 1 only");
  static_assert(Base::ScalePromotionInterval == cute::size<2>(TileShape{}) /
                                                    cute::tile_size<2>(TiledMma{}),
                "split promotion: one promotion per k-tile");
  static constexpr int kHalfN = cute::size<1>(TileShape{}) / 2;
  using TileShapeHalf = cute::Shape<decltype(cute::get<0>(TileShape{})), cute::Int<kHalfN>,
                                    decltype(cute::get<2>(TileShape{}))>;
  // The stock TiledMma is two warpgroups along M of the K-major x K-major 64 x BLK_N atom
  // (the builder's cooperative choice); the half one is the same with a 64 x BLK_N/2 atom.
  using AtomLayout = cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>;
  static_assert(
      std::is_same_v<TiledMma, decltype(cute::make_tiled_mma(
                                   cute::GMMA::ss_op_selector<ElementA, ElementB,
                                                              ElementAccumulator, TileShape,
                                                              cute::GMMA::Major::K,
                                                              cute::GMMA::Major::K>(),
                                   AtomLayout{}))>,
      "split promotion: the cooperative K-major x K-major tiled MMA");
  using TiledMmaHalf = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<ElementA, ElementB, ElementAccumulator, TileShapeHalf,
                                 cute::GMMA::Major::K, cute::GMMA::Major::K>(),
      AtomLayout{}));
  static_assert(cute::size<1>(typename TiledMmaHalf::AtomShape_MNK{}) == kHalfN &&
                    cute::size<1>(typename TiledMma::AtomShape_MNK{}) ==
                        cute::size<1>(TileShape{}),
                "split promotion: one atom per half");

  // Whether value h * n + j of a thread's stock accumulator (n = half the values) is the tile
  // element of value j of its half-h temporary, for every thread and value: the promotion
  // pairs them by index. (Host-callable: the launcher checks it once.)
  static bool halves_match() {
    using namespace cute;
    auto full = TiledMma{}.get_layoutC_TV();      // (thread, value) -> m + BLK_M * n
    auto half = TiledMmaHalf{}.get_layoutC_TV();  // (thread, value) -> m + BLK_M * n, n < BLK_N / 2
    constexpr int kM = size<0>(TileShape{});
    constexpr int kVals = decltype(size<1>(full))::value;
    if (decltype(size<1>(half))::value * 2 != kVals || size<0>(full) != size<0>(half)) return false;
    for (int t = 0; t < size<0>(full); ++t)
      for (int h = 0; h < 2; ++h)
        for (int j = 0; j < kVals / 2; ++j) {
          const int e = half(t, j);
          if (full(t, h * (kVals / 2) + j) != e % kM + kM * (e / kM + h * kHalfN)) return false;
        }
    return true;
  }

  // (V) -> (V,1) and (V) -> (V,1,1) views, for cute::gemm's (V,M) x (V,N) => (V,M,N) dispatch.
  template <class T>
  CUTLASS_DEVICE static auto vm(T&& t) {
    return cute::make_tensor(t.data(), cute::make_layout(t.layout(), cute::Layout<cute::_1, cute::_0>{}));
  }
  template <class T>
  CUTLASS_DEVICE static auto vmn(T&& t) {
    return cute::make_tensor(t.data(), cute::make_layout(t.layout(), cute::Layout<cute::_1, cute::_0>{},
                                                         cute::Layout<cute::_1, cute::_0>{}));
  }

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read,
                          FrgTensorC& accum, int k_tile_count, int thread_idx,
                          TensorStorage& shared_tensors, Params const& mainloop_params) {
    using namespace cute;
    static_assert(is_rmem<FrgTensorC>::value, "C tensor must be rmem resident.");
    (void)mainloop_params;

    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M,BLK_K,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N,BLK_K,PIPE)
    // The scale tiles broadcast over the (BLK_M, BLK_N) tile, as CUTLASS's consumer views them.
    Tensor sSFA = make_tensor(
        make_smem_ptr(shared_tensors.smem_SFA.data()),
        make_layout(make_shape(shape<0>(SmemLayoutSFA{}), get<1>(TileShape{}),
                               make_shape(shape<1>(SmemLayoutSFA{}), shape<2>(SmemLayoutSFA{}))),
                    make_stride(stride<0>(SmemLayoutSFA{}), _0{},
                                make_stride(stride<1>(SmemLayoutSFA{}), stride<2>(SmemLayoutSFA{})))));
    Tensor sSFB = make_tensor(
        make_smem_ptr(shared_tensors.smem_SFB.data()),
        make_layout(make_shape(get<0>(TileShape{}), shape<0>(SmemLayoutSFB{}),
                               make_shape(shape<1>(SmemLayoutSFB{}), shape<2>(SmemLayoutSFB{}))),
                    make_stride(_0{}, stride<0>(SmemLayoutSFB{}),
                                make_stride(stride<1>(SmemLayoutSFB{}), stride<2>(SmemLayoutSFB{})))));

    constexpr int MmaWarpGroups = size(TiledMma{}) / cutlass::NumThreadsPerWarpGroup;
    Layout warp_group_thread_layout =
        make_layout(Int<MmaWarpGroups>{}, Int<cutlass::NumThreadsPerWarpGroup>{});
    const int warp_group_idx = __shfl_sync(0xFFFFFFFF, thread_idx / cutlass::NumThreadsPerWarpGroup, 0);

    TiledMma tiled_mma;  // the stock partition: the accumulator's and the scales' layout
    TiledMmaHalf mma_h;
    auto thr_h = mma_h.get_slice(warp_group_thread_layout(warp_group_idx));

    Tensor tCsSFA = tiled_mma.get_slice(thread_idx).partition_C(sSFA);  // (MMA,MMA_M,MMA_N,(MMA_K,PIPE))
    Tensor tCsSFB = tiled_mma.get_slice(thread_idx).partition_C(sSFB);  // (MMA,MMA_M,MMA_N,(MMA_K,PIPE))
    Tensor tCrSFA = make_tensor_like<ElementBlockScale>(tCsSFA(_, _, _, _0{}));  // (MMA,MMA_M,MMA_N)
    Tensor tCrSFB = make_tensor_like<ElementBlockScale>(tCsSFB(_, _, _, _0{}));  // (MMA,MMA_M,MMA_N)

    Tensor tCsA = thr_h.partition_A(sA);  // (MMA,MMA_M,MMA_K,PIPE)
    Tensor tCsB = thr_h.partition_B(sB);  // (MMA,MMA_N=2,MMA_K,PIPE)
    Tensor tCrA = thr_h.make_fragment_A(tCsA);
    Tensor tCrB = thr_h.make_fragment_B(tCsB);
    CUTE_STATIC_ASSERT_V(size<1>(tCsA) == Int<1>{});
    CUTE_STATIC_ASSERT_V(size<1>(tCsB) == Int<2>{});
    CUTE_STATIC_ASSERT_V(size<2>(tCsA) == size<2>(tCsB));

    // The two half temporaries: (MMA,1,2), half h = values [h*n, (h+1)*n) in the stock
    // accumulator's order (both atoms order a thread's values (2 columns, 2 rows, 8-column
    // groups), the groups of half 1 following those of half 0).
    Tensor acc_h = partition_fragment_C(mma_h, take<0, 2>(TileShape{}));
    static_assert(decltype(size(acc_h))::value == decltype(size(accum))::value, "halves cover the tile");
    static_assert(decltype(size<0>(acc_h))::value * 2 == decltype(size(accum))::value, "two halves");
    constexpr int kHalfVals = decltype(size<0>(acc_h))::value;

    auto load_scales = [&](int stage) {
      copy(tCsSFA(_, _, _, make_coord(_0{}, stage)), tCrSFA);
      copy(tCsSFB(_, _, _, make_coord(_0{}, stage)), tCrSFB);
    };
    // Issue half H's WGMMAs of the k-tile in `stage` into its temporary, as one group.
    auto issue = [&](int stage, auto H) {
      constexpr int h = decltype(H)::value;
      auto c = vmn(acc_h(_, _0{}, Int<h>{}));
      // Fence only this half: the other one may be in flight, and touching its registers
      // (even an empty asm with them as operands) makes ptxas wait for it.
      warpgroup_fence_operand(c);
      warpgroup_arrive();
      mma_h.accumulate_ = GMMA::ScaleOut::Zero;
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
        cute::gemm(mma_h, tCrA(_, _, k_block, stage), vm(tCrB(_, Int<h>{}, k_block, stage)), c);
        mma_h.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      warpgroup_fence_operand(c);
    };
    // CUTLASS's promotion (GmmaFP8Accumulation::scale_core with two scale tensors) on half H.
    auto promote = [&](auto H) {
      constexpr int h = decltype(H)::value;
      auto c = acc_h(_, _0{}, Int<h>{});
      warpgroup_fence_operand(c);
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kHalfVals; ++j) {
        const int i = h * kHalfVals + j;
        accum(i) += acc_h(i) * tCrSFA(i) * tCrSFB(i);
      }
    };

    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(accum); ++i) accum(i) = ElementAccumulator(0);
    warpgroup_fence_operand(accum);
    if (k_tile_count <= 0) return;

    PipelineState smem_pipe_release = smem_pipe_read;
    auto barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
    pipeline.consumer_wait(smem_pipe_read, barrier_token);
    int read_stage = smem_pipe_read.index();
    load_scales(read_stage);
    issue(read_stage, Int<0>{});
    issue(read_stage, Int<1>{});
    warpgroup_wait<1>();
    promote(Int<0>{});
    warpgroup_wait<0>();

    // k-tiles 1 .. count-1. At the top and the bottom no WGMMA is in flight and half 1 of the
    // previous k-tile waits for its promotion: nothing is pending across the loop's back edge,
    // so ptxas sees which registers every promotion may read (with groups pending across it,
    // it serializes every WGMMA of the loop: its message C7514).
    CUTLASS_PRAGMA_NO_UNROLL
    for (--k_tile_count; k_tile_count > 0; --k_tile_count) {
      ++smem_pipe_read;
      barrier_token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, barrier_token);
      read_stage = smem_pipe_read.index();
      issue(read_stage, Int<0>{});
      promote(Int<1>{});  // the previous k-tile's half 1, with its scales
      pipeline.consumer_release(smem_pipe_release);  // the previous k-tile's stage
      ++smem_pipe_release;
      load_scales(read_stage);
      issue(read_stage, Int<1>{});
      warpgroup_wait<1>();
      promote(Int<0>{});
      warpgroup_wait<0>();
    }
    promote(Int<1>{});  // the last k-tile's stage is released by mma_tail, as in CUTLASS
    warpgroup_fence_operand(accum);
  }
};

}  // namespace hipfp8_gg_cutlass_bw
