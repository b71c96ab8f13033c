//! Caller-provided scratch for the casts that need it, bound to a stream: the C side of
//! `Context::bind_stream_workspace` and of the workspace-size queries (src/workspace.rs).
//!
//! The column-reducing casts, cast_transpose, per_group_rowwise / rowwise_2d_padded and the
//! MoE casts take zeroed device scratch from the stream they run on. Without a binding each
//! stream gets its own cached buffer, grown on first use; growth is refused while the stream
//! is being captured, so a graph captured on a stream that never ran these casts needs either
//! one eager call on that stream first or a binding made here. A binding serves every call on
//! its stream: size it with the largest of the queries below over the calls it will serve.

use std::ffi::c_void;

use super::args;
use super::cast_transpose::scaling;
use super::context::{self, hipfp8_context};
use super::status::{guard, hipfp8_status};
use super::types::hipStream_t;
use crate::context::{BackendKind, Context};
use crate::error::{Error, Result};
use crate::view::StreamRef;
use crate::workspace::Workspace;

/// Write `bytes` (0 on a CPU context, which needs no device scratch).
fn size_query(
    name: &'static str,
    ctx: *const hipfp8_context,
    bytes: *mut usize,
    q: impl FnOnce(&Context) -> Result<usize>,
) -> hipfp8_status {
    guard(name, || {
        let c = context::lookup(ctx)?;
        let out = args::out_param("bytes", bytes)?;
        let n = match c.backend() {
            BackendKind::Cpu => 0,
            BackendKind::Gpu => q(&c)?,
        };
        out.write(n);
        Ok(())
    })
}

/// [`size_query`] of `hipfp8_cast_transpose_workspace_size`: `scaling_kind` is checked first.
fn cast_transpose_size(
    name: &'static str,
    ctx: *const hipfp8_context,
    (m, k, scaling_kind): (usize, usize, u32),
    bytes: *mut usize,
) -> hipfp8_status {
    match scaling(scaling_kind) {
        Ok(s) => size_query(name, ctx, bytes, |c| {
            c.cast_transpose_workspace_size(m, k, s)
        }),
        Err(e) => guard(name, || Err(e)),
    }
}

c_fns! {
    (num_groups: usize, k1: usize, k2: usize, bytes: *mut usize) {
        /// Device bytes of zeroed scratch the column-reducing casts need: per_group_colwise with
        /// `k1` columns (`k2` = 0), per_group_colwise_dual with `k1` and `k2`, rowwise_3d_transpose_rhs
        /// with `num_groups` = E and `k1` = K. 0 on a CPU context.
        fn hipfp8_colwise_workspace_size =
            size_query(bytes, |c| c.colwise_workspace_size(num_groups, k1, k2));
    }
    (m: usize, k: usize, scaling_kind: u32, bytes: *mut usize) {
        /// Device bytes of zeroed scratch `hipfp8_cast_transpose` of an (m, k) matrix needs with
        /// `scaling` (a `hipfp8_scaling`). 0 on a CPU context.
        fn hipfp8_cast_transpose_workspace_size = cast_transpose_size((m, k, scaling_kind), bytes);
    }
    (num_groups: usize, bytes: *mut usize) {
        /// Device bytes of zeroed scratch per_group_rowwise and rowwise_2d_padded need for
        /// `num_groups` groups. 0 on a CPU context.
        fn hipfp8_grouped_rows_workspace_size =
            size_query(bytes, |c| c.grouped_scratch_size(num_groups));
        /// Device bytes of zeroed scratch the fused MoE casts (`hipfp8_moe_swiglu_quant`,
        /// `hipfp8_moe_swiglu_bwd_quant`, and `hipfp8_moe_act_dual` under
        /// `HIPFP8_MOE_DUAL=fused`) need for `num_groups` groups. `hipfp8_moe_act_dual` and
        /// `hipfp8_moe_weights_dual` run the column casts by default: a bound workspace also
        /// covers `hipfp8_colwise_workspace_size(num_groups (E for the weights), k, 0)`. 0 on
        /// a CPU context.
        fn hipfp8_moe_workspace_size = size_query(bytes, |c| c.moe_workspace_size(num_groups));
    }
}

/// Give `stream` the caller's zeroed device memory as the scratch of the casts that need it
/// (see the size queries above); a call on that stream needing more fails with
/// OUTPUT_TOO_SMALL and writes nothing. GPU contexts only (WRONG_LOCATION on the CPU).
/// `workspace`: device memory of the context's GPU, `bytes` long, ALL ZERO, used by nothing
/// else and kept alive until `hipfp8_unbind_stream_workspace` and the end of the work queued
/// with it (the kernels leave it zero). Rebinding a stream replaces its binding.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_bind_stream_workspace(
    ctx: *const hipfp8_context,
    stream: hipStream_t,
    workspace: *mut c_void,
    bytes: usize,
) -> hipfp8_status {
    guard("hipfp8_bind_stream_workspace", || {
        let c = context::lookup(ctx)?;
        if workspace.is_null() {
            return Err(Error::NullPointer("workspace").into());
        }
        // SAFETY: the caller's promise above (zeroed device memory of this context, `bytes`
        // long, exclusively this stream's until unbound and drained); the context checks
        // the location before binding.
        unsafe {
            c.bind_stream_workspace(
                StreamRef(stream.cast()),
                Workspace::from_raw(workspace, bytes),
            )?
        };
        Ok(())
    })
}

/// Drop `stream`'s binding (a no-op when it has none): its next call that needs scratch
/// allocates its own cached buffer.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_unbind_stream_workspace(
    ctx: *const hipfp8_context,
    stream: hipStream_t,
) -> hipfp8_status {
    guard("hipfp8_unbind_stream_workspace", || {
        let c = context::lookup(ctx)?;
        c.unbind_stream_workspace(StreamRef(stream.cast()));
        Ok(())
    })
}
