//! The fused FP8 MoE training recipe (issue 14, docs/OPS.md "The MoE recipe"): the experts
//! block of a MoE layer (torchtitan `GroupedExperts`: `y = (silu(x w1) * (x w3)) w2` per
//! expert, tokens already permuted and grouped by END offsets on the device) as one forward
//! and one backward call, composed of the existing ops (the fused MoE casts of `moe`, which
//! write the GEMMs' dequant scales themselves ([`ScaleOutput::Dequant`]), and the grouped
//! GEMMs), with torchao's rowwise FP8 semantics. Every result is bit-identical to the same
//! ops called one by one with forward scales and [`Context::scale_reciprocal`]
//! (tests/recipe_cpu.rs, tests/gpu_recipe.rs). The grouped linear casts x with the single
//! casts (`rowwise_2d`, `per_group_colwise`), which write forward scales: those two go
//! through [`Context::scale_reciprocal`].
//!
//! - [`WeightCache`]: both FP8 layouts of each expert weight (forward B and the transposed
//!   dgrad B) with their dequant scales, quantized once by [`WeightCache::refresh`] and reused
//!   by every forward and backward until the next refresh: gradient accumulation quantizes
//!   the weights once per optimizer step. The cache is a snapshot: weights updated in place
//!   are seen only after a refresh (the generation counter says which snapshot a call used).
//! - Saved tensors: the forward writes what the backward needs into the caller's `saved`
//!   buffer ([`Context::moe_experts_saved_size`] bytes): FP8 per-group colwise copies of x and
//!   h with their dequant scales (the wgrad GEMMs' operands) and the gate/up GEMM output gu
//!   (bf16, the SwiGLU backward's input). [`ExpertsShape::saved_bytes`] compares it with a
//!   recipe that saves bf16 x, gu and h.
//! - Workspace: every intermediate and every op's scratch is carved from the caller's
//!   workspace (`*_workspace_size`): the casts' zeroed scratch (cleared by the call itself
//!   with an async memset) and the grouped GEMMs' arguments. Nothing is allocated, nothing
//!   synchronises: a call only queues work on its stream, so it can be captured into a
//!   CUDA/HIP graph on a fresh stream and replayed with new data and new offsets.
//! - Buffers are views of this context's memory (host on the CPU backend, device on a GPU);
//!   `saved` and the workspace may start at any address (the workspace's parts are 256-byte
//!   aligned from its first such address, hence 255 bytes of slack in the sizes; `saved`'s
//!   sit at fixed offsets from its first 16-byte aligned address, so a copy of `saved` at
//!   another 16-byte aligned address serves the backward as well as the original).
//! - Validation before anything is queued: shapes and sizes, every buffer's length and
//!   location, outputs overlapping anything, the offsets (CPU), the cache's shapes, format
//!   and generation. A runtime error while the ops run (a device fault, CPU scratch that
//!   cannot be had) can leave outputs partly written.
//! - Rows past `offs[E-1]` of y and dx are not written.

use std::ffi::c_void;
use std::marker::PhantomData;

use half::bf16;

use crate::context::{BackendKind, Context};
pub use crate::dispatch::NoParams;
use crate::dispatch::{BufDecl, Elem, GpuRun, OpDecl};
use crate::error::{Error, Result};
use crate::format::Fp8Format;
use crate::grouped_gemm::gpu::GroupedOp;
use crate::grouped_gemm::params::{GemmBackend, GemmParams};
use crate::moe::{DualIn, DualOut};
use crate::params::{CastParams, FormatChoice, MoeCastParams, ScaleOutput};
use crate::reference;
use crate::runtime::{DeviceBuffer, check_status};
use crate::sys;
use crate::validate::{checked_mul, require_nonzero, validate_offsets};
use crate::view::{Dst, HpSrc, Loc, Src, StreamRef};
use crate::workspace::Workspace;

// ------------------------------------------------------------------------ the reciprocal op

#[doc(hidden)]
pub static SCALE_RECIPROCAL: OpDecl<NoParams, usize> = OpDecl {
    c_name: "hipfp8_scale_reciprocal",
    bufs: &[
        BufDecl::input("scales", Elem::F32, |&n, _| Ok(n)),
        BufDecl::output("out", Elem::F32, |&n, _| Ok(n)),
    ],
    nonzero: &[],
    check: None,
    gpu_run: GpuRun::Checked {
        noop: |&n, _| n == 0,
    },
    cpu: |_, _, &n, h| {
        // The views may be longer than n: only n elements are written.
        let x = &h.src::<f32>("scales")[..n];
        reference::recipe::reciprocals(x, h.dst("out"));
        Ok(())
    },
    gpu: |_, _, _, &n, d, stream| {
        // SAFETY: validated by Context::run: device memory of this GPU, n f32 in each buffer;
        // the launcher only queues work on `stream`.
        let st = unsafe {
            sys::hipfp8_scale_reciprocal_launch(d.ptr("scales"), d.ptr("out"), n as i64, stream.0)
        };
        check_status("scale_reciprocal", st)
    },
};

impl Context {
    /// `out[j] = 1 / scales[j]` for j < n, the IEEE f32 division (torch's `Tensor.reciprocal`;
    /// 1/NaN = the canonical NaN): the grouped GEMMs' dequant scales from the scales the casts
    /// write.
    pub fn scale_reciprocal(
        &self,
        n: usize,
        scales: Src<'_, f32>,
        out: Dst<'_, f32>,
        stream: StreamRef,
    ) -> Result<()> {
        self.run(
            &SCALE_RECIPROCAL,
            &NoParams,
            n,
            [scales.into(), out.into()],
            stream,
        )
    }
}

// ---------------------------------------------------------------------------- parameters

/// The recipe's choices: the FP8 format of the activations and weights (x, h, the expert
/// weights) and of the gradients (the output's gradient, d = [d_gate | d_up]), power-of-two
/// scales, the grouped GEMM implementation on a GPU, and the layout of the experts block's
/// wgrad operands. The default is torchao's MoE recipe: E4M3 (the device's flavour)
/// everywhere, power-of-two scales, wgrad operands on the caller's offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecipeParams {
    pub format: FormatChoice,
    pub grad_format: FormatChoice,
    pub pow2_scales: bool,
    pub backend: GemmBackend,
    /// The experts block (bf16 calls) writes its wgrad operands (the per-group colwise casts
    /// of x, h, dy and d) in a layout whose groups start on 16-token boundaries (each group
    /// padded with zero tokens, [`crate::reference::moe::pad_cols`]) and runs the wgrad GEMMs
    /// on the padded offsets: every group takes the grouped GEMM's library path whatever the
    /// routing (unpadded groups off the boundary take the portable reference kernel, ~30x
    /// slower). Costs up to 15 zero tokens per group in those GEMMs; the gradients equal the
    /// unpadded recipe's up to the GEMM's summation order (bit for bit on the CPU). Not for
    /// the pre-cast calls (their operands are the caller's: pad in the dispatch, align 16) nor
    /// the grouped linear (`NotSupported`).
    pub pad_wgrad: bool,
}

impl Default for RecipeParams {
    fn default() -> Self {
        RecipeParams {
            format: FormatChoice::Auto,
            grad_format: FormatChoice::Auto,
            pow2_scales: true,
            backend: GemmBackend::Auto,
            pad_wgrad: false,
        }
    }
}

impl RecipeParams {
    fn act(&self) -> CastParams {
        CastParams::new(self.format, self.pow2_scales)
    }
    fn grad(&self) -> CastParams {
        CastParams::new(self.grad_format, self.pow2_scales)
    }
    /// The fused MoE casts of activations and weights, writing dequant scales.
    fn act_dq(&self) -> MoeCastParams {
        dequant(self.act())
    }
    /// The fused MoE casts of gradients, writing dequant scales.
    fn grad_dq(&self) -> MoeCastParams {
        dequant(self.grad())
    }
    /// The GEMM of an activation (or gradient, `grad_a`) A with an activation or weight B.
    /// With `pad_wgrad` the wgrad GEMMs' groups start on 16-token boundaries: no staging
    /// (the same bits; no staging area in the workspace).
    fn gemm(&self, grad_a: bool, ws: Option<Workspace>) -> GemmParams {
        let a = if grad_a {
            self.grad_format
        } else {
            self.format
        };
        GemmParams {
            workspace: ws,
            unstaged_2d2d: self.pad_wgrad,
            ..GemmParams::new(a, self.format).with_backend(self.backend)
        }
    }
    /// The GEMM workspace bytes of every GEMM a recipe call runs with `groups` groups: its
    /// 2D x 3D GEMMs and its 2D x 2D (wgrad) GEMMs `wgrad` ((n, mt, k) each, A a gradient)
    /// with their staging areas ([`Context::grouped_gemm_op_workspace_size`]: a smaller
    /// workspace would be refused, and the GEMMs run what they run on the cached one).
    fn gemm_bytes(
        &self,
        ctx: &Context,
        groups: usize,
        wgrad: &[(usize, usize, usize)],
    ) -> Result<usize> {
        let f = ctx.grouped_gemm_workspace_size(&self.gemm(false, None), groups)?;
        let b = ctx.grouped_gemm_workspace_size(&self.gemm(true, None), groups)?;
        wgrad.iter().try_fold(f.max(b), |bytes, &(n, mt, k)| {
            let op = GroupedOp::TwoD2D { n, mt, k };
            let w = ctx.grouped_gemm_op_workspace_size(&self.gemm(true, None), op, groups)?;
            Ok(bytes.max(w))
        })
    }
}

