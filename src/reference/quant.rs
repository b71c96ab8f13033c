//! CPU backend: the scale-and-cast family (everything except cast-transpose, MX and GEMM).
//!
//! Each function assumes its arguments were validated by the matching [`crate::Context`]
//! method (lengths, offsets); it only indexes within the sizes it is given. Numerics go
//! through [`amax_to_scale`] and [`Fp8Format::encode`] only, so every op shares one rule.

use rayon::prelude::*;

use super::{Grouped, Hp, Rule, Scaled, amax_of, chunk_len, try_jobs, try_scratch};
use crate::error::Result;
use crate::format::Fp8Format;
use crate::scaling::amax_combine;

/// Columns handled by one task in the column-reducing ops: wide enough that each row segment
/// read is a few cache lines, narrow enough to give every thread work on modest K.
pub(crate) const COL_BLOCK: usize = 32;

/// Iterate the (start, end) row ranges of END offsets.
pub(crate) fn group_ranges(offs: &[i32]) -> impl Iterator<Item = (usize, usize)> + '_ {
    offs.iter().scan(0usize, |prev, &o| {
        let r = (*prev, o as usize);
        *prev = o as usize;
        Some(r)
    })
}

/// The `cn` columns from `c0` of the rows `r0..r1` of a row-major matrix with `ld` columns:
/// the unit of work of the column-reducing casts.
#[derive(Clone, Copy)]
pub(crate) struct ColBlock {
    pub(crate) ld: usize,
    pub(crate) c0: usize,
    pub(crate) cn: usize,
    pub(crate) r0: usize,
    pub(crate) r1: usize,
}

impl ColBlock {
    /// Columns (c0, cn) of rows (r0, r1) of a matrix with `ld` columns.
    pub(crate) fn new(ld: usize, (c0, cn): (usize, usize), (r0, r1): (usize, usize)) -> Self {
        ColBlock { ld, c0, cn, r0, r1 }
    }

    /// Each row's index with the block's part of it in `x`.
    pub(crate) fn rows<T>(self, x: &[T]) -> impl Iterator<Item = (usize, &[T])> {
        let ColBlock { ld, c0, cn, r0, r1 } = self;
        (r0..r1).map(move |r| (r, &x[r * ld + c0..r * ld + c0 + cn]))
    }

    /// The block's column amax in `x`, into `acc` (reset first).
    pub(crate) fn amax<T: Hp>(self, x: &[T], acc: &mut [f32]) {
        let acc = &mut acc[..self.cn];
        acc.fill(0.0);
        for (_, row) in self.rows(x) {
            for (a, &v) in acc.iter_mut().zip(row) {
                *a = amax_combine(*a, v.to_f32());
            }
        }
    }

    /// The block's transposing cast: `out[(c - c0) * out_ld + r] = encode(x[r, c] * scale[c -
    /// c0])`.
    fn cast_transposed<T: Hp>(
        self,
        fmt: Fp8Format,
        x: &[T],
        scale: &[f32],
        out: &mut [u8],
        out_ld: usize,
    ) {
        for (r, row) in self.rows(x) {
            for (j, (&v, &s)) in row.iter().zip(scale).enumerate() {
                out[j * out_ld + r] = fmt.encode(v.to_f32() * s);
            }
        }
    }
}

/// See [`crate::Context::colwise_3d`]. Column-major (E,K,N) is E*N contiguous columns of K,
/// so this is rowwise over E*N rows.
pub fn colwise_3d<T: Hp>(rule: Rule, (e, k, n): (usize, usize, usize), x: &[T], out: Scaled<'_>) {
    super::rowwise_2d(rule, (e * n, k), x, out)
}

