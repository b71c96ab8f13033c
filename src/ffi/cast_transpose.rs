//! Cast-transpose export: both layouts from one read of x (dense forward + backward).

use std::ffi::c_void;

use super::args::{c_desc, op_desc};
use super::quant::hipfp8_cast_2d_desc;
use super::run_op;
use super::status::FfiError;
use crate::cast_transpose;
use crate::error::Error;
use crate::params::Scaling;

c_enum! {
    /// Scaling granularity of `hipfp8_cast_transpose`.
    hipfp8_scaling => Scaling {
        /// One scale for the whole tensor: scales[0] == scales_t[0].
        HIPFP8_SCALING_TENSORWISE = 0 => Scaling::Tensorwise,
        /// scales[m] per row of x for out, scales_t[k] per column of x for out_t.
        HIPFP8_SCALING_ROWWISE = 1 => Scaling::Rowwise,
    }
}

c_desc! {
    /// A cast-transpose problem: x is (m, k) row-major.
    hipfp8_cast_transpose_desc: cast("x", "both outputs") {
        /// `hipfp8_scaling`.
        scaling: u32,
        /// Rows of x.
        m: usize,
        /// Columns of x.
        k: usize,
    }
}

op_desc! {
    hipfp8_cast_transpose_desc: (usize, usize, Scaling) = |d| (d.m, d.k, scaling(d.scaling)?), [input_dtype];
}

pub(crate) fn scaling(v: u32) -> Result<Scaling, FfiError> {
    hipfp8_scaling::value(v).ok_or_else(|| {
        Error::InvalidEnum(format!(
            "scaling = {v} is not a hipfp8_scaling (TENSORWISE = 0, ROWWISE = 1)"
        ))
        .into()
    })
}

c_exports! {
    /// Cast x (m, k) to FP8 in both layouts in one pass: out (m, k) row-major and out_t (k, m)
    /// row-major (`out_t[k_i*m + m_i]`). TENSORWISE: scales[0] and scales_t[0] both hold the
    /// tensor scale (1 element each). ROWWISE: scales[m] per row of x, scales_t[k] per column of
    /// x. Needs k > 0. x: m*k; out, out_t: m*k bytes each.
    fn hipfp8_cast_transpose(hipfp8_cast_transpose_desc) = run_op(cast_transpose::CAST_TRANSPOSE):
        (x[x_len]: *const c_void, out[out_len]: *mut u8, out_t[out_t_len]: *mut u8,
         scales[scales_len]: *mut f32, scales_t[scales_t_len]: *mut f32);

    /// Cast-transpose with the caller's scale (delayed scaling) from ONE read of x: out (m, k)
    /// and out_t (k, m) row-major, both `encode(x * scale[0])`; `amax[0] = max |x|` (for the
    /// amax history). The scale is read on the device and used as is; flags must not have
    /// HIPFP8_FLAG_POW2_SCALES. Needs k > 0. x: m*k; scale: 1; out, out_t: m*k bytes each; amax: 1.
    fn hipfp8_cast_transpose_scaled(hipfp8_cast_2d_desc) = run_op(cast_transpose::CAST_TRANSPOSE_SCALED):
        (x[x_len]: *const c_void, scale[scale_len]: *const f32, out[out_len]: *mut u8,
         out_t[out_t_len]: *mut u8, amax[amax_len]: *mut f32);
}
