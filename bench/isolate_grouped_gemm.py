"""Run grouped-GEMM cases one per child process, so that a device fault (which poisons the
CUDA context of its process) is pinned on the case, instance and mode that caused it, not on
whatever ran next. For debugging the library backends on a GPU machine.

  python3 bench/isolate_grouped_gemm.py LIBHIPFP8_SO [OUT_DIR]

Each case runs under every CUTLASS kind (HIPFP8_CUTLASS_CONFIG=1..4). A child computes the case with the library
backend and with the reference kernel on the same inputs and prints the largest difference
relative to the operands' magnitude; the parent prints one row per (case, kind)
and writes OUT_DIR/gemm-isolate.json. Exit status 0 only if every child succeeded within
tolerance.
"""
import json
import os
import subprocess
import sys

# (name, op, dims, offsets): 2D x 2D dims (n, mt, k); 2D x 3D dims (m, k, n).
CASES = [
    ("2d2d-aligned", "2d2d", (136, 512, 264), [128, 256, 384, 512]),
    ("2d2d-aligned-empty", "2d2d", (136, 512, 264), [0, 128, 128, 384, 512]),
    ("2d2d-tail-rows", "2d2d", (136, 512, 264), [128, 256, 384, 500]),
    ("2d2d-unaligned", "2d2d", (40, 96, 24), [3, 35, 96]),
    ("2d2d-unaligned-empty", "2d2d", (136, 512, 264), [0, 16, 16, 200, 208, 500]),
    ("2d2d-one-short-group", "2d2d", (128, 256, 128), [8, 256]),
    ("2d3d-balanced", "2d3d", (512, 256, 384), [128, 256, 384, 512]),
    ("2d3d-empty", "2d3d", (512, 256, 384), [0, 256, 256, 512]),
]
TOL = 2e-2


def child(lib_path, name):
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import hipfp8_gemm_abi as abi

    _, op, dims, offs = next(c for c in CASES if c[0] == name)
    g = abi.Gemm(lib_path, abi.BACKEND_GPU)
    dev = torch.device("cuda")
    torch.manual_seed(1)
    groups = len(offs)
    doffs = torch.tensor(offs, dtype=torch.int32, device=dev)

    def f8(*shape):
        return (torch.randn(*shape, device=dev) * 4).to(torch.float8_e4m3fn).view(torch.uint8)

    s = torch.cuda.current_stream().cuda_stream
    if op == "2d2d":
        n, mt, k = dims
        a, b = f8(n, mt), f8(k, mt)
        sa, sb = torch.rand(groups * n, device=dev) + 0.5, torch.rand(groups * k, device=dev) + 0.5
        out_shape, desc, call = (groups, n, k), lambda be: g.desc_2d2d(n, mt, k, backend=be), g.gemm_2d2d
    else:
        m, k, n = dims
        a, b = f8(m, k), f8(groups, n, k)
        sa, sb = torch.rand(m, device=dev) + 0.5, torch.rand(groups * n, device=dev) + 0.5
        out_shape, desc, call = (m, n), lambda be: g.desc_2d3d(m, k, n, groups, backend=be), g.gemm_2d3d
    outs = []
    for backend in (abi.GEMM_LIBRARY, abi.GEMM_REFERENCE):
        out = torch.full(out_shape, 7.0, dtype=torch.bfloat16, device=dev)
        d = desc(backend)
        if backend == abi.GEMM_LIBRARY:
            print("plan:", g.plan(d, groups, a.data_ptr(), b.data_ptr(), out.data_ptr()))
        call(d, a.data_ptr(), a.numel(), b.data_ptr(), b.numel(), doffs.data_ptr(), groups,
             sa.data_ptr(), sa.numel(), sb.data_ptr(), sb.numel(), out.data_ptr(), out.numel(), s)
        torch.cuda.synchronize()
        outs.append(out.float())
    lib, ref = outs
    err = ((lib - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
    print(f"RESULT {err:.3e}")


def run_one(lib_path, name, kind):
    env = dict(os.environ, HIPFP8_CUTLASS_CONFIG=str(kind))
    p = subprocess.run([sys.executable, __file__, lib_path, "--child", name], env=env,
                       capture_output=True, text=True, timeout=120)
    text = p.stdout + p.stderr
    res = [ln.split()[1] for ln in text.splitlines() if ln.startswith("RESULT ")]
    plan = next((ln for ln in text.splitlines() if ln.startswith("plan:")), "")
    ok = p.returncode == 0 and bool(res) and float(res[0]) <= TOL
    if ok:
        verdict = "ok " + res[0]
    else:
        tail = [ln for ln in text.splitlines() if ln.strip()][-1:] or ["(no output)"]
        verdict = f"FAIL rc={p.returncode} " + (res[0] if res else tail[0][:160])
    return ok, {"case": name, "kind": kind, "plan": plan, "verdict": verdict}


def main():
    from concurrent.futures import ThreadPoolExecutor

    lib_path = sys.argv[1]
    out_dir = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("OUT", ".")
    jobs = [(name, kind) for name, _, _, _ in CASES for kind in (1, 2, 3, 4)]
    # children share the one GPU; a fault stays in its own process
    with ThreadPoolExecutor(int(os.environ.get("ISOLATE_JOBS", "8"))) as pool:
        results = list(pool.map(lambda j: run_one(lib_path, *j), jobs))
    for _, r in results:
        print(f"{r['case']:24} kind {r['kind']}: {r['verdict']}   {r['plan']}", flush=True)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "gemm-isolate.json"), "w") as f:
        json.dump([r for _, r in results], f, indent=1)
    sys.exit(0 if all(ok for ok, _ in results) else 1)

if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[2] == "--child":
        child(sys.argv[1], sys.argv[3])
    else:
        main()
