"""Check every benchmark script's ctypes bindings against include/hipfp8.h, and run the
grouped-GEMM bindings on a CPU context. CI runs this (.ci/run), so a stale binding (a
descriptor missing a field, a call missing an argument) fails CI, not a device session.

  python3 bench/check_bindings.py LIBHIPFP8_SO

Needs only numpy and ctypes (no torch, no GPU: the library may be the CPU-only build).
1. Static, every bench/*.py and python/hipfp8/*.py (read with `ast`, not imported): each ctypes.Structure must
   match a struct of the header field for field (names and C types); each call
   `X.hipfp8_NAME(args)` must name a header function and pass its number of parameters;
   each positional construction of a Structure must give every field.
2. Run: bench/hipfp8_gemm_abi.py on a CPU context, both grouped GEMMs and the blockwise 2D x 2D
   (with an empty group and an unaligned group start) against a float64 numpy reference, and
   the plan queries.
"""
import ast
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CTYPE = {"c_size_t": "size_t", "c_uint32": "uint32_t", "c_int32": "int32_t", "c_uint64": "uint64_t",
         "c_int64": "int64_t", "c_uint16": "uint16_t", "c_uint8": "uint8_t", "c_float": "float",
         "c_double": "double", "c_void_p": "void*"}


def header_decls(path):
    text = open(path).read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    structs = {}
    for m in re.finditer(r"typedef struct (\w+) \{(.*?)\} \1;", text, flags=re.S):
        fields = []
        for f in m.group(2).split(";"):
            f = " ".join(f.split())
            if f:
                ty, name = f.rsplit(" ", 1)
                fields.append((name, ty))
        structs[m.group(1)] = fields
    funcs = {}
    for m in re.finditer(r"\b(hipfp8_\w+)\s*\(([^;{}]*?)\)\s*;", text, flags=re.S):
        params = [p for p in " ".join(m.group(2).split()).split(",") if p.strip() and p.strip() != "void"]
        funcs[m.group(1)] = len(params)
    return structs, funcs


def check_script(path, structs, funcs):
    errors = []
    tree = ast.parse(open(path).read(), path)
    classes = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
                (isinstance(b, ast.Attribute) and b.attr == "Structure") or (isinstance(b, ast.Name) and b.id == "Structure")
                for b in node.bases):
            fields = None
            for st in node.body:
                if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_fields_" for t in st.targets):
                    fields = [(e.elts[0].value, e.elts[1].attr if isinstance(e.elts[1], ast.Attribute) else e.elts[1].id)
                              for e in st.value.elts]
            if fields is None:
                continue
            classes[node.name] = fields
            want = [(n, CTYPE.get(t, t)) for n, t in fields]
            if not any(want == s for s in structs.values()):
                near = [k for k, s in structs.items() if [n for n, _ in s][:1] == [n for n, _ in want][:1]
                        and len(set(n for n, _ in s) & set(n for n, _ in want)) >= len(want) - 1]
                errors.append(f"{path}:{node.lineno}: ctypes.Structure {node.name} {want} matches no struct of "
                              f"include/hipfp8.h (closest: {near[:3]})")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr.startswith("hipfp8_"):
            name = f.attr
            if name not in funcs:
                errors.append(f"{path}:{node.lineno}: {name} is not declared in include/hipfp8.h")
            elif not any(isinstance(a, ast.Starred) for a in node.args) and len(node.args) != funcs[name]:
                errors.append(f"{path}:{node.lineno}: {name} takes {funcs[name]} arguments, the call passes "
                              f"{len(node.args)}")
        if isinstance(f, ast.Name) and f.id in classes and node.args and not node.keywords:
            if len(node.args) != len(classes[f.id]) and not any(isinstance(a, ast.Starred) for a in node.args):
                errors.append(f"{path}:{node.lineno}: {f.id}(...) gives {len(node.args)} of "
                              f"{len(classes[f.id])} fields")
    # getattr(lib, "hipfp8_" + name) over a literal tuple of names: each must exist.
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple):
            body = ast.dump(ast.Module(body=node.body, type_ignores=[]))
            prefix = "hipfp8_" if "Constant(value='hipfp8_')" in body else ""
            if "getattr" in body:
                for e in node.iter.elts:
                    if isinstance(e, ast.Constant) and isinstance(e.value, str):
                        n = prefix + e.value
                        if n.startswith("hipfp8_") and n not in funcs:
                            errors.append(f"{path}:{node.lineno}: {n} is not declared in include/hipfp8.h")
    return errors


