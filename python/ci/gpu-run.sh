#!/usr/bin/env bash
# gpu-run.sh DIR -- the hipfp8 Python package's GPU session (the H200 machine: no Rust, no
# network). DIR holds wheels/ (the hipfp8 CUDA wheel + torchao, torchtitan and their small
# pure-Python deps), tests/ and bench/ (copies of python/tests, python/bench). Installs the
# wheels with pip --no-deps into DIR/site, runs the GPU pytest selection, then the dense
# benchmark. Everything goes to $OUT (log, junit xml, h200-dense.json/.md).
set -uo pipefail
D=$(cd "${1:?usage: gpu-run.sh DIR}" && pwd)
OUT=${OUT:-$D/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=16
t0=$SECONDS
python3 -m pip install -q --no-deps --no-index --target "$D/site" "$D"/wheels/*.whl 2>&1 | tail -3
export PYTHONPATH="$D/site"
echo "[gpu-run +$((SECONDS - t0))s] installed: $(ls "$D/site" | grep -c dist-info) wheels"
python3 -c 'import hipfp8, hipfp8.torch, torch; print("hipfp8", hipfp8.__version__, hipfp8.BACKEND, "ABI", hipfp8.abi_version(), "torch", torch.__version__, torch.cuda.get_device_name())'
cd "$D"
timeout "${PYTEST_TIMEOUT:-100}" python3 -m pytest -q -s -rs -p no:cacheprovider tests \
  -k "${PYTEST_K:-cuda or test_gpu}" --junitxml="$OUT/pytest.xml" 2>&1 | tail -60
echo "[gpu-run +$((SECONDS - t0))s] pytest rc=${PIPESTATUS[0]}"
timeout "${BENCH_TIMEOUT:-130}" python3 bench/dense.py --out "$OUT/h200-dense.json" --budget-s "${BENCH_BUDGET:-90}" ${BENCH_ARGS:-}
echo "[gpu-run +$((SECONDS - t0))s] bench rc=$?"
