// blockwise_mxfp8.hip -- fixed-size scaling blocks:
//   blockwise_1x128   (DeepSeek-V3 activations): 128 consecutive elements of a row, f32 scales
//   mxfp8_dim0        32 consecutive elements of a row, E8M0 scales (FLOOR / RCEIL)
//   blockwise_128x128 (DeepSeek-V3 weights): 128x128 tiles, f32 scales
//   mxfp8_dim1        32 consecutive rows of one column, transposed output, E8M0 scales
//
// Row blocks: a block of BS elements is BS/EPV 16-byte chunks held by BS/EPV consecutive lanes
// (16 or 4 for bf16, 32 or 8 for f32: always a divisor of the wavefront), reduced with xor
// shuffles, no shared memory, no barriers; the grid strides over all (row, block) pairs, two
// per thread in flight. Odd K / unaligned views use element loads with the same arithmetic.
#include "common.h"
#include "launchers.h"
#include "policy.h"

namespace hipfp8 {

enum : int { kScaleF32 = 0, kScaleE8M0 = 1 };

template <int MODE, uint32_t F>
__device__ inline float block_scale(uint32_t am, int param, float* s_out, uint8_t* e8_out) {
  if constexpr (MODE == kScaleF32) {
    const float s = amax_to_scale<F>(am, param != 0);
    if (s_out) *s_out = s;
    return s;
  } else {
    uint32_t code;
    float mult;
    mx_scale<F>(am, param, code, mult);
    if (e8_out) *e8_out = (uint8_t)code;
    return mult;
  }
}

// Row blocks of BS elements. param: pow2 (f32 scales) or rceil (E8M0). One thread block per
// row (grid-stride): chunk i of the row sits in thread i % 256 of pass i / (256 * UNITS), so the
// BS / EPV chunks of a scaling block are consecutive lanes and no index needs a division.
template <class In, uint32_t F, int BS, int MODE, bool VEC>
__global__ void __launch_bounds__(256)
row_blocks_kernel(const typename In::elem* __restrict__ x, uint8_t* __restrict__ out, float* __restrict__ fscales,
                  uint8_t* __restrict__ escales, int64_t M, int64_t K, int param) {
  constexpr int EPV = In::EPV;
  constexpr int L = BS / EPV;  // lanes per scaling block
  constexpr int BLOCK = 256;
  constexpr int UNITS = 4;     // chunks per thread in flight
  static_assert(HIPFP8_WAVE % L == 0 && BLOCK % L == 0, "a scaling block must stay inside one wavefront");
  const int64_t nb = (K + BS - 1) / BS;
  const int64_t nchunk = (K + EPV - 1) / EPV;
  const int64_t span = nb * L;  // chunk slots, the last block padded to L lanes
  const int lane = threadIdx.x % L;
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const typename In::elem* xr = x + row * K;
    uint8_t* orow = out + row * K;
    for (int64_t i0 = 0; i0 < span; i0 += (int64_t)BLOCK * UNITS) {  // bound uniform over the block
      uint4 v[UNITS];
      uint32_t am[UNITS];
#pragma unroll
      for (int u = 0; u < UNITS; ++u) {
        const int64_t ci = i0 + u * BLOCK + threadIdx.x;
        v[u] = ci < nchunk ? load_chunk<In, VEC>(xr, ci, K) : zero4();
        am[u] = In::absmax(v[u]);
      }
#pragma unroll
      for (int u = 0; u < UNITS; ++u) {
#pragma unroll
        for (int o = 1; o < L; o <<= 1) am[u] = max(am[u], (uint32_t)HIPFP8_SHFL_XOR(am[u], o));
        const int64_t ci = i0 + u * BLOCK + threadIdx.x;
        if (ci >= span) continue;
        const int64_t b = ci / L;
        const bool writer = lane == 0;
        const float s = block_scale<MODE, F>(am[u], param, writer && fscales ? fscales + row * nb + b : nullptr,
                                             writer && escales ? escales + row * nb + b : nullptr);
        if (ci < nchunk) {
          const uint2 c = amax_bits_finite(am[u]) ? cast_vec<In, F, true>(v[u], s) : cast_vec<In, F, false>(v[u], s);
          store_chunk<In, VEC>(orow, ci, K, c);
        }
      }
    }
  }
}

