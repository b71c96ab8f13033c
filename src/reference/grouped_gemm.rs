//! CPU backend: FP8 grouped GEMMs (the MoE forward/dgrad 2D x 3D and the wgrad 2D x 2D).
//!
//! `out = bf16_rne(sum_k decode(a) * decode(b) * scale_a * scale_b)`: FP8 codes are decoded
//! through a 256-entry table, products accumulated in f32 (8 interleaved partial sums, so
//! the order differs from a sequential sum; the contract leaves the order unspecified), and
//! the sum is multiplied by `scale_a` then `scale_b` (dequant scales) before the bf16 round.

use half::bf16;
use rayon::prelude::*;

use super::quant::group_ranges;
use crate::error::Result;
use crate::format::Fp8Format;

/// The host slices of a grouped GEMM's buffers, as the references take them: a, b, offs,
/// scale_a, scale_b, out.
pub type Operands<'a> = (
    &'a [u8],
    &'a [u8],
    &'a [i32],
    &'a [f32],
    &'a [f32],
    &'a mut [bf16],
);

/// Rows of A per task: each decoded B column is reused this many times.
const ROW_TILE: usize = 16;

/// Every code's value, so the inner loops do a load instead of a decode.
pub fn decode_table(fmt: Fp8Format) -> [f32; 256] {
    std::array::from_fn(|c| fmt.decode(c as u8))
}

/// Decode `codes` into `dst` through `table`.
#[inline]
fn decode_into(table: &[f32; 256], codes: &[u8], dst: &mut [f32]) {
    for (d, &c) in dst.iter_mut().zip(codes) {
        *d = table[c as usize];
    }
}

/// f32 dot product with 8 independent accumulators (vectorizable; fixed order).
#[inline]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    for (i, (x, y)) in ca.remainder().iter().zip(cb.remainder()).enumerate() {
        acc[i] += x * y;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// See [`crate::Context::grouped_gemm_2d3d`]. `offs` validated (`<= m`), `offs.len() == e`,
/// `k > 0`. a (m,k) row-major; b (e,k,n) column-major `[g*n*k + j*k + kk]`; scale_a[m];
/// scale_b[e*n]; out (m,n) row-major, rows past `offs[e-1]` untouched.
pub fn grouped_gemm_2d3d(
    (fa, fb): (Fp8Format, Fp8Format),
    k: usize,
    n: usize,
    (a, b, offs, scale_a, scale_b, out): Operands,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let (ta, tb) = (decode_table(fa), decode_table(fb));
    // Scratch for the decoded B of one expert and the decoded A rows of the longest group,
    // allocated before anything is written (sizes fit: n*k <= e*n*k and rows*k <= m*k, both
    // checked by the op when any group is non-empty).
    let most = group_ranges(offs)
        .map(|(r0, r1)| r1 - r0)
        .max()
        .unwrap_or(0);
    if most == 0 {
        return Ok(());
    }
    let mut bf = super::try_scratch::<f32>("grouped_gemm_2d3d decoded b", n * k)?;
    let mut af_all = super::try_scratch::<f32>("grouped_gemm_2d3d decoded a", most * k)?;
    let mut rest: &mut [bf16] = out;
    for (g, (r0, r1)) in group_ranges(offs).enumerate() {
        let (o, orest) = std::mem::take(&mut rest).split_at_mut((r1 - r0) * n);
        rest = orest;
        if r1 == r0 {
            continue;
        }
        // Decode this expert's B once (n columns of k), shared by all row tiles.
        let bg = &b[g * n * k..(g + 1) * n * k];
        bf.par_chunks_mut(k)
            .zip(bg.par_chunks(k))
            .for_each(|(d, c)| decode_into(&tb, c, d));
        let af = &mut af_all[..(r1 - r0) * k];
        af.par_chunks_mut(k)
            .zip(a[r0 * k..r1 * k].par_chunks(k))
            .for_each(|(d, c)| decode_into(&ta, c, d));
        let (af, bf) = (&*af, &bf);
        let sb = &scale_b[g * n..(g + 1) * n];
        o.par_chunks_mut(super::chunk_len(ROW_TILE, r1 - r0, n))
            .enumerate()
            .for_each(|(t, ot)| {
                let i0 = t * ROW_TILE;
                let rows = ot.len() / n;
                let af = &af[i0 * k..(i0 + rows) * k];
                for (j, bcol) in bf.chunks(k).enumerate() {
                    for (r, arow) in af.chunks(k).enumerate() {
                        let acc = dot_f32(arow, bcol);
                        ot[r * n + j] = bf16::from_f32(acc * scale_a[r0 + i0 + r] * sb[j]);
                    }
                }
            });
    }
    Ok(())
}

/// See [`crate::Context::grouped_gemm_2d2d`]. `offs` validated (`<= mt`). a (n,mt)
/// row-major; b (mt,k) column-major `[kk*mt + i]`; scale_a (G,n); scale_b (G,k);
/// out (G,n,k) row-major; an empty group's block is zeros.
pub fn grouped_gemm_2d2d(
    (fa, fb): (Fp8Format, Fp8Format),
    (n, mt, k): (usize, usize, usize),
    (a, b, offs, scale_a, scale_b, out): Operands,
) -> Result<()> {
    let g = offs.len();
    // G = 0 writes nothing, whatever n and k are (their product is only checked by the op
    // when G > 0).
    if g == 0 || n == 0 || k == 0 {
        return Ok(());
    }
    let nk = n * k;
    let (ta, tb) = (decode_table(fa), decode_table(fb));
    // The decoded slices of the longest group, allocated before anything is written
    // (n*len <= n*mt and k*len <= k*mt, the sizes of a and b).
    let most = group_ranges(offs)
        .map(|(m0, m1)| m1 - m0)
        .max()
        .unwrap_or(0);
    let mut af_all = super::try_scratch::<f32>("grouped_gemm_2d2d decoded a", n * most)?;
    let mut bf_all = super::try_scratch::<f32>("grouped_gemm_2d2d decoded b", k * most)?;
    for (gi, (o, (m0, m1))) in out[..g * nk]
        .chunks_mut(nk)
        .zip(group_ranges(offs))
        .enumerate()
    {
        let len = m1 - m0;
        if len == 0 {
            o.fill(bf16::ZERO);
            continue;
        }
        // The group's slices of A's rows and B's columns, decoded once.
        let af = &mut af_all[..n * len];
        af.par_chunks_mut(len)
            .enumerate()
            .for_each(|(i, d)| decode_into(&ta, &a[i * mt + m0..i * mt + m1], d));
        let bf = &mut bf_all[..k * len];
        bf.par_chunks_mut(len)
            .enumerate()
            .for_each(|(j, d)| decode_into(&tb, &b[j * mt + m0..j * mt + m1], d));
        let (af, bf) = (&*af, &*bf);
        let (sa, sb) = (
            &scale_a[gi * n..(gi + 1) * n],
            &scale_b[gi * k..(gi + 1) * k],
        );
        o.par_chunks_mut(super::chunk_len(ROW_TILE, n, k))
            .enumerate()
            .for_each(|(t, ot)| {
                let i0 = t * ROW_TILE;
                let rows = ot.len() / k;
                for (j, bcol) in bf.chunks(len).enumerate() {
                    for r in 0..rows {
                        let acc = dot_f32(&af[(i0 + r) * len..(i0 + r + 1) * len], bcol);
                        ot[r * k + j] = bf16::from_f32(acc * sa[i0 + r] * sb[j]);
                    }
                }
            });
    }
    Ok(())
}
