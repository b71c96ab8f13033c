//! The fused MoE casts' CPU references (src/reference/moe.rs) against their definitions:
//! - `weights_dual` == `colwise_3d` + `rowwise_3d_transpose_rhs`, byte for byte;
//! - `act_dual` == `rowwise_2d` + `per_group_colwise`;
//! - `swiglu_quant` == those two casts of `h = swiglu_h(gate, up)` held in the input dtype;
//! - `swiglu_bwd_quant` == those two casts of `[d_gate | d_up]` from `swiglu_bwd`;
//! - each of them with dequant scale outputs == the same with forward scales followed by
//!   `scale_reciprocal` of every scale (codes unchanged), including NaN, Inf and all-zero
//!   groups (`dequant_scales_of_special_groups`);
//! - the SwiGLU arithmetic against an f64 oracle and against torch's bf16 composition run with
//!   any exp within 2 f32 ulps of the true one (CUDA's documented `expf` bound).
//!
//! All four formats, pow2 on/off, bf16 and f32 inputs (with special values), odd shapes, and
//! balanced / Zipf / ragged (empty, one-row) / one-row splits. Outputs start as a sentinel and
//! are compared whole, so an element written by one side only is caught.

mod common;
mod moe_support;

use common::{SENT_F32, SENT_U8, Tensor, config, dim, fill_strategy, fmt_strategy, same_bits};
use hipfp8::reference::moe::{self, GluElem};
use hipfp8::reference::{Dual, Grouped, Hp, Rule, Scaled, quant, rowwise_2d};
use hipfp8::{Context, Fp8Format, ScaleOutput, StreamRef, bf16};
use moe_support::{SPLITS, Split, scale_output, split_offsets};
use proptest::prelude::*;

/// Byte and bit equality of two output sets, naming the first difference.
fn same_outputs(
    what: &str,
    a: &[(&[u8], &[f32])],
    b: &[(&[u8], &[f32])],
) -> Result<(), TestCaseError> {
    for (i, ((ao, asc), (bo, bsc))) in a.iter().zip(b).enumerate() {
        if let Some(j) = (0..ao.len()).find(|&j| ao[j] != bo[j]) {
            return Err(TestCaseError::fail(format!(
                "{what}: output {i} byte {j}: fused {:#04x} composed {:#04x}",
                ao[j], bo[j]
            )));
        }
        if let Some(j) = (0..asc.len()).find(|&j| !same_bits(asc[j], bsc[j])) {
            return Err(TestCaseError::fail(format!(
                "{what}: scales {i} at {j}: fused {:e} composed {:e}",
                asc[j], bsc[j]
            )));
        }
    }
    Ok(())
}

fn split_strategy() -> impl Strategy<Value = Split> {
    prop::sample::select(SPLITS.to_vec())
}

/// Output buffers (7 spare elements past what the op writes) starting as the sentinel.
fn outs(n: usize) -> Vec<u8> {
    vec![SENT_U8; n + 7]
}
fn scs(n: usize) -> Vec<f32> {
    vec![SENT_F32; n + 7]
}

/// What the composition's scale outputs hold for `so`: its first `n` scales as written
/// (forward) or through the `scale_reciprocal` op (dequant); the spare elements unchanged.
fn composed_scales(so: ScaleOutput, s: &mut [f32], n: usize) {
    if so == ScaleOutput::Dequant {
        let fwd = s[..n].to_vec();
        Context::cpu()
            .scale_reciprocal(n, (&fwd).into(), (&mut s[..n]).into(), StreamRef::DEFAULT)
            .unwrap();
    }
}

#[allow(clippy::too_many_arguments)]
fn weights_case<T: Hp>(
    fmt: Fp8Format,
    pow2: bool,
    so: ScaleOutput,
    e: usize,
    k: usize,
    n: usize,
    x: &[T],
) -> Result<(), TestCaseError> {
    let ekn = e * k * n;
    let (mut o, mut s, mut ot, mut st) = (outs(ekn), scs(e * n), outs(ekn), scs(e * k));
    let (rule, shape) = (Rule::new(fmt, pow2), (e, k, n));
    let (rows, cols) = (Scaled::new(&mut o, &mut s), Scaled::new(&mut ot, &mut st));
    moe::weights_dual(rule, so, shape, x, Dual { rows, cols });
    let (mut o2, mut s2, mut ot2, mut st2) = (outs(ekn), scs(e * n), outs(ekn), scs(e * k));
    quant::colwise_3d(rule, shape, x, Scaled::new(&mut o2, &mut s2));
    quant::rowwise_3d_transpose_rhs(rule, shape, x, Scaled::new(&mut ot2, &mut st2));
    composed_scales(so, &mut s2, e * n);
    composed_scales(so, &mut st2, e * k);
    same_outputs(
        &format!("weights_dual e={e} k={k} n={n} {fmt:?} pow2={pow2} {so:?}"),
        &[(&o, &s), (&ot, &st)],
        &[(&o2, &s2), (&ot2, &st2)],
    )
}

