//! FP8 grouped GEMM exports (torch._scaled_grouped_mm semantics): f32 accumulation, bf16
//! output, rowwise DEQUANT scales (the reciprocals of the forward scales the casts write).
//! `out[i,j] = bf16_rne(sum_k decode(a[i,k]) * decode(b[k,j]) * scale_a[i] * scale_b[j])`.
//! A and B may use different formats (e.g. E4M3 activations x E5M2 gradients).
//!
//! On a GPU the vendor library (CUTLASS on sm_90, Composable Kernel on gfx942/gfx950) runs
//! when it supports the call, else the portable reference kernel (`backend` picks). The
//! libraries need a device workspace for their per-group arguments (built on the device from
//! the offsets: nothing is read back, nothing synchronises): pass your own, sized by
//! `hipfp8_grouped_gemm_workspace_size` (2D x 3D) or `hipfp8_grouped_gemm_2d2d_workspace_size`
//! (2D x 2D: with the staging area; needed for graph capture), or NULL/0 to use a cached
//! per-stream buffer. Which implementation runs never depends on the workspace: one too small
//! is refused.

use std::ffi::{c_char, c_void};

use super::args::{c_desc, format_choice};
use super::status::{FfiError, guard, hipfp8_status};
use super::types::hipStream_t;
use super::{args, context, hipfp8_context, op_entry};
use crate::dispatch::OpDecl;
use crate::error::Error;
use crate::grouped_gemm;
use crate::grouped_gemm::gpu::{GemmPlan, GroupedOp};
use crate::grouped_gemm::params::{GemmBackend, GemmImpl, GemmParams};
use crate::view::StreamRef;

c_enum! {
    /// Which grouped-GEMM implementation a GPU context runs (ignored on the CPU).
    hipfp8_gemm_backend => GemmBackend {
        /// The vendor library when it supports the call (formats, shape and alignment rules),
        /// else the reference kernel. The environment variable HIPFP8_GROUPED_GEMM_BACKEND
        /// (auto / reference / library) can override AUTO.
        HIPFP8_GEMM_BACKEND_AUTO = 0 => GemmBackend::Auto,
        /// The portable reference kernel (every format pair and shape).
        HIPFP8_GEMM_BACKEND_REFERENCE = 1 => GemmBackend::Reference,
        /// The vendor library only: a call it cannot take is NOT_SUPPORTED.
        HIPFP8_GEMM_BACKEND_LIBRARY = 2 => GemmBackend::Library,
    }
}

c_desc! {
    /// 2D x 3D grouped GEMM, groups along m (forward and dgrad): a (m, k) row-major,
    /// b (e, k, n) column-major `b[e_i*n*k + n_i*k + k_i]`, one group per expert.
    hipfp8_grouped_gemm_2d3d_desc: gemm {
        /// Rows of a and out (all groups).
        m: usize,
        /// Reduced dimension.
        k: usize,
        /// Columns of b and out.
        n: usize,
        /// Experts in b; must equal the number of offsets (GROUP_COUNT_MISMATCH otherwise).
        e: usize,
    }

    /// 2D x 2D grouped GEMM, groups along the reduced dimension mt (wgrad): a (n, mt) row-major,
    /// b (mt, k) column-major `b[k_i*mt + m_i]`, out (num_groups, n, k).
    hipfp8_grouped_gemm_2d2d_desc: gemm {
        /// Rows of a.
        n: usize,
        /// The grouped, reduced dimension (tokens).
        mt: usize,
        /// Columns of b.
        k: usize,
    }

    /// Blockwise-scaled 2D x 3D grouped GEMM (`hipfp8_grouped_gemm_blockwise_2d3d`): the operands
    /// of `hipfp8_grouped_gemm_2d3d`, scales per 1 x 128 block of a and 128 x 128 block of b.
    hipfp8_grouped_gemm_blockwise_2d3d_desc: gemm {
        /// Rows of a and out (all groups).
        m: usize,
        /// Reduced dimension.
        k: usize,
        /// Columns of b and out.
        n: usize,
        /// Experts in b; must equal the number of offsets (GROUP_COUNT_MISMATCH otherwise).
        e: usize,
    }

    /// Blockwise-scaled 2D x 2D grouped GEMM (`hipfp8_grouped_gemm_blockwise_2d2d`, wgrad): the
    /// operands of `hipfp8_grouped_gemm_2d2d`, scales per 1 x 128 token block of a and of b.
    hipfp8_grouped_gemm_blockwise_2d2d_desc: gemm {
        /// Rows of a.
        n: usize,
        /// The grouped, reduced dimension (tokens).
        mt: usize,
        /// Columns of b.
        k: usize,
    }
}

