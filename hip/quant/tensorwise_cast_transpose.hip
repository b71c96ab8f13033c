// tensorwise_cast_transpose.hip -- casts whose scale needs an amax over more than one block can hold, done in two
// phases on the stream with no host synchronisation:
//   tensorwise      amax kernel (atomicMax of |x| bits into the amax output, zeroed by an async
//                   memset first), then a cast kernel that derives the scale on the device.
//   cast_transpose  (M,K) -> out (M,K) row-major and out_t (K,M) row-major from a tile kernel
//                   that holds 8 rows x 16 bytes per thread and transposes the codes through
//                   shared memory (transposed stores are 16-byte column runs), scales
//                   tensorwise or rowwise (per row of x for out, per column
//                   for out_t). Phase 1 accumulates amax in the context workspace, phase 2 casts,
//                   then an async memset hands the workspace back zeroed (m > 0; with m = 0 no
//                   phase 1 runs and the workspace was only read).
//   *_scaled        the same casts with a scale the caller already has (delayed scaling: the
//                   scale comes from an amax history of earlier steps, as Transformer Engine's
//                   recipe does): ONE read of x, one kernel, and the amax of x written for the
//                   history (relaxed atomicMax of |x| bits, NaN canonicalised before the atomic).
// Minimal bytes for these ops assume one read of x; two phases read it twice, so on tensors
// larger than the L2 the bound is (in + out) / (2 in + out) of copy bandwidth: 60% for
// tensorwise bf16 -> fp8, 67% for cast_transpose. That is the price of the exact amax (the
// scale of every element depends on every other element).
#include "common.h"
#include "launchers.h"
#include "policy.h"

namespace hipfp8 {

constexpr int kTensorBlock = 256;
constexpr int kTensorUnroll = 4;

template <class In, bool VEC>
__global__ void __launch_bounds__(kTensorBlock)
tensor_amax_kernel(const typename In::elem* __restrict__ x, int64_t n, uint32_t* __restrict__ amax_bits) {
  __shared__ uint32_t red[kTensorBlock / HIPFP8_WAVE];
  const int64_t nchunk = (n + In::EPV - 1) / In::EPV;
  const int64_t stride = (int64_t)gridDim.x * kTensorBlock;
  uint32_t am = 0;
  for (int64_t i0 = (int64_t)blockIdx.x * kTensorBlock + threadIdx.x; i0 < nchunk; i0 += stride * kTensorUnroll) {
    uint4 v[kTensorUnroll];
#pragma unroll
    for (int u = 0; u < kTensorUnroll; ++u) {
      const int64_t i = i0 + u * stride;
      v[u] = i < nchunk ? load_chunk<In, VEC>(x, i, n) : zero4();
    }
#pragma unroll
    for (int u = 0; u < kTensorUnroll; ++u) am = max(am, In::absmax(v[u]));
  }
  am = block_max<kTensorBlock>(am, red);
  if (threadIdx.x == 0 && am != 0) atomicMax(amax_bits, am);
}

template <class In, uint32_t F, bool VEC>
__global__ void __launch_bounds__(kTensorBlock)
tensor_cast_kernel(const typename In::elem* __restrict__ x, int64_t n, uint32_t* amax_io, uint8_t* __restrict__ out,
                   float* __restrict__ scale_out, int pow2) {
  const uint32_t am = *reinterpret_cast<volatile uint32_t*>(amax_io);
  const float s = amax_to_scale<F>(am, pow2 != 0);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *scale_out = s;
    if (am > 0x7F800000u) *amax_io = 0x7FC00000u;  // canonical NaN, as the CPU reference
  }
  const bool fin = amax_bits_finite(am);
  const int64_t nchunk = (n + In::EPV - 1) / In::EPV;
  const int64_t stride = (int64_t)gridDim.x * kTensorBlock;
  // Walk x from its END (chunk nchunk-1-i): the amax pass read it front to back, so its tail is
  // still in L2 and this second read of x finds it there (only the L2-sized tail; see NOTES).
  for (int64_t i0 = (int64_t)blockIdx.x * kTensorBlock + threadIdx.x; i0 < nchunk; i0 += stride * kTensorUnroll) {
    uint4 v[kTensorUnroll];
#pragma unroll
    for (int u = 0; u < kTensorUnroll; ++u) {
      const int64_t i = i0 + u * stride;
      v[u] = i < nchunk ? load_chunk<In, VEC>(x, nchunk - 1 - i, n) : zero4();
    }
#pragma unroll
    for (int u = 0; u < kTensorUnroll; ++u) {
      const int64_t i = i0 + u * stride;
      if (i < nchunk)
        store_chunk<In, VEC>(out, nchunk - 1 - i, n, fin ? cast_vec<In, F, true>(v[u], s) : cast_vec<In, F, false>(v[u], s));
    }
  }
}