// 128x128 tiles: one block per tile, the tile in registers (bf16: 8 chunks per thread).
template <class In, uint32_t F, bool VEC>
__global__ void __launch_bounds__(256)
tile128_kernel(const typename In::elem* __restrict__ x, uint8_t* __restrict__ out, float* __restrict__ scales,
               int64_t M, int64_t K, int pow2) {
  constexpr int EPV = In::EPV;
  constexpr int CPR = 128 / EPV;          // chunks per tile row
  constexpr int RPP = 256 / CPR;          // rows per pass
  constexpr int PASSES = 128 / RPP;
  __shared__ uint32_t red[256 / HIPFP8_WAVE];
  const int64_t nbk = (K + 127) / 128;
  const int64_t tr = blockIdx.y, tc = blockIdx.x;
  const int cc = threadIdx.x % CPR, rr = threadIdx.x / CPR;
  const int64_t chunk = tc * CPR + cc;
  const int64_t nchunk = (K + EPV - 1) / EPV;
  uint4 v[PASSES];
  uint32_t am = 0;
#pragma unroll
  for (int p = 0; p < PASSES; ++p) {
    const int64_t r = tr * 128 + p * RPP + rr;
    v[p] = (r < M && chunk < nchunk) ? load_chunk<In, VEC>(x + r * K, chunk, K) : zero4();
    am = max(am, In::absmax(v[p]));
  }
  am = block_max<256>(am, red);
  const float s = amax_to_scale<F>(am, pow2 != 0);
  if (threadIdx.x == 0) scales[tr * nbk + tc] = s;
  const bool fin = amax_bits_finite(am);
#pragma unroll
  for (int p = 0; p < PASSES; ++p) {
    const int64_t r = tr * 128 + p * RPP + rr;
    if (r < M && chunk < nchunk)
      store_chunk<In, VEC>(out + r * K, chunk, K, fin ? cast_vec<In, F, true>(v[p], s) : cast_vec<In, F, false>(v[p], s));
  }
}

// MXFP8 dim1 through a register transpose (HIPFP8_MXDIM1_LDS=0): a block of 256 threads covers
// (256 / kMxCG) * RPT = 512 rows x kMxCG = 4 chunks of columns; thread (rg, cg) holds RPT = 8
// consecutive rows of one chunk, and the 32 / RPT threads rg .. rg + 32/RPT - 1 with the same cg
// (lanes cg + j*kMxCG of one wavefront) hold one 32-row MX block: their amax is combined with
// shuffles. The transposed output goes out as 8-byte column runs (the best of the register
// tiles measured (bench/NOTES.md, "Kernel design decisions")).
constexpr int kMxCG = 4;
constexpr int kMxRPT = 8;
template <class In, uint32_t F, bool VEC>
__global__ void __launch_bounds__(256)
mx_dim1_kernel(const typename In::elem* __restrict__ x, uint8_t* __restrict__ out, uint8_t* __restrict__ scales,
               int64_t M, int64_t K, int rceil, int vec_store) {
  constexpr int RPT = kMxRPT;
  constexpr int PARTS = 32 / RPT;  // threads sharing one 32-row MX block (rg .. rg + PARTS - 1)
  static_assert(kMxCG * PARTS <= HIPFP8_WAVE, "an MX block must lie in one wavefront");
  constexpr int EPV = In::EPV;
  const int cg = threadIdx.x % kMxCG, rg = threadIdx.x / kMxCG;
  const int64_t chunk = (int64_t)blockIdx.x * kMxCG + cg;
  const int64_t nchunk = (K + EPV - 1) / EPV;
  const int64_t r0 = ((int64_t)blockIdx.y * (256 / kMxCG) + rg) * RPT;
  const int64_t nb = (M + 31) / 32;
  uint4 v[RPT];
  uint32_t cam[EPV];
#pragma unroll
  for (int e = 0; e < EPV; ++e) cam[e] = 0;
#pragma unroll
  for (int r = 0; r < RPT; ++r) {
    v[r] = (r0 + r < M && chunk < nchunk) ? load_chunk<In, VEC>(x + (r0 + r) * K, chunk, K) : zero4();
#pragma unroll
    for (int e = 0; e < EPV; ++e) cam[e] = max(cam[e], abs_bits(In::get(v[r], e)));
  }
#pragma unroll
  for (int e = 0; e < EPV; ++e) {
#pragma unroll
    for (int o = kMxCG; o < kMxCG * PARTS; o <<= 1) cam[e] = max(cam[e], (uint32_t)HIPFP8_SHFL_XOR(cam[e], o));
  }
  if (r0 >= M || chunk >= nchunk) return;  // after the shuffle: every lane took part
  const bool full = vec_store && r0 + RPT <= M;
#pragma unroll
  for (int e = 0; e < EPV; ++e) {
    const int64_t col = chunk * EPV + e;
    if (col >= K) break;
    uint32_t code;
    float mult;
    mx_scale<F>(cam[e], rceil, code, mult);
    if (rg % PARTS == 0) scales[col * nb + r0 / 32] = (uint8_t)code;
    uint32_t q[RPT / 4];
    if (amax_bits_finite(cam[e])) {
#pragma unroll
      for (int k4 = 0; k4 < RPT / 4; ++k4)
        q[k4] = encode4_finite<F>(In::get(v[4 * k4], e) * mult, In::get(v[4 * k4 + 1], e) * mult,
                                  In::get(v[4 * k4 + 2], e) * mult, In::get(v[4 * k4 + 3], e) * mult);
    } else {
#pragma unroll
      for (int k4 = 0; k4 < RPT / 4; ++k4)
        q[k4] = encode4_sw<F>(In::get(v[4 * k4], e) * mult, In::get(v[4 * k4 + 1], e) * mult,
                              In::get(v[4 * k4 + 2], e) * mult, In::get(v[4 * k4 + 3], e) * mult);
    }
    uint8_t* dst = out + col * M + r0;
    if (full) {
      *reinterpret_cast<uint2*>(dst) = make_uint2(q[0], q[1]);
    } else {
#pragma unroll
      for (int r = 0; r < RPT; ++r)
        if (r0 + r < M) dst[r] = (uint8_t)(q[r >> 2] >> (8 * (r & 3)));
    }
  }
}

