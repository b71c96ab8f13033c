//! FP8 grouped GEMM exports (torch._scaled_grouped_mm semantics): f32 accumulation, bf16
//! output, rowwise DEQUANT scales (the reciprocals of the forward scales the casts write).
//! `out[i,j] = bf16_rne(sum_k decode(a[i,k]) * decode(b[k,j]) * scale_a[i] * scale_b[j])`.
//! A and B may use different formats (e.g. E4M3 activations x E5M2 gradients).

use half::bf16;

use super::args::{descriptor, format_choice};
use super::status::hipfp8_status;
use super::types::hipStream_t;
use super::{hipfp8_context, op_entry};
use crate::grouped_gemm::GemmParams;
use crate::ops::StreamRef;

/// 2D x 3D grouped GEMM, groups along m (forward and dgrad): a (m, k) row-major,
/// b (e, k, n) column-major `b[e_i*n*k + n_i*k + k_i]`, one group per expert.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hipfp8_grouped_gemm_2d3d_desc {
    /// `sizeof(hipfp8_grouped_gemm_2d3d_desc)`.
    pub size: usize,
    /// `hipfp8_format` of a.
    pub a_format: u32,
    /// `hipfp8_format` of b.
    pub b_format: u32,
    /// Rows of a and out (all groups).
    pub m: usize,
    /// Reduced dimension.
    pub k: usize,
    /// Columns of b and out.
    pub n: usize,
    /// Experts in b; must equal the number of offsets (GROUP_COUNT_MISMATCH otherwise).
    pub e: usize,
}

/// 2D x 2D grouped GEMM, groups along the reduced dimension mt (wgrad): a (n, mt) row-major,
/// b (mt, k) column-major `b[k_i*mt + m_i]`, out (num_groups, n, k).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hipfp8_grouped_gemm_2d2d_desc {
    /// `sizeof(hipfp8_grouped_gemm_2d2d_desc)`.
    pub size: usize,
    /// `hipfp8_format` of a.
    pub a_format: u32,
    /// `hipfp8_format` of b.
    pub b_format: u32,
    /// Rows of a.
    pub n: usize,
    /// The grouped, reduced dimension (tokens).
    pub mt: usize,
    /// Columns of b.
    pub k: usize,
}

descriptor!(hipfp8_grouped_gemm_2d3d_desc, hipfp8_grouped_gemm_2d2d_desc);

fn gemm_params(a: u32, b: u32) -> Result<GemmParams, super::status::FfiError> {
    Ok(GemmParams::new(format_choice(a)?, format_choice(b)?))
}

/// out (m, n) bf16 row-major = per group g (rows `[offs[g-1], offs[g])` of a, expert g of b):
/// a_g @ b_g with `scale_a[row]` and `scale_b[g*n + col]`; rows past `offs[e-1]` untouched.
/// a: m*k bytes; b: e*k*n bytes; offs: num_groups (== e) END offsets along m;
/// scale_a: m; scale_b: e*n; out: m*n bf16 (as uint16_t bits, 2-byte aligned).
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_grouped_gemm_2d3d(
    ctx: *const hipfp8_context,
    desc: *const hipfp8_grouped_gemm_2d3d_desc,
    a: *const u8,
    a_len: usize,
    b: *const u8,
    b_len: usize,
    offs: *const i32,
    num_groups: usize,
    scale_a: *const f32,
    scale_a_len: usize,
    scale_b: *const f32,
    scale_b_len: usize,
    out: *mut u16,
    out_len: usize,
    stream: hipStream_t,
) -> hipfp8_status {
    op_entry("hipfp8_grouped_gemm_2d3d", ctx, desc, |c, d, v| {
        let p = gemm_params(d.a_format, d.b_format)?;
        let a = v.src("a", a, a_len)?;
        let b = v.src("b", b, b_len)?;
        let offs = v.src("offs", offs, num_groups)?;
        let sa = v.src("scale_a", scale_a, scale_a_len)?;
        let sb = v.src("scale_b", scale_b, scale_b_len)?;
        let out = v.dst("out", out.cast::<bf16>(), out_len)?;
        let s = StreamRef(stream.cast());
        Ok(c.grouped_gemm_2d3d(&p, d.m, d.k, d.n, d.e, a, b, offs, sa, sb, out, s)?)
    })
}

/// out (num_groups, n, k) bf16 row-major: for group g (columns `[offs[g-1], offs[g])` of a,
/// rows of b), `out[g] = a_g @ b_g` with `scale_a[g*n + row]` and `scale_b[g*k + col]`;
/// empty groups give zeros. a: n*mt bytes; b: mt*k bytes; offs: num_groups END offsets along
/// mt; scale_a: num_groups*n; scale_b: num_groups*k; out: num_groups*n*k bf16.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_grouped_gemm_2d2d(
    ctx: *const hipfp8_context,
    desc: *const hipfp8_grouped_gemm_2d2d_desc,
    a: *const u8,
    a_len: usize,
    b: *const u8,
    b_len: usize,
    offs: *const i32,
    num_groups: usize,
    scale_a: *const f32,
    scale_a_len: usize,
    scale_b: *const f32,
    scale_b_len: usize,
    out: *mut u16,
    out_len: usize,
    stream: hipStream_t,
) -> hipfp8_status {
    op_entry("hipfp8_grouped_gemm_2d2d", ctx, desc, |c, d, v| {
        let p = gemm_params(d.a_format, d.b_format)?;
        let a = v.src("a", a, a_len)?;
        let b = v.src("b", b, b_len)?;
        let offs = v.src("offs", offs, num_groups)?;
        let sa = v.src("scale_a", scale_a, scale_a_len)?;
        let sb = v.src("scale_b", scale_b, scale_b_len)?;
        let out = v.dst("out", out.cast::<bf16>(), out_len)?;
        let s = StreamRef(stream.cast());
        Ok(c.grouped_gemm_2d2d(&p, d.n, d.mt, d.k, a, b, offs, sa, sb, out, s)?)
    })
}
