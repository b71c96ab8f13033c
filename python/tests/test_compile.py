"""torch.compile(fullgraph=True): no graph break in grouped_mm (fwd+bwd), the experts or the
linear; token counts vary without recompiling; compiled results equal eager bit for bit."""

import pytest
import torch

import hipfp8.torch as hf
from test_ops import offs_of, rnd


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    torch.compiler.set_stance("default")


def step_grouped(A, W, offs):
    out = hf.grouped_mm(A, W.transpose(-2, -1), offs)
    return out


def run(fn, A, W, offs):
    A = A.detach().clone().requires_grad_()
    W = W.detach().clone().requires_grad_()
    out = fn(A, W, offs)
    out.float().square().sum().backward()
    return out, A.grad, W.grad


def test_grouped_mm_fullgraph_dynamic_tokens(device):
    W = rnd(4, 48, 64, device=device, seed=1)
    c = torch.compile(step_grouped, fullgraph=True, dynamic=True)
    for i, sizes in enumerate([[16, 0, 48, 32], [5, 27, 0, 64], [80, 1, 1, 30]]):
        if i == 1:
            # every later token count must reuse the graphs compiled so far
            torch.compiler.set_stance("fail_on_recompile")
        A = rnd(sum(sizes), 64, device=device, seed=2 + i)
        offs = offs_of(sizes, device)
        got = run(c, A, W, offs)
        want = run(step_grouped, A, W, offs)
        for g, w, what in zip(got, want, ("out", "grad_A", "grad_W")):
            assert torch.equal(g, w), f"{what} differs compiled vs eager (sizes {sizes})"


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_float8_linear_fullgraph(device, recipe):
    # No bias: inductor may fold `y + bias` into _scaled_mm's epilogue (added before the bf16
    # rounding), which changes the last bit relative to eager; the GEMM path itself is exact.
    lin = torch.nn.Linear(64, 32, bias=False, device=device, dtype=torch.bfloat16)
    f8 = hf.Float8Linear.from_float(lin, recipe)
    c = torch.compile(f8, fullgraph=True, dynamic=True)
    for i, m in enumerate([48, 80]):
        if i == 1:
            torch.compiler.set_stance("fail_on_recompile")
        x = rnd(m, 64, device=device, seed=i)
        outs = []
        for fn in (c, f8):
            xx = x.clone().requires_grad_()
            y = fn(xx)
            y.float().square().sum().backward()
            outs.append((y, xx.grad, lin.weight.grad.clone()))
            lin.weight.grad = None
        for g, w, what in zip(*outs, ("y", "grad_x", "grad_w")):
            assert torch.equal(g, w), f"{what} differs compiled vs eager (M={m})"


def test_experts_module_fullgraph(device):
    m = hf.GroupedExperts(64, 96, 4, device=device, dtype=torch.bfloat16)
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.05)
    c = torch.compile(m, fullgraph=True, dynamic=True)
    for i, counts in enumerate([[7, 0, 40, 17], [30, 30, 2, 2]]):
        if i == 1:
            torch.compiler.set_stance("fail_on_recompile")
        x = rnd(64, 64, device=device, seed=i, scale=1.0)
        cnt = torch.tensor(counts, device=device)
        # inductor fuses silu(g) * u without eager's intermediate bf16 rounding, so h's FP8
        # cast can land one FP8 step apart: FP8-close, not bitwise (the casts and GEMMs
        # themselves are exact compiled: see the tests above)
        got, want = c(x, cnt).float(), m(x, cnt).float()
        assert (got - want).abs().max() <= 0.05 * want.abs().max()
        assert torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0) > 0.999
