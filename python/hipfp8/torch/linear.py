"""Dense FP8 training linear: hipfp8's cast_transpose ops feed torch._scaled_mm.

Recipes (the FP8 dtypes are the device's native E4M3 / E5M2):
- "tensorwise": torchao's TENSORWISE recipe: one scale per tensor, e4m3 input and weight,
  e5m2 grad_output, no power-of-two rounding. One cast_transpose per tensor per step gives
  both layouts the three GEMMs read (forward x @ W^T, dgrad dY @ W, wgrad dY^T @ x).
- "rowwise": torchao's ROWWISE recipe: e4m3 everywhere, power-of-two scales, per row of each
  GEMM operand along its reduced dim (forward: x and W over K; dgrad: dY over N, W's columns
  over N; wgrad: dY's and x's columns over M); the scales go into _scaled_mm's rowwise
  epilogue (scale_a (rows, 1), scale_b (1, cols), bf16 out) for all three GEMMs, one bf16
  rounding of the scaled f32 accumulation. One rowwise cast_transpose per tensor gives both
  layouts and both scale vectors. All three GEMMs use fast accumulation. torchao runs its
  backward as a unit-scale GEMM rounded to bf16 with the scales multiplied in afterwards;
  with power-of-two scales that multiply is exact, so the two differ only in the dgrad and
  wgrad accumulation (torchao: without fast accumulation). The forward equals torchao's bit
  for bit. tests/test_linear.py checks one rounding against float64 on the CPU.
- "delayed": Transformer Engine's delayed scaling: tensorwise casts with a scale computed
  from an amax history (max over the last `history_len` steps, fp8_max / amax), the casts
  returning this step's amax (cast_transpose_scaled: one read of x). The grad_output's amax
  is recorded in backward and enters the history at the next forward.
"""

import torch
from torch import nn

from . import ops

__all__ = ["Float8Linear", "convert_to_float8_training", "RECIPES"]

RECIPES = ("tensorwise", "rowwise", "delayed")


def _mm(a, b, sa, sb, out_dtype, fast):
    return torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=out_dtype,
                            use_fast_accum=fast)


def _mm_rowwise(a, b, sa, sb, fast):
    """_scaled_mm with per-row scales sa (M,1) and per-column scales sb (1,N), bf16 out. torch's
    CPU _scaled_mm takes tensorwise scales only: there the scales are applied after a
    unit-scale f32 GEMM (torchao's way), which is what lets the CPU tests run this recipe."""
    if a.device.type == "cpu":
        one = torch.ones((), device=a.device)
        y = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.float32)
        return (y * sa * sb).to(torch.bfloat16)
    return _mm(a, b, sa, sb, torch.bfloat16, fast)


# ---- one custom op per pass ------------------------------------------------------------------
# The tensorwise and rowwise recipes run each pass (forward; backward: dgrad + wgrad) as ONE
# custom op, hipfp8::linear_<recipe>_fwd / _bwd, whose kernel is the eager code below. Eager calls
# on plain tensors run that code directly; under torch.compile the graph holds the two opaque
# calls (plus the bias add), so a compiled step runs the same kernels with the same launches as
# an eager one and only adds two dispatcher round trips -- rather than one per cast, GEMM and
# scale-inverse kernel through inductor's wrapper.

_lib = torch.library.Library("hipfp8", "FRAGMENT")
_F32 = torch.float32

#: True: under torch.compile the passes are traced into the graph (the casts, the GEMMs and the
#: scale inverses each a node, inductor's wrapper calling them) instead of being one opaque op
#: each. Same results; for comparing the two ways (python/bench/dense.py's "traced" rows).
TRACE_PASSES = False


def _fused(schema, impl, fake):
    name = schema.split("(", 1)[0]
    _lib.define(schema)
    _lib.impl(name, impl, "CPU")
    _lib.impl(name, impl, "CUDA")
    torch.library.register_fake("hipfp8::" + name, fake, lib=_lib)
    op = getattr(torch.ops.hipfp8, name).default

    def call(*args):
        # (as ops._register's entry: torch.compile, fake tensors, subclasses and dispatch modes
        # go through torch.ops.hipfp8.<name>)
        if ops._is_compiling():
            return impl(*args) if TRACE_PASSES else op(*args)
        if type(args[0]) is torch.Tensor and not ops._dispatch_stack_len():
            return impl(*args)
        return op(*args)

    call.__name__ = name
    call.op = op
    return call


