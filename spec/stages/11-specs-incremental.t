#!/usr/bin/env bash
# The busted specs with the incremental collector running almost continuously
# (spec/helper.lua: collectgarbage("incremental", 1, 1000)). Each spec file runs
# in its own busted: a full cycle after nearly every allocation costs time in
# proportion to the live heap, and one busted holding every file's tests made
# this stage four times slower.
source "$(dirname "$0")/lib.sh"
build_or_exit test-build
while IFS= read -r file; do
  DLPACK_SPEC_GC=incremental run_tap "specs-incremental $file" "$LUA" "$BUSTED" -o TAP "$file"
done < <(find spec -name '*_spec.lua' | sort)
