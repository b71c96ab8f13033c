//! CPU backend: the MoE routing ops (issue 14): the token dispatch fused with the padding of
//! each expert's group and both casts of the grouped GEMMs, and the score-weighted combine
//! (un-permute) with its backward. Definitions (docs/OPS.md, "MoE routing"):
//!
//! - routed slots: token `t` sends its `topk` choices to slots `s = t*topk + j`; `perm[i]` is
//!   the slot at position `i` of the expert-sorted order (a permutation of `0..t*topk`), and
//!   `offs[g]` the END offset of expert g's positions in it;
//! - padded layout: expert g's group starts at `pad[g-1]` (0 for g = 0) and has
//!   `round_up(len_g, align)` rows: its `len_g` tokens in `perm` order, then zero rows;
//!   `pad[g]` = [`padded_offsets`]; `m_cap = t*topk + groups*(align - 1)` rows hold any routing;
//!   the rows past `pad[G-1]` are zero rows too;
//! - [`dispatch_dual`] = gather + pad, then [`super::moe::act_dual`] of the padded matrix on the
//!   padded offsets (every row rowwise, every padded group colwise; zero rows leave the column
//!   amax unchanged, the tail rows are zero bytes in both layouts); `slot_row[s]` = the padded
//!   row of slot s, -1 for a slot at a position past `offs[G-1]` (not routed). With per-slot weights each gathered row is `T(w[s] * x[t])` (one f32
//!   multiply, rounded to the input dtype T): the combine's backward into the experts' output
//!   gradient;
//! - [`combine`]: `out[t] = bf16(0 + sum_j w[t*topk+j] * y[slot_row[t*topk+j]])`, f32
//!   products added in j order, one rounding at the end; slots with row -1 add nothing;
//! - [`combine_bwd_scores`]: `dw[s] = dot(dout[t], y[slot_row[s]])` in f32 in the device's
//!   reduction order ([`dot_lanes`]); 0 for a slot with row -1.

use half::bf16;
use rayon::prelude::*;

use super::moe::{GluElem, act_dual};
pub use super::quant::padded_offsets;
use super::{Dual, Grouped, Hp, Rule, try_scratch};
use crate::error::{Error, Result};
use crate::params::ScaleOutput;

/// Lanes of the score-gradient dot product (the device kernel's block): lane l adds the
/// products of columns l, l + LANES, ... in order, then the lanes are added pairwise
/// (l += l + h for h = LANES/2, ..., 1).
pub const DOT_LANES: usize = 256;

/// The most rows a padded layout of `m` routed slots in `groups` groups needs:
/// `m + groups*(align-1)` (None on overflow or align 0).
pub fn padded_rows(m: usize, groups: usize, align: usize) -> Option<usize> {
    groups
        .checked_mul(align.checked_sub(1)?)
        .and_then(|x| x.checked_add(m))
}

/// Check that `perm` is a permutation of `0..perm.len()` (InvalidOffsets otherwise).
fn check_perm(perm: &[i32]) -> Result<()> {
    let mut seen = try_scratch::<bool>("route permutation check", perm.len())?;
    for (i, &s) in perm.iter().enumerate() {
        let ok = usize::try_from(s).is_ok_and(|u| u < perm.len() && !seen[u]);
        if !ok {
            return Err(Error::InvalidOffsets(format!(
                "perm[{i}] = {s}: perm must be a permutation of 0..{} (t*topk)",
                perm.len()
            )));
        }
        seen[s as usize] = true;
    }
    Ok(())
}

/// Check that every slot row is a row of the padded layout (InvalidOffsets otherwise).
fn check_rows(slot_row: &[i32], m_cap: usize) -> Result<()> {
    match slot_row
        .iter()
        .position(|&r| r != -1 && usize::try_from(r).map_or(true, |u| u >= m_cap))
    {
        Some(i) => Err(Error::InvalidOffsets(format!(
            "slot_row[{i}] = {} is neither -1 nor a row of the padded layout (m_cap = {m_cap})",
            slot_row[i]
        ))),
        None => Ok(()),
    }
}

/// The routing of a dispatch: `perm` (t*topk slots in expert order), END `offs` over it
/// (validated), `topk`, the group alignment, the rows of the padded layout
/// (`m_cap >= padded_rows(t*topk, G, align)`, checked by the op).
#[derive(Clone, Copy)]
pub struct Route<'a> {
    pub perm: &'a [i32],
    pub offs: &'a [i32],
    pub topk: usize,
    pub align: usize,
    pub m_cap: usize,
}

