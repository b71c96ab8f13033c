// casts.hip -- the fused MoE casts (docs/OPS.md, "Fused MoE casts"; definitions in
// src/reference/moe.rs): one launch pair per op, a row kernel (scale per row) and a column
// kernel (scale per column of a group, transposed output), both reading their input through a
// source that computes 8 consecutive columns of a row at once (one 16-byte bf16 / two f32
// vector loads per input where J % 8 == 0 and the inputs are 16-byte aligned, else element
// loads with the tail zeroed):
//   weights_dual   x (E,K,N) column-major = E*N rows of K: rows -> colwise_3d, columns of each
//                  expert's N rows -> rowwise_3d_transpose_rhs
//   act_dual       x (M,K): rows -> rowwise_2d, columns per group -> per_group_colwise
//   swiglu_quant   h = silu(gate) * up computed from gu (M, 2I): the act_dual casts of h; h is
//                  never stored
//   swiglu_bwd     [d_gate | d_up] computed from grad_h and gu (both outputs of one swiglu_bwd
//                  per element): the act_dual casts of it
// Row kernel: one block per row; the row's values (SwiGLU values computed once) stay in
// registers (bf16 values as bf16 bits), amax over the block, codes from registers with 8-byte
// stores: the input is read once. Rows longer than the block holds (row_cfg: 512 threads x 4
// chunks of 8 = 16384 columns plain, 256 threads x 2 / x 1 chunks for swiglu / swiglu_bwd)
// compute the rest again for the codes (a second read of that part, from the cache).
// Column kernel: a block takes 64 source columns (each row's 64 columns one contiguous 128-byte
// bf16 / 256-byte f32 run) x a sub-tile of 32 runs of RPT rows (RPT = 16 bf16 / 8 f32 plain, 4
// for the SwiGLU sources); a thread holds its RPT rows x 8 columns in registers and stores RPT
// code bytes per column (the transpose happens in registers). A group within one sub-tile is
// read once; a taller one is reduced over all its sub-tiles, then the codes of the last come
// from registers and the others are read (and computed) again, last first: twice for those.
// Where the row fits the row kernel's registers (fused_cols) the launch takes the fused pass
// instead: the row kernel takes contiguous row ranges and also merges each group's column amax
// (atomicMax on the f32 bits of the column scales output), a codes kernel deals each group's
// sub-tiles to several blocks and reads each once, a scales kernel turns the bits into scales:
// every element read twice in all, no block walking a group in series. col_kernel stays for
// longer rows and HIPFP8_MOE_COL_SPLIT=0.
// Every code goes through encode_sw (or encode4_finite, the same bits for finite inputs), every
// scale through amax_to_scale: bit-identical to the CPU reference. The scale outputs hold the
// forward scale s (codes = encode(x * s)) or, with `dequant`, the grouped GEMMs' dequant scale
// dequant_scale(s) = 1 / s; the codes are the same either way.
// Grouped launches first clamp the device offsets into the zeroed workspace
// (launch_group_tables), and zero it again after.
#include "../quant/common.h"
#include "../quant/policy.h"
#include "../quant/selftest.h"
#include "launchers.h"
#include "swiglu.h"

