// fp8_codec.h -- device FP8 encode and the scaling rules, bit-identical to src/format.rs and
// src/scaling.rs (the written-down rule; read it there, it is not repeated in full here).
//
// Two encode paths:
//  * encode_sw<F>: the rule itself, in integer/f32 arithmetic, for host and device. Always exact:
//    NaN -> canonical positive NaN (0x7F OCP, 0x80 FNUZ), |x| >= max (Inf included) -> +-max,
//    RNE otherwise, OCP zeros keep the sign, FNUZ has no -0.
//  * encode4_finite<F>: four FINITE values at once, through the hardware converter when the
//    target has one for this flavour (HIPFP8_HW_FP8_OCP: gfx950, sm_89+; HIPFP8_HW_FP8_FNUZ:
//    gfx940-942), else encode_sw. Kernels call it only for scaling groups whose amax is finite:
//    then no element is NaN or Inf and |x*scale| exceeds max by at most an ulp, so the result
//    never depends on how a converter treats NaN/Inf. Groups with a non-finite amax are rare
//    and go through encode_sw (uniform branch per group, no per-element cost on the fast path).
//
// Hardware facts relied on, and how each is secured:
//  * NVIDIA cvt.rn.satfinite.{e4m3,e5m2}x2.f32: RNE, saturating finite overflow, signed zero
//    kept. Checked exhaustively against encode_sw over every finite f32 by the GPU self-test
//    (hipfp8_codec_selftest, run by tests/gpu_quant.rs).
//  * AMD v_cvt_pk_{fp8,bf8}_f32: RNE; does not saturate by itself (AMD's own amd_hip_fp8.h
//    clamps with v_med3 first), so we clamp with fmed3 first. Not run on AMD hardware by us:
//    the zero-sign behaviour is forced explicitly (FNUZ: any 0x80 byte from a finite input is
//    a negative zero -> 0x00; OCP: the sign bit is OR-ed in from the input), and the same
//    self-test checks the rest when run on an AMD GPU.
#pragma once

#include "port.h"
#include <string.h>

