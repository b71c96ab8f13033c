//! The MoE recipe exports (src/recipe.rs; docs/OPS.md "The MoE recipe"): the experts block's
//! forward and backward, the single grouped linear's forward and backward, their workspace
//! and saved-buffer size queries, and the expert weights' FP8 cache.
//!
//! Every buffer is a (pointer, count) pair of the context's memory (host on a CPU context,
//! device on a GPU one), as for the ops; `saved` and `workspace` are byte buffers of at least
//! the queried size, at any address. A call only queues work on its stream: no allocation, no
//! synchronisation, so it can be captured into a CUDA/HIP graph on any stream (the workspace
//! is the caller's; the recipe clears the part it needs zeroed itself). Everything is checked
//! before the first op is queued; nothing is written on a failed check.
//!
//! The weight cache (`hipfp8_weight_cache`) holds both FP8 layouts of the expert weights with
//! their dequant scales, in memory it allocates once at creation. `hipfp8_weight_cache_refresh`
//! quantizes the caller's weights into it and advances its generation; calls use the snapshot
//! of the last refresh (weights updated in place are seen after the next refresh). A forward
//! returns the generation it used; its backward passes it back and is refused
//! (NOT_SUPPORTED) when the cache was refreshed in between. Handles are registry keys, never
//! reused: a destroyed or made-up handle is INVALID_HANDLE.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

use half::bf16;

use super::args::{self, Views, c_desc, format_choice};
use super::context::{self, hipfp8_context};
use super::grouped_gemm::gemm_backend_of;
use super::run_op;
use super::status::{FfiError, guard, hipfp8_status};
use super::types::{hipStream_t, hipfp8_flag};
use crate::context::Context;
use crate::error::Error;
use crate::recipe::{
    self, ExpertsShape, Fp8Operand, LinearShape, NoParams, RecipeParams, WeightCache,
};
use crate::view::{Dst, HpSrc, Src, StreamRef};

c_desc! {
    /// The experts block (`hipfp8_moe_experts_forward` / `_backward`): m routed tokens grouped by
    /// e END offsets, model dim d, intermediate dim i; W13 (e, 2i, d) row-major (gate rows
    /// `[0, i)`, up rows `[i, 2i)` of each expert), W2 (e, d, i) row-major.
    hipfp8_moe_experts_desc {
        /// `hipfp8_dtype` of the high-precision inputs (x and the weights; dy).
        input_dtype: u32,
        /// `hipfp8_format` of the activations and weights.
        format: u32,
        /// `hipfp8_format` of the gradients.
        grad_format: u32,
        /// `hipfp8_flag` bits (HIPFP8_FLAG_POW2_SCALES).
        flags: u32,
        /// `hipfp8_gemm_backend` of the grouped GEMMs.
        backend: u32,
        m: usize, d: usize, i: usize, e: usize,
    }

    /// One grouped linear layer (`hipfp8_grouped_linear_forward` / `_backward`): x (m, k) grouped
    /// by e END offsets times W (e, k, n) column-major (`w[e_i*k*n + n_i*k + k_i]`, torch's
    /// (e, n, k) row-major), y (m, n).
    hipfp8_grouped_linear_desc {
        /// `hipfp8_dtype` of the high-precision inputs (x, dy, the weights).
        input_dtype: u32,
        /// `hipfp8_format` of the activations and weights.
        format: u32,
        /// `hipfp8_format` of the gradients.
        grad_format: u32,
        /// `hipfp8_flag` bits (HIPFP8_FLAG_POW2_SCALES).
        flags: u32,
        /// `hipfp8_gemm_backend` of the grouped GEMMs.
        backend: u32,
        m: usize, k: usize, n: usize, e: usize,
    }

    /// `hipfp8_scale_reciprocal`: n scales.
    hipfp8_scale_reciprocal_desc {
        n: usize,
    }
}

c_exports! {
    /// `out[j] = 1 / scales[j]` for j < n, the IEEE f32 quotient (torch's `Tensor.reciprocal`;
    /// 1/NaN = the canonical NaN `0x7FC00000`): the grouped GEMMs' dequant scales from the scales
    /// the casts write. scales, out: n elements.
    fn hipfp8_scale_reciprocal(hipfp8_scale_reciprocal_desc) = run_op(recipe::SCALE_RECIPROCAL):
        (scales[scales_len]: *const f32, out[out_len]: *mut f32);
}