proptest! {
    #![proptest_config(config(256, "proptest-regressions/moe_reference.txt"))]

    #[test]
    fn weights_dual_is_colwise_3d_plus_transpose_rhs(
        fmt in fmt_strategy(), pow2 in any::<bool>(), so in scale_output(), fill in fill_strategy(),
        e in 0usize..4, k in dim(80), n in dim(80),
    ) {
        let t = Tensor::new(&fill, e * k * n, k);
        match &t.b {
            Some(b) => weights_case(fmt, pow2, so, e, k, n, b)?,
            None => weights_case(fmt, pow2, so, e, k, n, &t.vals)?,
        }
    }

    #[test]
    fn act_dual_is_rowwise_plus_per_group_colwise(
        fmt in fmt_strategy(), pow2 in any::<bool>(), so in scale_output(), fill in fill_strategy(),
        m in prop_oneof![Just(0usize), dim(300)], k in dim(70), g in 0usize..12,
        split in split_strategy(), seed in any::<u64>(),
    ) {
        let t = Tensor::new(&fill, m * k, k);
        let offs = split_offsets(split, seed, g, m);
        match &t.b {
            Some(b) => act_case(fmt, pow2, so, m, k, b, &offs)?,
            None => act_case(fmt, pow2, so, m, k, &t.vals, &offs)?,
        }
    }

    #[test]
    fn swiglu_quant_is_the_casts_of_h(
        fmt in fmt_strategy(), pow2 in any::<bool>(), so in scale_output(), fill in fill_strategy(),
        m in prop_oneof![Just(0usize), dim(200)], i in dim(60), g in 0usize..10,
        split in split_strategy(), seed in any::<u64>(),
    ) {
        let t = Tensor::new(&fill, m * 2 * i, 2 * i);
        let offs = split_offsets(split, seed, g, m);
        match &t.b {
            Some(b) => swiglu_case(fmt, pow2, so, m, i, b, &offs)?,
            None => swiglu_case(fmt, pow2, so, m, i, &t.vals, &offs)?,
        }
    }

    #[test]
    fn swiglu_bwd_quant_is_the_casts_of_the_grads(
        fmt in fmt_strategy(), pow2 in any::<bool>(), so in scale_output(), fill in fill_strategy(),
        m in prop_oneof![Just(0usize), dim(200)], i in dim(60), g in 0usize..10,
        split in split_strategy(), seed in any::<u64>(),
    ) {
        let t = Tensor::new(&fill, m * 2 * i, 2 * i);
        let dh = Tensor::new(&common::Fill { seed: fill.seed ^ 0x77, ..fill }, m * i, i);
        let offs = split_offsets(split, seed, g, m);
        match (&t.b, &dh.b) {
            (Some(b), Some(d)) => swiglu_bwd_case(fmt, pow2, so, m, i, d, b, &offs)?,
            _ => swiglu_bwd_case(fmt, pow2, so, m, i, &dh.vals, &t.vals, &offs)?,
        }
    }
}

/// The four scale outputs of `moe_act_dual` and `moe_weights_dual` on the CPU backend for
/// `so`: (codes, scales) of the act rows, act columns, weights and transposed weights.
fn special_outputs(
    p: &hipfp8::MoeCastParams,
    x: &[f32],
    offs: &[i32],
    (m, k): (usize, usize),
    (e, wk, wn): (usize, usize, usize),
) -> Vec<(Vec<u8>, Vec<f32>)> {
    use hipfp8::moe::DualOut;
    let (c, st, g) = (Context::cpu(), StreamRef::DEFAULT, offs.len());
    let (mut o, mut s, mut oc, mut sc) = (outs(m * k), scs(m), outs(m * k), scs(g * k));
    let d = DualOut {
        out: (&mut o).into(),
        scales: (&mut s).into(),
        out_col: (&mut oc).into(),
        scales_col: (&mut sc).into(),
    };
    c.moe_act_dual(p, m, k, x[..m * k].into(), offs.into(), d, st)
        .unwrap();
    let ekn = e * wk * wn;
    let (mut w, mut ws, mut wt, mut wts) = (outs(ekn), scs(e * wn), outs(ekn), scs(e * wk));
    let (wo, wso) = ((&mut w).into(), (&mut ws).into());
    let x = x[..ekn].into();
    c.moe_weights_dual(
        p,
        e,
        wk,
        wn,
        x,
        wo,
        wso,
        (&mut wt).into(),
        (&mut wts).into(),
        st,
    )
    .unwrap();
    vec![(o, s), (oc, sc), (w, ws), (wt, wts)]
}

