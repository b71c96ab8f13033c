// Blockwise-scaled FP8 grouped GEMMs for NVIDIA sm_90 on CUTLASS (the DeepSeek-V3 recipe, the
// scales applied in the main loop): 2D x 3D (1 x 128 activation scales, 128 x 128 weight
// scales; forward and dgrad) and 2D x 2D (1 x 128 token-block scales on both operands; wgrad).
// hipfp8-build: backend=cuda
// hipfp8-build: cuda-arch=90a
// hipfp8-build: requires=cutlass
// hipfp8-build: cuda-flags=--expt-relaxed-constexpr -DNDEBUG
//
// Semantics: docs/OPS.md `grouped_gemm_blockwise_2d3d` / `_2d2d`. Both are K-major ("TN")
// products per group whose f32 accumulator receives, every reduction block of 128, the block's
// partial sum times the block's scales of its row and column:
//   2D x 3D, group g = rows [lo, hi) of a/out, expert g of b:
//     A = a + lo*K (M_g x K, row stride K), B = b + g*N*K (N x K, row stride K),
//     SFA = scale_a + lo*kb (M_g x kb, K-major), SFB = scale_b + g*nb*kb (nb x kb, K-major),
//     D = out + lo*N (M_g x N).
//   2D x 2D, group g = tokens [lo, hi), taken only when lo % 128 == 0 and hi > lo:
//     A = a + lo (N x len, row stride Mt), B = b + lo (K x len, row stride Mt),
//     SFA = scale_a + (lo/128)*N (ceil(len/128) blocks of N scales, MN-major),
//     SFB = scale_b + (lo/128)*K (ceil(len/128) blocks of K scales, MN-major), D = out + g*N*K;
//     the group's blocks are then the absolute token blocks (TMA zero-fills past hi). Other
//     groups (start off a 128-token boundary, or empty) get no tiles here and are computed by
//     the reference kernel after CUTLASS, which skips the groups CUTLASS owned.
// Kernel: CUTLASS's pointer-array grouped GEMM with blockwise scaling
// (KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise, Sm90BlockwiseScaleConfig<1, GN, 128>:
// 2D x 3D GN = 128, both grids K-major; 2D x 2D GN = 1, both grids MN-major). The grouped
// kernel reads each group's scales in the COMPACT layout of its own problem shape (it
// rebuilds the layout from the shape and ignores the one passed in), so a group's grid must
// be contiguous from its pointer: the K-major (M, K/128) grids of 2D x 3D are, and so are
// block-major 2D x 2D grids (a group's blocks are consecutive rows of N or K scales), which
// is why the 2D x 2D op takes its scales (ceil(Mt/128), N) and (ceil(Mt/128), K). Tile
// 128 x 128 x 128, cluster 1 x 1 (see ClusterShape). As in
// sm90.hip, a small kernel builds the per-group arrays (shapes, pointers, strides, scale
// layouts) on the device from the device offsets: nothing is read back, nothing synchronises.
// Whole-call requirements (HIPFP8_KSTATUS_UNSUPPORTED otherwise, nothing launched): E4M3FN x
// E4M3FN, 16-byte aligned a, b, out, extents <= INT32_MAX; 2D x 3D K % 128 == 0 and
// N % 128 == 0; 2D x 2D Mt % 16 == 0 and K % 8 == 0.
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

// Epilogue: D = bf16_rne(acc) (the scales are already in the accumulator).
using Evt = cutlass::epilogue::fusion::Sm90EVT<
    cutlass::epilogue::fusion::Sm90Compute<cutlass::epilogue::thread::Identity, ElementD, float,
                                           cutlass::FloatRoundStyle::round_to_nearest>,
    cutlass::epilogue::fusion::Sm90AccFetch>;
using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, 8, ElementD,
    LayoutD*, 8, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative, Evt>::CollectiveOp;
// The epilogue's shared memory, which the main loop's stage count leaves free (a constant
// here: the host compiler cannot resolve the epilogue type inside the template below).
constexpr int kEpilogueSmem = static_cast<int>(sizeof(typename Epilogue::SharedStorage));

