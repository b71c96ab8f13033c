//! The fused MoE cast exports (docs/OPS.md, "Fused MoE casts"): one call writes both operands
//! a MoE grouped GEMM pair takes, bit-identical to the composition of the single casts it
//! replaces; the SwiGLU ones compute their input on the fly and never store it.
//!
//! Same scale, offset and NaN rules as the scale-and-cast exports (`hipfp8_per_group_colwise`):
//! END offsets `offs[num_groups]` along m, clamped on a GPU and checked on the CPU
//! (INVALID_OFFSETS); empty groups get the scale of an all-zero group; rows past
//! `offs[num_groups-1]` are not written in the column-major output. The grouped ones take
//! their scratch (8 bytes per group, zeroed) from the stream's cached workspace, as the
//! column-reducing casts do: call once outside a graph capture before capturing.
//!
//! `flags`: HIPFP8_FLAG_POW2_SCALES, and HIPFP8_FLAG_DEQUANT_SCALES (these exports only): every
//! scale output holds the grouped GEMMs' dequant scale `1 / s` (bit for bit what
//! `hipfp8_scale_reciprocal` makes of the forward scale s) instead of s; the codes are the same.

use std::ffi::c_void;

use super::args::{c_desc, op_desc};
use super::quant::{hipfp8_cast_2d_desc, hipfp8_cast_3d_desc};
use super::run_op;
use crate::moe;

c_desc! {
    /// A SwiGLU problem (`hipfp8_moe_swiglu_quant`, `hipfp8_moe_swiglu_bwd_quant`): gu is
    /// (m, 2i) row-major, the gate/up GEMM output (gate = columns `[0, i)`, up = `[i, 2i)`).
    hipfp8_moe_swiglu_desc: cast("every input (gu, and grad_h for the backward)", "the outputs") {
        /// Rows (tokens, the grouped dimension).
        m: usize,
        /// The intermediate size: columns of h and grad_h (> 0).
        i: usize,
    }
}

op_desc! {
    hipfp8_moe_swiglu_desc: (usize, usize) = |d| (d.m, d.i), [input_dtype];
}

c_exports! {
    /// Expert weights x (e, k, n) column-major (`hipfp8_cast_3d_desc`) to both grouped-GEMM
    /// operands in one read: out/scales exactly as `hipfp8_colwise_3d` (forward B; scales[e*n]
    /// over k) and out_t/scales_t exactly as `hipfp8_rowwise_3d_transpose_rhs` (dgrad B,
    /// `out_t[e*n*k + k_i*n + n_i]`; scales_t[e*k] over n). x: e*k*n elements; out, out_t:
    /// e*k*n bytes. k and n must be > 0.
    fn hipfp8_moe_weights_dual(hipfp8_cast_3d_desc) = run_op(moe::MOE_WEIGHTS_DUAL):
        (x[x_len]: *const c_void, out[out_len]: *mut u8, scales[scales_len]: *mut f32,
         out_t[out_t_len]: *mut u8, scales_t[scales_t_len]: *mut f32);

    /// Activations or gradients x (m, k) row-major (`hipfp8_cast_2d_desc`) with END offsets along
    /// m to both grouped-GEMM operands in one read: out/scales exactly as `hipfp8_rowwise_2d`
    /// (every row; scales[m]) and out_col/scales_col exactly as `hipfp8_per_group_colwise`
    /// (`out_col[k_i*m + m_i]`; scales_col[num_groups*k]). x: m*k elements; out, out_col: m*k
    /// bytes. k must be > 0.
    fn hipfp8_moe_act_dual(hipfp8_cast_2d_desc) = run_op(moe::MOE_ACT_DUAL):
        (x[x_len]: *const c_void, offs[num_groups]: *const i32, out[out_len]: *mut u8,
         scales[scales_len]: *mut f32, out_col[out_col_len]: *mut u8,
         scales_col[scales_col_len]: *mut f32);

    /// SwiGLU forward fused with the down projection's casts: h = silu(gate) * up (m, i), in the
    /// input dtype's arithmetic as torch's `F.silu(g) * u` (docs/OPS.md), cast as
    /// `hipfp8_moe_act_dual` casts x, without being stored. gu: m*2i elements; offs: num_groups
    /// END offsets along m; out, out_col: m*i bytes; scales: m; scales_col: num_groups*i.
    fn hipfp8_moe_swiglu_quant(hipfp8_moe_swiglu_desc) = run_op(moe::MOE_SWIGLU_QUANT):
        (gu[gu_len]: *const c_void, offs[num_groups]: *const i32, out[out_len]: *mut u8,
         scales[scales_len]: *mut f32, out_col[out_col_len]: *mut u8,
         scales_col[scales_col_len]: *mut f32);

    /// SwiGLU backward fused with the gate/up projection's casts: from grad_h (m, i) and the
    /// forward's gu (m, 2i), both of the descriptor's dtype, d = [d_gate | d_up] (m, 2i) as torch's
    /// autograd of `F.silu(g) * u` computes it, cast as `hipfp8_moe_act_dual` casts x (k = 2i),
    /// without being stored. grad_h: m*i, gu: m*2i elements; out, out_col: m*2i bytes; scales: m;
    /// scales_col: num_groups*2i.
    fn hipfp8_moe_swiglu_bwd_quant(hipfp8_moe_swiglu_desc) = run_op(moe::MOE_SWIGLU_BWD_QUANT):
        (grad_h[grad_h_len]: *const c_void, gu[gu_len]: *const c_void, offs[num_groups]: *const i32,
         out[out_len]: *mut u8, scales[scales_len]: *mut f32, out_col[out_col_len]: *mut u8,
         scales_col[scales_col_len]: *mut f32);
}
