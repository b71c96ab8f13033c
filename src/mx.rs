//! MXFP8 casts on [`Context`]: 32-element blocks with E8M0 power-of-two scales (OCP MX v1.0),
//! torchao `to_mx` semantics. The exact rule is written in [`crate::reference::mx`].

use crate::context::Context;
use crate::dispatch::{
    BufDecl, Elem, GpuRun, LenFn, OpDecl, OpParams, cast_cpu, empty_mk, launch_cast, len_mk,
    op_methods,
};
use crate::error::{Error, Result};
use crate::format::Fp8Format;
use crate::reference;
use crate::reference::mx::MxRule;
use crate::sys;
use crate::validate::checked_mul;
use crate::view::{Dst, HpSrc};

pub use crate::params::{MxParams, MxRounding};

impl OpParams for MxParams {
    type Resolved = Fp8Format;
    fn resolve_on(&self, ctx: &Context) -> Result<Fp8Format> {
        ctx.mx_format(self)
    }
}

/// An MXFP8 direction (dim 1 when `dim1`): x (m, k), FP8 `out` (m*k bytes), E8M0 `scales`
/// (`scales` of the shape).
const fn mx_decl(
    c_name: &'static str,
    bufs: &'static [BufDecl<(usize, usize)>],
    dim1: bool,
) -> OpDecl<MxParams, (usize, usize)> {
    OpDecl {
        c_name,
        bufs,
        nonzero: &[],
        check: None,
        gpu_run: GpuRun::Checked { noop: empty_mk },
        cpu: if dim1 {
            cast_cpu!(reference::mx::mxfp8_dim1, MxRule::new, rounding)
        } else {
            cast_cpu!(reference::mx::mxfp8_dim0, MxRule::new, rounding)
        },
        gpu: if dim1 {
            |_, p, fmt, &s, d, st| {
                let (op, r) = ("mxfp8_dim1", p.rounding);
                launch_cast!(sys::hipfp8_mxfp8_dim1_launch, op, r, fmt, s, d, st)
            }
        } else {
            |_, p, fmt, &s, d, st| {
                let (op, r) = ("mxfp8_dim0", p.rounding);
                launch_cast!(sys::hipfp8_mxfp8_dim0_launch, op, r, fmt, s, d, st)
            }
        },
    }
}

/// The buffers of an MXFP8 direction: x and `out` (m*k), E8M0 `scales` (`scales` of the shape).
const fn mx_bufs(scales: LenFn<(usize, usize)>) -> [BufDecl<(usize, usize)>; 3] {
    [
        BufDecl::hp("x", len_mk),
        BufDecl::output("out", Elem::U8, len_mk),
        BufDecl::output("scales", Elem::U8, scales),
    ]
}

#[doc(hidden)]
pub static MXFP8_DIM0: OpDecl<MxParams, (usize, usize)> = mx_decl(
    "hipfp8_mxfp8_dim0",
    &mx_bufs(|&(m, k), _| checked_mul("m*ceil(k/32)", m, k.div_ceil(32))),
    false,
);

#[doc(hidden)]
pub static MXFP8_DIM1: OpDecl<MxParams, (usize, usize)> = mx_decl(
    "hipfp8_mxfp8_dim1",
    &mx_bufs(|&(m, k), _| checked_mul("k*ceil(m/32)", k, m.div_ceil(32))),
    true,
);

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
}

op_methods! {
    /// MXFP8 along dim 0's rows: blocks of 32 consecutive elements of a row of the (M,K)
    /// row-major `x`; `out` (M,K) row-major, E8M0 `scales` (M, ceil(K/32)) row-major.
    fn mxfp8_dim0(p: &MxParams, m: usize, k: usize;
        x: HpSrc<'_>, out: Dst<'_, u8>, scales: Dst<'_, u8>) = MXFP8_DIM0 (m, k);

    /// MXFP8 along dim 1: blocks of 32 consecutive rows of one column of the (M,K) row-major
    /// `x`; `out` (K,M) row-major (= column-major (M,K)), E8M0 `scales` (K, ceil(M/32))
    /// row-major.
    fn mxfp8_dim1(p: &MxParams, m: usize, k: usize;
        x: HpSrc<'_>, out: Dst<'_, u8>, scales: Dst<'_, u8>) = MXFP8_DIM1 (m, k);
}