/// [`RecipeParams::pad_wgrad`] is for the experts block's bf16 calls: `NotSupported` with
/// `why` for a call that does not pad its wgrad operands.
fn refuse_pad(p: &RecipeParams, why: &str) -> Result<()> {
    if p.pad_wgrad {
        return Err(Error::NotSupported(format!("pad_wgrad: {why}")));
    }
    Ok(())
}

/// The pre-cast experts calls' refusal of `pad_wgrad`.
const PRECAST_PAD: &str = "the pre-cast experts calls take the caller's wgrad operands (pad the groups in the dispatch, align 16)";
/// The grouped linear's refusal of `pad_wgrad`.
const LINEAR_PAD: &str = "the grouped linear casts its wgrad operands on the caller's offsets";

/// `p` for a fused MoE cast that writes the GEMMs' dequant scales.
fn dequant(p: CastParams) -> MoeCastParams {
    MoeCastParams::from(p).with_scales(ScaleOutput::Dequant)
}

// ------------------------------------------------------------------------- buffer carving

/// Alignment of every part of a carved buffer (the GEMM libraries want 16 bytes).
const ALIGN: usize = 256;

/// Byte offsets of the parts of a carved buffer (from its first ALIGN-aligned address) and
/// the bytes it needs (with ALIGN - 1 of slack for an unaligned start).
struct Parts {
    offs: Vec<usize>,
    bytes: usize,
}

fn overflow(what: &str) -> Error {
    Error::SizeOverflow(format!("{what}: the recipe's buffer size overflows usize"))
}

/// The parts of sizes `sizes` (bytes), in order, each starting ALIGN-aligned.
fn carve(what: &str, sizes: &[usize]) -> Result<Parts> {
    let mut offs = Vec::with_capacity(sizes.len());
    let mut at = 0usize;
    for &s in sizes {
        offs.push(at);
        at = at
            .checked_add(s)
            .and_then(|v| v.checked_add(ALIGN - 1))
            .ok_or_else(|| overflow(what))?
            / ALIGN
            * ALIGN;
    }
    let bytes = at.checked_add(ALIGN - 1).ok_or_else(|| overflow(what))?;
    Ok(Parts { offs, bytes })
}

/// Bytes of `n` elements of `T`.
fn bytes_of<T>(what: &'static str, n: usize) -> Result<usize> {
    checked_mul(what, n, std::mem::size_of::<T>())
}

/// A validated caller buffer (or the cache's memory) from its first ALIGN-aligned address,
/// whose parts are handed to the ops as views.
#[derive(Clone, Copy)]
struct Region<'a> {
    base: usize,
    loc: Loc,
    _p: PhantomData<&'a mut [u8]>,
}

impl<'a> Region<'a> {
    /// The region of a buffer at `ptr` that was checked to hold the [`Parts`] it is cut into.
    fn new(ptr: *const u8, loc: Loc) -> Region<'a> {
        Region {
            base: (ptr as usize).div_ceil(ALIGN) * ALIGN,
            loc,
            _p: PhantomData,
        }
    }
    /// The region of the experts' `saved` buffer: from its first 16-byte aligned address, so
    /// the parts keep their offsets in a copy of the buffer at any other 16-byte aligned
    /// address (a framework may copy or move what it saved for the backward); the parts are
    /// as aligned as that start (16 bytes at least: what the GEMMs and vector loads need).
    fn saved(ptr: *const u8, loc: Loc) -> Region<'a> {
        Region {
            base: (ptr as usize).div_ceil(16) * 16,
            loc,
            _p: PhantomData,
        }
    }
    fn addr(&self, p: &Parts, i: usize) -> usize {
        self.base + p.offs[i]
    }
    /// Part `i` of `p` as `len` elements of `T` (the part was sized for them).
    fn src<T>(&self, p: &Parts, i: usize, len: usize) -> Src<'a, T> {
        // SAFETY: the region's buffer was checked (length, location) to hold `p.bytes` bytes
        // from its start, so every part lies inside it; parts do not overlap; the address is
        // ALIGN-aligned; the views live while the buffer is borrowed ('a).
        unsafe { Src::from_raw(self.addr(p, i) as *const T, len, self.loc) }
    }
    fn dst<T>(&self, p: &Parts, i: usize, len: usize) -> Dst<'a, T> {
        // SAFETY: as `src`; the recipe writes each part through one view at a time.
        unsafe { Dst::from_raw(self.addr(p, i) as *mut T, len, self.loc) }
    }
    fn hp(&self, p: &Parts, i: usize, len: usize) -> HpSrc<'a> {
        HpSrc::Bf16(self.src(p, i, len))
    }
    /// Part `qi` (`n` FP8 codes) and part `si` (`ns` dequant scales) as a GEMM operand.
    fn fp8(&self, p: &Parts, (qi, n): (usize, usize), (si, ns): (usize, usize)) -> Fp8Operand<'a> {
        Fp8Operand {
            q: self.src(p, qi, n),
            s: self.src(p, si, ns),
        }
    }
}

/// An FP8 operand of a grouped GEMM: its codes and their dequant scales (the GEMMs' `1/s`,
/// what the fused MoE casts and the routing dispatches write with [`ScaleOutput::Dequant`]).
#[derive(Clone, Copy)]
pub struct Fp8Operand<'a> {
    /// The FP8 codes.
    pub q: Src<'a, u8>,
    /// The dequant scales.
    pub s: Src<'a, f32>,
}

/// x or dy as a recipe call takes it: high precision (the call casts it with
/// [`Context::moe_act_dual`]) or already cast by the caller.
enum Input<'a, C> {
    Hp(HpSrc<'a>),
    Cast(C),
}

/// The backward's operands cast by the caller: dy rowwise (the W2 dgrad's A) and per-group
/// colwise (the W2 wgrad's A), x per-group colwise (the W13 wgrad's B).
#[derive(Clone, Copy)]
struct BwdCast<'a> {
    dy: Fp8Operand<'a>,
    dy_col: Fp8Operand<'a>,
    x_col: Fp8Operand<'a>,
}

/// The dimensions of one grouped GEMM of the recipe.
#[derive(Clone, Copy)]
enum Gemm {
    /// [`Context::grouped_gemm_2d3d`] (m, k, n, e).
    D3(usize, usize, usize, usize),
    /// [`Context::grouped_gemm_2d2d`] (n, mt, k).
    D2(usize, usize, usize),
}

impl Context {
    /// The grouped GEMM `shape` of `a` and `b` into `out`.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &self,
        p: &GemmParams,
        shape: Gemm,
        a: Fp8Operand<'_>,
        b: Fp8Operand<'_>,
        offs: Src<'_, i32>,
        out: Dst<'_, bf16>,
        stream: StreamRef,
    ) -> Result<()> {
        let (aq, bq, sa, sb) = (a.q, b.q, a.s, b.s);
        match shape {
            Gemm::D3(m, k, n, e) => {
                self.grouped_gemm_2d3d(p, m, k, n, e, aq, bq, offs, sa, sb, out, stream)
            }
            Gemm::D2(n, mt, k) => {
                self.grouped_gemm_2d2d(p, n, mt, k, aq, bq, offs, sa, sb, out, stream)
            }
        }
    }
}

