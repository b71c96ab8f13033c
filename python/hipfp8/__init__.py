"""hipfp8: FP8 training kernels for AMD Instinct GPUs (and NVIDIA), over a stable C ABI.

`import hipfp8.torch` for the PyTorch ops and modules. This top level needs no torch: it loads
the bundled libhipfp8.so (or $HIPFP8_LIB) on first use.
"""

from ._lib import Hipfp8Error, library_path

try:
    from ._build import BACKEND, VERSION as __version__
except ImportError:  # a source checkout, not an installed wheel
    BACKEND = None
    __version__ = "0.1.0+source"

__all__ = ["Hipfp8Error", "library_path", "abi_version", "BACKEND", "__version__"]


def abi_version():
    """HIPFP8_ABI_VERSION of the loaded library."""
    from ._lib import lib
    return lib().abi_version
