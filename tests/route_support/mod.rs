//! Shared by the MoE routing suites (`route_cpu`, `gpu_route`): a routing case (tokens,
//! permutation, END offsets, padding), its inputs, and the composition a dispatch is defined
//! as: gather + pad written out here by loops, then `rowwise_2d` and `per_group_colwise` of
//! the padded matrix on the padded offsets (docs/OPS.md, "MoE routing").
#![allow(dead_code)]

use crate::common::{Fill, Rng, Tensor};
use crate::moe_support::{Split, split_offsets};
use hipfp8::route::{CombineShape, DispatchShape};
use hipfp8::{
    CastParams, Context, Dst, Fp8Format, HpSrc, MoeCastParams, ScaleOutput, Src, StreamRef, bf16,
};

/// A routing: `t` tokens of `k` columns, `topk` slots each, `g` experts, groups padded to
/// `align`, `m_cap` padded rows (the minimum plus `extra`).
#[derive(Clone, Debug)]
pub struct Route {
    pub t: usize,
    pub k: usize,
    pub topk: usize,
    pub g: usize,
    pub align: usize,
    pub m_cap: usize,
    pub perm: Vec<i32>,
    pub offs: Vec<i32>,
}

impl Route {
    pub fn new(
        seed: u64,
        (t, k, topk, g): (usize, usize, usize, usize),
        split: Split,
        align: usize,
        extra: usize,
    ) -> Route {
        let m = t * topk;
        let mut r = Rng::new(seed ^ 0x0077_7777);
        let mut perm: Vec<i32> = (0..m as i32).collect();
        for i in (1..m).rev() {
            perm.swap(i, r.below(i as u64 + 1) as usize);
        }
        let offs = split_offsets(split, seed, g, m);
        Route {
            t,
            k,
            topk,
            g,
            align,
            m_cap: m + g * (align - 1) + extra,
            perm,
            offs,
        }
    }
    pub fn m(&self) -> usize {
        self.t * self.topk
    }
    pub fn dispatch_shape(&self) -> DispatchShape {
        DispatchShape {
            t: self.t,
            k: self.k,
            topk: self.topk,
            align: self.align,
            m_cap: self.m_cap,
        }
    }
    pub fn combine_shape(&self) -> CombineShape {
        CombineShape {
            t: self.t,
            k: self.k,
            topk: self.topk,
            m_cap: self.m_cap,
        }
    }
    /// Padded END offsets and each slot's padded row (-1: not routed), by definition.
    pub fn layout(&self) -> (Vec<i32>, Vec<i32>) {
        let mut pad = Vec::with_capacity(self.g);
        let mut rows = vec![-1i32; self.m()];
        let (mut lo, mut at) = (0usize, 0usize);
        for &end in &self.offs {
            for (i, &s) in self.perm[lo..end as usize].iter().enumerate() {
                rows[s as usize] = (at + i) as i32;
            }
            let len = end as usize - lo;
            at += len.div_ceil(self.align) * self.align;
            pad.push(at as i32);
            lo = end as usize;
        }
        (pad, rows)
    }
    /// Per-slot weights in (0, 1], some exactly 1 and some tiny.
    pub fn weights(&self, seed: u64) -> Vec<f32> {
        let mut r = Rng::new(seed ^ 0x0123_4567);
        (0..self.m())
            .map(|_| match r.below(8) {
                0 => 1.0,
                1 => 2f32.powi(-20),
                _ => r.unit().abs().max(1e-3),
            })
            .collect()
    }
}

/// The padded, gathered matrix of `x` (t, k) (rows `T(w[s] * x[t])` when weighted), in x's
/// dtype.
pub fn padded_matrix(rt: &Route, x: &Tensor, w: Option<&[f32]>) -> Tensor {
    let (_, rows) = rt.layout();
    let k = rt.k;
    let mut vals = vec![0.0f32; rt.m_cap * k];
    for (s, &p) in rows.iter().enumerate() {
        if p < 0 {
            continue;
        }
        let tok = s / rt.topk;
        for c in 0..k {
            let v = x.vals[tok * k + c];
            vals[p as usize * k + c] = match w {
                None => v,
                Some(w) if x.b.is_some() => bf16::from_f32(w[s] * v).to_f32(),
                Some(w) => w[s] * v,
            };
        }
    }
    match &x.b {
        Some(_) => Tensor {
            b: Some(vals.iter().map(|&v| bf16::from_f32(v)).collect()),
            vals,
        },
        None => Tensor { vals, b: None },
    }
}

/// What a dispatch writes.
#[derive(Clone, Debug, PartialEq)]
pub struct DispatchOut {
    pub offs_pad: Vec<i32>,
    pub slot_row: Vec<i32>,
    pub out: Vec<u8>,
    pub scales: Vec<f32>,
    pub out_col: Vec<u8>,
    pub scales_col: Vec<f32>,
}

