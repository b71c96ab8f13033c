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
#include "launchers.h"
#include "policy.h"

namespace hipfp8 {

// ------------------------------------------------------------------------------ rowwise_2d

// The rows of a rowwise cast: row r at x + r*K; or, for expert weights stacked along n from two
// sources (x1 not null; colwise_3d of the stack), row r = e*n + j (j < n) at x + (e*n0 + j)*K
// when j < n0, else at x1 + (e*(n - n0) + j - n0)*K.
template <class E>
struct RowSrc {
  const E* x;
  const E* x1;
  int64_t n, n0;
  __device__ inline const E* row(int64_t r, int64_t K) const {
    if (!x1) return x + r * K;
    const int64_t e = r / n, j = r - e * n;
    return j < n0 ? x + (e * n0 + j) * K : x1 + (e * (n - n0) + j - n0) * K;
  }
};

// The scale a row stores: the forward scale s, or (dequant) the GEMMs' 1 / s. Called once the
// row's codes are stored (dequant_scale's f64 division is an out-of-line call: made while the
// row is held in registers, it would make the compiler spill them).
__device__ inline float stored_scale(float s, int dequant) { return dequant ? dequant_scale(s) : s; }

template <class In, uint32_t F, int BLOCK, int VPT>
__global__ void __launch_bounds__(BLOCK)
rowwise_vec_kernel(RowSrc<typename In::elem> src, uint8_t* __restrict__ out, float* __restrict__ scales,
                   int64_t M, int64_t K, int pow2, int dequant) {
  constexpr int EPV = In::EPV;
  __shared__ uint32_t red[BLOCK / HIPFP8_WAVE];
  const int64_t nv = K / EPV;
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const uint4* xr = reinterpret_cast<const uint4*>(src.row(row, K));
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
    if (threadIdx.x == 0) scales[row] = stored_scale(s, dequant);
  }
}

template <class In, uint32_t F, int BLOCK>
__global__ void __launch_bounds__(BLOCK)
rowwise_scalar_kernel(RowSrc<typename In::elem> src, uint8_t* __restrict__ out, float* __restrict__ scales,
                      int64_t M, int64_t K, int pow2, int dequant) {
  __shared__ uint32_t red[BLOCK / HIPFP8_WAVE];
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const typename In::elem* xr = src.row(row, K);
    uint32_t am = 0;
    for (int64_t i = threadIdx.x; i < K; i += BLOCK) am = max(am, abs_bits(In::load1(xr, i)));
    am = block_max<BLOCK>(am, red);
    const float s = amax_to_scale<F>(am, pow2 != 0);
    if (threadIdx.x == 0) scales[row] = stored_scale(s, dequant);
    for (int64_t i = threadIdx.x; i < K; i += BLOCK) out[row * K + i] = (uint8_t)encode_sw<F>(In::load1(xr, i) * s);
  }
}

// Row-length buckets (policy.h, rowwise_cfg): BLOCK threads x VPT vectors cover the row from
// registers.
// registers. x1 / n / n0: the rows of RowSrc (x1 null: one source); dequant: see stored_scale.
template <class In, uint32_t F>
static int launch_rowwise(const void* x, const void* x1, int64_t n, int64_t n0, int64_t m, int64_t k, uint8_t* out,
                          float* scales, int pow2, int dequant, hipStream_t st) {
  typedef typename In::elem E;
  const RowSrc<E> src{static_cast<const E*>(x), static_cast<const E*>(x1), n, n0};
  const int64_t grid = m < 0x7FFFFFFF ? m : 0x7FFFFFFF;
  const bool vec = k % In::EPV == 0 && aligned16(x) && (!x1 || aligned16(x1)) && ((uintptr_t)out % (In::EPV) == 0);
  if (!vec) {
    rowwise_scalar_kernel<In, F, 256><<<(unsigned)grid, 256, 0, st>>>(src, out, scales, m, k, pow2, dequant);
    HIPFP8_RETURN_LAUNCH_STATUS();
  }
  with_index<kRowwiseCfgCount>(rowwise_cfg(k / In::EPV), [&](auto i) {
    constexpr RowCfg c = kRowwiseCfgs[decltype(i)::value];
    rowwise_vec_kernel<In, F, c.block, c.vpt>
        <<<(unsigned)grid, c.block, 0, st>>>(src, out, scales, m, k, pow2, dequant);
  });
  HIPFP8_RETURN_LAUNCH_STATUS();
}