namespace hipfp8 {
// hipfp8-emu-begin moe_kernels (tests/moe_emu.rs runs the kernels on the host)
namespace moe {

constexpr int kChunk = 8;           // source columns per chunk: one 16-byte bf16 vector, two f32 vectors
constexpr int kBlock = 256;         // column kernel block
constexpr int kColChunks = 8;       // chunks across a column tile: 64 source columns (128 B bf16 rows)
constexpr int kColTile = kChunk * kColChunks;
constexpr int kColRowGroups = kBlock / kColChunks;  // 32 runs of RPT rows per sub-tile

// Bits of one chunk of 8 input-dtype values: 4 words (bf16, two per word, element 0 in the low
// half) or 8 words (f32). The SwiGLU values are rounded to the input dtype (swiglu.h), so the
// bf16 ones are held exactly as bf16 bits as well.
template <class In>
struct Pk {
  static constexpr bool BF16 = sizeof(typename In::elem) == 2;
  static constexpr int W = BF16 ? 4 : 8;
  static __device__ inline uint32_t abs_at(const uint32_t* w, int e) {
    if constexpr (BF16) {
      return ((e & 1) ? w[e >> 1] & 0xFFFF0000u : w[e >> 1] << 16) & 0x7FFFFFFFu;
    } else {
      return w[e] & 0x7FFFFFFFu;
    }
  }
  static __device__ inline float get(const uint32_t* w, int e) {
    if constexpr (BF16) {
      return u2f((e & 1) ? w[e >> 1] & 0xFFFF0000u : w[e >> 1] << 16);
    } else {
      return u2f(w[e]);
    }
  }
  static __device__ inline void zero(uint32_t* w) {
#pragma unroll
    for (int i = 0; i < W; ++i) w[i] = 0;
  }
  // w zeroed before: element e = x (a value of the input dtype)
  static __device__ inline void put(uint32_t* w, int e, float x) {
    if constexpr (BF16) {
      w[e >> 1] |= (f2u(x) >> 16) << (16 * (e & 1));
    } else {
      w[e] = f2u(x);
    }
  }
  // Elements p[0 .. min(n, 8)) (zero past n). VEC: n >= 8 and p 16-byte aligned: 16-byte loads.
  template <bool VEC>
  static __device__ inline void load(const typename In::elem* p, int64_t n, uint32_t* w) {
    if constexpr (VEC) {
      const uint4 a = HIPFP8_LDG(reinterpret_cast<const uint4*>(p));
      w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w;
      if constexpr (!BF16) {
        const uint4 b = HIPFP8_LDG(reinterpret_cast<const uint4*>(p) + 1);
        w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
      }
    } else {
      zero(w);
#pragma unroll
      for (int e = 0; e < kChunk; ++e) {
        if (e < n) {
          if constexpr (BF16) {
            w[e >> 1] |= (uint32_t)reinterpret_cast<const uint16_t*>(p)[e] << (16 * (e & 1));
          } else {
            w[e] = f2u(reinterpret_cast<const float*>(p)[e]);
          }
        }
      }
    }
  }
};

// Sources: S::J source columns per row, S::NOUT outputs per source column (output column
// o * J + j of a row of K = NOUT * J); chunk<VEC>(r, j0, w) computes the values of source columns
// [j0, j0 + 8) of row r (zero past J) into w[NOUT][W], each exactly once. VEC: J % 8 == 0 and
// the inputs 16-byte aligned (aligned()).

// x[r * J + j] as read; with x1 set, two weights stacked along n per expert: row r = e * (n0 +
// n1) + i is x's row e * n0 + i (i < n0) or x1's row e * n1 + i - n0.
template <class In_>
struct PlainSrc {
  typedef In_ In;
  static constexpr int NOUT = 1;
  static constexpr bool COMPUTED = false;
  const typename In::elem* x;
  int64_t J;
  const typename In::elem* x1;  // null: one input
  int64_t n0, n1;
  __device__ inline const typename In::elem* row(int64_t r) const {
    if (!x1) return x + r * J;
    const int64_t n = n0 + n1;
    const int64_t e = div_nonneg(r, n);
    const int64_t i = r - e * n;
    return i < n0 ? x + (e * n0 + i) * J : x1 + (e * n1 + i - n0) * J;
  }
  template <bool VEC>
  __device__ inline void chunk(int64_t r, int64_t j0, uint32_t (*w)[Pk<In>::W]) const {
    Pk<In>::template load<VEC>(row(r) + j0, J - j0, w[0]);
  }
  bool aligned() const { return aligned16(x) && (!x1 || aligned16(x1)); }
};

// h[r, j] of gu (rows of 2I): swiglu_h(gate, up).
template <class In_>
struct SwigluSrc {
  typedef In_ In;
  static constexpr int NOUT = 1;
  static constexpr bool COMPUTED = true;
  const typename In::elem* gu;
  int64_t J;  // I
  template <bool VEC>
  __device__ inline void chunk(int64_t r, int64_t j0, uint32_t (*w)[Pk<In>::W]) const {
    constexpr int W = Pk<In>::W;
    uint32_t g[W], u[W];
    const typename In::elem* p = gu + r * 2 * J + j0;
    const int64_t n = J - j0;
    Pk<In>::template load<VEC>(p, n, g);
    Pk<In>::template load<VEC>(p + J, n, u);
    Pk<In>::zero(w[0]);
#pragma unroll
    for (int e = 0; e < kChunk; ++e)
      if (VEC || e < n) Pk<In>::put(w[0], e, swiglu_h<Pk<In>::BF16>(Pk<In>::get(g, e), Pk<In>::get(u, e)));
  }
  bool aligned() const { return aligned16(gu); }
};

// [d_gate | d_up][r, c] (rows of 2I) from grad_h (rows of I) and gu: output 0 = d_gate, 1 = d_up.
template <class In_>
struct SwigluBwdSrc {
  typedef In_ In;
  static constexpr int NOUT = 2;
  static constexpr bool COMPUTED = true;
  const typename In::elem* dh;
  const typename In::elem* gu;
  int64_t J;  // I
  template <bool VEC>
  __device__ inline void chunk(int64_t r, int64_t j0, uint32_t (*w)[Pk<In>::W]) const {
    constexpr int W = Pk<In>::W;
    uint32_t d[W], g[W], u[W];
    const typename In::elem* p = gu + r * 2 * J + j0;
    const int64_t n = J - j0;
    Pk<In>::template load<VEC>(dh + r * J + j0, n, d);
    Pk<In>::template load<VEC>(p, n, g);
    Pk<In>::template load<VEC>(p + J, n, u);
    Pk<In>::zero(w[0]);
    Pk<In>::zero(w[1]);
#pragma unroll
    for (int e = 0; e < kChunk; ++e) {
      if (VEC || e < n) {
        float dg, du;
        swiglu_bwd<Pk<In>::BF16>(Pk<In>::get(d, e), Pk<In>::get(g, e), Pk<In>::get(u, e), dg, du);
        Pk<In>::put(w[0], e, dg);
        Pk<In>::put(w[1], e, du);
      }
    }
  }
  bool aligned() const { return aligned16(dh) && aligned16(gu); }
};

// Whether a launch of source `s` (row output `out`) takes the vector kernels (16-byte loads,
// 8-byte row stores; the column stores test their own alignment).
template <class S>
inline bool vec_ok(const S& s, const void* out) {
  return s.J % kChunk == 0 && s.aligned() && ((uintptr_t)out & 7u) == 0;
}

// Codes of 4 values, finite group amax (FIN) or any.
template <uint32_t F, bool FIN>
__device__ inline uint32_t enc4(float a, float b, float c, float d) {
  if constexpr (FIN) {
    return encode4_finite<F>(a, b, c, d);
  } else {
    return encode4_sw<F>(a, b, c, d);
  }
}

// ---------------------------------------------------------------------------------- rows
// Row kernel: one block per row at a time (grid-stride); thread t holds chunks t, t + BLOCK, ...
// (VPT of them) of the row in registers, computed once; the amax over the block; codes from
// registers (8-byte stores). Chunks past VPT * BLOCK (rows longer than the register budget) are
// computed again for the codes (their inputs re-read, from the cache).
template <class S>
struct RowVpt {  // 4 chunks (plain), 2 (SwiGLU: fewer inlined copies of its arithmetic), 1 (bwd)
  static constexpr int value = S::COMPUTED ? 2 / S::NOUT : 4;
};
constexpr int kRowBlocks[4] = {64, 128, 256, 512};
// Chunks of a row the largest row instance holds in registers.
template <class S>
inline int64_t row_hold() {
  return (int64_t)RowVpt<S>::value * kRowBlocks[S::COMPUTED ? 2 : 3];
}
// Smallest block whose registers hold the row's chunks (the largest re-reads the rest). The
// SwiGLU sources stop at 256 threads: a 512-thread block caps the registers at 128 on NVIDIA,
// where the f64 division's out-of-line path then spills.
template <class S>
inline int row_cfg(int64_t nch) {
  constexpr int V = RowVpt<S>::value;
  constexpr int LAST = S::COMPUTED ? 2 : 3;
  for (int i = 0; i < LAST; ++i)
    if (nch <= (int64_t)kRowBlocks[i] * V) return i;
  return LAST;
}

template <uint32_t F, class S, int BLOCK, int VPT, bool VEC, bool FIN>
__device__ inline void row_emit(const S& src, int64_t r, uint32_t (*v)[S::NOUT][Pk<typename S::In>::W],
                                int64_t nch, uint8_t* orow, float s) {
  typedef typename S::In In;
  constexpr int W = Pk<In>::W;
  const int64_t J = src.J;
  auto emit = [&](int64_t i, uint32_t (*w)[W]) {
#pragma unroll
    for (int o = 0; o < S::NOUT; ++o) {
      const uint32_t* x = w[o];
      uint32_t c0 = enc4<F, FIN>(Pk<In>::get(x, 0) * s, Pk<In>::get(x, 1) * s, Pk<In>::get(x, 2) * s, Pk<In>::get(x, 3) * s);
      uint32_t c1 = enc4<F, FIN>(Pk<In>::get(x, 4) * s, Pk<In>::get(x, 5) * s, Pk<In>::get(x, 6) * s, Pk<In>::get(x, 7) * s);
      uint8_t* d = orow + o * J + i * kChunk;
      if constexpr (VEC) {
        *reinterpret_cast<uint2*>(d) = make_uint2(c0, c1);
      } else {
        const int64_t n = J - i * kChunk;
#pragma unroll
        for (int e = 0; e < kChunk; ++e)
          if (e < n) d[e] = (uint8_t)((e < 4 ? c0 : c1) >> (8 * (e & 3)));
      }
    }
  };
#pragma unroll
  for (int q = 0; q < VPT; ++q) {
    const int64_t i = threadIdx.x + (int64_t)q * BLOCK;
    if (i < nch) emit(i, v[q]);
  }
  for (int64_t i = threadIdx.x + (int64_t)VPT * BLOCK; i < nch; i += BLOCK) {
    uint32_t w[S::NOUT][W];
    src.template chunk<VEC>(r, i * kChunk, w);
    emit(i, w);
  }
}

// The column amax a fused row pass merges (row_kernel with CAM): group g of a row r is
// [clamped[g-1], clamped[g]) (rows past the last END offset belong to none: g = G), or with
// `clamped` null the uniform groups of group_rows rows; amax[g * K + c] holds the bits of the
// group's |max| of output column c (zeroed before the launch, merged by atomicMax: order-free).
struct ColAmax {
  const int32_t* clamped;
  int64_t group_rows, G;
  uint32_t* amax;
  __device__ inline int64_t group_of(int64_t r) const {  // first g with END offset > r
    return clamped ? upper_bound_i32(clamped, (int)G, r) : r / group_rows;
  }
  // the group of row r, from that of an earlier row
  __device__ inline int64_t advance(int64_t g, int64_t r) const {
    if (!clamped) return r / group_rows;
    while (g < G && r >= (int64_t)clamped[g]) ++g;
    return g;
  }
};

// Rows r of K = NOUT * J output elements: scales[r] over the row, out[r * K + c].
// CAM (the grouped casts' fused column amax; the launcher takes it only where the whole row
// fits the registers, nch <= VPT * BLOCK): each block takes a contiguous range of rows and
// keeps the |max| of every column it holds, per group, merged into ca.amax when the group
// changes and at the end (one atomicMax per column per group a block touches).
template <uint32_t F, class S, int BLOCK, int VPT, bool VEC, bool CAM>
__global__ void __launch_bounds__(BLOCK) row_kernel(S src, int64_t rows, uint8_t* out, float* scales, int pow2,
                                                    int dequant, ColAmax ca) {
  typedef typename S::In In;
  constexpr int W = Pk<In>::W, NO = S::NOUT;
  __shared__ uint32_t red[BLOCK / HIPFP8_WAVE];
  const int64_t J = src.J, K = NO * J;
  const int64_t nch = (J + kChunk - 1) / kChunk;
  int64_t r0 = blockIdx.x, r1 = rows, step = gridDim.x;
  if constexpr (CAM) {
    const int64_t per = (rows + gridDim.x - 1) / gridDim.x;
    r0 = (int64_t)blockIdx.x * per;
    r1 = r0 + per < rows ? r0 + per : rows;
    step = 1;
  }
  uint32_t cam[CAM ? VPT : 1][NO][kChunk];
#pragma unroll
  for (int q = 0; q < (CAM ? VPT : 1); ++q)
#pragma unroll
    for (int o = 0; o < NO; ++o)
#pragma unroll
      for (int e = 0; e < kChunk; ++e) cam[q][o][e] = 0;
  int64_t cg = CAM && r0 < r1 ? ca.group_of(r0) : 0;
  auto flush = [&]() {
    if (cg >= ca.G) return;
#pragma unroll
    for (int q = 0; q < (CAM ? VPT : 1); ++q)
#pragma unroll
      for (int o = 0; o < NO; ++o)
#pragma unroll
        for (int e = 0; e < kChunk; ++e) {
          const int64_t j = (threadIdx.x + (int64_t)q * BLOCK) * kChunk + e;
          if (j < J && cam[q][o][e] != 0) atomicMax(&ca.amax[cg * K + o * J + j], cam[q][o][e]);
          cam[q][o][e] = 0;
        }
  };
  // the held chunks of row r into d (zero past the row)
  auto load = [&](int64_t r, uint32_t (*d)[NO][W]) {
#pragma unroll
    for (int q = 0; q < VPT; ++q) {
      const int64_t i = threadIdx.x + (int64_t)q * BLOCK;
      if (i < nch) {
        src.template chunk<VEC>(r, i * kChunk, d[q]);
      } else {
#pragma unroll
        for (int o = 0; o < NO; ++o) Pk<In>::zero(d[q][o]);
      }
    }
  };
  // CAM: the next row of the range is loaded before this one's block reduction (its loads in
  // flight across the barriers)
  uint32_t v[VPT][NO][W], vn[CAM ? VPT : 1][NO][W];
  if constexpr (CAM) {
    if (r0 < r1) load(r0, v);
  }
  for (int64_t r = r0; r < r1; r += step) {
    if constexpr (CAM) {
      const int64_t g = ca.advance(cg, r);
      if (g != cg) {
        flush();
        cg = g;
      }
      if (r + 1 < r1) load(r + 1, vn);
    } else {
      load(r, v);
    }
    uint32_t a = 0;
#pragma unroll
    for (int q = 0; q < VPT; ++q)
#pragma unroll
      for (int o = 0; o < NO; ++o)
#pragma unroll
        for (int e = 0; e < kChunk; ++e) {
          const uint32_t b = Pk<In>::abs_at(v[q][o], e);
          a = max(a, b);
          if constexpr (CAM) cam[q][o][e] = max(cam[q][o][e], b);
        }
    for (int64_t i = threadIdx.x + (int64_t)VPT * BLOCK; i < nch; i += BLOCK) {
      uint32_t w[NO][W];
      src.template chunk<VEC>(r, i * kChunk, w);
#pragma unroll
      for (int o = 0; o < NO; ++o)
#pragma unroll
        for (int e = 0; e < kChunk; ++e) a = max(a, Pk<In>::abs_at(w[o], e));
    }
    a = block_max<BLOCK>(a, red);
    const float s = amax_to_scale<F>(a, pow2 != 0);
    if (threadIdx.x == 0) scales[r] = dequant ? dequant_scale(s) : s;
    uint8_t* orow = out + r * K;
    if (amax_bits_finite(a)) {
      row_emit<F, S, BLOCK, VPT, VEC, true>(src, r, v, nch, orow, s);
    } else {
      row_emit<F, S, BLOCK, VPT, VEC, false>(src, r, v, nch, orow, s);
    }
    if constexpr (CAM) {
#pragma unroll
      for (int q = 0; q < VPT; ++q)
#pragma unroll
        for (int o = 0; o < NO; ++o)
#pragma unroll
          for (int w = 0; w < W; ++w) v[q][o][w] = vn[q][o][w];
    }
  }
  if constexpr (CAM) flush();
}

// ------------------------------------------------------------------------------- columns
// Column groups: group g covers rows [gs, ge) (clamped END offsets, or uniform groups of
// group_rows rows when `clamped` is null); scales[g * K + c] over the group's rows of output
// column c; code of (r, c) at out[c * M + r] (out_ld = M > 0) or, per group, out[gs * K + c *
// (ge - gs) + (r - gs)] (out_ld = 0: the 3D transposed layout).
// Block: 64 source columns (8 chunks across: a row's 64 columns are one contiguous 128-byte bf16
// / 256-byte f32 run) x 32 runs of RPT consecutive rows = a sub-tile of 32 * RPT rows; thread
// (run, chunk) holds its RPT rows x 8 columns (x NOUT outputs) in registers, so after scaling it
// owns RPT consecutive bytes of each of its columns: the transposed stores are RPT-byte vectors
// (no shared-memory round trip). A group of at most one sub-tile (rows aligned to absolute
// RPT-row runs) is read once. A taller group is reduced over all its sub-tiles first, keeps the
// last one in registers and reads the others again, last first (the most recently read, likely
// still in L2), computing the SwiGLU values again.
template <class S>
struct ColRpt {  // rows per thread: 64 registers of values (plain), 4 rows for the SwiGLU sources
  static constexpr int value = S::COMPUTED ? 4 : 32 / (int)sizeof(typename S::In::elem);
};

// Group g of a column launch: its rows [gs, ge), where its codes go (the padded layout's rows
// [ps, ps + ge - gs), written rows [gs, we) in source-row terms) and its sub-tiles: runs of RPT
// rows from row_base (the group's first row in the padded layout, so the RPT-byte stores stay
// aligned there; else absolute RPT boundaries), nsub >= 1 sub-tiles of SUB rows.
struct ColGroup {
  int64_t gs, ge, we, row_base, nsub, ld;
  uint8_t* ob;  // code of (row m, output column c) at ob[c * ld + m]
};

template <int RPT, int SUB>
__device__ inline ColGroup col_group(const int32_t* clamped, const int32_t* pend, int64_t group_rows, int64_t g,
                                     int64_t K, int64_t out_ld, uint8_t* out) {
  ColGroup c;
  if (clamped) {
    c.gs = g ? clamped[g - 1] : 0;
    c.ge = clamped[g];
  } else {
    c.gs = g * group_rows;
    c.ge = c.gs + group_rows;
  }
  const int64_t ps = pend ? (g ? pend[g - 1] : 0) : c.gs;
  c.we = pend ? c.gs + (pend[g] - ps) : c.ge;
  c.row_base = pend ? c.gs : c.gs / RPT * RPT;
  c.nsub = (c.we - c.row_base + SUB - 1) / SUB;
  if (c.nsub < 1) c.nsub = 1;
  c.ld = out_ld ? out_ld : c.ge - c.gs;
  c.ob = out ? (out_ld ? out : out + c.gs * (K - 1)) + (ps - c.gs) : nullptr;
  return c;
}

// Rows rb .. rb + RPT of source columns [j0, j0 + 8) into v (zero outside the group).
template <class S, bool VEC, int RPT>
__device__ inline void col_load(const S& src, const ColGroup& cg, int64_t rb, bool colvalid, int64_t j0,
                                uint32_t (*v)[S::NOUT][Pk<typename S::In>::W]) {
#pragma unroll
  for (int rr = 0; rr < RPT; ++rr) {
    const int64_t m = rb + rr;
    if (colvalid && m >= cg.gs && m < cg.ge) {
      src.template chunk<VEC>(m, j0, v[rr]);
    } else {
#pragma unroll
      for (int o = 0; o < S::NOUT; ++o) Pk<typename S::In>::zero(v[rr][o]);
    }
  }
}

template <class S, int RPT>
__device__ inline void col_amax(uint32_t (*v)[S::NOUT][Pk<typename S::In>::W], uint32_t (*cam)[kChunk]) {
#pragma unroll
  for (int rr = 0; rr < RPT; ++rr)
#pragma unroll
    for (int o = 0; o < S::NOUT; ++o)
#pragma unroll
      for (int e = 0; e < kChunk; ++e) cam[o][e] = max(cam[o][e], Pk<typename S::In>::abs_at(v[rr][o], e));
}

// The block's column amax (thread (rg, cc)'s cam merged over the 32 row groups) into
// red[0][c] for the NC = NOUT * 64 output columns of the tile; ends with a barrier.
template <int NO>
__device__ inline void col_block_amax(uint32_t (*cam)[kChunk], uint32_t (*red)[NO * kColTile], int rg, int cc) {
#pragma unroll
  for (int o = 0; o < NO; ++o)
#pragma unroll
    for (int e = 0; e < kChunk; ++e) red[rg][o * kColTile + cc * kChunk + e] = cam[o][e];
  __syncthreads();
  for (int c = threadIdx.x; c < NO * kColTile; c += kBlock) {
    uint32_t a = red[0][c];
    for (int i = 1; i < kColRowGroups; ++i) a = max(a, red[i][c]);
    red[0][c] = a;
  }
  __syncthreads();
}

// Codes of rows rb .. rb + RPT (in v) with the tile's scales sc / amax bits amx: RPT-byte
// column stores where the run is whole and aligned, byte stores else; padding rows 0x00.
template <uint32_t F, class S, int RPT>
__device__ inline void col_emit(uint32_t (*v)[S::NOUT][Pk<typename S::In>::W], const float* sc, const uint32_t* amx,
                                const ColGroup& cg, int64_t rb, int cc, int64_t j0, int64_t J) {
  typedef typename S::In In;
  if (rb + RPT <= cg.gs || rb >= cg.we) return;
  const bool full = rb >= cg.gs && rb + RPT <= cg.we;
#pragma unroll
  for (int o = 0; o < S::NOUT; ++o) {
#pragma unroll
    for (int e = 0; e < kChunk; ++e) {
      if (j0 + e >= J) continue;
      // the scales stay in shared memory (fewer live registers)
      const float se = sc[o * kColTile + cc * kChunk + e];
      uint32_t q[RPT / 4];
      if (amax_bits_finite(amx[o * kColTile + cc * kChunk + e])) {
#pragma unroll
        for (int k4 = 0; k4 < RPT / 4; ++k4)
          q[k4] = enc4<F, true>(Pk<In>::get(v[4 * k4][o], e) * se, Pk<In>::get(v[4 * k4 + 1][o], e) * se,
                                Pk<In>::get(v[4 * k4 + 2][o], e) * se, Pk<In>::get(v[4 * k4 + 3][o], e) * se);
      } else {
#pragma unroll
        for (int k4 = 0; k4 < RPT / 4; ++k4)
          q[k4] = enc4<F, false>(Pk<In>::get(v[4 * k4][o], e) * se, Pk<In>::get(v[4 * k4 + 1][o], e) * se,
                                 Pk<In>::get(v[4 * k4 + 2][o], e) * se, Pk<In>::get(v[4 * k4 + 3][o], e) * se);
      }
      // padding rows hold 0x00 whatever the scale (a NaN group's too)
      if (rb + RPT > cg.ge) {
#pragma unroll
        for (int rr = 0; rr < RPT; ++rr)
          if (rb + rr >= cg.ge) q[rr >> 2] &= ~(0xFFu << (8 * (rr & 3)));
      }
      uint8_t* d = cg.ob + (o * J + j0 + e) * cg.ld + rb;
      if (full && ((uintptr_t)d & (RPT - 1)) == 0) {
        if constexpr (RPT == 16) {
          *reinterpret_cast<uint4*>(d) = make_uint4(q[0], q[1], q[2], q[3]);
        } else if constexpr (RPT == 8) {
          *reinterpret_cast<uint2*>(d) = make_uint2(q[0], q[1]);
        } else {
          *reinterpret_cast<uint32_t*>(d) = q[0];
        }
      } else {
#pragma unroll
        for (int rr = 0; rr < RPT; ++rr) {
          const int64_t m = rb + rr;
          if (m >= cg.gs && m < cg.we) d[rr] = (uint8_t)(q[rr >> 2] >> (8 * (rr & 3)));
        }
      }
    }
  }
}

// The rows after the last group's padding, [pend[G-1], out_ld), are zeros (16-byte runs: both
// ends are multiples of 16): the tile's columns, by one block.
template <int NC>
__device__ inline void col_tail_zero(const int32_t* pend, int64_t G, int64_t out_ld, uint8_t* out, int64_t jt,
                                     int64_t J) {
  const int64_t t0 = pend[G - 1], tw = (out_ld - t0) / 16;
  for (int64_t idx = threadIdx.x; idx < NC * tw; idx += kBlock) {
    const int c = (int)(idx / tw);
    const int64_t j = jt + c % kColTile;
    if (j < J) {
      uint8_t* d = out + ((c / kColTile) * J + j) * out_ld + t0 + 16 * (idx % tw);
      *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
    }
  }
}

template <uint32_t F, class S, bool VEC>
__global__ void __launch_bounds__(kBlock) col_kernel(S src, const int32_t* clamped, const int32_t* pend,
                                                     int64_t group_rows, int64_t G, int64_t out_ld, uint8_t* out,
                                                     float* scales, int pow2, int dequant) {
  typedef typename S::In In;
  constexpr int W = Pk<In>::W, NO = S::NOUT;
  constexpr int RPT = ColRpt<S>::value;
  constexpr int SUB = kColRowGroups * RPT;
  constexpr int NC = NO * kColTile;  // output columns of the tile
  __shared__ uint32_t red[kColRowGroups][NC];
  __shared__ float sc[NC];
  __shared__ uint32_t amx[NC];
  const int tid = threadIdx.x;
  const int cc = tid % kColChunks, rg = tid / kColChunks;
  const int64_t J = src.J, K = NO * J;
  const int64_t jt = (int64_t)blockIdx.x * kColTile;
  const int64_t j0 = jt + cc * kChunk;
  const bool colvalid = j0 < J;
  for (int64_t g = blockIdx.y; g < G; g += gridDim.y) {
    const ColGroup cg = col_group<RPT, SUB>(clamped, pend, group_rows, g, K, out_ld, out);
    const int64_t nsub = cg.nsub;
    uint32_t v[RPT][NO][W];
    uint32_t cam[NO][kChunk];
#pragma unroll
    for (int o = 0; o < NO; ++o)
#pragma unroll
      for (int e = 0; e < kChunk; ++e) cam[o][e] = 0;
    // Step it < nsub: sub-tile it (amax); step it >= nsub - 1: codes of sub-tile 2 nsub - 2 - it
    // (the last one from the registers of the amax step). One load site: the source's code is
    // inlined once.
    for (int64_t it = 0; it < 2 * nsub - 1; ++it) {
      const int64_t sub = it < nsub ? it : 2 * nsub - 2 - it;
      const int64_t rb = cg.row_base + sub * SUB + (int64_t)rg * RPT;
      col_load<S, VEC, RPT>(src, cg, rb, colvalid, j0, v);
      if (it < nsub) {
        col_amax<S, RPT>(v, cam);
        if (it != nsub - 1) continue;
        col_block_amax<NO>(cam, red, rg, cc);
        for (int c = tid; c < NC; c += kBlock) {
          const uint32_t a = red[0][c];
          const float sv = amax_to_scale<F>(a, pow2 != 0);
          sc[c] = sv;
          amx[c] = a;
          const int o = c / kColTile;
          const int64_t j = jt + c % kColTile;
          if (j < J) scales[g * K + o * J + j] = dequant ? dequant_scale(sv) : sv;
        }
        __syncthreads();
      }
      if (colvalid) col_emit<F, S, RPT>(v, sc, amx, cg, rb, cc, j0, J);
    }
    if (pend && g == G - 1) col_tail_zero<NC>(pend, G, out_ld, out, jt, J);
  }
}

// The fused column pass: the row kernel (CAM) has merged each group's column amax into
// amax_bits[g * K + c] (the column scales output as bits, zeroed by the launcher);
// col_codes_kernel deals each group's sub-tiles to gridDim.z blocks (sub-tile s, s + gridDim.z,
// ...), reads each once and writes the codes with the scale of that amax, no serial chain per
// group; col_scale_kernel then turns the amax bits into the scales in place. Same bytes as
// col_kernel. RPT rows per thread (at most ColRpt): fewer rows hold fewer registers, so more
// blocks per SM overlap one block's loads with another's encoding and stores.
template <uint32_t F, class S, bool VEC, int RPT>
__global__ void __launch_bounds__(kBlock) col_codes_kernel(S src, const int32_t* clamped, const int32_t* pend,
                                                           int64_t group_rows, int64_t G, int64_t out_ld,
                                                           uint8_t* out, const uint32_t* amax_bits, int pow2) {
  typedef typename S::In In;
  constexpr int W = Pk<In>::W, NO = S::NOUT;
  constexpr int SUB = kColRowGroups * RPT;
  constexpr int NC = NO * kColTile;
  __shared__ float sc[NC];
  __shared__ uint32_t amx[NC];
  const int tid = threadIdx.x;
  const int cc = tid % kColChunks, rg = tid / kColChunks;
  const int64_t J = src.J, K = NO * J;
  const int64_t jt = (int64_t)blockIdx.x * kColTile;
  const int64_t j0 = jt + cc * kChunk;
  const bool colvalid = j0 < J;
  for (int64_t g = blockIdx.y; g < G; g += gridDim.y) {
    const ColGroup cg = col_group<RPT, SUB>(clamped, pend, group_rows, g, K, out_ld, out);
    if (pend && g == G - 1 && blockIdx.z == 0) col_tail_zero<NC>(pend, G, out_ld, out, jt, J);
    if ((int64_t)blockIdx.z >= cg.nsub) continue;
    __syncthreads();  // the previous group's readers of sc / amx are done
    for (int c = tid; c < NC; c += kBlock) {
      const int64_t j = jt + c % kColTile;
      const uint32_t a = j < J ? amax_bits[g * K + (c / kColTile) * J + j] : 0;
      amx[c] = a;
      sc[c] = amax_to_scale<F>(a, pow2 != 0);
    }
    __syncthreads();
    uint32_t v[RPT][NO][W];
    for (int64_t sub = blockIdx.z; colvalid && sub < cg.nsub; sub += gridDim.z) {
      const int64_t rb = cg.row_base + sub * SUB + (int64_t)rg * RPT;
      col_load<S, VEC, RPT>(src, cg, rb, colvalid, j0, v);
      col_emit<F, S, RPT>(v, sc, amx, cg, rb, cc, j0, J);
    }
  }
}

// scales[i] = the scale of amax bits scales[i] (forward, or dequant), in place, i < n.
template <uint32_t F>
__global__ void __launch_bounds__(kBlock) col_scale_kernel(float* scales, int64_t n, int pow2, int dequant) {
  for (int64_t i = (int64_t)blockIdx.x * kBlock + threadIdx.x; i < n; i += (int64_t)gridDim.x * kBlock) {
    const float sv = amax_to_scale<F>(f2u(scales[i]), pow2 != 0);
    scales[i] = dequant ? dequant_scale(sv) : sv;
  }
}

// f(integral constant R) with col_codes_kernel's rows per thread: `want` (4, 8 or 16; other
// values 8), at most ColRpt<S>.
template <class S, class Fn>
inline void with_codes_rpt(int want, Fn&& f) {
  const int w = want == 4 || want == 16 ? want : 8;
  const int r = w < ColRpt<S>::value ? w : ColRpt<S>::value;
  with_index<3>(r == 4 ? 0 : r == 8 ? 1 : 2, [&](auto ri) {
    constexpr int R = 4 << decltype(ri)::value;
    if constexpr (R <= ColRpt<S>::value) f(std::integral_constant<int, R>{});
  });
}

}  // namespace moe
// hipfp8-emu-end moe_kernels

namespace moe {

inline unsigned row_grid(int64_t rows) { return (unsigned)(rows < (1 << 20) ? rows : (1 << 20)); }

// The row kernel's instance for rows of `nch` chunks (row_cfg, vec_ok), with or without the
// fused column amax. Without: a block per row (row_grid). With: 1024 threads' worth of blocks
// per SM (HIPFP8_MOE_ROW_BLOCKS_PER_SM overrides), at most one per row and at most the blocks
// resident at once (a contiguous row range per block: a second wave would be a tail of whole
// ranges). Fewer, longer ranges mean fewer amax merges (one atomicMax per column per group a
// block touches).
template <uint32_t F, class S, bool CAM>
void launch_row_kernel(const S& src, int64_t rows, uint8_t* out, float* scales, int pow2, int dequant,
                       const ColAmax& ca, hipStream_t st) {
  constexpr int V = RowVpt<S>::value;
  const int cfg = row_cfg<S>((src.J + kChunk - 1) / kChunk);
  const bool vec = vec_ok(src, out);
  with_index<S::COMPUTED ? 3 : 4>(cfg, [&](auto ci) {
    constexpr int B = kRowBlocks[decltype(ci)::value];
    auto grid_of = [&](const void* kernel, unsigned long long* cache) {
      if constexpr (CAM) {
        const int k = knob(kKnob_MOE_ROW_BLOCKS_PER_SM);
        int64_t g = (int64_t)(k >= 1 && k <= 64 ? k : 1024 / B) * device_sm_count();
        const int64_t res = resident_grid(cache, kernel, B, 0);
        if (res < g) g = res;
        return (unsigned)(rows < g ? rows : g);
      }
      (void)kernel;
      (void)cache;
      return row_grid(rows);
    };
    static unsigned long long cache_vec[kResidentDevs], cache_el[kResidentDevs];
    if (vec) {
      const unsigned g = grid_of(reinterpret_cast<const void*>(row_kernel<F, S, B, V, true, CAM>), cache_vec);
      row_kernel<F, S, B, V, true, CAM><<<g, B, 0, st>>>(src, rows, out, scales, pow2, dequant, ca);
    } else {
      const unsigned g = grid_of(reinterpret_cast<const void*>(row_kernel<F, S, B, V, false, CAM>), cache_el);
      row_kernel<F, S, B, V, false, CAM><<<g, B, 0, st>>>(src, rows, out, scales, pow2, dequant, ca);
    }
  });
}

template <uint32_t F, class S>
int launch_rows(const S& src, int64_t rows, uint8_t* out, float* scales, int pow2, int dequant, hipStream_t st) {
  if (rows == 0) return kLaunchOk;
  launch_row_kernel<F, S, false>(src, rows, out, scales, pow2, dequant, ColAmax{}, st);
  HIPFP8_RETURN_LAUNCH_STATUS();
}

template <uint32_t F, class S>
int launch_cols(const S& src, const int32_t* clamped, const int32_t* pend, int64_t group_rows, int64_t G,
                int64_t out_ld, uint8_t* out, float* scales, int pow2, int dequant, hipStream_t st) {
  if (G == 0 || src.J == 0) return kLaunchOk;
  const int64_t tiles = (src.J + kColTile - 1) / kColTile;
  if (tiles > 0x7FFFFFFF) return kLaunchUnsupported;
  const dim3 grid((unsigned)tiles, (unsigned)(G < 65535 ? G : 65535));
  if (src.J % kChunk == 0 && src.aligned()) {
    col_kernel<F, S, true><<<grid, kBlock, 0, st>>>(src, clamped, pend, group_rows, G, out_ld, out, scales, pow2,
                                                    dequant);
  } else {
    col_kernel<F, S, false><<<grid, kBlock, 0, st>>>(src, clamped, pend, group_rows, G, out_ld, out, scales, pow2,
                                                     dequant);
  }
  HIPFP8_RETURN_LAUNCH_STATUS();
}

// The fused column pass (row kernel with CAM, col_codes_kernel, col_scale_kernel): each
// element read twice in all (rows, codes) instead of col_kernel's reduce + re-read of groups
// taller than a sub-tile after the row pass (up to three reads), and no block walks a whole group
// in series. Taken where the whole row fits the row kernel's registers (the fused amax keeps
// one maximum per held column) unless HIPFP8_MOE_COL_SPLIT=0.
template <class S>
inline bool fused_cols(int64_t J) {
  return knob(kKnob_MOE_COL_SPLIT) != 0 && (J + kChunk - 1) / kChunk <= row_hold<S>();
}

// Blocks per group of col_codes_kernel: the mean group's sub-tiles, 1 to 64.
template <int RPT>
inline int64_t codes_split(int64_t m, int64_t G) {
  constexpr int64_t SUB = kColRowGroups * RPT;
  const int64_t mean = G ? (m / G + SUB - 1) / SUB : 1;
  return mean < 1 ? 1 : (mean > 64 ? 64 : mean);
}

// Rows and columns of `rows` source rows in G groups (clamped END offsets, or uniform groups of
// group_rows rows): row codes and scales, then the column codes at out_ld (0: the 3D layout) with
// the padded END offsets pend (or none), column scales col_scales[g * K + c].
template <uint32_t F, class S>
int launch_fused(const S& src, int64_t rows, uint8_t* out, float* scales, const int32_t* clamped, int64_t group_rows,
                 int64_t G, const int32_t* pend, int64_t out_ld, uint8_t* col_out, float* col_scales, int pow2,
                 int dequant, hipStream_t st) {
  const int64_t tiles = (src.J + kColTile - 1) / kColTile, n = G * S::NOUT * src.J;
  if (tiles > 0x7FFFFFFF) return kLaunchUnsupported;
  const hipError_t e = hipMemsetAsync(col_scales, 0, (size_t)n * sizeof(float), st);  // the amax bits
  if (e != hipSuccess) return (int)e;
  uint32_t* amax = reinterpret_cast<uint32_t*>(col_scales);
  if (rows > 0)
    launch_row_kernel<F, S, true>(src, rows, out, scales, pow2, dequant, ColAmax{clamped, group_rows, G, amax}, st);
  with_codes_rpt<S>(knob(kKnob_MOE_CODES_RPT), [&](auto ri) {
    constexpr int R = decltype(ri)::value;
    const dim3 grid((unsigned)tiles, (unsigned)(G < 65535 ? G : 65535), (unsigned)codes_split<R>(rows, G));
    if (src.J % kChunk == 0 && src.aligned()) {
      col_codes_kernel<F, S, true, R>
          <<<grid, kBlock, 0, st>>>(src, clamped, pend, group_rows, G, out_ld, col_out, amax, pow2);
    } else {
      col_codes_kernel<F, S, false, R>
          <<<grid, kBlock, 0, st>>>(src, clamped, pend, group_rows, G, out_ld, col_out, amax, pow2);
    }
  });
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  col_scale_kernel<F><<<(unsigned)(blocks < 4096 ? blocks : 4096), kBlock, 0, st>>>(col_scales, n, pow2, dequant);
  HIPFP8_RETURN_LAUNCH_STATUS();
}

// Both casts of `rows` source rows in G groups (arguments as launch_fused's): the fused pass
// where fused_cols takes it, else the row kernel then col_kernel.
template <uint32_t F, class S>
int launch_dual(const S& src, int64_t rows, uint8_t* out, float* scales, const int32_t* clamped, int64_t group_rows,
                int64_t G, const int32_t* pend, int64_t out_ld, uint8_t* col_out, float* col_scales, int pow2,
                int dequant, hipStream_t st) {
  if (fused_cols<S>(src.J))
    return launch_fused<F>(src, rows, out, scales, clamped, group_rows, G, pend, out_ld, col_out, col_scales, pow2,
                           dequant, st);
  const int rc = launch_rows<F>(src, rows, out, scales, pow2, dequant, st);
  if (rc != kLaunchOk) return rc;
  return launch_cols<F>(src, clamped, pend, group_rows, G, out_ld, col_out, col_scales, pow2, dequant, st);
}

// Where a grouped cast writes its columns: out_col (k, m) on the offsets, or with offs_pad the
// padded layout (k, m_cap) whose padded END offsets it writes to offs_pad.
struct ColOut {
  uint8_t* out;
  float* scales;
  int64_t m_cap;
  int32_t* offs_pad;
};

// The grouped casts of `src` (m rows of k): rows and columns per clamped group (fused, or the
// row kernel then col_kernel), with the workspace zeroed again at the end.
template <uint32_t F, class S>
int launch_grouped(const S& src, const int32_t* offs, int64_t m, int64_t G, uint8_t* out, float* scales,
                   ColOut col, int pow2, int dequant, void* ws, hipStream_t st) {
  if (G == 0) return launch_rows<F>(src, m, out, scales, pow2, dequant, st);
  int32_t* clamped = static_cast<int32_t*>(ws);
  int rc = launch_group_tables(offs, G, m, clamped, col.offs_pad, st);
  if (rc != kLaunchOk) return rc;
  const int64_t ld = col.offs_pad ? col.m_cap : m;
  rc = launch_dual<F>(src, m, out, scales, clamped, 0, G, col.offs_pad, ld, col.out, col.scales, pow2, dequant, st);
  const int rc2 = clear_group_tables(ws, 4 * group_tables_words(G), st);
  return rc != kLaunchOk ? rc : rc2;
}

// Argument checks shared by the grouped launchers; kLaunchOk + 1 = valid, nothing to do.
// With offs_pad (the padded column layout): m_cap a multiple of 16, at least m + 15*G, at most
// 2^31 - 1 rows, and out_col always written (the rows past the last group are zeros).
inline int check_grouped(int64_t m, int64_t k, int64_t G, const void* in, const int32_t* offs, const void* out,
                         const void* scales, const void* out_col, const void* scales_col, int64_t m_cap,
                         const int32_t* offs_pad, const void* ws) {
  if (m < 0 || k <= 0 || G < 0) return kLaunchBadShape;
  if (G > 0x7FFFFFFF) return kLaunchUnsupported;
  if (offs_pad && (m_cap % 16 != 0 || m_cap > 0x7FFFFFFF || m > m_cap || (m_cap - m) / 15 < G))
    return kLaunchBadShape;
  if (m == 0 && G == 0) return kLaunchOk + 1;
  if (G > 0 && (!offs || !scales_col || !ws || ((m > 0 || offs_pad) && !out_col))) return kLaunchNull;
  if (m > 0 && (!in || !out || !scales)) return kLaunchNull;
  return kLaunchOk;
}

}  // namespace moe
}  // namespace hipfp8

