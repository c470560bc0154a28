#!/usr/bin/env bash
# The busted specs with the generational collector making a minor collection
# after every 1% of growth (spec/helper.lua).
source "$(dirname "$0")/lib.sh"
need_build
DLPACK_SPEC_GC=generational run_busted specs-generational "$LUA" "$BUSTED" -o TAP
echo "1..$BUSTED_TESTS"
((BUSTED_FAILED == 0))
