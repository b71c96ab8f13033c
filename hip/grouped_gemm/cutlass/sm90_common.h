// sm90_common.h -- the CUTLASS sm_90 FP8 grouped GEMM shared by the per-instance
// translation units sm90.hip (instance table, first instance, extern "C" launchers) and
// sm90_k*.hip (one instance each). See sm90.hip for the design.
#pragma once

#include "../../port.h"
#include "../../kernel_abi.h"
#include "../group_args.h"

#include <atomic>
#include <type_traits>
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

// The reference kernel's launcher (hip/grouped_gemm/reference.hip), for the per-group
// fallback of 2D x 2D.
extern "C" int hipfp8_gg_ref_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
                                  const int32_t* offs, int groups, const float* sa,
                                  const float* sb, void* out, int64_t N, int64_t Mt,
                                  int64_t K, const int32_t* skip, int max_blocks,
                                  hipStream_t stream) noexcept;

namespace hipfp8_gg_cutlass {
using namespace cute;

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
// Every operand is addressed as raw bytes in the argument arrays (the FP8 flavour only
// matters to the tensor-core instruction), so one set of arrays serves every format pair.
using ElementRaw = cutlass::float_e4m3_t;

// One GEMM configuration: operand element types (FP8 flavours), tile, cluster, schedules.
template <class ElementA_, class ElementB_, class TileShape_, class ClusterShape_,
          class KernelSchedule_, class EpilogueSchedule_>
struct Config {
  using ElementA = ElementA_;
  using ElementB = ElementB_;
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

// Schedules (the instances are defined one per translation unit, instance_*.hip):
// * Cooperative: both consumer warpgroups on one tile (half the rows each); long mainloops.
// * Pingpong: one tile per consumer warpgroup, the two alternating, so one's epilogue
//   overlaps the other's mainloop.
using Coop = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum;
using CoopEpi = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
using Pingpong = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8FastAccum;
using PingpongEpi = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
using E4M3 = cutlass::float_e4m3_t;
using E5M2 = cutlass::float_e5m2_t;

// Grouped GEMM strides: (leading dimension, 1, 0) for every K-major operand and the row-major
// output, whatever the tile (run_cutlass asserts its instance agrees).
using StrideA = cute::Stride<int64_t, cute::Int<1>, cute::Int<0>>;
using StrideB = StrideA;
using StrideD = StrideA;

// The per-group argument arrays, carved out of the caller's workspace.
struct Arrays {
  Shape3* shapes;
  const uint8_t** pa;
  const uint8_t** pb;
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
// workspace (which depends on the SM count and the instance only) at the end.
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

inline Arrays carve(void* ws, int groups) {
  size_t off[11];
  layout(groups, 0, off);
  char* base = static_cast<char*>(ws);
  Arrays r;
  r.shapes = reinterpret_cast<Shape3*>(base + off[0]);
  r.pa = reinterpret_cast<const uint8_t**>(base + off[1]);
  r.pb = reinterpret_cast<const uint8_t**>(base + off[2]);
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

// One call of one instance, arguments validated by the launcher (sm90.hip).
struct RunArgs {
  bool two_d_two_d;  // d0, d1, d2 = (N, Mt, K) when true, else (M, N, K)
  const uint8_t* a;
  int fmt_a;
  const uint8_t* b;
  int fmt_b;
  const int32_t* offs;
  int groups;
  const float* sa;
  const float* sb;
  void* out;
  int64_t d0, d1, d2;
  // 2D x 2D staging (group_args.h group_2d2d_staged): null = off.
  const uint8_t* staged_a;
  const uint8_t* staged_b;
  int64_t mt_pad;
  void* workspace;
  int device;  // the current device (DeviceFacts)
  int sms;
  int raster;   // 0: along M (CUTLASS's default for groups), 1: along N
  int swizzle;  // max swizzle size 1, 2, 4 or 8
  hipStream_t stream;
};

// One thread per group: the per-group problem from the device offsets (group_args.h, the
// arithmetic shared with the CK backend and tested on the host), written in CUTLASS's form.
// A group CUTLASS must not take gets M = 0 (no tiles) and cutlass_owns = 0.
namespace {  // kernels: one private copy per translation unit

__device__ inline void write_group(const Arrays& r, int g, const hipfp8_gg::Group& gr,
                                   const uint8_t* a, const uint8_t* b, const float* sa,
                                   const float* sb, hipfp8_bf16* out,
                                   const uint8_t* staged_a = nullptr,
                                   const uint8_t* staged_b = nullptr) {
  r.shapes[g] = Shape3{gr.vendor_ok ? (int)gr.rows : 0, (int)gr.cols, (int)gr.red};
  r.pa[g] = (gr.staged ? staged_a : a) + gr.a_off;
  r.pb[g] = (gr.staged ? staged_b : b) + gr.b_off;
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

// CUTLASS reads a group whose start is a multiple of 16 elements in place (TMA needs a
// 16-byte aligned base address; its zero fill covers any length). With staging (staged_a
// non-null) it reads a non-empty group off the boundary from the copy hipfp8_gg_stage_2d2d
// wrote (align_len 1, min_len 1: its rule for this launcher); without, such groups, and
// always empty groups (K = 0: CUTLASS would leave the block unwritten), go to the reference
// kernel, which writes them.
__global__ void build_2d2d(Arrays r, const uint8_t* a, const uint8_t* b, const int32_t* offs,
                           int groups, const float* sa, const float* sb, hipfp8_bf16* out,
                           int64_t N, int64_t Mt, int64_t K, const uint8_t* staged_a,
                           const uint8_t* staged_b, int64_t mt_pad) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  int64_t lo, hi, ps;
  if (staged_a == nullptr) {
    hipfp8_gg::clamped_range(offs, g, Mt, &lo, &hi);
    write_group(r, g, hipfp8_gg::group_2d2d(g, lo, hi, N, Mt, K, 16, 1), a, b, sa, sb, out);
    return;
  }
  hipfp8_gg::clamped_padded_range(offs, g, Mt, &lo, &hi, &ps);
  write_group(r, g, hipfp8_gg::group_2d2d_staged(g, lo, hi, ps, N, Mt, K, mt_pad, 1, 1), a, b,
              sa, sb, out, staged_a, staged_b);
}

}  // namespace

// What the launchers need to know of the current device on every call: its ordinal, its SM
// count (0: the query failed) and whether it is compute capability 9.0 (sm_90a code runs there
// only). The attributes are read once per device and process (devices 0..63; a failed query is
// not remembered, so it is asked again next time): one cudaGetDevice per call instead of
// 2-4 cudaGetDevice and 3 cudaDeviceGetAttribute.
struct DeviceFacts {
  int device = 0;
  int sms = 0;
  bool sm90 = false;
};

// false when cudaGetDevice fails (nothing is known then).
inline bool current_device_facts(DeviceFacts* f) {
  static std::atomic<uint32_t> cache[64];  // 0: not read; else (sms << 1) | sm90
  if (cudaGetDevice(&f->device) != cudaSuccess) return false;
  const int d = f->device;
  const bool cached = d >= 0 && d < 64;
  const uint32_t c = cached ? cache[d].load(std::memory_order_relaxed) : 0u;
  if (c != 0) {
    f->sms = (int)(c >> 1);
    f->sm90 = (c & 1u) != 0;
    return true;
  }
  int major = 0, minor = 0, n = 0;
  const bool cc =
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) == cudaSuccess &&
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) == cudaSuccess;
  f->sm90 = cc && major == 9 && minor == 0;
  f->sms = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, d) == cudaSuccess ? n : 0;
  if (cached && cc && f->sms > 0)
    cache[d].store(((uint32_t)f->sms << 1) | (f->sm90 ? 1u : 0u), std::memory_order_relaxed);
  return true;
}

// Whether CUTLASS's initialize() already set instance C's kernel attribute (its dynamic shared
// memory size) on device `device` in this process: then a call needs only the workspace
// initialisation and the parameters (GemmUniversalAdapter::initialize minus the
// cudaFuncSetAttribute it repeats on every call). The attribute belongs to the device's
// context, which lives as long as the process (a cudaDeviceReset would also free every buffer
// of the library's contexts). Devices 0..63; others take initialize() every time.
template <class C>
std::atomic<uint64_t>& initialized_devices() {
  static std::atomic<uint64_t> mask{0};
  return mask;
}

// CUTLASS's initialize(args, ws, stream) on `gemm`, with the attribute set only on the first
// call per device: the same workspace initialisation and parameters on every call.
template <class Gemm, class Args>
cutlass::Status initialize_once_per_device(Gemm& gemm, const Args& args, void* ws,
                                           hipStream_t stream, int device,
                                           std::atomic<uint64_t>& done) {
  const uint64_t bit = device >= 0 && device < 64 ? (uint64_t)1 << device : 0;
  if (bit == 0 || (done.load(std::memory_order_acquire) & bit) == 0) {
    const cutlass::Status st = gemm.initialize(args, ws, stream);
    if (st == cutlass::Status::kSuccess && bit != 0)
      done.fetch_or(bit, std::memory_order_release);
    return st;
  }
  const cutlass::Status st = Gemm::GemmKernel::initialize_workspace(args, ws, stream);
  if (st != cutlass::Status::kSuccess) return st;
  return gemm.update(args, ws);
}

template <class C>
typename C::Gemm::Arguments make_args(const Arrays& r, int groups, int device, int sm_count,
                                      int raster, int swizzle) {
  using EA = typename C::ElementA;
  using EB = typename C::ElementB;
  typename C::Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  // No host copy of the shapes: CUTLASS then sizes its persistent grid from the SM count.
  args.problem_shape = ProblemShape{groups, r.shapes, nullptr};
  args.mainloop = {reinterpret_cast<const EA**>(r.pa), r.sta,
                   reinterpret_cast<const EB**>(r.pb), r.stb};
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = nullptr;
  args.epilogue.ptr_D = r.pd;
  args.epilogue.dD = r.std_;
  auto& t = args.epilogue.thread;
  // Evt = MulB(MulA(Acc, ScaleA), ScaleB): arguments are {children..., node}.
  t = {{{}, {r.psa, ElementScale(0), {}}, {}}, {r.psb, ElementScale(0), {}}, {}};
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sm_count;
  using Raster = decltype(args.scheduler.raster_order);
  args.scheduler.raster_order = raster == 1 ? Raster::AlongN : Raster::AlongM;
  args.scheduler.max_swizzle_size = swizzle;
  return args;
}

template <class C>
size_t cutlass_workspace_bytes(int groups, int device, int sm_count) {
  Arrays none{};
  auto args = make_args<C>(none, groups, device, sm_count, 0, 1);
  return C::Gemm::get_workspace_size(args);
}

template <class C>
int run_cutlass(const Arrays& r, const RunArgs& q) {
  static_assert(std::is_same_v<typename C::StrideA, StrideA> &&
                    std::is_same_v<typename C::StrideB, StrideB> &&
                    std::is_same_v<typename C::StrideD, StrideD>,
                "grouped strides");
  using Gemm = typename C::Gemm;
  auto args = make_args<C>(r, q.groups, q.device, q.sms, q.raster, q.swizzle);
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return HIPFP8_KSTATUS_UNSUPPORTED;
  if (initialize_once_per_device(gemm, args, r.cutlass_ws, q.stream, q.device,
                                 initialized_devices<C>()) != cutlass::Status::kSuccess)
    return HIPFP8_KSTATUS_UNSUPPORTED;
  const cutlass::Status st = gemm.run(q.stream);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return (int)e;
  return st == cutlass::Status::kSuccess ? 0 : HIPFP8_KSTATUS_UNSUPPORTED;
}

// One call of one instance on validated arguments: build the per-group arrays on the device,
// run CUTLASS, and (2D x 2D) let the reference kernel do the groups CUTLASS did not take.
template <class C>
int run_op(const RunArgs& q) {
  Arrays r = carve(q.workspace, q.groups);
  const unsigned blocks = (unsigned)((q.groups + 127) / 128);
  hipfp8_bf16* out = static_cast<hipfp8_bf16*>(q.out);
  if (q.two_d_two_d)  // (N, Mt, K)
    build_2d2d<<<blocks, 128, 0, q.stream>>>(r, q.a, q.b, q.offs, q.groups, q.sa, q.sb, out,
                                             q.d0, q.d1, q.d2, q.staged_a, q.staged_b,
                                             q.mt_pad);
  else  // (M, N, K)
    build_2d3d<<<blocks, 128, 0, q.stream>>>(r, q.a, q.b, q.offs, q.groups, q.sa, q.sb, out,
                                             q.d0, q.d1, q.d2);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return (int)e;
  const int st = run_cutlass<C>(r, q);
  if (st != 0 || !q.two_d_two_d) return st;
  // Groups CUTLASS did not take (decided on the device): the reference kernel on the caller's
  // operands, skipping the others (staged groups included). Its grid is two blocks per SM; with nothing to do each block only walks the
  // offsets.
  return hipfp8_gg_ref_2d2d(q.a, q.fmt_a, q.b, q.fmt_b, q.offs, q.groups, q.sa, q.sb, q.out,
                            q.d0, q.d1, q.d2, r.cutlass_owns, 2 * q.sms, q.stream);
}

// An instance: its run and workspace functions, defined in its own translation unit by
// HIPFP8_GG_CUTLASS_INSTANCE and listed in sm90.hip's table.
using RunFn = int (*)(const RunArgs&);
using WorkspaceFn = size_t (*)(int groups, int device, int sms);

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace hipfp8_gg_cutlass

#define HIPFP8_GG_CUTLASS_DECLARE(NAME)                    \
  namespace hipfp8_gg_cutlass {                            \
  int NAME##_run(const RunArgs& q);                        \
  size_t NAME##_workspace(int groups, int device, int sms); \
  }

#define HIPFP8_GG_CUTLASS_INSTANCE(NAME, ...)                                     \
  HIPFP8_GG_CUTLASS_DECLARE(NAME)                                                 \
  namespace hipfp8_gg_cutlass {                                                   \
  int NAME##_run(const RunArgs& q) { return run_op<__VA_ARGS__>(q); }             \
  size_t NAME##_workspace(int groups, int device, int sms) {                      \
    return cutlass_workspace_bytes<__VA_ARGS__>(groups, device, sms);             \
  }                                                                               \
  }
