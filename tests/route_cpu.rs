//! The MoE routing ops on the CPU backend (src/reference/route.rs) against their definitions:
//! - `moe_dispatch_dual` == gather + pad (loops here) then `rowwise_2d` + `per_group_colwise`
//!   of the padded matrix on the padded offsets, with the padded offsets and slot rows of the
//!   definition, the scales forward or (through `scale_reciprocal`) dequant; `moe_combine_bwd_dual` the same of the weighted rows `T(w * dout)`;
//! - `moe_combine` == the f32 sum of f32 products in slot order, rounded once to bf16;
//! - `moe_combine_bwd_scores` within the f32 error bound of an f64 dot product, and exact on
//!   products that add exactly;
//! - bad input (not a permutation, slot rows outside the layout, m_cap too small, align 0)
//!   refused with its status and nothing written.
//!
//! All four formats, pow2 on/off, bf16 and f32 inputs (with special values), balanced / Zipf /
//! ragged (empty, one-row, unrouted tail) / one-row splits, alignments 1, 16, 32, 128 and
//! padded layouts larger than needed.

mod common;
mod moe_support;
mod route_support;

use common::{Tensor, config, fill_strategy, fmt_strategy};
use hipfp8::{Context, Error, MoeCastParams, NoParams, ScaleOutput, StreamRef, bf16};
use moe_support::SPLITS;
use proptest::prelude::*;
use route_support::{DispatchOut, Route, combine_oracle, composed, fill};

const ST: StreamRef = StreamRef::DEFAULT;

/// Run a dispatch (weighted when `w` is given) on the CPU backend into sentinel outputs.
fn run_dispatch(
    p: &MoeCastParams,
    rt: &Route,
    x: &Tensor,
    w: Option<&[f32]>,
) -> (hipfp8::Result<()>, DispatchOut) {
    let mut o = DispatchOut::sentinel(rt);
    let (perm, offs) = ((&rt.perm).into(), (&rt.offs).into());
    let ins = (x.hp(), w.map(|w| w.into()));
    let r = route_support::dispatch(
        &Context::cpu(),
        p,
        rt.dispatch_shape(),
        ins,
        (perm, offs),
        o.views(),
    );
    (r, o)
}

fn align_strategy() -> impl Strategy<Value = usize> {
    prop::sample::select(vec![1usize, 16, 32, 128, 3])
}

proptest! {
    #![proptest_config(config(48, "proptest-regressions/route_cpu.txt"))]

    #[test]
    fn dispatch_is_gather_pad_then_both_casts(
        fmt in fmt_strategy(),
        pow2 in any::<bool>(),
        f in fill_strategy(),
        t in 0usize..40,
        k in 1usize..70,
        topk in 1usize..5,
        g in 0usize..9,
        split in prop::sample::select(SPLITS.to_vec()),
        align in align_strategy(),
        extra in prop::sample::select(vec![0usize, 0, 5]),
        weighted in any::<bool>(),
        dequant in any::<bool>(),
    ) {
        let rt = Route::new(f.seed, (t, k, topk, g), split, align, extra);
        let x = Tensor::new(&f, t * k, k);
        let w = rt.weights(f.seed);
        let w = weighted.then_some(&w[..]);
        let so = if dequant { ScaleOutput::Dequant } else { ScaleOutput::Forward };
        let p = MoeCastParams::new(fmt, pow2).with_scales(so);
        let (r, got) = run_dispatch(&p, &rt, &x, w);
        prop_assert!(r.is_ok(), "{r:?}");
        let want = composed(fmt, pow2, so, &rt, &x, w);
        if let Some(d) = got.diff(&want) {
            return Err(TestCaseError::fail(format!("{rt:?} weighted {weighted}: {d}")));
        }
    }

    #[test]
    fn combine_is_the_f32_sum_rounded_once(
        f in fill_strategy(),
        t in 0usize..30,
        k in 0usize..40,
        topk in 1usize..5,
        g in 0usize..6,
        split in prop::sample::select(SPLITS.to_vec()),
        align in align_strategy(),
    ) {
        let rt = Route::new(f.seed, (t, k.max(1), topk, g), split, align, 3);
        let rt = Route { k, ..rt };
        let y = Tensor::new(&f, rt.m_cap * k, k.max(1));
        let (_, rows) = rt.layout();
        let w = rt.weights(f.seed);
        let mut out = vec![bf16::from_f32(-3.0); t * k];
        Context::cpu()
            .moe_combine(&NoParams, rt.combine_shape(), y.hp(), (&rows).into(), (&w).into(),
                         (&mut out).into(), ST)
            .unwrap();
        let want = combine_oracle(&rt, &y, &rows, &w);
        let bad = (0..out.len()).find(|&i| out[i].to_bits() != want[i].to_bits());
        prop_assert!(bad.is_none(), "element {:?}: {:?} vs {:?}", bad,
                     bad.map(|i| out[i]), bad.map(|i| want[i]));
    }

    #[test]
    fn score_gradient_within_the_f32_bound(
        seed in any::<u64>(),
        bf in any::<bool>(),
        t in 0usize..20,
        k in 0usize..700,
        topk in 1usize..4,
        g in 1usize..5,
    ) {
        let rt = Route::new(seed, (t, k.max(1), topk, g), SPLITS[1], 16, 0);
        let rt = Route { k, ..rt };
        let f = fill(seed, bf);
        let dout = Tensor::new(&f, t * k, k.max(1));
        let y = Tensor::new(&common::Fill { seed: seed ^ 9, ..f }, rt.m_cap * k, k.max(1));
        let (_, rows) = rt.layout();
        let mut dw = vec![-1.0f32; t * topk];
        Context::cpu()
            .moe_combine_bwd_scores(&NoParams, rt.combine_shape(), dout.hp(), y.hp(),
                                    (&rows).into(), (&mut dw).into(), ST)
            .unwrap();
        for (s, &got) in dw.iter().enumerate() {
            let tok = s / topk;
            let (mut exact, mut mag) = (0.0f64, 0.0f64);
            if rows[s] >= 0 {
                for c in 0..k {
                    let pr = dout.vals[tok * k + c] as f64 * y.vals[rows[s] as usize * k + c] as f64;
                    exact += pr;
                    mag += pr.abs();
                }
            }
            // f32 products then at most k/256 + 8 additions per path: |err| <= (k + 9) u sum|p|.
            let bound = (k as f64 + 9.0) * 2f64.powi(-24) * mag + 1e-40;
            prop_assert!((got as f64 - exact).abs() <= bound,
                         "slot {s}: {got} vs {exact} (bound {bound})");
        }
    }
}

