"""torch.library custom ops (namespace `hipfp8`) over the C ABI, with fake kernels.

Every op is `torch.ops.hipfp8.<name>`: registered for the CPU key (the CPU backend, host
pointers) and the CUDA key (the GPU backend on torch's current stream; ROCm torch also uses
the CUDA key), with a fake kernel that gives the exact output shapes, strides and dtypes so
`torch.compile` traces through them. The ops take the FP8 dtype explicitly; the Python
functions at the bottom (`rowwise_2d(x)`, ...) default it to the device's native format.

Scales are forward (multiplicative) scales: `data = encode(x * scale)`; the GEMMs take dequant
scales (their reciprocals), as torch._scaled_mm / _scaled_grouped_mm do. docs/OPS.md has the
exact semantics of every op.
"""

import ctypes
import math
from collections import namedtuple

import torch

from .. import _lib as L

__all__ = [
    "E8M0",
    "native_fp8_dtype",
    "rowwise_2d", "colwise_3d", "rowwise_3d_transpose_rhs", "per_group_colwise",
    "per_group_colwise_dual", "per_group_colwise_dual_padded", "per_group_rowwise", "tensorwise", "tensorwise_scaled",
    "blockwise_1x128", "blockwise_128x128", "rowwise_2d_padded", "cast_transpose",
    "cast_transpose_scaled", "mxfp8_dim0", "mxfp8_dim1", "moe_weights_dual", "moe_act_dual",
    "moe_swiglu_quant", "moe_swiglu_bwd_quant",
    "grouped_gemm_2d3d", "grouped_gemm_2d2d", "grouped_gemm_plan", "GemmPlan",
    "moe_dispatch_dual", "moe_combine_bwd_dual", "moe_combine", "moe_combine_bwd_scores",
]

FP8_FORMAT = {
    torch.float8_e4m3fn: L.FORMAT_E4M3FN,
    torch.float8_e5m2: L.FORMAT_E5M2,
    torch.float8_e4m3fnuz: L.FORMAT_E4M3FNUZ,
    torch.float8_e5m2fnuz: L.FORMAT_E5M2FNUZ,
}
FORMAT_DTYPE = {v: k for k, v in FP8_FORMAT.items()}
HP_DTYPE = {torch.bfloat16: L.DTYPE_BF16, torch.float32: L.DTYPE_F32}
#: The dtype of MXFP8 scales: torch.float8_e8m0fnu where torch has it (2.7+), else uint8.
E8M0 = getattr(torch, "float8_e8m0fnu", torch.uint8)
_F32 = torch.float32

_lib = torch.library.Library("hipfp8", "DEF")


# ---- per-call helpers (kept small: they are the host cost of every op) ---------------------

_ctx_by_device = {}
_per_device = {}  # device -> (the context's C handle, the raw-stream getter or None): per call


def _ctx(device):
    c = _ctx_by_device.get(device)
    if c is None:
        if device.type == "cpu":
            c = L.context(L.BACKEND_CPU, 0)
        elif device.type == "cuda":
            c = L.context(L.BACKEND_GPU, device.index if device.index is not None else 0)
        else:
            raise ValueError(f"hipfp8: tensors on {device} are not supported (CPU or CUDA/ROCm)")
        _ctx_by_device[device] = c
    return c


# torch's current stream on a CUDA device, as a raw handle (absent from CPU-only builds):
# one C call, a third of torch.cuda.current_stream(dev).cuda_stream's cost.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _device_entry(device):
    """(handle, stream getter) of `device` for the per-call lookup: the context's C handle,
    and the function giving torch's current raw stream of the device (None on the CPU: the
    C call takes NULL)."""
    e = _per_device[device] = (_ctx(device).handle,
                               None if device.type == "cpu" else _raw_stream)
    return e


_descs = {}


def _desc(cls, *fields):
    """A descriptor struct, cached by its contents (the C side only reads it). None when the
    sizes are symbolic (the fake kernel while torch.compile traces: it needs no descriptor)."""
    key = (cls, fields)
    try:
        d = _descs.get(key)
        if d is None:
            if len(_descs) > 4096:
                _descs.clear()
            d = _descs[key] = cls(ctypes.sizeof(cls), *fields)
    except TypeError:  # a SymInt: unhashable, and no C integer
        if all(type(f) is int for f in fields):
            raise
        return None
    return d


def _inverses(*scales):
    """1 / s of each scale tensor in one launch (a foreach kernel: the same f32 division as
    Tensor.reciprocal): the GEMMs' dequant scales. New tensors, so each is 16-byte aligned as
    cuBLASLt wants its scale pointers (views into one tensor would not be)."""
    return torch._foreach_reciprocal(list(scales))


# ---- validation (shared by the real and the fake kernels) ----------------------------------

def _fail(op, msg, exc=ValueError):
    raise exc(f"hipfp8.{op}: {msg}")


_DEVICE_TYPES = ("cpu", "cuda", "meta")


def _device1(op, x):
    """_device for one tensor (the single-input casts: no varargs on the per-call path)."""
    dev = x.device
    if dev.type not in _DEVICE_TYPES:
        _fail(op, f"tensors on {dev} are not supported (CPU or CUDA/ROCm tensors)")
    return dev


def _device(op, *tensors):
    dev = tensors[0].device
    if dev.type not in _DEVICE_TYPES:  # meta: the fake kernel (shapes only)
        _fail(op, f"tensors on {dev} are not supported (CPU or CUDA/ROCm tensors)")
    for t in tensors[1:]:
        if t.device != dev:
            _fail(op, f"all tensors must be on one device: {dev} and {t.device}")
    return dev


def _hp(op, name, x, ndim=None):
    hp = HP_DTYPE.get(x.dtype)
    if hp is not None and (ndim is None or x.dim() == ndim) and x.is_contiguous():
        return hp  # the per-call path: three attribute reads
    if hp is None:
        _fail(op, f"{name} must be bfloat16 or float32, got {x.dtype}", TypeError)
    if ndim is not None and x.dim() != ndim:
        _fail(op, f"{name} must be {ndim}-D, got shape {tuple(x.shape)}")
    if not x.is_contiguous():
        _fail(op, f"{name} must be contiguous (row-major); call .contiguous() first")
    return hp


