// FP8 grouped GEMM for NVIDIA sm_90 on CUTLASS 3.x/4.x (headers from the pinned
// `nvidia-cutlass` wheel, scripts/fetch-cutlass.sh, or CUTLASS_DIR).
// hipfp8-build: backend=cuda
// hipfp8-build: cuda-arch=90a
// hipfp8-build: requires=cutlass
// hipfp8-build: cuda-flags=--expt-relaxed-constexpr -DNDEBUG
//
// CUDA only: compiled with nvcc for sm_90a (wgmma needs the arch-specific target), never by
// hipcc. One kernel instance (compile time: ~90 s and ~3.8 GB on one core).
//
// Semantics: docs/OPS.md `grouped_gemm_2d3d` and `grouped_gemm_2d2d`
// (torch._scaled_grouped_mm). Per group both are K-major ("TN") products
//   out[i, j] = bf16( (acc[i, j] * sa[i]) * sb[j] ),  acc = sum_k A[i, k] * B[j, k]  (f32)
// so ONE kernel instance serves both layouts; only the per-group arguments differ:
//   2D x 3D: group g = rows [o[g-1], o[g]) of a/out, B = b[g] (N x K, K-major),
//            problem (M_g, N, K), sa = scale_a + o[g-1], sb = scale_b + g*N.
//   2D x 2D: group g = reduction range [o[g-1], o[g]); A = a[:, range] (N x L_g, row
//            stride Mt), B = b[:, range] (K x L_g, row stride Mt), out[g] (N x K),
//            problem (N, K, L_g), sa = scale_a + g*N, sb = scale_b + g*K.
//
// Kernel: CUTLASS's pointer-array grouped GEMM (KernelPtrArrayTmaWarpSpecializedCooperative
// with FP8 fast accumulation, as torch._scaled_grouped_mm uses) whose problem shapes,
// pointers and strides live in DEVICE arrays. A tiny kernel builds those arrays from the
// device offsets, so offsets are never copied to the host (no sync; graph-capturable). The
// rowwise scales are fused into the epilogue as an EVT: per-row (column-broadcast) and
// per-column (row-broadcast) scale vectors, each given as a per-group pointer array.
//
// What TMA cannot do is routed to the portable reference kernel on the device, per group:
// in 2D x 2D a group whose first column o[g-1] is not a multiple of 16 (TMA needs 16-byte
// aligned base addresses) or whose reduction is empty (CUTLASS would see K = 0) gets M = 0
// in CUTLASS (no tiles) and is computed by the reference kernel, which skips every other
// group. Whole-call requirements that the host can check (K % 16, N % 8, Mt % 16, pointer
// alignment, formats E4M3 x E4M3) return HIPFP8_KSTATUS_UNSUPPORTED so the caller picks
// another backend.
#include "../../port.h"
#include "../../kernel_abi.h"
#include "../group_args.h"

#include <cstddef>
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/kernel_hardware_info.h"

// The reference kernel's launchers (hip/grouped_gemm/reference.hip), for the per-group
// fallback of 2D x 2D.
extern "C" int hipfp8_gg_ref_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
                                  const int32_t* offs, int groups, const float* sa,
                                  const float* sb, void* out, int64_t N, int64_t Mt,
                                  int64_t K, const int32_t* skip, int max_blocks,
                                  hipStream_t stream) noexcept;

namespace hipfp8_gg_cutlass {
using namespace cute;

using ElementA = cutlass::float_e4m3_t;
using ElementB = cutlass::float_e4m3_t;
using ElementD = cutlass::bfloat16_t;
using ElementAcc = float;
using ElementScale = float;
using LayoutA = cutlass::layout::RowMajor;     // K-major
using LayoutB = cutlass::layout::ColumnMajor;  // K-major
using LayoutD = cutlass::layout::RowMajor;
constexpr int kAlignA = 16;  // elements: 16 bytes, what TMA needs
constexpr int kAlignB = 16;
constexpr int kAlignD = 8;
using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;
using Shape3 = ProblemShape::UnderlyingProblemShape;

// One GEMM configuration. Tiles for the DeepSeek-V3 MoE shapes (group M ~ 1024, N and K in
// {2048, 7168}): a 128 x 256 x 128 cooperative tile (two consumer warpgroups, 64 rows each)
// with 2 x 1 clusters, so the B tile (the expert weights) is multicast to both CTAs.
template <class TileShape_, class ClusterShape_, class KernelSchedule_, class EpilogueSchedule_>
struct Config {
  using TileShape = TileShape_;
  using ClusterShape = ClusterShape_;

