//! MXFP8 casts on [`Context`]: 32-element blocks with E8M0 power-of-two scales (OCP MX v1.0),
//! torchao `to_mx` semantics. The exact rule is written in [`crate::reference::mx`].

use crate::context::Context;
use crate::dispatch::{CastIo, ResolveFormat};
use crate::error::{Error, Result};
use crate::format::Fp8Format;
use crate::reference;
use crate::runtime::check_status;
use crate::validate::checked_mul;
use crate::view::{Dst, HpSrc, StreamRef, with_hp};

pub use crate::params::{MxParams, MxRounding};

impl ResolveFormat for MxParams {
    fn resolve_format(&self, ctx: &Context) -> Result<Fp8Format> {
        ctx.mx_format(self)
    }
}

impl Context {
    pub(crate) fn mx_format(&self, p: &MxParams) -> Result<Fp8Format> {
        let fmt = self.resolve(p.format);
        if fmt.is_fnuz() {
            return Err(Error::UnsupportedFormat(format!(
                "MXFP8 elements must be e4m3fn or e5m2 (OCP); got {fmt}"
            )));
        }
        Ok(fmt)
    }

    /// MXFP8 along dim 0's rows: blocks of 32 consecutive elements of a row of the (M,K)
    /// row-major `x`; `out` (M,K) row-major, E8M0 `scales` (M, ceil(K/32)) row-major.
    pub fn mxfp8_dim0(
        &self,
        p: &MxParams,
        m: usize,
        k: usize,
        x: HpSrc<'_>,
        out: Dst<'_, u8>,
        scales: Dst<'_, u8>,
        stream: StreamRef,
    ) -> Result<()> {
        self.mxfp8(false, p, m, k, x, out, scales, stream)
    }

    /// MXFP8 along dim 1: blocks of 32 consecutive rows of one column of the (M,K) row-major
    /// `x`; `out` (K,M) row-major (= column-major (M,K)), E8M0 `scales` (K, ceil(M/32))
    /// row-major.
    pub fn mxfp8_dim1(
        &self,
        p: &MxParams,
        m: usize,
        k: usize,
        x: HpSrc<'_>,
        out: Dst<'_, u8>,
        scales: Dst<'_, u8>,
        stream: StreamRef,
    ) -> Result<()> {
        self.mxfp8(true, p, m, k, x, out, scales, stream)
    }

    /// Both MXFP8 directions: they differ only in the scale count, the reference function and
    /// the launcher.
    #[allow(clippy::too_many_arguments)]
    fn mxfp8(
        &self,
        dim1: bool,
        p: &MxParams,
        m: usize,
        k: usize,
        x: HpSrc<'_>,
        out: Dst<'_, u8>,
        scales: Dst<'_, u8>,
        stream: StreamRef,
    ) -> Result<()> {
        let mk = checked_mul("m*k", m, k)?;
        let ns = if dim1 {
            checked_mul("k*ceil(m/32)", k, m.div_ceil(32))?
        } else {
            checked_mul("m*ceil(k/32)", m, k.div_ceil(32))?
        };
        let io = CastIo::new(x, out, scales, mk, ns).gpu_noop_if(mk == 0);
        self.cast_op(
            p,
            io,
            |fmt, h| {
                with_hp!(h.x, |x| if dim1 {
                    reference::mx::mxfp8_dim1(fmt, p.rounding, m, k, x, h.out, h.scales)
                } else {
                    reference::mx::mxfp8_dim0(fmt, p.rounding, m, k, x, h.out, h.scales)
                })
            },
            |fmt, d| {
                let (x, o, sc, mm, kk, f, r, dt) = (
                    d.x,
                    d.out,
                    d.scales,
                    m as i64,
                    k as i64,
                    fmt as i32,
                    p.rounding as i32,
                    d.dtype,
                );
                // SAFETY: validated by cast_op: device memory of this GPU with m*k inputs and output bytes and the E8M0 scales of every 32-block (`ns`); the launchers only queue work on `stream`.
                let st = unsafe {
                    if dim1 {
                        crate::sys::hipfp8_mxfp8_dim1_launch(x, o, sc, mm, kk, f, r, dt, stream.0)
                    } else {
                        crate::sys::hipfp8_mxfp8_dim0_launch(x, o, sc, mm, kk, f, r, dt, stream.0)
                    }
                };
                check_status(if dim1 { "mxfp8_dim1" } else { "mxfp8_dim0" }, st)
            },
        )
    }
}
