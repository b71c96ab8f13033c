//! Shared helpers for the numerics suites: a seeded value generator with special values, and
//! scale oracles written from the definitions (torchao's `amax_to_scale`, OCP MX), NOT from
//! the crate's own scaling functions, so a bug there cannot hide behind itself.
#![allow(dead_code)]

pub mod gpu;

use hipfp8::{Fp8Format, bf16};
use proptest::prelude::*;

/// Number of cases: PROPTEST_CASES when set (CI lowers it), else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Config with the case count from [`cases`] and failures persisted to `suite` (a path
/// under `proptest-regressions/`, committed and replayed first on every run).
pub fn config(default: u32, suite: &'static str) -> ProptestConfig {
    ProptestConfig {
        cases: cases(default),
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::Direct(suite),
        )),
        ..ProptestConfig::default()
    }
}

/// splitmix64: tiny, deterministic, good enough to fill test tensors.
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// How a test tensor is filled.
#[derive(Clone, Copy, Debug)]
pub struct Fill {
    pub seed: u64,
    /// Percent of elements replaced by a special value.
    pub special_pct: u32,
    /// Percent of rows (of `row_len` elements) set to all zeros.
    pub zero_row_pct: u32,
    /// log2 of the typical magnitude.
    pub mag_exp: i32,
    /// bf16 input (else f32).
    pub bf16: bool,
}

pub fn fill_strategy() -> impl Strategy<Value = Fill> {
    (
        any::<u64>(),
        prop_oneof![3 => Just(0u32), 2 => 1u32..8, 1 => 8u32..60],
        prop_oneof![Just(0u32), 1u32..40],
        -30i32..30,
        any::<bool>(),
    )
        .prop_map(|(seed, special_pct, zero_row_pct, mag_exp, bf16)| Fill {
            seed,
            special_pct,
            zero_row_pct,
            mag_exp,
            bf16,
        })
}

const SPECIALS: [f32; 14] = [
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    0.0,
    -0.0,
    f32::MAX,
    -f32::MAX,
    1e-40,    // f32 subnormal
    -9.2e-41, // bf16 subnormal (0x8001-ish region)
    f32::MIN_POSITIVE,
    448.0,        // E4M3FN max
    57344.0,      // E5M2 max
    3.3895314e38, // bf16 max
    240.0,        // E4M3FNUZ max
];

/// A test tensor: the values the op sees (bf16-rounded when `bf16`), and the input form.
pub struct Tensor {
    pub vals: Vec<f32>,
    pub b: Option<Vec<bf16>>,
}

impl Tensor {
    pub fn new(f: &Fill, n: usize, row_len: usize) -> Tensor {
        let mut r = Rng::new(f.seed);
        let mag = 2f32.powi(f.mag_exp);
        let mut vals: Vec<f32> = (0..n)
            .map(|_| {
                if f.special_pct > 0 && (r.below(100) as u32) < f.special_pct {
                    SPECIALS[r.below(SPECIALS.len() as u64) as usize]
                } else {
                    // Mix magnitudes within the tensor too (exponent spread of +-6).
                    r.unit() * mag * 2f32.powi(r.below(13) as i32 - 6)
                }
            })
            .collect();
        if f.zero_row_pct > 0 && row_len > 0 {
            for row in vals.chunks_mut(row_len) {
                if (r.below(100) as u32) < f.zero_row_pct {
                    row.fill(0.0);
                }
            }
        }
        if f.bf16 {
            let b: Vec<bf16> = vals.iter().map(|&v| bf16::from_f32(v)).collect();
            let vals = b.iter().map(|v| v.to_f32()).collect();
            Tensor { vals, b: Some(b) }
        } else {
            Tensor { vals, b: None }
        }
    }
    pub fn hp(&self) -> hipfp8::HpSrc<'_> {
        match &self.b {
            Some(b) => b.into(),
            None => (&self.vals).into(),
        }
    }
}

/// NaN-propagating max |x| (torch.amax semantics).
pub fn oracle_amax(xs: impl IntoIterator<Item = f32>) -> f32 {
    let mut m = 0.0f32;
    for x in xs {
        if x.is_nan() {
            return f32::NAN;
        }
        if x.abs() > m {
            m = x.abs();
        }
    }
    m
}

