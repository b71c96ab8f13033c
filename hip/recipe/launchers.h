// launchers.h -- the extern "C" launchers of the MoE training recipe's own kernel
// (hip/recipe/reciprocal.hip), included by hip/launchers.h (bindgen: src/sys/launchers.rs).
// The recipe (src/recipe.rs) composes the existing casts and grouped GEMMs; the one thing it
// needs that no op computes is the GEMMs' dequant scales, the reciprocals of the casts' scales.
#pragma once

#include "../kernel_abi.h"
#ifndef HIPFP8_BINDGEN
#include "../port.h"
#endif

/// out[i] = 1 / in[i] for i in [0, n): the IEEE f32 division (computed in f64 and rounded
/// once, which is the correctly rounded f32 quotient), as torch's Tensor.reciprocal; 1/0 =
/// +Inf, 1/NaN = the canonical NaN 0x7FC00000. in and out may be the same buffer.
HIPFP8_DECL int hipfp8_scale_reciprocal_launch(const float* in, float* out, int64_t n,
    hipStream_t stream) HIPFP8_NOEXCEPT;