impl DispatchOut {
    pub fn sentinel(rt: &Route) -> DispatchOut {
        let (mc, k) = (rt.m_cap, rt.k);
        DispatchOut {
            offs_pad: vec![-7; rt.g],
            slot_row: vec![-7; rt.m()],
            out: vec![0xA5; mc * k],
            scales: vec![-12345.5; mc],
            out_col: vec![0xA5; mc * k],
            scales_col: vec![-12345.5; rt.g * k],
        }
    }
    /// The first difference from `o` (scales compared bit for bit), if any.
    pub fn diff(&self, o: &DispatchOut) -> Option<String> {
        fn first<T: Copy + std::fmt::Debug>(
            name: &str,
            a: &[T],
            b: &[T],
            eq: impl Fn(T, T) -> bool,
        ) -> Option<String> {
            if a.len() != b.len() {
                return Some(format!("{name}: lengths {} vs {}", a.len(), b.len()));
            }
            let bad: Vec<usize> = (0..a.len()).filter(|&i| !eq(a[i], b[i])).collect();
            bad.first().map(|&i| {
                format!(
                    "{name}: {} of {} differ, first at {i}: {:?} vs {:?}",
                    bad.len(),
                    a.len(),
                    a[i],
                    b[i]
                )
            })
        }
        let f = |a: f32, b: f32| a.to_bits() == b.to_bits();
        first("offs_pad", &self.offs_pad, &o.offs_pad, |a, b| a == b)
            .or_else(|| first("slot_row", &self.slot_row, &o.slot_row, |a, b| a == b))
            .or_else(|| first("out", &self.out, &o.out, |a, b| a == b))
            .or_else(|| first("scales", &self.scales, &o.scales, f))
            .or_else(|| first("out_col", &self.out_col, &o.out_col, |a, b| a == b))
            .or_else(|| first("scales_col", &self.scales_col, &o.scales_col, f))
    }
}

/// The dispatch by definition: the layout, then the two casts of the padded matrix
/// (out_col's rows past the last group zero), dequant scales through `scale_reciprocal`.
pub fn composed(
    fmt: Fp8Format,
    pow2: bool,
    so: ScaleOutput,
    rt: &Route,
    x: &Tensor,
    w: Option<&[f32]>,
) -> DispatchOut {
    let ctx = Context::cpu();
    let p = CastParams::new(fmt, pow2);
    let xp = padded_matrix(rt, x, w);
    let (offs_pad, slot_row) = rt.layout();
    let (mc, k) = (rt.m_cap, rt.k);
    let mut o = DispatchOut {
        offs_pad: offs_pad.clone(),
        slot_row,
        out: vec![0; mc * k],
        scales: vec![0.0; mc],
        out_col: vec![0; mc * k],
        scales_col: vec![0.0; rt.g * k],
    };
    let st = StreamRef::DEFAULT;
    ctx.rowwise_2d(
        &p,
        mc,
        k,
        xp.hp(),
        (&mut o.out).into(),
        (&mut o.scales).into(),
        st,
    )
    .unwrap();
    let (oc, sc) = ((&mut o.out_col).into(), (&mut o.scales_col).into());
    ctx.per_group_colwise(&p, mc, k, xp.hp(), (&offs_pad).into(), oc, sc, st)
        .unwrap();
    if so == ScaleOutput::Dequant {
        for v in [&mut o.scales, &mut o.scales_col] {
            let fwd = v.clone();
            let n = fwd.len();
            ctx.scale_reciprocal(n, (&fwd).into(), v.into(), st)
                .unwrap();
        }
    }
    o
}

/// The combine by definition: f32 products added in slot order from 0, rounded once.
pub fn combine_oracle(rt: &Route, y: &Tensor, rows: &[i32], w: &[f32]) -> Vec<bf16> {
    let k = rt.k;
    let mut out = vec![bf16::from_f32(0.0); rt.t * k];
    for tok in 0..rt.t {
        for c in 0..k {
            let mut acc = 0.0f32;
            for s in tok * rt.topk..(tok + 1) * rt.topk {
                if rows[s] >= 0 {
                    acc += w[s] * y.vals[rows[s] as usize * k + c];
                }
            }
            // OPS.md: a NaN sum is written as the canonical 0x7FC0.
            out[tok * k + c] = if acc.is_nan() {
                bf16::from_bits(0x7FC0)
            } else {
                bf16::from_f32(acc)
            };
        }
    }
    out
}

pub fn fill(seed: u64, bf16: bool) -> Fill {
    Fill {
        seed,
        special_pct: 0,
        zero_row_pct: 10,
        mag_exp: 0,
        bf16,
    }
}

/// The six outputs of a dispatch as views.
pub struct Views<'a> {
    pub offs_pad: Dst<'a, i32>,
    pub slot_row: Dst<'a, i32>,
    pub out: Dst<'a, u8>,
    pub scales: Dst<'a, f32>,
    pub out_col: Dst<'a, u8>,
    pub scales_col: Dst<'a, f32>,
}

impl DispatchOut {
    pub fn views(&mut self) -> Views<'_> {
        Views {
            offs_pad: (&mut self.offs_pad).into(),
            slot_row: (&mut self.slot_row).into(),
            out: (&mut self.out).into(),
            scales: (&mut self.scales).into(),
            out_col: (&mut self.out_col).into(),
            scales_col: (&mut self.scales_col).into(),
        }
    }
}

/// `moe_dispatch_dual`, or `moe_combine_bwd_dual` when `weights` are given, on `ctx`.
pub fn dispatch(
    ctx: &Context,
    p: &MoeCastParams,
    s: DispatchShape,
    (x, weights): (HpSrc<'_>, Option<Src<'_, f32>>),
    (perm, offs): (Src<'_, i32>, Src<'_, i32>),
    v: Views<'_>,
) -> hipfp8::Result<()> {
    let Views {
        offs_pad: a,
        slot_row: b,
        out: c,
        scales: d,
        out_col: e,
        scales_col: f,
    } = v;
    let st = StreamRef::DEFAULT;
    match weights {
        None => ctx.moe_dispatch_dual(p, s, x, perm, offs, a, b, c, d, e, f, st),
        Some(w) => ctx.moe_combine_bwd_dual(p, s, x, w, perm, offs, a, b, c, d, e, f, st),
    }
}