// Whether every product of an element of magnitude <= amax (bits) with s is finite: then the
// hardware converter path is exact for all of them (it saturates every finite value; NaN and Inf
// take the software rule). A NaN amax or scale, or 0 * Inf, fails the test.
__device__ inline bool scaled_finite(uint32_t amax_bits, float s) {
  return abs_bits(u2f(amax_bits) * s) < 0x7F800000u;
}
// amax bits of a block into the amax output: canonical NaN (0x7FC00000, as the CPU reference)
// before the atomic, so the maximum over blocks is exactly the reference's value.
__device__ inline void publish_amax(uint32_t am, uint32_t* amax_out) {
  if (am > 0x7F800000u) am = 0x7FC00000u;
  if (am != 0) atomicMax(amax_out, am);
}

// Given scale (delayed scaling): out = encode(x * scale_in[0]) and amax_out = max |x|, one read.
template <class In, uint32_t F, bool VEC>
__global__ void __launch_bounds__(kTensorBlock)
tensor_scaled_kernel(const typename In::elem* __restrict__ x, int64_t n, const float* __restrict__ scale_in,
                     uint8_t* __restrict__ out, uint32_t* amax_out) {
  __shared__ uint32_t red[kTensorBlock / HIPFP8_WAVE];
  const float s = *scale_in;
  const int64_t nchunk = (n + In::EPV - 1) / In::EPV;
  const int64_t stride = (int64_t)gridDim.x * kTensorBlock;
  uint32_t am = 0;
  for (int64_t i0 = (int64_t)blockIdx.x * kTensorBlock + threadIdx.x; i0 < nchunk; i0 += stride * kTensorUnroll) {
    uint4 v[kTensorUnroll];
#pragma unroll
    for (int u = 0; u < kTensorUnroll; ++u) {
      const int64_t i = i0 + u * stride;
      v[u] = i < nchunk ? load_chunk<In, VEC>(x, i, n) : zero4();
    }
    uint32_t a = 0;
#pragma unroll
    for (int u = 0; u < kTensorUnroll; ++u) a = max(a, In::absmax(v[u]));
    am = max(am, a);
    const bool fin = scaled_finite(a, s);
#pragma unroll
    for (int u = 0; u < kTensorUnroll; ++u) {
      const int64_t i = i0 + u * stride;
      if (i < nchunk) store_chunk<In, VEC>(out, i, n, fin ? cast_vec<In, F, true>(v[u], s) : cast_vec<In, F, false>(v[u], s));
    }
  }
  am = block_max<kTensorBlock>(am, red);
  if (threadIdx.x == 0) publish_amax(am, amax_out);
}

// ------------------------------------------------------------------------------ cast_transpose
// Phase-1 tile (rowwise amax): 256 threads = 64 row groups x 4 chunks; 1024 rows x (4 * EPV)
// columns per block.
constexpr int kCtCG = 4;
constexpr int kCtRows = (kTensorBlock / kCtCG) * 16;
// Cast tile: 256 threads = 32 row groups x 8 chunks; 512 rows x (8 * EPV) columns per block. A
// warp reads 128 B and writes 64 B of each row-major row and 64 B runs of each transposed
// column; 8 chunks is the fastest of 4, 8 and 16 (bench/NOTES.md, "Kernel design decisions").
constexpr int kCtCastCG = 8;
constexpr int kCtCastRows = (kTensorBlock / kCtCastCG) * 16;

// Phase 1 (rowwise scaling): amax of every row into ws[row], of every column into ws[M + col].
// A block covers 1024 rows x kCtTilesPerBlock column tiles: column amax go out once per tile
// (atomicMax, 8 per column for M = 8192), row amax are kept in registers across the tiles and go
// out once per block, so each row address sees K / 256 atomics instead of K / 32.
constexpr int kCtTilesPerBlock = 8;
template <class In, bool VEC>
__global__ void __launch_bounds__(kTensorBlock)
ct_amax_kernel(const typename In::elem* __restrict__ x, int64_t M, int64_t K, uint32_t* __restrict__ ws) {
  constexpr int EPV = In::EPV;
  constexpr int NW = kTensorBlock / HIPFP8_WAVE;
  __shared__ uint32_t red[NW][kCtCG * 8];
  const int cg = threadIdx.x % kCtCG, rg = threadIdx.x / kCtCG;
  const int64_t nchunk = (K + EPV - 1) / EPV;
  const int64_t r0 = (int64_t)blockIdx.y * kCtRows + rg * 16;
  uint32_t ram[16];
#pragma unroll
  for (int r = 0; r < 16; ++r) ram[r] = 0;
  for (int tt = 0; tt < kCtTilesPerBlock; ++tt) {
    const int64_t tile = (int64_t)blockIdx.x * kCtTilesPerBlock + tt;
    if (tile * kCtCG >= nchunk) break;  // uniform over the block
    const int64_t chunk = tile * kCtCG + cg;
    uint32_t cam[EPV];
#pragma unroll
    for (int e = 0; e < EPV; ++e) cam[e] = 0;
    uint4 v[16];
#pragma unroll
    for (int r = 0; r < 16; ++r)
      v[r] = (r0 + r < M && chunk < nchunk) ? load_chunk<In, VEC>(x + (r0 + r) * K, chunk, K) : zero4();
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      ram[r] = max(ram[r], In::absmax(v[r]));
#pragma unroll
      for (int e = 0; e < EPV; ++e) cam[e] = max(cam[e], abs_bits(In::get(v[r], e)));
    }
#pragma unroll
    for (int e = 0; e < EPV; ++e) {
#pragma unroll
      for (int o = kCtCG; o < HIPFP8_WAVE; o <<= 1) cam[e] = max(cam[e], (uint32_t)HIPFP8_SHFL_XOR(cam[e], o));
    }
    const int lane = threadIdx.x % HIPFP8_WAVE;
    if (lane < kCtCG) {
#pragma unroll
      for (int e = 0; e < EPV; ++e) red[threadIdx.x / HIPFP8_WAVE][lane * EPV + e] = cam[e];
    }
    __syncthreads();
    if (threadIdx.x < kCtCG * EPV) {
      uint32_t a = red[0][threadIdx.x];
#pragma unroll
      for (int i = 1; i < NW; ++i) a = max(a, red[i][threadIdx.x]);
      const int64_t col = tile * kCtCG * EPV + threadIdx.x;
      if (col < K && a != 0) atomicMax(ws + M + col, a);
    }
    __syncthreads();  // red is reused by the next tile
  }
