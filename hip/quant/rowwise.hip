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
    HIPFP8_RETURN_LAUNCH_STATUS();
  }
  const int64_t nv = k / In::EPV;
#define HIPFP8_ROWWISE_CFG(B, V) rowwise_vec_kernel<In, F, B, V><<<(unsigned)grid, B, 0, st>>>(xp, out, scales, m, k, pow2)
  if (nv <= 256) HIPFP8_ROWWISE_CFG(64, 4);
  else if (nv <= 512) HIPFP8_ROWWISE_CFG(128, 4);
  else if (nv <= 1024) HIPFP8_ROWWISE_CFG(256, 4);
  else if (nv <= 2048) HIPFP8_ROWWISE_CFG(256, 8);
  // Longer rows (> 4096 vectors: K > 32768 bf16) keep the first 4096 vectors in registers and
  // re-read the rest (L2-resident): a 1024-thread variant needs more than the 128 VGPRs a
  // 1024-thread workgroup gets on CDNA and spills to scratch there.
  else HIPFP8_ROWWISE_CFG(512, 8);
#undef HIPFP8_ROWWISE_CFG
  HIPFP8_RETURN_LAUNCH_STATUS();
}

// ------------------------------------------------------------------------------ per_group_rowwise
// Groups are runs of columns [offs[g-1], offs[g]) shared by every row; scales[g*M + row].
// One block owns a row at a time (grid-stride: the offsets and the vector -> group map are
// computed once per block and kept in shared memory, not registers, so a 512-thread block
// holding a 64 KB row stays under 64 registers per thread and two blocks fit an SM).
// Per-group amax: when a whole wavefront's vector j lies in one group, a shuffle reduction and
// one shared atomicMax (same-address shared atomics serialise); otherwise one atomic per vector,
// or per element for the few vectors that straddle a group boundary. Then scales, then the cast
// from registers. Shared memory: offsets, amax, scale per group (12*G bytes) + the map
// (2 bytes per vector of the first VPT*BLOCK).

constexpr int kRowwiseMaxGroups = 2048;
constexpr int kMapStraddle = 0x7FFF;  // map entry: vector crosses a group end (or is past the last)
constexpr int kMapUniform = 0x4000;   // map flag: the whole wavefront's vector j is in this group

