#!/usr/bin/env python3
"""MoE end to end through the Python package (issue 14 item 7), one process, one run:

  projection  one grouped GEMM fwd+bwd, A (M,K) x B_t (E,K,N) (DeepSeek-V3 EP=8 gate/up shape)
  block       torchtitan 0.3's RoutedExperts: dispatch -> GroupedExperts (SwiGLU) -> combine,
              fixed routing (T tokens, top-k of E experts)
  layer       torchtitan 0.3's MoE layer (router + routed experts, no shared expert)

each as BF16 torch._grouped_mm (the layer also torch.compile'd: that is the baseline that
counts, BENCHMARKS.md), torchao 0.18's FP8 rowwise path (the projection: its autograd
function; block and layer: torchtitan's Float8 recipe, groups padded to 16 by its torchao
dispatcher and `quantize_(Float8TrainingOpConfig)`, the layer compiled as that recipe
requires) and hipfp8 (the projection: hipfp8.torch.grouped_mm; block and layer:
swap_grouped_experts in both modes: `fused=True`, the fused experts recipe (one library call
per pass, `impl: "recipe"`), and its default `fused=False`, three grouped_mm calls and torch's
SwiGLU (`impl: "grouped_mm"`); eager; the layer also compiled; the layer also through
swap_routed_experts, the routing ops around the pre-cast recipe with no bf16 permuted or
padded copy (`impl: "recipe+route"`, eager and compiled)). Rows keep `variant: "hipfp8"` for all three and
say which in `impl` (null for the other variants). Balanced and Zipf routing; fresh grads (.grad None before each step) and
accumulating grads (.grad kept, every backward adds); 1 and 4 micro-batches per step (4 inputs,
grads accumulating over them: hipfp8's grouped_mm path keeps its FP8 weights across them
inside hipfp8.torch.weight_cache(); the recipe's weight cache does so by itself). Every timed step is a
training step whose weights changed since the last one (an optimizer step: the parameters'
versions are bumped between steps, so no variant reuses FP8 weights across steps). Per
measurement: median of N CUDA-event timings after warm-up, torch.cuda.max_memory_allocated of one step. Per variant, one profiled step (balanced,
fresh, 1 micro-batch) split into casts / GEMMs / other kernels / gaps by kernel name. Numerics:
hipfp8's outputs and gradients against torchao's (bit for bit where the recipe is the same; how
far where it is not), and hipfp8's five casts against torchao's eager reference casts.

    python3 bench/moe_e2e.py [--out DIR] [--budget-s 330]     # GPU: DIR/h200-moe.{json,md}
    python3 bench/moe_e2e.py --smoke --out DIR                # CPU backend, tiny shapes

--smoke runs every case and variant that has a CPU path on CPU tensors (hipfp8's CPU backend;
no timing: us and peak_mem_bytes are null), checks the casts against torchao's eager
reference bit for bit, and exits non-zero on any mismatch or failure. The time budget skips
(and lists) whatever it does not reach; nothing is invented.
"""

import argparse
import contextlib
import gc
import json
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
try:
    import hipfp8  # noqa: F401
except ImportError:  # a source checkout: python/ over $HIPFP8_LIB
    sys.path.insert(0, os.path.join(ROOT, "python"))
import hipfp8  # noqa: E402
import hipfp8.torch as hf  # noqa: E402

# DeepSeek-V3 671B, EP=8: one GPU's experts (BENCHMARKS.md). The projection is gate/up: M
# routed tokens (E groups) x (E, K=dim, N=hidden); block and layer: T tokens, top-k of E.
FULL = {"M": 32768, "E": 32, "K": 7168, "N": 2048, "T": 4096, "TOPK": 8}
SMOKE = {"M": 256, "E": 8, "K": 64, "N": 32, "T": 64, "TOPK": 4}
VARIANTS = ("bf16", "torchao", "hipfp8")
# hipfp8's experts paths, as run variants: "hipfp8" is the fused recipe in block and layer
# (the projection, one grouped GEMM, has only grouped_mm), "hipfp8_mm" the grouped_mm path,
# "hipfp8_route" (layer only) the routed-expert path swap_routed_experts: the routing ops
# (dispatch + pad + casts, combine) around the pre-cast recipe, no bf16 permuted copy.
HIPFP8 = ("hipfp8", "hipfp8_mm", "hipfp8_route")


def variant_impl(case, v):
    """(the row's variant, its impl) of run variant `v` in `case`."""
    if v not in HIPFP8:
        return v, None
    if v == "hipfp8_route":
        return "hipfp8", "recipe+route"
    return "hipfp8", ("recipe" if v == "hipfp8" and case != "projection" else "grouped_mm")
COMBOS = (("fresh", 1), ("acc", 1), ("fresh", 4), ("acc", 4))  # (grads, micro-batches)


