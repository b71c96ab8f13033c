"""A MoE layer's routed-expert path through hipfp8 with no bf16 permuted or padded copy.

    out = moe_routed_experts(x, top_scores, selected_experts, w1, w2, w3, cache)
    hf.swap_routed_experts(model)        # torchtitan 0.3 MoE modules, in place

From the router's choices (top_scores, selected_experts: (T, K)) the slots `token*K + j` are
put in expert order on the device (a stable argsort, per-expert counts by scatter_add, a
cumsum: no host synchronisation), then:

  forward:  moe_dispatch_dual(x)            gather + pad each expert group to `align` rows +
                                            both FP8 casts of the padded matrix (dequant scales)
            moe_experts_forward_precast     gate/up GEMM, SwiGLU + casts, down GEMM (padded rows)
            moe_combine(y_pad, scores)      out[t] = bf16(sum_j s[t,j] * y[row of (t, j)])
  backward: moe_combine_bwd_dual(dout, s)   rows bf16(s * dout[token]) gathered, padded, cast
            moe_experts_backward_precast    dx_pad, dW13, dW2 (x's colwise cast from the forward)
            moe_combine(dx_pad, ones)       dx[t] = sum_j dx_pad[row of (t, j)]
            moe_combine_bwd_scores          d_scores[t, j] = dot(dout[t], y_pad[row of (t, j)])

What this removes against torchtitan's path with the fused experts (hf.swap_grouped_experts):
the bf16 gather `x[token_indices]` (T*K rows written and read again by the cast), the
score-weighted bf16 copy of the routed output and its scatter_add, and in the backward the
bf16 gradient of the routed input and its scatter back; every gather is fused with a cast or
a sum. Padding each group to `align` = 16 rows is what the FP8 GEMM libraries want; it costs
at most E*15 rows of zeros, which the GEMMs run over.

Numerics. The experts block is bit-identical to the fused experts recipe on the same (padded)
rows: zero rows change no cast scale and add exact zeros to the weight gradients. The combine
differs from torchtitan 0.3's LocalTokenDispatcher.combine: torchtitan rounds each
score-weighted row to bf16 and adds the K rows into a bf16 output (K-1 more roundings); this
path adds the K f32 products and rounds once. With K = 1 both round once and agree bit for
bit; with K > 1 they differ by at most a few bf16 ulps of the output (python/tests/
test_routed.py measures it). The score gradient is an f32 dot (reference::route::dot_lanes'
order), torchtitan's an f32 sum in torch's reduction order: equal to f32 rounding.
"""

import torch

from . import fused_experts as fe
from . import ops

__all__ = ["moe_routed_experts", "route_slots", "swap_routed_experts"]

_F32 = torch.float32
_BF16 = torch.bfloat16


def _fail(op, msg, exc=ValueError):
    raise exc(f"hipfp8.{op}: {msg}")


def route_slots(selected_experts, num_experts, num_tokens_per_expert=None):
    """(perm (T*K,) int32, offs (E,) int32): the slots `token*K + j` of `selected_experts`
    (T, K) in expert order (stable: within an expert, in slot order, as torchtitan's argsort)
    and the END offsets of each expert's slots, on the device with no host synchronisation.
    `num_tokens_per_expert` (E,): the counts when the caller has them (torchtitan's router)."""
    flat = selected_experts.reshape(-1)
    perm = torch.argsort(flat, stable=True).to(torch.int32)
    if num_tokens_per_expert is None:
        num_tokens_per_expert = torch.zeros(num_experts, dtype=torch.int32,
                                            device=flat.device).scatter_add_(
            0, flat.long(), torch.ones_like(flat, dtype=torch.int32))
    offs = torch.cumsum(num_tokens_per_expert, 0, dtype=torch.int32)
    return perm, offs