/// See [`crate::Context::rowwise_3d_transpose_rhs`]. Expert e's input is an (N rows, K cols)
/// row-major matrix; its output is the (K, N) row-major transpose, scaled per k over n.
pub fn rowwise_3d_transpose_rhs<T: Hp>(
    rule: Rule,
    (e, k, n): (usize, usize, usize),
    x: &[T],
    out: Scaled<'_>,
) {
    // e == 0 first: n*k is only checked by the op when e > 0.
    if e == 0 || n == 0 || k == 0 {
        return;
    }
    let nk = n * k;
    out.codes[..e * nk]
        .par_chunks_mut(nk)
        .zip(out.scales[..e * k].par_chunks_mut(k))
        .enumerate()
        .for_each(|(ei, (oe, se))| {
            let xe = &x[ei * nk..(ei + 1) * nk];
            oe.par_chunks_mut(chunk_len(COL_BLOCK, k, n))
                .zip(se.par_chunks_mut(COL_BLOCK))
                .enumerate()
                .for_each(|(b, (ob, sb))| {
                    let c0 = b * COL_BLOCK;
                    let cn = sb.len();
                    let block = ColBlock::new(k, (c0, cn), (0, n));
                    let mut acc = [0.0f32; COL_BLOCK];
                    block.amax(xe, &mut acc);
                    for (s, &a) in sb.iter_mut().zip(&acc[..cn]) {
                        *s = rule.scale(a);
                    }
                    block.cast_transposed(rule.fmt, xe, sb, ob, n);
                });
        });
}

/// See [`crate::Context::per_group_colwise`]. `x.offs` must be validated (non-decreasing,
/// `<= m`). Output column-major `[k*m + row]`; scales `[g*k + col]`.
pub fn per_group_colwise<T: Hp>(rule: Rule, x: Grouped<'_, T>, out: Scaled<'_>) -> Result<()> {
    let scratch = ColScratch::new_grouped(x.offs, x.k)?;
    colwise_over_ranges(rule, (x.m, x.k), x.x, scratch, out);
    Ok(())
}

/// The scratch of [`colwise_over_ranges`], allocated (fallibly) before anything is written:
/// the groups' row ranges `(r0, r1, p0)` (input rows `r0..r1` land at output rows from `p0`),
/// a G x K block-major copy of the scales, and whether every output byte outside the ranges is
/// zeroed (the padded layout) or left untouched.
pub(crate) struct ColScratch {
    ranges: Vec<(usize, usize, usize)>,
    sc: Vec<f32>,
    zero_rest: bool,
}

impl ColScratch {
    pub(crate) fn new(ranges: &[(usize, usize)], k: usize) -> Result<ColScratch> {
        let r = ranges.iter().map(|&(r0, r1)| (r0, r1, r0));
        Self::with_ranges(r, ranges.len(), k, false)
    }

    pub(crate) fn new_grouped(offs: &[i32], k: usize) -> Result<ColScratch> {
        let r = group_ranges(offs).map(|(r0, r1)| (r0, r1, r0));
        Self::with_ranges(r, offs.len(), k, false)
    }

    /// The padded layout of [`per_group_colwise_dual`] (`ranges` from [`padded_ranges`]).
    fn new_padded(ranges: &[(usize, usize, usize)], k: usize) -> Result<ColScratch> {
        Self::with_ranges(ranges.iter().copied(), ranges.len(), k, true)
    }

    fn with_ranges(
        ranges: impl Iterator<Item = (usize, usize, usize)>,
        g: usize,
        k: usize,
        zero_rest: bool,
    ) -> Result<ColScratch> {
        let mut r = try_scratch("colwise group ranges", g)?;
        for (d, s) in r.iter_mut().zip(ranges) {
            *d = s;
        }
        // g*k is the scales' length, checked by the op.
        let sc = try_scratch("colwise scales", g * k)?;
        Ok(ColScratch {
            ranges: r,
            sc,
            zero_rest,
        })
    }
}

