//! FP8 formats and the one encode/decode rule every backend follows.
//!
//! # The rule (written down once; the HIP codecs in `hip/fp8_codec.h` implement the same)
//! `encode(x)` for an f32 `x` (already multiplied by its scale):
//! 1. NaN -> the format's canonical positive NaN code (`0x7F` for E4M3FN and E5M2, `0x80` for
//!    both FNUZ formats). The sign of a NaN is not kept: hardware converters disagree on it,
//!    so we define it away.
//! 2. `|x| >= max_finite` (this includes +-Inf) -> +-max_finite (saturation; E5M2's Inf
//!    code is never produced by encode).
//! 3. otherwise round-to-nearest, ties-to-even, onto the format's grid (subnormals included).
//! 4. Zero results keep the sign of `x` in the OCP formats (`-0 -> 0x80`); FNUZ formats have no
//!    negative zero: anything that rounds to zero is `0x00`.
//!
//! This equals torch's `x.clamp(-max, max).to(float8_dtype)` (torchao's `to_fp8_saturated`) on
//! every non-NaN input.

use half::bf16;

/// The four FP8 element formats.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp8Format {
    /// OCP E4M3FN: bias 7, max 448, NaN 0x7F/0xFF, no Inf. Native on gfx950 and NVIDIA sm_89+.
    E4M3Fn = 0,
    /// OCP E5M2: bias 15, max 57344, Inf 0x7C/0xFC, NaN 0x7D..0x7F/0xFD..0xFF.
    E5M2 = 1,
    /// AMD E4M3FNUZ: bias 8, max 240, single NaN 0x80, no Inf, no -0. Native on gfx942.
    E4M3FnUz = 2,
    /// AMD E5M2FNUZ: bias 16, max 57344, single NaN 0x80, no Inf, no -0. Native on gfx942.
    E5M2FnUz = 3,
}

impl Fp8Format {
    pub const ALL: [Fp8Format; 4] = [
        Fp8Format::E4M3Fn,
        Fp8Format::E5M2,
        Fp8Format::E4M3FnUz,
        Fp8Format::E5M2FnUz,
    ];

    pub fn from_u32(v: u32) -> Option<Self> {
        Self::ALL.get(v as usize).copied()
    }

    pub const fn name(self) -> &'static str {
        match self {
            Fp8Format::E4M3Fn => "e4m3fn",
            Fp8Format::E5M2 => "e5m2",
            Fp8Format::E4M3FnUz => "e4m3fnuz",
            Fp8Format::E5M2FnUz => "e5m2fnuz",
        }
    }

    /// Mantissa (fraction) bits.
    pub const fn mantissa_bits(self) -> u32 {
        match self {
            Fp8Format::E4M3Fn | Fp8Format::E4M3FnUz => 3,
            Fp8Format::E5M2 | Fp8Format::E5M2FnUz => 2,
        }
    }

    pub const fn exponent_bias(self) -> i32 {
        match self {
            Fp8Format::E4M3Fn => 7,
            Fp8Format::E5M2 => 15,
            Fp8Format::E4M3FnUz => 8,
            Fp8Format::E5M2FnUz => 16,
        }
    }

    pub const fn is_fnuz(self) -> bool {
        matches!(self, Fp8Format::E4M3FnUz | Fp8Format::E5M2FnUz)
    }

    /// Largest finite value (torch.finfo(dtype).max).
    pub const fn max_finite(self) -> f32 {
        match self {
            Fp8Format::E4M3Fn => 448.0,
            Fp8Format::E5M2 => 57344.0,
            Fp8Format::E4M3FnUz => 240.0,
            Fp8Format::E5M2FnUz => 57344.0,
        }
    }

    /// Code of +max_finite.
    pub const fn max_code(self) -> u8 {
        match self {
            Fp8Format::E4M3Fn => 0x7E,
            Fp8Format::E5M2 => 0x7B,
            Fp8Format::E4M3FnUz | Fp8Format::E5M2FnUz => 0x7F,
        }
    }

    /// The NaN code `encode` produces.
    pub const fn nan_code(self) -> u8 {
        match self {
            Fp8Format::E4M3Fn | Fp8Format::E5M2 => 0x7F,
            Fp8Format::E4M3FnUz | Fp8Format::E5M2FnUz => 0x80,
        }
    }

    /// Smallest positive subnormal.
    pub fn min_subnormal(self) -> f32 {
        decode(self, 0x01)
    }

    /// Is `code` a NaN in this format?
    pub const fn is_nan_code(self, code: u8) -> bool {
        match self {
            Fp8Format::E4M3Fn => code & 0x7F == 0x7F,
            Fp8Format::E5M2 => code & 0x7F > 0x7C,
            Fp8Format::E4M3FnUz | Fp8Format::E5M2FnUz => code == 0x80,
        }
    }

    /// Encode an f32 by the rule in the module docs.
    #[inline]
    pub fn encode(self, x: f32) -> u8 {
        encode(self, x)
    }

    #[inline]
    pub fn encode_bf16(self, x: bf16) -> u8 {
        encode(self, x.to_f32())
    }

    #[inline]
    pub fn decode(self, code: u8) -> f32 {
        decode(self, code)
    }
}

