// The pingpong instance of the CUTLASS sm_90 FP8 grouped GEMM (see sm90.hip, sm90_common.h).
// hipfp8-build: backend=cuda
// hipfp8-build: cuda-arch=90a
// hipfp8-build: requires=cutlass
// hipfp8-build: cuda-flags=--expt-relaxed-constexpr -DNDEBUG
//
// Its own translation unit so that the two instances compile in parallel.
#include "sm90_common.h"

namespace hipfp8_gg_cutlass {

size_t pingpong_workspace_bytes(int groups, int sms) {
  return cutlass_workspace_bytes<Pingpong>(groups, sms);
}

int pingpong_run(bool two_d_two_d, const uint8_t* a, int fmt_a, const uint8_t* b, int fmt_b,
                 const int32_t* offs, int groups, const float* sa, const float* sb, void* out,
                 int64_t d0, int64_t d1, int64_t d2, void* workspace, int sms,
                 hipStream_t stream) {
  return run_op<Pingpong>(two_d_two_d, a, fmt_a, b, fmt_b, offs, groups, sa, sb, out, d0, d1, d2,
                          workspace, sms, stream);
}

}  // namespace hipfp8_gg_cutlass
