#!/usr/bin/env bash
# Windows (docs/windows.md): the module cross-built with MinGW-w64 for a Windows Lua 5.4 and
# LuaJIT 2.1 that spec/windows/build-lua.sh builds from source, run under Wine: the
# conformance suite and the busted specs (through spec/runner.lua, which needs no C module) on
# both, the CUDA suite against the fake driver built as a DLL, and `require` through a
# package.cpath folder whose name has spaces, backslashes and a non-ASCII letter. Needs
# gcc-mingw-w64-x86-64, wine and wine64 (.ci/deps installs them); without them, one SKIP.
source "$(dirname "$0")/lib.sh"
source spec/windows/env.sh
wine_available || skip_all "MinGW-w64 and Wine are not installed (gcc-mingw-w64-x86-64, wine, wine64)"
SUITE=${DLPACK_CONFORMANCE:-$(dirname "$ROOT")/shared/conformance/run.lua}

log=build/stages/windows-sources.log
bash .ci/lua-sources >"$log" 2>&1 || { as_comments "$log" 20; skip_all "the Lua sources could not be fetched (.ci/lua-sources)"; }
step "MinGW-w64 builds the Windows Lua 5.4 and LuaJIT 2.1 (spec/windows/build-lua.sh)" \
  bash spec/windows/build-lua.sh all || exit 0

# `module LUA TARGETS...`: make the module's TARGETS (paths under its build folder) for the
# Windows LUA (lua54 or luajit), in build/windows/dlpack-LUA/.
module() {
  local lua=$1 name lib; shift
  case $lua in
    lua54) name=lua5.4 lib=liblua54.dll.a ;;
    luajit) name=luajit lib=libluajit-5.1.dll.a ;;
  esac
  local out=build/windows/dlpack-$lua
  build -j2 CC=x86_64-w64-mingw32-gcc LUA="$name" LUA_INC="-I$ROOT/build/windows/$lua/include" \
    LUA_LIB="$ROOT/build/windows/$lua/$lib" BUILD="$out" "${@/#/$out/}"
}

wine_start || { echo "not ok - Wine starts (wine_start)"; exit 0; }
trap wine_stop EXIT

# `win_text CMD...`: CMD's output without the \r of the Windows C runtime's text mode, and its status.
win_text() { "$@" 2>&1 | tr -d '\r'; return "${PIPESTATUS[0]}"; }
# Windows' spelling of a path here (Wine's drive Z: is /).
windows_path() { echo "Z:${1//\//\\}"; }

