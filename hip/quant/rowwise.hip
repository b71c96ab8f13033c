// rowwise.hip -- scale-and-cast where every scaling group is a contiguous run of one row:
//   rowwise_2d (and colwise_3d, which is rowwise_2d over E*N rows of length K),
//   per_group_rowwise (groups of columns given by END offsets).
//
// Fast path (K a multiple of the 16-byte vector, pointers aligned): one block owns one row at a
// time, keeps the whole row in registers (VPT 16-byte vectors per thread), reduces the amax in the
// block, then scales, encodes and stores from registers: each input byte is read once. Rows longer
// than the register budget re-read the rest (L2-resident, the block just read it).
// Slow path (odd K / misaligned): same structure, element at a time, second pass re-reads.
#include "common.h"

namespace hipfp8 {

// ------------------------------------------------------------------------------ rowwise_2d

template <class In, uint32_t F, int BLOCK, int VPT>
__global__ void __launch_bounds__(BLOCK)
rowwise_vec_kernel(const typename In::elem* __restrict__ x, uint8_t* __restrict__ out,
                   float* __restrict__ scales, int64_t M, int64_t K, int pow2) {
  constexpr int EPV = In::EPV;
  __shared__ uint32_t red[BLOCK / HIPFP8_WAVE];
  const int64_t nv = K / EPV;
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const uint4* xr = reinterpret_cast<const uint4*>(x + row * K);
    uint8_t* orow = out + row * K;
    uint4 v[VPT];
    uint32_t am = 0;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int64_t i = threadIdx.x + (int64_t)j * BLOCK;
      v[j] = i < nv ? HIPFP8_LDG(xr + i) : zero4();
      am = max(am, In::absmax(v[j]));
    }
    for (int64_t i = threadIdx.x + (int64_t)VPT * BLOCK; i < nv; i += BLOCK) am = max(am, In::absmax(HIPFP8_LDG(xr + i)));
    am = block_max<BLOCK>(am, red);
    const float s = amax_to_scale<F>(am, pow2 != 0);
    if (threadIdx.x == 0) scales[row] = s;
    if (amax_bits_finite(am)) {
#pragma unroll
      for (int j = 0; j < VPT; ++j) {
        const int64_t i = threadIdx.x + (int64_t)j * BLOCK;
        if (i < nv) store_codes<In>(orow + i * EPV, cast_vec<In, F, true>(v[j], s));
      }
      for (int64_t i = threadIdx.x + (int64_t)VPT * BLOCK; i < nv; i += BLOCK)
        store_codes<In>(orow + i * EPV, cast_vec<In, F, true>(HIPFP8_LDG(xr + i), s));
    } else {
#pragma unroll
      for (int j = 0; j < VPT; ++j) {
        const int64_t i = threadIdx.x + (int64_t)j * BLOCK;
        if (i < nv) store_codes<In>(orow + i * EPV, cast_vec<In, F, false>(v[j], s));
      }
      for (int64_t i = threadIdx.x + (int64_t)VPT * BLOCK; i < nv; i += BLOCK)
        store_codes<In>(orow + i * EPV, cast_vec<In, F, false>(HIPFP8_LDG(xr + i), s));
    }
  }
}

template <class In, uint32_t F, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
rowwise_scalar_kernel(const typename In::elem* __restrict__ x, uint8_t* __restrict__ out,
                      float* __restrict__ scales, int64_t M, int64_t K, int pow2) {
  __shared__ uint32_t red[BLOCK / HIPFP8_WAVE];
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const typename In::elem* xr = x + row * K;
    uint32_t am = 0;
    for (int64_t i = threadIdx.x; i < K; i += BLOCK) am = max(am, abs_bits(In::load1(xr, i)));
    am = block_max<BLOCK>(am, red);
    const float s = amax_to_scale<F>(am, pow2 != 0);
    if (threadIdx.x == 0) scales[row] = s;
    for (int64_t i = threadIdx.x; i < K; i += BLOCK) out[row * K + i] = (uint8_t)encode_sw<F>(In::load1(xr, i) * s);
  }
}

// Row-length buckets: BLOCK threads x VPT vectors cover the row from registers.
template <class In, uint32_t F>
static int launch_rowwise(const void* x, int64_t m, int64_t k, uint8_t* out, float* scales, int pow2,
                          hipStream_t st) {
  typedef typename In::elem E;
  const E* xp = static_cast<const E*>(x);
  const int64_t grid = m < 0x7FFFFFFF ? m : 0x7FFFFFFF;
  const bool vec = k % In::EPV == 0 && aligned16(x) && ((uintptr_t)out % (In::EPV) == 0);
  if (!vec) {
    rowwise_scalar_kernel<In, F, 256><<<(unsigned)grid, 256, 0, st>>>(xp, out, scales, m, k, pow2);
    HIPFP8_LAUNCH_CHECK();
  }
  const int64_t nv = k / In::EPV;
#define HIPFP8_ROWWISE_CFG(B, V) rowwise_vec_kernel<In, F, B, V><<<(unsigned)grid, B, 0, st>>>(xp, out, scales, m, k, pow2)
  if (nv <= 256) HIPFP8_ROWWISE_CFG(64, 4);
  else if (nv <= 512) HIPFP8_ROWWISE_CFG(128, 4);
  else if (nv <= 1024) HIPFP8_ROWWISE_CFG(256, 4);
  else if (nv <= 2048) HIPFP8_ROWWISE_CFG(256, 8);
  else if (nv <= 4096) HIPFP8_ROWWISE_CFG(512, 8);
  else HIPFP8_ROWWISE_CFG(1024, 8);
#undef HIPFP8_ROWWISE_CFG
  HIPFP8_LAUNCH_CHECK();
}

