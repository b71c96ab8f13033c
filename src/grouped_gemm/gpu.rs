//! The GPU arms of the FP8 grouped GEMMs (`Context::grouped_gemm_2d3d` / `_2d2d` /
//! `_blockwise_2d3d` / `_blockwise_2d2d`): which implementation runs, the device workspace it needs, and the one
//! launch.
//!
//! Implementations ([`GemmImpl`]):
//! * CUTLASS (NVIDIA sm_90, `hip/grouped_gemm/cutlass/sm90.hip`): E4M3FN x E4M3FN,
//!   E4M3FN x E5M2 and E5M2 x E4M3FN; K % 16, N % 8 (2D x 3D), Mt % 16, K % 8 (2D x 2D),
//!   16-byte aligned operands; in 2D x 2D a group starting off a 16-token boundary is read
//!   from its staged copy (below), or without staging goes to the reference kernel on the
//!   device, as an empty group always does. Instance and scheduler settings per shape:
//!   `crate::grouped_gemm::rule`.
//! * Composable Kernel (`hip/grouped_gemm/ck/`): the target's native flavour only (FNUZ on
//!   gfx942, OCP on gfx950), one instance per pair family ([`CkInstance`]): E4M3 x E4M3
//!   (`gfx942.hip`, `gfx950.hip`: CK's tile-loop device op) and E4M3 x E5M2 / E5M2 x E4M3
//!   (`gfx942_mixed.hip`, `gfx950_mixed.hip`: CK's v1 gridwise GEMM with separate A/B compute
//!   types, whose MFMA takes the two formats); no E5M2 x E5M2. The shape rules of CUTLASS plus
//!   K > 256 (2D x 3D); in 2D x 2D (every instance the same) a group starting off a 16-token
//!   boundary or of a length not a multiple of 16 is read from its staged copy (without
//!   staging: the reference kernel), and one of 256 tokens or fewer (padded) goes to the
//!   reference kernel on the device.
//!   Compile-checked and its host-side decisions checked on the host
//!   (`scripts/ck-host-check.sh`); never run on an AMD GPU.
//! * The portable reference kernel (`hip/grouped_gemm/reference.hip`): every format pair and
//!   shape, on every vendor; the GPU oracle.
//! * The blockwise-scaled GEMMs ([`GroupedOp::Blockwise2D3D`], [`GroupedOp::Blockwise2D2D`]):
//!   CUTLASS sm_90 (`hip/grouped_gemm/cutlass/sm90_blockwise.hip`, one instance each: E4M3FN
//!   x E4M3FN, 16-byte aligned operands; 2D x 3D K % 128 == 0 and N % 128 == 0; 2D x 2D
//!   Mt % 16 == 0 and K % 8 == 0, and a group starting off a 128-token boundary, or empty,
//!   runs on the portable kernel inside the same call, decided on the device); Composable
//!   Kernel for 2D x 3D only (`hip/grouped_gemm/ck/{gfx942,gfx950}_blockwise.hip`, CK's
//!   ab_scale gridwise GEMM: the target's E4M3 x E4M3, CUTLASS's 2D x 3D rules plus K >= 384,
//!   M * K and 2 * M * N <= i32::MAX; compile-checked, never run on an AMD GPU; no 2D x 2D
//!   instance: `ck_grouped_gemm_blockwise.h` says why); else the portable kernel (same file
//!   as above, bit-identical to the CPU reference).
//!
//! No silent slow path: [`Context::grouped_gemm_plan`] says which implementation a call
//! would use and, when it is the reference kernel, why ([`Fallback`]). The call itself runs
//! exactly that plan: [`GemmBackend::Auto`] takes the reference kernel only where the plan
//! says so, and a library that refuses a call its plan accepted is an error, never a
//! fallback. [`GemmBackend::Library`] turns any fallback into an error (tests use it to be
//! sure the library ran); [`GemmBackend::Reference`] always takes the reference kernel. The
//! environment variable `HIPFP8_GROUPED_GEMM_BACKEND` (auto / reference / library) overrides
//! `Auto`; `HIPFP8_CUTLASS_CONFIG` (`KIND[:m|n[:SWIZZLE]]`) overrides the rule's CUTLASS
//! choice (benchmarks).
//!
//! Offsets stay on the device: the libraries' per-group arguments are built by a small kernel
//! from them, and in 2D x 2D a group a library cannot take (empty; with CK also one of 256
//! tokens or fewer) is routed to the reference kernel on the device too. Staging (2D x 2D,
//! docs/OPS.md "Any group start"): a group a library can't read in place (off a 16-token
//! boundary; with CK also of a length not a multiple of 16) is copied to its padded position
//! in the workspace by `hipfp8_gg_stage_2d2d` first, and the argument kernel points the
//! library at that copy; aligned groups are read in place and cost the staging kernel only
//! the offsets. Nothing here reads device memory back or synchronises the stream.
//!
//! Workspace: the libraries need device memory for the per-group argument arrays (and CUTLASS
//! for its TMA descriptors; a staged 2D x 2D call also for the staging area). Callers may
//! pass their own (`GemmParams::workspace`, sized by [`Context::grouped_gemm_op_workspace_size`];
//! one too small is refused, so the implementation never depends on the workspace: the
//! caller's and the cached one give the same bits). Otherwise the stream's cached buffer of the
//! context is used (src/workspace.rs: one per stream, so reuse is ordered by the stream itself,
//! no events, no host synchronisation except when it grows; graph capture works once warm).

use std::ffi::c_void;
use std::sync::Mutex;

use half::bf16;

use crate::context::{BackendKind, Context};
use crate::error::{Error, Result};
use crate::format::Fp8Format;
use crate::grouped_gemm::params::{GemmBackend, GemmImpl, GemmParams};
use crate::knobs::host_var;
use crate::runtime::{base_arch, built_backend, built_targets, check_status, has_launcher};
use crate::sys;
use crate::view::StreamRef;
use crate::workspace::Kind;

/// The two ops with their extents (docs/OPS.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupedOp {
    /// a (m,k), b (e,k,n) column-major, out (m,n).
    TwoD3D { m: usize, n: usize, k: usize },
    /// a (n,mt), b (mt,k) column-major, out (g,n,k).
    TwoD2D { n: usize, mt: usize, k: usize },
    /// Blockwise-scaled 2D x 3D (`Context::grouped_gemm_blockwise_2d3d`): the operands of
    /// `TwoD3D`, scales per 1x128 block of a and per 128x128 block of b.
    Blockwise2D3D { m: usize, n: usize, k: usize },
    /// Blockwise-scaled 2D x 2D (`Context::grouped_gemm_blockwise_2d2d`): the operands of
    /// `TwoD2D`, scales per 1x128 token block of a and of b.
    Blockwise2D2D { n: usize, mt: usize, k: usize },
}

impl GroupedOp {
    fn blockwise(self) -> bool {
        matches!(
            self,
            GroupedOp::Blockwise2D3D { .. } | GroupedOp::Blockwise2D2D { .. }
        )
    }

    /// The vendor library's launcher of this op on `imp` (the one `has_launcher` checks): CK's
    /// is the 2D x 3D launcher of the first instance of the op's family in [`ck_instances`]
    /// (the E4M3 x E4M3 one; None: no CK instance of the family).
    fn launcher(self, imp: GemmImpl) -> Option<&'static str> {
        match (self, imp) {
            (_, GemmImpl::CkGfx942 | GemmImpl::CkGfx950) => ck_instances(imp)
                .iter()
                .find(|i| i.blockwise == self.blockwise())
                .map(|i| i.launcher_2d3d),
            (GroupedOp::Blockwise2D3D { .. }, _) => Some("hipfp8_gg_cutlass_bw_2d3d"),
            (GroupedOp::Blockwise2D2D { .. }, _) => Some("hipfp8_gg_cutlass_bw_2d2d"),
            _ => Some("hipfp8_gg_cutlass_2d3d"),
        }
    }

    /// The token boundary a 2D x 2D group must start on for the library to read it in place.
    fn split_boundary(self) -> usize {
        match self {
            GroupedOp::Blockwise2D2D { .. } => 128,
            _ => 16,
        }
    }
}

