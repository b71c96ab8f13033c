// common.h -- helpers shared by the quantization kernels: 16-byte input vectors, block
// reductions (wavefront-size agnostic: HIPFP8_WAVE), offset clamping, launch helpers.
#pragma once

#include "../knobs.h"

#include "../fp8_codec.h"
#include "../kernel_abi.h"

namespace hipfp8 {

// Launcher status values (docs/KERNEL_ABI.md): 0, the runtime's own code (> 0), or these.
enum : int {
  kLaunchOk = HIPFP8_KSTATUS_OK,
  kLaunchBadEnum = HIPFP8_KSTATUS_INVALID_ENUM,
  kLaunchBadShape = HIPFP8_KSTATUS_INVALID_SHAPE,
  kLaunchUnsupported = HIPFP8_KSTATUS_UNSUPPORTED,
  kLaunchNull = HIPFP8_KSTATUS_NULL_POINTER,
};

// Input element types. A 16-byte vector (uint4) holds EPV elements; amax/cast work in f32.
struct Bf16In {
  typedef uint16_t elem;
  static constexpr int EPV = 8;
  static __device__ inline float get(const uint4& v, int i) {
    const uint32_t w = (i >> 1) == 0 ? v.x : (i >> 1) == 1 ? v.y : (i >> 1) == 2 ? v.z : v.w;
    return u2f((i & 1) ? (w & 0xFFFF0000u) : (w << 16));
  }
  static __device__ inline float load1(const elem* p, int64_t i) { return u2f((uint32_t)p[i] << 16); }
  // max |x| bits over the vector (bf16 -> f32 is a shift, so work on the raw halves)
  static __device__ inline uint32_t absmax(const uint4& v) {
    uint32_t m = max(max((v.x << 16) & 0x7FFFFFFFu, v.x & 0x7FFF0000u), max((v.y << 16) & 0x7FFFFFFFu, v.y & 0x7FFF0000u));
    m = max(m, max((v.z << 16) & 0x7FFFFFFFu, v.z & 0x7FFF0000u));
    return max(m, max((v.w << 16) & 0x7FFFFFFFu, v.w & 0x7FFF0000u));
  }
};
struct F32In {
  typedef float elem;
  static constexpr int EPV = 4;
  static __device__ inline float get(const uint4& v, int i) {
    return u2f(i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w);
  }
  static __device__ inline float load1(const elem* p, int64_t i) { return p[i]; }
  static __device__ inline uint32_t absmax(const uint4& v) {
    return max(max(v.x & 0x7FFFFFFFu, v.y & 0x7FFFFFFFu), max(v.z & 0x7FFFFFFFu, v.w & 0x7FFFFFFFu));
  }
};

__device__ inline uint4 zero4() { return make_uint4(0, 0, 0, 0); }

// Scale and encode the EPV elements of one input vector; FIN = the group's amax is finite.
// Returns EPV bytes packed little-endian (bf16: 8 bytes, f32: 4 bytes in .x).
template <class In, uint32_t F, bool FIN>
__device__ inline uint2 cast_vec(const uint4& v, float s) {
  uint2 r;
  if constexpr (In::EPV == 8) {
    if constexpr (FIN) {
      r.x = encode4_finite<F>(In::get(v, 0) * s, In::get(v, 1) * s, In::get(v, 2) * s, In::get(v, 3) * s);
      r.y = encode4_finite<F>(In::get(v, 4) * s, In::get(v, 5) * s, In::get(v, 6) * s, In::get(v, 7) * s);
    } else {
      r.x = encode4_sw<F>(In::get(v, 0) * s, In::get(v, 1) * s, In::get(v, 2) * s, In::get(v, 3) * s);
      r.y = encode4_sw<F>(In::get(v, 4) * s, In::get(v, 5) * s, In::get(v, 6) * s, In::get(v, 7) * s);
    }
  } else {
    if constexpr (FIN) {
      r.x = encode4_finite<F>(In::get(v, 0) * s, In::get(v, 1) * s, In::get(v, 2) * s, In::get(v, 3) * s);
    } else {
      r.x = encode4_sw<F>(In::get(v, 0) * s, In::get(v, 1) * s, In::get(v, 2) * s, In::get(v, 3) * s);
    }
    r.y = 0;
  }
  return r;
}

template <class In>
__device__ inline void store_codes(uint8_t* dst, uint2 c) {
  if constexpr (In::EPV == 8) {
    *reinterpret_cast<uint2*>(dst) = c;
  } else {
    *reinterpret_cast<uint32_t*>(dst) = c.x;
  }
}

// Element chunk i (elements [i*EPV, i*EPV+EPV) of a row of K) as one vector. VEC: one aligned
// 16-byte load (K % EPV == 0, row start aligned). Otherwise element loads, zero past K: the
// unaligned / odd-K path shares all the arithmetic of the vector path.
template <class In, bool VEC>
__device__ inline uint4 load_chunk(const typename In::elem* row, int64_t i, int64_t K) {
  if constexpr (VEC) {
    return HIPFP8_LDG(reinterpret_cast<const uint4*>(row) + i);
  } else {
    uint32_t w[4] = {0, 0, 0, 0};
    const int64_t c0 = i * In::EPV;
#pragma unroll
    for (int e = 0; e < In::EPV; ++e) {
      if (c0 + e < K) {
        if constexpr (In::EPV == 8) {
          w[e >> 1] |= (uint32_t)reinterpret_cast<const uint16_t*>(row)[c0 + e] << (16 * (e & 1));
        } else {
          w[e] = f2u(reinterpret_cast<const float*>(row)[c0 + e]);
        }
      }
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// Bytes per row (K elements of elem_bytes) when 16 such rows stay below 2^31, else 0: then row
// offsets of a 16-row run can be 32-bit products added to one 64-bit base (one multiply-add per
// row instead of a 64-bit multiply; hip/quant/colwise.hip).
__host__ __device__ inline uint32_t row_stride32(int64_t K, int64_t elem_bytes) {
  return K * elem_bytes < (int64_t(1) << 27) ? (uint32_t)(K * elem_bytes) : 0u;
}

// a / b for a >= 0, b > 0: a 32-bit division where both fit (a 64-bit one is an out-of-line
// call; callers divide per row or per element).
__host__ __device__ inline int64_t div_nonneg(int64_t a, int64_t b) {
  return ((a | b) >> 32) == 0 ? (int64_t)((uint32_t)a / (uint32_t)b) : a / b;
}

// Store the EPV codes of chunk i of an output row of K bytes (VEC: one 8- or 4-byte store).
template <class In, bool VEC>
__device__ inline void store_chunk(uint8_t* orow, int64_t i, int64_t K, uint2 c) {
  if constexpr (VEC) {
    store_codes<In>(orow + i * In::EPV, c);
  } else {
    const int64_t c0 = i * In::EPV;
#pragma unroll
    for (int e = 0; e < In::EPV; ++e)
      if (c0 + e < K) orow[c0 + e] = (uint8_t)((e < 4 ? c.x : c.y) >> (8 * (e & 3)));
  }
}

// Max over a wavefront (all lanes active).
__device__ inline uint32_t wave_max(uint32_t v) {
#pragma unroll
  for (int o = HIPFP8_WAVE / 2; o > 0; o >>= 1) v = max(v, (uint32_t)HIPFP8_SHFL_XOR(v, o));
  return v;
}

// Max over the block; every thread gets the result. red: BLOCK/HIPFP8_WAVE words of shared memory.
// Safe to call repeatedly with the same buffer (leading barrier).
template <int BLOCK>
__device__ inline uint32_t block_max(uint32_t v, uint32_t* red) {
  static_assert(BLOCK % HIPFP8_WAVE == 0, "block must be whole wavefronts");
  constexpr int NW = BLOCK / HIPFP8_WAVE;
  v = wave_max(v);
  if constexpr (NW == 1) {
    return v;
  } else {
    __syncthreads();
    if (threadIdx.x % HIPFP8_WAVE == 0) red[threadIdx.x / HIPFP8_WAVE] = v;
    __syncthreads();
    v = red[0];
#pragma unroll
    for (int i = 1; i < NW; ++i) v = max(v, red[i]);
    return v;
  }
}

// s[g] = min(max(offs[0..=g], 0), extent): the GPU's clamping of device-resident END offsets
// (docs/OPS.md): a prefix max keeps them non-decreasing, so bad offsets can never address
// memory outside [0, extent). Ends with a barrier.
template <int BLOCK>
__device__ inline void load_clamped_offsets(const int32_t* offs, int G, int64_t extent, int32_t* s) {
  __shared__ int32_t scan[BLOCK];
  int32_t carry = 0;
  for (int base = 0; base < G; base += BLOCK) {
    const int i = base + (int)threadIdx.x;
    int32_t v = i < G ? offs[i] : 0;
    v = v > carry ? v : carry;
    scan[threadIdx.x] = v;
    __syncthreads();
    for (int d = 1; d < BLOCK; d <<= 1) {
      const int32_t o = threadIdx.x >= (unsigned)d ? scan[threadIdx.x - d] : 0;
      __syncthreads();
      if (o > v) v = o;
      scan[threadIdx.x] = v;
      __syncthreads();
    }
    if (i < G) s[i] = (int64_t)v > extent ? (int32_t)extent : v;
    carry = scan[BLOCK - 1];
    __syncthreads();
  }
}

// First index g in [0, n) with a[g] > key (a non-decreasing), n if none.
__device__ inline int upper_bound_i32(const int32_t* a, int n, int64_t key) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if ((int64_t)a[mid] > key) hi = mid; else lo = mid + 1;
  }
  return lo;
}

inline bool aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

// Grouped launches keep per-group tables in shared memory for at most kGroupChunk groups (the
// launch configurations that were tuned and measured). Past that a launcher first runs
// launch_group_tables (one block) into a device scratch of group_tables_words(G) words and
// then works on the clamped copy: in chunks of kGroupChunk groups (the column casts), or with
// kernels that read the tables from global memory (per_group_rowwise, rowwise_2d_padded).
constexpr int kGroupChunk = 2048;
__host__ __device__ inline int64_t group_tables_words(int64_t G) { return 2 * G; }
// clamped[g] = min(max(offs[0..=g], 0), extent) (load_clamped_offsets' rule), and when `pend`
// is not null pend[g] = sum over groups h <= g of (clamped[h] - clamped[h-1]) rounded up to 16
// (rowwise_2d_padded's padded END offsets). Queued on `st`; returns a launch status.
int launch_group_tables(const int32_t* offs, int64_t G, int64_t extent, int32_t* clamped, int32_t* pend,
                        hipStream_t st);
// Queue the zeroing of `bytes` of the context workspace used as group tables (every user
// leaves the workspace zero, hip/... and src/workspace.rs).
int clear_group_tables(void* p, int64_t bytes, hipStream_t st);

// Multiprocessor count of the current device (cached per device; cheap after the first call).
int device_sm_count();
// Blocks of `kernel` (launched with `block` threads and `smem` bytes of dynamic shared memory)
// that are resident on the current device at once: the occupancy query times the SM count, at
// least one per SM. A grid-stride or persistent kernel launched with MORE blocks than this runs
// its last blocks as a partial wave after the others have done all their work (a tail of up to
// one block's whole share); with exactly this many every block starts at once. `cache` is one
// call site's slot per device (kResidentDevs entries, zero-initialised static storage).
constexpr int kResidentDevs = 64;
int resident_grid(unsigned long long* cache, const void* kernel, int block, size_t smem);

// Kernel knobs (hip/knobs.h, the registry): the integer value of knob `id`'s environment
// variable (atoi), read once per process and cached; the registry's default when unset.
// Callers validate the value.
enum KnobId : int {
#define HIPFP8_KNOB_ID(id, ...) kKnob_##id,
  HIPFP8_KERNEL_KNOBS(HIPFP8_KNOB_ID)
#undef HIPFP8_KNOB_ID
  kKnobCount
};
int knob(KnobId id);

}  // namespace hipfp8

// Dispatch a runtime format value to a template argument; FN(FMT) must be an expression.
#define HIPFP8_DISPATCH_FMT(fmt, FN)                          \
  switch (fmt) {                                              \
    case hipfp8::kE4M3Fn: { constexpr uint32_t FMT = hipfp8::kE4M3Fn; return FN; } \
    case hipfp8::kE5M2: { constexpr uint32_t FMT = hipfp8::kE5M2; return FN; }     \
    case hipfp8::kE4M3FnUz: { constexpr uint32_t FMT = hipfp8::kE4M3FnUz; return FN; } \
    case hipfp8::kE5M2FnUz: { constexpr uint32_t FMT = hipfp8::kE5M2FnUz; return FN; } \
    default: return hipfp8::kLaunchBadEnum;                    \
  }

