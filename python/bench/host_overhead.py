#!/usr/bin/env python3
"""Host time of hipfp8's PyTorch ops and layers: microseconds of wall time per call on tiny
tensors, so that the time is the Python / dispatcher / ctypes path, not the kernel.

    python3 python/bench/host_overhead.py --out host.json [--device cpu|cuda] [--no-compile]

Rows, all in one process:
- floors: what any op costs at least -- a plain torch op (`x.to(float8_e4m3fn)`), the output
  allocations, an empty torch.library custom op with a Python kernel called through
  torch.ops (the dispatcher's round trip into Python), and the raw C call of rowwise_2d /
  cast_transpose / grouped_gemm_2d3d through ctypes with prepared arguments (the C library's
  own validation and, on the CPU backend, its work on the tiny tensor);
- ops: every custom op through its Python entry point (`hipfp8.torch.rowwise_2d(x)`, the path
  eager code takes) and through `torch.ops.hipfp8.<op>` (the path compiled graphs take);
- layers: one fwd+bwd step of Float8Linear (tensorwise, rowwise, delayed) next to BF16
  nn.Linear, and of the MoE GroupedExperts (3 grouped GEMMs fwd, 6 bwd, 9 casts), eager and
  torch.compile(fullgraph=True); on CUDA also CUDA-graph replay of the step and, for the
  experts and the tensorwise linear, torch.compile(mode="reduce-overhead").
On CUDA the GPU never holds the host back (tiny kernels, the launch queue absorbs them); on
the CPU backend the op rows include the kernel's work on 8x32 elements, which the C-call
floor rows show. `--stub` (CPU) loads a stub libhipfp8.so instead (built here with `cc`: every
op returns success at once, writing nothing): the op rows are then exactly the package's own
host path -- Python, torch's allocations and dispatcher, ctypes -- with no library work.
Each row: wall time (median and min) and the thread's CPU time (min) over `--reps` batches of
`--n` calls, per call. The package timed is the one `import hipfp8` finds (an installed wheel
before this checkout's python/: set PYTHONPATH=python to time the checkout); the run prints
it and records it as meta.package.
Writes the rows as JSON and a Markdown table beside it.
"""

import argparse
import ctypes
import gc
import json
import os
import platform
import re
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
try:
    import hipfp8  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.dirname(HERE))
import hipfp8  # noqa: E402
import hipfp8.torch as hf  # noqa: E402
from hipfp8 import _lib as L  # noqa: E402

E4 = torch.float8_e4m3fn

_STUB_C = r"""
#include <stddef.h>
#include <stdint.h>
#include <string.h>
const char *hipfp8_status_string(uint32_t s) { (void)s; return "stub"; }
const char *hipfp8_last_error_message(void) { return ""; }
uint32_t hipfp8_abi_version(void) { return 0; }
uint32_t hipfp8_version(void) { return 0; }
uint32_t hipfp8_context_create(uint32_t b, int32_t d, void **out) { (void)b; (void)d; *out = (void *)16; return 0; }
uint32_t hipfp8_context_destroy(void *c) { (void)c; return 0; }
uint32_t hipfp8_context_backend(void *c, uint32_t *o) { (void)c; *o = 1; return 0; }
uint32_t hipfp8_context_native_format(void *c, uint32_t *o) { (void)c; *o = 2; return 0; }
uint32_t hipfp8_context_resolve_format(void *c, uint32_t f, uint32_t *o) { (void)c; *o = f == 1 ? 3 : 2; return 0; }
uint32_t hipfp8_context_arch(void *c, char *b, size_t n, size_t *len) { (void)c; (void)n; strcpy(b, "stub"); *len = 4; return 0; }
uint32_t hipfp8_grouped_gemm_workspace_size(void *c, uint32_t a, uint32_t b, uint32_t k, size_t g, size_t *o) { (void)c; (void)a; (void)b; (void)k; (void)g; *o = 0; return 0; }
"""


