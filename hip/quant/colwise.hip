// colwise.hip -- scale-and-cast where each scaling group is a run of ROWS of one column, and the
// output is column-major (transposed):
//   per_group_colwise        x (M,K) row-major, groups of rows by END offsets -> out[k*M + m],
//                            scales[g*K + k]
//   per_group_colwise_dual   two such tensors sharing offsets, one launch
//   per_group_colwise_dual_padded  the dual cast into a padded layout: group g's rows at the
//                            16-row aligned padded start ps_g (out[k*m_cap + ps_g + m - gs]),
//                            its padding rows and the rows past the last padded group zero
//   rowwise_3d_transpose_rhs x (E,K,N) column-major = E row-major (N,K) matrices; per expert a
//                            single group of N rows -> out[e*N*K + k*N + n], scales[e*K + k]
//
// Tile: a block of 256 threads covers (256 / CG) * 16 rows x CG 16-byte column vectors (CG = 4:
// 1024 rows x 32 bf16 / 16 f32 columns). In a jagged launch each group takes its own CG
// (col_geo_for_rows: the narrowest tile whose rows cover the group), so one launch mixes tiles
// when groups are skewed; a 3D launch (uniform groups) runs a kernel compiled for its one tile.
// Thread (rg, cg) loads 16 consecutive rows of one 16-byte column vector, so after scaling it
// holds, for each of its columns, 16 consecutive rows = 16 output bytes: the transposed stores are
// 16-byte vectors and a wavefront writes runs of (32 / CG) * 16 bytes of each column (the
// transpose happens in registers because each thread owns a 16 x EPV sub-tile; no LDS round trip).
//
// Jagged groups: a group's rows are cut into chunks of L sub-chunks (aligned to absolute 16-row
// units, so rows of a neighbouring group in a shared unit are masked). A slab = (group, column
// tile). Small slabs are one chunk: one block, no communication. A big slab (a skewed expert with
// 10k tokens) is spread over many blocks -- so no block stalls the grid -- which combine their
// partial column amax through the workspace (relaxed atomicMax on |x| bit patterns, a release
// fence, an arrival counter) and wait for each other, keeping their chunk in registers: x is still
// read exactly once.
// Deadlock freedom: blocks are persistent and take work in ticket order (atomic counter), and the
// chunks of a slab are consecutive tickets. A block waits only for chunks of its own slab; every
// chunk with a smaller ticket is held by a running block, and the launcher bounds the chunks per
// slab to half the co-resident grid (growing the rows per chunk for enormous groups), so the
// missing chunks are always claimable by blocks that are not waiting.
// The workspace must be zero before the first launch; every launch leaves it zero again (the last
// block of a slab resets it, the last block of the grid resets the ticket).
//
// Padded launches (PAD): a group's chunks are cut from its own first row (gs + 16 j) instead of
// absolute 16-row units, so each thread's 16 rows are 16 consecutive rows of the padded output
// (ps_g is a multiple of 16): whole 16-byte stores, the bytes of rows from the group's end on
// (its padding) stored as zero. The padded END offsets are a prefix sum over the clamped groups,
// computed per block in shared memory next to the other group tables; block 0 writes them out.
// A second small kernel (colwise_pad_tail_kernel) zeroes the rows from the last padded end to
// m_cap, reading that end from padded_offs on the device.
#include "common.h"
#include "launchers.h"
#include "policy.h"

