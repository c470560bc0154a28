#!/usr/bin/env bash
# dlpack inside a real game engine: spec/love/main.lua under LÖVE 11 (LuaJIT), headless (SDL's
# dummy video and audio drivers), against the LuaJIT build (make LUA=luajit -> build/luajit/).
# Its TAP passes through; a missing or broken LÖVE is one visible SKIP.
source "$(dirname "$0")/lib.sh"
command -v love >/dev/null || skip_all "love not found (install love, LÖVE 11)"
command -v luajit >/dev/null || skip_all "luajit not found (install luajit libluajit-5.1-dev)"
export SDL_VIDEODRIVER=dummy SDL_AUDIODRIVER=dummy
# Does LÖVE start at all here? (no display, no audio device: the dummy drivers need neither)
probe=$(mktemp -d)
printf 'function love.conf(t) t.window = false t.modules.audio = false t.modules.sound = false end\n' >"$probe/conf.lua"
printf 'print("started") love.event.quit(0)\n' >"$probe/main.lua"
started=$(timeout 30 love "$probe" 2>&1 </dev/null)
rm -rf "$probe"
[[ $started == *started* ]] || skip_all "love cannot start here: $(printf '%s' "$started" | tail -n 1)"

build_or_exit LUA=luajit test-build
run_tap "love spec/love" timeout 120 love spec/love
exit 0
