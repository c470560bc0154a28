#!/usr/bin/env bash
# The busted specs (spec/*_spec.lua, configured by .busted) under Lua 5.4,
# with lua5.4's default collector (generational, set by the lua5.4 interpreter).
source "$(dirname "$0")/lib.sh"
need_build
run_busted specs "$LUA" "$BUSTED" -o TAP
echo "1..$BUSTED_TESTS"
((BUSTED_FAILED == 0))