impl Context {
    /// `out[h*e*i + g*i + j] = scales[g*2i + h*i + j]`: the (e, 2i) per-group scales of
    /// `[d_gate | d_up]` as the (e, i) tables of d_gate (h = 0) and d_up (h = 1).
    fn split_scale_halves(
        &self,
        (e, i): (usize, usize),
        scales: Src<'_, f32>,
        mut out: Dst<'_, f32>,
        stream: StreamRef,
    ) -> Result<()> {
        if e * i == 0 {
            return Ok(());
        }
        if self.backend() == BackendKind::Cpu {
            let (src, dst) = (scales.host_slice(), out.host_slice_mut());
            for (h, half) in dst.chunks_mut(e * i).enumerate() {
                for (g, row) in half.chunks_mut(i).enumerate() {
                    row.copy_from_slice(&src[g * 2 * i + h * i..][..i]);
                }
            }
            return Ok(());
        }
        // SAFETY: both are parts of the caller's checked workspace (device memory of this GPU,
        // e*2i f32 each, disjoint); the launcher only queues work on `stream`.
        let st = unsafe {
            sys::hipfp8_scale_halves_launch(
                scales.as_ptr(),
                out.as_mut_ptr(),
                e as i64,
                i as i64,
                stream.0,
            )
        };
        check_status("scale halves", st)
    }
}

/// Zeroed scratch bytes of the grouped MoE casts and the column casts of `k` columns
/// (`k` = 0: none) for `groups` groups: none on the CPU.
fn zeroed_bytes(ctx: &Context, groups: usize, colwise_k: usize) -> Result<usize> {
    if ctx.backend() == BackendKind::Cpu {
        return Ok(0);
    }
    let moe = ctx.moe_workspace_size(groups)?;
    let col = if colwise_k > 0 {
        ctx.colwise_workspace_size(groups, colwise_k, 0)?
    } else {
        0
    };
    Ok(moe.max(col))
}

/// The buffers of one recipe call, checked before anything is queued: each against its
/// length and this context's memory, and no output overlapping any other buffer.
struct Checks<'c> {
    ctx: &'c Context,
    ranges: Vec<(&'static str, usize, usize, bool)>,
}

impl<'c> Checks<'c> {
    fn new(ctx: &'c Context) -> Self {
        Checks {
            ctx,
            ranges: Vec::new(),
        }
    }
    /// The range of `n` elements of `T` at `ptr` (`out`: an output).
    fn add<T>(&mut self, name: &'static str, ptr: *const T, n: usize, out: bool) {
        let bytes = n * std::mem::size_of::<T>();
        self.ranges.push((name, ptr as usize, bytes, out));
    }
    fn hp(&mut self, name: &'static str, v: &HpSrc<'_>, n: usize) -> Result<()> {
        self.ctx.check_hp(name, v, n)?;
        match v {
            HpSrc::Bf16(x) => self.add(name, x.as_ptr(), n, false),
            HpSrc::F32(x) => self.add(name, x.as_ptr(), n, false),
        }
        Ok(())
    }
    fn src<T>(&mut self, name: &'static str, v: &Src<'_, T>, n: usize) -> Result<()> {
        self.ctx.check_src(name, v, n)?;
        self.add(name, v.as_ptr(), n, false);
        Ok(())
    }
    /// An FP8 operand: `n` codes (`name`) and `ns` scales (`scales`).
    fn fp8(
        &mut self,
        (name, scales): (&'static str, &'static str),
        v: &Fp8Operand<'_>,
        n: usize,
        ns: usize,
    ) -> Result<()> {
        self.src(name, &v.q, n)?;
        self.src(scales, &v.s, ns)
    }
    fn dst<T>(&mut self, name: &'static str, v: &mut Dst<'_, T>, n: usize) -> Result<()> {
        self.ctx.check_dst(name, v, n)?;
        self.add(name, v.as_mut_ptr().cast_const(), n, true);
        Ok(())
    }
    /// The offsets: `groups` of them (`GroupCountMismatch`), valid END offsets into `extent`
    /// rows on the CPU (the kernels clamp them on a GPU).
    fn offs(&mut self, offs: &Src<'_, i32>, groups: usize, extent: usize) -> Result<()> {
        if offs.len() != groups {
            return Err(Error::GroupCountMismatch {
                expected: groups,
                got: offs.len(),
            });
        }
        self.src("offs", offs, groups)?;
        if self.ctx.backend() == BackendKind::Cpu {
            validate_offsets(offs.host_slice(), extent)?;
        }
        Ok(())
    }
    /// Overlaps of outputs with anything, then (GPU) every pointer is this GPU's memory.
    fn finish(self) -> Result<()> {
        let r = &self.ranges;
        for (i, a) in r.iter().enumerate() {
            for b in &r[i + 1..] {
                let overlap = a.2 > 0 && b.2 > 0 && a.1 < b.1 + b.2 && b.1 < a.1 + a.2;
                if overlap && (a.3 || b.3) {
                    return Err(Error::OverlappingBuffers(format!(
                        "`{}` and `{}` share memory",
                        a.0, b.0
                    )));
                }
            }
        }
        let ptrs: Vec<_> = r.iter().map(|x| (x.0, x.1 as *const c_void)).collect();
        self.ctx.check_device_pointers(&ptrs)
    }
}

/// Run `f` (the recipe's ops on `stream`) with the workspace's zeroed part `z` (`zb` bytes)
/// as the stream's zeroed scratch, cleared first in stream order (GPU; nothing on the CPU).
fn with_zeroed<R>(
    ctx: &Context,
    z: usize,
    zb: usize,
    stream: StreamRef,
    f: impl FnOnce() -> Result<R>,
) -> Result<R> {
    if ctx.backend() == BackendKind::Cpu || zb == 0 {
        return f();
    }
    let _dev = ctx.activate()?;
    // SAFETY: `z` is the zeroed part of the caller's workspace, checked to be device memory
    // of this GPU holding `zb` bytes; the memset is queued on `stream` before the ops.
    check_status("recipe workspace memset", unsafe {
        sys::hipfp8_rt_memset_async(z as *mut c_void, 0, zb as u64, stream.0)
    })?;
    ctx.workspace
        .with_scoped_zeroed(stream, z as *mut c_void, zb, f)
}

/// The GEMM workspace handed to every GEMM of a call (None when they need none).
fn gemm_ws(ctx: &Context, addr: usize, bytes: usize) -> Option<Workspace> {
    if ctx.backend() == BackendKind::Cpu || bytes == 0 {
        return None;
    }
    // SAFETY: the GEMM part of the caller's workspace: device memory of this GPU (checked),
    // `bytes` long, used by nothing else during the call (stream order).
    Some(unsafe { Workspace::from_raw(addr as *mut c_void, bytes) })
}

// --------------------------------------------------------------------------- weight cache

/// One projection's expert weights: (E,K,N) column-major (`w[e*K*N + n*K + k]`, i.e. torch's
/// (E,N,K) row-major `nn.Linear` weights stacked per expert); the GEMM computes
/// `y (M,N) = x (M,K) . W_e` for each group's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Projection {
    pub e: usize,
    pub k: usize,
    pub n: usize,
}

/// The parts of one projection in a cache: forward B (colwise_3d) and its dequant scales,
/// dgrad B (rowwise_3d_transpose_rhs) and its dequant scales.
const PROJ_PARTS: usize = 4;

impl Projection {
    fn sizes(&self) -> Result<[usize; PROJ_PARTS]> {
        let ekn = checked_mul("e*k*n", checked_mul("e*k", self.e, self.k)?, self.n)?;
        let en = bytes_of::<f32>("e*n", checked_mul("e*n", self.e, self.n)?)?;
        let ek = bytes_of::<f32>("e*k", checked_mul("e*k", self.e, self.k)?)?;
        Ok([ekn, en, ekn, ek])
    }
}

enum Mem {
    Host(Vec<u8>),
    Device(DeviceBuffer<u8>),
}

/// Both FP8 layouts of a set of expert weights (the experts block: W13 then W2; a grouped
/// linear: one), with their dequant scales, in memory the cache owns (allocated once by
/// [`WeightCache::new`]). [`WeightCache::refresh`] quantizes the caller's weights into it and
/// advances the generation; [`WeightCache::invalidate`] marks it empty (calls refuse it until
/// the next refresh). Calls read the snapshot of the last refresh: a caller that updates its
/// weights in place (an optimizer step) refreshes once afterwards; forwards and backwards of
/// the micro-batches in between reuse the FP8 copies.
pub struct WeightCache {
    projs: Vec<Projection>,
    format: Fp8Format,
    pow2: bool,
    ordinal: Option<usize>,
    parts: Parts,
    mem: Mem,
    /// The current snapshot's number (0: empty).
    generation: u64,
    /// Refreshes so far (generations never repeat, also across invalidations).
    refreshes: u64,
}

