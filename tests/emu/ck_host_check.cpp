// CK grouped GEMM: what its host side accepts, for every benchmark shape, without a GPU.
//
// Built with the sid root's hipcc, host code only (scripts/ck-host-check.sh; once with FNUZ
// types for gfx942, once with -DCK_USE_OCP_FP8=1 -DHIPFP8_CK_OCP for gfx950: CK defines
// CK_USE_OCP_FP8 itself in a host-only pass), run on the build machine. For
// each shape and format pair it evaluates exactly what hip/grouped_gemm/ck's launchers decide
// on the host before launching: the launcher's shape rules, then the host part of CK's
// IsSupportedArgument (GridwiseGemm::CheckValidity on the descriptors run_op builds; the device
// queries of IsSupportedArgument need a GPU and are the one part not run). Every pair CK has:
// E4M3 x E4M3 (ck_grouped_gemm_impl.h's device op) and the mixed pairs E4M3 x E5M2, E5M2 x E4M3
// (ck_grouped_gemm_mixed.h: the v1 gridwise GEMM's vector-width checks and CheckValidity, with
// the K1 of the target's TU), and the blockwise-scaled 2D x 3D instance
// (ck_grouped_gemm_blockwise.h: its launcher rules and the ab_scale gridwise GEMM's
// CheckValidity, with the MFMA tile of the target's TU). It prints a table
// and exits 1 when a decision differs from what README.md says (accepted: K % 16 == 0,
// K > 256 and N % 8 == 0 for 2D x 3D, Mt % 16 == 0 and K % 8 == 0 for 2D x 2D, so every
// benchmark shape incl. gpt-oss K = 2880; blockwise 2D x 3D: K % 128 == 0, K >= 384,
// N % 128 == 0, so the DeepSeek-V3 shapes but not gpt-oss's 2880).
#include "grouped_gemm/ck/ck_grouped_gemm_impl.h"
#include "grouped_gemm/ck/ck_grouped_gemm_mixed.h"
#include "grouped_gemm/ck/ck_grouped_gemm_blockwise.h"

#include <cstdio>

#ifdef HIPFP8_CK_OCP
using F8 = ck::f8_ocp_t;
using B8 = ck::bf8_ocp_t;
static const char* kTarget = "gfx950 (OCP)";
constexpr ck::index_t kK1 = hipfp8_gg_ck::kMixedK1Gfx950;
constexpr ck::index_t kXdl = hipfp8_gg_ck_bw::kXdlGfx950;
#else
using F8 = ck::f8_fnuz_t;
using B8 = ck::bf8_fnuz_t;
static const char* kTarget = "gfx942 (FNUZ)";
constexpr ck::index_t kK1 = hipfp8_gg_ck::kMixedK1Gfx942;
constexpr ck::index_t kXdl = hipfp8_gg_ck_bw::kXdlGfx942;
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

// One instance's host decisions (2D x 3D: groups, M, N, K; 2D x 2D: groups, N, Mt, K).
using Accepts = bool (*)(int, int64_t, int64_t, int64_t);

static int check_pair(const char* pair, Accepts accepts_2d3d, Accepts accepts_2d2d) {
  int bad = 0;
  for (const Shape& s : kShapes) {
    const bool got = (s.two_d_two_d ? accepts_2d2d : accepts_2d3d)(s.groups, s.d0, s.d1, s.d2);
    std::printf("%-14s %-8s %-56s %-8s %s\n", kTarget, pair, s.what, got ? "accepts" : "refuses",
                got == s.expect ? "as README says" : "MISMATCH");
    bad += got != s.expect;
  }
  return bad;
}

// CK's own host check without the launcher's rules in front (2D x 3D descriptors: groups,
// N, K): it must refuse a reduction that is not a multiple of its 16-wide vector loads, so the
// "accepts" rows above are CK's decision, not a check that cannot refuse. (K = 256 is refused
// by the launcher rule for every pair; the E4M3 x E4M3 v3 pipeline refuses it itself, the
// mixed instance's v1 pipeline would take it.)
using Supported = bool (*)(int, int64_t, int64_t, int64_t, int64_t, int64_t);

