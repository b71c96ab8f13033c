// Composable Kernel blockwise-scaled FP8 grouped GEMM (DeepSeek-V3 recipe) for gfx942
// (MI300X/MI325X), FNUZ inputs: E4M3FNUZ x E4M3FNUZ, 2D x 3D.
// hipfp8-build: backend=rocm
// hipfp8-build: offload-arch=gfx942
// hipfp8-build: requires=ck
//
// One translation unit per target (ck_grouped_gemm_impl.h says why); the kernel, its scale
// layouts and why there is no 2D x 2D instance: ck_grouped_gemm_blockwise.h. Compile-checked
// here and its ISA read; no AMD GPU has run it.
#include "ck_grouped_gemm_blockwise.h"
#include "../launchers.h"

// The MFMA tile edge (ck_grouped_gemm_blockwise.h BwGridwise).
constexpr ck::index_t kXdl = hipfp8_gg_ck_bw::kXdlGfx942;
using F8 = ck::f8_fnuz_t;

// Device workspace (bytes) of hipfp8_gg_ck_gfx942_bw_2d3d for `groups` groups.
HIPFP8_EXTERN int hipfp8_gg_ck_gfx942_bw_workspace_size(int groups, uint64_t* bytes) noexcept {
  if (groups < 0 || bytes == nullptr) return HIPFP8_KSTATUS_INVALID_SHAPE;
  *bytes = (uint64_t)hipfp8_gg_ck_bw::workspace_bytes(groups);
  return 0;
}

// docs/OPS.md grouped_gemm_blockwise_2d3d with E4M3FNUZ x E4M3FNUZ (format id 2); any other
// pair is HIPFP8_KSTATUS_UNSUPPORTED.
HIPFP8_EXTERN int hipfp8_gg_ck_gfx942_bw_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b,
                                              int fmt_b, const int32_t* offs, int groups,
                                              const float* sa, const float* sb, void* out,
                                              int64_t M, int64_t N, int64_t K, void* workspace,
                                              uint64_t workspace_bytes,
                                              hipStream_t stream) noexcept {
  return hipfp8_gg_ck_bw::grouped_bw_2d3d<F8, kXdl>(HIPFP8_FMT_E4M3FNUZ, a, fmt_a, b, fmt_b, offs,
                                               groups, sa, sb, out, M, N, K, workspace,
                                               workspace_bytes, stream);
}