  // Epilogue visitor tree: (acc * scale_a[row]) * scale_b[col], converted to bf16 (RNE).
  // Alignment 1 for the row scales: a group's first row is arbitrary, so its scale pointer
  // is only 4-byte aligned. L strides are 0: the per-group pointer already selects the group.
  using ScaleA = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, ElementScale*,
                                                             ElementScale, Stride<_1, _0, _0>, 1>;
  using ScaleB = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, ElementScale*,
                                                             ElementScale, Stride<_0, _1, _0>, 1>;
  using Acc = cutlass::epilogue::fusion::Sm90AccFetch;
  using MulA = cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float,
                                                      cutlass::FloatRoundStyle::round_to_nearest>;
  using MulB = cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, ElementD, float,
                                                      cutlass::FloatRoundStyle::round_to_nearest>;
  using Evt = cutlass::epilogue::fusion::Sm90EVT<
      MulB, cutlass::epilogue::fusion::Sm90EVT<MulA, Acc, ScaleA>, ScaleB>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementAcc, void, LayoutD*,
      kAlignD, ElementD, LayoutD*, kAlignD, EpilogueSchedule_, Evt>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA*, kAlignA, ElementB,
      LayoutB*, kAlignB, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule_>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
};

using Large = Config<Shape<_128, _256, _128>, Shape<_2, _1, _1>,
                     cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum,
                     cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;
using Cfg = Large;
using StrideA = Cfg::StrideA;
using StrideB = Cfg::StrideB;
using StrideD = Cfg::StrideD;

// The per-group argument arrays, carved out of the caller's workspace.
struct Arrays {
  Shape3* shapes;
  const ElementA** pa;
  const ElementB** pb;
  ElementD** pd;
  const ElementScale** psa;
  const ElementScale** psb;
  StrideA* sta;
  StrideB* stb;
  StrideD* std_;
  int32_t* cutlass_owns;  // 2D x 2D: 1 where CUTLASS computes the group (reference skips it)
  void* cutlass_ws;
};

constexpr size_t kAlign = 256;
inline size_t round_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Byte offsets of each array for `groups` groups; returns the total with CUTLASS's own
// workspace (which depends on the SM count only) at the end.
inline size_t layout(int groups, size_t cutlass_bytes, size_t off[11]) {
  const size_t g = (size_t)groups;
  const size_t sizes[11] = {g * sizeof(Shape3),  g * sizeof(void*),   g * sizeof(void*),
                            g * sizeof(void*),   g * sizeof(void*),   g * sizeof(void*),
                            g * sizeof(StrideA), g * sizeof(StrideB), g * sizeof(StrideD),
                            g * sizeof(int32_t), cutlass_bytes};
  size_t at = 0;
  for (int i = 0; i < 11; ++i) {
    off[i] = at;
    at += round_up(sizes[i]);
  }
  return at;
}

inline Arrays carve(void* ws, int groups, size_t cutlass_bytes) {
  size_t off[11];
  layout(groups, cutlass_bytes, off);
  char* base = static_cast<char*>(ws);
  Arrays r;
  r.shapes = reinterpret_cast<Shape3*>(base + off[0]);
  r.pa = reinterpret_cast<const ElementA**>(base + off[1]);
  r.pb = reinterpret_cast<const ElementB**>(base + off[2]);
  r.pd = reinterpret_cast<ElementD**>(base + off[3]);
  r.psa = reinterpret_cast<const ElementScale**>(base + off[4]);
  r.psb = reinterpret_cast<const ElementScale**>(base + off[5]);
  r.sta = reinterpret_cast<StrideA*>(base + off[6]);
  r.stb = reinterpret_cast<StrideB*>(base + off[7]);
  r.std_ = reinterpret_cast<StrideD*>(base + off[8]);
  r.cutlass_owns = reinterpret_cast<int32_t*>(base + off[9]);
  r.cutlass_ws = base + off[10];
  return r;
}

// One thread per group: the per-group problem from the device offsets (group_args.h, the
// arithmetic shared with the CK backend and tested on the host), written in CUTLASS's form.
// A group CUTLASS must not take gets M = 0 (no tiles) and cutlass_owns = 0.
__device__ inline void write_group(const Arrays& r, int g, const hipfp8_gg::Group& gr,
                                   const uint8_t* a, const uint8_t* b, const float* sa,
                                   const float* sb, hipfp8_bf16* out) {
  r.shapes[g] = Shape3{gr.vendor_ok ? (int)gr.rows : 0, (int)gr.cols, (int)gr.red};
  r.pa[g] = reinterpret_cast<const ElementA*>(a + gr.a_off);
  r.pb[g] = reinterpret_cast<const ElementB*>(b + gr.b_off);
  r.pd[g] = reinterpret_cast<ElementD*>(out + gr.out_off);
  r.psa[g] = sa + gr.sa_off;
  r.psb[g] = sb + gr.sb_off;
  r.sta[g] = StrideA{gr.lda, _1{}, _0{}};
  r.stb[g] = StrideB{gr.ldb, _1{}, _0{}};
  r.std_[g] = StrideD{gr.ldo, _1{}, _0{}};
  r.cutlass_owns[g] = gr.vendor_ok;
}

__global__ void build_2d3d(Arrays r, const uint8_t* a, const uint8_t* b, const int32_t* offs,
                           int groups, const float* sa, const float* sb, hipfp8_bf16* out,
                           int64_t M, int64_t N, int64_t K) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  int64_t lo, hi;
  hipfp8_gg::clamped_range(offs, g, M, &lo, &hi);
  write_group(r, g, hipfp8_gg::group_2d3d(g, lo, hi, N, K), a, b, sa, sb, out);
}

