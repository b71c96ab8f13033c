// ck_grouped_gemm_impl.h -- Composable Kernel FP8 grouped GEMM (ROCm), shared by the
// per-target translation units gfx942.hip (FNUZ FP8) and gfx950.hip (OCP FP8).
//
// Why one translation unit per target: CK's `f8_t` flavour is a compile-time switch
// (CK_USE_OCP_FP8), and an FNUZ instance compiled for gfx950 compiles cleanly but emits the
// OCP MFMA there (wrong numbers, no error). Each TU includes this file with its own FP8 type
// and is built for its one target only (hipfp8-build: offload-arch=...), with its own entry
// point names.
//
// Device op: DeviceGroupedGemmMultipleDXdlCShuffleTileLoop (persistent "tile loop": the
// kernel reads every group's M/N/K/pointers from a DEVICE array of
// GroupedGemmKernelArgument<2>), FP8 A/B, F32 accumulate, BF16 out, MultiplyMultiply epilogue
//   E = bf16( C * D0 * D1 ),  D0 = per-column scale_b (Row, stride 0),
//                             D1 = per-row scale_a (Col, stride 0).
// The device array is written by a small kernel from the device offsets (group_args.h), so
// offsets are never copied to the host. The host only builds placeholder descriptors
// (`host_descs`, pure) that CK uses for IsSupportedArgument (N, K, strides and vector
// widths are the same for every group; per-group M comes from the device array).
//
// Protocol: check supported -> workspace -> run, on the caller's stream. CK reports some
// failures by throwing (hip_check_error): every entry point catches everything and returns
// a status; nothing escapes.
#pragma once

#include "../../port.h"
#include "../../kernel_abi.h"
#include "../group_args.h"

#include <array>
#include <cstddef>
#include <vector>

#include "ck/ck.hpp"
#include "ck/tensor_operation/gpu/device/gemm_specialization.hpp"
#include "ck/tensor_operation/gpu/device/impl/device_grouped_gemm_multiple_d_xdl_cshuffle_tile_loop.hpp"
#include "ck/tensor_operation/gpu/device/tensor_layout.hpp"
#include "ck/tensor_operation/gpu/element/element_wise_operation.hpp"
#include "ck/utility/blkgemmpipe_scheduler.hpp"
#include "ck/utility/data_type.hpp"

// The reference kernel (hip/grouped_gemm/reference.hip) takes the 2D x 2D groups CK can't.
extern "C" int hipfp8_gg_ref_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
                                  const int32_t* offs, int groups, const float* sa,
                                  const float* sb, void* out, int64_t N, int64_t Mt,
                                  int64_t K, const int32_t* skip, int max_blocks,
                                  hipStream_t stream) noexcept;

