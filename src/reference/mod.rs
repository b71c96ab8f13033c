//! The CPU backend: straightforward, multithreaded (rayon) implementations of every op.
//! It is the oracle for every GPU test, so it favours obviousness over speed; all numerics go
//! through `crate::scaling` and `crate::format`, the single written-down rule.

pub mod cast_transpose;
pub mod grouped_gemm;
pub mod grouped_gemm_blockwise;
pub mod moe;
pub mod mx;
pub mod quant;
pub mod recipe;

use half::bf16;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::format::Fp8Format;
use crate::scaling::{amax_combine, amax_to_scale};

/// `n` default (zero) elements of scratch, or OUT_OF_MEMORY: the CPU backend's scratch is
/// allocated fallibly and before anything is written, so a failed allocation (RLIMIT_AS,
/// strict overcommit) is a status instead of an abort, and the caller's outputs are intact.
pub(crate) fn try_scratch<T: Clone + Default>(what: &str, n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        Error::OutOfMemory(format!(
            "{what}: {n} elements ({} bytes) of CPU scratch",
            n.saturating_mul(std::mem::size_of::<T>())
        ))
    })?;
    v.resize(n, T::default());
    Ok(v)
}

/// Elements per parallel chunk of `block` rows (columns) of `stride` elements when there are
/// `count` of them: `block.min(count) * stride`, which never exceeds `count * stride` (checked
/// by the op), so it cannot overflow for a huge `stride` and a small `count`.
#[inline]
pub(crate) fn chunk_len(block: usize, count: usize, stride: usize) -> usize {
    block.min(count.max(1)) * stride
}

/// A high-precision element type the reference accepts.
pub trait Hp: Copy + Send + Sync + 'static {
    fn to_f32(self) -> f32;
}
impl Hp for f32 {
    #[inline]
    fn to_f32(self) -> f32 {
        self
    }
}
impl Hp for bf16 {
    #[inline]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
}

/// amax of a row (NaN-propagating).
#[inline]
pub fn amax_of<T: Hp>(xs: &[T]) -> f32 {
    xs.iter().fold(0.0f32, |a, &x| amax_combine(a, x.to_f32()))
}

/// Blocks of `b` consecutive elements along each row of the (m, k) row-major `x`:
/// `scale_of(amax of the block)` is the block's stored scale and its multiplier, `out =
/// encode(x * multiplier)`; `scales` (m, ceil(k/b)) row-major. The last block of a row
/// reduces over the columns that exist.
pub(crate) fn row_blocks<T: Hp, S: Send>(
    fmt: Fp8Format,
    m: usize,
    k: usize,
    b: usize,
    x: &[T],
    out: &mut [u8],
    scales: &mut [S],
    scale_of: impl Fn(f32) -> (S, f32) + Sync,
) {
    let nb = k.div_ceil(b);
    if m == 0 || k == 0 {
        return;
    }
    out[..m * k]
        .par_chunks_mut(k)
        .zip(scales[..m * nb].par_chunks_mut(nb))
        .zip(x[..m * k].par_chunks(k))
        .for_each(|((o, s), row)| {
            for ((ob, s), xb) in o.chunks_mut(b).zip(s.iter_mut()).zip(row.chunks(b)) {
                let (code, mult) = scale_of(amax_of(xb));
                *s = code;
                for (o, &v) in ob.iter_mut().zip(xb) {
                    *o = fmt.encode(v.to_f32() * mult);
                }
            }
        });
}

/// See [`crate::Context::rowwise_2d`].
pub fn rowwise_2d<T: Hp>(
    fmt: Fp8Format,
    pow2: bool,
    m: usize,
    k: usize,
    x: &[T],
    out: &mut [u8],
    scales: &mut [f32],
) {
    out[..m * k]
        .par_chunks_mut(k)
        .zip(scales[..m].par_iter_mut())
        .zip(x[..m * k].par_chunks(k))
        .for_each(|((o, s), row)| {
            let sc = amax_to_scale(amax_of(row), fmt, pow2);
            *s = sc;
            for (o, &v) in o.iter_mut().zip(row) {
                *o = fmt.encode(v.to_f32() * sc);
            }
        });
}
