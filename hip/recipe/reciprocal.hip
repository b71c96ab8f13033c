// reciprocal.hip -- the dequant scales of the MoE recipe's grouped GEMMs: out = 1 / in, the
// IEEE f32 quotient (`dequant_scale` of fp8_codec.h; host: src/reference/recipe.rs).
#include "../port.h"
#include "../fp8_codec.h"
#include "../kernel_abi.h"
#include "launchers.h"

__global__ void hipfp8_scale_reciprocal_kernel(const float* in, float* out, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = hipfp8::dequant_scale(in[i]);
}

HIPFP8_EXTERN int hipfp8_scale_reciprocal_launch(const float* in, float* out, int64_t n,
                                                 hipStream_t stream) noexcept {
  if (n < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (n == 0) return 0;
  if (!in || !out) return HIPFP8_KSTATUS_NULL_POINTER;
  const int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 4096) blocks = 4096;  // grid-stride loop covers the rest
  hipfp8_scale_reciprocal_kernel<<<(unsigned)blocks, threads, 0, stream>>>(in, out, n);
  HIPFP8_RETURN_LAUNCH_STATUS();
}
