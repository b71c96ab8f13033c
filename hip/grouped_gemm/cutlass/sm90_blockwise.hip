// Blockwise-scaled FP8 grouped GEMM 2D x 3D for NVIDIA sm_90 on CUTLASS (the DeepSeek-V3
// recipe: 1 x 128 activation scales, 128 x 128 weight scales, applied in the main loop).
// hipfp8-build: backend=cuda
// hipfp8-build: cuda-arch=90a
// hipfp8-build: requires=cutlass
// hipfp8-build: cuda-flags=--expt-relaxed-constexpr -DNDEBUG
//
// Semantics: docs/OPS.md `grouped_gemm_blockwise_2d3d`. Per group g (rows [o[g-1], o[g]) of
// a/out, expert g of b) a K-major ("TN") product whose f32 accumulator receives, every K block
// of 128, the block's partial sum times scale_a[row, kb] * scale_b[g, col / 128, kb]:
//   A = a + lo*K (M_g x K, row stride K), B = b + g*N*K (N x K, row stride K),
//   SFA = scale_a + lo*kb (M_g x kb, K-major), SFB = scale_b + g*nb*kb (nb x kb, K-major),
//   D = out + lo*N (M_g x N, bf16 RNE of the accumulator).
// Kernel: CUTLASS's pointer-array grouped GEMM with blockwise scaling
// (KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise, Sm90BlockwiseScaleConfig<1, 128,
// 128> with both scale grids K-major, i.e. exactly the row-major grids the casts write); tile
// 128 x 128 x 128, cluster 1 x 1 (see ClusterShape). As in sm90.hip, a small kernel builds
// the per-group arrays (shapes, pointers, strides, scale layouts) on the device from the
// device offsets: nothing is read back, nothing synchronises.
// Whole-call requirements (HIPFP8_KSTATUS_UNSUPPORTED otherwise, nothing launched): E4M3FN x
// E4M3FN, K % 128 == 0, N % 128 == 0, 16-byte aligned a, b, out, extents <= INT32_MAX.
#include "sm90_common.h"
#include "../launchers.h"

#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/thread/activation.h"