#pragma unroll
  for (int r = 0; r < 16; ++r) {
#pragma unroll
    for (int o = 1; o < kCtCG; o <<= 1) ram[r] = max(ram[r], (uint32_t)HIPFP8_SHFL_XOR(ram[r], o));
    if (cg == 0 && r0 + r < M && ram[r] != 0) atomicMax(ws + r0 + r, ram[r]);
  }
}

// The scales a cast tile needs, in shared memory (each computed once per block), for both cast
// kernels below. ROWS / COLS: the tile's rows and columns.
template <int ROWS, int COLS>
struct CtScales {
  float rs[ROWS];      // rowwise: row scales
  uint32_t rfin[ROWS]; // rowwise: the row's amax is finite
  float cs[COLS];      // rowwise: column scales; else cs[0] is the tensor (or the given) scale
  uint32_t cfin[COLS];

  // Tile (bx, by) at rows rbase.., columns cbase..; writes the op's scale outputs from the tiles
  // of the first block column / row. GIVEN: cs[0] = scale_in[0] (the finiteness test is per
  // thread then). Callers barrier before reading.
  template <uint32_t F, bool GIVEN>
  __device__ __forceinline__ void load(const uint32_t* ws, int64_t M, int64_t K, int rowwise, int pow2, int64_t rbase, int64_t cbase,
                       int64_t bx, int64_t by, float* scales, float* scales_t, const float* scale_in) {
    const int t = threadIdx.x;
    if constexpr (GIVEN) {
      if (t == 0) cs[0] = *scale_in;
    } else if (rowwise) {
      for (int i = t; i < ROWS; i += kTensorBlock) {
        const int64_t r = rbase + i;
        const uint32_t a = r < M ? ws[r] : 0;
        rs[i] = amax_to_scale<F>(a, pow2 != 0);
        rfin[i] = amax_bits_finite(a);
        if (bx == 0 && r < M) scales[r] = rs[i];
      }
      if (t < COLS) {
        const int64_t c = cbase + t;
        const uint32_t a = c < K ? ws[M + c] : 0;
        cs[t] = amax_to_scale<F>(a, pow2 != 0);
        cfin[t] = amax_bits_finite(a);
        if (by == 0 && c < K) scales_t[c] = cs[t];
      }
    } else if (t == 0) {
      const uint32_t a = ws[0];
      cs[0] = amax_to_scale<F>(a, pow2 != 0);
      cfin[0] = amax_bits_finite(a);
      if (bx == 0 && by == 0) {
        scales[0] = cs[0];
        scales_t[0] = cs[0];
      }
    }
  }
};

// amax bits of a thread's R vectors. bf16: the maxima of the low and the high halves, on the
// packed words. In::absmax shifts the low halves up, the same expression the cast's bf16 -> f32
// uses; in the 16-row tile the compiler then kept all 128 converted values live between the amax
// and the stores (161 registers on sm_90 against 112).
template <class In, int R>
__device__ __forceinline__ uint32_t tile_amax_bits(const uint4 (&v)[R]) {
  uint32_t am = 0;
  if constexpr (In::EPV == 8) {
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      lo = max(lo, max(max(v[r].x & 0x7FFFu, v[r].y & 0x7FFFu), max(v[r].z & 0x7FFFu, v[r].w & 0x7FFFu)));
      hi = max(hi, max(max(v[r].x & 0x7FFF0000u, v[r].y & 0x7FFF0000u), max(v[r].z & 0x7FFF0000u, v[r].w & 0x7FFF0000u)));
    }
    am = max(lo << 16, hi);
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) am = max(am, In::absmax(v[r]));
  }
  return am;
}

