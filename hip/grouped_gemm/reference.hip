// Portable FP8 grouped GEMM (torch._scaled_grouped_mm semantics), the reference kernel.
//
// It runs on any vendor port.h supports, for every FP8 format pair, any shape (empty and
// one-row groups, K and N not multiples of the tile), and is the GPU oracle for the CK and
// CUTLASS backends. It favours obviousness over speed: bytes are decoded to f32 while being
// staged in LDS, and the product is an f32 FMA loop over an LDS tile.
//
// Both ops of docs/OPS.md are "TN" products once you look at them per group: the left and
// the right operand are both contiguous along the reduced dimension.
//   2D x 3D  (groups along M):  group g = rows [m0, m1)
//     out[i, j] = sum_k a[i*K + k] * b[g*N*K + j*K + k] * sa[i] * sb[g*N + j]
//   2D x 2D  (groups along the reduced Mt):  group g = reduction range [t0, t1)
//     out[g, i, j] = sum_{t0<=t<t1} a[i*Mt + t] * b[j*Mt + t] * sa[g*N + i] * sb[g*K + j]
// so one tile routine serves both: rows of A with stride lda, rows of B (= columns of the
// output) with stride ldb, and a reduction range.
//
// Offsets stay on the device. Blocks read them and clamp them exactly as OPS.md says
// (o[g] = min(max(o[g], o[g-1]), extent)), so bad offsets can't make the kernel read or write
// out of bounds; the host never sees them.
#include "../port.h"
#include "../kernel_abi.h"
#include "launchers.h"