namespace hipfp8_gg_cutlass_bw {
using namespace cute;
using hipfp8_gg_cutlass::ElementD;
using hipfp8_gg_cutlass::LayoutA;
using hipfp8_gg_cutlass::LayoutB;
using hipfp8_gg_cutlass::LayoutD;
using hipfp8_gg_cutlass::ProblemShape;
using hipfp8_gg_cutlass::Shape3;
using hipfp8_gg_cutlass::StrideA;
using hipfp8_gg_cutlass::StrideB;
using hipfp8_gg_cutlass::StrideD;

constexpr int kBlock = 128;
using E4M3 = cutlass::float_e4m3_t;
using TileShape = Shape<_128, _128, _128>;
// Cluster 1 x 1: the consumer warpgroups read each stage's scale tiles from shared memory with
// plain loads, and CUTLASS's pipeline lets every consumer thread release the stage itself only
// when the cluster has one CTA; in a larger cluster one thread per warpgroup arrives for all
// 128, so the others' reads are not ordered before the producer's next cp.async fill of that
// stage (a race under the PTX memory model, which compute-sanitizer's racecheck reports).
using ClusterShape = Shape<_1, _1, _1>;
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, kBlock, kBlock, cute::GMMA::Major::K,
                                                              cute::GMMA::Major::K>;
using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

// Epilogue: D = bf16_rne(acc) (the scales are already in the accumulator).
using Evt = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::epilogue::thread::Identity, ElementD, float,
                                           cutlass::FloatRoundStyle::round_to_nearest>,
    cutlass::epilogue::fusion::Sm90AccFetch>;
using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, 8, ElementD,
    LayoutD*, 8, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative, Evt>::CollectiveOp;
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E4M3, cute::tuple<LayoutA*, LayoutSFA*>,
    16, E4M3, cute::tuple<LayoutB*, LayoutSFB*>, 16, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
static_assert(std::is_same_v<typename Kernel::InternalStrideA, StrideA> &&
                  std::is_same_v<typename Kernel::InternalStrideB, StrideB> &&
                  std::is_same_v<typename Kernel::InternalStrideD, StrideD>,
              "grouped strides");

// The per-group argument arrays, carved out of the caller's workspace.
struct Arrays {
  Shape3* shapes;
  const E4M3** pa;
  const E4M3** pb;
  ElementD** pd;
  const float** psa;
  const float** psb;
  StrideA* sta;
  StrideB* stb;
  StrideD* std_;
  LayoutSFA* lsa;
  LayoutSFB* lsb;
  void* cutlass_ws;
};
constexpr int kArrays = 12;

// Byte offsets of each array for `groups` groups; returns the total with CUTLASS's own
// workspace at the end.
inline size_t layout(int groups, size_t cutlass_bytes, size_t off[kArrays]) {
  const size_t g = (size_t)groups, p = sizeof(void*);
  const size_t sizes[kArrays] = {g * sizeof(Shape3),    g * p,
                                 g * p,                 g * p,
                                 g * p,                 g * p,
                                 g * sizeof(StrideA),   g * sizeof(StrideB),
                                 g * sizeof(StrideD),   g * sizeof(LayoutSFA),
                                 g * sizeof(LayoutSFB), cutlass_bytes};
  size_t at = 0;
  for (int i = 0; i < kArrays; ++i) {
    off[i] = at;
    at += hipfp8_gg_cutlass::round_up(sizes[i]);
  }
  return at;
}

inline Arrays carve(void* ws, int groups) {
  size_t off[kArrays];
  layout(groups, 0, off);
  char* base = static_cast<char*>(ws);
  Arrays r;
  r.shapes = reinterpret_cast<Shape3*>(base + off[0]);
  r.pa = reinterpret_cast<const E4M3**>(base + off[1]);
  r.pb = reinterpret_cast<const E4M3**>(base + off[2]);
  r.pd = reinterpret_cast<ElementD**>(base + off[3]);
  r.psa = reinterpret_cast<const float**>(base + off[4]);
  r.psb = reinterpret_cast<const float**>(base + off[5]);
  r.sta = reinterpret_cast<StrideA*>(base + off[6]);
  r.stb = reinterpret_cast<StrideB*>(base + off[7]);
  r.std_ = reinterpret_cast<StrideD*>(base + off[8]);
  r.lsa = reinterpret_cast<LayoutSFA*>(base + off[9]);
  r.lsb = reinterpret_cast<LayoutSFB*>(base + off[10]);
  r.cutlass_ws = base + off[11];
  return r;
}

namespace {
// One thread per group: its problem, pointers, strides and scale layouts from the device
// offsets (clamped as OPS.md says; an empty group has M = 0, no tiles).
__global__ void build(Arrays r, const uint8_t* a, const uint8_t* b, const int32_t* offs,
                      int groups, const float* sa, const float* sb, hipfp8_bf16* out, int64_t M,
                      int64_t N, int64_t K) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  int64_t lo, hi;
  hipfp8_gg::clamped_range(offs, g, M, &lo, &hi);
  const int64_t kb = K / kBlock, nb = N / kBlock;
  const int mg = (int)(hi - lo), n = (int)N, k = (int)K;
  r.shapes[g] = Shape3{mg, n, k};
  r.pa[g] = reinterpret_cast<const E4M3*>(a + lo * K);
  r.pb[g] = reinterpret_cast<const E4M3*>(b + (int64_t)g * N * K);
  r.pd[g] = reinterpret_cast<ElementD*>(out + lo * N);
  r.psa[g] = sa + lo * kb;
  r.psb[g] = sb + (int64_t)g * nb * kb;
  r.sta[g] = StrideA{K, _1{}, _0{}};
  r.stb[g] = StrideB{K, _1{}, _0{}};
  r.std_[g] = StrideD{N, _1{}, _0{}};
  r.lsa[g] = ScaleConfig::tile_atom_to_shape_SFA(make_shape(mg, n, k, 1));
  r.lsb[g] = ScaleConfig::tile_atom_to_shape_SFB(make_shape(mg, n, k, 1));
}
}  // namespace

