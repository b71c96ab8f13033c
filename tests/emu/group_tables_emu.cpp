// The group-tables kernel of hip/quant/common.hip (clamped and padded END offsets, computed
// once for launches of more than 2048 groups), run on the host through tests/emu/port_emu.h
// against a plain loop, for group counts around the block size and up to 65536, with valid
// and bad (negative, decreasing, past the extent) offsets. Built and run by
// tests/group_tables_emu.rs; the kernel's text is pasted in as group_tables.inc.
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "port.h"
#include "group_tables.inc"

int main() {
  std::mt19937_64 rng(17);
  int cases = 0;
  for (int64_t G : {1, 2, 5, 1023, 1024, 1025, 2047, 2049, 4097, 65536}) {
    for (int bad = 0; bad < 2; ++bad) {
      const int64_t extent = G + G / 2 + 7;
      std::vector<int32_t> offs(G), cl(G), pe(G), want_cl(G), want_pe(G);
      int32_t prev = 0;
      for (int64_t g = 0; g < G; ++g) {
        int32_t v = prev + (int32_t)(rng() % 3);
        if (v > extent) v = (int32_t)extent;
        if (bad && rng() % 5 == 0) v = (int32_t)(rng() % (3 * extent)) - (int32_t)extent;
        offs[g] = v;
        prev = v < 0 ? prev : v;
      }
      // the rule: prefix max, clamped to [0, extent]; padded sizes rounded up to 16, summed
      int64_t run = 0, sum = 0;
      for (int64_t g = 0; g < G; ++g) {
        run = offs[g] > run ? offs[g] : run;
        want_cl[g] = (int32_t)(run > extent ? extent : run);
        const int64_t n = want_cl[g] - (g ? want_cl[g - 1] : 0);
        sum += (n + 15) / 16 * 16;
        want_pe[g] = (int32_t)sum;
      }
      for (int with_pend = 0; with_pend < 2; ++with_pend) {
        std::fill(cl.begin(), cl.end(), -7);
        std::fill(pe.begin(), pe.end(), -7);
        int32_t* pp = with_pend ? pe.data() : nullptr;
        emu_launch(dim3(1), hipfp8::kTablesBlock, [&] { hipfp8::group_tables_kernel(offs.data(), G, extent, cl.data(), pp); });
        for (int64_t g = 0; g < G; ++g) {
          if (cl[g] != want_cl[g] || (with_pend && pe[g] != want_pe[g]) || (!with_pend && pe[g] != -7)) {
            std::printf("G=%lld bad=%d pend=%d: group %lld: clamped %d (want %d) padded %d (want %d)\n", (long long)G, bad,
                        with_pend, (long long)g, cl[g], want_cl[g], pe[g], with_pend ? want_pe[g] : -7);
            return 1;
          }
        }
        ++cases;
      }
    }
  }
  std::printf("group_tables_kernel: %d cases exact (G = 1 .. 65536, valid and bad offsets)\n", cases);
  return 0;
}