# ---- splits --------------------------------------------------------------------------------

def zipf_sizes(total, groups, s=1.2, empty=2, mult=16):
    """Zipf(s) group sizes over `total` rows, multiples of `mult`, the last `empty` groups empty,
    the rounding remainder on the largest (BENCHMARKS.md "Real routing is not balanced")."""
    live = groups - empty
    w = [1.0 / r ** s for r in range(1, live + 1)]
    sz = [int(total * x / sum(w)) // mult * mult for x in w]
    sz[0] += total - sum(sz)
    return sz + [0] * empty


def zipf_weights(groups, s=1.2, empty=2):
    live = groups - empty
    return torch.tensor([1.0 / r ** s for r in range(1, live + 1)] + [0.0] * empty)


def ends(sizes, device):
    out, acc = [], 0
    for s in sizes:
        acc += s
        out.append(acc)
    return torch.tensor(out, dtype=torch.int32, device=device)


def routing(split, T, E, K, device):
    """Fixed top-k routing of T tokens (the block case): ids (1,T,K) int64, scores (1,T,K) f32.
    balanced: torchtitan's round-robin (every expert T*K/E tokens); zipf: each token's K
    distinct experts drawn without replacement with Zipf(1.2) weights (two experts empty)."""
    g = torch.Generator().manual_seed(11)
    if split == "balanced":
        ids = (torch.arange(T * K) % E).view(1, T, K)
    else:
        ids = torch.multinomial(zipf_weights(E).expand(T, E), K, replacement=False,
                                generator=g).view(1, T, K)
    scores = torch.rand(1, T, K, generator=g) / K
    return ids.to(device), scores.to(device)


def counts_of(ids, E):
    return torch.bincount(ids.flatten(), minlength=E)


# ---- torchtitan / torchao --------------------------------------------------------------------

def torchtitan_moe():
    from torchtitan.models.common import moe, token_dispatcher
    from torchtitan.models.common.linear import Linear
    return moe, token_dispatcher, Linear


def dispatcher_cfg(td, variant, E, K):
    if variant == "torchao":  # torchtitan's Float8 converter: groups padded to 16 (PAD_MULTIPLE)
        return td.TorchAOTokenDispatcher.Config(num_experts=E, top_k=K, pad_multiple=16)
    return td.LocalTokenDispatcher.Config(num_experts=E, top_k=K)


def randn(shape, seed, device, scale=1.0):
    """Seeded normal values made on `device` (the same values for every variant of a run)."""
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(shape, generator=g, device=device).mul_(scale)


def init_params(module, seed):
    with torch.no_grad():
        for i, (_, p) in enumerate(sorted(module.named_parameters())):
            p.copy_(randn(p.shape, seed + i, p.device, 0.02))


def to_variant(module, experts, variant):
    """Turn the BF16 module into `variant` in place (after its parameters are set)."""
    if variant == "torchao":
        from torchao.prototype.moe_training.config import Float8TrainingOpConfig
        from torchao.quantization.quant_api import quantize_
        moe, _, _ = torchtitan_moe()
        quantize_(experts, config=Float8TrainingOpConfig(),
                  filter_fn=lambda m, _fqn: isinstance(m, moe.GroupedExperts))
    elif variant == "hipfp8_route":
        assert hf.swap_routed_experts(module) == 1
    elif variant in HIPFP8:
        assert hf.swap_grouped_experts(module, fused=(variant == "hipfp8")) == 1
    return module


def build_block(variant, S, device):
    moe, td, _ = torchtitan_moe()
    E, T, K = S["E"], S["T"], S["TOPK"]
    cfg = moe.RoutedExperts.Config(
        inner_experts=moe.GroupedExperts.Config(dim=S["K"], hidden_dim=S["N"], num_experts=E),
        token_dispatcher=dispatcher_cfg(td, variant, E, K))
    with torch.device(device):
        m = cfg.build()
    init_params(m, 5)
    m = m.to(dtype=torch.bfloat16)
    return to_variant(m, m.inner_experts, variant)


def build_layer(variant, S, device, balanced):
    """torchtitan 0.3's MoE layer with DeepSeek-V3's router (sigmoid scores, top-k, normalised,
    auxiliary-loss-free expert bias), SwiGLU experts, no shared expert."""
    moe, td, Linear = torchtitan_moe()
    E, K = S["E"], S["TOPK"]
    cfg = moe.MoE.Config(
        num_experts=E,
        routed_experts=moe.RoutedExperts.Config(
            inner_experts=moe.GroupedExperts.Config(dim=S["K"], hidden_dim=S["N"], num_experts=E),
            token_dispatcher=dispatcher_cfg(td, variant, E, K)),
        router=moe.TokenChoiceTopKRouter.Config(
            num_experts=E, gate=Linear.Config(in_features=S["K"], out_features=E, bias=False),
            top_k=K, score_func="sigmoid", route_norm=True, route_scale=2.5,
            _debug_force_load_balance=balanced),
        load_balance_coeff=1e-3, shared_experts=None)
    with torch.device(device):
        m = cfg.build()
    init_params(m, 5)
    m = m.to(dtype=torch.bfloat16)
    m.expert_bias_E = m.expert_bias_E.float()
    m.tokens_per_expert_E = m.tokens_per_expert_E.float()
    m.train()
    return to_variant(m, m.routed_experts.inner_experts, variant)


def zipf_bias(model, x, E, K):
    """beta for the expert bias (the router's load-balancing buffer) beta * log(zipf weight),
    two experts -inf, bisected so the router's busiest expert holds about the share it holds in
    the block's Zipf routing: a skewed split the real router produces."""
    T = x.shape[0] * x.shape[1]
    target = counts_of(routing("zipf", T, E, K, "cpu")[0], E).max().item()
    logw = zipf_weights(E).log().to(x.device)  # -inf for the empty experts
    lo, hi = 0.0, 1.0
    with torch.no_grad():
        def busiest(beta):
            _, ids, _ = model.router(x, beta * logw)
            return counts_of(ids, E).max().item()
        while busiest(hi) < target and hi < 1e3:
            hi *= 2
        for _ in range(20):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if busiest(mid) < target else (lo, mid)
    return hi


# ---- numerics -----------------------------------------------------------------------------

def bits(t):
    t = getattr(t, "_data", t)  # torchao's weight wrapper
    t = t.detach().contiguous()
    return t.view(torch.uint8) if t.element_size() == 1 else t.view(torch.int16) \
        if t.element_size() == 2 else t.view(torch.int32)


def diff(a, b):
    """How far a is from b: differing elements (bitwise), max |a-b| relative to max |b|."""
    a = getattr(a, "_data", a)
    b = getattr(b, "_data", b).to(a.device)
    if a.shape != b.shape:
        return {"identical": False, "note": f"shapes {tuple(a.shape)} vs {tuple(b.shape)}"}
    nd = int((bits(a) != bits(b)).sum().item())
    af, bf = a.detach().float(), b.detach().float()
    ref = bf.abs().max().item() or 1.0
    return {"identical": nd == 0, "n_diff": nd, "numel": a.numel(),
            "max_rel": float((af - bf).abs().max().item() / ref)}


def cosine(a, b):
    a = getattr(a, "_data", a).detach().double().flatten()
    b = getattr(b, "_data", b).detach().to(a.device).double().flatten()
    return float(a @ b / (a.norm() * b.norm()).clamp(min=1e-300))


def cast_checks(A, B_t, dy, offs, fp8):
    """hipfp8's five casts of the rowwise recipe against torchao 0.18's eager reference casts
    (torchao.float8 tensor_to_scale + to_fp8_saturated, and the moe_training torch_* functions),
    bit for bit, data and scales."""
    from torchao.float8.config import ScalingGranularity
    from torchao.float8.float8_utils import amax_to_scale, tensor_to_scale, to_fp8_saturated
    from torchao.prototype.moe_training import utils as mu

    def axiswise(x, dim):
        s = tensor_to_scale(x, fp8, scaling_granularity=ScalingGranularity.AXISWISE,
                            axiswise_dim=dim, round_scales_to_power_of_2=True)
        return to_fp8_saturated(x.float() * s, fp8), s

    out = {}
    q, s = hf.rowwise_2d(A, fp8)
    rq, rs = axiswise(A, -1)
    out["rowwise_2d(A)"] = (q, s, rq, rs.flatten())
    q, s = hf.rowwise_2d(dy, fp8)
    rq, rs = axiswise(dy, -1)
    out["rowwise_2d(dy)"] = (q, s, rq, rs.flatten())
    q, s = hf.colwise_3d(B_t, fp8)
    rq, rs = axiswise(B_t, -2)
    out["colwise_3d(B_t)"] = (q, s, rq, rs.squeeze(1))
    q, s = hf.rowwise_3d_transpose_rhs(B_t, fp8)
    rq, rs = mu.torch_to_3d_rowwise_float8_transpose_rhs(B_t, fp8, round_scales_to_power_of_2=True)
    out["rowwise_3d_transpose_rhs(B_t)"] = (q, s, rq, rs.squeeze(1))
    def per_group_colwise(x):
        """torchao's torch_to_float8_per_group_colwise group by group; an empty group (which
        that function cannot take: amax of nothing) gets amax_to_scale(0), as hipfp8 defines."""
        rq = torch.empty(x.shape, dtype=fp8, device=x.device)
        rs, start = [], 0
        for end in offs.tolist():
            if end > start:
                q1, s1 = mu.torch_to_float8_per_group_colwise(
                    x[start:end], torch.tensor([end - start], dtype=torch.int32), fp8,
                    round_scales_to_power_of_2=True)
                rq[start:end] = q1
                rs.append(s1)
            else:
                rs.append(amax_to_scale(torch.zeros(x.shape[1], device=x.device), fp8,
                                        round_scales_to_power_of_2=True))
            start = end
        return rq, torch.stack(rs)

    qd, sd, qa, sa = hf.per_group_colwise_dual(dy, A, offs, fp8)
    m_used = int(offs[-1].item())  # rows past offs[-1] are not written (docs/OPS.md)
    for name, x, q, s in (("dy", dy, qd, sd), ("A", A, qa, sa)):
        rq, rs = per_group_colwise(x)
        out[f"per_group_colwise_dual({name})"] = (q[:m_used], s, rq[:m_used], rs)
    res = []
    for name, (q, s, rq, rs) in out.items():
        dq, ds = diff(q, rq), diff(s, rs)
        res.append({"cast": name, "identical": dq["identical"] and ds["identical"],
                    "data_diff": dq.get("n_diff"), "scale_diff": ds.get("n_diff"),
                    "numel": dq.get("numel")})
    return res


# ---- profiling ----------------------------------------------------------------------------

GEMM_NAMES = ("gemm", "cutlass", "sm90", "nvjet", "grouped", "build_2d")
CAST_NAMES = ("hipfp8::", "_triton_fp8", "fp8_", "scale_and_cast")


def category(kernel_name):
    """'gemm' (cuBLAS/CUTLASS GEMMs, hipfp8's grouped-GEMM argument builders), 'casts' (hipfp8's
    quantization kernels, namespace hipfp8::, and torchao's Triton FP8 casts) or 'rest'."""
    n = kernel_name.lower()
    if any(g in n for g in GEMM_NAMES):
        return "gemm"
    if any(c in n for c in CAST_NAMES):
        return "casts"
    return "rest"


def optimizer_step(params):
    """What an optimizer step does to the weight caches: every parameter changed since the last
    training step. Its version counter is bumped (no kernel, outside the timed region), so a
    step never reuses FP8 weights quantized before it: hipfp8's weight caches key on the
    version and quantize again, once per step (once for all its micro-batches)."""
    for p in params:
        torch.autograd.graph.increment_version(p)


def profile_step(step, reset):
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    reset()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        step()
        torch.cuda.synchronize()
    split = {"casts": 0.0, "gemm": 0.0, "rest": 0.0}
    top = {}
    for e in p.events():
        if e.device_type != DeviceType.CUDA:
            continue
        us = e.time_range.elapsed_us()
        split[category(e.name)] += us
        top[e.name] = top.get(e.name, 0.0) + us
    return split, sorted(top.items(), key=lambda kv: -kv[1])[:12]


# ---- the run ------------------------------------------------------------------------------

class Run:
    def __init__(self, a):
        self.a = a
        self.smoke = a.smoke
        self.dev = torch.device("cpu" if a.smoke else "cuda")
        self.S = SMOKE if a.smoke else FULL
        self.t0 = time.time()
        self.rows, self.checks, self.casts, self.splits, self.skipped = [], [], [], [], []
        self.failures = []
        self.fp8 = hf.native_fp8_dtype(self.dev)
        self.cache = getattr(hf, "weight_cache", None)

    def left(self):
        return self.a.budget_s - (time.time() - self.t0)

    def log(self, msg):
        print(f"[moe_e2e +{time.time() - self.t0:5.0f}s] {msg}", flush=True)

    # -- one (case, split, variant): model, checks, every (grads, micro-batches) combo --
    def group(self, case, split, variant, compiled=False):
        tag = f"{case} {split} {variant}{' compiled' if compiled else ''}"
        if self.left() <= (self.a.compile_s if compiled else 0):
            self.skipped.append(f"{tag}: time budget" + (" (a compile needs "
                                f"--compile-s {self.a.compile_s:.0f} s of it)" if compiled else ""))
            return
        if variant == "torchao" and self.smoke:
            self.skipped.append(f"{tag}: torchao's FP8 grouped path needs CUDA (Triton casts, "
                                "torch._scaled_grouped_mm)")
            return
        try:
            g = getattr(self, "setup_" + case)(split, variant, compiled)
            self.run_group(case, split, variant, compiled, g, tag)
        except Exception as e:  # reported, never hidden
            msg = f"{tag}: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            self.log("FAILED " + msg)
            self.skipped.append("failed " + msg)
            self.failures.append(msg)
        finally:
            g = None
            if compiled:
                torch._dynamo.reset()
            gc.collect()
            if not self.smoke:
                torch.cuda.empty_cache()

    def run_group(self, case, split, variant, compiled, g, tag):
        fwd, params, make_inputs, shape = g["fwd"], g["params"], g["inputs"], g["shape"]
        x0, dy0 = make_inputs(1)
        # the check step (also the warm-up and, compiled, the compile)
        t = time.time()
        for p in params:
            p.grad = None
        x = x0[0].detach().requires_grad_()
        out = fwd(x)
        out.backward(dy0[0])
        res = {"out": out.detach().clone(), "grad_x": x.grad.clone()}
        for n, p in g["named"]:
            res["grad " + n] = getattr(p.grad, "_data", p.grad).clone()
        self.log(f"{tag}: first step {time.time() - t:.1f} s")
        g["results"][(case, split, variant, compiled)] = res
        del out, x, x0, dy0
        for grads, mb in COMBOS:
            if self.left() <= 0:
                self.skipped.append(f"{tag} {grads} x{mb}: time budget")
                continue
            xs, dys = make_inputs(mb)
            xs = [t.detach().requires_grad_() for t in xs]

            def reset():
                for t in xs:
                    t.grad = None
                if grads == "fresh":
                    for p in params:
                        p.grad = None
                optimizer_step(params)

            ctx = self.cache if (variant in HIPFP8 and mb > 1 and self.cache) else contextlib.nullcontext

            def step():
                with ctx():
                    for x, dy in zip(xs, dys):
                        fwd(x).backward(dy)
            us, peak, iters = self.measure(step, reset, g["held"]())
            v, impl = variant_impl(case, variant)
            self.rows.append({"case": case, "shape": shape, "split": split, "grads": grads,
                              "microbatches": mb, "variant": v, "impl": impl,
                              "compiled": compiled, "us": us, "peak_mem_bytes": peak,
                              "iters": iters})
            self.log(f"{tag:32} {grads:5} x{mb}: "
                     + (f"{us:10.1f} us  peak {peak / 2**30:6.2f} GiB  (N={iters})" if us else "ran"))
            if grads == "fresh" and mb == 1 and split == "balanced" and not self.smoke \
                    and not self.a.no_profile:
                sp, top = profile_step(step, reset)
                self.splits.append({"case": case, "variant": v, "impl": impl,
                                    "compiled": compiled,
                                    "us": us, **{k: round(v, 1) for k, v in sp.items()},
                                    "top": [[n[:120], round(v, 1)] for n, v in top]})
            del xs, dys

    def measure(self, step, reset, held):
        if self.smoke:
            reset()
            step()
            return None, None, 1
        reset()
        step()  # warm-up
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        reset()
        s.record()
        step()
        e.record()
        e.synchronize()
        est = s.elapsed_time(e) / 1e3
        n = max(self.a.min_iters, min(self.a.max_iters, int(self.a.iter_s / max(est, 1e-6))))
        times = []
        for _ in range(n):
            reset()
            s.record()
            step()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e3)
        reset()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        # bytes this process holds for other variants (their check results) are not this one's
        peak = torch.cuda.max_memory_allocated() - held
        return round(statistics.median(times), 1), int(peak), n

    # -- cases --
    def held_fn(self):
        def held():
            return sum(t.untyped_storage().nbytes() for r in self.results.values()
                       for t in r.values() if t.is_cuda)
        return held

    def setup_projection(self, split, variant, compiled):
        S, dev = self.S, self.dev
        E, K, N = S["E"], S["K"], S["N"]
        sizes = [S["M"] // E] * E if split == "balanced" else zipf_sizes(S["M"], E)
        offs = ends(sizes, dev)
        M = sum(sizes)
        W = torch.nn.Parameter(randn((E, N, K), 3, dev, 0.02).to(torch.bfloat16))
        if variant == "bf16":
            def fwd(A):
                return torch._grouped_mm(A, W.transpose(-2, -1), offs=offs, out_dtype=torch.bfloat16)
        elif variant == "torchao":
            from torchao.prototype.moe_training.fp8_grouped_mm import (
                _to_fp8_rowwise_then_scaled_grouped_mm)

            def fwd(A):
                return _to_fp8_rowwise_then_scaled_grouped_mm(
                    A, W.transpose(-2, -1), offs, torch.bfloat16, self.fp8,
                    pad_token_groups_for_grouped_mm=False)
        else:
            def fwd(A):
                return hf.grouped_mm(A, W.transpose(-2, -1), offs, float8_dtype=self.fp8)

        def inputs(n):
            xs = [self.randn((M, K), 100 + i) for i in range(n)]
            dys = [self.randn((M, N), 200 + i, 0.01) for i in range(n)]
            return xs, dys
        if variant == "hipfp8" and (split, "casts") not in self.cast_done:
            self.cast_done.add((split, "casts"))
            A, dy = inputs(1)
            for r in cast_checks(A[0], W.detach().transpose(-2, -1), dy[0], offs, self.fp8):
                self.casts.append({"split": split, **r})
        return {"fwd": fwd, "params": [W], "named": [("W", W)], "inputs": inputs,
                "shape": f"{M}x{K}x{N},E{E}", "results": self.results, "held": self.held_fn()}

    def randn(self, shape, seed, scale=1.0):
        return randn(shape, seed, self.dev, scale).to(torch.bfloat16)

    def setup_block(self, split, variant, compiled):
        S, dev = self.S, self.dev
        m = build_block(variant, S, dev)
        E, T, K = S["E"], S["T"], S["TOPK"]
        ids, scores = routing(split, T, E, K, dev)
        counts = counts_of(ids, E)
        self.meta.setdefault("block_counts", {})[split] = counts.tolist()

        def fwd(x):
            return m(x, scores, ids, counts)

        def inputs(n):
            return ([self.randn((1, T, S["K"]), 300 + i) for i in range(n)],
                    [self.randn((1, T, S["K"]), 400 + i, 0.01) for i in range(n)])
        named = [(n, p) for n, p in m.named_parameters()]
        return {"fwd": fwd, "params": [p for _, p in named], "named": named, "inputs": inputs,
                "shape": f"T{T},top{K}/E{E},D{S['K']},F{S['N']}", "results": self.results,
                "held": self.held_fn()}

    def setup_layer(self, split, variant, compiled):
        S, dev = self.S, self.dev
        E, T, K = S["E"], S["T"], S["TOPK"]
        m = build_layer(variant, S, dev, balanced=(split == "balanced"))

        def inputs(n):
            return ([self.randn((1, T, S["K"]), 500 + i) for i in range(n)],
                    [self.randn((1, T, S["K"]), 600 + i, 0.01) for i in range(n)])
        if split == "zipf":
            if "layer_bias_beta" not in self.meta:
                self.meta["layer_bias_beta"] = zipf_bias(m, inputs(1)[0][0], E, K)
            with torch.no_grad():
                m.expert_bias_E.copy_(self.meta["layer_bias_beta"] * zipf_weights(E).log())
        with torch.no_grad():
            _, ids, _ = m.router(inputs(1)[0][0], m.expert_bias_E)
            self.meta.setdefault("layer_counts", {})[split] = counts_of(ids, E).tolist()
        fwd = torch.compile(m) if compiled else m
        named = [(n, p) for n, p in m.named_parameters()]
        return {"fwd": fwd, "params": [p for _, p in named], "named": named, "inputs": inputs,
                "shape": f"T{T},top{K}/E{E},D{S['K']},F{S['N']}", "results": self.results,
                "held": self.held_fn()}

    # -- comparisons of the variants of a (case, split) measured so far --
    def compare(self, case, split, more_later):
        """hipfp8 eager against every other variant, hipfp8 compiled against hipfp8 eager (each
        pair once). The results then leave the GPU: to the host when `more_later` (variants of
        this (case, split) still to come), else dropped."""
        r = {k[2:]: v for k, v in self.results.items() if k[:2] == (case, split)}
        others = (("torchao", True), ("torchao", False), ("bf16", True), ("bf16", False))
        pairs = [((h, False), o) for h in HIPFP8 for o in others]
        pairs += [(("hipfp8", False), ("hipfp8_mm", False)),
                  (("hipfp8_route", False), ("hipfp8", False)), (("hipfp8", True), ("hipfp8", False)),
                  (("hipfp8_mm", True), ("hipfp8_mm", False))]

        def label(vc):
            v, impl = variant_impl(case, vc[0])
            return v + (f" {impl}" if impl else "") + (" compiled" if vc[1] else "")
        for mine, other in pairs:
            key = (case, split, mine, other)
            if mine not in r or other not in r or key in self.compared:
                continue
            self.compared.add(key)
            for what, t in r[mine].items():
                if what not in r[other]:
                    continue
                d = diff(t, r[other][what])
                d["cosine"] = cosine(t, r[other][what])
                self.checks.append({"case": case, "split": split, "what": what,
                                    "mine": label(mine), "vs": label(other), **d})
        for k in [k for k in self.results if k[:2] == (case, split)]:
            if more_later:
                self.results[k] = {w: t.cpu() for w, t in self.results[k].items()}
            else:
                del self.results[k]

    def run(self):
        self.results, self.cast_done, self.compared = {}, set(), set()
        self.meta = {"smoke": self.smoke, "device": "cpu" if self.smoke else torch.cuda.get_device_name(),
                     "torch": torch.__version__, "hipfp8": hipfp8.__version__,
                     "library": hipfp8.library_path(), "fp8": str(self.fp8), "shapes": self.S,
                     "zipf_sizes": zipf_sizes(self.S["M"], self.S["E"]),
                     "weight_cache": self.cache is not None,
                     "timing": "CUDA events around each step, median of N after warm-up; "
                               "us = one step (all its micro-batches)"}
        try:
            import torchao
            self.meta["torchao"] = torchao.__version__
        except ImportError as e:
            self.meta["torchao"] = None
            self.skipped.append(f"torchao: not importable ({e})")
        try:
            torchtitan_moe()
            import torchtitan
            self.meta["torchtitan"] = getattr(torchtitan, "__version__", "0.3")
            cases = self.a.cases
        except ImportError as e:
            self.skipped.append(f"block, layer: torchtitan not importable ({e})")
            cases = [c for c in self.a.cases if c == "projection"]
        have_ao = self.meta["torchao"] is not None
        # the order is the priority when the budget runs out
        plan = []
        for split in self.a.splits:
            if "projection" in cases:
                plan.append(("projection", split, [("bf16", False), ("torchao", False),
                                                   ("hipfp8", False)]))
            if "layer" in cases:
                lv = [("bf16", not self.smoke), ("hipfp8", False), ("hipfp8_mm", False),
                      ("hipfp8_route", False), ("torchao", True), ("bf16", False)]
                plan.append(("layer", split, lv[:5] if self.smoke else lv))
            if "block" in cases:
                plan.append(("block", split, [("bf16", False), ("torchao", False),
                                              ("hipfp8", False), ("hipfp8_mm", False)]))
        if not self.smoke and not self.a.no_compile:  # the optional compiled extras, last
            for split in self.a.splits:
                if "layer" in cases:
                    plan.append(("layer", split, [("hipfp8", True), ("hipfp8_route", True),
                                                  ("torchao", False), ("hipfp8_mm", True)]))
        if self.smoke or self.a.no_compile:
            plan = [(c, s, [(v, False) for v, _ in vs]) for c, s, vs in plan]
            plan = [(c, s, list(dict.fromkeys(vs))) for c, s, vs in plan]
        for i, (case, split, vs) in enumerate(plan):
            for variant, compiled in vs:
                if variant == "torchao" and not have_ao:
                    continue
                self.group(case, split, variant, compiled)
            self.compare(case, split, any(p[:2] == (case, split) for p in plan[i + 1:]))
            self.write(final=False)  # a step killed by its timeout still leaves what it measured
        return self.write()

    # -- output --
    def table(self):
        base = {}
        for r in self.rows:
            if r["variant"] == "bf16" and r["us"]:
                k = (r["case"], r["split"], r["grads"], r["microbatches"])
                # the baseline: compiled BF16 where there is one (the layer), else eager
                if k not in base or r["compiled"]:
                    base[k] = r
        lines = ["| case | split | grads | mb | variant | impl | compiled | us | us/mb | "
                 "vs BF16 | peak GiB | mem vs BF16 |",
                 "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in self.rows:
            b = base.get((r["case"], r["split"], r["grads"], r["microbatches"]))
            us = r["us"]
            ratio = f"{b['us'] / us:.2f}x" if (b and us) else "-"
            mem = f"{r['peak_mem_bytes'] / b['peak_mem_bytes']:.2f}" if (b and us) else "-"
            lines.append(
                f"| {r['case']} | {r['split']} | {r['grads']} | {r['microbatches']} | "
                f"{r['variant']} | {r['impl'] or '-'} | {'yes' if r['compiled'] else 'no'} | "
                f"{us if us else '-'} | "
                f"{round(us / r['microbatches'], 1) if us else '-'} | {ratio} | "
                f"{r['peak_mem_bytes'] / 2**30:.2f} | {mem} |" if us else
                f"| {r['case']} | {r['split']} | {r['grads']} | {r['microbatches']} | "
                f"{r['variant']} | {r['impl'] or '-'} | {'yes' if r['compiled'] else 'no'} | "
                "- | - | - | - | - |")
        return lines

    def write(self, final=True):
        lines = self.table()
        if final:
            print("\n".join(lines))
        out = self.a.out
        os.makedirs(out, exist_ok=True)
        name = "moe-smoke" if self.smoke else "h200-moe"
        doc = {"meta": self.meta, "rows": self.rows, "checks": self.checks, "casts": self.casts,
               "time_split": self.splits, "skipped": self.skipped}
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(doc, f, indent=1)
        md = [f"# MoE end to end ({self.meta['device']}, torch {self.meta['torch']}, torchao "
              f"{self.meta.get('torchao')}, torchtitan {self.meta.get('torchtitan')}, hipfp8 "
              f"{self.meta['hipfp8']})", "",
              f"One process, one run. {self.meta['timing']}. Shapes: {self.S}. Projection Zipf "
              f"sizes {self.meta['zipf_sizes']}; block tokens per expert "
              f"{self.meta.get('block_counts')}; layer {self.meta.get('layer_counts')}. The layer's "
              "baseline is compiled BF16; torchao's per-group colwise Triton kernel is wrong on "
              "skewed groups (BENCHMARKS.md), so its Zipf times are those of a wrong answer.", "",
              "## Time and peak memory", ""] + lines
        if self.splits:
            md += ["", "## Where the time goes (one profiled step: balanced, fresh, 1 micro-batch; "
                   "kernel us by name: GEMMs, casts, other kernels; gap = step - kernels)", "",
                   "| case | variant | impl | compiled | step us | GEMM | casts | rest | gap |",
                   "|---|---|---|---|---|---|---|---|---|"]
            for s in self.splits:
                gap = s["us"] - s["gemm"] - s["casts"] - s["rest"]
                md.append(f"| {s['case']} | {s['variant']} | {s['impl'] or '-'} | "
                          f"{'yes' if s['compiled'] else 'no'} | "
                          f"{s['us']} | {s['gemm']} | {s['casts']} | {s['rest']} | {gap:.1f} |")
        if self.checks:
            md += ["", "## hipfp8 against the others: outputs and gradients (one fresh step)", "",
                   "| case | split | tensor | hipfp8 | vs | identical | elements differing | "
                   "max rel | cosine |", "|---|---|---|---|---|---|---|---|---|"]
            for c in self.checks:
                md.append(f"| {c['case']} | {c['split']} | {c['what']} | {c['mine']} | {c['vs']} | "
                          f"{c['identical']} | {c.get('n_diff')} of {c.get('numel')} | "
                          f"{c.get('max_rel', 0):.3g} | {c.get('cosine', float('nan')):.6f} |")
        if self.casts:
            md += ["", "## hipfp8's casts against torchao's eager reference (bit for bit)", "",
                   "| split | cast | identical | data differing | scales differing |",
                   "|---|---|---|---|---|"]
            for c in self.casts:
                md.append(f"| {c['split']} | {c['cast']} | {c['identical']} | {c['data_diff']} | "
                          f"{c['scale_diff']} |")
        if self.skipped:
            md += ["", "Not measured: " + "; ".join(self.skipped)]
        with open(os.path.join(out, name + ".md"), "w") as f:
            f.write("\n".join(md) + "\n")
        if not final:
            return 0
        for s in self.splits:
            print(f"time split {s['case']} {s['variant']} {s['impl'] or ''}"
                  f"{' compiled' if s['compiled'] else ''}: "
                  f"step {s['us']} us, GEMM {s['gemm']}, casts {s['casts']}, rest {s['rest']}")
        bad_casts = [c for c in self.casts if not c["identical"]]
        for c in bad_casts:
            print(f"CAST MISMATCH vs torchao eager: {c}")
        for c in self.checks:
            if c["vs"].startswith("torchao") or c["vs"].startswith("hipfp8"):
                print(f"check {c['case']} {c['split']} {c['what']}: {c['mine']} vs {c['vs']}: "
                      f"{'identical' if c['identical'] else 'differs'} "
                      f"({c.get('n_diff')} of {c.get('numel')}, max rel {c.get('max_rel', 0):.3g})")
        self.log(f"wrote {out}/{name}.json ({len(self.rows)} rows, {len(self.skipped)} skipped)")
        return 1 if (bad_casts or self.failures) else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true",
                    help="tiny shapes on the CPU backend (no timing): CI's run of the bindings")
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="output folder ($OUT)")
    ap.add_argument("--budget-s", type=float, default=330.0,
                    help="stop starting measurements after this many seconds (the rest is listed)")
    ap.add_argument("--iter-s", type=float, default=0.5,
                    help="timed seconds per measurement (N = this / one step, clamped)")
    ap.add_argument("--min-iters", type=int, default=5)
    ap.add_argument("--max-iters", type=int, default=30)
    ap.add_argument("--cases", default="projection,layer,block")
    ap.add_argument("--splits", default="balanced,zipf")
    ap.add_argument("--no-compile", action="store_true", help="eager variants only")
    ap.add_argument("--compile-s", type=float, default=90.0,
                    help="budget a compiled variant needs left to be started (its compile)")
    ap.add_argument("--no-profile", action="store_true")
    a = ap.parse_args(argv)
    a.cases = a.cases.split(",")
    a.splits = a.splits.split(",")
    if not a.smoke and not torch.cuda.is_available():
        print("moe_e2e: no CUDA device (use --smoke for the CPU run)")
        return 2
    torch.manual_seed(0)
    return Run(a).run()


if __name__ == "__main__":
    sys.exit(main())
