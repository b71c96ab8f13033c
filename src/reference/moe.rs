//! CPU backend: the fused MoE casts (issue 14). Each op is defined as the composition of
//! existing casts and written here independently of them (one sweep for both reductions),
//! so the tests comparing it with that composition can fail:
//! - [`weights_dual`] = `colwise_3d` + `rowwise_3d_transpose_rhs` of the same weights;
//! - [`act_dual`] = `rowwise_2d` + `per_group_colwise` of the same activations;
//! - [`swiglu_quant`] = [`act_dual`] of `h = swiglu(gate, up)` ([`swiglu_h`]);
//! - [`swiglu_bwd_quant`] = [`act_dual`] of `[d_gate | d_up]` ([`swiglu_bwd`]).
//!
//! The SwiGLU arithmetic is torch's (`F.silu(g) * u` and its autograd) with every f32
//! operation IEEE-rounded and the one transcendental, exp, defined here ([`exp_f32`]) so that
//! every backend computes the same bits. Arguments are validated by the `Context` methods
//! (src/moe.rs); quantization numerics go through `scaling.rs` / `format.rs` only.
//!
//! Each op takes a [`ScaleOutput`]: its scale outputs hold the forward scales s (codes =
//! encode(x * s)) or the grouped GEMMs' dequant scales `reciprocal(s)` ([`store_scales`]); the
//! codes do not depend on it.

use half::bf16;
use rayon::prelude::*;

use super::quant::{group_ranges, padded_offsets};
use super::recipe::reciprocal;
use super::{Dual, Grouped, Hp, Rule, amax_of, try_jobs, try_scratch};
use crate::error::Result;
use crate::params::ScaleOutput;
use crate::scaling::{amax_combine, amax_to_scale};

/// Turn the forward scales an op has encoded with into what its scale outputs hold, in place:
/// unchanged ([`ScaleOutput::Forward`]) or `reciprocal(s)` ([`ScaleOutput::Dequant`]).
fn store_scales(so: ScaleOutput, scales: &mut [f32]) {
    if so == ScaleOutput::Dequant {
        for s in scales {
            *s = reciprocal(*s);
        }
    }
}

/// See [`crate::Context::moe_weights_dual`]. `x` is (E,K,N) column-major (expert e = an
/// (N rows, K columns) row-major matrix). Writes `out[e*N*K + n*K + k]` with
/// `scales[e*N + n]` (amax over k: colwise_3d) and `out_t[e*N*K + k*N + n]` with
/// `scales_t[e*K + k]` (amax over n: rowwise_3d_transpose_rhs), both as `so` says. Needs
/// `k > 0` and `n > 0`.
pub fn weights_dual<T: Hp>(
    rule: Rule,
    so: ScaleOutput,
    (e, k, n): (usize, usize, usize),
    x: &[T],
    out: Dual<'_>,
) {
    let Rule { fmt, pow2 } = rule;
    let Dual { rows, cols } = out;
    let (out, scales, out_t, scales_t) = (rows.codes, rows.scales, cols.codes, cols.scales);
    if e == 0 {
        return;
    }
    let nk = n * k;
    out[..e * nk]
        .par_chunks_mut(nk)
        .zip(out_t[..e * nk].par_chunks_mut(nk))
        .zip(scales[..e * n].par_chunks_mut(n))
        .zip(scales_t[..e * k].par_chunks_mut(k))
        .zip(x[..e * nk].par_chunks(nk))
        .for_each(|((((o, ot), s), st), xe)| {
            // One sweep for both reductions: the row amax (over k) lands in s, the column
            // amax (over n) accumulates in st; both become scales in place.
            st.fill(0.0);
            for (row, s) in xe.chunks(k).zip(s.iter_mut()) {
                let mut a = 0.0f32;
                for (c, &v) in st.iter_mut().zip(row) {
                    let f = v.to_f32();
                    a = amax_combine(a, f);
                    *c = amax_combine(*c, f);
                }
                *s = amax_to_scale(a, fmt, pow2);
            }
            for c in st.iter_mut() {
                *c = amax_to_scale(*c, fmt, pow2);
            }
            for (ni, ((row, orow), &sr)) in xe.chunks(k).zip(o.chunks_mut(k)).zip(&*s).enumerate() {
                for (ki, ((&v, ob), &sc)) in row.iter().zip(orow).zip(&*st).enumerate() {
                    let f = v.to_f32();
                    *ob = fmt.encode(f * sr);
                    ot[ki * n + ni] = fmt.encode(f * sc);
                }
            }
            store_scales(so, s);
            store_scales(so, st);
        });
}