// ------------------------------------------------------------------------------ per_group_rowwise
// Groups are runs of columns [offs[g-1], offs[g]) shared by every row; scales[g*M + row].
// One block owns a row at a time (grid-stride, so the offsets and the vector -> group map are
// computed once per block): per-group amax through shared-memory atomics on the |x| bit
// patterns (NaN-propagating unsigned max), then scales, then cast from registers.
// Shared memory: offsets, amax and scale per group (12*G bytes, dynamic).

constexpr int kRowwiseMaxGroups = 4096;

template <class In, uint32_t F, int BLOCK, int VPT, bool VEC>
__global__ void __launch_bounds__(BLOCK)
per_group_rowwise_kernel(const typename In::elem* __restrict__ x, const int32_t* __restrict__ offs, int G,
                         uint8_t* __restrict__ out, float* __restrict__ scales, int64_t M, int64_t K, int pow2) {
  constexpr int EPV = VEC ? In::EPV : 1;
  extern __shared__ uint32_t dyn[];
  int32_t* s_offs = reinterpret_cast<int32_t*>(dyn);
  uint32_t* s_amax = dyn + G;
  float* s_scale = reinterpret_cast<float*>(dyn + 2 * G);
  load_clamped_offsets<BLOCK>(offs, G, K, s_offs);
  const int64_t kend = G > 0 ? s_offs[G - 1] : 0;  // columns past the last group are not written
  const int64_t nv = VEC ? (kend + EPV - 1) / EPV : kend;
  // Group of each of this thread's first VPT vectors; -1 if the vector straddles a boundary.
  int gid[VPT];
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int64_t i = threadIdx.x + (int64_t)j * BLOCK;
    const int64_t c0 = i * EPV;
    const int g = upper_bound_i32(s_offs, G, c0);
    gid[j] = (g < G && c0 + EPV <= s_offs[g]) ? g : -1;
  }
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const typename In::elem* xr = x + row * K;
    for (int g = threadIdx.x; g < G; g += BLOCK) s_amax[g] = 0;
    __syncthreads();
    uint4 v[VPT];
    // pass 1: amax per group
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int64_t i = threadIdx.x + (int64_t)j * BLOCK;
      if (i < nv) {
        if constexpr (VEC) {
          v[j] = HIPFP8_LDG(reinterpret_cast<const uint4*>(xr) + i);
          if (gid[j] >= 0) {
            atomicMax(&s_amax[gid[j]], In::absmax(v[j]));
          } else {
#pragma unroll
    #pragma unroll
        for (int e = 0; e < EPV; ++e) {
              const int64_t c = i * EPV + e;
              if (c < kend) atomicMax(&s_amax[upper_bound_i32(s_offs, G, c)], abs_bits(In::get(v[j], e)));
            }
          }
        } else {
          const float f = In::load1(xr, i);
          atomicMax(&s_amax[upper_bound_i32(s_offs, G, i)], abs_bits(f));
        }
      }
    }
    for (int64_t i = threadIdx.x + (int64_t)VPT * BLOCK; i < nv; i += BLOCK) {
      if constexpr (VEC) {
        const uint4 w = HIPFP8_LDG(reinterpret_cast<const uint4*>(xr) + i);
#pragma unroll
        for (int e = 0; e < EPV; ++e) {
          const int64_t c = i * EPV + e;
          if (c < kend) atomicMax(&s_amax[upper_bound_i32(s_offs, G, c)], abs_bits(In::get(w, e)));
        }
      } else {
        atomicMax(&s_amax[upper_bound_i32(s_offs, G, i)], abs_bits(In::load1(xr, i)));
      }
    }
    __syncthreads();
    for (int g = threadIdx.x; g < G; g += BLOCK) {
      const float s = amax_to_scale<F>(s_amax[g], pow2 != 0);
      s_scale[g] = s;
      scales[(int64_t)g * M + row] = s;
    }
    __syncthreads();
    // pass 2: cast
    uint8_t* orow = out + row * K;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int64_t i = threadIdx.x + (int64_t)j * BLOCK;
      if (i < nv) {
        if constexpr (VEC) {
          const int g = gid[j];
          if (g >= 0) {
            const float s = s_scale[g];
            const uint2 c = amax_bits_finite(s_amax[g]) ? cast_vec<In, F, true>(v[j], s) : cast_vec<In, F, false>(v[j], s);
            store_codes<In>(orow + i * EPV, c);
          } else {
#pragma unroll
    #pragma unroll
        for (int e = 0; e < EPV; ++e) {
              const int64_t c = i * EPV + e;
              if (c < kend) orow[c] = (uint8_t)encode_sw<F>(In::get(v[j], e) * s_scale[upper_bound_i32(s_offs, G, c)]);
            }
          }
        } else {
          orow[i] = (uint8_t)encode_sw<F>(In::load1(xr, i) * s_scale[upper_bound_i32(s_offs, G, i)]);
        }
      }
    }
    for (int64_t i = threadIdx.x + (int64_t)VPT * BLOCK; i < nv; i += BLOCK) {
      if constexpr (VEC) {
        const uint4 w = HIPFP8_LDG(reinterpret_cast<const uint4*>(xr) + i);
#pragma unroll
        for (int e = 0; e < EPV; ++e) {
          const int64_t c = i * EPV + e;
          if (c < kend) orow[c] = (uint8_t)encode_sw<F>(In::get(w, e) * s_scale[upper_bound_i32(s_offs, G, c)]);
        }
      } else {
        orow[i] = (uint8_t)encode_sw<F>(In::load1(xr, i) * s_scale[upper_bound_i32(s_offs, G, i)]);
      }
    }
    __syncthreads();  // s_amax is reset for the next row
  }
}