impl args::CastDesc for hipfp8_scale_reciprocal_desc {
    type Params = NoParams;
    fn params(&self) -> Result<NoParams, FfiError> {
        Ok(NoParams)
    }
}

/// The one descriptor without an input dtype: its shape is the scale count.
impl args::OpDesc for hipfp8_scale_reciprocal_desc {
    type Shape = usize;
    type Dtypes = [u32; 0];
    fn shape(&self) -> Result<usize, FfiError> {
        Ok(self.n)
    }
    fn dtypes(&self) -> [u32; 0] {
        []
    }
}

/// The recipe parameters and dtype of either descriptor.
trait RecipeDesc: args::Descriptor {
    fn fields(&self) -> (u32, u32, u32, u32, u32);
    fn params(&self) -> Result<RecipeParams, FfiError> {
        let (_, format, grad_format, flags, backend) = self.fields();
        const PAD: u32 = hipfp8_flag::HIPFP8_FLAG_PAD_WGRAD as u32;
        let p = args::cast_params(format, flags & !PAD)?;
        let backend = gemm_backend_of(backend).ok_or_else(|| {
            Error::InvalidEnum(format!(
                "backend = {backend} is not a hipfp8_gemm_backend (AUTO = 0 ... LIBRARY = 2)"
            ))
        })?;
        Ok(RecipeParams {
            format: p.format,
            grad_format: format_choice(grad_format)?,
            pow2_scales: p.pow2_scales,
            backend,
            pad_wgrad: flags & PAD != 0,
        })
    }
    fn dtype(&self) -> u32 {
        self.fields().0
    }
}

/// Implement [`RecipeDesc`] for descriptors with `input_dtype`, `format`, `grad_format`,
/// `flags` and `backend` fields.
macro_rules! recipe_desc {
    ($($t:ident),+) => {$(
        impl RecipeDesc for $t {
            fn fields(&self) -> (u32, u32, u32, u32, u32) {
                let d = self;
                (d.input_dtype, d.format, d.grad_format, d.flags, d.backend)
            }
        }
    )+};
}
recipe_desc!(hipfp8_moe_experts_desc, hipfp8_grouped_linear_desc);

fn experts_shape(d: &hipfp8_moe_experts_desc) -> ExpertsShape {
    ExpertsShape {
        m: d.m,
        d: d.d,
        i: d.i,
        e: d.e,
    }
}

fn linear_shape(d: &hipfp8_grouped_linear_desc) -> LinearShape {
    LinearShape {
        m: d.m,
        k: d.k,
        n: d.n,
        e: d.e,
    }
}

const _: () = assert!(hipfp8_flag::HIPFP8_FLAG_POW2_SCALES as u32 == 1);

// ------------------------------------------------------------------------- cache registry

/// Opaque FP8 weight cache: both layouts of a set of expert weights (the experts block's W13
/// and W2, or one grouped linear's W) with their dequant scales. Create with
/// `hipfp8_moe_experts_weight_cache_create` or `hipfp8_grouped_linear_weight_cache_create`,
/// release with `hipfp8_weight_cache_destroy`. Calls that use one cache must not run
/// concurrently with its refresh (the library serialises the host side; the device work is
/// ordered by the caller's streams).
pub struct hipfp8_weight_cache {
    _opaque: [u8; 0],
}

struct Caches {
    next_id: u64,
    live: BTreeMap<usize, Arc<Mutex<WeightCache>>>,
}

static CACHES: Mutex<Caches> = Mutex::new(Caches {
    next_id: 1,
    live: BTreeMap::new(),
});

fn caches() -> MutexGuard<'static, Caches> {
    CACHES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Cache handles: the id times an odd constant (a bijection on 64 bits) with the tag bit 63
/// set, so they never equal a context handle below 2^63 by accident of order and small
/// integers are never live.
fn cache_handle(id: u64) -> usize {
    (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) | (1 << 63)) as usize
}

fn cache_register(c: WeightCache) -> *mut hipfp8_weight_cache {
    let mut r = caches();
    let h = loop {
        let h = cache_handle(r.next_id);
        r.next_id += 1;
        if !r.live.contains_key(&h) {
            break h;
        }
    };
    r.live.insert(h, Arc::new(Mutex::new(c)));
    std::ptr::without_provenance_mut(h)
}

