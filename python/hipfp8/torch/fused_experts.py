"""The fused FP8 MoE experts block: libhipfp8's experts recipe (src/recipe.rs, docs/OPS.md
"The MoE recipe") as two custom ops, an FP8 weight cache and an autograd function.

    y = experts(x, offs, w1, w3, w2, cache)      # torchtitan's SwiGLU experts, one call per pass

torchtitan 0.3's experts compute, per expert group of rows of x (M, D),
`y = (silu(x w1^T) * (x w3^T)) w2^T` with w1, w3 (E, I, D) and w2 (E, D, I). The recipe runs
that as ONE forward call (x cast once into both layouts, gate and up as one grouped GEMM with
N = 2I, the SwiGLU fused with the down projection's casts, h never stored in bf16) and ONE
backward call (dy cast once into both layouts, the SwiGLU backward fused with its casts, the
gate/up dgrad as one GEMM with K = 2I), with torchao's rowwise FP8 semantics (power-of-two
scales). What the backward keeps is FP8: x and h per-group colwise with their scales, plus the
bf16 gate/up output gu (`saved_bytes`).

Ops (torch.library, namespace `hipfp8`, fake kernels with exact shapes):
  moe_experts_forward(x, offs, w1, w3, w2, cache, dtype, pad=True) -> (y, saved, generation)
  moe_experts_backward(saved, generation, dy, offs, cache, i, dtype, grad_dtype, pad=True)
      -> (dx, dw13, dw2)
  moe_experts_forward_precast(x, x_scales, offs, w1, w3, w2, cache) -> (y, saved, generation)
  moe_experts_backward_precast(saved, generation, dy, dy_scales, dy_col, dy_col_scales, x_col,
      x_col_scales, offs, cache, i) -> (dx, dw13, dw2)
(the pre-cast calls: x and dy already cast with dequant scales, as the routing dispatches of
ops.py write them; the FP8 dtypes are the operands'; hipfp8.torch.routed uses them).
`saved` is a uint8 tensor (the recipe's saved buffer), `generation` a CPU int64 tensor (2,):
the cache instance and the cache snapshot the forward used; the backward refuses a snapshot
other than its forward's (the weights were re-quantized in between). Workspaces and `saved` come
from torch's caching allocator; everything runs on torch's current stream with no host
synchronisation.

`pad` (HIPFP8_FLAG_PAD_WGRAD, on by default; forward and backward must agree): the wgrad
operands are written with every expert group starting on a 16-token boundary, so the wgrad
GEMMs take the grouped GEMM's library path whatever the routing (token groups that are not
multiples of 16 otherwise run the portable reference kernel, ~30x slower). Free for aligned
groups; the gradients equal the unpadded recipe's up to the GEMMs' summation order.

The weight cache (`ExpertsWeightCache`, one per experts module): the library's FP8 copies of
W13 = [w1; w3] (E, 2I, D) and W2 = w2 (E, D, I) in both GEMM layouts with their dequant scales
(2 bytes of device memory per weight element, held while the cache lives). The forward op
re-quantizes them when a weight's storage, dtype or version counter changed since the last
refresh (an optimizer step, a `load_state_dict`), so gradient accumulation quantizes the weights
once per optimizer step with no further API. W13 is cast from w1 and w3 as they are
(hipfp8_weight_cache_refresh_halves: no stacked copy). Not seen: a weight changed through `.data` (its own
version counter) -- call `refresh` then -- and weight updates between replays of a CUDA graph
(no Python runs in a replay: call `refresh` after each optimizer step; the graph then reads
the refreshed cache in place).
"""

import ctypes
import itertools
import threading
import weakref

import torch

from .. import _lib as L
from . import ops

__all__ = ["ExpertsWeightCache", "experts", "moe_experts_forward", "moe_experts_backward",
           "experts_saved_bytes", "moe_experts_forward_precast", "moe_experts_backward_precast",
           "experts_precast_saved_bytes"]

