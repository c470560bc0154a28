#!/usr/bin/env bash
# luacheck over the Lua sources (.luacheckrc), one TAP line per file or warning,
# the links of README.md and docs/ (spec/check_links.lua), and a check that no
# build output is tracked by git. The C build itself is
# warning-free because the Makefile compiles with -Werror.
source "$(dirname "$0")/lib.sh"
counts=$(mktemp)
tests=0 failed=0
if command -v luacheck >/dev/null; then
  dirs=()
  for d in lua spec examples bench; do [[ -d $d ]] && dirs+=("$d"); done
  out=$(mktemp)
  luacheck --formatter TAP --codes "${dirs[@]}" >"$out" 2>&1 </dev/null
  rc=$?
  sed -E 's/^(not )?ok [0-9]+ /&- luacheck /' "$out" | tap_filter "$counts"
  read -r tests failed <"$counts"
  if ((rc != 0 && failed == 0)); then
    tests=$((tests + 1)) failed=$((failed + 1))
    echo "not ok - luacheck exit status $rc"
    as_comments "$out" 40
  fi
  rm -f "$out"
else
  echo "ok - luacheck # SKIP luacheck not found (install lua-check)"
  tests=1
fi

# The links of README.md and docs/ resolve inside the repository (files and #anchors).
out=$(mktemp)
"$LUA" spec/check_links.lua README.md docs/*.md >"$out" 2>&1 </dev/null
rc=$?
tap_filter "$counts" <"$out"
read -r t f <"$counts"
tests=$((tests + t)) failed=$((failed + f))
if ((rc != 0 && f == 0)); then
  tests=$((tests + 1)) failed=$((failed + 1))
  echo "not ok - spec/check_links.lua exit status $rc"
  as_comments "$out" 20
fi
rm -f "$out"

tests=$((tests + 1))
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  tracked=$(git ls-files | grep -E '^(build|\.whl)/|\.(o|so|a)$|(^|/)luacov\.' || true)
  if [[ -z $tracked ]]; then
    echo "ok - no build output is tracked by git"
  else
    failed=$((failed + 1))
    echo "not ok - no build output is tracked by git"
    printf '%s\n' "$tracked" | as_comments - 40
  fi
else
  echo "ok - no build output is tracked by git # SKIP not a git work tree"
fi
rm -f "$counts"
echo "1..$tests"
((failed == 0))