namespace hipfp8_gg_ref {

// Tile sizes. 256 threads; each owns a 4x4 patch of the 64x64 output tile.
constexpr int BM = 64;
constexpr int BN = 64;
constexpr int BK = 32;
constexpr int THREADS = 256;
constexpr int TM = 4;
constexpr int TN = 4;
// One float of padding per LDS row keeps the transposed stores off a single bank.
constexpr int LDS_PAD = 1;

// Format ids: the values of the Rust `Fp8Format` enum (repr u32).
enum : int { FMT_E4M3FN = 0, FMT_E5M2 = 1, FMT_E4M3FNUZ = 2, FMT_E5M2FNUZ = 3 };

// Decode one FP8 code to f32 (exact). The rule is the one in src/format.rs: a generic
// sign/exponent/mantissa decode plus each format's NaN/Inf codes. Used only to fill a
// 256-entry LDS table per operand at block start, so its cost does not matter.
__device__ inline float decode_fp8(int fmt, unsigned code) {
  const unsigned mag = code & 0x7Fu;
  const bool neg = (code & 0x80u) != 0;
  int mb, bias;
  switch (fmt) {
    case FMT_E4M3FN:
      if (mag == 0x7Fu) return __int_as_float(0x7FC00000);
      mb = 3; bias = 7; break;
    case FMT_E5M2:
      if (mag == 0x7Cu) return neg ? -__int_as_float(0x7F800000) : __int_as_float(0x7F800000);
      if (mag > 0x7Cu) return __int_as_float(0x7FC00000);
      mb = 2; bias = 15; break;
    case FMT_E4M3FNUZ:
      if (code == 0x80u) return __int_as_float(0x7FC00000);
      mb = 3; bias = 8; break;
    default:  // FMT_E5M2FNUZ (the launcher rejects unknown ids)
      if (code == 0x80u) return __int_as_float(0x7FC00000);
      mb = 2; bias = 16; break;
  }
  const int ef = (int)(mag >> mb);
  const int m = (int)(mag & ((1u << mb) - 1u));
  // Subnormal: m * 2^(1 - bias - mb); normal: (2^mb + m) * 2^(ef - bias - mb). Both are
  // small integers times a power of two, hence exact in f32.
  const float v = (ef == 0) ? ldexpf((float)m, 1 - bias - mb)
                            : ldexpf((float)((1 << mb) + m), ef - bias - mb);
  return neg ? -v : v;
}

// One group's product, described as a TN GEMM over a tile grid.
struct Tile {
  const uint8_t* a;   // first row of A for this group
  const uint8_t* b;   // first row of B (= first output column) for this group
  int64_t lda, ldb;   // row strides (bytes) of A and B
  int64_t red;        // reduction length (0 allowed: the output is zero)
  int64_t cols;       // output columns of this group
  const float* sa;    // per-row dequant scales (indexed by local row)
  const float* sb;    // per-column dequant scales (indexed by local column)
  hipfp8_bf16* out;   // output (local row 0, column 0)
  int64_t ldo;        // output row stride (elements)
  int64_t row0;       // first output row of this block, local to the group
  int64_t col0;       // first output column of this block
  int64_t row_end;    // one past the last row this block may write (local)
};

__device__ inline int64_t clamp_off(int32_t v, int64_t lo, int64_t hi) {
  int64_t x = (int64_t)v;
  x = x < lo ? lo : x;
  return x > hi ? hi : x;
}

// The tile loop shared by both ops. All threads of the block call it.
__device__ inline void run_tile(const Tile& t, const float* lut_a, const float* lut_b,
                                float (*As)[BM + LDS_PAD], float (*Bs)[BN + LDS_PAD]) {
  const int tid = threadIdx.x;
  const int tx = tid % 16;  // column group
  const int ty = tid / 16;  // row group
  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

  for (int64_t k0 = 0; k0 < t.red; k0 += BK) {
    // Stage A (BM x BK bytes) and B (BN x BK bytes) transposed into LDS as f32.
    // Consecutive threads read consecutive bytes of one row (coalesced); rows, columns and
    // k beyond the group's extent stage zeros so the FMA loop needs no predicates.
#pragma unroll
    for (int it = 0; it < (BM * BK) / THREADS; ++it) {
      const int idx = tid + it * THREADS;
      const int r = idx / BK;
      const int kk = idx % BK;
      const int64_t gr = t.row0 + r;
      const int64_t gk = k0 + kk;
      float v = 0.0f;
      if (gr < t.row_end && gk < t.red) v = lut_a[t.a[gr * t.lda + gk]];
      As[kk][r] = v;
    }
#pragma unroll
    for (int it = 0; it < (BN * BK) / THREADS; ++it) {
      const int idx = tid + it * THREADS;
      const int c = idx / BK;
      const int kk = idx % BK;
      const int64_t gc = t.col0 + c;
      const int64_t gk = k0 + kk;
      float v = 0.0f;
      if (gc < t.cols && gk < t.red) v = lut_b[t.b[gc * t.ldb + gk]];
      Bs[kk][c] = v;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < BK; ++kk) {
      float av[TM], bv[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) av[i] = As[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < TN; ++j) bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }

  // Epilogue: out = bf16_rne((acc * sa[row]) * sb[col]). An empty reduction writes exact
  // zeros (OPS.md: "empty groups give zeros"), whatever the scales hold.
  const bool empty = t.red == 0;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int64_t r = t.row0 + ty + 16 * i;
    if (r >= t.row_end) continue;
    const float s_row = empty ? 0.0f : t.sa[r];
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int64_t c = t.col0 + tx + 16 * j;
      if (c >= t.cols) continue;
      const float v = empty ? 0.0f : (acc[i][j] * s_row) * t.sb[c];
      t.out[r * t.ldo + c] = hipfp8_f32_to_bf16(v);
    }
  }
}

__device__ inline void fill_luts(int fmt_a, int fmt_b, float* lut_a, float* lut_b) {
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    lut_a[i] = decode_fp8(fmt_a, (unsigned)i);
    lut_b[i] = decode_fp8(fmt_b, (unsigned)i);
  }
}

// Both kernels are grid-stride loops over all output tiles of all groups, in group order.
// Every thread walks the offsets itself (the same addresses for the whole block: broadcast
// loads), so the grid size never depends on the offsets, no block is launched for nothing,
// and skewed groups spread over all blocks. `skip` (optional, device) restricts the kernel
// to some groups: a group g with skip[g] != 0 is left alone (another backend owns it).

