// stage.hip -- staged copies of the 2D x 2D (wgrad) grouped-GEMM groups a library can't read
// in place (docs/OPS.md grouped_gemm_2d2d "Any group start").
//
// A vendor library's 2D x 2D path (CUTLASS's TMA, CK's vector loads) needs every group to
// start on a 16-token boundary (CK: and a length a multiple of 16). The library launchers read
// such groups in place; a group `stage_2d2d` (group_args.h) selects -- off the boundary, or a
// length CK can't take -- is read from a staged copy this launcher writes first: group g's
// columns [lo_g, hi_g) of a (N, Mt) and of b (K rows of Mt tokens; the (Mt, K) column-major
// operand) go to columns [ps_g, ps_g + len_g) of staged_a (N, mt_pad) / staged_b (K, mt_pad),
//   ps_g = sum_{h<g} round_up(len_h, 16)     (the padded layout of `pad_wgrad`,
//                                             src/reference/moe.rs `pad_cols`)
// with zero bytes in [ps_g + len_g, ps_g + round_up(len_g, 16)). Every group keeps its padded
// position (so the area is bounded by Mt + 15 * groups columns for any offsets), but only the
// selected groups are written: an aligned group costs the kernel the offsets and nothing else
// (no load, no store). It also writes the padded END offsets
// padded_offs[g] = ps_g + round_up(len_g, 16). The offsets stay on the device and are clamped
// as docs/OPS.md says (o[g] = min(max(o[g], o[g-1]), Mt)); the host never sees them.
//
// Why the library's result equals the one it gives on the padded layout, bit for bit: a staged
// group is the padded layout's group (same bytes, same reduction length round_up(len, 16),
// whose extra tokens are zeros, in the k-tiles the group already had: tiles are multiples of
// 16 tokens, so ceil(len/T) == ceil(round_up(len, 16)/T); the library zero-fills past a
// group's end anyway, so each MMA sees the same operand bytes and adds the same exact zero
// products). A group read in place starts on a 16-token boundary, so its bytes in each k-tile
// are the padded layout's too (TMA zero-fills past its length; CK reads it in place only when
// the length is a multiple of 16, i.e. when the padded layout adds nothing).
//
// Kernels. The group tables (clamped ends, padded ends) come from a block-wide scan of the
// offsets. With at most kSmemGroups groups every block of the copy kernel scans them into
// shared memory itself (one launch); with more, a one-block kernel writes them to global
// memory first (padded_offs and `scratch`) and the copy kernel reads them there. The copy
// kernel: thread x owns 16-byte chunks c of the staged rows (grid-stride), finds the group of
// chunk c once (binary search over the padded ends), skips it unless the group is selected,
// and copies that chunk for every row of its y range (a's N rows, then b's K rows): two
// aligned 16-byte loads (Mt % 16 == 0 and 16-byte aligned a, b: the library's whole-call
// rules, checked by the launcher), a funnel shift, the bytes past the group's end zeroed, one
// aligned 16-byte store.
#include "../port.h"
#include "../kernel_abi.h"
#include "launchers.h"
#include "group_args.h"

