"""hipfp8 FP8 grouped GEMM vs torch._scaled_grouped_mm (FP8 rowwise) and torch._grouped_mm (BF16),
in ONE process and run, on the shapes of BENCHMARKS.md: DeepSeek-V3 671B EP=8 per GPU (fwd, dgrad,
wgrad; balanced, Zipf padded to 16 tokens, Zipf unpadded for wgrad), the E5M2-gradient pairs of
the hybrid recipe, gpt-oss-120b (hidden = expert dim = 2880, K not a multiple of 128) and small
experts (128-512 tokens per expert).

  python3 bench/compare_grouped_gemm.py LIBHIPFP8_SO [OUT_DIR]

Bindings: bench/hipfp8_gemm_abi.py (ctypes on the C ABI; checked against the header on a CPU
context in CI by bench/check_bindings.py). Timing: triton.testing.do_bench medians, torch's
current stream. Each row says which implementation ran (the C ABI's plan query: never a silent
fallback) and compares our output with torch's on the same inputs.

GG_MODE=table (default): the result table, OUT_DIR/h200-gemm.{json,md}. GG_OPS=OP[,OP...] keeps
only the rows of those ops (e.g. wgrad-blockwise) and skips the reference-kernel row; every row
carries out_sha256, the SHA-256 of our output's bytes, so that two runs (a kernel knob read once
per process, set differently) can be compared bit for bit.
GG_MODE=sweep: every CUTLASS configuration of GG_CONFIGS (KIND:RASTER:SWIZZLE, see
src/grouped_gemm_rule.rs) on the E4M3 shapes, OUT_DIR/h200-gemm-sweep.json; picks the rule.
GG_MODE=gaps: where a timed call's time goes, ours and torch's, on the balanced DeepSeek-V3
shapes: the host time of one call (no sync), and from a profile of timed iterations (L2 flush,
then the call, as do_bench runs it) each kernel's time and the GPU idle time between the
call's kernels; OUT_DIR/h200-gemm-gaps.json.
"""
import hashlib
import json
import os
import sys
import time

import torch
import triton
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hipfp8_gemm_abi as abi  # noqa: E402

lib_path = sys.argv[1]
out_dir = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("OUT", ".")
MODE = os.environ.get("GG_MODE", "table")
dev = torch.device("cuda")
torch.manual_seed(0)
G = abi.Gemm(lib_path, abi.BACKEND_GPU)
TORCH_F8 = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def stream():
    return torch.cuda.current_stream().cuda_stream


def call_2d3d(d, a, b, offs, sa, sb, out):
    G.gemm_2d3d(d, a.data_ptr(), a.numel(), b.data_ptr(), b.numel(), offs.data_ptr(), offs.numel(), sa.data_ptr(),
                sa.numel(), sb.data_ptr(), sb.numel(), out.data_ptr(), out.numel(), stream())


def call_bw_2d3d(d, a, b, offs, sa, sb, out):
    G.gemm_bw_2d3d(d, a.data_ptr(), a.numel(), b.data_ptr(), b.numel(), offs.data_ptr(), offs.numel(),
                   sa.data_ptr(), sa.numel(), sb.data_ptr(), sb.numel(), out.data_ptr(), out.numel(), stream())


def call_bw_2d2d(d, a, b, offs, sa, sb, out):
    G.gemm_bw_2d2d(d, a.data_ptr(), a.numel(), b.data_ptr(), b.numel(), offs.data_ptr(), offs.numel(),
                   sa.data_ptr(), sa.numel(), sb.data_ptr(), sb.numel(), out.data_ptr(), out.numel(), stream())


def call_2d2d(d, a, b, offs, sa, sb, out):
    G.gemm_2d2d(d, a.data_ptr(), a.numel(), b.data_ptr(), b.numel(), offs.data_ptr(), offs.numel(), sa.data_ptr(),
                sa.numel(), sb.data_ptr(), sb.numel(), out.data_ptr(), out.numel(), stream())


def set_stage(on):
    """HIPFP8_GG_STAGE (hip/knobs.h; read by the library on every call): stage 2D x 2D operands
    to 16-token group starts (auto) or not (off)."""
    os.environ["HIPFP8_GG_STAGE"] = "auto" if on else "off"


