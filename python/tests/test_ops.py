"""Every custom op against an independent torch reference, bit for bit (casts) or against a
float64 reference of the dequantized operands (GEMMs); fake kernels checked by opcheck; on a
GPU also GPU == CPU bit for bit. Awkward shapes: 1-row, non-multiples of 16/32/128, empty
groups."""

import pytest
import torch

import hipfp8.torch as hf
import refs
from conftest import HAVE_GPU, requires_gpu

E4 = torch.float8_e4m3fn
E5 = torch.float8_e5m2
DTYPES = [E4, E5, torch.float8_e4m3fnuz]


def rnd(*shape, dtype=torch.bfloat16, seed=0, scale=3.0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) * scale
    if x.numel() > 8:
        x.view(-1)[3] = 0.0
        x.view(-1)[5] = 1e-30  # subnormal-scale value
    return x.to(dtype).to(device)


def offs_of(sizes, device="cpu"):
    return torch.tensor(sizes, dtype=torch.int32).cumsum(0, dtype=torch.int32).to(device)


def cpu(t):
    return t.cpu()


def assert_same(got, want, what):
    got = cpu(got)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    g, w = refs.bits(got.contiguous()), refs.bits(want.contiguous())
    bad = int((g != w).sum()) if g.dtype != torch.float32 else int((g.view(torch.int32) != w.view(torch.int32)).sum())
    assert bad == 0, f"{what}: {bad} of {g.numel()} elements differ"


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", [(1, 7), (37, 130), (128, 256)])
@pytest.mark.parametrize("hp", [torch.bfloat16, torch.float32])
def test_rowwise_2d(device, dt, shape, hp):
    x = rnd(*shape, dtype=hp, device=device)
    q, s = hf.rowwise_2d(x, dt, pow2=True)
    rq, rs = refs.rowwise(cpu(x), dt, True)
    assert q.is_contiguous() and q.device.type == device
    assert_same(q, rq, "data")
    assert_same(s, rs, "scales")


@pytest.mark.parametrize("pow2", [True, False])
def test_colwise_3d_and_transpose_rhs(device, pow2):
    w = rnd(3, 40, 24, device=device)  # (E, N, K) contiguous
    bt = w.transpose(-2, -1)  # (E, K, N) column-major, as torchtitan passes it
    q, s = hf.colwise_3d(bt, E4, pow2)
    rq, rs = refs.colwise_3d(cpu(bt), E4, pow2)
    assert q.stride() == bt.stride()
    assert_same(q, rq, "colwise_3d data")
    assert_same(s, rs, "colwise_3d scales")
    q, s = hf.rowwise_3d_transpose_rhs(bt, E4, pow2)
    rq, rs = refs.transpose_rhs(cpu(bt), E4, pow2)
    assert q.shape == (3, 40, 24) and q.transpose(-2, -1).is_contiguous()
    assert_same(q, rq, "transpose_rhs data")
    assert_same(s, rs, "transpose_rhs scales")


@pytest.mark.parametrize("pow2", [True, False])
@pytest.mark.parametrize("hp", [torch.bfloat16, torch.float32])
def test_moe_weights_dual(device, pow2, hp):
    """Both weight layouts from one call: exactly colwise_3d's and rowwise_3d_transpose_rhs's
    outputs, their layouts included."""
    bt = rnd(3, 40, 24, dtype=hp, device=device, seed=4).transpose(-2, -1)
    q, s, qt, st = hf.moe_weights_dual(bt, E4, pow2)
    rq, rs = refs.colwise_3d(cpu(bt), E4, pow2)
    rqt, rst = refs.transpose_rhs(cpu(bt), E4, pow2)
    assert q.stride() == bt.stride() and qt.transpose(-2, -1).is_contiguous()
    assert_same(q, rq, "data")
    assert_same(s, rs, "scales")
    assert_same(qt, rqt, "transposed data")
    assert_same(st, rst, "transposed scales")


SIZES = [[5, 0, 40, 19], [64], [0, 0, 33], [1, 1, 1, 30]]


@pytest.mark.parametrize("sizes", SIZES)
def test_per_group_colwise_and_dual(device, sizes):
    m = sum(sizes)
    x1 = rnd(m, 48, device=device, seed=1)
    x2 = rnd(m, 20, device=device, seed=2)
    offs = offs_of(sizes, device)
    q, s = hf.per_group_colwise(x1, offs, E4)
    rq, rs = refs.per_group_colwise(cpu(x1), cpu(offs), E4, True)
    assert q.stride() == (1, m)
    assert_same(q, rq, "per_group_colwise data")
    assert_same(s, rs, "per_group_colwise scales")
    q1, s1, q2, s2 = hf.per_group_colwise_dual(x1, x2, offs, E4)
    rq2, rs2 = refs.per_group_colwise(cpu(x2), cpu(offs), E4, True)
    assert_same(q1, rq, "dual data 1")
    assert_same(s1, rs, "dual scales 1")
    assert_same(q2, rq2, "dual data 2")
    assert_same(s2, rs2, "dual scales 2")


