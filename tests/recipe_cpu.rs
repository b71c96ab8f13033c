//! The MoE recipe (src/recipe.rs) on the CPU backend:
//! - `experts_equal_the_composed_ops`: forward + backward of the experts block equal, bit for
//!   bit, the same step made of the single ops (colwise_3d / rowwise_3d_transpose_rhs for the
//!   weights, rowwise_2d / per_group_colwise for x and dy, the fused SwiGLU casts, the grouped
//!   GEMMs, host reciprocals for the dequant scales), for two parameter sets (E4M3 pow2; E4M3
//!   activations with E5M2 gradients, exact scales), with an empty group and rows past the
//!   last offset;
//! - `composed_gemms_match_f64`: each of those six GEMMs against an f64 sum of its dequantized
//!   operands (tolerance below), and the whole step against the f64 math on the unquantized
//!   bf16 inputs (relative error below);
//! - `grouped_linear_equals_the_composed_ops`;
//! - bad arguments: workspace or saved too small, bad offsets, a group count that is not E,
//!   overlapping buffers, a cache of the wrong shape or format: a specific error, nothing
//!   written;
//! - `weight_cache_snapshot_and_refresh`: weights updated in place are not seen until
//!   `refresh` (the same result, bit for bit), then are (the composed result with the new
//!   weights); a backward across a refresh and a forward on an invalidated cache are refused;
//! - `saved_bytes_from_the_shapes`: the saved-tensor sizes against the formula.
//!
//! Tolerance of the GEMM check, per element (as tests/gpu_grouped_gemm.rs; `S = sum |a_k b_k|
//! sa sb`): `|out - ref| <= 2^-8 |ref| + 2 (K + 2) 2^-24 S` (the bf16 output rounding with the
//! scale multiplies, and twice the f32 summation bound).
//!
//! Tolerance of the end-to-end check: `||out - ref|| <= 0.15 ||ref||` (Frobenius, over the
//! written elements). Every FP8 operand carries a relative rounding error up to 2^-4 (E4M3)
//! or 2^-3 (E5M2), two operands per GEMM and up to three GEMMs in a chain; observed (printed)
//! 0.056-0.081. A wrong scale convention is off by factors of 2^10 or more, a wrong
//! group, layout or gate/up order by O(1).

#![allow(clippy::needless_range_loop)]

mod recipe_support;

use hipfp8::moe::DualOut;
use hipfp8::recipe::{ExpertsShape, LinearShape, RecipeParams, WeightCache};
use hipfp8::{
    CastParams, Context, Dst, Error, FormatChoice, Fp8Format, GemmParams, HpSrc, Loc, StreamRef,
    bf16,
};
use recipe_support::values;

const S: StreamRef = StreamRef::DEFAULT;
const SENTINEL: f32 = -768.0;

fn sentinel(n: usize) -> Vec<bf16> {
    vec![bf16::from_f32(SENTINEL); n]
}

/// `grouped_linear_forward` into a sentinel-filled y with a workspace of the queried size:
/// (y, the cache generation it used).
fn linear_forward(
    ctx: &Context,
    p: &RecipeParams,
    s: LinearShape,
    cache: &WeightCache,
    x: &[bf16],
    offs: &[i32],
) -> hipfp8::Result<(Vec<bf16>, u64)> {
    let mut y = sentinel(s.m * s.n);
    let mut ws = vec![0u8; ctx.grouped_linear_forward_workspace_size(p, s)?];
    let g = ctx.grouped_linear_forward(
        p,
        s,
        cache,
        x.into(),
        offs.into(),
        (&mut y).into(),
        (&mut ws).into(),
        S,
    )?;
    Ok((y, g))
}

fn recip(v: &[f32]) -> Vec<f32> {
    v.iter().map(|s| 1.0 / s).collect()
}

fn bits(v: &[bf16]) -> Vec<u16> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The parameter sets: (params, activation format, gradient format).
fn param_sets() -> [(RecipeParams, Fp8Format, Fp8Format); 2] {
    let p = |a: Fp8Format, g: Fp8Format, pow2| RecipeParams {
        format: FormatChoice::Exact(a),
        grad_format: FormatChoice::Exact(g),
        pow2_scales: pow2,
        ..RecipeParams::default()
    };
    [
        (
            p(Fp8Format::E4M3Fn, Fp8Format::E4M3Fn, true),
            Fp8Format::E4M3Fn,
            Fp8Format::E4M3Fn,
        ),
        (
            p(Fp8Format::E4M3Fn, Fp8Format::E5M2, false),
            Fp8Format::E4M3Fn,
            Fp8Format::E5M2,
        ),
    ]
}

const SHAPE: ExpertsShape = ExpertsShape {
    m: 100,
    d: 48,
    i: 40,
    e: 4,
};
/// An empty group (1), unaligned starts, rows 93..100 past the last offset.
const OFFS: [i32; 4] = [20, 20, 61, 93];

struct Inputs {
    x: Vec<bf16>,
    w13: Vec<bf16>,
    w2: Vec<bf16>,
    dy: Vec<bf16>,
    offs: Vec<i32>,
}

fn inputs(s: ExpertsShape, seed: u64) -> Inputs {
    let (m, d, i, e) = (s.m, s.d, s.i, s.e);
    Inputs {
        x: values(m * d, seed, 2.0),
        w13: values(e * 2 * i * d, seed + 1, 0.3),
        w2: values(e * d * i, seed + 2, 0.3),
        dy: values(m * d, seed + 3, 0.05),
        offs: OFFS.to_vec(),
    }
}

/// Every tensor of the composed step.
#[derive(Default)]
struct Composed {
    w13q: Vec<u8>,
    w13s: Vec<f32>,
    w13t: Vec<u8>,
    w13ts: Vec<f32>,
    w2q: Vec<u8>,
    w2s: Vec<f32>,
    w2t: Vec<u8>,
    w2ts: Vec<f32>,
    xq: Vec<u8>,
    xs: Vec<f32>,
    xc: Vec<u8>,
    xcs: Vec<f32>,
    gu: Vec<bf16>,
    hq: Vec<u8>,
    hs: Vec<f32>,
    hc: Vec<u8>,
    hcs: Vec<f32>,
    y: Vec<bf16>,
    dyq: Vec<u8>,
    dys: Vec<f32>,
    dyc: Vec<u8>,
    dycs: Vec<f32>,
    dh: Vec<bf16>,
    dw2: Vec<bf16>,
    dq: Vec<u8>,
    ds: Vec<f32>,
    dc: Vec<u8>,
    dcs: Vec<f32>,
    dx: Vec<bf16>,
    dw13: Vec<bf16>,
}

