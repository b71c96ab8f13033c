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
pub mod route;

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

/// An empty vector with room for `jobs` per-group jobs of an op (`what`) over `groups` groups,
/// or OUT_OF_MEMORY (as [`try_scratch`]).
pub(crate) fn try_jobs<T>(what: &str, groups: usize, jobs: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(jobs)
        .map_err(|_| Error::OutOfMemory(format!("{what}: scratch for {groups} groups")))?;
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

/// The rule of the amax-scaled casts: the FP8 element format, and whether every scale is
/// rounded down to a power of two ([`amax_to_scale`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub fmt: Fp8Format,
    pub pow2: bool,
}

impl Rule {
    pub const fn new(fmt: Fp8Format, pow2: bool) -> Rule {
        Rule { fmt, pow2 }
    }

    /// The scale of a block with this amax.
    #[inline]
    pub fn scale(self, amax: f32) -> f32 {
        amax_to_scale(amax, self.fmt, self.pow2)
    }

    /// The stored scale and the multiplier of a block with this amax: the same number.
    #[inline]
    fn stored(self, amax: f32) -> (f32, f32) {
        let s = self.scale(amax);
        (s, s)
    }
}

/// An FP8 output: its codes and its scales (`S`: f32, or the E8M0 codes of MX).
pub struct Scaled<'a, S = f32> {
    pub codes: &'a mut [u8],
    pub scales: &'a mut [S],
}

impl<'a, S> Scaled<'a, S> {
    pub fn new(codes: &'a mut [u8], scales: &'a mut [S]) -> Self {
        Scaled { codes, scales }
    }
}

/// Both scaled layouts of one operand: `rows`, the row-major codes scaled per row, and
/// `cols`, the transposed (column-major) codes scaled per column (or per group and column).
pub struct Dual<'a> {
    pub rows: Scaled<'a>,
    pub cols: Scaled<'a>,
}

/// A grouped (m, k) row-major input: `x` with the END offsets `offs` of its groups (along m;
/// [`quant::per_group_rowwise`]: along k).
#[derive(Clone, Copy)]
pub struct Grouped<'a, T> {
    pub m: usize,
    pub k: usize,
    pub x: &'a [T],
    pub offs: &'a [i32],
}

/// Tiles of `bm` x `bk` elements of the (m, k) row-major `x`: `scale_of(amax of the tile)` is
/// the tile's stored scale and its multiplier, `out.codes = encode(x * multiplier)`;
/// `out.scales` (ceil(m/bm), ceil(k/bk)) row-major. Edge tiles reduce over what exists. The
/// engine of the rowwise (1 x k), 1 x 128, 128 x 128 and MX dim-0 (1 x 32) casts.
pub(crate) fn tiles<T: Hp, S: Send>(
    fmt: Fp8Format,
    (m, k): (usize, usize),
    (bm, bk): (usize, usize),
    x: &[T],
    out: Scaled<'_, S>,
    scale_of: impl Fn(f32) -> (S, f32) + Sync,
) {
    if m == 0 || k == 0 {
        return;
    }
    let (nbm, nbk) = (m.div_ceil(bm), k.div_ceil(bk));
    out.codes[..m * k]
        .par_chunks_mut(chunk_len(bm, m, k))
        .zip(out.scales[..nbm * nbk].par_chunks_mut(nbk))
        .enumerate()
        .for_each(|(bi, (ob, sb))| {
            let r0 = bi * bm;
            let rows = ob.len() / k;
            let xt = &x[r0 * k..(r0 + rows) * k];
            for (bj, s) in sb.iter_mut().enumerate() {
                let c0 = bj * bk;
                let c1 = (c0 + bk).min(k);
                let a = xt
                    .chunks(k)
                    .fold(0.0f32, |a, row| amax_combine(a, amax_of(&row[c0..c1])));
                let (code, mult) = scale_of(a);
                *s = code;
                for (orow, xrow) in ob.chunks_mut(k).zip(xt.chunks(k)) {
                    for (o, &v) in orow[c0..c1].iter_mut().zip(&xrow[c0..c1]) {
                        *o = fmt.encode(v.to_f32() * mult);
                    }
                }
            }
        });
}

/// See [`crate::Context::rowwise_2d`]: one tile per row.
pub fn rowwise_2d<T: Hp>(rule: Rule, (m, k): (usize, usize), x: &[T], out: Scaled<'_>) {
    tiles(rule.fmt, (m, k), (1, k), x, out, |a| rule.stored(a))
}
