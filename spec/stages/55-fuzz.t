#!/usr/bin/env bash
# A bounded, deterministic slice of the four halves of the fuzzer under the
# ASan+UBSan build, with the sanitizer setup of stage 50 (any report fatal):
# the CPU half (spec/fuzz/fuzz.lua: a fixed list of seeds, each with the same
# number of steps and of malformed foreign tensors from fabricate.so), the
# fake-CUDA half (spec/fuzz/cuda.lua on build/asan/fakecuda.so) and the
# dlpack.ipc half (spec/fuzz/ipc.lua: a hostile peer's messages, descriptors
# and channel life) and the .npy half (spec/fuzz/npy.lua: mutated files given
# to dlpack.load), their seeds interleaved, one TAP line per seed. A seed
# fails on a sanitizer report, a crash, a hang, a model violation, a wrong
# deleter count, (CUDA) misuse of the driver and leaked driver objects or
# (ipc) a descriptor or mapping left behind, (npy) a load the model does not
# expect or a file left mapped; its diagnostics end with the
# command that reproduces it. Before the seeds, the ipc and npy halves are run against
# models broken on purpose (--break): it must fail, or its checks test nothing.
# The whole stage stays under FUZZ_STAGE_BUDGET seconds (default 100): seeds
# left when it is spent are reported as skipped. The CPU half's even seeds run the portable
# computing loops (DLPACK_LUA_CPU=baseline), its odd seeds the best build the processor allows;
# seeds 1, 5, 9, ... store elementwise outputs past the cache (DLPACK_LUA_STREAM_FROM=1), with 4
# times the steps.
source "$(dirname "$0")/lib.sh"
command -v gcc >/dev/null || skip_all "gcc not found"
LIBASAN=$(gcc -print-file-name=libasan.so)
[[ -f $LIBASAN ]] || skip_all "gcc's libasan.so not found (install libasan8)"

build_or_exit asan-build

SEEDS=${FUZZ_STAGE_SEEDS:-$(seq 1 100)}
STEPS=${FUZZ_STAGE_STEPS:-400}
CORPUS=${FUZZ_STAGE_CORPUS:-30}
CUDA_SEEDS=${FUZZ_STAGE_CUDA_SEEDS:-$(seq 1 300)}
CUDA_STEPS=${FUZZ_STAGE_CUDA_STEPS:-400}
IPC_SEEDS=${FUZZ_STAGE_IPC_SEEDS:-$(seq 1 40)}
IPC_STEPS=${FUZZ_STAGE_IPC_STEPS:-200}
NPY_SEEDS=${FUZZ_STAGE_NPY_SEEDS:-$(seq 1 20)}
NPY_STEPS=${FUZZ_STAGE_NPY_STEPS:-300}
BUDGET=${FUZZ_STAGE_BUDGET:-100}
PER_SEED=20 # seconds; a seed takes well under one on a 2-core machine
export FUZZ_NO_BUILD=1

start=$(date +%s)

# One TAP line for a run of spec/fuzz/asan.sh with arguments "$@".
fuzz_line() {
  local name=$1; shift
  local out rc
  out=$(mktemp)
  timeout -k 5 "$PER_SEED" bash spec/fuzz/asan.sh "$@" >"$out" 2>&1 </dev/null
  rc=$?
  if ((rc == 0)); then
    echo "ok - $name"
  else
    local why
    case $rc in
      1) why="model violation or wrong deleter count" ;;
      86 | 87) why="sanitizer report" ;;
      88) why="UndefinedBehaviorSanitizer report" ;;
      124 | 137) why="timed out after ${PER_SEED}s (a hang?)" ;;
      13[0-9] | 1[4-5][0-9]) why="killed by signal $((rc - 128))" ;;
      *) why="exit status $rc" ;;
    esac
    echo "not ok - $name ($why, exit status $rc)"
    {
      grep -E '^FAIL' -A1 "$out" | head -n 30
      if grep -qE '==[0-9]+==ERROR:|runtime error:' "$out"; then
        sed -n -E '/==[0-9]+==ERROR:|runtime error:/,$p' "$out" | grep -vE '^ +#[0-9]+ 0x[0-9a-f]+ +\(' |
          head -n 40
      elif ((rc != 1)); then
        tail -n 20 "$out"
      fi
    } | sed 's/^/# /'
  fi
  rm -f "$out"
  return "$rc"
}