fn cache_lookup(c: *const hipfp8_weight_cache) -> Result<Arc<Mutex<WeightCache>>, FfiError> {
    caches()
        .live
        .get(&c.addr())
        .cloned()
        .ok_or_else(|| FfiError::InvalidHandle(format!("{c:p} is not a live weight cache")))
}

/// Run `f` on the cache behind `c` (locked).
fn with_cache<R>(
    c: *const hipfp8_weight_cache,
    f: impl FnOnce(&mut WeightCache) -> Result<R, FfiError>,
) -> Result<R, FfiError> {
    let arc = cache_lookup(c)?;
    let mut g = arc.lock().unwrap_or_else(|p| p.into_inner());
    f(&mut g)
}

fn create_cache(
    name: &'static str,
    ctx: *const hipfp8_context,
    out: *mut *mut hipfp8_weight_cache,
    make: impl FnOnce(&Context) -> Result<WeightCache, FfiError>,
) -> hipfp8_status {
    guard(name, || {
        let c = context::lookup(ctx)?;
        let out = args::out_param("cache", out)?;
        out.write(cache_register(make(&c)?));
        Ok(())
    })
}

/// Create an empty weight cache for the experts block of `desc` (W13 and W2 in `format`,
/// power-of-two scales per `flags`): allocates its memory (host or device, per the context)
/// once. Refresh it before the first forward.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_moe_experts_weight_cache_create(
    ctx: *const hipfp8_context,
    desc: *const hipfp8_moe_experts_desc,
    cache: *mut *mut hipfp8_weight_cache,
) -> hipfp8_status {
    create_cache("hipfp8_moe_experts_weight_cache_create", ctx, cache, |c| {
        let d = args::read_desc(desc)?;
        let p = d.params()?;
        Ok(WeightCache::new(c, &p, &experts_shape(&d).projections())?)
    })
}

/// Create an empty weight cache for the grouped linear layer of `desc`.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_grouped_linear_weight_cache_create(
    ctx: *const hipfp8_context,
    desc: *const hipfp8_grouped_linear_desc,
    cache: *mut *mut hipfp8_weight_cache,
) -> hipfp8_status {
    create_cache(
        "hipfp8_grouped_linear_weight_cache_create",
        ctx,
        cache,
        |c| {
            let d = args::read_desc(desc)?;
            let p = d.params()?;
            Ok(WeightCache::new(c, &p, &[linear_shape(&d).projection()])?)
        },
    )
}

/// Release a weight cache (its memory is freed once no call uses it). NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_weight_cache_destroy(cache: *mut hipfp8_weight_cache) -> hipfp8_status {
    guard("hipfp8_weight_cache_destroy", || {
        if cache.is_null() {
            return Ok(());
        }
        caches()
            .live
            .remove(&cache.addr())
            .map(drop)
            .ok_or_else(|| FfiError::InvalidHandle(format!("{cache:p} is not a live weight cache")))
    })
}

/// Quantize the weights into the cache on `stream` and advance its generation (written to
/// `generation`). Experts cache: `w0` = W13 (e*2i*d elements), `w1` = W2 (e*d*i); grouped
/// linear cache: `w0` = W (e*k*n), `w1` NULL with 0. `input_dtype`: a `hipfp8_dtype`. Both are
/// checked before the first is cast. Later calls on other streams must be ordered after it.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_weight_cache_refresh(
    ctx: *const hipfp8_context,
    cache: *mut hipfp8_weight_cache,
    input_dtype: u32,
    w0: *const c_void,
    w0_len: usize,
    w1: *const c_void,
    w1_len: usize,
    generation: *mut u64,
    stream: hipStream_t,
) -> hipfp8_status {
    let (name, w0) = ("hipfp8_weight_cache_refresh", [(w0, w0_len)]);
    let rest = (
        (ctx, cache, input_dtype),
        (w1, w1_len),
        (generation, stream),
    );
    refresh(name, &w0, rest)
}