/// Dequant scale outputs where a group's amax is zero, NaN or Inf, and of an empty group: the
/// codes of the forward mode, every scale `reciprocal` of the forward one, bit for bit (an
/// all-zero group: 1 / amax_to_scale(0), finite; NaN: the canonical NaN; Inf: the forward
/// scale is 0, the dequant scale +Inf), all four formats, pow2 on and off.
#[test]
fn dequant_scales_of_special_groups() {
    use hipfp8::MoeCastParams;
    use hipfp8::reference::recipe::reciprocal;
    let (m, k) = (4usize, 3usize);
    // Rows: all zeros, a NaN, an Inf, finite; as (1, 3, 4) weights: the same 12 values.
    let nan = f32::NAN;
    let inf = f32::INFINITY;
    let x = [
        0.0, 0.0, 0.0, 1.0, nan, -2.0, inf, 3.0, 0.5, -4.0, 0.25, 1.5,
    ];
    let offs = [1, 2, 2, 3, 4];
    for fmt in Fp8Format::ALL {
        for pow2 in [false, true] {
            let fwd = MoeCastParams::new(fmt, pow2);
            let dq = fwd.with_scales(ScaleOutput::Dequant);
            let a = special_outputs(&fwd, &x, &offs, (m, k), (1, 3, 4));
            let b = special_outputs(&dq, &x, &offs, (m, k), (1, 3, 4));
            for (j, ((ao, asc), (bo, bsc))) in a.iter().zip(&b).enumerate() {
                let what = format!("{fmt:?} pow2={pow2} output {j}");
                assert_eq!(ao, bo, "{what}: codes differ between the scale outputs");
                for (i, (&f, &d)) in asc.iter().zip(bsc).enumerate() {
                    let want = if f.to_bits() == SENT_F32.to_bits() {
                        f
                    } else {
                        reciprocal(f)
                    };
                    assert_eq!(
                        d.to_bits(),
                        want.to_bits(),
                        "{what} scale {i}: {f:e} -> {d:e}"
                    );
                }
            }
            let rows = &b[0].1;
            assert!(
                rows[0].is_finite() && rows[0] > 0.0,
                "zero row: {:e}",
                rows[0]
            );
            assert_eq!(rows[1].to_bits(), 0x7FC0_0000, "NaN row");
            assert_eq!(rows[2], f32::INFINITY, "Inf row");
            // Column groups: rows [0,1), [1,2), empty, [2,3), [3,4): the empty group's scales
            // are those of an all-zero group.
            let cols = &b[1].1;
            assert_eq!(cols[2 * k].to_bits(), rows[0].to_bits(), "empty group");
            assert_eq!(cols[k + 1].to_bits(), 0x7FC0_0000, "NaN column group");
            assert_eq!(cols[3 * k], f32::INFINITY, "Inf column group");
        }
    }
}

/// `rowwise_2d` + `per_group_colwise` of `x` (m, k), scales as `so` says: the definition of
/// the dual casts.
fn composed<T: Hp>(
    fmt: Fp8Format,
    pow2: bool,
    so: ScaleOutput,
    m: usize,
    k: usize,
    x: &[T],
    offs: &[i32],
) -> (Vec<u8>, Vec<f32>, Vec<u8>, Vec<f32>) {
    let g = offs.len();
    let (mut o, mut s, mut oc, mut sc) = (outs(m * k), scs(m), outs(m * k), scs(g * k));
    let rule = Rule::new(fmt, pow2);
    rowwise_2d(rule, (m, k), x, Scaled::new(&mut o, &mut s));
    let x = Grouped { m, k, x, offs };
    quant::per_group_colwise(rule, x, Scaled::new(&mut oc, &mut sc)).unwrap();
    composed_scales(so, &mut s, m);
    composed_scales(so, &mut sc, g * k);
    (o, s, oc, sc)
}

#[allow(clippy::too_many_arguments)]
fn act_case<T: Hp>(
    fmt: Fp8Format,
    pow2: bool,
    so: ScaleOutput,
    m: usize,
    k: usize,
    x: &[T],
    offs: &[i32],
) -> Result<(), TestCaseError> {
    let g = offs.len();
    let (mut o, mut s, mut oc, mut sc) = (outs(m * k), scs(m), outs(m * k), scs(g * k));
    let (rows, cols) = (Scaled::new(&mut o, &mut s), Scaled::new(&mut oc, &mut sc));
    let input = Grouped { m, k, x, offs };
    moe::act_dual(Rule::new(fmt, pow2), so, input, Dual { rows, cols }).unwrap();
    let (o2, s2, oc2, sc2) = composed(fmt, pow2, so, m, k, x, offs);
    same_outputs(
        &format!("act_dual m={m} k={k} offs={offs:?} {fmt:?} pow2={pow2} {so:?}"),
        &[(&o, &s), (&oc, &sc)],
        &[(&o2, &s2), (&oc2, &sc2)],
    )
}