// ------------------------------------------------------------------------------ per_group_rowwise
// Groups are runs of columns [offs[g-1], offs[g]) shared by every row; scales[g*M + row].
// Persistent grid (as many blocks as are resident): a block owns rows blockIdx.x, +gridDim.x, ...
// and keeps the row in registers (VPT 16-byte vectors per thread). Per block, once: the clamped
// offsets and a map of its register-held vectors (shared memory, 2 bytes per vector: group,
// whole-wavefront flag). Per row, ONE barrier:
//   pass 1  per-group amax into shared memory: a wavefront whose vector j lies in one group
//           reduces it (redux / shuffles) and sends one atomicMax; a wavefront spanning a group
//           end does a segmented max (groups are monotone over its lanes) and one atomic per
//           segment; vectors that straddle a group end (rare: group ends not on a vector
//           boundary) go element by element in a loop that is not unrolled.
//   barrier
//   scales  with G <= wave size, each lane of each wavefront computes the scale of group
//           `lane` into the wavefront's own table in shared memory, where each vector reads its
//           group's (no second barrier: the wavefront orders its own table); with more groups, the scales overwrite the row's amax
//           buffer in shared memory behind a second barrier. amax_to_scale_nodiv: no division,
//           so no out-of-line call that would make the compiler spill the row.
//   pass 2  cast from registers and store; then the next row's loads go out at once.
// The amax buffers rotate over 3 (the one reset after the barrier of row r was last read in
// row r-1, before that barrier, and is next written in row r+2, after the next barrier).
// The first row's loads are issued before the per-block set-up so that its latency hides them.
// Rows longer than VPT*BLOCK vectors re-read the rest (L2-resident) vector by vector.
// Shared memory: offsets 4*G, amax 12*G, wavefront scale tables 4*BLOCK, map 2*BLOCK*VPT bytes.

constexpr int kRowwiseMaxGroups = kGroupChunk;  // shared-memory tables up to here (hipfp8_grouped_scratch_bytes)
constexpr uint32_t kMapNone = 0x7FFF;      // this lane's vector crosses a group end, or lies past the last group
constexpr uint32_t kMapUniform = 0x8000;   // flag: the whole wavefront's vector j is in this group
constexpr uint32_t kMapWaveNone = 0xFFFF;  // every lane of the wavefront is kMapNone

// VPT 2-byte map entries of one thread, read from shared memory at once (few registers, and
// the compiler cannot hoist VPT separate loads into VPT live registers).
template <int VPT> struct PgrMap;
template <> struct PgrMap<4> {
  uint2 w;
  __device__ inline void load(const uint16_t* p) { w = *reinterpret_cast<const uint2*>(p); }
  __device__ inline uint32_t get(int j) const {
    const uint32_t x = (j >> 1) == 0 ? w.x : w.y;
    return (j & 1) ? x >> 16 : x & 0xFFFFu;
  }
};
template <> struct PgrMap<8> {
  uint4 w;
  __device__ inline void load(const uint16_t* p) { w = *reinterpret_cast<const uint4*>(p); }
  __device__ inline uint32_t get(int j) const {
    const uint32_t x = (j >> 1) == 0 ? w.x : (j >> 1) == 1 ? w.y : (j >> 1) == 2 ? w.z : w.w;
    return (j & 1) ? x >> 16 : x & 0xFFFFu;
  }
};

// Whether the scale amax_to_scale produced comes from a finite amax: a finite amax gives a
// positive normal finite scale (fp8_max / [1e-12, FLT_MAX], pow2 rounding keeps it normal),
// an infinite one 0, a NaN one NaN. So: bits in [1, 0x7F7FFFFF].
__device__ inline bool scale_of_finite_amax(float s) { return f2u(s) - 1u < 0x7F7FFFFFu; }

