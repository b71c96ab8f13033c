// Host emulation of what hip/fp8_codec.h and hip/quant/common.h need from hip/port.h, for the
// per_group_rowwise many-groups kernel (tests/group_tables_emu.rs): tests/emu/port_emu.h's
// threads-as-std::threads blocks, plus 16-byte vector types and wavefront shuffles (lanes of
// one wavefront meet at a barrier of their own; the kernels only shuffle where the whole
// wavefront takes part).
#pragma once
#include <algorithm>
#include "port_emu_base.h"

using std::max;
using std::min;
#define HIPFP8_WAVE 32
#define HIPFP8_LDG(p) (*(p))
#define HIPFP8_LAUNCH_BOUNDS_MIN_BLOCKS(a, b)
#define __forceinline__ inline
#define __restrict__ __restrict
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
struct uint4 { uint32_t x, y, z, w; };
struct uint2 { uint32_t x, y; };
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
inline uint2 make_uint2(uint32_t a, uint32_t b) { return {a, b}; }

inline std::vector<std::barrier<>*> emu_wave_barrier;
inline uint64_t emu_wave_slot[4096];
template <class T>
T emu_shfl(T v, unsigned src) {
  const unsigned t = threadIdx.x, base = t - t % HIPFP8_WAVE;
  std::barrier<>* b = emu_wave_barrier[t / HIPFP8_WAVE];
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof v);
  emu_wave_slot[t] = u;
  b->arrive_and_wait();
  u = emu_wave_slot[base + src % HIPFP8_WAVE];
  b->arrive_and_wait();
  T r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}
#define HIPFP8_SHFL_XOR(v, o) emu_shfl((v), (threadIdx.x % HIPFP8_WAVE) ^ (unsigned)(o))
#define HIPFP8_SHFL(v, s) emu_shfl((v), (unsigned)(s))

// Launch a grid of blocks (x, then y) with per-wavefront barriers as well as the block barrier.
template <class F>
void emu_launch_waves(dim3 grid, unsigned threads, F&& body) {
  gridDim = grid;
  blockDim = dim3(threads);
  for (unsigned y = 0; y < grid.y; ++y)
    for (unsigned x = 0; x < grid.x; ++x) {
      std::barrier<> bar(threads);
      emu_barrier = &bar;
      std::vector<std::unique_ptr<std::barrier<>>> waves;
      emu_wave_barrier.clear();
      for (unsigned w = 0; w < threads / HIPFP8_WAVE; ++w) {
        waves.emplace_back(new std::barrier<>(HIPFP8_WAVE));
        emu_wave_barrier.push_back(waves.back().get());
      }
      std::vector<std::thread> ts;
      for (unsigned t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
          threadIdx = dim3(t);
          blockIdx = dim3(x, y);
          body();
        });
      for (auto& th : ts) th.join();
    }
}