/// Column-scaled transposing cast over explicit row ranges (the groups) into a column-major
/// output of `out_rows` rows (`out.codes[c*out_rows + p0 + (r - r0)]` for row r of group
/// (r0, r1, p0)), `out.scales[g*k + c]`: the engine of `per_group_colwise`, of its duals and
/// of cast-transpose's transposed output (one range, all rows).
pub(crate) fn colwise_over_ranges<T: Hp>(
    rule: Rule,
    (out_rows, k): (usize, usize),
    x: &[T],
    scratch: ColScratch,
    out: Scaled<'_>,
) {
    let ColScratch {
        ranges,
        mut sc,
        zero_rest,
    } = scratch;
    let Scaled { codes, scales } = out;
    let g = ranges.len();
    if k == 0 || g == 0 {
        return;
    }
    if out_rows == 0 {
        // Every group is empty (validated offsets are all 0; the padded layout has
        // out_rows >= m + 15*G > 0).
        scales[..g * k].fill(rule.scale(0.0));
        return;
    }
    // Each task owns COL_BLOCK output rows (= input columns) and its G x cn block of the
    // scratch scales (block-major: block b at g * b * COL_BLOCK), scattered afterwards
    // because the scale layout is group-major.
    codes[..k * out_rows]
        .par_chunks_mut(chunk_len(COL_BLOCK, k, out_rows))
        .zip(sc.par_chunks_mut(chunk_len(COL_BLOCK, k, g)))
        .enumerate()
        .for_each(|(b, (ob, sc))| {
            let c0 = b * COL_BLOCK;
            let cn = ob.len() / out_rows;
            if zero_rest {
                ob.fill(0);
            }
            let mut acc = [0.0f32; COL_BLOCK];
            for (gi, &(r0, r1, p0)) in ranges.iter().enumerate() {
                let block = ColBlock::new(k, (c0, cn), (r0, r1));
                block.amax(x, &mut acc);
                let s = &mut sc[gi * cn..(gi + 1) * cn];
                for (s, &a) in s.iter_mut().zip(&acc[..cn]) {
                    *s = rule.scale(a);
                }
                // p0 >= r0 (padding only adds rows before a group), so row r lands at
                // (c - c0) * out_rows + p0 + (r - r0) of `ob`.
                block.cast_transposed(rule.fmt, x, s, &mut ob[p0 - r0..], out_rows);
            }
        });
    for (b, sc) in sc.chunks(chunk_len(COL_BLOCK, k, g)).enumerate() {
        let c0 = b * COL_BLOCK;
        let cn = sc.len() / g;
        for gi in 0..g {
            scales[gi * k + c0..gi * k + c0 + cn].copy_from_slice(&sc[gi * cn..(gi + 1) * cn]);
        }
    }
}

/// See [`crate::Context::per_group_colwise_dual`]: two independent single calls over the
/// same (validated) offsets, `x1` (m, k1) and `x2` (m, k2).
///
/// `padded` = `Some((m_cap, padded_offs))`: [`crate::Context::per_group_colwise_dual_padded`],
/// every group moved to a 16-row aligned start of an (m_cap)-row column-major output, every
/// other output byte zero, and `padded_offs` the padded END offsets. Requires `m_cap >=
/// offs[G-1]` padded (the API checks the stronger, data-independent `m_cap >= m + 15*G`).
pub fn per_group_colwise_dual<T: Hp, U: Hp>(
    rule: Rule,
    (m, k1, k2): (usize, usize, usize),
    x1: &[T],
    x2: &[U],
    offs: &[i32],
    out1: Scaled<'_>,
    out2: Scaled<'_>,
    padded: Option<(usize, &mut [i32])>,
) -> Result<()> {
    if offs.is_empty() {
        return Ok(());
    }
    // Every scratch before anything is written (padded_offs is written last).
    let (s1, s2, out_rows, po) = match padded {
        None => {
            let s1 = ColScratch::new_grouped(offs, k1)?;
            (s1, ColScratch::new_grouped(offs, k2)?, m, None)
        }
        Some((m_cap, padded_offs)) => {
            let mut po = try_scratch("padded offsets", offs.len())?;
            let ranges = padded_ranges(offs, &mut po)?;
            let s1 = ColScratch::new_padded(&ranges, k1)?;
            let s2 = ColScratch::new_padded(&ranges, k2)?;
            (s1, s2, m_cap, Some((po, padded_offs)))
        }
    };
    rayon::join(
        || colwise_over_ranges(rule, (out_rows, k1), x1, s1, out1),
        || colwise_over_ranges(rule, (out_rows, k2), x2, s2, out2),
    );
    if let Some((po, padded_offs)) = po {
        padded_offs[..offs.len()].copy_from_slice(&po);
    }
    Ok(())
}