/// `hipfp8_weight_cache_refresh` of an experts cache with W13 given as its two halves along
/// 2i, torchtitan's w1 and w3 (`w0_gate`, `w0_up`: e*i*d elements each, expert e's gate rows
/// then its up rows), without a stacked copy; the same cache, bit for bit, as W13 gives. `w1`
/// = W2 (e*d*i).
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_weight_cache_refresh_halves(
    ctx: *const hipfp8_context,
    cache: *mut hipfp8_weight_cache,
    input_dtype: u32,
    w0_gate: *const c_void,
    w0_gate_len: usize,
    w0_up: *const c_void,
    w0_up_len: usize,
    w1: *const c_void,
    w1_len: usize,
    generation: *mut u64,
    stream: hipStream_t,
) -> hipfp8_status {
    let w0 = [(w0_gate, w0_gate_len), (w0_up, w0_up_len)];
    let name = "hipfp8_weight_cache_refresh_halves";
    let rest = (
        (ctx, cache, input_dtype),
        (w1, w1_len),
        (generation, stream),
    );
    refresh(name, &w0, rest)
}

/// The refresh calls' other arguments: (ctx, cache, input_dtype), (w1, w1_len), (generation,
/// stream).
type RefreshArgs = (
    (*const hipfp8_context, *mut hipfp8_weight_cache, u32),
    (*const c_void, usize),
    (*mut u64, hipStream_t),
);

