"""GPU-only tests: CUDA graph capture (fwd+bwd), no host synchronisation, bit-equality with
torchao's FP8 paths on the same inputs. (Host time per op and per layer step is a benchmark,
python/bench/host_overhead.py, not a test.)
(The op, autograd and compile tests of the other files also run on the GPU: their `device`
fixture includes "cuda" when a GPU is present.) Each test skips with its reason without a GPU.
"""

import copy

import pytest
import torch

import hipfp8.torch as hf
from conftest import HAVE_GPU, requires_gpu
from test_ops import offs_of, rnd

pytestmark = requires_gpu
E4 = torch.float8_e4m3fn


def torchao_or_skip():
    return pytest.importorskip("torchao", reason="torchao is not installed")


def moe_inputs(m=4096, k=1024, n=512, e=8, seed=0):
    sizes = [m // e] * e
    A = rnd(m, k, device="cuda", seed=seed, scale=1.0)
    W = rnd(e, n, k, device="cuda", seed=seed + 1, scale=0.05)
    return A, W, offs_of(sizes, "cuda")


# ---- bit-equality with torchao ---------------------------------------------------------------

def test_grouped_mm_equals_torchao_bitwise():
    torchao_or_skip()
    from torchao.prototype.moe_training.fp8_grouped_mm import _to_fp8_rowwise_then_scaled_grouped_mm
    A, W, offs = moe_inputs()
    dy = rnd(A.shape[0], W.shape[1], device="cuda", seed=5, scale=0.01)
    res = []
    for f in (hf.grouped_mm,
              lambda a, b, o: _to_fp8_rowwise_then_scaled_grouped_mm(
                  a, b, o, pad_token_groups_for_grouped_mm=False)):
        a = A.clone().requires_grad_()
        w = W.clone().requires_grad_()
        out = f(a, w.transpose(-2, -1), offs)
        out.backward(dy)
        res.append((out, a.grad, w.grad))
    bad = {what: int((g.view(torch.int16) != t.view(torch.int16)).sum())
           for what, g, t in zip(("out", "grad_A", "grad_W"), *res)}
    print(f"hipfp8 vs torchao grouped_mm, elements differing: {bad}")
    assert bad == {"out": 0, "grad_A": 0, "grad_W": 0}


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_float8_linear_vs_torchao(recipe):
    torchao_or_skip()
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    torch.manual_seed(0)
    m, k, n = 2048, 1024, 768
    lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
    ao = convert_to_float8_training(torch.nn.Sequential(
        torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)),
        config=Float8LinearConfig.from_recipe_name(recipe))
    ao[0].weight.data.copy_(lin.weight.data)
    ours = hf.Float8Linear.from_float(lin, recipe)
    x = rnd(m, k, device="cuda", seed=3, scale=1.0)
    dy = rnd(m, n, device="cuda", seed=4, scale=0.01)
    res = []
    for mod, w in ((ours, lin.weight), (ao, ao[0].weight)):
        xx = x.clone().requires_grad_()
        y = mod(xx)
        y.backward(dy)
        res.append((y, xx.grad, w.grad))
    bad = {what: int((g.view(torch.int16) != t.view(torch.int16)).sum())
           for what, g, t in zip(("y", "grad_x", "grad_w"), *res)}
    print(f"hipfp8 vs torchao Float8Linear {recipe}, elements differing: {bad}")
    assert bad["y"] == 0, "forward differs from torchao"
    if recipe == "tensorwise":
        assert bad["grad_x"] == 0 and bad["grad_w"] == 0
    else:
        # torchao's rowwise backward: unit-scale GEMM, then the scales (a second rounding);
        # ours: the scales in the GEMM epilogue. Equal up to that rounding.
        for g, t in zip(res[0][1:], res[1][1:]):
            torch.testing.assert_close(g.float(), t.float(), rtol=2 ** -6, atol=1e-3 * t.abs().max().item())


# ---- CUDA graphs, no host sync -----------------------------------------------------------------

