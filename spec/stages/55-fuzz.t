#!/usr/bin/env bash
# A bounded, deterministic slice of the fuzzer (spec/fuzz/fuzz.lua) under the
# ASan+UBSan build, with the sanitizer setup of stage 50 (any report fatal):
# a fixed list of seeds, each with the same number of steps and of malformed
# foreign tensors (fabricate.so), one TAP line per seed. A seed fails on a
# sanitizer report, a crash, a hang, a model violation or a wrong deleter
# count; its diagnostics end with the command that reproduces it.
# The whole stage stays under FUZZ_STAGE_BUDGET seconds (default 100): seeds
# left when it is spent are reported as skipped.
source "$(dirname "$0")/lib.sh"
command -v gcc >/dev/null || skip_all "gcc not found"
LIBASAN=$(gcc -print-file-name=libasan.so)
[[ -f $LIBASAN ]] || skip_all "gcc's libasan.so not found (install libasan8)"

build_or_exit asan-build

SEEDS=${FUZZ_STAGE_SEEDS:-$(seq 1 250)}
STEPS=${FUZZ_STAGE_STEPS:-400}
CORPUS=${FUZZ_STAGE_CORPUS:-30}
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

for seed in $SEEDS; do
  args=(--seed "$seed" --seeds 1 --steps "$STEPS" --corpus "$CORPUS" --skip-contract)
  if (($(date +%s) - start >= BUDGET)); then
    echo "ok - fuzz seed $seed # SKIP not run: the stage's ${BUDGET}s were spent (a slow machine; make fuzz runs them all)"
    continue
  fi
  if ! fuzz_line "fuzz seed $seed: $STEPS calls and $CORPUS malformed producers, no report, model and deleter counts hold" \
    "${args[@]}"; then
    if (($(date +%s) - start < BUDGET)); then last_calls "${args[@]}"; fi
    echo "# reproduce: bash spec/fuzz/asan.sh ${args[*]} --verbose   (or: make fuzz-replay SEED=$seed)"
  fi
done
echo "# $(($(date +%s) - start))s for the slice"
exit 0