specs=(spec/*_spec.lua)

for lua in lua54 luajit; do
  label=$([[ $lua == lua54 ]] && echo "Windows Lua 5.4" || echo "Windows LuaJIT")
  module "$lua" dlpack/core.dll gen/dlpack/core.dll fabricate.dll fakecuda.dll || continue
  export LUA_CPATH="$ROOT/build/windows/dlpack-$lua/?.dll"
  # luassert and say (pure Lua) from Debian's busted packages; lua-compat-5.3's Lua half for LuaJIT
  shared=$([[ $lua == lua54 ]] && echo /usr/share/lua/5.4 || echo "/usr/share/lua/5.1")
  export LUA_PATH="$ROOT/lua/?.lua;$ROOT/lua/?/init.lua;$ROOT/spec/?.lua;$shared/?.lua;$shared/?/init.lua;/usr/share/lua/5.4/?.lua;/usr/share/lua/5.4/?/init.lua"

  if [[ $lua == luajit ]]; then
    echo "ok - $label: conformance # SKIP the suite is Lua 5.4 code (<close>), as stage 20 runs it"
  elif [[ -f $SUITE ]]; then
    out=build/stages/windows-conformance-$lua.out
    win_text wine_lua "$lua" "$SUITE" >"$out"
    lua5.4 spec/stages/conformance_tap.lua "$SUITE" "$out" "$?" "$label"
  else
    echo "ok - $label: conformance # SKIP the suite is not at $SUITE (CI puts shared/ beside the repo)"
  fi

  run_tap "$label specs" win_text wine_lua "$lua" spec/runner.lua "${specs[@]}"

  if [[ $lua == luajit ]]; then
    echo "ok - $label: the CUDA suite # SKIP the suite is Lua 5.4 code (<close>), as stage 45 runs it"
  else
    DLPACK_BUILD="$ROOT/build/windows/dlpack-$lua" DLPACK_LUA_CUDA_DRIVER="$ROOT/build/windows/dlpack-$lua/fakecuda.dll" \
      FAKECUDA_DEVICES=2 run_tap "$label CUDA suite (fake driver)" win_text wine_lua "$lua" spec/cuda/run.lua
  fi
done

# examples/host.c, a C host that links the static library (and Lua's DLL, found on WINEPATH):
# it prints TAP.
lua54_dir=$(windows_path "$ROOT/build/windows/lua54")
if module lua54 host.exe; then
  WINEPATH=$lua54_dir run_tap "Windows C host (examples/host.c)" win_text wine_run build/windows/dlpack-lua54/host.exe
fi

# The DLL's links: only Lua's DLL and Windows' own (libgcc static, no libwinpthread), and no
# luaopen_* export but the two `require` may call (dlpack.unsafe and dlpack.ipc are opened
# through package.loadlib: README, "Safety"; spec/sandbox_spec.lua lists them with nm on Linux).
dll_facts() {
  local dll=build/windows/dlpack-lua54/dlpack/core.dll imports exports
  imports=$(x86_64-w64-mingw32-objdump -p "$dll" | sed -n 's/^\s*DLL Name: //p' | sort | tr '\n' ' ')
  exports=$(x86_64-w64-mingw32-objdump -p "$dll" | sed -nE 's/^\s*\[ *[0-9]+\] (luaopen_[A-Za-z0-9_]+)$/\1/p' | sort | tr '\n' ' ')
  echo "imports: $imports"
  echo "luaopen exports: $exports"
  [[ $imports == "KERNEL32.dll lua54.dll msvcrt.dll " && $exports == "luaopen_dlpack luaopen_dlpack_core " ]]
}
step "core.dll needs only lua54.dll, KERNEL32.dll and msvcrt.dll, and exports no luaopen_ but dlpack's two" dll_facts

# package.cpath through a folder named with a space, a non-ASCII letter (the interpreters run
# with the UTF-8 code page: spec/windows/lua.manifest) and written with backslashes; a missing
# nvcuda.dll is a reason, not an error; the module of one Lua refused by another, cleanly.
odd="build/windows/cpath test ü"
rm -rf "$odd" && mkdir -p "$odd/dlpack" && cp build/windows/dlpack-lua54/dlpack/core.dll "$odd/dlpack/"
cpath="$(windows_path "$ROOT/$odd")\\?.dll"
LUA_CPATH=$cpath step "Windows Lua 5.4: require through a package.cpath of spaces, backslashes and a non-ASCII name" \
  wine_lua lua54 -e '
    local d = require "dlpack"
    assert(package.searchpath("dlpack.core", package.cpath):find("ü", 1, true))
    assert(d.arange(4):sum() == 6)
    local ok, why = d.cuda.is_available()
    assert(ok == false and why:find("nvcuda.dll", 1, true), why)
    assert(select(2, pcall(require, "dlpack.ipc")):find("not available on Windows", 1, true))'
LUA_CPATH=$cpath step "Windows LuaJIT: the module built for Lua 5.4 is refused with an error, not a crash" \
  wine_lua luajit -e '
    local ok, err = pcall(require, "dlpack")
    assert(not ok and tostring(err):find("core.dll", 1, true), tostring(err))'
# With lua54.dll on the PATH, the 5.4 module loads into LuaJIT's process: its entry point must
# see that the Lua calling it is another (src/runtime.c) and refuse through LuaJIT's own API.
LUA_CPATH=$cpath WINEPATH=$lua54_dir step "Windows LuaJIT: with lua54.dll on the PATH too, the 5.4 module raises naming both Luas" \
  wine_lua luajit -e '
    local ok, err = pcall(require, "dlpack")
    assert(not ok and tostring(err):find("built for Lua 5.4 and cannot load into Lua 5.1", 1, true), tostring(err))'
exit 0