template <class In, uint32_t F>
static int launch_per_group_rowwise(const void* x, const int32_t* offs, int G, int64_t m, int64_t k, uint8_t* out,
                                    float* scales, int pow2, hipStream_t st) {
  if (G > kRowwiseMaxGroups) return kLaunchUnsupported;
  typedef typename In::elem E;
  const E* xp = static_cast<const E*>(x);
  const size_t smem = (size_t)G * 12;
  const int64_t cap = (int64_t)device_sm_count() * 4;
  const int64_t grid = m < cap ? m : cap;
  const bool vec = k % In::EPV == 0 && aligned16(x) && ((uintptr_t)out % In::EPV == 0);
  if (!vec) {
    per_group_rowwise_kernel<In, F, 256, 4, false><<<(unsigned)grid, 256, smem, st>>>(xp, offs, G, out, scales, m, k, pow2);
    HIPFP8_LAUNCH_CHECK();
  }
  const int64_t nv = k / In::EPV;
#define HIPFP8_PGR_CFG(B, V) per_group_rowwise_kernel<In, F, B, V, true><<<(unsigned)grid, B, smem, st>>>(xp, offs, G, out, scales, m, k, pow2)
  if (nv <= 256) HIPFP8_PGR_CFG(64, 4);
  else if (nv <= 512) HIPFP8_PGR_CFG(128, 4);
  else if (nv <= 1024) HIPFP8_PGR_CFG(256, 4);
  else if (nv <= 2048) HIPFP8_PGR_CFG(256, 8);
  else if (nv <= 4096) HIPFP8_PGR_CFG(512, 8);
  else HIPFP8_PGR_CFG(1024, 8);
#undef HIPFP8_PGR_CFG
  HIPFP8_LAUNCH_CHECK();
}

}  // namespace hipfp8

using namespace hipfp8;

// x (m, k) row-major bf16/f32 -> out[i*k + j], scales[i] (docs/KERNEL_ABI.md). Any alignment:
// misaligned views or k not a multiple of the 16-byte vector take the element-wise path.
HIPFP8_EXTERN int hipfp8_rowwise_2d_launch(const void* x, uint8_t* out, float* scales, int64_t m, int64_t k,
                                           int format, int pow2, int in_dtype, hipStream_t stream) noexcept {
  if (m < 0 || k < 0) return kLaunchBadShape;
  if (m == 0) return kLaunchOk;
  if (k == 0) return kLaunchBadShape;
  if (!x || !out || !scales) return kLaunchNull;
  const uint32_t fmt = (uint32_t)format;
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (launch_rowwise<Bf16In, FMT>(x, m, k, out, scales, pow2, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (launch_rowwise<F32In, FMT>(x, m, k, out, scales, pow2, stream))); }
  return kLaunchBadEnum;
}

// x (m, k) row-major; groups of columns by END offsets offs[groups] (device memory, clamped);
// out[i*k + j] for columns inside a group, scales[g*m + i]. k == 0: every group is empty and
// only the scales are written.
HIPFP8_EXTERN int hipfp8_per_group_rowwise_launch(const void* x, const int32_t* offs, uint8_t* out, float* scales,
                                                  int64_t m, int64_t k, int64_t groups, int format, int pow2,
                                                  int in_dtype, hipStream_t stream) noexcept {
  if (m < 0 || k < 0 || groups < 0) return kLaunchBadShape;
  if (m == 0 || groups == 0) return kLaunchOk;
  if (groups > kRowwiseMaxGroups) return kLaunchUnsupported;
  if (!offs || !scales || (k > 0 && (!x || !out))) return kLaunchNull;
  const uint32_t fmt = (uint32_t)format;
  const int G = (int)groups;
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (launch_per_group_rowwise<Bf16In, FMT>(x, offs, G, m, k, out, scales, pow2, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (launch_per_group_rowwise<F32In, FMT>(x, offs, G, m, k, out, scales, pow2, stream))); }
  return kLaunchBadEnum;
}