/// A grouped-GEMM descriptor: its formats and backend (the parameters), the op a plan
/// describes and the shape a call runs.
trait GemmDesc: args::Descriptor {
    type Shape: 'static;
    fn params(&self) -> Result<GemmParams, FfiError>;
    fn op(&self) -> GroupedOp;
    fn shape(&self) -> Self::Shape;
}

/// Implement [`GemmDesc`]: `desc: Shape = (<shape fields>), Op { <op fields> };`.
macro_rules! gemm_desc {
    ($($t:ident: $s:ty = ($($sf:ident),+), $op:ident { $($f:ident),+ };)+) => {$(
        impl GemmDesc for $t {
            type Shape = $s;
            fn params(&self) -> Result<GemmParams, FfiError> {
                gemm_params(self.a_format, self.b_format, self.backend)
            }
            fn op(&self) -> GroupedOp {
                GroupedOp::$op { $($f: self.$f),+ }
            }
            fn shape(&self) -> $s {
                ($(self.$sf),+)
            }
        }
    )+};
}
gemm_desc! {
    hipfp8_grouped_gemm_2d3d_desc: (usize, usize, usize, usize) = (m, k, n, e), TwoD3D { m, n, k };
    hipfp8_grouped_gemm_2d2d_desc: (usize, usize, usize) = (n, mt, k), TwoD2D { n, mt, k };
    hipfp8_grouped_gemm_blockwise_2d3d_desc: (usize, usize, usize, usize) = (m, k, n, e),
        Blockwise2D3D { m, n, k };
    hipfp8_grouped_gemm_blockwise_2d2d_desc: (usize, usize, usize) = (n, mt, k),
        Blockwise2D2D { n, mt, k };
}

c_enum! {
    /// Which implementation a grouped GEMM runs (`hipfp8_grouped_gemm_2d3d_plan`).
    hipfp8_gemm_impl {
        /// A CPU context: the host reference.
        HIPFP8_GEMM_IMPL_CPU = 0,
        /// The portable GPU reference kernel (every format pair and shape; slow).
        HIPFP8_GEMM_IMPL_REFERENCE = 1,
        /// CUTLASS on NVIDIA sm_90.
        HIPFP8_GEMM_IMPL_CUTLASS_SM90 = 2,
        /// Composable Kernel on gfx942 (MI300X/MI325X).
        HIPFP8_GEMM_IMPL_CK_GFX942 = 3,
        /// Composable Kernel on gfx950 (MI355X).
        HIPFP8_GEMM_IMPL_CK_GFX950 = 4,
    }
}

c_enum! {
    /// Why a grouped GEMM runs the reference kernel (`hipfp8_grouped_gemm_2d3d_plan`).
    hipfp8_gemm_reason {
        /// Not the reference kernel (or a CPU context).
        HIPFP8_GEMM_REASON_NONE = 0,
        /// HIPFP8_GEMM_BACKEND_REFERENCE, or HIPFP8_GROUPED_GEMM_BACKEND=reference.
        HIPFP8_GEMM_REASON_REQUESTED = 1,
        /// No library for this device in this build.
        HIPFP8_GEMM_REASON_NO_LIBRARY = 2,
        /// The library has no instance for this format pair.
        HIPFP8_GEMM_REASON_FORMAT_PAIR = 3,
        /// A whole-call shape rule of the library (K % 16, N % 8, Mt % 16, extents).
        HIPFP8_GEMM_REASON_SHAPE = 4,
        /// a, b or out is not 16-byte aligned.
        HIPFP8_GEMM_REASON_ALIGNMENT = 5,
    }
}

