#!/usr/bin/env python3
"""Does the length of a timing window change a GEMM's time? triton's do_bench repeats a call
for `rep` milliseconds: compare_grouped_gemm.py's quick sweep uses 30 ms, its table 150 ms.
A long window of back-to-back FP8 GEMMs can drive the GPU into its power limit, where the
SM clock drops, so the same kernel would time slower in the table than in the sweep.

    python3 bench/clock_window.py [--out FILE.json]

Times torch._scaled_grouped_mm on the DeepSeek-V3 gate/up forward (32768 x 7168 x 2048,
32 balanced groups; torch only, no hipfp8) with rep = 30 and 150 ms, alternating, three
times each, and samples the SM clock and the power draw (nvidia-smi, every 20 ms) during
each window. Prints one line per window and writes them as JSON.
"""

import argparse
import json
import subprocess
import threading
import time

import torch
from triton.testing import do_bench


def sampler(stop, samples):
    cmd = ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
           "-lms", "20"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        for line in p.stdout:
            if stop.is_set():
                break
            try:
                mhz, watts = (float(v) for v in line.split(","))
            except ValueError:
                continue
            samples.append((time.perf_counter(), mhz, watts))
    finally:
        p.terminate()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    dev = torch.device("cuda")
    m, k, n, e = 32768, 7168, 2048, 32
    a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
    b = torch.randn(e, n, k, device=dev).to(torch.float8_e4m3fn).transpose(-2, -1)
    offs = torch.arange(m // e, m + 1, m // e, device=dev, dtype=torch.int32)
    sa = torch.ones(m, device=dev)
    sb = torch.ones(e, n, device=dev)

    def call():
        return torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16,
                                        use_fast_accum=True)
    call()
    torch.cuda.synchronize()
    samples, stop = [], threading.Event()
    th = threading.Thread(target=sampler, args=(stop, samples), daemon=True)
    th.start()
    time.sleep(1.0)  # nvidia-smi start-up; the GPU idles meanwhile
    rows = []
    for i in range(6):
        rep = 30 if i % 2 == 0 else 150
        time.sleep(0.5)  # idle between windows: each starts from the same state
        t0 = time.perf_counter()
        ms = do_bench(call, warmup=5 if rep == 30 else 25, rep=rep, return_mode="median")
        t1 = time.perf_counter()
        win = [s for s in samples if t0 <= s[0] <= t1]
        row = {"rep_ms": rep, "us": ms * 1e3, "tflops": 2 * m * k * n / (ms * 1e-3) / 1e12,
               "samples": len(win),
               "sm_mhz_mean": sum(s[1] for s in win) / len(win) if win else None,
               "sm_mhz_min": min((s[1] for s in win), default=None),
               "power_w_max": max((s[2] for s in win), default=None)}
        rows.append(row)
        print(f"rep {rep:3d} ms: {row['us']:8.1f} us ({row['tflops']:6.1f} TF), SM clock mean "
              f"{row['sm_mhz_mean'] or 0:6.0f} MHz, min {row['sm_mhz_min'] or 0:5.0f}, "
              f"power max {row['power_w_max'] or 0:5.0f} W ({len(win)} samples)", flush=True)
    stop.set()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
