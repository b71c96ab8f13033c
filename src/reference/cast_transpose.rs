//! CPU backend: cast-transpose (both layouts of an (M,K) matrix from one call).

use rayon::prelude::*;

use super::quant::{COL_BLOCK, ColScratch, colwise_over_ranges, tensorwise, tensorwise_scaled};
use super::{Dual, Hp, Rule};
use crate::error::Result;
use crate::format::Fp8Format;
use crate::params::Scaling;

/// See [`crate::Context::cast_transpose`]. `k > 0`. Tensorwise: `out.rows.scales[0] ==
/// out.cols.scales[0]` is the tensor scale and `out.cols.codes` is the exact transpose of
/// `out.rows.codes`. Rowwise: `out.rows` is the rowwise cast (M scales), `out.cols.codes[k*M +
/// m]` the colwise cast (K scales), i.e. the rowwise cast of x^T.
pub fn cast_transpose<T: Hp>(
    rule: Rule,
    scaling: Scaling,
    (m, k): (usize, usize),
    x: &[T],
    out: Dual<'_>,
) -> Result<()> {
    let x = &x[..m * k];
    let Dual { rows, cols } = out;
    match scaling {
        Scaling::Tensorwise => {
            let codes = &mut rows.codes[..m * k];
            (rows.scales[0], _) = tensorwise(rule, x, codes);
            cols.scales[0] = rows.scales[0];
            transpose_codes(m, k, codes, cols.codes);
        }
        Scaling::Rowwise => {
            let scratch = ColScratch::new(&[(0, m)], k)?;
            rayon::join(
                || super::rowwise_2d(rule, (m, k), x, rows),
                || colwise_over_ranges(rule, (m, k), x, scratch, cols),
            );
        }
    }
    Ok(())
}

/// See [`crate::Context::cast_transpose_scaled`]: both layouts of `encode(x * scale)` with
/// the caller's scale; returns amax(x). `k > 0`.
pub fn cast_transpose_scaled<T: Hp>(
    fmt: Fp8Format,
    scale: f32,
    m: usize,
    k: usize,
    x: &[T],
    out: &mut [u8],
    out_t: &mut [u8],
) -> f32 {
    let amax = tensorwise_scaled(fmt, scale, &x[..m * k], &mut out[..m * k]);
    transpose_codes(m, k, &out[..m * k], out_t);
    amax
}

/// One scale for every element, so the transposed codes are the codes transposed:
/// `out_t[j*m + r] = out[r*k + j]`.
fn transpose_codes(m: usize, k: usize, out: &[u8], out_t: &mut [u8]) {
    if m == 0 || k == 0 {
        return;
    }
    out_t[..m * k]
        .par_chunks_mut(super::chunk_len(COL_BLOCK, k, m))
        .enumerate()
        .for_each(|(b, ob)| {
            let c0 = b * COL_BLOCK;
            let cn = ob.len() / m;
            for (r, row) in out.chunks(k).enumerate() {
                for (j, &c) in row[c0..c0 + cn].iter().enumerate() {
                    ob[j * m + r] = c;
                }
            }
        });
}
