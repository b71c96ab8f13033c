#!/usr/bin/env python3
"""hipfp8 from PyTorch through ctypes: no extension module, no JIT.

Quantizes a bf16 CUDA/ROCm tensor rowwise to FP8 with hipfp8, passing the tensors'
data_ptr() and torch's current stream (torch.cuda.current_stream().cuda_stream), so the
kernel is ordered with the surrounding torch work and nothing synchronises the host. Then
checks the result bit for bit against torchao's eager semantics written in torch:
    scale = fp8_max / max(amax_row, 1e-12)   (float64, stored float32)
    scale = 2 ** floor(log2(scale))          (power-of-two scales, computed exactly)
    data  = (x.float() * scale).clamp(-fp8_max, fp8_max).to(fp8 dtype)

Needs torch with a GPU and a libhipfp8 built with a GPU backend; otherwise it prints
"SKIP: <reason>" and exits 0. Exits 1 on any mismatch.

    HIPFP8_LIB=target/release/libhipfp8.so python3 ffi_examples/python/quantize_rowwise_torch.py
"""

import ctypes
import os
import sys
from ctypes import POINTER, byref, c_char_p, c_int32, c_size_t, c_uint32, c_void_p

# Values from include/hipfp8.h (stable ABI values).
HIPFP8_STATUS_SUCCESS = 0
HIPFP8_STATUS_BACKEND_UNAVAILABLE = 15
HIPFP8_BACKEND_GPU = 2
HIPFP8_DTYPE_BF16 = 0
HIPFP8_FORMAT_AUTO = 0
HIPFP8_FORMAT_E4M3FN = 2
HIPFP8_FORMAT_E4M3FNUZ = 4
HIPFP8_FLAG_POW2_SCALES = 1


class CastDesc(ctypes.Structure):
    """hipfp8_cast_2d_desc."""

    _fields_ = [
        ("size", c_size_t),
        ("input_dtype", c_uint32),
        ("format", c_uint32),
        ("flags", c_uint32),
        ("m", c_size_t),
        ("k", c_size_t),
    ]


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(0)


def find_lib():
    if os.environ.get("HIPFP8_LIB"):
        return os.environ["HIPFP8_LIB"]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for profile in ("release", "debug"):
        p = os.path.join(root, "target", profile, "libhipfp8.so")
        if os.path.exists(p):
            return p
    skip("libhipfp8.so not found (cargo build --release, or set HIPFP8_LIB)")


def load(path):
    lib = ctypes.CDLL(path)
    lib.hipfp8_status_string.restype = c_char_p
    lib.hipfp8_status_string.argtypes = [c_uint32]
    lib.hipfp8_last_error_message.restype = c_char_p
    lib.hipfp8_last_error_message.argtypes = []
    lib.hipfp8_context_create.restype = c_uint32
    lib.hipfp8_context_create.argtypes = [c_uint32, c_int32, POINTER(c_void_p)]
    lib.hipfp8_context_destroy.restype = c_uint32
    lib.hipfp8_context_destroy.argtypes = [c_void_p]
    lib.hipfp8_context_native_format.restype = c_uint32
    lib.hipfp8_context_native_format.argtypes = [c_void_p, POINTER(c_uint32)]
    lib.hipfp8_rowwise_2d.restype = c_uint32
    lib.hipfp8_rowwise_2d.argtypes = [
        c_void_p, POINTER(CastDesc),
        c_void_p, c_size_t,  # x
        c_void_p, c_size_t,  # out
        c_void_p, c_size_t,  # scales
        c_void_p,  # stream
    ]
    return lib


def check(lib, st, what):
    if st != HIPFP8_STATUS_SUCCESS:
        msg = lib.hipfp8_last_error_message().decode()
        raise RuntimeError(f"{what}: {lib.hipfp8_status_string(st).decode()} -- {msg}")


