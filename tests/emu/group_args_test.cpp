// Host test of hip/grouped_gemm/group_args.h, the per-group argument arithmetic the CK and
// CUTLASS argument-building kernels run on the device. Built and run by
// tests/grouped_gemm_host_cpp.rs (cargo test) with the system C++ compiler.
//
// 1. Spot checks of clamping, offsets, strides, routing and the CK argument layout.
// 2. A whole grouped GEMM computed on the host FROM the per-group arguments (vendor groups
//    through CkArg's pointers and strides, the others as the reference kernel would) equals
//    the direct definition of docs/OPS.md, for both ops, over random offsets (with empty,
//    unaligned, decreasing and past-the-end ones) and odd shapes.
// 3. Staging (2D x 2D, docs/OPS.md "Any group start"): the padded starts, which groups are
//    staged (CUTLASS's rule and CK's), aligned groups pointing at the caller's operands in
//    place and the others at their staged copies, the launchers' staging-argument check; and
//    whole grouped GEMMs through the staged arguments, with staging buffers that hold copies
//    of the selected groups only (garbage everywhere else), equal to the definition.
#include "grouped_gemm/group_args.h"

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

using namespace hipfp8_gg;

static int fails = 0;
#define CHECK(c)                                                      \
  do {                                                                \
    if (!(c)) {                                                       \
      std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);        \
      ++fails;                                                        \
    }                                                                 \
  } while (0)

static void spot_checks() {
  {
    const int32_t offs[] = {0, 1, 1, 66, 66, 129};
    const int64_t want[][2] = {{0, 0}, {0, 1}, {1, 1}, {1, 66}, {66, 66}, {66, 129}};
    for (int g = 0; g < 6; ++g) {
      int64_t lo, hi;
      clamped_range(offs, g, 130, &lo, &hi);
      CHECK(lo == want[g][0] && hi == want[g][1]);
    }
  }
  {  // decreasing, past the end, negative: clamped, never out of [0, extent]
    const int32_t offs[] = {50, 40, 300, 10, -5};
    const int64_t want[][2] = {{0, 50}, {50, 50}, {50, 200}, {200, 200}, {200, 200}};
    for (int g = 0; g < 5; ++g) {
      int64_t lo, hi;
      clamped_range(offs, g, 200, &lo, &hi);
      CHECK(lo == want[g][0] && hi == want[g][1]);
    }
    const int32_t neg[] = {-7};
    int64_t lo, hi;
    clamped_range(neg, 0, 10, &lo, &hi);
    CHECK(lo == 0 && hi == 0);
  }
  {
    Group gr = group_2d3d(2, 1, 66, 70, 48);
    CHECK(gr.rows == 65 && gr.cols == 70 && gr.red == 48);
    CHECK(gr.a_off == 48 && gr.b_off == 2 * 70 * 48 && gr.out_off == 70);
    CHECK(gr.sa_off == 1 && gr.sb_off == 140 && gr.lda == 48 && gr.ldb == 48 && gr.ldo == 70);
    CHECK(gr.vendor_ok == 1);
  }
  {
    // Blockwise: sa (M, K/128) from row lo, sb (E, N/128, K/128) from expert g; the rest as
    // group_2d3d (the reference kernel's sa[(lo + i) * kb + q], sb[g * nb * kb + ...]).
    Group gr = group_bw_2d3d(2, 5, 70, 256, 384);
    Group plain = group_2d3d(2, 5, 70, 256, 384);
    CHECK(gr.sa_off == 5 * 3 && gr.sb_off == 2 * 2 * 3);
    CHECK(gr.rows == plain.rows && gr.cols == plain.cols && gr.red == plain.red);
    CHECK(gr.a_off == plain.a_off && gr.b_off == plain.b_off && gr.out_off == plain.out_off);
    CHECK(gr.lda == plain.lda && gr.ldb == plain.ldb && gr.ldo == plain.ldo && gr.vendor_ok == 1);
  }
  {
    Group gr = group_2d2d(3, 32, 80, 7, 96, 5, 16, 16);
    CHECK(gr.rows == 7 && gr.cols == 5 && gr.red == 48 && gr.a_off == 32 && gr.b_off == 32);
    CHECK(gr.out_off == 3 * 7 * 5 && gr.sa_off == 21 && gr.sb_off == 15);
    CHECK(gr.lda == 96 && gr.ldb == 96 && gr.ldo == 5 && gr.vendor_ok == 1);
    CHECK(group_2d2d(0, 17, 80, 7, 96, 5, 16, 1).vendor_ok == 0);   // unaligned start
    CHECK(group_2d2d(0, 32, 32, 7, 96, 5, 16, 1).vendor_ok == 0);   // empty
    CHECK(group_2d2d(0, 32, 52, 7, 96, 5, 16, 1).vendor_ok == 1);   // tail: TMA zero-fills
    CHECK(group_2d2d(0, 32, 52, 7, 96, 5, 16, 16).vendor_ok == 0);  // CK: length % 16
    CHECK(group_2d2d(0, 17, 80, 7, 96, 5, 1, 1).vendor_ok == 1);    // CUTLASS: any start
    // CK's minimum length (its v3 pipeline needs more than 2 K blocks of 128): 256 tokens go
    // to the reference kernel, 272 to CK.
    CHECK(group_2d2d(0, 0, 256, 7, 512, 5, 16, 16, 257).vendor_ok == 0);
    CHECK(group_2d2d(0, 0, 272, 7, 512, 5, 16, 16, 257).vendor_ok == 1);
  }
  {
    static uint8_t a[4096], b[4096];
    static float sa[64], sb[64];
    static uint16_t out[4096];
    Group gr = group_2d3d(1, 3, 9, 16, 32);
    CkArg c = ck_arg(gr, a, b, sa, sb, out);
    CHECK(c.p_a == a + 3 * 32 && c.p_b == b + 16 * 32 && c.p_e == out + 3 * 16);
    CHECK(c.p_ds[0] == sb + 16 && c.p_ds[1] == sa + 3);
    CHECK(c.M == 6 && c.N == 16 && c.K == 32 && c.stride_a == 32 && c.stride_b == 32);
    CHECK(c.stride_ds[0] == 0 && c.stride_ds[1] == 0 && c.stride_e == 16);
    Group skipped = group_2d2d(0, 5, 9, 16, 64, 16, 16, 16);
    CHECK(ck_arg(skipped, a, b, sa, sb, out).M == 0);
    // The layout CK's GroupedGemmKernelArgument<2> has (the CK TUs static_assert it too).
    CHECK(sizeof(CkArg) == 72 && offsetof(CkArg, M) == 40 && offsetof(CkArg, stride_e) == 68);
  }
}