using namespace hipfp8;
using namespace hipfp8::moe;

HIPFP8_EXTERN int hipfp8_moe_workspace_bytes(int64_t groups, uint64_t* bytes) noexcept {
  if (!bytes) return kLaunchNull;
  if (groups < 0) return kLaunchBadShape;
  *bytes = 4 * (uint64_t)group_tables_words(groups);
  return kLaunchOk;
}

// x (E,K,N) or, with x1, x (E,K,n0) and x1 (E,K,N-n0) stacked along n per expert.
template <class In, uint32_t F>
static int weights_dual(const void* x, const void* x1, int64_t n0, uint8_t* out, float* scales, uint8_t* out_t,
                        float* scales_t, int64_t e, int64_t k, int64_t n, int pow2, int dequant, hipStream_t st) {
  typedef typename In::elem E;
  const PlainSrc<In> src{static_cast<const E*>(x), k, static_cast<const E*>(x1), n0, n - n0};
  return launch_dual<F>(src, e * n, out, scales, nullptr, n, e, nullptr, 0, out_t, scales_t, pow2, dequant, st);
}

static int weights_dual_any(const void* x, const void* x1, int64_t n0, uint8_t* out, float* scales, uint8_t* out_t,
                            float* scales_t, int64_t e, int64_t k, int64_t n, int format, int pow2, int dequant,
                            int in_dtype, hipStream_t stream) {
  const uint32_t fmt = (uint32_t)format;
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (weights_dual<Bf16In, FMT>(x, x1, n0, out, scales, out_t, scales_t, e, k, n, pow2, dequant, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (weights_dual<F32In, FMT>(x, x1, n0, out, scales, out_t, scales_t, e, k, n, pow2, dequant, stream))); }
  return kLaunchBadEnum;
}

