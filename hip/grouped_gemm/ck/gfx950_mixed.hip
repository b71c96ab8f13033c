// Composable Kernel FP8 grouped GEMM for gfx950 (MI355X), OCP inputs: the mixed pairs
// E4M3FN x E5M2 and E5M2 x E4M3FN (gfx950.hip has E4M3FN x E4M3FN).
// hipfp8-build: backend=rocm
// hipfp8-build: offload-arch=gfx950
// hipfp8-build: rocm-flags=-DCK_USE_OCP_FP8=1
// hipfp8-build: requires=ck
//
// One translation unit per target (ck_grouped_gemm_impl.h says why); ck_grouped_gemm_mixed.h
// says why the mixed pairs have their own kernel. Compile-checked here and its ISA read
// (v_mfma_f32_32x32x64_f8f6f4 with blgp:1 / cbsz:1: the E5M2 operand's format field); no AMD
// GPU has run it. Workspace: hipfp8_gg_ck_gfx950_workspace_size (the same device argument
// array and flags as gfx950.hip).
#include "ck_grouped_gemm_mixed.h"
#include "../launchers.h"

using F8 = ck::f8_ocp_t;
using B8 = ck::bf8_ocp_t;
// Kernel format ids of the two formats.
constexpr int kE4 = HIPFP8_FMT_E4M3FN;
constexpr int kE5 = HIPFP8_FMT_E5M2;
// Elements per LDS row along K (ck_grouped_gemm_mixed.h: it picks the MFMA).
constexpr ck::index_t kK1 = hipfp8_gg_ck::kMixedK1Gfx950;

// docs/OPS.md grouped_gemm_2d3d with E4M3FN x E5M2 or E5M2 x E4M3FN (format ids 0, 1); any other
// pair is HIPFP8_KSTATUS_UNSUPPORTED.
HIPFP8_EXTERN int hipfp8_gg_ck_gfx950_mixed_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b,
                                                 int fmt_b, const int32_t* offs, int groups,
                                                 const float* sa, const float* sb, void* out,
                                                 int64_t M, int64_t N, int64_t K, void* workspace,
                                                 uint64_t workspace_bytes,
                                                 hipStream_t stream) noexcept {
  using namespace hipfp8_gg_ck;
  if (fmt_a == kE4 && fmt_b == kE5)
    return grouped_2d3d<F8, B8, &run_mixed<F8, B8, kK1>>(kE4, kE5, a, fmt_a, b, fmt_b, offs, groups,
                                                         sa, sb, out, M, N, K, workspace,
                                                         workspace_bytes, stream);
  if (fmt_a == kE5 && fmt_b == kE4)
    return grouped_2d3d<B8, F8, &run_mixed<B8, F8, kK1>>(kE5, kE4, a, fmt_a, b, fmt_b, offs, groups,
                                                         sa, sb, out, M, N, K, workspace,
                                                         workspace_bytes, stream);
  return HIPFP8_KSTATUS_UNSUPPORTED;
}

// docs/OPS.md grouped_gemm_2d2d with E4M3FN x E5M2 or E5M2 x E4M3FN.
HIPFP8_EXTERN int hipfp8_gg_ck_gfx950_mixed_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b,
                                                 int fmt_b, const int32_t* offs, int groups,
                                                 const float* sa, const float* sb, void* out,
                                                 int64_t N, int64_t Mt, int64_t K,
                                                 const uint8_t* staged_a, const uint8_t* staged_b,
                                                 int64_t mt_pad, void* workspace,
                                                 uint64_t workspace_bytes,
                                                 hipStream_t stream) noexcept {
  using namespace hipfp8_gg_ck;
  if (fmt_a == kE4 && fmt_b == kE5)
    return grouped_2d2d<F8, B8, &run_mixed<F8, B8, kK1>>(kE4, kE5, a, fmt_a, b, fmt_b, offs, groups,
                                                         sa, sb, out, N, Mt, K, staged_a, staged_b,
                                                         mt_pad, workspace, workspace_bytes,
                                                         stream);
  if (fmt_a == kE5 && fmt_b == kE4)
    return grouped_2d2d<B8, F8, &run_mixed<B8, F8, kK1>>(kE5, kE4, a, fmt_a, b, fmt_b, offs, groups,
                                                         sa, sb, out, N, Mt, K, staged_a, staged_b,
                                                         mt_pad, workspace, workspace_bytes,
                                                         stream);
  return HIPFP8_KSTATUS_UNSUPPORTED;
}
