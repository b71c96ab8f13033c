//! The GPU arms of the FP8 grouped GEMMs (`Context::grouped_gemm_2d3d` / `_2d2d`): which
//! implementation runs, the device workspace it needs, and the one launch.
//!
//! Implementations ([`GemmImpl`]):
//! * CUTLASS (NVIDIA sm_90, `hip/grouped_gemm/cutlass/sm90.hip`): E4M3FN x E4M3FN; K % 16,
//!   N % 8 (2D x 3D), Mt % 16, K % 8 (2D x 2D), 16-byte aligned operands.
//! * Composable Kernel (`hip/grouped_gemm/ck/gfx942.hip`, `gfx950.hip`): E4M3 in the target's
//!   native flavour only (FNUZ on gfx942, OCP on gfx950), same shape rules as CUTLASS.
//! * The portable reference kernel (`hip/grouped_gemm/reference.hip`): every format pair and
//!   shape, on every vendor; the GPU oracle.
//!
//! [`GemmBackend::Auto`] takes the vendor library when this build has it, the device is its
//! target and the format pair is the one it was instantiated for; when the library then
//! reports the problem unsupported (shape/alignment rules, checked before anything is
//! written) the reference kernel runs instead. [`GemmBackend::Library`] never falls back (an
//! unsupported problem is an error: tests use it to be sure the library ran);
//! [`GemmBackend::Reference`] always takes the reference kernel. The environment variable
//! `HIPFP8_GROUPED_GEMM_BACKEND` (auto / reference / library) overrides `Auto`.
//!
//! Offsets stay on the device: the libraries' per-group arguments are built by a small kernel
//! from them, and in 2D x 2D a group a library cannot take (empty, or starting off a 16-byte
//! boundary) is routed to the reference kernel on the device too. Nothing here reads device
//! memory back or synchronises the stream.
//!
//! Workspace: the libraries need device memory for the per-group argument arrays (and CUTLASS
//! for its TMA descriptors). Callers may pass their own (`*_with_workspace`, sized by
//! [`Context::grouped_gemm_workspace_size`]). Otherwise the stream's cached buffer of the
//! context is used (src/workspace.rs: one per stream, so reuse is ordered by the stream itself,
//! no events, no host synchronisation except when it grows; graph capture works once warm).

use std::ffi::c_void;

use half::bf16;

use crate::context::{BackendKind, Context};
use crate::error::{Error, Result};
use crate::format::Fp8Format;
use crate::grouped_gemm::params::{GemmBackend, GemmImpl, GemmParams};
use crate::knobs::host_var;
use crate::runtime::{base_arch, built_backend, check_status, has_launcher};
use crate::sys;
use crate::view::StreamRef;
use crate::workspace::Kind;

/// The two ops with their extents (docs/OPS.md).
#[derive(Clone, Copy, Debug)]
pub(crate) enum GroupedOp {
    /// a (m,k), b (e,k,n) column-major, out (m,n).
    TwoD3D { m: usize, n: usize, k: usize },
    /// a (n,mt), b (mt,k) column-major, out (g,n,k).
    TwoD2D { n: usize, mt: usize, k: usize },
}

/// Device pointers of one call (validated by the caller).
pub(crate) struct GroupedArgs {
    pub a: *const u8,
    pub b: *const u8,
    pub offs: *const i32,
    pub groups: usize,
    pub sa: *const f32,
    pub sb: *const f32,
    pub out: *mut bf16,
    pub fa: Fp8Format,
    pub fb: Fp8Format,
}

/// The vendor library that could run `fa x fb` on this context's device, if this build has it.
pub fn library_impl(ctx: &Context, fa: Fp8Format, fb: Fp8Format) -> Option<GemmImpl> {
    let arch = base_arch(ctx.arch()).to_ascii_lowercase();
    let (imp, fmt, launcher) = match arch.as_str() {
        "sm_90" => (
            GemmImpl::CutlassSm90,
            Fp8Format::E4M3Fn,
            "hipfp8_gg_cutlass_2d3d",
        ),
        "gfx942" => (
            GemmImpl::CkGfx942,
            Fp8Format::E4M3FnUz,
            "hipfp8_gg_ck_gfx942_2d3d",
        ),
        "gfx950" => (
            GemmImpl::CkGfx950,
            Fp8Format::E4M3Fn,
            "hipfp8_gg_ck_gfx950_2d3d",
        ),
        _ => return None,
    };
    (fa == fmt && fb == fmt && has_launcher(launcher)).then_some(imp)
}