#[allow(clippy::too_many_arguments)]
fn swiglu_case<T: GluElem>(
    fmt: Fp8Format,
    pow2: bool,
    so: ScaleOutput,
    m: usize,
    i: usize,
    gu: &[T],
    offs: &[i32],
) -> Result<(), TestCaseError> {
    let g = offs.len();
    let (mut o, mut s, mut oc, mut sc) = (outs(m * i), scs(m), outs(m * i), scs(g * i));
    let (rows, cols) = (Scaled::new(&mut o, &mut s), Scaled::new(&mut oc, &mut sc));
    let input = Grouped {
        m,
        k: 2 * i,
        x: gu,
        offs,
    };
    moe::swiglu_quant(Rule::new(fmt, pow2), so, input, Dual { rows, cols }).unwrap();
    // h in the input dtype, then today's casts of it.
    let h: Vec<T> = (0..m * i)
        .map(|j| {
            let (r, c) = (j / i, j % i);
            T::from_rounded(moe::swiglu_h(gu[r * 2 * i + c], gu[r * 2 * i + i + c]))
        })
        .collect();
    let (o2, s2, oc2, sc2) = composed(fmt, pow2, so, m, i, &h, offs);
    same_outputs(
        &format!("swiglu_quant m={m} i={i} offs={offs:?} {fmt:?} pow2={pow2} {so:?}"),
        &[(&o, &s), (&oc, &sc)],
        &[(&o2, &s2), (&oc2, &sc2)],
    )
}

#[allow(clippy::too_many_arguments)]
fn swiglu_bwd_case<T: GluElem>(
    fmt: Fp8Format,
    pow2: bool,
    so: ScaleOutput,
    m: usize,
    i: usize,
    dh: &[T],
    gu: &[T],
    offs: &[i32],
) -> Result<(), TestCaseError> {
    let (g, w) = (offs.len(), 2 * i);
    let (mut o, mut s, mut oc, mut sc) = (outs(m * w), scs(m), outs(m * w), scs(g * w));
    let (rows, cols) = (Scaled::new(&mut o, &mut s), Scaled::new(&mut oc, &mut sc));
    let input = Grouped {
        m,
        k: w,
        x: gu,
        offs,
    };
    moe::swiglu_bwd_quant(Rule::new(fmt, pow2), so, input, dh, Dual { rows, cols }).unwrap();
    let d: Vec<T> = (0..m * w)
        .map(|j| {
            let (r, c) = (j / w, j % w);
            let cc = c % i;
            let (dg, du) = moe::swiglu_bwd(dh[r * i + cc], gu[r * w + cc], gu[r * w + i + cc]);
            T::from_rounded(if c < i { dg } else { du })
        })
        .collect();
    let (o2, s2, oc2, sc2) = composed(fmt, pow2, so, m, w, &d, offs);
    same_outputs(
        &format!("swiglu_bwd_quant m={m} i={i} offs={offs:?} {fmt:?} pow2={pow2} {so:?}"),
        &[(&o, &s), (&oc, &sc)],
        &[(&o2, &s2), (&oc2, &sc2)],
    )
}

// ------------------------------------------------------------------------------ the arithmetic

/// Distance in units of the last place between two values of one type given as ordered
/// integer keys (sign-magnitude bits mapped to a monotone line).
fn ulps_bits(a: u32, b: u32, sign: u32) -> u64 {
    let key = |x: u32| -> i64 {
        if x & sign != 0 {
            -((x & !sign) as i64)
        } else {
            x as i64
        }
    };
    (key(a) - key(b)).unsigned_abs()
}
fn ulps_f32(a: f32, b: f32) -> u64 {
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() {
            0
        } else {
            u64::MAX
        };
    }
    ulps_bits(a.to_bits(), b.to_bits(), 0x8000_0000)
}
fn ulps_bf16(a: f32, b: f32) -> u64 {
    if a.is_nan() || b.is_nan() {
        return if a.is_nan() && b.is_nan() {
            0
        } else {
            u64::MAX
        };
    }
    let (x, y) = (
        bf16::from_f32(a).to_bits() as u32,
        bf16::from_f32(b).to_bits() as u32,
    );
    ulps_bits(x, y, 0x8000)
}