template <class In, uint32_t F, int BLOCK, int VPT, bool VEC>
__global__ void __launch_bounds__(BLOCK)
per_group_rowwise_kernel(const typename In::elem* __restrict__ x, const int32_t* __restrict__ offs, int G,
                         uint8_t* __restrict__ out, float* __restrict__ scales, int64_t M, int64_t K, int pow2) {
  constexpr int EPV = In::EPV;  // chunks of EPV elements; !VEC loads them element by element
  extern __shared__ uint32_t dyn[];
  int32_t* s_offs = reinterpret_cast<int32_t*>(dyn);
  uint32_t* s_amax = dyn + G;
  float* s_scale = reinterpret_cast<float*>(dyn + 2 * G);
  uint16_t* s_map = reinterpret_cast<uint16_t*>(dyn + 3 * G);
  load_clamped_offsets<BLOCK>(offs, G, K, s_offs);
  const int64_t kend = G > 0 ? s_offs[G - 1] : 0;  // columns past the last group are not written
  const int64_t nv = (kend + EPV - 1) / EPV;
  // The map of the register-held vectors (row-independent).
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int64_t i = threadIdx.x + (int64_t)j * BLOCK;
    const int64_t c0 = i * EPV;
    const int g = upper_bound_i32(s_offs, G, c0);
    int gv = (i < nv && g < G && c0 + EPV <= s_offs[g]) ? g : -1;
    int mn = gv, mx = gv;
#pragma unroll
    for (int o = HIPFP8_WAVE / 2; o > 0; o >>= 1) {
      const int a = HIPFP8_SHFL_XOR(mn, o), b = HIPFP8_SHFL_XOR(mx, o);
      mn = a < mn ? a : mn;
      mx = b > mx ? b : mx;
    }
    s_map[threadIdx.x + j * BLOCK] = (uint16_t)(gv < 0 ? kMapStraddle : (gv | (mn == mx ? kMapUniform : 0)));
  }
  const bool lane0 = threadIdx.x % HIPFP8_WAVE == 0;
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const typename In::elem* xr = x + row * K;
    for (int g = threadIdx.x; g < G; g += BLOCK) s_amax[g] = 0;
    __syncthreads();
    uint4 v[VPT];
    // pass 1: amax per group
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int64_t i = threadIdx.x + (int64_t)j * BLOCK;
      const int mp = s_map[threadIdx.x + j * BLOCK];
      v[j] = i < nv ? load_chunk<In, VEC>(xr, i, K) : zero4();
      if (mp != kMapStraddle && (mp & kMapUniform)) {  // uniform over the wavefront
        const uint32_t m = wave_max(In::absmax(v[j]));
        if (lane0) atomicMax(&s_amax[mp & 0x3FFF], m);
      } else if (i < nv && mp != kMapStraddle) {
        atomicMax(&s_amax[mp], In::absmax(v[j]));
      }
    }
    // Vectors that straddle a group end (a few per row) and those past the register-held ones:
    // element by element, re-read (L1-resident), in loops that are NOT unrolled so this rare
    // path does not inflate the register allocation of the common one.
    for (int j = 0; j < VPT; ++j) {
      const int64_t i = threadIdx.x + (int64_t)j * BLOCK;
      if (i < nv && s_map[threadIdx.x + j * BLOCK] == kMapStraddle)
        for (int64_t c = i * EPV; c < i * EPV + EPV && c < kend; ++c)
          atomicMax(&s_amax[upper_bound_i32(s_offs, G, c)], abs_bits(In::load1(xr, c)));
    }
    for (int64_t c = (threadIdx.x + (int64_t)VPT * BLOCK) * EPV; c < kend; c += (int64_t)BLOCK * EPV)
      for (int64_t cc = c; cc < c + EPV && cc < kend; ++cc)
        atomicMax(&s_amax[upper_bound_i32(s_offs, G, cc)], abs_bits(In::load1(xr, cc)));
    __syncthreads();
    for (int g = threadIdx.x; g < G; g += BLOCK) {
      const float sc = amax_to_scale<F>(s_amax[g], pow2 != 0);
      s_scale[g] = sc;
      scales[(int64_t)g * M + row] = sc;
    }
    __syncthreads();
    // pass 2: cast
    uint8_t* orow = out + row * K;
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int64_t i = threadIdx.x + (int64_t)j * BLOCK;
      const int mp = s_map[threadIdx.x + j * BLOCK];
      if (i < nv && mp != kMapStraddle) {
        const int g = mp & 0x3FFF;
        const float sc = s_scale[g];
        const uint2 c = amax_bits_finite(s_amax[g]) ? cast_vec<In, F, true>(v[j], sc) : cast_vec<In, F, false>(v[j], sc);
        store_chunk<In, VEC>(orow, i, K, c);
      }
    }
    for (int j = 0; j < VPT; ++j) {
      const int64_t i = threadIdx.x + (int64_t)j * BLOCK;
      if (i < nv && s_map[threadIdx.x + j * BLOCK] == kMapStraddle)
        for (int64_t c = i * EPV; c < i * EPV + EPV && c < kend; ++c)
          orow[c] = (uint8_t)encode_sw<F>(In::load1(xr, c) * s_scale[upper_bound_i32(s_offs, G, c)]);
    }
    for (int64_t c = (threadIdx.x + (int64_t)VPT * BLOCK) * EPV; c < kend; c += (int64_t)BLOCK * EPV)
      for (int64_t cc = c; cc < c + EPV && cc < kend; ++cc)
        orow[cc] = (uint8_t)encode_sw<F>(In::load1(xr, cc) * s_scale[upper_bound_i32(s_offs, G, cc)]);
    __syncthreads();  // s_amax is reset for the next row
  }
}