static int check_ck_alone(const char* pair, Supported supported) {
  struct Row {
    int64_t n, k;
    bool expect;
  };
  int bad = 0;
  for (const Row r : {Row{2880, 2880, true}, Row{2880, 2872, false}}) {
    const bool got = supported(16, r.n, r.k, r.k, r.k, r.n);
    std::printf("%-14s %-8s CK alone, N = %lld, K = %-5lld %30s %-8s %s\n", kTarget, pair,
                (long long)r.n, (long long)r.k, "", got ? "accepts" : "refuses",
                got == r.expect ? "as expected" : "MISMATCH");
    bad += got != r.expect;
  }
  return bad;
}

// The blockwise-scaled 2D x 3D instance (E4M3 x E4M3 only; there is no 2D x 2D one): the
// DeepSeek-V3 shapes the recipe is for, and the rules' edges.
static int check_blockwise() {
  struct Bw {
    const char* what;
    int groups;
    int64_t m, n, k;
    bool expect;
  };
  static const Bw kBw[] = {
      {"DeepSeek-V3 gate/up fwd (32768,7168)x(32,7168,2048)", 32, 32768, 2048, 7168, true},
      {"DeepSeek-V3 dgrad (32768,2048)x(32,2048,7168)", 32, 32768, 7168, 2048, true},
      {"small experts 128/expert (4096,7168)x(32,7168,2048)", 32, 4096, 2048, 7168, true},
      {"small experts 512/expert (16384,7168)x(32,7168,2048)", 32, 16384, 2048, 7168, true},
      {"gpt-oss gate/up fwd (K = 2880: not 128-blocks)", 16, 8192, 5760, 2880, false},
      {"N = 2880 (not 128-blocks)", 16, 8192, 2880, 7168, false},
      {"K = 256 (too short for the v3 pipeline)", 32, 4096, 2048, 256, false},
      {"K = 384", 32, 4096, 2048, 384, true},
      {"M * K > INT32_MAX (CK's 32-bit buffer range)", 8, 1 << 18, 128, 8192, false},
  };
  int bad = 0;
  for (const Bw& s : kBw) {
    const bool got = hipfp8_gg_ck_bw::host_accepts_bw_2d3d<F8, kXdl>(s.groups, s.m, s.n, s.k);
    std::printf("%-14s %-8s %-56s %-8s %s\n", kTarget, "bw-e4m3", s.what,
                got ? "accepts" : "refuses", got == s.expect ? "as README says" : "MISMATCH");
    bad += got != s.expect;
  }
  // CK's own check without the launcher rules: it refuses the pipeline's too-short K and a K
  // its 16-wide loads can't read, so the "accepts" rows above are CK's decision too.
  struct Alone {
    int64_t n, k;
    bool expect;
  };
  for (const Alone r : {Alone{2048, 7168, true}, Alone{2048, 256, false}, Alone{2048, 2872, false}}) {
    const bool got = hipfp8_gg_ck_bw::host_supported_bw<F8, kXdl>(r.n, r.k);
    std::printf("%-14s %-8s CK alone, N = %lld, K = %-5lld %30s %-8s %s\n", kTarget, "bw-e4m3",
                (long long)r.n, (long long)r.k, "", got ? "accepts" : "refuses",
                got == r.expect ? "as expected" : "MISMATCH");
    bad += got != r.expect;
  }
  return bad;
}

int main() {
  using namespace hipfp8_gg_ck;
  int bad = check_pair("e4m3xe4m3", host_accepts_2d3d<F8, F8>, host_accepts_2d2d<F8, F8>);
  bad += check_pair("e4m3xe5m2", host_accepts_2d3d_mixed<F8, B8, kK1>,
                    host_accepts_2d2d_mixed<F8, B8, kK1>);
  bad += check_pair("e5m2xe4m3", host_accepts_2d3d_mixed<B8, F8, kK1>,
                    host_accepts_2d2d_mixed<B8, F8, kK1>);
  bad += check_ck_alone("e4m3xe4m3", host_supported<F8, F8>);
  bad += check_ck_alone("e4m3xe5m2", host_supported_mixed<F8, B8, kK1>);
  bad += check_ck_alone("e5m2xe4m3", host_supported_mixed<B8, F8, kK1>);
  bad += check_blockwise();
  std::printf("%s: %d mismatches\n", kTarget, bad);
  return bad == 0 ? 0 : 1;
}