template <class In, uint32_t F, int BLOCK, int VPT, bool VEC, bool SMALLG>
__global__ void HIPFP8_LAUNCH_BOUNDS_MIN_BLOCKS(BLOCK, 1024 / BLOCK)
per_group_rowwise_kernel(const typename In::elem* __restrict__ x, const int32_t* __restrict__ offs, int G,
                         uint8_t* __restrict__ out, float* __restrict__ scales, int64_t M, int64_t K, int pow2) {
  constexpr int EPV = In::EPV;  // chunks of EPV elements; !VEC loads them element by element
  constexpr int W = HIPFP8_WAVE;
  extern __shared__ uint4 pgr_smem[];
  int32_t* s_offs = reinterpret_cast<int32_t*>(pgr_smem);
  uint32_t* s_amax = reinterpret_cast<uint32_t*>(pgr_smem) + G;  // 3 rotating buffers of G
  float* s_wsc = reinterpret_cast<float*>(pgr_smem) + 4 * G;  // [BLOCK / W][W]: per-wavefront scales
  uint16_t* s_map = reinterpret_cast<uint16_t*>(reinterpret_cast<uint32_t*>(pgr_smem) + 4 * G + BLOCK);  // [BLOCK][VPT]
  const int lane = threadIdx.x % W;
  int64_t row = blockIdx.x;  // < M: the grid is at most M blocks
  load_clamped_offsets<BLOCK>(offs, G, K, s_offs);
  const int kend = s_offs[G - 1];  // columns past the last group are not written (offsets are int32)
  const int nv = (int)(((int64_t)kend + EPV - 1) / EPV);
  for (int g = threadIdx.x; g < 2 * G; g += BLOCK) s_amax[g] = 0;  // buffers 0 and 1
#pragma unroll 1
  for (int j = 0; j < VPT; ++j) {
    const int64_t i = threadIdx.x + (int64_t)j * BLOCK;
    const int64_t c0 = i * EPV;
    const int g = upper_bound_i32(s_offs, G, c0);
    const int gv = (i < nv && g < G && c0 + EPV <= s_offs[g]) ? g : -1;
    int mn = gv, mx = gv;
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) {
      const int a = HIPFP8_SHFL_XOR(mn, o), b = HIPFP8_SHFL_XOR(mx, o);
      mn = a < mn ? a : mn;
      mx = b > mx ? b : mx;
    }
    const uint32_t e = mx < 0 ? kMapWaveNone : gv < 0 ? kMapNone : (uint32_t)gv | (mn == mx ? kMapUniform : 0u);
    s_map[threadIdx.x * VPT + j] = (uint16_t)e;
  }
  __syncthreads();
  // Pass 1 off the fast path, for row r into amax buffer am: lanes whose vector straddles a
  // group end (element by element) and vectors past the register-held ones (rows longer than
  // VPT*BLOCK vectors). Both re-read x and need no register-held data, so they run where the
  // row's registers are dead: for the next row, right before its loads go out.
  auto rare_pass1 = [&](int64_t r, uint32_t* am) {
    const typename In::elem* xr = x + r * K;
#pragma unroll 1
    for (int j = 0; j < VPT; ++j) {
      if ((s_map[threadIdx.x * VPT + j] & kMapNone) != kMapNone) continue;
      const int64_t c0 = (threadIdx.x + (int64_t)j * BLOCK) * EPV;
      for (int64_t c = c0; c < c0 + EPV && c < kend; ++c)
        atomicMax(&am[upper_bound_i32(s_offs, G, c)], abs_bits(In::load1(xr, c)));
    }
    for (int64_t i = threadIdx.x + (int64_t)VPT * BLOCK; i < nv; i += BLOCK) {
      const int64_t c0 = i * EPV;
      const int g = upper_bound_i32(s_offs, G, c0);
      if (c0 + EPV <= s_offs[g]) {
        atomicMax(&am[g], In::absmax(load_chunk<In, VEC>(xr, i, K)));
      } else {
        for (int64_t c = c0; c < c0 + EPV && c < kend; ++c)
          atomicMax(&am[upper_bound_i32(s_offs, G, c)], abs_bits(In::load1(xr, c)));
      }
    }
  };
  auto load_row = [&](int64_t r, uint4* v) {
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int64_t i = threadIdx.x + (int64_t)j * BLOCK;
      v[j] = i < nv ? load_chunk<In, VEC>(x + r * K, i, K) : zero4();
    }
  };
  uint4 v[VPT];
  rare_pass1(row, s_amax);
  load_row(row, v);
  int buf = 0;
  for (; row < M; row += gridDim.x) {
    const typename In::elem* xr = x + row * K;
    uint32_t* am = s_amax + buf * G;
    // pass 1: amax per group
    PgrMap<VPT> mp;
    mp.load(s_map + threadIdx.x * VPT);
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const uint32_t e = mp.get(j);  // the branches below are uniform over the wavefront
      if (e == kMapWaveNone) continue;
      const uint32_t a = In::absmax(v[j]);
      if (e & kMapUniform) {
        const uint32_t m = hipfp8_wave_max_u32(a);
        if (lane == 0) atomicMax(&am[e & kMapNone], m);
      } else {
        // segmented max over lanes of equal group (contiguous runs; kMapNone lanes are -1)
        const int gl = e == kMapNone ? -1 : (int)e;
        uint32_t m = a;
#pragma unroll
        for (int o = 1; o < W; o <<= 1) {
          const int src = lane >= o ? lane - o : lane;
          const uint32_t om = HIPFP8_SHFL(m, src);
          const int og = HIPFP8_SHFL(gl, src);
          if (og == gl) m = om > m ? om : m;
        }
        const int ng = HIPFP8_SHFL(gl, lane + 1 < W ? lane + 1 : lane);
        if (gl >= 0 && (lane == W - 1 || ng != gl)) atomicMax(&am[gl], m);
      }
    }
    __syncthreads();
    {
      uint32_t* nb = s_amax + (buf == 0 ? 2 : buf - 1) * G;
      for (int g = threadIdx.x; g < G; g += BLOCK) nb[g] = 0;
    }
    // scales. Few groups: lane l of every wavefront holds the scale of group l. Many: the amax
    // buffer of this row is overwritten with the scales (its owner thread is its only reader
    // here) and a second barrier publishes them.
    float* wsc = s_wsc + (threadIdx.x - lane);
    if (SMALLG) {
      const float lsc = amax_to_scale_nodiv<F>(lane < G ? am[lane] : 0u, pow2 != 0);
      wsc[lane] = lsc;
      if ((int)threadIdx.x < G) scales[(int64_t)threadIdx.x * M + row] = lsc;
      HIPFP8_SYNC_WAVE();
    } else {
      for (int g = threadIdx.x; g < G; g += BLOCK) {
        const float sc = amax_to_scale_nodiv<F>(am[g], pow2 != 0);
        am[g] = f2u(sc);
        scales[(int64_t)g * M + row] = sc;
      }
      __syncthreads();
    }
    // the scale of group g, off the fast path
    auto scale_of = [&](int g) { return SMALLG ? amax_to_scale_nodiv<F>(am[g], pow2 != 0) : u2f(am[g]); };
    // pass 2: cast from registers
    uint8_t* orow = out + row * K;
    mp.load(s_map + threadIdx.x * VPT);
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const uint32_t e = mp.get(j);
      if ((e & kMapNone) != kMapNone) {
        const float sc = SMALLG ? wsc[e & (W - 1)] : u2f(am[e & kMapNone]);
        const int64_t i = threadIdx.x + (int64_t)j * BLOCK;
        uint2 c;
        if (scale_of_finite_amax(sc)) c = cast_vec<In, F, true>(v[j], sc);
        else c = cast_vec<In, F, false>(v[j], sc);
        store_chunk<In, VEC>(orow, i, K, c);
      }
    }