/// The rowwise-scaled GEMMs' family in [`device_library`] (both layouts share the instances).
const ROWWISE: GroupedOp = GroupedOp::TwoD3D { m: 0, n: 0, k: 0 };

/// Device pointers of one call (validated by the caller).
#[derive(Clone, Copy)]
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

/// The vendor library of this context's device in this build for `op` (the blockwise-scaled
/// ops have their own instances; [`ROWWISE`] stands for both rowwise-scaled layouts); `Err`
/// says why there is none.
fn device_library(ctx: &Context, op: GroupedOp) -> std::result::Result<GemmImpl, String> {
    // Compared case-insensitively in place: no lowercased copy per call.
    let arch = base_arch(ctx.arch());
    let is = |a: &str| arch.eq_ignore_ascii_case(a);
    let ck = is("gfx942") || is("gfx950");
    let imp = match op.blockwise() {
        _ if is("sm_90") => GemmImpl::CutlassSm90,
        true if ck && matches!(op, GroupedOp::Blockwise2D2D { .. }) => {
            return Err(format!(
                "no blockwise-scaled 2D x 2D Composable Kernel instance for {} (CK 7.2's \
                 ab_scale pipelines scale B per XDL tile, not per column: \
                 hip/grouped_gemm/ck/ck_grouped_gemm_blockwise.h)",
                ctx.arch()
            ));
        }
        _ if is("gfx942") => GemmImpl::CkGfx942,
        _ if is("gfx950") => GemmImpl::CkGfx950,
        true => {
            return Err(format!(
                "no blockwise-scaled grouped-GEMM library targets {} (CUTLASS: sm_90; CK: \
                 gfx942, gfx950, 2D x 3D)",
                ctx.arch()
            ));
        }
        false => {
            return Err(format!(
                "no grouped-GEMM library targets {} (CUTLASS: sm_90; CK: gfx942, gfx950)",
                ctx.arch()
            ));
        }
    };
    match op.launcher(imp) {
        Some(launcher) if has_launcher(launcher) => Ok(imp),
        launcher => Err(format!(
            "this build (backend {}, targets {:?}) has no {} instance ({})",
            built_backend(),
            built_targets(),
            imp.name(),
            launcher.map_or("no launcher for this op".into(), |l| format!(
                "{l} not compiled"
            ))
        )),
    }
}

/// One Composable Kernel instance of the grouped GEMMs (`hip/grouped_gemm/ck/`): the format
/// pairs its launchers take (any other pair is refused by them), whether it is a
/// blockwise-scaled one, and its launchers' names.
#[derive(Debug, PartialEq, Eq)]
pub struct CkInstance {
    /// For plans and logs, e.g. `tile-loop-v3-128x128x128`.
    pub name: &'static str,
    pub pairs: &'static [(Fp8Format, Fp8Format)],
    /// The blockwise-scaled GEMMs' instance ([`GroupedOp::Blockwise2D3D`]) rather than the
    /// rowwise-scaled ones'.
    pub blockwise: bool,
    /// The 2D x 3D and 2D x 2D launchers (`hip/grouped_gemm/launchers.h`); None: no 2D x 2D
    /// launcher (the blockwise instance: `ck_grouped_gemm_blockwise.h` says why).
    pub launcher_2d3d: &'static str,
    pub launcher_2d2d: Option<&'static str>,
}

impl CkInstance {
    /// Every launcher it has is compiled into this build.
    fn compiled(&self) -> bool {
        has_launcher(self.launcher_2d3d) && self.launcher_2d2d.is_none_or(has_launcher)
    }
}

const E4Z: Fp8Format = Fp8Format::E4M3FnUz;
const E5Z: Fp8Format = Fp8Format::E5M2FnUz;
const E4: Fp8Format = Fp8Format::E4M3Fn;
const E5: Fp8Format = Fp8Format::E5M2;

/// CK's gfx942 instances (FNUZ): `gfx942.hip`, `gfx942_mixed.hip`, `gfx942_blockwise.hip`.
const CK_GFX942: &[CkInstance] = &[
    CkInstance {
        name: "tile-loop-v3-128x128x128",
        pairs: &[(E4Z, E4Z)],
        blockwise: false,
        launcher_2d3d: "hipfp8_gg_ck_gfx942_2d3d",
        launcher_2d2d: Some("hipfp8_gg_ck_gfx942_2d2d"),
    },
    CkInstance {
        name: "mixed-v1-128x128x128",
        pairs: &[(E4Z, E5Z), (E5Z, E4Z)],
        blockwise: false,
        launcher_2d3d: "hipfp8_gg_ck_gfx942_mixed_2d3d",
        launcher_2d2d: Some("hipfp8_gg_ck_gfx942_mixed_2d2d"),
    },
    CkInstance {
        name: "ab-scale-v3-128x128x128",
        pairs: &[(E4Z, E4Z)],
        blockwise: true,
        launcher_2d3d: "hipfp8_gg_ck_gfx942_bw_2d3d",
        launcher_2d2d: None,
    },
];

/// CK's gfx950 instances (OCP): `gfx950.hip`, `gfx950_mixed.hip`, `gfx950_blockwise.hip`.
const CK_GFX950: &[CkInstance] = &[
    CkInstance {
        name: "tile-loop-v3-128x128x128",
        pairs: &[(E4, E4)],
        blockwise: false,
        launcher_2d3d: "hipfp8_gg_ck_gfx950_2d3d",
        launcher_2d2d: Some("hipfp8_gg_ck_gfx950_2d2d"),
    },
    CkInstance {
        name: "mixed-v1-128x128x128",
        pairs: &[(E4, E5), (E5, E4)],
        blockwise: false,
        launcher_2d3d: "hipfp8_gg_ck_gfx950_mixed_2d3d",
        launcher_2d2d: Some("hipfp8_gg_ck_gfx950_mixed_2d2d"),
    },
    CkInstance {
        name: "ab-scale-v3-128x128x128",
        pairs: &[(E4, E4)],
        blockwise: true,
        launcher_2d3d: "hipfp8_gg_ck_gfx950_bw_2d3d",
        launcher_2d2d: None,
    },
];

/// The CK instances of `imp`, rowwise- and blockwise-scaled (none for the other
/// implementations).
pub fn ck_instances(imp: GemmImpl) -> &'static [CkInstance] {
    match imp {
        GemmImpl::CkGfx942 => CK_GFX942,
        GemmImpl::CkGfx950 => CK_GFX950,
        GemmImpl::CutlassSm90 | GemmImpl::Reference | GemmImpl::Cpu => &[],
    }
}

/// The CK instance of `imp` compiled into this build for `fa x fb` (every launcher it has),
/// of the blockwise-scaled GEMMs (`blockwise`) or the rowwise-scaled ones.
pub fn ck_instance(
    imp: GemmImpl,
    blockwise: bool,
    fa: Fp8Format,
    fb: Fp8Format,
) -> Option<&'static CkInstance> {
    ck_instances(imp)
        .iter()
        .find(|i| i.blockwise == blockwise && i.pairs.contains(&(fa, fb)) && i.compiled())
}

/// Whether `imp` has an instance for `fa x fb` (for the blockwise-scaled GEMM: `blockwise`).
fn library_has_pair(imp: GemmImpl, blockwise: bool, fa: Fp8Format, fb: Fp8Format) -> bool {
    match imp {
        GemmImpl::CutlassSm90 if blockwise => (fa, fb) == (Fp8Format::E4M3Fn, Fp8Format::E4M3Fn),
        GemmImpl::CutlassSm90 => crate::grouped_gemm::rule::cutlass_has_pair(fa, fb),
        GemmImpl::CkGfx942 | GemmImpl::CkGfx950 => ck_instance(imp, blockwise, fa, fb).is_some(),
        GemmImpl::Reference | GemmImpl::Cpu => true,
    }
}