// ---- whole-GEMM simulation ------------------------------------------------------------

// Any injective map with val(0) == 0 (FP8's +0: the staged copies' zero tail adds nothing).
static double val(uint8_t x) { return (double)(int8_t)x / 16.0; }

// A group CK owns, through its argument's pointers and strides: E = C * D0[n] * D1[m]. CK's
// tile loop skips a group with M, N or K == 0 (writes nothing).
static void ck_group(const CkArg& c, const uint16_t* out_base, std::vector<double>& got) {
  if (c.M == 0 || c.N == 0 || c.K == 0) return;
  const uint8_t* pa = (const uint8_t*)c.p_a;
  const uint8_t* pb = (const uint8_t*)c.p_b;
  const float* d0 = (const float*)c.p_ds[0];
  const float* d1 = (const float*)c.p_ds[1];
  const int64_t e0 = (const uint16_t*)c.p_e - out_base;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < c.N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < c.K; ++k)
        s += val(pa[m * c.stride_a + k]) * val(pb[n * c.stride_b + k]);
      got[e0 + m * c.stride_e + n] = s * d0[n + m * c.stride_ds[0]] * d1[m + n * c.stride_ds[1]];
    }
}

// 2D x 3D through the per-group arguments (as CK reads them) vs the definition.
static void sim_2d3d(std::mt19937& rng, int64_t M, int64_t N, int64_t K, std::vector<int32_t> offs) {
  const int E = (int)offs.size();
  std::vector<uint8_t> a(M * K), b(E * N * K);
  for (auto& x : a) x = rng() & 0xFF;
  for (auto& x : b) x = rng() & 0xFF;
  std::vector<float> sa(M), sb(E * N);
  for (auto& x : sa) x = (float)(rng() % 7 + 1);
  for (auto& x : sb) x = (float)(rng() % 5 + 1);
  const double UNTOUCHED = -12345.0;
  std::vector<double> got(M * N, UNTOUCHED), want(M * N, UNTOUCHED);
  // Definition (OPS.md): group g owns rows [o[g-1], o[g]) after clamping.
  int64_t prev = 0;
  for (int g = 0; g < E; ++g) {
    int64_t o = offs[g] < prev ? prev : offs[g];
    o = o > M ? M : o;
    for (int64_t i = prev; i < o; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += val(a[i * K + k]) * val(b[g * N * K + j * K + k]);
        want[i * N + j] = s * sa[i] * sb[g * N + j];
      }
    prev = o;
  }
  // Through the arguments: E[m,n] = C * D0[n] * D1[m] with CK's strides.
  static uint16_t out_base[1];
  for (int g = 0; g < E; ++g) {
    int64_t lo, hi;
    clamped_range(offs.data(), g, M, &lo, &hi);
    Group gr = group_2d3d(g, lo, hi, N, K);
    ck_group(ck_arg(gr, a.data(), b.data(), sa.data(), sb.data(), out_base), out_base, got);
  }
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
  if (bad) {
    std::printf("FAIL sim_2d3d M%lld N%lld K%lld E%d: %d elements differ\n", (long long)M,
                (long long)N, (long long)K, E, bad);
    ++fails;
  }
}

