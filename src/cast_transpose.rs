//! Cast-transpose on [`Context`]: the row-major FP8 copy and its transpose from one call
//! (dense FP8 training needs x for the forward GEMM and x^T for a backward GEMM).

use crate::context::Context;
use crate::dispatch::{BufDecl, Elem, GpuRun, OpDecl, len_mk, len_one, never_noop, op_methods};
use crate::params::CastParams;
use crate::reference::{self, Dual, Rule, Scaled};
use crate::runtime::check_status;
use crate::sys;
use crate::validate::require_no_pow2;
use crate::view::{Dst, HpSrc, Src, with_hp};
use crate::workspace::Kind;

pub use crate::params::Scaling;

#[doc(hidden)]
pub static CAST_TRANSPOSE: OpDecl<CastParams, (usize, usize, Scaling)> = OpDecl {
    c_name: "hipfp8_cast_transpose",
    bufs: &[
        BufDecl::hp("x", |&(m, k, _), g| len_mk(&(m, k), g)),
        BufDecl::output("out", Elem::U8, |&(m, k, _), g| len_mk(&(m, k), g)),
        BufDecl::output("out_t", Elem::U8, |&(m, k, _), g| len_mk(&(m, k), g)),
        BufDecl::output("scales", Elem::F32, |&(m, _, s), _| {
            Ok(if s == Scaling::Rowwise { m } else { 1 })
        }),
        BufDecl::output("scales_t", Elem::F32, |&(_, k, s), _| {
            Ok(if s == Scaling::Rowwise { k } else { 1 })
        }),
    ],
    nonzero: &[("k", |s| s.1)],
    check: None,
    gpu_run: GpuRun::Checked { noop: never_noop },
    cpu: |p, fmt, &(m, k, scaling), h| {
        let rows = Scaled::new(h.dst("out"), h.dst("scales"));
        let cols = Scaled::new(h.dst("out_t"), h.dst("scales_t"));
        let rule = Rule::new(fmt, p.pow2_scales);
        with_hp!(h.hp("x"), |x| reference::cast_transpose::cast_transpose(
            rule,
            scaling,
            (m, k),
            x,
            Dual { rows, cols }
        ))
    },
    gpu: |ctx, p, fmt, &(m, k, scaling), d, stream| {
        let bytes = ctx.cast_transpose_workspace_size(m, k, scaling)?;
        ctx.workspace
            .with(ctx, Kind::Zeroed, bytes, stream, |ws, _| {
                // SAFETY: validated by Context::run: device memory of this GPU with m*k inputs, m*k
                // bytes for each output and the scales of `scaling`; `ws` is the context's zeroed
                // workspace of the size asked for, which the launch leaves zeroed; work is only
                // queued on `stream`.
                let st = unsafe {
                    sys::hipfp8_cast_transpose_launch(
                        d.ptr("x"),
                        d.ptr("out"),
                        d.ptr("out_t"),
                        d.ptr("scales"),
                        d.ptr("scales_t"),
                        m as i64,
                        k as i64,
                        scaling as i32,
                        fmt as i32,
                        p.pow2_scales as i32,
                        d.dtype("x"),
                        ws,
                        stream.0,
                    )
                };
                check_status("cast_transpose", st)
            })
    },
};

#[doc(hidden)]
pub static CAST_TRANSPOSE_SCALED: OpDecl<CastParams, (usize, usize)> = OpDecl {
    c_name: "hipfp8_cast_transpose_scaled",
    bufs: &[
        BufDecl::hp("x", len_mk),
        BufDecl::input("scale", Elem::F32, len_one),
        BufDecl::output("out", Elem::U8, len_mk),
        BufDecl::output("out_t", Elem::U8, len_mk),
        BufDecl::output("amax", Elem::F32, len_one),
    ],
    nonzero: &[("k", |s| s.1)],
    check: Some(|p, _, _| require_no_pow2(p)),
    gpu_run: GpuRun::Checked { noop: never_noop },
    cpu: |_, fmt, &(m, k), h| {
        let sc = h.src::<f32>("scale")[0];
        let (o, ot, a) = (h.dst("out"), h.dst("out_t"), h.dst::<f32>("amax"));
        a[0] = with_hp!(h.hp("x"), |x| {
            reference::cast_transpose::cast_transpose_scaled(fmt, sc, m, k, x, o, ot)
        });
        Ok(())
    },
    gpu: |_, _, fmt, &(m, k), d, stream| {
        // SAFETY: validated by Context::run: device memory of this GPU with m*k inputs, one
        // scale, m*k bytes for each output and one amax; work is only queued on `stream`.
        let st = unsafe {
            sys::hipfp8_cast_transpose_scaled_launch(
                d.ptr("x"),
                d.ptr("scale"),
                d.ptr("out"),
                d.ptr("out_t"),
                d.ptr("amax"),
                m as i64,
                k as i64,
                fmt as i32,
                d.dtype("x"),
                stream.0,
            )
        };
        check_status("cast_transpose_scaled", st)
    },
};

impl Context {}

op_methods! {
    /// Cast an (M,K) row-major matrix to FP8 in both layouts: `out` (M,K) row-major and
    /// `out_t` (K,M) row-major (`out_t[k*M + m]`), scaled per [`Scaling`]. Tensorwise writes
    /// one scale to each of `scales` and `scales_t`; rowwise writes M and K scales.
    fn cast_transpose(p: &CastParams, scaling: Scaling, m: usize, k: usize;
        x: HpSrc<'_>, out: Dst<'_, u8>, out_t: Dst<'_, u8>, scales: Dst<'_, f32>, scales_t: Dst<'_,
        f32>) = CAST_TRANSPOSE (m, k, scaling);

    /// [`Context::cast_transpose`] with a scale the caller already has (delayed scaling, as
    /// Transformer Engine's recipe): `out` and `out_t` both hold `encode(x * scale[0])`, and
    /// `amax[0] = max |x|` for the amax history. ONE read of x and one kernel on the GPU (the
    /// exact-amax op needs a second read: the scale of every element depends on all of x).
    /// The scale is read on the device (no host sync) and used as is; `p.pow2_scales` must be
    /// false.
    fn cast_transpose_scaled(p: &CastParams, m: usize, k: usize;
        x: HpSrc<'_>, scale: Src<'_, f32>, out: Dst<'_, u8>, out_t: Dst<'_, u8>, amax: Dst<'_,
        f32>) = CAST_TRANSPOSE_SCALED (m, k);
}
