#!/usr/bin/env bash
# spec/gpu/prepare.sh: build and run the GPU checks on a machine with an NVIDIA GPU,
# its driver, gcc, nvcc and python3 (with PyTorch and CuPy for the interop). See docs/gpu.md.
#
#   bash spec/gpu/prepare.sh build   build the module (make all), build/peers if Python can be
#                                    embedded, build/gpu/gpu_kernels.so (nvcc),
#                                    build/gpu/libluapeer.so and build/bench_cuda.
#   bash spec/gpu/prepare.sh run     build, then run the CUDA suite (spec/cuda/run.lua),
#                                    spec/gpu/ipc.lua, spec/gpu/interop.py, build/bench_cuda and
#                                    bench/cuda_torch.py; logs
#                                    go to $DLPACK_GPU_LOGS (default build/gpu/) as gpu-machine.txt,
#                                    gpu-suite.tap, gpu-ipc.tap, gpu-interop.tap, gpu-bench.txt. Exit 1
#                                    if any failed.
#   eval "$(bash spec/gpu/prepare.sh env)"   the paths, for running pieces by hand.
#   bash spec/gpu/prepare.sh pack    on a Debian/Ubuntu x86-64 machine with lua5.4 and
#                                    liblua5.4-dev: copy its lua5.4 binary, shared library and
#                                    headers into .gpu-lua/ (git-ignored), for a GPU machine or
#                                    container that has no Lua packages: copy the tree there.
#
# A system Lua (lua5.4 on PATH and /usr/include/lua5.4/lua.h) is used when there is one;
# otherwise .gpu-lua/ (DLPACK_GPU_LUA=packed forces it). Variables: NVCC (default nvcc on PATH, else /usr/local/cuda/bin/nvcc),
# NVCC_ARCH (default: the GPU's compute capability from nvidia-smi, else sm_90), PYTHON (python3).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
PACK=$ROOT/.gpu-lua

pack() {
  set -e
  local multiarch
  multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
  rm -rf "$PACK"
  mkdir -p "$PACK/bin" "$PACK/lib/extra" "$PACK/include/lua5.4"
  cp -L "$(dpkg -L lua5.4 | grep -E '/bin/lua5\.4$' | head -1)" "$PACK/bin/lua5.4"
  cp -L "$(dpkg -L liblua5.4-0 | grep -E '/liblua5\.4\.so\.0$' | head -1)" "$PACK/lib/liblua5.4.so.0"
  # and Debian's lua5.4-deb-multiarch.h (in /usr/include/<multiarch>/), which its luaconf.h
  # includes with quotes: found first beside luaconf.h, so it goes there
  for h in $(dpkg -L liblua5.4-dev | grep -E '/include/(lua5\.4/[^/]+\.(h|hpp)|[^/]+/lua5\.4-deb-multiarch\.h)$'); do
    cp -L "$h" "$PACK/include/lua5.4/"
  done
  # The interpreter's own needs beyond libc, used there only if the system lacks them.
  for so in libreadline.so.8 libtinfo.so.6; do
    [[ -e /lib/$multiarch/$so ]] && cp -L "/lib/$multiarch/$so" "$PACK/lib/extra/"
  done
  du -sh "$PACK"
  echo "packed Debian's Lua $("$PACK/bin/lua5.4" -v 2>&1 | head -1) into .gpu-lua/"
}

# Paths for a system Lua or the packed one; sets LUA, LUA_INC, LUA_LIB, LD_LIBRARY_PATH.
setup_env() {
  if [[ ${DLPACK_GPU_LUA:-} != packed ]] && command -v lua5.4 >/dev/null && [[ -f /usr/include/lua5.4/lua.h ]]; then
    LUA=lua5.4 LUA_INC=-I/usr/include/lua5.4 LUA_LIB=-llua5.4
  elif [[ -x $PACK/bin/lua5.4 ]]; then
    ln -sf liblua5.4.so.0 "$PACK/lib/liblua5.4.so"
    LUA=$PACK/bin/lua5.4 LUA_INC=-I$PACK/include/lua5.4 LUA_LIB="-L$PACK/lib -llua5.4"
    export LD_LIBRARY_PATH="$PACK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if LD_LIBRARY_PATH=$LD_LIBRARY_PATH ldd "$LUA" | grep -q 'not found'; then
      export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$PACK/lib/extra"
    fi
  else
    echo "prepare.sh: no Lua 5.4: neither lua5.4 with /usr/include/lua5.4 here nor .gpu-lua/ (install lua5.4 and liblua5.4-dev, or run 'prepare.sh pack' on a machine that has them)" >&2
    return 1
  fi
  export LUA LUA_INC LUA_LIB
  export LUA_PATH="$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;$ROOT/spec/?.lua;;"
  export LUA_CPATH="$ROOT/build/?.so;$ROOT/build/gpu/?.so;;"
  PYTHON=${PYTHON:-python3}
  NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  if [[ -z ${NVCC_ARCH:-} ]]; then
    local cc
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
    NVCC_ARCH=sm_${cc:-90}
  fi
}

