#!/usr/bin/env bash
# Fetch CUTLASS headers (C++ templates only; nothing is compiled here) from the pinned
# `nvidia-cutlass` PyPI wheel into a cache folder, for the sm_90 grouped-GEMM backend.
#
#   scripts/fetch-cutlass.sh [CACHE_DIR]      (default: <repo>/.toolchains/cutlass)
#
# Prints the include directory; build.rs finds it there, or takes CUTLASS_DIR (a CUTLASS
# checkout or any folder holding include/cutlass and include/cute).
# The wheel is pure data for us: we only unpack cutlass_library/source/include.
set -euo pipefail
VERSION="${CUTLASS_WHEEL_VERSION:-4.2.0.0}"   # pinned: CUTLASS 4.2.0 (sm_90 ptr-array grouped GEMM, FP8, EVT)
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${1:-$ROOT/.toolchains/cutlass}"
DEST="$CACHE/$VERSION"
if [ -f "$DEST/include/cutlass/cutlass.h" ]; then
  echo "$DEST/include"; exit 0
fi
mkdir -p "$CACHE/wheel"
PY="${PYTHON:-python3}"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: -d "$CACHE/wheel" "nvidia-cutlass==$VERSION" >&2
WHL="$(ls "$CACHE"/wheel/nvidia_cutlass-"$VERSION"-*.whl | head -n1)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# Unpack only the header tree (the wheel also carries the Python generator and tools).
"$PY" - "$WHL" "$TMP" <<'PYEOF'
import sys, zipfile
whl, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith("cutlass_library/source/include/")]
    if not names:
        sys.exit("wheel has no cutlass_library/source/include")
    z.extractall(out, names)
PYEOF
mkdir -p "$DEST"
rm -rf "$DEST/include"
mv "$TMP/cutlass_library/source/include" "$DEST/include"
test -f "$DEST/include/cutlass/cutlass.h"
echo "$DEST/include"