#pragma unroll 1
    for (int j = 0; j < VPT; ++j) {
      if ((s_map[threadIdx.x * VPT + j] & kMapNone) != kMapNone) continue;
      const int64_t c0 = (threadIdx.x + (int64_t)j * BLOCK) * EPV;
      for (int64_t c = c0; c < c0 + EPV && c < kend; ++c)
        orow[c] = (uint8_t)encode_sw<F>(In::load1(xr, c) * scale_of(upper_bound_i32(s_offs, G, c)));
    }
    for (int64_t i = threadIdx.x + (int64_t)VPT * BLOCK; i < nv; i += BLOCK) {
      const int64_t c0 = i * EPV;
      const int g = upper_bound_i32(s_offs, G, c0);
      if (c0 + EPV <= s_offs[g]) {
        const float sc = scale_of(g);
        const uint4 w = load_chunk<In, VEC>(xr, i, K);
        if (scale_of_finite_amax(sc)) store_chunk<In, VEC>(orow, i, K, cast_vec<In, F, true>(w, sc));
        else store_chunk<In, VEC>(orow, i, K, cast_vec<In, F, false>(w, sc));
      } else {
        for (int64_t c = c0; c < c0 + EPV && c < kend; ++c)
          orow[c] = (uint8_t)encode_sw<F>(In::load1(xr, c) * scale_of(upper_bound_i32(s_offs, G, c)));
      }
    }
    // the next row: its rare pass-1 work, then its loads go out (its barrier is the only wait)
    buf = buf == 2 ? 0 : buf + 1;
    const int64_t nrow = row + gridDim.x;
    if (nrow < M) {
      rare_pass1(nrow, s_amax + buf * G);
      load_row(nrow, v);
    }
  }
}