def staged_copy_bytes(sizes, n, k):
    """Bytes the 2D x 2D staging kernel moves on the CUTLASS path (docs/OPS.md "Any group
    start"): only the non-empty groups that start off a 16-token boundary are copied, each
    reading (n + k) len bytes and writing (n + k) round_up(len, 16). Aligned groups: 0."""
    start, moved = 0, 0
    for ln in sizes:
        if ln > 0 and start % 16:
            moved += (n + k) * (ln + (ln + 15) // 16 * 16)
        start += ln
    return moved


def zipf_sizes(total, groups, s=1.2, empty=2, mult=16):
    """Zipf(s) expert sizes over `total` tokens, multiples of `mult`, the last `empty` experts
    empty (BENCHMARKS.md: >= 2 empty, one > 15% of the tokens)."""
    live = groups - empty
    w = [1.0 / (r ** s) for r in range(1, live + 1)]
    sz = [int(total * x / sum(w)) // mult * mult for x in w]
    sz[0] += total - sum(sz)
    sizes = sz + [0] * empty
    assert sum(sizes) == total and max(sizes) > 0.15 * total and sizes.count(0) >= 2
    return sizes


def split_sizes(split, total, groups):
    if split == "balanced":
        return [total // groups] * groups
    if split == "zipf":
        return zipf_sizes(total, groups)
    if split == "zipf-unpadded":  # the same law, any size: group starts anywhere
        return zipf_sizes(total, groups, mult=1)
    raise ValueError(split)


def offsets(sizes):
    return torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(torch.int32).to(dev)


def bench(fn, quick=False):
    if quick:
        return do_bench(fn, warmup=5, rep=30, return_mode="median")
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
       "lib": os.path.basename(lib_path), "mode": MODE}


def torch_refusal(sizes, elem_bytes):
    """Why torch's grouped mm would refuse these group sizes, or None. It checks on the device
    that each group's dynamic extent is a multiple of 16 bytes and fails with a device-side
    assert, which ends the process's CUDA context, so the check must happen here first."""
    align = 16 // elem_bytes
    bad = [s for s in sizes if s % align]
    if bad:
        return f"torch needs group sizes that are multiples of {align} ({len(bad)} groups are not)"
    return None


def torch_time(fn, refusal=None, quick=False):
    if refusal:
        return None, None, refusal
    try:
        out = fn()
        return out, bench(fn, quick) * 1e3, None
    except Exception as ex:  # keep going: our numbers are still measured
        return None, None, repr(ex)[:200]


class Case:
    """One problem: op (fwd/dgrad: 2D x 3D; wgrad: 2D x 2D), dims, split, formats."""

    def __init__(self, op, label, dims, split, fa="e4m3fn", fb="e4m3fn", groups=32):
        self.op, self.label, self.dims, self.split, self.fa, self.fb, self.groups = op, label, dims, split, fa, fb, groups

    def setup(self):
        fa, fb = TORCH_F8[self.fa], TORCH_F8[self.fb]
        if self.op == "wgrad":
            n, mt, k = self.dims
            self.sizes = split_sizes(self.split, mt, self.groups)
            self.offs = offsets(self.sizes)
            X = torch.randn(n, mt, device=dev, dtype=torch.bfloat16)
            Y = torch.randn(k, mt, device=dev, dtype=torch.bfloat16)  # (K, Mt) contiguous = (Mt, K) col-major
            self.A, self.B = X, Y
            self.Af, self.Bf = X.to(fa), Y.to(fb)
            self.sa = torch.rand(self.groups * n, device=dev) * 0.02 + 0.01
            self.sb = torch.rand(self.groups * k, device=dev) * 0.02 + 0.01
            self.flops = 2 * mt * n * k
            self.shape = f"({n},{mt})x({mt},{k})"
            self.desc = lambda backend=abi.GEMM_AUTO: G.desc_2d2d(n, mt, k, self.fa, self.fb, backend)
            self.out = lambda: torch.full((self.groups, n, k), -768.0, device=dev, dtype=torch.bfloat16)
            self.ours = lambda d, out: call_2d2d(d, self.Af, self.Bf, self.offs, self.sa, self.sb, out)
            self.torch_fp8 = lambda: torch._scaled_grouped_mm(self.Af, self.Bf.t(), self.sa, self.sb, offs=self.offs,
                                                              out_dtype=torch.bfloat16, use_fast_accum=True)
            self.torch_bf16 = lambda: torch._grouped_mm(self.A, self.B.t(), offs=self.offs, out_dtype=torch.bfloat16)
        else:
            m, k, n = self.dims
            e = self.groups
            self.sizes = split_sizes(self.split, m, e)
            self.offs = offsets(self.sizes)
            A = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            Bt = torch.randn(e, n, k, device=dev, dtype=torch.bfloat16)  # (E,N,K) = (E,K,N) column-major
            self.A, self.B = A, Bt
            self.Af, self.Bf = A.to(fa), Bt.to(fb)
            self.sa = torch.rand(m, device=dev) * 0.02 + 0.01
            self.sb = torch.rand(e, n, device=dev) * 0.02 + 0.01
            self.flops = 2 * m * k * n
            self.shape = f"({m},{k})x({e},{k},{n})"
            self.desc = lambda backend=abi.GEMM_AUTO: G.desc_2d3d(m, k, n, e, self.fa, self.fb, backend)
            self.out = lambda: torch.full((m, n), -768.0, device=dev, dtype=torch.bfloat16)
            self.ours = lambda d, out: call_2d3d(d, self.Af, self.Bf, self.offs, self.sa, self.sb, out)
            self.torch_fp8 = lambda: torch._scaled_grouped_mm(self.Af, self.Bf.transpose(-2, -1), self.sa, self.sb,
                                                              offs=self.offs, out_dtype=torch.bfloat16,
                                                              use_fast_accum=True)
            self.torch_bf16 = lambda: torch._grouped_mm(self.A, self.B.transpose(-2, -1), offs=self.offs,
                                                        out_dtype=torch.bfloat16)

    def plan(self, d, out):
        return G.plan(d, self.groups, self.Af.data_ptr(), self.Bf.data_ptr(), out.data_ptr())

    def free(self):
        for a in ("A", "B", "Af", "Bf"):
            setattr(self, a, None)
        torch.cuda.empty_cache()


class BlockwiseCase(Case):
    """The blockwise-scaled 2D x 3D GEMM (DeepSeek-V3 recipe): a quantized per 1 x 128 block, each
    expert's (N, K) weight per 128 x 128 block (E4M3, scale = 448 / amax; the GEMM takes 1 / scale).
    torch has no blockwise grouped GEMM: its row is torch._scaled_grouped_mm on the same bf16 inputs
    quantized rowwise (the time anchor measured here; DeepGEMM's grouped contiguous kernel is the
    published one, see NOTE_BW)."""

    def setup(self):
        m, k, n = self.dims
        e = self.groups
        f8 = TORCH_F8[self.fa]
        fmax = torch.finfo(f8).max
        self.sizes = split_sizes(self.split, m, e)
        self.offs = offsets(self.sizes)
        A = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        Bt = torch.randn(e, n, k, device=dev, dtype=torch.bfloat16)
        self.A, self.B = A, Bt
        kb, nb = k // 128, n // 128
        amax = A.float().view(m, kb, 128).abs().amax(-1).clamp_min(1e-12)
        s = fmax / amax
        self.Af = (A.float().view(m, kb, 128) * s[..., None]).to(f8).view(m, k)
        self.sa = (1.0 / s).contiguous()
        bmax = Bt.float().view(e, nb, 128, kb, 128).abs().amax(dim=(2, 4)).clamp_min(1e-12)
        t = fmax / bmax
        self.Bf = (Bt.float().view(e, nb, 128, kb, 128) * t[:, :, None, :, None]).to(f8).view(e, n, k)
        self.sb = (1.0 / t).contiguous()
        ra = A.float().abs().amax(1).clamp_min(1e-12) / fmax
        rb = Bt.float().abs().amax(2).clamp_min(1e-12) / fmax
        self.Ar, self.Br = (A.float() / ra[:, None]).to(f8), (Bt.float() / rb[..., None]).to(f8)
        self.ra, self.rb = ra, rb
        self.flops = 2 * m * k * n
        self.shape = f"({m},{k})x({e},{k},{n})"
        self.desc = lambda backend=abi.GEMM_AUTO: G.desc_bw_2d3d(m, k, n, e, self.fa, self.fb, backend)
        self.out = lambda: torch.full((m, n), -768.0, device=dev, dtype=torch.bfloat16)
        self.ours = lambda d, out: call_bw_2d3d(d, self.Af, self.Bf, self.offs, self.sa, self.sb, out)
        self.torch_fp8 = lambda: torch._scaled_grouped_mm(self.Ar, self.Br.transpose(-2, -1), self.ra, self.rb,
                                                          offs=self.offs, out_dtype=torch.bfloat16,
                                                          use_fast_accum=True)
        self.torch_bf16 = lambda: torch._grouped_mm(self.A, self.B.transpose(-2, -1), offs=self.offs,
                                                    out_dtype=torch.bfloat16)

    def free(self):
        for a in ("Ar", "Br"):
            setattr(self, a, None)
        super().free()


class BlockwiseWgradCase(Case):
    """The blockwise-scaled 2D x 2D GEMM (DeepSeek-V3 wgrad): both token-contiguous operands
    quantized per 1 x 128 token block (E4M3, scale = 448 / amax; the GEMM takes 1 / scale), groups
    padded to 128 tokens (DeepGEMM's contiguous layout) so every group starts on a block and the
    library takes it. torch's row: torch._scaled_grouped_mm 2D x 2D on the same bf16 inputs
    quantized rowwise per group (torch has no blockwise grouped GEMM)."""

    def setup(self):
        n, mt, k = self.dims
        g = self.groups
        f8 = TORCH_F8[self.fa]
        fmax = torch.finfo(f8).max
        sizes = split_sizes(self.split, mt, g)
        head = [s // 128 * 128 for s in sizes[:-1]]
        self.sizes = head + [mt - sum(head)]
        self.offs = offsets(self.sizes)
        X = torch.randn(n, mt, device=dev, dtype=torch.bfloat16)
        Y = torch.randn(k, mt, device=dev, dtype=torch.bfloat16)
        self.A, self.B = X, Y
        mb = mt // 128

        def blocks(T):  # scales block-major (mb, rows), as the op takes them
            amax = T.float().view(-1, mb, 128).abs().amax(-1).clamp_min(1e-12)
            s = fmax / amax
            return (T.float().view(-1, mb, 128) * s[..., None]).to(f8).view(T.shape), (1.0 / s).t().contiguous()

        self.Af, self.sa = blocks(X)
        self.Bf, self.sb = blocks(Y)
        # torch: rowwise per group (amax over each group's tokens), as torchao's wgrad.
        bounds = [0] + torch.tensor(self.sizes).cumsum(0).tolist()

        def per_group(T):
            r = torch.stack([T[:, lo:hi].float().abs().amax(1) if hi > lo else torch.ones(T.shape[0], device=dev)
                             for lo, hi in zip(bounds[:-1], bounds[1:])]).clamp_min(1e-12) / fmax
            q = torch.cat([(T[:, lo:hi].float() / r[i][:, None]).to(f8)
                           for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:]))], 1)
            return q.contiguous(), r.reshape(-1).contiguous()

        self.Ar, self.ra = per_group(X)
        self.Br, self.rb = per_group(Y)
        self.flops = 2 * mt * n * k
        self.shape = f"({n},{mt})x({mt},{k})"
        self.desc = lambda backend=abi.GEMM_AUTO: G.desc_bw_2d2d(n, mt, k, self.fa, self.fb, backend)
        self.out = lambda: torch.full((g, n, k), -768.0, device=dev, dtype=torch.bfloat16)
        self.ours = lambda d, out: call_bw_2d2d(d, self.Af, self.Bf, self.offs, self.sa, self.sb, out)
        self.torch_fp8 = lambda: torch._scaled_grouped_mm(self.Ar, self.Br.t(), self.ra, self.rb, offs=self.offs,
                                                          out_dtype=torch.bfloat16, use_fast_accum=True)
        self.torch_bf16 = lambda: torch._grouped_mm(self.A, self.B.t(), offs=self.offs, out_dtype=torch.bfloat16)

    def free(self):
        for a in ("Ar", "Br"):
            setattr(self, a, None)
        super().free()


