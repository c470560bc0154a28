#!/usr/bin/env bash
# The body of `make test`: runs every stage spec/stages/NN-*.t under prove,
# keeps the log in build/test.log and each stage's TAP in build/stages/, and
# ends with the line "N passed, M failed, K skipped" counted over all stages.
#   bash spec/run.sh                 all stages
#   bash spec/run.sh 10 50           only the stages whose names start so
#   DLPACK_STAGES="10 50" make test  the same through make
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The one place where TAP is counted. A stage prints test lines (its own, or the
# TAP of the programs it runs, with their numbers and plans); this numbers every
# test line, drops the inner plans (a "1..0 # SKIP why" becomes one skipped line),
# makes "Bail out!" a failure, and writes "tests passed failed skipped" to `counts`.
NUMBER_TAP='
  function out(line) { print line; fflush() }
  /^1\.\.0/ && toupper($0) ~ /# *SKIP/ {
    n++; s++; sub(/^1\.\.0 *# */, ""); out("ok " n " - skipped # " $0); next
  }
  /^1\.\.[0-9]+/ || /^TAP version/ { next }
  /^ok( |$)/ {
    n++; sub(/^ok( [0-9]+)?( -)? ?/, "")
    if (toupper($0) ~ /# *SKIP/) s++; else p++
    out("ok " n " - " $0); next
  }
  /^not ok( |$)/ {
    n++; sub(/^not ok( [0-9]+)?( -)? ?/, "")
    if (toupper($0) ~ /# *TODO/) s++; else f++
    out("not ok " n " - " $0); next
  }
  /^Bail out!/ { n++; f++; out("not ok " n " - " $0); next }
  { out($0) }
  END { print n + 0, p + 0, f + 0, s + 0 > counts }
'

# prove runs each stage through this script: numbered, planned and counted here.
# A stage that ends with a failing status but no failing line (a crash), or with no
# test line at all, gets one failing line more.
if [[ ${1:-} == --stage ]]; then
  name=$(basename "$2" .t) tap=build/stages/$(basename "$2" .t).tap
  start=$(date +%s)
  bash "$2" </dev/null | awk -v counts="$tap.counts" "$NUMBER_TAP" | tee "$tap"
  rc=${PIPESTATUS[0]}
  read -r n p f s <"$tap.counts"
  if ((n == 0 || (rc != 0 && f == 0))); then
    n=$((n + 1)) f=$((f + 1))
    echo "not ok $n - $name: the stage ends with status $rc after $((n - 1)) tests" | tee -a "$tap"
  fi
  echo "1..$n" | tee -a "$tap"
  echo "$p $f $s $(($(date +%s) - start))" >"build/stages/$name.status"
  exit $((f > 0))
fi

(($# == 0)) && [[ -n ${DLPACK_STAGES:-} ]] && set -- $DLPACK_STAGES
mkdir -p build/stages
rm -f build/stages/*.tap build/stages/*.counts build/stages/*.status

stages=()
for s in spec/stages/[0-9][0-9]-*.t; do
  if (($# == 0)); then stages+=("$s"); continue; fi
  for want in "$@"; do [[ $(basename "$s") == "$want"* ]] && stages+=("$s"); done
done
((${#stages[@]})) || { echo "no stage matches: $*" >&2; exit 2; }

{
  prove -v --timer --exec "bash spec/run.sh --stage" "${stages[@]}" </dev/null
  echo "$?" >build/stages/prove.status
} 2>&1 | tee build/test.log

prove_rc=$(cat build/stages/prove.status 2>/dev/null || echo 1)

# The sum of the stages' counts; a stage that left none (killed) is one failure.
passed=0 failed=0 skipped=0
report=()
for s in "${stages[@]}"; do
  name=$(basename "$s" .t)
  read -r p f k secs <"build/stages/$name.status" 2>/dev/null || { p=0 f=1 k=0 secs=?; }
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + k))
  report+=("$(printf '%-24s %4d passed %3d failed %3d skipped %5ss' "$name" "$p" "$f" "$k" "$secs")")
done

# The failing lines again, by stage, next to the summary: the end of the log is
# often all that a CI report shows.
failures=()
for s in "${stages[@]}"; do
  name=$(basename "$s" .t)
  while IFS= read -r line; do
    failures+=("$name: ${line:0:200}")
  done < <(grep -E '^not ok' "build/stages/$name.tap" 2>/dev/null | head -n 10)
done

{
  if ((${#failures[@]})); then
    echo
    echo "failed tests (at most 10 a stage)"
    printf '%s\n' "${failures[@]}"
  fi
  echo
  echo "stage                    results"
  printf '%s\n' "${report[@]}"
  echo
  if ((skipped)); then
    echo "$passed passed, $failed failed, $skipped skipped"
  else
    echo "$passed passed, $failed failed"
  fi
} | tee -a build/test.log

((failed == 0 && prove_rc == 0))