namespace hipfp8_gg_stage {

constexpr int THREADS = 256;
#ifndef HIPFP8_GG_STAGE_SMEM_GROUPS
#define HIPFP8_GG_STAGE_SMEM_GROUPS 1024
#endif
constexpr int kSmemGroups = HIPFP8_GG_STAGE_SMEM_GROUPS;
#ifndef HIPFP8_GG_STAGE_MAX_Y
#define HIPFP8_GG_STAGE_MAX_Y 512
#endif

struct alignas(16) Chunk {
  uint64_t lo, hi;
};

// The group tables of the clamped offsets, computed by the whole block (every thread calls):
// cend[g] = min(max(0, offs[0..=g]), Mt) (the clamped END offsets; by induction equal to
// OPS.md's o[g] = min(max(o[g], o[g-1]), Mt)) and pend[g] = sum_{h<=g} round_up(len_h, 16).
// cend / pend may be shared or global memory; Mt + 15 * groups <= INT32_MAX (the launcher).
__device__ inline void group_tables(const int32_t* offs, int groups, int32_t Mt, int32_t* cend,
                                    int32_t* pend) {
  __shared__ int32_t s_max[THREADS];
  __shared__ int32_t s_sum[THREADS];
  __shared__ int32_t s_carry[2];  // running max and padded sum of the chunks before
  const int t = threadIdx.x;
  if (t == 0) {
    s_carry[0] = 0;
    s_carry[1] = 0;
  }
  __syncthreads();
  for (int base = 0; base < groups; base += THREADS) {
    const int g = base + t;
    const int32_t o = g < groups ? offs[g] : 0;
    s_max[t] = o;
    __syncthreads();
    for (int off = 1; off < THREADS; off <<= 1) {  // inclusive prefix max
      const int32_t v = t >= off ? s_max[t - off] : s_max[t];
      __syncthreads();
      s_max[t] = s_max[t] > v ? s_max[t] : v;
      __syncthreads();
    }
    const int32_t carry_max = s_carry[0];
    int32_t m = s_max[t] > carry_max ? s_max[t] : carry_max;
    const int32_t hi = m < Mt ? m : Mt;
    // The previous end: the thread before's (or the carry's) clamped running max.
    int32_t prev = t > 0 ? (s_max[t - 1] > carry_max ? s_max[t - 1] : carry_max) : carry_max;
    prev = prev < Mt ? prev : Mt;
    const int32_t len = g < groups ? hi - prev : 0;
    s_sum[t] = (len + 15) & ~15;
    __syncthreads();
    for (int off = 1; off < THREADS; off <<= 1) {  // inclusive prefix sum
      const int32_t v = t >= off ? s_sum[t - off] : 0;
      __syncthreads();
      s_sum[t] += v;
      __syncthreads();
    }
    if (g < groups) {
      cend[g] = hi;
      pend[g] = s_carry[1] + s_sum[t];
    }
    __syncthreads();
    if (t == THREADS - 1) {
      s_carry[0] = m;  // m of the last thread: the running max of everything so far
      s_carry[1] += s_sum[t];
    }
    __syncthreads();
  }
}

__global__ void __launch_bounds__(THREADS)
    tables_kernel(const int32_t* offs, int groups, int32_t Mt, int32_t* cend, int32_t* pend) {
  group_tables(offs, groups, Mt, cend, pend);
}

// Bytes [s, s + v) of a 16-byte aligned row (1 <= v <= 16), zero-extended to 16 bytes. Reads
// the second aligned chunk only when the range reaches into it (then it lies inside the row).
__device__ inline Chunk load_shifted(const uint8_t* row, int64_t s, int v) {
  const int64_t base = s & ~(int64_t)15;
  const int sh = (int)(s & 15);
  const Chunk q0 = *reinterpret_cast<const Chunk*>(row + base);
  Chunk q1{0, 0};
  if (sh + v > 16) q1 = *reinterpret_cast<const Chunk*>(row + base + 16);
  // Little-endian: byte j of a chunk is bits 8j.. of lo (j < 8) or of hi.
  const uint64_t x0 = sh >= 8 ? q0.hi : q0.lo;
  const uint64_t x1 = sh >= 8 ? q1.lo : q0.hi;
  const uint64_t x2 = sh >= 8 ? q1.hi : q1.lo;
  const int b = (sh & 7) * 8;
  Chunk r;
  r.lo = b ? (x0 >> b) | (x1 << (64 - b)) : x0;
  r.hi = b ? (x1 >> b) | (x2 << (64 - b)) : x1;
  if (v < 16) {
    if (v <= 8) {
      r.hi = 0;
      if (v < 8) r.lo &= (((uint64_t)1) << (8 * v)) - 1;
    } else {
      r.hi &= (((uint64_t)1) << (8 * (v - 8))) - 1;
    }
  }
  return r;
}

// One launch: grid.x over the 16-byte chunks of a staged row, grid.y over rows. `smem`: every
// block computes the tables into shared memory (block (0,0) also writes padded_offs); else
// they are in global memory (cend = scratch, pend = padded_offs) from tables_kernel.
__global__ void __launch_bounds__(THREADS)
    copy_kernel(const uint8_t* a, const uint8_t* b, const int32_t* offs, int groups, int64_t N,
                int32_t Mt, int64_t K, uint8_t* sa, uint8_t* sb, int64_t mt_pad,
                int32_t* padded_offs, const int32_t* g_cend, int smem, int32_t align_len,
                int32_t min_len) {
  __shared__ int32_t s_cend[kSmemGroups];
  __shared__ int32_t s_pend[kSmemGroups];
  const int32_t* cend = g_cend;
  const int32_t* pend = padded_offs;
  if (smem) {
    group_tables(offs, groups, Mt, s_cend, s_pend);
    __syncthreads();
    if (blockIdx.x == 0 && blockIdx.y == 0)
      for (int g = threadIdx.x; g < groups; g += THREADS) padded_offs[g] = s_pend[g];
    cend = s_cend;
    pend = s_pend;
  }
  const int64_t total = pend[groups - 1];  // staged columns that belong to a group
  const int64_t rows = N + K;
  for (int64_t c = (int64_t)blockIdx.x * THREADS + threadIdx.x; c * 16 < total;
       c += (int64_t)gridDim.x * THREADS) {
    const int64_t p = c * 16;
    int lo = 0, hi = groups - 1;  // the first group whose padded end is past p
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (pend[mid] > p) hi = mid; else lo = mid + 1;
    }
    const int g = lo;
    const int64_t ps = g ? pend[g - 1] : 0;
    const int64_t src_lo = g ? cend[g - 1] : 0;
    const int64_t len = cend[g] - src_lo;
    // Groups read in place (or by the reference kernel) are not copied.
    if (!hipfp8_gg::stage_2d2d(src_lo, cend[g], align_len, min_len)) continue;
    const int64_t in = p - ps;  // < len: p < ps + round_up(len, 16) and in % 16 == 0
    const int v = len - in < 16 ? (int)(len - in) : 16;
    const int64_t s = src_lo + in;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
      const bool is_a = r < N;
      const int64_t rr = is_a ? r : r - N;
      const uint8_t* src = (is_a ? a : b) + rr * (int64_t)Mt;
      uint8_t* dst = (is_a ? sa : sb) + rr * mt_pad + p;
      *reinterpret_cast<Chunk*>(dst) = load_shifted(src, s, v);
    }
  }
}