// Row-major codes of a thread's R rows (r0..) of vector `chunk`, each with its row scale (row
// i0 + r of the tile) or the tensor scale; GIVEN: fin is the thread's own finiteness test.
template <class In, uint32_t F, bool VEC, bool GIVEN, int R, int ROWS, int COLS>
__device__ __forceinline__ void ct_store_rows(const CtScales<ROWS, COLS>& sh, const uint4 (&v)[R], uint8_t* out, int64_t M,
                                     int64_t K, int64_t r0, int i0, int64_t chunk, int rowwise, bool gfin) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r0 + r >= M) break;
    const float s = rowwise ? sh.rs[i0 + r] : sh.cs[0];
    const bool fin = GIVEN ? gfin : rowwise ? sh.rfin[i0 + r] != 0 : sh.cfin[0] != 0;
    store_chunk<In, VEC>(out + (r0 + r) * K, chunk, K, fin ? cast_vec<In, F, true>(v[r], s) : cast_vec<In, F, false>(v[r], s));
  }
}

// Phase 2: both layouts. rowwise = 0: ws[0] is the tensor amax; 1: ws[row], ws[M + col].
// GIVEN (the one-pass op with the caller's scale, no phase 1): the scale is scale_in[0], ws is
// the amax output (atomicMax of this block's |x| bits), scales / scales_t are not written, and a
// thread takes the hardware converter path when every product of its tile is finite.
template <class In, uint32_t F, bool VEC, bool GIVEN>
__global__ void __launch_bounds__(kTensorBlock)
ct_cast_kernel(const typename In::elem* __restrict__ x, int64_t M, int64_t K, uint32_t* ws,
               int rowwise, int pow2, uint8_t* __restrict__ out, uint8_t* __restrict__ out_t,
               float* __restrict__ scales, float* __restrict__ scales_t, int vec_store_t,
               const float* __restrict__ scale_in) {
  constexpr int EPV = In::EPV;
  __shared__ CtScales<kCtCastRows, kCtCastCG * EPV> sh;
  __shared__ uint32_t red[kTensorBlock / HIPFP8_WAVE];
  const int cg = threadIdx.x % kCtCastCG, rg = threadIdx.x / kCtCastCG;
  // Tiles in reverse launch order (last rows first): phase 1 read x front to back, so the tail of
  // x is still in L2 for the first blocks of this second read.
  const int64_t bx = (int64_t)gridDim.x - 1 - blockIdx.x;
  const int64_t by = (int64_t)gridDim.y - 1 - blockIdx.y;
  const int64_t chunk = bx * kCtCastCG + cg;
  const int64_t nchunk = (K + EPV - 1) / EPV;
  const int64_t rbase = by * kCtCastRows;
  const int64_t r0 = rbase + rg * 16;
  const int64_t cbase = bx * kCtCastCG * EPV;
  sh.template load<F, GIVEN>(ws, M, K, rowwise, pow2, rbase, cbase, bx, by, scales, scales_t, scale_in);
  __syncthreads();
  uint4 v[16];
#pragma unroll
  for (int r = 0; r < 16; ++r)
    v[r] = (r0 + r < M && chunk < nchunk) ? load_chunk<In, VEC>(x + (r0 + r) * K, chunk, K) : zero4();
  bool gfin = false;  // GIVEN: every product of this thread's tile is finite
  uint32_t gam = 0;   // GIVEN: amax bits of this thread's tile (rows / columns past the end are zero)
  if constexpr (GIVEN) {
    gam = tile_amax_bits<In>(v);
    gfin = scaled_finite(gam, sh.cs[0]);
  }
  if (r0 < M && chunk < nchunk) {  // (no early return: the GIVEN block reduction follows)
  // row-major output: chunk of each row with its row scale (or the tensor scale)
  ct_store_rows<In, F, VEC, GIVEN>(sh, v, out, M, K, r0, rg * 16, chunk, rowwise, gfin);
  // transposed output: per column, 16 consecutive rows = 16 bytes
  const bool full = vec_store_t && r0 + 16 <= M;
#pragma unroll
  for (int e = 0; e < EPV; ++e) {
    const int64_t col = chunk * EPV + e;
    if (col >= K) break;
    const float s = rowwise ? sh.cs[cg * EPV + e] : sh.cs[0];
    const bool fin = GIVEN ? gfin : rowwise ? sh.cfin[cg * EPV + e] != 0 : sh.cfin[0] != 0;
    uint32_t q[4];
    if (fin) {
#pragma unroll
      for (int k4 = 0; k4 < 4; ++k4)
        q[k4] = encode4_finite<F>(In::get(v[4 * k4], e) * s, In::get(v[4 * k4 + 1], e) * s,
                                  In::get(v[4 * k4 + 2], e) * s, In::get(v[4 * k4 + 3], e) * s);
    } else {
#pragma unroll
      for (int k4 = 0; k4 < 4; ++k4)
        q[k4] = encode4_sw<F>(In::get(v[4 * k4], e) * s, In::get(v[4 * k4 + 1], e) * s,
                              In::get(v[4 * k4 + 2], e) * s, In::get(v[4 * k4 + 3], e) * s);
    }
    uint8_t* dst = out_t + col * M + r0;
    if (full) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(q[0], q[1], q[2], q[3]);
    } else {
#pragma unroll
      for (int r = 0; r < 16; ++r)
        if (r0 + r < M) dst[r] = (uint8_t)(q[r >> 2] >> (8 * (r & 3)));
    }
  }
  }
  if constexpr (GIVEN) {
    // After the stores, so the tile's registers are dead across the barrier.
    gam = block_max<kTensorBlock>(gam, red);
    if (threadIdx.x == 0) publish_amax(gam, ws);
  }
}

