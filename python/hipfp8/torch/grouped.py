"""FP8 grouped GEMM with autograd (the MoE experts) and a torchtitan GroupedExperts drop-in
(by default the fused experts recipe of hipfp8.torch.fused_experts; the grouped_mm path with
`fused=False`).

`grouped_mm(A, B_t, offs)` follows torch._grouped_mm's contract (A (M,K) row-major, B_t (E,K,N)
column-major per expert, int32 END offsets along M) with torchao 0.18's rowwise FP8 recipe
(`_to_fp8_rowwise_then_scaled_grouped_mm`: e4m3, power-of-two scales, bf16 out):
  forward  out    = gemm_2d3d(rowwise_2d(A), colwise_3d(B_t))
  dgrad    grad_A = gemm_2d3d(rowwise_2d(dY), rowwise_3d_transpose_rhs(B_t))
  wgrad    grad_B = gemm_2d2d(per_group_colwise_dual_padded(dY, A))^T
(the wgrad operands in the padded layout: every group at a 16-token boundary, zero rows between,
so the 2D x 2D GEMM runs every group on the library whatever the routing; bit for bit the wgrad
of zero-padded inputs. Mixed dy / A dtypes take two unpadded per_group_colwise casts.)
all hipfp8 ops (casts and grouped GEMMs) on torch's current stream, no host synchronisation,
so it runs under torch.compile(fullgraph=True) and inside CUDA graph capture.

Inside `with weight_cache():` (gradient accumulation: the weights do not change between the
micro-batches of one optimizer step) each weight's two FP8 layouts come from one
moe_weights_dual call on its first use and serve every later forward and dgrad that reads the
same weight at the same version; the same bits as without the cache.
"""

import contextlib

import torch
from torch import nn

from . import ops
from .fused_experts import ExpertsWeightCache, experts

__all__ = ["grouped_mm", "GroupedExperts", "swap_grouped_experts", "weight_cache"]

_weights = None  # the open weight_cache's dict, else None


@contextlib.contextmanager
def weight_cache():
    """Reuse the FP8 casts of every expert weight grouped_mm reads inside the block (eager
    mode; ignored while torch.compile traces). An entry is keyed by the weight's storage,
    shape, strides, dtype and version counter, so a weight updated in place inside the block
    is cast again; the cached tensors (2 bytes per weight element, plus scales) are freed on
    exit. Nested blocks share the outermost one's cache."""
    global _weights
    outer = _weights
    if outer is None:
        _weights = {}
    try:
        yield
    finally:
        if outer is None:
            _weights = None


def _cached_weight(B_t, fp8):
    """(b8, 1/sb, bt8, 1/sbt) of B_t from the open cache (made on first use), or None when B_t
    is not a leaf tensor or a view of one (a per-call temporary, e.g. the bf16 copy of an f32
    parameter: a new tensor every forward, nothing to reuse). The entry holds the leaf, so its
    storage (part of the key) cannot be freed and reused by another tensor inside the block."""
    leaf = B_t if B_t._base is None else B_t._base
    if not leaf.is_leaf:
        return None
    key = (B_t.data_ptr(), B_t.device, tuple(B_t.shape), B_t.stride(), B_t.dtype, B_t._version, fp8)
    hit = _weights.get(key)
    if hit is None:
        b8, sb, bt8, sbt = ops._moe_weights_dual(B_t, fp8, True)
        isb, isbt = ops._inverses(sb, sbt)
        hit = _weights[key] = (b8, isb, bt8, isbt, leaf)
    return hit[:4]


class _GroupedMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A, B_t, offs, out_dtype, fp8):
        a8, sa = ops._rowwise_2d(A, fp8, True)
        ctx.cached = None
        if _weights is not None and not torch.compiler.is_compiling():
            ctx.cached = _cached_weight(B_t, fp8)
        if ctx.cached is not None:
            b8, isb, bt8, isbt = ctx.cached
            (isa,) = ops._inverses(sa)
            ctx.cached = (bt8, isbt)
        else:
            b8, sb = ops._colwise_3d(B_t, fp8, True)
            isa, isb = ops._inverses(sa, sb)
        out = ops._grouped_gemm_2d3d(a8, b8, offs, isa, isb)
        ctx.save_for_backward(A, B_t, offs)
        ctx.fp8 = fp8
        return out if out_dtype == torch.bfloat16 else out.to(out_dtype)

    @staticmethod
    def backward(ctx, grad_out):
        A, B_t, offs = ctx.saved_tensors
        fp8 = ctx.fp8
        dy = grad_out.contiguous()
        if dy.dtype not in (torch.bfloat16, torch.float32):
            dy = dy.to(torch.bfloat16)
        grad_A = grad_B = None
        need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        scales = []  # the casts first, then every dequant scale in one launch
        cached = ctx.cached
        if need_a:
            g8, sg = ops._rowwise_2d(dy, fp8, True)
            if cached is None:
                bt8, sbt = ops._rowwise_3d_transpose_rhs(B_t, fp8, True)
                scales += (sg, sbt)
            else:
                bt8, isbt = cached
                scales.append(sg)
        if need_b:
            if dy.dtype == A.dtype:
                # the GEMM's token extent is then m_cap, its groups the padded ones
                dy8, sdy, a8, sa, offs_b = ops._per_group_colwise_dual_padded(
                    dy, A, offs, fp8, True)
            else:
                dy8, sdy = ops._per_group_colwise(dy, offs, fp8, True)
                a8, sa = ops._per_group_colwise(A, offs, fp8, True)
                offs_b = offs
            scales += (sdy, sa)
        inv = ops._inverses(*scales) if scales else []
        i = 0
        if need_a:
            isbt = inv[1] if cached is None else isbt
            grad_A = ops._grouped_gemm_2d3d(g8, bt8, offs, inv[0], isbt).to(A.dtype)
            i = 2 if cached is None else 1
        if need_b:
            gb = ops._grouped_gemm_2d2d(dy8.t(), a8, offs_b, inv[i], inv[i + 1])
            grad_B = gb.transpose(-2, -1).to(B_t.dtype)
        return grad_A, grad_B, None, None, None


