#!/usr/bin/env bash
# site-env.sh -- the Python environment of a GPU session (no network): the wheels of WHEELS_DIR
# (torchao, torchtitan and their small pure-Python deps, the hipfp8 wheel if there) installed
# with pip --no-deps --no-index into $SITE (default /tmp/site; once per set of wheels), and
# PYTHONPATH = $SITE:python, so without a hipfp8 wheel the package is this checkout's
# python/hipfp8 over the library $HIPFP8_LIB. Run from the repository root.
#   source python/ci/site-env.sh [WHEELS_DIR]          # sets SITE_MSG (what was installed)
#   bash python/ci/site-env.sh WHEELS_DIR CMD [ARGS]   # then runs CMD in that environment
SITE=${SITE:-/tmp/site}
mkdir -p "$SITE"
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-16}
export PYTHONPATH="$SITE:$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
SITE_MSG="no wheels dir: $SITE as it is"
if [ -n "${1:-}" ]; then
  _want=$(cd "$1" && ls ./*.whl | sort | tr '\n' ' ')
  if [ "$(cat "$SITE/.wheels" 2>/dev/null)" != "$_want" ]; then
    python3 -m pip install -q --no-deps --no-index --disable-pip-version-check --upgrade \
      --target "$SITE" "$1"/*.whl 2>&1 | tail -3
    echo "$_want" >"$SITE/.wheels"
    SITE_MSG="installed $(echo "$_want" | wc -w) wheels from $1 into $SITE"
  else
    SITE_MSG="$SITE already holds the $(echo "$_want" | wc -w) wheels of $1"
  fi
fi
if [ "${BASH_SOURCE[0]}" = "$0" ] && [ $# -gt 1 ]; then
  echo "[site-env] $SITE_MSG"
  shift
  exec "$@"
fi