# shellcheck disable=SC2086 # LUA_INC and LUA_LIB are lists of flags
build() {
  setup_env || return 1
  local cflags=(-std=c11 -O2 -g -fPIC -fvisibility=hidden -pthread -Wall -Wextra -Wno-missing-prototypes)
  mkdir -p build/gpu
  echo "== make test-build (LUA_INC=$LUA_INC LUA_LIB=$LUA_LIB)"
  make -s test-build LUA="$LUA" LUA_INC="$LUA_INC" LUA_LIB="$LUA_LIB" || return 1
  echo "== build/gpu/gpu_kernels.so ($NVCC -arch=$NVCC_ARCH)"
  "$NVCC" -shared -Xcompiler -fPIC -arch="$NVCC_ARCH" $LUA_INC -Isrc -o build/gpu/gpu_kernels.so spec/gpu/kernels.cu ||
    echo "prepare.sh: gpu_kernels did not build: the tests that need it will SKIP" >&2
  echo "== build/gpu/libluapeer.so, build/bench_cuda"
  cc "${cflags[@]}" -shared $LUA_INC -Isrc -o build/gpu/libluapeer.so spec/gpu/luapeer.c build/libdlpack_lua.a \
    $LUA_LIB -ldl -lm || return 1
  cc "${cflags[@]}" $LUA_INC -Isrc -o build/bench_cuda bench/cuda.c build/libdlpack_lua.a $LUA_LIB -ldl -lm || return 1
  if "$PYTHON-config" --embed --ldflags >/dev/null 2>&1; then
    make -s build/peers LUA_INC="$LUA_INC" LUA_LIB="$LUA_LIB" PYTHON="$(command -v "$PYTHON")" >/dev/null 2>&1 ||
      echo "prepare.sh: build/peers did not build (optional: interop runs through ctypes)" >&2
  fi
}

run() {
  build || { echo "prepare.sh: the build failed" >&2; return 1; }
  local out=${DLPACK_GPU_LOGS:-$ROOT/build/gpu} rc=0
  mkdir -p "$out"
  echo "== machine"
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    "$LUA" -v 2>&1; "$PYTHON" --version 2>&1; "$NVCC" --version 2>&1 | tail -1; } | tee "$out/gpu-machine.txt"
  echo "== spec/cuda/run.lua"
  "$LUA" spec/cuda/run.lua 2>&1 | tee "$out/gpu-suite.tap"
  ((PIPESTATUS[0] == 0)) || rc=1
  echo "== spec/gpu/ipc.lua (dlpack.ipc: CUDA tensors between two processes)"
  "$LUA" spec/gpu/ipc.lua 2>&1 | tee "$out/gpu-ipc.tap"
  ((PIPESTATUS[0] == 0)) || rc=1
  echo "== spec/gpu/interop.py"
  PYTHONUNBUFFERED=1 "$PYTHON" spec/gpu/interop.py 2>&1 | tee "$out/gpu-interop.tap"
  ((PIPESTATUS[0] == 0)) || rc=1
  echo "== build/bench_cuda"
  ./build/bench_cuda 2>&1 | tee "$out/gpu-bench.txt"
  ((PIPESTATUS[0] == 0)) || rc=1
  echo "== bench/cuda_torch.py (the same rows against PyTorch, in one process)"
  "$PYTHON" bench/cuda_torch.py 2>&1 | tee -a "$out/gpu-bench.txt"
  ((PIPESTATUS[0] == 0)) || rc=1
  echo "== prepare.sh run: $([[ $rc == 0 ]] && echo all passed || echo FAILURES) (logs in $out)"
  return $rc
}

case ${1:-run} in
pack) pack ;;
build) build ;;
run) run ;;
env)
  setup_env >/dev/null || exit 1
  printf 'export LUA=%q LUA_INC=%q LUA_LIB=%q LUA_PATH=%q LUA_CPATH=%q LD_LIBRARY_PATH=%q\n' \
    "$LUA" "$LUA_INC" "$LUA_LIB" "$LUA_PATH" "$LUA_CPATH" "${LD_LIBRARY_PATH:-}"
  ;;
*) echo "usage: prepare.sh pack | build | run | env" >&2; exit 2 ;;
esac
