"""Autograd functions against float64 references of their dequantized FP8 operands.

For each GEMM of a training step (forward, dgrad, wgrad) the reference multiplies, in float64,
the dequantized operands the recipe defines (independent torch casts, refs.py); the output
may differ from it only by the GEMM's f32 accumulation and the bf16 rounding of the result.
A second check compares with the plain high-precision autograd result (cosine similarity),
which catches a gradient of the wrong thing that the recipe check could share.
"""

import contextlib

import pytest
import torch

import hipfp8.torch as hf
import refs
from test_ops import offs_of, rnd

E4 = torch.float8_e4m3fn
E5 = torch.float8_e5m2


def close(got, ref, what, rtol=2 ** -7):
    got = got.detach().cpu().double()
    scale = ref.abs().max().item() or 1.0
    torch.testing.assert_close(got, ref, rtol=rtol, atol=scale * 2 ** -9, msg=lambda m: f"{what}: {m}")


def close_biased(got, ref, bias, what):
    """`got` = bf16(bf16(GEMM) + bias): two roundings, each off by at most 2^-8 of its own
    result, so the bound follows the GEMM output and the sum separately (a bias that cancels
    the GEMM output leaves the first rounding's error against a small sum)."""
    got = got.detach().cpu().double()
    b = bias.detach().cpu().double()
    want = ref + b
    bound = 2 ** -8 * (ref.abs() + want.abs()) + (ref.abs().max().item() or 1.0) * 2 ** -12
    err = (got - want).abs()
    worst = int((err - bound).argmax())
    assert bool((err <= bound).all()), (
        f"{what}: |got - ref| = {err.flatten()[worst]:.6g} > {bound.flatten()[worst]:.6g} "
        f"at flat index {worst} (got {got.flatten()[worst]:.6g}, ref {want.flatten()[worst]:.6g})")


def cos(a, b):
    a, b = a.detach().cpu().double().flatten(), b.detach().cpu().double().flatten()
    return float(a @ b / (a.norm() * b.norm()))


def grouped_ref(A, Bt, offs, dy):
    """f64 references of out, grad_A, grad_B_t under the rowwise FP8 recipe."""
    A, Bt, dy = A.detach().cpu(), Bt.detach().cpu(), dy.cpu()
    offs = offs.cpu()
    a8, sa = refs.rowwise(A, E4, True)
    b8, sb = refs.colwise_3d(Bt, E4, True)
    Ad, Bd = refs.deq(a8, sa[:, None]), refs.deq(b8, sb[:, None, :])
    g8, sg = refs.rowwise(dy, E4, True)
    bt8, sbt = refs.transpose_rhs(Bt, E4, True)  # (E,N,K) values, scales (E,K)
    Gd, BTd = refs.deq(g8, sg[:, None]), refs.deq(bt8, sbt[:, None, :])
    gc8, sgc = refs.per_group_colwise(dy, offs, E4, True)
    ac8, sac = refs.per_group_colwise(A, offs, E4, True)
    out = torch.zeros(A.shape[0], Bt.shape[2], dtype=torch.float64)
    gA = torch.zeros(A.shape, dtype=torch.float64)
    gB = torch.zeros(Bt.shape, dtype=torch.float64)
    for g, (s, t) in enumerate(refs.groups(offs)):
        out[s:t] = Ad[s:t] @ Bd[g]
        gA[s:t] = Gd[s:t] @ BTd[g]
        gB[g] = (ac8[s:t].double() / sac[g].double()).t() @ (gc8[s:t].double() / sgc[g].double())
    return out, gA, gB


@pytest.mark.parametrize("sizes", [[16, 0, 48, 32], [5, 27, 0, 64]])
def test_grouped_mm_fwd_bwd(device, sizes):
    m, k, n = sum(sizes), 64, 48
    A = rnd(m, k, device=device).requires_grad_()
    W = rnd(len(sizes), n, k, device=device, seed=7).requires_grad_()  # torchtitan's (E,N,K)
    offs = offs_of(sizes, device)
    dy = rnd(m, n, device=device, seed=9)
    out = hf.grouped_mm(A, W.transpose(-2, -1), offs, float8_dtype=E4)
    out.backward(dy)
    r_out, r_gA, r_gBt = grouped_ref(A, W.transpose(-2, -1), offs, dy)
    assert out.dtype == torch.bfloat16 and out.shape == (m, n)
    close(out, r_out, "forward")
    close(A.grad, r_gA, "grad_A")
    close(W.grad.transpose(-2, -1), r_gBt, "grad_B_t")
    # and against the high-precision autograd answer
    A2 = A.detach().double().cpu().requires_grad_()
    W2 = W.detach().double().cpu().requires_grad_()
    o2 = torch.cat([A2[s:t] @ W2[g].t() for g, (s, t) in enumerate(refs.groups(offs.cpu()))])
    o2.backward(dy.double().cpu())
    assert cos(out, o2) > 0.999 and cos(A.grad, A2.grad) > 0.999 and cos(W.grad, W2.grad) > 0.999