# The published anchor of the blockwise rows (issue 16): DeepGEMM's grouped contiguous FP8 GEMM,
# 1214-1346 TFLOP/s on the H800 on the DeepSeek-V3 shapes; the target here is >= 1100 TFLOP/s.
NOTE_BW = "anchor: DeepGEMM grouped contiguous 1214-1346 TF (H800, published); target >= 1100 TF"


def select_config(cfg):
    if cfg:
        os.environ["HIPFP8_CUTLASS_CONFIG"] = cfg
    else:
        os.environ.pop("HIPFP8_CUTLASS_CONFIG", None)


def gpu_kernels(fn):
    """The GPU kernels one call of fn launches: [(name, us)] from torch.profiler (which CUTLASS
    instance torch's _scaled_grouped_mm picked: tile and cluster are in its name)."""
    from torch.profiler import ProfilerActivity, profile
    try:
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        rows = []
        for e in prof.key_averages():
            t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
            if t > 0:
                rows.append((e.key[:300], round(t, 1)))
        return sorted(rows, key=lambda r: -r[1])[:4]
    except Exception as ex:  # the profiler is a diagnostic: never fail the table on it
        return [(f"profiler failed: {ex}", 0.0)]


def run_table_case(c, torch_cache):
    c.setup()
    key = (c.op, c.dims, c.split)
    note = None
    # torch on the same inputs; where it refuses the pair (E5M2 operands), its E4M3 x E4M3
    # time of the same shape is the anchor (said in the note).
    t_out, torch_us, err = torch_time(c.torch_fp8, torch_refusal(c.sizes, 1))
    _, bf16_us, _ = torch_time(c.torch_bf16, torch_refusal(c.sizes, 2))
    if err:
        note = f"torch fp8: {err}"
        if key in torch_cache:
            torch_us = torch_cache[key]
            note += "; anchor: torch's E4M3 x E4M3 time of the same shape"
    elif c.fa == "e4m3fn" and c.fb == "e4m3fn":
        torch_cache[key] = torch_us
    d = c.desc()
    out = c.out()
    imp, why, text = c.plan(d, out)
    c.ours(d, out)
    torch.cuda.synchronize()
    diff, rel = similarity(out, t_out) if t_out is not None else (float("nan"), float("nan"))
    sha = hashlib.sha256(out.contiguous().view(torch.uint8).cpu().numpy().tobytes()).hexdigest()
    us = bench(lambda: c.ours(d, out)) * 1e3
    r = {"op": c.op, "label": c.label, "shape": c.shape, "groups": c.split, "a_format": c.fa, "b_format": c.fb,
         "us": us, "tflops": c.flops / (us * 1e-6) / 1e12, "torch_us": torch_us,
         "ratio": torch_us / us if torch_us else None, "impl": text,
         "torch_tflops": c.flops / (torch_us * 1e-6) / 1e12 if torch_us else None,
         "bf16_us": bf16_us, "ratio_vs_bf16": bf16_us / us if bf16_us else None,
         "sim_diff_vs_torch": diff, "max_rel_err_vs_torch": rel, "fallback_reason": why, "note": note,
         "out_sha256": sha}
    if os.environ.get("GG_KERNELS", "1") == "1" and c.split == "balanced" and not err:
        r["torch_kernels"] = gpu_kernels(c.torch_fp8)
        r["our_kernels"] = gpu_kernels(lambda: c.ours(d, out))
        for who in ("torch_kernels", "our_kernels"):
            for name, t in r[who]:
                print(f"      {who[:-8]:5s} {t:9.1f} us  {name[:200]}", flush=True)
    return r, out


