// route.hip -- the MoE routing ops (docs/OPS.md, "MoE routing"; definitions in
// src/reference/route.rs):
//   dispatch_dual  gather of the routed tokens through the permutation, padding of each expert
//                  group to a multiple of `align` rows, and both grouped-GEMM casts of the
//                  padded matrix (rowwise; per padded group colwise, transposed), without
//                  storing the gathered matrix; with per-slot weights it is the combine's
//                  backward (row = T(w * dout[token])).
//   combine        out[t] = bf16(sum_j w[s] * y[slot_row[s]]), s = t*topk + j
//   combine_bwd_scores  dw[s] = dot(dout[t], y[slot_row[s]]) in a fixed order
// A table kernel (one block) first writes the clamped END offsets (workspace) and the padded
// END offsets (output). The row kernel (persistent grid, a contiguous range of padded rows per
// block, slots and weights resolved once per row) gathers each row with 16-byte loads, keeps
// its first kRegElems elements in registers, writes scale and codes, and merges the column amax
// of those columns per group into scales_col (bits; zeroed by the launcher; atomicMax). The
// column kernel (block per 128-byte column tile x padded group) turns them into column scales,
// then reads the group's rows once, 128 rows per step (four loads in flight per thread), and
// writes the transposed codes through a shared-memory tile; columns past kRegElems get a
// reduce sweep of their own. Combine and score gradient: 16-byte loads along the hidden
// dimension, the reference's summation orders. Every code goes through encode_sw or (finite
// groups) encode4_finite, every scale through amax_to_scale(_nodiv), every f32 operation is
// IEEE-rounded without contraction (mul32/add32): bit-identical to the CPU reference. A !VEC
// instance (row length not a multiple of the vector, misaligned pointers) runs the same code
// with element loads and stores.
#include "../quant/common.h"
#include "../quant/policy.h"
#include "../moe/swiglu.h"
#include "launchers.h"

namespace hipfp8 {
// hipfp8-emu-begin route_kernels (tests/route_emu.rs runs the kernels on the host)
namespace route {

constexpr int kBlock = 256;
constexpr int kTablesBlock = 1024;

// clamped[g] = the clamped END offsets over the m slots; pad[g] = their padded END offsets
// (each group's length rounded up to a multiple of align).
__global__ void __launch_bounds__(kTablesBlock) tables_kernel(const int32_t* offs, int G, int64_t m, int64_t align,
                                                              int32_t* clamped, int32_t* pad) {
  load_clamped_offsets<kTablesBlock>(offs, G, m, clamped);
  __shared__ int64_t scan[kTablesBlock];
  int64_t carry = 0;
  for (int base = 0; base < G; base += kTablesBlock) {
    const int i = base + (int)threadIdx.x;
    int64_t v = 0;
    if (i < G) {
      const int64_t len = (int64_t)clamped[i] - (i ? clamped[i - 1] : 0);
      v = (len + align - 1) / align * align;
    }
    scan[threadIdx.x] = v;
    __syncthreads();
    for (int d = 1; d < kTablesBlock; d <<= 1) {
      const int64_t o = threadIdx.x >= (unsigned)d ? scan[threadIdx.x - d] : 0;
      __syncthreads();
      v += o;
      scan[threadIdx.x] = v;
      __syncthreads();
    }
    if (i < G) pad[i] = (int32_t)(carry + v);
    carry += scan[kTablesBlock - 1];
    __syncthreads();
  }
}

// The routing as the kernels read it: a padded row's slot (or -1) and the slot's row.
template <class In, bool W>
struct RouteSrc {
  typedef typename In::elem E;
  const E* x;
  const float* w;
  const int32_t* perm;
  const int32_t* clamped;
  const int32_t* pad;
  int G;
  int64_t m, k, topk;

