// Composable Kernel blockwise-scaled FP8 grouped GEMM (DeepSeek-V3 recipe) for gfx950
// (MI355X), OCP inputs: E4M3FN x E4M3FN, 2D x 3D.
// hipfp8-build: backend=rocm
// hipfp8-build: offload-arch=gfx950
// hipfp8-build: rocm-flags=-DCK_USE_OCP_FP8=1
// hipfp8-build: requires=ck
//
// One translation unit per target (ck_grouped_gemm_impl.h says why); the kernel, its scale
// layouts and why there is no 2D x 2D instance: ck_grouped_gemm_blockwise.h. Compile-checked
// here and its ISA read; no AMD GPU has run it.
#include "ck_grouped_gemm_blockwise.h"
#include "../launchers.h"

// The MFMA tile edge (ck_grouped_gemm_blockwise.h BwGridwise).
constexpr ck::index_t kXdl = hipfp8_gg_ck_bw::kXdlGfx950;
using F8 = ck::f8_ocp_t;

// Device workspace (bytes) of hipfp8_gg_ck_gfx950_bw_2d3d for `groups` groups.
HIPFP8_EXTERN int hipfp8_gg_ck_gfx950_bw_workspace_size(int groups, uint64_t* bytes) noexcept {
  if (groups < 0 || bytes == nullptr) return HIPFP8_KSTATUS_INVALID_SHAPE;
  *bytes = (uint64_t)hipfp8_gg_ck_bw::workspace_bytes(groups);
  return 0;
}

// docs/OPS.md grouped_gemm_blockwise_2d3d with E4M3FN x E4M3FN (format id 0); any other pair
// is HIPFP8_KSTATUS_UNSUPPORTED.
HIPFP8_EXTERN int hipfp8_gg_ck_gfx950_bw_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b,
                                              int fmt_b, const int32_t* offs, int groups,
                                              const float* sa, const float* sb, void* out,
                                              int64_t M, int64_t N, int64_t K, void* workspace,
                                              uint64_t workspace_bytes,
                                              hipStream_t stream) noexcept {
  return hipfp8_gg_ck_bw::grouped_bw_2d3d<F8, kXdl>(HIPFP8_FMT_E4M3FN, a, fmt_a, b, fmt_b, offs,
                                               groups, sa, sb, out, M, N, K, workspace,
                                               workspace_bytes, stream);
}