impl std::fmt::Display for Fp8Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Fp8Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .iter()
            .copied()
            .find(|f| f.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown FP8 format {s:?} (e4m3fn, e5m2, e4m3fnuz, e5m2fnuz)"))
    }
}

/// Encode one f32 (see the module docs for the rule).
pub fn encode(fmt: Fp8Format, x: f32) -> u8 {
    if x.is_nan() {
        return fmt.nan_code();
    }
    let neg = x.is_sign_negative();
    let a = x.abs();
    let mag: u8 = if a >= fmt.max_finite() {
        fmt.max_code()
    } else {
        let mb = fmt.mantissa_bits() as i32;
        let emin = 1 - fmt.exponent_bias(); // unbiased exponent of the smallest normal
        // floor(log2(a)) from the f32 bits; zero and f32 subnormals land far below emin.
        let ue = if a == 0.0 {
            emin
        } else if a < f32::MIN_POSITIVE {
            -127
        } else {
            ((a.to_bits() >> 23) & 0xFF) as i32 - 127
        };
        let e = ue.max(emin);
        // Quantum of the target grid at this binade is 2^(e - mb); scaling by a power of two
        // is exact in f64, and round_ties_even is the RNE step.
        let q = (a as f64 * f64::powi(2.0, mb - e)).round_ties_even() as u32;
        // q in [2^mb, 2^(mb+1)] for normals (2^(mb+1) carries into the exponent field),
        // q in [0, 2^mb] below the smallest normal (2^mb is the smallest normal itself).
        (((e - emin) as u32) << mb).wrapping_add(q) as u8
    };
    if mag == 0 && fmt.is_fnuz() {
        return 0;
    }
    if neg { mag | 0x80 } else { mag }
}

/// Decode one code to f32 (exact: every FP8 value is an f32).
pub fn decode(fmt: Fp8Format, code: u8) -> f32 {
    if fmt.is_nan_code(code) {
        return f32::NAN;
    }
    if fmt == Fp8Format::E5M2 && code & 0x7F == 0x7C {
        return if code & 0x80 != 0 {
            f32::NEG_INFINITY
        } else {
            f32::INFINITY
        };
    }
    let mb = fmt.mantissa_bits();
    let bias = fmt.exponent_bias();
    let mag = code & 0x7F;
    let ef = (mag >> mb) as i32;
    let m = (mag & ((1 << mb) - 1)) as f64;
    let v = if ef == 0 {
        m * f64::powi(2.0, 1 - bias - mb as i32)
    } else {
        (1.0 + m / (1 << mb) as f64) * f64::powi(2.0, ef - bias)
    };
    let v = v as f32;
    if code & 0x80 != 0 { -v } else { v }
}

/// E8M0: the MX block-scale type. Value 2^(code - 127); 0xFF is NaN; no zero, no sign.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct E8M0(pub u8);

impl E8M0 {
    pub const NAN: E8M0 = E8M0(0xFF);
    pub const BIAS: i32 = 127;

    /// 2^(biased - 127) as f32 (2^-127 is an f32 subnormal, still exact).
    pub fn to_f32(self) -> f32 {
        if self.0 == 0xFF {
            f32::NAN
        } else {
            f64::powi(2.0, self.0 as i32 - Self::BIAS) as f32
        }
    }

    /// From an unbiased exponent, clamped to [-127, 127].
    pub fn from_exponent(e: i32) -> E8M0 {
        E8M0((e.clamp(-127, 127) + Self::BIAS) as u8)
    }
}
