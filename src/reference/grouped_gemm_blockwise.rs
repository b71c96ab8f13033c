//! CPU reference of the blockwise-scaled FP8 grouped GEMMs (the DeepSeek-V3 recipe; docs/OPS.md
//! `grouped_gemm_blockwise_2d3d` and `grouped_gemm_blockwise_2d2d`): the CPU backend of
//! `Context::grouped_gemm_blockwise_2d3d` / `_2d2d`; the portable GPU kernels
//! (hip/grouped_gemm/reference.hip) compute the same operations in the same order, bit for bit.
//!
//! 2D x 3D (forward, dgrad): 1x128-scaled activations x 128x128-scaled expert weights, below.
//! 2D x 2D (wgrad): both operands scaled per 1 x 128 block along the tokens, see
//! [`grouped_gemm_blockwise_2d2d`].
//!
//! Scale conventions (both DEQUANT, the reciprocals of what the casts write):
//! * `scale_a` (M, ceil(K/128)) row-major: `1 / s` for the scales `blockwise_1x128` writes
//!   for the activations a (M, K).
//! * `scale_b` (E, ceil(N/128), ceil(K/128)) row-major: per expert, `1 / s` for the scales
//!   `blockwise_128x128` writes for its weight W (N, K) row-major (b's layout).
//!
//! Per output element, f32 throughout, in this order (what a tensor-core kernel with the
//! scales applied in the main loop computes, up to the order inside a block):
//!   out[i, j] = bf16_rne( sum over kb ascending of
//!                 f32(sum_{k in block kb} a[i,k] b[e,j,k]) * scale_a[i,kb] * scale_b[e,j/128,kb] )
//! Rows past offs[E-1] are untouched; offsets are validated by the caller.

use half::bf16;
use rayon::prelude::*;

use super::grouped_gemm::{Operands, decode_table, dot_f32};
use super::quant::group_ranges;
use crate::format::Fp8Format;

/// The block edge of both scale grids.
pub const BLOCK: usize = 128;

/// See the module docs. `a` (m, k), `b` (e, n, k), `offs` e END offsets along m.
pub fn grouped_gemm_blockwise_2d3d(
    (fa, fb): (Fp8Format, Fp8Format),
    (k, n): (usize, usize),
    (a, b, offs, scale_a, scale_b, out): Operands,
) {
    let (ta, tb) = (decode_table(fa), decode_table(fb));
    let (kb, nb) = (k.div_ceil(BLOCK), n.div_ceil(BLOCK));
    let mut rest: &mut [bf16] = out;
    for (g, (r0, r1)) in group_ranges(offs).enumerate() {
        let (o, orest) = std::mem::take(&mut rest).split_at_mut((r1 - r0) * n);
        rest = orest;
        let bg: Vec<f32> = b[g * n * k..][..n * k]
            .iter()
            .map(|&c| tb[c as usize])
            .collect();
        let sbg = &scale_b[g * nb * kb..][..nb * kb];
        o.par_chunks_mut(n.max(1))
            .enumerate()
            .for_each(|(ri, orow)| {
                let i = r0 + ri;
                let arow: Vec<f32> = a[i * k..][..k].iter().map(|&c| ta[c as usize]).collect();
                let sai = &scale_a[i * kb..][..kb];
                for (j, oj) in orow.iter_mut().enumerate() {
                    let brow = &bg[j * k..][..k];
                    let mut acc = 0f32;
                    for q in 0..kb {
                        let (k0, k1) = (q * BLOCK, ((q + 1) * BLOCK).min(k));
                        let part = dot_f32(&arow[k0..k1], &brow[k0..k1]);
                        acc += part * sai[q] * sbg[(j / BLOCK) * kb + q];
                    }
                    *oj = bf16::from_f32(acc);
                }
            });
    }
}

