// selftest.hip -- the smallest kernels that prove the whole chain (compiler -> static library
// -> Rust declarations -> launch on a stream -> results back) on a real device, independent
// of any quantization kernel. Used by tests/gpu_runtime.rs.
#include "port.h"
#include "kernel_abi.h"
#include "runtime.h"

// A 32-bit integer mix (the murmur3 finaliser): every output depends on every bit of the
// index and seed, so a wrong index, a skipped element or a stale buffer cannot pass.
// The Rust test computes the same function (device::selftest_pattern).
static __device__ __forceinline__ uint32_t hipfp8_mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  return x;
}

__global__ void hipfp8_selftest_fill_kernel(const uint32_t* __restrict__ in, uint32_t* __restrict__ out, int64_t n,
                                            uint32_t seed) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    uint32_t v = hipfp8_mix32((uint32_t)i * 0x9E3779B9u + seed);
    out[i] = (in ? in[i] : 0u) + v;
  }
}

// out[i] = (in ? in[i] : 0) + mix32(i * 0x9E3779B9 + seed), wrapping, for i in [0, n).
HIPFP8_EXTERN int hipfp8_selftest_fill_launch(const uint32_t* in, uint32_t* out, int64_t n, uint32_t seed,
                                              hipStream_t stream) noexcept {
  if (n < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (n == 0) return 0;
  if (!out) return HIPFP8_KSTATUS_NULL_POINTER;
  const int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 8192) blocks = 8192;  // grid-stride loop covers the rest
  hipfp8_selftest_fill_kernel<<<(unsigned)blocks, threads, 0, stream>>>(in, out, n, seed);
  HIPFP8_RETURN_LAUNCH_STATUS();
}

__global__ void hipfp8_selftest_wave_kernel(int32_t* out) {
  if (threadIdx.x == 0) {
    out[0] = HIPFP8_WAVE;  // what port.h told the kernels at compile time
    out[1] = warpSize;     // what the hardware says
  }
}

// out[0] = HIPFP8_WAVE as compiled, out[1] = the device's warpSize: the test fails if
// port.h's compile-time wavefront size disagrees with the device.
HIPFP8_EXTERN int hipfp8_selftest_wave_launch(int32_t* out, hipStream_t stream) noexcept {
  if (!out) return HIPFP8_KSTATUS_NULL_POINTER;
  hipfp8_selftest_wave_kernel<<<1, 64, 0, stream>>>(out);
  HIPFP8_RETURN_LAUNCH_STATUS();
}
