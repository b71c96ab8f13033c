//! The pre-cast experts calls (src/recipe.rs `moe_experts_forward_precast` /
//! `moe_experts_backward_precast`) on the CPU backend:
//! - `precast_equals_the_bf16_calls`: with x and dy cast by `moe_act_dual` (dequant scales),
//!   y, dx, dW13 and dW2 equal the high-precision calls' bit for bit (two parameter sets, an
//!   empty group, rows past the last offset), and the pre-cast buffers are smaller;
//! - `dispatch_then_precast_equals_padded_bf16`: `moe_dispatch_dual` (align 4) -> pre-cast
//!   forward equals the bf16 forward of x gathered and padded with plain loops (the layout
//!   torch would build with index_select and zero rows), and `moe_combine_bwd_dual` ->
//!   pre-cast backward equals the bf16 backward of `bf16(w[s] * dout[token])` gathered the
//!   same way;
//! - `precast_bad_arguments`: short operands and scales, a short workspace: errors naming the
//!   buffer, nothing written.

mod recipe_support;

use hipfp8::moe::DualOut;
use hipfp8::recipe::{ExpertsShape, Fp8Operand, RecipeParams, WeightCache};
use hipfp8::route::DispatchShape;
use hipfp8::{
    CastParams, Context, Error, FormatChoice, Fp8Format, MoeCastParams, ScaleOutput, StreamRef,
    bf16,
};
use recipe_support::values;

const S: StreamRef = StreamRef::DEFAULT;
const SENTINEL: f32 = -768.0;

fn sentinel(n: usize) -> Vec<bf16> {
    vec![bf16::from_f32(SENTINEL); n]
}

fn params() -> [RecipeParams; 2] {
    let p = |a, g, pow2| RecipeParams {
        format: FormatChoice::Exact(a),
        grad_format: FormatChoice::Exact(g),
        pow2_scales: pow2,
        ..RecipeParams::default()
    };
    [
        p(Fp8Format::E4M3Fn, Fp8Format::E4M3Fn, true),
        p(Fp8Format::E4M3Fn, Fp8Format::E5M2, false),
    ]
}

fn dq(f: FormatChoice, pow2: bool) -> MoeCastParams {
    MoeCastParams::from(CastParams::new(f, pow2)).with_scales(ScaleOutput::Dequant)
}

/// Both layouts of an (m, k) operand with dequant scales: rowwise codes and scales, per-group
/// colwise codes and scales.
#[derive(Clone, Debug, PartialEq)]
struct Cast {
    q: Vec<u8>,
    s: Vec<f32>,
    c: Vec<u8>,
    cs: Vec<f32>,
}

impl Cast {
    fn zeros(m: usize, k: usize, e: usize) -> Cast {
        Cast {
            q: vec![0; m * k],
            s: vec![0.0; m],
            c: vec![0; m * k],
            cs: vec![0.0; e * k],
        }
    }
    fn out(&mut self) -> DualOut<'_> {
        DualOut {
            out: (&mut self.q).into(),
            scales: (&mut self.s).into(),
            out_col: (&mut self.c).into(),
            scales_col: (&mut self.cs).into(),
        }
    }
    fn rows(&self) -> Fp8Operand<'_> {
        Fp8Operand {
            q: (&self.q).into(),
            s: (&self.s).into(),
        }
    }
    fn cols(&self) -> Fp8Operand<'_> {
        Fp8Operand {
            q: (&self.c).into(),
            s: (&self.cs).into(),
        }
    }
}

fn act_dual(ctx: &Context, p: &MoeCastParams, k: usize, x: &[bf16], offs: &[i32]) -> Cast {
    let m = x.len() / k;
    let mut c = Cast::zeros(m, k, offs.len());
    ctx.moe_act_dual(p, m, k, x.into(), offs.into(), c.out(), S)
        .unwrap();
    c
}

fn cache(
    ctx: &Context,
    p: &RecipeParams,
    s: ExpertsShape,
    w13: &[bf16],
    w2: &[bf16],
) -> WeightCache {
    let mut c = WeightCache::new(ctx, p, &s.projections()).unwrap();
    c.refresh(ctx, &[w13.into(), w2.into()], S).unwrap();
    c
}

/// y, dx, dW13, dW2.
type Outs = [Vec<bf16>; 4];

fn grads(s: ExpertsShape) -> [Vec<bf16>; 3] {
    [
        sentinel(s.m * s.d),
        sentinel(s.e * 2 * s.i * s.d),
        sentinel(s.e * s.d * s.i),
    ]
}