/// torchao `amax_to_scale`: fp8_max / clamp(amax, min=1e-12) in f64 (NaN stays NaN), to
/// f32; optionally the largest power of two <= it (found by search, not by bit tricks).
pub fn oracle_scale(amax: f32, fmt: Fp8Format, pow2: bool) -> f32 {
    if amax.is_nan() {
        return f32::NAN;
    }
    let s = (fmt.max_finite() as f64 / (amax as f64).max(1e-12)) as f32;
    if !pow2 || s == 0.0 || s.is_infinite() {
        return s;
    }
    let mut e = s.log2().floor() as i32;
    while 2f64.powi(e) > s as f64 {
        e -= 1;
    }
    while 2f64.powi(e + 1) <= s as f64 {
        e += 1;
    }
    2f64.powi(e) as f32
}

/// Random END offsets over `extent`: `g` groups, sizes biased to 0, 1 and small; the last
/// offset may stop short of `extent`.
pub fn offsets(seed: u64, g: usize, extent: usize) -> Vec<i32> {
    let mut r = Rng::new(seed ^ 0x5555);
    let mut cuts: Vec<usize> = (0..g)
        .map(|_| match r.below(6) {
            0 => 0,
            1 => 1.min(extent),
            _ => r.below(extent as u64 + 1) as usize,
        })
        .collect();
    cuts.sort_unstable();
    // Sometimes make the last group end exactly at the extent.
    if g > 0 && r.below(2) == 0 {
        cuts[g - 1] = extent;
    }
    // Turn cut points into END offsets (sorted = non-decreasing); with 0/1 choices above,
    // empty and one-row groups are common.
    cuts.iter().map(|&c| c as i32).collect()
}

/// Offsets with at least one big group (multi-block slabs) and empty groups.
pub fn skewed_offsets(seed: u64, g: usize, extent: usize) -> Vec<i32> {
    let mut r = Rng::new(seed);
    // Zipf-like weights 1/(i+1)^1.2, shuffled, two forced empty groups.
    let mut w: Vec<f64> = (0..g).map(|i| 1.0 / ((i + 1) as f64).powf(1.2)).collect();
    for i in (1..g).rev() {
        w.swap(i, r.below(i as u64 + 1) as usize);
    }
    if g >= 3 {
        w[r.below(g as u64) as usize] = 0.0;
        w[r.below(g as u64) as usize] = 0.0;
    }
    let tot: f64 = w.iter().sum::<f64>().max(1e-9);
    let mut acc = 0.0;
    let mut offs: Vec<i32> = w
        .iter()
        .map(|x| {
            acc += x / tot;
            ((acc * extent as f64).round() as usize).min(extent) as i32
        })
        .collect();
    for i in 1..g {
        offs[i] = offs[i].max(offs[i - 1]);
    }
    offs
}

pub fn ranges(offs: &[i32]) -> Vec<(usize, usize)> {
    let mut prev = 0usize;
    offs.iter()
        .map(|&o| {
            let r = (prev, o as usize);
            prev = o as usize;
            r
        })
        .collect()
}

/// Exact bit equality, NaN payloads included: what GPU == CPU means (a NaN scale is the
/// canonical 0x7FC00000 on every backend, see docs/OPS.md).
pub fn same_bits(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits()
}

/// Bit-level equality of f32s (NaN == NaN).
pub fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

pub const SENT_U8: u8 = 0xA5;
pub const SENT_F32: f32 = -12345.5;

/// Formats a scale-and-cast test may use.
pub fn fmt_strategy() -> impl Strategy<Value = Fp8Format> {
    prop_oneof![
        Just(Fp8Format::E4M3Fn),
        Just(Fp8Format::E5M2),
        Just(Fp8Format::E4M3FnUz),
        Just(Fp8Format::E5M2FnUz)
    ]
}

/// A caller's scale for the `*_scaled` ops: mostly positive normals 2^-60..2^60 (codes from
/// all-zero through saturation), any f32 bit pattern (NaN payloads, Inf, negative, subnormal)
/// and the special values themselves.
pub fn given_scale_strategy() -> impl Strategy<Value = f32> {
    prop_oneof![
        4 => (-60i32..60, 0u32..(1 << 23))
            .prop_map(|(e, m)| f32::from_bits((((e + 127) as u32) << 23) | m)),
        2 => any::<u32>().prop_map(f32::from_bits),
        1 => prop::sample::select(vec![
            0.0f32,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -1.0,
            f32::MIN_POSITIVE / 4.0,
            f32::MAX,
        ]),
    ]
}

/// Dimension: mostly small, with 1, odd sizes, and 16/32/128 +- 1 edges.
pub fn dim(max: usize) -> impl Strategy<Value = usize> {
    prop_oneof![
        2 => Just(1usize),
        4 => 1usize..=max,
        2 => prop::sample::select(vec![15usize, 16, 17, 31, 32, 33, 127, 128, 129, 255, 257]).prop_map(move |d| d.min(max.max(1))),
    ]
}