// MXFP8 dim1 through LDS (the default; HIPFP8_MXDIM1_LDS=0 selects mx_dim1_kernel). A block of
// 256 threads stages a tile of 256 rows x 8 chunks (64 bf16 / 32 f32 columns, 32 KB) in shared
// memory, column-major: a column is 256 rows = S 16-byte slots of EPS rows. Load phase: thread
// (rg, cg) = (t / 8, t % 8) loads rows rg*8 .. rg*8+7 of chunk cg (row-major 16-byte vectors)
// and writes each of its EPV columns as 8 consecutive rows (bf16: one slot, halves of two rows
// paired by a permute; f32: two slots, no permute). Read phase: item (c, rb) = (t / 8 + 32 i,
// t % 8) reads the 32 rows of MX block rb of column c as 32 / EPS consecutive slots; from there
// the work is the row kernel's: packed amax, mx_scale, cast_vec over EPS consecutive rows (the
// same helpers and arithmetic as mx_dim1_kernel, so the same bits), and 32 bytes of the column
// out as two 16-byte stores (8 lanes write a column's 256 bytes). Slots are swizzled (physical
// slot s ^ ((s >> 3) & 7) ^ (chunk & 7)) so the 8 lanes of one 128-byte LDS access (same rg,
// cg = 0..7 when writing; same c, rb = 0..7 when reading) hit 8 distinct 16-byte bank groups.
template <class In, uint32_t F, bool VEC>
__global__ void __launch_bounds__(256)
mx_dim1_lds_kernel(const typename In::elem* __restrict__ x, uint8_t* __restrict__ out, uint8_t* __restrict__ scales,
                   int64_t M, int64_t K, int rceil, int vec_store) {
  constexpr int EPV = In::EPV;                     // elements per 16-byte vector / slot
  constexpr int ROWS = 256, CH = 8, COLS = CH * EPV;
  constexpr int S = ROWS / EPV;                    // slots per column
  constexpr int SPI = 32 / EPV;                    // slots per MX block
  constexpr int ITEMS = COLS * (ROWS / 32) / 256;  // (column, MX block) items per thread
  __shared__ uint4 tile[COLS * S];                 // 32 KB for bf16 and f32
  const int t = threadIdx.x;
  const int cg = t % CH, rg = t / CH;
  const int64_t chunk = (int64_t)blockIdx.x * CH + cg;
  const int64_t nchunk = (K + EPV - 1) / EPV;
  const int64_t rbase = (int64_t)blockIdx.y * ROWS;
  uint4 v[8];
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int64_t row = rbase + rg * 8 + r;
    v[r] = (row < M && chunk < nchunk) ? load_chunk<In, VEC>(x + row * K, chunk, K) : zero4();
  }
  auto slot = [](int c, int s) { return c * S + (s ^ ((s >> 3) & 7) ^ ((c / EPV) & 7)); };