/// The high-precision forward and backward.
fn run_bf16(
    ctx: &Context,
    p: &RecipeParams,
    s: ExpertsShape,
    c: &WeightCache,
    (x, dy, offs): (&[bf16], &[bf16], &[i32]),
) -> Outs {
    let mut saved = vec![0u8; ctx.moe_experts_saved_size(s).unwrap()];
    let mut ws = vec![0u8; ctx.moe_experts_sizes(p, s).unwrap().forward_workspace];
    let mut y = sentinel(s.m * s.d);
    let g = ctx
        .moe_experts_forward(
            p,
            s,
            c,
            x.into(),
            offs.into(),
            (&mut y).into(),
            (&mut saved).into(),
            (&mut ws).into(),
            S,
        )
        .unwrap();
    let [mut dx, mut dw13, mut dw2] = grads(s);
    let mut ws = vec![0u8; ctx.moe_experts_sizes(p, s).unwrap().backward_workspace];
    ctx.moe_experts_backward(
        p,
        s,
        c,
        g,
        (&saved).into(),
        dy.into(),
        offs.into(),
        (&mut dx).into(),
        (&mut dw13).into(),
        (&mut dw2).into(),
        (&mut ws).into(),
        S,
    )
    .unwrap();
    [y, dx, dw13, dw2]
}

/// The pre-cast forward and backward.
fn run_precast(
    ctx: &Context,
    p: &RecipeParams,
    s: ExpertsShape,
    c: &WeightCache,
    (x, dy, offs): (&Cast, &Cast, &[i32]),
) -> Outs {
    let z = ctx.moe_experts_precast_sizes(p, s).unwrap();
    let mut saved = vec![0u8; z.saved];
    let mut ws = vec![0u8; z.forward_workspace];
    let mut y = sentinel(s.m * s.d);
    let g = ctx
        .moe_experts_forward_precast(
            p,
            s,
            c,
            x.rows(),
            offs.into(),
            (&mut y).into(),
            (&mut saved).into(),
            (&mut ws).into(),
            S,
        )
        .unwrap();
    let [mut dx, mut dw13, mut dw2] = grads(s);
    let mut ws = vec![0u8; z.backward_workspace];
    ctx.moe_experts_backward_precast(
        p,
        s,
        c,
        g,
        (&saved).into(),
        dy.rows(),
        dy.cols(),
        x.cols(),
        offs.into(),
        (&mut dx).into(),
        (&mut dw13).into(),
        (&mut dw2).into(),
        (&mut ws).into(),
        S,
    )
    .unwrap();
    [y, dx, dw13, dw2]
}

fn assert_bits(tag: &str, a: &Outs, b: &Outs) {
    for (n, name) in ["y", "dx", "dW13", "dW2"].iter().enumerate() {
        assert_eq!(a[n].len(), b[n].len(), "{tag}: {name} lengths");
        if let Some(j) = (0..a[n].len()).find(|&j| a[n][j].to_bits() != b[n][j].to_bits()) {
            panic!("{tag}: {name}[{j}] differs: {} vs {}", a[n][j], b[n][j]);
        }
    }
}

#[test]
fn precast_equals_the_bf16_calls() {
    let ctx = Context::cpu();
    let s = ExpertsShape {
        m: 100,
        d: 48,
        i: 40,
        e: 4,
    };
    let offs = [20, 20, 61, 93];
    for (n, p) in params().into_iter().enumerate() {
        let seed = 40 + 10 * n as u64;
        let x = values(s.m * s.d, seed, 2.0);
        let dy = values(s.m * s.d, seed + 3, 0.05);
        let w13 = values(s.e * 2 * s.i * s.d, seed + 1, 0.3);
        let w2 = values(s.e * s.d * s.i, seed + 2, 0.3);
        let c = cache(&ctx, &p, s, &w13, &w2);
        let want = run_bf16(&ctx, &p, s, &c, (&x, &dy, &offs));
        let xc = act_dual(&ctx, &dq(p.format, p.pow2_scales), s.d, &x, &offs);
        let dyc = act_dual(&ctx, &dq(p.grad_format, p.pow2_scales), s.d, &dy, &offs);
        let got = run_precast(&ctx, &p, s, &c, (&xc, &dyc, &offs));
        assert_bits(&format!("params {n}"), &got, &want);
        // Rows past the last offset are untouched, the rest written.
        assert!(got[0][93 * s.d..].iter().all(|v| v.to_f32() == SENTINEL));
        assert!(
            got[0][..93 * s.d]
                .iter()
                .filter(|v| v.to_f32() == SENTINEL)
                .count()
                < 4
        );
        let z = ctx.moe_experts_precast_sizes(&p, s).unwrap();
        assert!(z.saved < ctx.moe_experts_saved_size(s).unwrap());
        assert!(z.forward_workspace < ctx.moe_experts_sizes(&p, s).unwrap().forward_workspace);
        assert!(z.backward_workspace < ctx.moe_experts_sizes(&p, s).unwrap().backward_workspace);
    }
}