def _fmt(op, dtype):
    f = FP8_FORMAT.get(dtype)
    if f is None:
        _fail(op, f"dtype must be a torch float8 dtype ({', '.join(map(str, FP8_FORMAT))}), "
                  f"got {dtype}", TypeError)
    return f


def _col_major_3d(op, name, x):
    if x.dim() != 3:
        _fail(op, f"{name} must be 3-D (E, K, N), got shape {tuple(x.shape)}")
    if not x.transpose(-2, -1).is_contiguous():
        _fail(op, f"{name} must be column-major per expert (strides (K*N, 1, K), e.g. "
                  "w.transpose(-2, -1) of a contiguous (E, N, K) weight)")


def _offs(op, offs, dev):
    if offs.dtype != torch.int32:
        _fail(op, f"offs must be int32 END offsets, got {offs.dtype}", TypeError)
    if offs.dim() != 1 or not offs.is_contiguous():
        _fail(op, f"offs must be a contiguous 1-D tensor, got shape {tuple(offs.shape)}")
    if offs.device != dev:
        _fail(op, f"offs must be on {dev}, got {offs.device}")


def _scale_arg(op, name, s, dev):
    if s.dtype != _F32 or s.numel() != 1:
        _fail(op, f"{name} must be a float32 tensor of one element, got {s.dtype} "
                  f"{tuple(s.shape)}", TypeError)
    if s.device != dev:
        _fail(op, f"{name} must be on {dev}, got {s.device}")


def _fp8_in(op, name, t):
    f = FP8_FORMAT.get(t.dtype)
    if f is None:
        _fail(op, f"{name} must be a torch float8 tensor, got {t.dtype}", TypeError)
    return f


def _f32_in(op, name, t, numel, dev):
    if t.dtype != _F32:
        _fail(op, f"{name} must be float32, got {t.dtype}", TypeError)
    if not t.is_contiguous() or t.numel() != numel:
        _fail(op, f"{name} must be contiguous with {numel} elements, got shape {tuple(t.shape)}")
    if t.device != dev:
        _fail(op, f"{name} must be on {dev}, got {t.device}")


def _cdiv(a, b):
    return (a + b - 1) // b


# ---- registration --------------------------------------------------------------------------

_empty_strided = torch.empty_strided
_empty = torch.empty
_dispatch_stack_len = torch._C._len_torch_dispatch_stack
_is_compiling = torch.compiler.is_compiling


#: Plans a kernel keeps (per op; past it, the oldest goes first): a bound for processes whose
#: shapes never repeat; training repeats a handful per op.
_PLANS_MAX = 1024

# The real kernel of an op, as Python source compiled per op by _register (one function with
# the op's arity, outputs and workspace spelled out: no loops, lists or *args on the per-call
# path, a third of that path's Python time). A call's memo key is every tensor argument's
# (shape, strides, dtype, device) and every other argument: all that a plan reads (`plan` is
# a pure function of it), so a call whose key a successful plan has seen passes the same
# checks and gets the same output specs and descriptor. `prepare` runs the plan of a new key.
# The same body, behind a guard, is the op's Python entry (`call`): eager calls on plain
# tensors (torch.Tensor, or nn.Parameter: neither __torch_function__ nor __torch_dispatch__)
# skip the dispatcher's round trip into Python (a third of the host cost of a call); anything
# else -- torch.compile tracing, fake tensors, tensor subclasses, dispatch modes -- goes
# through torch.ops.hipfp8.<name>. (Dynamo evaluates the compiling test first; it cannot
# trace the others.)
_KERNEL_SRC = """
def kernel({args}):
{body}

def call({args}):
    if is_compiling() or (type(a0) is not Tensor and type(a0) is not Parameter) \\
            or dispatch_stack_len():
        return op({args})
{body}
"""
_KERNEL_BODY = """\
    k = ({key},)
    e = plans.get(k)
    if e is None:
        e = prepare(({args},), k)
    dev, h, desc, stream_index, ws, {entry}, _ = e
{allocs}
{workspace}\
    st = cfn(h, desc, {ptrs}{ws_args}, 0 if stream_index is None else raw_stream(stream_index))
    if st:
        raise error(st)
    return {outs}"""


def _kernel_source(schema, n_outs, workspace):
    """The source of the op's kernel and entry (_KERNEL_SRC) and the positions of the Tensor
    arguments."""
    params = schema.split("(", 1)[1].rsplit(") ->", 1)[0].split(", ")
    if any("=" in p for p in params):
        raise ValueError(f"hipfp8: _register schemas take every argument ({schema})")
    t_pos = [i for i, p in enumerate(params) if p.split(" ", 1)[0] == "Tensor"]
    args = [f"a{i}" for i in range(len(params))]
    key = [f"{a}.shape, {a}.stride(), {a}.dtype, {a}.device" if i in t_pos else a
           for i, a in enumerate(args)]
    ins, outs = [args[i] for i in t_pos], [f"o{j}" for j in range(n_outs)]
    entry = ([f"n_{a}" for a in ins] + [f"n_{o}" for o in outs]
             + [f"{v}_{o}" for o in outs for v in ("shape", "stride", "dtype")])
    body = _KERNEL_BODY.format(
        args=", ".join(args), key=", ".join(key), entry=", ".join(entry),
        allocs="\n".join(f"    {o} = empty_strided(shape_{o}, stride_{o}, dtype=dtype_{o}, "
                         f"device=dev)" for o in outs),
        workspace=("    # w: kept until the call returns (the C call reads its pointer)\n"
                   "    w = empty(ws, dtype=uint8, device=dev) if ws else None\n"
                   if workspace else ""),
        ptrs=", ".join(f"{t}.data_ptr(), n_{t}" for t in ins + outs),
        ws_args=", 0 if w is None else w.data_ptr(), ws" if workspace else "",
        outs=", ".join(outs))
    return _KERNEL_SRC.format(args=", ".join(args), body=body), t_pos


