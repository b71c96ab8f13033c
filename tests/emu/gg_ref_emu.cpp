// Checks hip/grouped_gemm/reference.hip's kernels on the host through port_emu.h against a
// plain f64 loop: every format pair, empty / one-row / bad (clamped) offsets, N and K not
// multiples of the tile, the skip mask. The blockwise-scaled kernels are checked bit for bit
// against a host transcription of their definition (src/reference/grouped_gemm_blockwise.rs:
// 8-lane segment dots, the scales applied per 128-block). Built and run by
// scripts/emu-gg-ref.sh.
#include "gen/grouped_gemm/reference.hip"
#include <cstdio>
#include <random>

static double decode_host(int fmt, unsigned c) { return (double)hipfp8_gg_ref::decode_fp8(fmt, c); }

static int fails = 0;
static void check(const char* what, const std::vector<hipfp8_bf16>& out, const std::vector<double>& ref,
                  const std::vector<double>& absdot, const std::vector<char>& written) {
  int bad = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    float o = bf16_to_f32(out[i]);
    if (!written[i]) {  // must be untouched (sentinel 0xFFFF)
      if (out[i].bits != 0xFFFF) { if (bad++ < 5) printf("  %s: [%zu] written but must not be\n", what, i); }
      continue;
    }
    double r = ref[i];
    if (std::isnan(r)) { if (!std::isnan(o) && bad++ < 5) printf("  %s: [%zu] want NaN got %g\n", what, i, o); continue; }
    double tol = std::ldexp(std::fabs(r), -8) + std::ldexp(absdot[i], -20) + 1e-30;
    if (!(std::fabs(o - r) <= tol)) { if (bad++ < 5) printf("  %s: [%zu] got %g want %g\n", what, i, o, r); }
  }
  printf("%s: %s (%d bad of %zu)\n", what, bad ? "FAIL" : "ok", bad, out.size());
  if (bad) ++fails;
}


// The CPU reference's f32 dot (src/reference/grouped_gemm.rs dot_f32): lane i % 8.
static float dot8(const float* x, const float* y, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) acc[i % 8] += x[i] * y[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// One blockwise output: rows x[t], y[t] over [lo, hi), block q's scales sa(q) * sb(q).
template <class SA, class SB>
static float bw_dot(const std::vector<float>& x, const std::vector<float>& y, int64_t lo, int64_t hi,
                    SA sa, SB sb) {
  float acc = 0.0f;
  for (int64_t s0 = lo; s0 < hi;) {
    int64_t q = s0 / 128, s1 = std::min<int64_t>((q + 1) * 128, hi);
    float part = dot8(x.data() + s0, y.data() + s0, s1 - s0);
    float p1 = part * sa(q);
    acc = acc + p1 * sb(q);
    s0 = s1;
  }
  return acc;
}

static void check_bits(const char* what, const std::vector<hipfp8_bf16>& out,
                       const std::vector<hipfp8_bf16>& want) {
  int bad = 0;
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].bits != want[i].bits && bad++ < 5)
      printf("  %s: [%zu] got %04x want %04x\n", what, i, out[i].bits, want[i].bits);
  printf("%s: %s (%d bad of %zu)\n", what, bad ? "FAIL" : "ok", bad, out.size());
  if (bad) ++fails;
}

