#!/usr/bin/env bash
# Lua 5.5, built from source (lua55_build in lib.sh): the conformance suite (stage 20's script,
# under this Lua) and every spec through spec/runner.lua (twice: the default collector, and the
# generational one of DLPACK_SPEC_GC), the part of busted the specs use in
# plain Lua (Debian's busted needs C modules built for 5.4), with Debian's luassert.
source "$(dirname "$0")/lib.sh"
LUASSERT=/usr/share/lua/5.4
[[ -f $LUASSERT/luassert/init.lua ]] || skip_all "luassert not found in $LUASSERT (install lua-busted)"
lua55_build
export LUA_CPATH="$ROOT/build/lua5.5/?.so;;"
LUA="$LUA55" DLPACK_STAGE_NO_BUILD=1 bash spec/stages/20-conformance.t
export LUA_PATH="$LUA_PATH;$LUASSERT/?.lua;$LUASSERT/?/init.lua"
run_tap lua5.5 "$LUA55" spec/runner.lua
# and under 5.5's generational collector with a minor collection every 1% of growth, as stage
# 12 runs 5.4 (15 s; the incremental mode of stage 11 costs minutes, and passes too)
DLPACK_SPEC_GC=generational run_tap lua5.5-generational "$LUA55" spec/runner.lua
exit 0
