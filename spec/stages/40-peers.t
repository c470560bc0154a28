#!/usr/bin/env bash
# spec/peers/peers.c: embeds CPython and Lua in one process and exchanges tensors
# with PyTorch and NumPy (NumPy >= 2 from build/pydeps, put there by .ci/deps).
# spec/peers/lupa_peers.py: the other way round, Python embedding Lua through lupa
# (from build/pydeps) with examples/dlpack_lupa.py, exchanging with NumPy and PyTorch, and the
# Lua 5.4/5.5 runtime pick and mismatch refusals (lupa.lua54, lupa's default 5.5 with stage 19's build).
# spec/peers/oracle.py: the NumPy oracle, every computing function (elementwise, reductions,
# matmul, cat/stack, ...) on random shapes, layouts and every dtype pair, against NumPy >= 2
# on the same memory (through lupa); functions not written yet are visible SKIPs, differences
# already reported are TODOs (spec/peers/README.md).
# spec/peers/ipc_python.py: examples/dlpack_ipc.py (dlpack.ipc from Python) between Python
# processes and against a corpus of hostile messages.
# spec/peers/npy_numpy.py: .npy files written by np.save read by dlpack.load, and the other way.
# All print TAP and skip visibly when a peer (torch, numpy, lupa) is missing.
source "$(dirname "$0")/lib.sh"
PY=${PYTHON:-/usr/bin/python3}
export PYTHONPATH="$ROOT/build/pydeps${PYTHONPATH:+:$PYTHONPATH}"

if ! "$PY-config" --embed --ldflags >/dev/null 2>&1; then
  echo "ok - CPython embedded in a C host # SKIP cannot embed CPython: $PY-config missing (install python3-dev)"
elif ! echo '#include <Python.h>' | gcc $("$PY-config" --includes) -x c -E - >/dev/null 2>&1; then
  echo "ok - CPython embedded in a C host # SKIP cannot embed CPython: Python.h not found (install python3-dev)"
else
  build build/peers && run_tap build/peers ./build/peers
fi

if [[ -x $PY ]]; then
  # lupa's default runtime is Lua 5.5: its tests use stage 19's build, when that is up to date.
  make -q LUA=lua5.5 build/lua5.5/dlpack/core.so >/dev/null 2>&1 && export DLPACK_PEERS_LUA55=build/lua5.5
  run_tap "python3 spec/peers/lupa_peers.py" "$PY" spec/peers/lupa_peers.py
  run_tap "python3 spec/peers/ipc_python.py" "$PY" spec/peers/ipc_python.py
  run_tap "python3 spec/peers/npy_numpy.py" "$PY" spec/peers/npy_numpy.py
  run_tap "python3 spec/peers/oracle.py" "$PY" spec/peers/oracle.py
  # The elementwise functions, conversions and reductions again under each lower build of the
  # module's loops the processor allows (DLPACK_LUA_CPU; the run above used the best one).
  detected=$("$LUA" -e 'print((select(2, require("dlpack").cpu())))' 2>/dev/null)
  subset=(add mul div pow maximum eq lt ge sqrt exp log sin cos tanh sigmoid expm1 log1p floor round atan2
          clamp where sum mean max argmax var complex attack)
  for level in avx2 baseline; do
    case "$level:$detected" in
      avx2:avx512 | baseline:avx2 | baseline:avx512)
        DLPACK_LUA_CPU=$level run_tap "python3 spec/peers/oracle.py (DLPACK_LUA_CPU=$level)" \
          "$PY" spec/peers/oracle.py "${subset[@]}" ;;
      *) echo "ok - NumPy oracle under DLPACK_LUA_CPU=$level # SKIP the processor's best build is $detected" \
           "(dlpack.cpu()): the run above" ;;
    esac
  done
  # The oracle again under the other Luas lupa embeds, against their builds of the module (made
  # by stages 15-19); a build that is missing or older than the sources is a visible SKIP.
  for runtime in lua5.5:lua55 lua5.3:lua53 lua5.2:lua52 lua5.1:lua51 luajit:luajit21; do
    lua=${runtime%%:*} lupa=${runtime##*:}
    if make -q LUA="$lua" "build/$lua/dlpack/core.so" >/dev/null 2>&1; then
      DLPACK_ORACLE_LUA=$lupa run_tap "python3 spec/peers/oracle.py ($lupa)" "$PY" spec/peers/oracle.py
    else
      echo "ok - NumPy oracle under $lupa # SKIP build/$lua is missing or stale (make LUA=$lua; stages 15-19 make it)"
    fi
  done
else
  echo "ok - lupa peers # SKIP $PY not found"
  echo "ok - NumPy oracle # SKIP $PY not found"
fi
exit 0