fn workspace_bytes(imp: GemmImpl, groups: usize) -> Result<usize> {
    let g = i32::try_from(groups)
        .map_err(|_| Error::SizeOverflow(format!("{groups} groups do not fit an i32")))?;
    let mut bytes = 0u64;
    // SAFETY: `bytes` is valid for one write; the functions only compute a size.
    let st = unsafe {
        match imp {
            GemmImpl::Reference => return Ok(0),
            GemmImpl::CutlassSm90 => sys::hipfp8_gg_cutlass_workspace_size(g, &mut bytes),
            GemmImpl::CkGfx942 => sys::hipfp8_gg_ck_gfx942_workspace_size(g, &mut bytes),
            GemmImpl::CkGfx950 => sys::hipfp8_gg_ck_gfx950_workspace_size(g, &mut bytes),
        }
    };
    check_status("grouped GEMM workspace size", st)?;
    usize::try_from(bytes).map_err(|_| Error::SizeOverflow("workspace size".into()))
}

impl Context {
    /// Device bytes a grouped GEMM with `groups` groups needs as workspace under `p` on this
    /// context (0 for the reference kernel and for the CPU backend).
    pub fn grouped_gemm_workspace_size(&self, p: &GemmParams, groups: usize) -> Result<usize> {
        if self.backend() == BackendKind::Cpu || p.backend == GemmBackend::Reference {
            return Ok(0);
        }
        let (fa, fb) = (self.resolve(p.a_format), self.resolve(p.b_format));
        match library_impl(self, fa, fb) {
            Some(imp) => {
                let _dev = self.activate()?;
                workspace_bytes(imp, groups)
            }
            None => Ok(0),
        }
    }
}

/// Run one grouped GEMM on the GPU, views already validated by the op (sizes, locations).
/// Returns the implementation that produced the output.
pub(crate) fn run(
    ctx: &Context,
    p: &GemmParams,
    op: GroupedOp,
    args: &GroupedArgs,
    stream: StreamRef,
) -> Result<GemmImpl> {
    let groups = i32::try_from(args.groups)
        .map_err(|_| Error::SizeOverflow(format!("{} groups do not fit an i32", args.groups)))?;
    let backend = match p.backend {
        GemmBackend::Auto => backend_from_env()?.unwrap_or(GemmBackend::Auto),
        b => b,
    };
    let lib = match backend {
        GemmBackend::Reference => None,
        GemmBackend::Auto | GemmBackend::Library => library_impl(ctx, args.fa, args.fb),
    };
    if backend == GemmBackend::Library && lib.is_none() {
        return Err(Error::NotSupported(format!(
            "no grouped-GEMM library for {} x {} on {} in this build (backend {})",
            args.fa,
            args.fb,
            ctx.arch(),
            built_backend()
        )));
    }
    let empty = match op {
        GroupedOp::TwoD3D { m, n, .. } => m == 0 || n == 0 || args.groups == 0,
        GroupedOp::TwoD2D { n, k, .. } => n == 0 || k == 0 || args.groups == 0,
    };
    if empty {
        return Ok(lib.unwrap_or(GemmImpl::Reference));
    }
    ctx.check_device_pointers(&[
        ("a", args.a as *const c_void),
        ("b", args.b as *const c_void),
        ("offs", args.offs as *const c_void),
        ("scale_a", args.sa as *const c_void),
        ("scale_b", args.sb as *const c_void),
        ("out", args.out as *const c_void),
    ])?;
    let _dev = ctx.activate()?;
    if let Some(imp) = lib {
        let st = match p.workspace {
            Some(ws) => {
                let need = workspace_bytes(imp, args.groups)?;
                if ws.len() < need {
                    return Err(Error::OutputTooSmall {
                        what: "workspace",
                        needed: need,
                        got: ws.len(),
                    });
                }
                ctx.check_device_pointers(&[("workspace", ws.as_ptr() as *const c_void)])?;
                launch_library(
                    imp,
                    op,
                    args,
                    groups,
                    ws.as_ptr() as *mut u8,
                    ws.len(),
                    stream,
                )
            }
            None => with_cached_workspace(ctx, imp, args.groups, stream, |ptr, len| {
                launch_library(imp, op, args, groups, ptr, len, stream)
            })?,
        };
        match st {
            // Checked before anything was written: the reference kernel takes over.
            sys::KSTATUS_UNSUPPORTED if backend == GemmBackend::Auto => {}
            _ => return check_status(imp.name(), st).map(|_| imp),
        }
    }
    let st = launch_reference(op, args, groups, stream);
    check_status("grouped GEMM reference kernel", st).map(|_| GemmImpl::Reference)
}

/// `HIPFP8_GROUPED_GEMM_BACKEND` = `auto` | `reference` | `library` overrides
/// [`GemmBackend::Auto`] (for benchmarks and debugging through the C ABI, which has no
/// backend argument). Read on every call (a few hundred ns), so a process can switch.
fn backend_from_env() -> Result<Option<GemmBackend>> {
    match host_var("HIPFP8_GROUPED_GEMM_BACKEND") {
        None => Ok(None),
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(None),
            "reference" => Ok(Some(GemmBackend::Reference)),
            "library" => Ok(Some(GemmBackend::Library)),
            other => Err(Error::InvalidEnum(format!(
                "HIPFP8_GROUPED_GEMM_BACKEND={other:?} (auto, reference or library)"
            ))),
        },
    }
}

