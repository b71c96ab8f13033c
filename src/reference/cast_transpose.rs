//! CPU backend: cast-transpose (both layouts of an (M,K) matrix from one call).

use rayon::prelude::*;

use super::Hp;
use super::quant::{COL_BLOCK, ColScratch, colwise_over_ranges, tensorwise, tensorwise_scaled};
use crate::error::Result;
use crate::format::Fp8Format;
use crate::params::Scaling;

/// See [`crate::Context::cast_transpose`]. `k > 0`. Tensorwise: `scales[0] == scales_t[0]`
/// is the tensor scale and `out_t` is the exact transpose of `out`. Rowwise: `out` is the
/// rowwise cast (`scales[M]`), `out_t[k*M + m]` the colwise cast (`scales_t[K]`), i.e. the
/// rowwise cast of x^T.
pub fn cast_transpose<T: Hp>(
    fmt: Fp8Format,
    pow2: bool,
    scaling: Scaling,
    m: usize,
    k: usize,
    x: &[T],
    out: &mut [u8],
    out_t: &mut [u8],
    scales: &mut [f32],
    scales_t: &mut [f32],
) -> Result<()> {
    let x = &x[..m * k];
    match scaling {
        Scaling::Tensorwise => {
            let mut amax = 0.0;
            tensorwise(fmt, pow2, x, &mut out[..m * k], &mut scales[0], &mut amax);
            scales_t[0] = scales[0];
            transpose_codes(m, k, &out[..m * k], out_t);
        }
        Scaling::Rowwise => {
            let scratch = ColScratch::new(&[(0, m)], k)?;
            rayon::join(
                || super::rowwise_2d(fmt, pow2, m, k, x, out, scales),
                || colwise_over_ranges(fmt, pow2, m, k, x, scratch, out_t, scales_t),
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
    if m == 0 {
        return;
    }
    if k == 0 {
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