/// See [`crate::Context::moe_dispatch_dual`]: x (t, k) row-major, optional per-slot weights
/// (t*topk). Writes `offs_pad[G]`, `slot_row[t*topk]` and the casts of the padded matrix
/// (`route.m_cap` rows): `out`/`scales` rowwise, `out_col[c*m_cap + r]`/`scales_col[g*k + c]` per
/// padded group; the tail rows are zero bytes in both layouts with the all-zero row scale.
/// Both scales as `so` says. `perm` that is not a permutation is `InvalidOffsets` (nothing
/// written).
pub fn dispatch_dual<T: GluElem + Default>(
    rule: Rule,
    so: ScaleOutput,
    k: usize,
    x: &[T],
    weights: Option<&[f32]>,
    route: Route<'_>,
    offs_pad: &mut [i32],
    slot_row: &mut [i32],
    out: Dual<'_>,
) -> Result<()> {
    let Route {
        perm,
        offs,
        topk,
        align,
        m_cap,
    } = route;
    check_perm(perm)?;
    let (m, g) = (perm.len(), offs.len());
    let mut pad = try_scratch::<i32>("dispatch padded offsets", g)?;
    padded_offsets(offs, align, &mut pad);
    // The padded, gathered matrix (zero rows where nothing is routed).
    let mut xp = try_scratch::<T>("dispatch gathered rows", m_cap * k)?;
    let mut rows = try_scratch::<i32>("dispatch slot rows", m)?;
    rows.fill(-1);
    let mut lo = 0usize;
    for (gi, &end) in offs.iter().enumerate() {
        let start = if gi == 0 { 0 } else { pad[gi - 1] as usize };
        for (i, &s) in perm[lo..end as usize].iter().enumerate() {
            let (s, p) = (s as usize, start + i);
            rows[s] = p as i32;
            let src = &x[(s / topk) * k..(s / topk + 1) * k];
            let dst = &mut xp[p * k..(p + 1) * k];
            match weights {
                None => dst.copy_from_slice(src),
                Some(w) => {
                    for (d, &v) in dst.iter_mut().zip(src) {
                        *d = T::from_rounded(T::round(w[s] * v.to_f32()));
                    }
                }
            }
        }
        lo = end as usize;
    }
    let Dual { rows: r_out, cols } = out;
    let tail = pad.last().map_or(0, |&p| p as usize);
    // act_dual leaves the column-major rows past the last group alone: zero them.
    // (m_cap = 0: no columns to clear; chunks_mut refuses a zero size.)
    for col in cols.codes[..k * m_cap].chunks_mut(m_cap.max(1)) {
        col[tail..].fill(0);
    }
    let xg = Grouped {
        m: m_cap,
        k,
        x: &xp,
        offs: &pad,
    };
    act_dual(rule, so, xg, Dual { rows: r_out, cols })?;
    offs_pad[..g].copy_from_slice(&pad);
    slot_row[..m].copy_from_slice(&rows);
    Ok(())
}

/// See [`crate::Context::moe_combine`]: y (m_cap, k), `slot_row` and `w` (t*topk) to
/// `out` (t, k) bf16. A slot row outside the padded layout is `InvalidOffsets`.
pub fn combine<T: Hp>(
    (t, k, topk, m_cap): (usize, usize, usize, usize),
    y: &[T],
    slot_row: &[i32],
    w: &[f32],
    out: &mut [bf16],
) -> Result<()> {
    check_rows(&slot_row[..t * topk], m_cap)?;
    out[..t * k]
        .par_chunks_mut(k.max(1))
        .enumerate()
        .for_each(|(tok, o)| {
            for (c, o) in o.iter_mut().enumerate() {
                let mut acc = 0.0f32;
                for s in tok * topk..(tok + 1) * topk {
                    if slot_row[s] >= 0 {
                        acc += w[s] * y[slot_row[s] as usize * k + c].to_f32();
                    }
                }
                *o = if acc.is_nan() {
                    bf16::from_bits(0x7FC0)
                } else {
                    bf16::from_f32(acc)
                };
            }
        });
    Ok(())
}

/// `x`, or the canonical NaN `0x7FC00000` when `x` is a NaN (the payload and sign of a NaN
/// made by the arithmetic differ between processors).
fn canonical_nan(x: f32) -> f32 {
    if x.is_nan() {
        f32::from_bits(0x7FC0_0000)
    } else {
        x
    }
}

/// The dot product of two rows in the device's order (see [`DOT_LANES`]).
pub fn dot_lanes<T: Hp>(a: &[T], b: &[T]) -> f32 {
    let mut lanes = [0.0f32; DOT_LANES];
    for (c, (&x, &y)) in a.iter().zip(b).enumerate() {
        let l = c % DOT_LANES;
        lanes[l] += x.to_f32() * y.to_f32();
    }
    let mut h = DOT_LANES / 2;
    while h > 0 {
        for l in 0..h {
            lanes[l] += lanes[l + h];
        }
        h /= 2;
    }
    lanes[0]
}

/// See [`crate::Context::moe_combine_bwd_scores`]: `dw[s] = dot(dout[s / topk], y[slot_row[s]])`.
pub fn combine_bwd_scores<T: Hp>(
    (t, k, topk, m_cap): (usize, usize, usize, usize),
    dout: &[T],
    y: &[T],
    slot_row: &[i32],
    dw: &mut [f32],
) -> Result<()> {
    check_rows(&slot_row[..t * topk], m_cap)?;
    dw[..t * topk]
        .par_iter_mut()
        .enumerate()
        .for_each(|(s, d)| {
            let (tok, p) = (s / topk, slot_row[s]);
            *d = match usize::try_from(p) {
                Ok(p) => canonical_nan(dot_lanes(
                    &dout[tok * k..(tok + 1) * k],
                    &y[p * k..(p + 1) * k],
                )),
                Err(_) => 0.0,
            };
        });
    Ok(())
}
