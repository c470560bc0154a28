#!/usr/bin/env bash
# The busted specs and build/host under valgrind memcheck: no error and nothing
# definitely lost (the normal -O2 -g build). Logs: build/stages/valgrind-*.log.
source "$(dirname "$0")/lib.sh"
command -v valgrind >/dev/null || skip_all "valgrind not found (install valgrind)"
need_build

VALGRIND=(valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
          --show-leak-kinds=definite --keep-debuginfo=yes --num-callers=16)
export LUA_CPATH="$ROOT/build/?.so;;"

specs_log=build/stages/valgrind-specs.log
run_busted valgrind "${VALGRIND[@]}" --log-file="$specs_log" "$LUA" "$BUSTED" -o TAP
rc=$?
tests=$BUSTED_TESTS failed=$BUSTED_FAILED
if ((rc != 0)) && [[ -s $specs_log ]]; then
  echo "# valgrind report for the specs ($specs_log):"
  head -n 150 "$specs_log" | sed "s/^/# /"
fi

host_log=build/stages/valgrind-host.log
if make -s build/host >/dev/null 2>&1; then
  tests=$((tests + 1))
  out=$(mktemp)
  if "${VALGRIND[@]}" --log-file="$host_log" ./build/host >"$out" 2>&1 </dev/null \
     && ! grep -q '^not ok' "$out"; then
    echo "ok - build/host under valgrind: no errors, nothing definitely lost"
  else
    failed=$((failed + 1))
    echo "not ok - build/host under valgrind: no errors, nothing definitely lost"
    as_comments "$host_log" 150
    grep -E '^(not ok|#)' "$out" | as_comments - 40
  fi
  rm -f "$out"
else
  tests=$((tests + 1))
  echo "ok - build/host under valgrind # SKIP build/host does not build (30-host.t fails)"
fi
echo "1..$tests"
((failed == 0))
