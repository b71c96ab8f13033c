//! Scale-and-cast exports (docs/OPS.md): rowwise 2D, 3D expert weights, per-group (jagged)
//! rowwise/colwise and the dual variant, tensorwise, blockwise, token-group padding.
//!
//! Scales are forward (multiplicative) f32 scales: `data = encode(x * scale)`; dequantize
//! with `decode(data) / scale`. Grouped ops take int32 END offsets `offs[num_groups]`
//! (torch._scaled_grouped_mm's `offs`): group g covers `[offs[g-1], offs[g])` with
//! `offs[-1] = 0`; empty groups are allowed and get the scale of an all-zero group; elements
//! past `offs[num_groups-1]` are not written. On the CPU bad offsets are INVALID_OFFSETS; on
//! a GPU they are never read back (kernels clamp them).

use std::ffi::c_void;

use super::args::{c_desc, op_desc};
use super::run_op;
use crate::quant;

c_desc! {
    /// A 2D scale-and-cast problem: x is (m, k) row-major.
    ///
    /// Used by `hipfp8_rowwise_2d`, `hipfp8_per_group_colwise`, `hipfp8_per_group_rowwise`,
    /// `hipfp8_blockwise_1x128`, `hipfp8_blockwise_128x128`, `hipfp8_cast_transpose_scaled`.
    hipfp8_cast_2d_desc: cast("x", "the output") {
        /// Rows.
        m: usize,
        /// Columns (the contiguous dimension).
        k: usize,
    }

    /// A 3D expert-weight problem: x is (e, k, n) column-major, `x[e*k*n + n_i*k + k_i]`.
    /// Used by `hipfp8_colwise_3d` and `hipfp8_rowwise_3d_transpose_rhs`.
    hipfp8_cast_3d_desc: cast("x", "the output") {
        /// Experts.
        e: usize,
        /// Rows of each expert matrix (contiguous: column-major).
        k: usize,
        /// Columns of each expert matrix.
        n: usize,
    }

    /// Two per-group colwise casts sharing m and the offsets (`hipfp8_per_group_colwise_dual`):
    /// x1 is (m, k1), x2 is (m, k2), both row-major.
    hipfp8_cast_dual_desc: cast_dual {
    }

    /// A tensorwise cast of n elements (`hipfp8_tensorwise`).
    hipfp8_tensorwise_desc: cast("x", "the output") {
        /// Elements.
        n: usize,
    }

    /// A rowwise cast that pads token groups to multiples of 16 rows
    /// (`hipfp8_rowwise_2d_padded`): x is (m, k) row-major, the output has m_cap rows.
    hipfp8_padded_desc: cast("x", "the output") {
        /// Rows of x.
        m: usize,
        /// Columns.
        k: usize,
        /// Rows of the output; must be >= m + 15 * num_groups (the worst case, so a GPU caller
        /// can size it without reading the offsets).
        m_cap: usize,
    }

    /// The dual per-group colwise cast into the padded layout
    /// (`hipfp8_per_group_colwise_dual_padded`): x1 is (m, k1), x2 is (m, k2), both row-major;
    /// the outputs have m_cap rows (tokens).
    hipfp8_cast_dual_padded_desc: cast_dual {
        /// Rows (tokens) of the padded outputs; must be >= m + 15 * num_groups and a multiple of
        /// 16: pass round_up(m + 15 * num_groups, 16).
        m_cap: usize,
    }
}

op_desc! {
    hipfp8_cast_2d_desc: (usize, usize) = |d| (d.m, d.k), [input_dtype];
    hipfp8_cast_3d_desc: (usize, usize, usize) = |d| (d.e, d.k, d.n), [input_dtype];
    hipfp8_cast_dual_desc: (usize, usize, usize) = |d| (d.m, d.k1, d.k2), [input_dtype, input_dtype2];
    hipfp8_tensorwise_desc: usize = |d| d.n, [input_dtype];
    hipfp8_padded_desc: (usize, usize, usize) = |d| (d.m, d.k, d.m_cap), [input_dtype];
    hipfp8_cast_dual_padded_desc: (usize, usize, usize, usize) = |d| (d.m, d.k1, d.k2, d.m_cap),
        [input_dtype, input_dtype2];
}