def run_case(torch, lib, ctx, fp8_dtype, fp8_max):
    """Quantize on torch's current stream and check against torch; True when equal."""
    m, k = 257, 1000
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn(m, k, device="cuda", generator=g) * 3).to(torch.bfloat16)
    x[3].zero_()  # an all-zero row
    x[5, 7] = torch.finfo(torch.bfloat16).max
    x[6, :] = torch.finfo(torch.bfloat16).tiny  # subnormal-scale row
    out = torch.empty(m, k, dtype=torch.uint8, device="cuda")
    scales = torch.empty(m, dtype=torch.float32, device="cuda")

    desc = CastDesc(ctypes.sizeof(CastDesc), HIPFP8_DTYPE_BF16, HIPFP8_FORMAT_AUTO,
                    HIPFP8_FLAG_POW2_SCALES, m, k)
    stream = torch.cuda.current_stream()
    st = lib.hipfp8_rowwise_2d(ctx, byref(desc),
                               x.data_ptr(), x.numel(),
                               out.data_ptr(), out.numel(),
                               scales.data_ptr(), scales.numel(),
                               stream.cuda_stream)
    if st == HIPFP8_STATUS_BACKEND_UNAVAILABLE:
        skip(f"rowwise_2d is not in this GPU build: {lib.hipfp8_last_error_message().decode()}")
    check(lib, st, "hipfp8_rowwise_2d")
    # Ordered on torch's stream: the torch ops below see the result without a host sync.
    amax = x.float().abs().amax(dim=1, keepdim=True)
    ref_scale = (fp8_max / amax.double().clamp(min=1e-12)).float()
    # Power of two, exactly: 2^(e-1) for scale = f * 2^e, f in [0.5, 1). (torchao writes
    # exp2(floor(log2(s))), whose f32 log2 can round a value just below 2^n up to n.)
    _, e = torch.frexp(ref_scale)
    ref_scale = torch.ldexp(torch.ones_like(ref_scale), e - 1)
    ref = (x.float() * ref_scale).clamp(-fp8_max, fp8_max).to(fp8_dtype).view(torch.uint8)
    bad_data = int((out != ref).sum())
    bad_scales = int((scales != ref_scale.squeeze(1)).sum())
    where = f"stream {stream.cuda_stream:#x}"
    if bad_data or bad_scales:
        print(f"quantize_rowwise_torch: MISMATCH on {where}: {bad_data} data bytes, {bad_scales} scales")
        return False
    print(f"quantize_rowwise_torch: OK ({m} x {k} bf16 on {torch.cuda.get_device_name()}, "
          f"{where}, format {fp8_dtype})")
    return True


def main():
    try:
        import torch
    except ImportError:
        skip("torch is not installed")
    if not torch.cuda.is_available():
        skip("torch sees no GPU")

    lib = load(find_lib())
    ctx = c_void_p()
    st = lib.hipfp8_context_create(HIPFP8_BACKEND_GPU, torch.cuda.current_device(), byref(ctx))
    if st == HIPFP8_STATUS_BACKEND_UNAVAILABLE:
        skip(f"this libhipfp8 has no usable GPU backend: {lib.hipfp8_last_error_message().decode()}")
    check(lib, st, "hipfp8_context_create")
    try:
        native = c_uint32()
        check(lib, lib.hipfp8_context_native_format(ctx, byref(native)), "native_format")
        if native.value == HIPFP8_FORMAT_E4M3FNUZ:
            fp8_dtype, fp8_max = torch.float8_e4m3fnuz, 240.0  # gfx942 (MI300)
        else:
            assert native.value == HIPFP8_FORMAT_E4M3FN
            fp8_dtype, fp8_max = torch.float8_e4m3fn, 448.0

        ok = run_case(torch, lib, ctx, fp8_dtype, fp8_max)
        # Again on a side stream: the op is queued on whatever stream torch is using.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            ok = run_case(torch, lib, ctx, fp8_dtype, fp8_max) and ok
        if not ok:
            return 1
        return 0
    finally:
        lib.hipfp8_context_destroy(ctx)


if __name__ == "__main__":
    sys.exit(main())