/// `exp_f32` is the correctly rounded e^x (within 1 ulp, and exactly so almost everywhere)
/// over a stride of every f32 in its range, with the special values defined.
#[test]
fn exp_f32_is_correctly_rounded_nearly_everywhere() {
    let (mut worst, mut off, mut n) = (0u64, 0u64, 0u64);
    let ranges = [
        (0u32, 89.0f32.to_bits()),
        (0x8000_0000u32, (-104.0f32).to_bits()),
    ];
    for (lo, hi) in ranges {
        for b in (lo..=hi).step_by(389) {
            let x = f32::from_bits(b);
            let want = (x as f64).exp() as f32;
            let d = ulps_f32(moe::exp_f32(x), want);
            worst = worst.max(d);
            off += (d != 0) as u64;
            n += 1;
        }
    }
    println!("exp_f32 vs f32(exp_f64) over {n} inputs: {off} differ, max {worst} ulp");
    assert!(
        worst <= 1,
        "exp_f32 is {worst} ulp from the rounded f64 exp"
    );
    assert!(off * 10_000 < n, "{off} of {n} not correctly rounded");
    assert_eq!(moe::exp_f32(0.0), 1.0);
    assert_eq!(moe::exp_f32(1.0), std::f32::consts::E);
    assert!(moe::exp_f32(f32::NAN).is_nan());
    assert_eq!(moe::exp_f32(f32::INFINITY), f32::INFINITY);
    assert_eq!(moe::exp_f32(f32::NEG_INFINITY), 0.0);
    assert_eq!(moe::exp_f32(89.0), f32::INFINITY);
    assert_eq!(moe::exp_f32(88.72), (88.72f32 as f64).exp() as f32);
    assert_eq!(moe::exp_f32(-103.9), (-103.9f32 as f64).exp() as f32);
}

/// Every bf16 gate value with a spread of up values.
fn bf16_pairs() -> impl Iterator<Item = (bf16, bf16)> {
    let ups: Vec<bf16> = [1.0f32, -1.0, 0.3, -2.75, 1.0e-3, 37.0, 1.5e30, -0.0]
        .iter()
        .map(|&u| bf16::from_f32(u))
        .collect();
    (0u16..=u16::MAX)
        .map(bf16::from_bits)
        .filter(|g| g.to_f32().is_finite())
        .flat_map(move |g| ups.clone().into_iter().map(move |u| (g, u)))
}

/// `e` moved by `ulps` f32 ulps where it and the result are positive normal numbers (an expf
/// within that many ulps of ours), else `e` itself.
fn nudge(e: f32, ulps: i32) -> f32 {
    let n = f32::from_bits((e.to_bits() as i32).wrapping_add(ulps) as u32);
    if e.is_normal() && e > 0.0 && n.is_normal() && n > 0.0 {
        n
    } else {
        e
    }
}

/// Whether torch's f32 formula stays in range at `g`: |g| <= 80 (exp(-g) finite) and silu(g)
/// zero or normal (a subnormal intermediate loses relative precision in every implementation).
fn silu_in_range(g: f64) -> bool {
    let s = g / (1.0 + (-g).exp());
    g.abs() <= 80.0 && (s == 0.0 || s.abs() >= f32::MIN_POSITIVE as f64)
}

/// The exact value `v` at `g` where [`silu_in_range`] and `v` is a normal finite bf16
/// magnitude; else None (no ulp distance is meaningful there).
fn in_range(g: f64, v: f64) -> Option<f32> {
    let max = bf16::MAX.to_f32() as f64;
    (silu_in_range(g) && v.abs() >= f32::MIN_POSITIVE as f64 && v.abs() <= max).then_some(v as f32)
}

/// torch's bf16 `F.silu(g) * u` with an exp of `exp_ulps` f32 ulps off the defined one.
fn torch_like_h(g: f32, u: f32, exp_ulps: i32) -> f32 {
    let e = nudge(moe::exp_f32(-g), exp_ulps);
    let s = bf16::from_f32(g / (1.0 + e)).to_f32();
    bf16::from_f32(s * u).to_f32()
}

/// The forward SwiGLU in bf16, wherever torch's formula stays in range ([`silu_in_range`]):
/// at most 2 bf16 ulps from the correctly rounded f64 value (the two roundings torch's two ops
/// make), and at most 2 from torch's composition with any exp within 2 f32 ulps (CUDA's expf
/// bound: the exp can move silu's bf16 output by 1 ulp, which moves the product by up to 2);
/// f32 inputs: a few f32 ulps from f64.
#[test]
fn swiglu_h_against_f64_and_torch_like_bf16() {
    let (mut w64, mut wt, mut n, mut off) = (0u64, 0u64, 0u64, 0u64);
    for (g, u) in bf16_pairs() {
        let h = moe::swiglu_h(g, u);
        let (gd, ud) = (g.to_f64(), u.to_f64());
        if let Some(exact) = in_range(gd, gd / (1.0 + (-gd).exp()) * ud) {
            w64 = w64.max(ulps_bf16(h, exact));
        }
        if !silu_in_range(gd) {
            continue;
        }
        for j in -2..=2 {
            let t = ulps_bf16(h, torch_like_h(g.to_f32(), u.to_f32(), j));
            wt = wt.max(t);
            off += (t != 0) as u64;
        }
        n += 1;
    }
    println!(
        "swiglu_h bf16 over {n} pairs: max {w64} ulp from f64; max {wt} ulp from torch-like ({off} of {} differ)",
        5 * n
    );
    assert!(w64 <= 2, "{w64} bf16 ulp from the f64 value");
    assert!(wt <= 2, "{wt} bf16 ulp from torch's composition");
    // f32 inputs: f32 arithmetic throughout.
    let mut w32 = 0u64;
    for b in (0u32..0xFFFF_FFFF).step_by(65_537) {
        let g = f32::from_bits(b);
        if !g.is_finite() || g.abs() > 80.0 {
            continue;
        }
        let u = 0.7f32;
        let h = moe::swiglu_h(g, u);
        let exact = (g as f64 / (1.0 + (-(g as f64)).exp()) * u as f64) as f32;
        w32 = w32.max(ulps_f32(h, exact));
    }
    println!("swiglu_h f32: max {w32} ulp from f64");
    assert!(w32 <= 4, "{w32} f32 ulp from the f64 value");
}