  // The slot at padded row p of group g (g < G), -1 for a padding row or an entry of perm
  // outside [0, m).
  __device__ int64_t slot_in(int g, int64_t p) const {
    const int64_t ps = g ? pad[g - 1] : 0;
    const int64_t lo = g ? clamped[g - 1] : 0;
    const int64_t i = p - ps;
    if (i >= (int64_t)clamped[g] - lo) return -1;
    const int64_t s = perm[lo + i];
    return (s >= 0 && s < m) ? s : -1;
  }
  // The slot's weight (1 unweighted; read once per row).
  __device__ float weight(int64_t s) const {
    if constexpr (W) {
      return s >= 0 ? w[s] : 1.0f;
    } else {
      return 1.0f;
    }
  }
  // Chunk i (elements [i*EPV, i*EPV + EPV), i*EPV < k) of slot s's token row as stored: zero
  // past k; all zero for s < 0. VEC: one 16-byte load (k % EPV == 0, x aligned).
  template <bool VEC>
  __device__ uint4 raw(int64_t s, int64_t i) const {
    if (s < 0) return zero4();
    return load_chunk<In, VEC>(x + div_nonneg(s, topk) * k, i, k);
  }
  // Chunk i of raw(s, i) weighted (ws = weight(s)): each element T(ws * x) (one f32 multiply,
  // rounded to the input dtype), lanes past k and every lane of s < 0 left as they are (zero;
  // VEC: none past k).
  template <bool VEC>
  __device__ uint4 weigh(uint4 v, int64_t s, float ws, int64_t i) const {
    if constexpr (W) {
      if (s < 0) return v;
      const int64_t left = k - i * In::EPV;  // lanes past k stay zero (w * 0 may be NaN)
      uint32_t u[4] = {v.x, v.y, v.z, v.w};
      if constexpr (In::EPV == 8) {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          if (VEC || e < left) {
            const uint32_t h = (u[e >> 1] >> (16 * (e & 1))) & 0xFFFFu;
            const uint32_t r = f2u(moe::round_to<true>(moe::mul32(ws, u2f(h << 16)))) >> 16;
            u[e >> 1] = (u[e >> 1] & ~(0xFFFFu << (16 * (e & 1)))) | (r << (16 * (e & 1)));
          }
        }
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (VEC || e < left) u[e] = f2u(moe::mul32(ws, u2f(u[e])));
      }
      v = make_uint4(u[0], u[1], u[2], u[3]);
    }
    return v;
  }
  // Chunk i of slot s's gathered row, weighted: weigh(raw(s, i), s, ws, i).
  template <bool VEC>
  __device__ uint4 chunk(int64_t s, float ws, int64_t i) const {
    return weigh<VEC>(raw<VEC>(s, i), s, ws, i);
  }
};

// Rows per slot look-up of the row kernel (one thread per row resolves its slot).
constexpr int kChunkRows = 16;
// Elements of a row the row kernel keeps in registers (kBlock threads x kRowVpt vectors); it
// also reduces the column amax of these columns (see cols_kernel).
constexpr int64_t kRegElems = 8192;
template <class In>
__host__ __device__ constexpr int row_vpt() {
  return (int)(kRegElems / (kBlock * In::EPV));
}

// Padded rows: block b owns the contiguous rows [b*per, (b+1)*per) (per = ceil(m_cap / grid)),
// in runs of kChunkRows whose slots (and weights, groups) are resolved once per row into
// shared memory, one run ahead (two buffers: run n+1's table is written at the start of run n,
// so the first row of run n+1 can be loaded during run n's last row). Per row: the gathered
// row's first kRegElems elements in registers (row_vpt 16-byte vectors per thread, loaded as
// stored, with bf16 inputs while the previous row is reduced and written; weighted when the
// row's turn comes),
// the rest re-read (L2); block amax; scales[p]; codes from registers; out[p * k + c]. slot_row
// of every routed slot. Each thread also keeps the running column amax of its register-held
// columns over the rows of the current group and merges it into col_amax[g * k + c]
// (scales_col as bits, zeroed by the launcher) by atomicMax when the group changes and at the
// end of its rows: max is order-free, so cols_kernel reads the exact column amax. Then
// slot_row = -1 for the slots at positions past the last group.
template <class In, uint32_t F, bool W, bool VEC>
__global__ void __launch_bounds__(kBlock) rows_kernel(RouteSrc<In, W> src, int64_t m_cap, int32_t* slot_row,
                                                      uint8_t* out, float* scales, uint32_t* col_amax, int pow2,
                                                      int dequant) {
  constexpr int EPV = In::EPV, VPT = row_vpt<In>();
  __shared__ uint32_t red[kBlock / HIPFP8_WAVE];
  __shared__ int64_t s_slot[2][kChunkRows];
  __shared__ float s_w[2][kChunkRows];
  __shared__ int s_grp[2][kChunkRows];
  const int64_t k = src.k, nv = (k + EPV - 1) / EPV;
  const int64_t per = (m_cap + gridDim.x - 1) / gridDim.x;
  const int64_t pb = (int64_t)blockIdx.x * per;
  const int64_t pe = pb + per < m_cap ? pb + per : m_cap;
  uint32_t cam[VPT][EPV];
#pragma unroll
  for (int j = 0; j < VPT; ++j)
#pragma unroll
    for (int e = 0; e < EPV; ++e) cam[j][e] = 0;
  int cg = -1;  // the group cam belongs to (-1: none yet)
  auto flush = [&]() {
    if (cg >= 0 && cg < src.G) {
#pragma unroll
      for (int j = 0; j < VPT; ++j)
#pragma unroll
        for (int e = 0; e < EPV; ++e) {
          const int64_t c = (threadIdx.x + (int64_t)j * kBlock) * EPV + e;
          if (c < k && cam[j][e] != 0) atomicMax(&col_amax[cg * k + c], cam[j][e]);
          cam[j][e] = 0;
        }
    }
  };
  // The slots, weights and groups of the run of rows from p0 (< pe) into table b; slot_row.
  auto resolve = [&](int b, int64_t p0) {
    if ((int)threadIdx.x < kChunkRows && p0 + threadIdx.x < pe) {
      const int64_t p = p0 + threadIdx.x;
      const int g = upper_bound_i32(src.pad, src.G, p);
      const int64_t s = g < src.G ? src.slot_in(g, p) : -1;
      s_slot[b][threadIdx.x] = s;
      s_w[b][threadIdx.x] = src.weight(s);
      s_grp[b][threadIdx.x] = g;
      if (s >= 0) slot_row[s] = (int32_t)p;
    }
  };
  // The held vectors of slot s's row as stored (zero past the row).
  auto load = [&](int64_t s, uint4 (&d)[VPT]) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int64_t i = threadIdx.x + (int64_t)j * kBlock;
      d[j] = i < nv ? src.template raw<VEC>(s, i) : zero4();
    }
  };
  // PF: the next row's held vectors are loaded before this row's block reduction, where the
  // two sets fit the registers (bf16: VPT = 4; f32's 8 + 8 spill on sm_90).
  constexpr bool PF = VPT <= 4;
  uint4 v[VPT], vn[VPT];
  resolve(0, pb);
  __syncthreads();
  if (PF && pb < pe) load(s_slot[0][0], v);
  int b = 0;  // the table of the current run
  for (int64_t p0 = pb; p0 < pe; p0 += kChunkRows, b ^= 1) {
    const int nrows = pe - p0 < kChunkRows ? (int)(pe - p0) : kChunkRows;
    // table b ^ 1's readers (the previous run's rows) are past their block_max barriers
    resolve(b ^ 1, p0 + kChunkRows);
    __syncthreads();
    for (int r = 0; r < nrows; ++r) {
      const int64_t p = p0 + r;
      const int64_t s = s_slot[b][r];
      const float ws = s_w[b][r];
      const int g = s_grp[b][r];
      if constexpr (PF) {
        if (p + 1 < pe) load(r + 1 < nrows ? s_slot[b][r + 1] : s_slot[b ^ 1][0], vn);
      }
      if (g != cg) {
        flush();
        cg = g;
      }
      uint32_t a = 0;
#pragma unroll
      for (int j = 0; j < VPT; ++j) {
        const int64_t i = threadIdx.x + (int64_t)j * kBlock;
        if constexpr (PF) {
          if (i < nv) v[j] = src.template weigh<VEC>(v[j], s, ws, i);
        } else {
          v[j] = i < nv ? src.template chunk<VEC>(s, ws, i) : zero4();
        }
        a = max(a, In::absmax(v[j]));
#pragma unroll
        for (int e = 0; e < EPV; ++e) cam[j][e] = max(cam[j][e], abs_bits(In::get(v[j], e)));
      }
      for (int64_t i = threadIdx.x + (int64_t)VPT * kBlock; i < nv; i += kBlock)
        a = max(a, In::absmax(src.template chunk<VEC>(s, ws, i)));
      a = block_max<kBlock>(a, red);
      const float sc = amax_to_scale_nodiv<F>(a, pow2 != 0);
      uint8_t* orow = out + p * k;
      const bool fin = amax_bits_finite(a);
#pragma unroll
      for (int j = 0; j < VPT; ++j) {
        const int64_t i = threadIdx.x + (int64_t)j * kBlock;
        if (i < nv)
          store_chunk<In, VEC>(orow, i, k, fin ? cast_vec<In, F, true>(v[j], sc) : cast_vec<In, F, false>(v[j], sc));
      }
      for (int64_t i = threadIdx.x + (int64_t)VPT * kBlock; i < nv; i += kBlock) {
        const uint4 u = src.template chunk<VEC>(s, ws, i);
        store_chunk<In, VEC>(orow, i, k, fin ? cast_vec<In, F, true>(u, sc) : cast_vec<In, F, false>(u, sc));
      }
      if (threadIdx.x == 0) scales[p] = dequant ? dequant_scale(sc) : sc;
      if constexpr (PF) {
#pragma unroll
        for (int j = 0; j < VPT; ++j) v[j] = vn[j];
      }
    }
  }
  flush();
  const int64_t routed = src.G ? src.clamped[src.G - 1] : 0;
  for (int64_t j = routed + (int64_t)blockIdx.x * kBlock + threadIdx.x; j < src.m; j += (int64_t)gridDim.x * kBlock) {
    const int64_t s = src.perm[j];
    if (s >= 0 && s < src.m) slot_row[s] = -1;
  }
}