/// Quantize (E,K,N) column-major weights to both layouts with the single casts.
fn weights(
    ctx: &Context,
    p: &CastParams,
    (e, k, n): (usize, usize, usize),
    w: &[bf16],
) -> (Vec<u8>, Vec<f32>, Vec<u8>, Vec<f32>) {
    let (mut q, mut s, mut t, mut ts) = (
        vec![0u8; e * k * n],
        vec![0f32; e * n],
        vec![0u8; e * k * n],
        vec![0f32; e * k],
    );
    ctx.colwise_3d(p, e, k, n, w.into(), (&mut q).into(), (&mut s).into(), S)
        .unwrap();
    ctx.rowwise_3d_transpose_rhs(p, e, k, n, w.into(), (&mut t).into(), (&mut ts).into(), S)
        .unwrap();
    (q, s, t, ts)
}

/// Rowwise and per-group colwise casts of an (m, k) operand with the single casts.
fn act(
    ctx: &Context,
    p: &CastParams,
    m: usize,
    k: usize,
    x: &[bf16],
    offs: &[i32],
) -> (Vec<u8>, Vec<f32>, Vec<u8>, Vec<f32>) {
    let g = offs.len();
    let (mut q, mut s, mut c, mut cs) = (
        vec![0u8; m * k],
        vec![0f32; m],
        vec![0u8; m * k],
        vec![0f32; g * k],
    );
    ctx.rowwise_2d(p, m, k, x.into(), (&mut q).into(), (&mut s).into(), S)
        .unwrap();
    ctx.per_group_colwise(
        p,
        m,
        k,
        x.into(),
        offs.into(),
        (&mut c).into(),
        (&mut cs).into(),
        S,
    )
    .unwrap();
    (q, s, c, cs)
}

fn dual_of<'a>(
    q: &'a mut Vec<u8>,
    s: &'a mut Vec<f32>,
    c: &'a mut Vec<u8>,
    cs: &'a mut Vec<f32>,
) -> DualOut<'a> {
    DualOut {
        out: q.into(),
        scales: s.into(),
        out_col: c.into(),
        scales_col: cs.into(),
    }
}

fn compose(
    ctx: &Context,
    (fa, fg): (Fp8Format, Fp8Format),
    pow2: bool,
    s: ExpertsShape,
    inp: &Inputs,
) -> Composed {
    let (m, d, i, e) = (s.m, s.d, s.i, s.e);
    let (ap, gp) = (CastParams::new(fa, pow2), CastParams::new(fg, pow2));
    let (gaa, gga) = (GemmParams::new(fa, fa), GemmParams::new(fg, fa));
    let offs = &inp.offs[..];
    // out (m, n) = a (m, k) . b per group, dequant scales from the casts' scales.
    let g3 = |p: &GemmParams, k: usize, n: usize, a: &[u8], b: &[u8], sa: &[f32], sb: &[f32]| {
        let mut out = sentinel(m * n);
        let (sa, sb) = (recip(sa), recip(sb));
        ctx.grouped_gemm_2d3d(
            p,
            m,
            k,
            n,
            e,
            a.into(),
            b.into(),
            offs.into(),
            (&sa).into(),
            (&sb).into(),
            (&mut out).into(),
            S,
        )
        .unwrap();
        out
    };
    // out (e, n, k) = a^T . b per group (wgrad).
    let g2 = |n: usize, k: usize, a: &[u8], b: &[u8], sa: &[f32], sb: &[f32]| {
        let mut out = sentinel(e * n * k);
        let (sa, sb) = (recip(sa), recip(sb));
        ctx.grouped_gemm_2d2d(
            &gga,
            n,
            m,
            k,
            a.into(),
            b.into(),
            offs.into(),
            (&sa).into(),
            (&sb).into(),
            (&mut out).into(),
            S,
        )
        .unwrap();
        out
    };
    let mut c = Composed::default();
    (c.w13q, c.w13s, c.w13t, c.w13ts) = weights(ctx, &ap, (e, d, 2 * i), &inp.w13);
    (c.w2q, c.w2s, c.w2t, c.w2ts) = weights(ctx, &ap, (e, i, d), &inp.w2);
    (c.xq, c.xs, c.xc, c.xcs) = act(ctx, &ap, m, d, &inp.x, offs);
    c.gu = g3(&gaa, d, 2 * i, &c.xq, &c.w13q, &c.xs, &c.w13s);
    (c.hq, c.hs, c.hc, c.hcs) = (
        vec![0; m * i],
        vec![0.0; m],
        vec![0; m * i],
        vec![0.0; e * i],
    );
    let o = dual_of(&mut c.hq, &mut c.hs, &mut c.hc, &mut c.hcs);
    ctx.moe_swiglu_quant(&ap.into(), m, i, (&c.gu).into(), offs.into(), o, S)
        .unwrap();
    c.y = g3(&gaa, i, d, &c.hq, &c.w2q, &c.hs, &c.w2s);
    (c.dyq, c.dys, c.dyc, c.dycs) = act(ctx, &gp, m, d, &inp.dy, offs);
    c.dh = g3(&gga, d, i, &c.dyq, &c.w2t, &c.dys, &c.w2ts);
    c.dw2 = g2(d, i, &c.dyc, &c.hc, &c.dycs, &c.hcs);
    (c.dq, c.ds, c.dc, c.dcs) = (
        vec![0; m * 2 * i],
        vec![0.0; m],
        vec![0; m * 2 * i],
        vec![0.0; e * 2 * i],
    );
    let o = dual_of(&mut c.dq, &mut c.ds, &mut c.dc, &mut c.dcs);
    ctx.moe_swiglu_bwd_quant(
        &gp.into(),
        m,
        i,
        (&c.dh).into(),
        (&c.gu).into(),
        offs.into(),
        o,
        S,
    )
    .unwrap();
    c.dx = g3(&gga, 2 * i, d, &c.dq, &c.w13t, &c.ds, &c.w13ts);
    c.dw13 = halves_major(&g2(2 * i, d, &c.dc, &c.xc, &c.dcs, &c.xcs), e, i, d);
    c
}

