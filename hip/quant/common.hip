// common.hip -- host helpers shared by the quantization launchers, and the codec self-test.
#include "common.h"
#include "launchers.h"
#include "selftest.h"

#include <stdlib.h>

namespace hipfp8 {

// The current device's ordinal as the per-device caches index it (0 when it is unknown or
// past their kResidentDevs slots).
static int cache_device() {
  int dev = 0;
  if (hipGetDevice(&dev) != hipSuccess || dev < 0 || dev >= kResidentDevs) dev = 0;
  return dev;
}

// The multiprocessor count of device `dev` (a cache_device() index), read once per device.
static int sm_count_of(int dev) {
  static int cache[kResidentDevs];
  int n = __atomic_load_n(&cache[dev], __ATOMIC_RELAXED);
  if (n == 0) {
    if (hipDeviceGetAttribute(&n, hipDeviceAttributeMultiprocessorCount, dev) != hipSuccess || n < 1) n = 1;
    __atomic_store_n(&cache[dev], n, __ATOMIC_RELAXED);
  }
  return n;
}

int device_sm_count() { return sm_count_of(cache_device()); }

// One hipGetDevice per call (the occupancy slot and the SM count are both per device).
int resident_grid(unsigned long long* cache, const void* kernel, int block, size_t smem) {
  const int dev = cache_device();
  const unsigned long long c = __atomic_load_n(&cache[dev], __ATOMIC_RELAXED);  // (smem << 16) | per SM
  int per_sm = 0;
  if (c != 0 && (c >> 16) == smem) {
    per_sm = (int)(c & 0xFFFF);
  } else {
    if (hipOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block, smem) != hipSuccess || per_sm < 1) {
      (void)hipGetLastError();
      per_sm = 1;
    }
    if (per_sm > 0xFFFF) per_sm = 0xFFFF;
    __atomic_store_n(&cache[dev], ((unsigned long long)smem << 16) | (unsigned)per_sm, __ATOMIC_RELAXED);
  }
  return per_sm * sm_count_of(dev);
}

int knob(KnobId id) {
  struct Entry {
    const char* name;
    int unset;
  };
  static const Entry kTable[kKnobCount] = {
#define HIPFP8_KNOB_ENTRY(id, name, type, unset, when, what) {name, unset},
      HIPFP8_KERNEL_KNOBS(HIPFP8_KNOB_ENTRY)
#undef HIPFP8_KNOB_ENTRY
  };
  static int ready[kKnobCount], value[kKnobCount];
  if (__atomic_load_n(&ready[id], __ATOMIC_ACQUIRE)) return __atomic_load_n(&value[id], __ATOMIC_RELAXED);
  const char* e = getenv(kTable[id].name);
  const int v = e ? atoi(e) : kTable[id].unset;
  __atomic_store_n(&value[id], v, __ATOMIC_RELAXED);
  __atomic_store_n(&ready[id], 1, __ATOMIC_RELEASE);
  return v;
}

// Every finite f32 bit pattern (2^32 minus the NaN/Inf ones), each converted by encode4_finite
// (the hardware path where the target has one) and by encode_sw (the rule): counts mismatches
// and records the first few. On a target without hardware conversion both are the same code
// and the test is trivially clean (reported as such by hipfp8_codec_has_hw).
template <uint32_t F>
__global__ void codec_selftest_kernel(unsigned long long* mismatches, uint32_t* first_bad) {
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x * 4;
  unsigned long long bad = 0;
  for (uint64_t base = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4; base < (1ull << 32); base += stride) {
    float f[4];
    bool fin = true;
    for (int i = 0; i < 4; ++i) {
      f[i] = u2f((uint32_t)(base + i));
      fin = fin && (abs_bits(f[i]) < 0x7F800000u);
    }
    // non-finite patterns are handled by encode_sw in every kernel: replace them by 0 here
    for (int i = 0; i < 4; ++i)
      if (abs_bits(f[i]) >= 0x7F800000u) f[i] = 0.0f;
    const uint32_t hw = encode4_finite<F>(f[0], f[1], f[2], f[3]);
    const uint32_t sw = encode4_sw<F>(f[0], f[1], f[2], f[3]);
    if (hw != sw) {
      ++bad;
      selftest_record(mismatches, first_bad, (uint32_t)base, hw, sw);
    }
    (void)fin;
  }
  if (bad) atomicAdd(mismatches, bad);
}