// Column kernel geometry: a tile row is kColLanes 16-byte vectors (128 bytes: 64 bf16 / 32 f32
// columns), a pass kColRows = kBlock / kColLanes rows (one vector per thread), a step NP
// passes (NP * kColRows rows: a thread's NP loads are in flight together; route_col_passes in
// policy.h picks NP).
constexpr int kColLanes = 8;
constexpr int kColRows = kBlock / kColLanes;
// Bytes per column of the transposed tile of a step of NP passes: a multiple of 4 that is 4 mod
// 32 (the byte writes of a pass: at most 2-way bank conflicts; the word reads of the stores:
// none).
__host__ __device__ constexpr int col_tile_stride(int np) { return np * kColRows + 4; }

// Padded groups g < G (and g = G: the tail rows from pad[G-1] to m_cap, zero codes) x column
// tiles: the column scales into scales_col[g * k + c] (from the column amax the row kernel left
// there as bits, or, for columns past kRegElems, from a reduce sweep over the group here), then
// one sweep over the group's rows in steps of NP * kColRows rows aligned to absolute multiples
// of that: slots and weights resolved once per row (shared memory), thread (row, lane) loads
// one 16-byte vector of each of its NP gathered rows (all in flight before the first is used),
// scales and encodes their EPV columns into a transposed tile in shared memory; then each
// column's step of bytes goes out in 4- to 16-byte stores at out_col[c * m_cap + r] (byte
// stores at a group's partial first/last step or where the address is not aligned).
template <class In, uint32_t F, bool W, bool VEC, int NP>
__global__ void __launch_bounds__(kBlock) cols_kernel(RouteSrc<In, W> src, int64_t m_cap, uint8_t* out_col,
                                                      float* scales_col, int pow2, int dequant) {
  constexpr int EPV = In::EPV, COLS = kColLanes * EPV, NW = kBlock / HIPFP8_WAVE;
  constexpr int kStepRows = NP * kColRows, kTileStride = col_tile_stride(NP);
  constexpr int BPT = COLS * kStepRows / kBlock;  // output bytes per thread per step (NP * 8 or NP * 4)
  constexpr int TPC = kStepRows / BPT;            // threads per output column
  constexpr int SW = BPT < 16 ? BPT : 16;         // bytes per store
  static_assert(BPT % 4 == 0, "whole-word column stores");
  __shared__ uint32_t s_red[NW][COLS];
  __shared__ uint32_t s_am[COLS];
  __shared__ float s_sc[COLS];
  __shared__ int64_t s_slot[kStepRows];
  __shared__ float s_w[kStepRows];
  __shared__ uint32_t s_tile32[COLS * kTileStride / 4];
  uint8_t* s_tile = reinterpret_cast<uint8_t*>(s_tile32);
  const int tid = threadIdx.x, q = tid % kColLanes, rr = tid / kColLanes;
  const int64_t k = src.k, nv = (k + EPV - 1) / EPV;
  const int64_t ntiles = (k + COLS - 1) / COLS;
  uint32_t* am_bits = reinterpret_cast<uint32_t*>(scales_col);
  // Resolve the slots and weights of rows [A, A + kStepRows) of group g that lie in [gs, ge).
  auto resolve = [&](int64_t g, int64_t A, int64_t gs, int64_t ge) {
    __syncthreads();
    for (int j = tid; j < kStepRows; j += kBlock) {
      const int64_t r = A + j;
      const int64_t s = (g < src.G && r >= gs && r < ge) ? src.slot_in((int)g, r) : -1;
      s_slot[j] = s;
      s_w[j] = src.weight(s);
    }
    __syncthreads();
  };
  // blockIdx.x = group, blockIdx.y = column tile: the blocks that run together are one column
  // tile of every group, so the topk reads of a token's 128-byte run meet in L2 (one tile of
  // all tokens is t * 128 bytes), whatever the routing order.
  for (int64_t g = blockIdx.x; g <= src.G; g += gridDim.x) {
    const bool group = g < src.G;
    const int64_t gs = g ? src.pad[g - 1] : 0;
    const int64_t ge = group ? src.pad[g] : m_cap;
    for (int64_t t = blockIdx.y; t < ntiles; t += gridDim.y) {
      __syncthreads();  // the previous tile's readers of the shared tables are done
      const int64_t c0 = t * COLS;
      const int64_t i = c0 / EPV + q;  // this thread's vector of a tile row
      const int64_t A0 = gs - gs % kStepRows;
      if (group) {
        uint32_t cam[EPV];
#pragma unroll
        for (int e = 0; e < EPV; ++e) cam[e] = 0;
        if (c0 >= kRegElems) {
          // columns the row kernel did not reduce: a reduce sweep here (the encode sweep below
          // reads the rows again)
          for (int64_t A = A0; A < ge; A += kStepRows) {
            resolve(g, A, gs, ge);
            if (i < nv) {
              uint4 v[NP];
#pragma unroll
              for (int p = 0; p < NP; ++p) {
                const int j = rr + p * kColRows;
                v[p] = src.template chunk<VEC>(s_slot[j], s_w[j], i);
              }
#pragma unroll
              for (int p = 0; p < NP; ++p)
#pragma unroll
                for (int e = 0; e < EPV; ++e) cam[e] = max(cam[e], abs_bits(In::get(v[p], e)));
            }
          }
#pragma unroll
          for (int o = kColLanes; o < HIPFP8_WAVE; o <<= 1)
#pragma unroll
            for (int e = 0; e < EPV; ++e) cam[e] = max(cam[e], (uint32_t)HIPFP8_SHFL_XOR(cam[e], o));
          if (tid % HIPFP8_WAVE < kColLanes)
#pragma unroll
            for (int e = 0; e < EPV; ++e) s_red[tid / HIPFP8_WAVE][q * EPV + e] = cam[e];
          __syncthreads();
        }
        if (tid < COLS) {
          uint32_t a = 0;
          if (c0 >= kRegElems) {
#pragma unroll
            for (int w = 0; w < NW; ++w) a = max(a, s_red[w][tid]);
          } else if (c0 + tid < k) {
            a = am_bits[g * k + c0 + tid];
          }
          const float sc = amax_to_scale<F>(a, pow2 != 0);
          s_am[tid] = a;
          s_sc[tid] = sc;
          if (c0 + tid < k) scales_col[g * k + c0 + tid] = dequant ? dequant_scale(sc) : sc;
        }
        // (resolve's leading barrier publishes s_am / s_sc)
      }
      for (int64_t A = A0; A < ge; A += kStepRows) {
        resolve(g, A, gs, ge);
        if (group) {
          uint4 v[NP];
#pragma unroll
          for (int p = 0; p < NP; ++p) {
            const int j = rr + p * kColRows;
            v[p] = i < nv ? src.template chunk<VEC>(s_slot[j], s_w[j], i) : zero4();
          }
          bool fin = true;
#pragma unroll
          for (int e = 0; e < EPV; ++e) fin = fin && amax_bits_finite(s_am[q * EPV + e]);
#pragma unroll
          for (int p = 0; p < NP; ++p) {
            const int j = rr + p * kColRows;
            float y[EPV];
#pragma unroll
            for (int e = 0; e < EPV; ++e) y[e] = In::get(v[p], e) * s_sc[q * EPV + e];
#pragma unroll
            for (int e4 = 0; e4 < EPV; e4 += 4) {
              const uint32_t c4 = fin ? encode4_finite<F>(y[e4], y[e4 + 1], y[e4 + 2], y[e4 + 3])
                                      : encode4_sw<F>(y[e4], y[e4 + 1], y[e4 + 2], y[e4 + 3]);
#pragma unroll
              for (int e = 0; e < 4; ++e) s_tile[(q * EPV + e4 + e) * kTileStride + j] = (uint8_t)(c4 >> (8 * e));
            }
          }
        } else {
#pragma unroll
          for (int p = 0; p < NP; ++p)
#pragma unroll
            for (int e = 0; e < EPV; ++e) s_tile[(q * EPV + e) * kTileStride + rr + p * kColRows] = 0;
        }
        __syncthreads();
        const int cc = tid / TPC, r0 = (tid % TPC) * BPT;
        const int64_t col = c0 + cc;
        if (col < k) {
          uint32_t wv[BPT / 4];
#pragma unroll
          for (int j = 0; j < BPT / 4; ++j) wv[j] = s_tile32[(cc * kTileStride + r0) / 4 + j];
          uint8_t* dst = out_col + col * m_cap + A + r0;
          const int64_t r = A + r0;
          if (r >= gs && r + BPT <= ge && ((uintptr_t)dst % SW) == 0) {
#pragma unroll
            for (int j = 0; j < BPT / 4; j += SW / 4) {
              if constexpr (SW == 16) {
                *reinterpret_cast<uint4*>(dst + 4 * j) = make_uint4(wv[j], wv[j + 1], wv[j + 2], wv[j + 3]);
              } else if constexpr (SW == 8) {
                *reinterpret_cast<uint2*>(dst + 4 * j) = make_uint2(wv[j], wv[j + 1]);
              } else {
                *reinterpret_cast<uint32_t*>(dst + 4 * j) = wv[j];
              }
            }
          } else {
#pragma unroll
            for (int b = 0; b < BPT; ++b)
              if (r + b >= gs && r + b < ge) dst[b] = (uint8_t)(wv[b / 4] >> (8 * (b % 4)));
          }
        }
      }
    }
  }
}

