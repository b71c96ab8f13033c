//! Scaling rules, identical to torchao's eager float8 training reference
//! (`torchao.float8.float8_utils.amax_to_scale` / `tensor_to_scale` / `to_fp8_saturated`).
//!
//! * amax: max |x| over the scaling group, in f32. NaN propagates (torch.max does; f32::max
//!   and fmaxf do NOT, so every backend uses [`amax_combine`]).
//! * scale = fp8_max / max(amax, 1e-12), computed in f64, stored as f32.
//!   torch.clamp keeps NaN, so a NaN amax gives a NaN scale (then every element of the group
//!   encodes to NaN); an Inf amax gives scale 0 (finite elements encode to 0, Inf ones to NaN).
//! * optional power-of-two rounding: exp2(floor(log2(scale))), computed EXACTLY from the f32
//!   exponent bits (torch evaluates log2 in f32, which can round a value 1 ulp below 2^k up to
//!   k; see README "Numerics"). 0 stays 0, NaN stays NaN.
//! * data = encode(x_f32 * scale) with a plain f32 multiply (no FMA, no reciprocal).
//! * The stored scale is the forward (multiplicative) scale; GEMMs take its reciprocal.

use crate::format::Fp8Format;

/// torchao's EPS for float8 scaling.
pub const EPS: f64 = 1e-12;

/// NaN-propagating max of absolute values: the one reduction every backend uses.
#[inline]
pub fn amax_combine(acc: f32, x: f32) -> f32 {
    let a = x.abs();
    if acc.is_nan() || a.is_nan() {
        f32::NAN
    } else if a > acc {
        a
    } else {
        acc
    }
}

/// amax over a slice of anything convertible to f32.
pub fn amax<T: Copy + Into<f32>>(xs: impl IntoIterator<Item = T>) -> f32 {
    xs.into_iter()
        .fold(0.0f32, |acc, x| amax_combine(acc, x.into()))
}

/// Round a positive scale down to a power of two, exactly.
#[inline]
pub fn round_down_pow2(s: f32) -> f32 {
    if s.is_nan() || s == 0.0 || s.is_infinite() {
        return s;
    }
    // Clear the mantissa: floor(log2 s) for normals. Scales here are never subnormal
    // (fp8_max / f32::MAX > 2^-126), but handle it anyway via the generic path.
    if s < f32::MIN_POSITIVE {
        let e = s.log2().floor();
        return e.exp2();
    }
    f32::from_bits(s.to_bits() & 0xFF80_0000)
}

/// Forward scale for an amax.
#[inline]
pub fn amax_to_scale(amax: f32, fmt: Fp8Format, pow2: bool) -> f32 {
    let a = amax as f64;
    let denom = if a.is_nan() { a } else { a.max(EPS) };
    let s = (fmt.max_finite() as f64 / denom) as f32;
    if pow2 { round_down_pow2(s) } else { s }
}

/// Scale and encode one element.
#[inline]
pub fn scale_and_encode(x: f32, scale: f32, fmt: Fp8Format) -> u8 {
    fmt.encode(x * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_special_amax() {
        let f = Fp8Format::E4M3Fn;
        assert!(amax_to_scale(f32::NAN, f, false).is_nan());
        assert_eq!(amax_to_scale(f32::INFINITY, f, false), 0.0);
        assert_eq!(amax_to_scale(0.0, f, false), (448.0f64 / 1e-12) as f32);
        assert_eq!(amax_to_scale(0.0, f, true), 2f32.powi(48));
        assert_eq!(amax_to_scale(448.0, f, false), 1.0);
        assert_eq!(amax_to_scale(3.0, f, true), 128.0);
    }

    #[test]
    fn amax_propagates_nan() {
        assert!(amax([1.0f32, f32::NAN, 2.0]).is_nan());
        assert_eq!(amax([1.0f32, -5.0, 2.0]), 5.0);
        assert_eq!(amax([f32::NEG_INFINITY, 2.0]), f32::INFINITY);
    }
}
