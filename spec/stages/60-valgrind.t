#!/usr/bin/env bash
# The busted specs, build/host and build/host-hostile under valgrind memcheck: no error and nothing
# definitely lost (the normal -O2 -g build). Logs: build/stages/valgrind-*.log.
source "$(dirname "$0")/lib.sh"
command -v valgrind >/dev/null || skip_all "valgrind not found (install valgrind)"
build_or_exit test-build

VALGRIND=(valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
          --show-leak-kinds=definite --keep-debuginfo=yes --num-callers=16)
export LUA_CPATH="$ROOT/build/?.so;;"
# Freed tensor memory goes straight back to the C allocator, not to the module's block cache
# (src/core/owner.c), so that memcheck sees a use after free.
export DLPACK_LUA_BLOCK_CACHE=0
# The specs' repeated random value checks run a tenth as often (spec/support.lua, trials).
export DLPACK_SPEC_FEWER_TRIALS=1

specs_log=build/stages/valgrind-specs.log
if ! run_tap valgrind "${VALGRIND[@]}" --log-file="$specs_log" "$LUA" "$BUSTED" -o TAP && [[ -s $specs_log ]]; then
  echo "# valgrind report for the specs ($specs_log):"
  head -n 150 "$specs_log" | sed "s/^/# /"
fi

# host_under_valgrind NAME: build/NAME (a C host printing TAP) under valgrind
host_under_valgrind() {
  local out rc log=build/stages/valgrind-$1.log
  out=$(mktemp)
  "${VALGRIND[@]}" --log-file="$log" "./build/$1" >"$out" 2>&1 </dev/null && ! grep -q '^not ok' "$out"
  rc=$?
  ((rc == 0)) || { cat "$log"; grep -E '^(not ok|#)' "$out"; }
  rm -f "$out"
  return "$rc"
}
for host in host host-hostile; do
  if build "build/$host"; then
    step "build/$host under valgrind: no errors, nothing definitely lost" host_under_valgrind "$host"
  fi
done
exit 0
