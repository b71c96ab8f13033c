"""hipfp8 FP8 grouped GEMM vs torch._scaled_grouped_mm (FP8 rowwise) and torch._grouped_mm (BF16)
on the DeepSeek-V3 671B EP=8 per-GPU MoE shapes of BENCHMARKS.md, in ONE process and run.

  python3 bench/compare_grouped_gemm.py LIBHIPFP8_SO [OUT_DIR]

The library is called through its C ABI with ctypes on torch tensors (data_ptr) and torch's
current stream; both sides are timed with triton.testing.do_bench (median). Each hipfp8
result is also checked against torch's FP8 output on the same inputs (similarity and max
relative error), so a timing is never reported for a wrong answer without saying so.
HIPFP8_GROUPED_GEMM_BACKEND picks the implementation per call: "library" (CUTLASS here; an
unsupported call is an error, never a silent fallback) or "reference"; HIPFP8_CUTLASS_CONFIG
the CUTLASS instance (cooperative 128x256 / pingpong 128x128). GG_IMPLS lists what to time.

Writes OUT_DIR/h200-gemm.json (rows: op, shape, groups, us, tflops, torch_us, ratio, ...) and
OUT_DIR/h200-gemm.md.
"""
import ctypes, json, os, sys, time
import torch
import triton
from triton.testing import do_bench

lib_path = sys.argv[1]
out_dir = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("OUT", ".")
dev = torch.device("cuda")
torch.manual_seed(0)
lib = ctypes.CDLL(lib_path)

# ---- C ABI (include/hipfp8.h) ----------------------------------------------------------
FMT_E4M3FN = 2
BACKEND_GPU = 2


class Desc2d3d(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("a_format", ctypes.c_uint32), ("b_format", ctypes.c_uint32),
                ("m", ctypes.c_size_t), ("k", ctypes.c_size_t), ("n", ctypes.c_size_t), ("e", ctypes.c_size_t)]


class Desc2d2d(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("a_format", ctypes.c_uint32), ("b_format", ctypes.c_uint32),
                ("n", ctypes.c_size_t), ("mt", ctypes.c_size_t), ("k", ctypes.c_size_t)]


P = ctypes.c_void_p
SZ = ctypes.c_size_t
for name in ("hipfp8_grouped_gemm_2d3d", "hipfp8_grouped_gemm_2d2d"):
    f = getattr(lib, name)
    f.restype = ctypes.c_uint32
    f.argtypes = [P, P, P, SZ, P, SZ, P, SZ, P, SZ, P, SZ, P, SZ, P]
lib.hipfp8_context_create.restype = ctypes.c_uint32
lib.hipfp8_context_create.argtypes = [ctypes.c_uint32, ctypes.c_int32, ctypes.POINTER(P)]
lib.hipfp8_last_error_message.restype = ctypes.c_char_p

ctx = P()
st = lib.hipfp8_context_create(BACKEND_GPU, 0, ctypes.byref(ctx))
assert st == 0, f"context: status {st}: {lib.hipfp8_last_error_message()}"


def ours_2d3d(a, b_enk, offs, sa, sb, out):
    """a (M,K) row-major; b_enk (E,N,K) contiguous = OPS.md's b (E,K,N) column-major."""
    m, k = a.shape
    e, n, kb = b_enk.shape
    assert kb == k and b_enk.is_contiguous() and a.is_contiguous()
    d = Desc2d3d(ctypes.sizeof(Desc2d3d), FMT_E4M3FN, FMT_E4M3FN, m, k, n, e)
    s = lib.hipfp8_grouped_gemm_2d3d(ctx, ctypes.byref(d), a.data_ptr(), a.numel(), b_enk.data_ptr(), b_enk.numel(),
                                     offs.data_ptr(), offs.numel(), sa.data_ptr(), sa.numel(), sb.data_ptr(), sb.numel(),
                                     out.data_ptr(), out.numel(), torch.cuda.current_stream().cuda_stream)
    if s != 0:
        raise RuntimeError(f"hipfp8_grouped_gemm_2d3d: status {s}: {lib.hipfp8_last_error_message()}")


def ours_2d2d(a, b_kmt, offs, sa, sb, out):
    """a (N,Mt) row-major; b_kmt (K,Mt) contiguous = OPS.md's b (Mt,K) column-major."""
    n, mt = a.shape
    k, mtb = b_kmt.shape
    assert mtb == mt and b_kmt.is_contiguous() and a.is_contiguous()
    d = Desc2d2d(ctypes.sizeof(Desc2d2d), FMT_E4M3FN, FMT_E4M3FN, n, mt, k)
    s = lib.hipfp8_grouped_gemm_2d2d(ctx, ctypes.byref(d), a.data_ptr(), a.numel(), b_kmt.data_ptr(), b_kmt.numel(),
                                     offs.data_ptr(), offs.numel(), sa.data_ptr(), sa.numel(), sb.data_ptr(), sb.numel(),
                                     out.data_ptr(), out.numel(), torch.cuda.current_stream().cuda_stream)
    if s != 0:
        raise RuntimeError(f"hipfp8_grouped_gemm_2d2d: status {s}: {lib.hipfp8_last_error_message()}")