c_exports! {
    /// Rowwise scale-and-cast: `out[i*k + j] = encode(x[i*k + j] * scales[i])`, `scales[i]`
    /// from the amax of row i. Forward A operand and dgrad grad_out. Needs k > 0.
    /// x: m*k elements of `input_dtype`; out: m*k bytes; scales: m.
    fn hipfp8_rowwise_2d(hipfp8_cast_2d_desc) = run_op(quant::ROWWISE_2D),
    /// Colwise cast of 3D expert weights (forward B operand): out has x's layout,
    /// `scales[e_i*n + n_i]` from the amax over k. Needs k > 0.
    /// x: e*k*n elements; out: e*k*n bytes; scales: e*n.
    fn hipfp8_colwise_3d(hipfp8_cast_3d_desc) = run_op(quant::COLWISE_3D),
    /// Transpose-rowwise cast of 3D expert weights (dgrad B operand): out is (e, n, k)
    /// column-major, `out[e_i*n*k + k_i*n + n_i]`; `scales[e_i*k + k_i]` from the amax over n.
    /// Needs n > 0. x: e*k*n elements; out: e*k*n bytes; scales: e*k.
    fn hipfp8_rowwise_3d_transpose_rhs(hipfp8_cast_3d_desc) = run_op(quant::ROWWISE_3D_TRANSPOSE_RHS):
        (x[x_len]: *const c_void, out[out_len]: *mut u8, scales[scales_len]: *mut f32);

    /// Per-group colwise cast (wgrad operands), groups along m: out is column-major
    /// `out[k_i*m + m_i]`; `scales[g*k + k_i]` from the amax over group g's rows of column k_i.
    /// x: m*k elements; offs: num_groups END offsets along m; out: m*k bytes; scales:
    /// num_groups*k.
    fn hipfp8_per_group_colwise(hipfp8_cast_2d_desc) = run_op(quant::PER_GROUP_COLWISE):
        (x[x_len]: *const c_void, offs[num_groups]: *const i32, out[out_len]: *mut u8,
         scales[scales_len]: *mut f32);

    /// Two `hipfp8_per_group_colwise` casts sharing m and the offsets, in one launch (wgrad:
    /// grad_out and the activations together). x1: m*k1, x2: m*k2 elements; out1: m*k1 and
    /// out2: m*k2 bytes; scales1: num_groups*k1, scales2: num_groups*k2. The GPU kernel takes
    /// one dtype for both inputs (NOT_SUPPORTED otherwise; the CPU takes any pair).
    fn hipfp8_per_group_colwise_dual(hipfp8_cast_dual_desc) = run_op(quant::PER_GROUP_COLWISE_DUAL):
        (x1[x1_len]: *const c_void, x2[x2_len]: *const c_void, offs[num_groups]: *const i32,
         out1[out1_len]: *mut u8, scales1[scales1_len]: *mut f32, out2[out2_len]: *mut u8,
         scales2[scales2_len]: *mut f32);

    /// Per-group rowwise cast, groups along k (columns): out row-major; `scales[g*m + m_i]` from
    /// the amax over row m_i within group g's columns. x: m*k elements; offs: num_groups END
    /// offsets along k; out: m*k bytes; scales: num_groups*m.
    fn hipfp8_per_group_rowwise(hipfp8_cast_2d_desc) = run_op(quant::PER_GROUP_ROWWISE):
        (x[x_len]: *const c_void, offs[num_groups]: *const i32, out[out_len]: *mut u8,
         scales[scales_len]: *mut f32);

    /// Tensorwise cast: `amax[0]` over all n elements, `scale[0]` from it, `out[i] =
    /// encode(x[i] * scale[0])`. Two phases on a GPU, no host sync. x: n elements; out: n
    /// bytes; scale: 1; amax: 1.
    fn hipfp8_tensorwise(hipfp8_tensorwise_desc) = run_op(quant::TENSORWISE):
        (x[x_len]: *const c_void, out[out_len]: *mut u8, scale[scale_len]: *mut f32,
         amax[amax_len]: *mut f32);

    /// Tensorwise cast with the caller's scale (delayed scaling): `out[i] = encode(x[i] *
    /// scale[0])`, `amax[0] = max |x|` (for the amax history). One read of x; the scale is read
    /// on the device and used as is. flags must not have HIPFP8_FLAG_POW2_SCALES. x: n elements;
    /// scale: 1; out: n bytes; amax: 1.
    fn hipfp8_tensorwise_scaled(hipfp8_tensorwise_desc) = run_op(quant::TENSORWISE_SCALED):
        (x[x_len]: *const c_void, scale[scale_len]: *const f32, out[out_len]: *mut u8,
         amax[amax_len]: *mut f32);

    /// Blockwise 1x128 cast (DeepSeek-V3 activations): scales (m, ceil(k/128)) row-major; a
    /// row's last block reduces over the columns that exist. x: m*k; out: m*k bytes; scales:
    /// m*ceil(k/128).
    fn hipfp8_blockwise_1x128(hipfp8_cast_2d_desc) = run_op(quant::BLOCKWISE_1X128),
    /// Blockwise 128x128 cast (DeepSeek-V3 weights): scales (ceil(m/128), ceil(k/128))
    /// row-major; edge tiles reduce over what exists. x: m*k; out: m*k bytes; scales:
    /// ceil(m/128)*ceil(k/128).
    fn hipfp8_blockwise_128x128(hipfp8_cast_2d_desc) = run_op(quant::BLOCKWISE_128X128):
        (x[x_len]: *const c_void, out[out_len]: *mut u8, scales[scales_len]: *mut f32);

    /// Rowwise cast that pads every token group to a multiple of 16 rows in one pass (for
    /// grouped GEMMs that need aligned groups): group g's rows land at `padded_offs[g-1]...` in
    /// out (m_cap, k); padding rows are zeros with the scale of an all-zero row; `padded_offs`
    /// receives the padded END offsets; rows past the padded end are untouched.
    /// x: m*k; offs: num_groups; out: m_cap*k bytes; scales: m_cap; padded_offs: num_groups.
    fn hipfp8_rowwise_2d_padded(hipfp8_padded_desc) = run_op(quant::ROWWISE_2D_PADDED):
        (x[x_len]: *const c_void, offs[num_groups]: *const i32, out[out_len]: *mut u8,
         scales[scales_len]: *mut f32, padded_offs[padded_offs_len]: *mut i32);

    /// `hipfp8_per_group_colwise_dual` into a padded layout, so that the 2D x 2D grouped GEMM
    /// (wgrad) sees every group at a 16-token boundary: group g's rows land at the padded rows
    /// `padded_offs[g-1]...` (each group padded to a multiple of 16 rows) of out1 (k1, m_cap) and
    /// out2 (k2, m_cap) column-major (`out[k_i*m_cap + row]`); every other output byte is zero;
    /// scales as `hipfp8_per_group_colwise_dual`'s; `padded_offs` receives the padded END
    /// offsets. x1: m*k1, x2: m*k2 elements; offs: num_groups; out1: m_cap*k1 and out2: m_cap*k2
    /// bytes; scales1: num_groups*k1, scales2: num_groups*k2; padded_offs: num_groups. The GPU
    /// kernel takes one dtype for both inputs (NOT_SUPPORTED otherwise).
    fn hipfp8_per_group_colwise_dual_padded(hipfp8_cast_dual_padded_desc) = run_op(quant::PER_GROUP_COLWISE_DUAL_PADDED):
        (x1[x1_len]: *const c_void, x2[x2_len]: *const c_void, offs[num_groups]: *const i32,
         out1[out1_len]: *mut u8, scales1[scales1_len]: *mut f32, out2[out2_len]: *mut u8,
         scales2[scales2_len]: *mut f32, padded_offs[padded_offs_len]: *mut i32);
}
