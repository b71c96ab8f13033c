//! Scale-and-cast exports (docs/OPS.md): rowwise 2D, 3D expert weights, per-group
//! (jagged) rowwise/colwise, tensorwise, blockwise, token-group padding.
//!
//! Scales are forward (multiplicative) f32 scales: `data = encode(x * scale)`.

use std::ffi::c_void;

use super::args::{cast_params, descriptor};
use super::status::hipfp8_status;
use super::types::hipStream_t;
use super::{hipfp8_context, op_entry};
use crate::ops::StreamRef;

/// A 2D scale-and-cast problem: x is (m, k) row-major.
///
/// Used by `hipfp8_rowwise_2d`, `hipfp8_per_group_colwise`, `hipfp8_per_group_rowwise`,
/// `hipfp8_blockwise_1x128`, `hipfp8_blockwise_128x128`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hipfp8_cast_2d_desc {
    /// `sizeof(hipfp8_cast_2d_desc)`.
    pub size: usize,
    /// `hipfp8_dtype` of x.
    pub input_dtype: u32,
    /// `hipfp8_format` of the output.
    pub format: u32,
    /// `hipfp8_flag` bits.
    pub flags: u32,
    /// Rows.
    pub m: usize,
    /// Columns (the contiguous dimension).
    pub k: usize,
}

descriptor!(hipfp8_cast_2d_desc);

/// Rowwise scale-and-cast (docs/OPS.md `rowwise_2d`): `out[i*k + j] = encode(x[i*k + j] *
/// scales[i])` with `scales[i]` from the amax of row i. Needs k > 0; m may be 0.
/// x: m*k elements of `input_dtype`; out: m*k bytes; scales: m floats.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_rowwise_2d(
    ctx: *const hipfp8_context,
    desc: *const hipfp8_cast_2d_desc,
    x: *const c_void,
    x_len: usize,
    out: *mut u8,
    out_len: usize,
    scales: *mut f32,
    scales_len: usize,
    stream: hipStream_t,
) -> hipfp8_status {
    op_entry("hipfp8_rowwise_2d", ctx, desc, |c, d, v| {
        let p = cast_params(d.format, d.flags)?;
        let x = v.hp("x", d.input_dtype, x, x_len)?;
        let out = v.dst("out", out, out_len)?;
        let scales = v.dst("scales", scales, scales_len)?;
        Ok(c.rowwise_2d(&p, d.m, d.k, x, out, scales, StreamRef(stream.cast()))?)
    })
}