def print_row(r):
    ratio = f"{r['ratio']:.3f}" if r.get("ratio") else "n/a"
    tus = f"{r['torch_us']:8.1f}" if r.get("torch_us") else "     n/a"
    print(f"{r['op']:5s} {r['shape']:34s} {r['groups']:13s} {r['a_format']:6s}x{r['b_format']:6s} "
          f"ours {r['us']:8.1f} us {r['tflops']:7.1f} TF | torch {tus} ratio {ratio} | {r['impl']}"
          + (f" | {r['note']}" if r.get("note") else ""), flush=True)


def write_json(name, payload):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, name), "w") as f:
        json.dump(payload, f, indent=1)


DS = [  # DeepSeek-V3 671B EP=8 per GPU: 32768 tokens, 32 local experts, hidden 7168, expert dim 2048
    ("fwd", "gate/up fwd", (32768, 7168, 2048)),
    ("dgrad", "gate/up dgrad, down fwd", (32768, 2048, 7168)),
    ("wgrad", "gate/up wgrad", (2048, 32768, 7168)),
    ("wgrad", "down wgrad", (7168, 32768, 2048)),
]
GPT = [  # gpt-oss-120b, 16 local experts (EP=8 of 128)
    ("fwd", "gpt-oss gate/up fwd", (8192, 2880, 5760)),
    ("fwd", "gpt-oss down fwd", (8192, 2880, 2880)),
    ("wgrad", "gpt-oss down wgrad", (2880, 8192, 2880)),
]
SMALL = [("fwd", f"small experts {t}/expert", (32 * t, 7168, 2048)) for t in (128, 256, 512)]