@pytest.mark.parametrize("sizes", SIZES + [[3, 17, 0, 1, 45]])
@pytest.mark.parametrize("hp", [torch.bfloat16, torch.float32])
def test_per_group_colwise_dual_padded(device, sizes, hp):
    """The padded dual cast equals per_group_colwise_dual over the explicitly zero-padded
    inputs (each group copied to a 16-row aligned start) with the padded offsets: the same
    bytes (zero rows to m_cap), the unpadded op's scales, the padded END offsets."""
    m, g = sum(sizes), len(sizes)
    x1 = rnd(m, 48, dtype=hp, device=device, seed=3)
    x2 = rnd(m, 20, dtype=hp, device=device, seed=4)
    offs = offs_of(sizes, device)
    q1, s1, q2, s2, po = hf.per_group_colwise_dual_padded(x1, x2, offs, E4)
    m_cap = (m + 15 * g + 15) // 16 * 16
    assert q1.shape == (m_cap, 48) and q1.stride() == (1, m_cap)
    assert q2.shape == (m_cap, 20) and q2.stride() == (1, m_cap)
    padded = [(s + 15) // 16 * 16 for s in sizes]
    assert_same(po, offs_of(padded), "padded offsets")
    # the composition: zero-padded inputs of m_cap rows (the rows past the last padded group
    # a group of their own, dropped from the scales)
    p1 = torch.zeros(m_cap, 48, dtype=hp)
    p2 = torch.zeros(m_cap, 20, dtype=hp)
    lo = lp = 0
    for s, ps in zip(sizes, padded):
        p1[lp:lp + s] = cpu(x1)[lo:lo + s]
        p2[lp:lp + s] = cpu(x2)[lo:lo + s]
        lo, lp = lo + s, lp + ps
    offs_all = torch.cat([offs_of(padded), torch.tensor([m_cap], dtype=torch.int32)])
    w1, ws1, w2, ws2 = hf.per_group_colwise_dual(p1, p2, offs_all, E4)
    assert_same(q1, w1, "data 1")
    assert_same(q2, w2, "data 2")
    assert_same(s1, ws1[:g], "scales 1")
    assert_same(s2, ws2[:g], "scales 2")
    # and the scales are the unpadded op's
    _, us1, _, us2 = hf.per_group_colwise_dual(x1, x2, offs, E4)
    assert_same(s1, cpu(us1), "scales 1 vs unpadded")
    assert_same(s2, cpu(us2), "scales 2 vs unpadded")


@pytest.mark.parametrize("sizes", SIZES)
def test_per_group_rowwise(device, sizes):
    k = sum(sizes)
    x = rnd(29, k, device=device)
    offs = offs_of(sizes, device)
    q, s = hf.per_group_rowwise(x, offs, E4)
    rq, rs = refs.per_group_rowwise(cpu(x), cpu(offs), E4, True)
    assert_same(q, rq, "data")
    assert_same(s, rs, "scales")


@pytest.mark.parametrize("pow2", [False, True])
def test_tensorwise_and_scaled(device, pow2):
    x = rnd(3, 50, 7, device=device)
    q, s, a = hf.tensorwise(x, E5, pow2)
    rq, rs, ra = refs.tensorwise(cpu(x), E5, pow2)
    assert q.shape == x.shape and s.shape == () and a.shape == ()
    assert_same(q, rq, "data")
    assert_same(s, rs, "scale")
    assert_same(a, ra, "amax")
    scale = torch.tensor([0.75], device=device)
    q, a = hf.tensorwise_scaled(x, scale, E4)
    rq, ra = refs.scaled(cpu(x), cpu(scale), E4)
    assert_same(q, rq, "scaled data")
    assert_same(a, ra, "scaled amax")


@pytest.mark.parametrize("rowwise", [False, True])
@pytest.mark.parametrize("shape", [(1, 5), (33, 70), (128, 64)])
def test_cast_transpose(device, rowwise, shape):
    x = rnd(*shape, device=device)
    pow2 = rowwise
    q, qt, s, st = hf.cast_transpose(x, E4, pow2, rowwise)
    assert qt.shape == (shape[1], shape[0]) and qt.is_contiguous()
    if rowwise:
        rq, rs = refs.rowwise(cpu(x), E4, pow2)
        rqt, rst = refs.rowwise(cpu(x).t(), E4, pow2)
        assert_same(s, rs, "scales")
        assert_same(st, rst, "scales_t")
    else:
        rq, rs, _ = refs.tensorwise(cpu(x), E4, pow2)
        rqt = rq.t()
        assert_same(s, rs, "scale")
        assert_same(st, rs, "scale_t")
    assert_same(q, rq, "data")
    assert_same(qt, rqt, "data_t")


def test_cast_transpose_scaled(device):
    x = rnd(40, 24, device=device)
    scale = torch.tensor([2.5], device=device)
    q, qt, a = hf.cast_transpose_scaled(x, scale, E5)
    rq, ra = refs.scaled(cpu(x), cpu(scale), E5)
    assert_same(q, rq, "data")
    assert_same(qt, rq.t(), "data_t")
    assert_same(a, ra, "amax")


@pytest.mark.parametrize("tile", ["1x128", "128x128"])
def test_blockwise(device, tile):
    x = rnd(130, 300, device=device)
    f = hf.blockwise_1x128 if tile == "1x128" else hf.blockwise_128x128
    q, s = f(x, E4)
    rq, rs = refs.blockwise(cpu(x), E4, False, 1 if tile == "1x128" else 128, 128)
    assert_same(q, rq, "data")
    assert_same(s, rs, "scales")


def test_rowwise_2d_padded(device):
    sizes = [5, 0, 16, 21]
    x = rnd(sum(sizes), 40, device=device)
    offs = offs_of(sizes, device)
    q, s, po = hf.rowwise_2d_padded(x, offs, E4)
    assert q.shape == (sum(sizes) + 15 * len(sizes), 40)
    rq, rs, rpo = refs.padded(cpu(x), cpu(offs), E4, True)
    end = int(rpo[-1])
    assert_same(po, rpo, "padded offsets")
    assert_same(q[:end], rq, "data")
    assert_same(s[:end], rs, "scales")


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("rceil", [False, True])
@pytest.mark.parametrize("dt", [E4, E5])
def test_mxfp8(device, dim, rceil, dt):
    x = rnd(33, 70, device=device, scale=100.0)
    q, s = (hf.mxfp8_dim0 if dim == 0 else hf.mxfp8_dim1)(x, dt, rceil)
    assert s.dtype == hf.E8M0
    rq, rs = refs.mx(cpu(x), dt, rceil, dim)
    assert_same(q, rq, "data")
    assert_same(s.view(torch.uint8), rs, "E8M0 scales")


def _deq_rows(q, s):
    return q.cpu().double() / s.cpu().double()


def test_grouped_gemm_2d3d(device):
    sizes = [7, 0, 33, 24]
    e, k, n = len(sizes), 64, 48
    a = rnd(sum(sizes), k, device=device)
    bt = rnd(e, n, k, device=device, seed=3).transpose(-2, -1)
    offs = offs_of(sizes, device)
    a8, sa = hf.rowwise_2d(a, E4)
    b8, sb = hf.colwise_3d(bt, E4)
    out = hf.grouped_gemm_2d3d(a8, b8, offs, sa.reciprocal(), sb.reciprocal())
    assert out.shape == (sum(sizes), n) and out.dtype == torch.bfloat16
    A = _deq_rows(a8, sa[:, None])
    B = b8.cpu().double() / sb.cpu().double()[:, None, :]
    ref = torch.cat([A[s:t] @ B[g] for g, (s, t) in enumerate(refs.groups(offs.cpu()))])
    # f32 accumulation + bf16 rounding; atol relative to the output's scale (an element that
    # cancels to near zero keeps the absolute error of its large terms)
    torch.testing.assert_close(out.cpu().double(), ref, rtol=2 ** -7, atol=ref.abs().max().item() * 2 ** -9)


def test_grouped_gemm_2d2d(device):
    sizes = [9, 0, 40, 15]
    m, n, k = sum(sizes), 24, 40
    dy = rnd(m, n, device=device, seed=4)
    x = rnd(m, k, device=device, seed=5)
    offs = offs_of(sizes, device)
    dy8, sdy, x8, sx = hf.per_group_colwise_dual(dy, x, offs, E4)
    out = hf.grouped_gemm_2d2d(dy8.t(), x8, offs, sdy.reciprocal(), sx.reciprocal())
    assert out.shape == (len(sizes), n, k)
    DY, X, SDY, SX = dy8.cpu().double(), x8.cpu().double(), sdy.cpu().double(), sx.cpu().double()
    ref = torch.stack([(DY[s:t] / SDY[g]).t() @ (X[s:t] / SX[g])
                       for g, (s, t) in enumerate(refs.groups(offs.cpu()))])
    torch.testing.assert_close(out.cpu().double(), ref, rtol=2 ** -7, atol=ref.abs().max().item() * 2 ** -9)
    assert torch.count_nonzero(out[1]) == 0  # the empty group gives zeros


def test_grouped_gemm_plan(device):
    """The plan query names what the GEMM call runs: the host reference on a CPU context; on
    a GPU a library or the reference kernel with its reason. Bad arguments fail as the call's."""
    sizes = [7, 0, 33, 24]
    e, k, n = len(sizes), 64, 48
    offs = offs_of(sizes, device)
    a8, sa = hf.rowwise_2d(rnd(sum(sizes), k, device=device), E4)
    b8, sb = hf.colwise_3d(rnd(e, n, k, device=device, seed=3).transpose(-2, -1), E4)
    d8, sd, x8, sx = hf.per_group_colwise_dual(rnd(sum(sizes), n, device=device, seed=4),
                                               rnd(sum(sizes), k, device=device, seed=5), offs, E4)
    plans = {
        "2d3d": hf.grouped_gemm_plan(a8, b8, offs, sa.reciprocal(), sb.reciprocal()),
        "2d2d": hf.grouped_gemm_plan(d8.t(), x8, offs, sd.reciprocal(), sx.reciprocal()),
    }
    for kind, p in plans.items():
        assert isinstance(p, hf.GemmPlan) and p.description, (kind, p)
        if device == "cpu":
            assert (p.implementation, p.reason) == ("cpu", None), (kind, p)
        else:
            assert p.implementation in ("reference", "cutlass-sm90", "ck-gfx942", "ck-gfx950"), p
            assert (p.reason is None) == (p.implementation != "reference"), (kind, p)
            if torch.cuda.get_device_capability() == (9, 0):
                assert p.implementation == "cutlass-sm90", (kind, p)
    if device != "cpu" and torch.cuda.get_device_capability() == (9, 0):
        # no CUTLASS instance for E5M2 x E5M2: the reference kernel, and the plan says why
        a5, sa5 = hf.rowwise_2d(rnd(sum(sizes), k, device=device), E5)
        b5, sb5 = hf.colwise_3d(rnd(e, n, k, device=device, seed=3).transpose(-2, -1), E5)
        p = hf.grouped_gemm_plan(a5, b5, offs, sa5.reciprocal(), sb5.reciprocal())
        assert (p.implementation, p.reason) == ("reference", "format-pair"), p
    # bad input: the call's own checks and messages
    with pytest.raises(ValueError, match="K dims differ"):
        hf.grouped_gemm_plan(a8[:, :32].contiguous(), b8, offs, sa, sb)
    with pytest.raises(ValueError, match="K dims differ"):
        hf.grouped_gemm_2d3d(a8[:, :32].contiguous(), b8, offs, sa, sb)


# ---- fake kernels: shapes, strides, dtypes (torch.library.opcheck) --------------------------

def _opcheck_cases(device):
    x = rnd(33, 40, device=device)
    bt = rnd(3, 24, 40, device=device).transpose(-2, -1)
    offs = offs_of([10, 0, 23], device)
    koffs = offs_of([16, 24], device)
    sc = torch.tensor([1.5], device=device)
    a8, sa = hf.rowwise_2d(x, E4)
    b8, sb = hf.colwise_3d(rnd(3, 16, 40, device=device).transpose(-2, -1), E4)
    d8, sd, x8, sx = hf.per_group_colwise_dual(x, rnd(33, 24, device=device), offs, E4)
    ops = torch.ops.hipfp8
    return [
        (ops.rowwise_2d, (x, E4, True)),
        (ops.colwise_3d, (bt, E4, True)),
        (ops.rowwise_3d_transpose_rhs, (bt, E5, False)),
        (ops.moe_weights_dual, (bt, E4, True)),
        (ops.per_group_colwise, (x, offs, E4, True)),
        (ops.per_group_colwise_dual, (x, x, offs, E4, True)),
        (ops.per_group_colwise_dual_padded, (x, x, offs, E4, True)),
        (ops.per_group_rowwise, (x, koffs, E4, True)),
        (ops.tensorwise, (x, E4, False)),
        (ops.tensorwise_scaled, (x, sc, E4)),
        (ops.blockwise_1x128, (x, E4, False)),
        (ops.blockwise_128x128, (x, E4, False)),
        (ops.cast_transpose, (x, E4, False, False)),
        (ops.cast_transpose, (x, E4, True, True)),
        (ops.cast_transpose_scaled, (x, sc, E5)),
        (ops.mxfp8_dim0, (x, E4, False)),
        (ops.mxfp8_dim1, (x, E5, True)),
        (ops.grouped_gemm_2d3d, (a8, b8, offs, sa.reciprocal(), sb.reciprocal())),
        (ops.grouped_gemm_2d2d, (d8.t(), x8, offs, sd.reciprocal(), sx.reciprocal())),
    ]


def test_opcheck(device):
    """Fake kernel vs real outputs (shapes, strides, dtypes), AOT dispatch with dynamic shapes.
    (rowwise_2d_padded leaves rows past the padded end unwritten, so its values are not
    comparable run to run: test_fake_shapes_match_real checks its metadata.)"""
    for op, args in _opcheck_cases(device):
        # (test_schema is left out: its SchemaCheckMode multiplies outputs, which
        # torch does not implement for float8 dtypes on the CPU.)
        torch.library.opcheck(op, args, test_utils=("test_faketensor", "test_aot_dispatch_dynamic"))


def test_fake_shapes_match_real(device):
    from torch._subclasses.fake_tensor import FakeTensorMode
    x = rnd(37, 40, device=device)
    offs = offs_of([5, 0, 32], device)
    real = torch.ops.hipfp8.rowwise_2d_padded(x, offs, E4, True)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fx, foffs = mode.from_tensor(x), mode.from_tensor(offs)
        fake = torch.ops.hipfp8.rowwise_2d_padded(fx, foffs, E4, True)
    for r, f in zip(real, fake):
        assert (r.shape, r.stride(), r.dtype) == (f.shape, f.stride(), f.dtype)


@requires_gpu
@pytest.mark.parametrize("dt", [E4, E5])
def test_gpu_equals_cpu_every_cast(dt):
    """The GPU backend gives the CPU backend's bytes for every cast (same inputs)."""
    assert HAVE_GPU
    x = rnd(300, 520, scale=5.0)
    offs = offs_of([100, 0, 37, 163])
    bt = rnd(4, 96, 80).transpose(-2, -1)
    sc = torch.tensor([3.0])
    cases = [
        lambda x, offs, bt, sc: hf.rowwise_2d(x, dt),
        lambda x, offs, bt, sc: hf.colwise_3d(bt, dt),
        lambda x, offs, bt, sc: hf.rowwise_3d_transpose_rhs(bt, dt),
        lambda x, offs, bt, sc: hf.moe_weights_dual(bt, dt),
        lambda x, offs, bt, sc: hf.per_group_colwise(x, offs, dt),
        lambda x, offs, bt, sc: hf.per_group_colwise_dual(x, x[:, :77].contiguous(), offs, dt),
        lambda x, offs, bt, sc: hf.per_group_colwise_dual_padded(x, x[:, :77].contiguous(), offs,
                                                                 dt),
        lambda x, offs, bt, sc: hf.per_group_rowwise(x[:, :300].contiguous(), offs, dt),
        lambda x, offs, bt, sc: hf.tensorwise(x, dt),
        lambda x, offs, bt, sc: hf.tensorwise_scaled(x, sc, dt),
        lambda x, offs, bt, sc: hf.blockwise_1x128(x, dt),
        lambda x, offs, bt, sc: hf.blockwise_128x128(x, dt),
        lambda x, offs, bt, sc: hf.cast_transpose(x, dt, False, False),
        lambda x, offs, bt, sc: hf.cast_transpose(x, dt, True, True),
        lambda x, offs, bt, sc: hf.cast_transpose_scaled(x, sc, dt),
        lambda x, offs, bt, sc: hf.mxfp8_dim0(x, dt, False),
        lambda x, offs, bt, sc: hf.mxfp8_dim1(x, dt, True),
    ]
    for i, f in enumerate(cases):
        want = f(x, offs, bt, sc)
        got = f(x.cuda(), offs.cuda(), bt.cuda(), sc.cuda())
        for j, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"case {i} output {j}")
    # padded: compare the written rows only
    w = hf.rowwise_2d_padded(x, offs, dt)
    g = hf.rowwise_2d_padded(x.cuda(), offs.cuda(), dt)
    end = int(w[2][-1])
    assert_same(g[2], w[2], "padded offsets")
    assert_same(g[0][:end], w[0][:end], "padded data")
    assert_same(g[1][:end], w[1][:end], "padded scales")