def build_stub(out_dir):
    """A libhipfp8.so stand-in whose ops return success at once (for the host path alone)."""
    import subprocess
    src = os.path.join(out_dir, "stub.c")
    so = os.path.join(out_dir, "libhipfp8-stub.so")
    with open(src, "w") as f:
        f.write(_STUB_C)
        # Every other entry point of the header: success at once, nothing read or written
        # (called with the real arguments; the stub reads none of them).
        have = set(re.findall(r"\b(hipfp8_\w+)\(", _STUB_C))
        with open(os.path.join(ROOT, "include", "hipfp8.h")) as h:
            decl = re.findall(r"^hipfp8_status (hipfp8_\w+)\(", h.read(), re.M)
        for name in dict.fromkeys(decl):
            if name not in have:
                f.write(f"uint32_t {name}(void) {{ return 0; }}\n")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", so, src], check=True)
    return so


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def per_call_us(fn, dev, n, reps):
    """Per call of fn(), in us, over `reps` batches of n calls: (wall median, wall min,
    thread-CPU-time min). The thread's CPU time (time.thread_time) leaves out the time the
    thread was not running, so it is the steady figure on a shared machine; wall time is what
    a training step sees."""
    for _ in range(max(20, n // 10)):
        fn()
    sync(dev)
    wall, cpu = [], []
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(reps):
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(n):
                fn()
            t1, c1 = time.perf_counter(), time.thread_time()
            wall.append((t1 - t0) / n * 1e6)
            cpu.append((c1 - c0) / n * 1e6)
            sync(dev)  # outside the timed window: the queue drains between batches
    finally:
        if gc_was:
            gc.enable()
    return statistics.median(wall), min(wall), min(cpu)


_noop_lib = None


def noop_op():
    """An empty custom op, hipfp8_bench::noop(Tensor x) -> Tensor, registered the way the
    hipfp8 ops are (torch.library.Library, CPU and CUDA Python kernels, a fake kernel)."""
    global _noop_lib
    if _noop_lib is None:
        _noop_lib = torch.library.Library("hipfp8_bench", "DEF")
        _noop_lib.define("noop(Tensor x) -> Tensor")

        def k(x):
            return torch.empty((), device=x.device)
        _noop_lib.impl("noop", k, "CPU")
        _noop_lib.impl("noop", k, "CUDA")
        torch.library.register_fake("hipfp8_bench::noop", k, lib=_noop_lib)
    return torch.ops.hipfp8_bench.noop


def raw_c_calls(dev, x, a8, b8, offs, isa, isb):
    """The C calls with prepared ctypes arguments: the floor of what the package adds."""
    lib = L.lib()
    backend = L.BACKEND_CPU if dev.type == "cpu" else L.BACKEND_GPU
    ctx = L.context(backend, dev.index or 0)
    stream = None if dev.type == "cpu" else torch.cuda.current_stream(dev).cuda_stream
    m, k = x.shape
    q = torch.empty(m, k, dtype=E4, device=dev)
    qt = torch.empty(k, m, dtype=E4, device=dev)
    s = torch.empty(m, device=dev)
    st = torch.empty((), device=dev)
    st2 = torch.empty((), device=dev)

    def buf(*ts):
        r = []
        for t in ts:
            r += [t.data_ptr(), t.numel()]
        return r

    d_row = L.Cast2d(ctypes.sizeof(L.Cast2d), L.DTYPE_BF16, L.FORMAT_E4M3FN, 1, m, k)
    args_row = [ctx.handle, ctypes.addressof(d_row)] + buf(x, q, s) + [stream]
    d_ct = L.CastTranspose(ctypes.sizeof(L.CastTranspose), L.DTYPE_BF16, L.FORMAT_E4M3FN, 0,
                           L.SCALING_TENSORWISE, m, k)
    args_ct = [ctx.handle, ctypes.addressof(d_ct)] + buf(x, q, qt, st, st2) + [stream]
    e, _, n = b8.shape
    out = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    nws = ctx.workspace_size(L.FORMAT_E4M3FN, L.FORMAT_E4M3FN, e) if dev.type == "cuda" else 0
    ws = torch.empty(nws, dtype=torch.uint8, device=dev)
    d_g = L.Gemm2d3d(ctypes.sizeof(L.Gemm2d3d), L.FORMAT_E4M3FN, L.FORMAT_E4M3FN,
                     L.GEMM_BACKEND_AUTO, m, k, n, e)
    args_g = ([ctx.handle, ctypes.addressof(d_g)] + buf(a8, b8, offs, isa, isb, out)
              + [ws.data_ptr() if nws else None, nws, stream])
    f_row, f_ct, f_g = lib.ops["rowwise_2d"], lib.ops["cast_transpose"], lib.ops["grouped_gemm_2d3d"]

    def check(f, args, what):
        stv = f(*args)
        if stv:
            raise lib.error(stv, what)
    for f, a, w in ((f_row, args_row, "rowwise_2d"), (f_ct, args_ct, "cast_transpose"),
                    (f_g, args_g, "grouped_gemm_2d3d")):
        check(f, a, w)
    # The same calls on an empty problem (m = 0, every group empty): the library validates
    # and dispatches as for any call, but its kernel has nothing to do (the CPU backend's
    # reference returns at once; a GPU launches nothing for rowwise_2d and the GEMM,
    # cast_transpose still writes the empty tensor's scales). These rows are the library's
    # own host path: handle lookup, descriptor, views, checks, dispatch.
    d_row0 = L.Cast2d(ctypes.sizeof(L.Cast2d), L.DTYPE_BF16, L.FORMAT_E4M3FN, 1, 0, k)
    args_row0 = [ctx.handle, ctypes.addressof(d_row0), x.data_ptr(), 0, q.data_ptr(), 0,
                 s.data_ptr(), 0, stream]
    d_ct0 = L.CastTranspose(ctypes.sizeof(L.CastTranspose), L.DTYPE_BF16, L.FORMAT_E4M3FN, 0,
                            L.SCALING_TENSORWISE, 0, k)
    args_ct0 = ([ctx.handle, ctypes.addressof(d_ct0), x.data_ptr(), 0, q.data_ptr(), 0,
                 qt.data_ptr(), 0] + buf(st, st2) + [stream])
    offs0 = torch.zeros(e, dtype=torch.int32, device=dev)
    d_g0 = L.Gemm2d3d(ctypes.sizeof(L.Gemm2d3d), L.FORMAT_E4M3FN, L.FORMAT_E4M3FN,
                      L.GEMM_BACKEND_AUTO, 0, k, n, e)
    args_g0 = ([ctx.handle, ctypes.addressof(d_g0), a8.data_ptr(), 0] + buf(b8, offs0)
               + [isa.data_ptr(), 0] + buf(isb) + [out.data_ptr(), 0]
               + [ws.data_ptr() if nws else None, nws, stream])
    for f, a, w in ((f_row, args_row0, "rowwise_2d m=0"), (f_ct, args_ct0, "cast_transpose m=0"),
                    (f_g, args_g0, "grouped_gemm_2d3d m=0")):
        check(f, a, w)
    # the lambdas hold the output tensors and the descriptors: the prepared pointers and
    # descriptor addresses must stay valid
    keep = (q, qt, s, st, st2, out, ws, offs0, d_row, d_ct, d_g, d_row0, d_ct0, d_g0)
    return {
        "C call: hipfp8_rowwise_2d, m = 0 (library host path)": lambda k=keep: f_row(*args_row0),
        "C call: hipfp8_cast_transpose, m = 0 (library host path)":
            lambda k=keep: f_ct(*args_ct0),
        "C call: hipfp8_grouped_gemm_2d3d, m = 0 (library host path)":
            lambda k=keep: f_g(*args_g0),
        "C call: hipfp8_rowwise_2d (ctypes, prepared args)": lambda k=keep: f_row(*args_row),
        "C call: hipfp8_cast_transpose (ctypes, prepared args)": lambda k=keep: f_ct(*args_ct),
        "C call: hipfp8_grouped_gemm_2d3d (ctypes, prepared args)": lambda k=keep: f_g(*args_g),
    }


def op_rows(dev):
    m, k = 8, 32
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(m, k, generator=g) * 3).bfloat16().to(dev)
    x2 = (torch.randn(m, 16, generator=g) * 3).bfloat16().to(dev)
    offs = torch.tensor([4, 8], dtype=torch.int32, device=dev)
    offs_k = torch.tensor([16, 32], dtype=torch.int32, device=dev)
    bt = (torch.randn(2, 24, k, generator=g) * 0.1).bfloat16().to(dev).transpose(-2, -1)
    scale = torch.full((), 2.0, device=dev)
    a8, sa = hf.rowwise_2d(x, E4)
    b8, sb = hf.colwise_3d(bt, E4)
    isa, isb = sa.reciprocal(), sb.reciprocal()
    d8, sd = hf.per_group_colwise(x, offs, E4)
    isd = sd.reciprocal()
    ops = torch.ops.hipfp8
    noop = noop_op()
    stub = L.lib().abi_version == 0
    rows = {
        ("floor", "torch: x.to(torch.float8_e4m3fn)"): lambda: x.to(E4),
        ("floor", "torch: 2 x torch.empty_strided (an op's outputs)"): lambda: (
            torch.empty_strided((m, k), (k, 1), dtype=E4, device=dev),
            torch.empty_strided((m,), (1,), dtype=torch.float32, device=dev)),
        ("floor", "torch.ops: empty custom op, Python kernel"): lambda: noop(x),
    }
    try:
        rows.update({("floor", name): f
                     for name, f in raw_c_calls(dev, x, a8, b8, offs, isa, isb).items()})
    except Exception as e:  # reported as a failed row, not hidden
        rows[("floor", "C calls (ctypes, prepared args)")] = Failed(e)
    entry = {
        "rowwise_2d": (lambda: hf.rowwise_2d(x), lambda: ops.rowwise_2d(x, E4, True)),
        "colwise_3d": (lambda: hf.colwise_3d(bt), lambda: ops.colwise_3d(bt, E4, True)),
        "rowwise_3d_transpose_rhs": (lambda: hf.rowwise_3d_transpose_rhs(bt),
                                     lambda: ops.rowwise_3d_transpose_rhs(bt, E4, True)),
        "per_group_colwise": (lambda: hf.per_group_colwise(x, offs),
                              lambda: ops.per_group_colwise(x, offs, E4, True)),
        "per_group_colwise_dual": (lambda: hf.per_group_colwise_dual(x, x2, offs),
                                   lambda: ops.per_group_colwise_dual(x, x2, offs, E4, True)),
        "per_group_rowwise": (lambda: hf.per_group_rowwise(x, offs_k),
                              lambda: ops.per_group_rowwise(x, offs_k, E4, True)),
        "tensorwise": (lambda: hf.tensorwise(x), lambda: ops.tensorwise(x, E4, False)),
        "tensorwise_scaled": (lambda: hf.tensorwise_scaled(x, scale),
                              lambda: ops.tensorwise_scaled(x, scale, E4)),
        "blockwise_1x128": (lambda: hf.blockwise_1x128(x), lambda: ops.blockwise_1x128(x, E4, False)),
        "rowwise_2d_padded": (lambda: hf.rowwise_2d_padded(x, offs),
                              lambda: ops.rowwise_2d_padded(x, offs, E4, True)),
        "cast_transpose": (lambda: hf.cast_transpose(x), lambda: ops.cast_transpose(x, E4, False, False)),
        "cast_transpose rowwise": (lambda: hf.cast_transpose(x, rowwise=True),
                                   lambda: ops.cast_transpose(x, E4, False, True)),
        "cast_transpose_scaled": (lambda: hf.cast_transpose_scaled(x, scale),
                                  lambda: ops.cast_transpose_scaled(x, scale, E4)),
        "mxfp8_dim0": (lambda: hf.mxfp8_dim0(x), lambda: ops.mxfp8_dim0(x, E4, False)),
        "grouped_gemm_2d3d": (lambda: hf.grouped_gemm_2d3d(a8, b8, offs, isa, isb),
                              lambda: ops.grouped_gemm_2d3d(a8, b8, offs, isa, isb)),
        "grouped_gemm_2d2d": (lambda: hf.grouped_gemm_2d2d(d8.t(), d8, offs, isd, isd),
                              lambda: ops.grouped_gemm_2d2d(d8.t(), d8, offs, isd, isd)),
    }
    # every entry point must agree with its torch.ops twin before it is timed (not with the
    # stub library, which writes nothing)
    for name, (f_py, f_op) in entry.items():
        try:
            a, b = f_py(), f_op()
            if stub:
                a = b = ()
            a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
            if name not in ("rowwise_2d_padded", "grouped_gemm_2d3d", "grouped_gemm_2d2d"):
                for u, v in zip(a, b):  # (the padded / GEMM outputs hold unwritten rows)
                    if not torch.equal(u.view(torch.uint8) if u.element_size() == 1 else u,
                                       v.view(torch.uint8) if v.element_size() == 1 else v):
                        raise AssertionError("the entry point and torch.ops disagree")
        except Exception as e:  # reported as failed rows, not hidden
            f_py = f_op = Failed(e)
        rows[("op", f"hipfp8.torch.{name}")] = f_py
        rows[("op via dispatcher", f"torch.ops.hipfp8.{name}")] = f_op
    return rows


def layer_rows(dev, compile_too, graphs):
    """One fwd+bwd step per call; tiny shapes (M=32 tokens, 64 -> 48; 2 experts)."""
    torch.manual_seed(0)
    rows = {}
    x = torch.randn(32, 64, device=dev, dtype=torch.bfloat16).requires_grad_()
    counts = torch.tensor([16, 16], device=dev)

    def stepper(mod, params):
        def step():
            x.grad = None
            for p in params:
                p.grad = None
            mod(x).float().sum().backward()
        return step

    def experts_stepper(mod):
        params = list(mod.parameters())

        def step():
            x.grad = None
            for p in params:
                p.grad = None
            mod(x, counts).float().sum().backward()
        return step

    mods = {}
    lin = torch.nn.Linear(64, 48, bias=False, device=dev, dtype=torch.bfloat16)
    mods["nn.Linear bf16 (reference)"] = (lin, [lin.weight], False)
    for r in ("tensorwise", "rowwise", "delayed"):
        f8 = hf.Float8Linear(64, 48, bias=False, recipe=r, device=dev, dtype=torch.bfloat16)
        mods[f"hipfp8 Float8Linear {r}"] = (f8, [f8.weight], False)
    ex = hf.GroupedExperts(64, 32, 2, device=dev, dtype=torch.bfloat16)
    for p in ex.parameters():
        torch.nn.init.normal_(p, std=0.05)
    mods["hipfp8 GroupedExperts (MoE layer: 3 FP8 grouped GEMMs fwd, 6 bwd)"] = (ex, None, True)

    later = []
    for name, (mod, params, is_ex) in mods.items():
        def mk(m, params=params, is_ex=is_ex):
            return experts_stepper(m) if is_ex else stepper(m, params)
        rows[("layer eager", f"{name} fwd+bwd")] = mk(mod)
        if graphs and dev.type == "cuda":
            def make_graph(mod=mod, mk=mk):
                step = mk(mod)
                st = torch.cuda.Stream()
                st.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(st):
                    for _ in range(3):
                        step()
                torch.cuda.current_stream().wait_stream(st)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=st):
                    step()
                return g.replay
            rows[("layer CUDA graph", f"{name} fwd+bwd, CUDA graph replay")] = Lazy(make_graph)
        if compile_too:
            def make_compiled(mod=mod, mk=mk):
                torch._dynamo.reset()
                s = mk(torch.compile(mod, fullgraph=True, dynamic=False))
                s()  # compile outside the timing
                return s
            prio = (0 if "GroupedExperts" in name else 1 if "tensorwise" in name
                    else 2 if "reference" in name else 3)
            later.append((prio, ("layer compiled", f"{name} fwd+bwd, torch.compile fullgraph"),
                          Lazy(make_compiled)))
            if dev.type == "cuda" and ("GroupedExperts" in name or "tensorwise" in name):
                def make_ro(mod=mod, mk=mk):
                    torch._dynamo.reset()
                    s = mk(torch.compile(mod, mode="reduce-overhead", fullgraph=True, dynamic=False))
                    for _ in range(3):  # compile, warm up, record the graphs
                        s()
                    return s
                later.append((prio + 1.5, ("layer compiled", f"{name} fwd+bwd, torch.compile "
                                           "reduce-overhead (CUDA graphs)"), Lazy(make_ro)))
    # the compiles last (the first rows to go when the budget runs out), the experts' and the
    # tensorwise linear's first
    for _, key, row in sorted(later, key=lambda t: t[0]):
        rows[key] = row
    return rows