# The last calls before a failure, from a verbose run of the same seed.
last_calls() {
  local out
  out=$(mktemp)
  timeout -k 5 "$PER_SEED" bash spec/fuzz/asan.sh "$@" --verbose >"$out" 2>&1 </dev/null
  echo "# the last calls of a verbose rerun:"
  grep -E '^\[[0-9]+(:[0-9]+)?\]|^    check ' "$out" | tail -n 6 | sed 's/^/#   /'
  rm -f "$out"
}

fuzz_line "the safe API has no raw-pointer entry points (dlpack.cuda.Stream.wrap, adopt, take, wrap, wrap_stream)" \
  --contract-only

# The ipc half can fail: with its model broken on purpose, seed 1 must fail (status 1, a FAIL line).
broken_ok=1 broken_why=
for b in values readonly accept leak; do
  out=$(timeout -k 5 "$PER_SEED" bash spec/fuzz/asan.sh --ipc --seed 1 --seeds 1 --steps "$IPC_STEPS" --break "$b" \
    2>&1 </dev/null)
  rc=$?
  if ((rc != 1)) || ! grep -q '^FAIL seed 1 ' <<<"$out"; then
    broken_ok=0 broken_why+=" --break $b: exit status $rc;"
  fi
done
if ((broken_ok)); then
  echo "ok - the ipc fuzzer fails seed 1 when its model is wrong (--break values, readonly, accept, leak)"
else
  echo "not ok - the ipc fuzzer does not fail seed 1 with a model broken on purpose:$broken_why"
fi

# The .npy half likewise: with its model broken on purpose, seed 1 must fail.
broken_ok=1 broken_why=
for b in accept values; do
  out=$(timeout -k 5 "$PER_SEED" bash spec/fuzz/asan.sh --npy --seed 1 --seeds 1 --steps "$NPY_STEPS" --break "$b" \
    2>&1 </dev/null)
  rc=$?
  if ((rc != 1)) || ! grep -q '^FAIL seed 1 ' <<<"$out"; then
    broken_ok=0 broken_why+=" --break $b: exit status $rc;"
  fi
done
if ((broken_ok)); then
  echo "ok - the .npy fuzzer fails seed 1 when its model is wrong (--break accept, values)"
else
  echo "not ok - the .npy fuzzer does not fail seed 1 with a model broken on purpose:$broken_why"
fi