// 2D x 3D: group g owns rows [o[g-1], o[g]) of a and out; tiles are BM rows x BN columns.
__global__ void __launch_bounds__(THREADS)
grouped_2d3d_kernel(const uint8_t* __restrict__ a, int fmt_a, const uint8_t* __restrict__ b,
                    int fmt_b, const int32_t* __restrict__ offs, int groups,
                    const float* __restrict__ sa, const float* __restrict__ sb,
                    hipfp8_bf16* __restrict__ out, int64_t M, int64_t N, int64_t K,
                    const int32_t* __restrict__ skip) {
  __shared__ float lut_a[256];
  __shared__ float lut_b[256];
  __shared__ float As[BK][BM + LDS_PAD];
  __shared__ float Bs[BK][BN + LDS_PAD];
  // The decode tables are filled before the block's first tile: a block with no work (all
  // its groups skipped) then costs only the walk over the offsets.
  bool luts_ready = false;

  const int64_t ntiles_n = (N + BN - 1) / BN;
  int64_t prev = 0, base = 0;
  for (int g = 0; g < groups; ++g) {
    const int64_t m0 = prev;
    const int64_t m1 = clamp_off(offs[g], prev, M);
    prev = m1;
    const int64_t tiles = (m1 - m0 + BM - 1) / BM * ntiles_n;
    const int64_t first = base;
    base += tiles;
    if (tiles == 0 || (skip != nullptr && skip[g] != 0)) continue;
    // First tile index >= first that this block owns (t % gridDim.x == blockIdx.x).
    int64_t t = first + ((int64_t)blockIdx.x - first % gridDim.x + gridDim.x) % gridDim.x;
    for (; t < first + tiles; t += gridDim.x) {
      const int64_t local = t - first;
      const int64_t r0 = m0 + (local / ntiles_n) * BM;
      Tile tl;
      tl.a = a + r0 * K;
      tl.lda = K;
      tl.b = b + (int64_t)g * N * K;
      tl.ldb = K;
      tl.red = K;
      tl.cols = N;
      tl.sa = sa + r0;
      tl.sb = sb + (int64_t)g * N;
      tl.out = out + r0 * N;
      tl.ldo = N;
      tl.row0 = 0;
      tl.col0 = (local % ntiles_n) * BN;
      tl.row_end = (m1 - r0 < BM) ? m1 - r0 : BM;
      if (!luts_ready) {  // block-uniform
        fill_luts(fmt_a, fmt_b, lut_a, lut_b);
        __syncthreads();
        luts_ready = true;
      }
      run_tile(tl, lut_a, lut_b, As, Bs);
    }
  }
}

// 2D x 2D: group g reduces over [o[g-1], o[g]) and owns out[g] (N x K); every group, empty
// or not, has ceil(N/BM) * ceil(K/BN) tiles (empty ones are written as zeros).
__global__ void __launch_bounds__(THREADS)
grouped_2d2d_kernel(const uint8_t* __restrict__ a, int fmt_a, const uint8_t* __restrict__ b,
                    int fmt_b, const int32_t* __restrict__ offs, int groups,
                    const float* __restrict__ sa, const float* __restrict__ sb,
                    hipfp8_bf16* __restrict__ out, int64_t N, int64_t Mt, int64_t K,
                    const int32_t* __restrict__ skip) {
  __shared__ float lut_a[256];
  __shared__ float lut_b[256];
  __shared__ float As[BK][BM + LDS_PAD];
  __shared__ float Bs[BK][BN + LDS_PAD];
  // The decode tables are filled before the block's first tile: a block with no work (all
  // its groups skipped) then costs only the walk over the offsets.
  bool luts_ready = false;

  const int64_t ntiles_n = (N + BM - 1) / BM;
  const int64_t ntiles_k = (K + BN - 1) / BN;
  const int64_t tiles = ntiles_n * ntiles_k;
  int64_t prev = 0;
  for (int g = 0; g < groups; ++g) {
    const int64_t t0 = prev;
    const int64_t t1 = clamp_off(offs[g], prev, Mt);
    prev = t1;
    if (skip != nullptr && skip[g] != 0) continue;
    const int64_t first = (int64_t)g * tiles;
    int64_t t = first + ((int64_t)blockIdx.x - first % gridDim.x + gridDim.x) % gridDim.x;
    for (; t < first + tiles; t += gridDim.x) {
      const int64_t local = t - first;
      Tile tl;
      tl.a = a + t0;
      tl.lda = Mt;
      tl.b = b + t0;
      tl.ldb = Mt;
      tl.red = t1 - t0;
      tl.cols = K;
      tl.sa = sa + (int64_t)g * N;
      tl.sb = sb + (int64_t)g * K;
      tl.out = out + (int64_t)g * N * K;
      tl.ldo = K;
      tl.row0 = (local / ntiles_k) * BM;
      tl.col0 = (local % ntiles_k) * BN;
      tl.row_end = (tl.row0 + BM < N) ? tl.row0 + BM : N;
      if (!luts_ready) {  // block-uniform
        fill_luts(fmt_a, fmt_b, lut_a, lut_b);
        __syncthreads();
        luts_ready = true;
      }
      run_tile(tl, lut_a, lut_b, As, Bs);
    }
  }
}

