#!/usr/bin/env bash
# Build the Python environment the hipfp8 pytest suite needs, cached under $HIPFP8_CI_CACHE:
# torch==2.11.0 from PyPI (the CUDA build: ~4.7 GB installed with its nvidia-* wheels;
# PyPI has no CPU-only build and `--no-deps` breaks `import torch`), pytest, numpy, and
# torchtitan 0.3.0 + torchao 0.18.0 (with their small pure-Python dependencies) for the
# experts-swap test. Wheels are downloaded (retried) into $HIPFP8_CI_CACHE/wheels first,
# then installed offline from there, so a second run downloads nothing.
#
#   bash python/ci/torch-env.sh            # prints the venv's python on its last line
#
# .ci/run starts this in the background at its beginning and waits for it at the pytest step.
set -euo pipefail

CACHE="${HIPFP8_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hipfp8-ci}"
WHEELS="$CACHE/wheels"
VENV="$CACHE/venv-torch"
PY="${PYTHON:-python3}"
export PIP_CACHE_DIR="$CACHE/pip-torch"  # not the CI venv's: the two run at the same time
export PIP_DISABLE_PIP_VERSION_CHECK=1
mkdir -p "$WHEELS" "$PIP_CACHE_DIR"

retry() {
  local n=1
  until "$@"; do
    if [ "$n" -ge 4 ]; then echo "giving up after $n attempts: $*" >&2; return 1; fi
    echo "attempt $n failed: $*; retrying in $((n * 15)) s" >&2
    sleep $((n * 15)); n=$((n + 1))
  done
}

# With their dependencies (resolved by pip):
REQS=(torch==2.11.0 pytest==8.4.2 numpy==2.4.6)
# Without (their dependency lists pull in training stacks the tests do not use):
NODEPS=(torchao==0.18.0 torchtitan==0.3.0 spmd_types==0.2.3 tyro==1.0.17 docstring-parser==0.18.0
        typeguard==4.6.1)

stamp="$VENV/.hipfp8-reqs"
want="${REQS[*]} ${NODEPS[*]}"
if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "torch env cached: $VENV"
  echo "$VENV/bin/python"
  exit 0
fi
t0=$SECONDS
retry "$PY" -m pip download -q -d "$WHEELS" --only-binary=:all: "${REQS[@]}"
retry "$PY" -m pip download -q -d "$WHEELS" --only-binary=:all: --no-deps "${NODEPS[@]}"
t1=$SECONDS
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --no-index --find-links "$WHEELS" "${REQS[@]}"
"$VENV/bin/python" -m pip install -q --no-index --find-links "$WHEELS" --no-deps "${NODEPS[@]}"
"$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'
echo "$want" >"$stamp"
echo "torch env: download $((t1 - t0)) s, install $((SECONDS - t1)) s"
echo "$VENV/bin/python"