/// dW13 (e, 2i, d) as the recipe writes it, (2, e, i, d): the gate rows of every expert,
/// then the up rows (the CPU GEMM's elements do not depend on n, so one 2i-row GEMM cut in
/// two is the recipe's two i-row GEMMs).
fn halves_major<T: Copy>(w: &[T], e: usize, i: usize, d: usize) -> Vec<T> {
    (0..2)
        .flat_map(|h| {
            (0..e).flat_map(move |g| w[(g * 2 * i + h * i) * d..][..i * d].iter().copied())
        })
        .collect()
}

/// The recipe's outputs.
struct Outs {
    y: Vec<bf16>,
    dx: Vec<bf16>,
    dw13: Vec<bf16>,
    dw2: Vec<bf16>,
}

fn cache_for(ctx: &Context, p: &RecipeParams, s: ExpertsShape, inp: &Inputs) -> WeightCache {
    let mut c = WeightCache::new(ctx, p, &s.projections()).unwrap();
    assert_eq!(c.generation(), 0);
    let g = c
        .refresh(ctx, &[(&inp.w13).into(), (&inp.w2).into()], S)
        .unwrap();
    assert_eq!(g, 1);
    c
}

fn forward(
    ctx: &Context,
    p: &RecipeParams,
    s: ExpertsShape,
    cache: &WeightCache,
    inp: &Inputs,
    saved: &mut Vec<u8>,
) -> (Vec<bf16>, u64) {
    let mut y = sentinel(s.m * s.d);
    let mut ws = vec![0u8; ctx.moe_experts_sizes(p, s).unwrap().forward_workspace];
    let g = ctx
        .moe_experts_forward(
            p,
            s,
            cache,
            (&inp.x).into(),
            (&inp.offs).into(),
            (&mut y).into(),
            saved.into(),
            (&mut ws).into(),
            S,
        )
        .unwrap();
    (y, g)
}

fn run(
    ctx: &Context,
    p: &RecipeParams,
    s: ExpertsShape,
    cache: &WeightCache,
    inp: &Inputs,
) -> Outs {
    let mut saved = vec![0u8; ctx.moe_experts_saved_size(s).unwrap()];
    let (y, g) = forward(ctx, p, s, cache, inp, &mut saved);
    let (mut dx, mut dw13, mut dw2) = (
        sentinel(s.m * s.d),
        sentinel(s.e * 2 * s.i * s.d),
        sentinel(s.e * s.d * s.i),
    );
    let mut ws = vec![0u8; ctx.moe_experts_sizes(p, s).unwrap().backward_workspace];
    ctx.moe_experts_backward(
        p,
        s,
        cache,
        g,
        (&saved).into(),
        (&inp.dy).into(),
        (&inp.offs).into(),
        (&mut dx).into(),
        (&mut dw13).into(),
        (&mut dw2).into(),
        (&mut ws).into(),
        S,
    )
    .unwrap();
    Outs { y, dx, dw13, dw2 }
}

fn assert_same(what: &str, a: &[bf16], b: &[bf16]) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    if let Some(j) = (0..a.len()).find(|&j| a[j].to_bits() != b[j].to_bits()) {
        panic!(
            "{what}: element {j} differs: recipe {} vs composed {}",
            a[j], b[j]
        );
    }
}

/// `pad_wgrad` (the wgrad operands at 16-token group starts, the wgrad GEMMs on the padded
/// offsets) gives the unpadded recipe's outputs bit for bit on the CPU (the padding tokens are
/// zeros: the reference GEMM adds exact zeros after each group's terms), with unaligned, empty
/// and one-token groups, rows past the last offset, every group aligned, and one group.
/// The grouped linear refuses it.
#[test]
fn pad_wgrad_equals_the_unpadded_recipe() {
    let ctx = Context::cpu();
    let splits: [&[i32]; 4] = [&OFFS, &[1, 17, 17, 100], &[16, 32, 48, 96], &[0, 0, 0, 77]];
    for (n, (p, fa, fg)) in param_sets().into_iter().enumerate() {
        for (k, offs) in splits.iter().enumerate() {
            let mut inp = inputs(SHAPE, 30 + n as u64);
            inp.offs = offs.to_vec();
            let cache = cache_for(&ctx, &p, SHAPE, &inp);
            let pp = RecipeParams {
                pad_wgrad: true,
                ..p
            };
            let (a, b) = (
                run(&ctx, &p, SHAPE, &cache, &inp),
                run(&ctx, &pp, SHAPE, &cache, &inp),
            );
            let tag = format!("params {n} ({fa:?}, {fg:?}), offs {offs:?}");
            assert_same(&format!("{tag}: y"), &b.y, &a.y);
            assert_same(&format!("{tag}: dx"), &b.dx, &a.dx);
            assert_same(&format!("{tag}: dW13"), &b.dw13, &a.dw13);
            assert_same(&format!("{tag}: dW2"), &b.dw2, &a.dw2);
            if k == 1 {
                // the gradients are not all zeros (a test that cannot pass by accident)
                assert!(b.dw13.iter().any(|v| v.to_f32() != 0.0));
                assert!(b.dw2.iter().any(|v| v.to_f32() != 0.0));
            }
        }
    }
    let s = LinearShape {
        m: 20,
        k: 16,
        n: 16,
        e: 2,
    };
    let p = RecipeParams {
        pad_wgrad: true,
        ..RecipeParams::default()
    };
    let e = WeightCache::new(&ctx, &p, &[s.projection()])
        .and_then(|cache| {
            let (x, offs) = (values(20 * 16, 1, 1.0), vec![5i32, 20]);
            linear_forward(&ctx, &p, s, &cache, &x, &offs)
        })
        .unwrap_err();
    assert!(matches!(e, Error::NotSupported(_)), "{e}");
}