// The same op through shared memory (the default; HIPFP8_CT_LDS=0 selects ct_cast_kernel above):
// 256 threads = 32 row groups x 8 chunks, a thread holds 8 rows x 16 B (32 registers of data
// instead of 64: 59-64 registers on sm_90, 4 blocks of 8 warps per SM instead of 2), so more
// loads are in flight (faster than the register tile on every shape measured (bench/NOTES.md, "Kernel design decisions")).
// Row-major codes go out from registers
// (64 B per row per warp); the transposed codes of each column (8 rows = 8 bytes per thread) go to an LDS tile of 256 rows x 8 * EPV
// columns, 16-byte slots XOR-swizzled by the writer's chunk (conflict-free both ways), and are
// read back as 16-byte runs of one column (16 lanes cover a column's 256 rows).
constexpr int kCtLdsRows = 256;
template <class In, uint32_t F, bool VEC, bool GIVEN>
__global__ void __launch_bounds__(kTensorBlock)
ct_cast_lds_kernel(const typename In::elem* __restrict__ x, int64_t M, int64_t K, uint32_t* ws,
                   int rowwise, int pow2, uint8_t* __restrict__ out, uint8_t* __restrict__ out_t,
                   float* __restrict__ scales, float* __restrict__ scales_t, int vec_store_t,
                   const float* __restrict__ scale_in) {
  constexpr int EPV = In::EPV, CH = 8, RPT = 8, ROWS = kCtLdsRows, COLS = CH * EPV;
  constexpr int U = ROWS / 8;  // 8-byte units per tile column
  __shared__ CtScales<ROWS, COLS> sh;
  __shared__ uint32_t red[kTensorBlock / HIPFP8_WAVE];
  __shared__ uint2 tile[COLS * U];
  const int t = threadIdx.x, cg = t % CH, rg = t / CH;
  const int64_t bx = (int64_t)gridDim.x - 1 - blockIdx.x;
  const int64_t by = (int64_t)gridDim.y - 1 - blockIdx.y;
  const int64_t chunk = bx * CH + cg;
  const int64_t nchunk = (K + EPV - 1) / EPV;
  const int64_t rbase = by * ROWS;
  const int64_t r0 = rbase + rg * RPT;
  const int64_t cbase = bx * COLS;
  sh.template load<F, GIVEN>(ws, M, K, rowwise, pow2, rbase, cbase, bx, by, scales, scales_t, scale_in);
  __syncthreads();
  uint4 v[RPT];
#pragma unroll
  for (int r = 0; r < RPT; ++r)
    v[r] = (r0 + r < M && chunk < nchunk) ? load_chunk<In, VEC>(x + (r0 + r) * K, chunk, K) : zero4();
  bool gfin = false;
  uint32_t gam = 0;
  if constexpr (GIVEN) {
    gam = tile_amax_bits<In>(v);
    gfin = scaled_finite(gam, sh.cs[0]);
  }
  if (chunk < nchunk) ct_store_rows<In, F, VEC, GIVEN>(sh, v, out, M, K, r0, rg * RPT, chunk, rowwise, gfin);
  // transposed codes of this thread's 8 rows, one 8-byte unit per column, into the tile
  const int wslot = ((rg >> 1) ^ (cg << 1)) * 2 + (rg & 1);
#pragma unroll
  for (int e = 0; e < EPV; ++e) {
    const int c = cg * EPV + e;
    const float s = rowwise ? sh.cs[c] : sh.cs[0];
    const bool fin = GIVEN ? gfin : rowwise ? sh.cfin[c] != 0 : sh.cfin[0] != 0;
    uint2 q;
    if (fin) {
      q.x = encode4_finite<F>(In::get(v[0], e) * s, In::get(v[1], e) * s, In::get(v[2], e) * s, In::get(v[3], e) * s);
      q.y = encode4_finite<F>(In::get(v[4], e) * s, In::get(v[5], e) * s, In::get(v[6], e) * s, In::get(v[7], e) * s);
    } else {
      q.x = encode4_sw<F>(In::get(v[0], e) * s, In::get(v[1], e) * s, In::get(v[2], e) * s, In::get(v[3], e) * s);
      q.y = encode4_sw<F>(In::get(v[4], e) * s, In::get(v[5], e) * s, In::get(v[6], e) * s, In::get(v[7], e) * s);
    }
    tile[c * U + wslot] = q;
  }
  __syncthreads();
  // read-out: item = (column c, 16-row run j); 16 lanes cover one column's 256 rows
#pragma unroll
  for (int i = t; i < COLS * (U / 2); i += kTensorBlock) {
    const int c = i / (U / 2), j = i % (U / 2);
    const int64_t col = cbase + c, row = rbase + 16 * j;
    if (col >= K || row >= M) continue;
    const int slot = j ^ ((c / EPV) << 1);
    const uint2 a = tile[c * U + 2 * slot], b = tile[c * U + 2 * slot + 1];
    uint8_t* dst = out_t + col * M + row;
    if (vec_store_t && row + 16 <= M) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(a.x, a.y, b.x, b.y);
    } else {
      const uint32_t w[4] = {a.x, a.y, b.x, b.y};
      for (int r = 0; r < 16 && row + r < M; ++r) dst[r] = (uint8_t)(w[r >> 2] >> (8 * (r & 3)));
    }
  }
  if constexpr (GIVEN) {
    gam = block_max<kTensorBlock>(gam, red);
    if (t == 0) publish_amax(gam, ws);
  }
}