/// Blockwise-scaled 2D x 2D (wgrad; docs/OPS.md `grouped_gemm_blockwise_2d2d`). `a` (n, mt)
/// row-major, `b` (mt, k) column-major (`b[j*mt + t]`), `offs` END offsets along mt (validated);
/// `scale_a` (ceil(mt/128), n) and `scale_b` (ceil(mt/128), k) row-major (block-major: one row
/// per token block) DEQUANT scales of the 128-token blocks of each row of a and of b's (k, mt)
/// storage, blocks at absolute token positions [128 q, 128 q + 128). For group g over tokens
/// [lo, hi) and every (i, j):
///   out[g, i, j] = bf16_rne( sum over the blocks q meeting [lo, hi), ascending, of
///                    f32(sum_{t in [lo, hi) within block q} a[i,t] b[t,j]) * scale_a[q,i] * scale_b[q,j] )
/// (each block's dot as [`dot_f32`] over the segment, from its first token); an empty group's
/// block is zeros. A block that two groups share gives each its part with the same scales.
pub fn grouped_gemm_blockwise_2d2d(
    (fa, fb): (Fp8Format, Fp8Format),
    (n, mt, k): (usize, usize, usize),
    (a, b, offs, scale_a, scale_b, out): Operands,
) {
    if offs.is_empty() || n == 0 || k == 0 {
        return;
    }
    let (ta, tb) = (decode_table(fa), decode_table(fb));
    let af: Vec<f32> = a[..n * mt].iter().map(|&c| ta[c as usize]).collect();
    let bf: Vec<f32> = b[..k * mt].iter().map(|&c| tb[c as usize]).collect();
    for ((lo, hi), og) in group_ranges(offs).zip(out.chunks_mut(n * k)) {
        og.par_chunks_mut(k).enumerate().for_each(|(i, orow)| {
            let arow = &af[i * mt..][..mt];
            for (j, oj) in orow.iter_mut().enumerate() {
                let brow = &bf[j * mt..][..mt];
                let mut acc = 0f32;
                let mut t0 = lo;
                while t0 < hi {
                    let q = t0 / BLOCK;
                    let t1 = ((q + 1) * BLOCK).min(hi);
                    let part = dot_f32(&arow[t0..t1], &brow[t0..t1]);
                    acc += part * scale_a[q * n + i] * scale_b[q * k + j];
                    t0 = t1;
                }
                *oj = bf16::from_f32(acc);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against an f64 evaluation of the same definition, with the written tolerance
    /// `|out - ref| <= 2^-8 |ref| + 2 (K + 2 ceil(K/128)) 2^-24 S`, S = sum over k of
    /// |a b sa sb| (bf16 rounding, doubled for the scale multiplies; f32 summation of K
    /// products and ceil(K/128) scaled block sums).
    #[test]
    fn matches_f64_on_groups_and_partial_blocks() {
        let (fa, fb) = (Fp8Format::E4M3Fn, Fp8Format::E4M3Fn);
        let (m, k, n): (usize, usize, usize) = (70, 300, 260); // partial blocks along K and N
        let offs = [0i32, 33, 33, 64];
        let e = offs.len();
        let (kb, nb) = (k.div_ceil(BLOCK), n.div_ceil(BLOCK));
        let mut s = 12345u64;
        let mut rnd = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u32
        };
        let code = |r: u32, f: Fp8Format| f.encode(((r % 2001) as f32 - 1000.0) / 100.0);
        let a: Vec<u8> = (0..m * k).map(|_| code(rnd(), fa)).collect();
        let b: Vec<u8> = (0..e * n * k).map(|_| code(rnd(), fb)).collect();
        let sa: Vec<f32> = (0..m * kb)
            .map(|_| 2f32.powi((rnd() % 9) as i32 - 4))
            .collect();
        let sb: Vec<f32> = (0..e * nb * kb)
            .map(|_| 2f32.powi((rnd() % 9) as i32 - 4) * 1.25)
            .collect();
        let sentinel = bf16::from_f32(-768.0);
        let mut out = vec![sentinel; m * n];
        grouped_gemm_blockwise_2d3d((fa, fb), (k, n), (&a, &b, &offs, &sa, &sb, &mut out));
        let mut lo = 0usize;
        for (g, &hi) in offs.iter().enumerate() {
            for i in lo..hi as usize {
                for j in 0..n {
                    let (mut r, mut sabs) = (0f64, 0f64);
                    for kk in 0..k {
                        let q = kk / BLOCK;
                        let sc =
                            sa[i * kb + q] as f64 * sb[g * nb * kb + (j / BLOCK) * kb + q] as f64;
                        let p = fa.decode(a[i * k + kk]) as f64
                            * fb.decode(b[g * n * k + j * k + kk]) as f64
                            * sc;
                        r += p;
                        sabs += p.abs();
                    }
                    let tol =
                        2f64.powi(-8) * r.abs() + 2.0 * (k + 2 * kb) as f64 * 2f64.powi(-24) * sabs;
                    let o = out[i * n + j].to_f64();
                    assert!((o - r).abs() <= tol, "[{i},{j}] {o} vs {r} (tol {tol})");
                }
            }
            lo = hi as usize;
        }
        assert!(
            out[64 * n..].iter().all(|&x| x == sentinel),
            "rows past the end written"
        );
    }

    /// 2D x 2D against an f64 evaluation with the tolerance of the 2D x 3D test (the reduction
    /// is the group's tokens, its blocks at absolute positions): groups that start and end
    /// inside a block and share it, an empty group (zeros), a group longer than two blocks,
    /// tokens past the last offset (unused), n and k not multiples of anything.
    #[test]
    fn matches_f64_2d2d_on_shared_blocks() {
        let (fa, fb) = (Fp8Format::E4M3Fn, Fp8Format::E5M2);
        let (n, mt, k): (usize, usize, usize) = (19, 700, 13);
        let offs = [100i32, 100, 130, 450, 640];
        let mb = mt.div_ceil(BLOCK);
        let mut s = 777u64;
        let mut rnd = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u32
        };
        let code = |r: u32, f: Fp8Format| f.encode(((r % 2001) as f32 - 1000.0) / 100.0);
        let a: Vec<u8> = (0..n * mt).map(|_| code(rnd(), fa)).collect();
        let b: Vec<u8> = (0..k * mt).map(|_| code(rnd(), fb)).collect();
        let sa: Vec<f32> = (0..n * mb)
            .map(|_| 2f32.powi((rnd() % 9) as i32 - 4))
            .collect();
        let sb: Vec<f32> = (0..k * mb)
            .map(|_| 2f32.powi((rnd() % 9) as i32 - 4) * 1.25)
            .collect();
        let g = offs.len();
        let mut out = vec![bf16::from_f32(-768.0); g * n * k];
        grouped_gemm_blockwise_2d2d((fa, fb), (n, mt, k), (&a, &b, &offs, &sa, &sb, &mut out));
        let mut lo = 0usize;
        for (gi, &hi) in offs.iter().enumerate() {
            let hi = hi as usize;
            for i in 0..n {
                for j in 0..k {
                    let (mut r, mut sabs) = (0f64, 0f64);
                    for t in lo..hi {
                        let q = t / BLOCK;
                        let p = fa.decode(a[i * mt + t]) as f64
                            * fb.decode(b[j * mt + t]) as f64
                            * sa[q * n + i] as f64
                            * sb[q * k + j] as f64;
                        r += p;
                        sabs += p.abs();
                    }
                    let len = hi - lo;
                    let tol = 2f64.powi(-8) * r.abs()
                        + 2.0
                            * (len + 2 * (len.div_ceil(BLOCK) + 1)) as f64
                            * 2f64.powi(-24)
                            * sabs;
                    let o = out[gi * n * k + i * k + j];
                    if len == 0 {
                        assert_eq!(o.to_bits(), 0, "empty group {gi} [{i},{j}]");
                    }
                    let o = o.to_f64();
                    assert!(
                        (o - r).abs() <= tol,
                        "g{gi} [{i},{j}] {o} vs {r} (tol {tol})"
                    );
                }
            }
            lo = hi;
        }
    }

    /// Weights quantized once serve forward and dgrad: 128x128 blocks of W (N, K) are the
    /// transposed blocks of W^T (K, N), so the scale grid of W^T is the transposed grid.
    #[test]
    fn blocks_of_128x128_transpose_exactly() {
        let (nr, kc): (usize, usize) = (300, 260);
        let w: Vec<f32> = (0..nr * kc)
            .map(|i| ((i * 7919) % 1013) as f32 / 37.0 - 13.0)
            .collect();
        let wt: Vec<f32> = (0..kc * nr).map(|i| w[(i % nr) * kc + i / nr]).collect();
        let (bn, bk) = (nr.div_ceil(BLOCK), kc.div_ceil(BLOCK));
        let fmt = Fp8Format::E4M3Fn;
        let mut q = vec![0u8; nr * kc];
        let mut s = vec![0f32; bn * bk];
        let rule = crate::reference::Rule::new(fmt, false);
        let out = crate::reference::Scaled::new(&mut q, &mut s);
        crate::reference::quant::blockwise_128x128(rule, (nr, kc), &w, out);
        let mut qt = vec![0u8; kc * nr];
        let mut st = vec![0f32; bk * bn];
        let out = crate::reference::Scaled::new(&mut qt, &mut st);
        crate::reference::quant::blockwise_128x128(rule, (kc, nr), &wt, out);
        for x in 0..bn {
            for y in 0..bk {
                assert_eq!(s[x * bk + y].to_bits(), st[y * bn + x].to_bits());
            }
        }
        for i in 0..nr {
            for j in 0..kc {
                assert_eq!(q[i * kc + j], qt[j * nr + i]);
            }
        }
    }
}