/// The pairs `imp` has (CK: the instances compiled into this build), for messages.
fn library_pairs(imp: GemmImpl, blockwise: bool) -> String {
    match imp {
        GemmImpl::CutlassSm90 if blockwise => "E4M3FN x E4M3FN".into(),
        GemmImpl::CutlassSm90 => "E4M3FN x E4M3FN, E4M3FN x E5M2, E5M2 x E4M3FN".into(),
        GemmImpl::CkGfx942 | GemmImpl::CkGfx950 => {
            let pairs: Vec<String> = ck_instances(imp)
                .iter()
                .filter(|i| i.blockwise == blockwise && i.compiled())
                .flat_map(|i| i.pairs.iter().map(|(a, b)| format!("{a} x {b}")))
                .collect();
            pairs.join(", ")
        }
        GemmImpl::Reference | GemmImpl::Cpu => "every pair".into(),
    }
}

/// The vendor library that could run `fa x fb` on this context's device, if this build has
/// it (formats only; [`Context::grouped_gemm_plan`] also checks shape and alignment).
pub fn library_impl(ctx: &Context, fa: Fp8Format, fb: Fp8Format) -> Option<GemmImpl> {
    device_library(ctx, ROWWISE)
        .ok()
        .filter(|&imp| library_has_pair(imp, false, fa, fb))
}

/// Why a call runs the reference kernel instead of a vendor library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// The caller asked for it (`GemmBackend::Reference` or the environment variable).
    Requested,
    /// No library for this device in this build (text: which and why).
    NoLibrary(String),
    /// The library has no instance for this format pair.
    FormatPair(String),
    /// A whole-call shape rule of the library (K % 16, N % 8, Mt % 16, extents <= i32::MAX).
    Shape(String),
    /// An operand or the output is not 16-byte aligned.
    Alignment(String),
}

impl Fallback {
    /// Stable code (the C ABI's `hipfp8_gemm_reason`).
    pub fn code(&self) -> u32 {
        match self {
            Fallback::Requested => 1,
            Fallback::NoLibrary(_) => 2,
            Fallback::FormatPair(_) => 3,
            Fallback::Shape(_) => 4,
            Fallback::Alignment(_) => 5,
        }
    }
}

impl std::fmt::Display for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fallback::Requested => write!(f, "requested"),
            Fallback::NoLibrary(s) | Fallback::FormatPair(s) | Fallback::Shape(s) => f.write_str(s),
            Fallback::Alignment(s) => f.write_str(s),
        }
    }
}

/// Which implementation a grouped GEMM call runs ([`Context::grouped_gemm_plan`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GemmPlan {
    pub imp: GemmImpl,
    /// CUTLASS: the instance and scheduler settings (`crate::grouped_gemm::rule`).
    pub cutlass: Option<crate::grouped_gemm::rule::CutlassChoice>,
    /// CK: the instance that runs the call.
    pub ck: Option<&'static CkInstance>,
    /// Why the reference kernel (None when a library or the CPU runs).
    pub fallback: Option<Fallback>,
    /// A library runs a 2D x 2D call: its groups that start off a `split_boundary`-token
    /// boundary (or are too short for CK) run on the reference kernel inside the same call,
    /// decided on the device from the offsets (so the host cannot count them).
    pub split_2d2d: bool,
    /// The token boundary of `split_2d2d`: 16 (128 for the blockwise-scaled 2D x 2D, whose
    /// library reads whole 128-token scale blocks).
    pub split_boundary: usize,
    /// A library runs a 2D x 2D call with staging (docs/OPS.md "Any group start"): groups
    /// on a 16-token boundary are read in place, and one kernel copies each group off it
    /// (with CK also one of a length not a multiple of 16) to its padded position in the
    /// workspace, where the library reads it; decided per group on the device.
    pub staged_2d2d: bool,
}

impl GemmPlan {
    /// One line for logs and benchmark tables, e.g. `cutlass-sm90 coop-128x256-c2x1/raster-m/swz1`,
    /// `ck-gfx942 mixed-v1-128x128x128` or `reference (no CUTLASS instance for E5M2 x E5M2 ...)`.
    pub fn describe(&self) -> String {
        let line = match (&self.cutlass, self.ck, &self.fallback) {
            (Some(c), _, _) => format!("{} {}", self.imp.name(), c.describe()),
            (None, Some(i), _) => format!("{} {}", self.imp.name(), i.name),
            (None, None, Some(f)) => format!("{} ({f})", self.imp.name()),
            (None, None, None) => self.imp.name().to_string(),
        };
        let ck = matches!(self.imp, GemmImpl::CkGfx942 | GemmImpl::CkGfx950);
        match (self.staged_2d2d, self.split_2d2d) {
            (true, true) if ck => format!(
                "{line}; groups off a 16-token boundary or of a length not a multiple of 16 \
                 staged + reference for groups of 256 tokens or fewer"
            ),
            (true, true) => format!(
                "{line}; groups off a 16-token boundary staged + reference for empty groups"
            ),
            (true, false) => format!("{line}; groups off a 16-token boundary staged"),
            (false, true) => format!(
                "{line} + reference for groups off a {}-token boundary",
                self.split_boundary
            ),
            (false, false) => line,
        }
    }
}

fn aligned16(p: *const c_void) -> bool {
    (p as usize) % 16 == 0
}

/// The library's whole-call rules (the launchers check the same; sm90.hip,
/// ck_grouped_gemm_impl.h). `ptrs` = a, b, out (None: assumed aligned, as allocators give).
fn library_refusal(
    imp: GemmImpl,
    op: GroupedOp,
    ptrs: Option<[*const c_void; 3]>,
) -> Option<Fallback> {
    let shape = match op {
        GroupedOp::TwoD3D { n, k, .. } => {
            if k % 16 != 0 || n % 8 != 0 {
                Some(format!(
                    "2D x 3D needs K % 16 == 0 and N % 8 == 0 (K = {k}, N = {n})"
                ))
            } else if matches!(imp, GemmImpl::CkGfx942 | GemmImpl::CkGfx950) && k <= 256 {
                // CK's pipeline v3 needs more K blocks of 128 than its 2 prefetch stages
                // (ck_grouped_gemm_impl.h kMinRed; tests/emu/ck_host_check.cpp).
                Some(format!("{} needs K > 256 (K = {k})", imp.name()))
            } else {
                None
            }
        }
        // Whole 128-blocks along K and N: every tile of the instance (128 x 128 x 128)
        // then meets one scale of b and one scale per row of a per K block.
        GroupedOp::Blockwise2D3D { m, n, k } => {
            if k % 128 != 0 || n % 128 != 0 {
                Some(format!(
                    "blockwise 2D x 3D needs K % 128 == 0 and N % 128 == 0 (K = {k}, N = {n})"
                ))
            } else if matches!(imp, GemmImpl::CkGfx942 | GemmImpl::CkGfx950) {
                // ck_grouped_gemm_blockwise.h launcher_accepts_bw_2d3d: pipeline v3 needs more
                // than 2 K steps of 128; a group's A (M_g*K bytes) and out (2*M_g*N bytes)
                // within CK's 32-bit buffer ranges (bounded by the whole M).
                let max = i32::MAX as usize;
                if k < 384 {
                    Some(format!("{} blockwise needs K >= 384 (K = {k})", imp.name()))
                } else if m.checked_mul(k).is_none_or(|v| v > max)
                    || m.checked_mul(2 * n).is_none_or(|v| v > max)
                {
                    Some(format!(
                        "{} blockwise needs M * K and 2 * M * N <= i32::MAX (M = {m}, N = {n}, \
                         K = {k})",
                        imp.name()
                    ))
                } else {
                    None
                }
            } else {
                None
            }
        }
        GroupedOp::TwoD2D { mt, k, .. } => (mt % 16 != 0 || k % 8 != 0)
            .then(|| format!("2D x 2D needs Mt % 16 == 0 and K % 8 == 0 (Mt = {mt}, K = {k})")),
        GroupedOp::Blockwise2D2D { mt, k, .. } => (mt % 16 != 0 || k % 8 != 0).then(|| {
            format!("blockwise 2D x 2D needs Mt % 16 == 0 and K % 8 == 0 (Mt = {mt}, K = {k})")
        }),
    };
    if let Some(why) = shape {
        return Some(Fallback::Shape(why));
    }
    let (GroupedOp::TwoD3D { m: x, n: y, k: z }
    | GroupedOp::Blockwise2D3D { m: x, n: y, k: z }
    | GroupedOp::TwoD2D { n: x, mt: y, k: z }
    | GroupedOp::Blockwise2D2D { n: x, mt: y, k: z }) = op;
    if [x, y, z].into_iter().any(|v| v > i32::MAX as usize) {
        return Some(Fallback::Shape("an extent exceeds i32::MAX".into()));
    }
    if let Some(p) = ptrs {
        for (name, ptr) in ["a", "b", "out"].iter().zip(p) {
            if !aligned16(ptr) {
                return Some(Fallback::Alignment(format!(
                    "{name} is not 16-byte aligned ({ptr:p})"
                )));
            }
        }
    }
    None
}

