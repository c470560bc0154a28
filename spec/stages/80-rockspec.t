#!/usr/bin/env bash
# `luarocks make` of rockspec/dlpack-scm-1.rockspec into a temporary tree, offline,
# then a plain lua5.4 that sees only that tree loads the installed rock.
source "$(dirname "$0")/lib.sh"
command -v luarocks >/dev/null || skip_all "luarocks not found (install luarocks)"
ROCKSPEC=rockspec/dlpack-scm-1.rockspec
TREE=$(mktemp -d)
trap 'rm -rf "$TREE"' EXIT
echo "1..3"

rm -rf build/rock   # the rock builds from scratch, as from a clean clone
log=$(mktemp)
if luarocks --lua-version 5.4 make --deps-mode=none --tree "$TREE" "$ROCKSPEC" >"$log" 2>&1 </dev/null; then
  echo "ok 1 - luarocks make $ROCKSPEC"
else
  echo "not ok 1 - luarocks make $ROCKSPEC"
  as_comments "$log" 80
fi

check() {
  # Only the rock's tree: no in-tree paths, no system-wide defaults.
  env LUA_PATH="$TREE/share/lua/5.4/?.lua;$TREE/share/lua/5.4/?/init.lua" \
      LUA_CPATH="$TREE/lib/lua/5.4/?.so" \
      LUA_INIT= LUA_INIT_5_4= \
      "$LUA" -e "$1" </dev/null
}
if out=$(check '
  local dlpack = require "dlpack"
  local unsafe = require "dlpack.unsafe"
  assert(type(unsafe) == "table", "dlpack.unsafe is a table")
  for _, m in ipairs({"dlpack", "dlpack.core", "dlpack.unsafe"}) do
    local file = package.searchpath(m, package.path) or package.searchpath(m, package.cpath)
    print("# " .. m .. " from " .. tostring(file))
  end
  local t = dlpack.zeros({2, 3}, "int32")
  t:set(2, 3, 7)
  assert(t:numel() == 6 and t:get(2, 3) == 7 and t.dtype == "int32", "a tensor works")
' 2>&1); then
  echo "ok 2 - the installed rock loads: require \"dlpack\", \"dlpack.unsafe\", a tensor"
  printf '%s\n' "$out" | grep '^#'
else
  echo "not ok 2 - the installed rock loads: require \"dlpack\", \"dlpack.unsafe\", a tensor"
  printf '%s\n' "$out" | as_comments - 40
fi

prefix=$(ls -d "$TREE"/lib/luarocks/rocks-5.4/dlpack/scm-1 2>/dev/null)
if [[ -n $prefix && -f $prefix/include/dlpack_lua.h && -f $prefix/static/libdlpack_lua.a ]]; then
  echo "ok 3 - the rock carries the C header and the static library for hosts"
else
  echo "not ok 3 - the rock carries the C header and the static library for hosts"
  (cd "$TREE" && find . -type f) | as_comments - 40
fi
rm -f "$log"
