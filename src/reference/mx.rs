//! CPU backend: MXFP8 (OCP MX v1.0) casts with E8M0 block scales, bit-exact with torchao
//! 0.18's eager `torchao.prototype.mx_formats.mx_tensor.to_mx` (the version we test against).
//!
//! # The rule
//! Blocks are 32 consecutive elements along the scaled dimension (the last block of a
//! row/column reduces over what exists). `amax` = max |x| over the block in f32,
//! NaN-propagating. `emax` = floor(log2(max_finite)) of the element format (8 for E4M3FN,
//! 15 for E5M2); `max` = its largest finite value (448, 57344). The stored E8M0 code is `s`;
//! the data is `encode(x * mult)` with an f32 multiply (saturating, NaN -> 0x7F).
//!
//! FLOOR (torchao's default; OCP MX section 6.3):
//! * `ue` = the biased exponent field of amax's f32 bits minus 127, so zero and every f32
//!   subnormal amax give -127, Inf gives 128 (no log2 is evaluated).
//! * `e = clamp(ue - emax, -127, 128)`, `s = e + 127`; NaN amax -> `s = 0xFF`.
//!   Inf amax is NOT special-cased by torchao 0.18: it gives `e = 128 - emax` (`s` = 247 for
//!   E4M3FN, 240 for E5M2), so Inf elements saturate to max and finite ones scale by 2^-e.
//! * torchao divides by the f32 scale `2^e`, first clamped up to 2^-126 (its
//!   `F32_MIN_NORMAL` workaround for Triton's subnormal handling), so for `e = -127` the data
//!   is `x * 2^126`, not `x * 2^127`. For a NaN block the f32 scale is +Inf (0xFF << 23), so
//!   finite elements become +-0 and NaN/Inf ones NaN. Dividing by a normal power of two
//!   equals multiplying by its (exact) reciprocal, and x / Inf equals x * 0 for every x
//!   (sign and NaN included), so `mult = 2^-max(e, -126)`, or 0 for a NaN block.
//!
//! RCEIL (the NVIDIA cuBLAS / `cvt.rp.satfinite.ue8m0x2.f32` rule):
//! * `d = amax / max` in f32 (one rounding).
//! * NaN -> `s = 0xFF`, `mult = NaN` (every element NaN); Inf -> `s = 0xFE`,
//!   `mult = 2^-127` (torchao 0.18's eager fallback; the satfinite instruction agrees).
//! * otherwise `e = clamp(ceil(log2(d)), -127, 127)`, `s = e + 127`, where ceil(log2) is
//!   EXACT, from d's bits (zero -> -127; a subnormal d just above 2^-127 -> -126).
//!   torchao 0.18's eager fallback evaluates `torch.ceil(torch.log2(d))` in f32, which can
//!   miss the ceiling for a d within a few ulps above a power of two; that cannot happen for
//!   bf16 inputs (d = amax/448 is never that close to a power of two), only for some f32
//!   inputs, where we follow the exact rule (as torchao's later versions and the hardware
//!   instruction do).
//! * `mult = 2^-e`, except `s = 0` gives `mult = 1.0` (torchao 0.18's special case; such a
//!   block has amax <= 448 * 2^-127, so its elements round to +-0 either way).
//!
//! Later torchao versions (after 0.18) changed the non-finite cases (FLOOR Inf -> 0xFF,
//! NaN blocks all-NaN data, RCEIL Inf -> 0xFF); we follow 0.18, the version pinned for the
//! fixtures. Decoders must treat a 0xFF scale as "whole block NaN" (OCP MX) whatever the
//! element codes are.

use rayon::prelude::*;

use super::quant::{COL_BLOCK, ColBlock};
use super::{Hp, Scaled};
use crate::format::Fp8Format;
use crate::params::MxRounding;

/// MX block size.
pub const MX_BLOCK: usize = 32;