inline typename Gemm::Arguments make_args(const Arrays& r, int groups, int sm_count) {
  typename Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  // No host copy of the shapes: CUTLASS sizes its persistent grid from the SM count.
  args.problem_shape = ProblemShape{groups, r.shapes, nullptr};
  args.mainloop = {r.pa, r.sta, r.pb, r.stb, r.psa, r.lsa, r.psb, r.lsb};
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = nullptr;
  args.epilogue.ptr_D = r.pd;
  args.epilogue.dD = r.std_;
  args.epilogue.thread = {{}, {}};  // Evt = Identity(Acc): {child, node}
  args.hw_info.device_id = 0;
  cudaGetDevice(&args.hw_info.device_id);
  args.hw_info.sm_count = sm_count;
  return args;
}

inline size_t cutlass_bytes(int groups, int sms) {
  Arrays none{};
  auto args = make_args(none, groups, sms);
  return Gemm::get_workspace_size(args);
}
}  // namespace hipfp8_gg_cutlass_bw

using namespace hipfp8_gg_cutlass_bw;

// Device workspace (bytes) of the blockwise-scaled GEMM for `groups` groups on the current
// device (CUTLASS's part depends on the SM count).
HIPFP8_EXTERN int hipfp8_gg_cutlass_bw_workspace_size(int groups, uint64_t* bytes) noexcept {
  if (groups < 0 || bytes == nullptr) return HIPFP8_KSTATUS_INVALID_SHAPE;
  const int sms = hipfp8_gg_cutlass::sm_count_of_current_device();
  if (sms <= 0) return (int)cudaErrorNoDevice;
  size_t off[kArrays];
  *bytes = (uint64_t)layout(groups, cutlass_bytes(groups, sms), off);
  return 0;
}

// Blockwise-scaled 2D x 3D (OPS.md grouped_gemm_blockwise_2d3d); requirements at the top of
// this file.
HIPFP8_EXTERN int hipfp8_gg_cutlass_bw_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b,
                                            int fmt_b, const int32_t* offs, int groups,
                                            const float* sa, const float* sb, void* out,
                                            int64_t M, int64_t N, int64_t K, void* workspace,
                                            uint64_t workspace_bytes, hipStream_t stream) noexcept {
  using hipfp8_gg_cutlass::aligned16;
  if (M < 0 || N < 0 || K < 0 || groups < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (fmt_a < 0 || fmt_a > 3 || fmt_b < 0 || fmt_b > 3) return HIPFP8_KSTATUS_INVALID_ENUM;
  if (fmt_a != HIPFP8_FMT_E4M3FN || fmt_b != HIPFP8_FMT_E4M3FN) return HIPFP8_KSTATUS_UNSUPPORTED;
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
      major != 9 || minor != 0)
    return HIPFP8_KSTATUS_UNSUPPORTED;  // sm_90a code runs on compute capability 9.0 only
  if (groups == 0 || M == 0 || N == 0) return 0;
  if (workspace == nullptr) return HIPFP8_KSTATUS_NULL_POINTER;
  if (!aligned16(workspace)) return HIPFP8_KSTATUS_MISALIGNED;
  if (K == 0 || K % kBlock != 0 || N % kBlock != 0 || !aligned16(a) || !aligned16(b) ||
      !aligned16(out))
    return HIPFP8_KSTATUS_UNSUPPORTED;
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) return HIPFP8_KSTATUS_UNSUPPORTED;
  const int sms = hipfp8_gg_cutlass::sm_count_of_current_device();
  if (sms <= 0) return (int)cudaErrorNoDevice;
  size_t off[kArrays];
  if (workspace_bytes < (uint64_t)layout(groups, cutlass_bytes(groups, sms), off))
    return HIPFP8_KSTATUS_INVALID_SHAPE;
  Arrays r = carve(workspace, groups);
  build<<<(unsigned)((groups + 127) / 128), 128, 0, stream>>>(
      r, a, b, offs, groups, sa, sb, static_cast<hipfp8_bf16*>(out), M, N, K);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return (int)e;
  auto args = make_args(r, groups, sms);
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return HIPFP8_KSTATUS_UNSUPPORTED;
  if (gemm.initialize(args, r.cutlass_ws, stream) != cutlass::Status::kSuccess)
    return HIPFP8_KSTATUS_UNSUPPORTED;
  const cutlass::Status st = gemm.run(stream);
  e = cudaGetLastError();
  if (e != cudaSuccess) return (int)e;
  return st == cutlass::Status::kSuccess ? 0 : HIPFP8_KSTATUS_UNSUPPORTED;
}
