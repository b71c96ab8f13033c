"""The C ABI of libhipfp8 through ctypes: the library, its descriptors, contexts, errors.

No torch here: this module is the whole binding (include/hipfp8.h), and `hipfp8.torch` builds
the torch ops on top of it. Function objects get their argtypes once (the ops': every argument
as c_void_p, the descriptor by its address; see _Lib); contexts are created
once per device and kept for the life of the process (destroying one while torch still has
work queued on its stream would be legal, but nothing is gained by it).
"""

import ctypes
import os
import threading
from ctypes import POINTER, c_char_p, c_int32, c_size_t, c_uint32, c_uint64, c_void_p

__all__ = [
    "Hipfp8Error",
    "lib",
    "library_path",
    "context",
    "check",
]

# Stable ABI values (include/hipfp8.h).
STATUS_SUCCESS = 0
STATUS_BACKEND_UNAVAILABLE = 15
BACKEND_CPU = 1
BACKEND_GPU = 2
DTYPE_BF16 = 0
DTYPE_F32 = 1
FORMAT_AUTO = 0
FORMAT_AUTO_E5M2 = 1
FORMAT_E4M3FN = 2
FORMAT_E5M2 = 3
FORMAT_E4M3FNUZ = 4
FORMAT_E5M2FNUZ = 5
FLAG_POW2_SCALES = 1
FLAG_DEQUANT_SCALES = 2
FLAG_PAD_WGRAD = 4
SCALING_TENSORWISE = 0
SCALING_ROWWISE = 1
MX_ROUNDING_FLOOR = 0
MX_ROUNDING_RCEIL = 1
GEMM_BACKEND_AUTO = 0
#: hipfp8_gemm_impl and hipfp8_gemm_reason, by value (the names the plan query reports).
GEMM_IMPL_NAMES = ("cpu", "reference", "cutlass-sm90", "ck-gfx942", "ck-gfx950")
GEMM_REASON_NAMES = (None, "requested", "no-library", "format-pair", "shape", "alignment")


