// launchers.h -- the extern "C" launchers of the MoE training recipe's own kernels
// (hip/recipe/scales.hip), included by hip/launchers.h (bindgen: src/sys/launchers.rs).
// The recipe (src/recipe.rs) composes the existing casts and grouped GEMMs; what it needs
// that no op computes: the GEMMs' dequant scales (the reciprocals of the casts' scales) and
// the two halves of a per-group scale table as separate tables.
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

/// out[h*groups*half + g*half + j] = in[g*2*half + h*half + j] for h < 2, g < groups,
/// j < half: a (groups, 2*half) f32 table as its two column halves, each (groups, half)
/// row-major (the W13 wgrad of the recipe takes the d_gate and d_up halves of the SwiGLU
/// gradient's per-group column scales as two GEMMs' scales). in and out must not overlap.
HIPFP8_DECL int hipfp8_scale_halves_launch(const float* in, float* out, int64_t groups, int64_t half,
    hipStream_t stream) HIPFP8_NOEXCEPT;