#[test]
fn experts_equal_the_composed_ops() {
    let ctx = Context::cpu();
    for (n, (p, fa, fg)) in param_sets().into_iter().enumerate() {
        let inp = inputs(SHAPE, 10 + n as u64);
        let cache = cache_for(&ctx, &p, SHAPE, &inp);
        let r = run(&ctx, &p, SHAPE, &cache, &inp);
        let c = compose(&ctx, (fa, fg), p.pow2_scales, SHAPE, &inp);
        let tag = format!("params {n} ({fa:?}, {fg:?}, pow2 {})", p.pow2_scales);
        assert_same(&format!("{tag}: y"), &r.y, &c.y);
        assert_same(&format!("{tag}: dx"), &r.dx, &c.dx);
        assert_same(&format!("{tag}: dW13"), &r.dw13, &c.dw13);
        assert_same(&format!("{tag}: dW2"), &r.dw2, &c.dw2);
        // Rows past the last offset are untouched; the rest was written.
        let last = *OFFS.last().unwrap() as usize * SHAPE.d;
        assert!(r.y[last..].iter().all(|v| v.to_f32() == SENTINEL));
        assert!(r.dx[last..].iter().all(|v| v.to_f32() == SENTINEL));
        assert!(
            r.y[..last]
                .iter()
                .filter(|v| v.to_f32() == SENTINEL)
                .count()
                < 4
        );
        // The empty group's weight gradients are zeros.
        let (d, i) = (SHAPE.d, SHAPE.i);
        assert!(r.dw2[d * i..2 * d * i].iter().all(|v| v.to_bits() == 0));
        let e = SHAPE.e;
        for h in 0..2 {
            let g1 = &r.dw13[(h * e + 1) * i * d..][..i * d];
            assert!(g1.iter().all(|v| v.to_bits() == 0));
        }
    }
}

/// One GEMM output element against the f64 sum of its dequantized terms (the tolerance of
/// the module docs).
fn check_sum(
    what: &dyn Fn() -> String,
    (fa, fb): (Fp8Format, Fp8Format),
    terms: impl Iterator<Item = (u8, u8)>,
    scale: f64,
    got: bf16,
) {
    let (mut acc, mut mag, mut n) = (0f64, 0f64, 0f64);
    for (a, b) in terms {
        let t = fa.decode(a) as f64 * fb.decode(b) as f64;
        acc += t;
        mag += t.abs();
        n += 1.0;
    }
    let (refv, big) = (acc * scale, mag * scale.abs());
    let tol = 2f64.powi(-8) * refv.abs() + 2.0 * (n + 2.0) * 2f64.powi(-24) * big;
    let got = got.to_f64();
    assert!(
        (got - refv).abs() <= tol,
        "{}: {got}, f64 {refv} (tolerance {tol})",
        what()
    );
}

/// The inverse of [`halves_major`]: dW13 (2, e, i, d) as (e, 2i, d).
fn rows_major<T: Copy>(w: &[T], e: usize, i: usize, d: usize) -> Vec<T> {
    (0..e)
        .flat_map(|g| (0..2).flat_map(move |h| w[(h * e + g) * i * d..][..i * d].iter().copied()))
        .collect()
}

/// The rows `[r0, r1)` of each group.
fn groups(offs: &[i32]) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
    offs.iter().enumerate().map(|(g, &end)| {
        let r0 = if g == 0 { 0 } else { offs[g - 1] as usize };
        (g, r0, end as usize)
    })
}

/// Check a 2D x 3D GEMM output (rows past the last offset: the sentinel).
#[allow(clippy::too_many_arguments)]
fn check_2d3d(
    what: &str,
    f: (Fp8Format, Fp8Format),
    (k, n): (usize, usize),
    a: &[u8],
    b: &[u8],
    offs: &[i32],
    sa: &[f32],
    sb: &[f32],
    out: &[bf16],
) {
    for (g, r0, r1) in groups(offs) {
        for r in r0..r1 {
            for j in 0..n {
                let terms = (0..k).map(|kk| (a[r * k + kk], b[g * n * k + j * k + kk]));
                let s = sa[r] as f64 * sb[g * n + j] as f64;
                check_sum(&|| format!("{what}[{r}, {j}]"), f, terms, s, out[r * n + j]);
            }
        }
    }
    let last = *offs.last().unwrap() as usize;
    for v in &out[last * n..] {
        assert_eq!(
            v.to_f32(),
            SENTINEL,
            "{what}: a row past the last offset was written"
        );
    }
}

/// Check a 2D x 2D GEMM output (g, n, k).
#[allow(clippy::too_many_arguments)]
fn check_2d2d(
    what: &str,
    f: (Fp8Format, Fp8Format),
    (n, mt, k): (usize, usize, usize),
    a: &[u8],
    b: &[u8],
    offs: &[i32],
    sa: &[f32],
    sb: &[f32],
    out: &[bf16],
) {
    for (g, r0, r1) in groups(offs) {
        for ii in 0..n {
            for j in 0..k {
                let terms = (r0..r1).map(|r| (a[ii * mt + r], b[j * mt + r]));
                let s = sa[g * n + ii] as f64 * sb[g * k + j] as f64;
                let o = out[g * n * k + ii * k + j];
                check_sum(&|| format!("{what} group {g} [{ii}, {j}]"), f, terms, s, o);
            }
        }
    }
}