// TMA needs a 16-byte aligned start per group (row strides Mt are checked on the host) and
// zero-fills past the end of the range, so any length works; empty groups can't go to
// CUTLASS (K = 0). Those go to the reference kernel.
__global__ void build_2d2d(Arrays r, const uint8_t* a, const uint8_t* b, const int32_t* offs,
                           int groups, const float* sa, const float* sb, hipfp8_bf16* out,
                           int64_t N, int64_t Mt, int64_t K) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  int64_t lo, hi;
  hipfp8_gg::clamped_range(offs, g, Mt, &lo, &hi);
  write_group(r, g, hipfp8_gg::group_2d2d(g, lo, hi, N, Mt, K, 16, 1), a, b, sa, sb, out);
}

inline int sm_count_of_current_device() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
  return n;
}

template <class C>
typename C::Gemm::Arguments make_args(const Arrays& r, int groups, int sm_count) {
  typename C::Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  // No host copy of the shapes: CUTLASS then sizes its persistent grid from the SM count.
  args.problem_shape = ProblemShape{groups, r.shapes, nullptr};
  args.mainloop = {r.pa, r.sta, r.pb, r.stb};
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = nullptr;
  args.epilogue.ptr_D = r.pd;
  args.epilogue.dD = r.std_;
  auto& t = args.epilogue.thread;
  // Evt = MulB(MulA(Acc, ScaleA), ScaleB): arguments are {children..., node}.
  t = {{{}, {r.psa, ElementScale(0), {}}, {}}, {r.psb, ElementScale(0), {}}, {}};
  args.hw_info.device_id = 0;
  cudaGetDevice(&args.hw_info.device_id);
  args.hw_info.sm_count = sm_count;
  return args;
}

template <class C>
size_t cutlass_workspace_bytes(int groups, int sm_count) {
  Arrays none{};
  auto args = make_args<C>(none, groups, sm_count);
  return C::Gemm::get_workspace_size(args);
}

template <class C>
int run_cutlass(const Arrays& r, int groups, int sm_count, hipStream_t stream) {
  using Gemm = typename C::Gemm;
  auto args = make_args<C>(r, groups, sm_count);
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return HIPFP8_KSTATUS_UNSUPPORTED;
  if (gemm.initialize(args, r.cutlass_ws, stream) != cutlass::Status::kSuccess)
    return HIPFP8_KSTATUS_UNSUPPORTED;
  const cutlass::Status st = gemm.run(stream);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return (int)e;
  return st == cutlass::Status::kSuccess ? 0 : HIPFP8_KSTATUS_UNSUPPORTED;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace hipfp8_gg_cutlass

using namespace hipfp8_gg_cutlass;

// Device workspace (bytes) the CUTLASS backend needs for `groups` groups on the current
// device (it depends on the SM count: CUTLASS keeps TMA descriptors per SM).
HIPFP8_EXTERN int hipfp8_gg_cutlass_workspace_size(int groups, uint64_t* bytes) noexcept {
  if (groups < 0 || bytes == nullptr) return HIPFP8_KSTATUS_INVALID_SHAPE;
  const int sms = sm_count_of_current_device();
  if (sms <= 0) return (int)cudaErrorNoDevice;
  size_t off[11];
  *bytes = (uint64_t)layout(groups, cutlass_workspace_bytes<Cfg>(groups, sms), off);
  return 0;
}

static bool cutlass_runs_here() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return false;
  // sm_90a code runs on compute capability 9.0 only.
  return major == 9 && minor == 0;
}

// *available = 1 when the current device can run this backend (compute capability 9.0).
HIPFP8_EXTERN int hipfp8_gg_cutlass_available(int* available) noexcept {
  if (available == nullptr) return HIPFP8_KSTATUS_NULL_POINTER;
  *available = cutlass_runs_here() ? 1 : 0;
  return 0;
}

