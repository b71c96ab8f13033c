//! CPU backend of the MoE recipe's one own op: the GEMMs' dequant scales (`hip/recipe/reciprocal.hip`
//! computes the same bits).

/// The canonical f32 NaN every backend writes.
const NAN_BITS: u32 = 0x7FC0_0000;

/// `1 / s` as an IEEE f32 division (torch's `Tensor.reciprocal`): the GEMMs take the
/// reciprocals of the scales the casts write. 1/0 = +Inf, 1/NaN = the canonical NaN.
pub fn reciprocal(s: f32) -> f32 {
    if s.is_nan() {
        f32::from_bits(NAN_BITS)
    } else {
        1.0 / s
    }
}

/// [`reciprocal`] of every element of `x` into `out` (`out.len() >= x.len()`).
pub fn reciprocals(x: &[f32], out: &mut [f32]) {
    for (o, &s) in out.iter_mut().zip(x) {
        *o = reciprocal(s);
    }
}