_BF16 = torch.bfloat16
_U8 = torch.uint8
_POW2 = L.FLAG_POW2_SCALES

_caches = weakref.WeakValueDictionary()  # cache id -> ExpertsWeightCache
_ids = itertools.count(1)
_serials = itertools.count(1)  # one per library cache ever created (never reused)


def _fail(op, msg, exc=ValueError):
    raise exc(f"hipfp8.{op}: {msg}")


def _carve_bytes(sizes):
    """Bytes of a buffer cut into parts of `sizes`, each 256-byte aligned, plus 255 bytes of
    slack (src/recipe.rs `carve`); works on SymInts (the fake kernel)."""
    at = 0
    for s in sizes:
        at = (at + s + 255) // 256 * 256
    return at + 255


def _m_cap(m, e):
    """Tokens of the padded wgrad layout: round_up(m + 15*e, 16) (src/recipe.rs)."""
    return (m + 15 * e + 15) // 16 * 16


def experts_saved_bytes(m, d, i, e):
    """Bytes of the forward's `saved` (hipfp8_moe_experts_saved_size): FP8 colwise x and h
    (m_cap*d, m_cap*i: room for the padded layout), their f32 dequant scales (e*d, e*i), bf16 gu
    (m*2i) and the e padded offsets, aligned."""
    mc = _m_cap(m, e)
    return _carve_bytes([mc * d, 4 * e * d, 2 * m * 2 * i, mc * i, 4 * e * i, 4 * e])


def experts_precast_saved_bytes(m, d, i, e):
    """Bytes of the pre-cast forward's `saved` (hipfp8_moe_experts_precast_sizes): as
    experts_saved_bytes without x's colwise cast (the caller keeps it for the backward)."""
    return _carve_bytes([0, 0, 2 * m * 2 * i, _m_cap(m, e) * i, 4 * e * i, 4 * e])


def _flags(pad):
    return _POW2 | (L.FLAG_PAD_WGRAD if pad else 0)


