#!/usr/bin/env bash
# The shared conformance suite (../shared/conformance/run.lua, beside the repo)
# as TAP: one line per case, named from the suite's `case("name", ...)` calls.
source "$(dirname "$0")/lib.sh"
SUITE=${DLPACK_CONFORMANCE:-$(dirname "$ROOT")/shared/conformance/run.lua}
[[ -f $SUITE ]] || skip_all "conformance suite not found at $SUITE (CI puts shared/ beside the repo)"
build_or_exit test-build

out=build/stages/conformance.out
"$LUA" "$SUITE" >"$out" 2>&1 </dev/null
rc=$?

"$LUA" spec/stages/conformance_tap.lua "$SUITE" "$out" "$rc"