class _RoutedExperts(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scores, perm, offs, w1, w2, w3, cache_id, fp8, grad_fp8, align):
        t, _ = x.shape
        topk = scores.shape[1]
        # room for every padded group, rounded to 16 rows: the column operands' row stride is
        # then one the library's 2D x 2D (wgrad) GEMM takes (else it runs the portable kernel)
        m_cap = (t * topk + offs.shape[0] * (align - 1) + 15) // 16 * 16
        offs_pad, slot_row, xq, xs, xc, xcs = ops._moe_dispatch_dual(
            x, perm, offs, topk, align, m_cap, fp8, True, True)
        y_pad, saved, gen = fe._fwdp(xq, xs, offs_pad, w1, w3, w2, cache_id)
        out = ops._moe_combine(y_pad, slot_row, scores)
        keep_y = y_pad if ctx.needs_input_grad[1] else None
        ctx.save_for_backward(saved, gen, offs_pad, slot_row, xc, xcs, keep_y, scores, perm, offs)
        ctx.args = (cache_id, w1.shape[1], grad_fp8, align, m_cap, x.dtype, w1.dtype)
        return out

    @staticmethod
    def backward(ctx, dout):
        saved, gen, offs_pad, slot_row, xc, xcs, y_pad, scores, perm, offs = ctx.saved_tensors
        cache_id, i, grad_fp8, align, m_cap, x_dtype, w_dtype = ctx.args
        dout = dout.contiguous()
        _, _, dq, ds, dc, dcs = ops._moe_combine_bwd_dual(
            dout, scores, perm, offs, align, m_cap, grad_fp8, True, True)
        dx_pad, dw13, dw2 = fe._bwdp(saved, gen, dq, ds, dc, dcs, xc, xcs, offs_pad, cache_id, i)
        dx = ops._moe_combine(dx_pad, slot_row, torch.ones_like(scores))
        d_scores = None
        if y_pad is not None:
            y = y_pad if dout.dtype == _BF16 else y_pad.to(dout.dtype)  # exact
            d_scores = ops._moe_combine_bwd_scores(dout, y, slot_row)
        gw1, gw3 = dw13[0], dw13[1]
        if w_dtype != _BF16:
            gw1, gw3, dw2 = gw1.to(w_dtype), gw3.to(w_dtype), dw2.to(w_dtype)
        if x_dtype != _BF16:
            dx = dx.to(x_dtype)
        return dx, d_scores, None, None, gw1, dw2, gw3, None, None, None, None


def moe_routed_experts(x, top_scores, selected_experts, w1, w2, w3, cache,
                       num_tokens_per_expert=None, align=16, float8_dtype=None,
                       grad_float8_dtype=None):
    """Differentiable routed-expert output of a MoE layer: out (T, D) bf16 =
    sum_j top_scores[t, j] * experts_{selected_experts[t, j]}(x[t]) with torchtitan's SwiGLU
    experts in FP8 (the fused experts recipe), from x (T, D) (bf16 or f32), the router's
    top_scores (T, K) (any float dtype; used as f32) and selected_experts (T, K) (integer
    expert ids in [0, E)). w1, w3: (E, I, D), w2: (E, D, I), one dtype; cache: an
    ExpertsWeightCache (their FP8 copies). Gradients: x, top_scores, w1, w2, w3.
    `num_tokens_per_expert` (E,): the per-expert counts if the caller has them (else computed
    on the device). `align`: the padded group size (16: what the FP8 GEMM libraries want)."""
    op = "moe_routed_experts"
    if not isinstance(cache, fe.ExpertsWeightCache):
        _fail(op, f"cache must be an ExpertsWeightCache, got {type(cache).__name__}", TypeError)
    if x.dim() != 2:
        _fail(op, f"x must be (T, D), got shape {tuple(x.shape)}")
    if top_scores.dim() != 2 or top_scores.shape[0] != x.shape[0]:
        _fail(op, f"top_scores must be (T, K) = ({x.shape[0]}, K), got {tuple(top_scores.shape)}")
    if tuple(selected_experts.shape) != tuple(top_scores.shape):
        _fail(op, f"selected_experts must have top_scores' shape {tuple(top_scores.shape)}, got "
                  f"{tuple(selected_experts.shape)}")
    if selected_experts.dtype.is_floating_point or selected_experts.dtype == torch.bool:
        _fail(op, f"selected_experts must hold integer expert ids, got {selected_experts.dtype}",
              TypeError)
    if not top_scores.dtype.is_floating_point:
        _fail(op, f"top_scores must be floating point, got {top_scores.dtype}", TypeError)
    if not isinstance(align, int) or align <= 0:
        _fail(op, f"align must be a positive int, got {align!r}")
    e = w1.shape[0]
    perm, offs = route_slots(selected_experts, e, num_tokens_per_expert)
    fp8 = float8_dtype if float8_dtype is not None else ops.native_fp8_dtype(x.device)
    gfp8 = grad_float8_dtype if grad_float8_dtype is not None else fp8
    scores = top_scores.to(_F32).contiguous()
    return _RoutedExperts.apply(x.contiguous(), scores, perm, offs, w1, w2, w3, cache.id, fp8,
                                gfp8, align)