fn f64s(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

fn sigmoid(g: f64) -> f64 {
    1.0 / (1.0 + (-g).exp())
}

/// The experts step in f64 on the unquantized inputs: (y, dx, dW13, dW2), rows of groups only.
fn step_f64(s: ExpertsShape, inp: &Inputs) -> [Vec<f64>; 4] {
    let (m, d, i, e) = (s.m, s.d, s.i, s.e);
    let (x, w13, w2, dy) = (f64s(&inp.x), f64s(&inp.w13), f64s(&inp.w2), f64s(&inp.dy));
    let (mut y, mut dx) = (vec![0.0; m * d], vec![0.0; m * d]);
    let (mut dw13, mut dw2) = (vec![0.0; e * 2 * i * d], vec![0.0; e * d * i]);
    let mut r0 = 0usize;
    for (g, &end) in inp.offs.iter().enumerate() {
        let w13g = &w13[g * 2 * i * d..];
        let w2g = &w2[g * d * i..];
        for r in r0..end as usize {
            let xr = &x[r * d..(r + 1) * d];
            let gu: Vec<f64> = (0..2 * i)
                .map(|c| (0..d).map(|k| xr[k] * w13g[c * d + k]).sum())
                .collect();
            let h: Vec<f64> = (0..i).map(|c| gu[c] * sigmoid(gu[c]) * gu[i + c]).collect();
            for j in 0..d {
                y[r * d + j] = (0..i).map(|c| h[c] * w2g[j * i + c]).sum();
            }
            let dyr = &dy[r * d..(r + 1) * d];
            let dh: Vec<f64> = (0..i)
                .map(|c| (0..d).map(|j| dyr[j] * w2g[j * i + c]).sum())
                .collect();
            let mut dgu = vec![0.0; 2 * i];
            for c in 0..i {
                let (gg, u, sg) = (gu[c], gu[i + c], sigmoid(gu[c]));
                dgu[c] = dh[c] * u * sg * (1.0 + gg * (1.0 - sg));
                dgu[i + c] = dh[c] * gg * sg;
            }
            for k in 0..d {
                dx[r * d + k] = (0..2 * i).map(|c| dgu[c] * w13g[c * d + k]).sum();
            }
            for j in 0..d {
                for c in 0..i {
                    dw2[g * d * i + j * i + c] += dyr[j] * h[c];
                }
            }
            for c in 0..2 * i {
                for k in 0..d {
                    dw13[((c / i) * e + g) * i * d + (c % i) * d + k] += dgu[c] * xr[k];
                }
            }
        }
        r0 = end as usize;
    }
    [y, dx, dw13, dw2]
}

fn rel_err(got: &[bf16], want: &[f64], n: usize) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for j in 0..n {
        num += (got[j].to_f64() - want[j]).powi(2);
        den += want[j].powi(2);
    }
    (num / den).sqrt()
}

#[test]
fn composed_gemms_match_f64() {
    let ctx = Context::cpu();
    let s = SHAPE;
    let (m, d, i) = (s.m, s.d, s.i);
    for (n, (p, fa, fg)) in param_sets().into_iter().enumerate() {
        let inp = inputs(s, 10 + n as u64);
        let c = compose(&ctx, (fa, fg), p.pow2_scales, s, &inp);
        let offs = &inp.offs[..];
        let (aa, ga) = ((fa, fa), (fg, fa));
        let r = recip;
        check_2d3d(
            "gu",
            aa,
            (d, 2 * i),
            &c.xq,
            &c.w13q,
            offs,
            &r(&c.xs),
            &r(&c.w13s),
            &c.gu,
        );
        check_2d3d(
            "y",
            aa,
            (i, d),
            &c.hq,
            &c.w2q,
            offs,
            &r(&c.hs),
            &r(&c.w2s),
            &c.y,
        );
        check_2d3d(
            "dh",
            ga,
            (d, i),
            &c.dyq,
            &c.w2t,
            offs,
            &r(&c.dys),
            &r(&c.w2ts),
            &c.dh,
        );
        check_2d3d(
            "dx",
            ga,
            (2 * i, d),
            &c.dq,
            &c.w13t,
            offs,
            &r(&c.ds),
            &r(&c.w13ts),
            &c.dx,
        );
        check_2d2d(
            "dW2",
            ga,
            (d, m, i),
            &c.dyc,
            &c.hc,
            offs,
            &r(&c.dycs),
            &r(&c.hcs),
            &c.dw2,
        );
        check_2d2d(
            "dW13",
            ga,
            (2 * i, m, d),
            &c.dc,
            &c.xc,
            offs,
            &r(&c.dcs),
            &r(&c.xcs),
            &rows_major(&c.dw13, s.e, i, d),
        );
        // The whole step against the f64 math on the bf16 inputs.
        let want = step_f64(s, &inp);
        let rows = *OFFS.last().unwrap() as usize * d;
        let got = [
            (&c.y, rows),
            (&c.dx, rows),
            (&c.dw13, c.dw13.len()),
            (&c.dw2, c.dw2.len()),
        ];
        for (name, ((g, len), w)) in ["y", "dx", "dW13", "dW2"].iter().zip(got.iter().zip(&want)) {
            let e = rel_err(g, w, *len);
            println!("params {n}: {name} relative error vs f64 {e:.4}");
            assert!(
                e <= 0.15,
                "params {n}: {name} relative error {e} vs the f64 step"
            );
        }
    }
}

#[test]
fn grouped_linear_equals_the_composed_ops() {
    let ctx = Context::cpu();
    let s = LinearShape {
        m: 90,
        k: 40,
        n: 56,
        e: 3,
    };
    let offs = vec![30, 30, 77];
    let (m, k, n, e) = (s.m, s.k, s.n, s.e);
    for (p, fa, fg) in param_sets() {
        let x = values(m * k, 5, 1.0);
        let w = values(e * k * n, 6, 0.2);
        let dy = values(m * n, 7, 0.1);
        let mut cache = WeightCache::new(&ctx, &p, &[s.projection()]).unwrap();
        let g = cache.refresh(&ctx, &[(&w).into()], S).unwrap();
        let (y, g2) = linear_forward(&ctx, &p, s, &cache, &x, &offs).unwrap();
        assert_eq!(g, g2);
        let (mut dx, mut dw) = (sentinel(m * k), sentinel(e * k * n));
        let mut ws = vec![0u8; ctx.grouped_linear_backward_workspace_size(&p, s).unwrap()];
        ctx.grouped_linear_backward(
            &p,
            s,
            &cache,
            g,
            (&x).into(),
            (&dy).into(),
            (&offs).into(),
            (&mut dx).into(),
            (&mut dw).into(),
            (&mut ws).into(),
            S,
        )
        .unwrap();
        // The composition.
        let (ap, gp) = (
            CastParams::new(fa, p.pow2_scales),
            CastParams::new(fg, p.pow2_scales),
        );
        let (wq, ws_, wt, wts) = weights(&ctx, &ap, (e, k, n), &w);
        let (xq, xs, xc, xcs) = act(&ctx, &ap, m, k, &x, &offs);
        let (dyq, dys, dyc, dycs) = act(&ctx, &gp, m, n, &dy, &offs);
        let mut cy = sentinel(m * n);
        ctx.grouped_gemm_2d3d(
            &GemmParams::new(fa, fa),
            m,
            k,
            n,
            e,
            (&xq).into(),
            (&wq).into(),
            (&offs).into(),
            (&recip(&xs)).into(),
            (&recip(&ws_)).into(),
            (&mut cy).into(),
            S,
        )
        .unwrap();
        let gga = GemmParams::new(fg, fa);
        let mut cdx = sentinel(m * k);
        ctx.grouped_gemm_2d3d(
            &gga,
            m,
            n,
            k,
            e,
            (&dyq).into(),
            (&wt).into(),
            (&offs).into(),
            (&recip(&dys)).into(),
            (&recip(&wts)).into(),
            (&mut cdx).into(),
            S,
        )
        .unwrap();
        let mut cdw = sentinel(e * k * n);
        ctx.grouped_gemm_2d2d(
            &gga,
            n,
            m,
            k,
            (&dyc).into(),
            (&xc).into(),
            (&offs).into(),
            (&recip(&dycs)).into(),
            (&recip(&xcs)).into(),
            (&mut cdw).into(),
            S,
        )
        .unwrap();
        assert_same("linear y", &y, &cy);
        assert_same("linear dx", &dx, &cdx);
        assert_same("linear dW", &dw, &cdw);
    }
}

