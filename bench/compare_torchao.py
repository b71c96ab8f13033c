#!/usr/bin/env python3
"""hipfp8 vs torchao 0.18 on the H200, in ONE process, timed the same way.

Torch tensors in; hipfp8 through its C ABI (libhipfp8.so, ctypes) on
torch.cuda.current_stream().cuda_stream; torchao's Triton kernels (and the eager reference
functions where those are the definition); both timed with
triton.testing.do_bench(..., return_mode="median"). The device copy bandwidth (torch copy_ of
2 GiB, bytes read + written) is measured in the same process and is the yardstick for % of copy.

Exactness: hipfp8's FP8 bytes and scales are compared with a torchao reference, bit for bit:
  * balanced groups, 3D and 2D rowwise: torchao's Triton kernel output (equal to its eager
    reference on finite inputs);
  * skewed (Zipf) groups: torchao's Triton per-group kernel is NOT a reference there (it sizes its
    tile from the average group and leaves rows of big groups unprocessed, see BENCHMARKS.md), so
    the reference is torchao's eager definition (float8_utils.tensor_to_scale + to_fp8_saturated,
    per group, exactly what torch_to_float8_per_group_* does), with empty groups given
    amax_to_scale(0) because the eager functions fail on them. The torchao time reported next to
    a skewed case is the time of its (wrong) Triton kernel, marked "wrong bytes".
  * per_group_rowwise: torchao 0.18's Triton kernel writes its data with a bad output stride
    (row + col), so its bytes are not comparable; the eager reference is used, timing marked.
  * blockwise 1x128 / 128x128: torchao's Triton kernels (act_quant_lhs, weight_quant_rhs) store
    DEQUANT scales and round no scale to a power of 2: compared with pow2 off, same FP8 bytes
    (logically: weight_quant_rhs writes column-major) and torchao scale == 1 / ours.
  * rowwise_2d_padded: torchao's sm_90 path, torch_pad_token_groups (eager; its fused kernel
    needs sm_100) + its Triton rowwise cast; offsets, bytes and scales up to the padded end.
  * tensorwise / cast_transpose: torchao has no dedicated kernel; its float8 training runs
    tensor_to_scale + to_fp8_saturated under torch.compile, so the time is that of
    torch.compile(...) of the eager functions (inductor's fused Triton kernels), the eager time in
    the note; the reference bytes are the eager ones, and the note says whether the compiled
    bytes equal them.
  * tensorwise_scaled / cast_transpose_scaled (delayed scaling, the caller's scale): torchao has no
    kernel; the time is torch.compile of to_fp8_saturated(x * scale) (+ the transpose copy) and
    tensor_to_amax, the reference bytes and amax the eager ones.
  * MXFP8: the reference is torchao's eager to_mx; the time is torchao's Triton kernel, which
    torchao 0.18 only defines on sm_100+ (see load_mx_kernels for how it is run on sm_90); its
    bytes are checked against ours too.
Writes bench/results/h200-latest.json (list of {op, shape, us, gbps, pct_copy, torchao_us,
exact_match, ...}) and .md into $OUT (or bench/results/).

    HIPFP8_LIB=path/libhipfp8.so PYTHONPATH=<torchao> python3 bench/compare_torchao.py [--quick]
        [--only op1,op2] [--tag NAME]   # a subset; results go to h200-NAME.{json,md}
"""

import ctypes
import json
import os
import sys
import time
import traceback
from ctypes import POINTER, byref, c_char_p, c_int32, c_size_t, c_uint32, c_void_p

import torch
import triton
from triton.testing import do_bench

QUICK = "--quick" in sys.argv
ONLY = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
TAG = sys.argv[sys.argv.index("--tag") + 1] if "--tag" in sys.argv else "latest"
dev = torch.device("cuda")
F8 = torch.float8_e4m3fn
FMT_E4M3FN = 2
DT_BF16 = 0
FLAG_POW2 = 1

# ------------------------------------------------------------------------------ hipfp8 C ABI


class Cast2d(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("input_dtype", c_uint32), ("format", c_uint32), ("flags", c_uint32),
                ("m", c_size_t), ("k", c_size_t)]


class Cast3d(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("input_dtype", c_uint32), ("format", c_uint32), ("flags", c_uint32),
                ("e", c_size_t), ("k", c_size_t), ("n", c_size_t)]


class CastDual(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("input_dtype", c_uint32), ("format", c_uint32), ("flags", c_uint32),
                ("input_dtype2", c_uint32), ("m", c_size_t), ("k1", c_size_t), ("k2", c_size_t)]


class Tensorwise(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("input_dtype", c_uint32), ("format", c_uint32), ("flags", c_uint32),
                ("n", c_size_t)]


class CastT(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("input_dtype", c_uint32), ("format", c_uint32), ("flags", c_uint32),
                ("scaling", c_uint32), ("m", c_size_t), ("k", c_size_t)]


class Padded(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("input_dtype", c_uint32), ("format", c_uint32), ("flags", c_uint32),
                ("m", c_size_t), ("k", c_size_t), ("m_cap", c_size_t)]


class Mx(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("input_dtype", c_uint32), ("format", c_uint32), ("rounding", c_uint32),
                ("m", c_size_t), ("k", c_size_t)]


