"""The MoE routing ops and the routed-expert layer path (hipfp8.torch.routed):

- the four routing ops equal their definitions written in torch (gather + pad + moe_act_dual;
  the score-weighted rows; the combine's f32 sum in slot order rounded once; the score
  gradient's dot in the library's lane order);
- the pre-cast experts ops equal the bf16 experts ops on the padded layout, bit for bit;
- moe_routed_experts (forward and backward) equals the same step composed of torch gathers
  and the bf16 experts ops, bit for bit (on the GPU too: the `device` fixture);
- against torchtitan 0.3's RoutedExperts with hipfp8's fused experts (swap_grouped_experts):
  K = 1 bit for bit (output, input and weight gradients); K = 2 the output differs by the
  combine's rounding (torchtitan rounds each weighted row to bf16 and adds in bf16, this path
  rounds the f32 sum once), bounded and measured here; score gradients to f32 rounding;
- bad inputs: clear errors; torch.compile(fullgraph=True) on the CPU; opcheck of the ops.
"""

import copy

import pytest
import torch

import hipfp8.torch as hf
from hipfp8.torch import fused_experts as fe
from test_ops import rnd

E4 = torch.float8_e4m3fn
LANES = 256  # reference::route::DOT_LANES


def routing(t, k, e, device, seed=0, empty=2):
    """Router choices: distinct experts per token (expert `empty` never chosen), scores."""
    g = torch.Generator().manual_seed(seed)
    experts = [x for x in range(e) if x != empty]
    ids = torch.stack([torch.randperm(len(experts), generator=g)[:k] for _ in range(t)])
    ids = torch.tensor(experts)[ids]
    scores = torch.rand(t, k, generator=g) + 0.25
    return scores.to(device), ids.to(device)