def _register(schema, plan, extra=None):
    """Define hipfp8::<name> over the C function hipfp8_<name>.

    `plan(*args)` validates the arguments and returns (specs, desc, ins): the output specs
    [(shape, stride, dtype)], the C descriptor and the input tensors (the Tensor arguments,
    in order); the C call takes (ptr, numel) of each input, then of each output, then of the
    workspace if `extra(desc, ins)` is given (its byte count, allocated per call from torch's
    caching allocator: stream-ordered, graph-capture safe; None for no workspace: NULL, 0),
    then the stream. The fake kernel is `plan` plus the allocation of the outputs, so both
    kernels give the same shapes, strides and dtypes.

    The real kernel (_KERNEL_SRC) keeps each successful plan by the call's memo key with what
    the C call needs besides the pointers -- the context handle, the descriptor's address,
    the element counts -- so a repeated call pays the key, its outputs' allocations, the
    pointers and the C call; a call whose key is new (or wrong arguments, every time) runs
    `plan` and its checks."""
    name = schema.split("(", 1)[0]
    _lib.define(schema)
    rets = schema.rsplit("->", 1)[1].strip()
    n_outs = rets.count("Tensor")
    src, t_pos = _kernel_source(schema, n_outs, extra is not None)
    plans = {}

    def prepare(args, k):
        """The plan of a call, as kept: (device, context handle, descriptor address, device
        index for the stream or None (CPU: NULL), workspace bytes (0: NULL), element count of
        each input and output, (shape, strides, dtype) of each output, the descriptor (kept
        alive: the entry holds its address))."""
        specs, desc, ins = plan(*args)
        if len(ins) != len(t_pos) or len(specs) != n_outs:
            raise AssertionError(f"hipfp8.{name}: the plan does not match the schema")
        dev = ins[0].device
        d = _per_device.get(dev)
        if d is None:
            d = _device_entry(dev)
        h, stream_of = d
        if ns["cfn"] is None:
            ns["cfn"] = L.lib().ops[name]
        e = [dev, h, ctypes.addressof(desc), None if stream_of is None else dev.index,
             (extra(desc, ins) or 0) if extra is not None else 0]
        for i, t in zip(t_pos, ins):
            if t is not args[i]:
                raise AssertionError(f"hipfp8.{name}: the plan's inputs are not the tensor "
                                     "arguments")
            e.append(t.numel())
        for s, _, _ in specs:
            e.append(math.prod(s))
        for spec in specs:
            e += spec
        e.append(desc)
        if len(plans) >= _PLANS_MAX:  # the oldest goes (dicts keep insertion order)
            del plans[next(iter(plans))]
        e = plans[k] = tuple(e)
        return e

    def error(st):
        return L.lib().error(st, f"hipfp8.{name}")

    ns = {"plans": plans, "prepare": prepare, "cfn": None, "error": error,
          "raw_stream": _raw_stream, "empty_strided": _empty_strided, "empty": _empty,
          "uint8": torch.uint8, "is_compiling": _is_compiling, "Tensor": torch.Tensor,
          "Parameter": torch.nn.Parameter,
          "dispatch_stack_len": _dispatch_stack_len, "op": None}
    exec(compile(src, f"<hipfp8 kernel {name}>", "exec"), ns)  # noqa: S102 (our source)
    kernel, call = ns["kernel"], ns["call"]

    def fake(*args):
        specs, _, ins = plan(*args)
        dev = ins[0].device
        outs = [_empty_strided(s, st, dtype=dt, device=dev) for s, st, dt in specs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    _lib.impl(name, kernel, "CPU")
    _lib.impl(name, kernel, "CUDA")
    torch.library.register_fake("hipfp8::" + name, fake, lib=_lib)
    op = ns["op"] = getattr(torch.ops.hipfp8, name).default
    call.__name__ = call.__qualname__ = name
    call.op = op
    return call


def _rm(*shape):
    """Row-major strides of shape."""
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return tuple(reversed(st))


# Casts of one 2-D input (x, dtype, pow2) with a cast_2d descriptor ---------------------------
def _cast2d(name, outs):
    """Register hipfp8::<name>(x, dtype, pow2) whose outputs are outs(m, k, dtype)."""
    def plan(x, dtype, pow2):
        _device1(name, x)
        hp = _hp(name, "x", x, 2)
        f = _fmt(name, dtype)
        m, k = x.shape
        return outs(m, k, dtype), _desc(L.Cast2d, hp, f, int(pow2), m, k), (x,)
    return _register(f"{name}(Tensor x, ScalarType dtype, bool pow2) -> (Tensor, Tensor)", plan)


_rowwise_2d = _cast2d("rowwise_2d", lambda m, k, dt: [((m, k), (k, 1), dt), ((m,), (1,), _F32)])
_blockwise_1x128 = _cast2d("blockwise_1x128", lambda m, k, dt: [
    ((m, k), (k, 1), dt), ((m, _cdiv(k, 128)), (_cdiv(k, 128), 1), _F32)])
_blockwise_128x128 = _cast2d("blockwise_128x128", lambda m, k, dt: [
    ((m, k), (k, 1), dt), ((_cdiv(m, 128), _cdiv(k, 128)), (_cdiv(k, 128), 1), _F32)])


# Casts of 3-D expert weights (E,K,N) column-major ------------------------------------------
def _cast3d(name, outs, outs_n=2):
    def plan(x, dtype, pow2):
        _device1(name, x)
        hp = HP_DTYPE.get(x.dtype)
        if hp is None:
            _fail(name, f"x must be bfloat16 or float32, got {x.dtype}", TypeError)
        _col_major_3d(name, "x", x)
        f = _fmt(name, dtype)
        e, k, n = x.shape
        return outs(e, k, n, dtype), _desc(L.Cast3d, hp, f, int(pow2), e, k, n), (x,)
    ret = ", ".join(["Tensor"] * outs_n)
    return _register(f"{name}(Tensor x, ScalarType dtype, bool pow2) -> ({ret})", plan)


_colwise_3d = _cast3d("colwise_3d", lambda e, k, n, dt: [
    ((e, k, n), (k * n, 1, k), dt), ((e, n), (n, 1), _F32)])
_rowwise_3d_transpose_rhs = _cast3d("rowwise_3d_transpose_rhs", lambda e, k, n, dt: [
    ((e, n, k), (n * k, 1, n), dt), ((e, k), (k, 1), _F32)])
# both layouts of one read: colwise_3d's outputs, then rowwise_3d_transpose_rhs's
_moe_weights_dual = _cast3d("moe_weights_dual", lambda e, k, n, dt: [
    ((e, k, n), (k * n, 1, k), dt), ((e, n), (n, 1), _F32),
    ((e, n, k), (n * k, 1, n), dt), ((e, k), (k, 1), _F32)], outs_n=4)


# The fused MoE casts: both grouped-GEMM operands of activations (moe_act_dual, registered with
# the per-group casts below) or of the SwiGLU's output / gradient from one read ----------------
def _act_dual_specs(m, k, g, dt):
    """rowwise_2d's outputs (every row) then per_group_colwise's (rows past offs[-1] of the
    column-major data are not written)."""
    return [((m, k), (k, 1), dt), ((m,), (1,), _F32), ((m, k), (1, m), dt), ((g, k), (k, 1), _F32)]


def _gu_args(op, gu, offs):
    """The checks of the SwiGLU casts' gu (M, 2I) and offsets; returns (device, dtype id, m, i)."""
    dev = _device(op, gu, offs)
    hp = _hp(op, "gu", gu, 2)
    _offs(op, offs, dev)
    m, i2 = gu.shape
    if i2 % 2:
        _fail(op, f"gu must be (M, 2I) ([gate | up]), got an odd column count: {tuple(gu.shape)}")
    return dev, hp, m, i2 // 2


def _swiglu_plan(gu, offs, dtype, pow2):
    op = "moe_swiglu_quant"
    _, hp, m, i = _gu_args(op, gu, offs)
    f = _fmt(op, dtype)
    return (_act_dual_specs(m, i, offs.shape[0], dtype), _desc(L.Swiglu, hp, f, int(pow2), m, i),
            (gu, offs))


_moe_swiglu_quant = _register("moe_swiglu_quant(Tensor gu, Tensor offs, ScalarType dtype, bool pow2)"
                              " -> (Tensor, Tensor, Tensor, Tensor)", _swiglu_plan)


def _swiglu_bwd_plan(grad_h, gu, offs, dtype, pow2):
    op = "moe_swiglu_bwd_quant"
    dev, hp, m, i = _gu_args(op, gu, offs)
    _device(op, grad_h, gu)
    if _hp(op, "grad_h", grad_h, 2) != hp:
        _fail(op, f"grad_h and gu must have one dtype, got {grad_h.dtype} and {gu.dtype}",
              TypeError)
    if tuple(grad_h.shape) != (m, i):
        _fail(op, f"grad_h must be (M, I) = {(m, i)} for gu {tuple(gu.shape)}, got "
                  f"{tuple(grad_h.shape)}")
    f = _fmt(op, dtype)
    return (_act_dual_specs(m, 2 * i, offs.shape[0], dtype),
            _desc(L.Swiglu, hp, f, int(pow2), m, i), (grad_h, gu, offs))


_moe_swiglu_bwd_quant = _register(
    "moe_swiglu_bwd_quant(Tensor grad_h, Tensor gu, Tensor offs, ScalarType dtype, bool pow2)"
    " -> (Tensor, Tensor, Tensor, Tensor)", _swiglu_bwd_plan)


# Per-group casts (x, offs, dtype, pow2) -------------------------------------------------------
def _grouped(name, outs, outs_n=2):
    def plan(x, offs, dtype, pow2):
        dev = _device(name, x, offs)
        hp = _hp(name, "x", x, 2)
        _offs(name, offs, dev)
        f = _fmt(name, dtype)
        m, k = x.shape
        return (outs(m, k, offs.shape[0], dtype), _desc(L.Cast2d, hp, f, int(pow2), m, k),
                (x, offs))
    ret = ", ".join(["Tensor"] * outs_n)
    return _register(f"{name}(Tensor x, Tensor offs, ScalarType dtype, bool pow2) -> ({ret})", plan)


_per_group_colwise = _grouped("per_group_colwise", lambda m, k, g, dt: [
    ((m, k), (1, m), dt), ((g, k), (k, 1), _F32)])
_per_group_rowwise = _grouped("per_group_rowwise", lambda m, k, g, dt: [
    ((m, k), (k, 1), dt), ((g, m), (m, 1), _F32)])
_moe_act_dual = _grouped("moe_act_dual", _act_dual_specs, outs_n=4)


def _dual_plan(x1, x2, offs, dtype, pow2):
    op = "per_group_colwise_dual"
    dev = _device(op, x1, x2, offs)
    hp1 = _hp(op, "x1", x1, 2)
    hp2 = _hp(op, "x2", x2, 2)
    _offs(op, offs, dev)
    f = _fmt(op, dtype)
    m, k1 = x1.shape
    if x2.shape[0] != m:
        _fail(op, f"x1 and x2 must have the same rows, got {tuple(x1.shape)} and {tuple(x2.shape)}")
    k2 = x2.shape[1]
    g = offs.shape[0]
    return ([((m, k1), (1, m), dtype), ((g, k1), (k1, 1), _F32),
             ((m, k2), (1, m), dtype), ((g, k2), (k2, 1), _F32)],
            _desc(L.CastDual, hp1, f, int(pow2), hp2, m, k1, k2), (x1, x2, offs))


_per_group_colwise_dual = _register(
    "per_group_colwise_dual(Tensor x1, Tensor x2, Tensor offs, ScalarType dtype, bool pow2)"
    " -> (Tensor, Tensor, Tensor, Tensor)", _dual_plan)


def _dual_padded_m_cap(m, g):
    """The padded token extent: round_up(m + 15*g, 16) (every padded group fits, and the 2D x 2D
    GEMM's library path takes it)."""
    return (m + 15 * g + 15) // 16 * 16


def _dual_padded_plan(x1, x2, offs, dtype, pow2):
    op = "per_group_colwise_dual_padded"
    dev = _device(op, x1, x2, offs)
    hp1 = _hp(op, "x1", x1, 2)
    hp2 = _hp(op, "x2", x2, 2)
    _offs(op, offs, dev)
    f = _fmt(op, dtype)
    m, k1 = x1.shape
    if x2.shape[0] != m:
        _fail(op, f"x1 and x2 must have the same rows, got {tuple(x1.shape)} and {tuple(x2.shape)}")
    k2 = x2.shape[1]
    g = offs.shape[0]
    m_cap = _dual_padded_m_cap(m, g)
    return ([((m_cap, k1), (1, m_cap), dtype), ((g, k1), (k1, 1), _F32),
             ((m_cap, k2), (1, m_cap), dtype), ((g, k2), (k2, 1), _F32),
             ((g,), (1,), torch.int32)],
            _desc(L.CastDualPadded, hp1, f, int(pow2), hp2, m, k1, k2, m_cap), (x1, x2, offs))


_per_group_colwise_dual_padded = _register(
    "per_group_colwise_dual_padded(Tensor x1, Tensor x2, Tensor offs, ScalarType dtype, bool pow2)"
    " -> (Tensor, Tensor, Tensor, Tensor, Tensor)", _dual_padded_plan)


# tensorwise ---------------------------------------------------------------------------------
def _tw_plan(x, dtype, pow2):
    op = "tensorwise"
    _device1(op, x)
    hp = _hp(op, "x", x)
    f = _fmt(op, dtype)
    shape = tuple(x.shape)
    return ([(shape, _rm(*shape), dtype), ((), (), _F32), ((), (), _F32)],
            _desc(L.Tensorwise, hp, f, int(pow2), x.numel()), (x,))


_tensorwise = _register(
    "tensorwise(Tensor x, ScalarType dtype, bool pow2) -> (Tensor, Tensor, Tensor)", _tw_plan)


def _tws_plan(x, scale, dtype):
    op = "tensorwise_scaled"
    dev = _device(op, x, scale)
    hp = _hp(op, "x", x)
    _scale_arg(op, "scale", scale, dev)
    f = _fmt(op, dtype)
    shape = tuple(x.shape)
    return ([(shape, _rm(*shape), dtype), ((), (), _F32)],
            _desc(L.Tensorwise, hp, f, 0, x.numel()), (x, scale))


_tensorwise_scaled = _register(
    "tensorwise_scaled(Tensor x, Tensor scale, ScalarType dtype) -> (Tensor, Tensor)", _tws_plan)


# padded rowwise -----------------------------------------------------------------------------
def _pad_plan(x, offs, dtype, pow2):
    op = "rowwise_2d_padded"
    dev = _device(op, x, offs)
    hp = _hp(op, "x", x, 2)
    _offs(op, offs, dev)
    f = _fmt(op, dtype)
    m, k = x.shape
    g = offs.shape[0]
    m_cap = m + 15 * g
    return ([((m_cap, k), (k, 1), dtype), ((m_cap,), (1,), _F32), ((g,), (1,), torch.int32)],
            _desc(L.Padded, hp, f, int(pow2), m, k, m_cap), (x, offs))


_rowwise_2d_padded = _register(
    "rowwise_2d_padded(Tensor x, Tensor offs, ScalarType dtype, bool pow2)"
    " -> (Tensor, Tensor, Tensor)", _pad_plan)


# cast_transpose -----------------------------------------------------------------------------
def _ct_plan(x, dtype, pow2, rowwise):
    op = "cast_transpose"
    _device1(op, x)
    hp = _hp(op, "x", x, 2)
    f = _fmt(op, dtype)
    m, k = x.shape
    if rowwise:
        sc = [((m,), (1,), _F32), ((k,), (1,), _F32)]
    else:
        sc = [((), (), _F32), ((), (), _F32)]
    scaling = L.SCALING_ROWWISE if rowwise else L.SCALING_TENSORWISE
    return ([((m, k), (k, 1), dtype), ((k, m), (m, 1), dtype)] + sc,
            _desc(L.CastTranspose, hp, f, int(pow2), scaling, m, k), (x,))


_cast_transpose = _register(
    "cast_transpose(Tensor x, ScalarType dtype, bool pow2, bool rowwise)"
    " -> (Tensor, Tensor, Tensor, Tensor)", _ct_plan)


def _cts_plan(x, scale, dtype):
    op = "cast_transpose_scaled"
    dev = _device(op, x, scale)
    hp = _hp(op, "x", x, 2)
    _scale_arg(op, "scale", scale, dev)
    f = _fmt(op, dtype)
    m, k = x.shape
    return ([((m, k), (k, 1), dtype), ((k, m), (m, 1), dtype), ((), (), _F32)],
            _desc(L.Cast2d, hp, f, 0, m, k), (x, scale))


_cast_transpose_scaled = _register(
    "cast_transpose_scaled(Tensor x, Tensor scale, ScalarType dtype) -> (Tensor, Tensor, Tensor)",
    _cts_plan)


# MXFP8 --------------------------------------------------------------------------------------
def _mx_plan(dim):
    op = f"mxfp8_dim{dim}"

    def plan(x, dtype, rceil):
        _device1(op, x)
        hp = _hp(op, "x", x, 2)
        if dtype not in (torch.float8_e4m3fn, torch.float8_e5m2):
            _fail(op, f"dtype must be torch.float8_e4m3fn or torch.float8_e5m2 (MX has no FNUZ "
                      f"elements), got {dtype}", TypeError)
        m, k = x.shape
        if dim == 0:
            specs = [((m, k), (k, 1), dtype), ((m, _cdiv(k, 32)), (_cdiv(k, 32), 1), E8M0)]
        else:
            specs = [((k, m), (m, 1), dtype), ((k, _cdiv(m, 32)), (_cdiv(m, 32), 1), E8M0)]
        rounding = L.MX_ROUNDING_RCEIL if rceil else L.MX_ROUNDING_FLOOR
        return specs, _desc(L.Mxfp8, hp, FP8_FORMAT[dtype], rounding, m, k), (x,)
    return plan


_mxfp8_dim0 = _register("mxfp8_dim0(Tensor x, ScalarType dtype, bool rceil) -> (Tensor, Tensor)",
                        _mx_plan(0))
_mxfp8_dim1 = _register("mxfp8_dim1(Tensor x, ScalarType dtype, bool rceil) -> (Tensor, Tensor)",
                        _mx_plan(1))


# grouped GEMMs ------------------------------------------------------------------------------
def _workspace(desc, ins):
    """The GEMM's workspace bytes (the kernel allocates them from torch's caching allocator per
    call: stream-ordered, graph-capture safe; 512-byte aligned). None on the CPU (NULL, 0)."""
    device = ins[0].device
    if device.type != "cuda":
        return None
    g = ins[2].shape[0]  # offs: G
    if isinstance(desc, L.Gemm2d2d):  # with the staging area (docs/OPS.md "Any group start")
        return _ctx(device).workspace_size_2d2d(desc, g)
    return _ctx(device).workspace_size(desc.a_format, desc.b_format, g)


def _gemm_args(op, a, b, offs, scale_a, scale_b, a_dims):
    """The checks both GEMMs share; returns (device, a's format, b's format)."""
    dev = _device(op, a, b, offs, scale_a, scale_b)
    af = _fp8_in(op, "a", a)
    bf = _fp8_in(op, "b", b)
    if a.dim() != 2 or not a.is_contiguous():
        _fail(op, f"a must be a contiguous {a_dims} tensor, got shape {tuple(a.shape)}")
    _offs(op, offs, dev)
    return dev, af, bf


def _g3_plan(a, b, offs, scale_a, scale_b):
    op = "grouped_gemm_2d3d"
    dev, af, bf = _gemm_args(op, a, b, offs, scale_a, scale_b, "(M, K)")
    _col_major_3d(op, "b", b)
    m, k = a.shape
    e, kb, n = b.shape
    if kb != k:
        _fail(op, f"a is (M, {k}) but b is (E, {kb}, N): the K dims differ")
    _f32_in(op, "scale_a", scale_a, m, dev)
    _f32_in(op, "scale_b", scale_b, e * n, dev)
    return ([((m, n), (n, 1), torch.bfloat16)],
            _desc(L.Gemm2d3d, af, bf, L.GEMM_BACKEND_AUTO, m, k, n, e),
            (a, b, offs, scale_a, scale_b))


_grouped_gemm_2d3d = _register(
    "grouped_gemm_2d3d(Tensor a, Tensor b, Tensor offs, Tensor scale_a, Tensor scale_b) -> Tensor",
    _g3_plan, _workspace)


def _g2_plan(a, b, offs, scale_a, scale_b):
    op = "grouped_gemm_2d2d"
    dev, af, bf = _gemm_args(op, a, b, offs, scale_a, scale_b, "(N, Mt)")
    if b.dim() != 2 or not b.t().is_contiguous():
        _fail(op, "b must be a column-major (Mt, K) tensor (strides (1, Mt), e.g. the "
                  "per_group_colwise output)")
    n, mt = a.shape
    mtb, k = b.shape
    if mtb != mt:
        _fail(op, f"a is (N, {mt}) but b is ({mtb}, K): the reduced dims differ")
    g = offs.shape[0]
    _f32_in(op, "scale_a", scale_a, g * n, dev)
    _f32_in(op, "scale_b", scale_b, g * k, dev)
    return ([((g, n, k), (n * k, k, 1), torch.bfloat16)],
            _desc(L.Gemm2d2d, af, bf, L.GEMM_BACKEND_AUTO, n, mt, k),
            (a, b, offs, scale_a, scale_b))


_grouped_gemm_2d2d = _register(
    "grouped_gemm_2d2d(Tensor a, Tensor b, Tensor offs, Tensor scale_a, Tensor scale_b) -> Tensor",
    _g2_plan, _workspace)


# MoE routing (docs/OPS.md "MoE routing") --------------------------------------------------------
_I32 = torch.int32


def _i32_in(op, name, t, shape, dev):
    if t.dtype != _I32:
        _fail(op, f"{name} must be int32, got {t.dtype}", TypeError)
    if tuple(t.shape) != tuple(shape) or not t.is_contiguous():
        _fail(op, f"{name} must be a contiguous {tuple(shape)} tensor, got shape {tuple(t.shape)}")
    if t.device != dev:
        _fail(op, f"{name} must be on {dev}, got {t.device}")


def _weights_in(op, w, t, dev):
    """The routing scores: a contiguous (t, topk) float32 tensor; returns topk."""
    if w.dtype != _F32:
        _fail(op, f"weights must be float32, got {w.dtype}", TypeError)
    if w.dim() != 2 or w.shape[0] != t or not w.is_contiguous():
        _fail(op, f"weights must be a contiguous (T, topk) = ({t}, topk) tensor, got shape "
                  f"{tuple(w.shape)}")
    if w.device != dev:
        _fail(op, f"weights must be on {dev}, got {w.device}")
    return w.shape[1]


def _dispatch_specs(op, t, k, topk, g, align, m_cap, dtype):
    if topk <= 0 or align <= 0:
        _fail(op, f"topk and align must be > 0, got {topk} and {align}")
    if m_cap < t * topk + g * (align - 1):
        _fail(op, f"m_cap = {m_cap} < T*topk + G*(align-1) = {t * topk + g * (align - 1)}: "
                  "padded groups may not fit")
    return [((g,), (1,), _I32), ((t, topk), (topk, 1), _I32)] + _act_dual_specs(m_cap, k, g, dtype)


def _dispatch_flags(pow2, dequant):
    return int(pow2) | (L.FLAG_DEQUANT_SCALES if dequant else 0)


def _dispatch_plan(x, perm, offs, topk, align, m_cap, dtype, pow2, dequant):
    op = "moe_dispatch_dual"
    dev = _device(op, x, perm, offs)
    hp = _hp(op, "x", x, 2)
    _offs(op, offs, dev)
    f = _fmt(op, dtype)
    t, k = x.shape
    if topk <= 0:
        _fail(op, f"topk must be > 0, got {topk}")
    _i32_in(op, "perm", perm, (t * topk,), dev)
    g = offs.shape[0]
    return (_dispatch_specs(op, t, k, topk, g, align, m_cap, dtype),
            _desc(L.Dispatch, hp, f, _dispatch_flags(pow2, dequant), t, k, topk, align, m_cap),
            (x, perm, offs))


_moe_dispatch_dual = _register(
    "moe_dispatch_dual(Tensor x, Tensor perm, Tensor offs, int topk, int align, int m_cap, "
    "ScalarType dtype, bool pow2, bool dequant) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)",
    _dispatch_plan)


def _combine_bwd_dual_plan(dout, weights, perm, offs, align, m_cap, dtype, pow2, dequant):
    op = "moe_combine_bwd_dual"
    dev = _device(op, dout, weights, perm, offs)
    hp = _hp(op, "dout", dout, 2)
    _offs(op, offs, dev)
    f = _fmt(op, dtype)
    t, k = dout.shape
    topk = _weights_in(op, weights, t, dev)
    _i32_in(op, "perm", perm, (t * topk,), dev)
    g = offs.shape[0]
    return (_dispatch_specs(op, t, k, topk, g, align, m_cap, dtype),
            _desc(L.Dispatch, hp, f, _dispatch_flags(pow2, dequant), t, k, topk, align, m_cap),
            (dout, weights, perm, offs))


_moe_combine_bwd_dual = _register(
    "moe_combine_bwd_dual(Tensor dout, Tensor weights, Tensor perm, Tensor offs, int align, "
    "int m_cap, ScalarType dtype, bool pow2, bool dequant) "
    "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)", _combine_bwd_dual_plan)


def _combine_plan(y, slot_row, weights):
    op = "moe_combine"
    dev = _device(op, y, slot_row, weights)
    hp = _hp(op, "y", y, 2)
    m_cap, k = y.shape
    if slot_row.dim() != 2:
        _fail(op, f"slot_row must be (T, topk), got shape {tuple(slot_row.shape)}")
    t = slot_row.shape[0]
    topk = _weights_in(op, weights, t, dev)
    _i32_in(op, "slot_row", slot_row, (t, topk), dev)
    return ([((t, k), (k, 1), torch.bfloat16)], _desc(L.Combine, hp, t, k, topk, m_cap),
            (y, slot_row, weights))


_moe_combine = _register("moe_combine(Tensor y, Tensor slot_row, Tensor weights) -> Tensor",
                         _combine_plan)


def _combine_bwd_scores_plan(dout, y, slot_row):
    op = "moe_combine_bwd_scores"
    dev = _device(op, dout, y, slot_row)
    hp = _hp(op, "dout", dout, 2)
    if _hp(op, "y", y, 2) != hp:
        _fail(op, f"dout and y must have one dtype, got {dout.dtype} and {y.dtype}", TypeError)
    t, k = dout.shape
    m_cap, ky = y.shape
    if ky != k:
        _fail(op, f"dout is (T, {k}) but y is (M_cap, {ky}): the column counts differ")
    if slot_row.dim() != 2:
        _fail(op, f"slot_row must be (T, topk), got shape {tuple(slot_row.shape)}")
    topk = slot_row.shape[1]
    _i32_in(op, "slot_row", slot_row, (t, topk), dev)
    return ([((t, topk), (topk, 1), _F32)], _desc(L.Combine, hp, t, k, topk, m_cap),
            (dout, y, slot_row))


_moe_combine_bwd_scores = _register(
    "moe_combine_bwd_scores(Tensor dout, Tensor y, Tensor slot_row) -> Tensor",
    _combine_bwd_scores_plan)


# ---- Python entry points (dtype defaults to the device's native format) --------------------

_native = {}


# Under torch.compile the answer is a constant of the trace (dynamo calls this eagerly
# instead of tracing into ctypes): the device's format does not change during a process.
@torch._dynamo.assume_constant_result
def native_fp8_dtype(device, e5m2=False):
    """The torch float8 dtype hipfp8's AUTO format means on `device`: float8_e4m3fnuz /
    e5m2fnuz on gfx942 (MI300), float8_e4m3fn / e5m2 on gfx950, NVIDIA and the CPU."""
    d = _native.get((device, e5m2))  # a tensor's torch.device: the per-call path
    if d is None:
        dev = torch.device(device)
        d = _native.get((dev, e5m2))
        if d is None:
            c = _ctx(dev)
            d = _native[(dev, e5m2)] = FORMAT_DTYPE[c.native_e5m2 if e5m2 else c.native_e4m3]
    return d


def _dt(x, dtype):
    return native_fp8_dtype(x.device) if dtype is None else dtype


def rowwise_2d(x, dtype=None, pow2=True):
    """(M,K) -> fp8 (M,K), scales (M,) per row."""
    return _rowwise_2d(x, _dt(x, dtype), pow2)


def colwise_3d(x, dtype=None, pow2=True):
    """(E,K,N) column-major -> fp8 same layout, scales (E,N) over K."""
    return _colwise_3d(x, _dt(x, dtype), pow2)


def rowwise_3d_transpose_rhs(x, dtype=None, pow2=True):
    """(E,K,N) column-major -> fp8 (E,N,K) column-major, scales (E,K) over N."""
    return _rowwise_3d_transpose_rhs(x, _dt(x, dtype), pow2)


def moe_weights_dual(x, dtype=None, pow2=True):
    """(E,K,N) column-major -> colwise_3d(x) and rowwise_3d_transpose_rhs(x) from one call:
    fp8 (E,K,N), scales (E,N), fp8 (E,N,K) column-major, scales (E,K)."""
    return _moe_weights_dual(x, _dt(x, dtype), pow2)


def moe_act_dual(x, offs, dtype=None, pow2=True):
    """(M,K) + END offsets along M -> rowwise_2d(x) and per_group_colwise(x, offs) from one read:
    fp8 (M,K), scales (M,), fp8 (M,K) column-major, scales (G,K)."""
    return _moe_act_dual(x, offs, _dt(x, dtype), pow2)


def moe_swiglu_quant(gu, offs, dtype=None, pow2=True):
    """gu (M, 2I) = [gate | up] -> h = silu(gate) * up (M, I) in gu's dtype's arithmetic
    (torch's `F.silu(g) * u`, docs/OPS.md), cast as moe_act_dual casts x, h never stored."""
    return _moe_swiglu_quant(gu, offs, _dt(gu, dtype), pow2)


def moe_swiglu_bwd_quant(grad_h, gu, offs, dtype=None, pow2=True):
    """d = [d_gate | d_up] (M, 2I), torch's autograd of `F.silu(g) * u` from grad_h (M, I) and
    the forward's gu (M, 2I), cast as moe_act_dual casts x, d never stored."""
    return _moe_swiglu_bwd_quant(grad_h, gu, offs, _dt(grad_h, dtype), pow2)


def per_group_colwise(x, offs, dtype=None, pow2=True):
    """(M,K) + END offsets along M -> fp8 (M,K) column-major, scales (G,K)."""
    return _per_group_colwise(x, offs, _dt(x, dtype), pow2)


def per_group_colwise_dual(x1, x2, offs, dtype=None, pow2=True):
    """Two per_group_colwise casts sharing M and offs in one launch."""
    return _per_group_colwise_dual(x1, x2, offs, _dt(x1, dtype), pow2)


def per_group_colwise_dual_padded(x1, x2, offs, dtype=None, pow2=True):
    """per_group_colwise_dual into a padded layout (the wgrad operands of grouped_gemm_2d2d):
    fp8 (m_cap, K1) and (m_cap, K2) column-major with m_cap = round_up(M + 15*G, 16), every
    group at a 16-row aligned start and zeros elsewhere; scales (G,K1), (G,K2) as
    per_group_colwise_dual's; padded END offsets (G,) int32 (the GEMM's offs)."""
    return _per_group_colwise_dual_padded(x1, x2, offs, _dt(x1, dtype), pow2)


def per_group_rowwise(x, offs, dtype=None, pow2=True):
    """(M,K) + END offsets along K -> fp8 (M,K), scales (G,M)."""
    return _per_group_rowwise(x, offs, _dt(x, dtype), pow2)


def tensorwise(x, dtype=None, pow2=False):
    """Any contiguous x -> fp8 same shape, scale (), amax ()."""
    return _tensorwise(x, _dt(x, dtype), pow2)


def tensorwise_scaled(x, scale, dtype=None):
    """x with the caller's scale (delayed scaling) -> fp8, amax ()."""
    return _tensorwise_scaled(x, scale, _dt(x, dtype))


def blockwise_1x128(x, dtype=None, pow2=False):
    return _blockwise_1x128(x, _dt(x, dtype), pow2)


def blockwise_128x128(x, dtype=None, pow2=False):
    return _blockwise_128x128(x, _dt(x, dtype), pow2)


def rowwise_2d_padded(x, offs, dtype=None, pow2=True):
    """Rowwise cast padding every group to 16 rows: out (M+15G, K), scales, padded END offs.
    Rows past the padded end are not written (uninitialised memory)."""
    return _rowwise_2d_padded(x, offs, _dt(x, dtype), pow2)


def cast_transpose(x, dtype=None, pow2=False, rowwise=False):
    """(M,K) -> fp8 (M,K), fp8 (K,M), scales, scales_t: () each (tensorwise) or (M,), (K,)."""
    return _cast_transpose(x, _dt(x, dtype), pow2, rowwise)


def cast_transpose_scaled(x, scale, dtype=None):
    """(M,K) with the caller's scale -> fp8 (M,K), fp8 (K,M), amax ()."""
    return _cast_transpose_scaled(x, scale, _dt(x, dtype))


def mxfp8_dim0(x, dtype=torch.float8_e4m3fn, rceil=False):
    """(M,K) -> fp8 (M,K), E8M0 scales (M, ceil(K/32))."""
    return _mxfp8_dim0(x, dtype, rceil)


def mxfp8_dim1(x, dtype=torch.float8_e4m3fn, rceil=False):
    """(M,K) -> fp8 (K,M), E8M0 scales (K, ceil(M/32))."""
    return _mxfp8_dim1(x, dtype, rceil)


def grouped_gemm_2d3d(a, b, offs, scale_a, scale_b):
    """bf16 (M,N) = per group a_g (M_g,K) @ b_g (K,N) with dequant scales (M,), (E,N).
    Rows past offs[-1] are not written (uninitialised), as torch._grouped_mm."""
    return _grouped_gemm_2d3d(a, b, offs, scale_a, scale_b)


def grouped_gemm_2d2d(a, b, offs, scale_a, scale_b):
    """bf16 (G,N,K) = per group a_g (N,Mt_g) @ b_g (Mt_g,K) with dequant scales (G,N), (G,K)."""
    return _grouped_gemm_2d2d(a, b, offs, scale_a, scale_b)


#: What a grouped GEMM call runs: `implementation` ("cpu", "reference", "cutlass-sm90",
#: "ck-gfx942", "ck-gfx950"), `reason` (why the reference kernel: "requested", "no-library",
#: "format-pair", "shape", "alignment"; None otherwise) and the library's one-line
#: `description` (instance and schedule, or the refusal in words).
GemmPlan = namedtuple("GemmPlan", "implementation reason description")


def grouped_gemm_plan(a, b, offs, scale_a, scale_b):
    """The plan of `grouped_gemm_2d3d(a, b, offs, scale_a, scale_b)` (3D b) or
    `grouped_gemm_2d2d(...)` (2D b), without running it: the same checks as the call (the same
    errors), then the library's plan query. The call runs exactly this plan; the reference
    kernel only where the plan says so (and why)."""
    plan = _g3_plan if b.dim() == 3 else _g2_plan
    _, desc, ins = plan(a, b, offs, scale_a, scale_b)
    return GemmPlan(*_ctx(ins[0].device).gemm_plan(desc, a.data_ptr(), b.data_ptr(),
                                                   offs.shape[0]))


def moe_dispatch_dual(x, perm, offs, topk, align=16, m_cap=None, dtype=None, pow2=True,
                      dequant=True):
    """The token dispatch fused with the group padding and both grouped-GEMM casts: x (T, D),
    perm (T*topk,) int32 (the slots `token*topk + j` in expert order), offs (G,) int32 END
    offsets over perm -> (offs_pad (G,), slot_row (T, topk), fp8 (M_cap, D), scales (M_cap,),
    fp8 (M_cap, D) column-major, scales (G, D)), the casts of the padded matrix on offs_pad;
    scales are the GEMMs' dequant scales when `dequant` (the default), else forward scales.
    m_cap defaults to T*topk + G*(align-1)."""
    if m_cap is None:
        m_cap = x.shape[0] * topk + offs.shape[0] * (align - 1)
    return _moe_dispatch_dual(x, perm, offs, topk, align, m_cap, _dt(x, dtype), pow2, dequant)


def moe_combine_bwd_dual(dout, weights, perm, offs, align=16, m_cap=None, dtype=None, pow2=True,
                         dequant=True):
    """The combine's backward into the experts' output gradient, cast as moe_dispatch_dual
    casts: slot s's row is `bf16(weights[s] * dout[s // topk])`; weights (T, topk) float32."""
    t, topk = weights.shape
    if m_cap is None:
        m_cap = t * topk + offs.shape[0] * (align - 1)
    return _moe_combine_bwd_dual(dout, weights, perm, offs, align, m_cap, _dt(dout, dtype), pow2,
                                 dequant)


def moe_combine(y, slot_row, weights):
    """out (T, D) bf16 = sum_j weights[t, j] * y[slot_row[t, j]] (f32 products added in j order,
    rounded once); slot rows of -1 add nothing."""
    return _moe_combine(y, slot_row, weights)


def moe_combine_bwd_scores(dout, y, slot_row):
    """dweights (T, topk) f32 = dot(dout[t], y[slot_row[t, j]]) (0 for a row of -1)."""
    return _moe_combine_bwd_scores(dout, y, slot_row)