// Grid of a grid-stride tensor kernel (tensor_grid, policy.h): one block per kTensorBlock *
// kTensorUnroll chunks, at most the blocks resident at once.
constexpr int64_t kTensorChunksPerBlock = (int64_t)kTensorBlock * kTensorUnroll;
template <class In, bool VEC>
static int tensor_amax_grid(int64_t nchunk) {
  static unsigned long long cache[kResidentDevs];
  return tensor_grid(nchunk, kTensorChunksPerBlock,
                     resident_grid(cache, reinterpret_cast<const void*>(tensor_amax_kernel<In, VEC>), kTensorBlock, 0));
}
template <class In, uint32_t F, bool VEC>
static int tensor_cast_grid(int64_t nchunk) {
  static unsigned long long cache[kResidentDevs];
  return tensor_grid(nchunk, kTensorChunksPerBlock,
                     resident_grid(cache, reinterpret_cast<const void*>(tensor_cast_kernel<In, F, VEC>), kTensorBlock, 0));
}

// The cast phase through shared memory (ct_cast_lds_kernel) or registers: ct_cast_lds (policy.h).
// Grid of ct_cast_kernel: column tiles x row tiles (at least one row of blocks).
static dim3 ct_cast_grid(int64_t m, int64_t nchunk) {
  const int64_t ty = m > 0 ? (m + kCtCastRows - 1) / kCtCastRows : 1;
  return dim3((unsigned)((nchunk + kCtCastCG - 1) / kCtCastCG), (unsigned)ty);
}
template <class In, uint32_t F, bool VEC, bool GIVEN>
static void launch_ct_cast(const typename In::elem* xp, int64_t m, int64_t k, uint32_t* w, int rowwise, int pow2,
                           uint8_t* out, uint8_t* out_t, float* scales, float* scales_t, int vst, const float* scale_in,
                           hipStream_t st) {
  const int64_t nchunk = (k + In::EPV - 1) / In::EPV;
  const int64_t ly = m > 0 ? (m + kCtLdsRows - 1) / kCtLdsRows : 1;
  if (ct_cast_lds(ly)) {
    const dim3 grid((unsigned)((nchunk + 7) / 8), (unsigned)ly);
    ct_cast_lds_kernel<In, F, VEC, GIVEN><<<grid, kTensorBlock, 0, st>>>(xp, m, k, w, rowwise, pow2, out, out_t, scales, scales_t, vst, scale_in);
  } else {
    ct_cast_kernel<In, F, VEC, GIVEN><<<ct_cast_grid(m, nchunk), kTensorBlock, 0, st>>>(xp, m, k, w, rowwise, pow2, out, out_t, scales, scales_t, vst, scale_in);
  }
}

template <class In, uint32_t F>
static int launch_tensorwise(const void* x, int64_t n, uint8_t* out, float* scale, float* amax, int pow2,
                             hipStream_t st) {
  typedef typename In::elem E;
  const E* xp = static_cast<const E*>(x);
  uint32_t* ab = reinterpret_cast<uint32_t*>(amax);
  hipError_t e = hipMemsetAsync(ab, 0, sizeof(uint32_t), st);
  if (e != hipSuccess) return (int)e;
  const int64_t nchunk = (n + In::EPV - 1) / In::EPV;
  const bool vec = n % In::EPV == 0 && aligned16(x) && (uintptr_t)out % In::EPV == 0;
  if (vec) {
    tensor_amax_kernel<In, true><<<tensor_amax_grid<In, true>(nchunk), kTensorBlock, 0, st>>>(xp, n, ab);
    tensor_cast_kernel<In, F, true><<<tensor_cast_grid<In, F, true>(nchunk), kTensorBlock, 0, st>>>(xp, n, ab, out, scale, pow2);
  } else {
    tensor_amax_kernel<In, false><<<tensor_amax_grid<In, false>(nchunk), kTensorBlock, 0, st>>>(xp, n, ab);
    tensor_cast_kernel<In, F, false><<<tensor_cast_grid<In, F, false>(nchunk), kTensorBlock, 0, st>>>(xp, n, ab, out, scale, pow2);
  }
  HIPFP8_RETURN_LAUNCH_STATUS();
}