class Failed:
    """A row that could not be prepared: reported with its error, never timed."""

    def __init__(self, err):
        self.err = err


class Lazy:
    """A row whose callable is built (compiled, captured) only when its turn comes."""

    def __init__(self, make):
        self.make = make


def write(a, dev, res, skipped, t_start, final=False):
    """The JSON and the Markdown table of the rows so far (rewritten after every row, so a
    run cut short by a time limit still leaves what it measured)."""
    meta = {"device": str(dev) if dev.type == "cpu" else torch.cuda.get_device_name(dev),
            "backend": "CPU" if dev.type == "cpu" else "GPU", "torch": torch.__version__,
            "python": platform.python_version(), "library": L.lib().path,
            "hipfp8": getattr(hipfp8, "__version__", "?"),
            "package": os.path.dirname(hipfp8.__file__), "cpu_count": os.cpu_count(),
            "stub_library": a.stub, "skipped": skipped,
            "timing": f"per call: wall time median and min, and the calling thread's CPU time "
                      f"(min), over {a.reps} batches"}
    if not final:
        meta["incomplete"] = True
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"meta": meta, "rows": res}, f, indent=1)
    lines = [f"Host time per call, {meta['device']} ({meta['backend']} backend"
             f"{', STUB library: no C work' if a.stub else ''}), torch "
             f"{meta['torch']}, Python {meta['python']}; {meta['timing']}.", "",
             "| group | call | wall us (median) | wall us (min) | thread CPU us (min) |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['group']} | {r['name']} | {r['us_median']} | {r['us_min']} | "
              f"{r['us_thread_min']} |" for r in res]
    if skipped:
        lines += ["", "Not measured: " + "; ".join(skipped)]
    with open(os.path.splitext(a.out)[0] + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    if final:
        print(f"wrote {a.out} ({len(res)} rows, {len(skipped)} skipped) in {time.time() - t_start:.0f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="JSON file (a .md table is written beside it)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--n", type=int, default=500, help="calls per batch (ops)")
    ap.add_argument("--reps", type=int, default=9, help="batches per row")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    ap.add_argument("--no-layers", action="store_true", help="ops only")
    ap.add_argument("--match", default="", help="only the rows whose name contains this")
    ap.add_argument("--budget-s", type=float, default=1e9,
                    help="rows not started within this many seconds are listed as skipped")
    ap.add_argument("--stub", action="store_true",
                    help="CPU: time the package's host path over a stub library (no C work)")
    a = ap.parse_args()
    t_start = time.time()
    if a.stub:
        import tempfile
        if a.device != "cpu":
            ap.error("--stub is for --device cpu")
        os.environ["HIPFP8_LIB"] = build_stub(tempfile.mkdtemp(prefix="hipfp8-stub-"))
    print(f"timing the package at {os.path.dirname(hipfp8.__file__)}", flush=True)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        dev = torch.device("cuda", torch.cuda.current_device())
    rows = op_rows(dev)
    if not a.no_layers:
        rows.update(layer_rows(dev, not a.no_compile, graphs=True))
    res, skipped = [], []
    for (group, name), fn in rows.items():
        if a.match not in name:
            continue
        if time.time() - t_start > a.budget_s:
            skipped.append(f"{group}: {name} (time budget)")
            continue
        if isinstance(fn, Failed):
            e = fn.err
            print(f"FAILED {group}: {name}: {type(e).__name__}: {e}", flush=True)
            skipped.append(f"{group}: {name} (failed: {type(e).__name__}: {str(e)[:200]})")
            continue
        if isinstance(fn, Lazy):
            try:
                fn = fn.make()
            except Exception as e:  # reported, not hidden
                print(f"FAILED to build {group}: {name}: {type(e).__name__}: {e}", flush=True)
                skipped.append(f"{group}: {name} (failed: {type(e).__name__}: {str(e)[:200]})")
                continue
        n = a.n if not group.startswith("layer") else max(20, a.n // 10)
        try:
            med, mn, cpu = per_call_us(fn, dev, n, a.reps)
        except Exception as e:  # reported, not hidden
            print(f"FAILED {group}: {name}: {type(e).__name__}: {e}", flush=True)
            skipped.append(f"{group}: {name} (failed: {type(e).__name__}: {str(e)[:200]})")
            continue
        res.append({"group": group, "name": name, "us_median": round(med, 2), "us_min": round(mn, 2),
                    "us_thread_min": round(cpu, 2), "calls": n * a.reps})
        print(f"{group:18} wall {med:9.2f} us (min {mn:8.2f}), thread CPU {cpu:8.2f} us  {name}",
              flush=True)
        write(a, dev, res, skipped, t_start)
    write(a, dev, res, skipped, t_start, final=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
