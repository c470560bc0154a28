# Sourced by the Windows stage (and by hand): runs the Windows Lua interpreters that
# spec/windows/build-lua.sh cross-builds, under Wine, headless (no X display is used).
#
#   source spec/windows/env.sh
#   wine_start                      # the Wine prefix (made once) and a persistent wineserver
#   trap wine_stop EXIT             # wineserver -k: ends every process of the prefix
#   wine_lua lua54 spec/runner.lua spec/foo_spec.lua     # build/windows/lua54/lua.exe
#   wine_lua luajit -e 'print(jit.version)'              # build/windows/luajit/luajit.exe
#
# Wine maps / to Z:, and with the current folder on Z: (anywhere outside the prefix) a Linux
# path such as /home/me/x/?.lua works unchanged in LUA_PATH, LUA_CPATH, io.open and loadfile.
# The environment passes through: Lua 5.4 reads LUA_PATH_5_4 / LUA_CPATH_5_4 before
# LUA_PATH / LUA_CPATH, LuaJIT only LUA_PATH / LUA_CPATH.
#
# Facts measured on Debian 12, Wine 8.0 (wine64 only), 2 cores (spec/windows/README.md):
# making the prefix takes 8 to 13 s (once, ~690 MB under build/windows/wine); a call with
# a warm wineserver takes 10 to 20 ms; without one, about 0.4 to 0.7 s (the server and
# Wine's services start) and, worse, a call made while an idle server is shutting down
# (Debian's wrapper runs wineserver -p0) can stall 1 to 1.5 s. Hence wine_start.
# shellcheck shell=bash

WIN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export WINEPREFIX=${WINEPREFIX:-$WIN_ROOT/build/windows/wine}
export WINEDEBUG=${WINEDEBUG:--all}
# No Mono or Gecko install prompts, no menu entries or file associations written to $HOME.
export WINEDLLOVERRIDES=${WINEDLLOVERRIDES:-mscoree,mshtml=;winemenubuilder.exe=d}
# /usr/bin/wine (package wine) is a shell wrapper around /usr/lib/wine/wine64 (package wine64).
if [[ -z ${WINE:-} ]]; then
  if command -v wine >/dev/null 2>&1; then WINE=wine; else WINE=/usr/lib/wine/wine64; fi
fi
if [[ -z ${WINESERVER:-} ]]; then
  if command -v wineserver >/dev/null 2>&1; then WINESERVER=wineserver; else WINESERVER=/usr/lib/wine/wineserver; fi
fi

# `wine_available`: status 0 when Wine and the MinGW-w64 compiler are installed.
wine_available() {
  command -v "$WINE" >/dev/null 2>&1 && command -v "$WINESERVER" >/dev/null 2>&1 &&
    command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1
}

# Wine itself, never with a display (wineboot and explorer.exe then run without one), and in
# the C.UTF-8 locale: Wine converts Unix file names and the environment with the Unix
# locale's charset, and under C/POSIX (a fresh machine's default) or a locale that is not
# installed, a non-ASCII file name or variable is mangled, manifest or not.
wine_env() {
  env -u DISPLAY -u WAYLAND_DISPLAY LC_ALL=C.UTF-8 "$@"
}
wine_run() {
  wine_env "$WINE" "$@"
}

# `wine_prefix`: makes $WINEPREFIX once (wineboot --init, then waits for the server to write
# the registry), in a temporary folder moved into place whole, so that a run cut short leaves
# no half-made prefix. Prints one line when it makes one.
wine_prefix() {
  [[ -f $WINEPREFIX/system.reg ]] && return 0
  local tmp=$WINEPREFIX.tmp start=$SECONDS
  rm -rf "$tmp" && mkdir -p "$(dirname "$tmp")" || return 1
  WINEPREFIX=$tmp wine_run wineboot --init >/dev/null 2>&1
  WINEPREFIX=$tmp wine_env "$WINESERVER" -w   # the registry is written when the server ends
  if [[ ! -f $tmp/system.reg ]]; then
    echo "wine_prefix: wineboot --init failed in $tmp" >&2
    return 1
  fi
  rm -rf "$WINEPREFIX" && mv "$tmp" "$WINEPREFIX" || return 1
  echo "# wine_prefix: made $WINEPREFIX in $((SECONDS - start)) s"
}

# `wine_start`: the prefix, and a wineserver that stays up (-p) with Wine's services, so that
# each call costs milliseconds. End it with wine_stop. (When a server already runs for the
# prefix, wineserver -p says so with status 2 and that server is used as it is.)
wine_start() {
  wine_prefix || return 1
  wine_env "$WINESERVER" -p >/dev/null 2>&1
  # Starts Wine's services now rather than in the first test, and checks that Wine runs.
  wine_run cmd /c exit >/dev/null 2>&1 || { echo "wine_start: wine cmd /c exit failed" >&2; return 1; }
}

# `wine_stop`: ends the server and every Wine process of the prefix.
wine_stop() {
  "$WINESERVER" -k >/dev/null 2>&1 || true
}

# `wine_lua <lua54|luajit> ARGS...`: the Windows interpreter with ARGS; its exit status is the
# interpreter's. Output keeps Windows line ends: the C runtime writes "\n" as "\r\n" on
# stdout and stderr (text mode); pipe through `tr -d '\r'` where that matters.
wine_lua() {
  local which=$1; shift
  local exe
  case $which in
    lua54) exe=$WIN_ROOT/build/windows/lua54/lua.exe ;;
    luajit) exe=$WIN_ROOT/build/windows/luajit/luajit.exe ;;
    *) echo "wine_lua: lua54 or luajit, not '$which'" >&2; return 2 ;;
  esac
  [[ -x $exe ]] || { echo "wine_lua: $exe is missing (bash spec/windows/build-lua.sh)" >&2; return 127; }
  wine_prefix >&2 || return 1   # else wine would make one in place, half-made if cut short
  wine_run "$exe" "$@"
}
