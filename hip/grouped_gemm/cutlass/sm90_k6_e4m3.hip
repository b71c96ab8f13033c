// CUTLASS sm_90 FP8 grouped GEMM instance e4m3_e4m3_k6 (table and launchers: sm90.hip; shared code:
// sm90_common.h): kind 6, cooperative 128 x 256 x 128, 2 x 2 cluster (both tiles multicast), E4M3 x E4M3.
// hipfp8-build: backend=cuda
// hipfp8-build: cuda-arch=90a
// hipfp8-build: requires=cutlass
// hipfp8-build: cuda-flags=--expt-relaxed-constexpr -DNDEBUG
//
// Its own translation unit so that the instances compile in parallel.
#include "sm90_common.h"

HIPFP8_GG_CUTLASS_INSTANCE(e4m3_e4m3_k6, Config<E4M3, E4M3, Shape<_128, _256, _128>, Shape<_2, _2, _1>, Coop, CoopEpi>)