inline bool aligned16(const void* p) { return ((uintptr_t)p & 15) == 0; }

}  // namespace hipfp8_gg_stage

using namespace hipfp8_gg_stage;

// Copy the groups of a (N, Mt) and b (K x Mt, i.e. the (Mt, K) column-major operand) of a
// 2D x 2D grouped GEMM that hipfp8_gg::stage_2d2d(lo, hi, align_len, min_len) selects to their
// padded positions in staged_a (N, mt_pad) and staged_b (K, mt_pad), and write
// padded_offs[groups] (see the top of this file). align_len, min_len: the library's (CUTLASS
// 1, 1; CK 16 and its minimum), the values its launcher gives group_2d2d_staged. Needs Mt % 16 == 0,
// mt_pad % 16 == 0, Mt + 15 * groups <= mt_pad <= INT32_MAX, 16-byte aligned a, b, staged_a,
// staged_b; `scratch` holds `groups` int32 (used when groups > the shared-memory tables).
// `max_blocks` caps each grid dimension (0 = default; tests use it to exercise the loops).
HIPFP8_EXTERN int hipfp8_gg_stage_2d2d(const uint8_t* a, const uint8_t* b, const int32_t* offs,
                                       int groups, int64_t N, int64_t Mt, int64_t K,
                                       uint8_t* staged_a, uint8_t* staged_b, int64_t mt_pad,
                                       int32_t* padded_offs, int32_t* scratch, int align_len,
                                       int64_t min_len, int max_blocks,
                                       hipStream_t stream) noexcept {
  if (groups < 0 || N < 0 || Mt < 0 || K < 0 || mt_pad < 0 || max_blocks < 0 || align_len < 1 ||
      min_len < 1)
    return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (groups == 0) return 0;
  if (Mt % 16 != 0 || mt_pad % 16 != 0 || mt_pad > INT32_MAX ||
      Mt + 15 * (int64_t)groups > mt_pad)
    return HIPFP8_KSTATUS_INVALID_SHAPE;
  if (offs == nullptr || padded_offs == nullptr ||
      (groups > kSmemGroups && scratch == nullptr) ||
      (N > 0 && (a == nullptr || staged_a == nullptr)) ||
      (K > 0 && (b == nullptr || staged_b == nullptr)))
    return HIPFP8_KSTATUS_NULL_POINTER;
  if (!aligned16(a) || !aligned16(b) || !aligned16(staged_a) || !aligned16(staged_b))
    return HIPFP8_KSTATUS_MISALIGNED;
  const int smem = groups <= kSmemGroups ? 1 : 0;
  if (!smem) {
    tables_kernel<<<1, THREADS, 0, stream>>>(offs, groups, (int32_t)Mt, scratch, padded_offs);
    const int st = (int)hipPeekAtLastError();
    if (st != 0) return st;
  }
  const int64_t cap_x = max_blocks > 0 ? max_blocks : 65535;
  const int64_t cap_y = max_blocks > 0 ? max_blocks : HIPFP8_GG_STAGE_MAX_Y;
  const int64_t chunk_blocks = (mt_pad / 16 + THREADS - 1) / THREADS;
  const int64_t rows = N + K;
  dim3 grid((unsigned)(chunk_blocks < 1 ? 1 : (chunk_blocks < cap_x ? chunk_blocks : cap_x)),
            (unsigned)(rows < 1 ? 1 : (rows < cap_y ? rows : cap_y)));
  const int32_t min_len32 = min_len < INT32_MAX ? (int32_t)min_len : INT32_MAX;
  copy_kernel<<<grid, THREADS, 0, stream>>>(a, b, offs, groups, N, (int32_t)Mt, K, staged_a,
                                            staged_b, mt_pad, padded_offs, scratch, smem,
                                            align_len, min_len32);
  HIPFP8_RETURN_LAUNCH_STATUS();
}
