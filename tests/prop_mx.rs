//! Numerics fuzzing of MXFP8 dim0/dim1 on the CPU backend: E8M0 codes and data follow
//! torchao 0.18's `to_mx` (FLOOR and RCEIL), re-derived here with f64 log2 / search instead
//! of the crate's bit tricks; the OCP MX scale rule holds; dim1 == dim0 of the transpose.

// Index loops spell out each op's layout formula; that is the point of the oracle.
#![allow(clippy::needless_range_loop)]

mod common;

use common::*;
use hipfp8::{Context, Fp8Format, MxParams, MxRounding, StreamRef};
use proptest::prelude::*;

const S: StreamRef = StreamRef::DEFAULT;

fn emax(fmt: Fp8Format) -> i32 {
    // floor(log2(max_finite)), found by search.
    let mut e = 0;
    while 2f64.powi(e + 1) <= fmt.max_finite() as f64 {
        e += 1;
    }
    e
}

/// The expected E8M0 code of a block, and the expected FP8 code of element `x` in it.
fn oracle(amax: f32, fmt: Fp8Format, r: MxRounding) -> (u8, Box<dyn Fn(f32) -> u8>) {
    match r {
        MxRounding::Floor => {
            if amax.is_nan() {
                // torchao 0.18 divides by the f32 view of 0xFF << 23 = +Inf.
                return (0xFF, Box::new(move |x| fmt.encode(x / f32::INFINITY)));
            }
            let fl = if amax.is_infinite() {
                128 // the exponent field of Inf, read as an exponent
            } else if amax < f32::MIN_POSITIVE {
                -127 // zero and subnormals: exponent field 0
            } else {
                let mut e = (amax as f64).log2().floor() as i32;
                while 2f64.powi(e) > amax as f64 {
                    e -= 1;
                }
                while 2f64.powi(e + 1) <= amax as f64 {
                    e += 1;
                }
                e
            };
            let e = (fl - emax(fmt)).clamp(-127, 128);
            // torchao clamps the f32 scale up to the smallest normal before dividing.
            let scale = 2f64.powi(e.max(-126)) as f32;
            ((e + 127) as u8, Box::new(move |x| fmt.encode(x / scale)))
        }
        MxRounding::Rceil => {
            if amax.is_nan() {
                return (0xFF, Box::new(move |_| fmt.encode(f32::NAN)));
            }
            if amax.is_infinite() {
                let m = 2f64.powi(-127) as f32;
                return (0xFE, Box::new(move |x| fmt.encode(x * m)));
            }
            let d = amax / fmt.max_finite();
            // Smallest e with 2^e >= d, clamped.
            let mut e = -127;
            while e < 127 && 2f64.powi(e) < d as f64 {
                e += 1;
            }
            let m = if e == -127 { 1.0 } else { 2f64.powi(-e) as f32 };
            ((e + 127) as u8, Box::new(move |x| fmt.encode(x * m)))
        }
    }
}

/// OCP MX scale rules on finite, normal amax (not clamped).
fn check_ocp(code: u8, amax: f32, fmt: Fp8Format, r: MxRounding) -> Result<(), TestCaseError> {
    if !amax.is_finite() || amax < f32::MIN_POSITIVE || code == 0 {
        return Ok(());
    }
    let x = 2f64.powi(code as i32 - 127);
    match r {
        MxRounding::Floor => {
            // X = 2^(floor(log2 amax) - emax): amax / X in [2^emax, 2^(emax+1)).
            let q = amax as f64 / x;
            prop_assert!(
                q >= 2f64.powi(emax(fmt)) && q < 2f64.powi(emax(fmt) + 1),
                "FLOOR code {code} amax {amax:e}"
            );
        }
        MxRounding::Rceil => {
            // X = smallest power of two with amax / X <= max (amax/max rounded to f32).
            let d = (amax / fmt.max_finite()) as f64;
            prop_assert!(d <= x && d > x / 2.0, "RCEIL code {code} amax {amax:e}");
        }
    }
    Ok(())
}

fn rounding() -> impl Strategy<Value = MxRounding> {
    prop_oneof![Just(MxRounding::Floor), Just(MxRounding::Rceil)]
}
fn mx_fmt() -> impl Strategy<Value = Fp8Format> {
    prop_oneof![Just(Fp8Format::E4M3Fn), Just(Fp8Format::E5M2)]
}

