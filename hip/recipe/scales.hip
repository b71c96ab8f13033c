// scales.hip -- the MoE recipe's two scale kernels (prototypes and contracts: launchers.h):
//   reciprocal  the grouped GEMMs' dequant scales: out = 1 / in, the IEEE f32 quotient
//               (`dequant_scale` of fp8_codec.h; host: src/reference/recipe.rs);
//   halves      a (groups, 2*half) f32 table split into its two column halves, each
//               (groups, half) row-major (host: src/recipe.rs, split_halves).
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

__global__ void hipfp8_scale_halves_kernel(const float* in, float* out, int64_t groups, int64_t half) {
  const int64_t n = 2 * groups * half;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < n; o += stride) {
    const int64_t h = o / (groups * half), r = o % (groups * half);
    const int64_t g = r / half, j = r % half;
    out[o] = in[g * 2 * half + h * half + j];
  }
}

HIPFP8_EXTERN int hipfp8_scale_halves_launch(const float* in, float* out, int64_t groups, int64_t half,
                                             hipStream_t stream) noexcept {
  if (groups < 0 || half < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (groups == 0 || half == 0) return 0;
  if (!in || !out) return HIPFP8_KSTATUS_NULL_POINTER;
  const int threads = 256;
  int64_t blocks = (2 * groups * half + threads - 1) / threads;
  if (blocks > 4096) blocks = 4096;  // grid-stride loop covers the rest
  hipfp8_scale_halves_kernel<<<(unsigned)blocks, threads, 0, stream>>>(in, out, groups, half);
  HIPFP8_RETURN_LAUNCH_STATUS();
}