// Combine: block per token (grid-stride), thread per EPV-column chunk: out[tok * k + c] =
// bf16(0 + sum over j of w[s] * y[rows[s] * k + c]) with s = tok*topk + j in j order (f32,
// each product and sum rounded once), the slot's row chunk read with one 16-byte load (VEC) and
// the EPV results stored at once.
template <class In, bool VEC>
__global__ void __launch_bounds__(kBlock) combine_kernel(const typename In::elem* y, const int32_t* rows,
                                                         const float* w, uint16_t* out, int64_t t, int64_t k,
                                                         int64_t topk, int64_t m_cap) {
  constexpr int EPV = In::EPV;
  const int64_t nv = (k + EPV - 1) / EPV;
  for (int64_t tok = blockIdx.x; tok < t; tok += gridDim.x) {
    for (int64_t i = threadIdx.x; i < nv; i += kBlock) {
      float acc[EPV];
#pragma unroll
      for (int e = 0; e < EPV; ++e) acc[e] = 0.0f;
      for (int64_t s = tok * topk; s < (tok + 1) * topk; ++s) {
        const int64_t r = rows[s];
        if (r >= 0 && r < m_cap) {
          const float ws = w[s];
          const uint4 v = load_chunk<In, VEC>(y + r * k, i, k);
#pragma unroll
          for (int e = 0; e < EPV; ++e) acc[e] = moe::add32(acc[e], moe::mul32(ws, In::get(v, e)));
        }
      }
      uint32_t h[EPV];
#pragma unroll
      for (int e = 0; e < EPV; ++e)
        h[e] = acc[e] != acc[e] ? 0x7FC0u : f2u(moe::round_to<true>(acc[e])) >> 16;
      uint16_t* o = out + tok * k + i * EPV;
      if constexpr (VEC) {
        if constexpr (EPV == 8) {
          *reinterpret_cast<uint4*>(o) = make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16, h[6] | h[7] << 16);
        } else {
          *reinterpret_cast<uint2*>(o) = make_uint2(h[0] | h[1] << 16, h[2] | h[3] << 16);
        }
      } else {
#pragma unroll
        for (int e = 0; e < EPV; ++e)
          if (i * EPV + e < k) o[e] = (uint16_t)h[e];
      }
    }
  }
}