/// The outputs and the saved buffer of a failed call are as they were.
#[test]
fn bad_arguments_write_nothing() {
    let ctx = Context::cpu();
    let (p, ..) = param_sets()[0];
    let s = SHAPE;
    let inp = inputs(s, 3);
    let cache = cache_for(&ctx, &p, s, &inp);
    let saved_len = ctx.moe_experts_saved_size(s).unwrap();
    let fws = ctx.moe_experts_sizes(&p, s).unwrap().forward_workspace;
    let fwd = |offs: &[i32], saved_len: usize, ws_len: usize| {
        let mut y = sentinel(s.m * s.d);
        let mut saved = vec![0xA5u8; saved_len];
        let mut ws = vec![0u8; ws_len];
        let r = ctx.moe_experts_forward(
            &p,
            s,
            &cache,
            (&inp.x).into(),
            offs.into(),
            (&mut y).into(),
            (&mut saved).into(),
            (&mut ws).into(),
            S,
        );
        assert!(
            y.iter().all(|v| v.to_f32() == SENTINEL),
            "y written by a failed call"
        );
        assert!(
            saved.iter().all(|&v| v == 0xA5),
            "saved written by a failed call"
        );
        r.unwrap_err()
    };
    match fwd(&inp.offs, saved_len, fws - 1) {
        Error::OutputTooSmall { what, needed, got } => {
            assert_eq!((what, needed, got), ("workspace", fws, fws - 1))
        }
        e => panic!("workspace too small: {e}"),
    }
    assert!(matches!(
        fwd(&inp.offs, saved_len - 1, fws),
        Error::OutputTooSmall { what: "saved", .. }
    ));
    assert!(matches!(
        fwd(&[20, 10, 61, 93], saved_len, fws),
        Error::InvalidOffsets(_)
    ));
    assert!(matches!(
        fwd(&[20, 61, 93], saved_len, fws),
        Error::GroupCountMismatch {
            expected: 4,
            got: 3
        }
    ));
    assert!(matches!(
        fwd(&[20, 20, 61, 101], saved_len, fws),
        Error::InvalidOffsets(_)
    ));
    // y inside the workspace.
    let mut ws = vec![0u8; fws + s.m * s.d * 2];
    let base = ws.as_mut_ptr();
    // SAFETY: both views lie inside `ws`, alive for the call; the call must refuse them.
    let (yv, wv) = unsafe {
        (
            Dst::from_raw(base.cast::<bf16>(), s.m * s.d, Loc::Host),
            Dst::from_raw(base, fws, Loc::Host),
        )
    };
    let mut saved = vec![0u8; saved_len];
    let r = ctx.moe_experts_forward(
        &p,
        s,
        &cache,
        (&inp.x).into(),
        (&inp.offs).into(),
        yv,
        (&mut saved).into(),
        wv,
        S,
    );
    assert!(matches!(r, Err(Error::OverlappingBuffers(_))), "{r:?}");
    assert!(ws.iter().all(|&v| v == 0) && saved.iter().all(|&v| v == 0));

    // Backward: workspace too small.
    let mut saved = vec![0u8; saved_len];
    let (_, g) = forward(&ctx, &p, s, &cache, &inp, &mut saved);
    let bws = ctx.moe_experts_sizes(&p, s).unwrap().backward_workspace;
    let (mut dx, mut dw13, mut dw2) = (
        sentinel(s.m * s.d),
        sentinel(s.e * 2 * s.i * s.d),
        sentinel(s.e * s.d * s.i),
    );
    let mut ws = vec![0u8; bws - 1];
    let r = ctx.moe_experts_backward(
        &p,
        s,
        &cache,
        g,
        (&saved).into(),
        (&inp.dy).into(),
        (&inp.offs).into(),
        (&mut dx).into(),
        (&mut dw13).into(),
        (&mut dw2).into(),
        (&mut ws).into(),
        S,
    );
    assert!(
        matches!(
            r,
            Err(Error::OutputTooSmall {
                what: "workspace",
                ..
            })
        ),
        "{r:?}"
    );
    for v in [&dx, &dw13, &dw2] {
        assert!(v.iter().all(|v| v.to_f32() == SENTINEL));
    }

    // A cache of another shape or format.
    let other = ExpertsShape { i: 32, ..s };
    let mut c2 = WeightCache::new(&ctx, &p, &other.projections()).unwrap();
    let (w13, w2) = (
        values(s.e * 64 * s.d, 1, 0.1),
        values(s.e * s.d * 32, 2, 0.1),
    );
    c2.refresh(&ctx, &[(&w13).into(), (&w2).into()], S).unwrap();
    let mut y = sentinel(s.m * s.d);
    let mut saved = vec![0u8; saved_len];
    let mut ws = vec![0u8; fws];
    let r = ctx.moe_experts_forward(
        &p,
        s,
        &c2,
        (&inp.x).into(),
        (&inp.offs).into(),
        (&mut y).into(),
        (&mut saved).into(),
        (&mut ws).into(),
        S,
    );
    assert!(matches!(r, Err(Error::InvalidShape(_))), "{r:?}");
    let p5 = RecipeParams {
        format: FormatChoice::Exact(Fp8Format::E5M2),
        ..p
    };
    let r = ctx.moe_experts_forward(
        &p5,
        s,
        &cache,
        (&inp.x).into(),
        (&inp.offs).into(),
        (&mut y).into(),
        (&mut saved).into(),
        (&mut ws).into(),
        S,
    );
    assert!(matches!(r, Err(Error::UnsupportedFormat(_))), "{r:?}");
    assert!(y.iter().all(|v| v.to_f32() == SENTINEL));
    // Refresh with too short weights: refused, the cache keeps its snapshot.
    let mut c3 = cache_for(&ctx, &p, s, &inp);
    let r = c3.refresh(&ctx, &[(&inp.w13[1..]).into(), (&inp.w2).into()], S);
    assert!(matches!(r, Err(Error::InputTooSmall { .. })), "{r:?}");
    assert_eq!(c3.generation(), 1);
}

