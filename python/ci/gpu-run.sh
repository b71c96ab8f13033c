#!/usr/bin/env bash
# gpu-run.sh [WHEELS_DIR] -- the hipfp8 Python package's GPU session on the H200 (no Rust, no
# network), run from the repository root. Three steps, each under its own time limit, every
# result written to $OUT (default ./gpu-out):
#   1. pytest, the GPU selection of python/tests (`cuda` device params and test_gpu.py; the
#      CUDA-graph tests last): pytest.log, pytest.xml (junit);
#   2. python/bench/host_overhead.py --device cuda: host us per op and per layer step (eager,
#      CUDA-graph replay, torch.compile): host.json / host.md;
#   3. python/bench/dense.py: the dense Llama3-8B linear table, every variant in one process
#      (BF16, hipfp8 eager + compiled, torchao): h200-dense.json / .md, with host us per step
#      (DENSE_ARGS, e.g. "--profile 4096x4096", adds a kernel-time profile to dense.log).
# WHEELS_DIR (optional): installed into $SITE by python/ci/site-env.sh (torchao, torchtitan and
# their small pure-Python deps, and the hipfp8 wheel if it is there); PYTHONPATH is
# $SITE:python, so without a hipfp8 wheel the package is this checkout's python/hipfp8 over
# the library $HIPFP8_LIB. The lead's command:
#   HIPFP8_LIB=/tmp/hipfp8-bundle/lib/libhipfp8.so OUT=$OUT python/ci/gpu-run.sh .gpu/pyw
# Limits (seconds): PYTEST_TIMEOUT (180), HOST_TIMEOUT (90, with HOST_BUDGET 60 inside),
# DENSE_TIMEOUT (160, with DENSE_BUDGET 115 inside; the profile runs after the budget): at
# most ~7.5 min in all. PYTEST_K overrides
# the selection.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
t0=$SECONDS
log() { echo "[gpu-run +$((SECONDS - t0))s] $*" | tee -a "$OUT/summary.txt"; }
status=0  # the worst stage: any stage that fails fails the run
source python/ci/site-env.sh "${1:-}"
log "$SITE_MSG"
python3 -c 'import hipfp8, hipfp8.torch, torch; print("hipfp8", hipfp8.__version__, "from", hipfp8.__file__, "library", hipfp8.library_path(), "ABI", hipfp8.abi_version(), "torch", torch.__version__, torch.cuda.get_device_name())' 2>&1 | tee -a "$OUT/summary.txt"

timeout "${PYTEST_TIMEOUT:-180}" python3 -m pytest -q -s -rs -p no:cacheprovider python/tests \
  -k "${PYTEST_K:-cuda or test_gpu}" --junitxml="$OUT/pytest.xml" >"$OUT/pytest.log" 2>&1
rc=$?
[ $rc -ne 0 ] && status=1
tail -40 "$OUT/pytest.log"
log "pytest rc=$rc ($(grep -Eo '[0-9]+ (passed|failed|skipped|error)[a-z]*' "$OUT/pytest.log" | tail -4 | tr '\n' ' '))"

timeout "${HOST_TIMEOUT:-90}" python3 python/bench/host_overhead.py --device cuda \
  --out "$OUT/host.json" --budget-s "${HOST_BUDGET:-60}" ${HOST_ARGS:-} >"$OUT/host.log" 2>&1
rc=$?
[ $rc -ne 0 ] && status=1
grep -v '^E[0-9]' "$OUT/host.log" | tail -40
log "host_overhead rc=$rc"

timeout "${DENSE_TIMEOUT:-160}" python3 python/bench/dense.py --out "$OUT/h200-dense.json" \
  --budget-s "${DENSE_BUDGET:-115}" ${DENSE_ARGS:-} >"$OUT/dense.log" 2>&1
rc=$?
[ $rc -ne 0 ] && status=1
tail -40 "$OUT/dense.log"
log "dense rc=$rc"
echo "== stages"; cat "$OUT/summary.txt"
exit $status