class ExpertsWeightCache:
    """libhipfp8's FP8 weight cache of one experts block (W13 = [w1; w3] and W2 = w2).

    Created empty; the library's cache is made on first use for the (device, E, D, I, FP8
    dtype) the forward asks for (made anew, and refreshed, when those change) and refreshed
    whenever the weights changed (see the module docstring). `refresh(w1, w3, w2)` forces a
    refresh, `invalidate()` makes the next forward refresh, `release()` frees the memory.
    A deep copy or an unpickled copy is a new, empty cache (modules copied with
    `copy.deepcopy` never share one)."""

    def __init__(self):
        self.id = next(_ids)
        self._lock = threading.Lock()
        self._handle = None
        self._shape = None  # (device, e, d, i, format) of the library cache
        self._weights = None  # (ptr, version, dtype) of w1, w3, w2 at the last refresh
        self.serial = 0  # the library cache instance (0: none)
        self.generation = 0  # its snapshot (0: empty)
        self.refreshes = 0  # refreshes done (all instances)
        _caches[self.id] = self

    def __deepcopy__(self, memo):
        return ExpertsWeightCache()

    def __reduce__(self):
        return (ExpertsWeightCache, ())

    def __del__(self):
        self.release()

    def release(self):
        """Free the library cache (the next forward makes and refreshes a new one)."""
        h, self._handle = getattr(self, "_handle", None), None
        self._shape = self._weights = None
        self.serial = self.generation = 0  # a pending backward of this cache is refused
        if h is not None and L._the_lib is not None:
            L.lib().dll.hipfp8_weight_cache_destroy(h)

    def invalidate(self):
        """Make the next forward re-quantize the weights."""
        self._weights = None

    @property
    def held(self):
        """Whether a library cache is held (its memory: 2 bytes per weight element + scales)."""
        return self._handle is not None

    def _make(self, ctx, shape):
        self.release()
        dev, e, d, i, fmt = shape
        desc = L.Experts(ctypes.sizeof(L.Experts), L.DTYPE_BF16, fmt, fmt, _POW2,
                         L.GEMM_BACKEND_AUTO, 0, d, i, e)
        h = ctypes.c_void_p()
        L.check(L.lib().dll.hipfp8_moe_experts_weight_cache_create(
            ctx.handle, ctypes.byref(desc), ctypes.byref(h)),
            "hipfp8.moe_experts_forward: weight cache create")
        self._handle, self._shape, self.serial = h.value, shape, next(_serials)

    def _refresh(self, ctx, dev, w1, w3, w2):
        # W13 = [w1; w3] (E, 2I, D) is cast from its two halves: no stacked copy
        w1c, w3c, w2c = w1.contiguous(), w3.contiguous(), w2.contiguous()
        gen = ctypes.c_uint64()
        stream = None if dev.type == "cpu" else ops._raw_stream(dev.index)
        self._weights = None
        L.check(L.lib().dll.hipfp8_weight_cache_refresh_halves(
            ctx.handle, self._handle, ops.HP_DTYPE[w1c.dtype], w1c.data_ptr(), w1c.numel(),
            w3c.data_ptr(), w3c.numel(), w2c.data_ptr(), w2c.numel(), ctypes.byref(gen), stream),
            "hipfp8.moe_experts_forward: weight cache refresh")
        self.generation = gen.value
        self.refreshes += 1
        self._weights = _weights_key(w1, w3, w2)

    def _ensure(self, dev, fmt, w1, w3, w2):
        """The library cache handle holding the FP8 copies of these weights (made and
        refreshed as needed)."""
        e, i, d = w1.shape
        shape = (dev, e, d, i, fmt)
        with self._lock:
            ctx = ops._ctx(dev)
            if self._shape != shape:
                self._make(ctx, shape)
            if self._weights != _weights_key(w1, w3, w2):
                self._refresh(ctx, dev, w1, w3, w2)
            return self._handle

    def refresh(self, w1, w3, w2, float8_dtype=None):
        """Quantize the weights now (on the device's current stream), whatever their version
        counters say."""
        dev = w1.device
        fp8 = float8_dtype if float8_dtype is not None else ops.native_fp8_dtype(dev)
        _weight_args("moe_experts_forward", w1, w3, w2, dev)
        self._weights = None
        self._ensure(dev, ops._fmt("moe_experts_forward", fp8), w1, w3, w2)


def _weights_key(w1, w3, w2):
    return tuple((w.data_ptr(), w._version, w.dtype) for w in (w1, w3, w2))


def _cache_of(op, cache_id):
    c = _caches.get(cache_id)
    if c is None:
        _fail(op, f"no live ExpertsWeightCache with id {cache_id} (its module was freed?)")
    return c


def _weight_args(op, w1, w3, w2, dev):
    """Checks of the weights: w1, w3 (E, I, D), w2 (E, D, I), one dtype (bf16 or f32), on dev."""
    for name, w in (("w1", w1), ("w3", w3), ("w2", w2)):
        if w.dtype not in ops.HP_DTYPE:
            _fail(op, f"{name} must be bfloat16 or float32, got {w.dtype}", TypeError)
        if w.dim() != 3:
            _fail(op, f"{name} must be 3-D, got shape {tuple(w.shape)}")
        if w.device != dev:
            _fail(op, f"{name} must be on {dev}, got {w.device}")
    if not (w1.dtype == w3.dtype == w2.dtype):
        _fail(op, f"w1, w3 and w2 must have one dtype, got {w1.dtype}, {w3.dtype}, {w2.dtype}",
              TypeError)
    e, i, d = w1.shape
    if tuple(w3.shape) != (e, i, d) or tuple(w2.shape) != (e, d, i):
        _fail(op, f"w1, w3 must be (E, I, D) and w2 (E, D, I); got {tuple(w1.shape)}, "
                  f"{tuple(w3.shape)}, {tuple(w2.shape)}")
    return e, i, d


# ---- the forward op ------------------------------------------------------------------------