/// A routing: `t` tokens, `topk` choices each among `e` experts (distinct per token), scores.
struct Routing {
    t: usize,
    topk: usize,
    e: usize,
    choice: Vec<usize>,
    score: Vec<f32>,
}

impl Routing {
    fn new(t: usize, topk: usize, e: usize, seed: u64) -> Routing {
        let r = values(t * topk * 2, seed, 1.0);
        let mut choice = Vec::new();
        for tok in 0..t {
            let base = (r[2 * tok * topk].to_f32().abs() * 97.0) as usize;
            for j in 0..topk {
                // Expert 2 never chosen: an empty group.
                let ex = [0, 1, 3, 4][(base + j) % 4];
                choice.push(ex.min(e - 1));
            }
            let _ = tok;
        }
        let score = (0..t * topk)
            .map(|s| 0.25 + r[2 * s + 1].to_f32().abs())
            .collect();
        Routing {
            t,
            topk,
            e,
            choice,
            score,
        }
    }
    /// The slots in expert order (stable: torch's `argsort(stable=True)`) and END offsets.
    fn perm_offs(&self) -> (Vec<i32>, Vec<i32>) {
        let mut perm: Vec<i32> = (0..(self.t * self.topk) as i32).collect();
        perm.sort_by_key(|&s| self.choice[s as usize]);
        let mut offs = vec![0i32; self.e];
        for &c in &self.choice {
            for o in &mut offs[c..] {
                *o += 1;
            }
        }
        (perm, offs)
    }
}

/// Rows of `src` (t, k) gathered through `perm` into the padded layout: group g's slots from
/// the padded start of g, zero rows up to a multiple of `align`, zero rows to `m_cap`; each
/// row scaled by `w[slot]` (bf16(w * v)) when given. Returns the rows and the padded offsets.
fn gather_pad(
    src: &[bf16],
    k: usize,
    topk: usize,
    (perm, offs): (&[i32], &[i32]),
    align: usize,
    m_cap: usize,
    w: Option<&[f32]>,
) -> (Vec<bf16>, Vec<i32>) {
    let mut out = vec![bf16::ZERO; m_cap * k];
    let mut offs_pad = Vec::new();
    let (mut start, mut row) = (0usize, 0usize);
    for &end in offs {
        for &slot in &perm[start..end as usize] {
            let tok = slot as usize / topk;
            for c in 0..k {
                let v = src[tok * k + c];
                out[row * k + c] = match w {
                    Some(w) => bf16::from_f32(w[slot as usize] * v.to_f32()),
                    None => v,
                };
            }
            row += 1;
        }
        row = row.div_ceil(align) * align;
        offs_pad.push(row as i32);
        start = end as usize;
    }
    (out, offs_pad)
}

#[test]
fn dispatch_then_precast_equals_padded_bf16() {
    let ctx = Context::cpu();
    let (t, topk, e, d, i, align) = (37, 2, 5, 32, 24, 4);
    let r = Routing::new(t, topk, e, 77);
    let (perm, offs) = r.perm_offs();
    let m_cap = t * topk + e * (align - 1);
    let s = ExpertsShape { m: m_cap, d, i, e };
    for (n, p) in params().into_iter().enumerate() {
        let x = values(t * d, 90 + n as u64, 2.0);
        let dout = values(t * d, 91 + n as u64, 0.05);
        let w13 = values(e * 2 * i * d, 92, 0.3);
        let w2 = values(e * d * i, 93, 0.3);
        let c = cache(&ctx, &p, s, &w13, &w2);
        let dispatch = |params: &MoeCastParams, src: &[bf16], w: Option<&[f32]>| {
            let mut cast = Cast::zeros(m_cap, d, e);
            let (mut offs_pad, mut slot_row) = (vec![0i32; e], vec![0i32; t * topk]);
            let ds = DispatchShape {
                t,
                k: d,
                topk,
                align,
                m_cap,
            };
            let o = cast.out();
            let res = match w {
                None => ctx.moe_dispatch_dual(
                    params,
                    ds,
                    src.into(),
                    (&perm).into(),
                    (&offs).into(),
                    (&mut offs_pad).into(),
                    (&mut slot_row).into(),
                    o.out,
                    o.scales,
                    o.out_col,
                    o.scales_col,
                    S,
                ),
                Some(w) => ctx.moe_combine_bwd_dual(
                    params,
                    ds,
                    src.into(),
                    w.into(),
                    (&perm).into(),
                    (&offs).into(),
                    (&mut offs_pad).into(),
                    (&mut slot_row).into(),
                    o.out,
                    o.scales,
                    o.out_col,
                    o.scales_col,
                    S,
                ),
            };
            res.unwrap();
            (cast, offs_pad)
        };
        let (xc, offs_pad) = dispatch(&dq(p.format, p.pow2_scales), &x, None);
        let (dyc, offs_pad2) = dispatch(&dq(p.grad_format, p.pow2_scales), &dout, Some(&r.score));
        assert_eq!(offs_pad, offs_pad2);
        let got = run_precast(&ctx, &p, s, &c, (&xc, &dyc, &offs_pad));

        let (x_pad, want_offs) = gather_pad(&x, d, topk, (&perm, &offs), align, m_cap, None);
        let w = Some(&r.score[..]);
        let (dy_pad, _) = gather_pad(&dout, d, topk, (&perm, &offs), align, m_cap, w);
        assert_eq!(offs_pad, want_offs, "padded offsets");
        assert_eq!(offs_pad[2], offs_pad[1], "expert 2 is empty");
        let want = run_bf16(&ctx, &p, s, &c, (&x_pad, &dy_pad, &offs_pad));
        assert_bits(&format!("params {n}"), &got, &want);
        // The padded layout's rows were used: y is written up to offs_pad[e-1].
        let last = offs_pad[e - 1] as usize * d;
        assert!(
            got[0][..last]
                .iter()
                .filter(|v| v.to_f32() == SENTINEL)
                .count()
                < 4
        );
    }
}

