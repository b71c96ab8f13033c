"""torchtitan 0.3's GroupedExperts swapped for hipfp8 FP8 on a tiny config, both modes (the fused
experts recipe, the default, and the grouped_mm seam): same parameters and state dict; output
and gradients equal hipfp8's own GroupedExperts in the same mode on the same parameters, and
stay close to torchtitan's BF16 answer."""

import warnings

import pytest
import torch

import hipfp8.torch as hf
from test_ops import rnd

moe = pytest.importorskip("torchtitan.models.common.moe",
                          reason="torchtitan 0.3 is not installed (python/ci/torch-env.sh installs it)")


def tiny(device):
    torch.manual_seed(0)
    m = moe.GroupedExperts(moe.GroupedExperts.Config(dim=64, hidden_dim=96, num_experts=4))
    m = m.to(device)
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.05)
    return m


@pytest.mark.parametrize("fused", [True, False])
def test_swap_in_place(device, fused):
    ref = tiny(device)
    m = tiny(device)
    sd_before = {k: (v.shape, v.dtype) for k, v in m.state_dict().items()}
    params_before = [id(p) for p in m.parameters()]
    assert hf.swap_grouped_experts(m, fused=fused) == 1
    assert isinstance(m, moe.GroupedExperts)
    assert {k: (v.shape, v.dtype) for k, v in m.state_dict().items()} == sd_before
    assert [id(p) for p in m.parameters()] == params_before
    m.load_state_dict(ref.state_dict())  # a torchtitan checkpoint loads as is

    counts = torch.tensor([7, 0, 40, 17], device=device)
    x = rnd(64, 64, device=device, scale=1.0).requires_grad_()
    y = m(x, counts)
    y.float().square().sum().backward()
    # hipfp8's own module on the same parameters gives the same bits
    mine = hf.GroupedExperts.from_torchtitan(ref, fused=fused)
    x2 = x.detach().clone().requires_grad_()
    y2 = mine(x2, counts)
    y2.float().square().sum().backward()
    assert torch.equal(y, y2) and torch.equal(x.grad, x2.grad)
    for (n, p), p2 in zip(m.named_parameters(), mine.parameters()):
        assert torch.equal(p.grad, p2.grad), n
    # and torchtitan's BF16 experts agree to FP8 accuracy
    x3 = x.detach().clone().requires_grad_()
    y3 = ref(x3, counts)
    cos = torch.nn.functional.cosine_similarity(y.float().flatten(), y3.float().flatten(), dim=0)
    assert cos > 0.99, float(cos)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_swap_fused_matches_unfused_forward(device, dtype):
    """With bf16 parameters the fused swap's forward equals the seam swap's bit for bit on the
    CPU (the same casts and GEMMs; the SwiGLU's exp is the only possible difference,
    test_experts.py). f32 parameters: the fused path casts them to FP8 directly, the seam path
    rounds them to bf16 first (torchtitan's `w.bfloat16()`): FP8-close. A module swapped twice
    switches mode."""
    m = tiny(device).to(dtype)
    x = rnd(64, 64, device=device, scale=1.0)
    counts = torch.tensor([7, 0, 40, 17], device=device)
    hf.swap_grouped_experts(m, fused=False)
    want = m(x, counts)
    assert hf.swap_grouped_experts(m, fused=True) == 1
    got = m(x, counts)
    assert m._hipfp8_cache.refreshes == 1
    if device == "cpu" and dtype == torch.bfloat16:
        assert torch.equal(got, want)
    cos = torch.nn.functional.cosine_similarity(got.float().flatten(), want.float().flatten(), dim=0)
    assert cos > 0.999


def test_fused_swap_pads_the_wgrad_operands(device):
    """fused=True beside a token dispatcher that does not pad groups to 16: no warning (the
    recipe pads its wgrad operands itself), and the step equals the unpadded recipe's: y and
    the input gradient bit for bit, the weight gradients bit for bit on the CPU and up to the
    GEMMs' summation order on a GPU."""
    m, ref = tiny(device), tiny(device)
    counts = torch.tensor([7, 0, 40, 17], device=device)  # not multiples of 16
    x = rnd(64, 64, device=device, scale=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert hf.swap_grouped_experts(m, fused=True) == 1
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    y1 = m(x1, counts)
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    w = (ref.w1_EFD, ref.w3_EFD, ref.w2_EDF)
    cache = hf.ExpertsWeightCache()
    y2 = hf.experts(x2, offs, *w, cache, pad_wgrad=False)
    g = torch.randn_like(y1) * 0.01
    y1.backward(g)
    y2.backward(g)
    assert torch.equal(y1, y2) and torch.equal(x1.grad, x2.grad)
    for a, b in ((m.w1_EFD, ref.w1_EFD), (m.w3_EFD, ref.w3_EFD), (m.w2_EDF, ref.w2_EDF)):
        if device == "cpu":
            assert torch.equal(a.grad, b.grad)
        else:
            assert (a.grad.float() - b.grad.float()).norm() <= 2 ** -8 * b.grad.float().norm()