def table_cases():
    cs = []
    for split in ("balanced", "zipf"):
        for op, label, dims in DS:
            cs.append(Case(op, label, dims, split))
    for op, label, dims in DS:
        if op == "wgrad":
            cs.append(Case(op, label + " (unpadded)", dims, "zipf-unpadded"))
    # The hybrid recipe: E5M2 gradients with E4M3 weights / activations.
    cs.append(Case("dgrad", "gate/up dgrad (E5M2 grad)", DS[1][2], "balanced", "e5m2", "e4m3fn"))
    cs.append(Case("wgrad", "gate/up wgrad (E5M2 grad)", DS[2][2], "balanced", "e5m2", "e4m3fn"))
    cs.append(Case("wgrad", "down wgrad (E5M2 grad)", DS[3][2], "balanced", "e4m3fn", "e5m2"))
    for op, label, dims in GPT:
        cs.append(Case(op, label, dims, "balanced", groups=16))
    for op, label, dims in SMALL:
        cs.append(Case(op, label, dims, "balanced"))
    # Blockwise-scaled (DeepSeek-V3 recipe), the 2D x 3D shapes of DS.
    for split in ("balanced", "zipf"):
        for op, label, dims in DS:
            if op != "wgrad":
                cs.append(BlockwiseCase(op + "-blockwise", label + " (blockwise 1x128 x 128x128)", dims, split))
            else:
                cs.append(BlockwiseWgradCase(op + "-blockwise", label + " (blockwise 1x128 x 1x128, groups of 128s)",
                                             dims, split))
    return cs