/// The operands of one cached projection the GEMMs read: forward B and dgrad B.
struct Cached<'a> {
    fwd: Fp8Operand<'a>,
    dgrad: Fp8Operand<'a>,
}

impl WeightCache {
    /// An empty cache for `projs` (each k, n > 0) with the format and scales of `p` on `ctx`.
    pub fn new(ctx: &Context, p: &RecipeParams, projs: &[Projection]) -> Result<WeightCache> {
        let mut sizes = Vec::with_capacity(projs.len() * PROJ_PARTS);
        for pr in projs {
            require_nonzero("k", pr.k)?;
            require_nonzero("n", pr.n)?;
            sizes.extend(pr.sizes()?);
        }
        let parts = carve("weight cache", &sizes)?;
        let mem = match ctx.backend() {
            BackendKind::Cpu => Mem::Host(reference::try_scratch("weight cache", parts.bytes)?),
            BackendKind::Gpu => Mem::Device(DeviceBuffer::zeroed(ctx, parts.bytes)?),
        };
        Ok(WeightCache {
            projs: projs.to_vec(),
            format: ctx.resolve(p.format),
            pow2: p.pow2_scales,
            ordinal: ctx.ordinal(),
            parts,
            mem,
            generation: 0,
            refreshes: 0,
        })
    }

    /// The projections the cache holds.
    pub fn projections(&self) -> &[Projection] {
        &self.projs
    }
    /// The FP8 format of the cached weights.
    pub fn format(&self) -> Fp8Format {
        self.format
    }
    /// Bytes of memory the cache owns.
    pub fn bytes(&self) -> usize {
        self.parts.bytes
    }
    /// The snapshot's number: 0 when empty (never refreshed, or invalidated), else advanced
    /// by each refresh.
    pub fn generation(&self) -> u64 {
        self.generation
    }
    /// Mark the cache empty: calls refuse it until the next [`WeightCache::refresh`].
    pub fn invalidate(&mut self) {
        self.generation = 0;
    }

    fn region(&self) -> Region<'_> {
        match &self.mem {
            Mem::Host(v) => Region::new(v.as_ptr(), Loc::Host),
            Mem::Device(b) => Region::new(b.as_ptr(), Loc::Device),
        }
    }

    fn check_ctx(&self, ctx: &Context) -> Result<()> {
        if ctx.ordinal() != self.ordinal {
            return Err(Error::WrongLocation(format!(
                "the weight cache lives on {:?} (None: the host), the context on {:?}",
                self.ordinal,
                ctx.ordinal()
            )));
        }
        Ok(())
    }

    /// Quantize `weights` (one per projection, each e*k*n elements (E,K,N) column-major, of
    /// this context's memory) into the cache on `stream` and advance the generation, which it
    /// returns. Every weight is checked before the first is cast. Work is queued on `stream`:
    /// calls on other streams must be ordered after it by the caller.
    pub fn refresh(
        &mut self,
        ctx: &Context,
        weights: &[HpSrc<'_>],
        stream: StreamRef,
    ) -> Result<u64> {
        let parts: Vec<&[HpSrc<'_>]> = weights.iter().map(std::slice::from_ref).collect();
        self.refresh_parts(ctx, &parts, stream)
    }

    /// [`WeightCache::refresh`] with each projection's weight given whole (one part) or as its
    /// two halves along n (two parts of e*k*(n/2) elements, one dtype: each expert's first n/2
    /// rows of k from the first, the others from the second), e.g. the experts' W13 as
    /// torchtitan's w1 and w3: the same cache, bit for bit, as the stacked weight gives, without
    /// the stacked copy on a GPU.
    pub fn refresh_parts(
        &mut self,
        ctx: &Context,
        weights: &[&[HpSrc<'_>]],
        stream: StreamRef,
    ) -> Result<u64> {
        self.check_ctx(ctx)?;
        if weights.len() != self.projs.len() {
            return Err(Error::GroupCountMismatch {
                expected: self.projs.len(),
                got: weights.len(),
            });
        }
        let mut ck = Checks::new(ctx);
        for (w, pr) in weights.iter().zip(&self.projs) {
            let whole = pr.sizes()?[0];
            match w {
                [one] => ck.hp("weights", one, whole)?,
                [a, b] => {
                    if pr.n % 2 != 0 || a.dtype_name() != b.dtype_name() {
                        return Err(Error::InvalidShape(format!(
                            "a weight in two halves needs an even n (got {}) and one dtype \
                             (got {} and {})",
                            pr.n,
                            a.dtype_name(),
                            b.dtype_name()
                        )));
                    }
                    ck.hp("weights", a, whole / 2)?;
                    ck.hp("weights", b, whole / 2)?;
                }
                _ => {
                    return Err(Error::InvalidShape(format!(
                        "a weight comes in one or two parts, not {}",
                        w.len()
                    )));
                }
            }
        }
        ck.finish()?;
        // A failure part-way leaves a mixed snapshot: the cache is empty until refreshed.
        self.generation = 0;
        let cp = dequant(CastParams::new(self.format, self.pow2));
        let r = self.region();
        let p = &self.parts;
        for (j, (w, pr)) in weights.iter().zip(&self.projs).enumerate() {
            let (e, k, n) = (pr.e, pr.k, pr.n);
            let b = j * PROJ_PARTS;
            let (en, ek, ekn) = (e * n, e * k, e * k * n);
            let outs = [r.dst(p, b, ekn), r.dst(p, b + 2, ekn)];
            let scales = [r.dst(p, b + 1, en), r.dst(p, b + 3, ek)];
            match *w {
                [one] => {
                    let [out, out_t] = outs;
                    let [sc, sc_t] = scales;
                    ctx.moe_weights_dual(&cp, e, k, n, *one, out, sc, out_t, sc_t, stream)?;
                }
                [a, b] => {
                    let [out, out_t] = outs;
                    let [sc, sc_t] = scales;
                    ctx.moe_weights_dual_halves(
                        &cp, e, k, n, *a, *b, out, sc, out_t, sc_t, stream,
                    )?;
                }
                _ => unreachable!("checked above"),
            }
        }
        self.refreshes += 1;
        self.generation = self.refreshes;
        Ok(self.generation)
    }

    /// Check the cache for a call of `ctx`, `p` over `projs`; the views of each projection.
    fn use_for(
        &self,
        ctx: &Context,
        p: &RecipeParams,
        projs: &[Projection],
    ) -> Result<Vec<Cached<'_>>> {
        self.check_ctx(ctx)?;
        if self.projs != projs {
            return Err(Error::InvalidShape(format!(
                "the weight cache holds {:?}, the call needs {projs:?}",
                self.projs
            )));
        }
        if ctx.resolve(p.format) != self.format || p.pow2_scales != self.pow2 {
            return Err(Error::UnsupportedFormat(format!(
                "the weight cache holds {:?} (pow2 scales {}), the call asks for {:?} (pow2 {})",
                self.format,
                self.pow2,
                ctx.resolve(p.format),
                p.pow2_scales
            )));
        }
        if self.generation == 0 {
            return Err(Error::NotSupported(
                "the weight cache is empty: refresh it with the weights first".into(),
            ));
        }
        let (r, pt) = (self.region(), &self.parts);
        Ok(projs
            .iter()
            .enumerate()
            .map(|(j, pr)| {
                let b = j * PROJ_PARTS;
                let (en, ek, ekn) = (pr.e * pr.n, pr.e * pr.k, pr.e * pr.k * pr.n);
                Cached {
                    fwd: r.fp8(pt, (b, ekn), (b + 1, en)),
                    dgrad: r.fp8(pt, (b + 2, ekn), (b + 3, ek)),
                }
            })
            .collect())
    }

    /// A backward's check that the forward it follows used this snapshot.
    fn check_generation(&self, generation: u64) -> Result<()> {
        if generation != self.generation {
            return Err(Error::NotSupported(format!(
                "the saved tensors come from a forward with weight generation {generation}, the \
                 cache is at generation {}: refresh the cache between a backward and the next \
                 forward, not between a forward and its backward",
                self.generation
            )));
        }
        Ok(())
    }
}

// ------------------------------------------------------------------------ the experts block

/// The experts block: m routed tokens (rows of x, grouped by `e` END offsets), model dim d,
/// intermediate dim i, e experts. Weights: W13 (E, 2I, D) row-major = the projection
/// (e, k = d, n = 2i) (gate = its first i output columns, up = the last i: torchtitan's w1
/// and w3 stacked along their output dim), W2 (E, D, I) row-major = (e, k = i, n = d).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpertsShape {
    pub m: usize,
    pub d: usize,
    pub i: usize,
    pub e: usize,
}

/// Bytes the backward keeps from the forward ([`ExpertsShape::saved_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SavedBytes {
    /// This recipe: FP8 colwise x and h (m_cap*d and m_cap*i: room for the padded layout of
    /// [`RecipeParams::pad_wgrad`], `m_cap = round_up(m + 15*e, 16)`) with their e*d and e*i
    /// f32 dequant scales, bf16 gu (m*2i) and the e padded offsets.
    pub fp8: usize,
    /// A recipe that saves the bf16 tensors and re-quantizes them in the backward (torchao's
    /// `_Float8GroupedMM` per GEMM and torch's SwiGLU autograd): x (m*d), gu (m*2i) and h
    /// (m*i), all bf16.
    pub bf16: usize,
}

