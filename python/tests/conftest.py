"""pytest setup for the hipfp8 Python package.

The package under test is the installed wheel (`pip install target/wheels/hipfp8-*.whl`), or
python/ on sys.path with HIPFP8_LIB pointing at a built libhipfp8.so. Devices: the CPU always;
CUDA (or ROCm) when torch sees a GPU AND the library has a GPU backend; GPU-only tests skip
with the reason printed otherwise (`pytest -rs`).
"""

import os
import sys
import tempfile

# A fresh inductor cache per test session: compiled graphs cached by an earlier session hold
# the custom ops' fake kernels of the code they were compiled with (a stale saved-buffer size
# then fails the compiled tests), and the compile tests are meant to compile.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="hipfp8-inductor-"))

import pytest  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

try:
    import hipfp8  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import hipfp8  # noqa: F401

import hipfp8.torch as hf  # noqa: E402
from hipfp8 import _lib  # noqa: E402


def _gpu_reason():
    if not torch.cuda.is_available():
        return "torch sees no GPU"
    try:
        _lib.context(_lib.BACKEND_GPU, 0)
    except _lib.Hipfp8Error as e:
        return f"libhipfp8 has no GPU backend here: {e}"
    return None


GPU_REASON = _gpu_reason()
HAVE_GPU = GPU_REASON is None
requires_gpu = pytest.mark.skipif(not HAVE_GPU, reason=f"GPU test: {GPU_REASON}")

DEVICES = ["cpu"] + (["cuda"] if HAVE_GPU else [])


def pytest_report_header(config):
    return [f"hipfp8 library: {_lib.lib().path} (ABI {_lib.lib().abi_version})",
            f"torch {torch.__version__}; devices under test: {DEVICES}"
            + ("" if HAVE_GPU else f" (no GPU: {GPU_REASON})")]


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same global RNG state (module initializers such as
    torch.nn.Linear draw from it), so a test's inputs do not depend on the tests before it."""
    torch.manual_seed(0)


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def pytest_configure(config):
    config.addinivalue_line("markers", "capture: captures a CUDA graph (run after the others)")


def pytest_collection_modifyitems(config, items):
    # A failed CUDA graph capture leaves torch's CUDA RNG unusable for the rest of the process
    # ("Offset increment outside graph capture"): capturing tests run last, so a capture bug
    # fails those tests only.
    items.sort(key=lambda it: it.get_closest_marker("capture") is not None)