/// floor(log2(max_finite)) of an MX element format.
pub fn emax_elem(fmt: Fp8Format) -> i32 {
    match fmt {
        Fp8Format::E4M3Fn | Fp8Format::E4M3FnUz => 8,
        Fp8Format::E5M2 | Fp8Format::E5M2FnUz => 15,
    }
}

/// 2^p as f32 for p in [-126, 127] (a normal number, exact).
#[inline]
fn pow2_normal(p: i32) -> f32 {
    debug_assert!((-126..=127).contains(&p));
    f32::from_bits(((p + 127) as u32) << 23)
}

/// Exact ceil(log2(d)) of a finite, non-negative f32; -127 for zero (and anything
/// smaller than 2^-127, which callers clamp to -127 anyway).
#[inline]
pub fn ceil_log2_exact(d: f32) -> i32 {
    let bits = d.to_bits() & 0x7FFF_FFFF;
    let ef = (bits >> 23) as i32;
    let man = bits & 0x7F_FFFF;
    if ef == 0 {
        if man == 0 {
            return -127;
        }
        // d = man * 2^-149; ceil(log2(man)) is the bit length of (man - 1).
        let cl = 32 - (man - 1).leading_zeros() as i32;
        return (cl - 149).max(-127);
    }
    ef - 127 + i32::from(man != 0)
}

/// The E8M0 scale code of a block and the multiplier its data is encoded with
/// (see the module docs).
#[inline]
pub fn mx_scale(amax: f32, fmt: Fp8Format, rounding: MxRounding) -> (u8, f32) {
    match rounding {
        MxRounding::Floor => {
            if amax.is_nan() {
                return (0xFF, 0.0);
            }
            let ue = ((amax.to_bits() >> 23) & 0xFF) as i32 - 127;
            let e = (ue - emax_elem(fmt)).clamp(-127, 128);
            ((e + 127) as u8, pow2_normal(-e.max(-126)))
        }
        MxRounding::Rceil => {
            if amax.is_nan() {
                return (0xFF, f32::NAN);
            }
            if amax.is_infinite() {
                return (0xFE, f32::from_bits(0x0040_0000)); // 2^-127
            }
            let d = amax / fmt.max_finite();
            let e = ceil_log2_exact(d).clamp(-127, 127);
            if e == -127 {
                (0, 1.0)
            } else {
                ((e + 127) as u8, pow2_normal(-e))
            }
        }
    }
}

/// The rule of the MXFP8 casts: the element format and the rounding of the E8M0 scales.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MxRule {
    pub fmt: Fp8Format,
    pub rounding: MxRounding,
}

impl MxRule {
    pub const fn new(fmt: Fp8Format, rounding: MxRounding) -> MxRule {
        MxRule { fmt, rounding }
    }

    /// [`mx_scale`] of a block with this amax.
    #[inline]
    pub fn scale(self, amax: f32) -> (u8, f32) {
        mx_scale(amax, self.fmt, self.rounding)
    }
}

/// See [`crate::Context::mxfp8_dim0`]: blocks along rows; scales (m, ceil(k/32)).
pub fn mxfp8_dim0<T: Hp>(rule: MxRule, (m, k): (usize, usize), x: &[T], out: Scaled<'_, u8>) {
    super::tiles(rule.fmt, (m, k), (1, MX_BLOCK), x, out, |a| rule.scale(a))
}