// ---- 2D x 2D: the definition, and one group the way each owner computes it ----------------

// Random operands and scales of a 2D x 2D problem.
struct Problem2d2d {
  int64_t N, Mt, K;
  int G;
  std::vector<uint8_t> a, b;
  std::vector<float> sa, sb;
  Problem2d2d(std::mt19937& rng, int64_t N_, int64_t Mt_, int64_t K_, int G_)
      : N(N_), Mt(Mt_), K(K_), G(G_), a(N_ * Mt_), b(Mt_ * K_), sa(G_ * N_), sb(G_ * K_) {
    for (auto& x : a) x = rng() & 0xFF;
    for (auto& x : b) x = rng() & 0xFF;
    for (auto& x : sa) x = (float)(rng() % 7 + 1);
    for (auto& x : sb) x = (float)(rng() % 5 + 1);
  }
  // docs/OPS.md: group g reduces tokens [o[g-1], o[g]) after clamping; zeros when empty.
  std::vector<double> definition(const std::vector<int32_t>& offs) const {
    std::vector<double> want(G * N * K, -2.0);
    int64_t prev = 0;
    for (int g = 0; g < G; ++g) {
      int64_t o = offs[g] < prev ? prev : offs[g];
      o = o > Mt ? Mt : o;
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < K; ++j) {
          double s = 0;
          for (int64_t t = prev; t < o; ++t) s += val(a[i * Mt + t]) * val(b[j * Mt + t]);
          want[g * N * K + i * K + j] = o == prev ? 0.0 : s * sa[g * N + i] * sb[g * K + j];
        }
      prev = o;
    }
    return want;
  }
  // A group the reference kernel owns, on the caller's operands (zeros when empty).
  void reference_group(const Group& gr, std::vector<double>& got) const {
    for (int64_t i = 0; i < gr.rows; ++i)
      for (int64_t j = 0; j < gr.cols; ++j) {
        double s = 0;
        for (int64_t t = 0; t < gr.red; ++t)
          s += val(a[gr.a_off + i * gr.lda + t]) * val(b[gr.b_off + j * gr.ldb + t]);
        got[gr.out_off + i * gr.ldo + j] =
            gr.red == 0 ? 0.0 : s * sa[gr.sa_off + i] * sb[gr.sb_off + j];
      }
  }
};

static void compare(const char* what, const Problem2d2d& p, const std::vector<double>& got,
                    const std::vector<double>& want, int64_t align_len, int64_t min_len) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && bad < 3)
      std::printf("  element %zu (group %lld): got %g want %g\n", i,
                  (long long)(i / (p.N * p.K)), got[i], want[i]);
    bad += got[i] != want[i];
  }
  if (bad) {
    std::printf("FAIL %s N%lld Mt%lld K%lld G%d rule (%lld, %lld): %d elements differ\n", what,
                (long long)p.N, (long long)p.Mt, (long long)p.K, p.G, (long long)align_len,
                (long long)min_len, bad);
    ++fails;
  }
}