#[test]
fn score_gradient_exact_on_exact_sums() {
    // Products of small integers add exactly in f32: the order cannot show.
    let rt = Route::new(5, (6, 600, 2, 3), SPLITS[0], 16, 0);
    let n = |i: usize| ((i * 7919) % 13) as f32 - 6.0;
    let dout: Vec<f32> = (0..rt.t * rt.k).map(n).collect();
    let y: Vec<f32> = (0..rt.m_cap * rt.k).map(|i| n(i + 3)).collect();
    let (_, rows) = rt.layout();
    let mut dw = vec![0.0f32; rt.m()];
    Context::cpu()
        .moe_combine_bwd_scores(
            &NoParams,
            rt.combine_shape(),
            (&dout).into(),
            (&y).into(),
            (&rows).into(),
            (&mut dw).into(),
            ST,
        )
        .unwrap();
    for (s, &got) in dw.iter().enumerate() {
        let (tok, r) = (s / rt.topk, rows[s] as usize);
        let want: f32 = (0..rt.k)
            .map(|c| dout[tok * rt.k + c] * y[r * rt.k + c])
            .sum();
        assert_eq!(got, want, "slot {s}");
    }
}

#[test]
fn bad_input_is_refused_and_nothing_written() {
    let rt = Route::new(3, (8, 16, 2, 4), SPLITS[0], 16, 0);
    let x = Tensor::new(&fill(3, true), rt.t * rt.k, rt.k);
    let p = MoeCastParams::new(hipfp8::Fp8Format::E4M3Fn, true);
    let untouched = |r: &Route, o: &DispatchOut| o.diff(&DispatchOut::sentinel(r)).is_none();

    // Not a permutation: a repeated slot, and one out of range.
    for bad in [1i32, 99] {
        let mut r2 = rt.clone();
        r2.perm[0] = if bad == 1 { r2.perm[1] } else { bad };
        let (r, o) = run_dispatch(&p, &r2, &x, None);
        assert!(matches!(r, Err(Error::InvalidOffsets(_))), "{r:?}");
        assert!(untouched(&r2, &o), "perm {bad}: outputs written");
    }
    // m_cap one row short of the worst case.
    let short = Route {
        m_cap: rt.m() + rt.g * 15 - 1,
        ..rt.clone()
    };
    let (r, o) = run_dispatch(&p, &short, &x, None);
    assert!(matches!(r, Err(Error::InvalidShape(_))), "{r:?}");
    assert!(untouched(&short, &o));
    // align 0.
    let zero = Route {
        align: 0,
        ..rt.clone()
    };
    let (r, _) = run_dispatch(&p, &zero, &x, None);
    assert!(matches!(r, Err(Error::InvalidShape(_))), "{r:?}");
    // Decreasing offsets.
    let mut dec = rt.clone();
    dec.offs[1] = dec.offs[0] - 1;
    let (r, o) = run_dispatch(&p, &dec, &x, None);
    assert!(matches!(r, Err(Error::InvalidOffsets(_))), "{r:?}");
    assert!(untouched(&dec, &o));

    // A slot row outside the padded layout (-1 is allowed: not routed).
    let y = vec![1.0f32; rt.m_cap * rt.k];
    let w = vec![1.0f32; rt.m()];
    for bad in [-2i32, rt.m_cap as i32] {
        let (_, mut rows) = rt.layout();
        rows[3] = bad;
        let mut out = vec![bf16::from_f32(-3.0); rt.t * rt.k];
        let r = Context::cpu().moe_combine(
            &NoParams,
            rt.combine_shape(),
            (&y).into(),
            (&rows).into(),
            (&w).into(),
            (&mut out).into(),
            ST,
        );
        assert!(matches!(r, Err(Error::InvalidOffsets(_))), "{r:?}");
        assert!(
            out.iter().all(|v| v.to_f32() == -3.0),
            "combine wrote on failure"
        );
        let mut dw = vec![-3.0f32; rt.m()];
        let r = Context::cpu().moe_combine_bwd_scores(
            &NoParams,
            rt.combine_shape(),
            (&y).into(),
            (&y).into(),
            (&rows).into(),
            (&mut dw).into(),
            ST,
        );
        assert!(matches!(r, Err(Error::InvalidOffsets(_))), "{r:?}");
        assert!(dw.iter().all(|&v| v == -3.0));
    }
}

