"""Dense FP8 training linear: hipfp8's cast_transpose ops feed torch._scaled_mm.

Recipes (the FP8 dtypes are the device's native E4M3 / E5M2):
- "tensorwise": torchao's TENSORWISE recipe: one scale per tensor, e4m3 input and weight,
  e5m2 grad_output, no power-of-two rounding. One cast_transpose per tensor per step gives
  both layouts the three GEMMs read (forward x @ W^T, dgrad dY @ W, wgrad dY^T @ x).
- "rowwise": torchao's ROWWISE recipe: e4m3 everywhere, power-of-two scales, per row of each
  GEMM operand along its reduced dim; the scales go into _scaled_mm's rowwise epilogue for
  all three GEMMs (cast_transpose rowwise gives x's row scales and its column scales at once).
  All three use fast accumulation (torch's rowwise CUTLASS kernel is slow without it; torchao
  instead runs its backward as a unit-scale tensorwise GEMM followed by an outer-product scale
  multiply, which costs a full pass over the output and rounds twice). The forward equals
  torchao's bit for bit; the backward differs from torchao's by that rounding.
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


class _Tensorwise(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, e4m3, e5m2):
        x8, xt8, sx, _ = ops._cast_transpose(x, e4m3, False, False)
        w8, wt8, sw, _ = ops._cast_transpose(w, e4m3, False, False)
        isx, isw = ops._inverses(sx, sw)
        ctx.save_for_backward(xt8, isx, wt8, isw)
        ctx.e5m2 = e5m2
        ctx.dtypes = (x.dtype, w.dtype)
        return _mm(x8, w8.t(), isx, isw, x.dtype, True)

    @staticmethod
    def backward(ctx, gy):
        xt8, isx, wt8, isw = ctx.saved_tensors
        g8, gt8, sg, _ = ops._cast_transpose(gy.contiguous(), ctx.e5m2, False, False)
        isg = sg.reciprocal()
        gx = _mm(g8, wt8.t(), isg, isw, ctx.dtypes[0], False) if ctx.needs_input_grad[0] else None
        gw = _mm(gt8, xt8.t(), isg, isx, ctx.dtypes[1], False) if ctx.needs_input_grad[1] else None
        return gx, gw, None, None


class _Rowwise(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, e4m3):
        m, k = x.shape
        n = w.shape[0]
        x8, xt8, sx, sxt = ops._cast_transpose(x, e4m3, True, True)
        w8, wt8, sw, swt = ops._cast_transpose(w, e4m3, True, True)
        isx, isw = ops._inverses(sx, sw)
        y = _mm_rowwise(x8, w8.t(), isx.view(m, 1), isw.view(1, n), True)
        ctx.save_for_backward(xt8, sxt, wt8, swt)
        ctx.e4m3 = e4m3
        ctx.dtypes = (x.dtype, w.dtype)
        return y if x.dtype == torch.bfloat16 else y.to(x.dtype)

    @staticmethod
    def backward(ctx, gy):
        xt8, sxt, wt8, swt = ctx.saved_tensors
        k, m = xt8.shape
        n = wt8.shape[1]
        g8, gt8, sg, sgt = ops._cast_transpose(gy.contiguous(), ctx.e4m3, True, True)
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        inv = iter(ops._inverses(*((sg, swt) if need_x else ()) + ((sgt, sxt) if need_w else ())))
        gx = gw = None
        if need_x:
            gx = _mm_rowwise(g8, wt8.t(), next(inv).view(m, 1), next(inv).view(1, k),
                             True).to(ctx.dtypes[0])
        if need_w:
            gw = _mm_rowwise(gt8, xt8.t(), next(inv).view(n, 1), next(inv).view(1, k),
                             True).to(ctx.dtypes[1])
        return gx, gw, None


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
            y = _Rowwise.apply(x2, w, e4m3)
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