proptest! {
    #![proptest_config(config(256, "proptest-regressions/prop_mx.txt"))]

    #[test]
    fn mxfp8_dim0_matches_to_mx(m in dim(60), k in dim(300), fmt in mx_fmt(), r in rounding(), f in fill_strategy()) {
        let x = Tensor::new(&f, m * k, k);
        let nb = k.div_ceil(32);
        let (mut out, mut sc) = (vec![SENT_U8; m * k], vec![SENT_U8; m * nb + 1]);
        Context::cpu().mxfp8_dim0(&MxParams::new(fmt, r), m, k, x.hp(), (&mut out).into(), (&mut sc).into(), S).unwrap();
        for i in 0..m {
            for b in 0..nb {
                let (c0, c1) = (b * 32, ((b + 1) * 32).min(k));
                let blk = &x.vals[i * k + c0..i * k + c1];
                let amax = oracle_amax(blk.iter().copied());
                let (code, enc) = oracle(amax, fmt, r);
                prop_assert_eq!(sc[i * nb + b], code, "row {} block {} amax {:e}", i, b, amax);
                check_ocp(code, amax, fmt, r)?;
                for (j, &v) in blk.iter().enumerate() {
                    prop_assert_eq!(out[i * k + c0 + j], enc(v), "x {:e} amax {:e} {:?}", v, amax, r);
                }
            }
        }
        prop_assert_eq!(sc[m * nb], SENT_U8);
    }

    #[test]
    fn mxfp8_dim1_is_dim0_of_transpose(m in dim(200), k in dim(60), fmt in mx_fmt(), r in rounding(), f in fill_strategy()) {
        let x = Tensor::new(&f, m * k, k);
        let ctx = Context::cpu();
        let p = MxParams::new(fmt, r);
        let nb = m.div_ceil(32);
        let (mut out, mut sc) = (vec![SENT_U8; m * k], vec![SENT_U8; k * nb]);
        ctx.mxfp8_dim1(&p, m, k, x.hp(), (&mut out).into(), (&mut sc).into(), S).unwrap();
        let mut xt = vec![0f32; m * k];
        for i in 0..m {
            for j in 0..k {
                xt[j * m + i] = x.vals[i * k + j];
            }
        }
        let (mut out2, mut sc2) = (vec![0u8; m * k], vec![0u8; k * nb]);
        ctx.mxfp8_dim0(&p, k, m, (&xt).into(), (&mut out2).into(), (&mut sc2).into(), S).unwrap();
        prop_assert_eq!(out, out2);
        prop_assert_eq!(sc, sc2);
    }
}

/// The torchao 0.18 special cases, pinned on concrete blocks (zero, subnormal, NaN, Inf).
#[test]
fn special_blocks() {
    let ctx = Context::cpu();
    let fmt = Fp8Format::E4M3Fn;
    let mut x = vec![0.0f32; 32 * 5];
    x[32] = 1e-40; // subnormal amax
    x[33] = -5e-41;
    x[64] = f32::NAN;
    x[65] = 3.0;
    x[66] = -3.0;
    x[96] = f32::INFINITY;
    x[97] = 1e37;
    x[128] = 448.0 * 2f32.powi(-127); // RCEIL d = 2^-127 exactly -> code 0, mult 1
    for r in [MxRounding::Floor, MxRounding::Rceil] {
        let (mut out, mut sc) = (vec![0u8; 32 * 5], vec![0u8; 5]);
        ctx.mxfp8_dim0(
            &MxParams::new(fmt, r),
            1,
            32 * 5,
            (&x).into(),
            (&mut out).into(),
            (&mut sc).into(),
            S,
        )
        .unwrap();
        assert_eq!(sc[0], 0, "{r:?}: zero block");
        assert!(out[..32].iter().all(|&c| c == 0));
        assert_eq!(sc[1], 0, "{r:?}: subnormal amax");
        assert_eq!(sc[2], 0xFF, "{r:?}: NaN block");
        assert_eq!(out[64], 0x7F);
        match r {
            MxRounding::Floor => {
                // x / 2^-126: 1e-40 * 2^126 = 8.5e-3 -> a nonzero E4M3 subnormal.
                assert_eq!(out[32], fmt.encode(1e-40 * 2f32.powi(126)));
                assert_ne!(out[32], 0);
                // NaN block: finite elements / Inf -> +-0.
                assert_eq!((out[65], out[66]), (0x00, 0x80));
                assert_eq!(sc[3], 127 + 128 - 8, "Inf amax is not special in FLOOR");
                assert_eq!(out[96], 0x7E); // Inf / 2^120 saturates
                assert_eq!(out[97], fmt.encode(1e37 / 2f32.powi(120)));
            }
            MxRounding::Rceil => {
                assert_eq!(out[32], 0); // x * 1.0 rounds to zero
                assert_eq!((out[65], out[66]), (0x7F, 0x7F)); // whole block NaN
                assert_eq!(sc[3], 0xFE);
                assert_eq!(out[96], 0x7E);
                assert_eq!(sc[4], 0);
            }
        }
    }
}
