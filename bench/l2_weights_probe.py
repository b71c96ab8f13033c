"""Probe: does quantizing the expert weights a few experts at a time let the fused pass's second
read (the column codes) come from L2? moe_weights_dual over all E experts in one call against
E/c calls of c experts each (every variant captured in one CUDA graph, so host time is out),
L2 flushed before each replay (triton do_bench). Prints us, % of the copy bandwidth measured in
the same process, and checks that the chunked outputs equal the whole call's bit for bit.

    HIPFP8_LIB=.../libhipfp8.so PYTHONPATH=python python3 bench/l2_weights_probe.py
"""
import torch
import triton.testing as tt

import hipfp8.torch as ht

E = 32


def bits(t):
    """t compared bit for bit: the one-byte (float8) tensors as their bytes."""
    return t.view(torch.uint8) if t.element_size() == 1 else t


def graphed(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            out = fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    return g, out


def main():
    src = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_us = tt.do_bench(lambda: dst.copy_(src), return_mode="median") * 1e3
    copy_bps = 2 * src.numel() / (copy_us * 1e-6)
    print(f"copy {2 * src.numel() / 1e6:.0f} MB in {copy_us:.1f} us: {copy_bps / 1e12:.2f} TB/s")
    for k, n in [(7168, 2048), (2048, 7168)]:
        w = torch.randn(E, n, k, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        minimal = 4 * E * k * n + 4 * E * (k + n)
        ref = None
        for c in [E, 4, 2, 1]:
            def fn(c=c):
                return [ht.moe_weights_dual(w[e:e + c]) for e in range(0, E, c)]
            g, outs = graphed(fn)
            us = tt.do_bench(g.replay, return_mode="median") * 1e3
            g.replay()
            cat = [torch.cat([o[i] for o in outs]) for i in range(4)]
            if ref is None:
                ref = [t.clone() for t in cat]
                same = "reference"
            else:
                same = all(torch.equal(bits(a), bits(b)) for a, b in zip(cat, ref))
            pct = 100 * minimal / (us * 1e-6) / copy_bps
            print(f"({E},{k},{n}) {E // c:2d} calls of {c:2d} experts: {us:8.1f} us  {pct:5.1f} % of copy"
                  f"  equal to one call: {same}")
            del g, outs


if __name__ == "__main__":
    main()