// ---- Blockwise-scaled GEMMs (docs/OPS.md grouped_gemm_blockwise_2d3d / _2d2d) ---------------
//
// The arithmetic of the CPU reference (src/reference/grouped_gemm_blockwise.rs) operation for
// operation, so the two agree bit for bit: per output and per scale block q met by the
// reduction range, the segment [max(lo, 128 q), min(hi, 128 q + 128)) is summed in eight f32
// partial sums, lane (t - segment start) % 8 taking a[t] * b[t] in ascending t (an FMA: the
// product of two FP8 values is exact in f32, so fma == add of the product); the segment sum
// ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)); then acc += (sum * sa) * sb, each
// operation rounded on its own (mul_nc / add_nc: never contracted into an FMA). Zeros staged
// past the segment add +0 to a lane, which leaves it unchanged (a lane started at +0 is never
// -0). 2D x 3D reduces over K ([0, K), blocks from 0); 2D x 2D over the group's tokens, its
// blocks at absolute token positions.

constexpr int BW_BLOCK = 128;  // the scale block edge
constexpr int LANES = 8;

// __fmul_rn / __fadd_rn: the runtime's separately rounded multiply and add (never contracted
// into an FMA), on both vendors.
__device__ inline float mul_nc(float x, float y) { return __fmul_rn(x, y); }
__device__ inline float add_nc(float x, float y) { return __fadd_rn(x, y); }

// 2D x 3D: one BM x BN output tile of group g: rows [r0, r0 + rows) of a and out, columns
// [col0, col0 + BN) (inside one 128-column scale block, BN dividing 128).
__device__ inline void run_tile_bw_2d3d(const uint8_t* a, const uint8_t* bg, const float* sa,
                                   const float* sbg, hipfp8_bf16* out, int64_t r0, int64_t rows,
                                   int64_t col0, int64_t N, int64_t K, const float* lut_a,
                                   const float* lut_b, float (*As)[BM + LDS_PAD],
                                   float (*Bs)[BN + LDS_PAD]) {
  const int tid = threadIdx.x;
  const int tx = tid % 16;
  const int ty = tid / 16;
  const int64_t kbn = (K + BW_BLOCK - 1) / BW_BLOCK;
  const float* sb_col = sbg + (col0 / BW_BLOCK) * kbn;  // this tile's scale-block row of b
  float tot[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) tot[i][j] = 0.0f;

  for (int64_t q = 0; q < kbn; ++q) {
    float lane[TM][TN][LANES];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j)
#pragma unroll
        for (int l = 0; l < LANES; ++l) lane[i][j][l] = 0.0f;
    for (int64_t k0 = q * BW_BLOCK; k0 < (q + 1) * BW_BLOCK && k0 < K; k0 += BK) {
#pragma unroll
      for (int it = 0; it < (BM * BK) / THREADS; ++it) {
        const int idx = tid + it * THREADS;
        const int r = idx / BK;
        const int kk = idx % BK;
        const int64_t gk = k0 + kk;
        float v = 0.0f;
        if (r < rows && gk < K) v = lut_a[a[(r0 + r) * K + gk]];
        As[kk][r] = v;
      }
#pragma unroll
      for (int it = 0; it < (BN * BK) / THREADS; ++it) {
        const int idx = tid + it * THREADS;
        const int c = idx / BK;
        const int kk = idx % BK;
        const int64_t gc = col0 + c;
        const int64_t gk = k0 + kk;
        float v = 0.0f;
        if (gc < N && gk < K) v = lut_b[bg[gc * K + gk]];
        Bs[kk][c] = v;
      }
      __syncthreads();
      // k0 is a multiple of LANES inside the block, so lane = kk % LANES.
      for (int k8 = 0; k8 < BK; k8 += LANES) {
#pragma unroll
        for (int l = 0; l < LANES; ++l) {
          float av[TM], bv[TN];
#pragma unroll
          for (int i = 0; i < TM; ++i) av[i] = As[k8 + l][ty + 16 * i];
#pragma unroll
          for (int j = 0; j < TN; ++j) bv[j] = Bs[k8 + l][tx + 16 * j];
#pragma unroll
          for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) lane[i][j][l] = fmaf(av[i], bv[j], lane[i][j][l]);
        }
      }
      __syncthreads();
    }
    const float sbq = sb_col[q];
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int64_t r = ty + 16 * i;
      const float saq = r < rows ? sa[(r0 + r) * kbn + q] : 0.0f;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const float* l = lane[i][j];
        const float part = add_nc(add_nc(add_nc(l[0], l[4]), add_nc(l[1], l[5])),
                                  add_nc(add_nc(l[2], l[6]), add_nc(l[3], l[7])));
        tot[i][j] = add_nc(tot[i][j], mul_nc(mul_nc(part, saq), sbq));
      }
    }
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int64_t r = ty + 16 * i;
    if (r >= rows) continue;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int64_t c = col0 + tx + 16 * j;
      if (c < N) out[(r0 + r) * N + c] = hipfp8_f32_to_bf16(tot[i][j]);
    }
  }
}

