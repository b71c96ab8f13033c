#!/usr/bin/env python3
"""Pack python/hipfp8 and a built libhipfp8.so into a wheel (PEP 427), with no build backend.

    python3 python/make_wheel.py --lib target/wheel-cpu/release/libhipfp8.so --backend cpu --out dist

Called by scripts/build-wheel.sh. The wheel is py3-none-manylinux_2_<N>_<arch>: the Python code
is version-independent and the library links neither Python nor libtorch; N is the newest
glibc symbol version the library references. The library is stripped of debug info when
`strip` is available.
"""

import argparse
import base64
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "python", "hipfp8")


def crate_version():
    with open(os.path.join(ROOT, "Cargo.toml")) as f:
        for line in f:
            m = re.match(r'^version\s*=\s*"([^"]+)"', line)
            if m:
                return m.group(1)
    raise SystemExit("make_wheel: no version in Cargo.toml")


def glibc_tag(so):
    with open(so, "rb") as f:
        data = f.read()
    minors = [int(m) for m in re.findall(rb"GLIBC_2\.(\d+)", data)]
    minor = max(minors + [17])
    return f"manylinux_2_{minor}_{platform.machine()}"


def digest(data):
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={h},{len(data)}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--backend", required=True, choices=["cpu", "cuda", "rocm"])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    version = f"{crate_version()}+{a.backend}"
    tag = f"py3-none-{glibc_tag(a.lib)}"
    name = f"hipfp8-{version}-{tag}.whl"
    dist_info = f"hipfp8-{version}.dist-info"

    files = []  # (archive name, bytes)
    for d, subdirs, names in os.walk(PKG):
        subdirs[:] = sorted(s for s in subdirs if s not in ("__pycache__", "lib", "include"))
        for n in sorted(names):
            if n.endswith(".py"):
                p = os.path.join(d, n)
                with open(p, "rb") as f:
                    files.append((os.path.relpath(p, os.path.dirname(PKG)), f.read()))
    with tempfile.TemporaryDirectory() as tmp:
        so = os.path.join(tmp, "libhipfp8.so")
        shutil.copyfile(a.lib, so)
        if shutil.which("strip"):
            subprocess.run(["strip", "--strip-debug", so], check=True)
        with open(so, "rb") as f:
            files.append(("hipfp8/lib/libhipfp8.so", f.read()))
    with open(os.path.join(ROOT, "include", "hipfp8.h"), "rb") as f:
        files.append(("hipfp8/include/hipfp8.h", f.read()))
    files.append(("hipfp8/_build.py", (
        f'"""Written by python/make_wheel.py."""\nBACKEND = "{a.backend}"\n'
        f'VERSION = "{version}"\n').encode()))

    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    metadata = "\n".join([
        "Metadata-Version: 2.1",
        "Name: hipfp8",
        f"Version: {version}",
        "Summary: FP8 training kernels for AMD Instinct (and NVIDIA) GPUs: torch custom ops "
        "over a C ABI, no libtorch dependency",
        "License: Apache-2.0",
        "Requires-Python: >=3.10",
        "Provides-Extra: torch",
        'Requires-Dist: torch>=2.6; extra == "torch"',
        "Description-Content-Type: text/markdown",
        "",
        readme,
    ])
    wheel = "\n".join([
        "Wheel-Version: 1.0",
        "Generator: hipfp8 python/make_wheel.py",
        "Root-Is-Purelib: false",
        f"Tag: {tag}",
        "",
    ])
    files.append((f"{dist_info}/METADATA", metadata.encode()))
    files.append((f"{dist_info}/WHEEL", wheel.encode()))
    files.append((f"{dist_info}/top_level.txt", b"hipfp8\n"))
    record = "".join(f"{n},{digest(b)}\n" for n, b in files) + f"{dist_info}/RECORD,,\n"
    files.append((f"{dist_info}/RECORD", record.encode()))

    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, b in files:
            info = zipfile.ZipInfo(n, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if n.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, b)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