/// Parts of `saved`: x colwise, its dequant scales, gu, h colwise, its dequant scales, the
/// padded offsets (with `pad_wgrad`). The colwise parts have room for m_cap tokens.
const SAVED_XC: usize = 0;
const SAVED_XCS: usize = 1;
const SAVED_GU: usize = 2;
const SAVED_HC: usize = 3;
const SAVED_HCS: usize = 4;
const SAVED_PAD: usize = 5;

/// Parts of a workspace: the zeroed scratch of the casts, the GEMMs' arguments, then the
/// call's intermediates from index 2 on.
const WS_ZERO: usize = 0;
const WS_GEMM: usize = 1;

impl ExpertsShape {
    /// W13 and W2, the projections a [`WeightCache`] for this block holds.
    pub fn projections(&self) -> [Projection; 2] {
        [
            Projection {
                e: self.e,
                k: self.d,
                n: 2 * self.i,
            },
            Projection {
                e: self.e,
                k: self.i,
                n: self.d,
            },
        ]
    }

    fn check(&self) -> Result<()> {
        require_nonzero("d", self.d)?;
        require_nonzero("i", self.i)?;
        checked_mul("2*i", 2, self.i)?;
        for pr in self.projections() {
            pr.sizes()?;
        }
        checked_mul("m*2i", self.m, 2 * self.i)?;
        checked_mul("m*d", self.m, self.d)?;
        Ok(())
    }

    /// Element counts: (m*d, m*i, m*2i, e*d, e*i, e*2i).
    fn counts(&self) -> (usize, usize, usize, usize, usize, usize) {
        let (m, d, i, e) = (self.m, self.d, self.i, self.e);
        (m * d, m * i, m * 2 * i, e * d, e * i, e * 2 * i)
    }

    /// Tokens of the padded wgrad layout: `round_up(m + 15*e, 16)` (every group padded to 16
    /// fits whatever the offsets).
    fn m_cap(&self) -> Result<usize> {
        checked_mul("15*e", 15, self.e)?
            .checked_add(self.m)
            .and_then(|n| n.checked_next_multiple_of(16))
            .ok_or_else(|| overflow("m + 15*e"))
    }

    /// The wgrad operands' columns (m_cap tokens of `cols`).
    fn cap_cols(&self, what: &str, cols: usize) -> Result<usize> {
        checked_mul(what, self.m_cap()?, cols)
    }

    /// The parts of `saved`; `pre`: the pre-cast forward's (no x colwise: the caller keeps
    /// it and hands it to the backward).
    fn saved_sizes(&self, pre: bool) -> Result<[usize; 6]> {
        self.check()?;
        let (_, _, m2i, ed, ei, _) = self.counts();
        let x = |n: usize| if pre { 0 } else { n };
        Ok([
            x(self.cap_cols("m_cap*d", self.d)?),
            x(bytes_of::<f32>("e*d", ed)?),
            bytes_of::<bf16>("m*2i", m2i)?,
            self.cap_cols("m_cap*i", self.i)?,
            bytes_of::<f32>("e*i", ei)?,
            bytes_of::<i32>("e", self.e)?,
        ])
    }

    fn saved_parts(&self, pre: bool) -> Result<Parts> {
        carve("experts saved", &self.saved_sizes(pre)?)
    }

    /// The bytes the backward keeps, this recipe's and a bf16-saving one's.
    pub fn saved_bytes(&self) -> Result<SavedBytes> {
        let fp8 = self.saved_sizes(false)?.iter().sum();
        let (md, mi, m2i, ..) = self.counts();
        Ok(SavedBytes {
            fp8,
            bf16: 2 * (md + m2i + mi),
        })
    }

    /// The forward's workspace: parts 2, 3 x's rowwise cast (none when `pre`), 4, 5 h's.
    fn fwd_parts(&self, pre: bool, zb: usize, gb: usize) -> Result<Parts> {
        self.check()?;
        let (md, mi, ..) = self.counts();
        let m4 = bytes_of::<f32>("scales", self.m)?;
        let x = |n: usize| if pre { 0 } else { n };
        carve("experts forward workspace", &[zb, gb, x(md), x(m4), mi, m4])
    }

    /// The backward's workspace: parts 2-5 dy's casts (none when `pre`), 6 dh, 7-10 d's (the
    /// colwise parts with room for m_cap tokens), 11 d's split scales, 12 padded offsets.
    fn bwd_parts(&self, pre: bool, zb: usize, gb: usize) -> Result<Parts> {
        self.check()?;
        let (md, mi, m2i, ed, _, e2i) = self.counts();
        let f = |n| bytes_of::<f32>("scales", n);
        let m4 = f(self.m)?;
        let x = |n: usize| if pre { 0 } else { n };
        carve(
            "experts backward workspace",
            &[
                zb,
                gb,
                x(md),
                x(m4),
                x(self.cap_cols("m_cap*d", self.d)?),
                x(f(ed)?),
                bytes_of::<bf16>("m*i", mi)?,
                m2i,
                m4,
                self.cap_cols("m_cap*2i", 2 * self.i)?,
                f(e2i)?,
                f(e2i)?,
                bytes_of::<i32>("e", self.e)?,
            ],
        )
    }
}

/// The buffer sizes of the experts calls ([`Context::moe_experts_sizes`],
/// [`Context::moe_experts_precast_sizes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpertsSizes {
    /// Bytes of `saved` (aligned; the parts of [`ExpertsShape::saved_bytes`]).
    pub saved: usize,
    /// Bytes of the forward's workspace.
    pub forward_workspace: usize,
    /// Bytes of the backward's workspace.
    pub backward_workspace: usize,
}

impl Context {
    /// Bytes of the `saved` buffer of [`Context::moe_experts_forward`] (the parts of
    /// [`ExpertsShape::saved_bytes`], aligned, plus 255 of slack).
    pub fn moe_experts_saved_size(&self, s: ExpertsShape) -> Result<usize> {
        Ok(s.saved_parts(false)?.bytes)
    }

    /// The buffer sizes of [`Context::moe_experts_forward`] and [`Context::moe_experts_backward`]
    /// (`saved` as [`Context::moe_experts_saved_size`]).
    pub fn moe_experts_sizes(&self, p: &RecipeParams, s: ExpertsShape) -> Result<ExpertsSizes> {
        self.experts_sizes(p, s, false)
    }

    /// The buffer sizes of the pre-cast experts calls (smaller than the others': x's and dy's
    /// casts are the caller's).
    pub fn moe_experts_precast_sizes(
        &self,
        p: &RecipeParams,
        s: ExpertsShape,
    ) -> Result<ExpertsSizes> {
        self.experts_sizes(p, s, true)
    }

    /// The sizes of the experts calls (`pre`: the pre-cast ones).
    fn experts_sizes(&self, p: &RecipeParams, s: ExpertsShape, pre: bool) -> Result<ExpertsSizes> {
        let (zb, fwd_gb) = self.experts_scratch(p, s, false)?;
        let (_, bwd_gb) = self.experts_scratch(p, s, true)?;
        Ok(ExpertsSizes {
            saved: s.saved_parts(pre)?.bytes,
            forward_workspace: s.fwd_parts(pre, zb, fwd_gb)?.bytes,
            backward_workspace: s.bwd_parts(pre, zb, bwd_gb)?.bytes,
        })
    }