/// The padded column layout of a grouped dual cast (the experts recipe's wgrad operands with
/// [`crate::RecipeParams::pad_wgrad`]): from `cols` (k*m, column-major `[c*m + r]`, as
/// [`act_dual`] writes it on END `offs`) to `out` (k*m_cap, `[c*m_cap + p]`), row r of group g
/// at `p = offs_pad[g-1] + (r - start_g)` with each group padded to a multiple of 16 rows
/// (`offs_pad` = the padded END offsets, [`padded_offsets`] with align 16), every
/// other byte 0x00 (padding rows and the rows from `offs_pad[G-1]` on). The per-group scales
/// do not change; G = 0 writes nothing. Needs `m_cap >= offs_pad[G-1]` (the callers check
/// `m_cap >= m + 15*G`).
pub fn pad_cols(
    (k, m): (usize, usize),
    offs: &[i32],
    cols: &[u8],
    m_cap: usize,
    out: &mut [u8],
    offs_pad: &mut [i32],
) {
    padded_offsets(offs, 16, offs_pad);
    if offs.is_empty() || m_cap == 0 {
        return;
    }
    out[..k * m_cap]
        .par_chunks_mut(m_cap)
        .enumerate()
        .for_each(|(ci, o)| {
            let c = &cols[ci * m..(ci + 1) * m];
            o.fill(0);
            let mut at = 0usize;
            for ((r0, r1), &pe) in group_ranges(offs).zip(offs_pad.iter()) {
                o[at..at + (r1 - r0)].copy_from_slice(&c[r0..r1]);
                at = pe as usize;
            }
        });
}

/// See [`crate::Context::moe_act_dual`]. `x` (M,K) row-major, END `offs` along M (validated).
/// Writes `out[m*K + k]` with `scales[m]` (amax over row m: rowwise_2d, every row, grouped or
/// not) and `out_col[k*M + m]` with `scales_col[g*K + k]` (amax over the group's rows of
/// column k: per_group_colwise; rows past `offs[G-1]` are not written there), both scales as
/// `so` says. Needs `k > 0`.
pub fn act_dual<T: Hp>(
    rule: Rule,
    so: ScaleOutput,
    x: Grouped<'_, T>,
    out: Dual<'_>,
) -> Result<()> {
    let Rule { fmt, pow2 } = rule;
    let Grouped { m, k, x, offs } = x;
    let Dual { rows, cols } = out;
    let (out, scales, out_col, scales_col) = (rows.codes, rows.scales, cols.codes, cols.scales);
    let g = offs.len();
    // Every row's rowwise cast plus, per group, its column amax into scales_col (group-major,
    // so each group owns a contiguous slice); one read of each row for both.
    let mut ranges = try_scratch::<(usize, usize)>("act_dual group ranges", g + 1)?;
    for (d, r) in ranges.iter_mut().zip(group_ranges(offs)) {
        *d = r;
    }
    // The rows after the last group (rowwise only) are one more range without column scales.
    let end = ranges[..g].last().map_or(0, |r| r.1);
    ranges[g] = (end, m);
    let mut jobs = try_jobs("act_dual", g, g + 1)?;
    let (mut o_rest, mut s_rest): (&mut [u8], &mut [f32]) = (&mut out[..m * k], &mut scales[..m]);
    let mut c_rest: &mut [f32] = &mut scales_col[..g * k];
    for (i, &(r0, r1)) in ranges.iter().enumerate() {
        let (o, or) = std::mem::take(&mut o_rest).split_at_mut((r1 - r0) * k);
        let (s, sr) = std::mem::take(&mut s_rest).split_at_mut(r1 - r0);
        let (c, cr) = std::mem::take(&mut c_rest).split_at_mut(if i < g { k } else { 0 });
        (o_rest, s_rest, c_rest) = (or, sr, cr);
        jobs.push((r0, r1, o, s, c));
    }
    jobs.into_par_iter().for_each(|(r0, r1, o, s, c)| {
        let grouped = !c.is_empty();
        c.fill(0.0);
        for ((row, orow), s) in x[r0 * k..r1 * k]
            .chunks(k)
            .zip(o.chunks_mut(k))
            .zip(s.iter_mut())
        {
            let sc = amax_to_scale(amax_of(row), fmt, pow2);
            *s = sc;
            for (ob, &v) in orow.iter_mut().zip(row) {
                *ob = fmt.encode(v.to_f32() * sc);
            }
            if grouped {
                for (a, &v) in c.iter_mut().zip(row) {
                    *a = amax_combine(*a, v.to_f32());
                }
            }
        }
        for a in c.iter_mut() {
            *a = amax_to_scale(*a, fmt, pow2);
        }
    });
    // The column-major output, one output column (= input column) per task.
    if m > 0 && g > 0 {
        let scales_col = &*scales_col;
        out_col[..k * m]
            .par_chunks_mut(m)
            .enumerate()
            .for_each(|(col, oc)| {
                for (gi, &(r0, r1)) in ranges[..g].iter().enumerate() {
                    let sc = scales_col[gi * k + col];
                    for r in r0..r1 {
                        oc[r] = fmt.encode(x[r * k + col].to_f32() * sc);
                    }
                }
            });
    }
    store_scales(so, &mut scales[..m]);
    store_scales(so, &mut scales_col[..g * k]);
    Ok(())
}