def _grads_fake(gy, xt8, wt8, gx_dtype, gw_dtype, need_x, need_w):
    k, m = xt8.shape
    n = wt8.shape[1]
    return (gy.new_empty((m, k) if need_x else (0,), dtype=gx_dtype),
            gy.new_empty((n, k) if need_w else (0,), dtype=gw_dtype))


def _tw_fwd(x, w, e4m3):
    x8, xt8, sx, _ = ops._cast_transpose(x, e4m3, False, False)
    w8, wt8, sw, _ = ops._cast_transpose(w, e4m3, False, False)
    isx, isw = ops._inverses(sx, sw)
    return _mm(x8, w8.t(), isx, isw, x.dtype, True), xt8, isx, wt8, isw


def _tw_fwd_fake(x, w, e4m3):
    (m, k), n = x.shape, w.shape[0]
    return (x.new_empty((m, n)), x.new_empty((k, m), dtype=e4m3), x.new_empty((), dtype=_F32),
            x.new_empty((k, n), dtype=e4m3), x.new_empty((), dtype=_F32))


def _tw_bwd(gy, xt8, isx, wt8, isw, e5m2, gx_dtype, gw_dtype, need_x, need_w):
    g8, gt8, sg, _ = ops._cast_transpose(gy.contiguous(), e5m2, False, False)
    isg = sg.reciprocal()
    gx = _mm(g8, wt8.t(), isg, isw, gx_dtype, False) if need_x else gy.new_empty(0, dtype=gx_dtype)
    gw = _mm(gt8, xt8.t(), isg, isx, gw_dtype, False) if need_w else gy.new_empty(0, dtype=gw_dtype)
    return gx, gw


def _tw_bwd_fake(gy, xt8, isx, wt8, isw, e5m2, gx_dtype, gw_dtype, need_x, need_w):
    return _grads_fake(gy, xt8, wt8, gx_dtype, gw_dtype, need_x, need_w)


def _rw_fwd(x, w, e4m3):
    m, n = x.shape[0], w.shape[0]
    x8, xt8, sx, sxt = ops._cast_transpose(x, e4m3, True, True)
    w8, wt8, sw, swt = ops._cast_transpose(w, e4m3, True, True)
    isx, isw = ops._inverses(sx, sw)
    y = _mm_rowwise(x8, w8.t(), isx.view(m, 1), isw.view(1, n), True)
    return (y if x.dtype == torch.bfloat16 else y.to(x.dtype)), xt8, sxt, wt8, swt


def _rw_fwd_fake(x, w, e4m3):
    (m, k), n = x.shape, w.shape[0]
    return (x.new_empty((m, n)), x.new_empty((k, m), dtype=e4m3), x.new_empty((k,), dtype=_F32),
            x.new_empty((k, n), dtype=e4m3), x.new_empty((k,), dtype=_F32))


def _rw_bwd(gy, xt8, sxt, wt8, swt, e4m3, gx_dtype, gw_dtype, need_x, need_w):
    k, m = xt8.shape
    n = wt8.shape[1]
    # dgrad gy (M,N) @ W (N,K): gy's rows scaled over N, W's columns over N (swt);
    # wgrad gy^T (N,M) @ x (M,K): both cast along M (gy's columns: sgt, x's columns: sxt)
    g8, gt8, sg, sgt = ops._cast_transpose(gy.contiguous(), e4m3, True, True)
    inv = iter(ops._inverses(*((sg, swt) if need_x else ()) + ((sgt, sxt) if need_w else ())))
    if need_x:
        gx = _mm_rowwise(g8, wt8.t(), next(inv).view(m, 1), next(inv).view(1, k), True)
        gx = gx if gx_dtype == torch.bfloat16 else gx.to(gx_dtype)
    else:
        gx = gy.new_empty(0, dtype=gx_dtype)
    if need_w:
        gw = _mm_rowwise(gt8, xt8.t(), next(inv).view(n, 1), next(inv).view(1, k), True)
        gw = gw if gw_dtype == torch.bfloat16 else gw.to(gw_dtype)
    else:
        gw = gy.new_empty(0, dtype=gw_dtype)
    return gx, gw


