// Host emulation of the few HIP/CUDA device features hip/grouped_gemm/reference.hip uses, so
// its kernels' indexing can be checked on a machine without a GPU (scripts/emu-gg-ref.sh).
// One block runs at a time, its threads as std::threads meeting at a std::barrier;
// `__shared__` becomes `static`, i.e. one copy shared by the block's threads.
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline std::barrier<>* emu_barrier = nullptr;

#define __global__
#define __device__
#define __host__
#define __launch_bounds__(x)
#define __shared__ static
#define __constant__
#define HIPFP8_EXTERN extern "C"
inline void __syncthreads() { emu_barrier->arrive_and_wait(); }
// Global-memory atomics (device-scope; relaxed is enough: the emulation joins every thread of
// a launch before the next launch starts).
inline uint32_t atomicMax(uint32_t* p, uint32_t v) {
  std::atomic_ref<uint32_t> r(*p);
  uint32_t old = r.load(std::memory_order_relaxed);
  while (old < v && !r.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
  return old;
}
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
// Separately rounded f32 multiply and add (ISO C++ mode: GCC contracts nothing).
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fadd_rn(float x, float y) { return x + y; }
// port.h's contraction-free f32 operations.
inline float hipfp8_add_rn(float a, float b) { return __fadd_rn(a, b); }
inline float hipfp8_mul_rn(float a, float b) { return __fmul_rn(a, b); }

struct hipfp8_bf16 { uint16_t bits; };
inline hipfp8_bf16 hipfp8_f32_to_bf16(float v) {
  uint32_t u; std::memcpy(&u, &v, 4);
  if (std::isnan(v)) return {uint16_t((u >> 16) | 0x40)};
  u += 0x7FFFu + ((u >> 16) & 1u);
  return {uint16_t(u >> 16)};
}
inline float bf16_to_f32(hipfp8_bf16 b) { uint32_t u = uint32_t(b.bits) << 16; float f; std::memcpy(&f, &u, 4); return f; }

template <class F>
void emu_launch(dim3 grid, unsigned threads, F&& body) {
  gridDim = grid;
  blockDim = dim3(threads);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::barrier<> bar(threads);
        emu_barrier = &bar;
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < threads; ++t)
          ts.emplace_back([&, t] {
            threadIdx = dim3(t);
            blockIdx = dim3(x, y, z);
            body();
          });
        for (auto& th : ts) th.join();
      }
}
typedef void* hipStream_t;
#define HIPFP8_RETURN_LAUNCH_STATUS() return 0
inline int hipPeekAtLastError() { return 0; }