// Blocks of the persistent kernel: the resident count (resident_grid), or
// pgr_blocks_per_sm() (policy.h) times the SM count.
template <class In, uint32_t F, int B, int V, bool VECF, bool SMALLG>
static int pgr_grid_cap(size_t smem) {
  const int per_sm = pgr_blocks_per_sm();
  if (per_sm > 0) return per_sm * device_sm_count();
  static unsigned long long cache[kResidentDevs];
  return resident_grid(cache, reinterpret_cast<const void*>(per_group_rowwise_kernel<In, F, B, V, VECF, SMALLG>), B, smem);
}

template <class In, uint32_t F, int B, int V, bool VECF, bool SMALLG>
static int launch_pgr_cfg(const typename In::elem* x, const int32_t* offs, int G, int64_t m, int64_t k, uint8_t* out,
                          float* scales, int pow2, hipStream_t st) {
  // dynamic shared memory: 16 bytes per group, 4 per thread, 2 per register-held vector
  const size_t smem = (size_t)G * 16 + (size_t)B * 4 + (size_t)B * V * 2;
  const int64_t cap = pgr_grid_cap<In, F, B, V, VECF, SMALLG>(smem);
  const int64_t grid = m < cap ? m : cap;
  per_group_rowwise_kernel<In, F, B, V, VECF, SMALLG><<<(unsigned)grid, B, smem, st>>>(x, offs, G, out, scales, m, k, pow2);
  HIPFP8_RETURN_LAUNCH_STATUS();
}

template <class In, uint32_t F, bool SMALLG>
static int launch_pgr_shape(const typename In::elem* xp, const int32_t* offs, int G, int64_t m, int64_t k, uint8_t* out,
                            float* scales, int pow2, hipStream_t st) {
  const bool vec = k % In::EPV == 0 && aligned16(xp) && ((uintptr_t)out % In::EPV == 0);
  constexpr RowCfg s = kGroupedRowScalarCfg;
  if (!vec) return launch_pgr_cfg<In, F, s.block, s.vpt, false, SMALLG>(xp, offs, G, m, k, out, scales, pow2, st);
  return with_index<kGroupedRowCfgCount>(grouped_row_cfg(k / In::EPV), [&](auto i) {
    constexpr RowCfg c = kGroupedRowCfgs[decltype(i)::value];
    return launch_pgr_cfg<In, F, c.block, c.vpt, true, SMALLG>(xp, offs, G, m, k, out, scales, pow2, st);
  });
}