// hipfp8-emu-begin group_tables (tests/group_tables_emu.rs runs this on the host)
// One block: the clamped offsets (a prefix max over contiguous per-thread runs, then across the
// threads) and, optionally, the padded END offsets (a prefix sum the same way), in global memory.
constexpr int kTablesBlock = 1024;
__global__ void __launch_bounds__(kTablesBlock)
group_tables_kernel(const int32_t* __restrict__ offs, int64_t G, int64_t extent, int32_t* __restrict__ clamped,
                    int32_t* __restrict__ pend) {
  __shared__ int64_t part[kTablesBlock];
  const int tid = threadIdx.x;
  const int64_t per = (G + kTablesBlock - 1) / kTablesBlock;
  const int64_t g0 = tid * per < G ? tid * per : G;
  const int64_t g1 = g0 + per < G ? g0 + per : G;
  // 1. prefix max of the raw offsets (0 below: negative offsets clamp to 0)
  int64_t run = 0;
  for (int64_t g = g0; g < g1; ++g) run = offs[g] > run ? offs[g] : run;
  part[tid] = run;
  __syncthreads();
  if (tid == 0) {
    int64_t acc = 0;
    for (int i = 0; i < kTablesBlock; ++i) {
      const int64_t v = part[i];
      part[i] = acc;  // exclusive prefix max
      acc = v > acc ? v : acc;
    }
  }
  __syncthreads();
  run = part[tid];
  for (int64_t g = g0; g < g1; ++g) {
    run = offs[g] > run ? offs[g] : run;
    clamped[g] = (int32_t)(run > extent ? extent : run);
  }
  if (!pend) return;
  __syncthreads();
  // 2. padded sizes, prefix sum (each thread reads the clamped entries it and its left
  // neighbour wrote; the barrier above orders them within the block)
  int64_t sum = 0;
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t n = clamped[g] - (g ? clamped[g - 1] : 0);
    sum += (n + 15) / 16 * 16;
  }
  __syncthreads();
  part[tid] = sum;
  __syncthreads();
  if (tid == 0) {
    int64_t acc = 0;
    for (int i = 0; i < kTablesBlock; ++i) {
      const int64_t v = part[i];
      part[i] = acc;
      acc += v;
    }
  }
  __syncthreads();
  sum = part[tid];
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t n = clamped[g] - (g ? clamped[g - 1] : 0);
    sum += (n + 15) / 16 * 16;
    pend[g] = (int32_t)sum;
  }
}
// hipfp8-emu-end group_tables

int launch_group_tables(const int32_t* offs, int64_t G, int64_t extent, int32_t* clamped, int32_t* pend,
                        hipStream_t st) {
  if (G <= 0) return kLaunchOk;
  group_tables_kernel<<<1, kTablesBlock, 0, st>>>(offs, G, extent, clamped, pend);
  HIPFP8_RETURN_LAUNCH_STATUS();
}

int clear_group_tables(void* p, int64_t bytes, hipStream_t st) {
  const hipError_t e = hipMemsetAsync(p, 0, (size_t)bytes, st);
  return e == hipSuccess ? kLaunchOk : (int)e;
}

}  // namespace hipfp8

using namespace hipfp8;

// Device scratch (bytes) of per_group_rowwise / rowwise_2d_padded for `groups` groups: 0 up to
// kGroupChunk groups (the tables live in shared memory), else the global tables. The scratch
// must be zero before use; the launch leaves it zero.
HIPFP8_EXTERN int hipfp8_grouped_scratch_bytes(int64_t groups, uint64_t* bytes) noexcept {
  if (!bytes) return kLaunchNull;
  if (groups < 0) return kLaunchBadShape;
  *bytes = groups > kGroupChunk ? 4 * (uint64_t)group_tables_words(groups) : 0;
  return kLaunchOk;
}

// 1 when this build converts `fmt` in hardware on the current device's target, else 0.
template <uint32_t F>
__global__ void codec_has_hw_kernel(int* r) { *r = has_hw_encode<F>() ? 1 : 0; }

// mismatches: 2 device u64 (total, recorded); first_bad: 24 device u32 (input, hw, sw) x 8.
HIPFP8_EXTERN int hipfp8_codec_selftest_launch(int format, unsigned long long* mismatches, uint32_t* first_bad,
                                        int* has_hw, hipStream_t stream) noexcept {
  const int grid = device_sm_count() * 8;
  switch ((uint32_t)format) {
#define HIPFP8_SELFTEST_CASE(FV)                                                        \
  case FV:                                                                              \
    codec_selftest_kernel<FV><<<grid, 256, 0, stream>>>(mismatches, first_bad);         \
    codec_has_hw_kernel<FV><<<1, 1, 0, stream>>>(has_hw);                               \
    break;
    HIPFP8_SELFTEST_CASE(kE4M3Fn)
    HIPFP8_SELFTEST_CASE(kE5M2)
    HIPFP8_SELFTEST_CASE(kE4M3FnUz)
    HIPFP8_SELFTEST_CASE(kE5M2FnUz)
#undef HIPFP8_SELFTEST_CASE
    default:
      return kLaunchBadEnum;
  }
  HIPFP8_RETURN_LAUNCH_STATUS();
}