template <class In, uint32_t F>
static int launch_per_group_rowwise(const void* x, const int32_t* offs, int G, int64_t m, int64_t k, uint8_t* out,
                                    float* scales, int pow2, hipStream_t st) {
  if (G > kRowwiseMaxGroups) return kLaunchUnsupported;
  typedef typename In::elem E;
  const E* xp = static_cast<const E*>(x);
  const int64_t cap = (int64_t)device_sm_count() * 8;
  const int64_t grid = m < cap ? m : cap;
  const bool vec = k % In::EPV == 0 && aligned16(x) && ((uintptr_t)out % In::EPV == 0);
  // dynamic shared memory: 12 bytes per group + 2 bytes per register-held vector (4-aligned)
#define HIPFP8_PGR_CFG(B, V, VECF)                                                                              \
  do {                                                                                                          \
    const size_t smem = (size_t)G * 12 + (((size_t)(B) * (V) * 2 + 3) & ~(size_t)3);                            \
    per_group_rowwise_kernel<In, F, B, V, VECF><<<(unsigned)grid, B, smem, st>>>(xp, offs, G, out, scales, m, k, pow2); \
  } while (0)
  if (!vec) {
    HIPFP8_PGR_CFG(256, 4, false);
    HIPFP8_RETURN_LAUNCH_STATUS();
  }
  const int64_t nv = k / In::EPV;
  if (nv <= 512) HIPFP8_PGR_CFG(128, 4, true);
  else if (nv <= 1024) HIPFP8_PGR_CFG(256, 4, true);
  else if (nv <= 2048) HIPFP8_PGR_CFG(256, 8, true);
  else HIPFP8_PGR_CFG(512, 8, true);
#undef HIPFP8_PGR_CFG
  HIPFP8_RETURN_LAUNCH_STATUS();
}

// ------------------------------------------------------------------------------ rowwise_2d_padded
// Token groups (END offsets along M) padded to multiples of 16 rows, fused with the rowwise
// cast: output row r maps to (group, local row) through the padded offsets (computed per block
// in shared memory); data rows are cast like rowwise_2d, padding rows get zero codes and the
// scale of an all-zero row. padded_offs is written by block 0.

template <class In, uint32_t F, int BLOCK, int VPT, bool VEC>
__device__ inline void cast_one_row(const typename In::elem* xr, uint8_t* orow, float* scale_out, int64_t K, int pow2,
                                    uint32_t* red) {
  constexpr int EPV = In::EPV;
  const int64_t nv = (K + EPV - 1) / EPV;
  uint4 v[VPT];
  uint32_t am = 0;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int64_t i = threadIdx.x + (int64_t)j * BLOCK;
    v[j] = i < nv ? load_chunk<In, VEC>(xr, i, K) : zero4();
    am = max(am, In::absmax(v[j]));
  }
  for (int64_t i = threadIdx.x + (int64_t)VPT * BLOCK; i < nv; i += BLOCK) am = max(am, In::absmax(load_chunk<In, VEC>(xr, i, K)));
  am = block_max<BLOCK>(am, red);
  const float s = amax_to_scale<F>(am, pow2 != 0);
  if (threadIdx.x == 0) *scale_out = s;
  const bool fin = amax_bits_finite(am);
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int64_t i = threadIdx.x + (int64_t)j * BLOCK;
    if (i < nv) store_chunk<In, VEC>(orow, i, K, fin ? cast_vec<In, F, true>(v[j], s) : cast_vec<In, F, false>(v[j], s));
  }
  for (int64_t i = threadIdx.x + (int64_t)VPT * BLOCK; i < nv; i += BLOCK) {
    const uint4 w = load_chunk<In, VEC>(xr, i, K);
    store_chunk<In, VEC>(orow, i, K, fin ? cast_vec<In, F, true>(w, s) : cast_vec<In, F, false>(w, s));
  }
}

