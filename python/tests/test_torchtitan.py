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


@pytest.mark.parametrize("pad", [None, 8, 16])
def test_fused_swap_warns_about_an_unpadded_dispatcher(device, pad):
    """fused=True inside a RoutedExperts-like owner: a dispatcher without pad_multiple (or one
    not a multiple of 16) draws a RuntimeWarning naming the owner; pad_multiple=16 and
    fused=False draw none."""
    class Dispatcher(torch.nn.Module):
        def __init__(self):
            super().__init__()
            if pad is not None:
                self.pad_multiple = pad

    class Owner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner_experts = tiny(device)
            self.token_dispatcher = Dispatcher()

    model = torch.nn.Sequential(Owner())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert hf.swap_grouped_experts(Owner(), fused=False) == 1
        assert hf.swap_grouped_experts(model, fused=True) == 1
    msgs = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
    if pad == 16:
        assert msgs == []
    else:
        assert len(msgs) == 1 and "'0'" in msgs[0] and "pad_multiple=16" in msgs[0], msgs