static int check_common(int fmt_a, int fmt_b, int groups, const void* ws, uint64_t ws_bytes) {
  if (fmt_a < 0 || fmt_a > 3 || fmt_b < 0 || fmt_b > 3) return HIPFP8_KSTATUS_INVALID_ENUM;
  // E4M3 (OCP) x E4M3 is the one instance compiled; other pairs use another backend.
  if (fmt_a != HIPFP8_FMT_E4M3FN || fmt_b != HIPFP8_FMT_E4M3FN) return HIPFP8_KSTATUS_UNSUPPORTED;
  if (groups < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (!cutlass_runs_here()) return HIPFP8_KSTATUS_UNSUPPORTED;
  if (ws == nullptr && groups > 0) return HIPFP8_KSTATUS_NULL_POINTER;
  if (!aligned16(ws)) return HIPFP8_KSTATUS_MISALIGNED;
  uint64_t need = 0;
  const int st = hipfp8_gg_cutlass_workspace_size(groups, &need);
  if (st != 0) return st;
  if (ws_bytes < need) return HIPFP8_KSTATUS_INVALID_SHAPE;
  return 0;
}

// 2D x 3D (OPS.md grouped_gemm_2d3d). Requires K % 16 == 0, N % 8 == 0, 16-byte aligned
// a, b, out; otherwise HIPFP8_KSTATUS_UNSUPPORTED (nothing launched, nothing written).
HIPFP8_EXTERN int hipfp8_gg_cutlass_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b,
                                         int fmt_b, const int32_t* offs, int groups,
                                         const float* sa, const float* sb, void* out, int64_t M,
                                         int64_t N, int64_t K, void* workspace,
                                         uint64_t workspace_bytes, hipStream_t stream) noexcept {
  if (M < 0 || N < 0 || K < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  int st = check_common(fmt_a, fmt_b, groups, workspace, workspace_bytes);
  if (st != 0) return st;
  if (groups == 0 || M == 0 || N == 0) return 0;
  if (K == 0 || K % 16 != 0 || N % 8 != 0 || !aligned16(a) || !aligned16(b) || !aligned16(out))
    return HIPFP8_KSTATUS_UNSUPPORTED;
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) return HIPFP8_KSTATUS_UNSUPPORTED;
  const int sms = sm_count_of_current_device();
  Arrays r = carve(workspace, groups, cutlass_workspace_bytes<Cfg>(groups, sms));
  build_2d3d<<<(groups + 127) / 128, 128, 0, stream>>>(r, a, b, offs, groups, sa, sb,
                                                        (hipfp8_bf16*)out, M, N, K);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return (int)e;
  return run_cutlass<Cfg>(r, groups, sms, stream);
}

// 2D x 2D (OPS.md grouped_gemm_2d2d). Requires Mt % 16 == 0, K % 8 == 0, 16-byte aligned
// a, b, out; groups whose start is not a multiple of 16 or that are empty are computed by
// the reference kernel on the same stream (decided on the device).
HIPFP8_EXTERN int hipfp8_gg_cutlass_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b,
                                         int fmt_b, const int32_t* offs, int groups,
                                         const float* sa, const float* sb, void* out, int64_t N,
                                         int64_t Mt, int64_t K, void* workspace,
                                         uint64_t workspace_bytes, hipStream_t stream) noexcept {
  if (N < 0 || Mt < 0 || K < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  int st = check_common(fmt_a, fmt_b, groups, workspace, workspace_bytes);
  if (st != 0) return st;
  if (groups == 0 || N == 0 || K == 0) return 0;
  if (Mt % 16 != 0 || K % 8 != 0 || !aligned16(a) || !aligned16(b) || !aligned16(out))
    return HIPFP8_KSTATUS_UNSUPPORTED;
  if (N > INT32_MAX || Mt > INT32_MAX || K > INT32_MAX) return HIPFP8_KSTATUS_UNSUPPORTED;
  const int sms = sm_count_of_current_device();
  Arrays r = carve(workspace, groups, cutlass_workspace_bytes<Cfg>(groups, sms));
  build_2d2d<<<(groups + 127) / 128, 128, 0, stream>>>(r, a, b, offs, groups, sa, sb,
                                                        (hipfp8_bf16*)out, N, Mt, K);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return (int)e;
  st = run_cutlass<Cfg>(r, groups, sms, stream);
  if (st != 0) return st;
  // Groups CUTLASS did not take (decided on the device): the reference kernel, skipping the
  // others. Its grid is a few blocks per SM; with nothing to do each block only walks the
  // offsets.
  return hipfp8_gg_ref_2d2d(a, fmt_a, b, fmt_b, offs, groups, sa, sb, out, N, Mt, K,
                            r.cutlass_owns, 2 * sms, stream);
}
