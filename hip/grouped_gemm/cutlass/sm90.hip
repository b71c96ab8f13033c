// FP8 grouped GEMM for NVIDIA sm_90 on CUTLASS 3.x/4.x (headers from the pinned
// `nvidia-cutlass` wheel, scripts/fetch-cutlass.sh, or CUTLASS_DIR).
// hipfp8-build: backend=cuda
// hipfp8-build: cuda-arch=90a
// hipfp8-build: requires=cutlass
// hipfp8-build: cuda-flags=--expt-relaxed-constexpr -DNDEBUG
//
// CUDA only: compiled with nvcc for sm_90a (wgmma needs the arch-specific target), never by
// hipcc. One kernel instance per translation unit (this one and sm90_*.hip, ~90-160 s and
// ~3.8 GB each), so they compile in parallel; this TU holds the table of all of them and the
// extern "C" launchers.
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
// 2D x 2D groups that start on a 16-element boundary run in CUTLASS (TMA needs a 16-byte
// aligned base); the others and the empty groups (CUTLASS would see K = 0 and write nothing)
// are computed by the reference kernel, which skips every group CUTLASS took (decided on the
// device, from the offsets).
// Whole-call requirements that the host can check (K % 16, N % 8, Mt % 16, pointer
// alignment, a format pair with an instance) return HIPFP8_KSTATUS_UNSUPPORTED so the caller
// picks another backend; `hipfp8_gg_cutlass_has_instance` answers the format question
// without a call.
//
// `config` (the instance and scheduler knobs; the Rust side's rule picks it, see
// src/grouped_gemm_rule.rs): bits 0-7 the instance kind (0: the built-in default, 1-4 the
// table below), bits 8-9 the raster order (0 along M, 1 along N), bits 12-15 log2 of the
// scheduler's max swizzle size (0-3).
#include "sm90_common.h"
#include "../launchers.h"

#include <algorithm>

using namespace hipfp8_gg_cutlass;

// Instance kind 1 (this TU): cooperative 128 x 256 x 128, 2 x 1 cluster (the B tile, the
// expert weights, multicast to both CTAs), E4M3 x E4M3.
HIPFP8_GG_CUTLASS_INSTANCE(e4m3_e4m3_k1,
                           Config<E4M3, E4M3, Shape<_128, _256, _128>, Shape<_2, _1, _1>, Coop,
                                  CoopEpi>)
// The other instances, one per TU (sm90_k*.hip).
HIPFP8_GG_CUTLASS_DECLARE(e4m3_e4m3_k2)
HIPFP8_GG_CUTLASS_DECLARE(e4m3_e4m3_k3)
HIPFP8_GG_CUTLASS_DECLARE(e4m3_e4m3_k4)
HIPFP8_GG_CUTLASS_DECLARE(e4m3_e5m2_k1)
HIPFP8_GG_CUTLASS_DECLARE(e4m3_e5m2_k2)
HIPFP8_GG_CUTLASS_DECLARE(e5m2_e4m3_k1)
HIPFP8_GG_CUTLASS_DECLARE(e5m2_e4m3_k2)

namespace {
// Kinds: 1 cooperative 128x256 2x1 cluster; 2 pingpong 128x128 2x1; 3 cooperative 256x128
// 1x2 (the A tile multicast); 4 cooperative 128x256 1x2.
struct Instance {
  int kind, fmt_a, fmt_b;
  RunFn run;
  WorkspaceFn workspace;
};
constexpr int E4 = HIPFP8_FMT_E4M3FN, E5 = HIPFP8_FMT_E5M2;
const Instance kInstances[] = {
    {1, E4, E4, e4m3_e4m3_k1_run, e4m3_e4m3_k1_workspace},
    {2, E4, E4, e4m3_e4m3_k2_run, e4m3_e4m3_k2_workspace},
    {3, E4, E4, e4m3_e4m3_k3_run, e4m3_e4m3_k3_workspace},
    {4, E4, E4, e4m3_e4m3_k4_run, e4m3_e4m3_k4_workspace},
    {1, E4, E5, e4m3_e5m2_k1_run, e4m3_e5m2_k1_workspace},
    {2, E4, E5, e4m3_e5m2_k2_run, e4m3_e5m2_k2_workspace},
    {1, E5, E4, e5m2_e4m3_k1_run, e5m2_e4m3_k1_workspace},
    {2, E5, E4, e5m2_e4m3_k2_run, e5m2_e4m3_k2_workspace},
};

const Instance* find(int kind, int fmt_a, int fmt_b) {
  for (const Instance& i : kInstances)
    if (i.kind == kind && i.fmt_a == fmt_a && i.fmt_b == fmt_b) return &i;
  return nullptr;
}

// The built-in default kind when config's kind is 0 (the rule on the Rust side normally
// passes one): cooperative for 2D x 2D; for 2D x 3D pingpong when K < N (measured on the
// H200, bench/NOTES-gemm.md).
int default_kind(bool two_d_two_d, int64_t n, int64_t k) {
  if (two_d_two_d) return 1;
  return k < n ? 2 : 1;
}

// Whether the current device (its facts into *f) can run sm_90a code: compute capability 9.0.
bool cutlass_runs_here(DeviceFacts* f) { return current_device_facts(f) && f->sm90; }

bool config_ok(int config) {
  const int kind = config & 0xff, raster = (config >> 8) & 0xf, swz = (config >> 12) & 0xf;
  return config >= 0 && (config >> 16) == 0 && kind <= 4 && raster <= 1 && swz <= 3 &&
         ((config >> 10) & 3) == 0;
}
}  // namespace

