//! Cast-transpose on [`Context`]: the row-major FP8 copy and its transpose from one call
//! (dense FP8 training needs x for the forward GEMM and x^T for a backward GEMM).

use crate::context::Context;
use crate::error::Result;
use crate::params::CastParams;
use crate::reference;
use crate::runtime::check_status;
use crate::validate::{checked_mul, require_no_pow2, require_nonzero};
use crate::view::{Dst, HpSrc, Src, StreamRef, with_hp};

pub use crate::params::Scaling;

impl Context {
    /// Cast an (M,K) row-major matrix to FP8 in both layouts: `out` (M,K) row-major and
    /// `out_t` (K,M) row-major (`out_t[k*M + m]`), scaled per [`Scaling`]. Tensorwise writes
    /// one scale to each of `scales` and `scales_t`; rowwise writes M and K scales.
    pub fn cast_transpose(
        &self,
        p: &CastParams,
        scaling: Scaling,
        m: usize,
        k: usize,
        x: HpSrc<'_>,
        mut out: Dst<'_, u8>,
        mut out_t: Dst<'_, u8>,
        mut scales: Dst<'_, f32>,
        mut scales_t: Dst<'_, f32>,
        stream: StreamRef,
    ) -> Result<()> {
        let mk = checked_mul("m*k", m, k)?;
        require_nonzero("k", k)?;
        let (ns, ns_t) = match scaling {
            Scaling::Tensorwise => (1, 1),
            Scaling::Rowwise => (m, k),
        };
        self.check_hp("x", &x, mk)?;
        self.check_dst("out", &mut out, mk)?;
        self.check_dst("out_t", &mut out_t, mk)?;
        self.check_dst("scales", &mut scales, ns)?;
        self.check_dst("scales_t", &mut scales_t, ns_t)?;
        let fmt = self.resolve(p.format);
        let (xp, dtype) = x.raw_parts();
        let (op, otp) = (out.as_mut_ptr(), out_t.as_mut_ptr());
        let (sp, stp) = (scales.as_mut_ptr(), scales_t.as_mut_ptr());
        let ptrs = [
            ("x", xp),
            ("out", op as *const _),
            ("out_t", otp as *const _),
            ("scales", sp as *const _),
            ("scales_t", stp as *const _),
        ];
        self.dispatch(
            false,
            &ptrs,
            || {
                let (o, ot) = (out.host_slice_mut(), out_t.host_slice_mut());
                let (s, st) = (scales.host_slice_mut(), scales_t.host_slice_mut());
                let pw = p.pow2_scales;
                with_hp!(x, |x| reference::cast_transpose::cast_transpose(
                    fmt, pw, scaling, m, k, x, o, ot, s, st
                ))
            },
            || {
                let mut bytes = 0u64;
                // SAFETY: arithmetic on the arguments; writes the out-pointer only.
                check_status("cast_transpose workspace size", unsafe {
                    crate::sys::hipfp8_cast_transpose_workspace_bytes(
                        m as i64,
                        k as i64,
                        scaling as i32,
                        &mut bytes,
                    )
                })?;
                self.workspace.with(self, bytes as usize, stream, |ws| {
                    // SAFETY: validated above: device memory of this GPU with m*k inputs, m*k
                    // bytes for each output and the scales of `scaling`; `ws` is the context's
                    // zeroed workspace of the size asked for, which the launch leaves zeroed;
                    // work is only queued on `stream`.
                    let st = unsafe {
                        crate::sys::hipfp8_cast_transpose_launch(
                            xp,
                            op,
                            otp,
                            sp,
                            stp,
                            m as i64,
                            k as i64,
                            scaling as i32,
                            fmt as i32,
                            p.pow2_scales as i32,
                            dtype,
                            ws,
                            stream.0,
                        )
                    };
                    check_status("cast_transpose", st)
                })
            },
        )
    }

    /// [`Context::cast_transpose`] with a scale the caller already has (delayed scaling, as
    /// Transformer Engine's recipe): `out` and `out_t` both hold `encode(x * scale[0])`, and
    /// `amax[0] = max |x|` for the amax history. ONE read of x and one kernel on the GPU (the
    /// exact-amax op needs a second read: the scale of every element depends on all of x).
    /// The scale is read on the device (no host sync) and used as is; `p.pow2_scales` must be
    /// false.
    pub fn cast_transpose_scaled(
        &self,
        p: &CastParams,
        m: usize,
        k: usize,
        x: HpSrc<'_>,
        scale: Src<'_, f32>,
        mut out: Dst<'_, u8>,
        mut out_t: Dst<'_, u8>,
        mut amax: Dst<'_, f32>,
        stream: StreamRef,
    ) -> Result<()> {
        require_no_pow2(p)?;
        let mk = checked_mul("m*k", m, k)?;
        require_nonzero("k", k)?;
        self.check_hp("x", &x, mk)?;
        self.check_src("scale", &scale, 1)?;
        self.check_dst("out", &mut out, mk)?;
        self.check_dst("out_t", &mut out_t, mk)?;
        self.check_dst("amax", &mut amax, 1)?;
        let fmt = self.resolve(p.format);
        let (xp, dtype) = x.raw_parts();
        let scp = scale.as_ptr();
        let (op, otp, ap) = (out.as_mut_ptr(), out_t.as_mut_ptr(), amax.as_mut_ptr());
        let ptrs = [
            ("x", xp),
            ("scale", scp as *const _),
            ("out", op as *const _),
            ("out_t", otp as *const _),
            ("amax", ap as *const _),
        ];
        self.dispatch(
            false,
            &ptrs,
            || {
                let sc = scale.host_slice()[0];
                let (o, ot) = (out.host_slice_mut(), out_t.host_slice_mut());
                let a = amax.host_slice_mut();
                a[0] = with_hp!(x, |x| reference::cast_transpose::cast_transpose_scaled(
                    fmt, sc, m, k, x, o, ot
                ));
            },
            || {
                // SAFETY: validated above: device memory of this GPU with m*k inputs, one
                // scale, m*k bytes for each output and one amax; work is only queued on
                // `stream`.
                let st = unsafe {
                    crate::sys::hipfp8_cast_transpose_scaled_launch(
                        xp, scp, op, otp, ap, m as i64, k as i64, fmt as i32, dtype, stream.0,
                    )
                };
                check_status("cast_transpose_scaled", st)
            },
        )
    }
}
