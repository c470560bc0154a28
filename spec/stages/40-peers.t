#!/usr/bin/env bash
# spec/peers/peers.c: embeds CPython and Lua in one process and exchanges tensors
# with PyTorch and NumPy (NumPy >= 2 from build/pydeps, put there by .ci/deps).
# It prints TAP and skips visibly when torch or numpy is missing.
source "$(dirname "$0")/lib.sh"
PY=${PYTHON:-/usr/bin/python3}
if ! "$PY-config" --embed --ldflags >/dev/null 2>&1; then
  skip_all "cannot embed CPython: $PY-config missing (install python3-dev)"
fi
if ! echo '#include <Python.h>' | gcc $("$PY-config" --includes) -x c -E - >/dev/null 2>&1; then
  skip_all "cannot embed CPython: Python.h not found (install python3-dev)"
fi
log=$(mktemp)
if ! make -s build/peers >"$log" 2>&1; then
  echo "1..1"
  echo "not ok 1 - make build/peers"
  as_comments "$log" 80
  exit 1
fi
rm -f "$log"
export PYTHONPATH="$ROOT/build/pydeps${PYTHONPATH:+:$PYTHONPATH}"
exec ./build/peers </dev/null