def _fwd_plan(x, offs, w1, w3, w2, cache, dtype):
    op = "moe_experts_forward"
    dev = ops._device(op, x, offs)
    hp = ops._hp(op, "x", x, 2)
    ops._offs(op, offs, dev)
    f = ops._fmt(op, dtype)
    e, i, d = _weight_args(op, w1, w3, w2, dev)
    m, dx = x.shape
    if dx != d:
        _fail(op, f"x is (M, {dx}) but the weights have D = {d}")
    if offs.shape[0] != e:
        _fail(op, f"offs has {offs.shape[0]} groups but the weights have {e} experts")
    return dev, hp, f, (m, d, i, e)


def _fwd_kernel(x, offs, w1, w3, w2, cache, dtype, pad=True):
    op = "moe_experts_forward"
    dev, hp, f, (m, d, i, e) = _fwd_plan(x, offs, w1, w3, w2, cache, dtype)
    c = _cache_of(op, cache)
    h = c._ensure(dev, f, w1, w3, w2)
    desc = ops._desc(L.Experts, hp, f, f, _flags(pad), L.GEMM_BACKEND_AUTO, m, d, i, e)
    return _forward_call(op, False, dev, desc, c, h, (m, d), [x, offs])


def _bufs(ts):
    """(pointer, element count) of each tensor, flattened: the C call's buffer arguments."""
    return [a for t in ts for a in (t.data_ptr(), t.numel())]


def _stream(dev):
    return None if dev.type == "cpu" else ops._raw_stream(dev.index)


def _forward_call(op, pre, dev, desc, c, h, md, ins):
    """A forward's C call (`pre`: the pre-cast one) with inputs `ins` (the tensors before y):
    y, saved and the workspace from torch's allocator; (y, saved, generation)."""
    ctx = ops._ctx(dev)
    saved_n, ws_n, _ = (ctx.experts_precast_sizes if pre else ctx.experts_sizes)(desc)
    y = torch.empty(md, dtype=_BF16, device=dev)
    saved = torch.empty(saved_n, dtype=_U8, device=dev)
    ws = torch.empty(ws_n, dtype=_U8, device=dev)
    gen = ctypes.c_uint64()
    dll = L.lib().dll
    cfn = dll.hipfp8_moe_experts_forward_precast if pre else dll.hipfp8_moe_experts_forward
    st = cfn(ctx.handle, desc, h, *_bufs(ins + [y, saved, ws]), ctypes.byref(gen), _stream(dev))
    if st:
        raise L.lib().error(st, f"hipfp8.{op}")
    return y, saved, torch.tensor([c.serial, gen.value], dtype=torch.int64)


def _backward_call(op, pre, dev, desc, c, gen, shape, ins):
    """A backward's C call with inputs `ins` (the tensors after `generation`, offs last):
    (dx, dW13, dW2)."""
    ctx = ops._ctx(dev)
    ws_n = (ctx.experts_precast_sizes if pre else ctx.experts_sizes)(desc)[2]
    outs = list(_bwd_outs(dev, *shape))
    ws = torch.empty(ws_n, dtype=_U8, device=dev)
    dll = L.lib().dll
    cfn = dll.hipfp8_moe_experts_backward_precast if pre else dll.hipfp8_moe_experts_backward
    st = cfn(ctx.handle, desc, c._handle, gen, *_bufs(ins + outs + [ws]), _stream(dev))
    if st:
        raise L.lib().error(st, f"hipfp8.{op}")
    return tuple(outs)


def _fwd_fake(x, offs, w1, w3, w2, cache, dtype, pad=True):
    dev, _, _, (m, d, i, e) = _fwd_plan(x, offs, w1, w3, w2, cache, dtype)
    return (torch.empty((m, d), dtype=_BF16, device=dev),
            torch.empty(experts_saved_bytes(m, d, i, e), dtype=_U8, device=dev),
            torch.empty(2, dtype=torch.int64, device="cpu"))


# ---- the backward op -----------------------------------------------------------------------

