// swiglu.h -- the SwiGLU arithmetic of src/reference/moe.rs on the device, operation for
// operation: every f32 add and multiply is one IEEE operation that the compiler may not fuse
// into an FMA (hipfp8_add_rn / hipfp8_mul_rn of port.h), division and exp are computed in f64
// and rounded once (exp is the reference's own, fused multiply-adds in f64), and the one
// multiply-add of the formulas is an explicit fmaf: every backend computes the same bits.
#pragma once

#include "../fp8_codec.h"

namespace hipfp8 {
namespace moe {

__device__ inline float add32(float x, float y) { return hipfp8_add_rn(x, y); }
__device__ inline float mul32(float x, float y) { return hipfp8_mul_rn(x, y); }
__device__ inline float div32(float x, float y) { return (float)((double)x / (double)y); }

// exp_f32 of src/reference/moe.rs: f32(p(r) * 2^k), k = rint(x log2 e), r = x - k ln 2 (two
// FMAs), p the degree-12 Taylor polynomial (Horner, FMAs), all in f64. Branch-free: the
// arithmetic runs on x clamped into [-104, 89] and the out-of-range results are selected after,
// so the exps of a thread's elements form one basic block the compiler interleaves (a Horner
// chain is 14 dependent f64 FMAs). The f64 constants come from the constant bank: as literals
// each costs two 32-bit moves per use on NVIDIA.
static __constant__ double kExpConst[13] = {
    1.4426950408889634,      // log2 e
    0.6931471805599453,      // ln 2, high part
    2.3190468138462996e-17,  // ln 2, low part
    2.08767569878681e-9,     // 1/12!, then 1/11! .. 1/3! (Horner, highest degree first)
    2.505210838544172e-8,   2.755731922398589e-7,  2.7557319223985893e-6, 2.48015873015873e-5,
    0.0001984126984126984,  0.001388888888888889,  0.008333333333333333,  0.041666666666666664,
    0.16666666666666666};
__device__ inline float exp_f32(float x) {
  const double xd = (double)fminf(fmaxf(x, -104.0f), 89.0f);
  const double kf = rint(xd * kExpConst[0]);
  double r = fma(-kf, kExpConst[1], xd);
  r = fma(-kf, kExpConst[2], r);
  double p = kExpConst[3];
#pragma unroll
  for (int i = 4; i < 13; ++i) p = fma(p, r, kExpConst[i]);
  p = fma(p, r, 0.5);
  p = fma(p, r, 1.0);
  p = fma(p, r, 1.0);
  // k in [-150, 129]: the biased exponent of 2^k stays in [873, 1152]
  const double two_k = u642d((uint64_t)(uint32_t)((int)kf + 1023) << 52);
  float y = (float)(p * two_k);
  y = x > 89.0f ? u2f(0x7F800000u) : y;
  y = x < -104.0f ? 0.0f : y;
  return x != x ? x : y;
}

// f32 -> bf16 (as the high half of an f32) by the rule: round to nearest even, NaN quieted as
// the half crate does. Integer arithmetic on every target (the self-test's reference).
__device__ inline float round_bf16_rule(float x) {
  const uint32_t b = f2u(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return u2f(((b >> 16) | 0x40u) << 16);
  const uint32_t rb = 0x8000u;
  uint32_t h = b >> 16;
  if ((b & rb) != 0 && (b & (3 * rb - 1)) != 0) h += 1;
  return u2f(h << 16);
}

// Whether round_to<true> takes the hardware conversion on this target.
__host__ __device__ constexpr bool has_hw_bf16_round() {
#if defined(HIPFP8_HW_BF16_RNE)
  return true;
#else
  return false;
#endif
}

// Round to the input dtype (bf16: round_bf16_rule's bits, in one instruction where port.h
// says the target has it, NaN through the rule; f32: nothing).
template <bool BF16>
__device__ inline float round_to(float x) {
  if constexpr (BF16) {
#if defined(HIPFP8_HW_BF16_RNE)
    if ((f2u(x) & 0x7FFFFFFFu) > 0x7F800000u) return round_bf16_rule(x);
    return u2f(hipfp8_bf16_rne_hi(x));
#else
    return round_bf16_rule(x);
#endif
  } else {
    return x;
  }
}

__device__ inline float silu_den(float g) { return add32(1.0f, exp_f32(-g)); }

// swiglu_h: s = T(silu(g)), h = T(s * u).
template <bool BF16>
__device__ inline float swiglu_h(float g, float u) {
  const float s = round_to<BF16>(div32(g, silu_den(g)));
  return round_to<BF16>(mul32(s, u));
}

// swiglu_bwd: d_up = T(dh * s), d_gate = T((T(dh * u) * sig) * fma(g, 1 - sig, 1)).
template <bool BF16>
__device__ inline void swiglu_bwd(float dh, float g, float u, float& d_gate, float& d_up) {
  const float den = silu_den(g);
  const float s = round_to<BF16>(div32(g, den));
  d_up = round_to<BF16>(mul32(dh, s));
  const float gs = round_to<BF16>(mul32(dh, u));
  const float sig = div32(1.0f, den);
  const float t = fmaf(g, add32(1.0f, -sig), 1.0f);
  d_gate = round_to<BF16>(mul32(mul32(gs, sig), t));
}

}  // namespace moe
}  // namespace hipfp8