def _rw_bwd_fake(gy, xt8, sxt, wt8, swt, e4m3, gx_dtype, gw_dtype, need_x, need_w):
    return _grads_fake(gy, xt8, wt8, gx_dtype, gw_dtype, need_x, need_w)


_FWD = "(Tensor x, Tensor w, ScalarType e4m3) -> (Tensor, Tensor, Tensor, Tensor, Tensor)"
_BWD = ("(Tensor gy, Tensor xt8, Tensor sx, Tensor wt8, Tensor sw, ScalarType dtype, "
        "ScalarType gx_dtype, ScalarType gw_dtype, bool need_x, bool need_w) -> (Tensor, Tensor)")
linear_tensorwise_fwd = _fused("linear_tensorwise_fwd" + _FWD, _tw_fwd, _tw_fwd_fake)
linear_tensorwise_bwd = _fused("linear_tensorwise_bwd" + _BWD, _tw_bwd, _tw_bwd_fake)
linear_rowwise_fwd = _fused("linear_rowwise_fwd" + _FWD, _rw_fwd, _rw_fwd_fake)
linear_rowwise_bwd = _fused("linear_rowwise_bwd" + _BWD, _rw_bwd, _rw_bwd_fake)


def _pass_fn(fwd, bwd):
    """The autograd Function of a recipe whose passes are the custom ops fwd and bwd:
    forward(x, w, fwd_dtype, bwd_dtype) saves fwd's FP8 transposes and scales."""
    class _Pass(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, fwd_dtype, bwd_dtype):
            y, *saved = fwd(x, w, fwd_dtype)
            ctx.save_for_backward(*saved)
            ctx.bwd_dtype = bwd_dtype
            ctx.dtypes = (x.dtype, w.dtype)
            return y

        @staticmethod
        def backward(ctx, gy):
            need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
            gx, gw = bwd(gy, *ctx.saved_tensors, ctx.bwd_dtype, *ctx.dtypes, need_x, need_w)
            return (gx if need_x else None), (gw if need_w else None), None, None

    return _Pass


# forward(x, w, e4m3, e5m2) / forward(x, w, e4m3, e4m3): rowwise is e4m3 in all three GEMMs
_Tensorwise = _pass_fn(linear_tensorwise_fwd, linear_tensorwise_bwd)
_Rowwise = _pass_fn(linear_rowwise_fwd, linear_rowwise_bwd)


class _Delayed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, scales, grad_amax, e4m3, e5m2):
        # scales: (3,) f32 [x, w, grad_output] from the histories; grad_amax: (1,) f32 buffer
        # the backward writes this step's grad_output amax into.
        sx, sw, sg = scales[0:1], scales[1:2], scales[2:3]
        x8, xt8, ax = ops._cast_transpose_scaled(x, sx, e4m3)
        w8, wt8, aw = ops._cast_transpose_scaled(w, sw, e4m3)
        isx, isw, isg = ops._inverses(sx, sw, sg)
        y = _mm(x8, w8.t(), isx, isw, x.dtype, True)
        ctx.save_for_backward(xt8, wt8, sg, isx, isw, isg, grad_amax)
        ctx.e5m2 = e5m2
        ctx.dtypes = (x.dtype, w.dtype)
        amax = torch.stack([ax, aw])
        ctx.mark_non_differentiable(amax)
        return y, amax

    @staticmethod
    def backward(ctx, gy, _amax):
        xt8, wt8, sg, isx, isw, isg, grad_amax = ctx.saved_tensors
        g8, gt8, ag = ops._cast_transpose_scaled(gy.contiguous(), sg, ctx.e5m2)
        grad_amax.copy_(ag.view(1))
        gx = _mm(g8, wt8.t(), isg, isw, ctx.dtypes[0], False) if ctx.needs_input_grad[0] else None
        gw = _mm(gt8, xt8.t(), isg, isx, ctx.dtypes[1], False) if ctx.needs_input_grad[1] else None
        return gx, gw, None, None, None, None