template <class In, uint32_t F>
static int launch_cast_transpose(const void* x, int64_t m, int64_t k, int rowwise, uint8_t* out, uint8_t* out_t,
                                 float* scales, float* scales_t, int pow2, void* ws, hipStream_t st) {
  typedef typename In::elem E;
  const E* xp = static_cast<const E*>(x);
  uint32_t* w = static_cast<uint32_t*>(ws);
  const bool vec = k % In::EPV == 0 && aligned16(x) && (uintptr_t)out % In::EPV == 0;
  const int64_t nchunk = (k + In::EPV - 1) / In::EPV;
  // m == 0 still writes the scales of the empty tensor / empty columns: one row of blocks
  const int vst = m % 16 == 0 && aligned16(out_t);
  // phase 1 (rowwise): kCtTilesPerBlock tiles of kCtCG vectors x kCtRows rows per block
  const int64_t atiles = (nchunk + kCtCG - 1) / kCtCG;
  const dim3 agrid((unsigned)((atiles + kCtTilesPerBlock - 1) / kCtTilesPerBlock),
                   (unsigned)(m > 0 ? (m + kCtRows - 1) / kCtRows : 1));
  if (vec) {
    if (m > 0) {
      if (rowwise) ct_amax_kernel<In, true><<<agrid, kTensorBlock, 0, st>>>(xp, m, k, w);
      else tensor_amax_kernel<In, true><<<tensor_amax_grid<In, true>(m * nchunk), kTensorBlock, 0, st>>>(xp, m * k, w);
    }
    launch_ct_cast<In, F, true, false>(xp, m, k, w, rowwise, pow2, out, out_t, scales, scales_t, vst, nullptr, st);
  } else {
    if (m > 0) {
      if (rowwise) ct_amax_kernel<In, false><<<agrid, kTensorBlock, 0, st>>>(xp, m, k, w);
      else tensor_amax_kernel<In, false><<<tensor_amax_grid<In, false>(m * nchunk), kTensorBlock, 0, st>>>(xp, m * k, w);
    }
    launch_ct_cast<In, F, false, false>(xp, m, k, w, rowwise, pow2, out, out_t, scales, scales_t, vst, nullptr, st);
  }
  hipError_t e = hipGetLastError();
  if (e != hipSuccess || m == 0) return (int)e;
  // hand the workspace back zeroed (ordered after the cast on this stream); with m == 0 no
  // amax kernel ran and the cast kernel only reads it: it is still zero, no memset
  e = hipMemsetAsync(w, 0, (size_t)(rowwise ? m + k : 1) * sizeof(uint32_t), st);
  return (int)e;
}

// Given-scale casts: the amax output is zeroed on the stream first, then one kernel.
template <class In, uint32_t F, bool VEC>
static int tensor_scaled_grid(int64_t nchunk) {
  static unsigned long long cache[kResidentDevs];
  return tensor_grid(nchunk, kTensorChunksPerBlock,
                     resident_grid(cache, reinterpret_cast<const void*>(tensor_scaled_kernel<In, F, VEC>), kTensorBlock, 0));
}
template <class In, uint32_t F>
static int launch_tensorwise_scaled(const void* x, int64_t n, const float* scale, uint8_t* out, float* amax,
                                    hipStream_t st) {
  typedef typename In::elem E;
  const E* xp = static_cast<const E*>(x);
  uint32_t* ab = reinterpret_cast<uint32_t*>(amax);
  hipError_t e = hipMemsetAsync(ab, 0, sizeof(uint32_t), st);
  if (e != hipSuccess || n == 0) return (int)e;
  const int64_t nchunk = (n + In::EPV - 1) / In::EPV;
  const bool vec = n % In::EPV == 0 && aligned16(x) && (uintptr_t)out % In::EPV == 0;
  if (vec) tensor_scaled_kernel<In, F, true><<<tensor_scaled_grid<In, F, true>(nchunk), kTensorBlock, 0, st>>>(xp, n, scale, out, ab);
  else tensor_scaled_kernel<In, F, false><<<tensor_scaled_grid<In, F, false>(nchunk), kTensorBlock, 0, st>>>(xp, n, scale, out, ab);
  HIPFP8_RETURN_LAUNCH_STATUS();
}

template <class In, uint32_t F>
static int launch_cast_transpose_scaled(const void* x, int64_t m, int64_t k, const float* scale, uint8_t* out,
                                        uint8_t* out_t, float* amax, hipStream_t st) {
  typedef typename In::elem E;
  const E* xp = static_cast<const E*>(x);
  uint32_t* ab = reinterpret_cast<uint32_t*>(amax);
  hipError_t e = hipMemsetAsync(ab, 0, sizeof(uint32_t), st);
  if (e != hipSuccess || m == 0) return (int)e;
  const bool vec = k % In::EPV == 0 && aligned16(x) && (uintptr_t)out % In::EPV == 0;
  const int vst = m % 16 == 0 && aligned16(out_t);
  if (vec) launch_ct_cast<In, F, true, true>(xp, m, k, ab, 0, 0, out, out_t, nullptr, nullptr, vst, scale, st);
  else launch_ct_cast<In, F, false, true>(xp, m, k, ab, 0, 0, out, out_t, nullptr, nullptr, vst, scale, st);
  HIPFP8_RETURN_LAUNCH_STATUS();
}

}  // namespace hipfp8