# One seed of a half: cpu SEED, cuda SEED, ipc SEED or npy SEED.
one_seed() {
  local half=$1 seed=$2 args name replay cpu= stream=
  if [[ $half == cpu ]]; then
    local steps=$STEPS
    # seeds 1, 5, 9, ... store every output the elementwise loops can stream past the cache that way
    # (x86-64), which outputs this small otherwise never are; 4 times the steps, as few calls reach it
    # (with every streamed store made wrong on purpose, 2 of 25 such seeds failed at 400 steps, 17 at 1600)
    if ((seed % 4 == 1)); then stream=1 steps=$((STEPS * 4)); fi
    args=(--seed "$seed" --seeds 1 --steps "$steps" --corpus "$CORPUS" --skip-contract)
    name="fuzz seed $seed: $steps calls and $CORPUS malformed producers, no report, model and deleter counts hold"
    replay="make fuzz-replay SEED=$seed STEPS=$steps"
    # even seeds run the portable loops, odd ones the best build the processor allows (dlpack.cpu())
    if ((seed % 2 == 0)); then
      cpu=baseline name+=" (DLPACK_LUA_CPU=baseline)" replay="DLPACK_LUA_CPU=baseline $replay"
    fi
    if [[ $stream ]]; then name+=" (DLPACK_LUA_STREAM_FROM=1)" replay="DLPACK_LUA_STREAM_FROM=1 $replay"; fi
  elif [[ $half == npy ]]; then
    args=(--npy --seed "$seed" --seeds 1 --steps "$NPY_STEPS")
    name="fuzz (.npy) seed $seed: $NPY_STEPS mutated files loaded, no report, load as the model says, nothing left mapped"
    replay="bash spec/fuzz/asan.sh --npy --seed $seed --seeds 1 --steps $NPY_STEPS --verbose"
  elif [[ $half == ipc ]]; then
    args=(--ipc --seed "$seed" --seeds 1 --steps "$IPC_STEPS")
    name="fuzz (dlpack.ipc) seed $seed: $IPC_STEPS steps of a hostile peer, no report, recv as the model says,"
    name+=" no descriptor or mapping left"
    replay="make fuzz-replay IPC=1 SEED=$seed"
  else
    args=(--cuda --seed "$seed" --seeds 1 --steps "$CUDA_STEPS")
    name="fuzz (fake CUDA) seed $seed: $CUDA_STEPS steps, no report, values as the model says, no misuse, nothing left"
    replay="make fuzz-replay CUDA=1 SEED=$seed"
  fi
  if (($(date +%s) - start >= BUDGET)); then
    echo "ok - ${name%%:*} # SKIP not run: the stage's ${BUDGET}s were spent (a slow machine; make fuzz runs them all)"
    return
  fi
  if ! DLPACK_LUA_CPU=$cpu DLPACK_LUA_STREAM_FROM=$stream fuzz_line "$name" "${args[@]}"; then
    if (($(date +%s) - start < BUDGET)); then
      DLPACK_LUA_CPU=$cpu DLPACK_LUA_STREAM_FROM=$stream last_calls "${args[@]}"
    fi
    echo "# reproduce: ${cpu:+DLPACK_LUA_CPU=$cpu }${stream:+DLPACK_LUA_STREAM_FROM=$stream }bash spec/fuzz/asan.sh" \
      "${args[*]} --verbose   (or: $replay)"
  fi
}

# the halves interleaved, so that a slow machine that spends the budget still runs some of each
read -r -a cpu_seeds <<<"$(echo $SEEDS)"
read -r -a cuda_seeds <<<"$(echo $CUDA_SEEDS)"
read -r -a ipc_seeds <<<"$(echo $IPC_SEEDS)"
read -r -a npy_seeds <<<"$(echo $NPY_SEEDS)"
ncpu=$((${#cpu_seeds[@]} > 0 ? ${#cpu_seeds[@]} : 1))
per=$(((${#cuda_seeds[@]} + ncpu - 1) / ncpu))
per_ipc=$(((${#ipc_seeds[@]} + ncpu - 1) / ncpu))
per_npy=$(((${#npy_seeds[@]} + ncpu - 1) / ncpu))
c=0 p=0 q=0
for ((i = 0; i < ${#cpu_seeds[@]} || c < ${#cuda_seeds[@]} || p < ${#ipc_seeds[@]} || q < ${#npy_seeds[@]}; i++)); do
  ((i < ${#cpu_seeds[@]})) && one_seed cpu "${cpu_seeds[i]}"
  for ((k = 0; k < per && c < ${#cuda_seeds[@]}; k++, c++)); do one_seed cuda "${cuda_seeds[c]}"; done
  for ((k = 0; k < per_ipc && p < ${#ipc_seeds[@]}; k++, p++)); do one_seed ipc "${ipc_seeds[p]}"; done
  for ((k = 0; k < per_npy && q < ${#npy_seeds[@]}; k++, q++)); do one_seed npy "${npy_seeds[q]}"; done
done
echo "# $(($(date +%s) - start))s for the slice"
exit 0
