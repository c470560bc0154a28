#!/usr/bin/env bash
# The busted specs with the generational collector making a minor collection
# after every 1% of growth (spec/helper.lua).
source "$(dirname "$0")/lib.sh"
build_or_exit test-build
DLPACK_SPEC_GC=generational run_tap specs-generational "$LUA" "$BUSTED" -o TAP
