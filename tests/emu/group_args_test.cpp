// Host test of hip/grouped_gemm/group_args.h, the per-group argument arithmetic the CK and
// CUTLASS argument-building kernels run on the device. Built and run by
// tests/grouped_gemm_args.rs (cargo test) with the system C++ compiler.
//
// 1. Spot checks of clamping, offsets, strides, routing and the CK argument layout.
// 2. A whole grouped GEMM computed on the host FROM the per-group arguments (vendor groups
//    through CkArg's pointers and strides, the others as the reference kernel would) equals
//    the direct definition of docs/OPS.md, for both ops, over random offsets (with empty,
//    unaligned, decreasing and past-the-end ones) and odd shapes.
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

static double val(uint8_t x) { return (double)((int)x - 128) / 16.0; }  // any injective map

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
    CkArg c = ck_arg(gr, a.data(), b.data(), sa.data(), sb.data(), out_base);
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
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
  if (bad) {
    std::printf("FAIL sim_2d3d M%lld N%lld K%lld E%d: %d elements differ\n", (long long)M,
                (long long)N, (long long)K, E, bad);
    ++fails;
  }
}

// 2D x 2D through the per-group arguments: vendor groups via CkArg, the others as the
// reference kernel does (zeros when empty).
static void sim_2d2d(std::mt19937& rng, int64_t N, int64_t Mt, int64_t K, std::vector<int32_t> offs,
                     int64_t align_start, int64_t align_len) {
  const int G = (int)offs.size();
  std::vector<uint8_t> a(N * Mt), b(Mt * K);
  for (auto& x : a) x = rng() & 0xFF;
  for (auto& x : b) x = rng() & 0xFF;
  std::vector<float> sa(G * N), sb(G * K);
  for (auto& x : sa) x = (float)(rng() % 7 + 1);
  for (auto& x : sb) x = (float)(rng() % 5 + 1);
  std::vector<double> got(G * N * K, -1.0), want(G * N * K, -2.0);
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
  static uint16_t out_base[1];
  for (int g = 0; g < G; ++g) {
    int64_t lo, hi;
    clamped_range(offs.data(), g, Mt, &lo, &hi);
    Group gr = group_2d2d(g, lo, hi, N, Mt, K, align_start, align_len);
    if (gr.vendor_ok) {
      CkArg c = ck_arg(gr, a.data(), b.data(), sa.data(), sb.data(), out_base);
      const uint8_t* pa = (const uint8_t*)c.p_a;
      const uint8_t* pb = (const uint8_t*)c.p_b;
      const float* d0 = (const float*)c.p_ds[0];
      const float* d1 = (const float*)c.p_ds[1];
      const int64_t e0 = (const uint16_t*)c.p_e - out_base;
      // CK's tile loop skips a group with M, N or K == 0 (writes nothing).
      if (c.M == 0 || c.N == 0 || c.K == 0) continue;
      for (int64_t m = 0; m < c.M; ++m)
        for (int64_t n = 0; n < c.N; ++n) {
          double s = 0;
          for (int64_t k = 0; k < c.K; ++k)
            s += val(pa[m * c.stride_a + k]) * val(pb[n * c.stride_b + k]);
          got[e0 + m * c.stride_e + n] = s * d0[n] * d1[m];
        }
    } else {
      for (int64_t i = 0; i < gr.rows; ++i)
        for (int64_t j = 0; j < gr.cols; ++j) {
          double s = 0;
          for (int64_t t = 0; t < gr.red; ++t)
            s += val(a[gr.a_off + i * gr.lda + t]) * val(b[gr.b_off + j * gr.ldb + t]);
          got[gr.out_off + i * gr.ldo + j] =
              gr.red == 0 ? 0.0 : s * sa[gr.sa_off + i] * sb[gr.sb_off + j];
        }
    }
  }
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
  if (bad) {
    std::printf("FAIL sim_2d2d N%lld Mt%lld K%lld G%d: %d elements differ\n", (long long)N,
                (long long)Mt, (long long)K, G, bad);
    ++fails;
  }
}

int main() {
  spot_checks();
  std::mt19937 rng(7);
  sim_2d3d(rng, 130, 24, 32, {0, 1, 1, 66, 66, 129});
  sim_2d3d(rng, 200, 8, 16, {50, 40, 300, 10});
  sim_2d2d(rng, 9, 96, 16, {0, 16, 17, 48, 48, 90}, 16, 16);
  sim_2d2d(rng, 9, 96, 16, {0, 16, 17, 48, 48, 90}, 16, 1);
  sim_2d2d(rng, 5, 64, 8, {70, 10, 32}, 16, 16);
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