// 2D x 2D through the per-group arguments: vendor groups via CkArg, the others as the
// reference kernel does (zeros when empty).
static void sim_2d2d(std::mt19937& rng, int64_t N, int64_t Mt, int64_t K, std::vector<int32_t> offs,
                     int64_t align_start, int64_t align_len) {
  const Problem2d2d p(rng, N, Mt, K, (int)offs.size());
  std::vector<double> got(p.G * N * K, -1.0);
  static uint16_t out_base[1];
  for (int g = 0; g < p.G; ++g) {
    int64_t lo, hi;
    clamped_range(offs.data(), g, Mt, &lo, &hi);
    Group gr = group_2d2d(g, lo, hi, N, Mt, K, align_start, align_len);
    if (gr.vendor_ok)
      ck_group(ck_arg(gr, p.a.data(), p.b.data(), p.sa.data(), p.sb.data(), out_base), out_base,
               got);
    else
      p.reference_group(gr, got);
  }
  compare("sim_2d2d", p, got, p.definition(offs), align_len, 1);
}

static void staging_spot_checks() {
  {  // padded starts over the clamped lengths: 0, 5 (-> 16), 0, 17 (-> 32), clamped 3 (-> 16)
    const int32_t offs[] = {0, 5, 2, 22, 100};
    const int64_t want[][3] = {{0, 0, 0}, {0, 5, 0}, {5, 5, 16}, {5, 22, 16}, {22, 25, 48}};
    for (int g = 0; g < 5; ++g) {
      int64_t lo, hi, ps, lo2, hi2;
      clamped_padded_range(offs, g, 25, &lo, &hi, &ps);
      clamped_range(offs, g, 25, &lo2, &hi2);
      CHECK(lo == want[g][0] && hi == want[g][1] && ps == want[g][2]);
      CHECK(lo == lo2 && hi == hi2);
    }
  }
  // CUTLASS's rule (align_len 1, min_len 1): staged exactly when non-empty and off the boundary.
  CHECK(!stage_2d2d(32, 80, 1, 1));   // aligned: in place
  CHECK(!stage_2d2d(32, 37, 1, 1));   // aligned, ragged length: in place (TMA zero-fills)
  CHECK(stage_2d2d(33, 80, 1, 1));    // off the boundary
  CHECK(stage_2d2d(47, 48, 1, 1));    // a 1-token group off it
  CHECK(!stage_2d2d(33, 33, 1, 1));   // empty: the reference kernel's zeros
  // CK's rule (16, 257): also ragged lengths; never what the reference kernel keeps.
  CHECK(!stage_2d2d(0, 272, 16, 257));  // in place
  CHECK(stage_2d2d(0, 261, 16, 257));   // ragged: padded 272
  CHECK(stage_2d2d(3, 275, 16, 257));   // off the boundary
  CHECK(stage_2d2d(3, 260, 16, 257));   // 257 tokens: padded 272 >= 257
  CHECK(!stage_2d2d(0, 256, 16, 257));  // too short even padded: reference
  CHECK(!stage_2d2d(3, 243, 16, 257));  // 240 tokens, padded 240: reference
  {
    Group in = group_2d2d_staged(2, 32, 80, 48, 7, 96, 5, 160, 1, 1);
    CHECK(in.staged == 0 && in.vendor_ok == 1 && in.a_off == 32 && in.b_off == 32);
    CHECK(in.lda == 96 && in.ldb == 96 && in.red == 48 && in.out_off == 2 * 7 * 5);
    Group st = group_2d2d_staged(3, 81, 90, 64, 7, 96, 5, 160, 1, 1);
    CHECK(st.staged == 1 && st.vendor_ok == 1 && st.a_off == 64 && st.b_off == 64);
    CHECK(st.lda == 160 && st.ldb == 160 && st.red == 16 && st.rows == 7 && st.cols == 5);
    CHECK(st.out_off == 3 * 7 * 5 && st.sa_off == 21 && st.sb_off == 15 && st.ldo == 5);
    Group empty = group_2d2d_staged(1, 81, 81, 64, 7, 96, 5, 160, 1, 1);
    CHECK(empty.staged == 0 && empty.vendor_ok == 0);
    Group ck_ref = group_2d2d_staged(1, 3, 243, 0, 7, 512, 5, 640, 16, 257);
    CHECK(ck_ref.staged == 0 && ck_ref.vendor_ok == 0 && ck_ref.a_off == 3 && ck_ref.red == 240);

    static uint8_t a[4096], b[4096], xa[4096], xb[4096];
    static float sa[64], sb[64];
    static uint16_t out[4096];
    CkArg ci = ck_arg(in, a, b, sa, sb, out, xa, xb);
    CHECK(ci.p_a == a + 32 && ci.p_b == b + 32 && ci.stride_a == 96 && ci.K == 48);
    CkArg cs = ck_arg(st, a, b, sa, sb, out, xa, xb);
    CHECK(cs.p_a == xa + 64 && cs.p_b == xb + 64 && cs.stride_a == 160 && cs.stride_b == 160);
    CHECK(cs.M == 7 && cs.K == 16 && cs.p_ds[1] == sa + 21 && cs.p_e == out + 105);
  }
  {
    alignas(16) static uint8_t x[64];
    CHECK(staging_args_ok(nullptr, nullptr, 96, 0, 3));
    CHECK(staging_args_ok(x, x + 16, 96, 144, 3));   // 96 + 45 <= 144
    CHECK(!staging_args_ok(x, x + 16, 96, 128, 3));  // too short for 3 groups' padding
    CHECK(!staging_args_ok(x, x + 16, 96, 152, 3));  // mt_pad % 16
    CHECK(!staging_args_ok(x, nullptr, 96, 144, 3)); // one of two
    CHECK(!staging_args_ok(x + 1, x + 16, 96, 144, 3));
    CHECK(!staging_args_ok(x, x + 16, (int64_t)INT32_MAX - 15, (int64_t)INT32_MAX + 17, 2));
  }
}