fn impl_code(imp: GemmImpl) -> u32 {
    use hipfp8_gemm_impl as I;
    (match imp {
        GemmImpl::Cpu => I::HIPFP8_GEMM_IMPL_CPU,
        GemmImpl::Reference => I::HIPFP8_GEMM_IMPL_REFERENCE,
        GemmImpl::CutlassSm90 => I::HIPFP8_GEMM_IMPL_CUTLASS_SM90,
        GemmImpl::CkGfx942 => I::HIPFP8_GEMM_IMPL_CK_GFX942,
        GemmImpl::CkGfx950 => I::HIPFP8_GEMM_IMPL_CK_GFX950,
    }) as u32
}

/// The caller's out-parameters of a plan query (`buf`/`len` as for
/// `hipfp8_context_device_name`; both may be NULL to skip the text).
struct PlanOut {
    implementation: *mut u32,
    reason: *mut u32,
    buf: *mut c_char,
    buf_len: usize,
    len: *mut usize,
}

/// Write a plan to the caller's out-parameters (all checked before anything is written).
fn write_plan(plan: &GemmPlan, o: &PlanOut) -> Result<(), FfiError> {
    let imp = args::out_param("implementation", o.implementation)?;
    let why = args::out_param("reason", o.reason)?;
    let text = plan.describe();
    if !o.buf.is_null() || !o.len.is_null() {
        args::copy_str_out(&text, o.buf, o.buf_len, o.len)?;
    }
    imp.write(impl_code(plan.imp));
    why.write(plan.fallback.as_ref().map_or(0, |f| f.code()));
    Ok(())
}

/// One plan query of the op of `desc`.
fn plan_query<D: GemmDesc>(
    func: &'static str,
    ctx: *const hipfp8_context,
    desc: *const D,
    (a, b, out_ptr): (*const u8, *const u8, *const u16),
    num_groups: usize,
    out: PlanOut,
) -> hipfp8_status {
    op_entry(func, ctx, desc, |c, d, _| {
        let p = d.params()?;
        let plan = c.grouped_gemm_plan(&p, d.op(), num_groups, ptr3(a, b, out_ptr))?;
        write_plan(&plan, &out)
    })
}

/// One grouped GEMM call: `decl` on the views of `bufs` with the caller's `workspace`
/// (pointer, bytes).
fn gemm_call<D: GemmDesc, const N: usize>(
    ctx: *const hipfp8_context,
    desc: *const D,
    decl: &'static OpDecl<GemmParams, D::Shape>,
    bufs: [args::Raw; N],
    workspace: (*mut c_void, usize),
    stream: hipStream_t,
) -> hipfp8_status {
    op_entry(decl.c_name, ctx, desc, |c, d, v| {
        let mut p = d.params()?;
        let views = v.views(decl, &[], bufs)?;
        p.workspace = v.workspace(workspace.0, workspace.1)?;
        Ok(c.run(decl, &p, d.shape(), views, StreamRef(stream.cast()))?)
    })
}

fn ptr3(a: *const u8, b: *const u8, out: *const u16) -> Option<[*const c_void; 3]> {
    if a.is_null() && b.is_null() && out.is_null() {
        None
    } else {
        Some([a.cast(), b.cast(), out.cast()])
    }
}