/// An input element type of the SwiGLU ops: torch's arithmetic keeps each intermediate tensor
/// in the input dtype, so every result is rounded to it (bf16: round to nearest even; f32:
/// already exact).
pub trait GluElem: Hp {
    /// Round an f32 to the nearest value of this type (ties to even), as f32.
    fn round(x: f32) -> f32;
    /// The element holding `x` (exactly representable: a `round` result).
    fn from_rounded(x: f32) -> Self;
}
impl GluElem for f32 {
    #[inline]
    fn round(x: f32) -> f32 {
        x
    }
    #[inline]
    fn from_rounded(x: f32) -> f32 {
        x
    }
}
impl GluElem for bf16 {
    #[inline]
    fn round(x: f32) -> f32 {
        bf16::from_f32(x).to_f32()
    }
    #[inline]
    fn from_rounded(x: f32) -> bf16 {
        bf16::from_f32(x)
    }
}

/// Coefficients 1/j! (j = 0..=12) of the Taylor polynomial of [`exp_f32`] (the same
/// decimal literals are in hip/moe/swiglu.h).
const EXP_POLY: [f64; 13] = [
    1.0,
    1.0,
    0.5,
    0.16666666666666666,
    0.041666666666666664,
    0.008333333333333333,
    0.001388888888888889,
    0.0001984126984126984,
    2.48015873015873e-5,
    2.7557319223985893e-6,
    2.755731922398589e-7,
    2.505210838544172e-8,
    2.08767569878681e-9,
];
const LOG2E: f64 = std::f64::consts::LOG2_E;
const LN2_HI: f64 = std::f64::consts::LN_2;
/// ln 2 - LN2_HI, the second word of the two-constant range reduction.
const LN2_LO: f64 = 2.3190468138462996e-17;

/// The exp every backend uses: `f32(p(r) * 2^k)` with `k = rint(x log2 e)`, `r = x - k ln 2`
/// (two fused multiply-adds), `p` the degree-12 Taylor polynomial of e^r in Horner form
/// (fused multiply-adds), all in f64, rounded once to f32. Relative error before the final
/// rounding is below 1e-14, so the result is the correctly rounded e^x except where e^x lies
/// within 1e-14 (relative) of a midpoint between two f32 values. `x > 89` -> +Inf,
/// `x < -104` -> 0 (both what the formula rounds to), NaN -> NaN.
pub fn exp_f32(x: f32) -> f32 {
    if x.is_nan() {
        return f32::NAN;
    }
    if x > 89.0 {
        return f32::INFINITY;
    }
    if x < -104.0 {
        return 0.0;
    }
    let xd = x as f64;
    let kf = (xd * LOG2E).round_ties_even();
    let r = (-kf).mul_add(LN2_HI, xd);
    let r = (-kf).mul_add(LN2_LO, r);
    let mut p = EXP_POLY[12];
    for &c in EXP_POLY[..12].iter().rev() {
        p = p.mul_add(r, c);
    }
    // k in [-151, 129]: 2^k is a normal f64, so the product is exact.
    let two_k = f64::from_bits(((kf as i64 + 1023) as u64) << 52);
    (p * two_k) as f32
}

/// `x + y` rounded to f32 (IEEE; written through f64, which rounds exactly once here).
#[inline]
fn add32(x: f32, y: f32) -> f32 {
    (x as f64 + y as f64) as f32
}
/// `x * y` rounded to f32 (the f64 product of two f32 is exact).
#[inline]
fn mul32(x: f32, y: f32) -> f32 {
    (x as f64 * y as f64) as f32
}
/// `x / y` rounded to f32 (f64 has more than 2*24+2 bits, so rounding the f64 quotient to f32
/// gives the correctly rounded f32 quotient).
#[inline]
fn div32(x: f32, y: f32) -> f32 {
    (x as f64 / y as f64) as f32
}

/// `1 + exp(-g)` in f32: torch's silu denominator.
#[inline]
fn silu_den(g: f32) -> f32 {
    add32(1.0, exp_f32(-g))
}