// 2D x 2D through the STAGED per-group arguments (group_2d2d_staged, as the CK and CUTLASS
// builders call it): staging buffers of mt_pad columns hold, at each padded position
// (computed here from the definition, not from group_args.h), copies of exactly the groups
// stage_2d2d selects (zero tail); every other byte is garbage, so a group read from a copy
// that was never written, or at the wrong place, gives a wrong sum. Also checks that every
// non-empty group on a 16-token boundary that the library can take as it is points at the
// caller's operands (stride Mt) and every selected group at its copy (stride mt_pad).
static void sim_2d2d_staged(std::mt19937& rng, int64_t N, int64_t Mt, int64_t K,
                            std::vector<int32_t> offs, int64_t align_len, int64_t min_len,
                            int* n_in_place, int* n_staged) {
  const Problem2d2d p(rng, N, Mt, K, (int)offs.size());
  const int G = p.G;
  const int64_t mt_pad = (Mt + 15 * G + 15) / 16 * 16;
  std::vector<uint8_t> xa(N * mt_pad), xb(K * mt_pad);
  for (auto& x : xa) x = 0x80 | (rng() & 0x7F);  // garbage: val() < 0, never 0
  for (auto& x : xb) x = 0x80 | (rng() & 0x7F);
  std::vector<double> got(G * N * K, -1.0);
  std::vector<int64_t> lo_of(G), hi_of(G), ps_of(G);
  int64_t prev = 0, acc = 0;
  for (int g = 0; g < G; ++g) {
    int64_t o = offs[g] < prev ? prev : offs[g];
    o = o > Mt ? Mt : o;
    lo_of[g] = prev;
    hi_of[g] = o;
    ps_of[g] = acc;
    acc += (o - prev + 15) / 16 * 16;
    prev = o;
  }
  // The staging kernel's output: selected groups only.
  for (int g = 0; g < G; ++g) {
    if (!stage_2d2d(lo_of[g], hi_of[g], align_len, min_len)) continue;
    const int64_t len = hi_of[g] - lo_of[g], plen = (len + 15) / 16 * 16;
    for (int64_t c = 0; c < plen; ++c) {
      for (int64_t i = 0; i < N; ++i)
        xa[i * mt_pad + ps_of[g] + c] = c < len ? p.a[i * Mt + lo_of[g] + c] : 0;
      for (int64_t j = 0; j < K; ++j)
        xb[j * mt_pad + ps_of[g] + c] = c < len ? p.b[j * Mt + lo_of[g] + c] : 0;
    }
  }
  static uint16_t out_base[1];
  for (int g = 0; g < G; ++g) {
    int64_t lo, hi, ps;
    clamped_padded_range(offs.data(), g, Mt, &lo, &hi, &ps);
    CHECK(lo == lo_of[g] && hi == hi_of[g] && ps == ps_of[g]);
    Group gr = group_2d2d_staged(g, lo, hi, ps, N, Mt, K, mt_pad, align_len, min_len);
    const int64_t len = hi - lo;
    const bool in_place = len > 0 && len >= min_len && lo % 16 == 0 && len % align_len == 0;
    if (!gr.vendor_ok) {  // the reference kernel, on the caller's operands
      CHECK(gr.staged == 0 && !in_place);
      p.reference_group(gr, got);
      continue;
    }
    CkArg c = ck_arg(gr, p.a.data(), p.b.data(), p.sa.data(), p.sb.data(), out_base, xa.data(),
                     xb.data());
    if (in_place) {  // in place: the caller's operands at the group's start
      ++*n_in_place;
      CHECK(gr.staged == 0 && c.p_a == p.a.data() + lo && c.p_b == p.b.data() + lo);
      CHECK(c.stride_a == Mt && c.stride_b == Mt && c.K == len);
    } else {  // its copy at the padded start, padded length
      ++*n_staged;
      CHECK(gr.staged == 1 && c.p_a == xa.data() + ps && c.p_b == xb.data() + ps);
      CHECK(c.stride_a == mt_pad && c.stride_b == mt_pad && c.K == (len + 15) / 16 * 16);
    }
    CHECK(c.M > 0 && c.K > 0);
    ck_group(c, out_base, got);
  }
  compare("sim_2d2d_staged", p, got, p.definition(offs), align_len, min_len);
}