namespace hipfp8 {

constexpr int kColBlock = 256;
// A tile geometry gi (0..3) has CG = 2 << gi 16-byte vectors across (2, 4, 8, 16): a sub-chunk is
// (256 / CG) * 16 rows by CG vectors (CG * 8 bf16 / CG * 4 f32 columns); a thread holds
// kColRPT = 16 rows (= bytes per column store) of one vector, 64 registers (16 rows beat 8
// (bench/NOTES.md, "Kernel design decisions")).
constexpr int kColRPT = 16;
constexpr int kColMaxCG = 16;
constexpr int kColNumGeo = 4;
__host__ __device__ constexpr int col_cg_of(int gi) { return 2 << gi; }
// The geometry of a tile width CG (2, 4, 8, 16), the inverse of col_cg_of.
__host__ __device__ constexpr int col_geo_of_cg(int cg) { return cg == 2 ? 0 : cg == 4 ? 1 : cg == 8 ? 2 : 3; }
__host__ __device__ constexpr int col_units_of(int gi) { return kColBlock / col_cg_of(gi); }  // 16-row units per sub-chunk
// The geometry of a group (col_geo_for_rows), of a whole launch (colwise_fixed_geo) and the
// smallest sub-chunks per work item (colwise_min_L) are chosen in policy.h.

// Workspace: a header, then per group a region of ws_group_words words holding one slab record
// per (tensor, column tile of the group's geometry): COLS amax words, then the arrive and depart
// counters (COLS + 2 words). ws_group_words is the most any geometry needs
// (hipfp8_colwise_workspace_bytes sizes the workspace with the same formula).
struct ColWsHeader {
  uint32_t ticket, done;
  uint32_t pad[2];
};

struct ColTensor {
  const void* x;
  uint8_t* out;
  float* scales;
  int64_t K;
  int64_t out_ld;
  int ntiles;  // scalar kernel only (32-column tiles)
  int vec_store;
  // 3D weights stacked along n from two sources (rowwise_3d_transpose_rhs_pair): rows [n0,
  // group_rows) of each group from x1 (ColRows); null: every row from x.
  const void* x1;
  int64_t n0;
};

struct ColWork {
  ColTensor t[2];
  int ntensors;
  const int32_t* offs;  // null: uniform groups of group_rows rows (3D)
  // Jagged launches over a chunk of the groups (G > kGroupChunk): the row where the chunk's
  // first group starts (the clamped END offset of the group before it; device memory), null =
  // row 0. Stored in shared memory right before the offsets (s_offs[-1]).
  const int32_t* start;
  int G;
  int64_t group_rows;
  int64_t M;
  int L[kColNumGeo];    // sub-chunks per work item, per geometry
  int pow2;
  int dequant;          // the scales stored: forward (0) or the GEMMs' dequant 1 / s (1)
  void* ws;
  int64_t ws_group_words;
  // Padded launches: the padded END offsets (output), null = not padded; the padded row
  // where the chunk's first group starts (device memory, as `start`), null = row 0.
  int32_t* padded_offs;
  const int32_t* pstart;
};

__host__ __device__ inline int64_t col_ntiles(int64_t K, int cols) { return (K + cols - 1) / cols; }

// Words per group of the workspace: the most over every tile width (8 ... 128 columns covers
// bf16 and f32 at every CG) of (tiles of k1 + tiles of k2) * (cols + 2).
__host__ __device__ inline int64_t col_ws_group_words(int64_t k1, int64_t k2) {
  int64_t most = 0;
  for (int cols = 8; cols <= kColMaxCG * 8; cols *= 2) {
    const int64_t words = (col_ntiles(k1, cols) + col_ntiles(k2, cols)) * (cols + 2);
    if (words > most) most = words;
  }
  return most;
}

__device__ inline void group_bounds(const ColWork& w, const int32_t* s_offs, int g, int64_t& gs, int64_t& ge) {
  if (w.offs) {
    gs = s_offs[g - 1];  // s_offs[-1]: the start of the first group (see ColWork::start)
    ge = s_offs[g];
  } else {
    gs = (int64_t)g * w.group_rows;
    ge = gs + w.group_rows;
  }
}

// Where the rows of group g ([gs, ge)) of tensor T live: row m at x0 + (off0 + m*K) below
// `split`, at x1 + (off1 + m*K) from it. One source: x0 = x1 = T.x, split = ge. A 3D pair
// (T.x1): group g's row gs + j at T.x + (g*n0 + j)*K for j < n0, else at
// T.x1 + (g*(group_rows - n0) + j - n0)*K.
template <class E>
struct ColRows {
  const E* x0;
  const E* x1;
  int64_t off0, off1, split;
  __device__ inline const E* at(int64_t m, int64_t K) const {
    return m < split ? x0 + (off0 + m * K) : x1 + (off1 + m * K);
  }
};

template <class E>
__device__ inline ColRows<E> col_rows(const ColWork& w, const ColTensor& T, int g, int64_t gs, int64_t ge) {
  const E* x = static_cast<const E*>(T.x);
  if (!T.x1) return ColRows<E>{x, x, 0, 0, ge};
  const int64_t n1 = w.group_rows - T.n0;
  return ColRows<E>{x, static_cast<const E*>(T.x1), ((int64_t)g * T.n0 - gs) * T.K,
                    ((int64_t)g * n1 - gs - T.n0) * T.K, gs + T.n0};
}

// Chunks (work items per column tile) of a group spanning rows [gs, ge) in geometry gi. 32-bit
// division (units < 2^28 for int32 offsets, per <= 128 * 2^20): a 64-bit division costs a few
// hundred cycles, and every block runs this for every group before its first item.
// PAD: the units are counted from the group's first row (see the top).
template <bool PAD>
__device__ inline int group_chunks(int64_t gs, int64_t ge, int gi, int L) {
  const uint32_t units = PAD ? (uint32_t)((ge - gs + kColRPT - 1) / kColRPT)
                             : (uint32_t)((ge + kColRPT - 1) / kColRPT - gs / kColRPT);
  const uint32_t per = (uint32_t)col_units_of(gi) * (uint32_t)L;
  const uint32_t n = (units + per - 1) / per;
  return n < 1 ? 1 : (int)n;
}
// Column tiles of a row of K elements in geometry gi (CG * EPV columns, a power of two: a shift).
template <int EPV>
__device__ inline int64_t col_ntiles_geo(int64_t K, int gi) {
  constexpr int le = EPV == 8 ? 3 : EPV == 4 ? 2 : EPV == 2 ? 1 : 0;
  static_assert((1 << le) == EPV, "EPV is a power of two");
  const int sh = gi + 1 + le;
  return (K + (int64_t(1) << sh) - 1) >> sh;
}

// Block-shared state of the tile kernel.
template <int MAXCOLS>
struct ColShared {
  uint32_t red[kColBlock / HIPFP8_WAVE][MAXCOLS];
  uint32_t amax[MAXCOLS];
  float scale[MAXCOLS];
  int item;
};

// One work item: chunk c (of nch) of column tile t of group g of tensor T, in geometry gi; PAD:
// the group's padded start is ps.
// The tile width is a runtime value (uniform over the block): one body serves every geometry,
// so a launch that mixes them needs no more registers than one of them. (Four inlined bodies,
// one per CG, cost nothing on sm_90 but made the AMD compiler spill: 256 VGPRs, 336 bytes of
// scratch per lane.)
template <class In, uint32_t F, int CGC, bool PAD, bool PAIR, int MAXCOLS>
__device__ __forceinline__ void colwise_item(const ColWork& w, const ColTensor& T, uint32_t* slab, int g, int t, int c,
                                             int nch, int gi, int64_t gs, int64_t ge, int64_t ps,
                                             ColShared<MAXCOLS>& sh, ColWsHeader* hdr) {
  constexpr int EPV = In::EPV;
  static_assert(kColMaxCG <= HIPFP8_WAVE && kColMaxCG * EPV <= kColBlock && kColMaxCG * EPV <= MAXCOLS,
                "tile wider than a wavefront / block");
  constexpr int NW = kColBlock / HIPFP8_WAVE;
  // log2 CG: a compile-time constant for CGC = 2, 4, 8, 16; from gi for CGC = 0
  const int lcg = (CGC ? col_geo_of_cg(CGC) : gi) + 1;
  const int kColCG = 1 << lcg;
  const int kColUnits = kColBlock >> lcg;
  const int kColRows = kColUnits * kColRPT;
  const int COLS = kColCG * EPV;
  const int L = w.L[gi];
  typedef typename In::elem E;
  const int tid = threadIdx.x;
  const int cg = tid & (kColCG - 1);
  const int rg = tid >> lcg;
  const int64_t K = T.K;
  const int64_t col0 = (int64_t)t * COLS;
  const int64_t mycol = col0 + cg * EPV;
  const bool colvalid = mycol < K;
  const int64_t row_base = PAD ? gs + (int64_t)c * kColUnits * L * kColRPT
                               : (gs / kColRPT + (int64_t)c * kColUnits * L) * kColRPT;
  // PAIR (3D weights from two sources, compiled for those launches only: the two bases cost
  // the other launches registers): row m at R.at(m); else at X + m*K.
  const E* X = static_cast<const E*>(T.x);
  ColRows<E> R{X, X, 0, 0, ge};
  if constexpr (PAIR) R = col_rows<E>(w, T, g, gs, ge);
  auto row_at = [&](int64_t m) -> const E* {
    if constexpr (PAIR) return R.at(m, K);
    return X + m * K;
  };
  // The 16 rows of this thread's vector from row rb on. A thread whose 16 rows all lie in the
  // group and on one side of its source split (every thread but those at a group's ends) takes
  // one 64-bit base and a 32-bit row stride (one multiply-add per row); the others test each
  // row. xstride: bytes per row when 16 rows of it stay below 2^31 (then 32-bit products
  // cannot overflow), else 0.
  const uint32_t xstride = row_stride32(K, sizeof(E));
  auto load_sub = [&](int64_t rb, uint4* v) {
    if (xstride != 0 && colvalid && rb >= gs && rb + kColRPT <= ge &&
        (!PAIR || rb + kColRPT <= R.split || rb >= R.split)) {
      const char* p = reinterpret_cast<const char*>(row_at(rb) + mycol);
#pragma unroll
      for (int rr = 0; rr < kColRPT; ++rr)
        v[rr] = HIPFP8_LDG(reinterpret_cast<const uint4*>(p + (uint64_t)xstride * (uint32_t)rr));
    } else {
#pragma unroll
      for (int rr = 0; rr < kColRPT; ++rr) {
        const int64_t m = rb + rr;
        v[rr] = (colvalid && m >= gs && m < ge) ? HIPFP8_LDG(reinterpret_cast<const uint4*>(row_at(m) + mycol)) : zero4();
      }
    }
  };

  uint4 v[kColRPT];
  uint32_t cam[EPV];
#pragma unroll
  for (int e = 0; e < EPV; ++e) cam[e] = 0;
  // sub-chunks past the group's end are empty for every thread: stop there (uniform)
  int nsub = L;
  while (nsub > 1 && row_base + (int64_t)(nsub - 1) * kColRows >= ge) --nsub;
  for (int sub = 0; sub < nsub; ++sub) {
    const int64_t rb = row_base + (int64_t)sub * kColRows + (int64_t)rg * kColRPT;
    load_sub(rb, v);
#pragma unroll
    for (int rr = 0; rr < kColRPT; ++rr)
#pragma unroll
      for (int e = 0; e < EPV; ++e) cam[e] = max(cam[e], abs_bits(In::get(v[rr], e)));
  }
  // reduce over the row groups of the wavefront (lanes with equal cg), then across wavefronts;
  // the EPV shuffles of one step are independent (the step count depends on the tile width)
  for (int o = kColCG; o < HIPFP8_WAVE; o <<= 1) {
#pragma unroll
    for (int e = 0; e < EPV; ++e) cam[e] = max(cam[e], (uint32_t)HIPFP8_SHFL_XOR(cam[e], o));
  }
  const int lane = tid % HIPFP8_WAVE;
  if (lane < kColCG) {
#pragma unroll
    for (int e = 0; e < EPV; ++e) sh.red[tid / HIPFP8_WAVE][lane * EPV + e] = cam[e];
  }
  __syncthreads();
  if (tid < COLS) {
    uint32_t a = sh.red[0][tid];
#pragma unroll
    for (int i = 1; i < NW; ++i) a = max(a, sh.red[i][tid]);
    sh.amax[tid] = a;
  }
  if (nch > 1) {
    uint32_t* arrive = slab + COLS;
    if (tid < COLS) atomicMax(&slab[tid], sh.amax[tid]);
    __threadfence();
    __syncthreads();
    if (tid == 0) {
      // the last to arrive has nothing to wait for
      if (atomicAdd(arrive, 1u) + 1 < (uint32_t)nch)
        while (atomicAdd(arrive, 0u) < (uint32_t)nch) HIPFP8_BACKOFF();
      __threadfence();
    }
    __syncthreads();
    if (tid < COLS) sh.amax[tid] = atomicOr(&slab[tid], 0u);
  }
  uint32_t next_ticket = 0;
  if (tid == 0) next_ticket = atomicAdd(&hdr->ticket, 1u);
  if (tid < COLS) {
    sh.scale[tid] = amax_to_scale<F>(sh.amax[tid], w.pow2 != 0);
  }
  __syncthreads();
  if (nch > 1 && tid == 0) {
    // every thread of this block has read the slab's amax (barrier above); the last block of
    // the slab to get here leaves the slab zeroed for the next launch
    if (atomicAdd(&slab[COLS + 1], 1u) == (uint32_t)nch - 1) {
      for (int i = 0; i < COLS; ++i) atomicExch(&slab[i], 0u);
      atomicExch(&slab[COLS], 0u);
      atomicExch(&slab[COLS + 1], 0u);
    }
  }

  // out index = obase + k * out_ld + m  (per_group_colwise: 0 + k*M + m;
  //                                      3D: e*N*K + k*N + (m - e*N);
  //                                      padded: 0 + k*m_cap + (m - gs + ps))
  const int64_t obase = PAD ? ps - gs : w.offs ? 0 : gs * (K - 1);
  for (int sub = nsub - 1; sub >= 0; --sub) {
    const int64_t rb = row_base + (int64_t)sub * kColRows + (int64_t)rg * kColRPT;
    if (sub != nsub - 1) load_sub(rb, v);
    if (!colvalid || rb + kColRPT <= gs || rb >= ge) continue;
    // PAD: rb - gs is a multiple of 16, so the 16 rows are one aligned unit of the padded
    // group; rows from ge on are its padding (zero bytes, whatever the scale)
    const bool full = T.vec_store && (PAD || (rb >= gs && rb + kColRPT <= ge));
    const int64_t nval = ge - rb;
    // column e's 16 bytes at dst0 + e * out_ld (32-bit stride where it fits, as for loads)
    uint8_t* dst0 = T.out + obase + mycol * T.out_ld + rb;
    const bool small_ld = T.out_ld < (int64_t(1) << 28);
#pragma unroll
    for (int e = 0; e < EPV; ++e) {
      const float s = sh.scale[cg * EPV + e];
      uint32_t q[4];
      if (amax_bits_finite(sh.amax[cg * EPV + e])) {
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
      if (PAD && nval < kColRPT) {
#pragma unroll
        for (int k4 = 0; k4 < 4; ++k4) {
          const int64_t nb = nval - 4 * k4;
          q[k4] = nb >= 4 ? q[k4] : nb <= 0 ? 0u : q[k4] & ((1u << (8 * (int)nb)) - 1u);
        }
      }
      uint8_t* dst = small_ld ? dst0 + (uint64_t)(uint32_t)T.out_ld * (uint32_t)e : dst0 + e * T.out_ld;
      if (full) {
        *reinterpret_cast<uint4*>(dst) = make_uint4(q[0], q[1], q[2], q[3]);
      } else {
#pragma unroll
        for (int rr = 0; rr < kColRPT; ++rr) {
          const int64_t m = rb + rr;
          if (PAD || (m >= gs && m < ge)) dst[rr] = (uint8_t)(q[rr >> 2] >> (8 * (rr & 3)));
        }
      }
    }
  }
  // the scales last: dequant_scale's out-of-line f64 division with the rows in registers
  // would make the compiler spill them (sh.scale holds until the next item's first barrier)
  if (c == 0 && tid < COLS && col0 + tid < K) {
    const float s = sh.scale[tid];
    T.scales[(int64_t)g * K + col0 + tid] = w.dequant ? dequant_scale(s) : s;
  }
  if (tid == 0) sh.item = (int)next_ticket;
}

// Dynamic shared memory of the tile kernel, in words: the first group's start (1), offsets (G),
// per-group packed chunks and geometry (G), item prefix per tensor (ntensors x (G + 1)), and in
// a padded launch the first group's padded start (1) and the padded END offsets (G).
__host__ __device__ inline size_t col_smem_words(int G, int ntensors, bool pad = false) {
  return (size_t)2 * G + 1 + (size_t)ntensors * (G + 1) + (pad ? (size_t)G + 1 : 0);
}

// Padded END offsets of the groups into s_pend[0..G) (s_pend[-1]: the first group's padded
// start), from the clamped offsets s_offs (s_offs[-1]: the first group's start): each group's
// rows rounded up to 16. One thread; the caller orders it with barriers.
__device__ inline void padded_prefix(const ColWork& w, const int32_t* s_offs, int32_t* s_pend) {
  int64_t acc = w.pstart ? *w.pstart : 0;
  s_pend[-1] = (int32_t)acc;
  int64_t prev = s_offs[-1];
  for (int g = 0; g < w.G; ++g) {
    const int64_t e = s_offs[g];
    acc += (e - prev + 15) & ~(int64_t)15;
    prev = e;
    s_pend[g] = (int32_t)acc;
  }
}

// The first group's start row into s_offs[-1] (read by group_bounds); ordered before its
// readers by the barriers of load_clamped_offsets.
__device__ inline void store_group_start(const ColWork& w, int32_t* s_offs) {
  if (threadIdx.x == 0) s_offs[-1] = w.start ? *w.start : 0;
}

// CGC = 0: each group takes its own tile (col_geo_for_rows), the tile width a
// runtime value; CGC = 2, 4, 8, 16: every group takes that tile, compiled for it (launches whose
// groups the host knows to be uniform: 3D, or a forced tile). PAIR: 3D weights from two sources
// (ColTensor::x1; fixed tiles, one tensor).
template <class In, uint32_t F, int CGC, bool PAD, bool PAIR>
__global__ void __launch_bounds__(kColBlock)
colwise_vec_kernel(ColWork w) {
  constexpr int EPV = In::EPV;
  constexpr int MAXCOLS = kColMaxCG * EPV;
  extern __shared__ int32_t cdyn[];
  const int G = w.G;
  int32_t* s_offs = cdyn + 1;       // G (s_offs[-1]: the first group's start)
  int32_t* s_pk = cdyn + 1 + G;     // G: chunks << 2 | geometry
  int32_t* s_ib = cdyn + 1 + 2 * G; // ntensors x (G + 1): first item of each group, per tensor
  int32_t* s_pend = cdyn + col_smem_words(G, w.ntensors) + 1;  // PAD: G (s_pend[-1]: padded start)
  __shared__ ColShared<MAXCOLS> sh;

  ColWsHeader* hdr = reinterpret_cast<ColWsHeader*>(w.ws);
  uint32_t* slabs = reinterpret_cast<uint32_t*>(hdr + 1);
  const int tid = threadIdx.x;

  if (w.offs) {
    store_group_start(w, s_offs);
    load_clamped_offsets<kColBlock>(w.offs, G, w.M, s_offs);
  }
  // per-group geometry and chunks, and each group's item count per tensor (one thread per
  // group), then the item prefix (serial over groups by one thread: additions only)
  __syncthreads();
  for (int g = tid; g < G; g += kColBlock) {
    int64_t gs, ge;
    group_bounds(w, s_offs, g, gs, ge);
    const int gi = CGC ? col_geo_of_cg(CGC) : col_geo_for_rows(ge - gs);
    const int nch = group_chunks<PAD>(gs, ge, gi, w.L[gi]);
    s_pk[g] = nch << 2 | gi;
    // (a padded launch may have no tensor, k1 = k2 = 0: then only the padded offsets)
    if (!PAD || w.ntensors > 0) s_ib[g] = (int32_t)col_ntiles_geo<EPV>(w.t[0].K, gi) * nch;
    if (w.ntensors > 1) s_ib[G + 1 + g] = (int32_t)col_ntiles_geo<EPV>(w.t[1].K, gi) * nch;
  }
  __syncthreads();
  if (tid < w.ntensors) {
    int32_t* ib = s_ib + tid * (G + 1);
    int32_t acc = 0;
    for (int g = 0; g < G; ++g) {
      const int32_t n = ib[g];
      ib[g] = acc;
      acc += n;
    }
    ib[G] = acc;
  }
  // the last wavefront: not one of the item-prefix threads above
  if (PAD && tid == kColBlock - 1) padded_prefix(w, s_offs, s_pend);
  __syncthreads();
  if (PAD && blockIdx.x == 0)
    for (int g = tid; g < G; g += kColBlock) w.padded_offs[g] = s_pend[g];

  // Tickets: the first is taken here; each next one is taken once the current item's amax is
  // final (never while waiting for other blocks, see the deadlock argument at the top), so its
  // latency overlaps the cast and the stores.
  if (tid == 0) sh.item = (int)atomicAdd(&hdr->ticket, 1u);
  for (;;) {
    __syncthreads();
    int64_t item = sh.item;
    __syncthreads();
    if (PAD && w.ntensors == 0) break;
    int ti = 0;
    if (item >= s_ib[G]) {
      if (w.ntensors < 2 || item >= (int64_t)s_ib[G] + s_ib[2 * G + 1]) break;
      item -= s_ib[G];
      ti = 1;
    }
    const int32_t* ib = s_ib + ti * (G + 1);
    // group: the last g with ib[g] <= item (ib[0] = 0; every group has at least one item)
    const int g = upper_bound_i32(ib, G, item) - 1;
    const int gi = s_pk[g] & 3;
    const int nch = s_pk[g] >> 2;
    const int r = (int)(item - ib[g]);
    const int t = r / nch;
    const int c = r % nch;
    int64_t gs, ge;
    group_bounds(w, s_offs, g, gs, ge);
    const ColTensor& T = w.t[ti];
    const int cols = col_cg_of(gi) * EPV;
    uint32_t* slab = slabs + (int64_t)g * w.ws_group_words +
                     ((ti ? col_ntiles_geo<EPV>(w.t[0].K, gi) : 0) + t) * (int64_t)(cols + 2);
    colwise_item<In, F, CGC, PAD, PAIR>(w, T, slab, g, t, c, nch, gi, gs, ge, PAD ? s_pend[g - 1] : 0, sh, hdr);
  }
  // the last block out resets the ticket for the next launch
  if (tid == 0) {
    __threadfence();
    if (atomicAdd(&hdr->done, 1u) == gridDim.x - 1) {
      atomicExch(&hdr->ticket, 0u);
      atomicExch(&hdr->done, 0u);
    }
  }
}

// Odd shapes (K not a multiple of the vector, misaligned x): one block per (group, 32-column
// tile, tensor), two passes over the group's rows (amax, then cast), byte stores. Correct for any
// group size, no workspace; not a fast path. Padded launches (w.padded_offs): the padded END
// offsets after the clamped ones in shared memory, group rows stored at their padded rows and
// the group's padding rows zeroed; block (0, 0, 0) writes padded_offs.
template <class In, uint32_t F>
__global__ void __launch_bounds__(256)
colwise_scalar_kernel(ColWork w) {
  typedef typename In::elem E;
  extern __shared__ int32_t cdyn[];
  int32_t* s_offs = cdyn + 1;  // s_offs[-1]: the first group's start
  __shared__ uint32_t part[8][32];
  __shared__ uint32_t s_amax[32];
  const int ti = blockIdx.z;
  if (ti >= w.ntensors) return;
  const ColTensor& T = w.t[ti];
  if (w.offs) {
    store_group_start(w, s_offs);
    load_clamped_offsets<256>(w.offs, w.G, w.M, s_offs);
  } else {
    __syncthreads();
  }
  const bool pad = w.padded_offs != nullptr;
  int32_t* s_pend = s_offs + w.G + 1;  // padded: G (s_pend[-1]: the first group's padded start)
  if (pad) {
    if (threadIdx.x == 0) padded_prefix(w, s_offs, s_pend);
    __syncthreads();
    if (blockIdx.x == 0 && blockIdx.y == 0 && ti == 0)
      for (int g = threadIdx.x; g < w.G; g += 256) w.padded_offs[g] = s_pend[g];
  }
  const int cl = threadIdx.x % 32, rl = threadIdx.x / 32;
  for (int g = blockIdx.y; g < w.G; g += gridDim.y) {
    int64_t gs, ge;
    group_bounds(w, s_offs, g, gs, ge);
    const ColRows<E> R = col_rows<E>(w, T, g, gs, ge);
    for (int64_t t = blockIdx.x; t < T.ntiles; t += gridDim.x) {
      const int64_t col = t * 32 + cl;
      uint32_t am = 0;
      if (col < T.K)
        for (int64_t m = gs + rl; m < ge; m += 8) am = max(am, abs_bits(In::load1(R.at(m, T.K), col)));
      part[rl][cl] = am;
      __syncthreads();
      if (rl == 0) {
        for (int i = 1; i < 8; ++i) am = max(am, part[i][cl]);
        s_amax[cl] = am;
      }
      __syncthreads();
      am = s_amax[cl];
      const float s = amax_to_scale<F>(am, w.pow2 != 0);
      if (col < T.K) {
        if (rl == 0) T.scales[(int64_t)g * T.K + col] = w.dequant ? dequant_scale(s) : s;
        // padded: row m at ps + (m - gs), ps = s_pend[g - 1] (read here: fewer live registers)
        const int64_t obase = pad ? (int64_t)s_pend[g - 1] - gs : w.offs ? 0 : gs * (T.K - 1);
        uint8_t* ocol = T.out + obase + col * T.out_ld;
        for (int64_t m = gs + rl; m < ge; m += 8) ocol[m] = (uint8_t)encode_sw<F>(In::load1(R.at(m, T.K), col) * s);
        if (pad)  // the group's padding rows
          for (int64_t m = ge + rl; m < gs + ((ge - gs + 15) & ~(int64_t)15); m += 8) ocol[m] = 0;
      }
      __syncthreads();
    }
  }
}

// Co-resident blocks of the persistent tile kernel at a dynamic shared memory size.
template <class In, uint32_t F, int CGC, bool PAD, bool PAIR>
static int colwise_grid(size_t smem) {
  static unsigned long long cache[kResidentDevs];
  return resident_grid(cache, reinterpret_cast<const void*>(colwise_vec_kernel<In, F, CGC, PAD, PAIR>), kColBlock,
                       smem);
}

// Launch the tile kernel for tile CGC (0: per group) on the co-resident grid.
template <class In, uint32_t F, int CGC, bool PAD, bool PAIR = false>
static int launch_colwise_geo(ColWork w, size_t smem, hipStream_t st) {
  const int grid = colwise_grid<In, F, CGC, PAD, PAIR>(smem);
  w.ws_group_words = col_ws_group_words(w.t[0].K, w.ntensors > 1 ? w.t[1].K : 0);
  // Rows per work item, per geometry: L sub-chunks, read once for the amax and once more (from
  // L2: the block read them microseconds before) for the cast, except the last one, which stays
  // in registers. L > 1 trades an L2 re-read for fewer blocks that must wait for each other.
  // Bound the chunks of any one slab to half the co-resident grid (deadlock freedom, see top).
  const int64_t max_units = (w.offs ? w.M : w.group_rows) / kColRPT + 2;
  for (int gi = 0; gi < kColNumGeo; ++gi) {
    const int64_t units = col_units_of(gi);
    int L = colwise_min_L(w.offs == nullptr);
    while ((max_units + units * L - 1) / (units * L) > grid / 2 && L < (1 << 20)) L *= 2;
    w.L[gi] = L;
  }
  colwise_vec_kernel<In, F, CGC, PAD, PAIR><<<grid, kColBlock, smem, st>>>(w);
  HIPFP8_RETURN_LAUNCH_STATUS();
}

template <class In, uint32_t F>
static int launch_colwise_tiles(const ColWork& w, size_t smem, hipStream_t st) {
  if (smem > 48 * 1024) return kLaunchUnsupported;
  // padded launches: the per-group tile (policy.h, "per_group_colwise_dual_padded")
  if (w.padded_offs) return launch_colwise_geo<In, F, 0, true>(w, smem, st);
  if (w.t[0].x1) {  // two sources: 3D (uniform groups, a fixed tile), one tensor
    switch (colwise_fixed_geo(false, w.group_rows, w.M, w.G)) {
      case 0: return launch_colwise_geo<In, F, 2, false, true>(w, smem, st);
      case 1: return launch_colwise_geo<In, F, 4, false, true>(w, smem, st);
      case 2: return launch_colwise_geo<In, F, 8, false, true>(w, smem, st);
      default: return launch_colwise_geo<In, F, 16, false, true>(w, smem, st);
    }
  }
  switch (colwise_fixed_geo(w.offs != nullptr, w.group_rows, w.M, w.G)) {
    case 0: return launch_colwise_geo<In, F, 2, false>(w, smem, st);
    case 1: return launch_colwise_geo<In, F, 4, false>(w, smem, st);
    case 2: return launch_colwise_geo<In, F, 8, false>(w, smem, st);
    case 3: return launch_colwise_geo<In, F, 16, false>(w, smem, st);
    default: return launch_colwise_geo<In, F, 0, false>(w, smem, st);
  }
}

template <class In, uint32_t F>
static int launch_colwise(ColWork w, hipStream_t st) {
  bool vec = true;
  for (int i = 0; i < w.ntensors; ++i) {
    ColTensor& T = w.t[i];
    vec = vec && T.K % In::EPV == 0 && aligned16(T.x) && (!T.x1 || aligned16(T.x1));
    T.vec_store = T.out_ld % 16 == 0 && aligned16(T.out) && (w.offs != nullptr || w.group_rows % 16 == 0);
  }
  const bool pad = w.padded_offs != nullptr;
  if (!vec) {
    const size_t smem = (size_t)(w.G + 1) * (pad ? 2 : 1) * sizeof(int32_t);
    if (smem > 48 * 1024) return kLaunchUnsupported;  // never: G <= kGroupChunk (colwise_entry)
    int64_t maxt = 1;
    for (int i = 0; i < w.ntensors; ++i) {
      w.t[i].ntiles = (int)((w.t[i].K + 31) / 32);
      if (w.t[i].ntiles > maxt) maxt = w.t[i].ntiles;
    }
    dim3 grid((unsigned)(maxt < 65535 ? maxt : 65535), (unsigned)(w.G < 65535 ? w.G : 65535), (unsigned)w.ntensors);
    colwise_scalar_kernel<In, F><<<grid, 256, smem, st>>>(w);
    HIPFP8_RETURN_LAUNCH_STATUS();
  }
  return launch_colwise_tiles<In, F>(w, col_smem_words(w.G, w.ntensors, pad) * sizeof(int32_t), st);
}

template <class In>
static int dispatch_colwise(uint32_t fmt, const ColWork& w, hipStream_t st) {
  HIPFP8_DISPATCH_FMT(fmt, (launch_colwise<In, FMT>(w, st)));
}

static int colwise_entry1(int x_dtype, uint32_t fmt, const ColWork& w, hipStream_t st) {
  if (x_dtype == HIPFP8_DTYPE_BF16) return dispatch_colwise<Bf16In>(fmt, w, st);
  if (x_dtype == HIPFP8_DTYPE_F32) return dispatch_colwise<F32In>(fmt, w, st);
  return kLaunchBadEnum;
}

// Byte offset of the group tables in the workspace (after the header and the slabs of one
// chunk of groups; hipfp8_colwise_workspace_bytes sizes it the same way).
static int64_t col_ws_tables_offset(int64_t groups, int64_t k1, int64_t k2) {
  const int64_t g = groups < kGroupChunk ? groups : kGroupChunk;
  return (int64_t)sizeof(ColWsHeader) + 4 * g * col_ws_group_words(k1, k2);
}

// Up to kGroupChunk groups: one launch as tuned. More: the launches of consecutive chunks of
// kGroupChunk groups, each a complete launch of its own (its tables in shared memory, the
// workspace left zero). Uniform groups (3D) are a slice of the tensors per chunk; jagged ones
// first get their clamped offsets in the workspace (launch_group_tables), and each chunk
// starts at the clamped end of the group before it.
static int colwise_entry(int x_dtype, uint32_t fmt, const ColWork& w, hipStream_t st) {
  if (w.G <= kGroupChunk) return colwise_entry1(x_dtype, fmt, w, st);
  if (x_dtype != HIPFP8_DTYPE_BF16 && x_dtype != HIPFP8_DTYPE_F32) return kLaunchBadEnum;
  const int64_t esz = x_dtype == HIPFP8_DTYPE_BF16 ? 2 : 4;
  const int64_t k2 = w.ntensors > 1 ? w.t[1].K : 0;
  int32_t* tables = nullptr;
  if (w.offs) {
    tables = reinterpret_cast<int32_t*>(static_cast<char*>(w.ws) + col_ws_tables_offset(w.G, w.t[0].K, k2));
    // padded launches also take the padded END offsets (tables + G): each chunk's padded start
    const int r = launch_group_tables(w.offs, w.G, w.M, tables, w.padded_offs ? tables + w.G : nullptr, st);
    if (r != kLaunchOk) return r;
  }
  for (int64_t g0 = 0; g0 < w.G; g0 += kGroupChunk) {
    const int n = (int)(w.G - g0 < kGroupChunk ? w.G - g0 : kGroupChunk);
    ColWork c = w;
    c.G = n;
    for (int i = 0; i < w.ntensors; ++i) c.t[i].scales = w.t[i].scales + g0 * w.t[i].K;
    if (w.offs) {
      c.offs = tables + g0;
      c.start = g0 ? tables + g0 - 1 : nullptr;  // the first chunk starts at row 0
      if (w.padded_offs) {
        c.padded_offs = w.padded_offs + g0;
        c.pstart = g0 ? tables + w.G + g0 - 1 : nullptr;
      }
    } else {
      const int64_t r0 = g0 * w.group_rows, K = w.t[0].K;
      if (w.t[0].x1) {  // a pair: each source advances by its own rows per group
        c.t[0].x = static_cast<const char*>(w.t[0].x) + g0 * w.t[0].n0 * K * esz;
        c.t[0].x1 = static_cast<const char*>(w.t[0].x1) + g0 * (w.group_rows - w.t[0].n0) * K * esz;
      } else {
        c.t[0].x = static_cast<const char*>(w.t[0].x) + r0 * K * esz;
      }
      c.t[0].out = w.t[0].out + r0 * K;
      c.M = (int64_t)n * w.group_rows;
    }
    const int r = colwise_entry1(x_dtype, fmt, c, st);
    if (r != kLaunchOk) return r;
  }
  if (tables) return clear_group_tables(tables, 4 * group_tables_words(w.G), st);
  return kLaunchOk;
}

// Padded launches: zero rows [padded_offs[G-1], m_cap) of every column of out1 (k1 columns)
// and out2 (k2) (blockIdx.y = tensor), the end read on the device (written by the cast before
// it on the stream; clamped to [0, m_cap]). 16-byte stores where the host found the tensor
// 16-byte aligned and m_cap a multiple of 16 (vec1, vec2).
__global__ void __launch_bounds__(256)
colwise_pad_tail_kernel(uint8_t* out1, int64_t k1, uint8_t* out2, int64_t k2, int64_t m_cap,
                        const int32_t* pend_last, int vec1, int vec2) {
  uint8_t* out = blockIdx.y ? out2 : out1;
  const int64_t K = blockIdx.y ? k2 : k1;
  const bool vec = (blockIdx.y ? vec2 : vec1) != 0;
  if (K == 0) return;
  int64_t p0 = *pend_last;
  p0 = p0 < 0 ? 0 : p0 > m_cap ? m_cap : p0;
  const int64_t rows = m_cap - p0;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (vec && p0 % 16 == 0) {
    const int64_t units = rows / 16;
    for (int64_t i = first; i < K * units; i += stride) {
      const int64_t c = i / units, u = i - c * units;
      *reinterpret_cast<uint4*>(out + c * m_cap + p0 + 16 * u) = make_uint4(0, 0, 0, 0);
    }
  } else {
    for (int64_t i = first; i < K * rows; i += stride) {
      const int64_t c = i / rows, r = i - c * rows;
      out[c * m_cap + p0 + r] = 0;
    }
  }
}

static int launch_pad_tail(uint8_t* out1, int64_t k1, uint8_t* out2, int64_t k2, int64_t m_cap,
                           const int32_t* pend_last, hipStream_t st) {
  const int64_t kmax = k1 > k2 ? k1 : k2;
  if (kmax == 0 || m_cap == 0) return kLaunchOk;
  const dim3 grid((unsigned)colwise_pad_tail_grid(kmax, m_cap, 256), 2);
  const int vec1 = aligned16(out1) && m_cap % 16 == 0, vec2 = aligned16(out2) && m_cap % 16 == 0;
  colwise_pad_tail_kernel<<<grid, 256, 0, st>>>(out1, k1, out2, k2, m_cap, pend_last, vec1, vec2);
  HIPFP8_RETURN_LAUNCH_STATUS();
}

}  // namespace hipfp8

using namespace hipfp8;

// Workspace bytes of per_group_colwise(_dual) / rowwise_3d_transpose_rhs for `groups` groups
// (experts) and row lengths k1, k2 (k2 = 0 for single-tensor ops). The workspace must be zero
// before its first use; every launch leaves it zero. It must not be shared by launches that can
// run concurrently (different streams without ordering).
HIPFP8_EXTERN int hipfp8_colwise_workspace_bytes(int64_t groups, int64_t k1, int64_t k2, uint64_t* bytes) noexcept {
  if (!bytes) return kLaunchNull;
  if (groups < 0 || k1 < 0 || k2 < 0) return kLaunchBadShape;
  // Per group, one slab record of (COLS + 2) words per column tile of each tensor, for the tile
  // width that needs the most (every CG, bf16 and f32 columns per vector; col_ws_group_words).
  // More than kGroupChunk groups run in chunks (colwise_entry): the slabs of one chunk, then
  // the group tables.
  *bytes = (uint64_t)col_ws_tables_offset(groups, k1, k2) +
           (groups > kGroupChunk ? 4 * (uint64_t)group_tables_words(groups) : 0);
  return kLaunchOk;
}

// x (m, k) row-major, groups of rows by END offsets offs[groups] (device memory, clamped) ->
// out[j*m + i] (column-major) for rows inside a group, scales[g*k + j] (dequant: 1 / s).
HIPFP8_EXTERN int hipfp8_per_group_colwise_launch(const void* x, const int32_t* offs, uint8_t* out, float* scales,
                                                  int64_t m, int64_t k, int64_t groups, int format, int pow2,
                                                  int dequant, int in_dtype, void* workspace,
                                                  hipStream_t stream) noexcept {
  if (m < 0 || k < 0 || groups < 0) return kLaunchBadShape;
  if (groups == 0 || k == 0) return kLaunchOk;
  if (groups > 0x7FFFFFFF) return kLaunchUnsupported;
  if (!offs || !scales || !workspace || (m > 0 && (!x || !out))) return kLaunchNull;
  ColWork w{};
  w.t[0] = ColTensor{x, out, scales, k, m, 0, 0};
  w.ntensors = 1;
  w.offs = offs;
  w.G = (int)groups;
  w.M = m;
  w.pow2 = pow2;
  w.dequant = dequant;
  w.ws = workspace;
  return colwise_entry(in_dtype, (uint32_t)format, w, stream);
}

// Two per_group_colwise casts sharing m and the offsets, in one launch. Both inputs have the
// same dtype (in_dtype).
HIPFP8_EXTERN int hipfp8_per_group_colwise_dual_launch(const void* x1, const void* x2, const int32_t* offs,
                                                       uint8_t* out1, float* scales1, uint8_t* out2, float* scales2,
                                                       int64_t m, int64_t k1, int64_t k2, int64_t groups, int format,
                                                       int pow2, int in_dtype, void* workspace,
                                                       hipStream_t stream) noexcept {
  if (m < 0 || k1 < 0 || k2 < 0 || groups < 0) return kLaunchBadShape;
  if (groups == 0 || (k1 == 0 && k2 == 0)) return kLaunchOk;
  if (groups > 0x7FFFFFFF) return kLaunchUnsupported;
  if (!offs || !workspace) return kLaunchNull;
  ColWork w{};
  int nt = 0;
  if (k1 > 0) {
    if (!scales1 || (m > 0 && (!x1 || !out1))) return kLaunchNull;
    w.t[nt++] = ColTensor{x1, out1, scales1, k1, m, 0, 0};
  }
  if (k2 > 0) {
    if (!scales2 || (m > 0 && (!x2 || !out2))) return kLaunchNull;
    w.t[nt++] = ColTensor{x2, out2, scales2, k2, m, 0, 0};
  }
  w.ntensors = nt;
  w.offs = offs;
  w.G = (int)groups;
  w.M = m;
  w.pow2 = pow2;
  w.ws = workspace;
  return colwise_entry(in_dtype, (uint32_t)format, w, stream);
}

// x (e, k, n) column-major [e*k*n + j*k + i] -> out (e, n, k) column-major [e*n*k + i*n + j],
// scales[e*k + i] (amax over j < n).
HIPFP8_EXTERN int hipfp8_rowwise_3d_transpose_rhs_launch(const void* x, uint8_t* out, float* scales, int64_t e,
                                                         int64_t k, int64_t n, int format, int pow2, int in_dtype,
                                                         void* workspace, hipStream_t stream) noexcept {
  return hipfp8_rowwise_3d_transpose_rhs_pair_launch(x, nullptr, out, scales, e, k, n, 0, format, pow2, 0, in_dtype,
                                                     workspace, stream);
}

// rowwise_3d_transpose_rhs of x0 (e, k, n0) and x1 (e, k, n1) stacked along n per expert (x1
// null: n1 = 0), the scales forward or dequant.
HIPFP8_EXTERN int hipfp8_rowwise_3d_transpose_rhs_pair_launch(const void* x0, const void* x1, uint8_t* out,
                                                              float* scales, int64_t e, int64_t k, int64_t n0,
                                                              int64_t n1, int format, int pow2, int dequant,
                                                              int in_dtype, void* workspace,
                                                              hipStream_t stream) noexcept {
  if (e < 0 || k < 0 || n0 < 0 || n1 < 0 || (!x1 && n1 != 0)) return kLaunchBadShape;
  const int64_t n = n0 + n1;
  if (e == 0 || k == 0) return kLaunchOk;
  if (n == 0) return kLaunchBadShape;
  if (e > 0x7FFFFFFF) return kLaunchUnsupported;
  if (!x0 || !out || !scales || !workspace) return kLaunchNull;
  ColWork w{};
  w.t[0] = ColTensor{x0, out, scales, k, n, 0, 0, x1, n0};
  w.ntensors = 1;
  w.offs = nullptr;
  w.G = (int)e;
  w.group_rows = n;
  w.M = e * n;
  w.pow2 = pow2;
  w.dequant = dequant;
  w.ws = workspace;
  return colwise_entry(in_dtype, (uint32_t)format, w, stream);
}

// per_group_colwise_dual into the padded layout (Context::per_group_colwise_dual_padded):
// out1 (k1, m_cap) / out2 (k2, m_cap) column-major, group g's rows at its padded start, zeros
// elsewhere; padded_offs[groups] receives the padded END offsets. Both inputs have one dtype.
HIPFP8_EXTERN int hipfp8_per_group_colwise_dual_padded_launch(const void* x1, const void* x2, const int32_t* offs,
                                                              uint8_t* out1, float* scales1, uint8_t* out2,
                                                              float* scales2, int32_t* padded_offs, int64_t m,
                                                              int64_t k1, int64_t k2, int64_t m_cap, int64_t groups,
                                                              int format, int pow2, int dequant, int in_dtype,
                                                              void* workspace, hipStream_t stream) noexcept {
  if (m < 0 || k1 < 0 || k2 < 0 || m_cap < 0 || groups < 0) return kLaunchBadShape;
  if (groups == 0) return kLaunchOk;
  if (groups > 0x7FFFFFFF || m_cap > 0x7FFFFFFF) return kLaunchUnsupported;
  // every padded group fits whatever the offsets (the clamped groups hold at most m rows)
  if (m_cap < m + 15 * groups) return kLaunchBadShape;
  if (!offs || !padded_offs || !workspace) return kLaunchNull;
  if (in_dtype != HIPFP8_DTYPE_BF16 && in_dtype != HIPFP8_DTYPE_F32) return kLaunchBadEnum;
  ColWork w{};
  int nt = 0;
  if (k1 > 0) {
    if (!scales1 || !out1 || (m > 0 && !x1)) return kLaunchNull;
    w.t[nt++] = ColTensor{x1, out1, scales1, k1, m_cap, 0, 0};
  }
  if (k2 > 0) {
    if (!scales2 || !out2 || (m > 0 && !x2)) return kLaunchNull;
    w.t[nt++] = ColTensor{x2, out2, scales2, k2, m_cap, 0, 0};
  }
  w.ntensors = nt;
  w.offs = offs;
  w.G = (int)groups;
  w.M = m;
  w.pow2 = pow2;
  w.dequant = dequant;
  w.ws = workspace;
  w.padded_offs = padded_offs;
  const int r = colwise_entry(in_dtype, (uint32_t)format, w, stream);
  if (r != kLaunchOk) return r;
  return launch_pad_tail(k1 > 0 ? out1 : nullptr, k1, k2 > 0 ? out2 : nullptr, k2, m_cap, padded_offs + groups - 1,
                         stream);
}