#[test]
fn weight_cache_snapshot_and_refresh() {
    let ctx = Context::cpu();
    let (p, fa, fg) = param_sets()[0];
    let s = SHAPE;
    let mut inp = inputs(s, 21);
    let mut cache = cache_for(&ctx, &p, s, &inp);
    let mut saved1 = vec![0u8; ctx.moe_experts_saved_size(s).unwrap()];
    let (y1, g1) = forward(&ctx, &p, s, &cache, &inp, &mut saved1);
    assert_eq!(g1, 1);
    // An optimizer step updates the weights in place.
    let fresh = inputs(s, 77);
    inp.w13.copy_from_slice(&fresh.w13);
    inp.w2.copy_from_slice(&fresh.w2);
    // Without a refresh the cache is the old snapshot: the same result, bit for bit.
    let mut saved = vec![0u8; saved1.len()];
    let (y_stale, g_stale) = forward(&ctx, &p, s, &cache, &inp, &mut saved);
    assert_eq!(g_stale, g1);
    assert_same("stale y", &y_stale, &y1);
    let old = compose(&ctx, (fa, fg), p.pow2_scales, s, &inp);
    assert_ne!(
        bits(&y_stale),
        bits(&old.y),
        "the new weights change the result"
    );
    // After the refresh: the new weights.
    let g2 = cache
        .refresh(&ctx, &[(&inp.w13).into(), (&inp.w2).into()], S)
        .unwrap();
    assert_eq!(g2, g1 + 1);
    assert_eq!(cache.generation(), g2);
    let r = run(&ctx, &p, s, &cache, &inp);
    let c = compose(&ctx, (fa, fg), p.pow2_scales, s, &inp);
    assert_same("refreshed y", &r.y, &c.y);
    assert_same("refreshed dx", &r.dx, &c.dx);
    assert_same("refreshed dW13", &r.dw13, &c.dw13);
    assert_same("refreshed dW2", &r.dw2, &c.dw2);
    // A backward of the forward before the refresh is refused, nothing written.
    let (mut dx, mut dw13, mut dw2) = (
        sentinel(s.m * s.d),
        sentinel(s.e * 2 * s.i * s.d),
        sentinel(s.e * s.d * s.i),
    );
    let mut ws = vec![0u8; ctx.moe_experts_sizes(&p, s).unwrap().backward_workspace];
    let r = ctx.moe_experts_backward(
        &p,
        s,
        &cache,
        g1,
        (&saved1).into(),
        (&inp.dy).into(),
        (&inp.offs).into(),
        (&mut dx).into(),
        (&mut dw13).into(),
        (&mut dw2).into(),
        (&mut ws).into(),
        S,
    );
    assert!(matches!(r, Err(Error::NotSupported(_))), "{r:?}");
    assert!(dx.iter().all(|v| v.to_f32() == SENTINEL));
    // Invalidated: refused until refreshed; generations never repeat.
    cache.invalidate();
    assert_eq!(cache.generation(), 0);
    let mut y = sentinel(s.m * s.d);
    let mut fws = vec![0u8; ctx.moe_experts_sizes(&p, s).unwrap().forward_workspace];
    let r = ctx.moe_experts_forward(
        &p,
        s,
        &cache,
        (&inp.x).into(),
        (&inp.offs).into(),
        (&mut y).into(),
        (&mut saved).into(),
        (&mut fws).into(),
        S,
    );
    assert!(matches!(r, Err(Error::NotSupported(_))), "{r:?}");
    let g3 = cache
        .refresh(&ctx, &[(&inp.w13).into(), (&inp.w2).into()], S)
        .unwrap();
    assert_eq!(g3, g2 + 1);
}

#[test]
fn saved_bytes_from_the_shapes() {
    let ctx = Context::cpu();
    // The test shape and the DeepSeek-V3 expert-parallel shape of /work/shared/BENCHMARKS.md.
    let shapes = [
        SHAPE,
        ExpertsShape {
            m: 32768,
            d: 7168,
            i: 2048,
            e: 32,
        },
    ];
    for s in shapes {
        let (m, d, i, e) = (s.m, s.d, s.i, s.e);
        let b = s.saved_bytes().unwrap();
        // FP8 x and h colwise (1 byte, room for the padded layout of m_cap tokens), their f32
        // dequant scales per group and column, bf16 gu, the e padded offsets.
        let m_cap = (m + 15 * e).div_ceil(16) * 16;
        assert_eq!(
            b.fp8,
            m_cap * d + 4 * e * d + 2 * m * 2 * i + m_cap * i + 4 * e * i + 4 * e
        );
        // bf16 x, gu and h.
        assert_eq!(b.bf16, 2 * m * d + 2 * m * 2 * i + 2 * m * i);
        assert!(b.fp8 < b.bf16);
        let buf = ctx.moe_experts_saved_size(s).unwrap();
        assert!(buf >= b.fp8 && buf < b.fp8 + 7 * 256, "{buf} vs {}", b.fp8);
        println!(
            "saved for backward, m {m} d {d} i {i} e {e}: fp8 recipe {} bytes, bf16-saving {} \
             bytes ({:.3}x)",
            b.fp8,
            b.bf16,
            b.fp8 as f64 / b.bf16 as f64
        );
    }
}