namespace hipfp8_gg_ck {

template <ck::index_t... Is>
using S = ck::Sequence<Is...>;
using Row = ck::tensor_layout::gemm::RowMajor;
using Col = ck::tensor_layout::gemm::ColumnMajor;
using PassThrough = ck::tensor_operation::element_wise::PassThrough;
using MultiplyMultiply = ck::tensor_operation::element_wise::MultiplyMultiply;
using BF16 = ck::bhalf_t;
using F32 = float;

// Group sizes are arbitrary (M of 2D x 3D, K of 2D x 2D is routed, see group_args.h), so pad
// all of M, N and K.
constexpr auto kGemmSpec = ck::tensor_operation::device::GemmSpecialization::MNKPadding;

// 256 threads, 128 x 128 x 128 block tile, 32x32 XDL, 2x2 per wave, pipeline v3 intrawave:
// the instance known to compile for both targets (../../../shared/toolchains example).
// FA x FB: the operand types (compute types too). Only E4M3 x E4M3 is instantiated: a mixed
// f8 x bf8 instance of this device op does not compile with CK 7.2 (its v3 pipeline converts the
// B tile to ComputeTypeA: no bf8 -> f8 type_convert), so the mixed pairs have their own kernel
// (ck_grouped_gemm_mixed.h).
template <class FA, class FB>
using DeviceOp = ck::tensor_operation::device::DeviceGroupedGemmMultipleDXdlCShuffleTileLoop<
    Row, Col, ck::Tuple<Row, Col>, Row,           // A, B, Ds, E layouts
    FA, FB, F32, F32, ck::Tuple<F32, F32>, BF16,  // A, B, Acc, CShuffle, Ds, E
    PassThrough, PassThrough, MultiplyMultiply, kGemmSpec,
    1,                                            // NumGemmKPrefetchStage
    256, 128, 128, 128,                           // BlockSize, MPerBlock, NPerBlock, KPerBlock
    16, 16,                                       // AK1, BK1
    32, 32, 2, 2,                                 // MPerXDL, NPerXDL, MXdlPerWave, NXdlPerWave
    S<8, 32, 1>, S<1, 0, 2>, S<1, 0, 2>, 2, 16, 16, 0,  // A block transfer
    S<8, 32, 1>, S<1, 0, 2>, S<1, 0, 2>, 2, 16, 16, 0,  // B block transfer
    1, 1, S<1, 32, 1, 8>, S<8, 8, 1>,             // CShuffle, CDE cluster, CDE vectors
    ck::BlockGemmPipelineScheduler::Intrawave, ck::BlockGemmPipelineVersion::v3, FA, FB>;

using KernelArg = ck::tensor_operation::device::GroupedGemmKernelArgument<2>;

// group_args.h's CkArg is written by our builder kernel and read by CK as KernelArg.
static_assert(sizeof(hipfp8_gg::CkArg) == sizeof(KernelArg), "CkArg layout");
static_assert(offsetof(hipfp8_gg::CkArg, p_e) == offsetof(KernelArg, p_e_grid), "CkArg layout");
static_assert(offsetof(hipfp8_gg::CkArg, M) == offsetof(KernelArg, M), "CkArg layout");
static_assert(offsetof(hipfp8_gg::CkArg, stride_ds) == offsetof(KernelArg, StrideDs), "CkArg layout");
static_assert(offsetof(hipfp8_gg::CkArg, stride_e) == offsetof(KernelArg, StrideE), "CkArg layout");

// Vector loads along K are 16 bytes (AK1 = BK1 = 16 FP8 elements); E is stored 8 bf16 wide.
constexpr int64_t kVecK = 16;
constexpr int64_t kVecN = 8;
// Pipeline v3 needs more K blocks (KPerBlock = 128) than its 2 prefetch stages: CK's host
// check refuses K <= 256 (GridwiseGemm::CheckValidity, "check gridwise gemm pipeline"), so a
// 2D x 3D call needs K > 256 and a 2D x 2D group fewer tokens goes to the reference kernel.
// (tests/emu/ck_host_check.cpp found that the earlier 2D x 2D host placeholder, K = 128, made
// CK refuse every 2D x 2D call.)
constexpr int64_t kMinRed = 2 * 128 + 1;
// The reduction length of the 2D x 2D host descriptors (the real per-group lengths live on
// the device and are routed by kMinRed): any accepted length.
constexpr int64_t kHostRed2d2d = 512;

// Workspace: the device argument array, then (2D x 2D) the per-group "CK owns it" flags.
inline size_t round_up(size_t v) { return (v + 255) / 256 * 256; }
inline size_t workspace_bytes(int groups) {
  return round_up((size_t)groups * sizeof(KernelArg)) + round_up((size_t)groups * sizeof(int32_t));
}

// Pure host function: the descriptors CK's host side sees. Every group gets the same N, K
// and strides (what IsSupportedArgument checks); M is a placeholder because the real
// per-group M lives in the device array only.
inline std::vector<ck::tensor_operation::device::GemmDesc> host_descs(int groups, int64_t cols,
                                                                      int64_t red, int64_t lda,
                                                                      int64_t ldb, int64_t ldo) {
  std::vector<ck::tensor_operation::device::GemmDesc> d((size_t)groups);
  for (auto& x : d) {
    x.M_ = 128;
    x.N_ = (ck::index_t)cols;
    x.K_ = (ck::index_t)red;
    x.stride_A_ = (ck::index_t)lda;
    x.stride_B_ = (ck::index_t)ldb;
    x.stride_C_ = (ck::index_t)ldo;
    x.stride_Ds_ = {0, 0};
  }
  return d;
}

// static: gfx942.hip and gfx950.hip both include this header; one definition per TU.
static __global__ void build_2d3d(hipfp8_gg::CkArg* args, const uint8_t* a, const uint8_t* b,
                           const int32_t* offs, int groups, const float* sa, const float* sb,
                           uint16_t* out, int64_t M, int64_t N, int64_t K) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  int64_t lo, hi;
  hipfp8_gg::clamped_range(offs, g, M, &lo, &hi);
  args[g] = hipfp8_gg::ck_arg(hipfp8_gg::group_2d3d(g, lo, hi, N, K), a, b, sa, sb, out);
}