// One instance: scale granularity 1 (rows of A) x GN (columns of B) x 128 (reduction).
template <int GN, cute::GMMA::Major Major>
struct Inst {
  using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, GN, kBlock, Major, Major>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E4M3, cute::tuple<LayoutA*, LayoutSFA*>,
      16, E4M3, cute::tuple<LayoutB*, LayoutSFB*>, 16, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<kEpilogueSmem>,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static_assert(std::is_same_v<typename Kernel::InternalStrideA, StrideA> &&
                    std::is_same_v<typename Kernel::InternalStrideB, StrideB> &&
                    std::is_same_v<typename Kernel::InternalStrideD, StrideD>,
                "grouped strides");
};
using Bw2d3d = Inst<kBlock, cute::GMMA::Major::K>;
using Bw2d2d = Inst<1, cute::GMMA::Major::MN>;

// The per-group argument arrays of instance I, carved out of the caller's workspace.
template <class I>
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
  typename I::LayoutSFA* lsa;
  typename I::LayoutSFB* lsb;
  int32_t* owns;  // 2D x 2D: 1 where CUTLASS computes the group (the reference kernel skips it)
  void* cutlass_ws;
};
constexpr int kArrays = 13;

// Byte offsets of each array of instance I for `groups` groups; returns the total with
// CUTLASS's own workspace at the end.
template <class I>
inline size_t layout(int groups, size_t cutlass_bytes, size_t off[kArrays]) {
  const size_t g = (size_t)groups, p = sizeof(void*);
  const size_t sizes[kArrays] = {g * sizeof(Shape3),
                                 g * p,
                                 g * p,
                                 g * p,
                                 g * p,
                                 g * p,
                                 g * sizeof(StrideA),
                                 g * sizeof(StrideB),
                                 g * sizeof(StrideD),
                                 g * sizeof(typename I::LayoutSFA),
                                 g * sizeof(typename I::LayoutSFB),
                                 g * sizeof(int32_t),
                                 cutlass_bytes};
  size_t at = 0;
  for (int i = 0; i < kArrays; ++i) {
    off[i] = at;
    at += hipfp8_gg_cutlass::round_up(sizes[i]);
  }
  return at;
}

template <class I>
inline Arrays<I> carve(void* ws, int groups) {
  size_t off[kArrays];
  layout<I>(groups, 0, off);
  char* base = static_cast<char*>(ws);
  Arrays<I> r;
  r.shapes = reinterpret_cast<Shape3*>(base + off[0]);
  r.pa = reinterpret_cast<const E4M3**>(base + off[1]);
  r.pb = reinterpret_cast<const E4M3**>(base + off[2]);
  r.pd = reinterpret_cast<ElementD**>(base + off[3]);
  r.psa = reinterpret_cast<const float**>(base + off[4]);
  r.psb = reinterpret_cast<const float**>(base + off[5]);
  r.sta = reinterpret_cast<StrideA*>(base + off[6]);
  r.stb = reinterpret_cast<StrideB*>(base + off[7]);
  r.std_ = reinterpret_cast<StrideD*>(base + off[8]);
  r.lsa = reinterpret_cast<typename I::LayoutSFA*>(base + off[9]);
  r.lsb = reinterpret_cast<typename I::LayoutSFB*>(base + off[10]);
  r.owns = reinterpret_cast<int32_t*>(base + off[11]);
  r.cutlass_ws = base + off[12];
  return r;
}

namespace {
// One thread per group: its problem, pointers, strides and scale layouts from the device
// offsets (clamped as OPS.md says; an empty group has M = 0, no tiles).
__global__ void build_2d3d(Arrays<Bw2d3d> r, const uint8_t* a, const uint8_t* b,
                           const int32_t* offs, int groups, const float* sa, const float* sb,
                           hipfp8_bf16* out, int64_t M, int64_t N, int64_t K) {
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
  r.lsa[g] = Bw2d3d::ScaleConfig::tile_atom_to_shape_SFA(make_shape(mg, n, k, 1));
  r.lsb[g] = Bw2d3d::ScaleConfig::tile_atom_to_shape_SFB(make_shape(mg, n, k, 1));
  r.owns[g] = 1;
}

// 2D x 2D: CUTLASS owns a non-empty group starting on a 128-token boundary; any other gets
// M = 0 (no tiles) and owns = 0.
__global__ void build_2d2d(Arrays<Bw2d2d> r, const uint8_t* a, const uint8_t* b,
                           const int32_t* offs, int groups, const float* sa, const float* sb,
                           hipfp8_bf16* out, int64_t N, int64_t Mt, int64_t K) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  int64_t lo, hi;
  hipfp8_gg::clamped_range(offs, g, Mt, &lo, &hi);
  const int len = (int)(hi - lo), n = (int)N, k = (int)K;
  const bool own = len > 0 && lo % kBlock == 0;
  r.shapes[g] = Shape3{own ? n : 0, k, len};
  r.pa[g] = reinterpret_cast<const E4M3*>(a + lo);
  r.pb[g] = reinterpret_cast<const E4M3*>(b + lo);
  r.pd[g] = reinterpret_cast<ElementD*>(out + (int64_t)g * N * K);
  r.psa[g] = sa + (lo / kBlock) * N;
  r.psb[g] = sb + (lo / kBlock) * K;
  r.sta[g] = StrideA{Mt, _1{}, _0{}};
  r.stb[g] = StrideB{Mt, _1{}, _0{}};
  r.std_[g] = StrideD{K, _1{}, _0{}};
  r.lsa[g] = Bw2d2d::ScaleConfig::tile_atom_to_shape_SFA(make_shape(n, k, len, 1));
  r.lsb[g] = Bw2d2d::ScaleConfig::tile_atom_to_shape_SFB(make_shape(n, k, len, 1));
  r.owns[g] = own ? 1 : 0;
}
}  // namespace