def load_lib():
    path = os.environ.get("HIPFP8_LIB")
    if not path:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        path = os.path.join(here, "target", "release", "libhipfp8.so")
    lib = ctypes.CDLL(path)
    lib.hipfp8_status_string.restype = c_char_p
    lib.hipfp8_status_string.argtypes = [c_uint32]
    lib.hipfp8_last_error_message.restype = c_char_p
    lib.hipfp8_context_create.restype = c_uint32
    lib.hipfp8_context_create.argtypes = [c_uint32, c_int32, POINTER(c_void_p)]
    for name in ("rowwise_2d", "colwise_3d", "rowwise_3d_transpose_rhs", "per_group_colwise",
                 "per_group_colwise_dual", "per_group_rowwise", "tensorwise", "cast_transpose",
                 "mxfp8_dim0", "mxfp8_dim1", "blockwise_1x128", "blockwise_128x128", "rowwise_2d_padded",
                 "tensorwise_scaled", "cast_transpose_scaled"):
        f = getattr(lib, "hipfp8_" + name)
        f.restype = c_uint32  # argtypes left open: every argument is passed as an int / pointer
    return lib


LIB = load_lib()
CTX = c_void_p()


def check(st, what):
    if st != 0:
        raise RuntimeError(f"{what}: {LIB.hipfp8_status_string(st).decode()} -- "
                           f"{LIB.hipfp8_last_error_message().decode()}")


def P(t):
    return c_void_p(t.data_ptr())


def S(n):
    return c_size_t(n)


def stream():
    return c_void_p(torch.cuda.current_stream().cuda_stream)


def D2(m, k):
    return Cast2d(ctypes.sizeof(Cast2d), DT_BF16, FMT_E4M3FN, FLAG_POW2, m, k)


# ------------------------------------------------------------------------------ helpers

def bench(fn):
    return do_bench(fn, warmup=10 if QUICK else 25, rep=40 if QUICK else 120, return_mode="median") * 1e3  # us


def u8(t):
    """The storage bytes of an fp8/uint8 tensor in memory order (any strides, dense)."""
    t = t.view(torch.uint8) if t.dtype != torch.uint8 else t
    return torch.as_strided(t, (t.numel(),), (1,), t.storage_offset())


def same_bytes(a, b):
    a, b = u8(a).flatten(), u8(b).flatten()
    if a.numel() != b.numel():
        return False, f"size {a.numel()} vs {b.numel()}"
    ne = (a != b).sum().item()
    return ne == 0, f"{ne} of {a.numel()} bytes differ"


def same_f32(a, b):
    a = a.contiguous().flatten().view(torch.int32)
    b = b.contiguous().flatten().view(torch.int32)
    if a.numel() != b.numel():
        return False, f"{a.numel()} vs {b.numel()} scales"
    ne = (a != b).sum().item()
    return ne == 0, f"{ne} of {a.numel()} scales differ"


def zipf_sizes(m, e):
    nz = e - 2
    w = [1.0 / (i + 1) ** 1.2 for i in range(nz)]
    tot = sum(w)
    s = [int(round(x / tot * m / 16.0)) * 16 for x in w]
    s[0] += m - sum(s)
    return s + [0, 0]


def ends(sizes):
    out, acc = [], 0
    for s in sizes:
        acc += s
        out.append(acc)
    return torch.tensor(out, dtype=torch.int32, device=dev)


def ao_scale(amax):
    from torchao.float8.float8_utils import amax_to_scale
    return amax_to_scale(amax, F8, round_scales_to_power_of_2=True)


def eager_per_group_colwise(x, offs_list):
    """torchao's eager definition per group of rows; empty groups -> amax_to_scale(0)."""
    from torchao.float8.float8_utils import ScalingGranularity, tensor_to_scale, to_fp8_saturated
    m, k = x.shape
    data = torch.empty((m, k), dtype=F8, device=dev)
    scales = []
    start = 0
    for end in offs_list:
        if end > start:
            sub = x[start:end]
            s = tensor_to_scale(sub, F8, scaling_granularity=ScalingGranularity.AXISWISE, axiswise_dim=0,
                                round_scales_to_power_of_2=True)
            data[start:end] = to_fp8_saturated(sub.to(torch.float32) * s, F8)
            scales.append(s.reshape(-1))
        else:
            scales.append(ao_scale(torch.zeros(k, device=dev, dtype=torch.float32)).reshape(-1))
        start = end
    return data.t().contiguous(), torch.cat(scales)  # column-major bytes [k*m + row]


def eager_per_group_rowwise(x, offs_list):
    from torchao.float8.float8_utils import ScalingGranularity, tensor_to_scale, to_fp8_saturated
    m, k = x.shape
    data = torch.empty((m, k), dtype=F8, device=dev)
    scales = []
    start = 0
    for end in offs_list:
        if end > start:
            sub = x[:, start:end]
            s = tensor_to_scale(sub, F8, scaling_granularity=ScalingGranularity.AXISWISE, axiswise_dim=-1,
                                round_scales_to_power_of_2=True)
            data[:, start:end] = to_fp8_saturated(sub.to(torch.float32) * s, F8)
            scales.append(s.reshape(-1))
        else:
            scales.append(ao_scale(torch.zeros(m, device=dev, dtype=torch.float32)).reshape(-1))
        start = end
    return data, torch.cat(scales)