def run_table():
    torch_cache = {}
    padded = {}
    only = [x for x in os.environ.get("GG_OPS", "").split(",") if x]
    for c in table_cases():
        if only and c.op not in only:
            continue
        # 2D x 2D staging (docs/OPS.md "Any group start") on every row, as a caller with a NULL
        # workspace gets it: groups on a 16-token boundary are read in place and only the
        # others copied, so the aligned rows (balanced, zipf) copy nothing and pay one launch
        # that reads the offsets; each 2D x 2D row's impl is the plan query's text ("staged").
        set_stage(True)
        try:
            r, out = run_table_case(c, torch_cache)
            if isinstance(c, (BlockwiseCase, BlockwiseWgradCase)):
                r["note"] = "; ".join(x for x in (r["note"], "torch row: rowwise-scaled", NOTE_BW) if x)
            if c.split == "zipf" and c.op == "wgrad":
                padded[c.dims] = (r["us"], r["torch_us"])
            if c.split == "zipf-unpadded":
                pus, ptorch = padded.get(c.dims, (None, None))
                r["padded_us"] = pus
                r["unpadded_vs_padded"] = r["us"] / pus if pus else None
                if r["torch_us"] is None and ptorch:
                    r["torch_us"], r["ratio"] = ptorch, ptorch / r["us"]
                    r["note"] = (r["note"] or "") + "; anchor: torch on the padded split"
                r["bit_identical_to_padded"] = unpadded_matches_padded(c, out)
                n, _, k = c.dims
                r["staged_copy_mb"] = staged_copy_bytes(c.sizes, n, k) / 1e6
            rows.append(r)
            print_row(r)
        except Exception as ex:
            import traceback
            traceback.print_exc()
            rows.append({"op": c.op, "shape": str(c.dims), "groups": c.split, "error": repr(ex)})
        c.free()
        write_json("h200-gemm.json", {"env": env, "rows": rows})
    if only:
        write_md()
        return
    # The reference kernel once, for scale (the portable oracle, not a fast path).
    c = Case("fwd", "reference kernel", DS[0][2], "balanced")
    c.setup()
    d = c.desc(abi.GEMM_REFERENCE)
    out = c.out()
    c.ours(d, out)
    torch.cuda.synchronize()
    us = do_bench(lambda: c.ours(d, out), warmup=1, rep=200, return_mode="median") * 1e3
    rows.append({"op": "fwd", "label": "reference kernel", "shape": c.shape, "groups": "balanced",
                 "a_format": "e4m3fn", "b_format": "e4m3fn", "us": us, "tflops": c.flops / (us * 1e-6) / 1e12,
                 "torch_us": None, "ratio": None, "impl": c.plan(d, out)[2]})
    print_row(rows[-1])
    c.free()
    write_json("h200-gemm.json", {"env": env, "rows": rows})
    write_md()


