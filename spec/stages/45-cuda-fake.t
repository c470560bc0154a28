#!/usr/bin/env bash
# The CUDA suite (spec/cuda/suite.lua, run by spec/cuda/run.lua with plain Lua,
# as on a GPU machine) against the fake CUDA driver (spec/c/fakecuda.c, built as
# build/fakecuda.so, named by DLPACK_LUA_CUDA_DRIVER): with two devices under
# the default collector and under the incremental one, with one device (the
# tests that need two skip), with devices that have no memory pools
# (FAKECUDA_POOLS=0) and with an old driver that lacks the stream-ordered
# allocator (build/old-driver/fakecuda.so): the module's device memory then goes
# through cuMemAlloc_v2, cuMemFree_v2 and the holds; then under valgrind when it
# is installed (DLPACK_STAGE_NO_VALGRIND=1 skips that run). Matrix products take
# both of their routes: float products through cuBLAS, the fake's
# (DLPACK_LUA_CUBLAS names the same library, which has the cuBLAS functions too),
# and every product through the module's own kernel (DLPACK_LUA_CUBLAS=none).
# Needs no GPU.
source "$(dirname "$0")/lib.sh"
build_or_exit test-build build/fakecuda.so build/old-driver/fakecuda.so

export DLPACK_LUA_CUDA_DRIVER="$ROOT/build/fakecuda.so"
export DLPACK_LUA_CUBLAS="$ROOT/build/fakecuda.so"
export FAKECUDA_DEVICES=2
SUITE=spec/cuda/run.lua
run_tap cuda-fake "$LUA" "$SUITE"
DLPACK_LUA_CUBLAS=none run_tap cuda-fake-no-cublas "$LUA" "$SUITE"
DLPACK_SPEC_GC=incremental run_tap cuda-fake-incremental "$LUA" "$SUITE"
FAKECUDA_DEVICES=1 run_tap cuda-fake-one-device "$LUA" "$SUITE"
FAKECUDA_POOLS=0 run_tap cuda-fake-no-pools "$LUA" "$SUITE"
DLPACK_LUA_CUDA_DRIVER="$ROOT/build/old-driver/fakecuda.so" DLPACK_LUA_CUBLAS="$ROOT/build/old-driver/fakecuda.so" run_tap cuda-fake-old-driver "$LUA" "$SUITE"

if [[ -n ${DLPACK_STAGE_NO_VALGRIND:-} ]]; then
  echo "ok - the CUDA suite under valgrind # SKIP DLPACK_STAGE_NO_VALGRIND is set"
elif ! command -v valgrind >/dev/null; then
  echo "ok - the CUDA suite under valgrind # SKIP valgrind not found"
else
  for blas in "$DLPACK_LUA_CUBLAS" none; do
    label=cuda-fake-valgrind$([[ $blas == none ]] && echo -no-cublas)
    vlog=build/stages/valgrind-${label#cuda-fake-}.log
    if ! DLPACK_LUA_CUBLAS=$blas run_tap "$label" valgrind -q --error-exitcode=99 --leak-check=full \
      --errors-for-leak-kinds=definite --show-leak-kinds=definite --num-callers=16 --log-file="$vlog" "$LUA" "$SUITE" &&
      [[ -s $vlog ]]; then
      echo "# valgrind report ($vlog):"
      head -n 150 "$vlog" | sed "s/^/# /"
    fi
  done
fi

# Streams exist before the driver is loaded (the default streams, unsafe.wrap_stream): a first CUDA
# call made through one of them must load the driver, in a fresh process.
first_call='local d = require "dlpack"
d.cuda.legacy_stream:synchronize()
assert(require("dlpack.unsafe").wrap_stream(1, 1):query() == true)'
step "a stream method as the very first CUDA call loads the driver" "$LUA" -e "$first_call"
exit 0