class Hipfp8Error(RuntimeError):
    """A hipfp8 C call failed: `status` is the hipfp8_status value, the message says why."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _struct(name, fields):
    return type(name, (ctypes.Structure,), {"_fields_": [("size", c_size_t)] + fields})


Cast2d = _struct("Cast2d", [("input_dtype", c_uint32), ("format", c_uint32), ("flags", c_uint32),
                            ("m", c_size_t), ("k", c_size_t)])
Cast3d = _struct("Cast3d", [("input_dtype", c_uint32), ("format", c_uint32), ("flags", c_uint32),
                            ("e", c_size_t), ("k", c_size_t), ("n", c_size_t)])
CastDual = _struct("CastDual", [("input_dtype", c_uint32), ("format", c_uint32), ("flags", c_uint32),
                                ("input_dtype2", c_uint32), ("m", c_size_t), ("k1", c_size_t),
                                ("k2", c_size_t)])
CastDualPadded = _struct("CastDualPadded", [("input_dtype", c_uint32), ("format", c_uint32),
                                            ("flags", c_uint32), ("input_dtype2", c_uint32),
                                            ("m", c_size_t), ("k1", c_size_t), ("k2", c_size_t),
                                            ("m_cap", c_size_t)])
Tensorwise = _struct("Tensorwise", [("input_dtype", c_uint32), ("format", c_uint32),
                                    ("flags", c_uint32), ("n", c_size_t)])
Padded = _struct("Padded", [("input_dtype", c_uint32), ("format", c_uint32), ("flags", c_uint32),
                            ("m", c_size_t), ("k", c_size_t), ("m_cap", c_size_t)])
CastTranspose = _struct("CastTranspose", [("input_dtype", c_uint32), ("format", c_uint32),
                                          ("flags", c_uint32), ("scaling", c_uint32),
                                          ("m", c_size_t), ("k", c_size_t)])
Mxfp8 = _struct("Mxfp8", [("input_dtype", c_uint32), ("format", c_uint32), ("rounding", c_uint32),
                          ("m", c_size_t), ("k", c_size_t)])
Gemm2d3d = _struct("Gemm2d3d", [("a_format", c_uint32), ("b_format", c_uint32),
                                ("backend", c_uint32), ("m", c_size_t), ("k", c_size_t),
                                ("n", c_size_t), ("e", c_size_t)])
Gemm2d2d = _struct("Gemm2d2d", [("a_format", c_uint32), ("b_format", c_uint32),
                                ("backend", c_uint32), ("n", c_size_t), ("mt", c_size_t),
                                ("k", c_size_t)])
Swiglu = _struct("Swiglu", [("input_dtype", c_uint32), ("format", c_uint32), ("flags", c_uint32),
                            ("m", c_size_t), ("i", c_size_t)])
Experts = _struct("Experts", [("input_dtype", c_uint32), ("format", c_uint32),
                              ("grad_format", c_uint32), ("flags", c_uint32), ("backend", c_uint32),
                              ("m", c_size_t), ("d", c_size_t), ("i", c_size_t), ("e", c_size_t)])
Dispatch = _struct("Dispatch", [("input_dtype", c_uint32), ("format", c_uint32), ("flags", c_uint32),
                                ("t", c_size_t), ("k", c_size_t), ("topk", c_size_t),
                                ("align", c_size_t), ("m_cap", c_size_t)])
Combine = _struct("Combine", [("input_dtype", c_uint32), ("t", c_size_t), ("k", c_size_t),
                              ("topk", c_size_t), ("m_cap", c_size_t)])

# Every op: (context, descriptor, then one (pointer, element count) pair per buffer, stream).
_P, _N = c_void_p, c_size_t
_BUF = [_P, _N]
_OPS = {
    "rowwise_2d": (Cast2d, _BUF * 3),
    "colwise_3d": (Cast3d, _BUF * 3),
    "rowwise_3d_transpose_rhs": (Cast3d, _BUF * 3),
    "per_group_colwise": (Cast2d, _BUF * 4),  # x, offs, out, scales
    "per_group_rowwise": (Cast2d, _BUF * 4),
    "per_group_colwise_dual": (CastDual, _BUF * 7),  # x1, x2, offs, out1, s1, out2, s2
    "per_group_colwise_dual_padded": (CastDualPadded, _BUF * 8),  # ... s2, padded_offs
    "tensorwise": (Tensorwise, _BUF * 4),
    "tensorwise_scaled": (Tensorwise, _BUF * 4),
    "blockwise_1x128": (Cast2d, _BUF * 3),
    "blockwise_128x128": (Cast2d, _BUF * 3),
    "rowwise_2d_padded": (Padded, _BUF * 5),
    "cast_transpose": (CastTranspose, _BUF * 5),
    "cast_transpose_scaled": (Cast2d, _BUF * 5),
    "mxfp8_dim0": (Mxfp8, _BUF * 3),
    "mxfp8_dim1": (Mxfp8, _BUF * 3),
    "moe_weights_dual": (Cast3d, _BUF * 5),  # x, out, scales, out_t, scales_t
    "moe_act_dual": (Cast2d, _BUF * 6),  # x, offs, out, scales, out_col, scales_col
    "moe_swiglu_quant": (Swiglu, _BUF * 6),  # gu, offs, out, scales, out_col, scales_col
    "moe_swiglu_bwd_quant": (Swiglu, _BUF * 7),  # grad_h, gu, offs, out, ... scales_col
    # x, perm, offs, offs_pad, slot_row, out, scales, out_col, scales_col
    "moe_dispatch_dual": (Dispatch, _BUF * 9),
    "moe_combine_bwd_dual": (Dispatch, _BUF * 10),  # dout, weights, then as moe_dispatch_dual
    "moe_combine": (Combine, _BUF * 4),  # y, slot_row, weights, out
    "moe_combine_bwd_scores": (Combine, _BUF * 4),  # dout, y, slot_row, dweights
    "grouped_gemm_2d3d": (Gemm2d3d, _BUF * 7),  # a, b, offs, sa, sb, out, workspace
    "grouped_gemm_2d2d": (Gemm2d2d, _BUF * 7),
}


def library_path():
    """The libhipfp8.so this package loads: $HIPFP8_LIB, else the one inside the wheel."""
    env = os.environ.get("HIPFP8_LIB")
    if env:
        return env
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "libhipfp8.so")
    if os.path.exists(here):
        return here
    raise ImportError(
        "hipfp8: the bundled libhipfp8.so is missing (a source checkout? build a wheel with "
        "scripts/build-wheel.sh, or point HIPFP8_LIB at a libhipfp8.so)")


class _Lib:
    """The loaded library: one ctypes function object per op, argtypes set once."""

    def __init__(self, path):
        self.path = path
        self.dll = d = ctypes.CDLL(path)
        d.hipfp8_status_string.restype = c_char_p
        d.hipfp8_status_string.argtypes = [c_uint32]
        d.hipfp8_last_error_message.restype = c_char_p
        d.hipfp8_last_error_message.argtypes = []
        for name, res, args in [
            ("hipfp8_abi_version", c_uint32, []),
            ("hipfp8_version", c_uint32, []),
            ("hipfp8_context_create", c_uint32, [c_uint32, c_int32, POINTER(c_void_p)]),
            ("hipfp8_context_destroy", c_uint32, [c_void_p]),
            ("hipfp8_context_backend", c_uint32, [c_void_p, POINTER(c_uint32)]),
            ("hipfp8_context_native_format", c_uint32, [c_void_p, POINTER(c_uint32)]),
            ("hipfp8_context_resolve_format", c_uint32, [c_void_p, c_uint32, POINTER(c_uint32)]),
            ("hipfp8_context_arch", c_uint32, [c_void_p, c_void_p, c_size_t, POINTER(c_size_t)]),
            ("hipfp8_grouped_gemm_workspace_size", c_uint32,
             [c_void_p, c_uint32, c_uint32, c_uint32, c_size_t, POINTER(c_size_t)]),
            ("hipfp8_grouped_gemm_2d2d_workspace_size", c_uint32,
             [c_void_p, POINTER(Gemm2d2d), c_size_t, POINTER(c_size_t)]),
            # ctx, desc, a, b, out, num_groups, implementation, reason, buf, buf_len, len
            ("hipfp8_grouped_gemm_2d3d_plan", c_uint32,
             [c_void_p, POINTER(Gemm2d3d), c_void_p, c_void_p, c_void_p, c_size_t,
              POINTER(c_uint32), POINTER(c_uint32), c_void_p, c_size_t, POINTER(c_size_t)]),
            ("hipfp8_grouped_gemm_2d2d_plan", c_uint32,
             [c_void_p, POINTER(Gemm2d2d), c_void_p, c_void_p, c_void_p, c_size_t,
              POINTER(c_uint32), POINTER(c_uint32), c_void_p, c_size_t, POINTER(c_size_t)]),
            # the experts recipe (include/hipfp8.h: "The experts block")
            ("hipfp8_moe_experts_weight_cache_create", c_uint32,
             [c_void_p, POINTER(Experts), POINTER(c_void_p)]),
            ("hipfp8_weight_cache_destroy", c_uint32, [c_void_p]),
            ("hipfp8_weight_cache_refresh", c_uint32,
             [c_void_p, c_void_p, c_uint32, _P, _N, _P, _N, POINTER(c_uint64), c_void_p]),
            ("hipfp8_weight_cache_refresh_halves", c_uint32,
             [c_void_p, c_void_p, c_uint32, _P, _N, _P, _N, _P, _N, POINTER(c_uint64), c_void_p]),
            ("hipfp8_weight_cache_invalidate", c_uint32, [c_void_p]),
            ("hipfp8_weight_cache_generation", c_uint32, [c_void_p, POINTER(c_uint64)]),
            ("hipfp8_moe_experts_saved_size", c_uint32,
             [c_void_p, POINTER(Experts), POINTER(c_size_t)]),
            ("hipfp8_moe_experts_forward_workspace_size", c_uint32,
             [c_void_p, POINTER(Experts), POINTER(c_size_t)]),
            ("hipfp8_moe_experts_backward_workspace_size", c_uint32,
             [c_void_p, POINTER(Experts), POINTER(c_size_t)]),
            # ctx, desc, cache, x, offs, y, saved, workspace, generation, stream
            ("hipfp8_moe_experts_forward", c_uint32,
             [c_void_p, POINTER(Experts), c_void_p] + _BUF * 5 + [POINTER(c_uint64), c_void_p]),
            # ctx, desc, cache, generation, saved, dy, offs, dx, dw13, dw2, workspace, stream
            ("hipfp8_moe_experts_backward", c_uint32,
             [c_void_p, POINTER(Experts), c_void_p, c_uint64] + _BUF * 7 + [c_void_p]),
            ("hipfp8_moe_experts_precast_sizes", c_uint32,
             [c_void_p, POINTER(Experts)] + [POINTER(c_size_t)] * 3),
            # ctx, desc, cache, x, x_scales, offs, y, saved, workspace, generation, stream
            ("hipfp8_moe_experts_forward_precast", c_uint32,
             [c_void_p, POINTER(Experts), c_void_p] + _BUF * 6 + [POINTER(c_uint64), c_void_p]),
            # ctx, desc, cache, generation, saved, dy, dy_scales, dy_col, dy_col_scales, x_col,
            # x_col_scales, offs, dx, dw13, dw2, workspace, stream
            ("hipfp8_moe_experts_backward_precast", c_uint32,
             [c_void_p, POINTER(Experts), c_void_p, c_uint64] + _BUF * 12 + [c_void_p]),
        ]:
            f = getattr(d, name)
            f.restype, f.argtypes = res, args
        # The ops' function objects take every argument as c_void_p -- the context, the
        # descriptor's address (ctypes.addressof), each buffer's pointer and element count,
        # the stream -- because ctypes converts a Python int to c_void_p in about half the
        # time of c_size_t or a POINTER(struct) (per call: the host cost of every torch op).
        # A size_t and a pointer have one width and one argument class in every supported ABI
        # (checked below), so the C side reads the same values.
        if ctypes.sizeof(c_size_t) != ctypes.sizeof(c_void_p):
            raise ImportError("hipfp8: size_t and pointers differ in width on this platform")
        self.ops = {}
        for name, (_, bufs) in _OPS.items():
            f = getattr(d, "hipfp8_" + name)
            f.restype = c_uint32
            f.argtypes = [c_void_p] * (len(bufs) + 3)
            self.ops[name] = f
        self.abi_version = d.hipfp8_abi_version()
        self.version = d.hipfp8_version()

    def error(self, status, what):
        msg = self.dll.hipfp8_last_error_message().decode(errors="replace")
        name = self.dll.hipfp8_status_string(status).decode(errors="replace")
        return Hipfp8Error(status, f"{what}: {name}" + (f" -- {msg}" if msg else ""))


_lock = threading.RLock()
_the_lib = None
_contexts = {}


def lib():
    """The process-wide library (loaded on first use)."""
    global _the_lib
    if _the_lib is None:
        with _lock:
            if _the_lib is None:
                _the_lib = _Lib(library_path())
    return _the_lib


def check(status, what):
    if status != STATUS_SUCCESS:
        raise lib().error(status, what)


class Context:
    """A hipfp8 context for one device: the handle plus what the ops ask of it per call."""

    def __init__(self, backend, device):
        L = lib()
        h = c_void_p()
        st = L.dll.hipfp8_context_create(backend, device, ctypes.byref(h))
        if st == STATUS_BACKEND_UNAVAILABLE:
            where = "the CPU" if backend == BACKEND_CPU else f"GPU {device}"
            raise L.error(st, f"hipfp8: no backend for {where} in {L.path} (a CPU-only build? "
                              "install the wheel built for your GPU)")
        check(st, "hipfp8_context_create")
        self.handle = h.value
        self.backend = backend
        self.device = device
        nf = c_uint32()
        check(L.dll.hipfp8_context_native_format(self.handle, ctypes.byref(nf)), "native_format")
        self.native_e4m3 = nf.value
        check(L.dll.hipfp8_context_resolve_format(self.handle, FORMAT_AUTO_E5M2, ctypes.byref(nf)),
              "resolve_format")
        self.native_e5m2 = nf.value
        n = c_size_t()
        buf = ctypes.create_string_buffer(64)
        check(L.dll.hipfp8_context_arch(self.handle, buf, 64, ctypes.byref(n)), "arch")
        self.arch = buf.value.decode()
        self._ws = {}
        self._experts = {}
        self._precast = {}

    def experts_sizes(self, desc):
        """(saved, forward workspace, backward workspace) bytes of an experts descriptor
        (`Experts`), cached by its contents."""
        key = (desc.input_dtype, desc.format, desc.grad_format, desc.flags, desc.backend,
               desc.m, desc.d, desc.i, desc.e)
        v = self._experts.get(key)
        if v is None:
            d = lib().dll
            v = []
            for f in (d.hipfp8_moe_experts_saved_size, d.hipfp8_moe_experts_forward_workspace_size,
                      d.hipfp8_moe_experts_backward_workspace_size):
                n = c_size_t()
                check(f(self.handle, ctypes.byref(desc), ctypes.byref(n)), f.__name__)
                v.append(n.value)
            if len(self._experts) > 4096:
                self._experts.clear()
            v = self._experts[key] = tuple(v)
        return v

    def experts_precast_sizes(self, desc):
        """(saved, forward workspace, backward workspace) bytes of the pre-cast experts calls
        (hipfp8_moe_experts_precast_sizes), cached by the descriptor's contents."""
        key = (desc.format, desc.grad_format, desc.flags, desc.backend, desc.m, desc.d, desc.i,
               desc.e)
        v = self._precast.get(key)
        if v is None:
            n = [c_size_t() for _ in range(3)]
            check(lib().dll.hipfp8_moe_experts_precast_sizes(
                self.handle, ctypes.byref(desc), *map(ctypes.byref, n)),
                "hipfp8_moe_experts_precast_sizes")
            if len(self._precast) > 4096:
                self._precast.clear()
            v = self._precast[key] = tuple(x.value for x in n)
        return v

    def workspace_size(self, a_format, b_format, groups):
        """Workspace bytes of a 2D x 3D grouped GEMM (hipfp8_grouped_gemm_workspace_size)."""
        key = (a_format, b_format, groups)
        v = self._ws.get(key)
        if v is None:
            n = c_size_t()
            check(lib().dll.hipfp8_grouped_gemm_workspace_size(
                self.handle, a_format, b_format, GEMM_BACKEND_AUTO, groups, ctypes.byref(n)),
                "hipfp8_grouped_gemm_workspace_size")
            v = self._ws[key] = n.value
        return v

    def gemm_plan(self, desc, a_ptr, b_ptr, groups):
        """What a grouped GEMM with this descriptor (`Gemm2d3d` or `Gemm2d2d`) would run:
        (implementation, reason, description) from hipfp8_grouped_gemm_{2d3d,2d2d}_plan, the
        names of GEMM_IMPL_NAMES / GEMM_REASON_NAMES (reason None unless the reference
        kernel). a_ptr / b_ptr: the operands' addresses (their 16-byte alignment counts); the
        output is assumed aligned (torch's allocator)."""
        d = lib().dll
        f = (d.hipfp8_grouped_gemm_2d2d_plan if isinstance(desc, Gemm2d2d)
             else d.hipfp8_grouped_gemm_2d3d_plan)
        imp, why, n = c_uint32(), c_uint32(), c_size_t()
        buf = ctypes.create_string_buffer(512)
        check(f(self.handle, ctypes.byref(desc), a_ptr, b_ptr, None, groups, ctypes.byref(imp),
                ctypes.byref(why), buf, len(buf), ctypes.byref(n)), f.__name__)
        name = lambda names, v: names[v] if v < len(names) else f"unknown ({v})"  # noqa: E731
        return (name(GEMM_IMPL_NAMES, imp.value), name(GEMM_REASON_NAMES, why.value),
                buf.value.decode(errors="replace"))

    def workspace_size_2d2d(self, desc, groups):
        """Workspace bytes of a 2D x 2D grouped GEMM (`Gemm2d2d` descriptor): with the staging
        area that lets groups start anywhere (hipfp8_grouped_gemm_2d2d_workspace_size; a
        smaller workspace is refused). Cached by the descriptor's contents; the query reads
        HIPFP8_GG_STAGE, so a process that changes it after a call gets a loud refusal, not
        another implementation."""
        key = (desc.a_format, desc.b_format, desc.backend, desc.n, desc.mt, desc.k, groups)
        v = self._ws.get(key)
        if v is None:
            n = c_size_t()
            check(lib().dll.hipfp8_grouped_gemm_2d2d_workspace_size(
                self.handle, ctypes.byref(desc), groups, ctypes.byref(n)),
                "hipfp8_grouped_gemm_2d2d_workspace_size")
            if len(self._ws) > 4096:
                self._ws.clear()
            v = self._ws[key] = n.value
        return v


def context(backend, device=0):
    """The cached context of (backend, device ordinal); created on first use."""
    key = (backend, device)
    c = _contexts.get(key)
    if c is None:
        with _lock:
            c = _contexts.get(key)
            if c is None:
                c = _contexts[key] = Context(backend, device)
    return c