class Float8Linear(nn.Linear):
    """nn.Linear whose three GEMMs (forward, dgrad, wgrad) run in FP8 with hipfp8's casts.

    Same parameters and state dict as nn.Linear (plus, for "delayed", the amax-history
    buffers). x may have any leading dims; its last dim and the weight must be contiguous
    after flattening. The FP8 dtypes default to the device's native ones.
    """

    def __init__(self, in_features, out_features, bias=True, recipe="tensorwise",
                 history_len=16, device=None, dtype=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        if recipe not in RECIPES:
            raise ValueError(f"hipfp8 Float8Linear: recipe must be one of {RECIPES}, got {recipe!r}")
        self.recipe = recipe
        if recipe == "delayed":
            kw = {"device": device, "dtype": torch.float32}
            # Rows: x, weight, grad_output. Histories start at zero, scales at one (TE's start).
            self.register_buffer("amax_history", torch.zeros(3, history_len, **kw))
            self.register_buffer("scales", torch.ones(3, **kw))
            self.register_buffer("grad_amax", torch.zeros(1, **kw))

    @classmethod
    def from_float(cls, lin, recipe="tensorwise", history_len=16):
        """A Float8Linear sharing `lin`'s weight and bias Parameters."""
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = lin.in_features, lin.out_features
        new.weight, new.bias = lin.weight, lin.bias
        if recipe not in RECIPES:
            raise ValueError(f"hipfp8 Float8Linear: recipe must be one of {RECIPES}, got {recipe!r}")
        new.recipe = recipe
        if recipe == "delayed":
            kw = {"device": lin.weight.device, "dtype": torch.float32}
            new.register_buffer("amax_history", torch.zeros(3, history_len, **kw))
            new.register_buffer("scales", torch.ones(3, **kw))
            new.register_buffer("grad_amax", torch.zeros(1, **kw))
        return new

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if not x2.is_contiguous():
            x2 = x2.contiguous()
        w = self.weight
        dev = x.device
        e4m3 = ops.native_fp8_dtype(dev)
        if self.recipe == "tensorwise":
            y = _Tensorwise.apply(x2, w, e4m3, ops.native_fp8_dtype(dev, e5m2=True))
        elif self.recipe == "rowwise":
            y = _Rowwise.apply(x2, w, e4m3, e4m3)
        else:
            y = self._delayed(x2, w, e4m3, ops.native_fp8_dtype(dev, e5m2=True))
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features)

    def _delayed(self, x2, w, e4m3, e5m2):
        hist, scales = self.amax_history, self.scales
        with torch.no_grad():
            # The grad_output amax of the previous backward enters its history now.
            hist[2:3].copy_(torch.cat([self.grad_amax.view(1, 1), hist[2:3, :-1]], dim=1))
            scales[2:3].copy_(_scale_from_history(hist[2:3], scales[2:3], e5m2))
        y, amax = _Delayed.apply(x2, w, scales.clone(), self.grad_amax, e4m3, e5m2)
        with torch.no_grad():
            hist[0:2].copy_(torch.cat([amax.view(2, 1), hist[0:2, :-1]], dim=1))
            scales[0:2].copy_(_scale_from_history(hist[0:2], scales[0:2], e4m3))
        return y

    def extra_repr(self):
        return super().extra_repr() + f", recipe={self.recipe}"


def _scale_from_history(hist, old, dtype):
    """fp8_max / max(history) per row, in f32; rows whose history max is 0 or not finite
    keep their old scale (Transformer Engine's rule, margin 0)."""
    amax = hist.amax(dim=1)
    # fmax / amax is inf or NaN exactly where the row keeps its old scale
    return torch.where(torch.isfinite(amax) & (amax > 0), torch.finfo(dtype).max / amax, old)


def convert_to_float8_training(model, recipe="tensorwise", module_filter_fn=None):
    """Swap every nn.Linear of `model` (for which module_filter_fn(module, fqn) is true, when
    given) for a Float8Linear sharing its parameters, in place, like torchao's function of
    the same name. Returns the model."""
    def visit(mod, prefix):
        for name, child in list(mod.named_children()):
            fqn = f"{prefix}.{name}" if prefix else name
            if type(child) is nn.Linear and (module_filter_fn is None or module_filter_fn(child, fqn)):
                setattr(mod, name, Float8Linear.from_float(child, recipe))
            else:
                visit(child, fqn)
    if type(model) is nn.Linear:
        return Float8Linear.from_float(model, recipe)
    visit(model, "")
    return model