HIPFP8_EXTERN int hipfp8_moe_weights_dual_launch(const void* x, uint8_t* out, float* scales, uint8_t* out_t,
                                                 float* scales_t, int64_t e, int64_t k, int64_t n, int format,
                                                 int pow2, int dequant, int in_dtype, hipStream_t stream) noexcept {
  if (e < 0 || k < 0 || n < 0) return kLaunchBadShape;
  if (e == 0) return kLaunchOk;
  if (k == 0 || n == 0) return kLaunchBadShape;
  if (!x || !out || !scales || !out_t || !scales_t) return kLaunchNull;
  return weights_dual_any(x, nullptr, n, out, scales, out_t, scales_t, e, k, n, format, pow2, dequant, in_dtype,
                          stream);
}

HIPFP8_EXTERN int hipfp8_moe_weights_dual_pair_launch(const void* x0, const void* x1, uint8_t* out, float* scales,
                                                      uint8_t* out_t, float* scales_t, int64_t e, int64_t k,
                                                      int64_t n0, int64_t n1, int format, int pow2, int dequant,
                                                      int in_dtype, hipStream_t stream) noexcept {
  if (e < 0 || k < 0 || n0 < 0 || n1 < 0) return kLaunchBadShape;
  if (e == 0) return kLaunchOk;
  if (k == 0 || n0 == 0 || n1 == 0) return kLaunchBadShape;
  if (!x0 || !x1 || !out || !scales || !out_t || !scales_t) return kLaunchNull;
  return weights_dual_any(x0, x1, n0, out, scales, out_t, scales_t, e, k, n0 + n1, format, pow2, dequant, in_dtype,
                          stream);
}