/// torch's bf16 autograd of `F.silu(g) * u` with an exp of `exp_ulps` ulps off the defined one,
/// the last factor `1 + g (1 - sig)` contracted to an FMA or not: (d_gate, d_up).
fn torch_like_bwd(dh: f32, g: f32, u: f32, exp_ulps: i32, fused: bool) -> (f32, f32) {
    let r = |x: f32| bf16::from_f32(x).to_f32();
    let e = nudge(moe::exp_f32(-g), exp_ulps);
    let s = r(g / (1.0 + e));
    let sig = 1.0 / (1.0 + e);
    let last = if fused {
        g.mul_add(1.0 - sig, 1.0)
    } else {
        1.0 + g * (1.0 - sig)
    };
    (r(r(dh * u) * sig * last), r(dh * s))
}

/// The backward SwiGLU in bf16, wherever torch's formula stays in range ([`silu_in_range`]):
/// d_up within 2 bf16 ulps of the f64 value and of torch's (as h); d_gate within 1 bf16 ulp of
/// torch's composition (any exp within 2 ulps, the last factor contracted or not) wherever
/// that factor `1 + g (1 - sig)` does not cancel, and within `2^-7 |dh u|` (one bf16 ulp of
/// the largest value d_gate takes, |silu'| < 1.1) everywhere.
#[test]
fn swiglu_bwd_against_f64_and_torch_like_bf16() {
    let dh = [bf16::from_f32(0.625), bf16::from_f32(-3.0e-2)];
    let (mut wu64, mut wu, mut wg, mut wga) = (0u64, 0u64, 0u64, 0.0f64);
    let mut worst = (0.0f32, 0.0f32, 0.0f32, 0i32, false, 0.0f32, 0.0f32);
    for (g, u) in bf16_pairs() {
        for &d in &dh {
            let (dg, du) = moe::swiglu_bwd(d, g, u);
            let (gd, ud, dd) = (g.to_f64(), u.to_f64(), d.to_f64());
            let sig = 1.0 / (1.0 + (-gd).exp());
            if let Some(du64) = in_range(gd, dd * gd * sig) {
                wu64 = wu64.max(ulps_bf16(du, du64));
            }
            let last = 1.0 + gd * (1.0 - sig);
            if !silu_in_range(gd) {
                continue;
            }
            for (j, fused) in (-2..=2).flat_map(|j| [(j, false), (j, true)]) {
                let (tg, tu) = torch_like_bwd(d.to_f32(), g.to_f32(), u.to_f32(), j, fused);
                wu = wu.max(ulps_bf16(du, tu));
                if tg.is_finite() && dg.is_finite() {
                    if last.abs() > 1.0 / 64.0 {
                        wg = wg.max(ulps_bf16(dg, tg));
                    }
                    let scale = (dd * ud).abs().max(f64::MIN_POSITIVE);
                    let a = (dg as f64 - tg as f64).abs() / scale;
                    if a > wga {
                        wga = a;
                        worst = (g.to_f32(), u.to_f32(), d.to_f32(), j, fused, dg, tg);
                    }
                }
            }
        }
    }
    println!(
        "swiglu_bwd bf16: d_up max {wu64} ulp from f64, {wu} from torch-like; d_gate max {wg} ulp from torch-like (no cancellation), max |diff| / |dh u| = {wga:e} at (g, u, dh, exp ulps, fused, ours, torch's) = {worst:?}"
    );
    assert!(wu64 <= 2, "d_up {wu64} ulp from f64");
    assert!(wu <= 2, "d_up {wu} ulp from torch's");
    assert!(wg <= 1, "d_gate {wg} ulp from torch's");
    assert!(
        wga <= 2f64.powi(-7),
        "d_gate {wga:e} of |dh u| from torch's"
    );
}