// Device workspace (bytes) the CUTLASS backend needs for `groups` groups on the current
// device, whatever the instance (it depends on the SM count: CUTLASS keeps TMA descriptors
// per SM).
HIPFP8_EXTERN int hipfp8_gg_cutlass_workspace_size(int groups, uint64_t* bytes) noexcept {
  if (groups < 0 || bytes == nullptr) return HIPFP8_KSTATUS_INVALID_SHAPE;
  DeviceFacts f;
  const int sms = current_device_facts(&f) ? f.sms : 0;
  if (sms <= 0) return (int)cudaErrorNoDevice;
  size_t off[11], lib = 0;
  for (const Instance& i : kInstances) lib = std::max(lib, i.workspace(groups, f.device, sms));
  *bytes = (uint64_t)layout(groups, lib, off);
  return 0;
}

// *available = 1 when the current device can run this backend (compute capability 9.0).
HIPFP8_EXTERN int hipfp8_gg_cutlass_available(int* available) noexcept {
  if (available == nullptr) return HIPFP8_KSTATUS_NULL_POINTER;
  DeviceFacts f;
  *available = cutlass_runs_here(&f) ? 1 : 0;
  return 0;
}

// *yes = 1 when this build has an instance of `kind` (1-4; 0: any) for fmt_a x fmt_b
// (kernel format ids). Pure: needs no device.
HIPFP8_EXTERN int hipfp8_gg_cutlass_has_instance(int kind, int fmt_a, int fmt_b,
                                                 int* yes) noexcept {
  if (yes == nullptr) return HIPFP8_KSTATUS_NULL_POINTER;
  if (fmt_a < 0 || fmt_a > 3 || fmt_b < 0 || fmt_b > 3 || kind < 0 || kind > 255)
    return HIPFP8_KSTATUS_INVALID_ENUM;
  *yes = 0;
  for (const Instance& i : kInstances)
    if ((kind == 0 || i.kind == kind) && i.fmt_a == fmt_a && i.fmt_b == fmt_b) *yes = 1;
  return 0;
}