impl Context {
    /// Which implementation [`Context::grouped_gemm_2d3d`] / `_2d2d` would run for `op` with
    /// these parameters and `groups` groups, and why when it is the reference kernel.
    /// `ptrs` (a, b, out) are checked for 16-byte alignment; None assumes aligned. A call
    /// runs exactly its plan (AUTO falls back only where the plan says so); with
    /// [`GemmBackend::Library`] a plan that falls back is an error here. `p.workspace` is not
    /// read: the same call plans (and computes) the same with any workspace; one too small
    /// for the plan is refused by the call.
    pub fn grouped_gemm_plan(
        &self,
        p: &GemmParams,
        op: GroupedOp,
        groups: usize,
        ptrs: Option<[*const c_void; 3]>,
    ) -> Result<GemmPlan> {
        // Nothing below can see the workspace.
        let p = &GemmParams {
            workspace: None,
            ..*p
        };
        if self.backend() == BackendKind::Cpu {
            return Ok(GemmPlan {
                imp: GemmImpl::Cpu,
                cutlass: None,
                ck: None,
                fallback: None,
                split_2d2d: false,
                split_boundary: 16,
                staged_2d2d: false,
            });
        }
        let backend = match p.backend {
            GemmBackend::Auto => backend_from_env()?.unwrap_or(GemmBackend::Auto),
            b => b,
        };
        let (fa, fb) = (self.resolve(p.a_format), self.resolve(p.b_format));
        let fallback = if backend == GemmBackend::Reference {
            Fallback::Requested
        } else {
            let bw = op.blockwise();
            match device_library(self, op) {
                Err(why) => Fallback::NoLibrary(why),
                Ok(imp) if !library_has_pair(imp, bw, fa, fb) => Fallback::FormatPair(format!(
                    "{} has no {}instance for {fa} x {fb} (it has {})",
                    imp.name(),
                    if bw { "blockwise-scaled " } else { "" },
                    library_pairs(imp, bw)
                )),
                Ok(imp) => match library_refusal(imp, op, ptrs) {
                    Some(f) => f,
                    None => {
                        // The blockwise-scaled GEMM has one CUTLASS instance (no choice).
                        let cutlass = (imp == GemmImpl::CutlassSm90 && !bw)
                            .then(|| cutlass_choice(p, op, groups, fa, fb))
                            .transpose()?;
                        let staged = self.stage_layout(p, imp, op, groups)?.is_some();
                        // Staged, CUTLASS takes every non-empty group, in place or from its
                        // staged copy (empty ones get their zeros from the reference kernel);
                        // CK still leaves groups of <= 256 tokens to it (its pipeline's
                        // minimum).
                        let ck = matches!(imp, GemmImpl::CkGfx942 | GemmImpl::CkGfx950);
                        return Ok(GemmPlan {
                            imp,
                            cutlass,
                            ck: ck_instance(imp, bw, fa, fb),
                            fallback: None,
                            split_2d2d: match op {
                                GroupedOp::TwoD2D { .. } => !staged || ck,
                                GroupedOp::Blockwise2D2D { .. } => true,
                                _ => false,
                            },
                            split_boundary: op.split_boundary(),
                            staged_2d2d: staged,
                        });
                    }
                },
            }
        };
        if backend == GemmBackend::Library {
            return Err(Error::NotSupported(format!(
                "grouped GEMM {fa} x {fb} on {}: the library cannot take this call: {fallback}",
                self.arch()
            )));
        }
        Ok(GemmPlan {
            imp: GemmImpl::Reference,
            cutlass: None,
            ck: None,
            fallback: Some(fallback),
            split_2d2d: false,
            split_boundary: 16,
            staged_2d2d: false,
        })
    }
}

/// The CUTLASS choice: the caller's (`GemmParams::cutlass`), else `HIPFP8_CUTLASS_CONFIG`'s
/// when set, else the rule's.
fn cutlass_choice(
    p: &GemmParams,
    op: GroupedOp,
    groups: usize,
    fa: Fp8Format,
    fb: Fp8Format,
) -> Result<crate::grouped_gemm::rule::CutlassChoice> {
    use crate::grouped_gemm::rule::{CutlassChoice, RuleShape, available, cutlass_rule};
    if let Some(c) = p.cutlass {
        if !available(c, fa, fb) {
            return Err(Error::NotSupported(format!(
                "CUTLASS {} is not compiled for {fa} x {fb}",
                c.describe()
            )));
        }
        return Ok(c);
    }
    if let Some(v) = host_var("HIPFP8_CUTLASS_CONFIG") {
        let c = CutlassChoice::parse(&v)
            .map_err(|e| Error::InvalidEnum(format!("HIPFP8_CUTLASS_CONFIG: {e}")))?;
        if let Some(c) = c {
            if !available(c, fa, fb) {
                return Err(Error::NotSupported(format!(
                    "HIPFP8_CUTLASS_CONFIG={v:?}: {} is not compiled for {fa} x {fb}",
                    c.describe()
                )));
            }
            return Ok(c);
        }
    }
    let shape = match op {
        GroupedOp::TwoD3D { m, n, k } => RuleShape::TwoD3D { m, n, k, groups },
        GroupedOp::TwoD2D { n, mt, k } => RuleShape::TwoD2D { n, mt, k, groups },
        GroupedOp::Blockwise2D3D { .. } | GroupedOp::Blockwise2D2D { .. } => {
            return Err(Error::NotSupported(
                "the blockwise-scaled GEMM has no CUTLASS choice".into(),
            ));
        }
    };
    Ok(cutlass_rule(shape, fa, fb))
}

/// Workspace bytes `imp` needs for `groups` groups of the rowwise- or the blockwise-scaled
/// (`bw`) GEMMs on the context's (active) device, memoized per (implementation, kind, groups,
/// device): the CUTLASS query asks every instance, which is host work a call should not
/// repeat.
/// A thread's last answers are kept in front of the process-wide memo (a thread-local
/// array, no lock): the GEMMs of an MoE layer ask for the same few group counts every step.
fn workspace_bytes(ctx: &Context, imp: GemmImpl, bw: bool, groups: usize) -> Result<usize> {
    type Key = (GemmImpl, bool, usize, usize);
    static MEMO: Mutex<Vec<(Key, usize)>> = Mutex::new(Vec::new());
    thread_local! {
        static RECENT: std::cell::Cell<[Option<(Key, usize)>; 4]> =
            const { std::cell::Cell::new([None; 4]) };
    }
    let key = (imp, bw, groups, ctx.ordinal().unwrap_or(0));
    let recent = RECENT.get();
    if let Some(&(_, v)) = recent.iter().flatten().find(|(k, _)| *k == key) {
        return Ok(v);
    }
    let remember = |v: usize| {
        let mut r = recent;
        r.rotate_right(1);
        r[0] = Some((key, v));
        RECENT.set(r);
    };
    let memo = |m: &Mutex<Vec<(Key, usize)>>| {
        m.lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(k, _)| *k == key)
            .map(|&(_, v)| v)
    };
    if let Some(v) = memo(&MEMO) {
        remember(v);
        return Ok(v);
    }
    let v = query_workspace_bytes(imp, bw, groups)?;
    let mut m = MEMO.lock().unwrap_or_else(|e| e.into_inner());
    if m.len() >= 256 {
        m.clear();
    }
    m.push((key, v));
    remember(v);
    Ok(v)
}

