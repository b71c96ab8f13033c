//! The body every op method on [`Context`] shares once its shapes are known: validate the
//! views, resolve the output format, then run exactly one backend. An op method states only
//! what is its own (sizes, the reference function, the launcher and its SAFETY argument).
//!
//! - [`Context::dispatch`]: the backend switch. CPU: run the reference on host slices. GPU:
//!   nothing when the problem is empty, else refuse pointers that are not memory of this GPU,
//!   make it current and queue the launch.
//! - [`Context::cast_op`]: the scale-and-cast of one input `x` into FP8 `out` plus `scales`
//!   (optionally grouped by END offsets), the shape most ops of `quant.rs` and `mx.rs` have: the views are checked in the order x, out, scales, offs and reported to
//!   the GPU pointer check in the order x, offs, out, scales.

use std::ffi::c_void;

use crate::context::{BackendKind, Context};
use crate::error::Result;
use crate::format::Fp8Format;
use crate::params::CastParams;
use crate::runtime::check_status;
use crate::sys;
use crate::view::{Dst, HpSrc, Src, StreamRef};

/// The output format a cast's parameters resolve to on a context (the error, if any, is
/// reported after the views are checked).
pub(crate) trait ResolveFormat {
    fn resolve_format(&self, ctx: &Context) -> Result<Fp8Format>;
}

impl ResolveFormat for CastParams {
    fn resolve_format(&self, ctx: &Context) -> Result<Fp8Format> {
        Ok(ctx.resolve(self.format))
    }
}

/// The views of a scale-and-cast of one input: `x` (`len` elements) into FP8 `out` (`len`
/// bytes) and `scales` (`scales_len` elements), grouped by int32 END `offs` over `extent`
/// when given.
pub(crate) struct CastIo<'a, S> {
    x: HpSrc<'a>,
    out: Dst<'a, u8>,
    scales: Dst<'a, S>,
    len: usize,
    scales_len: usize,
    offs: Option<(Src<'a, i32>, usize)>,
    gpu_noop: bool,
}

impl<'a, S> CastIo<'a, S> {
    pub(crate) fn new(
        x: HpSrc<'a>,
        out: Dst<'a, u8>,
        scales: Dst<'a, S>,
        len: usize,
        scales_len: usize,
    ) -> Self {
        CastIo {
            x,
            out,
            scales,
            len,
            scales_len,
            offs: None,
            gpu_noop: false,
        }
    }

    /// Group by END offsets along a dimension of `extent` (checked on the host by the CPU
    /// backend only, see [`Context::check_offsets`]).
    pub(crate) fn grouped(self, offs: Src<'a, i32>, extent: usize) -> Self {
        CastIo {
            offs: Some((offs, extent)),
            ..self
        }
    }

    /// The GPU has nothing to launch when `empty` (the CPU reference still runs).
    pub(crate) fn gpu_noop_if(self, empty: bool) -> Self {
        CastIo {
            gpu_noop: empty,
            ..self
        }
    }
}

/// What a CPU reference returns: nothing, or a `Result` (the ones that allocate scratch, which
/// may fail with OUT_OF_MEMORY before anything is written).
pub(crate) trait CpuOutcome {
    fn into_result(self) -> Result<()>;
}

impl CpuOutcome for () {
    fn into_result(self) -> Result<()> {
        Ok(())
    }
}

impl CpuOutcome for Result<()> {
    fn into_result(self) -> Result<()> {
        self
    }
}

/// A cast's views as the CPU reference takes them (`offs` is empty when ungrouped).
pub(crate) struct CastHost<'a, S> {
    pub x: HpSrc<'a>,
    pub offs: &'a [i32],
    pub out: &'a mut [u8],
    pub scales: &'a mut [S],
}

/// A cast's views as a kernel launcher takes them (`offs` is null when ungrouped).
pub(crate) struct CastDev<S> {
    pub x: *const c_void,
    pub dtype: i32,
    pub offs: *const i32,
    pub out: *mut u8,
    pub scales: *mut S,
}