// ------------------------------------------------------------------------------ bad input

/// Each `Context::moe_*` method refuses bad input with its error and writes nothing.
#[test]
fn moe_ops_refuse_bad_input_and_write_nothing() {
    use hipfp8::moe::DualOut;
    use hipfp8::{Error, MoeCastParams};
    let c = Context::cpu();
    let p = MoeCastParams::new(Fp8Format::E4M3Fn, false);
    let st = StreamRef::DEFAULT;
    let (m, k, i) = (6usize, 4usize, 2usize);
    let x: Vec<f32> = (0..m * 2 * k).map(|v| v as f32 - 7.5).collect();
    let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    let mut o = vec![SENT_U8; m * 2 * k];
    let mut s = vec![SENT_F32; m];
    let mut oc = vec![SENT_U8; m * 2 * k];
    let mut sc = vec![SENT_F32; 2 * 2 * k];
    let untouched = |o: &[u8], s: &[f32], oc: &[u8], sc: &[f32]| {
        o.iter().chain(oc).all(|&b| b == SENT_U8) && s.iter().chain(sc).all(|&v| v == SENT_F32)
    };
    macro_rules! dual {
        ($ol:expr, $sl:expr, $ocl:expr, $scl:expr) => {
            DualOut {
                out: (&mut o[..$ol]).into(),
                scales: (&mut s[..$sl]).into(),
                out_col: (&mut oc[..$ocl]).into(),
                scales_col: (&mut sc[..$scl]).into(),
            }
        };
    }
    for bad in [vec![3, 2], vec![-1, 2], vec![2, 7]] {
        let r = c.moe_act_dual(
            &p,
            m,
            k,
            x[..m * k].into(),
            (&bad).into(),
            dual!(m * k, m, m * k, 2 * k),
            st,
        );
        assert!(matches!(r, Err(Error::InvalidOffsets(_))), "{bad:?}: {r:?}");
        let r = c.moe_swiglu_quant(
            &p,
            m,
            i,
            x[..m * 2 * i].into(),
            (&bad).into(),
            dual!(m * i, m, m * i, 2 * i),
            st,
        );
        assert!(matches!(r, Err(Error::InvalidOffsets(_))), "{bad:?}: {r:?}");
    }
    let offs = vec![2, 6];
    let r = c.moe_act_dual(
        &p,
        m,
        k,
        x[..m * k].into(),
        (&offs).into(),
        dual!(m * k, m, m * k, 2 * k - 1),
        st,
    );
    assert!(
        matches!(
            r,
            Err(Error::OutputTooSmall {
                what: "scales_col",
                ..
            })
        ),
        "{r:?}"
    );
    let r = c.moe_act_dual(
        &p,
        m,
        k,
        x[..m * k - 1].into(),
        (&offs).into(),
        dual!(m * k, m, m * k, 2 * k),
        st,
    );
    assert!(
        matches!(r, Err(Error::InputTooSmall { what: "x", .. })),
        "{r:?}"
    );
    let r = c.moe_act_dual(
        &p,
        m,
        0,
        x[..0].into(),
        (&offs).into(),
        dual!(0, m, 0, 0),
        st,
    );
    assert!(matches!(r, Err(Error::InvalidShape(_))), "{r:?}");
    let r = c.moe_swiglu_quant(
        &p,
        m,
        i,
        x[..m * 2 * i - 1].into(),
        (&offs).into(),
        dual!(m * i, m, m * i, 2 * i),
        st,
    );
    assert!(
        matches!(r, Err(Error::InputTooSmall { what: "gu", .. })),
        "{r:?}"
    );
    let r = c.moe_swiglu_bwd_quant(
        &p,
        m,
        i,
        xb[..m * i].into(),
        x[..m * 2 * i].into(),
        (&offs).into(),
        dual!(m * 2 * i, m, m * 2 * i, 4 * i),
        st,
    );
    assert!(matches!(r, Err(Error::NotSupported(_))), "{r:?}");
    let r = c.moe_swiglu_bwd_quant(
        &p,
        m,
        i,
        x[..m * i].into(),
        x[..m * 2 * i].into(),
        (&offs).into(),
        dual!(m * 2 * i, m - 1, m * 2 * i, 4 * i),
        st,
    );
    assert!(
        matches!(r, Err(Error::OutputTooSmall { what: "scales", .. })),
        "{r:?}"
    );
    assert!(untouched(&o, &s, &oc, &sc), "a refused call wrote output");
    let (e, n) = (2usize, 3usize);
    let mut ot = vec![SENT_U8; e * k * n];
    let mut stt = vec![SENT_F32; e * k];
    let r = c.moe_weights_dual(
        &p,
        e,
        k,
        n,
        x[..e * k * n].into(),
        (&mut o[..e * k * n]).into(),
        (&mut s[..e * n - 1]).into(),
        (&mut ot[..]).into(),
        (&mut stt[..]).into(),
        st,
    );
    assert!(
        matches!(r, Err(Error::OutputTooSmall { what: "scales", .. })),
        "{r:?}"
    );
    let r = c.moe_weights_dual(
        &p,
        e,
        k,
        0,
        x[..0].into(),
        (&mut o[..0]).into(),
        (&mut s[..0]).into(),
        (&mut ot[..0]).into(),
        (&mut stt[..]).into(),
        st,
    );
    assert!(matches!(r, Err(Error::InvalidShape(_))), "{r:?}");
    assert!(
        untouched(&o, &s, &oc, &sc) && untouched(&ot, &stt, &[], &[]),
        "a refused call wrote output"
    );
}