#pragma unroll
  for (int e = 0; e < EPV; ++e) {
    const int c = cg * EPV + e;
    if constexpr (EPV == 8) {
      uint32_t w[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t a = e / 2 == 0 ? v[2 * k].x : e / 2 == 1 ? v[2 * k].y : e / 2 == 2 ? v[2 * k].z : v[2 * k].w;
        const uint32_t b = e / 2 == 0 ? v[2 * k + 1].x : e / 2 == 1 ? v[2 * k + 1].y : e / 2 == 2 ? v[2 * k + 1].z : v[2 * k + 1].w;
        w[k] = (e & 1) ? ((a >> 16) | (b & 0xFFFF0000u)) : ((a & 0xFFFFu) | (b << 16));
      }
      tile[slot(c, rg)] = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
      uint32_t w[8];
#pragma unroll
      for (int r = 0; r < 8; ++r) w[r] = e == 0 ? v[r].x : e == 1 ? v[r].y : e == 2 ? v[r].z : v[r].w;
      tile[slot(c, 2 * rg)] = make_uint4(w[0], w[1], w[2], w[3]);
      tile[slot(c, 2 * rg + 1)] = make_uint4(w[4], w[5], w[6], w[7]);
    }
  }
  __syncthreads();
  const int64_t nb = (M + 31) / 32;
  const int rb = t % 8;
  const int64_t r0 = rbase + rb * 32;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int c = t / 8 + 32 * i;
    const int64_t col = (int64_t)blockIdx.x * COLS + c;
    uint4 d[SPI];
    uint32_t am = 0;
#pragma unroll
    for (int j = 0; j < SPI; ++j) {
      d[j] = tile[slot(c, rb * SPI + j)];
      am = max(am, In::absmax(d[j]));
    }
    if (col >= K || r0 >= M) continue;
    uint32_t code;
    float mult;
    mx_scale<F>(am, rceil, code, mult);
    scales[col * nb + r0 / 32] = (uint8_t)code;
    uint32_t q[8];
    const bool fin = amax_bits_finite(am);
#pragma unroll
    for (int j = 0; j < SPI; ++j) {
      const uint2 c2 = fin ? cast_vec<In, F, true>(d[j], mult) : cast_vec<In, F, false>(d[j], mult);
      if constexpr (EPV == 8) {
        q[2 * j] = c2.x;
        q[2 * j + 1] = c2.y;
      } else {
        q[j] = c2.x;
      }
    }
    uint8_t* dst = out + col * M + r0;
    if (vec_store && r0 + 32 <= M) {
      reinterpret_cast<uint4*>(dst)[0] = make_uint4(q[0], q[1], q[2], q[3]);
      reinterpret_cast<uint4*>(dst)[1] = make_uint4(q[4], q[5], q[6], q[7]);
    } else {
#pragma unroll
      for (int r = 0; r < 32; ++r)
        if (r0 + r < M) dst[r] = (uint8_t)(q[r >> 2] >> (8 * (r & 3)));
    }
  }
}