// The current device's facts go to *f (for dispatch).
static int check_common(int fmt_a, int fmt_b, int groups, const void* ws, DeviceFacts* f) {
  if (fmt_a < 0 || fmt_a > 3 || fmt_b < 0 || fmt_b > 3) return HIPFP8_KSTATUS_INVALID_ENUM;
  if (find(1, fmt_a, fmt_b) == nullptr) return HIPFP8_KSTATUS_UNSUPPORTED;
  if (groups < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (!cutlass_runs_here(f)) return HIPFP8_KSTATUS_UNSUPPORTED;
  if (ws == nullptr && groups > 0) return HIPFP8_KSTATUS_NULL_POINTER;
  if (!aligned16(ws)) return HIPFP8_KSTATUS_MISALIGNED;
  return 0;
}

// Pick the instance, check the workspace holds what IT needs (callers size it with
// hipfp8_gg_cutlass_workspace_size, the maximum over all instances; checking only the chosen
// one keeps the per-call host work to one CUTLASS size query), run.
static int dispatch(const DeviceFacts& f, int config, bool two_d_two_d, const uint8_t* a,
                    int fmt_a, const uint8_t* b, int fmt_b, const int32_t* offs, int groups,
                    const float* sa, const float* sb, void* out, int64_t d0, int64_t d1,
                    int64_t d2, const uint8_t* staged_a, const uint8_t* staged_b, int64_t mt_pad,
                    void* ws, uint64_t ws_bytes, hipStream_t stream) {
  int kind = config & 0xff;
  if (kind == 0)
    kind = two_d_two_d ? default_kind(true, d0, d2) : default_kind(false, d1, d2);
  const Instance* inst = find(kind, fmt_a, fmt_b);
  if (inst == nullptr) return HIPFP8_KSTATUS_UNSUPPORTED;
  const int sms = f.sms;
  if (sms <= 0) return (int)cudaErrorNoDevice;
  size_t off[11];
  if (ws_bytes < (uint64_t)layout(groups, inst->workspace(groups, f.device, sms), off))
    return HIPFP8_KSTATUS_INVALID_SHAPE;
  RunArgs q{two_d_two_d, a, fmt_a, b, fmt_b, offs, groups, sa, sb, out, d0, d1, d2,
            staged_a, staged_b, mt_pad, ws, f.device, sms, (config >> 8) & 3, 1 << ((config >> 12) & 3),
            stream};
  return inst->run(q);
}

// 2D x 3D (OPS.md grouped_gemm_2d3d). `config`: see the top of this file. Requires
// K % 16 == 0, N % 8 == 0, 16-byte aligned a, b, out; otherwise HIPFP8_KSTATUS_UNSUPPORTED
// (nothing launched, nothing written).
HIPFP8_EXTERN int hipfp8_gg_cutlass_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b,
                                         int fmt_b, const int32_t* offs, int groups,
                                         const float* sa, const float* sb, void* out, int64_t M,
                                         int64_t N, int64_t K, void* workspace,
                                         uint64_t workspace_bytes, int config,
                                         hipStream_t stream) noexcept {
  if (M < 0 || N < 0 || K < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (!config_ok(config)) return HIPFP8_KSTATUS_INVALID_ENUM;
  DeviceFacts f;
  int st = check_common(fmt_a, fmt_b, groups, workspace, &f);
  if (st != 0) return st;
  if (groups == 0 || M == 0 || N == 0) return 0;
  if (K == 0 || K % 16 != 0 || N % 8 != 0 || !aligned16(a) || !aligned16(b) || !aligned16(out))
    return HIPFP8_KSTATUS_UNSUPPORTED;
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) return HIPFP8_KSTATUS_UNSUPPORTED;
  return dispatch(f, config, false, a, fmt_a, b, fmt_b, offs, groups, sa, sb, out, M, N, K,
                  nullptr, nullptr, 0, workspace, workspace_bytes, stream);
}

// 2D x 2D (OPS.md grouped_gemm_2d2d). `config` as for 2D x 3D. Requires Mt % 16 == 0,
// K % 8 == 0, 16-byte aligned a, b, out. Groups starting on a 16-element boundary are read in
// place; the others from staged_a / staged_b (N, mt_pad) / (K, mt_pad), the copies
// hipfp8_gg_stage_2d2d wrote with align_len 1, min_len 1 (mt_pad % 16 == 0,
// Mt + 15 * groups <= mt_pad <= INT32_MAX, 16-byte aligned), or with both null by the
// reference kernel on the same stream, as are empty groups (decided on the device).
HIPFP8_EXTERN int hipfp8_gg_cutlass_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b,
                                         int fmt_b, const int32_t* offs, int groups,
                                         const float* sa, const float* sb, void* out, int64_t N,
                                         int64_t Mt, int64_t K, const uint8_t* staged_a,
                                         const uint8_t* staged_b, int64_t mt_pad,
                                         void* workspace, uint64_t workspace_bytes, int config,
                                         hipStream_t stream) noexcept {
  if (N < 0 || Mt < 0 || K < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (!config_ok(config)) return HIPFP8_KSTATUS_INVALID_ENUM;
  DeviceFacts f;
  int st = check_common(fmt_a, fmt_b, groups, workspace, &f);
  if (st != 0) return st;
  if (groups == 0 || N == 0 || K == 0) return 0;
  if (Mt % 16 != 0 || K % 8 != 0 || !aligned16(a) || !aligned16(b) || !aligned16(out))
    return HIPFP8_KSTATUS_UNSUPPORTED;
  if (N > INT32_MAX || Mt > INT32_MAX || K > INT32_MAX) return HIPFP8_KSTATUS_UNSUPPORTED;
  if (!hipfp8_gg::staging_args_ok(staged_a, staged_b, Mt, mt_pad, groups))
    return HIPFP8_KSTATUS_INVALID_SHAPE;
  return dispatch(f, config, true, a, fmt_a, b, fmt_b, offs, groups, sa, sb, out, N, Mt, K,
                  staged_a, staged_b, mt_pad, workspace, workspace_bytes, stream);
}