/// See [`crate::Context::mxfp8_dim1`]: blocks along columns (32 rows of one column);
/// output (k, m) row-major `[c*m + r]`, scales (k, ceil(m/32)) row-major.
pub fn mxfp8_dim1<T: Hp>(rule: MxRule, (m, k): (usize, usize), x: &[T], out: Scaled<'_, u8>) {
    let MxRule { fmt, rounding } = rule;
    let Scaled { codes: out, scales } = out;
    let nb = m.div_ceil(MX_BLOCK);
    if m == 0 || k == 0 {
        return;
    }
    out[..m * k]
        .par_chunks_mut(super::chunk_len(COL_BLOCK, k, m))
        .zip(scales[..k * nb].par_chunks_mut(super::chunk_len(COL_BLOCK, k, nb)))
        .enumerate()
        .for_each(|(b, (ob, sb))| {
            let c0 = b * COL_BLOCK;
            let cn = ob.len() / m;
            let mut acc = [0.0f32; COL_BLOCK];
            let mut mult = [0.0f32; COL_BLOCK];
            for j in 0..nb {
                let r0 = j * MX_BLOCK;
                let r1 = (r0 + MX_BLOCK).min(m);
                let block = ColBlock::new(k, (c0, cn), (r0, r1));
                block.amax(x, &mut acc);
                for c in 0..cn {
                    let (code, mu) = mx_scale(acc[c], fmt, rounding);
                    sb[c * nb + j] = code;
                    mult[c] = mu;
                }
                for (r, row) in block.rows(x) {
                    for (c, (&v, &mu)) in row.iter().zip(&mult).enumerate() {
                        ob[c * m + r] = fmt.encode(v.to_f32() * mu);
                    }
                }
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceil_log2_exact_edges() {
        assert_eq!(ceil_log2_exact(0.0), -127);
        assert_eq!(ceil_log2_exact(1.0), 0);
        assert_eq!(ceil_log2_exact(f32::from_bits(0x3F80_0001)), 1);
        assert_eq!(ceil_log2_exact(0.75), 0);
        assert_eq!(ceil_log2_exact(f32::from_bits(0x0040_0000)), -127); // 2^-127
        assert_eq!(ceil_log2_exact(f32::from_bits(0x0040_0001)), -126);
        assert_eq!(ceil_log2_exact(f32::from_bits(1)), -127); // 2^-149, clamped
        assert_eq!(ceil_log2_exact(f32::MIN_POSITIVE), -126);
    }

    #[test]
    fn mx_scale_special_cases() {
        use MxRounding::*;
        let f = Fp8Format::E4M3Fn;
        // amax = 448 = 1.75 * 2^8: FLOOR e = 0; RCEIL d = 1 -> e = 0.
        assert_eq!(mx_scale(448.0, f, Floor), (127, 1.0));
        assert_eq!(mx_scale(448.0, f, Rceil), (127, 1.0));
        // amax = 449: FLOOR still e = 0 (data saturates), RCEIL rounds up to e = 1.
        assert_eq!(mx_scale(449.0, f, Floor), (127, 1.0));
        assert_eq!(mx_scale(449.0, f, Rceil), (128, 0.5));
        // zero block
        assert_eq!(mx_scale(0.0, f, Floor), (0, 2f32.powi(126)));
        assert_eq!(mx_scale(0.0, f, Rceil), (0, 1.0));
        // NaN / Inf (torchao 0.18)
        assert_eq!(mx_scale(f32::NAN, f, Floor), (0xFF, 0.0));
        assert_eq!(mx_scale(f32::NAN, f, Rceil).0, 0xFF);
        assert!(mx_scale(f32::NAN, f, Rceil).1.is_nan());
        assert_eq!(mx_scale(f32::INFINITY, f, Floor).0, 247);
        assert_eq!(mx_scale(f32::INFINITY, Fp8Format::E5M2, Floor).0, 240);
        assert_eq!(
            mx_scale(f32::INFINITY, f, Rceil),
            (0xFE, f32::from_bits(0x0040_0000))
        );
        // E5M2: amax = 1 -> FLOOR e = -15; RCEIL d = 1/57344 -> ceil(log2) = -15.
        assert_eq!(mx_scale(1.0, Fp8Format::E5M2, Floor), (112, 32768.0));
        assert_eq!(mx_scale(1.0, Fp8Format::E5M2, Rceil), (112, 32768.0));
    }
}