    /// The zeroed scratch and GEMM workspace bytes of the forward, or (`bwd`) the backward
    /// with its wgrad GEMMs (d, mt, i) and (i, mt, d), mt = m_cap with `pad_wgrad`.
    fn experts_scratch(
        &self,
        p: &RecipeParams,
        s: ExpertsShape,
        bwd: bool,
    ) -> Result<(usize, usize)> {
        s.check()?;
        let wgrad = if bwd {
            let mt = if p.pad_wgrad { s.m_cap()? } else { s.m };
            vec![(s.d, mt, s.i), (s.i, mt, s.d)]
        } else {
            Vec::new()
        };
        // moe_act_dual of x and dy (d columns) runs per_group_colwise (crate::moe::dual_composed)
        Ok((
            zeroed_bytes(self, s.e, s.d)?,
            p.gemm_bytes(self, s.e, &wgrad)?,
        ))
    }

    /// The experts block forward on `stream`: `y (m, d) = swiglu(x . W13) . W2` per group,
    /// from x (m, d) (bf16 or f32) with `offs[e]` END offsets along m and the cache's FP8
    /// weights, i.e. `moe_act_dual(x)`, the gate/up grouped GEMM into gu, `moe_swiglu_quant(gu)`
    /// and the down grouped GEMM (the casts write the GEMMs' dequant scales). Writes y
    /// (bf16, rows past `offs[e-1]` untouched) and `saved` (for the backward); returns the
    /// cache generation it used (the backward's `generation`).
    pub fn moe_experts_forward(
        &self,
        p: &RecipeParams,
        s: ExpertsShape,
        cache: &WeightCache,
        x: HpSrc<'_>,
        offs: Src<'_, i32>,
        y: Dst<'_, bf16>,
        saved: Dst<'_, u8>,
        workspace: Dst<'_, u8>,
        stream: StreamRef,
    ) -> Result<u64> {
        let x = Input::Hp(x);
        self.experts_forward(p, s, cache, x, offs, y, saved, workspace, stream)
    }

    /// [`Context::moe_experts_forward`] from x already cast: `x.q` (m*d FP8 codes of
    /// `p.format`, row-major) and `x.s` (m dequant row scales), exactly what
    /// [`Context::moe_act_dual`] (or [`Context::moe_dispatch_dual`], with `offs` = its
    /// `offs_pad` and m = its `m_cap`) writes with [`ScaleOutput::Dequant`]: the result is then
    /// bit-identical to the high-precision call's. `saved` and the workspace are
    /// [`Context::moe_experts_precast_sizes`] bytes; x's per-group colwise cast is not saved:
    /// [`Context::moe_experts_backward_precast`] takes it from the caller.
    pub fn moe_experts_forward_precast(
        &self,
        p: &RecipeParams,
        s: ExpertsShape,
        cache: &WeightCache,
        x: Fp8Operand<'_>,
        offs: Src<'_, i32>,
        y: Dst<'_, bf16>,
        saved: Dst<'_, u8>,
        workspace: Dst<'_, u8>,
        stream: StreamRef,
    ) -> Result<u64> {
        let x = Input::Cast(x);
        self.experts_forward(p, s, cache, x, offs, y, saved, workspace, stream)
    }

    fn experts_forward(
        &self,
        p: &RecipeParams,
        s: ExpertsShape,
        cache: &WeightCache,
        x: Input<'_, Fp8Operand<'_>>,
        offs: Src<'_, i32>,
        mut y: Dst<'_, bf16>,
        mut saved: Dst<'_, u8>,
        mut workspace: Dst<'_, u8>,
        stream: StreamRef,
    ) -> Result<u64> {
        let pre = matches!(x, Input::Cast(_));
        if pre {
            refuse_pad(p, PRECAST_PAD)?;
        }
        let (zb, gb) = self.experts_scratch(p, s, false)?;
        let wp = s.fwd_parts(pre, zb, gb)?;
        let sp = s.saved_parts(pre)?;
        let w = cache.use_for(self, p, &s.projections())?;
        let (m, d, i, e) = (s.m, s.d, s.i, s.e);
        let (md, mi, m2i, ed, ei, _) = s.counts();
        // The wgrad operands' token extent: m_cap in the padded layout.
        let mt = if p.pad_wgrad { s.m_cap()? } else { m };
        let mut ck = Checks::new(self);
        match &x {
            Input::Hp(x) => ck.hp("x", x, md)?,
            Input::Cast(x) => ck.fp8(("x", "x_scales"), x, md, m)?,
        }
        ck.offs(&offs, e, m)?;
        ck.dst("y", &mut y, md)?;
        ck.dst("saved", &mut saved, sp.bytes)?;
        ck.dst("workspace", &mut workspace, wp.bytes)?;
        ck.finish()?;
        let ws = Region::new(workspace.as_mut_ptr(), self.loc());
        let sv = Region::saved(saved.as_mut_ptr(), self.loc());
        let (act, gemm) = (
            p.act_dq(),
            p.gemm(false, gemm_ws(self, ws.addr(&wp, WS_GEMM), gb)),
        );
        with_zeroed(self, ws.addr(&wp, WS_ZERO), zb, stream, || {
            let pad = || p.pad_wgrad.then(|| (mt, sv.dst(&sp, SAVED_PAD, e)));
            let xq = match x {
                Input::Hp(x) => {
                    let x_out = DualOut {
                        out: ws.dst(&wp, 2, md),
                        scales: ws.dst(&wp, 3, m),
                        out_col: sv.dst(&sp, SAVED_XC, mt * d),
                        scales_col: sv.dst(&sp, SAVED_XCS, ed),
                    };
                    self.moe_dual(&act, (m, d), DualIn::Act(x), offs, x_out, pad(), stream)?;
                    ws.fp8(&wp, (2, md), (3, m))
                }
                Input::Cast(x) => x,
            };
            let gu = sv.dst(&sp, SAVED_GU, m2i);
            self.gemm(
                &gemm,
                Gemm::D3(m, d, 2 * i, e),
                xq,
                w[0].fwd,
                offs,
                gu,
                stream,
            )?;
            let h_out = DualOut {
                out: ws.dst(&wp, 4, mi),
                scales: ws.dst(&wp, 5, m),
                out_col: sv.dst(&sp, SAVED_HC, mt * i),
                scales_col: sv.dst(&sp, SAVED_HCS, ei),
            };
            let gu = DualIn::Swiglu(sv.hp(&sp, SAVED_GU, m2i));
            self.moe_dual(&act, (m, i), gu, offs, h_out, pad(), stream)?;
            let hq = ws.fp8(&wp, (4, mi), (5, m));
            self.gemm(&gemm, Gemm::D3(m, i, d, e), hq, w[1].fwd, offs, y, stream)
        })?;
        Ok(cache.generation())
    }

    /// The experts block backward on `stream`, from `saved` (written by the forward that
    /// returned `generation`, with the same shape, offsets and cache) and dy (m, d): dx (m, d)
    /// (rows past `offs[e-1]` untouched), dW13 (2, E, I, D) = [dW1; dW3] (W13's gate and up
    /// halves as two (E, I, D) blocks: torchtitan's w1 and w3 layouts) and dW2 (E, D, I) (bf16;
    /// an empty group's gradients are zeros), i.e. `moe_act_dual(dy)`, the W2 dgrad
    /// GEMM into dh and the W2 wgrad GEMM, `moe_swiglu_bwd_quant(dh, gu)`, the W13 dgrad GEMM
    /// and the W13 wgrad GEMMs of the gate and up halves. `NotSupported` when the cache was refreshed after that forward.
    pub fn moe_experts_backward(
        &self,
        p: &RecipeParams,
        s: ExpertsShape,
        cache: &WeightCache,
        generation: u64,
        saved: Src<'_, u8>,
        dy: HpSrc<'_>,
        offs: Src<'_, i32>,
        dx: Dst<'_, bf16>,
        dw13: Dst<'_, bf16>,
        dw2: Dst<'_, bf16>,
        workspace: Dst<'_, u8>,
        stream: StreamRef,
    ) -> Result<()> {
        let (c, dy) = ((cache, generation), Input::Hp(dy));
        self.experts_backward(p, s, c, saved, dy, offs, [dx, dw13, dw2], workspace, stream)
    }