// 2D x 2D: one BM x BN output tile of a blockwise-scaled GEMM, both operands contiguous along the
// reduction: tile row r reads a[r * lda + t], tile column c reads b[c * ldb + t], for t in
// [lo, hi). Block q's scales (block-major grids): sa[q * sa_qs + r] and sb[q * sb_qs + c].
struct BwTile {
  const uint8_t* a;
  const uint8_t* b;
  int64_t lda, ldb;
  int64_t rows, cols;  // valid rows / columns of the tile (<= BM / BN)
  int64_t lo, hi;      // the reduction range
  const float* sa;
  int64_t sa_qs;
  const float* sb;
  int64_t sb_qs;
  hipfp8_bf16* out;    // the tile's (0, 0) output
  int64_t ldo;
};

__device__ inline void run_tile_bw(const BwTile& t, const float* lut_a, const float* lut_b,
                                   float (*As)[BM + LDS_PAD], float (*Bs)[BN + LDS_PAD]) {
  const int tid = threadIdx.x;
  const int tx = tid % 16;
  const int ty = tid / 16;
  float tot[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) tot[i][j] = 0.0f;

  for (int64_t s0 = t.lo; s0 < t.hi;) {
    const int64_t q = s0 / BW_BLOCK;
    const int64_t s1 = (q + 1) * BW_BLOCK < t.hi ? (q + 1) * BW_BLOCK : t.hi;
    float lane[TM][TN][LANES];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j)
#pragma unroll
        for (int l = 0; l < LANES; ++l) lane[i][j][l] = 0.0f;
    for (int64_t k0 = s0; k0 < s1; k0 += BK) {
#pragma unroll
      for (int it = 0; it < (BM * BK) / THREADS; ++it) {
        const int idx = tid + it * THREADS;
        const int r = idx / BK;
        const int kk = idx % BK;
        float v = 0.0f;
        if (r < t.rows && k0 + kk < s1) v = lut_a[t.a[r * t.lda + k0 + kk]];
        As[kk][r] = v;
      }
#pragma unroll
      for (int it = 0; it < (BN * BK) / THREADS; ++it) {
        const int idx = tid + it * THREADS;
        const int c = idx / BK;
        const int kk = idx % BK;
        float v = 0.0f;
        if (c < t.cols && k0 + kk < s1) v = lut_b[t.b[c * t.ldb + k0 + kk]];
        Bs[kk][c] = v;
      }
      __syncthreads();
      // k0 - s0 is a multiple of BK, hence of LANES, so lane = (t - s0) % LANES = kk % LANES.
      for (int k8 = 0; k8 < BK; k8 += LANES) {
#pragma unroll
        for (int l = 0; l < LANES; ++l) {
          float av[TM], bv[TN];
#pragma unroll
          for (int i = 0; i < TM; ++i) av[i] = As[k8 + l][ty + 16 * i];
#pragma unroll
          for (int j = 0; j < TN; ++j) bv[j] = Bs[k8 + l][tx + 16 * j];
#pragma unroll
          for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) lane[i][j][l] = fmaf(av[i], bv[j], lane[i][j][l]);
        }
      }
      __syncthreads();
    }
    float sbq[TN];
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int64_t c = tx + 16 * j;
      sbq[j] = c < t.cols ? t.sb[q * t.sb_qs + c] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int64_t r = ty + 16 * i;
      const float saq = r < t.rows ? t.sa[q * t.sa_qs + r] : 0.0f;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const float* l = lane[i][j];
        const float part = add_nc(add_nc(add_nc(l[0], l[4]), add_nc(l[1], l[5])),
                                  add_nc(add_nc(l[2], l[6]), add_nc(l[3], l[7])));
        tot[i][j] = add_nc(tot[i][j], mul_nc(mul_nc(part, saq), sbq[j]));
      }
    }
    s0 = s1;
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int64_t r = ty + 16 * i;
    if (r >= t.rows) continue;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int64_t c = tx + 16 * j;
      if (c < t.cols) t.out[r * t.ldo + c] = hipfp8_f32_to_bf16(tot[i][j]);
    }
  }
}