/// Hand `stream`'s plain workspace of the context (grown to the size `imp` needs, see
/// src/workspace.rs: per stream, no events, capture-safe once warm) to `f`.
fn with_cached_workspace(
    ctx: &Context,
    imp: GemmImpl,
    groups: usize,
    stream: StreamRef,
    f: impl FnOnce(*mut u8, usize) -> i32,
) -> Result<i32> {
    let need = workspace_bytes(imp, groups)?.max(1);
    ctx.workspace
        .with(ctx, Kind::Plain, need, stream, |p, len| {
            Ok(f(p as *mut u8, len))
        })
}

/// `HIPFP8_CUTLASS_CONFIG` = `auto` (0) | `cooperative` (1) | `pingpong` (2): which CUTLASS
/// instance runs (benchmarks). Unknown values mean auto.
fn cutlass_config() -> i32 {
    match host_var("HIPFP8_CUTLASS_CONFIG").unwrap_or_default().trim() {
        "1" | "cooperative" => 1,
        "2" | "pingpong" => 2,
        _ => 0,
    }
}

fn launch_library(
    imp: GemmImpl,
    op: GroupedOp,
    a: &GroupedArgs,
    groups: i32,
    ws: *mut u8,
    ws_len: usize,
    stream: StreamRef,
) -> i32 {
    let (fa, fb) = (a.fa as i32, a.fb as i32);
    let (out, ws, wsl, s) = (
        a.out as *mut c_void,
        ws as *mut c_void,
        ws_len as u64,
        stream.0,
    );
    let cfg = if imp == GemmImpl::CutlassSm90 {
        cutlass_config()
    } else {
        0
    };
    // SAFETY: the caller validated every view (device memory of this context's GPU, sizes
    // for the op's extents); `ws` holds `ws_len` device bytes not used by other queued work
    // (own buffer, or the cache ordered by its event). Launchers only queue work on `s`.
    unsafe {
        match (imp, op) {
            (GemmImpl::CutlassSm90, GroupedOp::TwoD3D { m, n, k }) => sys::hipfp8_gg_cutlass_2d3d(
                a.a, fa, a.b, fb, a.offs, groups, a.sa, a.sb, out, m as i64, n as i64, k as i64,
                ws, wsl, cfg, s,
            ),
            (GemmImpl::CutlassSm90, GroupedOp::TwoD2D { n, mt, k }) => sys::hipfp8_gg_cutlass_2d2d(
                a.a, fa, a.b, fb, a.offs, groups, a.sa, a.sb, out, n as i64, mt as i64, k as i64,
                ws, wsl, cfg, s,
            ),
            (GemmImpl::CkGfx942, GroupedOp::TwoD3D { m, n, k }) => sys::hipfp8_gg_ck_gfx942_2d3d(
                a.a, fa, a.b, fb, a.offs, groups, a.sa, a.sb, out, m as i64, n as i64, k as i64,
                ws, wsl, s,
            ),
            (GemmImpl::CkGfx942, GroupedOp::TwoD2D { n, mt, k }) => sys::hipfp8_gg_ck_gfx942_2d2d(
                a.a, fa, a.b, fb, a.offs, groups, a.sa, a.sb, out, n as i64, mt as i64, k as i64,
                ws, wsl, s,
            ),
            (GemmImpl::CkGfx950, GroupedOp::TwoD3D { m, n, k }) => sys::hipfp8_gg_ck_gfx950_2d3d(
                a.a, fa, a.b, fb, a.offs, groups, a.sa, a.sb, out, m as i64, n as i64, k as i64,
                ws, wsl, s,
            ),
            (GemmImpl::CkGfx950, GroupedOp::TwoD2D { n, mt, k }) => sys::hipfp8_gg_ck_gfx950_2d2d(
                a.a, fa, a.b, fb, a.offs, groups, a.sa, a.sb, out, n as i64, mt as i64, k as i64,
                ws, wsl, s,
            ),
            (GemmImpl::Reference, _) => launch_reference(op, a, groups, stream),
        }
    }
}

fn launch_reference(op: GroupedOp, a: &GroupedArgs, groups: i32, stream: StreamRef) -> i32 {
    let (fa, fb, out, null) = (
        a.fa as i32,
        a.fb as i32,
        a.out as *mut c_void,
        std::ptr::null(),
    );
    // SAFETY: as in `launch_library`; the reference kernel needs no workspace and reads
    // `skip` only when non-null (null here: every group).
    unsafe {
        match op {
            GroupedOp::TwoD3D { m, n, k } => sys::hipfp8_gg_ref_2d3d(
                a.a, fa, a.b, fb, a.offs, groups, a.sa, a.sb, out, m as i64, n as i64, k as i64,
                null, 0, stream.0,
            ),
            GroupedOp::TwoD2D { n, mt, k } => sys::hipfp8_gg_ref_2d2d(
                a.a, fa, a.b, fb, a.offs, groups, a.sa, a.sb, out, n as i64, mt as i64, k as i64,
                null, 0, stream.0,
            ),
        }
    }
}