# ---- torchtitan 0.3 ------------------------------------------------------------------------

def _local(w):
    return w.to_local() if hasattr(w, "to_local") else w


def _swapped_forward(self, x_BLD, topk_scores_BLK, topk_expert_ids_BLK,
                     num_local_tokens_per_expert_E):
    d = x_BLD.shape[-1]
    k = topk_scores_BLK.shape[-1]
    ie = self.inner_experts
    out = moe_routed_experts(
        x_BLD.reshape(-1, d), topk_scores_BLK.reshape(-1, k), topk_expert_ids_BLK.reshape(-1, k),
        _local(ie.w1_EFD), _local(ie.w2_EDF), _local(ie.w3_EFD), self._hipfp8_cache,
        num_tokens_per_expert=num_local_tokens_per_expert_E, align=self._hipfp8_align,
        float8_dtype=self._hipfp8_float8_dtype)
    return out.to(x_BLD.dtype).view(x_BLD.shape[0], -1, d)


def _refresh(self):
    ie = self.inner_experts
    with torch.no_grad():
        self._hipfp8_cache.refresh(_local(ie.w1_EFD), _local(ie.w3_EFD), _local(ie.w2_EDF),
                                   self._hipfp8_float8_dtype)


_swapped = {}


def swap_routed_experts(model, float8_dtype=None, align=16):
    """Route the routed-expert path of every torchtitan 0.3 MoE layer in `model` through
    `moe_routed_experts`, in place: each `RoutedExperts` module (MoE.routed_experts: the token
    dispatcher + GroupedExperts + combine) keeps its parameters and state dict; the router,
    the shared experts and the load-balancing buffers stay torchtitan's. The FP8 weights are
    cached in `m._hipfp8_cache` (re-quantized when the weights change;
    `m.refresh_weight_cache()` re-quantizes now). Only the local token dispatcher (no expert
    parallelism) is supported, and torchtitan 0.3 applies the scores after the experts (it has
    no `score_before_experts` option); a dispatcher of another kind, or a module asking for
    scores before the experts, is refused with ValueError. Returns the number of modules
    swapped."""
    n = 0
    for m in model.modules():
        cls = getattr(type(m), "_hipfp8_base", type(m))
        if cls.__name__ != "RoutedExperts" or not hasattr(m, "inner_experts") \
                or not hasattr(m, "token_dispatcher"):
            continue
        disp = type(m.token_dispatcher).__name__
        if disp != "LocalTokenDispatcher":
            _fail("swap_routed_experts", f"{disp} is not supported (expert parallelism): only "
                                         "torchtitan's LocalTokenDispatcher")
        for owner in (m, m.token_dispatcher, m.inner_experts):
            if getattr(owner, "score_before_experts", False):
                _fail("swap_routed_experts", "score_before_experts=True is not supported: this "
                                             "path applies the scores in the combine")
        sub = _swapped.get(cls)
        if sub is None:
            sub = _swapped[cls] = type("Float8" + cls.__name__, (cls,), {
                "forward": _swapped_forward, "refresh_weight_cache": _refresh,
                "_hipfp8_base": cls})
        m.__class__ = sub
        m._hipfp8_float8_dtype = float8_dtype
        m._hipfp8_align = align
        if getattr(m, "_hipfp8_cache", None) is None:
            m._hipfp8_cache = fe.ExpertsWeightCache()
        n += 1
    return n