#[test]
fn dispatch_then_combine_with_unit_weights_sums_each_tokens_rows() {
    // The dispatch's backward for x is a combine of dx_pad with unit weights: every token's
    // topk rows, summed. Check the layout round trip on exactly representable values.
    let rt = Route::new(11, (9, 8, 3, 5), SPLITS[1], 32, 4);
    let (_, rows) = rt.layout();
    let x: Vec<f32> = (0..rt.t * rt.k).map(|i| (i % 17) as f32).collect();
    let xt = Tensor {
        vals: x.clone(),
        b: None,
    };
    let xp = route_support::padded_matrix(&rt, &xt, None);
    let ones = vec![1.0f32; rt.m()];
    let mut out = vec![bf16::from_f32(0.0); rt.t * rt.k];
    Context::cpu()
        .moe_combine(
            &NoParams,
            rt.combine_shape(),
            (&xp.vals).into(),
            (&rows).into(),
            (&ones).into(),
            (&mut out).into(),
            ST,
        )
        .unwrap();
    for (i, v) in out.iter().enumerate() {
        assert_eq!(v.to_f32(), rt.topk as f32 * x[i], "element {i}");
    }
}

#[test]
fn nan_results_are_canonical() {
    // -Inf + Inf and 0 * Inf make the processor's default NaN (x86: 0xFFC00000, negative);
    // the combine and the score gradient write the canonical NaN of docs/OPS.md instead.
    let s = hipfp8::route::CombineShape {
        t: 1,
        k: 2,
        topk: 2,
        m_cap: 2,
    };
    let y = vec![f32::NEG_INFINITY, 1.0, f32::INFINITY, 1.0];
    let rows = vec![0i32, 1];
    let w = vec![1.0f32, 1.0];
    let mut out = vec![bf16::from_f32(-3.0); 2];
    let cpu = Context::cpu();
    cpu.moe_combine(
        &NoParams,
        s,
        hipfp8::HpSrc::F32((&y).into()),
        (&rows).into(),
        (&w).into(),
        (&mut out).into(),
        ST,
    )
    .unwrap();
    assert_eq!(
        out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        [0x7FC0, bf16::from_f32(2.0).to_bits()]
    );
    let dout = vec![0.0f32, 1.0];
    let mut dw = vec![-1.0f32; 2];
    cpu.moe_combine_bwd_scores(
        &NoParams,
        s,
        hipfp8::HpSrc::F32((&dout).into()),
        hipfp8::HpSrc::F32((&y).into()),
        (&rows).into(),
        (&mut dw).into(),
        ST,
    )
    .unwrap();
    assert_eq!(
        dw.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        [0x7FC0_0000, 0x7FC0_0000]
    );
}
