# Shared by the spec/stages/*.t scripts (sourced, not run by prove).
#
# A stage prints test lines on stdout ("ok - name", "not ok - name", "... # SKIP why",
# "# comments"), or passes through the TAP of the programs it runs, numbers and plans
# included. It neither numbers nor counts: spec/run.sh numbers every line, adds the plan
# and counts passes, failures and skips, the one place where TAP is counted.
# shellcheck shell=bash

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1

# The same module paths the Makefile exports, for a stage run on its own.
export LUA_PATH="${LUA_PATH:-$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;$ROOT/spec/?.lua;;}"
export LUA_CPATH="${LUA_CPATH:-$ROOT/build/?.so;;}"
LUA=${LUA:-lua5.4}
BUSTED=${BUSTED:-/usr/bin/busted}
mkdir -p build/stages

# The whole stage is skipped: one visible SKIP.
skip_all() {
  echo "ok - $(basename "$0" .t) # SKIP $*"
  exit 0
}

# Print a file (or stdin) as TAP comments, at most $2 lines from its end.
as_comments() {
  local n=${2:-60}
  tail -n "$n" "${1:-/dev/stdin}" | sed 's/^/# /'
}

# `step NAME CMD...`: one test line for a command; its output becomes comments
# when it fails. Returns the command's status.
step() {
  local name=$1; shift
  local log rc
  log=$(mktemp)
  "$@" >"$log" 2>&1 </dev/null; rc=$?
  if ((rc == 0)); then
    echo "ok - $name"
  else
    echo "not ok - $name (exit status $rc)"
    as_comments "$log" 80
  fi
  rm -f "$log"
  return "$rc"
}

# `build TARGET...`: make the targets; when that fails, a failing line with the end of
# make's output, and status 1. `build_or_exit TARGET...` ends the stage instead
# (DLPACK_STAGE_NO_BUILD=1 skips it, to try a stage against a build made otherwise).
build() {
  local log
  log=$(mktemp)
  if make -s "$@" >"$log" 2>&1 </dev/null; then
    rm -f "$log"
    return 0
  fi
  echo "not ok - make $*"
  as_comments "$log" 80
  rm -f "$log"
  return 1
}
build_or_exit() {
  [[ -n ${DLPACK_STAGE_NO_BUILD:-} ]] && return 0
  build "$@" || exit 1
}

describe_status() {
  case $1 in
    1) echo ": a test failed or a spec file did not load" ;;
    86) echo ": AddressSanitizer report" ;;
    87) echo ": LeakSanitizer report" ;;
    88) echo ": UndefinedBehaviorSanitizer report" ;;
    89) echo ": ThreadSanitizer report" ;;
    99) echo ": valgrind report" ;;
    13[0-9]|1[4-5][0-9]) echo ": killed by signal $(($1 - 128)) ($(kill -l $(($1 - 128)) 2>/dev/null))" ;;
  esac
}

# `run_tap LABEL CMD...`: runs CMD, a program that prints TAP (busted -o TAP, a suite,
# a test host), and passes its TAP through. When CMD ends with a status other than 0
# or 1 (a crash, a sanitizer or valgrind report), with status 1 but no failing line, or
# prints no test line at all, adds
# a failing line with the end of its stderr. stderr of a run that ends well is shown on
# stderr, not judged. Returns CMD's status.
run_tap() {
  local label=$1; shift
  local err out rc
  err=$(mktemp) out=$(mktemp)
  "$@" 2>"$err" </dev/null | tee "$out"
  rc=${PIPESTATUS[0]}
  # status 1 with no failing line: the program stopped (a runner's own error, os.exit(1)),
  # and the tests it did not reach would be lost with it
  if ((rc > 1)) || ! grep -qE '^(not )?ok( |$)' "$out" || { ((rc == 1)) && ! grep -qE '^not ok( |$)' "$out"; }; then
    echo "not ok - $label: the run ends cleanly with tests (exit status $rc$(describe_status "$rc"))"
    if grep -qE '==[0-9]+==ERROR:|runtime error:|WARNING: ThreadSanitizer' "$err"; then
      # A sanitizer report: from its first line on.
      sed -n -E '/==[0-9]+==ERROR:|runtime error:|WARNING: ThreadSanitizer/,$p' "$err" | head -n 150 | sed 's/^/# /'
    else
      as_comments "$err" 120
    fi
  elif [[ -s $err ]]; then
    while IFS= read -r line || [[ -n $line ]]; do printf '[%s] %s\n' "$label" "$line"; done <"$err" >&2
  fi
  rm -f "$err" "$out"
  return "$rc"
}

# `runtime_specs LUA`: the busted specs under another Lua the module supports (stages 15 to
# 18: Lua 5.1, 5.2, 5.3, LuaJIT; 5.4 is stage 10), built with `make LUA=<lua>` into
# build/<lua>/. Specs of what only some versions have (<close>, integer subtypes, iteration)
# are pending there, with the reason. A runtime that is not installed is one visible SKIP.
runtime_specs() {
  local lua=$1
  command -v "$lua" >/dev/null || skip_all "$lua not found (install $lua)"
  build_or_exit LUA="$lua" test-build
  LUA_CPATH="$ROOT/build/$lua/?.so;;" run_tap "$lua" "$lua" "$BUSTED" -o TAP --cpath="$ROOT/build/$lua/?.so;;"
  exit 0
}

# Lua 5.5, which Debian does not package: `lua55_build` builds the interpreter from the official
# sources (.ci/lua-sources) into build/lua5.5/bin/lua5.5, its headers into build/lua5.5/include
# (both kept between runs), then the module for it (make LUA=$LUA55 into build/lua5.5/). A
# stage without the sources is one visible SKIP.
LUA55=$ROOT/build/lua5.5/bin/lua5.5
lua55_build() {
  local sources log
  sources=$(bash .ci/lua-sources 2>&1) || skip_all "Lua 5.5 sources not available (.ci/lua-sources: ${sources##*$'\n'})"
  if [[ ! $LUA55 -nt $sources/lua55/onelua.c ]]; then
    mkdir -p "$ROOT/build/lua5.5/bin" "$ROOT/build/lua5.5/include"
    log=$(mktemp)
    if ! (cd "$sources/lua55" && cc -O2 -DLUA_USE_LINUX -o "$LUA55" onelua.c -lm -ldl -Wl,-E) >"$log" 2>&1; then
      echo "not ok - build Lua 5.5 from $sources/lua55"
      as_comments "$log"
      rm -f "$log" "$LUA55"
      exit 1
    fi
    rm -f "$log"
    cp "$sources"/lua55/{lua.h,luaconf.h,lualib.h,lauxlib.h} "$ROOT/build/lua5.5/include/"
  fi
  build_or_exit LUA="$LUA55" test-build
}
