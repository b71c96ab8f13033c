"""CUDA graphs over hipfp8's ops: the one rule, and torch.cuda.make_graphed_callables with it.

The ops never synchronise, never read a device value on the host and take their outputs and
the GEMM workspace from torch's caching allocator, so a fwd+bwd step captures as it is. The
one rule: the C library keeps a scratch buffer per stream (column casts, cast_transpose, the
grouped GEMM's arguments), created at an op's first use on that stream; it cannot be created
while the stream is capturing (the op then fails with a clear error, the capture is not
corrupted). So run the step once on the stream you capture on before capturing:

    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        step()                               # warm-up: the scratch of stream s
    with torch.cuda.graph(g, stream=s):
        step()

`torch.cuda.make_graphed_callables` warms up on a fresh side stream and captures on
`torch.cuda.graph`'s default capture stream, so the capture would be the first use there;
`make_graphed_callables` below first runs each callable (forward and backward) once on that
capture stream, then calls torch's.
"""

import torch
from torch.utils._pytree import tree_leaves

__all__ = ["capture_stream", "warm_up", "make_graphed_callables"]


def capture_stream():
    """The stream `torch.cuda.graph(g)` captures on when it is given none (torch's default
    capture stream, created on first use)."""
    return torch.cuda.graph(torch.cuda.CUDAGraph()).capture_stream


def warm_up(fn, *args, stream=None):
    """Run fn(*args) once on `stream` (default: `capture_stream()`), then the backward of its
    outputs that require grad (torch.autograd.grad with zero output grads, into the inputs and
    parameters that require grad; nothing accumulates into .grad), ordered after the current
    stream's work and before its later work. Returns nothing."""
    s = stream if stream is not None else capture_stream()
    cur = torch.cuda.current_stream()
    s.wait_stream(cur)
    with torch.cuda.stream(s):
        outs = [o for o in tree_leaves(fn(*args))
                if isinstance(o, torch.Tensor) and o.requires_grad]
        ins = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        if isinstance(fn, torch.nn.Module):
            ins += [p for p in fn.parameters() if p.requires_grad]
        if outs and ins:
            torch.autograd.grad(outs, ins, grad_outputs=[torch.zeros_like(o) for o in outs],
                                allow_unused=True)
    cur.wait_stream(s)


def make_graphed_callables(callables, sample_args, **kwargs):
    """torch.cuda.make_graphed_callables (same arguments, same result) for callables that run
    hipfp8 ops: each is first warmed up on torch's default capture stream (`warm_up`)."""
    single = not isinstance(callables, tuple)
    fns = (callables,) if single else callables
    argsets = (sample_args,) if single else sample_args
    for fn, args in zip(fns, argsets):
        warm_up(fn, *args)
    torch.cuda.synchronize()
    return torch.cuda.make_graphed_callables(callables, sample_args, **kwargs)