// Lanes of the score-gradient dot product (src/reference/route.rs, DOT_LANES): lane l adds the
// products of columns l, l + 256, ... in order, then lanes are added pairwise.
constexpr int kDotLanes = 256;

// Score gradient: kDotLanes / EPV threads per slot (kBlock / that slots per block), thread ti
// owning lanes [ti*EPV, ti*EPV + EPV): it reads EPV consecutive columns of dout and y with one
// 16-byte load each (VEC), so every lane adds exactly its columns in order (past k the
// zero-filled chunk adds +0, which leaves a sum that started at +0 unchanged); then the pairwise
// tree over the slot's 256 lanes in shared memory, in the reference's order.
template <class In, bool VEC>
__global__ void __launch_bounds__(kBlock) scores_kernel(const typename In::elem* dout, const typename In::elem* y,
                                                        const int32_t* rows, float* dw, int64_t t, int64_t k,
                                                        int64_t topk, int64_t m_cap) {
  constexpr int EPV = In::EPV, TPS = kDotLanes / EPV, SPB = kBlock / TPS;
  __shared__ float lanes[SPB][kDotLanes];
  const int sl = threadIdx.x / TPS, ti = threadIdx.x % TPS;
  const int64_t n = t * topk, nv = (k + EPV - 1) / EPV;
  for (int64_t s0 = (int64_t)blockIdx.x * SPB; s0 < n; s0 += (int64_t)gridDim.x * SPB) {
    const int64_t s = s0 + sl;
    float acc[EPV];
#pragma unroll
    for (int e = 0; e < EPV; ++e) acc[e] = 0.0f;
    if (s < n) {
      const int64_t r = rows[s], tok = div_nonneg(s, topk);
      if (r >= 0 && r < m_cap)
        for (int64_t i = ti; i < nv; i += TPS) {
          const uint4 a = load_chunk<In, VEC>(dout + tok * k, i, k);
          const uint4 b = load_chunk<In, VEC>(y + r * k, i, k);
#pragma unroll
          for (int e = 0; e < EPV; ++e) acc[e] = moe::add32(acc[e], moe::mul32(In::get(a, e), In::get(b, e)));
        }
    }
    __syncthreads();  // the previous round's lane 0 has been read
#pragma unroll
    for (int e = 0; e < EPV; ++e) lanes[sl][ti * EPV + e] = acc[e];
    __syncthreads();
    for (int h = kDotLanes / 2; h > 0; h >>= 1) {
      for (int l = ti; l < h; l += TPS) lanes[sl][l] = moe::add32(lanes[sl][l], lanes[sl][l + h]);
      __syncthreads();
    }
    if (ti == 0 && s < n) dw[s] = lanes[sl][0] != lanes[sl][0] ? u2f(0x7FC00000u) : lanes[sl][0];
  }
}

}  // namespace route
// hipfp8-emu-end route_kernels