// More than kRowwiseMaxGroups groups (the shared-memory tables of the kernel above would not
// fit): one wavefront per (row, group), reading the clamped offsets from global memory
// (launch_group_tables). Group amax by wavefront max, the scale, then the cast: the same
// rule and codec as every other kernel (encode_sw is the reference encoder). Not a tuned path;
// it exists so that any group count is exact.
// hipfp8-emu-begin pgr_global (tests/group_tables_emu.rs runs this on the host)
constexpr int kPgrGlobalBlock = 256;
template <class In, uint32_t F>
__global__ void __launch_bounds__(kPgrGlobalBlock)
per_group_rowwise_global_kernel(const typename In::elem* __restrict__ x, const int32_t* __restrict__ clamped, int G,
                                uint8_t* __restrict__ out, float* __restrict__ scales, int64_t M, int64_t K,
                                int pow2) {
  constexpr int W = HIPFP8_WAVE;
  const int lane = threadIdx.x % W;
  const int64_t nwarps = (int64_t)gridDim.x * (kPgrGlobalBlock / W);
  const int64_t ntask = M * (int64_t)G;
  // t is the same for every lane of a wavefront, so the loop and wave_max are uniform
  for (int64_t t = ((int64_t)blockIdx.x * kPgrGlobalBlock + threadIdx.x) / W; t < ntask; t += nwarps) {
    const int64_t row = t / G;
    const int g = (int)(t - row * G);
    const int64_t cs = g ? clamped[g - 1] : 0, ce = clamped[g];
    const typename In::elem* xr = x + row * K;
    uint32_t am = 0;
    for (int64_t c = cs + lane; c < ce; c += W) am = max(am, abs_bits(In::load1(xr, c)));
    am = wave_max(am);
    const float s = amax_to_scale<F>(am, pow2 != 0);
    if (lane == 0) scales[(int64_t)g * M + row] = s;
    uint8_t* orow = out + row * K;
    for (int64_t c = cs + lane; c < ce; c += W) orow[c] = (uint8_t)encode_sw<F>(In::load1(xr, c) * s);
  }
}
// hipfp8-emu-end pgr_global