using namespace hipfp8;

// x: n elements -> out[n], scale[0], amax[0]; no host synchronisation.
HIPFP8_EXTERN int hipfp8_tensorwise_launch(const void* x, uint8_t* out, float* scale, float* amax, int64_t n,
                                           int format, int pow2, int in_dtype, hipStream_t stream) noexcept {
  if (n < 0) return kLaunchBadShape;
  if (!scale || !amax || (n > 0 && (!x || !out))) return kLaunchNull;
  const uint32_t fmt = (uint32_t)format;
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (launch_tensorwise<Bf16In, FMT>(x, n, out, scale, amax, pow2, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (launch_tensorwise<F32In, FMT>(x, n, out, scale, amax, pow2, stream))); }
  return kLaunchBadEnum;
}

// Workspace bytes of cast_transpose: zero before use, left zero.
HIPFP8_EXTERN int hipfp8_cast_transpose_workspace_bytes(int64_t m, int64_t k, int scaling, uint64_t* bytes) noexcept {
  if (!bytes) return kLaunchNull;
  if (m < 0 || k < 0) return kLaunchBadShape;
  *bytes = (uint64_t)(scaling == 1 ? m + k : 1) * sizeof(uint32_t);
  return kLaunchOk;
}

// x (m, k) row-major -> out (m, k) row-major and out_t (k, m) row-major. scaling 0 = tensorwise
// (scales[0] == scales_t[0]), 1 = rowwise (scales[m] per row, scales_t[k] per column).
HIPFP8_EXTERN int hipfp8_cast_transpose_launch(const void* x, uint8_t* out, uint8_t* out_t, float* scales,
                                               float* scales_t, int64_t m, int64_t k, int scaling, int format,
                                               int pow2, int in_dtype, void* workspace, hipStream_t stream) noexcept {
  if (m < 0 || k <= 0) return kLaunchBadShape;
  if (scaling != 0 && scaling != 1) return kLaunchBadEnum;
  if (!scales || !scales_t || !workspace || (m > 0 && (!x || !out || !out_t))) return kLaunchNull;
  if ((m + kCtCastRows - 1) / kCtCastRows > 65535) return kLaunchUnsupported;
  const uint32_t fmt = (uint32_t)format;
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (launch_cast_transpose<Bf16In, FMT>(x, m, k, scaling, out, out_t, scales, scales_t, pow2, workspace, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (launch_cast_transpose<F32In, FMT>(x, m, k, scaling, out, out_t, scales, scales_t, pow2, workspace, stream))); }
  return kLaunchBadEnum;
}

// Given scale (delayed scaling), one read of x: out[i] = encode(x[i] * scale[0]) for n elements,
// amax[0] = max |x| (0 for n == 0). scale is device memory, read by the kernel (no host sync).
HIPFP8_EXTERN int hipfp8_tensorwise_scaled_launch(const void* x, const float* scale, uint8_t* out, float* amax,
                                                  int64_t n, int format, int in_dtype, hipStream_t stream) noexcept {
  if (n < 0) return kLaunchBadShape;
  if (!scale || !amax || (n > 0 && (!x || !out))) return kLaunchNull;
  const uint32_t fmt = (uint32_t)format;
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (launch_tensorwise_scaled<Bf16In, FMT>(x, n, scale, out, amax, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (launch_tensorwise_scaled<F32In, FMT>(x, n, scale, out, amax, stream))); }
  return kLaunchBadEnum;
}

// Given scale, one read of x (m, k) row-major: out (m, k) and out_t (k, m) row-major, both
// encode(x * scale[0]); amax[0] = max |x|. No workspace.
HIPFP8_EXTERN int hipfp8_cast_transpose_scaled_launch(const void* x, const float* scale, uint8_t* out, uint8_t* out_t,
                                                      float* amax, int64_t m, int64_t k, int format, int in_dtype,
                                                      hipStream_t stream) noexcept {
  if (m < 0 || k <= 0) return kLaunchBadShape;
  if (!scale || !amax || (m > 0 && (!x || !out || !out_t))) return kLaunchNull;
  if ((m + kCtCastRows - 1) / kCtCastRows > 65535) return kLaunchUnsupported;
  const uint32_t fmt = (uint32_t)format;
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (launch_cast_transpose_scaled<Bf16In, FMT>(x, m, k, scale, out, out_t, amax, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (launch_cast_transpose_scaled<F32In, FMT>(x, m, k, scale, out, out_t, amax, stream))); }
  return kLaunchBadEnum;
}