namespace route {

inline unsigned grid_of(int64_t n) { return (unsigned)(n < (1 << 20) ? n : (1 << 20)); }

template <class In, uint32_t F, bool W, bool VEC>
int dispatch_vec(const RouteSrc<In, W>& src, int32_t* slot_row, uint8_t* out, float* scales, uint8_t* out_col,
                 float* scales_col, int64_t m_cap, int pow2, int dequant, hipStream_t st) {
  const int64_t G = src.G, k = src.k;
  if (G > 0) {  // the row kernel merges the column amax into scales_col (as bits)
    const hipError_t e = hipMemsetAsync(scales_col, 0, (size_t)(G * k) * sizeof(float), st);
    if (e != hipSuccess) return (int)e;
  }
  if (m_cap > 0) {  // m_cap >= m: the rows cover every slot
    static unsigned long long cache[kResidentDevs];
    const int64_t res = resident_grid(cache, reinterpret_cast<const void*>(rows_kernel<In, F, W, VEC>), kBlock, 0);
    const int64_t runs = (m_cap + kChunkRows - 1) / kChunkRows;
    const unsigned grid = (unsigned)(runs < res ? runs : res);
    rows_kernel<In, F, W, VEC><<<grid, kBlock, 0, st>>>(src, m_cap, slot_row, out, scales,
                                                      reinterpret_cast<uint32_t*>(scales_col), pow2, dequant);
    const hipError_t e = hipGetLastError();
    if (e != hipSuccess) return (int)e;
  }
  constexpr int64_t cols = kColLanes * In::EPV;
  const int64_t tiles = (k + cols - 1) / cols;
  const dim3 grid(grid_of(G + 1), (unsigned)(tiles < 65535 ? tiles : 65535));
  if (route_col_passes() == 1) {
    cols_kernel<In, F, W, VEC, 1><<<grid, kBlock, 0, st>>>(src, m_cap, out_col, scales_col, pow2, dequant);
  } else {
    cols_kernel<In, F, W, VEC, 4><<<grid, kBlock, 0, st>>>(src, m_cap, out_col, scales_col, pow2, dequant);
  }
  return (int)hipGetLastError();
}

template <class In, uint32_t F, bool W>
int dispatch(const void* x, const float* w, const int32_t* perm, const int32_t* offs, int32_t* pad,
             int32_t* slot_row, uint8_t* out, float* scales, uint8_t* out_col, float* scales_col, int64_t m,
             int64_t k, int64_t topk, int64_t G, int64_t align, int64_t m_cap, int pow2, int dequant, void* ws,
             hipStream_t st) {
  int32_t* clamped = static_cast<int32_t*>(ws);
  if (G > 0) {
    tables_kernel<<<1, kTablesBlock, 0, st>>>(offs, (int)G, m, align, clamped, pad);
    const hipError_t e = hipGetLastError();
    if (e != hipSuccess) return (int)e;
  }
  const RouteSrc<In, W> src{static_cast<const typename In::elem*>(x), w, perm, clamped, pad, (int)G, m, k, topk};
  // 16-byte loads of the token rows, EPV-byte code stores of the padded rows
  const bool vec = k % In::EPV == 0 && (m == 0 || aligned16(x)) && (uintptr_t)out % In::EPV == 0;
  const int rc = vec ? dispatch_vec<In, F, W, true>(src, slot_row, out, scales, out_col, scales_col, m_cap, pow2,
                                                    dequant, st)
                     : dispatch_vec<In, F, W, false>(src, slot_row, out, scales, out_col, scales_col, m_cap, pow2,
                                                     dequant, st);
  const int rc2 = G > 0 ? clear_group_tables(ws, 4 * G, st) : kLaunchOk;
  return rc != kLaunchOk ? rc : rc2;
}

template <class In>
int launch_combine(const void* y, const int32_t* rows, const float* w, uint16_t* out, int64_t t, int64_t k,
                   int64_t topk, int64_t m_cap, hipStream_t st) {
  typedef typename In::elem E;
  const E* yp = static_cast<const E*>(y);
  const bool vec = k % In::EPV == 0 && aligned16(y) && (uintptr_t)out % (2 * In::EPV) == 0;
  if (vec) {
    combine_kernel<In, true><<<grid_of(t), kBlock, 0, st>>>(yp, rows, w, out, t, k, topk, m_cap);
  } else {
    combine_kernel<In, false><<<grid_of(t), kBlock, 0, st>>>(yp, rows, w, out, t, k, topk, m_cap);
  }
  HIPFP8_RETURN_LAUNCH_STATUS();
}

template <class In>
int launch_scores(const void* dout, const void* y, const int32_t* rows, float* dw, int64_t t, int64_t k,
                  int64_t topk, int64_t m_cap, hipStream_t st) {
  typedef typename In::elem E;
  const E *dp = static_cast<const E*>(dout), *yp = static_cast<const E*>(y);
  constexpr int64_t spb = kBlock / (kDotLanes / In::EPV);
  const unsigned grid = grid_of((t * topk + spb - 1) / spb);
  if (k % In::EPV == 0 && aligned16(dout) && aligned16(y)) {
    scores_kernel<In, true><<<grid, kBlock, 0, st>>>(dp, yp, rows, dw, t, k, topk, m_cap);
  } else {
    scores_kernel<In, false><<<grid, kBlock, 0, st>>>(dp, yp, rows, dw, t, k, topk, m_cap);
  }
  HIPFP8_RETURN_LAUNCH_STATUS();
}

}  // namespace route
}  // namespace hipfp8

