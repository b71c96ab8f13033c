//! The MoE routing exports (docs/OPS.md, "MoE routing"): the token dispatch fused with the
//! padding of each expert group and both grouped-GEMM casts, and the score-weighted combine
//! with its backward, as gathers through the routing's permutation (no atomics, no sort).
//!
//! Routed slots: token t's j-th choice is slot `t*topk + j`; `perm[t*topk]` lists the slots in
//! expert order (a permutation) and `offs[num_groups]` holds the END offsets of each expert's
//! slots in it (clamped on a GPU, checked on the CPU: INVALID_OFFSETS; a `perm` that is not a
//! permutation and slot rows outside the padded layout are INVALID_OFFSETS on the CPU). The
//! dispatches take their scratch (4 bytes per group, zeroed) from the stream's cached
//! workspace: call once outside a graph capture before capturing.

use std::ffi::c_void;

use super::args::{self, c_desc, op_desc};
use super::run_op;
use super::status::FfiError;
use crate::dispatch::NoParams;
use crate::route::{self, CombineShape, DispatchShape};

c_desc! {
    /// A dispatch (`hipfp8_moe_dispatch_dual`, `hipfp8_moe_combine_bwd_dual`): t tokens of k
    /// columns, topk slots each, groups padded to multiples of `align` rows in a layout of
    /// `m_cap >= t*topk + num_groups*(align - 1)` rows.
    hipfp8_moe_dispatch_desc: cast("the tokens (x, or dout)", "the outputs") {
        /// Tokens.
        t: usize,
        /// Columns of a token (> 0).
        k: usize,
        /// Routed slots per token (> 0).
        topk: usize,
        /// Each padded group's row count is a multiple of this (> 0; 1: no padding).
        align: usize,
        /// Rows of the padded layout.
        m_cap: usize,
    }

    /// A combine (`hipfp8_moe_combine`, `hipfp8_moe_combine_bwd_scores`): t tokens of k columns,
    /// topk slots each, the experts' output y in a padded layout of m_cap rows.
    hipfp8_moe_combine_desc {
        /// `hipfp8_dtype` of y (and of dout).
        input_dtype: u32,
        /// Tokens.
        t: usize,
        /// Columns.
        k: usize,
        /// Routed slots per token.
        topk: usize,
        /// Rows of y.
        m_cap: usize,
    }
}

op_desc! {
    hipfp8_moe_dispatch_desc: DispatchShape = |d| DispatchShape {
        t: d.t,
        k: d.k,
        topk: d.topk,
        align: d.align,
        m_cap: d.m_cap,
    }, [input_dtype];
    hipfp8_moe_combine_desc: CombineShape = |d| CombineShape {
        t: d.t,
        k: d.k,
        topk: d.topk,
        m_cap: d.m_cap,
    }, [input_dtype];
}

impl args::CastDesc for hipfp8_moe_combine_desc {
    type Params = NoParams;
    fn params(&self) -> Result<NoParams, FfiError> {
        Ok(NoParams)
    }
}

c_exports! {
    /// Token dispatch fused with the padding of each expert group and both grouped-GEMM casts:
    /// x (t, k) row-major; expert g's slots (`perm` positions `[offs[g-1], offs[g])`) become,
    /// in that order, the padded rows from `offs_pad[g-1]` (0 for g = 0), each group padded with
    /// zero rows to a multiple of `align`. Writes `offs_pad[num_groups]` (padded END offsets),
    /// `slot_row[t*topk]` (each slot's padded row; -1 for slots past `offs[num_groups-1]`),
    /// out/scales (m_cap*k bytes, m_cap scales: `hipfp8_rowwise_2d` of the padded matrix) and
    /// out_col/scales_col (`out_col[k_i*m_cap + row]`, num_groups*k scales:
    /// `hipfp8_per_group_colwise` of it on offs_pad); rows from `offs_pad[num_groups-1]` to
    /// m_cap are zero bytes in both layouts.
    fn hipfp8_moe_dispatch_dual(hipfp8_moe_dispatch_desc) = run_op(route::MOE_DISPATCH_DUAL):
        (x[x_len]: *const c_void, perm[perm_len]: *const i32, offs[num_groups]: *const i32,
         offs_pad[offs_pad_len]: *mut i32, slot_row[slot_row_len]: *mut i32,
         out[out_len]: *mut u8, scales[scales_len]: *mut f32, out_col[out_col_len]: *mut u8,
         scales_col[scales_col_len]: *mut f32);

    /// The combine's backward into the experts' output gradient: as `hipfp8_moe_dispatch_dual`
    /// with slot s's row `T(weights[s] * dout[s / topk])` (one f32 multiply rounded to dout's
    /// dtype T). dout: t*k elements; weights: t*topk.
    fn hipfp8_moe_combine_bwd_dual(hipfp8_moe_dispatch_desc) = run_op(route::MOE_COMBINE_BWD_DUAL):
        (dout[dout_len]: *const c_void, weights[weights_len]: *const f32,
         perm[perm_len]: *const i32, offs[num_groups]: *const i32,
         offs_pad[offs_pad_len]: *mut i32, slot_row[slot_row_len]: *mut i32,
         out[out_len]: *mut u8, scales[scales_len]: *mut f32, out_col[out_col_len]: *mut u8,
         scales_col[scales_col_len]: *mut f32);

    /// The score-weighted combine: `out[t] = bf16(sum_j weights[t*topk+j] * y[slot_row[t*topk+j]])`
    /// (f32 products added in j order, rounded once; slots with row -1 add nothing). y: m_cap*k
    /// elements; slot_row, weights: t*topk; out: t*k bf16 (as uint16_t bits).
    fn hipfp8_moe_combine(hipfp8_moe_combine_desc) = run_op(route::MOE_COMBINE):
        (y[y_len]: *const c_void, slot_row[slot_row_len]: *const i32,
         weights[weights_len]: *const f32, out[out_len]: *mut u16);

    /// The combine's weight gradient: `dweights[s] = dot(dout[s / topk], y[slot_row[s]])` in f32
    /// (docs/OPS.md gives the order), 0 for slots with row -1. dout: t*k, y: m_cap*k elements
    /// of the descriptor's dtype; slot_row, dweights: t*topk.
    fn hipfp8_moe_combine_bwd_scores(hipfp8_moe_combine_desc) = run_op(route::MOE_COMBINE_BWD_SCORES):
        (dout[dout_len]: *const c_void, y[y_len]: *const c_void,
         slot_row[slot_row_len]: *const i32, dweights[dweights_len]: *mut f32);
}
