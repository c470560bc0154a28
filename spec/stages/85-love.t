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

log=$(mktemp)
if ! make -s LUA=luajit all >"$log" 2>&1; then
  echo "1..1"
  echo "not ok 1 - make LUA=luajit all"
  as_comments "$log" 60
  rm -f "$log"
  exit 1
fi
rm -f "$log"
counts=$(mktemp)
timeout 120 love spec/love </dev/null 2>&1 | tap_filter "$counts"
rc=${PIPESTATUS[0]}
read -r tests failed <"$counts"
rm -f "$counts"
if ((rc != 0 && failed == 0)); then
  tests=$((tests + 1)) failed=$((failed + 1))
  echo "not ok - love spec/love exits cleanly (exit status $rc)"
fi
((tests)) || { echo "not ok - love spec/love printed no test"; tests=1 failed=1; }
echo "1..$tests"
((failed == 0))