/// `moe_weights_dual_halves` on the CPU backend == `moe_weights_dual` of the stacked weight (each
/// expert's first n/2 rows of k from x0, the rest from x1), byte for byte; an odd n and mixed
/// dtypes are refused with nothing written.
#[test]
fn weights_dual_halves_is_the_stacked_weight() {
    let ctx = Context::cpu();
    let s = StreamRef::DEFAULT;
    for (e, k, h, seed) in [
        (3usize, 5usize, 4usize, 1u64),
        (2, 17, 1, 2),
        (1, 3, 9, 3),
        (0, 4, 2, 4),
    ] {
        let n = 2 * h;
        let fill = common::Fill {
            seed,
            special_pct: 5,
            zero_row_pct: 10,
            mag_exp: 3,
            bf16: true,
        };
        let w = Tensor::new(&fill, e * k * n, k);
        let half = |j: usize| -> Vec<bf16> {
            let b = w.b.as_ref().expect("a bf16 fill");
            (0..e)
                .flat_map(|x| b[(2 * x + j) * k * h..][..k * h].to_vec())
                .collect()
        };
        let (x0, x1) = (half(0), half(1));
        let ekn = e * k * n;
        for so in [ScaleOutput::Forward, ScaleOutput::Dequant] {
            let p = hipfp8::MoeCastParams::new(Fp8Format::E4M3Fn, seed % 2 == 0).with_scales(so);
            let (mut o, mut sc, mut ot, mut st) = (outs(ekn), scs(e * n), outs(ekn), scs(e * k));
            ctx.moe_weights_dual_halves(
                &p,
                e,
                k,
                n,
                (&x0).into(),
                (&x1).into(),
                (&mut o[..ekn]).into(),
                (&mut sc[..e * n]).into(),
                (&mut ot[..ekn]).into(),
                (&mut st[..e * k]).into(),
                s,
            )
            .unwrap();
            let (mut o2, mut s2, mut ot2, mut st2) = (outs(ekn), scs(e * n), outs(ekn), scs(e * k));
            ctx.moe_weights_dual(
                &p,
                e,
                k,
                n,
                w.hp(),
                (&mut o2[..ekn]).into(),
                (&mut s2[..e * n]).into(),
                (&mut ot2[..ekn]).into(),
                (&mut st2[..e * k]).into(),
                s,
            )
            .unwrap();
            same_outputs(
                &format!("halves e={e} k={k} n={n} {so:?}"),
                &[(&o, &sc), (&ot, &st)],
                &[(&o2, &s2), (&ot2, &st2)],
            )
            .unwrap();
        }
    }
    // refusals: odd n, one half f32, and nothing written
    let p = hipfp8::MoeCastParams::new(Fp8Format::E4M3Fn, false);
    let (x, xf) = (vec![bf16::from_f32(1.0); 2 * 3], vec![1.0f32; 2 * 3]);
    let (mut o, mut sc, mut ot, mut st) = (outs(2 * 3 * 2), scs(2), outs(12), scs(6));
    let mut call = |n: usize, second_f32: bool| {
        let x1: hipfp8::HpSrc<'_> = if second_f32 {
            (&xf).into()
        } else {
            (&x).into()
        };
        ctx.moe_weights_dual_halves(
            &p,
            1,
            6,
            n,
            (&x[..3 * n]).into(),
            x1,
            (&mut o[..6 * n]).into(),
            (&mut sc[..n]).into(),
            (&mut ot[..6 * n]).into(),
            (&mut st[..6]).into(),
            s,
        )
    };
    assert!(call(1, false).is_err(), "odd n accepted");
    assert!(call(2, true).is_err(), "mixed dtypes accepted");
    assert!(
        o.iter().chain(&ot).all(|&b| b == SENT_U8),
        "a refused call wrote codes"
    );
    assert!(
        sc.iter().chain(&st).all(|v| same_bits(*v, SENT_F32)),
        "a refused call wrote scales"
    );
}