/// See [`crate::Context::per_group_rowwise`]. Offsets run along K (columns); scales
/// `[g*m + row]`; columns past the last offset are not written.
pub fn per_group_rowwise<T: Hp>(rule: Rule, x: Grouped<'_, T>, out: Scaled<'_>) -> Result<()> {
    let Grouped { m, k, x, offs } = x;
    let g = offs.len();
    if g == 0 {
        return Ok(());
    }
    if k == 0 {
        out.scales[..g * m].fill(rule.scale(0.0));
        return Ok(());
    }
    // Row-major scratch of per-row scales, transposed into the group-major output after.
    let mut rs = try_scratch::<f32>("per_group_rowwise scales", m * g)?;
    out.codes[..m * k]
        .par_chunks_mut(k)
        .zip(rs.par_chunks_mut(g))
        .zip(x[..m * k].par_chunks(k))
        .for_each(|((o, s), row)| {
            for ((c0, c1), s) in group_ranges(offs).zip(s.iter_mut()) {
                let sc = rule.scale(amax_of(&row[c0..c1]));
                *s = sc;
                for (o, &v) in o[c0..c1].iter_mut().zip(&row[c0..c1]) {
                    *o = rule.fmt.encode(v.to_f32() * sc);
                }
            }
        });
    for (i, s) in rs.chunks(g).enumerate() {
        for (gi, &v) in s.iter().enumerate() {
            out.scales[gi * m + i] = v;
        }
    }
    Ok(())
}

/// NaN-propagating amax of a whole slice, in parallel (the combine is associative and
/// commutative, so the result does not depend on the split).
pub fn amax_par<T: Hp>(x: &[T]) -> f32 {
    x.par_chunks(1 << 14)
        .map(amax_of)
        .reduce(|| 0.0f32, amax_combine)
}

/// Encode `x * scale` elementwise, in parallel.
pub(crate) fn cast_with_scale<T: Hp>(fmt: Fp8Format, scale: f32, x: &[T], out: &mut [u8]) {
    out.par_chunks_mut(1 << 14)
        .zip(x.par_chunks(1 << 14))
        .for_each(|(o, x)| {
            for (o, &v) in o.iter_mut().zip(x) {
                *o = fmt.encode(v.to_f32() * scale);
            }
        });
}

/// See [`crate::Context::tensorwise`]: one amax over all `n` elements, one scale; returns
/// (scale, amax).
pub fn tensorwise<T: Hp>(rule: Rule, x: &[T], out: &mut [u8]) -> (f32, f32) {
    let a = amax_par(x);
    let s = rule.scale(a);
    cast_with_scale(rule.fmt, s, x, &mut out[..x.len()]);
    (s, a)
}

/// See [`crate::Context::tensorwise_scaled`]: `out[i] = encode(x[i] * scale)` with the
/// caller's scale; returns amax(x).
pub fn tensorwise_scaled<T: Hp>(fmt: Fp8Format, scale: f32, x: &[T], out: &mut [u8]) -> f32 {
    cast_with_scale(fmt, scale, x, &mut out[..x.len()]);
    amax_par(x)
}

/// See [`crate::Context::blockwise_1x128`]: scales (m, ceil(k/128)) row-major; the last block
/// of a row reduces over the columns that exist.
pub fn blockwise_1x128<T: Hp>(rule: Rule, (m, k): (usize, usize), x: &[T], out: Scaled<'_>) {
    super::tiles(rule.fmt, (m, k), (1, 128), x, out, |a| rule.stored(a))
}

/// See [`crate::Context::blockwise_128x128`]: scales (ceil(m/128), ceil(k/128)) row-major;
/// edge tiles reduce over what exists.
pub fn blockwise_128x128<T: Hp>(rule: Rule, (m, k): (usize, usize), x: &[T], out: Scaled<'_>) {
    super::tiles(rule.fmt, (m, k), (128, 128), x, out, |a| rule.stored(a))
}

/// Padded size of a group of `rows` rows.
#[inline]
pub fn pad16(rows: usize) -> usize {
    rows.div_ceil(16) * 16
}

/// `pad[g]` = sum over h <= g of `(offs[h] - offs[h-1])` rounded up to a multiple of `align`
/// (`offs` validated END offsets).
pub fn padded_offsets(offs: &[i32], align: usize, pad: &mut [i32]) {
    let (mut prev, mut at) = (0usize, 0usize);
    for (p, &o) in pad.iter_mut().zip(offs) {
        let len = o as usize - prev;
        prev = o as usize;
        at += len.div_ceil(align) * align;
        *p = at as i32;
    }
}

