// FP8 grouped GEMM for NVIDIA sm_90 on CUTLASS 3.x/4.x (headers from the pinned
// `nvidia-cutlass` wheel, scripts/fetch-cutlass.sh, or CUTLASS_DIR).
// hipfp8-build: backend=cuda
// hipfp8-build: cuda-arch=90a
// hipfp8-build: requires=cutlass
// hipfp8-build: cuda-flags=--expt-relaxed-constexpr -DNDEBUG
//
// CUDA only: compiled with nvcc for sm_90a (wgmma needs the arch-specific target), never by
// hipcc. Two kernel instances, this TU and sm90_pingpong.hip (~90 s and ~3.8 GB each).
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
#include "sm90_common.h"
#include "../launchers.h"

#include <algorithm>

using namespace hipfp8_gg_cutlass;

// Device workspace (bytes) the CUTLASS backend needs for `groups` groups on the current
// device (it depends on the SM count: CUTLASS keeps TMA descriptors per SM).
HIPFP8_EXTERN int hipfp8_gg_cutlass_workspace_size(int groups, uint64_t* bytes) noexcept {
  if (groups < 0 || bytes == nullptr) return HIPFP8_KSTATUS_INVALID_SHAPE;
  const int sms = sm_count_of_current_device();
  if (sms <= 0) return (int)cudaErrorNoDevice;
  size_t off[11];
  const size_t lib = std::max(cutlass_workspace_bytes<Cooperative>(groups, sms),
                              pingpong_workspace_bytes(groups, sms));
  *bytes = (uint64_t)layout(groups, lib, off);
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

// Instance choice: 1 = cooperative 128x256, 2 = pingpong 128x128, 0 = the heuristic below,
// from both instances timed on the DeepSeek-V3 shapes on the H200 (bench/NOTES-gemm.md):
// * 2D x 3D: pingpong when the reduction is shorter than the output is wide (K < N: e.g.
//   (32768,2048)x(32,2048,7168), 861 vs 905 us balanced, 927 vs 969 Zipf), where its
//   overlapped epilogue pays; cooperative otherwise (K = 7168, N = 2048: 789 vs 809 us
//   balanced, 870 vs 941 Zipf).
// * 2D x 2D: cooperative (equal on balanced groups, 1137 vs 1316 and 1079 vs 1265 us on
//   Zipf-skewed ones).
static int pick(int config, bool two_d_two_d, int64_t n, int64_t k) {
  if (config != 0) return config;
  if (two_d_two_d) return 1;
  return k < n ? 2 : 1;
}

static int dispatch(int config, bool two_d_two_d, const uint8_t* a, int fmt_a, const uint8_t* b,
                    int fmt_b, const int32_t* offs, int groups, const float* sa, const float* sb,
                    void* out, int64_t d0, int64_t d1, int64_t d2, void* ws, int sms,
                    hipStream_t stream) {
  if (config == 2)
    return pingpong_run(two_d_two_d, a, fmt_a, b, fmt_b, offs, groups, sa, sb, out, d0, d1, d2,
                        ws, sms, stream);
  return run_op<Cooperative>(two_d_two_d, a, fmt_a, b, fmt_b, offs, groups, sa, sb, out, d0, d1,
                             d2, ws, sms, stream);
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

// 2D x 3D (OPS.md grouped_gemm_2d3d). `config`: 0 auto, 1 cooperative, 2 pingpong. Requires K % 16 == 0, N % 8 == 0, 16-byte aligned
// a, b, out; otherwise HIPFP8_KSTATUS_UNSUPPORTED (nothing launched, nothing written).
HIPFP8_EXTERN int hipfp8_gg_cutlass_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b,
                                         int fmt_b, const int32_t* offs, int groups,
                                         const float* sa, const float* sb, void* out, int64_t M,
                                         int64_t N, int64_t K, void* workspace,
                                         uint64_t workspace_bytes, int config,
                                         hipStream_t stream) noexcept {
  if (M < 0 || N < 0 || K < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (config < 0 || config > 2) return HIPFP8_KSTATUS_INVALID_ENUM;
  int st = check_common(fmt_a, fmt_b, groups, workspace, workspace_bytes);
  if (st != 0) return st;
  if (groups == 0 || M == 0 || N == 0) return 0;
  if (K == 0 || K % 16 != 0 || N % 8 != 0 || !aligned16(a) || !aligned16(b) || !aligned16(out))
    return HIPFP8_KSTATUS_UNSUPPORTED;
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) return HIPFP8_KSTATUS_UNSUPPORTED;
  const int sms = sm_count_of_current_device();
  return dispatch(pick(config, false, N, K), false, a, fmt_a, b, fmt_b, offs, groups, sa, sb, out, M,
                  N, K, workspace, sms, stream);
}

// 2D x 2D (OPS.md grouped_gemm_2d2d). `config` as for 2D x 3D. Requires Mt % 16 == 0, K % 8 == 0, 16-byte aligned
// a, b, out; groups whose start is not a multiple of 16 or that are empty are computed by
// the reference kernel on the same stream (decided on the device).
HIPFP8_EXTERN int hipfp8_gg_cutlass_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b,
                                         int fmt_b, const int32_t* offs, int groups,
                                         const float* sa, const float* sb, void* out, int64_t N,
                                         int64_t Mt, int64_t K, void* workspace,
                                         uint64_t workspace_bytes, int config,
                                         hipStream_t stream) noexcept {
  if (N < 0 || Mt < 0 || K < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (config < 0 || config > 2) return HIPFP8_KSTATUS_INVALID_ENUM;
  int st = check_common(fmt_a, fmt_b, groups, workspace, workspace_bytes);
  if (st != 0) return st;
  if (groups == 0 || N == 0 || K == 0) return 0;
  if (Mt % 16 != 0 || K % 8 != 0 || !aligned16(a) || !aligned16(b) || !aligned16(out))
    return HIPFP8_KSTATUS_UNSUPPORTED;
  if (N > INT32_MAX || Mt > INT32_MAX || K > INT32_MAX) return HIPFP8_KSTATUS_UNSUPPORTED;
  const int sms = sm_count_of_current_device();
  return dispatch(pick(config, true, K, Mt), true, a, fmt_a, b, fmt_b, offs, groups, sa, sb, out, N, Mt,
                  K, workspace, sms, stream);
}