/// The refresh calls: projection 0 from the parts `w0`, projection 1 from `w1` (a NULL `w1`
/// with 0 elements: none, for a one-projection cache).
fn refresh(name: &'static str, w0: &[(*const c_void, usize)], rest: RefreshArgs) -> hipfp8_status {
    let ((ctx, cache, input_dtype), (w1, w1_len), (generation, stream)) = rest;
    guard(name, || {
        let c = context::lookup(ctx)?;
        let out = args::out_param("generation", generation)?;
        let v = Views::new(&c);
        let g = with_cache(cache, |wc| {
            let p0 = w0
                .iter()
                .map(|&(p, n)| v.hp("w0", input_dtype, p, n))
                .collect::<Result<Vec<HpSrc<'_>>, _>>()?;
            let p1: [HpSrc<'_>; 1];
            let mut ws: Vec<&[HpSrc<'_>]> = vec![&p0];
            if wc.projections().len() > 1 || !w1.is_null() || w1_len != 0 {
                p1 = [v.hp("w1", input_dtype, w1, w1_len)?];
                ws.push(&p1);
            }
            Ok(wc.refresh_parts(&c, &ws, StreamRef(stream.cast()))?)
        })?;
        out.write(g);
        Ok(())
    })
}

/// Mark the cache empty: calls refuse it (NOT_SUPPORTED) until the next refresh.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_weight_cache_invalidate(cache: *mut hipfp8_weight_cache) -> hipfp8_status {
    guard("hipfp8_weight_cache_invalidate", || {
        with_cache(cache, |wc| {
            wc.invalidate();
            Ok(())
        })
    })
}

/// The cache's generation: 0 when empty, else the number its last refresh returned.
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_weight_cache_generation(
    cache: *const hipfp8_weight_cache,
    generation: *mut u64,
) -> hipfp8_status {
    guard("hipfp8_weight_cache_generation", || {
        let out = args::out_param("generation", generation)?;
        let g = with_cache(cache, |wc| Ok(wc.generation()))?;
        out.write(g);
        Ok(())
    })
}

// --------------------------------------------------------------------------- size queries

fn size_of_call<D: RecipeDesc>(
    name: &'static str,
    ctx: *const hipfp8_context,
    desc: *const D,
    bytes: *mut usize,
    q: impl FnOnce(&Context, &D, &RecipeParams) -> Result<usize, Error>,
) -> hipfp8_status {
    guard(name, || {
        let c = context::lookup(ctx)?;
        let d = args::read_desc(desc)?;
        let out = args::out_param("bytes", bytes)?;
        let p = d.params()?;
        out.write(q(&c, &d, &p)?);
        Ok(())
    })
}

c_fns! {
    (bytes: *mut usize) {
        /// Bytes of the `saved` buffer of `hipfp8_moe_experts_forward` (FP8 colwise x and h with
        /// room for the padded layout of HIPFP8_FLAG_PAD_WGRAD, their dequant scales, bf16 gu,
        /// the padded offsets; plus 255 bytes of alignment slack). Its parts sit at fixed
        /// offsets from its first 16-byte aligned address: a copy at another such address
        /// serves the backward as well.
        fn hipfp8_moe_experts_saved_size(desc: hipfp8_moe_experts_desc) =
            size_of_call(bytes, |c, d, _| c.moe_experts_saved_size(experts_shape(d)));
        /// Bytes of the workspace of `hipfp8_moe_experts_forward`.
        fn hipfp8_moe_experts_forward_workspace_size(desc: hipfp8_moe_experts_desc) =
            size_of_call(bytes, |c, d, p| Ok(c.moe_experts_sizes(p, experts_shape(d))?.forward_workspace));
        /// Bytes of the workspace of `hipfp8_moe_experts_backward`.
        fn hipfp8_moe_experts_backward_workspace_size(desc: hipfp8_moe_experts_desc) =
            size_of_call(bytes, |c, d, p| Ok(c.moe_experts_sizes(p, experts_shape(d))?.backward_workspace));
        /// Bytes of the workspace of `hipfp8_grouped_linear_forward`.
        fn hipfp8_grouped_linear_forward_workspace_size(desc: hipfp8_grouped_linear_desc) =
            size_of_call(bytes, |c, d, p| c.grouped_linear_forward_workspace_size(p, linear_shape(d)));
        /// Bytes of the workspace of `hipfp8_grouped_linear_backward`.
        fn hipfp8_grouped_linear_backward_workspace_size(desc: hipfp8_grouped_linear_desc) =
            size_of_call(bytes, |c, d, p| c.grouped_linear_backward_workspace_size(p, linear_shape(d)));
    }
}

/// The buffer sizes of `hipfp8_moe_experts_forward_precast` / `_backward_precast`: `saved`
/// (bf16 gu, FP8 colwise h with its dequant scales; no x: the caller keeps x's colwise cast)
/// and the forward's and backward's workspaces, in bytes (each with 255 of alignment slack).
#[unsafe(no_mangle)]
pub extern "C" fn hipfp8_moe_experts_precast_sizes(
    ctx: *const hipfp8_context,
    desc: *const hipfp8_moe_experts_desc,
    saved: *mut usize,
    forward_workspace: *mut usize,
    backward_workspace: *mut usize,
) -> hipfp8_status {
    guard("hipfp8_moe_experts_precast_sizes", || {
        let c = context::lookup(ctx)?;
        let d = args::read_desc(desc)?;
        let outs = [
            args::out_param("saved", saved)?,
            args::out_param("forward_workspace", forward_workspace)?,
            args::out_param("backward_workspace", backward_workspace)?,
        ];
        let z = c.moe_experts_precast_sizes(&d.params()?, experts_shape(&d))?;
        for (o, v) in outs
            .into_iter()
            .zip([z.saved, z.forward_workspace, z.backward_workspace])
        {
            o.write(v);
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------- calls

/// The body of a recipe call: context, descriptor, cache, the views (NULL, alignment,
/// location and overlap checks of the C arguments), then `f`.
fn call<D: RecipeDesc, R>(
    ctx: *const hipfp8_context,
    desc: *const D,
    cache: *const hipfp8_weight_cache,
    f: impl FnOnce(&Context, &D, RecipeParams, &Views, &WeightCache) -> Result<R, FfiError>,
) -> Result<R, FfiError> {
    let c = context::lookup(ctx)?;
    let d = args::read_desc(desc)?;
    let p = d.params()?;
    let v = Views::new(&c);
    with_cache(cache, |wc| f(&c, &d, p, &v, wc))
}

/// A forward call: [`call`] under the panic guard, the cache generation `f` used written to
/// `generation` (checked before anything else).
fn forward<D: RecipeDesc>(
    name: &'static str,
    ctx: *const hipfp8_context,
    desc: *const D,
    cache: *const hipfp8_weight_cache,
    generation: *mut u64,
    f: impl FnOnce(&Context, &D, RecipeParams, &Views, &WeightCache) -> Result<u64, FfiError>,
) -> hipfp8_status {
    guard(name, || {
        let out = args::out_param("generation", generation)?;
        let g = call(ctx, desc, cache, f)?;
        out.write(g);
        Ok(())
    })
}

/// The buffers a forward reads and writes first: x (of the descriptor's dtype), the offsets
/// and y.
type ForwardIo = (
    (*const c_void, usize),
    (*const i32, usize),
    (*mut u16, usize),
);

/// The views of [`ForwardIo`], made in that order.
fn forward_io<'a, D: RecipeDesc>(
    v: &Views,
    d: &D,
    ((x, x_len), (offs, num_groups), (y, y_len)): ForwardIo,
) -> Result<(HpSrc<'a>, Src<'a, i32>, Dst<'a, bf16>), FfiError> {
    let x = v.hp("x", d.dtype(), x, x_len)?;
    let offs = v.src("offs", offs, num_groups)?;
    let y = v.dst("y", y.cast(), y_len)?;
    Ok((x, offs, y))
}

/// An FP8 operand's views: codes `(q, q_len)` and dequant scales `(s, s_len)`.
fn fp8_view<'a>(
    v: &Views,
    (name, scales): (&'static str, &'static str),
    (q, q_len): (*const u8, usize),
    (s, s_len): (*const f32, usize),
) -> Result<Fp8Operand<'a>, FfiError> {
    Ok(Fp8Operand {
        q: v.src(name, q, q_len)?,
        s: v.src(scales, s, s_len)?,
    })
}

/// The views an experts backward writes: dx, dW13, dW2 (bf16) and its workspace.
/// The views every experts backward call takes: `saved`, the offsets, dx, dW13, dW2 and the
/// workspace.
struct BackwardIo<'a> {
    saved: Src<'a, u8>,
    offs: Src<'a, i32>,
    grads: [Dst<'a, bf16>; 3],
    ws: Dst<'a, u8>,
}

/// `(saved, offs, workspace)` pointers with their lengths.
type BackwardBufs = ((*const u8, usize), (*const i32, usize), (*mut u8, usize));

fn backward_io<'a>(
    v: &Views,
    ((saved, saved_len), (offs, num_groups), (ws, ws_len)): BackwardBufs,
    [dx, dw13, dw2]: [(*mut u16, usize); 3],
) -> Result<BackwardIo<'a>, FfiError> {
    Ok(BackwardIo {
        saved: v.src("saved", saved, saved_len)?,
        offs: v.src("offs", offs, num_groups)?,
        grads: [
            v.dst("dx", dx.0.cast(), dx.1)?,
            v.dst("dw13", dw13.0.cast(), dw13.1)?,
            v.dst("dw2", dw2.0.cast(), dw2.1)?,
        ],
        ws: v.dst("workspace", ws, ws_len)?,
    })
}