template <class I>
inline typename I::Gemm::Arguments make_args(const Arrays<I>& r, int groups, int device,
                                             int sm_count) {
  typename I::Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  // No host copy of the shapes: CUTLASS sizes its persistent grid from the SM count.
  args.problem_shape = ProblemShape{groups, r.shapes, nullptr};
  args.mainloop = {r.pa, r.sta, r.pb, r.stb, r.psa, r.lsa, r.psb, r.lsb};
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = nullptr;
  args.epilogue.ptr_D = r.pd;
  args.epilogue.dD = r.std_;
  args.epilogue.thread = {{}, {}};  // Evt = Identity(Acc): {child, node}
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sm_count;
  return args;
}

template <class I>
inline size_t cutlass_bytes(int groups, int device, int sms) {
  Arrays<I> none{};
  auto args = make_args<I>(none, groups, device, sms);
  return I::Gemm::get_workspace_size(args);
}

// The workspace of either instance: the larger layout.
inline size_t workspace_bytes(int groups, int device, int sms) {
  size_t off[kArrays];
  const size_t w3 = layout<Bw2d3d>(groups, cutlass_bytes<Bw2d3d>(groups, device, sms), off);
  const size_t w2 = layout<Bw2d2d>(groups, cutlass_bytes<Bw2d2d>(groups, device, sms), off);
  return w3 > w2 ? w3 : w2;
}

// Run instance I on the arrays its build kernel wrote.
template <class I>
inline int run_gemm(const Arrays<I>& r, int groups, const hipfp8_gg_cutlass::DeviceFacts& f,
                    hipStream_t stream) {
  auto args = make_args<I>(r, groups, f.device, f.sms);
  typename I::Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return HIPFP8_KSTATUS_UNSUPPORTED;
  if (hipfp8_gg_cutlass::initialize_once_per_device(
          gemm, args, r.cutlass_ws, stream, f.device,
          hipfp8_gg_cutlass::initialized_devices<I>()) != cutlass::Status::kSuccess)
    return HIPFP8_KSTATUS_UNSUPPORTED;
  const cutlass::Status st = gemm.run(stream);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return (int)e;
  return st == cutlass::Status::kSuccess ? 0 : HIPFP8_KSTATUS_UNSUPPORTED;
}

// The checks both launchers share, in this order: formats, device, nothing to do (returns 1),
// workspace pointer, the launcher's whole-call shape rule (`shape_ok`), workspace size. The
// current device's facts (ordinal, SM count) go to *f.
inline int common_checks(int fmt_a, int fmt_b, int groups, bool empty, bool shape_ok,
                         void* workspace, uint64_t workspace_bytes_given,
                         hipfp8_gg_cutlass::DeviceFacts* f) {
  if (fmt_a < 0 || fmt_a > 3 || fmt_b < 0 || fmt_b > 3) return HIPFP8_KSTATUS_INVALID_ENUM;
  if (fmt_a != HIPFP8_FMT_E4M3FN || fmt_b != HIPFP8_FMT_E4M3FN) return HIPFP8_KSTATUS_UNSUPPORTED;
  if (!hipfp8_gg_cutlass::current_device_facts(f) || !f->sm90)
    return HIPFP8_KSTATUS_UNSUPPORTED;  // sm_90a code runs on compute capability 9.0 only
  if (groups == 0 || empty) return 1;
  if (workspace == nullptr) return HIPFP8_KSTATUS_NULL_POINTER;
  if (!hipfp8_gg_cutlass::aligned16(workspace)) return HIPFP8_KSTATUS_MISALIGNED;
  if (!shape_ok) return HIPFP8_KSTATUS_UNSUPPORTED;
  if (f->sms <= 0) return (int)cudaErrorNoDevice;
  if (workspace_bytes_given < (uint64_t)workspace_bytes(groups, f->device, f->sms))
    return HIPFP8_KSTATUS_INVALID_SHAPE;
  return 0;
}
}  // namespace hipfp8_gg_cutlass_bw

