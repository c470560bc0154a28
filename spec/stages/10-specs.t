#!/usr/bin/env bash
# The busted specs (spec/*_spec.lua, configured by .busted) under Lua 5.4,
# with lua5.4's default collector (generational, set by the lua5.4 interpreter).
source "$(dirname "$0")/lib.sh"
build_or_exit test-build
run_tap specs "$LUA" "$BUSTED" -o TAP