# ---- shapes -----------------------------------------------------------------------------
MTOK, E, H, I = 32768, 32, 7168, 2048
f8 = torch.float8_e4m3fn


def zipf_sizes(total=MTOK, groups=E, s=1.2, empty=2, mult=16):
    """Zipf(s) expert sizes over `total` tokens, multiples of `mult`, the last `empty` experts
    empty (BENCHMARKS.md: >= 2 empty, one > 15% of the tokens)."""
    live = groups - empty
    w = [1.0 / (r ** s) for r in range(1, live + 1)]
    sz = [int(total * x / sum(w)) // mult * mult for x in w]
    sz[0] += total - sum(sz)
    sizes = sz + [0] * empty
    assert sum(sizes) == total and max(sizes) > 0.15 * total and sizes.count(0) >= 2
    return sizes


def offsets(sizes):
    return torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32).to(dev)


SPLITS = {"balanced": [MTOK // E] * E, "zipf": zipf_sizes()}


def bench(fn):
    return do_bench(fn, warmup=25, rep=150, return_mode="median")  # ms


def similarity(x, y):
    x = x.double()
    y = y.double()
    denom = (x * x + y * y).sum()
    diff = 1.0 - 2.0 * (x * y).sum() / denom if denom > 0 else torch.tensor(0.0)
    rel = ((x - y).abs().max() / y.abs().max().clamp_min(1e-30)).item()
    return float(diff), rel


rows = []
env = {"torch": torch.__version__, "triton": triton.__version__, "gpu": torch.cuda.get_device_name(),
       "lib": os.path.basename(lib_path), "splits": SPLITS}


def record(op, shape, split, flops, us, torch_us, bf16_us, diff, rel, impl):
    r = {"op": op, "shape": shape, "groups": split, "us": us, "tflops": flops / (us * 1e-6) / 1e12,
         "torch_us": torch_us, "torch_tflops": flops / (torch_us * 1e-6) / 1e12 if torch_us else None,
         "ratio": torch_us / us if torch_us else None,
         "bf16_us": bf16_us, "ratio_vs_bf16": bf16_us / us if bf16_us else None,
         "impl": impl, "sim_diff_vs_torch": diff, "max_rel_err_vs_torch": rel}
    rows.append(r)
    print(f"{op:6s} {shape:34s} {split:8s} {impl:20s} ours {us:8.1f} us {r['tflops']:7.1f} TF | torch fp8 "
          + (f"{torch_us:8.1f} us ratio {r['ratio']:.3f}" if torch_us else "n/a")
          + (f" | bf16 {bf16_us:8.1f} us" if bf16_us else "") + f" | diff {diff:.2e} maxrel {rel:.2e}", flush=True)


def select(impl):
    """impl = "reference" | "library[:cooperative|:pingpong]" (CUTLASS instance)."""
    backend, _, cfg = impl.partition(":")
    os.environ["HIPFP8_GROUPED_GEMM_BACKEND"] = backend
    os.environ["HIPFP8_CUTLASS_CONFIG"] = cfg or "auto"


def run_2d3d(k, n, split, impls):
    sizes = SPLITS[split]
    offs = offsets(sizes)
    A = torch.randn(MTOK, k, device=dev, dtype=torch.bfloat16)
    Bt = torch.randn(E, n, k, device=dev, dtype=torch.bfloat16)  # (E,N,K) contiguous = (E,K,N) column-major
    Af = A.to(f8)
    Bf = Bt.to(f8)
    sa = torch.rand(MTOK, device=dev, dtype=torch.float32) * 0.02 + 0.01
    sb = torch.rand(E, n, device=dev, dtype=torch.float32) * 0.02 + 0.01
    fl = 2 * MTOK * k * n
    shape = f"({MTOK},{k})x({E},{k},{n})"
    t_out = torch._scaled_grouped_mm(Af, Bf.transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=True)
    torch_us = bench(lambda: torch._scaled_grouped_mm(Af, Bf.transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=True)) * 1e3
    bf_us = bench(lambda: torch._grouped_mm(A, Bt.transpose(-2, -1), offs=offs, out_dtype=torch.bfloat16)) * 1e3
    for impl in impls:
        select(impl)
        out = torch.full((MTOK, n), -768.0, device=dev, dtype=torch.bfloat16)
        ours_2d3d(Af, Bf, offs, sa, sb, out)
        torch.cuda.synchronize()
        diff, rel = similarity(out, t_out)
        us = bench(lambda: ours_2d3d(Af, Bf, offs, sa, sb, out)) * 1e3
        record("2d3d", shape, split, fl, us, torch_us, bf_us, diff, rel, impl)
    del A, Bt, Af, Bf, t_out


def run_2d2d(nrows, kcols, split, impls):
    """wgrad: a (nrows, Mt) row-major (= X^T), b (Mt, kcols) column-major, out (E, nrows, kcols)."""
    sizes = SPLITS[split]
    offs = offsets(sizes)
    X = torch.randn(nrows, MTOK, device=dev, dtype=torch.bfloat16)
    Yt = torch.randn(kcols, MTOK, device=dev, dtype=torch.bfloat16)  # (K, Mt) contiguous = (Mt, K) column-major
    Xf = X.to(f8)
    Yf = Yt.to(f8)
    sa = torch.rand(E * nrows, device=dev, dtype=torch.float32) * 0.02 + 0.01
    sb = torch.rand(E * kcols, device=dev, dtype=torch.float32) * 0.02 + 0.01
    fl = 2 * MTOK * nrows * kcols
    shape = f"({nrows},{MTOK})x({MTOK},{kcols})"
    try:
        t_out = torch._scaled_grouped_mm(Xf, Yf.t(), sa, sb, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=True)
        torch_us = bench(lambda: torch._scaled_grouped_mm(Xf, Yf.t(), sa, sb, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=True)) * 1e3
    except Exception as ex:  # keep going: our numbers are still measured
        print("torch _scaled_grouped_mm 2d2d failed:", repr(ex))
        t_out, torch_us = None, None
    try:
        bf_us = bench(lambda: torch._grouped_mm(X, Yt.t(), offs=offs, out_dtype=torch.bfloat16)) * 1e3
    except Exception as ex:
        print("torch _grouped_mm 2d2d failed:", repr(ex))
        bf_us = None
    for impl in impls:
        select(impl)
        out = torch.full((E, nrows, kcols), -768.0, device=dev, dtype=torch.bfloat16)
        ours_2d2d(Xf, Yf, offs, sa, sb, out)
        torch.cuda.synchronize()
        diff, rel = similarity(out, t_out) if t_out is not None else (float("nan"), float("nan"))
        us = bench(lambda: ours_2d2d(Xf, Yf, offs, sa, sb, out)) * 1e3
        record("2d2d", shape, split, fl, us, torch_us, bf_us, diff, rel, impl)
    del X, Yt, Xf, Yf


def guarded(fn, *args):
    """One shape: an error is printed and recorded, and the run goes on."""
    try:
        fn(*args)
    except Exception as ex:
        import traceback
        traceback.print_exc()
        rows.append({"op": fn.__name__, "args": repr(args), "error": repr(ex)})
    torch.cuda.empty_cache()
    write_results()


def write_results():
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "h200-gemm.json"), "w") as f:
        json.dump({"env": env, "rows": rows}, f, indent=1)


