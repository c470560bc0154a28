#!/usr/bin/env bash
# `luarocks make` of rockspec/dlpack-scm-1.rockspec into a temporary tree, offline,
# then a plain lua5.4 that sees only that tree loads the installed rock; then
# `make rock` (a source rock of the working tree), `luarocks install` of it into a
# fresh tree, offline, `require` from that tree, and a C host built with the
# rock's pkg-config file (dlpack-lua.pc); then a binary rock of that tree in a third one;
# last, `luarocks --lua-version 5.1 make` and 5.3 into trees of their own, loaded by lua5.1
# and lua5.3 (skipped where that Lua is not installed).
source "$(dirname "$0")/lib.sh"
command -v luarocks >/dev/null || skip_all "luarocks not found (install luarocks)"
ROCKSPEC=rockspec/dlpack-scm-1.rockspec
TREE=$(mktemp -d) FRESH=$(mktemp -d)
trap 'rm -rf "$TREE" "$FRESH"' EXIT

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
  local tree=${2:-$TREE}
  env LUA_PATH="$tree/share/lua/5.4/?.lua;$tree/share/lua/5.4/?/init.lua" \
      LUA_CPATH="$tree/lib/lua/5.4/?.so" \
      LUA_INIT= LUA_INIT_5_4= \
      "$LUA" -e "$1" </dev/null
}
LOADS='
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
'
if out=$(check "$LOADS" 2>&1); then
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

# A source rock of the working tree, installed into an empty tree with the network unused.
rock=build/dist/dlpack-scm-1.src.rock
if make -s rock >"$log" 2>&1 && [[ -f $rock ]]; then
  echo "ok 4 - make rock packs $rock"
else
  echo "not ok 4 - make rock packs $rock"
  as_comments "$log" 80
fi
if luarocks --lua-version 5.4 install --tree "$FRESH" "$rock" >"$log" 2>&1 </dev/null; then
  echo "ok 5 - luarocks install $rock into an empty tree"
else
  echo "not ok 5 - luarocks install $rock into an empty tree"
  as_comments "$log" 80
fi
if out=$(check "$LOADS" "$FRESH" 2>&1); then
  echo "ok 6 - require \"dlpack\", \"dlpack.unsafe\" from the tree the source rock went into"
else
  echo "not ok 6 - require \"dlpack\", \"dlpack.unsafe\" from the tree the source rock went into"
  printf '%s\n' "$out" | as_comments - 40
fi

# A C host built with nothing but the rock's header, static library and pkg-config file.
pcdir=$(ls -d "$FRESH"/lib/luarocks/rocks-5.4/dlpack/scm-1/static/pkgconfig 2>/dev/null)
if [[ -n $pcdir ]] && flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs dlpack-lua 2>"$log") &&
   ${CC:-cc} -o "$FRESH/host" examples/host.c $flags >>"$log" 2>&1 && "$FRESH/host" >>"$log" 2>&1 </dev/null; then
  echo "ok 7 - examples/host.c builds with pkg-config dlpack-lua (\"$flags\") from the rock and runs"
else
  echo "not ok 7 - examples/host.c builds with pkg-config dlpack-lua from the rock and runs"
  as_comments "$log" 80
fi

# A binary rock packed from that tree, installed into a third one: it needs no compiler and its
# pkg-config file (paths relative to itself) still finds the header and the library.
THIRD=$(mktemp -d)
trap 'rm -rf "$TREE" "$FRESH" "$THIRD"' EXIT
pcdir3=$THIRD/lib/luarocks/rocks-5.4/dlpack/scm-1/static/pkgconfig
if (cd "$THIRD" && luarocks --lua-version 5.4 pack dlpack --tree "$FRESH") >"$log" 2>&1 &&
   luarocks --lua-version 5.4 install --tree "$THIRD" "$THIRD"/dlpack-scm-1.*.rock >>"$log" 2>&1 </dev/null &&
   check "$LOADS" "$THIRD" >>"$log" 2>&1 &&
   flags=$(PKG_CONFIG_PATH=$pcdir3 pkg-config --cflags --libs dlpack-lua 2>>"$log") &&
   [[ $flags == *"$THIRD"* ]] &&
   ${CC:-cc} -o "$THIRD/host" examples/host.c $flags >>"$log" 2>&1 && "$THIRD/host" >>"$log" 2>&1 </dev/null; then
  echo "ok 8 - a binary rock (luarocks pack dlpack) installs into another tree, loads, and its pkg-config file builds a host"
else
  echo "not ok 8 - a binary rock (luarocks pack dlpack) installs into another tree, loads, and its pkg-config file builds a host"
  as_comments "$log" 60
fi

# The same rockspec for other Luas (`lua >= 5.1`): each builds into a tree of its own, whose
# pkg-config file requires that Lua.
OTHER_LOADS='
  local dlpack, unsafe = require "dlpack", require "dlpack.unsafe"
  assert(type(unsafe.wrap) == "function", "dlpack.unsafe loads")
  local t = dlpack.zeros({2, 3}, "int32")
  t:set(2, 3, 7)
  assert(t:numel() == 6 and t:get(2, 3) == 7 and t.dtype == "int32", "a tensor works")
'

for v in 5.1 5.3; do
  name="luarocks --lua-version $v make $ROCKSPEC, then require \"dlpack\" from lua$v"
  if ! command -v "lua$v" >/dev/null || [[ ! -d /usr/include/lua$v ]]; then
    echo "ok - $name # SKIP lua$v or its headers not installed"
    continue
  fi
  tree=$(mktemp -d)
  if luarocks --lua-version "$v" make --deps-mode=none --tree "$tree" "$ROCKSPEC" >"$log" 2>&1 </dev/null &&
     env LUA_PATH="$tree/share/lua/$v/?.lua;$tree/share/lua/$v/?/init.lua" LUA_CPATH="$tree/lib/lua/$v/?.so" \
       LUA_INIT= "lua$v" -e "$OTHER_LOADS" >>"$log" 2>&1 </dev/null &&
     grep -q "Requires: lua$v" "$tree"/lib/luarocks/rocks-$v/dlpack/scm-1/static/pkgconfig/dlpack-lua.pc; then
    echo "ok - $name"
  else
    echo "not ok - $name"
    as_comments "$log" 60
  fi
  rm -rf "$tree"
done
rm -f "$log"