/// A backward call: [`call`] under the panic guard.
fn backward<D: RecipeDesc>(
    name: &'static str,
    ctx: *const hipfp8_context,
    desc: *const D,
    cache: *const hipfp8_weight_cache,
    f: impl FnOnce(&Context, &D, RecipeParams, &Views, &WeightCache) -> Result<(), FfiError>,
) -> hipfp8_status {
    guard(name, || call(ctx, desc, cache, f))
}

c_fns! {
    (
        cache: *const hipfp8_weight_cache, x: *const c_void, x_len: usize, offs: *const i32,
        num_groups: usize, y: *mut u16, y_len: usize, saved: *mut u8, saved_len: usize,
        workspace: *mut u8, workspace_len: usize, generation: *mut u64, stream: hipStream_t
    ) {
        /// The experts block forward (docs/OPS.md): from x (m*d elements of `input_dtype`) and
        /// `offs[num_groups]` (num_groups = e) END offsets, writes y (m*d bf16; rows past
        /// `offs[e-1]` untouched) and `saved` (`hipfp8_moe_experts_saved_size` bytes, for the
        /// backward), using `workspace` (`hipfp8_moe_experts_forward_workspace_size` bytes), and
        /// the cache generation it used to `generation`.
        fn hipfp8_moe_experts_forward(desc: hipfp8_moe_experts_desc) =
            forward(cache, generation, |c, d, p, v, wc| {
                let (x, offs, y) = forward_io(v, d, ((x, x_len), (offs, num_groups), (y, y_len)))?;
                let saved = v.dst("saved", saved, saved_len)?;
                let ws = v.dst("workspace", workspace, workspace_len)?;
                let s = StreamRef(stream.cast());
                Ok(c.moe_experts_forward(&p, experts_shape(d), wc, x, offs, y, saved, ws, s)?)
            });
    }
    (
        cache: *const hipfp8_weight_cache, generation: u64, saved: *const u8, saved_len: usize,
        dy: *const c_void, dy_len: usize, offs: *const i32, num_groups: usize, dx: *mut u16,
        dx_len: usize, dw13: *mut u16, dw13_len: usize, dw2: *mut u16, dw2_len: usize,
        workspace: *mut u8, workspace_len: usize, stream: hipStream_t
    ) {
        /// The experts block backward: from `saved` (written by the forward that returned
        /// `generation`, same descriptor, offsets and cache), dy (m*d elements of `input_dtype`) and
        /// the offsets, writes dx (m*d bf16; rows past `offs[e-1]` untouched), dW13 (e*2i*d bf16:
        /// [dW1; dW3], the gate and up halves as two (e, i, d) blocks) and dW2 (e*d*i bf16, W2's layout), using `workspace`
        /// (`hipfp8_moe_experts_backward_workspace_size` bytes). NOT_SUPPORTED when the cache was
        /// refreshed since that forward.
        fn hipfp8_moe_experts_backward(desc: hipfp8_moe_experts_desc) =
            backward(cache, |c, d, p, v, wc| {
                let dy = v.hp("dy", d.dtype(), dy, dy_len)?;
                let io = ((saved, saved_len), (offs, num_groups), (workspace, workspace_len));
                let BackwardIo { saved, offs, grads: [dx, dw13, dw2], ws } =
                    backward_io(v, io, [(dx, dx_len), (dw13, dw13_len), (dw2, dw2_len)])?;
                let (sh, s) = (experts_shape(d), StreamRef(stream.cast()));
                Ok(c.moe_experts_backward(&p, sh, wc, generation, saved, dy, offs, dx, dw13, dw2, ws, s)?)
            });
    }
    (
        cache: *const hipfp8_weight_cache, x: *const u8, x_len: usize, x_scales: *const f32,
        x_scales_len: usize, offs: *const i32, num_groups: usize, y: *mut u16, y_len: usize,
        saved: *mut u8, saved_len: usize, workspace: *mut u8, workspace_len: usize,
        generation: *mut u64, stream: hipStream_t
    ) {
        /// The experts block forward from x already cast (`input_dtype` is not read): x (m*d
        /// FP8 codes of `format`, row-major) and `x_scales` (m dequant row scales), as
        /// `hipfp8_moe_act_dual` or `hipfp8_moe_dispatch_dual` (offs = its offs_pad, m = its m_cap)
        /// write them with HIPFP8_FLAG_DEQUANT_SCALES; the result is then bit-identical to
        /// `hipfp8_moe_experts_forward` of the high-precision x. `saved` and `workspace`: the
        /// sizes of `hipfp8_moe_experts_precast_sizes`; x's colwise cast is not saved (the
        /// backward takes it).
        fn hipfp8_moe_experts_forward_precast(desc: hipfp8_moe_experts_desc) =
            forward(cache, generation, |c, d, p, v, wc| {
                let x = fp8_view(v, ("x", "x_scales"), (x, x_len), (x_scales, x_scales_len))?;
                let offs = v.src("offs", offs, num_groups)?;
                let y = v.dst("y", y.cast(), y_len)?;
                let saved = v.dst("saved", saved, saved_len)?;
                let ws = v.dst("workspace", workspace, workspace_len)?;
                let s = StreamRef(stream.cast());
                let sh = experts_shape(d);
                Ok(c.moe_experts_forward_precast(&p, sh, wc, x, offs, y, saved, ws, s)?)
            });
    }
    (
        cache: *const hipfp8_weight_cache, generation: u64, saved: *const u8, saved_len: usize,
        dy: *const u8, dy_len: usize, dy_scales: *const f32, dy_scales_len: usize,
        dy_col: *const u8, dy_col_len: usize, dy_col_scales: *const f32,
        dy_col_scales_len: usize, x_col: *const u8, x_col_len: usize,
        x_col_scales: *const f32, x_col_scales_len: usize, offs: *const i32, num_groups: usize,
        dx: *mut u16, dx_len: usize, dw13: *mut u16, dw13_len: usize, dw2: *mut u16,
        dw2_len: usize, workspace: *mut u8, workspace_len: usize, stream: hipStream_t
    ) {
        /// The experts block backward from operands already cast (dequant scales): dy rowwise
        /// (m*d codes of `grad_format`, m scales) and per-group colwise (`dy_col[d_i*m + row]`,
        /// e*d scales), as `hipfp8_moe_act_dual` / `hipfp8_moe_combine_bwd_dual` write them, and
        /// x per-group colwise (m*d codes of `format`, e*d scales: the dispatch's out_col /
        /// scales_col of the forward's x). `saved`: the `hipfp8_moe_experts_forward_precast`
        /// that returned `generation`; `workspace`: `hipfp8_moe_experts_precast_sizes` bytes.
        /// Writes dx, dW13 and dW2 as `hipfp8_moe_experts_backward`.
        fn hipfp8_moe_experts_backward_precast(desc: hipfp8_moe_experts_desc) =
            backward(cache, |c, d, p, v, wc| {
                let dy = fp8_view(v, ("dy", "dy_scales"), (dy, dy_len), (dy_scales, dy_scales_len))?;
                let dy_col = fp8_view(
                    v,
                    ("dy_col", "dy_col_scales"),
                    (dy_col, dy_col_len),
                    (dy_col_scales, dy_col_scales_len),
                )?;
                let x_col = fp8_view(
                    v,
                    ("x_col", "x_col_scales"),
                    (x_col, x_col_len),
                    (x_col_scales, x_col_scales_len),
                )?;
                let io = ((saved, saved_len), (offs, num_groups), (workspace, workspace_len));
                let BackwardIo { saved, offs, grads: [dx, dw13, dw2], ws } =
                    backward_io(v, io, [(dx, dx_len), (dw13, dw13_len), (dw2, dw2_len)])?;
                let (sh, g, s) = (experts_shape(d), generation, StreamRef(stream.cast()));
                Ok(c.moe_experts_backward_precast(
                    &p, sh, wc, g, saved, dy, dy_col, x_col, offs, dx, dw13, dw2, ws, s,
                )?)
            });
    }
    (
        cache: *const hipfp8_weight_cache, x: *const c_void, x_len: usize, offs: *const i32,
        num_groups: usize, y: *mut u16, y_len: usize, workspace: *mut u8, workspace_len: usize,
        generation: *mut u64, stream: hipStream_t
    ) {
        /// The grouped linear forward: y (m*n bf16; rows past `offs[e-1]` untouched) from x (m*k
        /// elements of `input_dtype`) and the cache's FP8 weights, using `workspace`
        /// (`hipfp8_grouped_linear_forward_workspace_size` bytes); the generation it used to
        /// `generation`.
        fn hipfp8_grouped_linear_forward(desc: hipfp8_grouped_linear_desc) =
            forward(cache, generation, |c, d, p, v, wc| {
                let (x, offs, y) = forward_io(v, d, ((x, x_len), (offs, num_groups), (y, y_len)))?;
                let ws = v.dst("workspace", workspace, workspace_len)?;
                let s = StreamRef(stream.cast());
                Ok(c.grouped_linear_forward(&p, linear_shape(d), wc, x, offs, y, ws, s)?)
            });
    }
    (
        cache: *const hipfp8_weight_cache, generation: u64, x: *const c_void, x_len: usize,
        dy: *const c_void, dy_len: usize, offs: *const i32, num_groups: usize, dx: *mut u16,
        dx_len: usize, dw: *mut u16, dw_len: usize, workspace: *mut u8, workspace_len: usize,
        stream: hipStream_t
    ) {
        /// The grouped linear backward from x (m*k) and dy (m*n), both of `input_dtype`: dx (m*k
        /// bf16; rows past `offs[e-1]` untouched) and dW (e*k*n bf16, W's layout), using `workspace`
        /// (`hipfp8_grouped_linear_backward_workspace_size` bytes). `generation`: what the forward
        /// returned.
        fn hipfp8_grouped_linear_backward(desc: hipfp8_grouped_linear_desc) =
            backward(cache, |c, d, p, v, wc| {
                let x = v.hp("x", d.dtype(), x, x_len)?;
                let dy = v.hp("dy", d.dtype(), dy, dy_len)?;
                let offs = v.src("offs", offs, num_groups)?;
                let dx = v.dst("dx", dx.cast(), dx_len)?;
                let dw = v.dst("dw", dw.cast(), dw_len)?;
                let ws = v.dst("workspace", workspace, workspace_len)?;
                let s = StreamRef(stream.cast());
                let sh = linear_shape(d);
                Ok(c.grouped_linear_backward(&p, sh, wc, generation, x, dy, offs, dx, dw, ws, s)?)
            });
    }
}