// 2D x 3D: grid-stride over the tiles of all groups in group order, as grouped_2d3d_kernel.
__global__ void __launch_bounds__(THREADS)
grouped_bw_2d3d_kernel(const uint8_t* __restrict__ a, int fmt_a, const uint8_t* __restrict__ b,
                       int fmt_b, const int32_t* __restrict__ offs, int groups,
                       const float* __restrict__ sa, const float* __restrict__ sb,
                       hipfp8_bf16* __restrict__ out, int64_t M, int64_t N, int64_t K) {
  __shared__ float lut_a[256];
  __shared__ float lut_b[256];
  __shared__ float As[BK][BM + LDS_PAD];
  __shared__ float Bs[BK][BN + LDS_PAD];
  bool luts_ready = false;
  const int64_t kbn = (K + BW_BLOCK - 1) / BW_BLOCK;
  const int64_t nbn = (N + BW_BLOCK - 1) / BW_BLOCK;
  const int64_t ntiles_n = (N + BN - 1) / BN;
  int64_t prev = 0, base = 0;
  for (int g = 0; g < groups; ++g) {
    const int64_t m0 = prev;
    const int64_t m1 = clamp_off(offs[g], prev, M);
    prev = m1;
    const int64_t tiles = (m1 - m0 + BM - 1) / BM * ntiles_n;
    const int64_t first = base;
    base += tiles;
    if (tiles == 0) continue;
    int64_t t = first + ((int64_t)blockIdx.x - first % gridDim.x + gridDim.x) % gridDim.x;
    for (; t < first + tiles; t += gridDim.x) {
      const int64_t local = t - first;
      const int64_t r0 = m0 + (local / ntiles_n) * BM;
      const int64_t rows = (m1 - r0 < BM) ? m1 - r0 : BM;
      if (!luts_ready) {  // block-uniform
        fill_luts(fmt_a, fmt_b, lut_a, lut_b);
        __syncthreads();
        luts_ready = true;
      }
      run_tile_bw_2d3d(a, b + (int64_t)g * N * K, sa, sb + (int64_t)g * nbn * kbn, out, r0, rows,
                  (local % ntiles_n) * BN, N, K, lut_a, lut_b, As, Bs);
    }
  }
}