/// silu(g) = g / (1 + exp(-g)) in f32 (torch's `silu` kernel, opmath f32, with [`exp_f32`]).
pub fn silu_f32(g: f32) -> f32 {
    div32(g, silu_den(g))
}

/// The forward SwiGLU of one element in `T`'s arithmetic, as torch's `F.silu(g) * u` computes
/// it in the input dtype: `s = T(silu_f32(g))`, `h = T(s * u)` (bf16: two roundings to bf16,
/// one per torch op; f32: f32 throughout).
pub fn swiglu_h<T: GluElem>(g: T, u: T) -> f32 {
    let s = T::round(silu_f32(g.to_f32()));
    T::round(mul32(s, u.to_f32()))
}

/// The backward of [`swiglu_h`] for one element as torch's autograd computes it in `T`:
/// `d_up = T(dh * s)` (mul backward, `s` as in the forward), `gs = T(dh * u)` (the gradient
/// of silu's output) and torch's silu backward in f32, `sig = 1 / (1 + exp(-g))`,
/// `d_gate = T((gs * sig) * fma(g, 1 - sig, 1))`, each f32 operation rounded, left to right,
/// the last factor one fused multiply-add (as nvcc, which contracts by default, compiles
/// torch's `1 + x * (1 - s)`; an explicit FMA also leaves GPU compilers nothing to contract
/// on their own). Returns `(d_gate, d_up)`.
pub fn swiglu_bwd<T: GluElem>(dh: T, g: T, u: T) -> (f32, f32) {
    let (dh, g, u) = (dh.to_f32(), g.to_f32(), u.to_f32());
    let den = silu_den(g);
    let s = T::round(div32(g, den));
    let d_up = T::round(mul32(dh, s));
    let gs = T::round(mul32(dh, u));
    let sig = div32(1.0, den);
    let t = g.mul_add(add32(1.0, -sig), 1.0);
    let d_gate = T::round(mul32(mul32(gs, sig), t));
    (d_gate, d_up)
}

/// See [`crate::Context::moe_swiglu_quant`]. `gu` (M, 2I) row-major (`gu.k` = 2I): gate =
/// columns `[0, I)`, up = `[I, 2I)`. `h = swiglu_h(gate, up)` (M, I) is cast like
/// [`act_dual`]: `out.rows` (M, I) with a scale per row, `out.cols` (I*M column-major) with
/// `scales[g*I + i]`. Needs `I > 0`.
pub fn swiglu_quant<T: GluElem>(
    rule: Rule,
    so: ScaleOutput,
    gu: Grouped<'_, T>,
    out: Dual<'_>,
) -> Result<()> {
    let (m, i) = (gu.m, gu.k / 2);
    let mut h = try_scratch::<f32>("swiglu h", m * i)?;
    h.par_chunks_mut(i)
        .zip(gu.x[..m * 2 * i].par_chunks(2 * i))
        .for_each(|(hr, r)| {
            let (gate, up) = r.split_at(i);
            for ((h, &g), &u) in hr.iter_mut().zip(gate).zip(up) {
                *h = swiglu_h(g, u);
            }
        });
    let offs = gu.offs;
    act_dual(
        rule,
        so,
        Grouped {
            m,
            k: i,
            x: &h,
            offs,
        },
        out,
    )
}

/// See [`crate::Context::moe_swiglu_bwd_quant`]. `gu` (M, 2I) the forward's input (`gu.k` =
/// 2I), `grad_h` (M, I). `d = [d_gate | d_up]` (M, 2I) from [`swiglu_bwd`] is cast like
/// [`act_dual`]: `out.rows` (M, 2I) with a scale per row, `out.cols` (2I*M column-major)
/// with `scales[g*2I + j]`.
pub fn swiglu_bwd_quant<T: GluElem>(
    rule: Rule,
    so: ScaleOutput,
    gu: Grouped<'_, T>,
    grad_h: &[T],
    out: Dual<'_>,
) -> Result<()> {
    let (m, i) = (gu.m, gu.k / 2);
    let mut d = try_scratch::<f32>("swiglu backward d", m * 2 * i)?;
    d.par_chunks_mut(2 * i)
        .zip(gu.x[..m * 2 * i].par_chunks(2 * i))
        .zip(grad_h[..m * i].par_chunks(i))
        .for_each(|((dr, r), dh)| {
            let (gate, up) = r.split_at(i);
            let (dg, du) = dr.split_at_mut(i);
            for j in 0..i {
                (dg[j], du[j]) = swiglu_bwd(dh[j], gate[j], up[j]);
            }
        });
    let (k, offs) = (gu.k, gu.offs);
    act_dual(rule, so, Grouped { m, k, x: &d, offs }, out)
}
