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
# The preloaded shim: Lua unloads C modules when the state closes; keep them for readable leak
# stacks. And the first time() of the process (Lua's string-hash seed at lua_newstate) is fixed.
SHIM=build/asan/fuzz_shim.so
if [[ ! -f $SHIM ]]; then
  gcc -shared -fPIC -O1 -x c -o "$SHIM" spec/fuzz/shim.c || exit 2
fi

# Allocations over 1 GiB fail (the module must then raise "out of memory"): a seed that fills
# an 8 GiB tensor would take half a minute under ASan and test nothing more.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:exitcode=86:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:strict_string_checks=1:allocator_may_return_null=1:max_allocation_size_mb=1024"
export LSAN_OPTIONS="exitcode=87:suppressions=spec/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:exitcode=88"
export LUA_PATH="./lua/?.lua;./lua/?/init.lua;./spec/?.lua;;"
export LUA_CPATH="./build/asan/?.so;;"
if [[ $half == --cuda ]]; then # the fake driver the module loads is the one `require "fakecuda"` finds
  export DLPACK_LUA_CUDA_DRIVER="./build/asan/fakecuda.so" FAKECUDA_DEVICES=2
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
  if ((first % 2)); then export DLPACK_LUA_CUBLAS="./build/asan/fakecuda.so"; else export DLPACK_LUA_CUBLAS=none; fi
fi
# A seed replays exactly, --verbose or not, in any clone and from any shell: the collector's steps
# (and so when the fuzzer's finalizers run) follow the Lua heap's size, and Lua's string hashes, seeded
# from addresses (the stack's depends on the size of the arguments and environment) and the time,
# order the walks of tables in which Lua's own error messages look for a function's name. So: no
# address randomisation, the shim's fixed time, paths relative to the root, no --verbose among the
# arguments (DLPACK_FUZZ_VERBOSE=0 or 1: the same length), and a fixed environment.
fuzz_args=() verbose=0
for a in "$@"; do
  if [[ $a == --verbose || $a == -v ]]; then verbose=1; else fuzz_args+=("$a"); fi
done
fuzz_env=(PATH=/usr/local/bin:/usr/bin:/bin DLPACK_FUZZ_VERBOSE=$verbose "LD_PRELOAD=$LIBASAN ./$SHIM")
while IFS= read -r name; do
  [[ $name =~ ^(DLPACK_LUA_|FAKECUDA_|ASAN_|LSAN_|UBSAN_|LUA_C?PATH$|TMPDIR$) ]] && fuzz_env+=("$name=${!name}")
done < <(compgen -e | sort)
outlog=$(mktemp)
env -i "${fuzz_env[@]}" setarch "$(uname -m)" -R "${limit[@]}" "$(command -v "$LUA")" "$SCRIPT" "${fuzz_args[@]}" |
  tee "$outlog"
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