#[test]
fn workspace_sizes_do_not_depend_on_the_data() {
    let ctx = Context::cpu();
    let (p, ..) = param_sets()[0];
    let s = SHAPE;
    let f = ctx.moe_experts_sizes(&p, s).unwrap().forward_workspace;
    let b = ctx.moe_experts_sizes(&p, s).unwrap().backward_workspace;
    // The intermediates (CPU: no scratch of the ops), each part 256-aligned, plus 255 bytes
    // of slack: the casts write dequant scales, so no forward scales are kept. Forward: x and
    // h rowwise with their scales (the colwise copies and their scales go to `saved`);
    // backward: dy both ways, bf16 dh, d both ways, with their scales.
    let (m, d, i, e) = (s.m, s.d, s.i, s.e);
    let fwd = m * d + m * i + 4 * (2 * m);
    assert!(
        f >= fwd && f < fwd + 7 * 256,
        "forward workspace {f} for {fwd}"
    );
    let m_cap = (m + 15 * e).div_ceil(16) * 16;
    let bwd = m * d + m_cap * d + 4 * m * i + m_cap * 2 * i + 4 * (2 * m + e * d + 4 * e * i + e);
    assert!(
        b >= bwd && b < bwd + 13 * 256,
        "backward workspace {b} for {bwd}"
    );
    assert!(matches!(
        ctx.moe_experts_sizes(&p, ExpertsShape { d: 0, ..s }),
        Err(Error::InvalidShape(_))
    ));
    assert!(matches!(
        ctx.moe_experts_saved_size(ExpertsShape {
            m: usize::MAX / 2,
            ..s
        }),
        Err(Error::SizeOverflow(_))
    ));
}

/// The `scale_reciprocal` launches of the recipe, read from its source (no op counter
/// exists): none in the experts forward and backward (their first step `cast_dy` included)
/// and in `WeightCache::refresh`, whose fused casts write dequant scales; one in each
/// grouped linear direction, after its single cast of x (`rowwise_2d`, `per_group_colwise`
/// write forward scales). The results of the new path are the composed ops' (tests above).
#[test]
fn reciprocal_launches_only_after_single_casts() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/recipe.rs");
    let src = std::fs::read_to_string(path).unwrap();
    // The body of the method `name` (indented by 4 in its impl block).
    let body = |name: &str| -> &str {
        let start = ["(", "<"]
            .iter()
            .find_map(|c| src.find(&format!("fn {name}{c}")))
            .unwrap_or_else(|| panic!("src/recipe.rs has no fn {name}"));
        let len = src[start..].find("\n    }\n").expect("end of the method");
        &src[start..start + len]
    };
    let want = [
        ("moe_experts_forward", 0),
        ("moe_experts_backward", 0),
        ("cast_dy", 0),
        ("refresh", 0),
        ("grouped_linear_forward", 1),
        ("grouped_linear_backward", 1),
    ];
    for (name, n) in want {
        let got = body(name).matches(".scale_reciprocal(").count();
        assert_eq!(got, n, "scale_reciprocal calls in {name}");
    }
    assert_eq!(
        src.matches(".scale_reciprocal(").count(),
        2,
        "scale_reciprocal calls in src/recipe.rs"
    );
}

/// W13 given as its halves (torchtitan's w1 and w3: each expert's first i rows of d, then
/// its last i) fills the cache as the stacked W13 does: the whole step bit for bit, both
/// parameter sets; bad halves are refused with nothing cast.
#[test]
fn weight_cache_from_w13_halves_equals_stacked() {
    let ctx = Context::cpu();
    let s = SHAPE;
    let (i, d, e) = (s.i, s.d, s.e);
    let inp = inputs(s, 41);
    let (mut gate, mut up) = (Vec::new(), Vec::new());
    for g in 0..e {
        let w = &inp.w13[g * 2 * i * d..][..2 * i * d];
        gate.extend_from_slice(&w[..i * d]);
        up.extend_from_slice(&w[i * d..]);
    }
    for (p, _, _) in param_sets() {
        let whole = run(&ctx, &p, s, &cache_for(&ctx, &p, s, &inp), &inp);
        let mut c = WeightCache::new(&ctx, &p, &s.projections()).unwrap();
        let halves: [HpSrc<'_>; 2] = [(&gate).into(), (&up).into()];
        let w2: [HpSrc<'_>; 1] = [(&inp.w2).into()];
        assert_eq!(c.refresh_parts(&ctx, &[&halves, &w2], S).unwrap(), 1);
        let split = run(&ctx, &p, s, &c, &inp);
        assert_same("y", &split.y, &whole.y);
        assert_same("dx", &split.dx, &whole.dx);
        assert_same("dW13", &split.dw13, &whole.dw13);
        assert_same("dW2", &split.dw2, &whole.dw2);
        // A half of the wrong length, mixed dtypes, three parts: refused, the cache still
        // holds its snapshot (generation unchanged).
        let short: [HpSrc<'_>; 2] = [(&gate[1..]).into(), (&up).into()];
        assert!(c.refresh_parts(&ctx, &[&short, &w2], S).is_err());
        let up32: Vec<f32> = up.iter().map(|v| v.to_f32()).collect();
        let mixed: [HpSrc<'_>; 2] = [(&gate).into(), (&up32).into()];
        assert!(matches!(
            c.refresh_parts(&ctx, &[&mixed, &w2], S),
            Err(Error::InvalidShape(_))
        ));
        let three: [HpSrc<'_>; 3] = [(&gate).into(), (&up).into(), (&up).into()];
        assert!(matches!(
            c.refresh_parts(&ctx, &[&three, &w2], S),
            Err(Error::InvalidShape(_))
        ));
        assert_eq!(c.generation(), 1);
    }
}