def unpadded_matches_padded(c, out_unpadded):
    """Bit-identical check: the same tokens, each group moved to a 16-aligned start with zero
    columns between groups (what a framework's padding does), through the same library call."""
    n, mt, k = c.dims
    sizes = c.sizes
    padded_sizes = [(s + 15) // 16 * 16 for s in sizes]
    mtp = sum(padded_sizes)
    mtp = (mtp + 15) // 16 * 16
    Ap = torch.zeros(n, mtp, device=dev, dtype=c.Af.dtype)
    Bp = torch.zeros(k, mtp, device=dev, dtype=c.Bf.dtype)
    lo = lp = 0
    for s, ps in zip(sizes, padded_sizes):
        Ap[:, lp:lp + s] = c.Af[:, lo:lo + s]
        Bp[:, lp:lp + s] = c.Bf[:, lo:lo + s]
        lo += s
        lp += ps
    offs_p = offsets(padded_sizes)
    d = G.desc_2d2d(n, mtp, k, c.fa, c.fb)
    outp = c.out()
    set_stage(False)  # the library on the padded layout, unstaged
    call_2d2d(d, Ap, Bp, offs_p, c.sa, c.sb, outp)
    torch.cuda.synchronize()
    set_stage(True)
    same = bool(torch.equal(outp.view(torch.int16), out_unpadded.view(torch.int16)))
    print(f"      unpadded vs padded ({c.shape}): bit-identical = {same}", flush=True)
    return same


def write_md():
    with open(os.path.join(out_dir, "h200-gemm.md"), "w") as f:
        f.write(f"# FP8 grouped GEMM on {env['gpu']} (torch {env['torch']}, triton {env['triton']})\n\n")
        f.write("One run, one process (bench/compare_grouped_gemm.py). Median of triton.testing.do_bench. "
                "ratio = torch fp8 (`_scaled_grouped_mm`, fast accumulation) time / ours (> 1: ours faster). "
                "impl = what ran (the plan query).\n\n")
        f.write("| op | shape | groups | a x b | us | TFLOP/s | torch fp8 us | ratio | torch bf16 us | vs bf16 | "
                "impl | diff vs torch | note |\n")
        f.write("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
        fmt = lambda v, p=1: "n/a" if v is None else f"{v:.{p}f}"
        for r in rows:
            if "error" in r:
                f.write(f"| {r['op']} | {r['shape']} | {r['groups']} | error: {r['error']} |\n")
                continue
            note = r.get("note") or ""
            if "unpadded_vs_padded" in r and r["unpadded_vs_padded"]:
                note += f" unpadded/padded time {r['unpadded_vs_padded']:.3f}, bit-identical {r['bit_identical_to_padded']}"
            f.write(f"| {r['op']} ({r.get('label', '')}) | {r['shape']} | {r['groups']} | {r['a_format']} x {r['b_format']} "
                    f"| {fmt(r['us'])} | {fmt(r['tflops'])} | {fmt(r['torch_us'])} | {fmt(r['ratio'], 3)} | "
                    f"{fmt(r.get('bf16_us'))} | {fmt(r.get('ratio_vs_bf16'), 2)} | {r['impl']} | "
                    f"{fmt(r.get('sim_diff_vs_torch'), 1) if r.get('sim_diff_vs_torch') is None else format(r['sim_diff_vs_torch'], '.1e')} | {note.strip('; ')} |\n")


def run_sweep():
    configs = os.environ.get("GG_CONFIGS", "1:m:1,1:n:1,1:m:4,1:n:4,2:m:1,2:n:1,2:m:4,3:m:1,3:n:1,4:m:1,4:n:1,5:m:1,5:n:1").split(",")
    cases = []
    for split in ("balanced", "zipf"):
        for op, label, dims in DS:
            cases.append(Case(op, label, dims, split))
    for op, label, dims in GPT:
        cases.append(Case(op, label, dims, "balanced", groups=16))
    for op, label, dims in SMALL:
        cases.append(Case(op, label, dims, "balanced"))
    for c in cases:
        c.setup()
        # torch timed as ours are here (quick): a 30 ms window runs at higher clocks than the
        # table's 150 ms one, so mixing the two would skew the ratio.
        _, torch_us, err = torch_time(c.torch_fp8, torch_refusal(c.sizes, 1), quick=True)
        best = None
        for cfg in configs:
            select_config(cfg)
            d = c.desc()
            out = c.out()
            try:
                text = c.plan(d, out)[2]
                c.ours(d, out)
                us = bench(lambda: c.ours(d, out), quick=True) * 1e3
            except Exception as ex:
                print(f"  {cfg}: {ex}", flush=True)
                continue
            r = {"op": c.op, "label": c.label, "shape": c.shape, "groups": c.split, "config": cfg, "impl": text,
                 "us": us, "tflops": c.flops / (us * 1e-6) / 1e12, "torch_us": torch_us,
                 "ratio": torch_us / us if torch_us else None}
            rows.append(r)
            if best is None or us < best["us"]:
                best = r
        select_config(None)
        if best:
            print(f"{c.op:5s} {c.shape:34s} {c.split:13s} torch {torch_us or 0:8.1f} best {best['config']:8s} "
                  f"{best['us']:8.1f} us ({best['ratio'] or 0:.3f}) | "
                  + " ".join(f"{r['config']}={r['us']:.0f}" for r in rows if r["shape"] == c.shape
                             and r["groups"] == c.split), flush=True)
        c.free()
        write_json("h200-gemm-sweep.json", {"env": env, "rows": rows})


def call_profile(fn, iters=6):
    """GPU kernels of `iters` timed iterations of fn (an L2 flush before each, as do_bench does):
    per iteration the kernels' (name, start, duration) in us relative to the first one."""
    from torch.profiler import ProfilerActivity, profile
    flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=dev)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            flush.zero_()
            fn()
        torch.cuda.synchronize()
    ks = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                 and e.time_range.elapsed_us() > 0), key=lambda e: e.time_range.start)
    # split at the flush kernels (the fill of `flush`): each iteration is what follows one
    its, cur, flush_end = [], None, []
    for e in ks:
        if "fillfunctor" in e.name.lower():
            cur = []
            its.append(cur)
            flush_end.append(e.time_range.end)
        elif cur is not None:
            cur.append((e.name, e.time_range.start, e.time_range.elapsed_us()))
    del flush
    # lead-in: GPU idle between the flush's end and the call's first kernel (the GPU waiting
    # for the host to enqueue the call, which do_bench's events count)
    lead = [it[0][1] - f for it, f in zip(its, flush_end) if it]
    return its, lead