template <class In, uint32_t F>
static int act_dual(const void* x, const int32_t* offs, uint8_t* out, float* scales, ColOut col, int64_t m,
                    int64_t k, int64_t G, int pow2, int dequant, void* ws, hipStream_t st) {
  const PlainSrc<In> src{static_cast<const typename In::elem*>(x), k};
  return launch_grouped<F>(src, offs, m, G, out, scales, col, pow2, dequant, ws, st);
}

HIPFP8_EXTERN int hipfp8_moe_act_dual_launch(const void* x, const int32_t* offs, uint8_t* out, float* scales,
                                             uint8_t* out_col, float* scales_col, int64_t m_cap, int32_t* offs_pad,
                                             int64_t m, int64_t k, int64_t groups, int format, int pow2, int dequant,
                                             int in_dtype, void* workspace, hipStream_t stream) noexcept {
  const int chk = check_grouped(m, k, groups, x, offs, out, scales, out_col, scales_col, m_cap, offs_pad, workspace);
  if (chk != kLaunchOk) return chk == kLaunchOk + 1 ? kLaunchOk : chk;
  const uint32_t fmt = (uint32_t)format;
  const ColOut col{out_col, scales_col, m_cap, offs_pad};
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (act_dual<Bf16In, FMT>(x, offs, out, scales, col, m, k, groups, pow2, dequant, workspace, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (act_dual<F32In, FMT>(x, offs, out, scales, col, m, k, groups, pow2, dequant, workspace, stream))); }
  return kLaunchBadEnum;
}

