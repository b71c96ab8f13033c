"""hipfp8 for PyTorch: custom ops (torch.ops.hipfp8.*) with fake kernels, the FP8 grouped GEMM
with autograd and a torchtitan GroupedExperts drop-in, and a dense Float8Linear.

    import hipfp8.torch as hf
    q, s = hf.rowwise_2d(x)                                  # any hipfp8 cast
    out = hf.grouped_mm(A, B_t, offs)                        # torch._grouped_mm in FP8
    hf.swap_grouped_experts(model)                           # torchtitan MoE experts, in place
    y = hf.experts(x, offs, w1, w3, w2, cache)               # the fused experts recipe
    out = hf.moe_routed_experts(x, scores, ids, w1, w2, w3, cache)  # dispatch+experts+combine
    hf.swap_routed_experts(model)                            # torchtitan MoE routed path
    with hf.weight_cache(): ...                              # FP8 weights kept over micro-batches
    hf.convert_to_float8_training(model, recipe="rowwise")   # nn.Linear -> Float8Linear
    step = hf.make_graphed_callables(model, (x,))           # CUDA graphs (fwd and bwd)

No libtorch dependency: the ops call libhipfp8's C ABI through ctypes, so one wheel works with
every torch >= 2.6.
"""

from .fused_experts import ExpertsWeightCache, experts
from .graphs import capture_stream, make_graphed_callables, warm_up
from .grouped import GroupedExperts, grouped_mm, swap_grouped_experts, weight_cache
from .routed import moe_routed_experts, route_slots, swap_routed_experts
from .linear import RECIPES, Float8Linear, convert_to_float8_training
from .ops import *  # noqa: F401,F403
from .ops import __all__ as _ops_all

__all__ = ["experts", "ExpertsWeightCache", "grouped_mm", "GroupedExperts", "swap_grouped_experts", "weight_cache", "Float8Linear",
           "convert_to_float8_training", "RECIPES", "make_graphed_callables", "warm_up",
           "capture_stream", "moe_routed_experts", "route_slots",
           "swap_routed_experts"] + list(_ops_all)
