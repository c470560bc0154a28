#!/usr/bin/env bash
# The body of `make test`: runs every stage spec/stages/NN-*.t under prove,
# keeps the log in build/test.log and each stage's TAP in build/stages/, and
# ends with the line "N passed, M failed, K skipped" counted over all stages.
#   bash spec/run.sh                 all stages
#   bash spec/run.sh 10 50           only the stages whose names start so
#   DLPACK_STAGES="10 50" make test  the same through make
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# prove runs each stage through this script: its TAP is kept for the count.
if [[ ${1:-} == --stage ]]; then
  stage=$2 name=$(basename "$2" .t)
  start=$(date +%s)
  bash "$stage" | tee "build/stages/$name.tap"
  rc=${PIPESTATUS[0]}
  echo "$rc $(($(date +%s) - start))" >"build/stages/$name.status"
  exit "$rc"
fi

(($# == 0)) && [[ -n ${DLPACK_STAGES:-} ]] && set -- $DLPACK_STAGES
mkdir -p build/stages
rm -f build/stages/*.tap build/stages/*.status

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

# Count the TAP lines of every stage. A stage that broke without a failing
# line (a crash, a wrong plan, a bail out) counts as one failure more.
passed=0 failed=0 skipped=0
report=()
for s in "${stages[@]}"; do
  name=$(basename "$s" .t)
  tap=build/stages/$name.tap
  read -r rc secs <"build/stages/$name.status" 2>/dev/null || { rc=missing secs=?; }
  counts=$(awk '
    /^ok( |$)/      { if (toupper($0) ~ /# *SKIP/) s++; else p++; n++ }
    /^not ok( |$)/  { if (toupper($0) ~ /# *TODO/) s++; else f++; n++ }
    /^1\.\.[0-9]+/  { split($1, a, /\.\./); plan = a[2]; plans++ }
    /^Bail out!/    { bail = 1 }
    END { printf "%d %d %d %d %d %d\n", p, f, s, n, (plans == 1 ? plan : -1), bail }
  ' "$tap" 2>/dev/null || echo "0 0 0 0 -1 0")
  read -r p f s n plan bail <<<"$counts"
  note=""
  if ((f == 0)) && { [[ $rc != 0 ]] || ((plan != n)) || ((bail)); }; then
    f=1; note=" (broken: exit status $rc, planned $plan, ran $n)"
  fi
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
  report+=("$(printf '%-24s %4d passed %3d failed %3d skipped %5ss%s' "$name" "$p" "$f" "$s" "$secs" "$note")")
done

{
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