template <class In, uint32_t F>
static int launch_per_group_rowwise(const void* x, const int32_t* offs, int G, int64_t m, int64_t k, uint8_t* out,
                                    float* scales, int pow2, void* ws, hipStream_t st) {
  const typename In::elem* xp = static_cast<const typename In::elem*>(x);
  if (G > kRowwiseMaxGroups) {
    if (!ws) return kLaunchNull;
    int32_t* clamped = static_cast<int32_t*>(ws);
    int r = launch_group_tables(offs, G, k, clamped, nullptr, st);
    if (r != kLaunchOk) return r;
    const int64_t grid = pgr_global_grid(m * (int64_t)G, kPgrGlobalBlock / HIPFP8_WAVE);
    per_group_rowwise_global_kernel<In, F><<<(unsigned)grid, kPgrGlobalBlock, 0, st>>>(xp, clamped, G, out, scales, m,
                                                                                       k, pow2);
    hipError_t e = hipGetLastError();
    if (e != hipSuccess) return (int)e;
    return clear_group_tables(ws, 4 * group_tables_words(G), st);
  }
  if (pgr_small_groups(G)) return launch_pgr_shape<In, F, true>(xp, offs, G, m, k, out, scales, pow2, st);
  return launch_pgr_shape<In, F, false>(xp, offs, G, m, k, out, scales, pow2, st);
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
                      int64_t M, int64_t K, int pow2, const int32_t* tables) {
  __shared__ uint32_t red[BLOCK / HIPFP8_WAVE];
  extern __shared__ int32_t pdyn[];
  // tables (more than kGroupChunk groups): the clamped and the padded END offsets, computed
  // once by launch_group_tables in global memory; else each block computes them here.
  const int32_t* s_offs = tables;
  const int32_t* s_pend = tables ? tables + G : nullptr;
  if (!tables) {
    load_clamped_offsets<BLOCK>(offs, G, M, pdyn);
    if (threadIdx.x == 0) {
      int64_t acc = 0;
      for (int g = 0; g < G; ++g) {
        const int64_t n = pdyn[g] - (g ? pdyn[g - 1] : 0);
        acc += (n + 15) / 16 * 16;
        pdyn[G + g] = (int32_t)acc;
      }
    }
    __syncthreads();
    s_offs = pdyn;
    s_pend = pdyn + G;
  }
  if (blockIdx.x == 0)
    for (int g = threadIdx.x; g < G; g += BLOCK) padded_offs[g] = s_pend[g];
  const int64_t total = G > 0 ? s_pend[G - 1] : 0;
  constexpr int EPV = In::EPV;
  const int64_t nv = (K + EPV - 1) / EPV;
  // the group of row r: rows only grow within a block, so walk forward from the previous row's
  // group (usually 0 or 1 step) instead of a binary search before every row's loads; the same
  // index as upper_bound_i32(s_pend, G, r) (first g with s_pend[g] > r; r < total = s_pend[G-1])
  int g = 0;
  for (int64_t r = blockIdx.x; r < total; r += gridDim.x) {
    while ((int64_t)s_pend[g] <= r) ++g;
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
                                 float* scales, int32_t* padded_offs, int pow2, void* ws, hipStream_t st) {
  typedef typename In::elem E;
  const E* xp = static_cast<const E*>(x);
  int32_t* tables = nullptr;
  if (G > kGroupChunk) {
    if (!ws) return kLaunchNull;
    tables = static_cast<int32_t*>(ws);
    const int r = launch_group_tables(offs, G, m, tables, tables + G, st);
    if (r != kLaunchOk) return r;
  }
  const size_t smem = tables ? 0 : (size_t)G * 8;
  const int64_t rows_bound = m + 15 * (int64_t)G;
  const bool vec = k % In::EPV == 0 && aligned16(x) && ((uintptr_t)out % In::EPV == 0);
  const int64_t nv = (k + In::EPV - 1) / In::EPV;
  // Grid: padded_grid (policy.h) of the blocks resident at once.
  with_index<kGroupedRowCfgCount>(grouped_row_cfg(nv), [&](auto i) {
    constexpr RowCfg c = kGroupedRowCfgs[decltype(i)::value];
    static unsigned long long cache[2][kResidentDevs];
    const void* kfn = vec ? reinterpret_cast<const void*>(rowwise_padded_kernel<In, F, c.block, c.vpt, true>)
                          : reinterpret_cast<const void*>(rowwise_padded_kernel<In, F, c.block, c.vpt, false>);
    const int64_t grid = padded_grid(resident_grid(cache[vec], kfn, c.block, smem), rows_bound);
    if (vec)
      rowwise_padded_kernel<In, F, c.block, c.vpt, true>
          <<<(unsigned)grid, c.block, smem, st>>>(xp, offs, G, out, scales, padded_offs, m, k, pow2, tables);
    else
      rowwise_padded_kernel<In, F, c.block, c.vpt, false>
          <<<(unsigned)grid, c.block, smem, st>>>(xp, offs, G, out, scales, padded_offs, m, k, pow2, tables);
  });
  const hipError_t e = hipGetLastError();
  if (e != hipSuccess) return (int)e;
  return tables ? clear_group_tables(tables, 4 * group_tables_words(G), st) : kLaunchOk;
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
  return hipfp8_colwise_3d_pair_launch(x, nullptr, out, scales, 1, k, m, 0, format, pow2, 0, in_dtype, stream);
}

// colwise_3d (rowwise over the E*N rows of K) of x0 (e, k, n0) and x1 (e, k, n1) stacked along n
// per expert (x1 null: n1 = 0), the scales forward or dequant.
HIPFP8_EXTERN int hipfp8_colwise_3d_pair_launch(const void* x0, const void* x1, uint8_t* out, float* scales,
                                                int64_t e, int64_t k, int64_t n0, int64_t n1, int format, int pow2,
                                                int dequant, int in_dtype, hipStream_t stream) noexcept {
  if (e < 0 || k < 0 || n0 < 0 || n1 < 0 || (!x1 && n1 != 0)) return kLaunchBadShape;
  const int64_t n = n0 + n1;
  if (e == 0 || n == 0) return kLaunchOk;
  if (k == 0) return kLaunchBadShape;
  if (!x0 || !out || !scales) return kLaunchNull;
  const uint32_t fmt = (uint32_t)format;
  const int64_t m = e * n;
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (launch_rowwise<Bf16In, FMT>(x0, x1, n, n0, m, k, out, scales, pow2, dequant, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (launch_rowwise<F32In, FMT>(x0, x1, n, n0, m, k, out, scales, pow2, dequant, stream))); }
  return kLaunchBadEnum;
}

// x (m, k) row-major; groups of columns by END offsets offs[groups] (device memory, clamped);
// out[i*k + j] for columns inside a group, scales[g*m + i]. k == 0: every group is empty and
// only the scales are written. workspace: hipfp8_grouped_scratch_bytes(groups) bytes of the
// zeroed context workspace (null when that is 0).
HIPFP8_EXTERN int hipfp8_per_group_rowwise_launch(const void* x, const int32_t* offs, uint8_t* out, float* scales,
                                                  int64_t m, int64_t k, int64_t groups, int format, int pow2,
                                                  int in_dtype, void* workspace, hipStream_t stream) noexcept {
  if (m < 0 || k < 0 || groups < 0) return kLaunchBadShape;
  if (m == 0 || groups == 0) return kLaunchOk;
  if (groups > 0x7FFFFFFF) return kLaunchUnsupported;
  if (!offs || !scales || (k > 0 && (!x || !out))) return kLaunchNull;
  const uint32_t fmt = (uint32_t)format;
  const int G = (int)groups;
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (launch_per_group_rowwise<Bf16In, FMT>(x, offs, G, m, k, out, scales, pow2, workspace, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (launch_per_group_rowwise<F32In, FMT>(x, offs, G, m, k, out, scales, pow2, workspace, stream))); }
  return kLaunchBadEnum;
}

// Token groups padded to multiples of 16 rows, fused with the rowwise cast (see
// Context::rowwise_2d_padded). out (m_cap, k), scales[m_cap], padded_offs[groups]; the caller
// guarantees m_cap >= m + 15*groups. workspace: as for per_group_rowwise.
HIPFP8_EXTERN int hipfp8_rowwise_2d_padded_launch(const void* x, const int32_t* offs, uint8_t* out, float* scales,
                                                  int32_t* padded_offs, int64_t m, int64_t k, int64_t groups,
                                                  int format, int pow2, int in_dtype, void* workspace,
                                                  hipStream_t stream) noexcept {
  if (m < 0 || k <= 0 || groups < 0) return kLaunchBadShape;
  if (groups == 0) return kLaunchOk;
  if (groups > 0x7FFFFFFF) return kLaunchUnsupported;
  if (!offs || !out || !scales || !padded_offs || (m > 0 && !x)) return kLaunchNull;
  const uint32_t fmt = (uint32_t)format;
  const int G = (int)groups;
  if (in_dtype == HIPFP8_DTYPE_BF16) { HIPFP8_DISPATCH_FMT(fmt, (launch_rowwise_padded<Bf16In, FMT>(x, offs, G, m, k, out, scales, padded_offs, pow2, workspace, stream))); }
  if (in_dtype == HIPFP8_DTYPE_F32) { HIPFP8_DISPATCH_FMT(fmt, (launch_rowwise_padded<F32In, FMT>(x, offs, G, m, k, out, scales, padded_offs, pow2, workspace, stream))); }
  return kLaunchBadEnum;
}
