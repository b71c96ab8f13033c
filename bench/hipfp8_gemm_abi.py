"""ctypes bindings of hipfp8's grouped-GEMM C ABI (include/hipfp8.h), for the benchmarks.

No torch, no numpy: callers pass raw addresses (ints) and element counts, so the same
bindings serve torch tensors on the H200 (bench/compare_grouped_gemm.py) and numpy arrays on
a CPU context (bench/check_bindings.py, run by CI so a stale binding fails there).
"""
import ctypes
from ctypes import POINTER, byref, c_char, c_char_p, c_int32, c_size_t, c_uint32, c_void_p

# hipfp8_backend, hipfp8_format, hipfp8_gemm_backend, hipfp8_gemm_impl (include/hipfp8.h)
BACKEND_CPU = 1
BACKEND_GPU = 2
FMT = {"e4m3fn": 2, "e5m2": 3, "e4m3fnuz": 4, "e5m2fnuz": 5}
GEMM_AUTO, GEMM_REFERENCE, GEMM_LIBRARY = 0, 1, 2
IMPL_NAMES = {0: "cpu", 1: "reference", 2: "cutlass-sm90", 3: "ck-gfx942", 4: "ck-gfx950"}


class Desc2d3d(ctypes.Structure):
    """hipfp8_grouped_gemm_2d3d_desc"""
    _fields_ = [("size", c_size_t), ("a_format", c_uint32), ("b_format", c_uint32), ("backend", c_uint32),
                ("m", c_size_t), ("k", c_size_t), ("n", c_size_t), ("e", c_size_t)]


class Desc2d2d(ctypes.Structure):
    """hipfp8_grouped_gemm_2d2d_desc"""
    _fields_ = [("size", c_size_t), ("a_format", c_uint32), ("b_format", c_uint32), ("backend", c_uint32),
                ("n", c_size_t), ("mt", c_size_t), ("k", c_size_t)]


class DescBw2d3d(ctypes.Structure):
    """hipfp8_grouped_gemm_blockwise_2d3d_desc"""
    _fields_ = [("size", c_size_t), ("a_format", c_uint32), ("b_format", c_uint32), ("backend", c_uint32),
                ("m", c_size_t), ("k", c_size_t), ("n", c_size_t), ("e", c_size_t)]


class DescBw2d2d(ctypes.Structure):
    """hipfp8_grouped_gemm_blockwise_2d2d_desc"""
    _fields_ = [("size", c_size_t), ("a_format", c_uint32), ("b_format", c_uint32), ("backend", c_uint32),
                ("n", c_size_t), ("mt", c_size_t), ("k", c_size_t)]