// With staging (staged_a non-null) a group CK can't read in place but can read padded
// (group_args.h stage_2d2d with align_len kVecK, min_len kMinRed: the values gpu.rs gives
// hipfp8_gg_stage_2d2d for CK) reads the staged copy; the rest as without staging.
static __global__ void build_2d2d(hipfp8_gg::CkArg* args, int32_t* ck_owns, const uint8_t* a,
                           const uint8_t* b, const int32_t* offs, int groups, const float* sa,
                           const float* sb, uint16_t* out, int64_t N, int64_t Mt, int64_t K,
                           const uint8_t* staged_a, const uint8_t* staged_b, int64_t mt_pad) {
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  int64_t lo, hi, ps;
  hipfp8_gg::Group gr;
  if (staged_a == nullptr) {
    hipfp8_gg::clamped_range(offs, g, Mt, &lo, &hi);
    gr = hipfp8_gg::group_2d2d(g, lo, hi, N, Mt, K, kVecK, kVecK, kMinRed);
  } else {
    hipfp8_gg::clamped_padded_range(offs, g, Mt, &lo, &hi, &ps);
    gr = hipfp8_gg::group_2d2d_staged(g, lo, hi, ps, N, Mt, K, mt_pad, kVecK, kMinRed);
  }
  args[g] = hipfp8_gg::ck_arg(gr, a, b, sa, sb, out, staged_a, staged_b);
  ck_owns[g] = gr.vendor_ok;
}

inline int status_from_exception() {
  const hipError_t e = hipGetLastError();
  return e != hipSuccess ? (int)e : HIPFP8_KSTATUS_UNSUPPORTED;
}