fn query_workspace_bytes(imp: GemmImpl, bw: bool, groups: usize) -> Result<usize> {
    let g = i32::try_from(groups)
        .map_err(|_| Error::SizeOverflow(format!("{groups} groups do not fit an i32")))?;
    let mut bytes = 0u64;
    // SAFETY: `bytes` is valid for one write; the functions only compute a size.
    let st = unsafe {
        match imp {
            GemmImpl::Reference | GemmImpl::Cpu => return Ok(0),
            GemmImpl::CutlassSm90 if bw => sys::hipfp8_gg_cutlass_bw_workspace_size(g, &mut bytes),
            GemmImpl::CkGfx942 if bw => sys::hipfp8_gg_ck_gfx942_bw_workspace_size(g, &mut bytes),
            GemmImpl::CkGfx950 if bw => sys::hipfp8_gg_ck_gfx950_bw_workspace_size(g, &mut bytes),
            GemmImpl::CutlassSm90 => sys::hipfp8_gg_cutlass_workspace_size(g, &mut bytes),
            GemmImpl::CkGfx942 => sys::hipfp8_gg_ck_gfx942_workspace_size(g, &mut bytes),
            GemmImpl::CkGfx950 => sys::hipfp8_gg_ck_gfx950_workspace_size(g, &mut bytes),
        }
    };
    check_status("grouped GEMM workspace size", st)?;
    usize::try_from(bytes).map_err(|_| Error::SizeOverflow("workspace size".into()))
}

/// The workspace of a staged 2D x 2D call (docs/OPS.md "Any group start"): the library's
/// part, then staged a (n, mt_pad), staged b (k, mt_pad), the padded END offsets and the group
/// tables' scratch (`groups` int32 each), each part 256-byte aligned from the workspace's
/// start. `mt_pad = round_up(mt + 15 groups, 16)` bounds the padded layout of any offsets:
/// the padded length of a group exceeds its length by at most 15 tokens (0 when empty), so
/// the padded END of the last group is at most mt + 15 groups (clamped offsets cover at most
/// mt tokens), rounded up to whole 16-byte chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StageLayout {
    pub lib: usize,
    pub mt_pad: usize,
    pub a: usize,
    pub b: usize,
    pub offs: usize,
    pub scratch: usize,
    /// Bytes of the whole workspace.
    pub total: usize,
}

impl StageLayout {
    /// None when a size overflows or mt_pad exceeds i32::MAX (the kernels' and the
    /// libraries' extents).
    pub(crate) fn new(lib: usize, n: usize, mt: usize, k: usize, groups: usize) -> Option<Self> {
        let up = |x: usize, m: usize| x.checked_add(m - 1).map(|v| v / m * m);
        let mt_pad = up(mt.checked_add(groups.checked_mul(15)?)?, 16)?;
        if mt_pad > i32::MAX as usize {
            return None;
        }
        let a = up(lib, 256)?;
        let b = up(a.checked_add(n.checked_mul(mt_pad)?)?, 256)?;
        let offs = up(b.checked_add(k.checked_mul(mt_pad)?)?, 256)?;
        let scratch = up(offs.checked_add(groups.checked_mul(4)?)?, 256)?;
        let total = scratch.checked_add(groups.checked_mul(4)?)?;
        Some(StageLayout {
            lib,
            mt_pad,
            a,
            b,
            offs,
            scratch,
            total,
        })
    }
}

/// `HIPFP8_GG_STAGE` = `auto` (stage every 2D x 2D call a library takes) | `off` (never:
/// groups off a 16-token boundary run on the reference kernel).
fn stage_knob() -> Result<bool> {
    match host_var("HIPFP8_GG_STAGE") {
        None => Ok(true),
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(true),
            "off" => Ok(false),
            other => Err(Error::InvalidEnum(format!(
                "HIPFP8_GG_STAGE={other:?} (auto or off)"
            ))),
        },
    }
}

impl Context {
    /// The staging workspace of a 2D x 2D call that `imp` takes, when it is staged: the
    /// knob and `p` allow it, this build has the staging kernel and the sizes fit. Otherwise None:
    /// groups off a 16-token boundary go to the reference kernel on the device. Decided by
    /// the call's inputs only, never by the workspace: a call with the caller's workspace
    /// runs the implementation it runs with the cached one (bit for bit the same result), and
    /// a caller workspace smaller than [`Context::grouped_gemm_op_workspace_size`] is refused.
    fn stage_layout(
        &self,
        p: &GemmParams,
        imp: GemmImpl,
        op: GroupedOp,
        groups: usize,
    ) -> Result<Option<StageLayout>> {
        let GroupedOp::TwoD2D { n, mt, k } = op else {
            return Ok(None);
        };
        if p.unstaged_2d2d || !stage_knob()? || !has_launcher("hipfp8_gg_stage_2d2d") {
            return Ok(None);
        }
        let lib = {
            let _dev = self.activate()?;
            workspace_bytes(self, imp, false, groups)?
        };
        Ok(StageLayout::new(lib, n, mt, k, groups))
    }

    /// Device bytes `op` with `groups` groups needs as workspace under `p` on this context:
    /// [`Context::grouped_gemm_workspace_size`] (or the blockwise one), plus for a 2D x 2D
    /// call that a library takes the staging area (about `(n + k) * round_up(mt + 15 groups,
    /// 16)` bytes; docs/OPS.md "Any group start"): the worst case, every group copied (the
    /// host cannot see the offsets; only groups off a 16-token boundary are written). A
    /// caller workspace (`GemmParams::workspace`) of a 2D x 2D call must hold this many bytes:
    /// a smaller one is refused ([`Error::OutputTooSmall`], nothing queued), never a reason to
    /// run another implementation. Exact for every op; for 2D x 3D and the blockwise-scaled
    /// GEMMs it equals [`Context::grouped_gemm_workspace_size`] / the blockwise one.
    pub fn grouped_gemm_op_workspace_size(
        &self,
        p: &GemmParams,
        op: GroupedOp,
        groups: usize,
    ) -> Result<usize> {
        if op.blockwise() {
            return self.grouped_gemm_blockwise_workspace_size(p, groups);
        }
        let base = self.grouped_gemm_workspace_size(p, groups)?;
        // The plan does not depend on the workspace: the one the call will run.
        let plan = self.grouped_gemm_plan(p, op, groups, None);
        match plan {
            Ok(plan) if plan.staged_2d2d => Ok(self
                .stage_layout(p, plan.imp, op, groups)?
                .map_or(base, |l| l.total)),
            // A plan that fails (e.g. LIBRARY on a call it can't take) fails in the call too.
            _ => Ok(base),
        }
    }
}

impl Context {
    /// Device bytes a grouped GEMM with `groups` groups needs as workspace under `p` on this
    /// context (0 for the reference kernel and for the CPU backend): the size of a 2D x 3D
    /// call's workspace. It knows no shape, so it has no room for the staging area a 2D x 2D
    /// call a library takes needs (docs/OPS.md "Any group start"): size a 2D x 2D call's
    /// workspace with [`Context::grouped_gemm_op_workspace_size`] (a smaller one is refused).
    pub fn grouped_gemm_workspace_size(&self, p: &GemmParams, groups: usize) -> Result<usize> {
        if self.backend() == BackendKind::Cpu || p.backend == GemmBackend::Reference {
            return Ok(0);
        }
        let (fa, fb) = (self.resolve(p.a_format), self.resolve(p.b_format));
        match library_impl(self, fa, fb) {
            Some(imp) => {
                let _dev = self.activate()?;
                workspace_bytes(self, imp, false, groups)
            }
            None => Ok(0),
        }
    }

    /// [`Context::grouped_gemm_workspace_size`] for
    /// [`Context::grouped_gemm_blockwise_2d3d`] and [`Context::grouped_gemm_blockwise_2d2d`].
    pub fn grouped_gemm_blockwise_workspace_size(
        &self,
        p: &GemmParams,
        groups: usize,
    ) -> Result<usize> {
        if self.backend() == BackendKind::Cpu || p.backend == GemmBackend::Reference {
            return Ok(0);
        }
        let (fa, fb) = (self.resolve(p.a_format), self.resolve(p.b_format));
        // One workspace size for both blockwise ops (CUTLASS: both instances are in one
        // translation unit; CK has the 2D x 3D one only, and 2D x 2D needs none there).
        let bw = GroupedOp::Blockwise2D3D { m: 0, n: 0, k: 0 };
        match device_library(self, bw) {
            Ok(imp) if library_has_pair(imp, true, fa, fb) => {
                let _dev = self.activate()?;
                workspace_bytes(self, imp, true, groups)
            }
            _ => Ok(0),
        }
    }
}