c_fns! {
    (
        a: *const u8, b: *const u8, out: *const u16, num_groups: usize,
        implementation: *mut u32, reason: *mut u32, buf: *mut c_char, buf_len: usize, len: *mut usize
    ) {
        /// Which implementation `hipfp8_grouped_gemm_2d3d` would run with this descriptor (formats,
        /// backend, shape) and these pointers (a, b, out: only their 16-byte alignment matters; all
        /// three NULL = assume aligned), without running anything: `*implementation` a
        /// `hipfp8_gemm_impl`, `*reason` a `hipfp8_gemm_reason` (NONE unless the reference kernel),
        /// and a one-line description into `buf` (e.g. "cutlass-sm90 coop-128x256-c2x1/raster-m/swz1"
        /// or "reference (cutlass-sm90 has no instance for E5M2 x E5M2 ...)"). The call runs exactly
        /// this plan: AUTO takes the reference kernel only where the plan says so; with
        /// HIPFP8_GEMM_BACKEND_LIBRARY a fallback plan is NOT_SUPPORTED here as in the call.
        fn hipfp8_grouped_gemm_2d3d_plan(desc: hipfp8_grouped_gemm_2d3d_desc) =
            plan_query((a, b, out), num_groups, PlanOut { implementation, reason, buf, buf_len, len });
        /// `hipfp8_grouped_gemm_2d3d_plan` for `hipfp8_grouped_gemm_2d2d`.
        fn hipfp8_grouped_gemm_2d2d_plan(desc: hipfp8_grouped_gemm_2d2d_desc) =
            plan_query((a, b, out), num_groups, PlanOut { implementation, reason, buf, buf_len, len });
        /// `hipfp8_grouped_gemm_2d3d_plan` for `hipfp8_grouped_gemm_blockwise_2d3d` (its
        /// libraries: CUTLASS on sm_90, E4M3FN x E4M3FN, K % 128 == 0 and N % 128 == 0; CK on
        /// gfx942 / gfx950, the target's E4M3 x E4M3, the same rules plus K >= 384).
        fn hipfp8_grouped_gemm_blockwise_2d3d_plan(desc: hipfp8_grouped_gemm_blockwise_2d3d_desc) =
            plan_query((a, b, out), num_groups, PlanOut { implementation, reason, buf, buf_len, len });
        /// `hipfp8_grouped_gemm_2d3d_plan` for `hipfp8_grouped_gemm_blockwise_2d2d` (its library:
        /// CUTLASS on sm_90, E4M3FN x E4M3FN, mt % 16 == 0 and k % 8 == 0; groups starting off a
        /// 128-token boundary, and empty groups, run on the reference kernel inside the call;
        /// no CK instance: on gfx942 / gfx950 the reference kernel runs, reason NO_LIBRARY).
        fn hipfp8_grouped_gemm_blockwise_2d2d_plan(desc: hipfp8_grouped_gemm_blockwise_2d2d_desc) =
            plan_query((a, b, out), num_groups, PlanOut { implementation, reason, buf, buf_len, len });
    }
}

/// A `hipfp8_gemm_backend` value as a [`GemmBackend`].
pub(crate) fn gemm_backend_of(v: u32) -> Option<GemmBackend> {
    hipfp8_gemm_backend::value(v)
}

fn gemm_backend(v: u32) -> Result<GemmBackend, FfiError> {
    gemm_backend_of(v).ok_or_else(|| {
        Error::InvalidEnum(format!(
            "backend = {v} is not a hipfp8_gemm_backend (AUTO = 0, REFERENCE = 1, LIBRARY = 2)"
        ))
        .into()
    })
}

fn gemm_params(a: u32, b: u32, backend: u32) -> Result<GemmParams, FfiError> {
    Ok(GemmParams::new(format_choice(a)?, format_choice(b)?).with_backend(gemm_backend(backend)?))
}

/// The size queries: `query` on the context for the formats and backend `f`.
fn workspace_query(
    func: &'static str,
    ctx: *const hipfp8_context,
    a_format: u32,
    b_format: u32,
    backend: u32,
    num_groups: usize,
    bytes: *mut usize,
    query: fn(&crate::Context, &GemmParams, usize) -> crate::error::Result<usize>,
) -> hipfp8_status {
    guard(func, || {
        let c = context::lookup(ctx)?;
        let p = gemm_params(a_format, b_format, backend)?;
        let out = args::out_param("bytes", bytes)?;
        out.write(query(&c, &p, num_groups)?);
        Ok(())
    })
}

