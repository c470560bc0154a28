#!/usr/bin/env bash
# Cross-builds Windows x64 Lua interpreters with MinGW-w64 (Debian: gcc-mingw-w64-x86-64), for
# the Windows stage, which runs them under Wine (spec/windows/env.sh):
#
#   build/windows/lua54/   lua.exe, lua54.dll, liblua54.dll.a (import library), include/
#   build/windows/luajit/  luajit.exe, lua51.dll, libluajit-5.1.dll.a (import library), include/
#
# from the sources .ci/lua-sources fetches (Lua 5.4.8, LuaJIT 2.1). Both executables carry a
# manifest (spec/windows/lua.manifest) whose activeCodePage is UTF-8, so that the ANSI
# functions Lua calls (LoadLibraryExA, fopen, getenv, ...) take UTF-8 paths.
#
#   bash spec/windows/build-lua.sh [lua54|luajit|all]     (default all)
#
# Idempotent: a Lua already built from the same sources by this same script is kept (its
# .built stamp); anything else is rebuilt from scratch in a temporary folder and moved into
# place whole. Prints one line per Lua: the folder, and the seconds a build took.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
OUT=$ROOT/build/windows
CROSS=${CROSS:-x86_64-w64-mingw32-}
CC=${CROSS}gcc
JOBS=$(nproc 2>/dev/null || echo 2)

for tool in "$CC" "${CROSS}windres"; do
  command -v "$tool" >/dev/null || { echo "build-lua: $tool not found (install gcc-mingw-w64-x86-64)" >&2; exit 1; }
done
SOURCES=$(bash .ci/lua-sources)
# What a build depends on: this script, the manifest, the compiler, the fetched sources' stamp.
KEY=$(cat "${BASH_SOURCE[0]}" spec/windows/lua.manifest <("$CC" --version) <(ls -a "$SOURCES") | sha256sum | cut -c1-16)

# The manifest as a resource object (windres), linked into each executable.
manifest_object() {
  local dir=$1
  printf '1 24 "%s"\n' "$ROOT/spec/windows/lua.manifest" >"$dir/manifest.rc"
  "${CROSS}windres" -O coff -i "$dir/manifest.rc" -o "$dir/manifest.o"
}

built() { [[ -f $OUT/$1/.built && $(cat "$OUT/$1/.built") == "$KEY" ]]; }

# Lua 5.4: lua54.dll from the core and library sources (LUA_BUILD_AS_DLL marks the API
# __declspec(dllexport) in the DLL and dllimport in its clients), lua.exe linked to it.
build_lua54() {
  local src=$SOURCES/lua54 tmp=$OUT/lua54.tmp
  rm -rf "$tmp" && mkdir -p "$tmp/obj" "$tmp/include"
  local cflags=(-O2 -Wall -std=gnu99 -DLUA_COMPAT_5_3 -DLUA_BUILD_AS_DLL)
  local core=(lapi lcode lctype ldebug ldo ldump lfunc lgc llex lmem lobject lopcodes lparser lstate
              lstring ltable ltm lundump lvm lzio lauxlib lbaselib lcorolib ldblib liolib lmathlib
              loadlib loslib lstrlib ltablib lutf8lib linit lua)
  printf '%s\n' "${core[@]}" |
    xargs -P "$JOBS" -I{} "$CC" "${cflags[@]}" -c "$src/{}.c" -o "$tmp/obj/{}.o"
  local libobjs=()
  for f in "${core[@]}"; do [[ $f == lua ]] || libobjs+=("$tmp/obj/$f.o"); done
  "$CC" -shared -s -o "$tmp/lua54.dll" "${libobjs[@]}" -Wl,--out-implib,"$tmp/liblua54.dll.a"
  manifest_object "$tmp/obj"
  "$CC" -s -o "$tmp/lua.exe" "$tmp/obj/lua.o" "$tmp/obj/manifest.o" "$tmp/liblua54.dll.a"
  cp "$src"/{lua.h,luaconf.h,lualib.h,lauxlib.h} "$tmp/include/"
  rm -rf "$tmp/obj"
  echo "$KEY" >"$tmp/.built"
  rm -rf "$OUT/lua54" && mv "$tmp" "$OUT/lua54"
}

# LuaJIT 2.1: its own makefile, cross (the host buildvm is built for the Windows x64 target),
# in a copy of the sources, since the copy in lupa's archive carries Linux host tools.
build_luajit() {
  local tmp=$OUT/luajit.tmp
  rm -rf "$tmp" && mkdir -p "$tmp/include"
  cp -a "$SOURCES/luajit21" "$tmp/src"
  make -s -C "$tmp/src/src" clean >/dev/null
  manifest_object "$tmp"
  # The manifest object goes into luajit.exe only (TARGET_LDFLAGS is not on the DLL's link).
  make -s -C "$tmp/src/src" -j"$JOBS" HOST_CC=gcc CROSS="$CROSS" TARGET_SYS=Windows \
    TARGET_LDFLAGS="$tmp/manifest.o" Q= E=@: >"$tmp/make.log" 2>&1 || { cat "$tmp/make.log" >&2; exit 1; }
  local s=$tmp/src/src
  cp "$s/luajit.exe" "$s/lua51.dll" "$s/libluajit-5.1.dll.a" "$tmp/"
  cp "$s"/{lua.h,luaconf.h,lualib.h,lauxlib.h,luajit.h,lua.hpp} "$tmp/include/"
  mkdir -p "$tmp/lua/jit" && cp "$s"/jit/*.lua "$tmp/lua/jit/"   # jit.* modules (-jv, -jdump)
  "${CROSS}strip" "$tmp/luajit.exe" "$tmp/lua51.dll"
  rm -rf "$tmp/src" "$tmp/manifest.rc" "$tmp/manifest.o" "$tmp/make.log"
  echo "$KEY" >"$tmp/.built"
  rm -rf "$OUT/luajit" && mv "$tmp" "$OUT/luajit"
}

mkdir -p "$OUT"
case ${1:-all} in
  all) which=(lua54 luajit) ;;
  lua54|luajit) which=("$1") ;;
  *) echo "usage: $0 [lua54|luajit|all]" >&2; exit 2 ;;
esac
for lua in "${which[@]}"; do
  if built "$lua"; then
    echo "build-lua: $OUT/$lua (cached)"
  else
    start=$SECONDS
    "build_$lua"
    echo "build-lua: $OUT/$lua (built in $((SECONDS - start)) s)"
  fi
done