template <class In, uint32_t F>
static int swiglu_quant(const void* gu, const int32_t* offs, uint8_t* out, float* scales, ColOut col, int64_t m,
                        int64_t i, int64_t G, int pow2, int dequant, void* ws, hipStream_t st) {
  const SwigluSrc<In> src{static_cast<const typename In::elem*>(gu), i};
  return launch_grouped<F>(src, offs, m, G, out, scales, col, pow2, dequant, ws, st);
}

HIPFP8_EXTERN int hipfp8_moe_swiglu_quant_launch(const void* gu, const int32_t* offs, uint8_t* out, float* scales,
                                                 uint8_t* out_col, float* scales_col, int64_t m_cap,
                                                 int32_t* offs_pad, int64_t m, int64_t i, int64_t groups, int format,
                                                 int pow2, int dequant, int in_dtype, void* workspace,
                                                 hipStream_t stream) noexcept {
  const int chk = check_grouped(m, i, groups, gu, offs, out, scales, out_col, scales_col, m_cap, offs_pad, workspace);
  if (chk != kLaunchOk) return chk == kLaunchOk + 1 ? kLaunchOk : chk;
  const uint32_t fmt = (uint32_t)format;
  const ColOut col{out_col, scales_col, m_cap, offs_pad};
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (swiglu_quant<Bf16In, FMT>(gu, offs, out, scales, col, m, i, groups, pow2, dequant, workspace, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (swiglu_quant<F32In, FMT>(gu, offs, out, scales, col, m, i, groups, pow2, dequant, workspace, stream))); }
  return kLaunchBadEnum;
}

