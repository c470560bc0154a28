#!/usr/bin/env bash
# The busted specs with the incremental collector running almost continuously
# (spec/helper.lua: collectgarbage("incremental", 1, 1000)). Each spec file runs
# in its own busted: a full cycle after nearly every allocation costs time in
# proportion to the live heap, and one busted holding every file's tests made
# this stage four times slower.
source "$(dirname "$0")/lib.sh"
need_build
tests=0 failed=0
while IFS= read -r file; do
  DLPACK_SPEC_GC=incremental run_busted "specs-incremental $file" "$LUA" "$BUSTED" -o TAP "$file"
  tests=$((tests + BUSTED_TESTS)) failed=$((failed + BUSTED_FAILED))
done < <(find spec -name '*_spec.lua' | sort)
((tests)) || { echo "not ok - specs-incremental: no spec file found"; tests=1 failed=1; }
echo "1..$tests"
((failed == 0))
