"""torchtitan 0.3's GroupedExperts swapped for hipfp8's FP8 grouped GEMM on a tiny config:
same parameters and state dict; output and gradients equal the FP8 recipe computed with
hipfp8.torch.grouped_mm directly, and stay close to torchtitan's BF16 answer."""

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


def test_swap_in_place(device):
    ref = tiny(device)
    m = tiny(device)
    sd_before = {k: (v.shape, v.dtype) for k, v in m.state_dict().items()}
    params_before = [id(p) for p in m.parameters()]
    assert hf.swap_grouped_experts(m) == 1
    assert isinstance(m, moe.GroupedExperts)
    assert {k: (v.shape, v.dtype) for k, v in m.state_dict().items()} == sd_before
    assert [id(p) for p in m.parameters()] == params_before
    m.load_state_dict(ref.state_dict())  # a torchtitan checkpoint loads as is

    counts = torch.tensor([7, 0, 40, 17], device=device)
    x = rnd(64, 64, device=device, scale=1.0).requires_grad_()
    y = m(x, counts)
    y.float().square().sum().backward()
    # hipfp8's own module on the same parameters gives the same bits
    mine = hf.GroupedExperts.from_torchtitan(ref)
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
