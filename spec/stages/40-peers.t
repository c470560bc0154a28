#!/usr/bin/env bash
# spec/peers/peers.c: embeds CPython and Lua in one process and exchanges tensors
# with PyTorch and NumPy (NumPy >= 2 from build/pydeps, put there by .ci/deps).
# spec/peers/lupa_peers.py: the other way round, Python embedding Lua through lupa
# (from build/pydeps) with examples/dlpack_lupa.py, exchanging with NumPy and PyTorch.
# Both print TAP and skip visibly when a peer (torch, numpy, lupa) is missing.
source "$(dirname "$0")/lib.sh"
PY=${PYTHON:-/usr/bin/python3}
export PYTHONPATH="$ROOT/build/pydeps${PYTHONPATH:+:$PYTHONPATH}"
counts=$(mktemp) log=$(mktemp)
tests=0 failed=0

# `run_tap LABEL CMD...`: the command's TAP, renumbered; a bad exit adds a failing line.
run_tap() {
  local label=$1 rc t f; shift
  "$@" </dev/null | tap_filter "$counts"
  rc=${PIPESTATUS[0]}
  read -r t f <"$counts"
  tests=$((tests + t)) failed=$((failed + f))
  if ((rc != 0 && f == 0)) || ((t == 0)); then
    tests=$((tests + 1)) failed=$((failed + 1))
    echo "not ok - $label ends cleanly (exit status $rc$(describe_status "$rc"), $t tests)"
  fi
}

if ! "$PY-config" --embed --ldflags >/dev/null 2>&1; then
  tests=$((tests + 1))
  echo "ok - CPython embedded in a C host # SKIP cannot embed CPython: $PY-config missing (install python3-dev)"
elif ! echo '#include <Python.h>' | gcc $("$PY-config" --includes) -x c -E - >/dev/null 2>&1; then
  tests=$((tests + 1))
  echo "ok - CPython embedded in a C host # SKIP cannot embed CPython: Python.h not found (install python3-dev)"
elif make -s build/peers >"$log" 2>&1; then
  run_tap build/peers ./build/peers
else
  tests=$((tests + 1)) failed=$((failed + 1))
  echo "not ok - make build/peers"
  as_comments "$log" 80
fi

if [[ -x $PY ]]; then
  run_tap "python3 spec/peers/lupa_peers.py" "$PY" spec/peers/lupa_peers.py
else
  tests=$((tests + 1))
  echo "ok - lupa peers # SKIP $PY not found"
fi
rm -f "$counts" "$log"
echo "1..$tests"
((failed == 0))