using namespace hipfp8;
using namespace hipfp8::route;

HIPFP8_EXTERN int hipfp8_moe_route_workspace_bytes(int64_t groups, uint64_t* bytes) noexcept {
  if (!bytes) return kLaunchNull;
  if (groups < 0) return kLaunchBadShape;
  *bytes = 4 * (uint64_t)groups;
  return kLaunchOk;
}

HIPFP8_EXTERN int hipfp8_moe_dispatch_dual_launch(const void* x, const float* weights, const int32_t* perm,
                                                  const int32_t* offs, int32_t* offs_pad, int32_t* slot_row,
                                                  uint8_t* out, float* scales, uint8_t* out_col, float* scales_col,
                                                  int64_t t, int64_t k, int64_t topk, int64_t groups, int64_t align,
                                                  int64_t m_cap, int format, int pow2, int dequant, int in_dtype, void* workspace,
                                                  hipStream_t stream) noexcept {
  if (t < 0 || k <= 0 || topk <= 0 || groups < 0 || align <= 0 || m_cap < 0) return kLaunchBadShape;
  if (groups > 0x7FFFFFFF || m_cap > 0x7FFFFFFF || t > 0x7FFFFFFF / topk) return kLaunchUnsupported;
  const int64_t m = t * topk;
  if (m_cap < m + groups * (align - 1)) return kLaunchBadShape;
  if (m_cap == 0 && groups == 0) return kLaunchOk;
  if (groups > 0 && (!offs || !offs_pad || !scales_col || !workspace)) return kLaunchNull;
  if (m > 0 && (!x || !perm || !slot_row)) return kLaunchNull;
  if (m_cap > 0 && (!out || !scales || !out_col)) return kLaunchNull;
  if (in_dtype == HIPFP8_DTYPE_BF16) {
    if (weights) { HIPFP8_DISPATCH_FMT(format, (dispatch<Bf16In, FMT, true>(x, weights, perm, offs, offs_pad, slot_row, out, scales, out_col, scales_col, m, k, topk, groups, align, m_cap, pow2, dequant, workspace, stream))); }
    HIPFP8_DISPATCH_FMT(format, (dispatch<Bf16In, FMT, false>(x, nullptr, perm, offs, offs_pad, slot_row, out, scales, out_col, scales_col, m, k, topk, groups, align, m_cap, pow2, dequant, workspace, stream)));
  }
  if (in_dtype == HIPFP8_DTYPE_F32) {
    if (weights) { HIPFP8_DISPATCH_FMT(format, (dispatch<F32In, FMT, true>(x, weights, perm, offs, offs_pad, slot_row, out, scales, out_col, scales_col, m, k, topk, groups, align, m_cap, pow2, dequant, workspace, stream))); }
    HIPFP8_DISPATCH_FMT(format, (dispatch<F32In, FMT, false>(x, nullptr, perm, offs, offs_pad, slot_row, out, scales, out_col, scales_col, m, k, topk, groups, align, m_cap, pow2, dequant, workspace, stream)));
  }
  return kLaunchBadEnum;
}

