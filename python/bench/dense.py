#!/usr/bin/env python3
"""Dense Llama3-8B linear fwd+bwd on one GPU, one process: compiled BF16 nn.Linear, compiled
torchao Float8Linear (tensorwise, rowwise) and hipfp8's Float8Linear (tensorwise, rowwise,
delayed; eager and compiled). M = 8192 tokens; K -> N = 4096->6144, 4096->4096, 4096->28672,
14336->4096. Fresh grads every step (do_bench's grad_to_none), median time.

    python3 python/bench/dense.py --out bench/results/h200-dense.json [--budget-s 150]

Writes rows {shape: "KxN", recipe, variant, mode, us} (mode: "compiled" | "eager") as JSON,
a Markdown table beside it, and prints the ratios vs compiled BF16. A time budget keeps the
run inside one device call: variants not reached are listed as skipped (never invented).
"""

import argparse
import json
import os
import sys
import time

import torch
from triton.testing import do_bench

M = 8192
SHAPES = [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096)]


def step_fn(mod, x, dy):
    def step():
        y = mod(x)
        y.backward(dy)
    return step


def timed(mod, x, dy, params):
    step = step_fn(mod, x, dy)
    step()  # compile / warm up
    torch.cuda.synchronize()
    return do_bench(step, warmup=10, rep=100, grad_to_none=[x] + params, return_mode="median") * 1e3