def _capture(step, *static):
    """Warm up and capture on ONE side stream. The library's column-cast workspace (allocated
    at first use, then reused) orders a use on a new stream after the last one with an event
    wait; a wait on an event recorded outside the capture would invalidate it, so the capture
    stream must be the stream the warm-up ran on (README: CUDA graphs)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):  # warm up (lazy allocations, contexts) outside the capture
            step(*static)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        out = step(*static)
    torch.cuda.current_stream().wait_stream(s)
    return g, out


@pytest.mark.capture
def test_cuda_graph_grouped_mm_fwd_bwd():
    A, W, offs = moe_inputs(m=2048, k=512, n=256, e=4)
    a = A.clone().requires_grad_()
    w = W.clone().requires_grad_()
    dy = rnd(2048, 256, device="cuda", seed=9, scale=0.01)

    def step(a, w, offs, dy):
        a.grad = None
        w.grad = None
        out = hf.grouped_mm(a, w.transpose(-2, -1), offs)
        out.backward(dy)
        return out, a.grad, w.grad

    # detach: a clone that kept the eager step's autograd graph alive would keep its
    # AccumulateGrad nodes, bound to the default stream, for the captured backward, which then
    # makes the legacy stream wait on the capturing one (cudaErrorStreamCaptureImplicit)
    want = [t.detach().clone() for t in step(a, w, offs, dy)]
    g, got = _capture(step, a, w, offs, dy)
    for t in got:
        t.zero_()
    g.replay()
    torch.cuda.synchronize()
    for x, y, what in zip(got, want, ("out", "grad_A", "grad_W")):
        assert torch.equal(x, y), f"{what}: graph replay differs from eager"
    # new token counts, same shapes: the graph reads offs from the device
    offs.copy_(offs_of([1000, 24, 0, 1024], "cuda"))
    g.replay()
    want2 = step(a, w, offs, dy)
    torch.cuda.synchronize()
    assert torch.equal(got[0], want2[0]) and torch.equal(got[2], want2[2])


@pytest.mark.capture
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise", "delayed"])
def test_cuda_graph_float8_linear_fwd_bwd(recipe):
    torch.manual_seed(0)
    lin = hf.Float8Linear(512, 256, bias=True, recipe=recipe, device="cuda", dtype=torch.bfloat16)
    x = rnd(1024, 512, device="cuda", seed=1).requires_grad_()
    dy = rnd(1024, 256, device="cuda", seed=2, scale=0.01)

    def step(x, dy):
        x.grad = None
        lin.weight.grad = None
        lin.bias.grad = None
        y = lin(x)
        y.backward(dy)
        return y, x.grad, lin.weight.grad

    g, got = _capture(step, x, dy)
    if recipe == "delayed":
        state = [t.clone() for t in (lin.amax_history, lin.scales, lin.grad_amax)]
    g.replay()
    torch.cuda.synchronize()
    replay = [t.clone() for t in got]
    if recipe == "delayed":  # the same step again, eagerly, from the same state
        for t, s in zip((lin.amax_history, lin.scales, lin.grad_amax), state):
            t.copy_(s)
    want = step(x, dy)
    torch.cuda.synchronize()
    for r, w, what in zip(replay, want, ("y", "grad_x", "grad_w")):
        assert torch.equal(r, w), f"{recipe} {what}: graph replay differs from eager"


@pytest.mark.capture
def test_cuda_graph_fused_experts_fwd_bwd():
    """The fused experts recipe, forward + backward, captured on one stream: the replay equals
    eager bit for bit; new token counts between replays (read on the device); after an in-place
    weight update and refresh_weight_cache() (outside the graph) the replay reads the refreshed
    FP8 weights and equals eager again."""
    ex = hf.GroupedExperts(512, 256, 4, device="cuda", dtype=torch.bfloat16, fused=True)
    for p in ex.parameters():
        torch.nn.init.normal_(p, std=0.05)
    x = rnd(2048, 512, device="cuda", seed=1, scale=1.0).requires_grad_()
    counts = torch.tensor([512, 512, 512, 512], device="cuda")
    dy = rnd(2048, 512, device="cuda", seed=2, scale=0.01)

    def step(x, counts, dy):
        x.grad = None
        for p in ex.parameters():
            p.grad = None
        y = ex(x, counts)
        y.backward(dy)
        return [y, x.grad] + [p.grad for p in ex.parameters()]

    names = ("y", "grad_x", "grad_w1", "grad_w2", "grad_w3")
    want = [t.detach().clone() for t in step(x, counts, dy)]
    g, got = _capture(step, x, counts, dy)
    refreshes = ex.weight_cache.refreshes
    for t in got:
        t.zero_()
    g.replay()
    torch.cuda.synchronize()
    _bits_equal(got, want, names, against="eager")
    counts.copy_(torch.tensor([1000, 24, 0, 1024], device="cuda"))
    g.replay()
    replay = [t.clone() for t in got]
    want = [t.detach().clone() for t in step(x, counts, dy)]
    torch.cuda.synchronize()
    _bits_equal(replay, want, tuple(f"{n} (new counts)" for n in names))
    with torch.no_grad():
        ex.w2_EDF.mul_(1.5)
    ex.refresh_weight_cache()
    g.replay()
    replay = [t.clone() for t in got]
    want = [t.detach().clone() for t in step(x, counts, dy)]
    torch.cuda.synchronize()
    _bits_equal(replay, want, tuple(f"{n} (refreshed weights)" for n in names))
    assert ex.weight_cache.refreshes == refreshes + 1  # the eager step found it fresh


def _bits_equal(got, want, what, against="eager"):
    for g, w, name in zip(got, want, what):
        assert torch.equal(g, w), f"{name}: graphed differs from {against}"


@pytest.mark.capture
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_make_graphed_callables_float8_linear(recipe):
    """hf.make_graphed_callables (torch's, after a warm-up on its capture stream) over a
    Float8Linear: forward and backward graphs replay bit-equal to eager, for new inputs too."""
    torch.manual_seed(0)
    lin = hf.Float8Linear(512, 256, bias=True, recipe=recipe, device="cuda", dtype=torch.bfloat16)
    ref = copy.deepcopy(lin)
    x = rnd(1024, 512, device="cuda", seed=1).requires_grad_()
    graphed = hf.make_graphed_callables(lin, (x,))
    for seed in (3, 4):
        xs = [rnd(1024, 512, device="cuda", seed=seed).requires_grad_() for _ in range(2)]
        dy = rnd(1024, 256, device="cuda", seed=seed + 10, scale=0.01)
        res = []
        for mod, xx in ((graphed, xs[0]), (ref, xs[1])):
            for p in mod.parameters():
                p.grad = None
            y = mod(xx)
            y.backward(dy)
            res.append([t.detach().clone() for t in (y, xx.grad, mod.weight.grad, mod.bias.grad)])
            del y
        torch.cuda.synchronize()
        _bits_equal(res[0], res[1], (f"{recipe} y", "grad_x", "grad_w", "grad_b"))


@pytest.mark.capture
@pytest.mark.parametrize("fused", [True, False])
def test_make_graphed_callables_experts(fused):
    """The MoE experts (fused: the recipe's one forward and one backward call; unfused: 3 FP8
    grouped GEMMs forward, 6 backward, 9 casts) through hf.make_graphed_callables: bit-equal to
    eager, with the token counts changed between replays (the graphs read them on the
    device)."""
    ex = hf.GroupedExperts(256, 128, 4, device="cuda", dtype=torch.bfloat16, fused=fused)
    for p in ex.parameters():
        torch.nn.init.normal_(p, std=0.05)
    ref = copy.deepcopy(ex)
    x = rnd(1024, 256, device="cuda", seed=1, scale=1.0).requires_grad_()
    counts = torch.tensor([256, 256, 256, 256], device="cuda")
    graphed = hf.make_graphed_callables(ex, (x, counts))
    for i, cs in enumerate(([300, 0, 500, 224], [1024, 0, 0, 0], [1, 2, 3, 1018])):
        c = torch.tensor(cs, device="cuda")
        xs = [rnd(1024, 256, device="cuda", seed=5 + i, scale=1.0).requires_grad_() for _ in range(2)]
        dy = rnd(1024, 256, device="cuda", seed=20 + i, scale=0.01)
        res = []
        for mod, xx in ((graphed, xs[0]), (ref, xs[1])):
            for p in mod.parameters():
                p.grad = None
            out = mod(xx, c)
            out.backward(dy)
            res.append([t.detach().clone() for t in [out, xx.grad] + [p.grad for p in mod.parameters()]])
            del out
        torch.cuda.synchronize()
        _bits_equal(res[0], res[1], (f"out {cs}", "grad_x", "grad_w1", "grad_w2", "grad_w3"))


@pytest.mark.capture
def test_compile_reduce_overhead_experts():
    """torch.compile(mode="reduce-overhead") (inductor's CUDA-graph trees: warm-up and
    recording on one stream of their own) over the MoE experts, fwd+bwd, three steps with
    changing token counts (the graphs read them on the device): each replay equals, bit for
    bit, the same compiled module without CUDA graphs (mode="default": the same inductor
    kernels, launched eagerly). Against the eager module the compiled one is FP8-close, not
    bitwise (inductor fuses silu(g) * u without eager's bf16 rounding, see test_compile.py):
    a cosine check only."""
    torch._dynamo.reset()
    ex = hf.GroupedExperts(256, 128, 4, device="cuda", dtype=torch.bfloat16, fused=False)
    for p in ex.parameters():
        torch.nn.init.normal_(p, std=0.05)
    graphed = torch.compile(ex, mode="reduce-overhead", fullgraph=True, dynamic=False)
    plain = torch.compile(ex, mode="default", fullgraph=True, dynamic=False)
    try:
        for i, cs in enumerate(([300, 0, 500, 224], [256, 256, 256, 256], [1, 2, 3, 1018])):
            cnt = torch.tensor(cs, device="cuda")
            x = rnd(1024, 256, device="cuda", seed=30 + i, scale=1.0)
            res = []
            for mod in (graphed, plain, ex):
                xx = x.clone().requires_grad_()
                for p in ex.parameters():
                    p.grad = None
                out = mod(xx, cnt)
                out.float().square().sum().backward()
                res.append([out.detach().float().clone(), xx.grad.float().clone(),
                            ex.w2_EDF.grad.float().clone()])
                del out
            torch.cuda.synchronize()
            names = ("out", "grad_x", "grad_w2")
            _bits_equal(res[0], res[1], tuple(f"{n} step {i} {cs}" for n in names),
                        against="the same compile without CUDA graphs")
            for g, w, what in zip(res[1], res[2], names):
                cos = torch.nn.functional.cosine_similarity(g.flatten(), w.flatten(), dim=0)
                assert cos > 0.999, f"{what} step {i} {cs}: cosine {cos} compiled vs eager"
    finally:
        torch._dynamo.reset()


def test_no_host_sync():
    """torch's sync debug mode raises on any synchronising call in a training step (the
    fused experts' first step includes the weight cache's creation and refresh)."""
    A, W, offs = moe_inputs(m=1024, k=256, n=128, e=4)
    experts = hf.GroupedExperts(256, 128, 4, device="cuda", dtype=torch.bfloat16, fused=True)
    unfused = hf.GroupedExperts(256, 128, 4, device="cuda", dtype=torch.bfloat16, fused=False)
    for p in list(experts.parameters()) + list(unfused.parameters()):
        torch.nn.init.normal_(p, std=0.05)
    lin = {r: hf.Float8Linear(256, 128, recipe=r, device="cuda", dtype=torch.bfloat16)
           for r in ("tensorwise", "rowwise", "delayed")}
    counts = torch.full((4,), 256, device="cuda")
    x = A[:, :256].contiguous().requires_grad_()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(2):
            experts(x, counts).float().sum().backward()
            unfused(x, counts).float().sum().backward()
            for m in lin.values():
                m(x).float().sum().backward()
            q = hf.per_group_colwise_dual(A, A, offs)
            q = hf.tensorwise(A)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()



# ---- the routed-expert layer path (hipfp8.torch.routed) ------------------------------------

def _routed_setup(t=1024, d=512, i=256, e=8, k=2):
    from test_routed import routing
    scores, ids = routing(t, k, e, "cuda", seed=3)
    x = rnd(t, d, device="cuda", seed=4, scale=1.0).requires_grad_()
    s = scores.clone().requires_grad_()
    ws = [rnd(e, i, d, device="cuda", seed=5, scale=0.05),
          rnd(e, d, i, device="cuda", seed=6, scale=0.05),
          rnd(e, i, d, device="cuda", seed=7, scale=0.05)]
    ws = [w.requires_grad_() for w in ws]
    dout = rnd(t, d, device="cuda", seed=8, scale=0.01)
    return x, s, ids, ws, dout, hf.ExpertsWeightCache()


@pytest.mark.capture
def test_cuda_graph_routed_experts_fwd_bwd():
    """moe_routed_experts forward + backward (route_slots, dispatch, pre-cast recipe, combine,
    their backwards) captured on one stream: the replay equals eager bit for bit, also after
    new router choices and scores are copied into the captured inputs (the graph computes the
    permutation and offsets on the device)."""
    x, s, ids, ws, dout, cache = _routed_setup()

    def step(x, s, ids, dout):
        for v in [x, s] + ws:
            v.grad = None
        out = hf.moe_routed_experts(x, s, ids, *ws, cache)
        out.backward(dout)
        return [out, x.grad, s.grad] + [w.grad for w in ws]

    names = ("out", "grad_x", "grad_scores", "grad_w1", "grad_w2", "grad_w3")
    want = [v.detach().clone() for v in step(x, s, ids, dout)]
    g, got = _capture(step, x, s, ids, dout)
    for v in got:
        v.zero_()
    g.replay()
    torch.cuda.synchronize()
    _bits_equal(got, want, names)
    from test_routed import routing
    s2, ids2 = routing(ids.shape[0], ids.shape[1], 8, "cuda", seed=9, empty=5)
    with torch.no_grad():
        s.copy_(s2)
        ids.copy_(ids2)
    g.replay()
    replay = [v.clone() for v in got]
    want = [v.detach().clone() for v in step(x, s, ids, dout)]
    torch.cuda.synchronize()
    _bits_equal(replay, want, tuple(f"{n} (new routing)" for n in names))


def test_routed_experts_no_host_sync():
    """A routed layer step (forward and backward) queues work only: no host synchronisation
    (torch's sync debug mode raises on one)."""
    x, s, ids, ws, dout, cache = _routed_setup()
    hf.moe_routed_experts(x, s, ids, *ws, cache).backward(dout)  # warm-up: cache, workspaces
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(2):
            hf.moe_routed_experts(x, s, ids, *ws, cache).backward(dout)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()


def test_routed_experts_cuda_equals_composition():
    """On the GPU, the layer path equals the composition of torch gathers and the bf16 experts
    ops on the GPU bit for bit (test_routed.py's definitions, larger shapes than its
    device-parametrised test), the weight gradients within bf16 rounding (_assert_wgrad_equal:
    two GEMM implementations)."""
    from test_routed import _assert_wgrad_equal, composed, run_layer
    x, s, ids, ws, dout, _ = _routed_setup(t=512, d=256, i=128, e=8, k=4)
    got = run_layer(x, s, ids, *ws, dout, float8_dtype=torch.float8_e4m3fn)
    want = composed(x.detach(), s.detach(), ids, *[w.detach() for w in ws], dout)
    for name, g, w in zip(("out", "dx", "d_scores", "dw1", "dw2", "dw3"), got, want):
        if name.startswith("dw"):
            _assert_wgrad_equal("cuda", name, g, w)
        else:
            assert torch.equal(g.to(w.dtype), w), name