template <class In, uint32_t F, int BS, int MODE>
static int launch_row_blocks(const void* x, uint8_t* out, float* fs, uint8_t* es, int64_t m, int64_t k, int param,
                             hipStream_t st) {
  typedef typename In::elem E;
  const E* xp = static_cast<const E*>(x);
  const int64_t grid = m < 0x7FFFFFFF ? m : 0x7FFFFFFF;  // one block per row
  if (k % In::EPV == 0 && aligned16(x) && (uintptr_t)out % In::EPV == 0)
    row_blocks_kernel<In, F, BS, MODE, true><<<(unsigned)grid, 256, 0, st>>>(xp, out, fs, es, m, k, param);
  else
    row_blocks_kernel<In, F, BS, MODE, false><<<(unsigned)grid, 256, 0, st>>>(xp, out, fs, es, m, k, param);
  HIPFP8_RETURN_LAUNCH_STATUS();
}

template <class In, uint32_t F>
static int launch_tile128(const void* x, uint8_t* out, float* scales, int64_t m, int64_t k, int pow2, hipStream_t st) {
  typedef typename In::elem E;
  const E* xp = static_cast<const E*>(x);
  const dim3 grid((unsigned)((k + 127) / 128), (unsigned)((m + 127) / 128));
  if (k % In::EPV == 0 && aligned16(x) && (uintptr_t)out % In::EPV == 0)
    tile128_kernel<In, F, true><<<grid, 256, 0, st>>>(xp, out, scales, m, k, pow2);
  else
    tile128_kernel<In, F, false><<<grid, 256, 0, st>>>(xp, out, scales, m, k, pow2);
  HIPFP8_RETURN_LAUNCH_STATUS();
}

template <class In, uint32_t F>
static void launch_mx_dim1_regs(const typename In::elem* xp, uint8_t* out, uint8_t* scales, int64_t m, int64_t k,
                                int rceil, hipStream_t st) {
  const int64_t nchunk = (k + In::EPV - 1) / In::EPV;
  constexpr int64_t rows = (256 / kMxCG) * kMxRPT;
  const dim3 grid((unsigned)((nchunk + kMxCG - 1) / kMxCG), (unsigned)((m + rows - 1) / rows));
  const int vs = m % 16 == 0 && aligned16(out);
  if (k % In::EPV == 0 && aligned16(xp))
    mx_dim1_kernel<In, F, true><<<grid, 256, 0, st>>>(xp, out, scales, m, k, rceil, vs);
  else
    mx_dim1_kernel<In, F, false><<<grid, 256, 0, st>>>(xp, out, scales, m, k, rceil, vs);
}

template <class In, uint32_t F>
static void launch_mx_dim1_lds(const typename In::elem* xp, uint8_t* out, uint8_t* scales, int64_t m, int64_t k,
                               int rceil, hipStream_t st) {
  const dim3 grid((unsigned)(((k + In::EPV - 1) / In::EPV + 7) / 8), (unsigned)((m + 255) / 256));
  const int vs = m % 16 == 0 && aligned16(out);
  if (k % In::EPV == 0 && aligned16(xp))
    mx_dim1_lds_kernel<In, F, true><<<grid, 256, 0, st>>>(xp, out, scales, m, k, rceil, vs);
  else
    mx_dim1_lds_kernel<In, F, false><<<grid, 256, 0, st>>>(xp, out, scales, m, k, rceil, vs);
}

template <class In, uint32_t F>
static int launch_mx_dim1(const void* x, uint8_t* out, uint8_t* scales, int64_t m, int64_t k, int rceil,
                          hipStream_t st) {
  typedef typename In::elem E;
  const E* xp = static_cast<const E*>(x);
  if (mx_dim1_lds())
    launch_mx_dim1_lds<In, F>(xp, out, scales, m, k, rceil, st);
  else
    launch_mx_dim1_regs<In, F>(xp, out, scales, m, k, rceil, st);
  HIPFP8_RETURN_LAUNCH_STATUS();
}

}  // namespace hipfp8

using namespace hipfp8;

#define HIPFP8_BLOCKS_PREAMBLE()                               \
  if (m < 0 || k < 0) return kLaunchBadShape;                  \
  if (m == 0 || k == 0) return kLaunchOk;                      \
  if (!x || !out || !scales) return kLaunchNull;               \
  const uint32_t fmt = (uint32_t)format