ROWS = []
COPY_GBPS = None


def add(op, shape, groups, us, nbytes, ao_us, exact, note=""):
    gbps = nbytes / (us * 1e-6) / 1e9
    pct = 100.0 * gbps / COPY_GBPS
    r = {"op": op, "shape": shape, "groups": groups, "us": round(us, 2), "gbps": round(gbps, 1),
         "pct_copy": round(pct, 1), "torchao_us": None if ao_us is None else round(ao_us, 2),
         "speedup_vs_torchao": None if ao_us is None else round(ao_us / us, 2), "exact_match": exact,
         "note": note}
    ROWS.append(r)
    ratio = "" if ao_us is None else f"torchao {ao_us:9.1f} us  x{ao_us / us:5.2f}"
    print(f"{op:28} {shape:22} {groups:9} {us:9.1f} us {gbps:6.0f} GB/s {pct:5.1f}%  {ratio}  exact={exact} {note}",
          flush=True)


def run(name, fn):
    if ONLY and not any(name.startswith(o) for o in ONLY):
        return
    try:
        fn()
    except Exception as e:  # keep going: one broken op must not hide the others
        traceback.print_exc()
        ROWS.append({"op": name, "error": repr(e)})
        print(f"{name}: ERROR {e!r}", flush=True)


# ------------------------------------------------------------------------------ ops

MT, E, H, I = 32768, 32, 7168, 2048


def rowwise_2d_case(m, k):
    from torchao.prototype.moe_training.kernels.float8_rowwise import triton_fp8_rowwise_2d_scale_and_cast
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    out = torch.empty(m * k, dtype=torch.uint8, device=dev)
    sc = torch.empty(m, dtype=torch.float32, device=dev)
    d = D2(m, k)

    def hip():
        check(LIB.hipfp8_rowwise_2d(CTX, byref(d), P(x), S(m * k), P(out), S(m * k), P(sc), S(m), stream()),
              "rowwise_2d")
    hip()
    ao_d, ao_s = triton_fp8_rowwise_2d_scale_and_cast(x, F8, True)
    ok1, why1 = same_bytes(out, ao_d)
    ok2, why2 = same_f32(sc, ao_s)
    us = bench(hip)
    ao_us = bench(lambda: triton_fp8_rowwise_2d_scale_and_cast(x, F8, True))
    add("rowwise_2d", f"({m},{k})", "", us, 3 * m * k + 4 * m, ao_us, ok1 and ok2,
        "" if ok1 and ok2 else f"{why1}; {why2}")