def host_us(fn, n=30):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
    ts.sort()
    return ts[len(ts) // 2]


def run_gaps():
    rows = []
    for op, label, dims in DS:
        c = Case(op, label, dims, "balanced")
        c.setup()
        d = c.desc()
        out = c.out()
        for who, fn in (("hipfp8", lambda: c.ours(d, out)), ("torch", c.torch_fp8)):
            its, lead = call_profile(fn)
            spans = [(it[-1][1] + it[-1][2] - it[0][1], sum(k[2] for k in it)) for it in its if it]
            span = sorted(s[0] for s in spans)[len(spans) // 2]
            busy = sorted(s[1] for s in spans)[len(spans) // 2]
            kern = [(n[:90], round(t, 1)) for n, _, t in its[-1]]
            r = {"op": op, "shape": c.shape, "who": who, "host_us": host_us(fn), "gpu_span_us": span,
                 "kernel_us": busy, "idle_between_us": span - busy,
                 "lead_in_us": sorted(lead)[len(lead) // 2] if lead else None,
                 "us": bench(fn) * 1e3, "kernels": kern}
            rows.append(r)
            print(f"{op:5s} {who:6s} timed {r['us']:7.1f} us | host {r['host_us']:6.1f} us | span {span:7.1f} = "
                  f"kernels {busy:7.1f} + idle {span - busy:6.1f} | lead-in {r['lead_in_us'] or 0:6.1f} | " + ", ".join(f"{t}" for _, t in kern), flush=True)
        c.free()
    write_json("h200-gemm-gaps.json", {"rows": rows})


t0 = time.time()
if MODE == "sweep":
    run_sweep()
elif MODE == "gaps":
    run_gaps()
else:
    run_table()
print(f"bench wall {time.time() - t0:.1f} s", flush=True)
G.close()
print("done")