template <class In, uint32_t F>
static int swiglu_bwd_quant(const void* dh, const void* gu, const int32_t* offs, uint8_t* out, float* scales,
                            ColOut col, int64_t m, int64_t i, int64_t G, int pow2, int dequant, void* ws,
                            hipStream_t st) {
  typedef typename In::elem E;
  const SwigluBwdSrc<In> src{static_cast<const E*>(dh), static_cast<const E*>(gu), i};
  return launch_grouped<F>(src, offs, m, G, out, scales, col, pow2, dequant, ws, st);
}

HIPFP8_EXTERN int hipfp8_moe_swiglu_bwd_quant_launch(const void* grad_h, const void* gu, const int32_t* offs,
                                                     uint8_t* out, float* scales, uint8_t* out_col, float* scales_col,
                                                     int64_t m_cap, int32_t* offs_pad, int64_t m, int64_t i,
                                                     int64_t groups, int format, int pow2, int dequant, int in_dtype,
                                                     void* workspace, hipStream_t stream) noexcept {
  if (i > (int64_t(1) << 61)) return kLaunchBadShape;
  const int chk =
      check_grouped(m, 2 * i, groups, gu, offs, out, scales, out_col, scales_col, m_cap, offs_pad, workspace);
  if (chk != kLaunchOk) return chk == kLaunchOk + 1 ? kLaunchOk : chk;
  if (m > 0 && !grad_h) return kLaunchNull;
  const uint32_t fmt = (uint32_t)format;
  const ColOut col{out_col, scales_col, m_cap, offs_pad};
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (swiglu_bwd_quant<Bf16In, FMT>(grad_h, gu, offs, out, scales, col, m, i, groups, pow2, dequant, workspace, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (swiglu_bwd_quant<F32In, FMT>(grad_h, gu, offs, out, scales, col, m, i, groups, pow2, dequant, workspace, stream))); }
  return kLaunchBadEnum;
}