// x (m, k) row-major -> out (m, k), scales (m, ceil(k/128)) row-major.
HIPFP8_EXTERN int hipfp8_blockwise_1x128_launch(const void* x, uint8_t* out, float* scales, int64_t m, int64_t k,
                                                int format, int pow2, int in_dtype, hipStream_t stream) noexcept {
  HIPFP8_BLOCKS_PREAMBLE();
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (launch_row_blocks<Bf16In, FMT, 128, kScaleF32>(x, out, scales, nullptr, m, k, pow2, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (launch_row_blocks<F32In, FMT, 128, kScaleF32>(x, out, scales, nullptr, m, k, pow2, stream))); }
  return kLaunchBadEnum;
}

// x (m, k) row-major -> out (m, k), scales (ceil(m/128), ceil(k/128)) row-major.
HIPFP8_EXTERN int hipfp8_blockwise_128x128_launch(const void* x, uint8_t* out, float* scales, int64_t m, int64_t k,
                                                  int format, int pow2, int in_dtype, hipStream_t stream) noexcept {
  HIPFP8_BLOCKS_PREAMBLE();
  if ((m + 127) / 128 > 65535) return kLaunchUnsupported;
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (launch_tile128<Bf16In, FMT>(x, out, scales, m, k, pow2, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (launch_tile128<F32In, FMT>(x, out, scales, m, k, pow2, stream))); }
  return kLaunchBadEnum;
}

// MXFP8 along rows: x (m, k) row-major -> out (m, k), E8M0 scales (m, ceil(k/32)). format must be
// E4M3FN or E5M2 (OCP); rounding 0 = FLOOR, 1 = RCEIL.
HIPFP8_EXTERN int hipfp8_mxfp8_dim0_launch(const void* x, uint8_t* out, uint8_t* scales, int64_t m, int64_t k,
                                           int format, int rounding, int in_dtype, hipStream_t stream) noexcept {
  HIPFP8_BLOCKS_PREAMBLE();
  if (rounding != 0 && rounding != 1) return kLaunchBadEnum;
  if (fmt == kE4M3Fn) {
    if (in_dtype == HIPFP8_DTYPE_BF16) return launch_row_blocks<Bf16In, kE4M3Fn, 32, kScaleE8M0>(x, out, nullptr, scales, m, k, rounding, stream);
    if (in_dtype == HIPFP8_DTYPE_F32) return launch_row_blocks<F32In, kE4M3Fn, 32, kScaleE8M0>(x, out, nullptr, scales, m, k, rounding, stream);
  } else if (fmt == kE5M2) {
    if (in_dtype == HIPFP8_DTYPE_BF16) return launch_row_blocks<Bf16In, kE5M2, 32, kScaleE8M0>(x, out, nullptr, scales, m, k, rounding, stream);
    if (in_dtype == HIPFP8_DTYPE_F32) return launch_row_blocks<F32In, kE5M2, 32, kScaleE8M0>(x, out, nullptr, scales, m, k, rounding, stream);
  }
  return kLaunchBadEnum;
}

// MXFP8 along columns: x (m, k) row-major -> out (k, m) row-major, E8M0 scales (k, ceil(m/32)).
HIPFP8_EXTERN int hipfp8_mxfp8_dim1_launch(const void* x, uint8_t* out, uint8_t* scales, int64_t m, int64_t k,
                                           int format, int rounding, int in_dtype, hipStream_t stream) noexcept {
  HIPFP8_BLOCKS_PREAMBLE();
  if (rounding != 0 && rounding != 1) return kLaunchBadEnum;
  if ((m + 1023) / 1024 > 65535) return kLaunchUnsupported;
  if (fmt == kE4M3Fn) {
    if (in_dtype == HIPFP8_DTYPE_BF16) return launch_mx_dim1<Bf16In, kE4M3Fn>(x, out, scales, m, k, rounding, stream);
    if (in_dtype == HIPFP8_DTYPE_F32) return launch_mx_dim1<F32In, kE4M3Fn>(x, out, scales, m, k, rounding, stream);
  } else if (fmt == kE5M2) {
    if (in_dtype == HIPFP8_DTYPE_BF16) return launch_mx_dim1<Bf16In, kE5M2>(x, out, scales, m, k, rounding, stream);
    if (in_dtype == HIPFP8_DTYPE_F32) return launch_mx_dim1<F32In, kE5M2>(x, out, scales, m, k, rounding, stream);
  }
  return kLaunchBadEnum;
}