/// Run one grouped GEMM on the GPU, views already validated by the op (sizes, locations):
/// exactly what [`Context::grouped_gemm_plan`] says. Returns the plan that ran.
pub(crate) fn run(
    ctx: &Context,
    p: &GemmParams,
    op: GroupedOp,
    args: &GroupedArgs,
    stream: StreamRef,
) -> Result<GemmPlan> {
    let groups = i32::try_from(args.groups)
        .map_err(|_| Error::SizeOverflow(format!("{} groups do not fit an i32", args.groups)))?;
    let ptrs = [
        args.a as *const c_void,
        args.b as *const c_void,
        args.out as *const c_void,
    ];
    let plan = ctx.grouped_gemm_plan(p, op, args.groups, Some(ptrs))?;
    let empty = match op {
        GroupedOp::TwoD3D { m, n, .. } | GroupedOp::Blockwise2D3D { m, n, .. } => {
            m == 0 || n == 0 || args.groups == 0
        }
        GroupedOp::TwoD2D { n, k, .. } | GroupedOp::Blockwise2D2D { n, k, .. } => {
            n == 0 || k == 0 || args.groups == 0
        }
    };
    if empty {
        return Ok(plan);
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
    let imp = plan.imp;
    if imp == GemmImpl::Reference {
        let st = launch_reference(op, args, groups, stream);
        return check_status("grouped GEMM reference kernel", st).map(|_| plan);
    }
    let cfg = plan.cutlass.map_or(0, |c| c.config());
    let lib = workspace_bytes(ctx, imp, op.blockwise(), args.groups)?;
    let stage = match (plan.staged_2d2d, op) {
        (true, GroupedOp::TwoD2D { n, mt, k }) => Some(
            StageLayout::new(lib, n, mt, k, args.groups)
                .ok_or_else(|| Error::SizeOverflow("the 2D x 2D staging area".into()))?,
        ),
        _ => None,
    };
    let need = stage.map_or(lib, |l| l.total);
    // The library alone, or the staging kernel and then the library on its output.
    let go = |ws: *mut u8, len: usize| match stage {
        None => launch_library(imp, op, args, groups, Staged::NONE, ws, len, cfg, stream),
        Some(l) => launch_staged(imp, op, &l, args, groups, ws, cfg, stream),
    };
    let st = match p.workspace {
        Some(ws) => {
            if ws.len() < need {
                // Refused before anything is queued; never a reason to run unstaged (the
                // result would depend on the workspace).
                return Err(Error::OutputTooSmall {
                    what: if stage.is_some() {
                        "workspace (bytes; a staged 2D x 2D call: grouped_gemm_op_workspace_size / \
                         hipfp8_grouped_gemm_2d2d_workspace_size)"
                    } else {
                        "workspace (bytes)"
                    },
                    needed: need,
                    got: ws.len(),
                });
            }
            ctx.check_device_pointers(&[("workspace", ws.as_ptr() as *const c_void)])?;
            go(ws.as_ptr() as *mut u8, ws.len())
        }
        None => ctx
            .workspace
            .with(ctx, Kind::Plain, need.max(1), stream, |ptr, len| {
                Ok(go(ptr as *mut u8, len))
            })?,
    };
    if st == sys::KSTATUS_UNSUPPORTED {
        // Never a silent fallback: the plan said the library takes this call.
        return Err(Error::NotSupported(format!(
            "{} refused a call its plan ({}) accepted; nothing was written (use \
             GemmBackend::Reference to run the reference kernel)",
            imp.name(),
            plan.describe()
        )));
    }
    check_status(imp.name(), st).map(|_| plan)
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

/// The staged copies a 2D x 2D library launcher reads the groups off a 16-token boundary from
/// (`hipfp8_gg_stage_2d2d`'s output): staged a, staged b, their row length mt_pad.
#[derive(Clone, Copy)]
struct Staged {
    a: *const u8,
    b: *const u8,
    mt_pad: i64,
}

impl Staged {
    /// Staging off: the launchers route such groups to the reference kernel.
    const NONE: Staged = Staged {
        a: std::ptr::null(),
        b: std::ptr::null(),
        mt_pad: 0,
    };
}

#[allow(clippy::too_many_arguments)]
fn launch_library(
    imp: GemmImpl,
    op: GroupedOp,
    a: &GroupedArgs,
    groups: i32,
    staged: Staged,
    ws: *mut u8,
    ws_len: usize,
    cfg: i32,
    stream: StreamRef,
) -> i32 {
    // A mixed pair (E4M3 x E5M2 or E5M2 x E4M3): CK runs it on its own instance.
    let mixed = a.fa != a.fb;
    let (fa, fb) = (a.fa as i32, a.fb as i32);
    let (out, ws, wsl, s) = (
        a.out as *mut c_void,
        ws as *mut c_void,
        ws_len as u64,
        stream.0,
    );
    // The library launchers' arguments: operands, formats, offsets, scales, out, the op's
    // three extents, (2D x 2D) the staged copies, the workspace, then (CUTLASS) the config
    // and the stream.
    let st = (staged.a, staged.b, staged.mt_pad);
    macro_rules! library {
        ($f:path, $x:expr, $y:expr, $z:expr $(, $cfg:expr)?) => {
            $f(
                a.a, fa, a.b, fb, a.offs, groups, a.sa, a.sb, out, $x as i64, $y as i64, $z as i64,
                ws, wsl, $($cfg,)? s,
            )
        };
        (2d2d $f:path, $x:expr, $y:expr, $z:expr $(, $cfg:expr)?) => {
            $f(
                a.a, fa, a.b, fb, a.offs, groups, a.sa, a.sb, out, $x as i64, $y as i64, $z as i64,
                st.0, st.1, st.2, ws, wsl, $($cfg,)? s,
            )
        };
    }
    // SAFETY: the caller validated every view (device memory of this context's GPU, sizes
    // for the op's extents); `ws` holds `ws_len` device bytes not used by other queued work
    // (own buffer, or the cache ordered by its event). Launchers only queue work on `s`.
    unsafe {
        match (imp, op) {
            (GemmImpl::CutlassSm90, GroupedOp::TwoD3D { m, n, k }) => {
                library!(sys::hipfp8_gg_cutlass_2d3d, m, n, k, cfg)
            }
            (GemmImpl::CutlassSm90, GroupedOp::TwoD2D { n, mt, k }) => {
                library!(2d2d sys::hipfp8_gg_cutlass_2d2d, n, mt, k, cfg)
            }
            (GemmImpl::CutlassSm90, GroupedOp::Blockwise2D3D { m, n, k }) => {
                library!(sys::hipfp8_gg_cutlass_bw_2d3d, m, n, k)
            }
            (GemmImpl::CutlassSm90, GroupedOp::Blockwise2D2D { n, mt, k }) => {
                library!(sys::hipfp8_gg_cutlass_bw_2d2d, n, mt, k)
            }
            (GemmImpl::CkGfx942, GroupedOp::Blockwise2D3D { m, n, k }) => {
                library!(sys::hipfp8_gg_ck_gfx942_bw_2d3d, m, n, k)
            }
            (GemmImpl::CkGfx950, GroupedOp::Blockwise2D3D { m, n, k }) => {
                library!(sys::hipfp8_gg_ck_gfx950_bw_2d3d, m, n, k)
            }
            // The plan never picks CK for the blockwise-scaled 2D x 2D (no instance).
            (GemmImpl::CkGfx942 | GemmImpl::CkGfx950, GroupedOp::Blockwise2D2D { .. }) => {
                sys::KSTATUS_UNSUPPORTED
            }
            // The mixed pairs have their own launchers (`ck_instance`); each launcher refuses
            // the pairs it does not have.
            (GemmImpl::CkGfx942, GroupedOp::TwoD3D { m, n, k }) if mixed => {
                library!(sys::hipfp8_gg_ck_gfx942_mixed_2d3d, m, n, k)
            }
            (GemmImpl::CkGfx942, GroupedOp::TwoD2D { n, mt, k }) if mixed => {
                library!(2d2d sys::hipfp8_gg_ck_gfx942_mixed_2d2d, n, mt, k)
            }
            (GemmImpl::CkGfx950, GroupedOp::TwoD3D { m, n, k }) if mixed => {
                library!(sys::hipfp8_gg_ck_gfx950_mixed_2d3d, m, n, k)
            }
            (GemmImpl::CkGfx950, GroupedOp::TwoD2D { n, mt, k }) if mixed => {
                library!(2d2d sys::hipfp8_gg_ck_gfx950_mixed_2d2d, n, mt, k)
            }
            (GemmImpl::CkGfx942, GroupedOp::TwoD3D { m, n, k }) => {
                library!(sys::hipfp8_gg_ck_gfx942_2d3d, m, n, k)
            }
            (GemmImpl::CkGfx942, GroupedOp::TwoD2D { n, mt, k }) => {
                library!(2d2d sys::hipfp8_gg_ck_gfx942_2d2d, n, mt, k)
            }
            (GemmImpl::CkGfx950, GroupedOp::TwoD3D { m, n, k }) => {
                library!(sys::hipfp8_gg_ck_gfx950_2d3d, m, n, k)
            }
            (GemmImpl::CkGfx950, GroupedOp::TwoD2D { n, mt, k }) => {
                library!(2d2d sys::hipfp8_gg_ck_gfx950_2d2d, n, mt, k)
            }
            (GemmImpl::Reference | GemmImpl::Cpu, _) => launch_reference(op, a, groups, stream),
        }
    }
}

/// The per-group staging rule of a library's 2D x 2D launcher (group_args.h `stage_2d2d`:
/// `align_len`, `min_len`): CUTLASS reads any length from a 16-token start (TMA zero-fills),
/// CK needs lengths that are multiples of its 16-wide vector loads and longer than 256 tokens
/// (ck_grouped_gemm_impl.h kVecK, kMinRed). The staging kernel must be given the values the
/// launcher's argument builder uses, or a group would be read from a copy never written.
fn stage_rule(imp: GemmImpl) -> (i32, i64) {
    match imp {
        GemmImpl::CkGfx942 | GemmImpl::CkGfx950 => (16, 257),
        _ => (1, 1),
    }
}

/// A staged 2D x 2D call (docs/OPS.md "Any group start"): the staging kernel copies each
/// group a library can't read in place (off a 16-token boundary; with CK also a length not a
/// multiple of 16) to its padded position in the workspace parts of `l`, then the library
/// runs on the caller's operands and offsets, reading those groups from their copies
/// (decided per group on the device, by the same rule: [`stage_rule`]). Its result is the
/// library's on the padded layout, bit for bit: a staged group is that layout's group (same
/// bytes, zero tail, same k-tiles: tiles are multiples of 16 tokens, and the library
/// zero-fills past a group's end anyway), and a group read in place starts on a 16-token
/// boundary, so each k-tile holds the same bytes as the padded layout's.
#[allow(clippy::too_many_arguments)]
fn launch_staged(
    imp: GemmImpl,
    op: GroupedOp,
    l: &StageLayout,
    a: &GroupedArgs,
    groups: i32,
    ws: *mut u8,
    cfg: i32,
    stream: StreamRef,
) -> i32 {
    let GroupedOp::TwoD2D { n, mt, k } = op else {
        return sys::KSTATUS_UNSUPPORTED; // only 2D x 2D is staged
    };
    let part = |off: usize| ws.wrapping_add(off);
    let (sa, sb, po, scratch) = (
        part(l.a),
        part(l.b),
        part(l.offs) as *mut i32,
        part(l.scratch) as *mut i32,
    );
    let (align_len, min_len) = stage_rule(imp);
    // SAFETY: the caller validated every view (a, b, offs device memory of this context for
    // the op's extents) and `ws` holds `l.total` device bytes unused by other queued work
    // (`run` checked the length), so each part lies inside it; the launcher only queues work
    // on the stream.
    let st = unsafe {
        sys::hipfp8_gg_stage_2d2d(
            a.a,
            a.b,
            a.offs,
            groups,
            n as i64,
            mt as i64,
            k as i64,
            sa,
            sb,
            l.mt_pad as i64,
            po,
            scratch,
            align_len,
            min_len,
            0,
            stream.0,
        )
    };
    if st != 0 {
        return st;
    }
    let staged = Staged {
        a: sa,
        b: sb,
        mt_pad: l.mt_pad as i64,
    };
    launch_library(imp, op, a, groups, staged, ws, l.lib, cfg, stream)
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
            GroupedOp::Blockwise2D3D { m, n, k } => sys::hipfp8_gg_ref_bw_2d3d(
                a.a, fa, a.b, fb, a.offs, groups, a.sa, a.sb, out, m as i64, n as i64, k as i64, 0,
                stream.0,
            ),
            GroupedOp::Blockwise2D2D { n, mt, k } => sys::hipfp8_gg_ref_bw_2d2d(
                a.a, fa, a.b, fb, a.offs, groups, a.sa, a.sb, out, n as i64, mt as i64, k as i64,
                null, 0, stream.0,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The staging area holds the padded layout of ANY offsets: the padded END of the last
    /// group (sum of round_up(len, 16) over the clamped lengths) never passes mt_pad, checked
    /// against a brute-force maximum over adversarial splits; parts are 256-byte aligned,
    /// disjoint and in bounds; sizes that overflow i32 / usize give None.
    #[test]
    fn stage_layout_bounds_every_padded_layout() {
        for (mt, groups) in [(0usize, 1usize), (16, 1), (32, 3), (1000, 7), (32768, 32)] {
            let l = StageLayout::new(1000, 7, mt, 5, groups).unwrap();
            assert_eq!(l.mt_pad % 16, 0);
            assert!(l.mt_pad >= mt + 15 * groups && l.mt_pad < mt + 15 * groups + 16);
            // Worst case: every group of length 1 (mod 16) as far as tokens allow.
            let worst: usize = (0..groups)
                .map(|g| {
                    let len = if g + 1 == groups {
                        mt.saturating_sub(groups - 1)
                    } else {
                        1
                    };
                    len.min(mt).div_ceil(16) * 16
                })
                .sum();
            assert!(worst <= l.mt_pad, "mt {mt} groups {groups}");
            let parts = [
                (l.a, 7 * l.mt_pad),
                (l.b, 5 * l.mt_pad),
                (l.offs, 4 * groups),
            ];
            let mut end = l.lib;
            for (off, len) in parts {
                assert!(off % 256 == 0 && off >= end, "{l:?}");
                end = off + len;
            }
            assert!(l.scratch >= end && l.scratch % 256 == 0 && l.total == l.scratch + 4 * groups);
        }
        assert!(StageLayout::new(0, 1, i32::MAX as usize - 15, 1, 2).is_none());
        assert!(StageLayout::new(0, usize::MAX / 2, 1 << 20, 1, 2).is_none());
    }

    #[test]
    fn plan_text_says_staged() {
        let plan = |imp, staged, split| GemmPlan {
            imp,
            cutlass: None,
            ck: None,
            fallback: None,
            split_2d2d: split,
            split_boundary: 16,
            staged_2d2d: staged,
        };
        let (ck, cut) = (GemmImpl::CkGfx942, GemmImpl::CutlassSm90);
        assert_eq!(
            plan(cut, true, false).describe(),
            "cutlass-sm90; groups off a 16-token boundary staged"
        );
        assert_eq!(
            plan(ck, true, true).describe(),
            "ck-gfx942; groups off a 16-token boundary or of a length not a multiple of 16 \
             staged + reference for groups of 256 tokens or fewer"
        );
        assert!(
            plan(cut, false, true)
                .describe()
                .ends_with("+ reference for groups off a 16-token boundary")
        );
        assert_eq!(plan(ck, false, false).describe(), "ck-gfx942");
    }

    /// The staging rule handed to the staging kernel is the one the launchers' argument
    /// builders use (ck_grouped_gemm_impl.h kVecK = 16, kMinRed = 257; CUTLASS 1, 1), and
    /// CK's minimum is the one the plan states (groups of 256 tokens or fewer: reference).
    #[test]
    fn stage_rule_matches_the_launchers() {
        assert_eq!(stage_rule(GemmImpl::CutlassSm90), (1, 1));
        for ck in [GemmImpl::CkGfx942, GemmImpl::CkGfx950] {
            assert_eq!(stage_rule(ck), (16, 257));
        }
        let src = include_str!("../../hip/grouped_gemm/ck/ck_grouped_gemm_impl.h");
        assert!(src.contains("constexpr int64_t kMinRed = 2 * 128 + 1;"));
        assert!(src.contains("constexpr int64_t kVecK = 16;"));
        assert!(src.contains("group_2d2d_staged(g, lo, hi, ps, N, Mt, K, mt_pad, kVecK, kMinRed)"));
        let cut = include_str!("../../hip/grouped_gemm/cutlass/sm90_common.h");
        assert!(cut.contains("group_2d2d_staged(g, lo, hi, ps, N, Mt, K, mt_pad, 1, 1)"));
    }

    fn d3(m: usize, n: usize, k: usize) -> GroupedOp {
        GroupedOp::TwoD3D { m, n, k }
    }

    #[test]
    fn ck_instances_cover_the_mixed_pairs_in_the_target_flavour() {
        let launchers = include_str!("../sys/launchers.rs");
        for (imp, flavour) in [
            (GemmImpl::CkGfx942, [E4Z, E5Z]),
            (GemmImpl::CkGfx950, [E4, E5]),
        ] {
            let pairs = |bw: bool| -> Vec<_> {
                ck_instances(imp)
                    .iter()
                    .filter(|i| i.blockwise == bw)
                    .flat_map(|i| i.pairs)
                    .collect()
            };
            let [e4, e5] = flavour;
            // Rowwise: E4M3 x E4M3 and both mixed pairs, once each; no E5M2 x E5M2.
            let rowwise = pairs(false);
            assert_eq!(rowwise.len(), 3, "{imp:?}");
            for want in [(e4, e4), (e4, e5), (e5, e4)] {
                assert_eq!(
                    rowwise.iter().filter(|&&&p| p == want).count(),
                    1,
                    "{want:?}"
                );
            }
            // Blockwise: E4M3 x E4M3 only, 2D x 3D only (no 2D x 2D launcher).
            assert_eq!(pairs(true), [&(e4, e4)], "{imp:?}");
            for i in ck_instances(imp) {
                assert_eq!(i.launcher_2d2d.is_none(), i.blockwise, "{}", i.name);
                for l in std::iter::once(i.launcher_2d3d).chain(i.launcher_2d2d) {
                    assert!(launchers.contains(&format!("\"{l}\" =>")), "{l}");
                    assert!(l.starts_with(&format!("hipfp8_gg_{}_", imp.name().replace('-', "_"))));
                }
            }
        }
        assert!(ck_instances(GemmImpl::CutlassSm90).is_empty());
        // The launcher each family's availability is checked by.
        let bw = GroupedOp::Blockwise2D3D { m: 0, n: 0, k: 0 };
        for (op, imp, want) in [
            (ROWWISE, GemmImpl::CkGfx942, "hipfp8_gg_ck_gfx942_2d3d"),
            (ROWWISE, GemmImpl::CkGfx950, "hipfp8_gg_ck_gfx950_2d3d"),
            (bw, GemmImpl::CkGfx942, "hipfp8_gg_ck_gfx942_bw_2d3d"),
            (bw, GemmImpl::CkGfx950, "hipfp8_gg_ck_gfx950_bw_2d3d"),
            (ROWWISE, GemmImpl::CutlassSm90, "hipfp8_gg_cutlass_2d3d"),
            (bw, GemmImpl::CutlassSm90, "hipfp8_gg_cutlass_bw_2d3d"),
        ] {
            assert_eq!(op.launcher(imp), Some(want), "{op:?} {imp:?}");
        }
        let plan = GemmPlan {
            imp: GemmImpl::CkGfx942,
            cutlass: None,
            ck: Some(&CK_GFX942[1]),
            fallback: None,
            split_2d2d: false,
            split_boundary: 16,
            staged_2d2d: false,
        };
        assert_eq!(plan.describe(), "ck-gfx942 mixed-v1-128x128x128");
        // A staged 2D x 2D call on the mixed instance: its name, then what is staged.
        let staged = GemmPlan {
            split_2d2d: true,
            staged_2d2d: true,
            ..plan
        };
        assert_eq!(
            staged.describe(),
            "ck-gfx942 mixed-v1-128x128x128; groups off a 16-token boundary or of a length not \
             a multiple of 16 staged + reference for groups of 256 tokens or fewer"
        );
    }

    #[test]
    fn library_rules_match_the_launchers() {
        let (cut, ck) = (GemmImpl::CutlassSm90, GemmImpl::CkGfx942);
        // Every benchmark shape: DeepSeek-V3, gpt-oss (K = 2880), small experts, wgrad.
        for op in [
            d3(32768, 2048, 7168),
            d3(32768, 7168, 2048),
            d3(8192, 5760, 2880),
            d3(8192, 2880, 2880),
            d3(4096, 2048, 7168),
            GroupedOp::TwoD2D {
                n: 2048,
                mt: 32768,
                k: 7168,
            },
            GroupedOp::TwoD2D {
                n: 2880,
                mt: 8192,
                k: 2880,
            },
        ] {
            assert_eq!(library_refusal(cut, op, None), None, "{op:?}");
            assert_eq!(library_refusal(ck, op, None), None, "{op:?}");
        }
        let shape = |f: Option<Fallback>| matches!(f, Some(Fallback::Shape(_)));
        assert!(shape(library_refusal(cut, d3(64, 64, 45), None)));
        assert!(shape(library_refusal(cut, d3(64, 70, 64), None)));
        // K = 256: CUTLASS takes it, CK's pipeline does not.
        assert_eq!(library_refusal(cut, d3(64, 64, 256), None), None);
        assert!(shape(library_refusal(ck, d3(64, 64, 256), None)));
        assert_eq!(library_refusal(ck, d3(64, 64, 272), None), None);
        let op2 = GroupedOp::TwoD2D {
            n: 64,
            mt: 100,
            k: 64,
        };
        assert!(shape(library_refusal(cut, op2, None)));
        // Blockwise 2D x 3D: DeepSeek-V3 forward and dgrad on both libraries (the shapes
        // tests/emu/ck_host_check.cpp runs CK's host check on); gpt-oss (N, K = 2880: not
        // whole 128-blocks) on neither; K = 256 on CUTLASS only (CK's v3 pipeline needs K >= 384).
        let bw = |m, n, k| GroupedOp::Blockwise2D3D { m, n, k };
        for op in [
            bw(32768, 2048, 7168),
            bw(32768, 7168, 2048),
            bw(4096, 2048, 7168),
        ] {
            assert_eq!(library_refusal(cut, op, None), None, "{op:?}");
            assert_eq!(library_refusal(ck, op, None), None, "{op:?}");
        }
        assert!(shape(library_refusal(cut, bw(8192, 5760, 2880), None)));
        assert!(shape(library_refusal(ck, bw(8192, 5760, 2880), None)));
        assert_eq!(library_refusal(cut, bw(64, 128, 256), None), None);
        assert!(shape(library_refusal(ck, bw(64, 128, 256), None)));
        assert_eq!(library_refusal(ck, bw(64, 128, 384), None), None);
        // CK's 32-bit buffer ranges: M * K (A) and 2 * M * N (out) bytes of the whole call.
        assert!(shape(library_refusal(ck, bw(1 << 18, 128, 8192), None)));
        assert!(shape(library_refusal(ck, bw(1 << 17, 8192, 384), None)));
        assert_eq!(library_refusal(cut, bw(1 << 18, 128, 8192), None), None);
        let p = |a: usize| a as *const c_void;
        let misaligned = library_refusal(cut, d3(64, 64, 64), Some([p(256), p(512), p(520)]));
        assert!(matches!(misaligned, Some(Fallback::Alignment(ref s)) if s.starts_with("out")));
        assert_eq!(
            library_refusal(cut, d3(64, 64, 64), Some([p(256), p(512), p(768)])),
            None
        );
    }
}
