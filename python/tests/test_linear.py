"""Float8Linear: each pass of the tensorwise and rowwise recipes is one custom op
(hipfp8::linear_<recipe>_fwd / _bwd); under torch.compile(fullgraph=True) the graphs hold exactly
those two calls, with no graph break; the rowwise GEMMs carry their per-row / per-column scales
in the GEMM (one bf16 rounding of the f32 accumulation), checked element by element against
float64 products of independently quantized operands."""

import pytest
import torch
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

import hipfp8.torch as hf
import refs
from test_compile import fresh_dynamo  # noqa: F401 (autouse: a fresh dynamo per test)
from test_ops import rnd

E4 = torch.float8_e4m3fn
E5 = torch.float8_e5m2
RECIPES = ["tensorwise", "rowwise"]


def recording_backend():
    """An AOTAutograd backend that keeps the forward and backward graphs it is given and runs
    them as they are (no inductor: the graphs are what dynamo + AOTAutograd produce)."""
    graphs = {"fw": [], "bw": []}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind].append(gm)
            return make_boxed_func(gm.forward)
        return compiler

    return aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw")), graphs


def calls(gm):
    """The operator overloads a graph calls, by name (e.g. 'hipfp8::linear_rowwise_fwd')."""
    return [n.target.name() for n in gm.graph.nodes
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]


def fwd_bwd(fn, x, w_param, dy):
    xx = x.clone().requires_grad_()
    y = fn(xx)
    y.backward(dy)
    out = (y.detach(), xx.grad, w_param.grad.clone())
    w_param.grad = None
    return out


@pytest.mark.parametrize("recipe", RECIPES)
def test_compiled_graphs_one_op_per_pass(device, recipe):
    lin = torch.nn.Linear(64, 32, bias=True, device=device, dtype=torch.bfloat16)
    f8 = hf.Float8Linear.from_float(lin, recipe)
    x = rnd(2, 24, 64, device=device)
    dy = rnd(2, 24, 32, device=device, seed=5)
    expl = torch._dynamo.explain(f8)(x.clone().requires_grad_())
    assert expl.graph_break_count == 0 and expl.graph_count == 1, expl.break_reasons
    torch._dynamo.reset()
    backend, graphs = recording_backend()
    c = torch.compile(f8, backend=backend, fullgraph=True)
    got = fwd_bwd(c, x, lin.weight, dy)
    want = fwd_bwd(f8, x, lin.weight, dy)
    (fw,), (bw,) = graphs["fw"], graphs["bw"]
    hip_fw = [t for t in calls(fw) if t.startswith("hipfp8::")]
    hip_bw = [t for t in calls(bw) if t.startswith("hipfp8::")]
    assert hip_fw == [f"hipfp8::linear_{recipe}_fwd"], calls(fw)
    assert hip_bw == [f"hipfp8::linear_{recipe}_bwd"], calls(bw)
    # the GEMMs, casts and scale inverses are all inside the two ops
    for t in calls(fw) + calls(bw):
        assert "scaled_mm" not in t and "reciprocal" not in t, (calls(fw), calls(bw))
    for g, w, what in zip(got, want, ("y", "grad_x", "grad_w")):
        assert torch.equal(g, w), f"{what} differs compiled vs eager"


@pytest.mark.parametrize("recipe", RECIPES)
def test_compiled_traced_passes(device, recipe, monkeypatch):
    """linear.TRACE_PASSES: the passes traced into the graphs instead (casts and GEMMs as
    nodes, no pass op), still one graph with no break, compiled == eager."""
    monkeypatch.setattr(hf.linear, "TRACE_PASSES", True)
    lin = torch.nn.Linear(64, 32, bias=False, device=device, dtype=torch.bfloat16)
    f8 = hf.Float8Linear.from_float(lin, recipe)
    x, dy = rnd(48, 64, device=device), rnd(48, 32, device=device, seed=5)
    backend, graphs = recording_backend()
    got = fwd_bwd(torch.compile(f8, backend=backend, fullgraph=True), x, lin.weight, dy)
    want = fwd_bwd(f8, x, lin.weight, dy)
    (fw,), (bw,) = graphs["fw"], graphs["bw"]
    assert calls(fw).count("hipfp8::cast_transpose") == 2 and calls(bw).count("hipfp8::cast_transpose") == 1
    assert calls(fw).count("aten::_scaled_mm") == 1 and calls(bw).count("aten::_scaled_mm") == 2
    assert not [t for t in calls(fw) + calls(bw) if t.startswith("hipfp8::linear_")]
    for g, w, what in zip(got, want, ("y", "grad_x", "grad_w")):
        assert torch.equal(g, w), f"{what} differs compiled vs eager"


@pytest.mark.parametrize("recipe", RECIPES)
def test_compiled_input_grad_only(device, recipe):
    """A frozen weight: the backward op computes dgrad only (40 tokens: no wgrad, whose FP8
    GEMM would need a multiple of 16), compiled == eager, no weight grad."""
    lin = torch.nn.Linear(64, 48, bias=False, device=device, dtype=torch.bfloat16)
    lin.weight.requires_grad_(False)
    f8 = hf.Float8Linear.from_float(lin, recipe)
    c = torch.compile(f8, fullgraph=True)
    x = rnd(40, 64, device=device)
    dy = rnd(40, 48, device=device, seed=3)
    grads = []
    for fn in (c, f8):
        xx = x.clone().requires_grad_()
        fn(xx).backward(dy)
        grads.append(xx.grad)
    assert torch.equal(*grads)
    assert lin.weight.grad is None