    /// [`Context::moe_experts_backward`] from operands already cast (each FP8 codes of the
    /// recipe's formats with dequant scales, as [`Context::moe_act_dual`] /
    /// [`Context::moe_combine_bwd_dual`] write them with [`ScaleOutput::Dequant`]): dy rowwise
    /// (m*d codes of `p.grad_format`, m scales) and per-group colwise (m*d codes, e*d scales)
    /// on `offs`, and x per-group colwise (m*d codes of `p.format`, e*d scales: the forward's
    /// input, e.g. the dispatch's `out_col`/`scales_col`). `saved` comes from
    /// [`Context::moe_experts_forward_precast`]; the workspace is
    /// [`Context::moe_experts_precast_sizes`] bytes. Bit-identical to the high-precision call
    /// when the operands are `moe_act_dual`'s of the same x and dy.
    pub fn moe_experts_backward_precast(
        &self,
        p: &RecipeParams,
        s: ExpertsShape,
        cache: &WeightCache,
        generation: u64,
        saved: Src<'_, u8>,
        dy: Fp8Operand<'_>,
        dy_col: Fp8Operand<'_>,
        x_col: Fp8Operand<'_>,
        offs: Src<'_, i32>,
        dx: Dst<'_, bf16>,
        dw13: Dst<'_, bf16>,
        dw2: Dst<'_, bf16>,
        workspace: Dst<'_, u8>,
        stream: StreamRef,
    ) -> Result<()> {
        let c = (cache, generation);
        let dy = Input::Cast(BwdCast { dy, dy_col, x_col });
        self.experts_backward(p, s, c, saved, dy, offs, [dx, dw13, dw2], workspace, stream)
    }

    fn experts_backward(
        &self,
        p: &RecipeParams,
        s: ExpertsShape,
        (cache, generation): (&WeightCache, u64),
        saved: Src<'_, u8>,
        dy: Input<'_, BwdCast<'_>>,
        offs: Src<'_, i32>,
        [mut dx, mut dw13, mut dw2]: [Dst<'_, bf16>; 3],
        mut workspace: Dst<'_, u8>,
        stream: StreamRef,
    ) -> Result<()> {
        let pre = matches!(dy, Input::Cast(_));
        if pre {
            refuse_pad(p, PRECAST_PAD)?;
        }
        let (zb, gb) = self.experts_scratch(p, s, true)?;
        let wp = s.bwd_parts(pre, zb, gb)?;
        let sp = s.saved_parts(pre)?;
        let w = cache.use_for(self, p, &s.projections())?;
        cache.check_generation(generation)?;
        let (m, d, i, e) = (s.m, s.d, s.i, s.e);
        let (md, mi, m2i, ed, ei, e2i) = s.counts();
        let mt = if p.pad_wgrad { s.m_cap()? } else { m };
        let mut ck = Checks::new(self);
        ck.src("saved", &saved, sp.bytes)?;
        match &dy {
            Input::Hp(dy) => ck.hp("dy", dy, md)?,
            Input::Cast(c) => {
                ck.fp8(("dy", "dy_scales"), &c.dy, md, m)?;
                ck.fp8(("dy_col", "dy_col_scales"), &c.dy_col, md, ed)?;
                ck.fp8(("x_col", "x_col_scales"), &c.x_col, md, ed)?;
            }
        }
        ck.offs(&offs, e, m)?;
        ck.dst("dx", &mut dx, md)?;
        ck.dst("dw13", &mut dw13, checked_mul("e*2i*d", e2i, d)?)?;
        ck.dst("dw2", &mut dw2, checked_mul("e*d*i", ed, i)?)?;
        ck.dst("workspace", &mut workspace, wp.bytes)?;
        ck.finish()?;
        let ws = Region::new(workspace.as_mut_ptr(), self.loc());
        let sv = Region::saved(saved.as_ptr(), self.loc());
        let gw = gemm_ws(self, ws.addr(&wp, WS_GEMM), gb);
        let (grad, gemm) = (p.grad_dq(), p.gemm(true, gw));
        with_zeroed(self, ws.addr(&wp, WS_ZERO), zb, stream, || {
            // The wgrad GEMMs' offsets: the forward's padded ones with `pad_wgrad`; the
            // backward's casts write the same values into part 12.
            let pad = || p.pad_wgrad.then(|| (mt, ws.dst(&wp, 12, e)));
            let wg_offs = if p.pad_wgrad {
                sv.src::<i32>(&sp, SAVED_PAD, e)
            } else {
                offs
            };
            let (dyq, dyc, xc) = match dy {
                Input::Hp(dy) => {
                    let dims = (m, d, e);
                    let (dyq, dyc) = self.cast_dy(&grad, ws, &wp, dims, dy, offs, pad(), stream)?;
                    (dyq, dyc, sv.fp8(&sp, (SAVED_XC, mt * d), (SAVED_XCS, ed)))
                }
                Input::Cast(c) => (c.dy, c.dy_col, c.x_col),
            };
            // W2 dgrad: dh (m, i) = dy . W2^T.
            let dh = ws.dst(&wp, 6, mi);
            self.gemm(
                &gemm,
                Gemm::D3(m, d, i, e),
                dyq,
                w[1].dgrad,
                offs,
                dh,
                stream,
            )?;
            // W2 wgrad: dW2 (e, d, i) = dy^T . h per group.
            let hc = sv.fp8(&sp, (SAVED_HC, mt * i), (SAVED_HCS, ei));
            self.gemm(&gemm, Gemm::D2(d, mt, i), dyc, hc, wg_offs, dw2, stream)?;
            let d_out = DualOut {
                out: ws.dst(&wp, 7, m2i),
                scales: ws.dst(&wp, 8, m),
                out_col: ws.dst(&wp, 9, mt * 2 * i),
                scales_col: ws.dst(&wp, 10, e2i),
            };
            let (dh, gu) = (ws.hp(&wp, 6, mi), sv.hp(&sp, SAVED_GU, m2i));
            let d_in = DualIn::SwigluBwd(dh, gu);
            self.moe_dual(&grad, (m, i), d_in, offs, d_out, pad(), stream)?;
            // W13 dgrad: dx (m, d) = [d_gate | d_up] . W13^T.
            let dq = ws.fp8(&wp, (7, m2i), (8, m));
            self.gemm(
                &gemm,
                Gemm::D3(m, 2 * i, d, e),
                dq,
                w[0].dgrad,
                offs,
                dx,
                stream,
            )?;
            // W13 wgrad: dW13 (2, e, i, d) = [dW1; dW3], dW1 = d_gate^T . x and dW3 = d_up^T . x
            // per group: the halves of d's colwise codes, with the halves of its scales.
            self.split_scale_halves((e, i), ws.src(&wp, 10, e2i), ws.dst(&wp, 11, e2i), stream)?;
            let (gate, up) = ws.src::<u8>(&wp, 9, mt * 2 * i).split_at(mt * i);
            let (s_gate, s_up) = ws.src::<f32>(&wp, 11, e2i).split_at(ei);
            let (dw1, dw3) = dw13.split_at(ei * d);
            let (g, u) = (
                Fp8Operand { q: gate, s: s_gate },
                Fp8Operand { q: up, s: s_up },
            );
            self.gemm(&gemm, Gemm::D2(i, mt, d), g, xc, wg_offs, dw1, stream)?;
            self.gemm(&gemm, Gemm::D2(i, mt, d), u, xc, wg_offs, dw3, stream)
        })
    }
}

impl Context {
    /// The first step of both backwards: dy (m, cols) cast by [`Context::moe_act_dual`] (`p`:
    /// dequant scales) into the workspace parts 2 and 3 (rowwise codes and dequant scales)
    /// and 4 and 5 (per-group colwise; in the padded layout of `pad`'s m_cap tokens when
    /// given). Returns the dgrad operand (2, 3) and the wgrad one (4, 5).
    #[allow(clippy::too_many_arguments)]
    fn cast_dy<'a>(
        &self,
        p: &MoeCastParams,
        ws: Region<'a>,
        wp: &Parts,
        (m, cols, e): (usize, usize, usize),
        dy: HpSrc<'_>,
        offs: Src<'_, i32>,
        pad: Option<(usize, Dst<'_, i32>)>,
        stream: StreamRef,
    ) -> Result<(Fp8Operand<'a>, Fp8Operand<'a>)> {
        let mt = pad.as_ref().map_or(m, |&(cap, _)| cap);
        let (mc, tc, ec) = (m * cols, mt * cols, e * cols);
        let dy_out = DualOut {
            out: ws.dst(wp, 2, mc),
            scales: ws.dst(wp, 3, m),
            out_col: ws.dst(wp, 4, tc),
            scales_col: ws.dst(wp, 5, ec),
        };
        self.moe_dual(p, (m, cols), DualIn::Act(dy), offs, dy_out, pad, stream)?;
        Ok((ws.fp8(wp, (2, mc), (3, m)), ws.fp8(wp, (4, tc), (5, ec))))
    }
}

// ------------------------------------------------------------------------ grouped linear

/// One grouped linear layer: x (m, k) with `e` END offsets along m times the expert weights
/// (e, k, n) ([`Projection`]), y (m, n); for frameworks that keep their own activations (the
/// backward takes x again and casts it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearShape {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub e: usize,
}