/// See [`crate::Context::rowwise_2d_padded`]: the groups of `x` (`x.m` unused: the rows are
/// the offsets') moved to 16-row aligned starts. Requires `m_cap >= offs[G-1]` padded (the
/// API checks the stronger, data-independent `m_cap >= m + 15*G`).
pub fn rowwise_2d_padded<T: Hp>(
    rule: Rule,
    x: Grouped<'_, T>,
    out: Scaled<'_>,
    padded_offs: &mut [i32],
) -> Result<()> {
    let Grouped { k, x, offs, .. } = x;
    let zero_scale = rule.scale(0.0);
    padded_offsets(offs, 16, padded_offs);
    let mut dst = 0usize;
    // Per group: a disjoint (source rows, destination rows) pair, split off sequentially and
    // then processed in parallel.
    let mut out_rest: &mut [u8] = out.codes;
    let mut sc_rest: &mut [f32] = out.scales;
    let mut jobs = try_jobs("rowwise_2d_padded", offs.len(), offs.len())?;
    for ((r0, r1), &po) in group_ranges(offs).zip(padded_offs.iter()) {
        let rows = r1 - r0;
        let prows = po as usize - dst;
        dst = po as usize;
        let (o, orest) = std::mem::take(&mut out_rest).split_at_mut(prows * k);
        let (s, srest) = std::mem::take(&mut sc_rest).split_at_mut(prows);
        out_rest = orest;
        sc_rest = srest;
        jobs.push((r0, rows, o, s));
    }
    jobs.into_par_iter().for_each(|(r0, rows, o, s)| {
        let (o_data, o_pad) = o.split_at_mut(rows * k);
        let (s_data, s_pad) = s.split_at_mut(rows);
        let xg = &x[r0 * k..(r0 + rows) * k];
        super::rowwise_2d(rule, (rows, k), xg, Scaled::new(o_data, s_data));
        o_pad.fill(rule.fmt.encode(0.0));
        s_pad.fill(zero_scale);
    });
    Ok(())
}