def per_group_colwise_case(m, k, kind):
    from torchao.prototype.moe_training.kernels.jagged_float8_scales import triton_fp8_per_group_colwise_scales
    sizes = [m // E] * E if kind == "balanced" else zipf_sizes(m, E)
    offs = ends(sizes)
    ol = offs.tolist()
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    out = torch.empty(m * k, dtype=torch.uint8, device=dev)
    sc = torch.empty(E * k, dtype=torch.float32, device=dev)
    d = D2(m, k)

    def hip():
        check(LIB.hipfp8_per_group_colwise(CTX, byref(d), P(x), S(m * k), P(offs), S(E), P(out), S(m * k), P(sc),
                                           S(E * k), stream()), "per_group_colwise")
    hip()
    if kind == "balanced":
        ref_d, ref_s = triton_fp8_per_group_colwise_scales(x, offs, F8, True)
        note = "ref: torchao Triton"
    else:
        ref_d, ref_s = eager_per_group_colwise(x, ol)
        ao_d, _ = triton_fp8_per_group_colwise_scales(x, offs, F8, True)
        _, why = same_bytes(ao_d, ref_d)
        note = f"ref: torchao eager per group; torchao Triton time is of WRONG bytes ({why})"
    ok1, why1 = same_bytes(out, ref_d)
    ok2, why2 = same_f32(sc, ref_s)
    us = bench(hip)
    ao_us = bench(lambda: triton_fp8_per_group_colwise_scales(x, offs, F8, True))
    add("per_group_colwise", f"({m},{k})", kind, us, 3 * m * k + 4 * E * k, ao_us, ok1 and ok2,
        note + ("" if ok1 and ok2 else f"; MISMATCH {why1}; {why2}"))


def dual_case(kind):
    from torchao.prototype.moe_training.kernels.jagged_float8_scales import (
        triton_fp8_per_group_colwise_scales_dual)
    m, k1, k2 = MT, I, H
    sizes = [m // E] * E if kind == "balanced" else zipf_sizes(m, E)
    offs = ends(sizes)
    ol = offs.tolist()
    x1 = torch.randn(m, k1, device=dev, dtype=torch.bfloat16)
    x2 = torch.randn(m, k2, device=dev, dtype=torch.bfloat16)
    o1 = torch.empty(m * k1, dtype=torch.uint8, device=dev)
    o2 = torch.empty(m * k2, dtype=torch.uint8, device=dev)
    s1 = torch.empty(E * k1, dtype=torch.float32, device=dev)
    s2 = torch.empty(E * k2, dtype=torch.float32, device=dev)
    d = CastDual(ctypes.sizeof(CastDual), DT_BF16, FMT_E4M3FN, FLAG_POW2, DT_BF16, m, k1, k2)

    def hip():
        check(LIB.hipfp8_per_group_colwise_dual(CTX, byref(d), P(x1), S(m * k1), P(x2), S(m * k2), P(offs), S(E),
                                                P(o1), S(m * k1), P(s1), S(E * k1), P(o2), S(m * k2), P(s2),
                                                S(E * k2), stream()), "dual")
    hip()
    if kind == "balanced":
        r1, rs1, r2, rs2 = triton_fp8_per_group_colwise_scales_dual(x1, x2, offs, F8, True)
        note = "ref: torchao Triton"
    else:
        r1, rs1 = eager_per_group_colwise(x1, ol)
        r2, rs2 = eager_per_group_colwise(x2, ol)
        note = "ref: torchao eager per group; torchao Triton time is of WRONG bytes"
    oks = [same_bytes(o1, r1), same_f32(s1, rs1), same_bytes(o2, r2), same_f32(s2, rs2)]
    ok = all(o for o, _ in oks)
    us = bench(hip)
    ao_us = bench(lambda: triton_fp8_per_group_colwise_scales_dual(x1, x2, offs, F8, True))
    add("per_group_colwise_dual", f"({m},{k1})+({m},{k2})", kind, us, 3 * m * (k1 + k2) + 4 * E * (k1 + k2), ao_us,
        ok, note + ("" if ok else "; MISMATCH " + "; ".join(w for _, w in oks)))


def per_group_rowwise_case(m, k, kind):
    from torchao.prototype.moe_training.kernels.jagged_float8_scales import triton_fp8_per_group_rowwise_scales
    sizes = [k // E] * E if kind == "balanced" else zipf_sizes(k, E)
    offs = ends(sizes)
    ol = offs.tolist()
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    out = torch.empty(m * k, dtype=torch.uint8, device=dev)
    sc = torch.empty(E * m, dtype=torch.float32, device=dev)
    d = D2(m, k)

    def hip():
        check(LIB.hipfp8_per_group_rowwise(CTX, byref(d), P(x), S(m * k), P(offs), S(E), P(out), S(m * k), P(sc),
                                           S(E * m), stream()), "per_group_rowwise")
    hip()
    ref_d, ref_s = eager_per_group_rowwise(x, ol)
    ok1, why1 = same_bytes(out, ref_d)
    ok2, why2 = same_f32(sc, ref_s)
    us = bench(hip)
    ao_us = bench(lambda: triton_fp8_per_group_rowwise_scales(x, offs, F8, True))
    add("per_group_rowwise", f"({m},{k})", kind, us, 3 * m * k + 4 * E * m, ao_us, ok1 and ok2,
        "ref: torchao eager per group (torchao 0.18 Triton writes data with a bad stride; its time is of wrong bytes)"
        + ("" if ok1 and ok2 else f"; MISMATCH {why1}; {why2}"))


def colwise_3d_case(k, n):
    from torchao.prototype.moe_training.kernels.float8_rowwise import (
        triton_fp8_colwise_3d_scale_and_cast, triton_fp8_rowwise_3d_transpose_rhs)
    bt = torch.randn(E, n, k, device=dev, dtype=torch.bfloat16).transpose(-2, -1)  # (E,K,N) column-major
    out = torch.empty(E * k * n, dtype=torch.uint8, device=dev)
    sc = torch.empty(E * max(k, n), dtype=torch.float32, device=dev)
    d = Cast3d(ctypes.sizeof(Cast3d), DT_BF16, FMT_E4M3FN, FLAG_POW2, E, k, n)

    def hip_c():
        check(LIB.hipfp8_colwise_3d(CTX, byref(d), P(bt), S(E * k * n), P(out), S(E * k * n), P(sc), S(E * n),
                                    stream()), "colwise_3d")

    def hip_t():
        check(LIB.hipfp8_rowwise_3d_transpose_rhs(CTX, byref(d), P(bt), S(E * k * n), P(out), S(E * k * n), P(sc),
                                                  S(E * k), stream()), "rowwise_3d_transpose_rhs")
    hip_c()
    rd, rs = triton_fp8_colwise_3d_scale_and_cast(bt, F8, True)
    ok = [same_bytes(out, rd), same_f32(sc[:E * n], rs)]
    us = bench(hip_c)
    ao_us = bench(lambda: triton_fp8_colwise_3d_scale_and_cast(bt, F8, True))
    add("colwise_3d", f"({E},{k},{n})", "", us, 3 * E * k * n + 4 * E * n, ao_us, all(o for o, _ in ok),
        "; ".join(w for o, w in ok if not o))
    hip_t()
    rd, rs = triton_fp8_rowwise_3d_transpose_rhs(bt, F8, True)
    ok = [same_bytes(out, rd), same_f32(sc[:E * k], rs)]
    us = bench(hip_t)
    ao_us = bench(lambda: triton_fp8_rowwise_3d_transpose_rhs(bt, F8, True))
    add("rowwise_3d_transpose_rhs", f"({E},{k},{n})", "", us, 3 * E * k * n + 4 * E * k, ao_us,
        all(o for o, _ in ok), "; ".join(w for o, w in ok if not o))


def compiled_or_eager(fn, args, refs, eager_us, what):
    """(torchao us, note) for a row whose competitor is torch.compile of torchao's functions
    (`what` names them): torchao's float8 training runs them under torch.compile (TorchTitan),
    where inductor fuses them into Triton kernels, so that, not eager, is the competitor. The
    note says whether the compiled bytes equal the eager reference `refs`; when compiling or
    running fails here, the eager time `eager_us` is reported with the reason."""
    try:
        fn_c = torch.compile(fn, dynamic=False)
        got = fn_c(*args)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 -- reported in the row's note
        return eager_us, f"torchao: eager {what} (torch.compile failed: {type(e).__name__}: {str(e)[:80]})"
    eq = all(torch.equal(a.view(torch.uint8) if a.dtype == F8 else a, b.view(torch.uint8) if b.dtype == F8 else b)
             for a, b in zip(got, refs))
    return bench(lambda: fn_c(*args)), f"torchao: torch.compile({what}), eager {eager_us:.1f} us; compiled bytes == eager: {eq}"


def tensorwise_case(m, k):
    from torchao.float8.float8_utils import tensor_to_scale, to_fp8_saturated
    n = m * k
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    out = torch.empty(n, dtype=torch.uint8, device=dev)
    sc = torch.empty(1, dtype=torch.float32, device=dev)
    am = torch.empty(1, dtype=torch.float32, device=dev)
    d = Tensorwise(ctypes.sizeof(Tensorwise), DT_BF16, FMT_E4M3FN, FLAG_POW2, n)

    def hip():
        check(LIB.hipfp8_tensorwise(CTX, byref(d), P(x), S(n), P(out), S(n), P(sc), S(1), P(am), S(1), stream()),
              "tensorwise")

    def ao_fn(x):
        s = tensor_to_scale(x, F8, round_scales_to_power_of_2=True)
        return to_fp8_saturated(x.to(torch.float32) * s, F8), s

    def ao():
        return ao_fn(x)
    hip()
    rd, rs = ao()
    ok = [same_bytes(out, rd), same_f32(sc, rs.reshape(1))]
    us = bench(hip)
    ao_us, note = compiled_or_eager(ao_fn, (x,), (rd, rs), bench(ao), "tensor_to_scale + to_fp8_saturated")
    add("tensorwise", f"({m},{k})", "", us, 3 * n + 8, ao_us, all(o for o, _ in ok),
        note + "".join("; " + w for o, w in ok if not o))


def cast_transpose_case(m, k, rowwise):
    from torchao.float8.float8_utils import ScalingGranularity, tensor_to_scale, to_fp8_saturated
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    out = torch.empty(m * k, dtype=torch.uint8, device=dev)
    out_t = torch.empty(m * k, dtype=torch.uint8, device=dev)
    ns, nst = (m, k) if rowwise else (1, 1)
    sc = torch.empty(ns, dtype=torch.float32, device=dev)
    sct = torch.empty(nst, dtype=torch.float32, device=dev)
    d = CastT(ctypes.sizeof(CastT), DT_BF16, FMT_E4M3FN, FLAG_POW2, 1 if rowwise else 0, m, k)

    def hip():
        check(LIB.hipfp8_cast_transpose(CTX, byref(d), P(x), S(m * k), P(out), S(m * k), P(out_t), S(m * k), P(sc),
                                        S(ns), P(sct), S(nst), stream()), "cast_transpose")

    def ao_fn(x):
        if rowwise:
            s = tensor_to_scale(x, F8, scaling_granularity=ScalingGranularity.AXISWISE, axiswise_dim=-1,
                                round_scales_to_power_of_2=True)
            st = tensor_to_scale(x, F8, scaling_granularity=ScalingGranularity.AXISWISE, axiswise_dim=0,
                                 round_scales_to_power_of_2=True)
            d1 = to_fp8_saturated(x.to(torch.float32) * s, F8)
            d2 = to_fp8_saturated(x.to(torch.float32) * st, F8).t().contiguous()
            return d1, d2, s, st
        s = tensor_to_scale(x, F8, round_scales_to_power_of_2=True)
        d1 = to_fp8_saturated(x.to(torch.float32) * s, F8)
        return d1, d1.t().contiguous(), s, s

    def ao():
        return ao_fn(x)
    hip()
    r1, r2, rs, rst = ao()
    ok = [same_bytes(out, r1), same_bytes(out_t, r2), same_f32(sc, rs), same_f32(sct, rst)]
    us = bench(hip)
    ao_us, note = compiled_or_eager(ao_fn, (x,), (r1, r2, rs, rst), bench(ao), "casts + transpose copy")
    add("cast_transpose_" + ("rowwise" if rowwise else "tensorwise"), f"({m},{k})", "", us, 4 * m * k + 4 * (ns + nst),
        ao_us, all(o for o, _ in ok), note + "".join("; " + w for o, w in ok if not o))


def scaled_case(m, k, transpose):
    """Delayed scaling: a scale the caller already has (here the exact non-pow2 scale of x, as a
    steady-state amax history gives), one read. torchao 0.18 has no delayed-scaling kernel any
    more; the competitor is torch.compile of its cast (to_fp8_saturated of x * scale, plus the
    transpose copy) and of the amax the history needs (tensor_to_amax)."""
    from torchao.float8.float8_utils import tensor_to_amax, tensor_to_scale, to_fp8_saturated
    n = m * k
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    s = tensor_to_scale(x, F8, round_scales_to_power_of_2=False).reshape(1).contiguous()
    out = torch.empty(n, dtype=torch.uint8, device=dev)
    out_t = torch.empty(n, dtype=torch.uint8, device=dev)
    am = torch.empty(1, dtype=torch.float32, device=dev)
    if transpose:
        d = Cast2d(ctypes.sizeof(Cast2d), DT_BF16, FMT_E4M3FN, 0, m, k)

        def hip():
            check(LIB.hipfp8_cast_transpose_scaled(CTX, byref(d), P(x), S(n), P(s), S(1), P(out), S(n), P(out_t),
                                                   S(n), P(am), S(1), stream()), "cast_transpose_scaled")
    else:
        d = Tensorwise(ctypes.sizeof(Tensorwise), DT_BF16, FMT_E4M3FN, 0, n)

        def hip():
            check(LIB.hipfp8_tensorwise_scaled(CTX, byref(d), P(x), S(n), P(s), S(1), P(out), S(n), P(am), S(1),
                                               stream()), "tensorwise_scaled")

    def ao_fn(x, s):
        d1 = to_fp8_saturated(x.to(torch.float32) * s, F8)
        a = tensor_to_amax(x).to(torch.float32).reshape(1)
        return (d1, d1.t().contiguous(), a) if transpose else (d1, a)

    hip()
    ref = ao_fn(x, s)
    ok = [same_bytes(out, ref[0]), same_f32(am, ref[-1])]
    if transpose:
        ok.append(same_bytes(out_t, ref[1]))
    us = bench(hip)
    what = "x * scale cast" + (" + transpose copy" if transpose else "") + " + amax"
    ao_us, note = compiled_or_eager(ao_fn, (x, s), ref, bench(lambda: ao_fn(x, s)), what)
    op = "cast_transpose_scaled" if transpose else "tensorwise_scaled"
    add(op, f"({m},{k})", "", us, (4 if transpose else 3) * n + 8, ao_us, all(o for o, _ in ok),
        note + "".join("; " + w for o, w in ok if not o))


MXK_NOTE = ""


def load_mx_kernels():
    """torchao 0.18 defines its Triton MXFP8 kernels only when an import-time gate sees sm_100+ (or
    MI350): on the H200 they are stubs that raise "needs triton". Their FLOOR path is plain Triton,
    and their RCEIL path has a plain-Triton fallback (USE_PTX=False: the one torchao itself uses on
    ROCm; the PTX path is an sm_100 instruction). So, on sm_90: open the gate for that one module's
    Triton check (is_sm_at_least_100 answers True once, to that module's first call; its CUDA
    extension gate still sees False) and select the fallback by setting the module's IS_ROCM
    constexpr. The kernels are torchao's, unchanged; the bytes are checked against ours."""
    global MXK_NOTE
    import importlib

    import torchao.utils as tu
    name = "torchao.prototype.mx_formats.kernels"
    mod = sys.modules.get(name)
    if mod is not None and getattr(mod, "_triton_kernels_available", False):
        return mod
    if torch.cuda.get_device_capability() >= (10, 0):
        return importlib.import_module(name)
    real = tu.is_sm_at_least_100
    state = {"given": False}

    def gate():
        if not state["given"] and sys._getframe(1).f_globals.get("__name__") == name:
            state["given"] = True
            return True
        return real()
    tu.is_sm_at_least_100 = gate
    try:
        mod = importlib.reload(mod) if mod is not None else importlib.import_module(name)
    finally:
        tu.is_sm_at_least_100 = real
    if getattr(mod, "_triton_kernels_available", False) and not getattr(mod, "_mxfp8_cuda_kernels_available", True):
        import triton.language as tl
        mod.IS_ROCM = tl.constexpr(True)
        MXK_NOTE = "torchao Triton kernel on sm_90 via its non-PTX path (gate lifted, see load_mx_kernels)"
    return mod


def blockwise_case(m, k, tile):
    """torchao's blockwise kernels store DEQUANT scales (1/scale, div_rn) and use no pow2 rounding;
    ours store the quant scale: the check is same FP8 bytes and torchao_scale == 1/our_scale
    (IEEE division, computed by torch), with pow2 off for both."""
    from torchao.prototype.blockwise_fp8_training import kernels as bk
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    out = torch.empty(m * k, dtype=torch.uint8, device=dev)
    ns = m * ((k + 127) // 128) if tile == 1 else ((m + 127) // 128) * ((k + 127) // 128)
    sc = torch.empty(ns, dtype=torch.float32, device=dev)
    d = Cast2d(ctypes.sizeof(Cast2d), DT_BF16, FMT_E4M3FN, 0, m, k)
    f = LIB.hipfp8_blockwise_1x128 if tile == 1 else LIB.hipfp8_blockwise_128x128

    def hip():
        check(f(CTX, byref(d), P(x), S(m * k), P(out), S(m * k), P(sc), S(ns), stream()), "blockwise")

    if tile == 1:
        def ao():
            return bk.triton_fp8_blockwise_act_quant_lhs(x, 128, F8)
        what = "triton_fp8_blockwise_act_quant_lhs (row-major data, column-major 1/scale)"
    else:
        def ao():
            return bk.triton_fp8_blockwise_weight_quant_rhs(x, 128, F8)
        what = "triton_fp8_blockwise_weight_quant_rhs (writes COLUMN-major data, column-major 1/scale)"
    hip()
    yd, ys = ao()
    ours = out.view(m, k)
    ne = (ours != yd.view(torch.uint8)).sum().item()  # logical compare: layouts may differ
    rs = sc.view(m, -1) if tile == 1 else sc.view((m + 127) // 128, -1)
    ok2, why2 = same_f32(1.0 / rs, ys)
    ok = ne == 0 and ok2
    us = bench(hip)
    ao_us = bench(ao)
    add(f"blockwise_{'1x128' if tile == 1 else '128x128'}", f"({m},{k})", "", us, 3 * m * k + 4 * ns, ao_us, ok,
        f"pow2 off; torchao: {what}; scales compared as 1/ours" +
        ("" if ok else f"; MISMATCH {ne} bytes differ; {why2}"))


def padded_case(m, k, kind):
    """torchao's path to 16-aligned token groups on sm_90: torch_pad_token_groups (its eager
    reference; the fused CUDA kernel needs sm_100) then its Triton rowwise cast."""
    from torchao.prototype.moe_training.kernels.float8_rowwise import triton_fp8_rowwise_2d_scale_and_cast
    from torchao.prototype.moe_training.kernels.mxfp8.quant import torch_pad_token_groups
    sizes = [m // E] * E if kind == "balanced" else zipf_sizes(m, E)
    sizes = [s + (3 if i % 2 else 0) for i, s in enumerate(sizes)]  # unaligned groups
    sizes[0] -= sum(sizes) - m
    offs = ends(sizes)
    m_cap = (m + E * 16 + 15) // 16 * 16  # torchao's upper bound
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    out = torch.zeros(m_cap * k, dtype=torch.uint8, device=dev)
    sc = torch.zeros(m_cap, dtype=torch.float32, device=dev)
    po = torch.zeros(E, dtype=torch.int32, device=dev)
    d = Padded(ctypes.sizeof(Padded), DT_BF16, FMT_E4M3FN, FLAG_POW2, m, k, m_cap)

    def hip():
        check(LIB.hipfp8_rowwise_2d_padded(CTX, byref(d), P(x), S(m * k), P(offs), S(E), P(out), S(m_cap * k),
                                           P(sc), S(m_cap), P(po), S(E), stream()), "rowwise_2d_padded")

    def ao():
        xp, _, pend = torch_pad_token_groups(x, offs, 16)
        dd, ss = triton_fp8_rowwise_2d_scale_and_cast(xp, F8, True)
        return dd, ss, pend
    hip()
    rd, rs, pend = ao()
    ok0 = torch.equal(po, pend.to(torch.int32))
    end = int(pend[-1].item())
    ok1, why1 = same_bytes(out[:end * k], rd.view(torch.uint8).reshape(-1)[:end * k])
    ok2, why2 = same_f32(sc[:end], rs.reshape(-1)[:end])
    ok = ok0 and ok1 and ok2
    us = bench(hip)
    ao_us = bench(ao)
    add("rowwise_2d_padded", f"({m},{k})", kind, us, 2 * m * k + end * k + 4 * end, ao_us, ok,
        "torchao: torch_pad_token_groups (eager, host sync) + Triton rowwise cast" +
        ("" if ok else f"; MISMATCH offsets={ok0}; {why1}; {why2}"))


def mx_case(m, k, dim, mode):
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import to_mx
    mxk = load_mx_kernels()
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    out = torch.empty(m * k, dtype=torch.uint8, device=dev)
    sc = torch.empty(m * k // 32, dtype=torch.uint8, device=dev)
    d = Mx(ctypes.sizeof(Mx), DT_BF16, FMT_E4M3FN, 0 if mode == "floor" else 1, m, k)
    f = LIB.hipfp8_mxfp8_dim0 if dim == 0 else LIB.hipfp8_mxfp8_dim1

    def hip():
        check(f(CTX, byref(d), P(x), S(m * k), P(out), S(m * k), P(sc), S(m * k // 32), stream()), "mxfp8")
    hip()
    sm = ScaleCalculationMode.FLOOR if mode == "floor" else ScaleCalculationMode.RCEIL
    src = x if dim == 0 else x.t().contiguous()
    rs, rd = to_mx(src, F8, 32, sm)
    ok = [same_bytes(out, rd.contiguous()), same_bytes(sc, rs.contiguous())]
    us = bench(hip)
    trit = getattr(mxk, "triton_to_mxfp8_dim0" if dim == 0 else "triton_to_mxfp8_dim1", None)
    ao_us, note = None, "ref: torchao eager to_mx"
    if trit is not None:
        try:
            td, ts = trit(x, 32, mode)
            tok = [same_bytes(out, td), same_bytes(sc, ts)]
            ao_us = bench(lambda: trit(x, 32, mode))
            note += f"; torchao time: triton_to_mxfp8_dim{dim}({mode}), {MXK_NOTE}"
            if all(o for o, _ in tok):
                note += "; its bytes and scales equal ours"
            else:
                note += "; its bytes DIFFER from ours and from to_mx: " + "; ".join(w for _, w in tok)
        except Exception as e:  # noqa: BLE001
            note += f"; torchao Triton dim{dim} failed: {e!r}"[:200]
    add(f"mxfp8_dim{dim}_{mode}", f"({m},{k})", "", us, 3 * m * k + m * k // 32, ao_us, all(o for o, _ in ok),
        note + "".join("; " + w for o, w in ok if not o))


def main():
    global COPY_GBPS
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}", flush=True)
    import torchao
    print(f"torchao {torchao.__version__} from {os.path.dirname(torchao.__file__)}", flush=True)
    check(LIB.hipfp8_context_create(2, torch.cuda.current_device(), byref(CTX)), "context")
    n = 2 * 1024 ** 3
    a = torch.empty(n, dtype=torch.uint8, device=dev).random_(0, 255)
    b = torch.empty_like(a)
    us = bench(lambda: b.copy_(a))
    COPY_GBPS = 2 * n / (us * 1e-6) / 1e9
    print(f"copy 2 GiB (torch copy_): {us:.1f} us = {COPY_GBPS:.0f} GB/s (read + write)", flush=True)
    ROWS.append({"op": "copy_d2d", "shape": "(2147483648,)", "us": round(us, 2), "gbps": round(COPY_GBPS, 1),
                 "pct_copy": 100.0, "torchao_us": None, "exact_match": None})
    del a, b
    torch.manual_seed(0)
    t0 = time.time()
    for (m, k) in [(MT, H), (MT, I)]:
        run("rowwise_2d", lambda: rowwise_2d_case(m, k))
    for kind in ("balanced", "zipf"):
        for (m, k) in [(MT, H), (MT, I)]:
            run("per_group_colwise", lambda: per_group_colwise_case(m, k, kind))
        run("per_group_colwise_dual", lambda: dual_case(kind))
    for (k, nn) in [(H, I), (I, H)]:
        run("colwise_3d", lambda: colwise_3d_case(k, nn))
    for kind in ("balanced", "zipf"):
        run("per_group_rowwise", lambda: per_group_rowwise_case(H, MT, kind))
    for m in [4096, 16384, 65536, 131072]:
        run("rowwise_2d sweep", lambda: rowwise_2d_case(m, H))
    for (m, k) in [(8192, 4096), (8192, 14336)]:
        run("rowwise_2d dense", lambda: rowwise_2d_case(m, k))
        run("tensorwise", lambda: tensorwise_case(m, k))
        run("cast_transpose", lambda: cast_transpose_case(m, k, False))
        run("cast_transpose", lambda: cast_transpose_case(m, k, True))
        run("tensorwise_scaled", lambda: scaled_case(m, k, False))
        run("cast_transpose_scaled", lambda: scaled_case(m, k, True))
    for dim in (0, 1):
        for mode in ("floor", "rceil"):
            run("mxfp8", lambda: mx_case(MT, H, dim, mode))
    for tile in (1, 128):
        run("blockwise", lambda: blockwise_case(MT, H, tile))
    for kind in ("balanced", "zipf"):
        run("rowwise_2d_padded", lambda: padded_case(MT, H, kind))
    print(f"compare done in {time.time() - t0:.0f} s", flush=True)

    outdir = os.environ.get("OUT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, f"h200-{TAG}.json"), "w") as fh:
        json.dump(ROWS, fh, indent=1)
    with open(os.path.join(outdir, f"h200-{TAG}.md"), "w") as fh:
        fh.write(f"# hipfp8 vs torchao 0.18 on {torch.cuda.get_device_name()}\n\n")
        fh.write(f"torch {torch.__version__}, triton {triton.__version__}; one process, "
                 "`triton.testing.do_bench` medians; copy = torch `copy_` of 2 GiB in the same run: "
                 f"{COPY_GBPS:.0f} GB/s (read + write). Output E4M3FN, power-of-2 scales, bf16 input.\n\n")
        fh.write("| op | shape | groups | hipfp8 us | GB/s | % of copy | torchao us | speedup | exact | note |\n")
        fh.write("|---|---|---|---|---|---|---|---|---|---|\n")
        for r in ROWS:
            if "error" in r:
                fh.write(f"| {r['op']} | | | ERROR | | | | | | {r['error'][:120]} |\n")
                continue
            fh.write(f"| {r['op']} | {r.get('shape', '')} | {r.get('groups', '')} | {r['us']} | {r['gbps']} | "
                     f"{r['pct_copy']} | {r.get('torchao_us') or ''} | {r.get('speedup_vs_torchao') or ''} | "
                     f"{r.get('exact_match')} | {r.get('note', '')} |\n")
    print("wrote", outdir)


if __name__ == "__main__":
    main()