using namespace hipfp8_gg_cutlass_bw;

// Device workspace (bytes) of the blockwise-scaled GEMMs (either layout) for `groups` groups on
// the current device (CUTLASS's part depends on the SM count).
HIPFP8_EXTERN int hipfp8_gg_cutlass_bw_workspace_size(int groups, uint64_t* bytes) noexcept {
  if (groups < 0 || bytes == nullptr) return HIPFP8_KSTATUS_INVALID_SHAPE;
  hipfp8_gg_cutlass::DeviceFacts f;
  const int sms = hipfp8_gg_cutlass::current_device_facts(&f) ? f.sms : 0;
  if (sms <= 0) return (int)cudaErrorNoDevice;
  *bytes = (uint64_t)workspace_bytes(groups, f.device, sms);
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
  const bool shape_ok = K > 0 && K % kBlock == 0 && N % kBlock == 0 && aligned16(a) &&
                        aligned16(b) && aligned16(out) && M <= INT32_MAX && N <= INT32_MAX &&
                        K <= INT32_MAX;
  hipfp8_gg_cutlass::DeviceFacts f;
  const int c = common_checks(fmt_a, fmt_b, groups, M == 0 || N == 0, shape_ok, workspace,
                              workspace_bytes, &f);
  if (c != 0) return c == 1 ? 0 : c;
  Arrays<Bw2d3d> r = carve<Bw2d3d>(workspace, groups);
  build_2d3d<<<(unsigned)((groups + 127) / 128), 128, 0, stream>>>(
      r, a, b, offs, groups, sa, sb, static_cast<hipfp8_bf16*>(out), M, N, K);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return (int)e;
  return run_gemm<Bw2d3d>(r, groups, f, stream);
}

// Blockwise-scaled 2D x 2D (OPS.md grouped_gemm_blockwise_2d2d); requirements at the top of
// this file. The groups CUTLASS does not own (decided on the device) are computed by the
// reference kernel on the same stream afterwards.
HIPFP8_EXTERN int hipfp8_gg_cutlass_bw_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b,
                                            int fmt_b, const int32_t* offs, int groups,
                                            const float* sa, const float* sb, void* out,
                                            int64_t N, int64_t Mt, int64_t K, void* workspace,
                                            uint64_t workspace_bytes, hipStream_t stream) noexcept {
  using hipfp8_gg_cutlass::aligned16;
  if (N < 0 || Mt < 0 || K < 0 || groups < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  const bool shape_ok = Mt % 16 == 0 && K % 8 == 0 && aligned16(a) && aligned16(b) &&
                        aligned16(out) && N <= INT32_MAX && Mt <= INT32_MAX && K <= INT32_MAX;
  hipfp8_gg_cutlass::DeviceFacts f;
  const int c = common_checks(fmt_a, fmt_b, groups, N == 0 || K == 0, shape_ok, workspace,
                              workspace_bytes, &f);
  if (c != 0) return c == 1 ? 0 : c;
  Arrays<Bw2d2d> r = carve<Bw2d2d>(workspace, groups);
  build_2d2d<<<(unsigned)((groups + 127) / 128), 128, 0, stream>>>(
      r, a, b, offs, groups, sa, sb, static_cast<hipfp8_bf16*>(out), N, Mt, K);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return (int)e;
  const int st = run_gemm<Bw2d2d>(r, groups, f, stream);
  if (st != 0) return st;
  return hipfp8_gg_ref_bw_2d2d(a, fmt_a, b, fmt_b, offs, groups, sa, sb, out, N, Mt, K, r.owns,
                               2 * f.sms, stream);
}
