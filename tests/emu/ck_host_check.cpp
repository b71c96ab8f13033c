// CK grouped GEMM: what its host side accepts, for every benchmark shape, without a GPU.
//
// Built with the sid root's hipcc, host code only (scripts/ck-host-check.sh; once with FNUZ
// types for gfx942, once with -DCK_USE_OCP_FP8=1 -DHIPFP8_CK_OCP for gfx950: CK defines
// CK_USE_OCP_FP8 itself in a host-only pass), run on the build machine. For
// each shape and format pair it evaluates exactly what hip/grouped_gemm/ck's launchers decide
// on the host before launching: the launcher's shape rules, then the host part of CK's
// IsSupportedArgument (GridwiseGemm::CheckValidity on the descriptors run_op builds; the device
// queries of IsSupportedArgument need a GPU and are the one part not run). It prints a table
// and exits 1 when a decision differs from what README.md says (accepted: K % 16 == 0,
// K > 256 and N % 8 == 0 for 2D x 3D, Mt % 16 == 0 and K % 8 == 0 for 2D x 2D, so every
// benchmark shape incl. gpt-oss K = 2880).
#include "grouped_gemm/ck/ck_grouped_gemm_impl.h"

#include <cstdio>

#ifdef HIPFP8_CK_OCP
using F8 = ck::f8_ocp_t;
static const char* kTarget = "gfx950 (OCP)";
#else
using F8 = ck::f8_fnuz_t;
static const char* kTarget = "gfx942 (FNUZ)";
#endif

struct Shape {
  const char* what;
  bool two_d_two_d;
  int groups;
  int64_t d0, d1, d2;  // 2D x 3D: M, N, K; 2D x 2D: N, Mt, K
  bool expect;
};

static const Shape kShapes[] = {
    {"DeepSeek-V3 gate/up fwd (32768,7168)x(32,7168,2048)", false, 32, 32768, 2048, 7168, true},
    {"DeepSeek-V3 dgrad (32768,2048)x(32,2048,7168)", false, 32, 32768, 7168, 2048, true},
    {"DeepSeek-V3 wgrad (2048,32768)x(32768,7168)", true, 32, 2048, 32768, 7168, true},
    {"DeepSeek-V3 wgrad (7168,32768)x(32768,2048)", true, 32, 7168, 32768, 2048, true},
    {"gpt-oss gate/up fwd (8192,2880)x(16,2880,5760)", false, 16, 8192, 5760, 2880, true},
    {"gpt-oss down fwd (8192,2880)x(16,2880,2880)", false, 16, 8192, 2880, 2880, true},
    {"gpt-oss wgrad (2880,8192)x(8192,2880)", true, 16, 2880, 8192, 2880, true},
    {"small experts 128/expert (4096,7168)x(32,7168,2048)", false, 32, 4096, 2048, 7168, true},
    {"small experts 512/expert (16384,7168)x(32,7168,2048)", false, 32, 16384, 2048, 7168, true},
    {"K = 2872 (not a multiple of 16)", false, 16, 8192, 2880, 2872, false},
    {"N = 2884 (not a multiple of 8)", false, 16, 8192, 2884, 2880, false},
    {"K = 256 (too short for the v3 pipeline)", false, 32, 4096, 2048, 256, false},
    {"K = 272", false, 32, 4096, 2048, 272, true},
    {"wgrad Mt = 32760 (not a multiple of 16)", true, 32, 2048, 32760, 7168, false},
    {"wgrad K = 2884 (not a multiple of 8)", true, 16, 2880, 8192, 2884, false},
};

template <class FA, class FB>
static int check_pair(const char* pair) {
  int bad = 0;
  for (const Shape& s : kShapes) {
    const bool got = s.two_d_two_d
                         ? hipfp8_gg_ck::host_accepts_2d2d<FA, FB>(s.groups, s.d0, s.d1, s.d2)
                         : hipfp8_gg_ck::host_accepts_2d3d<FA, FB>(s.groups, s.d0, s.d1, s.d2);
    std::printf("%-14s %-8s %-56s %-8s %s\n", kTarget, pair, s.what, got ? "accepts" : "refuses",
                got == s.expect ? "as README says" : "MISMATCH");
    bad += got != s.expect;
  }
  return bad;
}

int main() {
  int bad = check_pair<F8, F8>("e4m3xe4m3");
  std::printf("%s: %d mismatches\n", kTarget, bad);
  return bad == 0 ? 0 : 1;
}