def _bwd_plan(saved, generation, dy, offs, cache, i, dtype, grad_dtype):
    op = "moe_experts_backward"
    dev = ops._device(op, saved, dy, offs)
    hp = ops._hp(op, "dy", dy, 2)
    ops._offs(op, offs, dev)
    f = ops._fmt(op, dtype)
    gf = ops._fmt(op, grad_dtype)
    _generation_arg(op, generation)
    m, d = dy.shape
    e = offs.shape[0]
    if i <= 0:
        _fail(op, f"i must be > 0, got {i}")
    _saved_arg(op, saved, experts_saved_bytes(m, d, i, e), (m, d, i, e))
    return dev, hp, f, gf, (m, d, i, e)


def _generation_arg(op, generation):
    if generation.dtype != torch.int64 or generation.device.type not in ("cpu", "meta") \
            or tuple(generation.shape) != (2,):
        _fail(op, "generation must be the forward's CPU int64 (2,) tensor, got "
                  f"{generation.dtype} {tuple(generation.shape)} on {generation.device}", TypeError)


def _saved_arg(op, saved, want, shape):
    if saved.dtype != _U8 or saved.dim() != 1 or not saved.is_contiguous() \
            or saved.shape[0] != want:
        _fail(op, f"saved must be the forward's contiguous uint8 ({want},) tensor for "
                  f"(M, D, I, E) = {shape}, got {saved.dtype} {tuple(saved.shape)}")


def _cache_for_backward(op, cache, generation):
    """The cache and the snapshot number of a backward (refused when the cache was made anew
    since the forward)."""
    c = _cache_of(op, cache)
    serial, gen = generation.tolist()
    if serial != c.serial:
        _fail(op, "the weight cache was made anew (device, shape or FP8 dtype changed, or "
                  "released) since the forward these saved tensors come from", RuntimeError)
    return c, gen


def _bwd_outs(dev, m, d, i, e):
    return (torch.empty((m, d), dtype=_BF16, device=dev),
            torch.empty((2, e, i, d), dtype=_BF16, device=dev),
            torch.empty((e, d, i), dtype=_BF16, device=dev))


def _bwd_kernel(saved, generation, dy, offs, cache, i, dtype, grad_dtype, pad=True):
    op = "moe_experts_backward"
    dev, hp, f, gf, (m, d, i, e) = _bwd_plan(saved, generation, dy, offs, cache, i, dtype,
                                             grad_dtype)
    c, gen = _cache_for_backward(op, cache, generation)
    desc = ops._desc(L.Experts, hp, f, gf, _flags(pad), L.GEMM_BACKEND_AUTO, m, d, i, e)
    return _backward_call(op, False, dev, desc, c, gen, (m, d, i, e), [saved, dy, offs])


def _bwd_fake(saved, generation, dy, offs, cache, i, dtype, grad_dtype, pad=True):
    dev, _, _, _, (m, d, i, e) = _bwd_plan(saved, generation, dy, offs, cache, i, dtype,
                                           grad_dtype)
    return _bwd_outs(dev, m, d, i, e)


# ---- the pre-cast ops (x and dy cast by the caller: the routing dispatches) ----------------

def _fp8_operand(op, name, q, scales, m, k, n_scales, dev, col=False):
    """An FP8 operand: q (m, k) row-major (col: column-major, strides (1, m)) and n_scales f32
    dequant scales; returns its format id."""
    f = ops._fp8_in(op, name, q)
    if q.dim() != 2 or tuple(q.shape) != (m, k):
        _fail(op, f"{name} must be ({m}, {k}), got shape {tuple(q.shape)}")
    if not (q.t().is_contiguous() if col else q.is_contiguous()):
        _fail(op, f"{name} must be " + ("column-major (strides (1, M), the dispatch's out_col)"
                                         if col else "contiguous (row-major)"))
    if q.device != dev:
        _fail(op, f"{name} must be on {dev}, got {q.device}")
    ops._f32_in(op, name + "_scales", scales, n_scales, dev)
    return f