c_fns! {
    (a_format: u32, b_format: u32, backend: u32, num_groups: usize, bytes: *mut usize) {
        /// Device bytes of workspace `hipfp8_grouped_gemm_2d3d` with `num_groups` groups needs on
        /// this context with these formats and backend; 0 when the reference kernel or the CPU
        /// runs. Pass at least that many bytes as `workspace`, or NULL to use the cached buffer.
        /// It knows no shape: a `hipfp8_grouped_gemm_2d2d` workspace is sized by
        /// `hipfp8_grouped_gemm_2d2d_workspace_size` (it adds the staging area).
        fn hipfp8_grouped_gemm_workspace_size = workspace_query(
            a_format, b_format, backend, num_groups, bytes,
            crate::Context::grouped_gemm_workspace_size
        );
        /// `hipfp8_grouped_gemm_workspace_size` for `hipfp8_grouped_gemm_blockwise_2d3d` and
        /// `hipfp8_grouped_gemm_blockwise_2d2d`.
        fn hipfp8_grouped_gemm_blockwise_workspace_size = workspace_query(
            a_format, b_format, backend, num_groups, bytes,
            crate::Context::grouped_gemm_blockwise_workspace_size
        );
    }
}

/// The size query of a grouped GEMM descriptor (its formats, backend and shape).
fn op_workspace_query<D: GemmDesc>(
    func: &'static str,
    ctx: *const hipfp8_context,
    desc: *const D,
    num_groups: usize,
    bytes: *mut usize,
) -> hipfp8_status {
    op_entry(func, ctx, desc, |c, d, _| {
        let p = d.params()?;
        let out = args::out_param("bytes", bytes)?;
        out.write(c.grouped_gemm_op_workspace_size(&p, d.op(), num_groups)?);
        Ok(())
    })
}

c_fns! {
    (num_groups: usize, bytes: *mut usize) {
        /// Device bytes of workspace `hipfp8_grouped_gemm_2d2d` with this descriptor (formats,
        /// backend, n, mt, k; its pointers are not read) and `num_groups` groups needs on this
        /// context: the library's per-group arguments plus, when the library takes the call
        /// and staging is on (HIPFP8_GG_STAGE), the staging area that lets groups start
        /// anywhere (about (n + k) * round_up(mt + 15 * num_groups, 16) bytes; docs/OPS.md
        /// "Any group start"); 0 when the reference kernel or the CPU runs. A caller workspace
        /// smaller than this is refused (OUTPUT_TOO_SMALL, nothing written): the implementation
        /// never depends on the workspace, so a call gives the same bits with it as with NULL.
        fn hipfp8_grouped_gemm_2d2d_workspace_size(desc: hipfp8_grouped_gemm_2d2d_desc) =
            op_workspace_query(num_groups, bytes);
    }
}

