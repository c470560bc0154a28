#!/usr/bin/env bash
# The thread specs (capsules consumed, tensors exported and deleters run across lua_States and
# threads; large operations split among the pool's threads: spec/parallel_spec.lua) against the
# module built with ThreadSanitizer (`make tsan-build` -> build/tsan), then parallel_spec's drawn
# layouts against its test build, whose tasks are of 256 elements (build/tsan/gen); any data race
# report fails the run. The interpreter itself is not instrumented: the runtime is
# preloaded, and it watches every access the module and the test module make.
source "$(dirname "$0")/lib.sh"
command -v gcc >/dev/null || skip_all "gcc not found"
LIBTSAN=$(gcc -print-file-name=libtsan.so)
[[ -f $LIBTSAN ]] || skip_all "gcc's libtsan.so not found (install libtsan2)"

build_or_exit tsan-build

export TSAN_OPTIONS="halt_on_error=1:exitcode=89:second_deadlock_stack=1"
export LUA_CPATH="$ROOT/build/tsan/?.so;;"
LD_PRELOAD="$LIBTSAN" run_tap tsan "$LUA" "$BUSTED" -o TAP --cpath="$ROOT/build/tsan/?.so" spec/threads_spec.lua spec/parallel_spec.lua
LD_PRELOAD="$LIBTSAN" run_tap tsan-small-tasks "$LUA" "$BUSTED" -o TAP --cpath="$ROOT/build/tsan/gen/?.so" \
  --filter="drawn layouts" spec/parallel_spec.lua