def _fwdp_plan(x, x_scales, offs, w1, w3, w2, cache):
    op = "moe_experts_forward_precast"
    dev = ops._device(op, x, x_scales, offs)
    ops._offs(op, offs, dev)
    e, i, d = _weight_args(op, w1, w3, w2, dev)
    if x.dim() != 2:
        _fail(op, f"x must be 2-D (M, D), got shape {tuple(x.shape)}")
    m = x.shape[0]
    f = _fp8_operand(op, "x", x, x_scales, m, d, m, dev)
    if offs.shape[0] != e:
        _fail(op, f"offs has {offs.shape[0]} groups but the weights have {e} experts")
    return dev, f, (m, d, i, e)


def _fwdp_kernel(x, x_scales, offs, w1, w3, w2, cache):
    op = "moe_experts_forward_precast"
    dev, f, (m, d, i, e) = _fwdp_plan(x, x_scales, offs, w1, w3, w2, cache)
    c = _cache_of(op, cache)
    h = c._ensure(dev, f, w1, w3, w2)
    desc = ops._desc(L.Experts, L.DTYPE_BF16, f, f, _POW2, L.GEMM_BACKEND_AUTO, m, d, i, e)
    return _forward_call(op, True, dev, desc, c, h, (m, d), [x, x_scales, offs])


def _fwdp_fake(x, x_scales, offs, w1, w3, w2, cache):
    dev, _, (m, d, i, e) = _fwdp_plan(x, x_scales, offs, w1, w3, w2, cache)
    return (torch.empty((m, d), dtype=_BF16, device=dev),
            torch.empty(experts_precast_saved_bytes(m, d, i, e), dtype=_U8, device=dev),
            torch.empty(2, dtype=torch.int64, device="cpu"))


def _bwdp_plan(saved, generation, dy, dy_scales, dy_col, dy_col_scales, x_col, x_col_scales,
               offs, cache, i):
    op = "moe_experts_backward_precast"
    dev = ops._device(op, saved, dy, dy_scales, dy_col, dy_col_scales, x_col, x_col_scales, offs)
    ops._offs(op, offs, dev)
    _generation_arg(op, generation)
    if dy.dim() != 2:
        _fail(op, f"dy must be 2-D (M, D), got shape {tuple(dy.shape)}")
    if i <= 0:
        _fail(op, f"i must be > 0, got {i}")
    m, d = dy.shape
    e = offs.shape[0]
    gf = _fp8_operand(op, "dy", dy, dy_scales, m, d, m, dev)
    if _fp8_operand(op, "dy_col", dy_col, dy_col_scales, m, d, e * d, dev, col=True) != gf:
        _fail(op, f"dy and dy_col must have one FP8 dtype, got {dy.dtype} and {dy_col.dtype}",
              TypeError)
    f = _fp8_operand(op, "x_col", x_col, x_col_scales, m, d, e * d, dev, col=True)
    _saved_arg(op, saved, experts_precast_saved_bytes(m, d, i, e), (m, d, i, e))
    return dev, f, gf, (m, d, i, e)


def _bwdp_kernel(saved, generation, dy, dy_scales, dy_col, dy_col_scales, x_col, x_col_scales,
                 offs, cache, i):
    op = "moe_experts_backward_precast"
    dev, f, gf, (m, d, i, e) = _bwdp_plan(saved, generation, dy, dy_scales, dy_col,
                                          dy_col_scales, x_col, x_col_scales, offs, cache, i)
    c, gen = _cache_for_backward(op, cache, generation)
    desc = ops._desc(L.Experts, L.DTYPE_BF16, f, gf, _POW2, L.GEMM_BACKEND_AUTO, m, d, i, e)
    ins = [saved, dy, dy_scales, dy_col, dy_col_scales, x_col, x_col_scales, offs]
    return _backward_call(op, True, dev, desc, c, gen, (m, d, i, e), ins)