impl LinearShape {
    /// The backward's zeroed scratch: moe_act_dual of dy runs per_group_colwise over n columns
    /// (crate::moe::dual_composed), per_group_colwise of x over k.
    fn zeroed_bytes(&self, ctx: &Context) -> Result<usize> {
        zeroed_bytes(ctx, self.e, self.k.max(self.n))
    }

    /// The backward's GEMM workspace bytes: the dgrad and the wgrad (n, m, k).
    fn bwd_gemm_bytes(&self, ctx: &Context, p: &RecipeParams) -> Result<usize> {
        p.gemm_bytes(ctx, self.e, &[(self.n, self.m, self.k)])
    }

    /// The projection a [`WeightCache`] for this layer holds.
    pub fn projection(&self) -> Projection {
        Projection {
            e: self.e,
            k: self.k,
            n: self.n,
        }
    }

    fn check(&self) -> Result<()> {
        require_nonzero("k", self.k)?;
        require_nonzero("n", self.n)?;
        self.projection().sizes()?;
        checked_mul("m*k", self.m, self.k)?;
        checked_mul("m*n", self.m, self.n)?;
        Ok(())
    }

    fn fwd_parts(&self, gb: usize) -> Result<Parts> {
        self.check()?;
        let m4 = bytes_of::<f32>("m", self.m)?;
        carve(
            "grouped linear forward workspace",
            &[0, gb, self.m * self.k, m4, m4],
        )
    }

    fn bwd_parts(&self, zb: usize, gb: usize) -> Result<Parts> {
        self.check()?;
        let (m, k, n, e) = (self.m, self.k, self.n, self.e);
        let f = |c: usize| bytes_of::<f32>("scales", c);
        let m4 = f(m)?;
        let (en, ek) = (f(e * n)?, f(e * k)?);
        carve(
            "grouped linear backward workspace",
            &[zb, gb, m * n, m4, m * n, en, m * k, ek, ek],
        )
    }
}

impl Context {
    /// Bytes of the workspace of [`Context::grouped_linear_forward`].
    pub fn grouped_linear_forward_workspace_size(
        &self,
        p: &RecipeParams,
        s: LinearShape,
    ) -> Result<usize> {
        s.check()?;
        Ok(s.fwd_parts(p.gemm_bytes(self, s.e, &[])?)?.bytes)
    }

    /// Bytes of the workspace of [`Context::grouped_linear_backward`].
    pub fn grouped_linear_backward_workspace_size(
        &self,
        p: &RecipeParams,
        s: LinearShape,
    ) -> Result<usize> {
        s.check()?;
        Ok(
            s.bwd_parts(s.zeroed_bytes(self)?, s.bwd_gemm_bytes(self, p)?)?
                .bytes,
        )
    }

    /// The grouped linear forward: `rowwise_2d(x)` and the 2D x 3D grouped GEMM with the
    /// cache's forward B: y (m, n) bf16, rows past `offs[e-1]` untouched. Returns the cache
    /// generation it used.
    pub fn grouped_linear_forward(
        &self,
        p: &RecipeParams,
        s: LinearShape,
        cache: &WeightCache,
        x: HpSrc<'_>,
        offs: Src<'_, i32>,
        mut y: Dst<'_, bf16>,
        mut workspace: Dst<'_, u8>,
        stream: StreamRef,
    ) -> Result<u64> {
        s.check()?;
        refuse_pad(p, LINEAR_PAD)?;
        let gb = p.gemm_bytes(self, s.e, &[])?;
        let wp = s.fwd_parts(gb)?;
        let w = cache.use_for(self, p, &[s.projection()])?;
        let (m, k, n, e) = (s.m, s.k, s.n, s.e);
        let mut ck = Checks::new(self);
        ck.hp("x", &x, m * k)?;
        ck.offs(&offs, e, m)?;
        ck.dst("y", &mut y, m * n)?;
        ck.dst("workspace", &mut workspace, wp.bytes)?;
        ck.finish()?;
        let ws = Region::new(workspace.as_mut_ptr(), self.loc());
        let gemm = p.gemm(false, gemm_ws(self, ws.addr(&wp, WS_GEMM), gb));
        let (xq, xs) = (ws.dst(&wp, 2, m * k), ws.dst(&wp, 3, m));
        self.rowwise_2d(&p.act(), m, k, x, xq, xs, stream)?;
        self.scale_reciprocal(m, ws.src(&wp, 3, m), ws.dst(&wp, 4, m), stream)?;
        let xq = ws.fp8(&wp, (2, m * k), (4, m));
        self.gemm(&gemm, Gemm::D3(m, k, n, e), xq, w[0].fwd, offs, y, stream)?;
        Ok(cache.generation())
    }

    /// The grouped linear backward from x (m, k) and dy (m, n): dx (m, k) (rows past
    /// `offs[e-1]` untouched) and dW (e, k, n) column-major, i.e. torch's (E, N, K) row-major
    /// (bf16; an empty group's gradient is zeros): `moe_act_dual(dy)`, `per_group_colwise(x)`,
    /// the dgrad GEMM with the cache's transposed B and the wgrad GEMM. `generation`: what the
    /// forward returned (`NotSupported` when the cache was refreshed since).
    pub fn grouped_linear_backward(
        &self,
        p: &RecipeParams,
        s: LinearShape,
        cache: &WeightCache,
        generation: u64,
        x: HpSrc<'_>,
        dy: HpSrc<'_>,
        offs: Src<'_, i32>,
        mut dx: Dst<'_, bf16>,
        mut dw: Dst<'_, bf16>,
        mut workspace: Dst<'_, u8>,
        stream: StreamRef,
    ) -> Result<()> {
        s.check()?;
        refuse_pad(p, LINEAR_PAD)?;
        let (zb, gb) = (s.zeroed_bytes(self)?, s.bwd_gemm_bytes(self, p)?);
        let wp = s.bwd_parts(zb, gb)?;
        let w = cache.use_for(self, p, &[s.projection()])?;
        cache.check_generation(generation)?;
        let (m, k, n, e) = (s.m, s.k, s.n, s.e);
        let (mk, mn, ek) = (m * k, m * n, e * k);
        let mut ck = Checks::new(self);
        ck.hp("x", &x, mk)?;
        ck.hp("dy", &dy, mn)?;
        ck.offs(&offs, e, m)?;
        ck.dst("dx", &mut dx, mk)?;
        ck.dst("dw", &mut dw, checked_mul("e*k*n", ek, n)?)?;
        ck.dst("workspace", &mut workspace, wp.bytes)?;
        ck.finish()?;
        let ws = Region::new(workspace.as_mut_ptr(), self.loc());
        let gemm = p.gemm(true, gemm_ws(self, ws.addr(&wp, WS_GEMM), gb));
        with_zeroed(self, ws.addr(&wp, WS_ZERO), zb, stream, || {
            let dims = (m, n, e);
            let (dyq, dyc) = self.cast_dy(&p.grad_dq(), ws, &wp, dims, dy, offs, None, stream)?;
            let (xc, xcs) = (ws.dst(&wp, 6, mk), ws.dst(&wp, 7, ek));
            self.per_group_colwise(&p.act(), m, k, x, offs, xc, xcs, stream)?;
            self.scale_reciprocal(ek, ws.src(&wp, 7, ek), ws.dst(&wp, 8, ek), stream)?;
            self.gemm(
                &gemm,
                Gemm::D3(m, n, k, e),
                dyq,
                w[0].dgrad,
                offs,
                dx,
                stream,
            )?;
            let xc = ws.fp8(&wp, (6, mk), (8, ek));
            self.gemm(&gemm, Gemm::D2(n, m, k), dyc, xc, offs, dw, stream)
        })
    }
}