def profile(hf, k, n):
    """Where the time of one fwd+bwd step goes, eager vs compiled (delayed: eager): kernel time
    (sum over CUDA kernels) and kernel count against the step's wall time (printed as
    measured here, under the profiler); the gap is host-bound launch spacing."""
    from torch.profiler import ProfilerActivity, profile as prof
    torch.manual_seed(0)
    x = torch.randn(M, k, device="cuda", dtype=torch.bfloat16).requires_grad_()
    dy = torch.randn(M, n, device="cuda", dtype=torch.bfloat16) * 0.01
    for recipe, modes in (("tensorwise", ("eager", "compiled")), ("rowwise", ("eager", "compiled")),
                          ("delayed", ("eager",))):
        for mode in modes:
            lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
            mod = hf.Float8Linear.from_float(lin, recipe)
            if mode == "compiled":
                torch._dynamo.reset()
                mod = torch.compile(mod)
            step = step_fn(mod, x, dy)
            for _ in range(3):
                step()
            torch.cuda.synchronize()
            with prof(activities=[ProfilerActivity.CUDA]) as p:
                t0 = time.perf_counter()
                for _ in range(5):
                    x.grad = None
                    lin.weight.grad = None
                    step()
                torch.cuda.synchronize()
                wall = (time.perf_counter() - t0) / 5 * 1e6
            ev = [e for e in p.key_averages()]
            total = sum(e.device_time_total for e in ev) / 5
            launches = sum(e.count for e in ev if e.device_time_total > 0) / 5
            print(f"profile {k}x{n} {recipe} {mode}: kernel time {total:.1f} us/step, "
                  f"{launches:.0f} kernels/step, wall {wall:.1f} us/step")
            top = sorted(ev, key=lambda e: -e.device_time_total)[:8]
            for e in top:
                print(f"    {e.device_time_total / 5:9.1f} us  x{e.count // 5:<3} {e.key[:90]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=150.0)
    ap.add_argument("--recipes", default="none,tensorwise,rowwise,delayed",
                    help="comma-separated recipes to time (none = the BF16 baseline)")
    ap.add_argument("--profile", default="",
                    help="KxN: also profile hipfp8 tensorwise/rowwise eager vs compiled there")
    a = ap.parse_args()
    t_start = time.time()

    import hipfp8.torch as hf
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
        have_ao = True
    except ImportError as e:
        print(f"torchao not importable ({e}): torchao rows skipped")
        have_ao = False

    rows, skipped = [], []
    # Order: the anchors and the eager hipfp8 recipes first for every shape, then compiled
    # hipfp8 (the optional part when the budget runs short).
    plan = []
    for k, n in SHAPES:
        plan += [(k, n, "none", "bf16", "compiled"),
                 (k, n, "tensorwise", "hipfp8", "eager"),
                 (k, n, "rowwise", "hipfp8", "eager"),
                 (k, n, "delayed", "hipfp8", "eager")]
        if have_ao:
            plan += [(k, n, "tensorwise", "torchao", "compiled"),
                     (k, n, "rowwise", "torchao", "compiled")]
    for k, n in SHAPES:
        plan += [(k, n, "tensorwise", "hipfp8", "compiled"), (k, n, "rowwise", "hipfp8", "compiled")]

    keep = set(a.recipes.split(","))
    plan = [p for p in plan if p[2] in keep]
    cache = {}
    for k, n, recipe, variant, mode in plan:
        if time.time() - t_start > a.budget_s:
            skipped.append(f"{k}x{n} {recipe} {variant} {mode}")
            continue
        if (k, n) not in cache:
            cache.clear()
            torch.manual_seed(0)
            cache[(k, n)] = (
                torch.randn(M, k, device="cuda", dtype=torch.bfloat16).requires_grad_(),
                torch.randn(M, n, device="cuda", dtype=torch.bfloat16) * 0.01,
                torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16))
        x, dy, base = cache[(k, n)]
        lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
        lin.weight.data.copy_(base.weight.data)
        if variant == "bf16":
            mod = lin
        elif variant == "torchao":
            mod = convert_to_float8_training(torch.nn.Sequential(lin),
                                             config=Float8LinearConfig.from_recipe_name(recipe))
        else:
            mod = hf.Float8Linear.from_float(lin, recipe)
        if mode == "compiled":
            torch._dynamo.reset()
            mod = torch.compile(mod)
        try:
            us = timed(mod, x, dy, [lin.weight])
        except Exception as e:  # reported, not hidden
            print(f"FAILED {k}x{n} {recipe} {variant} {mode}: {type(e).__name__}: {e}")
            skipped.append(f"{k}x{n} {recipe} {variant} {mode} (failed: {type(e).__name__})")
            continue
        rows.append({"shape": f"{k}x{n}", "recipe": recipe, "variant": variant, "mode": mode,
                     "us": round(us, 1)})
        print(f"{k}x{n:<6} {recipe:10} {variant:8} {mode:8} {us:9.1f} us  "
              f"(+{time.time() - t_start:.0f} s)", flush=True)
        del mod, lin

    bf = {r["shape"]: r["us"] for r in rows if r["variant"] == "bf16"}
    lines = ["| K x N | recipe | variant | mode | us | vs compiled BF16 |", "|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{bf[r['shape']] / r['us']:.2f}x" if r["shape"] in bf else "-"
        lines.append(f"| {r['shape']} | {r['recipe']} | {r['variant']} | {r['mode']} | {r['us']} | {ratio} |")
    print("\n".join(lines))
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "M": M,
            "timing": "triton do_bench median, fwd+bwd, fresh grads (grad_to_none x, weight)",
            "skipped": skipped}
    try:
        import torchao
        meta["torchao"] = torchao.__version__
    except ImportError:
        pass
    with open(a.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    with open(os.path.splitext(a.out)[0] + ".md", "w") as f:
        f.write(f"Dense Llama3-8B linear fwd+bwd, M={M}, {meta['device']}, torch {meta['torch']}, "
                f"torchao {meta.get('torchao', '-')}; {meta['timing']}. One process.\n\n")
        f.write("\n".join(lines) + "\n")
        if skipped:
            f.write("\nNot measured (time budget or failure): " + "; ".join(skipped) + "\n")
    print(f"wrote {a.out} ({len(rows)} rows, {len(skipped)} skipped) in {time.time() - t_start:.0f} s")
    if a.profile:
        try:
            profile(hf, *map(int, a.profile.split("x")))
        except Exception as e:  # the tables above are written already
            print(f"profile failed: {type(e).__name__}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
