#!/usr/bin/env bash
# Runs spec/fuzz/fuzz.lua (arguments passed on) under the ASan+UBSan build
# (build/asan, `make asan-build`), with the sanitizer setup of
# spec/stages/50-asan.t: any report is fatal. With --cuda it runs the fake-CUDA
# half, spec/fuzz/cuda.lua, instead, on build/asan/fakecuda.so with two
# devices; with --ipc the dlpack.ipc half, spec/fuzz/ipc.lua; with --npy the
# .npy half, spec/fuzz/npy.lua. Exit status: the
# fuzzer's (0 passed, 1 a model or deleter-count failure), 86 AddressSanitizer,
# 87 LeakSanitizer, 88 UndefinedBehaviorSanitizer, 128+N a signal.
#   bash spec/fuzz/asan.sh --seed 7 --steps 400 --verbose
#   bash spec/fuzz/asan.sh --cuda --seed 7 --steps 300 --verbose
#   bash spec/fuzz/asan.sh --ipc --seed 7 --steps 200 --verbose
#   bash spec/fuzz/asan.sh --npy --seed 7 --steps 300 --verbose
# FUZZ_NO_BUILD=1 skips `make asan-build`.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 2
LUA=${LUA:-lua5.4}
SCRIPT=spec/fuzz/fuzz.lua half=
args=()
for a in "$@"; do
  if [[ $a == --cuda ]]; then SCRIPT=spec/fuzz/cuda.lua half=--cuda
  elif [[ $a == --ipc ]]; then SCRIPT=spec/fuzz/ipc.lua half=--ipc
  elif [[ $a == --npy ]]; then SCRIPT=spec/fuzz/npy.lua half=--npy
  else args+=("$a"); fi
done
set -- "${args[@]}"

LIBASAN=$(gcc -print-file-name=libasan.so 2>/dev/null)
if [[ ! -f $LIBASAN ]]; then
  echo "fuzz: gcc's libasan.so not found (install gcc and libasan8)" >&2
  exit 2
fi
if [[ -z ${FUZZ_NO_BUILD:-} ]]; then
  log=$(mktemp)
  if ! make -s asan-build >"$log" 2>&1; then
    echo "fuzz: make asan-build failed" >&2
    tail -n 40 "$log" >&2
    rm -f "$log"
    exit 2
  fi
  rm -f "$log"
fi
# Lua unloads C modules when the state closes; keep them for readable leak stacks.
SHIM=build/asan/keep_loaded.so
if [[ ! -f $SHIM ]]; then
  printf 'int dlclose(void *handle);\nint dlclose(void *handle) { (void)handle; return 0; }\n' |
    gcc -shared -fPIC -O1 -x c -o "$SHIM" - || exit 2
fi

# Allocations over 1 GiB fail (the module must then raise "out of memory"): a seed that fills
# an 8 GiB tensor would take half a minute under ASan and test nothing more.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:exitcode=86:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:strict_string_checks=1:allocator_may_return_null=1:max_allocation_size_mb=1024"
export LSAN_OPTIONS="exitcode=87:suppressions=$ROOT/spec/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:exitcode=88"
export LUA_PATH="$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;$ROOT/spec/?.lua;;"
export LUA_CPATH="$ROOT/build/asan/?.so;;"
if [[ $half == --cuda ]]; then # the fake driver the module loads is the one `require "fakecuda"` finds
  export DLPACK_LUA_CUDA_DRIVER="$ROOT/build/asan/fakecuda.so" FAKECUDA_DEVICES=2
  # the device's results (kernels compiled as C, the C library's math) are compared bit for bit
  # with the CPU's: its AVX-512 float32 exp/log/sin/... loops round otherwise, so they stay off
  export DLPACK_LUA_CPU=${DLPACK_LUA_CPU:-avx2}
fi
# The seed a crash happened in: the one after the last finished seed. A run given --seconds S
# is stopped after S + 60 (a seed takes well under a second): a hang then names its seed too.
first=1 prev= limit=()
for a in "$@"; do
  [[ $prev == --seed ]] && first=$a
  [[ $prev == --seconds ]] && limit=(timeout -k 5 $((a + 60)))
  prev=$a
done
# The fake-CUDA half's matrix products: through the fake's cuBLAS when the first seed is odd, through
# the module's own kernel when it is even (DLPACK_LUA_CUBLAS, read once per process, when unset).
if [[ $half == --cuda && -z ${DLPACK_LUA_CUBLAS+set} ]]; then
  if ((first % 2)); then export DLPACK_LUA_CUBLAS="$ROOT/build/asan/fakecuda.so"; else export DLPACK_LUA_CUBLAS=none; fi
fi
outlog=$(mktemp)
LD_PRELOAD="$LIBASAN $ROOT/$SHIM" "${limit[@]}" "$LUA" "$ROOT/$SCRIPT" "$@" | tee "$outlog"
rc=${PIPESTATUS[0]}
if ((rc != 0 && rc != 1)); then
  last=$(sed -n -E 's/^seed ([0-9]+): .*/\1/p' "$outlog" | tail -n 1)
  crashed=$first
  [[ -n $last ]] && crashed=$((last + 1))
  case $rc in
    86) why="an AddressSanitizer report" ;;
    87) why="a LeakSanitizer report (or an AddressSanitizer one: see above)" ;;
    88) why="an UndefinedBehaviorSanitizer report" ;;
    124) why="a time limit (a hang?)" ;;
    13[0-9] | 1[4-5][0-9]) why="signal $((rc - 128))" ;;
    *) why="exit status $rc" ;;
  esac
  # the same arguments, for that seed alone, every call printed
  keep=() skip=0
  for a in "$@"; do
    if ((skip)); then skip=0; continue; fi
    case $a in
      --seed | --seeds | --seconds) skip=1 ;;
      --verbose) ;;
      *) keep+=("$a") ;;
    esac
  done
  echo "fuzz: seed $crashed ended the run with $why (exit status $rc)"
  echo "reproduce: bash spec/fuzz/asan.sh${half:+ $half} --seed $crashed --seeds 1 ${keep[*]} --verbose"
fi
rm -f "$outlog"
exit "$rc"