// 2D x 2D: group g reduces over its tokens [o[g-1], o[g]) and owns out[g] (N x K); every
// group, empty or not, has ceil(N/BM) * ceil(K/BN) tiles (an empty one writes zeros). `skip`
// as for grouped_2d2d_kernel.
__global__ void __launch_bounds__(THREADS)
grouped_bw_2d2d_kernel(const uint8_t* __restrict__ a, int fmt_a, const uint8_t* __restrict__ b,
                       int fmt_b, const int32_t* __restrict__ offs, int groups,
                       const float* __restrict__ sa, const float* __restrict__ sb,
                       hipfp8_bf16* __restrict__ out, int64_t N, int64_t Mt, int64_t K,
                       const int32_t* __restrict__ skip) {
  __shared__ float lut_a[256];
  __shared__ float lut_b[256];
  __shared__ float As[BK][BM + LDS_PAD];
  __shared__ float Bs[BK][BN + LDS_PAD];
  bool luts_ready = false;
  const int64_t ntiles_n = (N + BM - 1) / BM;
  const int64_t ntiles_k = (K + BN - 1) / BN;
  const int64_t tiles = ntiles_n * ntiles_k;
  int64_t prev = 0;
  for (int g = 0; g < groups; ++g) {
    const int64_t t0 = prev;
    const int64_t t1 = clamp_off(offs[g], prev, Mt);
    prev = t1;
    if (skip != nullptr && skip[g] != 0) continue;
    const int64_t first = (int64_t)g * tiles;
    int64_t t = first + ((int64_t)blockIdx.x - first % gridDim.x + gridDim.x) % gridDim.x;
    for (; t < first + tiles; t += gridDim.x) {
      const int64_t local = t - first;
      const int64_t row0 = (local / ntiles_k) * BM;
      const int64_t col0 = (local % ntiles_k) * BN;
      BwTile tl;
      tl.a = a + row0 * Mt;
      tl.lda = Mt;
      tl.b = b + col0 * Mt;
      tl.ldb = Mt;
      tl.rows = (N - row0 < BM) ? N - row0 : BM;
      tl.cols = (K - col0 < BN) ? K - col0 : BN;
      tl.lo = t0;
      tl.hi = t1;
      tl.sa = sa + row0;
      tl.sa_qs = N;
      tl.sb = sb + col0;
      tl.sb_qs = K;
      tl.out = out + (int64_t)g * N * K + row0 * K + col0;
      tl.ldo = K;
      if (!luts_ready) {  // block-uniform
        fill_luts(fmt_a, fmt_b, lut_a, lut_b);
        __syncthreads();
        luts_ready = true;
      }
      run_tile_bw(tl, lut_a, lut_b, As, Bs);
    }
  }
}

static_assert(BW_BLOCK % BN == 0 && BW_BLOCK % BK == 0 && BK % LANES == 0, "tile and blocks");

inline bool valid_fmt(int f) { return f >= FMT_E4M3FN && f <= FMT_E5M2FNUZ; }

}  // namespace hipfp8_gg_ref

using namespace hipfp8_gg_ref;

// Enough blocks to fill any current GPU several times over; the kernels loop over tiles.
// (Overridable so the host emulation can exercise the grid-stride loops with few blocks.)
#ifndef HIPFP8_GG_REF_MAX_BLOCKS
#define HIPFP8_GG_REF_MAX_BLOCKS 2048
#endif
static constexpr int64_t REF_MAX_BLOCKS = HIPFP8_GG_REF_MAX_BLOCKS;

static inline unsigned ref_grid(int64_t tiles, int max_blocks) {
  const int64_t cap = max_blocks > 0 ? (int64_t)max_blocks : REF_MAX_BLOCKS;
  return (unsigned)(tiles < cap ? (tiles > 0 ? tiles : 1) : cap);
}

