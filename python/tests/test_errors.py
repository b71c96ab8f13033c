"""Bad input gives a clear Python error naming the op and the problem (checked before any C
call), and the C library's own status errors come back as hipfp8.Hipfp8Error."""

import pytest
import torch

import hipfp8
import hipfp8.torch as hf
from conftest import HAVE_GPU
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