t0 = time.time()
impls = [x for x in os.environ.get("GG_IMPLS", "library:cooperative,library:pingpong").split(",") if x]
for split in ("balanced", "zipf"):
    guarded(run_2d3d, H, I, split, impls)   # forward gate/up: (32768,7168) x (32,7168,2048)
    guarded(run_2d3d, I, H, split, impls)   # forward down:    (32768,2048) x (32,2048,7168)
    guarded(run_2d2d, H, I, split, impls)   # wgrad of gate/up: (7168,32768) x (32768,2048) -> (32,7168,2048)
    guarded(run_2d2d, I, H, split, impls)   # wgrad of down:    (2048,32768) x (32768,7168) -> (32,2048,7168)
# The reference kernel once, for scale (it is the portable oracle, not a fast path).
if os.environ.get("GG_REF", "1") == "1":
    guarded(run_2d3d, H, I, "balanced", ["reference"])
print(f"bench wall {time.time() - t0:.1f} s", flush=True)

write_results()
with open(os.path.join(out_dir, "h200-gemm.md"), "w") as f:
    f.write(f"# FP8 grouped GEMM on {env['gpu']} (torch {env['torch']}, triton {env['triton']})\n\n")
    f.write("Median of triton.testing.do_bench, one run. ratio = torch fp8 time / ours (> 1: ours faster).\n\n")
    f.write("| op | shape | groups | impl | us | TFLOP/s | torch fp8 us | torch TFLOP/s | ratio | bf16 us | vs bf16 | sim diff vs torch |\n")
    f.write("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        if "error" in r:
            f.write(f"| {r['op']} | {r['args']} | error: {r['error']} |\n")
            continue
        fmt = lambda v, p=1: "n/a" if v is None else f"{v:.{p}f}"
        f.write(f"| {r['op']} | {r['shape']} | {r['groups']} | {r['impl']} | {fmt(r['us'])} | {fmt(r['tflops'])} | "
                f"{fmt(r['torch_us'])} | {fmt(r['torch_tflops'])} | {fmt(r['ratio'], 3)} | {fmt(r['bf16_us'])} | "
                f"{fmt(r['ratio_vs_bf16'], 3)} | {r['sim_diff_vs_torch']:.1e} |\n")
print("done")
