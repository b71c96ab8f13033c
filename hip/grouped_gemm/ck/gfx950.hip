// Composable Kernel FP8 grouped GEMM for gfx950 (MI355X): OCP E4M3FN inputs.
// hipfp8-build: backend=rocm
// hipfp8-build: offload-arch=gfx950
// hipfp8-build: rocm-flags=-DCK_USE_OCP_FP8=1
// hipfp8-build: requires=ck
//
// One translation unit per target (ck_grouped_gemm_impl.h says why). The instance is
// compile-checked here and its ISA read (v_mfma_f32_32x32x64_f8f6f4); no AMD GPU has run it.
#include "ck_grouped_gemm_impl.h"
#include "../launchers.h"

using F8 = ck::f8_ocp_t;

// Device workspace the gfx950 CK backend needs for `groups` groups.
HIPFP8_EXTERN int hipfp8_gg_ck_gfx950_workspace_size(int groups, uint64_t* bytes) noexcept {
  if (groups < 0 || bytes == nullptr) return HIPFP8_KSTATUS_INVALID_SHAPE;
  *bytes = hipfp8_gg_ck::workspace_bytes(groups);
  return 0;
}

// docs/OPS.md grouped_gemm_2d3d with E4M3FN x E4M3FN (format id 0).
HIPFP8_EXTERN int hipfp8_gg_ck_gfx950_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b,
                                           int fmt_b, const int32_t* offs, int groups,
                                           const float* sa, const float* sb, void* out,
                                           int64_t M, int64_t N, int64_t K, void* workspace,
                                           uint64_t workspace_bytes, hipStream_t stream) noexcept {
  return hipfp8_gg_ck::grouped_2d3d<F8, F8>(HIPFP8_FMT_E4M3FN, HIPFP8_FMT_E4M3FN, a, fmt_a, b, fmt_b, offs, groups,
                                        sa, sb, out, M, N, K, workspace, workspace_bytes,
                                        stream);
}

// docs/OPS.md grouped_gemm_2d2d with E4M3FN x E4M3FN.
HIPFP8_EXTERN int hipfp8_gg_ck_gfx950_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b,
                                           int fmt_b, const int32_t* offs, int groups,
                                           const float* sa, const float* sb, void* out,
                                           int64_t N, int64_t Mt, int64_t K,
                                           const uint8_t* staged_a, const uint8_t* staged_b,
                                           int64_t mt_pad, void* workspace,
                                           uint64_t workspace_bytes, hipStream_t stream) noexcept {
  return hipfp8_gg_ck::grouped_2d2d<F8, F8>(HIPFP8_FMT_E4M3FN, HIPFP8_FMT_E4M3FN, a, fmt_a, b, fmt_b, offs, groups,
                                        sa, sb, out, N, Mt, K, staged_a, staged_b, mt_pad,
                                        workspace, workspace_bytes, stream);
}