@pytest.mark.parametrize("sizes", [[5, 27, 0, 64, 1], [100, 3, 33], [7]])
def test_grouped_mm_grad_b_equals_zero_padded(device, sizes):
    """Unaligned groups: grad_B (whose wgrad casts with per_group_colwise_dual_padded) equals,
    bit for bit, grad_B of the same layer on explicitly zero-padded inputs (every group copied
    to a 16-row aligned start, zero rows of A and dY after it) with the padded offsets."""
    m, k, n, g = sum(sizes), 48, 40, len(sizes)
    A = rnd(m, k, device=device, seed=11)
    W = rnd(g, n, k, device=device, seed=12)
    dy = rnd(m, n, device=device, seed=13)
    offs = offs_of(sizes, device)
    padded = [(s + 15) // 16 * 16 for s in sizes]
    mp = sum(padded)
    Ap = torch.zeros(mp, k, dtype=A.dtype, device=device)
    dyp = torch.zeros(mp, n, dtype=dy.dtype, device=device)
    lo = lp = 0
    for s, ps in zip(sizes, padded):
        Ap[lp:lp + s] = A[lo:lo + s]
        dyp[lp:lp + s] = dy[lo:lo + s]
        lo, lp = lo + s, lp + ps
    grads = []
    for a, d, o in [(A, dy, offs), (Ap, dyp, offs_of(padded, device))]:
        w = W.clone().requires_grad_()
        hf.grouped_mm(a, w.transpose(-2, -1), o, float8_dtype=E4).backward(d)
        grads.append(w.grad)
    assert torch.equal(grads[0].view(torch.int16), grads[1].view(torch.int16)), \
        f"{int((grads[0] != grads[1]).sum())} grad_B elements differ"
    # and the wgrad is the torchao composition on the padded inputs: per_group_colwise_dual,
    # then the 2D x 2D GEMM with the padded offsets
    d8, sd, a8, sa = hf.per_group_colwise_dual(dyp, Ap, offs_of(padded, device), E4)
    from hipfp8.torch import ops
    gb = ops._grouped_gemm_2d2d(d8.t(), a8, offs_of(padded, device), sd.reciprocal(),
                                sa.reciprocal())
    assert torch.equal(grads[0].view(torch.int16), gb.to(W.dtype).view(torch.int16))


def test_grouped_mm_f32_inputs_and_layouts(device):
    """f32 parameters, a non-column-major B_t: grads come back in the inputs' dtypes."""
    sizes = [10, 22]
    A = rnd(32, 32, dtype=torch.float32, device=device).requires_grad_()
    Bt = rnd(2, 32, 16, dtype=torch.float32, device=device, seed=3).requires_grad_()  # row-major
    out = hf.grouped_mm(A, Bt, offs_of(sizes, device), float8_dtype=E4)
    out.float().sum().backward()
    assert A.grad.dtype == torch.float32 and Bt.grad.dtype == torch.float32
    assert Bt.grad.shape == Bt.shape


def linear_ref(x, w, dy, recipe):
    """f64 references of y, grad_x, grad_w under a dense recipe."""
    x, w, dy = x.detach().cpu(), w.detach().cpu(), dy.cpu()
    if recipe == "tensorwise":
        x8, sx, _ = refs.tensorwise(x, E4, False)
        w8, sw, _ = refs.tensorwise(w, E4, False)
        g8, sg, _ = refs.tensorwise(dy, E5, False)
        X, W, G = refs.deq(x8, sx), refs.deq(w8, sw), refs.deq(g8, sg)
        return X @ W.t(), G @ W, G.t() @ X
    x8, sx = refs.rowwise(x, E4, True)
    w8, sw = refs.rowwise(w, E4, True)
    y = refs.deq(x8, sx[:, None]) @ refs.deq(w8, sw[:, None]).t()
    g8, sg = refs.rowwise(dy, E4, True)
    wc8, swc = refs.rowwise(w.t(), E4, True)  # W scaled per column (over N)
    gx = refs.deq(g8, sg[:, None]) @ refs.deq(wc8, swc[:, None]).t()
    gt8, sgt = refs.rowwise(dy.t(), E4, True)
    xt8, sxt = refs.rowwise(x.t(), E4, True)
    gw = refs.deq(gt8, sgt[:, None]) @ refs.deq(xt8, sxt[:, None]).t()
    return y, gx, gw


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_float8_linear(device, recipe):
    m, k, n = 48, 64, 32
    lin = torch.nn.Linear(k, n, bias=True, device=device, dtype=torch.bfloat16)
    f8 = hf.Float8Linear.from_float(lin, recipe)
    assert f8.weight is lin.weight and set(f8.state_dict()) == set(lin.state_dict())
    x = rnd(2, m // 2, k, device=device).requires_grad_()
    dy = rnd(2, m // 2, n, device=device, seed=11)
    y = f8(x)
    y.backward(dy)
    r_y, r_gx, r_gw = linear_ref(x.reshape(m, k), lin.weight, dy.reshape(m, n), recipe)
    close_biased(y.reshape(m, n), r_y, lin.bias, "forward")
    close(x.grad.reshape(m, k), r_gx, "grad_x")
    close(lin.weight.grad, r_gw, "grad_w")
    close(lin.bias.grad, dy.reshape(m, n).double().sum(0).cpu(), "grad_bias", rtol=2 ** -6)


def test_float8_linear_delayed(device):
    """Delayed scaling: step t casts with the scale from the history of steps < t, then
    records this step's amax (x, w in forward; grad_output in backward)."""
    m, k, n = 32, 64, 16
    f8 = hf.Float8Linear(k, n, bias=False, recipe="delayed", history_len=4, device=device,
                         dtype=torch.bfloat16)
    torch.nn.init.normal_(f8.weight)
    fmax4, fmax5 = torch.finfo(E4).max, torch.finfo(E5).max
    seen = []
    for step in range(3):
        x = rnd(m, k, device=device, seed=20 + step, scale=1.0 + step).requires_grad_()
        dy = rnd(m, n, device=device, seed=30 + step, scale=0.5)
        scales_used = f8.scales.clone()
        y = f8(x)
        y.backward(dy)
        ax = x.detach().float().abs().amax().cpu()
        aw = f8.weight.detach().float().abs().amax().cpu()
        ag = dy.float().abs().amax().cpu()
        seen.append((ax, aw, ag))
        # forward used scales_used for x and w (grad scale: updated at forward start)
        sx, sw = scales_used[0].cpu(), scales_used[1].cpu()
        X = refs.deq(refs.scaled(x.detach().cpu(), sx, E4)[0], sx)
        W = refs.deq(refs.scaled(f8.weight.detach().cpu(), sw, E4)[0], sw)
        close(y, X @ W.t(), f"step {step} forward")
        assert f8.grad_amax.cpu().item() == ag.item()
        hist_x = torch.tensor([s[0] for s in reversed(seen)])
        assert torch.equal(f8.amax_history[0, :len(seen)].cpu(), hist_x)
        assert f8.scales[0].cpu().item() == pytest.approx(fmax4 / hist_x.max().item(), rel=1e-6)
        f8.weight.grad = None
    # the grad history holds the grads of steps 0 and 1 (step 2's enters at the next forward)
    hist_g = f8.amax_history[2, :2].cpu()
    assert torch.equal(hist_g, torch.tensor([seen[1][2], seen[0][2]]))
    assert f8.scales[2].cpu().item() == pytest.approx(fmax5 / hist_g.max().item(), rel=1e-6)


def test_convert_to_float8_training(device):
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16))
    model = model.to(device=device, dtype=torch.bfloat16)
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    hf.convert_to_float8_training(model, recipe="tensorwise", module_filter_fn=lambda m, fqn: fqn != "2")
    assert isinstance(model[0], hf.Float8Linear) and type(model[2]) is torch.nn.Linear
    assert set(model.state_dict()) == set(sd)
    y = model(rnd(16, 32, device=device))
    assert y.shape == (16, 16)


def test_weight_cache_micro_batches(device, monkeypatch):
    """Gradient accumulation over micro-batches inside weight_cache(): the same bits as without
    it, each weight cast once (one moe_weights_dual per weight and version), an in-place
    update inside the block cast again, nothing cached outside the block."""
    from hipfp8.torch import grouped, ops
    sizes = [16, 0, 40, 8]
    W = rnd(4, 48, 64, device=device, seed=7)
    As = [rnd(64, 64, device=device, seed=20 + i) for i in range(3)]
    dys = [rnd(64, 48, device=device, seed=30 + i) for i in range(3)]
    offs = offs_of(sizes, device)

    def steps(cache, bump=False):
        w = W.clone().requires_grad_()
        outs, gA = [], []
        with (hf.weight_cache() if cache else contextlib.nullcontext()):
            for i, (A, dy) in enumerate(zip(As, dys)):
                if bump and i == 2:
                    with torch.no_grad():
                        w.mul_(0.5)  # an optimizer-like in-place update: a new version
                a = A.clone().requires_grad_()
                out = hf.grouped_mm(a, w.transpose(-2, -1), offs, float8_dtype=E4)
                out.backward(dy)
                outs.append(out)
                gA.append(a.grad)
        return outs, gA, w.grad

    calls = []
    real = ops._moe_weights_dual
    monkeypatch.setattr(ops, "_moe_weights_dual", lambda *a: calls.append(1) or real(*a))
    for bump in (False, True):
        calls.clear()
        want = steps(False, bump)
        assert not calls
        got = steps(True, bump)
        assert len(calls) == (2 if bump else 1), calls
        for g, w_ in zip(got[0] + got[1] + [got[2]], want[0] + want[1] + [want[2]]):
            assert torch.equal(g, w_)
    assert grouped._weights is None
    # an f32 parameter's bf16 copy is a new tensor every call: not cached, still right
    calls.clear()
    w32 = W.float().requires_grad_()
    with hf.weight_cache():
        hf.grouped_mm(As[0], w32.bfloat16().transpose(-2, -1), offs, float8_dtype=E4).sum().backward()
    assert not calls and w32.grad is not None
