// scale_host_check.cu -- exhaustive host check of hip/fp8_codec.h amax_to_scale_nodiv<F> against
// amax_to_scale<F> (the f64 division), for every u32 amax bit pattern, 4 formats, pow2 off and on.
//   source /opt/cudatc/env.sh && nvcc -O2 -std=c++17 -I hip -x cu bench/scale_host_check.cu -o /tmp/sc && /tmp/sc
// (host code only, IEEE f64 fma: the device computes the same bits). Result: see bench/NOTES.md.
#include "fp8_codec.h"
#include <atomic>
#include <cstdio>
#include <thread>
using namespace hipfp8;
template <uint32_t F> void run() {
  std::atomic<uint64_t> bad{0};
  auto work = [&](uint64_t lo, uint64_t hi) {
    uint64_t b = 0;
    for (uint64_t u = lo; u < hi; u++) {
      for (int p = 0; p < 2; ++p) {
        const uint32_t got = f2u(amax_to_scale_nodiv<F>((uint32_t)u, p != 0));
        const uint32_t want = f2u(amax_to_scale<F>((uint32_t)u, p != 0));
        if (got != want) {
          if (b < 3) printf("F%u amax=%08x pow2=%d got %08x want %08x\n", F, (uint32_t)u, p, got, want);
          b++;
        }
      }
    }
    bad += b;
  };
  const uint64_t N = 1ull << 32;
  std::thread t1(work, 0, N / 2), t2(work, N / 2, N);
  t1.join();
  t2.join();
  printf("format %u: %llu mismatches over all 2^32 amax patterns x pow2 {0,1}\n", F, (unsigned long long)bad.load());
}
int main() {
  run<0>();
  run<1>();
  run<2>();
  run<3>();
}
