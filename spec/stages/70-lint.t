#!/usr/bin/env bash
# luacheck over the Lua sources (.luacheckrc), one TAP line per file or warning,
# the links of README.md and docs/ (spec/check_links.lua), and a check that no
# build output is tracked by git. The C build itself is
# warning-free because the Makefile compiles with -Werror.
source "$(dirname "$0")/lib.sh"
if command -v luacheck >/dev/null; then
  dirs=()
  for d in lua spec examples bench; do [[ -d $d ]] && dirs+=("$d"); done
  run_tap luacheck luacheck --formatter TAP --codes "${dirs[@]}" | sed -E 's/^(not )?ok [0-9]+ /&- luacheck /'
else
  echo "ok - luacheck # SKIP luacheck not found (install lua-check)"
fi

# The links of README.md and docs/ resolve inside the repository (files and #anchors).
run_tap spec/check_links.lua "$LUA" spec/check_links.lua README.md docs/*.md

tracked_outputs() {
  local tracked
  tracked=$(git ls-files | grep -E '^(build|\.whl)/|\.(o|so|a)$|(^|/)luacov\.' || true)
  [[ -z $tracked ]] || { printf '%s\n' "$tracked"; return 1; }
}
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  step "no build output is tracked by git" tracked_outputs
else
  echo "ok - no build output is tracked by git # SKIP not a git work tree"
fi
exit 0