def _op_cases(device):
    # (token counts a multiple of 16: wgrad's reduced dim, which cuBLASLt's FP8 GEMM needs)
    x, w, gy = rnd(48, 64, device=device), rnd(48, 64, device=device, seed=1), rnd(48, 48, device=device, seed=2)
    bf = torch.bfloat16
    _, xt8, isx, wt8, isw = hf.linear.linear_tensorwise_fwd(x, w, E4)
    _, rxt8, sxt, rwt8, swt = hf.linear.linear_rowwise_fwd(x, w, E4)
    tw, rw = torch.ops.hipfp8.linear_tensorwise_fwd.default, torch.ops.hipfp8.linear_rowwise_fwd.default
    twb, rwb = torch.ops.hipfp8.linear_tensorwise_bwd.default, torch.ops.hipfp8.linear_rowwise_bwd.default
    return [(tw, (x, w, E4)), (rw, (x, w, E4)),
            (twb, (gy, xt8, isx, wt8, isw, E5, bf, bf, True, True)),
            (twb, (gy, xt8, isx, wt8, isw, E5, bf, bf, False, True)),
            (rwb, (gy, rxt8, sxt, rwt8, swt, E4, bf, bf, True, True)),
            (rwb, (gy, rxt8, sxt, rwt8, swt, E4, bf, bf, True, False))]


def test_pass_ops_opcheck(device):
    """The fake kernels of the pass ops give the real outputs' shapes, strides and dtypes
    (AOT dispatch with dynamic shapes too)."""
    for op, args in _op_cases(device):
        torch.library.opcheck(op, args, test_utils=("test_faketensor", "test_aot_dispatch_dynamic"))


def test_pass_ops_errors(device):
    x = rnd(40, 64, device=device)
    with pytest.raises(ValueError, match="contiguous"):
        hf.linear.linear_rowwise_fwd(x.t(), rnd(48, 40, device=device), E4)
    with pytest.raises(TypeError, match="float8"):
        hf.linear.linear_tensorwise_fwd(x, rnd(48, 64, device=device), torch.bfloat16)


def _one_rounding(got, ref, mag, what):
    """|got - ref| <= half a bf16 ulp of ref (<= 2^-8 |ref|) plus the accumulation's error:
    one rounding of the exactly scaled sum, per element. The accumulation term is 2^-20 of the
    sum of |products| for the CPU's f32 GEMM, 2^-10 on a GPU (the FP8 tensor cores' fast
    accumulation keeps fewer bits than f32)."""
    got_dev = got.device.type
    got = got.detach().cpu().double()
    err = (got - ref).abs()
    bound = ref.abs() * 2.0 ** -8 + mag * 2.0 ** (-20 if got_dev == "cpu" else -10)
    worst = (err - bound).max().item()
    assert worst <= 0, f"{what}: {int((err > bound).sum())} elements off by more than one rounding"


def test_rowwise_scales_in_gemm_one_rounding(device):
    """The rowwise recipe's three GEMMs, operands quantized by independent torch references
    (e4m3, power-of-two scales along each GEMM's reduced dim: x, W over K; dY, W^T over N; dY^T,
    x^T over M), scales applied to the f32 accumulation: each output element is one bf16
    rounding away from the float64 product. (torchao's rowwise backward instead rounds a
    unit-scale GEMM to bf16 and multiplies the scales in afterwards; with power-of-two scales
    that product is exact, so its numbers differ from these only by the GEMM accumulation: on
    the GPU ours uses fast accumulation in dgrad and wgrad, torchao's does not.)"""
    m, k, n = 96, 64, 48
    lin = torch.nn.Linear(k, n, bias=False, device=device, dtype=torch.bfloat16)
    torch.nn.init.normal_(lin.weight, std=0.2)
    # rows and columns of very different magnitudes: one scale per tensor would lose them
    x = (rnd(m, k, device=device).float() * torch.logspace(-3, 3, m, device=device)[:, None]).bfloat16()
    dy = (rnd(m, n, device=device, seed=4).float() * torch.logspace(2, -2, n, device=device)).bfloat16()
    f8 = hf.Float8Linear.from_float(lin, "rowwise")
    xx = x.clone().requires_grad_()
    y = f8(xx)
    y.backward(dy)
    X, W, G = x.cpu(), lin.weight.detach().cpu(), dy.cpu()

    def op(a, b):  # a (R, red) @ b (C, red)^T, both quantized along the reduced dim
        a8, sa = refs.rowwise(a, E4, True)
        b8, sb = refs.rowwise(b, E4, True)
        A, B = refs.deq(a8, sa[:, None]), refs.deq(b8, sb[:, None])
        return A @ B.t(), A.abs() @ B.abs().t()

    for got, (ref, mag), what in ((y, op(X, W), "forward"), (xx.grad, op(G, W.t()), "dgrad"),
                                  (lin.weight.grad, op(G.t(), X.t()), "wgrad")):
        _one_rounding(got, ref, mag, what)
    # the input has rows too small for one scale per tensor: what rowwise keeps, so the
    # forward check above would fail for a tensorwise cast
    t8, ts, _ = refs.tensorwise(X, E4, False)
    r8, rs = refs.rowwise(X, E4, True)
    assert (refs.deq(t8, ts)[:8] == 0).float().mean() > 0.5
    assert (refs.deq(r8, rs[:, None])[:8] == 0).float().mean() < 0.1