// Check supported (host descriptors), then run with the device argument array.
template <class FA, class FB>
int run_op(int groups, int64_t cols, int64_t red, int64_t lda, int64_t ldb, int64_t ldo,
           void* dev_args, hipStream_t stream) {
  using Op = DeviceOp<FA, FB>;
  std::vector<const void*> as((size_t)groups, nullptr), bs((size_t)groups, nullptr);
  std::vector<std::array<const void*, 2>> ds((size_t)groups, {nullptr, nullptr});
  std::vector<void*> es((size_t)groups, nullptr);
  auto descs = host_descs(groups, cols, red, lda, ldb, ldo);
  Op op;
  auto arg = op.MakeArgument(as, bs, ds, es, descs, PassThrough{}, PassThrough{},
                             MultiplyMultiply{});
  if (!op.IsSupportedArgument(arg)) return HIPFP8_KSTATUS_UNSUPPORTED;
  op.SetDeviceKernelArgs(arg, dev_args);
  auto invoker = op.MakeInvoker();
  invoker.Run(arg, StreamConfig{stream, false});
  return (int)hipGetLastError();
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The launcher's whole-call shape rules (pure; pointers and workspace are checked apart):
// vector loads along K are 16 FP8 wide, E stores 8 bf16 wide, CK's sizes are int32.
inline bool launcher_accepts_2d3d(int64_t M, int64_t N, int64_t K) {
  return K % kVecK == 0 && K >= kMinRed && N % kVecN == 0 && M <= INT32_MAX && N <= INT32_MAX &&
         K <= INT32_MAX;
}
inline bool launcher_accepts_2d2d(int64_t N, int64_t Mt, int64_t K) {
  return Mt % kVecK == 0 && K % kVecN == 0 && N <= INT32_MAX && Mt <= INT32_MAX && K <= INT32_MAX;
}

// The host part of DeviceOp::IsSupportedArgument on a wave64 target (gfx942, gfx950), without
// its device queries (is_xdl_wmma_supported, the warp size): the gridwise GEMM's CheckValidity
// on the descriptors run_op builds. Pure host code: tests/emu/ck_host_check.cpp runs it for
// every benchmark shape on a machine without a GPU.
template <class FA, class FB>
bool host_supported(int groups, int64_t cols, int64_t red, int64_t lda, int64_t ldb,
                    int64_t ldo) {
  using GG = typename DeviceOp<FA, FB>::GridwiseGemm64;
  for (const auto& d : host_descs(groups, cols, red, lda, ldb, ldo)) {
    typename GG::Argument arg(nullptr, nullptr, std::array<const void*, 2>{nullptr, nullptr},
                              nullptr, d.M_, d.N_, d.K_, d.stride_A_, d.stride_B_,
                              std::array<ck::index_t, 2>{0, 0}, d.stride_C_, 1, PassThrough{},
                              PassThrough{}, MultiplyMultiply{});
    if (!GG::CheckValidity(arg)) return false;
  }
  return true;
}

// What a 2D x 3D / 2D x 2D call decides on the host (launcher rules, then CK's host check),
// with the same descriptors as the call.
template <class FA, class FB>
bool host_accepts_2d3d(int groups, int64_t M, int64_t N, int64_t K) {
  return launcher_accepts_2d3d(M, N, K) && host_supported<FA, FB>(groups, N, K, K, K, N);
}
template <class FA, class FB>
bool host_accepts_2d2d(int groups, int64_t N, int64_t Mt, int64_t K) {
  return launcher_accepts_2d2d(N, Mt, K) &&
         host_supported<FA, FB>(groups, K, kHostRed2d2d, Mt, Mt, K);
}

// `fmt_a_expected` x `fmt_b_expected` is the pair of this instantiation (kernel format ids).
// RunOp: check supported and launch (run_op's signature; ck_grouped_gemm_mixed.h passes its own).
template <class FA, class FB, auto RunOp = &run_op<FA, FB>>
int grouped_2d3d(int fmt_a_expected, int fmt_b_expected, const uint8_t* a, int fmt_a, const uint8_t* b,
                 int fmt_b,
                 const int32_t* offs, int groups, const float* sa, const float* sb, void* out,
                 int64_t M, int64_t N, int64_t K, void* ws, size_t ws_bytes,
                 hipStream_t stream) noexcept {
  if (fmt_a != fmt_a_expected || fmt_b != fmt_b_expected) return HIPFP8_KSTATUS_UNSUPPORTED;
  if (groups < 0 || M < 0 || N < 0 || K < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (groups == 0 || M == 0 || N == 0) return 0;
  if (ws == nullptr || ws_bytes < workspace_bytes(groups) || !aligned16(ws))
    return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (!launcher_accepts_2d3d(M, N, K) || !aligned16(a) || !aligned16(b) || !aligned16(out))
    return HIPFP8_KSTATUS_UNSUPPORTED;
  try {
    auto* args = static_cast<hipfp8_gg::CkArg*>(ws);
    build_2d3d<<<(groups + 127) / 128, 128, 0, stream>>>(args, a, b, offs, groups, sa, sb,
                                                          (uint16_t*)out, M, N, K);
    hipError_t e = hipGetLastError();
    if (e != hipSuccess) return (int)e;
    return RunOp(groups, N, K, K, K, N, ws, stream);
  } catch (...) {
    return status_from_exception();
  }
}

// `fmt_a_expected` x `fmt_b_expected` is the pair of this instantiation (kernel format ids).
template <class FA, class FB, auto RunOp = &run_op<FA, FB>>
int grouped_2d2d(int fmt_a_expected, int fmt_b_expected, const uint8_t* a, int fmt_a, const uint8_t* b,
                 int fmt_b,
                 const int32_t* offs, int groups, const float* sa, const float* sb, void* out,
                 int64_t N, int64_t Mt, int64_t K, const uint8_t* staged_a,
                 const uint8_t* staged_b, int64_t mt_pad, void* ws, size_t ws_bytes,
                 hipStream_t stream) noexcept {
  if (fmt_a != fmt_a_expected || fmt_b != fmt_b_expected) return HIPFP8_KSTATUS_UNSUPPORTED;
  if (groups < 0 || N < 0 || Mt < 0 || K < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (groups == 0 || N == 0 || K == 0) return 0;
  if (!hipfp8_gg::staging_args_ok(staged_a, staged_b, Mt, mt_pad, groups))
    return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (ws == nullptr || ws_bytes < workspace_bytes(groups) || !aligned16(ws))
    return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (!launcher_accepts_2d2d(N, Mt, K) || !aligned16(a) || !aligned16(b) || !aligned16(out))
    return HIPFP8_KSTATUS_UNSUPPORTED;
  try {
    auto* args = static_cast<hipfp8_gg::CkArg*>(ws);
    auto* owns = reinterpret_cast<int32_t*>(static_cast<char*>(ws) +
                                            round_up((size_t)groups * sizeof(KernelArg)));
    build_2d2d<<<(groups + 127) / 128, 128, 0, stream>>>(args, owns, a, b, offs, groups, sa,
                                                          sb, (uint16_t*)out, N, Mt, K,
                                                          staged_a, staged_b, mt_pad);
    hipError_t e = hipGetLastError();
    if (e != hipSuccess) return (int)e;
    // Placeholder reduction length for the host check (the groups' own live on the device;
    // staged groups' stride mt_pad too: a multiple of 16 like Mt, what the check asks of it).
    int st = RunOp(groups, K, kHostRed2d2d, Mt, Mt, K, ws, stream);
    if (st != 0) return st;
    int dev = 0, cus = 0;
    if (hipGetDevice(&dev) != hipSuccess ||
        hipDeviceGetAttribute(&cus, hipDeviceAttributeMultiprocessorCount, dev) != hipSuccess)
      cus = 0;
    // Empty, short, or (without staging) misaligned and odd-length groups (decided on the
    // device): the reference kernel on the caller's operands, skipping the groups CK owns.
    return hipfp8_gg_ref_2d2d(a, fmt_a, b, fmt_b, offs, groups, sa, sb, out, N, Mt, K, owns,
                              2 * cus, stream);
  } catch (...) {
    return status_from_exception();
  }
}

}  // namespace hipfp8_gg_ck
