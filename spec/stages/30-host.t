#!/usr/bin/env bash
# examples/host.c: a C host that embeds Lua and links build/libdlpack_lua.a; it prints TAP.
source "$(dirname "$0")/lib.sh"
log=$(mktemp)
if ! make -s build/host >"$log" 2>&1; then
  echo "1..1"
  echo "not ok 1 - make build/host"
  as_comments "$log" 80
  exit 1
fi
rm -f "$log"
exec ./build/host </dev/null