// 2D x 3D: a (M,K) row-major, b (E,K,N) column-major, offs[E] (device), sa[M], sb[E*N],
// out (M,N) bf16 row-major. `skip` may be null; `max_blocks` caps the grid (0 = default).
// Returns 0 or a runtime error code, or
// a HIPFP8_KSTATUS_* (hip/kernel_abi.h) for arguments the Rust layer should have rejected.
HIPFP8_EXTERN int hipfp8_gg_ref_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
                                     const int32_t* offs, int groups, const float* sa,
                                     const float* sb, void* out, int64_t M, int64_t N,
                                     int64_t K, const int32_t* skip, int max_blocks,
                                     hipStream_t stream) noexcept {
  if (!valid_fmt(fmt_a) || !valid_fmt(fmt_b)) return HIPFP8_KSTATUS_INVALID_ENUM;
  if (groups < 0 || M < 0 || N < 0 || K < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (groups == 0 || M == 0 || N == 0) return 0;
  // Upper bound of the tile count whatever the offsets: each group adds at most one partial
  // row tile.
  const int64_t tiles = ((M + BM - 1) / BM + groups) * ((N + BN - 1) / BN);
  const unsigned grid = ref_grid(tiles, max_blocks);
  grouped_2d3d_kernel<<<grid, THREADS, 0, stream>>>(
      a, fmt_a, b, fmt_b, offs, groups, sa, sb, (hipfp8_bf16*)out, M, N, K, skip);
  HIPFP8_RETURN_LAUNCH_STATUS();
}

// 2D x 2D: a (N,Mt) row-major, b (Mt,K) column-major, offs[G] along Mt (device),
// sa[G*N], sb[G*K], out (G,N,K) bf16 row-major. `skip` may be null.
HIPFP8_EXTERN int hipfp8_gg_ref_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
                                     const int32_t* offs, int groups, const float* sa,
                                     const float* sb, void* out, int64_t N, int64_t Mt,
                                     int64_t K, const int32_t* skip, int max_blocks,
                                     hipStream_t stream) noexcept {
  if (!valid_fmt(fmt_a) || !valid_fmt(fmt_b)) return HIPFP8_KSTATUS_INVALID_ENUM;
  if (groups < 0 || N < 0 || Mt < 0 || K < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (groups == 0 || N == 0 || K == 0) return 0;
  const int64_t tiles = (int64_t)groups * ((N + BM - 1) / BM) * ((K + BN - 1) / BN);
  const unsigned grid = ref_grid(tiles, max_blocks);
  grouped_2d2d_kernel<<<grid, THREADS, 0, stream>>>(
      a, fmt_a, b, fmt_b, offs, groups, sa, sb, (hipfp8_bf16*)out, N, Mt, K, skip);
  HIPFP8_RETURN_LAUNCH_STATUS();
}

// Blockwise-scaled 2D x 3D: a (M,K) row-major, b (E,N,K) (`b[g*N*K + j*K + k]`), offs[E]
// (device), sa (M, ceil(K/128)), sb (E, ceil(N/128), ceil(K/128)) row-major, out (M,N) bf16
// row-major; rows past offs[E-1] untouched. `max_blocks` caps the grid (0 = default).
HIPFP8_EXTERN int hipfp8_gg_ref_bw_2d3d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
                                        const int32_t* offs, int groups, const float* sa,
                                        const float* sb, void* out, int64_t M, int64_t N,
                                        int64_t K, int max_blocks, hipStream_t stream) noexcept {
  if (!valid_fmt(fmt_a) || !valid_fmt(fmt_b)) return HIPFP8_KSTATUS_INVALID_ENUM;
  if (groups < 0 || M < 0 || N < 0 || K < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (groups == 0 || M == 0 || N == 0) return 0;
  const int64_t tiles = ((M + BM - 1) / BM + groups) * ((N + BN - 1) / BN);
  const unsigned grid = ref_grid(tiles, max_blocks);
  grouped_bw_2d3d_kernel<<<grid, THREADS, 0, stream>>>(a, fmt_a, b, fmt_b, offs, groups, sa, sb,
                                                       (hipfp8_bf16*)out, M, N, K);
  HIPFP8_RETURN_LAUNCH_STATUS();
}

// Blockwise-scaled 2D x 2D: a (N,Mt) row-major, b (Mt,K) column-major, offs[G] along Mt
// (device), sa (ceil(Mt/128), N), sb (ceil(Mt/128), K) row-major, out (G,N,K) bf16 row-major.
// `skip` may be null; `max_blocks` caps the grid (0 = default).
HIPFP8_EXTERN int hipfp8_gg_ref_bw_2d2d(const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
                                        const int32_t* offs, int groups, const float* sa,
                                        const float* sb, void* out, int64_t N, int64_t Mt,
                                        int64_t K, const int32_t* skip, int max_blocks,
                                        hipStream_t stream) noexcept {
  if (!valid_fmt(fmt_a) || !valid_fmt(fmt_b)) return HIPFP8_KSTATUS_INVALID_ENUM;
  if (groups < 0 || N < 0 || Mt < 0 || K < 0) return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (groups == 0 || N == 0 || K == 0) return 0;
  const int64_t tiles = (int64_t)groups * ((N + BM - 1) / BM) * ((K + BN - 1) / BN);
  const unsigned grid = ref_grid(tiles, max_blocks);
  grouped_bw_2d2d_kernel<<<grid, THREADS, 0, stream>>>(
      a, fmt_a, b, fmt_b, offs, groups, sa, sb, (hipfp8_bf16*)out, N, Mt, K, skip);
  HIPFP8_RETURN_LAUNCH_STATUS();
}
