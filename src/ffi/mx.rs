//! MXFP8 exports (OCP MX v1.0, torchao `to_mx` semantics): 32-element blocks along one
//! dimension, E8M0 scales (one byte: 2^(code - 127), 0xFF = NaN).

use std::ffi::c_void;

use super::args::{CastDesc, c_desc, format_choice, op_desc};
use super::run_op;
use super::status::FfiError;
use crate::error::Error;
use crate::mx;
use crate::params::{MxParams, MxRounding};

c_enum! {
    /// How an MX block's E8M0 scale exponent is chosen from its amax.
    hipfp8_mx_rounding => MxRounding {
        /// `e = floor(log2(amax)) - emax_elem` (the OCP MX spec; torchao's default).
        HIPFP8_MX_ROUNDING_FLOOR = 0 => MxRounding::Floor,
        /// `e = ceil(log2(amax / max_elem))` (never saturates; NVIDIA's recipe).
        HIPFP8_MX_ROUNDING_RCEIL = 1 => MxRounding::Rceil,
    }
}

c_desc! {
    /// An MXFP8 problem: x is (m, k) row-major. `format` must resolve to an OCP format
    /// (E4M3FN or E5M2; UNSUPPORTED_FORMAT otherwise: the MX spec has no FNUZ elements).
    hipfp8_mxfp8_desc {
        /// `hipfp8_dtype` of x.
        input_dtype: u32,
        /// `hipfp8_format` of the elements.
        format: u32,
        /// `hipfp8_mx_rounding`.
        rounding: u32,
        /// Rows of x.
        m: usize,
        /// Columns of x.
        k: usize,
    }
}

op_desc! {
    hipfp8_mxfp8_desc: (usize, usize) = |d| (d.m, d.k), [input_dtype];
}

impl CastDesc for hipfp8_mxfp8_desc {
    type Params = MxParams;
    fn params(&self) -> Result<MxParams, FfiError> {
        mx_params(self.format, self.rounding)
    }
}

fn mx_params(format: u32, rounding: u32) -> Result<MxParams, FfiError> {
    let r = hipfp8_mx_rounding::value(rounding).ok_or_else(|| {
        Error::InvalidEnum(format!(
            "rounding = {rounding} is not a hipfp8_mx_rounding (FLOOR = 0, RCEIL = 1)"
        ))
    })?;
    Ok(MxParams::new(format_choice(format)?, r))
}

c_exports! {
    /// MXFP8 along rows (blocks of 32 consecutive elements of a row): out (m, k) row-major;
    /// E8M0 scales (m, ceil(k/32)) row-major. x: m*k; out: m*k bytes; scales: m*ceil(k/32) bytes.
    fn hipfp8_mxfp8_dim0(hipfp8_mxfp8_desc) = run_op(mx::MXFP8_DIM0),
    /// MXFP8 along columns (blocks of 32 consecutive rows of a column): out (k, m) row-major
    /// (= column-major (m, k)); E8M0 scales (k, ceil(m/32)) row-major. x: m*k; out: m*k bytes;
    /// scales: k*ceil(m/32) bytes.
    fn hipfp8_mxfp8_dim1(hipfp8_mxfp8_desc) = run_op(mx::MXFP8_DIM1):
        (x[x_len]: *const c_void, out[out_len]: *mut u8, scales[scales_len]: *mut u8);
}