HIPFP8_EXTERN int hipfp8_moe_combine_launch(const void* y, const int32_t* slot_row, const float* weights,
                                            uint16_t* out, int64_t t, int64_t k, int64_t topk, int64_t m_cap,
                                            int in_dtype, hipStream_t stream) noexcept {
  if (t < 0 || k < 0 || topk < 0 || m_cap < 0) return kLaunchBadShape;
  if (topk > 0 && t > INT64_MAX / topk) return kLaunchUnsupported;
  if (t == 0 || k == 0) return kLaunchOk;
  if (!out || (topk > 0 && (!slot_row || !weights)) || (m_cap > 0 && !y)) return kLaunchNull;
  if (in_dtype == HIPFP8_DTYPE_BF16) return launch_combine<Bf16In>(y, slot_row, weights, out, t, k, topk, m_cap, stream);
  if (in_dtype == HIPFP8_DTYPE_F32) return launch_combine<F32In>(y, slot_row, weights, out, t, k, topk, m_cap, stream);
  return kLaunchBadEnum;
}

HIPFP8_EXTERN int hipfp8_moe_combine_bwd_scores_launch(const void* dout, const void* y, const int32_t* slot_row,
                                                       float* dweights, int64_t t, int64_t k, int64_t topk,
                                                       int64_t m_cap, int in_dtype, hipStream_t stream) noexcept {
  if (t < 0 || k < 0 || topk < 0 || m_cap < 0) return kLaunchBadShape;
  if (topk > 0 && t > INT64_MAX / topk) return kLaunchUnsupported;
  const int64_t n = t * topk;
  if (n == 0) return kLaunchOk;
  if (!dweights || !slot_row || (k > 0 && (!dout || (m_cap > 0 && !y)))) return kLaunchNull;
  if (in_dtype == HIPFP8_DTYPE_BF16) return launch_scores<Bf16In>(dout, y, slot_row, dweights, t, k, topk, m_cap, stream);
  if (in_dtype == HIPFP8_DTYPE_F32) return launch_scores<F32In>(dout, y, slot_row, dweights, t, k, topk, m_cap, stream);
  return kLaunchBadEnum;
}
