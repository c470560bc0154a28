#!/usr/bin/env bash
# The CUDA suite (spec/cuda/suite.lua, run by spec/cuda/run.lua with plain Lua,
# as on a GPU machine) against the fake CUDA driver (spec/c/fakecuda.c, built as
# build/fakecuda.so, named by DLPACK_LUA_CUDA_DRIVER): with two devices under
# the default collector and under the incremental one, with one device (the
# tests that need two skip), then under valgrind when it is installed
# (DLPACK_STAGE_NO_VALGRIND=1 skips that run). Needs no GPU.
source "$(dirname "$0")/lib.sh"
need_build

log=$(mktemp)
if ! make -s build/fakecuda.so >"$log" 2>&1; then
  echo "1..1"
  echo "not ok 1 - make build/fakecuda.so"
  as_comments "$log" 80
  rm -f "$log"
  exit 1
fi
rm -f "$log"

export DLPACK_LUA_CUDA_DRIVER="$ROOT/build/fakecuda.so"
export FAKECUDA_DEVICES=2
SUITE=spec/cuda/run.lua
tests=0 failed=0

run_busted cuda-fake "$LUA" "$SUITE"
tests=$((tests + BUSTED_TESTS)) failed=$((failed + BUSTED_FAILED))

DLPACK_SPEC_GC=incremental run_busted cuda-fake-incremental "$LUA" "$SUITE"
tests=$((tests + BUSTED_TESTS)) failed=$((failed + BUSTED_FAILED))

FAKECUDA_DEVICES=1 run_busted cuda-fake-one-device "$LUA" "$SUITE"
tests=$((tests + BUSTED_TESTS)) failed=$((failed + BUSTED_FAILED))

if [[ -n ${DLPACK_STAGE_NO_VALGRIND:-} ]]; then
  tests=$((tests + 1))
  echo "ok - the fake-driver specs under valgrind # SKIP DLPACK_STAGE_NO_VALGRIND is set"
elif ! command -v valgrind >/dev/null; then
  tests=$((tests + 1))
  echo "ok - the fake-driver specs under valgrind # SKIP valgrind not found"
else
  vlog=build/stages/valgrind-cuda-fake.log
  run_busted cuda-fake-valgrind valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
    --show-leak-kinds=definite --num-callers=16 --log-file="$vlog" "$LUA" "$SUITE"
  rc=$?
  tests=$((tests + BUSTED_TESTS)) failed=$((failed + BUSTED_FAILED))
  if ((rc != 0)) && [[ -s $vlog ]]; then
    echo "# valgrind report ($vlog):"
    head -n 150 "$vlog" | sed "s/^/# /"
  fi
fi

# Streams exist before the driver is loaded (the default streams, unsafe.wrap_stream): a first CUDA
# call made through one of them must load the driver, in a fresh process.
first_call='local d = require "dlpack"
d.cuda.legacy_stream:synchronize()
assert(require("dlpack.unsafe").wrap_stream(1, 1):query() == true)'
tests=$((tests + 1))
if out=$("$LUA" -e "$first_call" 2>&1); then
  echo "ok - a stream method as the very first CUDA call loads the driver"
else
  failed=$((failed + 1))
  echo "not ok - a stream method as the very first CUDA call loads the driver"
  printf '%s\n' "$out" | sed "s/^/# /"
fi

echo "1..$tests"
((failed == 0))
