// selftest.h -- what the hardware-vs-rule self-tests share (the FP8 codec's in common.hip,
// the bf16 rounding's in hip/moe/casts.hip): the recording of a mismatch. Device code only,
// not part of the host emulation.
#pragma once

#include "../port.h"

namespace hipfp8 {

// A mismatch at input bits x: the first 8 are recorded as (x, hw, rule) in first_bad, in the
// order of the recorded count mismatches[1]; the caller adds its own count to mismatches[0].
__device__ inline void selftest_record(unsigned long long* mismatches, uint32_t* first_bad, uint32_t x, uint32_t hw,
                                       uint32_t rule) {
  const unsigned long long idx = atomicAdd(mismatches + 1, 1ull);
  if (idx < 8) {
    first_bad[3 * idx] = x;
    first_bad[3 * idx + 1] = hw;
    first_bad[3 * idx + 2] = rule;
  }
}

}  // namespace hipfp8
