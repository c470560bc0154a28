# Shared by the spec/stages/*.t scripts (sourced, not run by prove).
# Every stage prints TAP on stdout and diagnostics on stderr.
# shellcheck shell=bash

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1

# The same module paths the Makefile exports, for a stage run on its own.
export LUA_PATH="${LUA_PATH:-$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;$ROOT/spec/?.lua;;}"
export LUA_CPATH="${LUA_CPATH:-$ROOT/build/?.so;;}"
LUA=${LUA:-lua5.4}
BUSTED=${BUSTED:-/usr/bin/busted}
mkdir -p build/stages

# The whole stage is skipped: one visible SKIP, counted as skipped.
skip_all() {
  echo "1..1"
  echo "ok 1 # SKIP $*"
  exit 0
}

# Print a file (or stdin) as TAP comments, at most $2 lines from its end.
as_comments() {
  local n=${2:-60}
  tail -n "$n" "${1:-/dev/stdin}" | sed 's/^/# /'
}

# `step NAME CMD...`: one TAP line for a command; its output becomes comments
# when it fails. Numbers are left to the harness. Returns the command's status.
step() {
  local name=$1; shift
  local log rc
  log=$(mktemp)
  "$@" >"$log" 2>&1; rc=$?
  if ((rc == 0)); then
    echo "ok - $name"
  else
    echo "not ok - $name (exit status $rc)"
    as_comments "$log" 80
  fi
  rm -f "$log"
  return "$rc"
}

# Builds the in-tree module (make test already did; this makes a lone stage work).
# DLPACK_STAGE_NO_BUILD=1 skips it (to try a stage against a build made otherwise).
need_build() {
  [[ -n ${DLPACK_STAGE_NO_BUILD:-} ]] && return 0
  local log
  log=$(mktemp)
  if ! make -s all >"$log" 2>&1; then
    echo "1..1"
    echo "not ok 1 - make all"
    as_comments "$log" 80
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
}

# `tap_filter`: passes TAP through, dropping plans and test numbers so that a
# stage can add its own lines after a run and print one plan at the end.
# Writes the number of test lines and of failures to $1.
tap_filter() {
  awk -v counts="$1" '
    /^1\.\.[0-9]+/ { next }
    /^(not )?ok( |$)/ {
      tests++
      if ($0 ~ /^not ok/) { failed++; sub(/^not ok( [0-9]+)?/, "not ok") }
      else { sub(/^ok( [0-9]+)?/, "ok") }
    }
    { print; fflush() }
    END { printf "%d %d\n", tests, failed > counts }
  '
}

describe_status() {
  case $1 in
    1) echo ": a spec failed or a spec file did not load" ;;
    86) echo ": AddressSanitizer report" ;;
    87) echo ": LeakSanitizer report" ;;
    88) echo ": UndefinedBehaviorSanitizer report" ;;
    89) echo ": ThreadSanitizer report" ;;
    99) echo ": valgrind report" ;;
    13[0-9]|1[4-5][0-9]) echo ": killed by signal $(($1 - 128)) ($(kill -l $(($1 - 128)) 2>/dev/null))" ;;
  esac
}

# `run_busted LABEL CMD...`: runs busted (CMD, which prints TAP) and re-emits
# its TAP. If CMD ends with a status other than busted's own (a crash, a
# sanitizer or valgrind report), or fails with no failing spec, adds one
# failing line with the end of its stderr. Sets BUSTED_TESTS and BUSTED_FAILED.
run_busted() {
  local label=$1; shift
  local err counts rc
  err=$(mktemp); counts=$(mktemp)
  "$@" 2>"$err" </dev/null | tap_filter "$counts"
  rc=${PIPESTATUS[0]}
  read -r BUSTED_TESTS BUSTED_FAILED <"$counts"
  # busted itself exits 0, or 1 when a spec failed; any other status comes
  # from a sanitizer, valgrind or a crash, and fails on its own line.
  if ((rc != 0 && (rc != 1 || BUSTED_FAILED == 0))); then
    echo "not ok - $label: the run ends cleanly (exit status $rc$(describe_status "$rc"))"
    if grep -qE '==[0-9]+==ERROR:|runtime error:|WARNING: ThreadSanitizer' "$err"; then
      # A sanitizer report: from its first line on.
      sed -n -E '/==[0-9]+==ERROR:|runtime error:|WARNING: ThreadSanitizer/,$p' "$err" | head -n 150 | sed 's/^/# /'
    else
      as_comments "$err" 120
    fi
    BUSTED_FAILED=$((BUSTED_FAILED + 1)); BUSTED_TESTS=$((BUSTED_TESTS + 1))
  elif ((BUSTED_TESTS == 0)); then
    echo "not ok - $label: no spec ran"
    as_comments "$err" 40
    BUSTED_FAILED=1; BUSTED_TESTS=1
  elif [[ -s $err ]]; then
    # stderr of a passing run is shown, not judged (prove -v prints it).
    sed "s/^/[$label] /" "$err" >&2
  fi
  rm -f "$err" "$counts"
  return "$rc"
}