def _fail(msg, exc=ValueError):
    raise exc(f"hipfp8.torch.grouped_mm: {msg}")


def grouped_mm(A, B_t, offs, out_dtype=torch.bfloat16, float8_dtype=None):
    """Differentiable FP8 rowwise grouped GEMM: out (M,N) = A_g @ B_t[g] per token group g.

    A: (M, K) bf16/f32, B_t: (E, K, N) bf16/f32 (column-major per expert is read without a
    copy; other layouts are made so), offs: (E,) int32 END offsets along M (torch._grouped_mm's
    `offs`). `float8_dtype` defaults to the device's native E4M3 (float8_e4m3fn on NVIDIA and
    MI355X, float8_e4m3fnuz on MI300). Rows of the output past offs[-1] are not written.
    Unlike torchao, group sizes need not be multiples of 16 and K, N need not be either.
    """
    if A.dim() != 2:
        _fail(f"A must be 2-D (M, K), got shape {tuple(A.shape)}")
    if B_t.dim() != 3:
        _fail(f"B_t must be 3-D (E, K, N), got shape {tuple(B_t.shape)}")
    if offs is None or offs.dtype != torch.int32:
        _fail("offs must be an int32 tensor of END offsets", TypeError)
    if A.shape[1] != B_t.shape[1]:
        _fail(f"A is {tuple(A.shape)} and B_t is {tuple(B_t.shape)}: the K dims differ")
    if offs.shape[0] != B_t.shape[0]:
        _fail(f"offs has {offs.shape[0]} groups but B_t has {B_t.shape[0]} experts")
    if not A.is_contiguous():
        A = A.contiguous()
    if not B_t.transpose(-2, -1).is_contiguous():
        B_t = B_t.transpose(-2, -1).contiguous().transpose(-2, -1)
    fp8 = float8_dtype if float8_dtype is not None else ops.native_fp8_dtype(A.device)
    return _GroupedMM.apply(A, B_t, offs, out_dtype, fp8)


def _experts_forward(mod, x_RD, num_tokens_per_expert_E, fused, cache, fp8):
    """torchtitan 0.3's GroupedExperts.forward of `mod`'s parameters: the fused recipe
    (`experts`) when `fused`, else its three grouped GEMMs through `mod._grouped_mm` and
    torch's bf16 SwiGLU."""
    offs = torch.cumsum(num_tokens_per_expert_E, dim=0, dtype=torch.int32)
    w1, w2, w3 = mod.w1_EFD, mod.w2_EDF, mod.w3_EFD
    if hasattr(w1, "to_local"):  # DTensor parameters (EP / TP), as torchtitan does
        w1, w2, w3 = w1.to_local(), w2.to_local(), w3.to_local()
    x = x_RD.bfloat16()
    if fused:
        # the weights as they are (bf16 or f32: cast to FP8 from that dtype), so the cache
        # sees the parameters' own storage and version counters
        if not (w1.dtype == w2.dtype == w3.dtype and w1.dtype in ops.HP_DTYPE):
            w1, w2, w3 = w1.bfloat16(), w2.bfloat16(), w3.bfloat16()
        return experts(x, offs, w1, w3, w2, cache, float8_dtype=fp8).type_as(x_RD)
    h = nn.functional.silu(mod._grouped_mm(A=x, B_t=w1.bfloat16().transpose(-2, -1), offs=offs))
    h = h * mod._grouped_mm(A=x, B_t=w3.bfloat16().transpose(-2, -1), offs=offs)
    return mod._grouped_mm(A=h, B_t=w2.bfloat16().transpose(-2, -1), offs=offs).type_as(x_RD)