c_exports! {
    /// out (m, n) bf16 row-major = per group g (rows `[offs[g-1], offs[g])` of a, expert g of b):
    /// a_g @ b_g with `scale_a[row]` and `scale_b[g*n + col]`; rows past `offs[e-1]` untouched.
    /// a: m*k bytes; b: e*k*n bytes; offs: num_groups (== e) END offsets along m;
    /// scale_a: m; scale_b: e*n; out: m*n bf16 (as uint16_t bits, 2-byte aligned);
    /// workspace: NULL and 0, or device memory (256-byte aligned) of at least
    /// `hipfp8_grouped_gemm_workspace_size` bytes, unused by other work until this GEMM ran.
    fn hipfp8_grouped_gemm_2d3d(hipfp8_grouped_gemm_2d3d_desc) = gemm_call(grouped_gemm::GROUPED_GEMM_2D3D),
    /// out (num_groups, n, k) bf16 row-major: for group g (columns `[offs[g-1], offs[g])` of a,
    /// rows of b), `out[g] = a_g @ b_g` with `scale_a[g*n + row]` and `scale_b[g*k + col]`;
    /// empty groups give zeros. a: n*mt bytes; b: mt*k bytes; offs: num_groups END offsets along
    /// mt; scale_a: num_groups*n; scale_b: num_groups*k; out: num_groups*n*k bf16; workspace:
    /// NULL and 0, or device memory (256-byte aligned) of at least
    /// `hipfp8_grouped_gemm_2d2d_workspace_size` bytes (a smaller one is OUTPUT_TOO_SMALL),
    /// unused by other work until this GEMM ran. Groups may start anywhere: on the library
    /// path one kernel copies the groups off a 16-token boundary to 16-token starts in the
    /// workspace first (docs/OPS.md "Any group start"), bit for bit the padded layout's result.
    fn hipfp8_grouped_gemm_2d2d(hipfp8_grouped_gemm_2d2d_desc) = gemm_call(grouped_gemm::GROUPED_GEMM_2D2D),
    /// Blockwise-scaled (DeepSeek-V3 recipe) 2D x 3D grouped GEMM, f32 accumulation with the
    /// scales applied per K block of 128: for row i of group g (rows `[offs[g-1], offs[g])`),
    /// `out[i*n + j] = bf16(sum over kb = 0.. ceil(k/128)-1 of f32(sum_{k in block kb}
    /// a[i,k] b[g,j,k]) * scale_a[i*kb_n + kb] * scale_b[(g*nb_n + j/128)*kb_n + kb])`,
    /// kb_n = ceil(k/128), nb_n = ceil(n/128). Rows past `offs[e-1]` are untouched.
    /// a: m*k bytes, b: e*n*k bytes (`b[g*n*k + j*k + k_i]`, as for `hipfp8_grouped_gemm_2d3d`);
    /// offs: num_groups (== e) END offsets along m; scale_a: m*kb_n (1 / the scales
    /// `hipfp8_blockwise_1x128` writes for a); scale_b: e*nb_n*kb_n (per expert 1 / the scales
    /// `hipfp8_blockwise_128x128` writes for its (n, k) weight); out: m*n bf16; workspace: NULL
    /// and 0, or at least `hipfp8_grouped_gemm_blockwise_workspace_size` bytes (256-byte aligned).
    fn hipfp8_grouped_gemm_blockwise_2d3d(hipfp8_grouped_gemm_blockwise_2d3d_desc) = gemm_call(grouped_gemm::GROUPED_GEMM_BLOCKWISE_2D3D),
    /// Blockwise-scaled (DeepSeek-V3 recipe) 2D x 2D grouped GEMM (wgrad), f32 accumulation
    /// with the scales applied per 128-token block: for group g over tokens [lo, hi) =
    /// `[offs[g-1], offs[g])`, `out[g*n*k + i*k + j] = bf16(sum over the blocks q meeting
    /// [lo, hi) ascending of f32(sum_{t in [lo, hi) in block q} a[i*mt + t] b[j*mt + t]) *
    /// scale_a[q*n + i] * scale_b[q*k + j])`, mb = ceil(mt/128), blocks [128 q, 128 q + 128)
    /// at absolute token positions; an empty group gives zeros. a: n*mt bytes; b: mt*k bytes
    /// (`b[j*mt + t]`, as for `hipfp8_grouped_gemm_2d2d`); offs: num_groups END offsets along
    /// mt; scale_a: mb*n (block-major: 1 / the transpose of the scales `hipfp8_blockwise_1x128`
    /// writes for a); scale_b: mb*k (the same for b's (k, mt) storage); out: num_groups*n*k bf16;
    /// workspace as for
    /// `hipfp8_grouped_gemm_blockwise_2d3d`.
    fn hipfp8_grouped_gemm_blockwise_2d2d(hipfp8_grouped_gemm_blockwise_2d2d_desc) = gemm_call(grouped_gemm::GROUPED_GEMM_BLOCKWISE_2D2D):
        (a[a_len]: *const u8, b[b_len]: *const u8, offs[num_groups]: *const i32,
         scale_a[scale_a_len]: *const f32, scale_b[scale_b_len]: *const f32,
         out[out_len]: *mut u16; workspace[workspace_bytes]: *mut c_void);
}
