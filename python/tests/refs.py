"""Independent torch references of hipfp8's ops (torchao 0.18's eager semantics, docs/OPS.md).

Written from the definitions, not from the library: amax in f32, scale = fp8_max /
max(amax, 1e-12) in f64 stored as f32, optionally rounded down to a power of two exactly,
data = saturate(x * scale) cast with round-to-nearest-even.
"""

import torch

EPS = 1e-12


def fmax(dt):
    return torch.finfo(dt).max


def amax_to_scale(amax, dt, pow2):
    s = (fmax(dt) / amax.double().clamp(min=EPS)).float()
    if pow2:
        _, e = torch.frexp(s)
        s = torch.ldexp(torch.ones_like(s), e - 1)
    return s


def encode(v, dt):
    """f32 values already multiplied by their scale -> fp8 (saturating)."""
    m = fmax(dt)
    return v.clamp(-m, m).to(dt)


def bits(t):
    return t.view(torch.uint8) if t.element_size() == 1 else t


def same(a, b):
    """Bit equality of two tensors of the same logical values (any strides)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(bits(a.contiguous()), bits(b.contiguous()))


def rowwise(x, dt, pow2):
    xf = x.float()
    s = amax_to_scale(xf.abs().amax(dim=1), dt, pow2)
    return encode(xf * s[:, None], dt), s


def colwise_3d(x, dt, pow2):  # x (E,K,N): amax over K
    xf = x.float()
    s = amax_to_scale(xf.abs().amax(dim=1), dt, pow2)  # (E,N)
    return encode(xf * s[:, None, :], dt), s


def transpose_rhs(x, dt, pow2):  # x (E,K,N): amax over N; out (E,N,K)
    xf = x.float()
    s = amax_to_scale(xf.abs().amax(dim=2), dt, pow2)  # (E,K)
    return encode(xf * s[:, :, None], dt).transpose(1, 2), s


def groups(offs):
    start = 0
    for end in offs.tolist():
        yield start, end
        start = end


def per_group_colwise(x, offs, dt, pow2):
    """out (M,K) (values; rows past offs[-1] zero), scales (G,K)."""
    xf = x.float()
    out = torch.zeros(x.shape, dtype=dt)
    scales = []
    for a, b in groups(offs):
        am = xf[a:b].abs().amax(dim=0) if b > a else torch.zeros(x.shape[1])
        s = amax_to_scale(am, dt, pow2)
        scales.append(s)
        out[a:b] = encode(xf[a:b] * s[None, :], dt)
    return out, torch.stack(scales) if scales else torch.zeros(0, x.shape[1])


def per_group_rowwise(x, offs, dt, pow2):
    xf = x.float()
    out = torch.zeros(x.shape, dtype=dt)
    scales = []
    for a, b in groups(offs):
        am = xf[:, a:b].abs().amax(dim=1) if b > a else torch.zeros(x.shape[0])
        s = amax_to_scale(am, dt, pow2)
        scales.append(s)
        out[:, a:b] = encode(xf[:, a:b] * s[:, None], dt)
    return out, torch.stack(scales) if scales else torch.zeros(0, x.shape[0])


def tensorwise(x, dt, pow2):
    xf = x.float()
    am = xf.abs().amax()
    s = amax_to_scale(am, dt, pow2)
    return encode(xf * s, dt), s, am


def scaled(x, scale, dt):
    xf = x.float()
    return encode(xf * scale.float().reshape(()), dt), xf.abs().amax()


def blockwise(x, dt, pow2, br, bc):
    """Blocks of br rows x bc columns (br=1 for 1x128)."""
    xf = x.float()
    m, k = x.shape
    sm, sk = -(-m // br), -(-k // bc)
    out = torch.empty(x.shape, dtype=dt)
    sc = torch.empty(sm, sk)
    for i in range(sm):
        for j in range(sk):
            blk = xf[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            s = amax_to_scale(blk.abs().amax(), dt, pow2)
            sc[i, j] = s
            out[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = encode(blk * s, dt)
    return out, sc


def padded(x, offs, dt, pow2):
    """out rows up to the padded end, scales for them, padded END offsets."""
    q, s = rowwise(x, dt, pow2)
    zero_scale = amax_to_scale(torch.zeros(()), dt, pow2)
    rows_q, rows_s, poffs = [], [], []
    end = 0
    for a, b in groups(offs):
        n = b - a
        p = -(-n // 16) * 16
        rows_q.append(q[a:b].view(torch.uint8))
        rows_q.append(torch.zeros(p - n, x.shape[1], dtype=torch.uint8))
        rows_s.append(s[a:b])
        rows_s.append(zero_scale.expand(p - n))
        end += p
        poffs.append(end)
    return (torch.cat(rows_q).view(dt), torch.cat(rows_s),
            torch.tensor(poffs, dtype=torch.int32))


def mx(x, dt, rceil, dim):
    """MXFP8 of x (M,K) along dim 0 (rows, blocks of 32 columns) or dim 1 (columns)."""
    xf = x.float() if dim == 0 else x.float().t().contiguous()
    m, k = xf.shape
    nb = -(-k // 32)
    out = torch.empty(m, k, dtype=dt)
    codes = torch.empty(m, nb, dtype=torch.uint8)
    emax = 8 if dt == torch.float8_e4m3fn else 15
    for j in range(nb):
        blk = xf[:, j * 32:(j + 1) * 32]
        am = blk.abs().amax(dim=1)
        if rceil:
            d = am / fmax(dt)
            f, ex = torch.frexp(d)
            e = torch.where(f == 0.5, ex - 1, ex)
            e = torch.where(d == 0, torch.full_like(e, -127), e).clamp(-127, 127)
            mult = torch.where(e == -127, torch.ones_like(d), torch.ldexp(torch.ones_like(d), -e))
        else:
            ue = ((am.view(torch.int32) >> 23) & 0xFF) - 127
            e = (ue - emax).clamp(-127, 128)
            mult = torch.ldexp(torch.ones_like(am), -torch.clamp(e, min=-126))
        codes[:, j] = (e + 127).to(torch.uint8)
        out[:, j * 32:(j + 1) * 32] = encode(blk * mult[:, None], dt)
    return out, codes


def deq(q, s_broadcast):
    """f64 dequantized values: decode(q) / scale."""
    return q.double() / s_broadcast.double()