int main() {
  spot_checks();
  staging_spot_checks();
  std::mt19937 rng(7);
  sim_2d3d(rng, 130, 24, 32, {0, 1, 1, 66, 66, 129});
  sim_2d3d(rng, 200, 8, 16, {50, 40, 300, 10});
  sim_2d2d(rng, 9, 96, 16, {0, 16, 17, 48, 48, 90}, 16, 16);
  sim_2d2d(rng, 9, 96, 16, {0, 16, 17, 48, 48, 90}, 16, 1);
  sim_2d2d(rng, 5, 64, 8, {70, 10, 32}, 16, 16);
  {
    // Staged: a fixed mix (aligned in place, aligned ragged, off the boundary, empty,
    // 1-token, clamped) under CUTLASS's rule and CK's (with a small minimum so short groups
    // exercise it), then random offsets; both kinds of group must occur.
    int in_place = 0, staged = 0;
    const std::vector<int32_t> mix = {32, 64, 69, 70, 96, 96, 101, 128, 150, 141, 400};
    sim_2d2d_staged(rng, 5, 176, 7, mix, 1, 1, &in_place, &staged);
    sim_2d2d_staged(rng, 5, 176, 7, mix, 16, 20, &in_place, &staged);
    sim_2d2d_staged(rng, 3, 96, 4, {0, 16, 48, 48, 96}, 1, 1, &in_place, &staged);  // aligned
    for (int it = 0; it < 30; ++it) {
      const int G = 1 + rng() % 9;
      const int64_t ext = (rng() % 12) * 16;
      std::vector<int32_t> offs(G);
      for (auto& o : offs) o = (int32_t)(rng() % (ext + 20)) - 5;
      if (it % 3) std::sort(offs.begin(), offs.end());
      const bool ck = it % 2;
      sim_2d2d_staged(rng, 1 + rng() % 6, ext, 1 + rng() % 6, offs, ck ? 16 : 1,
                      ck ? 1 + rng() % 40 : 1, &in_place, &staged);
    }
    CHECK(in_place > 10 && staged > 10);
    std::printf("group_args: staged sims: %d groups in place, %d staged\n", in_place, staged);
  }
  for (int it = 0; it < 40; ++it) {
    const int G = 1 + rng() % 8;
    const int64_t ext = rng() % 100;
    std::vector<int32_t> offs(G);
    for (auto& o : offs) o = (int32_t)(rng() % (ext + 20)) - 5;
    if (it % 2) std::sort(offs.begin(), offs.end());
    sim_2d3d(rng, ext, 1 + rng() % 9, 1 + rng() % 9, offs);
    sim_2d2d(rng, 1 + rng() % 9, ext, 1 + rng() % 9, offs, 1 + rng() % 16, 1 + rng() % 16);
  }
  std::printf(fails ? "group_args: %d FAILED\n" : "group_args: all passed\n", fails);
  return fails ? 1 : 0;
}