template <class In, uint32_t F, int BLOCK, int VPT, bool VEC>
__global__ void __launch_bounds__(BLOCK)
rowwise_padded_kernel(const typename In::elem* __restrict__ x, const int32_t* __restrict__ offs, int G,
                      uint8_t* __restrict__ out, float* __restrict__ scales, int32_t* __restrict__ padded_offs,
                      int64_t M, int64_t K, int pow2) {
  __shared__ uint32_t red[BLOCK / HIPFP8_WAVE];
  extern __shared__ int32_t pdyn[];
  int32_t* s_offs = pdyn;
  int32_t* s_pend = pdyn + G;
  load_clamped_offsets<BLOCK>(offs, G, M, s_offs);
  if (threadIdx.x == 0) {
    int64_t acc = 0;
    for (int g = 0; g < G; ++g) {
      const int64_t n = s_offs[g] - (g ? s_offs[g - 1] : 0);
      acc += (n + 15) / 16 * 16;
      s_pend[g] = (int32_t)acc;
    }
  }
  __syncthreads();
  if (blockIdx.x == 0)
    for (int g = threadIdx.x; g < G; g += BLOCK) padded_offs[g] = s_pend[g];
  const int64_t total = G > 0 ? s_pend[G - 1] : 0;
  constexpr int EPV = In::EPV;
  const int64_t nv = (K + EPV - 1) / EPV;
  for (int64_t r = blockIdx.x; r < total; r += gridDim.x) {
    const int g = upper_bound_i32(s_pend, G, r);
    const int64_t pstart = g ? s_pend[g - 1] : 0;
    const int64_t gs = g ? s_offs[g - 1] : 0;
    const int64_t n = s_offs[g] - gs;
    const int64_t local = r - pstart;
    if (local < n) {
      cast_one_row<In, F, BLOCK, VPT, VEC>(x + (gs + local) * K, out + r * K, scales + r, K, pow2, red);
    } else {
      if (threadIdx.x == 0) scales[r] = amax_to_scale<F>(0u, pow2 != 0);
      for (int64_t i = threadIdx.x; i < nv; i += BLOCK) store_chunk<In, VEC>(out + r * K, i, K, make_uint2(0, 0));
    }
  }
}

template <class In, uint32_t F>
static int launch_rowwise_padded(const void* x, const int32_t* offs, int G, int64_t m, int64_t k, uint8_t* out,
                                 float* scales, int32_t* padded_offs, int pow2, hipStream_t st) {
  typedef typename In::elem E;
  const E* xp = static_cast<const E*>(x);
  const size_t smem = (size_t)G * 8;
  const int64_t rows_bound = m + 15 * (int64_t)G;
  const int64_t cap = (int64_t)device_sm_count() * 16;
  int64_t grid = rows_bound < cap ? rows_bound : cap;
  if (grid < 1) grid = 1;
  const bool vec = k % In::EPV == 0 && aligned16(x) && ((uintptr_t)out % In::EPV == 0);
  const int64_t nv = (k + In::EPV - 1) / In::EPV;
#define HIPFP8_PAD_CFG(B, V)                                                                                      \
  do {                                                                                                            \
    if (vec) rowwise_padded_kernel<In, F, B, V, true><<<(unsigned)grid, B, smem, st>>>(xp, offs, G, out, scales, padded_offs, m, k, pow2); \
    else rowwise_padded_kernel<In, F, B, V, false><<<(unsigned)grid, B, smem, st>>>(xp, offs, G, out, scales, padded_offs, m, k, pow2); \
  } while (0)
  if (nv <= 512) HIPFP8_PAD_CFG(128, 4);
  else if (nv <= 1024) HIPFP8_PAD_CFG(256, 4);
  else if (nv <= 2048) HIPFP8_PAD_CFG(256, 8);
  else HIPFP8_PAD_CFG(512, 8);
#undef HIPFP8_PAD_CFG
  HIPFP8_RETURN_LAUNCH_STATUS();
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

// Token groups padded to multiples of 16 rows, fused with the rowwise cast (see
// Context::rowwise_2d_padded). out (m_cap, k), scales[m_cap], padded_offs[groups]; the caller
// guarantees m_cap >= m + 15*groups.
HIPFP8_EXTERN int hipfp8_rowwise_2d_padded_launch(const void* x, const int32_t* offs, uint8_t* out, float* scales,
                                                  int32_t* padded_offs, int64_t m, int64_t k, int64_t groups,
                                                  int format, int pow2, int in_dtype, hipStream_t stream) noexcept {
  if (m < 0 || k <= 0 || groups < 0) return kLaunchBadShape;
  if (groups == 0) return kLaunchOk;
  if (groups > kRowwiseMaxGroups) return kLaunchUnsupported;
  if (!offs || !out || !scales || !padded_offs || (m > 0 && !x)) return kLaunchNull;
  const uint32_t fmt = (uint32_t)format;
  const int G = (int)groups;
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (launch_rowwise_padded<Bf16In, FMT>(x, offs, G, m, k, out, scales, padded_offs, pow2, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (launch_rowwise_padded<F32In, FMT>(x, offs, G, m, k, out, scales, padded_offs, pow2, stream))); }
  return kLaunchBadEnum;
}