def _bwdp_fake(*args):
    dev, _, _, (m, d, i, e) = _bwdp_plan(*args)
    return _bwd_outs(dev, m, d, i, e)


def _define(schema, kernel, fake):
    name = schema.split("(", 1)[0]
    ops._lib.define(schema)
    ops._lib.impl(name, kernel, "CPU")
    ops._lib.impl(name, kernel, "CUDA")
    torch.library.register_fake("hipfp8::" + name, fake, lib=ops._lib)
    return getattr(torch.ops.hipfp8, name).default


_fwd_op = _define("moe_experts_forward(Tensor x, Tensor offs, Tensor w1, Tensor w3, Tensor w2, "
                  "int cache, ScalarType dtype, bool pad=True) -> (Tensor, Tensor, Tensor)",
                  _fwd_kernel, _fwd_fake)
_bwd_op = _define("moe_experts_backward(Tensor saved, Tensor generation, Tensor dy, Tensor offs, "
                  "int cache, int i, ScalarType dtype, ScalarType grad_dtype, bool pad=True) "
                  "-> (Tensor, Tensor, Tensor)", _bwd_kernel, _bwd_fake)


_fwdp_op = _define("moe_experts_forward_precast(Tensor x, Tensor x_scales, Tensor offs, Tensor w1, "
                   "Tensor w3, Tensor w2, int cache) -> (Tensor, Tensor, Tensor)",
                   _fwdp_kernel, _fwdp_fake)
_bwdp_op = _define("moe_experts_backward_precast(Tensor saved, Tensor generation, Tensor dy, "
                   "Tensor dy_scales, Tensor dy_col, Tensor dy_col_scales, Tensor x_col, "
                   "Tensor x_col_scales, Tensor offs, int cache, int i) -> (Tensor, Tensor, Tensor)",
                   _bwdp_kernel, _bwdp_fake)


def _eager(kernel, op):
    def call(*args):
        # eager calls on plain tensors skip the dispatcher's round trip into Python, as
        # ops._register's entry points do
        if not ops._is_compiling() and type(args[0]) is torch.Tensor \
                and not ops._dispatch_stack_len():
            return kernel(*args)
        return op(*args)
    call.op = op
    return call


_fwd = _eager(_fwd_kernel, _fwd_op)
_bwd = _eager(_bwd_kernel, _bwd_op)


def moe_experts_forward(x, offs, w1, w3, w2, cache, dtype=None, pad=True):
    """The recipe's forward (no autograd): (y (M, D) bf16, saved, generation). `cache`: an
    ExpertsWeightCache; `pad`: the padded wgrad layout (module docstring). Rows of y past
    offs[-1] are not written."""
    return _fwd(x, offs, w1, w3, w2, cache.id, ops._dt(x, dtype), pad)


def moe_experts_backward(saved, generation, dy, offs, cache, i, dtype=None, grad_dtype=None,
                         pad=True):
    """The recipe's backward: (dx (M, D), dW13 (2, E, I, D) = [dW1; dW3], dW2 (E, D, I)), all
    bf16, from the forward's saved and generation (`pad` as that forward's). Rows of dx past
    offs[-1] are not written."""
    dt = ops._dt(dy, dtype)
    gdt = dt if grad_dtype is None else grad_dtype
    return _bwd(saved, generation, dy, offs, cache.id, i, dt, gdt, pad)


_fwdp = _eager(_fwdp_kernel, _fwdp_op)
_bwdp = _eager(_bwdp_kernel, _bwdp_op)


def moe_experts_forward_precast(x, x_scales, offs, w1, w3, w2, cache):
    """The recipe's forward from x already cast (no autograd): x (M, D) FP8 row-major with
    x_scales (M,) f32 dequant row scales (moe_dispatch_dual's out / scales with dequant=True;
    offs = its offs_pad, M = its m_cap), the FP8 dtype x's. -> (y (M, D) bf16, saved,
    generation); bit-identical to moe_experts_forward of the bf16 x those operands cast."""
    return _fwdp(x, x_scales, offs, w1, w3, w2, cache.id)