# ---- FP8 decoding and the reference -------------------------------------------------------

def decode_table(fmt):
    """float64 value of each byte (NaN for NaN codes)."""
    mbits, bias = {"e4m3fn": (3, 7), "e5m2": (2, 15)}[fmt]
    out = np.empty(256)
    for c in range(256):
        s = -1.0 if c & 0x80 else 1.0
        e = (c >> mbits) & ((1 << (7 - mbits)) - 1)
        m = c & ((1 << mbits) - 1)
        if fmt == "e4m3fn" and (c & 0x7F) == 0x7F or fmt == "e5m2" and e == 31:
            out[c] = np.nan
        elif e == 0:
            out[c] = s * m / (1 << mbits) * 2.0 ** (1 - bias)
        else:
            out[c] = s * (1 + m / (1 << mbits)) * 2.0 ** (e - bias)
    return out


def random_codes(rng, n, fmt):
    t = decode_table(fmt)
    ok = np.flatnonzero(np.isfinite(t) & (np.abs(t) <= 8))
    return rng.choice(ok, size=n).astype(np.uint8)


def bf16_to_f64(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def close(out, ref, mag, what):
    bad = np.abs(out - ref) > 2.0 ** -7 * np.abs(ref) + 1e-6 * mag
    if bad.any():
        i = np.flatnonzero(bad.ravel())[0]
        raise AssertionError(f"{what}: {bad.sum()} elements off, first at {i}: {out.ravel()[i]} vs {ref.ravel()[i]}")


def run_gemm_bindings(lib_path):
    sys.path.insert(0, HERE)
    import hipfp8_gemm_abi as abi
    g = abi.Gemm(lib_path, abi.BACKEND_CPU)
    rng = np.random.default_rng(7)
    addr = lambda x: x.ctypes.data
    for fa, fb in (("e4m3fn", "e4m3fn"), ("e4m3fn", "e5m2"), ("e5m2", "e4m3fn")):
        ta, tb = decode_table(fa), decode_table(fb)
        # 2D x 3D: m=40, k=32, n=24, 3 experts, the second empty.
        m, k, n, e = 40, 32, 24, 3
        offs = np.array([10, 10, 40], dtype=np.int32)
        a = random_codes(rng, m * k, fa)
        b = random_codes(rng, e * n * k, fb)  # (e, n, k) contiguous
        sa = rng.uniform(0.5, 2, m).astype(np.float32)
        sb = rng.uniform(0.5, 2, e * n).astype(np.float32)
        out = np.zeros(m * n, dtype=np.uint16)
        d = g.desc_2d3d(m, k, n, e, fa, fb)
        imp, why, text = g.plan(d, e)
        assert imp == "cpu" and why == 0, (imp, why, text)
        g.gemm_2d3d(d, addr(a), a.size, addr(b), b.size, addr(offs), e, addr(sa), sa.size, addr(sb), sb.size,
                    addr(out), out.size)
        A = ta[a].reshape(m, k)
        B = tb[b].reshape(e, n, k)
        ref = np.zeros((m, n))
        lo = 0
        for gi, hi in enumerate(offs):
            ref[lo:hi] = A[lo:hi] @ B[gi].T * sa[lo:hi, None] * sb[gi * n:(gi + 1) * n][None, :]
            lo = hi
        close(bf16_to_f64(out).reshape(m, n), ref, np.abs(ref).max(), f"2d3d {fa} x {fb}")
        # 2D x 2D: n=8, mt=48, k=16, groups [0,5) [5,5) [5,48): an empty group, a start at 5.
        n2, mt, k2 = 8, 48, 16
        offs2 = np.array([5, 5, 48], dtype=np.int32)
        G = len(offs2)
        a2 = random_codes(rng, n2 * mt, fa)
        b2 = random_codes(rng, k2 * mt, fb)  # (k, mt) contiguous
        sa2 = rng.uniform(0.5, 2, G * n2).astype(np.float32)
        sb2 = rng.uniform(0.5, 2, G * k2).astype(np.float32)
        out2 = np.full(G * n2 * k2, 0x4000, dtype=np.uint16)  # 2.0: the empty group must become 0
        d2 = g.desc_2d2d(n2, mt, k2, fa, fb)
        imp, why, text = g.plan(d2, G)
        assert imp == "cpu" and why == 0, (imp, why, text)
        g.gemm_2d2d(d2, addr(a2), a2.size, addr(b2), b2.size, addr(offs2), G, addr(sa2), sa2.size, addr(sb2),
                    sb2.size, addr(out2), out2.size)
        A2 = ta[a2].reshape(n2, mt)
        B2 = tb[b2].reshape(k2, mt)
        ref2 = np.zeros((G, n2, k2))
        lo = 0
        for gi, hi in enumerate(offs2):
            ref2[gi] = A2[:, lo:hi] @ B2[:, lo:hi].T * sa2[gi * n2:(gi + 1) * n2, None] * sb2[gi * k2:(gi + 1) * k2][None]
            lo = hi
        close(bf16_to_f64(out2).reshape(G, n2, k2), ref2, np.abs(ref2).max(), f"2d2d {fa} x {fb}")
        assert (out2.reshape(G, n2, k2)[1] == 0).all(), "empty group not zeroed"
        # Blockwise 2D x 2D: mt=300 in 3 token blocks, groups [0,100) [100,100) [100,300) sharing block 0.
        mt3 = 300
        mb = (mt3 + 127) // 128
        offs3 = np.array([100, 100, 300], dtype=np.int32)
        a3 = random_codes(rng, n2 * mt3, fa)
        b3 = random_codes(rng, k2 * mt3, fb)
        sa3 = rng.uniform(0.5, 2, mb * n2).astype(np.float32)  # (mb, n) block-major
        sb3 = rng.uniform(0.5, 2, mb * k2).astype(np.float32)
        out3 = np.full(G * n2 * k2, 0x4000, dtype=np.uint16)
        d3 = g.desc_bw_2d2d(n2, mt3, k2, fa, fb)
        imp, why, text = g.plan(d3, G)
        assert imp == "cpu" and why == 0, (imp, why, text)
        g.gemm_bw_2d2d(d3, addr(a3), a3.size, addr(b3), b3.size, addr(offs3), G, addr(sa3), sa3.size, addr(sb3),
                       sb3.size, addr(out3), out3.size)
        tok_a = ta[a3].reshape(n2, mt3) * np.repeat(sa3.reshape(mb, n2).T, 128, 1)[:, :mt3]
        tok_b = tb[b3].reshape(k2, mt3) * np.repeat(sb3.reshape(mb, k2).T, 128, 1)[:, :mt3]
        ref3 = np.zeros((G, n2, k2))
        lo = 0
        for gi, hi in enumerate(offs3):
            ref3[gi] = tok_a[:, lo:hi] @ tok_b[:, lo:hi].T
            lo = hi
        close(bf16_to_f64(out3).reshape(G, n2, k2), ref3, np.abs(ref3).max(), f"blockwise 2d2d {fa} x {fb}")
        assert (out3.reshape(G, n2, k2)[1] == 0).all(), "empty group not zeroed (blockwise)"
    assert g.workspace_size("e4m3fn", "e4m3fn", abi.GEMM_AUTO, 32) == 0  # CPU: none
    # A stale descriptor size is refused, not misread.
    bad = g.desc_2d3d(4, 16, 8, 1)
    bad.size -= 8
    try:
        g.plan(bad, 1)
        raise AssertionError("a wrong descriptor size was accepted")
    except RuntimeError as ex:
        assert "INVALID_DESCRIPTOR" in str(ex) or "descriptor" in str(ex).lower(), ex
    g.close()


def main():
    lib_path = sys.argv[1]
    structs, funcs = header_decls(os.path.join(ROOT, "include", "hipfp8.h"))
    assert len(structs) > 5 and len(funcs) > 20, (len(structs), len(funcs))
    errors = []
    scripts = [os.path.join(HERE, f) for f in sorted(os.listdir(HERE)) if f.endswith(".py")]
    # The Python package's ctypes layer too (its descriptors must match the header as well).
    pkg = os.path.join(ROOT, "python", "hipfp8")
    if os.path.isdir(pkg):
        scripts += [os.path.join(pkg, f) for f in sorted(os.listdir(pkg)) if f.endswith(".py")]
    for f in scripts:
        errors += check_script(f, structs, funcs)
    if errors:
        print("\n".join(errors))
        sys.exit(1)
    print(f"bindings of {len(scripts)} bench / python scripts match include/hipfp8.h ({len(structs)} structs, "
          f"{len(funcs)} functions)")
    run_gemm_bindings(lib_path)
    print("grouped-GEMM bindings ran on a CPU context: 3 format pairs x (2d3d, 2d2d, blockwise 2d2d), plans, workspace: ok")


if __name__ == "__main__":
    main()