int main() {
  std::mt19937 rng(1);
  auto code = [&](int fmt) {
    for (;;) {
      unsigned c = rng() & 0xFF;
      double v = decode_host(fmt, c);
      if (std::isfinite(v)) return (uint8_t)c;
    }
  };
  const int fmts[4] = {0, 1, 2, 3};
  // ---- 2D x 3D
  struct C3 { int64_t M, N, K; std::vector<int32_t> offs; };
  std::vector<C3> cases = {
      {130, 70, 45, {0, 1, 1, 66, 66, 129}},       // empty, 1-row, partial tiles, tail row unowned
      {64, 64, 32, {64}},                          // exact tiles
      {200, 5, 3, {50, 40, 300, 10}},              // decreasing and past-the-end: clamped
      {17, 129, 97, {17}},
  };
  for (auto& cs : cases) {
    for (int fa : fmts) for (int fb : fmts) {
      if (cs.M != 130 && (fa != 0 || fb != 1)) continue;  // all pairs on the first case only
      int64_t M = cs.M, N = cs.N, K = cs.K; int E = (int)cs.offs.size();
      std::vector<uint8_t> a(M * K), b(E * N * K);
      for (auto& x : a) x = code(fa);
      for (auto& x : b) x = code(fb);
      std::vector<float> sa(M), sb(E * N);
      for (auto& x : sa) x = std::ldexp(1.0f, (int)(rng() % 7) - 3);
      for (auto& x : sb) x = 0.5f + (rng() % 100) / 64.0f;
      std::vector<int32_t> skip(E, 0);
      bool use_skip = E > 2 && cs.M == 130 && fa == 0 && fb == 0;
      if (use_skip) skip[3] = 1;
      std::vector<hipfp8_bf16> out(M * N, hipfp8_bf16{0xFFFF});
      std::vector<double> ref(M * N, 0), ad(M * N, 0);
      std::vector<char> wr(M * N, 0);
      int64_t prev = 0;
      for (int g = 0; g < E; ++g) {
        int64_t o = std::min<int64_t>(std::max<int64_t>(cs.offs[g], prev), M);
        if (!skip[g])
          for (int64_t i = prev; i < o; ++i)
            for (int64_t j = 0; j < N; ++j) {
              double s = 0, s2 = 0;
              for (int64_t k = 0; k < K; ++k) {
                double p = decode_host(fa, a[i * K + k]) * decode_host(fb, b[g * N * K + j * K + k]);
                s += p; s2 += std::fabs(p);
              }
              ref[i * N + j] = s * sa[i] * sb[g * N + j];
              ad[i * N + j] = s2 * sa[i] * sb[g * N + j];
              wr[i * N + j] = 1;
            }
        prev = o;
      }
      int rc = hipfp8_gg_ref_2d3d(a.data(), fa, b.data(), fb, cs.offs.data(), E, sa.data(), sb.data(),
                                  out.data(), M, N, K, use_skip ? skip.data() : nullptr, 0, nullptr);
      char name[128];
      snprintf(name, sizeof name, "2d3d M%lld N%lld K%lld E%d fmt %d x %d%s", (long long)M, (long long)N,
               (long long)K, E, fa, fb, use_skip ? " skip" : "");
      if (rc) { printf("%s: rc %d\n", name, rc); ++fails; continue; }
      check(name, out, ref, ad, wr);
    }
  }
  // ---- 2D x 2D
  struct C2 { int64_t N, Mt, K; std::vector<int32_t> offs; };
  std::vector<C2> c2 = {
      {70, 100, 45, {0, 1, 33, 33, 90}},   // empty first, 1-length, empty middle, tail unowned
      {3, 40, 130, {40}},
      {65, 50, 1, {60, 10, 20}},           // clamped
  };
  for (auto& cs : c2) {
    for (int fa : fmts) for (int fb : fmts) {
      if (cs.N != 70 && (fa != 1 || fb != 0)) continue;
      int64_t N = cs.N, Mt = cs.Mt, K = cs.K; int G = (int)cs.offs.size();
      std::vector<uint8_t> a(N * Mt), b(Mt * K);
      for (auto& x : a) x = code(fa);
      for (auto& x : b) x = code(fb);
      std::vector<float> sa(G * N), sb(G * K);
      for (auto& x : sa) x = std::ldexp(1.0f, (int)(rng() % 7) - 3);
      for (auto& x : sb) x = 0.5f + (rng() % 100) / 64.0f;
      std::vector<int32_t> skip(G, 0);
      bool use_skip = cs.N == 70 && fa == 2 && fb == 2;
      if (use_skip) skip[2] = 1;
      std::vector<hipfp8_bf16> out(G * N * K, hipfp8_bf16{0xFFFF});
      std::vector<double> ref(G * N * K, 0), ad(G * N * K, 0);
      std::vector<char> wr(G * N * K, 0);
      int64_t prev = 0;
      for (int g = 0; g < G; ++g) {
        int64_t o = std::min<int64_t>(std::max<int64_t>(cs.offs[g], prev), Mt);
        if (!skip[g])
          for (int64_t i = 0; i < N; ++i)
            for (int64_t j = 0; j < K; ++j) {
              double s = 0, s2 = 0;
              for (int64_t t = prev; t < o; ++t) {
                double p = decode_host(fa, a[i * Mt + t]) * decode_host(fb, b[j * Mt + t]);
                s += p; s2 += std::fabs(p);
              }
              size_t idx = g * N * K + i * K + j;
              ref[idx] = (o == prev) ? 0.0 : s * sa[g * N + i] * sb[g * K + j];
              ad[idx] = s2 * sa[g * N + i] * sb[g * K + j];
              wr[idx] = 1;
            }
        prev = o;
      }
      int rc = hipfp8_gg_ref_2d2d(a.data(), fa, b.data(), fb, cs.offs.data(), G, sa.data(), sb.data(),
                                  out.data(), N, Mt, K, use_skip ? skip.data() : nullptr, 0, nullptr);
      char name[128];
      snprintf(name, sizeof name, "2d2d N%lld Mt%lld K%lld G%d fmt %d x %d%s", (long long)N, (long long)Mt,
               (long long)K, G, fa, fb, use_skip ? " skip" : "");
      if (rc) { printf("%s: rc %d\n", name, rc); ++fails; continue; }
      check(name, out, ref, ad, wr);
    }
  }
  // ---- blockwise-scaled 2D x 3D and 2D x 2D, bit for bit
  {
    auto scale = [&]() { return std::ldexp(1.0f, (int)(rng() % 9) - 4) * (rng() % 2 ? 1.25f : 1.0f); };
    // 2D x 3D: K and N with partial blocks, an empty and a clamped group.
    int64_t M = 90, N = 200, K = 300;
    std::vector<int32_t> offs = {0, 33, 33, 80};
    int E = (int)offs.size();
    int64_t kb = (K + 127) / 128, nb = (N + 127) / 128;
    std::vector<uint8_t> a(M * K), b(E * N * K);
    for (auto& x : a) x = code(0);
    for (auto& x : b) x = code(0);
    std::vector<float> sa(M * kb), sb(E * nb * kb);
    for (auto& x : sa) x = scale();
    for (auto& x : sb) x = scale();
    std::vector<hipfp8_bf16> out(M * N, hipfp8_bf16{0xFFFF}), want(M * N, hipfp8_bf16{0xFFFF});
    int64_t prev = 0;
    for (int g = 0; g < E; ++g) {
      int64_t o = std::min<int64_t>(std::max<int64_t>(offs[g], prev), M);
      for (int64_t i = prev; i < o; ++i) {
        std::vector<float> x(K);
        for (int64_t k = 0; k < K; ++k) x[k] = (float)decode_host(0, a[i * K + k]);
        for (int64_t j = 0; j < N; ++j) {
          std::vector<float> y(K);
          for (int64_t k = 0; k < K; ++k) y[k] = (float)decode_host(0, b[g * N * K + j * K + k]);
          float v = bw_dot(x, y, 0, K, [&](int64_t q) { return sa[i * kb + q]; },
                           [&](int64_t q) { return sb[(g * nb + j / 128) * kb + q]; });
          want[i * N + j] = hipfp8_f32_to_bf16(v);
        }
      }
      prev = o;
    }
    int rc = hipfp8_gg_ref_bw_2d3d(a.data(), 0, b.data(), 0, offs.data(), E, sa.data(), sb.data(),
                                   out.data(), M, N, K, 0, nullptr);
    if (rc) { printf("bw 2d3d: rc %d\n", rc); ++fails; } else check_bits("bw 2d3d M90 N200 K300", out, want);
  }
  for (int use_skip = 0; use_skip < 2; ++use_skip) {
    auto scale = [&]() { return std::ldexp(1.0f, (int)(rng() % 9) - 4) * (rng() % 2 ? 1.25f : 1.0f); };
    // 2D x 2D: groups sharing blocks, starting and ending inside them, an empty group, one
    // longer than two blocks, a clamped offset, tokens past the end; N and K off the tile.
    int64_t N = 70, Mt = 700, K = 45;
    std::vector<int32_t> offs = {100, 100, 130, 450, 640, 600};
    int G = (int)offs.size();
    int64_t mb = (Mt + 127) / 128;
    std::vector<uint8_t> a(N * Mt), b(Mt * K);
    for (auto& x : a) x = code(1);
    for (auto& x : b) x = code(0);
    std::vector<float> sa(N * mb), sb(K * mb);
    for (auto& x : sa) x = scale();
    for (auto& x : sb) x = scale();
    std::vector<int32_t> skip(G, 0);
    if (use_skip) skip[3] = 1;
    std::vector<hipfp8_bf16> out(G * N * K, hipfp8_bf16{0xFFFF}), want(G * N * K, hipfp8_bf16{0xFFFF});
    std::vector<std::vector<float>> xa(N, std::vector<float>(Mt)), yb(K, std::vector<float>(Mt));
    for (int64_t i = 0; i < N; ++i)
      for (int64_t t = 0; t < Mt; ++t) xa[i][t] = (float)decode_host(1, a[i * Mt + t]);
    for (int64_t j = 0; j < K; ++j)
      for (int64_t t = 0; t < Mt; ++t) yb[j][t] = (float)decode_host(0, b[j * Mt + t]);
    int64_t prev = 0;
    for (int g = 0; g < G; ++g) {
      int64_t o = std::min<int64_t>(std::max<int64_t>(offs[g], prev), Mt);
      if (!skip[g])
        for (int64_t i = 0; i < N; ++i)
          for (int64_t j = 0; j < K; ++j) {
            float v = bw_dot(xa[i], yb[j], prev, o, [&](int64_t q) { return sa[q * N + i]; },
                             [&](int64_t q) { return sb[q * K + j]; });
            want[g * N * K + i * K + j] = hipfp8_f32_to_bf16(v);
          }
      prev = o;
    }
    int rc = hipfp8_gg_ref_bw_2d2d(a.data(), 1, b.data(), 0, offs.data(), G, sa.data(), sb.data(),
                                   out.data(), N, Mt, K, use_skip ? skip.data() : nullptr, 0, nullptr);
    const char* name = use_skip ? "bw 2d2d N70 Mt700 K45 G6 skip" : "bw 2d2d N70 Mt700 K45 G6";
    if (rc) { printf("%s: rc %d\n", name, rc); ++fails; } else check_bits(name, out, want);
  }
  printf(fails ? "EMU FAILED (%d)\n" : "EMU OK\n", fails);
  return fails ? 1 : 0;
}