class Gemm:
    """One library and one context."""

    def __init__(self, lib_path, backend=BACKEND_GPU):
        lib = ctypes.CDLL(lib_path)
        lib.hipfp8_status_string.restype = c_char_p
        lib.hipfp8_status_string.argtypes = [c_uint32]
        lib.hipfp8_last_error_message.restype = c_char_p
        lib.hipfp8_abi_version.restype = c_uint32
        lib.hipfp8_context_create.restype = c_uint32
        lib.hipfp8_context_create.argtypes = [c_uint32, c_int32, POINTER(c_void_p)]
        lib.hipfp8_context_destroy.restype = c_uint32
        lib.hipfp8_context_destroy.argtypes = [c_void_p]
        P, SZ = c_void_p, c_size_t
        for name in ("hipfp8_grouped_gemm_2d3d", "hipfp8_grouped_gemm_2d2d", "hipfp8_grouped_gemm_blockwise_2d3d",
                     "hipfp8_grouped_gemm_blockwise_2d2d"):
            f = getattr(lib, name)
            f.restype = c_uint32
            # ctx, desc, a, a_len, b, b_len, offs, groups, sa, sa_len, sb, sb_len, out, out_len,
            # workspace, workspace_bytes, stream
            f.argtypes = [P, P, P, SZ, P, SZ, P, SZ, P, SZ, P, SZ, P, SZ, P, SZ, P]
        for name in ("hipfp8_grouped_gemm_2d3d_plan", "hipfp8_grouped_gemm_2d2d_plan",
                     "hipfp8_grouped_gemm_blockwise_2d3d_plan", "hipfp8_grouped_gemm_blockwise_2d2d_plan"):
            f = getattr(lib, name)
            f.restype = c_uint32
            # ctx, desc, a, b, out, groups, implementation*, reason*, buf, buf_len, len*
            f.argtypes = [P, P, P, P, P, SZ, POINTER(c_uint32), POINTER(c_uint32), P, SZ, POINTER(c_size_t)]
        lib.hipfp8_grouped_gemm_workspace_size.restype = c_uint32
        lib.hipfp8_grouped_gemm_workspace_size.argtypes = [P, c_uint32, c_uint32, c_uint32, SZ, POINTER(c_size_t)]
        self.lib = lib
        self.ctx = c_void_p()
        self.check(lib.hipfp8_context_create(backend, 0, byref(self.ctx)), "hipfp8_context_create")

    def check(self, st, what):
        if st != 0:
            raise RuntimeError(f"{what}: {self.lib.hipfp8_status_string(st).decode()} -- "
                               f"{self.lib.hipfp8_last_error_message().decode()}")

    def close(self):
        if self.ctx:
            self.check(self.lib.hipfp8_context_destroy(self.ctx), "hipfp8_context_destroy")
            self.ctx = c_void_p()

    @staticmethod
    def desc_2d3d(m, k, n, e, fa="e4m3fn", fb="e4m3fn", backend=GEMM_AUTO):
        return Desc2d3d(ctypes.sizeof(Desc2d3d), FMT[fa], FMT[fb], backend, m, k, n, e)

    @staticmethod
    def desc_2d2d(n, mt, k, fa="e4m3fn", fb="e4m3fn", backend=GEMM_AUTO):
        return Desc2d2d(ctypes.sizeof(Desc2d2d), FMT[fa], FMT[fb], backend, n, mt, k)

    def gemm_2d3d(self, d, a, a_len, b, b_len, offs, groups, sa, sa_len, sb, sb_len, out, out_len,
                  stream=None, workspace=None, workspace_bytes=0):
        """a (m,k) row-major; b = OPS.md's (e,k,n) column-major, i.e. (e,n,k) contiguous."""
        self.check(self.lib.hipfp8_grouped_gemm_2d3d(self.ctx, byref(d), a, a_len, b, b_len, offs, groups, sa, sa_len,
                                                     sb, sb_len, out, out_len, workspace, workspace_bytes, stream),
                   "hipfp8_grouped_gemm_2d3d")

    @staticmethod
    def desc_bw_2d3d(m, k, n, e, fa="e4m3fn", fb="e4m3fn", backend=GEMM_AUTO):
        return DescBw2d3d(ctypes.sizeof(DescBw2d3d), FMT[fa], FMT[fb], backend, m, k, n, e)

    def gemm_bw_2d3d(self, d, a, a_len, b, b_len, offs, groups, sa, sa_len, sb, sb_len, out, out_len,
                     stream=None, workspace=None, workspace_bytes=0):
        """Blockwise-scaled 2D x 3D: a, b as gemm_2d3d; sa (m, ceil(k/128)), sb (e, ceil(n/128), ceil(k/128))."""
        self.check(self.lib.hipfp8_grouped_gemm_blockwise_2d3d(self.ctx, byref(d), a, a_len, b, b_len, offs, groups,
                                                               sa, sa_len, sb, sb_len, out, out_len, workspace,
                                                               workspace_bytes, stream),
                   "hipfp8_grouped_gemm_blockwise_2d3d")

    @staticmethod
    def desc_bw_2d2d(n, mt, k, fa="e4m3fn", fb="e4m3fn", backend=GEMM_AUTO):
        return DescBw2d2d(ctypes.sizeof(DescBw2d2d), FMT[fa], FMT[fb], backend, n, mt, k)

    def gemm_bw_2d2d(self, d, a, a_len, b, b_len, offs, groups, sa, sa_len, sb, sb_len, out, out_len,
                     stream=None, workspace=None, workspace_bytes=0):
        """Blockwise-scaled 2D x 2D: a, b as gemm_2d2d; sa (ceil(mt/128), n), sb (ceil(mt/128), k)."""
        self.check(self.lib.hipfp8_grouped_gemm_blockwise_2d2d(self.ctx, byref(d), a, a_len, b, b_len, offs, groups,
                                                               sa, sa_len, sb, sb_len, out, out_len, workspace,
                                                               workspace_bytes, stream),
                   "hipfp8_grouped_gemm_blockwise_2d2d")

    def gemm_2d2d(self, d, a, a_len, b, b_len, offs, groups, sa, sa_len, sb, sb_len, out, out_len,
                  stream=None, workspace=None, workspace_bytes=0):
        """a (n,mt) row-major; b = OPS.md's (mt,k) column-major, i.e. (k,mt) contiguous."""
        self.check(self.lib.hipfp8_grouped_gemm_2d2d(self.ctx, byref(d), a, a_len, b, b_len, offs, groups, sa, sa_len,
                                                     sb, sb_len, out, out_len, workspace, workspace_bytes, stream),
                   "hipfp8_grouped_gemm_2d2d")

    def plan(self, d, groups, a=None, b=None, out=None):
        """(implementation name, reason code, description) of the call `d` would make."""
        fn = {Desc2d3d: self.lib.hipfp8_grouped_gemm_2d3d_plan, Desc2d2d: self.lib.hipfp8_grouped_gemm_2d2d_plan,
              DescBw2d3d: self.lib.hipfp8_grouped_gemm_blockwise_2d3d_plan,
              DescBw2d2d: self.lib.hipfp8_grouped_gemm_blockwise_2d2d_plan}[type(d)]
        imp, why, n = c_uint32(), c_uint32(), c_size_t()
        buf = (c_char * 256)()
        self.check(fn(self.ctx, byref(d), a, b, out, groups, byref(imp), byref(why), buf, 256, byref(n)),
                   "hipfp8_grouped_gemm_plan")
        return IMPL_NAMES.get(imp.value, str(imp.value)), why.value, buf.value.decode()

    def workspace_size(self, fa, fb, backend, groups):
        n = c_size_t()
        self.check(self.lib.hipfp8_grouped_gemm_workspace_size(self.ctx, FMT[fa], FMT[fb], backend, groups, byref(n)),
                   "hipfp8_grouped_gemm_workspace_size")
        return n.value