def gather_pad(src, perm, offs, topk, align, m_cap, w=None):
    """The padded layout in torch: expert g's slots in perm order from the padded start of g,
    zero rows to a multiple of align, zero rows to m_cap; rows bf16(w[slot] * src[token])."""
    d = src.shape[1]
    out = torch.zeros(m_cap, d, dtype=src.dtype, device=src.device)
    slot_row = torch.full((perm.numel(),), -1, dtype=torch.int32)
    offs_pad, row, start = [], 0, 0
    perm_l, offs_l = perm.tolist(), offs.tolist()
    for end in offs_l:
        for s in perm_l[start:end]:
            v = src[s // topk]
            if w is not None:
                v = (w.reshape(-1)[s].float() * v.float()).to(src.dtype)
            out[row] = v
            slot_row[s] = row
            row += 1
        row = (row + align - 1) // align * align
        offs_pad.append(row)
        start = end
    dev = src.device
    return (out, torch.tensor(offs_pad, dtype=torch.int32, device=dev),
            slot_row.reshape(-1, topk).to(dev))


def combine_def(y, slot_row, w):
    """bf16(sum_j w[t, j] * y[slot_row[t, j]]), f32 products added in j order from 0."""
    acc = torch.zeros(slot_row.shape[0], y.shape[1], dtype=torch.float32, device=y.device)
    for j in range(slot_row.shape[1]):
        acc = acc + w[:, j:j + 1] * y[slot_row[:, j].long()].float()
    return acc.to(torch.bfloat16)


def dot_lanes(a, b):
    """reference::route::dot_lanes over the last dim: products into LANES lanes in column
    order, then a halving tree."""
    p = a.float() * b.float()
    d = p.shape[-1]
    p = torch.nn.functional.pad(p, (0, (-d) % LANES))
    lanes = torch.zeros(*p.shape[:-1], LANES, dtype=torch.float32, device=p.device)
    for c in range(p.shape[-1] // LANES):
        lanes = lanes + p[..., c * LANES:(c + 1) * LANES]
    h = LANES // 2
    while h:
        lanes = lanes[..., :h] + lanes[..., h:2 * h]
        h //= 2
    return lanes[..., 0]


def layer_inputs(device, t=48, d=64, i=32, e=5, k=2, seed=0):
    scores, ids = routing(t, k, e, device, seed)
    x = rnd(t, d, device=device, seed=seed + 1, scale=1.0)
    w1 = rnd(e, i, d, device=device, seed=seed + 2, scale=0.05)
    w3 = rnd(e, i, d, device=device, seed=seed + 3, scale=0.05)
    w2 = rnd(e, d, i, device=device, seed=seed + 4, scale=0.05)
    dout = rnd(t, d, device=device, seed=seed + 5, scale=0.02)
    return x, scores, ids, w1, w2, w3, dout


@pytest.mark.parametrize("align", [1, 16])
def test_routing_ops_equal_definitions(device, align):
    t, d, k, e = 37, 48, 2, 5
    scores, ids = routing(t, k, e, device)
    x = rnd(t, d, device=device, seed=3, scale=2.0)
    dout = rnd(t, d, device=device, seed=4, scale=0.05)
    perm, offs = hf.route_slots(ids, e)
    want_perm = torch.argsort(ids.reshape(-1), stable=True)
    assert torch.equal(perm.long(), want_perm)
    assert offs.tolist() == torch.bincount(ids.reshape(-1).cpu(), minlength=e).cumsum(0).tolist()
    m_cap = t * k + e * (align - 1)
    for src, w in ((x, None), (dout, scores)):
        pad, offs_pad, slot_row = gather_pad(src, perm, offs, k, align, m_cap, w)
        want = hf.moe_act_dual(pad, offs_pad, E4)  # forward scales
        for dequant in (False, True):
            if w is None:
                got = hf.moe_dispatch_dual(x, perm, offs, k, align, m_cap, E4, dequant=dequant)
            else:
                got = hf.moe_combine_bwd_dual(dout, w, perm, offs, align, m_cap, E4,
                                              dequant=dequant)
            assert torch.equal(got[0], offs_pad)
            assert torch.equal(got[1], slot_row)
            end = int(offs_pad[-1])
            assert torch.equal(got[2].view(torch.uint8), want[0].view(torch.uint8))
            # the colwise layout's rows past offs_pad[-1] are zero bytes (moe_act_dual leaves
            # them unwritten)
            assert torch.equal(got[4][:end].view(torch.uint8), want[2][:end].view(torch.uint8))
            assert not got[4][end:].view(torch.uint8).any()
            s, sc = (want[1], want[3]) if not dequant else (want[1].reciprocal(),
                                                          want[3].reciprocal())
            assert torch.equal(got[3], s) and torch.equal(got[5], sc)
    y = rnd(m_cap, d, device=device, seed=5, scale=1.0)
    _, _, slot_row = gather_pad(x, perm, offs, k, align, m_cap)
    assert torch.equal(hf.moe_combine(y, slot_row, scores), combine_def(y, slot_row, scores))
    got = hf.moe_combine_bwd_scores(dout, y, slot_row)
    want = dot_lanes(dout.unsqueeze(1), y[slot_row.long()])
    assert torch.equal(got, want)
    # a slot row of -1 adds nothing and gets a zero score gradient
    slot_row[3, 1] = -1
    w0 = scores.clone()
    w0[3, 1] = 0.0
    assert torch.equal(hf.moe_combine(y, slot_row, scores)[3], combine_def(
        y, slot_row.clamp(min=0), w0)[3])
    assert hf.moe_combine_bwd_scores(dout, y, slot_row)[3, 1] == 0


def test_precast_ops_equal_bf16_ops(device):
    t, d, i, e, k, align = 40, 32, 24, 4, 2, 16
    x, scores, ids, w1, w2, w3, dout = layer_inputs(device, t, d, i, e, k, seed=7)
    perm, offs = hf.route_slots(ids, e)
    m_cap = t * k + e * (align - 1)
    cache = hf.ExpertsWeightCache()
    offs_pad, slot_row, xq, xs, xc, xcs = hf.moe_dispatch_dual(x, perm, offs, k, align, m_cap, E4)
    y, saved, gen = fe.moe_experts_forward_precast(xq, xs, offs_pad, w1, w3, w2, cache)
    x_pad, _, _ = gather_pad(x, perm, offs, k, align, m_cap)
    y2, saved2, gen2 = fe.moe_experts_forward(x_pad, offs_pad, w1, w3, w2, cache, E4)
    end = int(offs_pad[-1])
    assert torch.equal(y[:end], y2[:end])
    assert saved.numel() == fe.experts_precast_saved_bytes(m_cap, d, i, e) < saved2.numel()
    _, _, dq, ds, dc, dcs = hf.moe_combine_bwd_dual(dout, scores, perm, offs, align, m_cap, E4)
    got = fe.moe_experts_backward_precast(saved, gen, dq, ds, dc, dcs, xc, xcs, offs_pad, cache, i)
    dy_pad, _, _ = gather_pad(dout, perm, offs, k, align, m_cap, scores)
    want = fe.moe_experts_backward(saved2, gen2, dy_pad, offs_pad, cache, i, E4)
    assert torch.equal(got[0][:end], want[0][:end])
    _assert_wgrad_equal(device, "dW13", got[1], want[1])
    _assert_wgrad_equal(device, "dW2", got[2], want[2])


def _assert_wgrad_equal(device, what, g, w):
    """Weight gradients of two paths with the same FP8 operands: bit for bit on the CPU (one
    GEMM implementation); on the GPU within bf16 rounding, since the library's 2D x 2D GEMM
    takes only row strides of a multiple of 16 rows: a path whose column operands have another
    (test_precast_ops_equal_bf16_ops' m_cap = 140 against the padded layout's multiple of 16)
    runs the portable kernel, the same f32 products summed in another order."""
    if device == "cuda":
        _assert_bf16_close(what, g, w)
    else:
        assert torch.equal(g, w), what


def composed(x, scores, ids, w1, w2, w3, dout, align=16):
    """The layer step from torch gathers and the bf16 experts ops: (out, dx, d_scores, dw1,
    dw2, dw3)."""
    t, k = ids.shape
    e, i, _ = w1.shape
    perm, offs = hf.route_slots(ids, e)
    m_cap = t * k + e * (align - 1)
    x_pad, offs_pad, slot_row = gather_pad(x, perm, offs, k, align, m_cap)
    cache = hf.ExpertsWeightCache()
    y, saved, gen = fe.moe_experts_forward(x_pad, offs_pad, w1, w3, w2, cache, E4)
    out = combine_def(y, slot_row, scores)
    dy_pad, _, _ = gather_pad(dout, perm, offs, k, align, m_cap, scores)
    dx_pad, dw13, dw2 = fe.moe_experts_backward(saved, gen, dy_pad, offs_pad, cache, i, E4)
    dx = combine_def(dx_pad, slot_row, torch.ones_like(scores))
    d_scores = dot_lanes(dout.unsqueeze(1), y[slot_row.long()])
    return out, dx, d_scores, dw13[0], dw2, dw13[1]


def run_layer(x, scores, ids, w1, w2, w3, dout, **kw):
    leaves = [v.detach().clone().requires_grad_() for v in (x, scores, w1, w2, w3)]
    xx, ss, a, b, c = leaves
    cache = hf.ExpertsWeightCache()  # held until the backward ran (the ops take its id)
    out = hf.moe_routed_experts(xx, ss, ids, a, b, c, cache, **kw)
    out.backward(dout)
    return [out.detach()] + [v.grad for v in leaves]


@pytest.mark.parametrize("k", [1, 2])
def test_layer_equals_composition(device, k):
    x, scores, ids, w1, w2, w3, dout = layer_inputs(device, k=k, seed=11)
    got = run_layer(x, scores, ids, w1, w2, w3, dout, float8_dtype=E4)
    want = composed(x, scores, ids, w1, w2, w3, dout)
    for name, g, w in zip(("out", "dx", "d_scores", "dw1", "dw2", "dw3"), got, want):
        assert g.dtype == w.dtype or name == "d_scores", name
        if name.startswith("dw"):
            _assert_wgrad_equal(device, name, g, w)
        else:
            assert torch.equal(g.to(w.dtype), w), name


def test_layer_dtypes_and_no_score_grad(device):
    x, scores, ids, w1, w2, w3, dout = layer_inputs(device, seed=12)
    # f32 activations and weights: gradients come back in their dtypes
    got = run_layer(x.float(), scores, ids, w1.float(), w2.float(), w3.float(), dout.float(),
                    float8_dtype=E4)
    assert got[1].dtype == torch.float32 and got[3].dtype == torch.float32
    # scores that need no gradient: no score gradient computed, the rest unchanged
    xx = x.detach().clone().requires_grad_()
    cache = hf.ExpertsWeightCache()
    out = hf.moe_routed_experts(xx, scores, ids, w1, w2, w3, cache, float8_dtype=E4)
    out.backward(dout)
    want = run_layer(x, scores, ids, w1, w2, w3, dout, float8_dtype=E4)
    assert torch.equal(out, want[0]) and torch.equal(xx.grad, want[1])


# ---- torchtitan 0.3 ------------------------------------------------------------------------

def tt_routed(device, e=4, d=64, f=96, k=2):
    moe = pytest.importorskip("torchtitan.models.common.moe",
                              reason="torchtitan 0.3 is not installed (python/ci/torch-env.sh)")
    td = pytest.importorskip("torchtitan.models.common.token_dispatcher")
    torch.manual_seed(0)
    cfg = moe.RoutedExperts.Config(
        inner_experts=moe.GroupedExperts.Config(dim=d, hidden_dim=f, num_experts=e),
        token_dispatcher=td.LocalTokenDispatcher.Config(num_experts=e, top_k=k))
    m = cfg.build().to(device)
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.05)
    return m


def tt_step(m, x, scores, ids, dout):
    x = x.detach().clone().requires_grad_()
    s = scores.detach().clone().requires_grad_()
    e = m.inner_experts.num_experts
    counts = torch.bincount(ids.reshape(-1), minlength=e)
    out = m(x.unsqueeze(0), s.unsqueeze(0), ids.unsqueeze(0), counts).squeeze(0)
    out.backward(dout)
    return [out.detach(), x.grad, s.grad] + [p.grad for p in m.parameters()]


def _assert_bf16_close(what, g, w):
    """g within bf16 rounding of w: norm relative error <= 2^-8 (bf16's unit roundoff) and
    95 % of the elements within 2 bf16 ulps. Returns |g - w|."""
    ulp = torch.finfo(torch.bfloat16).eps * w.float().abs()
    diff = (g.float() - w.float()).abs()
    rel = float(diff.norm() / w.float().norm())
    within = float((diff <= 2 * ulp).float().mean())
    print(f"{what}: relative error {rel:.2e}, {within:.4f} of elements within 2 ulps")
    assert rel <= 2 ** -8 and within >= 0.95, (what, rel, within)
    return diff


@pytest.mark.parametrize("k", [1, 2])
def test_swap_matches_torchtitan_fused_experts(device, k):
    ref = tt_routed(device, k=k)
    mine = copy.deepcopy(ref)
    assert hf.swap_grouped_experts(ref.inner_experts, fused=True) == 1
    sd = {n: p.shape for n, p in mine.state_dict().items()}
    assert hf.swap_routed_experts(mine) == 1
    assert {n: p.shape for n, p in mine.state_dict().items()} == sd
    t = 64
    scores, ids = routing(t, k, 4, device, seed=5, empty=1)
    x = rnd(t, 64, device=device, seed=6, scale=1.0)
    dout = rnd(t, 64, device=device, seed=7, scale=0.02)
    want = tt_step(ref, x, scores, ids, dout)
    got = tt_step(mine, x, scores, ids, dout)
    names = ["out", "dx", "d_scores"] + [n for n, _ in ref.named_parameters()]
    for name, g, w in zip(names, got, want):
        if name == "d_scores":
            # f32 dots in different orders
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
        elif device == "cuda" and name not in ("out", "dx"):
            # Weight gradients: the same recipe on the same rows (the padding rows are zeros),
            # but on the GPU the padded wgrad groups all start on 16-row boundaries and run the
            # library GEMM, while the unpadded reference sends groups off the boundary to the
            # portable kernel: the same f32 products summed in another order, then bf16.
            _assert_bf16_close(f"k={k} {name}", g, w)
        elif k == 1 or name != "out" and name != "dx":
            # k = 1: one rounding either way; weight gradients (CPU: one GEMM implementation):
            # the same recipe on the same rows (the padding rows are zeros)
            assert torch.equal(g, w), name
        else:
            # k = 2: torchtitan rounds each weighted row to bf16 and adds in bf16 (out), and
            # adds the two bf16 gradient rows in bf16 (dx); this path rounds the f32 sum once.
            # Each term's rounding is at most half a bf16 ulp of the term, so elements where
            # the two terms cancel can differ by more ulps of the (small) result: bounded here
            # in norm (relative error <= 2^-8, bf16's unit roundoff; measured 2.7e-3 for out)
            # and per element for 95% (measured 96.5% for out).
            diff = _assert_bf16_close(f"k=2 {name}", g, w)
            if name == "out":
                assert (diff > 0).any()  # the roundings really differ


def test_swap_refuses_ep_and_score_before(device):
    m = tt_routed(device)
    m.token_dispatcher.score_before_experts = True
    with pytest.raises(ValueError, match="score_before_experts"):
        hf.swap_routed_experts(m)
    m = tt_routed(device)

    class AllToAllTokenDispatcher:
        pass
    m.token_dispatcher = AllToAllTokenDispatcher()
    with pytest.raises(ValueError, match="AllToAllTokenDispatcher"):
        hf.swap_routed_experts(m)


# ---- errors, compile, opcheck ----------------------------------------------------------------

def test_errors():
    t, d, k, e = 8, 16, 2, 3
    scores, ids = routing(t, k, e, "cpu", empty=5)
    x = rnd(t, d)
    perm, offs = hf.route_slots(ids, e)
    with pytest.raises(ValueError, match="m_cap"):
        hf.moe_dispatch_dual(x, perm, offs, k, 16, t * k, E4)
    with pytest.raises(ValueError, match="perm must be a contiguous"):
        hf.moe_dispatch_dual(x, perm[:-1], offs, k, 1, None, E4)
    with pytest.raises(TypeError, match="perm must be int32"):
        hf.moe_dispatch_dual(x, perm.long(), offs, k, 1, None, E4)
    with pytest.raises(TypeError, match="weights must be float32"):
        hf.moe_combine_bwd_dual(x, scores.bfloat16(), perm, offs, 1, None, E4)
    with pytest.raises(ValueError, match="weights must be a contiguous"):
        hf.moe_combine(torch.zeros(t * k, d, dtype=torch.bfloat16), perm.view(t, k)[:4],
                       scores)
    with pytest.raises(TypeError, match="one dtype"):
        hf.moe_combine_bwd_scores(x, x.float(), perm.view(t, k))
    bad = perm.clone()
    bad[0] = bad[1]
    with pytest.raises(Exception, match="permutation|INVALID_OFFSETS"):
        hf.moe_dispatch_dual(x, bad, offs, k, 1, None, E4)
    w1 = rnd(e, 8, d)
    w2 = rnd(e, d, 8)
    cache = hf.ExpertsWeightCache()
    with pytest.raises(TypeError, match="integer expert ids"):
        hf.moe_routed_experts(x, scores, ids.float(), w1, w2, w1, cache)
    with pytest.raises(ValueError, match="selected_experts must have"):
        hf.moe_routed_experts(x, scores, ids[:, :1], w1, w2, w1, cache)
    with pytest.raises(TypeError, match="ExpertsWeightCache"):
        hf.moe_routed_experts(x, scores, ids, w1, w2, w1, None)
    xq = torch.zeros(t * k, d, dtype=E4)
    with pytest.raises(ValueError, match="x_scales must be contiguous"):
        fe.moe_experts_forward_precast(xq, torch.ones(3), offs, w1, w1, w2, cache)
    with pytest.raises(ValueError, match="x must be contiguous"):
        fe.moe_experts_forward_precast(xq.t().contiguous().t(), torch.ones(t * k), offs, w1, w1,
                                       w2, cache)


def test_compile_fullgraph_cpu():
    x, scores, ids, w1, w2, w3, dout = layer_inputs("cpu", seed=21)
    cache = hf.ExpertsWeightCache()

    def f(x, s, ids, w1, w2, w3):
        return hf.moe_routed_experts(x, s, ids, w1, w2, w3, cache, float8_dtype=E4)

    leaves = [v.detach().clone().requires_grad_() for v in (x, scores, w1, w2, w3)]
    out = torch.compile(f, fullgraph=True, backend="aot_eager")(
        leaves[0], leaves[1], ids, *leaves[2:])
    out.backward(dout)
    want = run_layer(x, scores, ids, w1, w2, w3, dout, float8_dtype=E4)
    assert torch.equal(out, want[0])
    for g, w in zip([v.grad for v in leaves], want[1:]):
        assert torch.equal(g, w)


def test_opcheck_routing_ops():
    t, d, k, e = 12, 16, 2, 3
    scores, ids = routing(t, k, e, "cpu", empty=5)
    x = rnd(t, d)
    perm, offs = hf.route_slots(ids, e)
    m_cap = t * k + e * 15
    ops = torch.ops.hipfp8
    torch.library.opcheck(ops.moe_dispatch_dual.default, (x, perm, offs, k, 16, m_cap, E4, True,
                                                          True), test_utils=("test_faketensor",))
    torch.library.opcheck(ops.moe_combine_bwd_dual.default,
                          (x, scores, perm, offs, 16, m_cap, E4, True, False),
                          test_utils=("test_faketensor",))
    _, slot_row, *_ = hf.moe_dispatch_dual(x, perm, offs, k, 16, m_cap, E4)
    y = rnd(m_cap, d)
    torch.library.opcheck(ops.moe_combine.default, (y, slot_row, scores),
                          test_utils=("test_faketensor",))
    torch.library.opcheck(ops.moe_combine_bwd_scores.default, (x, y, slot_row),
                          test_utils=("test_faketensor",))
