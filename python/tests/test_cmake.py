"""C/C++ packaging: scripts/install-c-lib.sh installs the versioned SONAME and a CMake package;
ffi_examples/cmake builds example 01 against it with find_package(hipfp8), shared and static.
Needs the release libraries (cargo build --release, or HIPFP8_LIB_DIR) and cmake."""

import os
import shutil
import subprocess

import pytest

from conftest import ROOT
from hipfp8 import _lib

LIB_DIR = os.environ.get("HIPFP8_LIB_DIR", os.path.join(ROOT, "target", "release"))
HAVE_LIBS = all(os.path.exists(os.path.join(LIB_DIR, f)) for f in ("libhipfp8.a", "libhipfp8.so"))

pytestmark = [
    pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed"),
    pytest.mark.skipif(not HAVE_LIBS, reason=f"no libhipfp8.a/.so in {LIB_DIR} (cargo build --release)"),
]


def run(*cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{p.stdout}\n{p.stderr}"
    return p.stdout


def dyn(path):
    return run("readelf", "-d", path) if shutil.which("readelf") else ""


def test_install_and_find_package(tmp_path):
    prefix = tmp_path / "prefix"
    run("sh", os.path.join(ROOT, "scripts", "install-c-lib.sh"), "--prefix", str(prefix),
        "--from", LIB_DIR)
    abi = _lib.lib().abi_version
    soname = f"libhipfp8.so.{abi}"
    lib = prefix / "lib"
    assert (lib / soname).is_file() and not (lib / soname).is_symlink()
    assert os.readlink(lib / "libhipfp8.so") == soname
    if shutil.which("readelf"):
        assert f"Library soname: [{soname}]" in dyn(lib / soname)
    assert (lib / "cmake" / "hipfp8" / "hipfp8Config.cmake").is_file()

    build = tmp_path / "build"
    run("cmake", "-S", os.path.join(ROOT, "ffi_examples", "cmake"), "-B", str(build),
        f"-DCMAKE_PREFIX_PATH={prefix}")
    run("cmake", "--build", str(build))
    env = dict(os.environ, RAYON_NUM_THREADS="2")
    env.pop("LD_LIBRARY_PATH", None)
    for exe, shared in (("ex01_shared", True), ("ex01_static", False)):
        out = run(str(build / exe), env=env)
        assert "01_quantize_rowwise: OK" in out, out
        needed = dyn(build / exe)
        if needed:
            assert (f"[{soname}]" in needed) == shared, needed

    # the version file refuses a newer minor version than the installed 0.1
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(v C)\nfind_package(hipfp8 0.2 REQUIRED)\n")
    p = subprocess.run(["cmake", "-S", str(tmp_path / "v"), "-B", str(tmp_path / "vb"),
                        f"-DCMAKE_PREFIX_PATH={prefix}"], capture_output=True, text=True)
    assert p.returncode != 0 and "hipfp8" in p.stderr