/// The padded row ranges of the padded [`per_group_colwise_dual`]: per group (start, end,
/// padded start), with `padded_offs` = [`padded_offsets`] at 16 (padded start +
/// pad16(end - start)), allocated fallibly.
fn padded_ranges(offs: &[i32], padded_offs: &mut [i32]) -> Result<Vec<(usize, usize, usize)>> {
    let mut r = try_scratch("padded colwise group ranges", offs.len())?;
    padded_offsets(offs, 16, padded_offs);
    let mut dst = 0usize;
    for ((d, (r0, r1)), &po) in r.iter_mut().zip(group_ranges(offs)).zip(padded_offs.iter()) {
        *d = (r0, r1, dst);
        dst = po as usize;
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    /// A small deterministic generator (splitmix64).
    fn rng(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The padded op equals per_group_colwise_dual over the explicitly zero-padded inputs (every
    /// group at a 16-row aligned start, zero rows up to the next group and up to m_cap) with the
    /// padded offsets: the same bytes, scales equal to the unpadded op's, padded_offs = the
    /// padded END offsets.
    #[test]
    fn padded_dual_is_the_dual_over_zero_padded_inputs() {
        let mut seed = 7u64;
        let cases: Vec<Vec<usize>> = vec![
            vec![5],
            vec![16, 1, 0, 33, 0, 0, 17],
            vec![0, 0, 0],
            vec![1; 20],
            vec![100, 3, 250, 15, 16, 2],
        ];
        for sizes in cases {
            for (fmt, pow2) in [
                (Fp8Format::E4M3Fn, false),
                (Fp8Format::E5M2, true),
                (Fp8Format::E4M3FnUz, true),
            ] {
                let (k1, k2) = (37usize, 8usize);
                let g = sizes.len();
                let m: usize = sizes.iter().sum();
                let m_cap = (m + 15 * g).next_multiple_of(16) + 16;
                let mut offs = Vec::new();
                let mut e = 0;
                for s in &sizes {
                    e += s;
                    offs.push(e as i32);
                }
                let mut val = || ((rng(&mut seed) >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 9.0;
                let x1: Vec<bf16> = (0..m * k1).map(|_| bf16::from_f32(val())).collect();
                let x2: Vec<f32> = (0..m * k2).map(|_| val()).collect();
                // the op
                let (mut o1, mut s1) = (vec![0xA5u8; k1 * m_cap], vec![-1f32; g * k1]);
                let (mut o2, mut s2) = (vec![0xA5u8; k2 * m_cap], vec![-1f32; g * k2]);
                let mut po = vec![-1i32; g];
                let (rule, sh) = (Rule::new(fmt, pow2), (m, k1, k2));
                let o = (Scaled::new(&mut o1, &mut s1), Scaled::new(&mut o2, &mut s2));
                let padded = Some((m_cap, &mut po[..]));
                per_group_colwise_dual(rule, sh, &x1, &x2, &offs, o.0, o.1, padded).unwrap();
                // zero-padded inputs and padded offsets
                let (mut p1, mut p2) = (vec![bf16::ZERO; m_cap * k1], vec![0f32; m_cap * k2]);
                let (mut lo, mut lp) = (0, 0);
                let mut want_po = Vec::new();
                for s in &sizes {
                    p1[lp * k1..(lp + s) * k1].copy_from_slice(&x1[lo * k1..(lo + s) * k1]);
                    p2[lp * k2..(lp + s) * k2].copy_from_slice(&x2[lo * k2..(lo + s) * k2]);
                    lo += s;
                    lp += s.div_ceil(16) * 16;
                    want_po.push(lp as i32);
                }
                assert_eq!(po, want_po, "{sizes:?}");
                let (mut q1, mut t1) = (vec![0x5Au8; k1 * m_cap], vec![0f32; g * k1]);
                let (mut q2, mut t2) = (vec![0x5Au8; k2 * m_cap], vec![0f32; g * k2]);
                // the composition over all m_cap rows: the rows past the last group are a group
                // of their own there (so they are cast too: zeros), then dropped from the scales
                let mut offs_all = want_po.clone();
                offs_all.push(m_cap as i32);
                let (mut t1a, mut t2a) = (vec![0f32; (g + 1) * k1], vec![0f32; (g + 1) * k2]);
                let q = (
                    Scaled::new(&mut q1, &mut t1a),
                    Scaled::new(&mut q2, &mut t2a),
                );
                let sh_cap = (m_cap, k1, k2);
                per_group_colwise_dual(rule, sh_cap, &p1, &p2, &offs_all, q.0, q.1, None).unwrap();
                t1.copy_from_slice(&t1a[..g * k1]);
                t2.copy_from_slice(&t2a[..g * k2]);
                assert!(o1 == q1 && o2 == q2, "{sizes:?} {fmt}: data differ");
                // scales: bits equal to the padded composition's and to the unpadded op's
                let (mut u1, mut u2) = (vec![0f32; g * k1], vec![0f32; g * k2]);
                let (mut v1, mut v2) = (vec![0u8; m * k1], vec![0u8; m * k2]);
                let v = (Scaled::new(&mut v1, &mut u1), Scaled::new(&mut v2, &mut u2));
                per_group_colwise_dual(rule, sh, &x1, &x2, &offs, v.0, v.1, None).unwrap();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&s1), bits(&t1), "{sizes:?} {fmt}");
                assert_eq!(bits(&s2), bits(&t2), "{sizes:?} {fmt}");
                assert_eq!(bits(&s1), bits(&u1), "{sizes:?} {fmt}");
                assert_eq!(bits(&s2), bits(&u2), "{sizes:?} {fmt}");
            }
        }
    }

    /// Padding rows are zero bytes even in a group whose amax is NaN (where the composition
    /// over zero-padded inputs would encode 0 * NaN).
    #[test]
    fn padding_rows_are_zero_in_a_nan_group() {
        let (k1, k2, m_cap) = (2usize, 1usize, 32usize);
        let x1 = [1.0f32, f32::NAN, 2.0, 3.0];
        let x2 = [4.0f32, 5.0];
        let (mut o1, mut s1) = (vec![0xA5u8; k1 * m_cap], vec![0f32; k1]);
        let (mut o2, mut s2) = (vec![0xA5u8; k2 * m_cap], vec![0f32; k2]);
        let mut po = [0i32];
        let f = Fp8Format::E4M3Fn;
        per_group_colwise_dual(
            Rule::new(f, false),
            (2, k1, k2),
            &x1,
            &x2,
            &[2],
            Scaled::new(&mut o1, &mut s1),
            Scaled::new(&mut o2, &mut s2),
            Some((m_cap, &mut po)),
        )
        .unwrap();
        assert_eq!(po, [16]);
        assert!(s1[1].is_nan());
        // column 1 (the NaN column): rows 0, 1 NaN codes, the rest zero
        assert_eq!(o1[m_cap], f.encode(f32::NAN));
        assert!(o1[m_cap + 2..].iter().all(|&b| b == 0));
        assert!(o1[2..m_cap].iter().all(|&b| b == 0));
        assert!(o2[2..].iter().all(|&b| b == 0));
    }
}