impl Context {
    /// Run an op whose views are validated and whose format is resolved: on the CPU `cpu`;
    /// on the GPU nothing when `gpu_noop` (nothing to launch), else check that every pointer
    /// of `ptrs` is memory of this GPU (the first bad one in this order is reported), make
    /// the GPU current and run `gpu`, which queues the launch on the op's stream.
    pub(crate) fn dispatch<R: CpuOutcome>(
        &self,
        gpu_noop: bool,
        ptrs: &[(&'static str, *const c_void)],
        cpu: impl FnOnce() -> R,
        gpu: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        match self.backend() {
            BackendKind::Cpu => cpu().into_result(),
            BackendKind::Gpu => {
                if gpu_noop {
                    return Ok(());
                }
                self.check_device_pointers(ptrs)?;
                let _dev = self.activate()?;
                gpu()
            }
        }
    }

    /// A scale-and-cast of one input (see [`CastIo`]): check x, out, scales and the offsets,
    /// resolve `p`'s format, then [`Context::dispatch`] to `cpu` (host slices) or `gpu`
    /// (launcher pointers).
    pub(crate) fn cast_op<'a, S, R: CpuOutcome>(
        &self,
        p: &impl ResolveFormat,
        io: CastIo<'a, S>,
        cpu: impl FnOnce(Fp8Format, CastHost<'a, S>) -> R,
        gpu: impl FnOnce(Fp8Format, CastDev<S>) -> Result<()>,
    ) -> Result<()> {
        let CastIo {
            x,
            mut out,
            mut scales,
            len,
            scales_len,
            offs,
            gpu_noop,
        } = io;
        self.check_hp("x", &x, len)?;
        self.check_dst("out", &mut out, len)?;
        self.check_dst("scales", &mut scales, scales_len)?;
        if let Some((offs, extent)) = &offs {
            self.check_offsets(offs, *extent)?;
        }
        let fmt = p.resolve_format(self)?;
        let (xp, dtype) = x.raw_parts();
        let dev = CastDev {
            x: xp,
            dtype,
            offs: offs.map_or(std::ptr::null(), |(o, _)| o.as_ptr()),
            out: out.as_mut_ptr(),
            scales: scales.as_mut_ptr(),
        };
        // A null `offs` (ungrouped) is skipped by the pointer check.
        let ptrs = [
            ("x", dev.x),
            ("offs", dev.offs as *const c_void),
            ("out", dev.out as *const c_void),
            ("scales", dev.scales as *const c_void),
        ];
        self.dispatch(
            gpu_noop,
            &ptrs,
            || {
                let host = CastHost {
                    x,
                    offs: offs.map_or(&[], |(o, _)| o.host_slice()),
                    out: out.host_slice_mut(),
                    scales: scales.host_slice_mut(),
                };
                cpu(fmt, host)
            },
            || gpu(fmt, dev),
        )
    }
}

impl Context {
    /// Run `f` with the zeroed scratch per_group_rowwise / rowwise_2d_padded need for
    /// `groups` groups (`hipfp8_grouped_scratch_bytes`): null without touching the workspace
    /// when they need none (up to 2048 groups), else the context workspace.
    pub(crate) fn with_grouped_scratch<R>(
        &self,
        groups: usize,
        stream: StreamRef,
        f: impl FnOnce(*mut c_void) -> Result<R>,
    ) -> Result<R> {
        let mut bytes = 0u64;
        // SAFETY: plain arithmetic on the argument, writes the out-pointer only.
        check_status("grouped scratch size", unsafe {
            sys::hipfp8_grouped_scratch_bytes(groups as i64, &mut bytes)
        })?;
        if bytes == 0 {
            return f(std::ptr::null_mut());
        }
        self.workspace.with(self, bytes as usize, stream, f)
    }

    /// Run `f` with the zeroed workspace sized for the column-reducing casts
    /// (per_group_colwise(_dual), rowwise_3d_transpose_rhs) of `groups` groups and row
    /// lengths `k1`, `k2` (0 when single).
    pub(crate) fn with_colwise_workspace<R>(
        &self,
        groups: usize,
        k1: usize,
        k2: usize,
        stream: StreamRef,
        f: impl FnOnce(*mut c_void) -> Result<R>,
    ) -> Result<R> {
        let mut bytes = 0u64;
        // SAFETY: plain arithmetic on the arguments, writes the out-pointer only.
        check_status("colwise workspace size", unsafe {
            sys::hipfp8_colwise_workspace_bytes(groups as i64, k1 as i64, k2 as i64, &mut bytes)
        })?;
        self.workspace.with(self, bytes as usize, stream, f)
    }
}
