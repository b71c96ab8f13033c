"""Bad input gives a clear Python error naming the op and the problem (checked before any C
call), and the C library's own status errors come back as hipfp8.Hipfp8Error."""

import pytest
import torch

import hipfp8
import hipfp8.torch as hf
from conftest import HAVE_GPU
import refs
from test_ops import offs_of, rnd

E4 = torch.float8_e4m3fn


def test_dtype_errors():
    with pytest.raises(TypeError, match=r"hipfp8.rowwise_2d: x must be bfloat16 or float32, got torch.float16"):
        hf.rowwise_2d(torch.zeros(4, 4, dtype=torch.float16))
    with pytest.raises(TypeError, match="dtype must be a torch float8 dtype"):
        hf.rowwise_2d(rnd(4, 4), torch.bfloat16)
    with pytest.raises(TypeError, match="MX has no FNUZ"):
        hf.mxfp8_dim0(rnd(4, 32), torch.float8_e4m3fnuz)
    with pytest.raises(TypeError, match="a must be a torch float8 tensor"):
        hf.grouped_gemm_2d3d(rnd(4, 4), rnd(1, 4, 4), offs_of([4]), torch.ones(4), torch.ones(4))


def test_layout_errors():
    with pytest.raises(ValueError, match="must be contiguous"):
        hf.rowwise_2d(rnd(8, 4).t())
    with pytest.raises(ValueError, match="must be 2-D"):
        hf.rowwise_2d(rnd(8))
    with pytest.raises(ValueError, match="column-major per expert"):
        hf.colwise_3d(rnd(2, 8, 4))  # row-major (E,K,N)
    with pytest.raises(ValueError, match="the K dims differ"):
        hf.grouped_mm(rnd(8, 16), rnd(2, 8, 12).transpose(-2, -1), offs_of([4, 4]))


def test_offsets_errors():
    x = rnd(8, 4)
    with pytest.raises(TypeError, match="offs must be int32 END offsets, got torch.int64"):
        hf.per_group_colwise(x, torch.tensor([4, 8]))
    with pytest.raises(ValueError, match="offs must be a contiguous 1-D tensor"):
        hf.per_group_colwise(x, offs_of([4, 4]).reshape(1, 2))
    with pytest.raises(TypeError, match="offs must be an int32 tensor"):
        hf.grouped_mm(rnd(8, 16), rnd(2, 12, 16).transpose(-2, -1), torch.tensor([4, 8]))
    # offsets past the extent: the C library's CPU check, raised as Hipfp8Error
    with pytest.raises(hipfp8.Hipfp8Error, match="hipfp8.per_group_colwise: .*offsets"):
        hf.per_group_colwise(x, offs_of([4, 9]))


def test_scale_errors():
    with pytest.raises(TypeError, match="scale must be a float32 tensor of one element"):
        hf.tensorwise_scaled(rnd(4, 4), torch.ones(2))


@pytest.mark.skipif(not HAVE_GPU, reason="GPU test: needs a GPU to put tensors on two devices")
def test_gpu_device_errors():
    with pytest.raises(ValueError, match="all tensors must be on one device: cuda:0 and cpu"):
        hf.per_group_colwise(rnd(8, 4, device="cuda"), offs_of([4, 4]))
    with pytest.raises(ValueError, match="all tensors must be on one device"):
        hf.per_group_colwise_dual(rnd(8, 4, device="cuda"), rnd(8, 4), offs_of([8], "cuda"))


def test_meta_tensors_get_shapes():
    """The fake kernel also serves meta tensors (shape inference without data)."""
    q, s = torch.ops.hipfp8.rowwise_2d(torch.empty(4, 6, dtype=torch.bfloat16, device="meta"), E4, True)
    assert q.device.type == "meta" and q.shape == (4, 6) and q.dtype == E4 and s.shape == (4,)


def test_checks_hold_after_a_good_call_of_the_same_shapes():
    """The kernels keep a successful call's plan by its arguments' shapes, strides, dtypes and
    devices: a bad call that shares the shapes of a good one must still fail its checks."""
    x = rnd(8, 4)
    hf.rowwise_2d(x)
    with pytest.raises(ValueError, match="must be contiguous"):
        hf.rowwise_2d(rnd(4, 8).t())  # shape (8, 4), strides (1, 8)
    with pytest.raises(TypeError, match="x must be bfloat16 or float32, got torch.float16"):
        hf.rowwise_2d(x.half())
    with pytest.raises(TypeError, match="dtype must be a torch float8 dtype"):
        torch.ops.hipfp8.rowwise_2d(x, torch.bfloat16, True)
    offs = offs_of([4, 4])
    hf.per_group_colwise(x, offs)
    with pytest.raises(TypeError, match="offs must be int32 END offsets, got torch.int64"):
        hf.per_group_colwise(x, offs.long())
    with pytest.raises(ValueError, match="offs must be a contiguous 1-D tensor"):
        hf.per_group_colwise(x, offs_of([4, 0, 4, 0])[::2])  # shape (2,), stride (2,)
    w = rnd(2, 12, 16).transpose(-2, -1)  # (E, K, N) column-major
    hf.colwise_3d(w)
    with pytest.raises(ValueError, match="column-major per expert"):
        hf.colwise_3d(rnd(2, 16, 12))  # the same shape, row-major
    a, sa = hf.rowwise_2d(rnd(8, 16))
    b, sb = hf.colwise_3d(w)
    isa, isb = sa.reciprocal(), sb.reciprocal()
    hf.grouped_gemm_2d3d(a, b, offs, isa, isb)
    with pytest.raises(TypeError, match="scale_b must be float32"):
        hf.grouped_gemm_2d3d(a, b, offs, isa, isb.double())
    with pytest.raises(TypeError, match="a must be a torch float8 tensor"):
        hf.grouped_gemm_2d3d(a.view(torch.uint8), b, offs, isa, isb)


def test_repeated_calls_get_fresh_outputs():
    """A call that reuses a kept plan allocates new outputs and computes them from its own
    inputs (the C call gets this call's pointers)."""
    x1, x2 = rnd(8, 32, seed=1), rnd(8, 32, seed=2)
    q1, s1 = hf.rowwise_2d(x1)
    q2, s2 = hf.rowwise_2d(x2)
    assert q1.data_ptr() != q2.data_ptr() and s1.data_ptr() != s2.data_ptr()
    r1, r2 = refs.rowwise(x1, E4, True), refs.rowwise(x2, E4, True)
    for got, want in ((q1, r1[0]), (s1, r1[1]), (q2, r2[0]), (s2, r2[1])):
        assert refs.same(got, want)