class GroupedExperts(nn.Module):
    """torchtitan 0.3's `GroupedExperts` (SwiGLU experts; parameters w1_EFD (E,F,D), w2_EDF
    (E,D,F), w3_EFD (E,F,D); forward(x_RD, num_tokens_per_expert_E)) in FP8. Same parameter
    names, shapes and state dict, so a checkpoint loads either way; `from_torchtitan(m)` shares
    the parameters of an existing one.

    `fused=False` (the default): three `grouped_mm` calls and torch's bf16 SwiGLU.
    `fused=True`: the experts recipe, one library call per pass with the FP8 weights in
    `self.weight_cache` (hipfp8.torch.fused_experts: re-quantized when the weights change; call
    `refresh_weight_cache()` after an optimizer step when replaying CUDA graphs; its wgrad
    GEMMs run on 16-token aligned groups whatever the token dispatcher pads). Not the default:
    in a training step with one micro-batch (the weights quantized again after each optimizer
    step) the compiled default is faster; the recipe wins with several micro-batches, where
    the weights are quantized once per step (README, "From PyTorch"; bench/NOTES.md).
    """

    def __init__(self, dim, hidden_dim, num_experts, float8_dtype=None, device=None,
                 dtype=None, fused=False):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.num_experts = num_experts
        self.float8_dtype = float8_dtype
        self.fused = fused
        self.weight_cache = ExpertsWeightCache()
        self.w1_EFD = nn.Parameter(torch.empty(num_experts, hidden_dim, dim, **kw))
        self.w2_EDF = nn.Parameter(torch.empty(num_experts, dim, hidden_dim, **kw))
        self.w3_EFD = nn.Parameter(torch.empty(num_experts, hidden_dim, dim, **kw))

    @classmethod
    def from_torchtitan(cls, m, float8_dtype=None, fused=False):
        """A GroupedExperts sharing the parameters (the same Parameter objects) of `m`."""
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.num_experts = m.num_experts
        new.float8_dtype = float8_dtype
        new.fused = fused
        new.weight_cache = ExpertsWeightCache()
        new.w1_EFD, new.w2_EDF, new.w3_EFD = m.w1_EFD, m.w2_EDF, m.w3_EFD
        return new

    def refresh_weight_cache(self):
        """Re-quantize the weights into the cache now (fused mode)."""
        _refresh(self, self.weight_cache, self.float8_dtype)

    def _grouped_mm(self, *, A, B_t, offs):
        return grouped_mm(A, B_t, offs, float8_dtype=self.float8_dtype)

    def forward(self, x_RD, num_tokens_per_expert_E):
        return _experts_forward(self, x_RD, num_tokens_per_expert_E, self.fused,
                                self.weight_cache, self.float8_dtype)


def _refresh(mod, cache, fp8):
    w1, w2, w3 = mod.w1_EFD, mod.w2_EDF, mod.w3_EFD
    if hasattr(w1, "to_local"):
        w1, w2, w3 = w1.to_local(), w2.to_local(), w3.to_local()
    with torch.no_grad():
        cache.refresh(w1, w3, w2, fp8)


def _fp8_grouped_mm_seam(self, *, A, B_t, offs):
    return grouped_mm(A, B_t, offs, float8_dtype=getattr(self, "_hipfp8_float8_dtype", None))


def _swapped_forward(self, x_RD, num_tokens_per_expert_E):
    return _experts_forward(self, x_RD, num_tokens_per_expert_E, self._hipfp8_fused,
                            self._hipfp8_cache, self._hipfp8_float8_dtype)


def _swapped_refresh(self):
    _refresh(self, self._hipfp8_cache, self._hipfp8_float8_dtype)


def swap_grouped_experts(model, float8_dtype=None, fused=False):
    """Route every torchtitan GroupedExperts in `model` through hipfp8 FP8, in place: each
    module keeps its parameters and state dict. `fused=True`: its forward becomes
    the fused experts recipe (hipfp8.torch.fused_experts, one library call per pass, FP8 weights
    cached in `m._hipfp8_cache`; `m.refresh_weight_cache()` re-quantizes them now).
    `fused=False` (the default): only its `_grouped_mm` seam (torchtitan 0.3's hook for low-precision
    variants) is replaced by `grouped_mm`, torchtitan's forward runs as is. Both modes replace
    the seam, so the module's `_grouped_mm` is FP8 either way. Returns the number of modules
    swapped."""
    n = 0
    for m in model.modules():
        cls = getattr(type(m), "_hipfp8_base", type(m))  # a module swapped before: its class
        if (cls.__name__ == "GroupedExperts" and hasattr(m, "w1_EFD")
                and hasattr(m, "_grouped_mm") and not isinstance(m, GroupedExperts)):
            sub = _swapped.get((cls, fused))
            if sub is None:
                body = {"_grouped_mm": _fp8_grouped_mm_seam, "_hipfp8_base": cls,
                        "refresh_weight_cache": _swapped_refresh}
                if fused:
                    body["forward"] = _swapped_forward
                sub = _swapped[(cls, fused)] = type("Float8" + cls.__name__, (cls,), body)
            m.__class__ = sub
            m._hipfp8_float8_dtype = float8_dtype
            m._hipfp8_fused = fused
            if getattr(m, "_hipfp8_cache", None) is None:
                m._hipfp8_cache = ExpertsWeightCache()
            n += 1
    return n


_swapped = {}
