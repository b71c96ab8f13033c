//! FP8 grouped GEMMs on the CPU backend against an f64 reference on the decoded inputs.
//!
//! Tolerance (written down): the products of two FP8 values are exact in f32, so the f32
//! result differs from the exact sum by at most gamma * S, gamma = (K + 2) * 2^-24 (K - 1
//! additions and the two scale multiplies, standard error bound), S = sum |a*b| * sa * sb;
//! the bf16 round adds 2^-9 relative. We accept |out - ref| <= 2^-8 |ref| + 2 gamma S.

// Index loops spell out each op's layout formula; that is the point of the oracle.
#![allow(clippy::needless_range_loop)]

mod common;

use common::*;
use hipfp8::{Context, Fp8Format, GemmParams, StreamRef, bf16};
use proptest::prelude::*;

const S: StreamRef = StreamRef::DEFAULT;

/// Random finite FP8 codes (NaN/Inf codes replaced by zero).
fn codes(seed: u64, n: usize, fmt: Fp8Format) -> Vec<u8> {
    let mut r = common::Rng::new(seed);
    (0..n)
        .map(|_| {
            let c = r.below(256) as u8;
            if fmt.decode(c).is_finite() { c } else { 0 }
        })
        .collect()
}

/// Random positive dequant scales around 2^[-6, 6].
fn scales(seed: u64, n: usize) -> Vec<f32> {
    let mut r = common::Rng::new(seed);
    (0..n)
        .map(|_| 2f32.powi(r.below(13) as i32 - 6) * (1.0 + 0.5 * r.unit().abs()))
        .collect()
}

fn check(out: bf16, exact: f64, abs_sum: f64, k: usize, at: &str) -> Result<(), TestCaseError> {
    let gamma = (k as f64 + 2.0) * 2f64.powi(-24);
    let tol = 2f64.powi(-8) * exact.abs() + 2.0 * gamma * abs_sum;
    let got = out.to_f32() as f64;
    prop_assert!(
        (got - exact).abs() <= tol,
        "{at}: got {got:e}, f64 reference {exact:e}, tol {tol:e}"
    );
    Ok(())
}

fn any_fmt() -> impl Strategy<Value = Fp8Format> {
    fmt_strategy()
}

proptest! {
    #![proptest_config(config(64, "proptest-regressions/prop_gemm.txt"))]

    #[test]
    fn grouped_gemm_2d3d_vs_f64(m in 0usize..80, k in dim(200), n in dim(40), e in 0usize..5, seed in any::<u64>(), fa in any_fmt(), fb in any_fmt()) {
        let offs = offsets(seed, e, m);
        let a = codes(seed ^ 1, m * k, fa);
        let b = codes(seed ^ 2, e * k * n, fb);
        let sa = scales(seed ^ 3, m);
        let sb = scales(seed ^ 4, e * n);
        let mut out = vec![bf16::from_f32(-768.0); m * n];
        Context::cpu().grouped_gemm_2d3d(&GemmParams::new(fa, fb), m, k, n, e, (&a).into(), (&b).into(), (&offs).into(), (&sa).into(), (&sb).into(), (&mut out).into(), S).unwrap();
        for (g, (r0, r1)) in ranges(&offs).into_iter().enumerate() {
            for i in r0..r1 {
                for j in 0..n {
                    let (mut s, mut sabs) = (0f64, 0f64);
                    for kk in 0..k {
                        let p = fa.decode(a[i * k + kk]) as f64 * fb.decode(b[g * n * k + j * k + kk]) as f64;
                        s += p;
                        sabs += p.abs();
                    }
                    let sc = sa[i] as f64 * sb[g * n + j] as f64;
                    check(out[i * n + j], s * sc, sabs * sc, k, "2d3d")?;
                }
            }
        }
        let end = offs.last().map_or(0, |&o| o as usize);
        prop_assert!(out[end * n..].iter().all(|v| v.to_f32() == -768.0), "rows past offs[E-1] were written");
    }

    #[test]
    fn grouped_gemm_2d2d_vs_f64(n in dim(40), mt in 0usize..200, k in dim(40), g in 0usize..5, seed in any::<u64>(), fa in any_fmt(), fb in any_fmt()) {
        let offs = offsets(seed, g, mt);
        let a = codes(seed ^ 1, n * mt, fa);
        let b = codes(seed ^ 2, mt * k, fb);
        let sa = scales(seed ^ 3, g * n);
        let sb = scales(seed ^ 4, g * k);
        let mut out = vec![bf16::from_f32(-768.0); g * n * k];
        Context::cpu().grouped_gemm_2d2d(&GemmParams::new(fa, fb), n, mt, k, (&a).into(), (&b).into(), (&offs).into(), (&sa).into(), (&sb).into(), (&mut out).into(), S).unwrap();
        for (gi, (m0, m1)) in ranges(&offs).into_iter().enumerate() {
            for i in 0..n {
                for j in 0..k {
                    let (mut s, mut sabs) = (0f64, 0f64);
                    for m in m0..m1 {
                        let p = fa.decode(a[i * mt + m]) as f64 * fb.decode(b[j * mt + m]) as f64;
                        s += p;
                        sabs += p.abs();
                    }
                    let sc = sa[gi * n + i] as f64 * sb[gi * k + j] as f64;
                    let o = out[gi * n * k + i * k + j];
                    if m0 == m1 {
                        prop_assert_eq!(o.to_bits(), 0, "empty group must give +0");
                    }
                    check(o, s * sc, sabs * sc, m1 - m0, "2d2d")?;
                }
            }
        }
    }
}

/// A moderately large MoE-shaped case (skewed groups) to exercise the tiling and threads.
#[test]
fn grouped_gemm_2d3d_larger() {
    let (m, k, n, e) = (700, 512, 96, 4);
    let offs = vec![0, 13, 600, 699];
    let (fa, fb) = (Fp8Format::E4M3Fn, Fp8Format::E5M2);
    let a = codes(11, m * k, fa);
    let b = codes(12, e * k * n, fb);
    let sa = scales(13, m);
    let sb = scales(14, e * n);
    let mut out = vec![bf16::ZERO; m * n];
    Context::cpu()
        .grouped_gemm_2d3d(
            &GemmParams::new(fa, fb),
            m,
            k,
            n,
            e,
            (&a).into(),
            (&b).into(),
            (&offs).into(),
            (&sa).into(),
            (&sb).into(),
            (&mut out).into(),
            S,
        )
        .unwrap();
    for (g, (r0, r1)) in ranges(&offs).into_iter().enumerate() {
        for i in (r0..r1).step_by(5) {
            for j in 0..n {
                let (mut s, mut sabs) = (0f64, 0f64);
                for kk in 0..k {
                    let p = fa.decode(a[i * k + kk]) as f64
                        * fb.decode(b[g * n * k + j * k + kk]) as f64;
                    s += p;
                    sabs += p.abs();
                }
                let sc = sa[i] as f64 * sb[g * n + j] as f64;
                check(out[i * n + j], s * sc, sabs * sc, k, "large").unwrap();
            }
        }
    }
}