// Every f32 bit pattern (NaN and Inf included) through round_to<true> -- the hardware
// conversion where port.h gives the target one -- and round_bf16_rule, compared.
__global__ void bf16_round_selftest_kernel(unsigned long long* mismatches, uint32_t* first_bad) {
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  unsigned long long bad = 0;
  for (uint64_t x = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; x < (1ull << 32); x += stride) {
    const float f = u2f((uint32_t)x);
    const uint32_t hw = f2u(moe::round_to<true>(f)), rule = f2u(moe::round_bf16_rule(f));
    if (hw != rule) {
      ++bad;
      selftest_record(mismatches, first_bad, (uint32_t)x, hw, rule);
    }
  }
  if (bad) atomicAdd(mismatches, bad);
}

__global__ void bf16_round_has_hw_kernel(int* r) { *r = moe::has_hw_bf16_round() ? 1 : 0; }

HIPFP8_EXTERN int hipfp8_bf16_round_selftest_launch(unsigned long long* mismatches, uint32_t* first_bad, int* has_hw,
                                                    hipStream_t stream) noexcept {
  if (!mismatches || !first_bad || !has_hw) return kLaunchNull;
  bf16_round_selftest_kernel<<<device_sm_count() * 8, 256, 0, stream>>>(mismatches, first_bad);
  bf16_round_has_hw_kernel<<<1, 1, 0, stream>>>(has_hw);
  HIPFP8_RETURN_LAUNCH_STATUS();
}