#[test]
fn precast_bad_arguments() {
    let ctx = Context::cpu();
    let p = params()[0];
    let s = ExpertsShape {
        m: 32,
        d: 16,
        i: 8,
        e: 2,
    };
    let offs = [16, 32];
    let c = cache(
        &ctx,
        &p,
        s,
        &values(2 * 16 * 16, 1, 0.3),
        &values(2 * 16 * 8, 2, 0.3),
    );
    let xc = act_dual(
        &ctx,
        &dq(p.format, true),
        s.d,
        &values(32 * 16, 3, 1.0),
        &offs,
    );
    let z = ctx.moe_experts_precast_sizes(&p, s).unwrap();
    let fwd = |x: Fp8Operand<'_>, ws_len: usize| {
        let (mut y, mut saved, mut ws) =
            (sentinel(s.m * s.d), vec![7u8; z.saved], vec![0u8; ws_len]);
        let r = ctx.moe_experts_forward_precast(
            &p,
            s,
            &c,
            x,
            offs[..].into(),
            (&mut y).into(),
            (&mut saved).into(),
            (&mut ws).into(),
            S,
        );
        if r.is_err() {
            assert!(
                y.iter().all(|v| v.to_f32() == SENTINEL),
                "y written on failure"
            );
            assert!(saved.iter().all(|&b| b == 7), "saved written on failure");
        }
        r.map(|_| ())
    };
    let short_q = Fp8Operand {
        q: (&xc.q[..xc.q.len() - 1]).into(),
        s: (&xc.s).into(),
    };
    let e = fwd(short_q, z.forward_workspace).unwrap_err();
    assert!(matches!(e, Error::InputTooSmall { .. }), "{e}");
    assert!(e.to_string().contains("x"), "{e}");
    let short_s = Fp8Operand {
        q: (&xc.q).into(),
        s: (&xc.s[..s.m - 1]).into(),
    };
    let e = fwd(short_s, z.forward_workspace).unwrap_err();
    assert!(matches!(e, Error::InputTooSmall { .. }), "{e}");
    assert!(e.to_string().contains("x_scales"), "{e}");
    let e = fwd(xc.rows(), z.forward_workspace - 1).unwrap_err();
    assert!(matches!(e, Error::OutputTooSmall { .. }), "{e}");
    assert!(e.to_string().contains("workspace"), "{e}");
    fwd(xc.rows(), z.forward_workspace).unwrap();
    // pad_wgrad is for the bf16 calls: the pre-cast ones take the caller's wgrad operands.
    let pp = RecipeParams {
        pad_wgrad: true,
        ..p
    };
    let (mut y, mut saved, mut ws) = (
        sentinel(s.m * s.d),
        vec![7u8; z.saved],
        vec![0u8; z.forward_workspace],
    );
    let e = ctx
        .moe_experts_forward_precast(
            &pp,
            s,
            &c,
            xc.rows(),
            offs[..].into(),
            (&mut y).into(),
            (&mut saved).into(),
            (&mut ws).into(),
            S,
        )
        .unwrap_err();
    assert!(matches!(e, Error::NotSupported(_)), "{e}");
    assert!(e.to_string().contains("pad_wgrad"), "{e}");
    assert!(y.iter().all(|v| v.to_f32() == SENTINEL));
    assert!(saved.iter().all(|&b| b == 7));
}
