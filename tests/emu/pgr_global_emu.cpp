// per_group_rowwise's many-groups kernel (hip/quant/rowwise.hip, between the `hipfp8-emu-begin
// pgr_global` markers) on the host: tests/emu/quant_port_emu.h runs its blocks as std::threads
// with emulated wavefront shuffles, over clamped offsets made by the group-tables kernel
// (itself emulated), against a plain loop with the same codec functions (fp8_codec.h's
// encode_sw and amax_to_scale, the rule every backend follows). Checks the (row, group) task
// mapping, the wavefront reduction, the column ranges of clamped bad offsets and that nothing
// outside the groups is written. Built and run by tests/group_tables_emu.rs.
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "quant/common.h"
#include "group_tables.inc"
#include "pgr_global.inc"

using namespace hipfp8;

template <uint32_t F>
int run_case(std::mt19937_64& rng, int64_t M, int64_t K, int G, bool bad, bool pow2) {
  std::vector<float> x(M * K);
  for (auto& v : x) {
    const uint32_t r = (uint32_t)rng();
    v = (r % 53 == 0) ? NAN : (r % 59 == 0) ? INFINITY : ((int32_t)(r >> 8) % 20000) * 0.0173f;
  }
  std::vector<int32_t> offs(G), cl(G);
  int32_t prev = 0;
  for (int g = 0; g < G; ++g) {
    int32_t v = prev + (int32_t)(rng() % 3);
    if (v > K) v = (int32_t)K;
    if (bad && rng() % 5 == 0) v = (int32_t)(rng() % (3 * K + 1)) - (int32_t)K;
    offs[g] = v;
    prev = v < 0 ? prev : v;
  }
  emu_launch(dim3(1), kTablesBlock, [&] { group_tables_kernel(offs.data(), G, K, cl.data(), nullptr); });
  std::vector<uint8_t> out(M * K, 0xA5), want_out(M * K, 0xA5);
  std::vector<float> sc(G * M, -7.0f), want_sc(G * M, -7.0f);
  emu_launch_waves(3, kPgrGlobalBlock, [&] {
    per_group_rowwise_global_kernel<F32In, F>(x.data(), cl.data(), G, out.data(), sc.data(), M, K, pow2);
  });
  for (int64_t r = 0; r < M; ++r)
    for (int g = 0; g < G; ++g) {
      const int64_t cs = g ? cl[g - 1] : 0, ce = cl[g];
      uint32_t am = 0;
      for (int64_t c = cs; c < ce; ++c) am = max(am, abs_bits(x[r * K + c]));
      const float s = amax_to_scale<F>(am, pow2);
      want_sc[(int64_t)g * M + r] = s;
      for (int64_t c = cs; c < ce; ++c) want_out[r * K + c] = (uint8_t)encode_sw<F>(x[r * K + c] * s);
    }
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i] != want_out[i]) {
      std::printf("M=%lld K=%lld G=%d: out[%zu] = %u, want %u\n", (long long)M, (long long)K, G, i, out[i], want_out[i]);
      return 1;
    }
  for (size_t i = 0; i < sc.size(); ++i)
    if (f2u(sc[i]) != f2u(want_sc[i])) {
      std::printf("M=%lld K=%lld G=%d: scales[%zu] = %g, want %g\n", (long long)M, (long long)K, G, i, sc[i], want_sc[i]);
      return 1;
    }
  return 0;
}

// argv[1] = "full": 16 cases (1, 3, 2049, 4097 groups; minutes: every shuffle is a barrier of
// 32 std::threads); default: 3 cases, what CI runs.
int main(int argc, char** argv) {
  std::mt19937_64 rng(17);
  int cases = 0;
  if (argc > 1 && std::string(argv[1]) == "full") {
    for (int G : {1, 3, 2049, 4097}) {
      for (int bad = 0; bad < 2; ++bad) {
        const int64_t M = 1 + (int64_t)(rng() % 3), K = G + G / 2 + 40;
        if (run_case<kE4M3Fn>(rng, M, K, G, bad, bad) || run_case<kE5M2FnUz>(rng, M, K, G, !bad, !bad)) return 1;
        cases += 2;
      }
    }
  } else {
    if (run_case<kE5M2FnUz>(rng, 2, 20, 5, true, false) || run_case<kE4M3Fn>(rng, 3, 9, 4, false, true) ||
        run_case<kE4M3Fn>(rng, 1, 2100, 2049, true, true))
      return 1;
    cases = 3;
  }
  std::printf("per_group_rowwise_global_kernel: %d cases exact (valid and bad offsets)\n", cases);
  return 0;
}