namespace hipfp8 {

// Values match Fp8Format's #[repr(u32)] discriminants in src/format.rs.
enum Fp8Fmt : uint32_t { kE4M3Fn = 0, kE5M2 = 1, kE4M3FnUz = 2, kE5M2FnUz = 3 };

template <uint32_t F> struct Fp8Traits;
template <> struct Fp8Traits<kE4M3Fn> {
  static constexpr int MB = 3, BIAS = 7;
  static constexpr uint32_t MAX_BITS = 0x43E00000u;  // 448.0f
  static constexpr uint32_t MAX_CODE = 0x7E, NAN_CODE = 0x7F;
  static constexpr bool FNUZ = false, E4M3 = true;
  static constexpr double MAXF = 448.0;
};
template <> struct Fp8Traits<kE5M2> {
  static constexpr int MB = 2, BIAS = 15;
  static constexpr uint32_t MAX_BITS = 0x47600000u;  // 57344.0f
  static constexpr uint32_t MAX_CODE = 0x7B, NAN_CODE = 0x7F;
  static constexpr bool FNUZ = false, E4M3 = false;
  static constexpr double MAXF = 57344.0;
};
template <> struct Fp8Traits<kE4M3FnUz> {
  static constexpr int MB = 3, BIAS = 8;
  static constexpr uint32_t MAX_BITS = 0x43700000u;  // 240.0f
  static constexpr uint32_t MAX_CODE = 0x7F, NAN_CODE = 0x80;
  static constexpr bool FNUZ = true, E4M3 = true;
  static constexpr double MAXF = 240.0;
};
template <> struct Fp8Traits<kE5M2FnUz> {
  static constexpr int MB = 2, BIAS = 16;
  static constexpr uint32_t MAX_BITS = 0x47600000u;  // 57344.0f
  static constexpr uint32_t MAX_CODE = 0x7F, NAN_CODE = 0x80;
  static constexpr bool FNUZ = true, E4M3 = false;
  static constexpr double MAXF = 57344.0;
};

__host__ __device__ inline uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
__host__ __device__ inline float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// ---------------------------------------------------------------------------------- encode

// The rule, exactly as src/format.rs::encode: q = rne(|x| * 2^(mb - e)) with
// e = max(floor(log2|x|), emin); code = ((e - emin) << mb) + q. The power-of-two scaling is exact
// in f32 for every |x| below max_finite (f32 subnormals included), and rintf is RNE.
template <uint32_t F>
__host__ __device__ inline uint32_t encode_sw(float x) {
  using T = Fp8Traits<F>;
  constexpr int EMIN = 1 - T::BIAS;
  const uint32_t bits = f2u(x);
  const uint32_t a = bits & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return T::NAN_CODE;
  uint32_t mag;
  if (a >= T::MAX_BITS) {
    mag = T::MAX_CODE;
  } else {
    const int ue = (int)(a >> 23) - 127;  // f32 zero/subnormals give -127 < EMIN
    const int e = ue > EMIN ? ue : EMIN;
    const float scaled = u2f(a) * u2f((uint32_t)(127 + T::MB - e) << 23);
    const uint32_t q = (uint32_t)rintf(scaled);
    mag = ((uint32_t)(e - EMIN) << T::MB) + q;
  }
  if (T::FNUZ && mag == 0) return 0;
  return mag | ((bits >> 24) & 0x80u);
}

template <uint32_t F>
__host__ __device__ inline uint32_t encode4_sw(float a, float b, float c, float d) {
  return encode_sw<F>(a) | (encode_sw<F>(b) << 8) | (encode_sw<F>(c) << 16) | (encode_sw<F>(d) << 24);
}

// Does this compilation target convert flavour F in hardware?
template <uint32_t F>
__host__ __device__ constexpr bool has_hw_encode() {
#if defined(HIPFP8_HW_FP8_OCP)
  return !Fp8Traits<F>::FNUZ;
#elif defined(HIPFP8_HW_FP8_FNUZ)
  return Fp8Traits<F>::FNUZ;
#else
  return false;
#endif
}

#if defined(HIPFP8_HW_FP8_OCP) || defined(HIPFP8_HW_FP8_FNUZ)
template <uint32_t F>
__device__ inline uint32_t hw_cvt2(float lo, float hi) {
  using T = Fp8Traits<F>;
#if defined(HIPFP8_VENDOR_AMD)
  // v_cvt_pk_* does not saturate: clamp first (finite inputs, so med3 sees no NaN).
  const float m = u2f(T::MAX_BITS);
  lo = __builtin_amdgcn_fmed3f(lo, m, -m);
  hi = __builtin_amdgcn_fmed3f(hi, m, -m);
#endif
  return T::E4M3 ? hipfp8_hw_cvt_e4m3x2(lo, hi) : hipfp8_hw_cvt_e5m2x2(lo, hi);
}
#endif

// Four finite values -> four codes packed little-endian (a in byte 0).
template <uint32_t F>
__device__ inline uint32_t encode4_finite(float a, float b, float c, float d) {
#if defined(HIPFP8_HW_FP8_OCP) || defined(HIPFP8_HW_FP8_FNUZ)
  if constexpr (has_hw_encode<F>()) {
    uint32_t w = hw_cvt2<F>(a, b) | (hw_cvt2<F>(c, d) << 16);
#if defined(HIPFP8_VENDOR_AMD)
    if constexpr (Fp8Traits<F>::FNUZ) {
      // Finite inputs never encode to NaN, so a 0x80 byte can only be a "negative zero":
      // FNUZ has none. Clear exactly those bytes (SWAR zero-byte test on w ^ 0x80808080).
      const uint32_t t = w ^ 0x80808080u;
      const uint32_t z = ~(((t & 0x7F7F7F7Fu) + 0x7F7F7F7Fu) | t | 0x7F7F7F7Fu);
      w &= ~z;
    } else {
      // OCP: the code's sign bit is the input's sign for every non-NaN input (zeros included).
      w |= ((f2u(a) >> 24) & 0x80u) | ((f2u(b) >> 16) & 0x8000u) | ((f2u(c) >> 8) & 0x800000u) |
           (f2u(d) & 0x80000000u);
    }
#endif
    return w;
  }
#endif
  return encode4_sw<F>(a, b, c, d);
}

// ---------------------------------------------------------------------------------- scaling

// amax is kept as the bit pattern of |x| (sign cleared): for non-negative floats the integer
// order is the float order, and every NaN pattern is above +Inf, so an unsigned max is a
// NaN-propagating amax (fmaxf would drop NaN) and works with integer atomics.
__host__ __device__ inline uint32_t abs_bits(float x) { return f2u(x) & 0x7FFFFFFFu; }
__host__ __device__ inline bool amax_bits_finite(uint32_t amax_bits) { return amax_bits < 0x7F800000u; }

// exp2(floor(log2(s))) for the scales this library produces (never subnormal: fp8_max / FLT_MAX
// > FLT_MIN), exactly, from the exponent bits; 0, Inf and NaN unchanged.
__host__ __device__ inline float round_down_pow2(float s) {
  const uint32_t b = f2u(s);
  if ((b & 0x7F800000u) == 0x7F800000u || (b & 0x7FFFFFFFu) == 0) return s;
  return u2f(b & 0xFF800000u);
}

// scale = fp8_max / max(amax, 1e-12) in f64, stored f32; NaN amax -> NaN; Inf amax -> 0.
template <uint32_t F>
__host__ __device__ inline float amax_to_scale(uint32_t amax_bits, bool pow2) {
  // NaN amax -> the canonical quiet NaN 0x7FC00000, as the CPU reference writes (f64 division
  // by NaN on NVIDIA yields 0x7FFFFFFF, so the payload is fixed here, not left to hardware).
  if (amax_bits > 0x7F800000u) return u2f(0x7FC00000u);
  const double a = (double)u2f(amax_bits);
  const double d = a > 1e-12 ? a : 1e-12;
  float s = (float)(Fp8Traits<F>::MAXF / d);
  return pow2 ? round_down_pow2(s) : s;
}

// The dequant scale of a forward scale s (what the grouped GEMMs take): 1 / s as the IEEE f32
// division (f64 holds 1/s to 53 bits, so one rounding to f32 is the correctly rounded f32
// quotient: 2*24 + 2 <= 53), 1/0 = +Inf, NaN -> the canonical quiet NaN 0x7FC00000, as
// src/reference/recipe.rs's `reciprocal`. Used by the reciprocal kernel and by the casts that
// store dequant scales.
__host__ __device__ inline float dequant_scale(float s) {
  return s != s ? u2f(0x7FC00000u) : (float)(1.0 / (double)s);
}

// amax_to_scale without a division, bit-identical to it for every amax bit pattern (checked
// exhaustively on the host: bench/scale_host_check.cu; IEEE f64 fma and integer ops only, so
// host, NVIDIA and AMD compute the same bits). Why: nvcc's f64 (and f32) IEEE division has an
// out-of-line slow path, and a call inside a kernel that holds a row in registers makes ptxas
// spill that row around it. Here d is an f32 value > 1e-12 (else the quotient is a constant):
// y = 1/d from a bit-trick seed (relative error < 1/8) and 5 Newton steps (each squares the
// error) is within ~2^-52 of 1/d, MAXF*y within ~2^-51 of the quotient; the quotient of a
// 4-bit constant by a 24-bit significand is never within 2^-49 (relative) of an f32 rounding
// midpoint, so rounding MAXF*y to f32 gives the same float as rounding MAXF/d twice.
__host__ __device__ inline uint64_t d2u64(double f) {
  uint64_t u;
  memcpy(&u, &f, 8);
  return u;
}
__host__ __device__ inline double u642d(uint64_t u) {
  double f;
  memcpy(&f, &u, 8);
  return f;
}
template <uint32_t F>
__host__ __device__ inline float amax_to_scale_nodiv(uint32_t amax_bits, bool pow2) {
  if (amax_bits > 0x7F800000u) return u2f(0x7FC00000u);
  float s;
  const double a = (double)u2f(amax_bits);
  if (amax_bits == 0x7F800000u) {
    s = 0.0f;  // MAXF / Inf
  } else if (!(a > 1e-12)) {
    constexpr double q = Fp8Traits<F>::MAXF / 1e-12;
    s = (float)q;
  } else {
    double y = u642d(0x7FDE623822FC16E6ull - d2u64(a));
#pragma unroll
    for (int i = 0; i < 5; ++i) y = fma(y, fma(-a, y, 1.0), y);
    s = (float)(Fp8Traits<F>::MAXF * y);
  }
  return pow2 ? round_down_pow2(s) : s;
}


// ---------------------------------------------------------------------------------- MXFP8
// E8M0 block scales, exactly as src/reference/mx.rs (torchao 0.18 to_mx): read the rule there.

// Exact ceil(log2(d)) of a finite non-negative f32; -127 for zero.
__device__ inline int ceil_log2_exact(float d) {
  const uint32_t bits = f2u(d) & 0x7FFFFFFFu;
  const int ef = (int)(bits >> 23);
  const uint32_t man = bits & 0x7FFFFFu;
  if (ef == 0) {
    if (man == 0) return -127;
    const int cl = 32 - __clz((int)(man - 1));
    return cl - 149 > -127 ? cl - 149 : -127;
  }
  return ef - 127 + (man != 0 ? 1 : 0);
}

// E8M0 code and data multiplier of a block with amax bit pattern `amax_bits` (|x| bits, NaN
// propagated). rceil = 0: FLOOR, 1: RCEIL.
template <uint32_t F>
__device__ inline void mx_scale(uint32_t amax_bits, int rceil, uint32_t& code, float& mult) {
  constexpr int EMAX = Fp8Traits<F>::E4M3 ? 8 : 15;
  if (!rceil) {
    if (amax_bits > 0x7F800000u) {
      code = 0xFF;
      mult = 0.0f;
      return;
    }
    int e = (int)(amax_bits >> 23) - 127 - EMAX;
    e = e < -127 ? -127 : (e > 128 ? 128 : e);
    code = (uint32_t)(e + 127);
    const int p = -(e > -126 ? e : -126);  // in [-122, 126] for every f32 amax: a normal power
    mult = u2f((uint32_t)(p + 127) << 23);
  } else {
    if (amax_bits > 0x7F800000u) {
      code = 0xFF;
      mult = u2f(0x7FC00000u);
      return;
    }
    if (amax_bits == 0x7F800000u) {
      code = 0xFE;
      mult = u2f(0x00400000u);  // 2^-127
      return;
    }
    const float d = u2f(amax_bits) / u2f(Fp8Traits<F>::MAX_BITS);
    int e = ceil_log2_exact(d);
    e = e < -127 ? -127 : (e > 127 ? 127 : e);
    if (e == -127) {
      code = 0;
      mult = 1.0f;
    } else {
      code = (uint32_t)(e + 127);
      mult = u2f((uint32_t)(127 - e) << 23);
    }
  }
}

}  // namespace hipfp8