def moe_experts_backward_precast(saved, generation, dy, dy_scales, dy_col, dy_col_scales, x_col,
                                 x_col_scales, offs, cache, i):
    """The recipe's backward from operands already cast (dequant scales): dy (M, D) row-major
    with (M,) scales and dy_col (M, D) column-major with (E, D) scales (moe_combine_bwd_dual's),
    x_col (M, D) column-major with (E, D) scales (the forward dispatch's out_col / scales_col);
    saved and generation from moe_experts_forward_precast. -> (dx (M, D), dW13 (2, E, I, D),
    dW2 (E, D, I)), bf16."""
    return _bwdp(saved, generation, dy, dy_scales, dy_col, dy_col_scales, x_col, x_col_scales,
                 offs, cache.id, i)


# ---- autograd ------------------------------------------------------------------------------

class _Experts(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, offs, w1, w3, w2, cache_id, fp8, grad_fp8, pad):
        y, saved, gen = _fwd(x, offs, w1, w3, w2, cache_id, fp8, pad)
        ctx.save_for_backward(saved, gen, offs)
        ctx.args = (cache_id, w1.shape[1], fp8, grad_fp8, x.dtype, w1.dtype, pad)
        return y

    @staticmethod
    def backward(ctx, dy):
        saved, gen, offs = ctx.saved_tensors
        cache_id, i, fp8, grad_fp8, x_dtype, w_dtype, pad = ctx.args
        dy = dy.contiguous()
        if dy.dtype != x_dtype:
            dy = dy.to(x_dtype)
        dx, dw13, dw2 = _bwd(saved, gen, dy, offs, cache_id, i, fp8, grad_fp8, pad)
        gw1, gw3 = dw13[0], dw13[1]  # contiguous: autograd keeps them without a copy
        if w_dtype != _BF16:
            gw1, gw3, dw2 = gw1.to(w_dtype), gw3.to(w_dtype), dw2.to(w_dtype)
        if x_dtype != _BF16:
            dx = dx.to(x_dtype)
        return dx, None, gw1, gw3, dw2, None, None, None, None


def experts(x, offs, w1, w3, w2, cache, float8_dtype=None, grad_float8_dtype=None,
            pad_wgrad=True):
    """Differentiable fused FP8 experts block: y (M, D) bf16 = per expert group g of x's rows
    `(silu(x_g w1[g]^T) * (x_g w3[g]^T)) w2[g]^T`, torchtitan's SwiGLU experts.

    x: (M, D) bf16/f32; offs: (E,) int32 END offsets along M; w1, w3: (E, I, D), w2: (E, D, I),
    one dtype (bf16 or f32: cast to FP8 from that dtype); cache: the ExpertsWeightCache that
    keeps their FP8 copies. `float8_dtype` (x, h, the weights) and `grad_float8_dtype` (dy and
    the SwiGLU's gradient) default to the device's native E4M3. Rows of y and of x's gradient
    past offs[-1] are not written. Gradients: x, w1, w3, w2 (each in its input's dtype).
    `pad_wgrad` (default on): the wgrad GEMMs on 16-token aligned groups whatever the routing
    (module docstring; off: token groups off that boundary take the reference GEMM kernel)."""
    op = "experts"
    if not isinstance(cache, ExpertsWeightCache):
        _fail(op, f"cache must be an ExpertsWeightCache, got {type(cache).__name__}", TypeError)
    if offs is None or offs.dtype != torch.int32:
        _fail(op, "offs must be an int32 tensor of END offsets", TypeError)
    if x.dim() == 2 and not x.is_contiguous():
        x = x.contiguous()
    fp8 = float8_dtype if float8_dtype is not None else ops.native_fp8_dtype(x.device)
    gfp8 = grad_float8_dtype if grad_float8_dtype is not None else fp8
    return _Experts.apply(x, offs, w1, w3, w2, cache.id, fp8, gfp8, bool(pad_wgrad))
