#!/usr/bin/env bash
# examples/host.c: a C host that embeds Lua and links build/libdlpack_lua.a; it prints TAP.
# examples/host.cpp: the same C API from a C++ host (compiled with c++, linked the same way).
# examples/minimal.c: the example of docs/c-api.md, built with the command line given there.
source "$(dirname "$0")/lib.sh"
counts=$(mktemp)
tests=0 failed=0
log=$(mktemp)
if make -s build/host >"$log" 2>&1; then
  ./build/host </dev/null | tap_filter "$counts"
  rc=${PIPESTATUS[0]}
  read -r tests failed <"$counts"
  if ((rc != 0 && failed == 0)); then
    tests=$((tests + 1)) failed=$((failed + 1))
    echo "not ok - build/host ends cleanly (exit status $rc)"
  fi
else
  tests=1 failed=1
  echo "not ok - make build/host"
  as_comments "$log" 80
fi

CXX=${CXX:-c++}
if ! command -v "$CXX" >/dev/null; then
  tests=$((tests + 1))
  echo "ok - C++ host # SKIP no C++ compiler ($CXX; install g++)"
elif make -s build/host-cpp >"$log" 2>&1; then
  ./build/host-cpp </dev/null | tap_filter "$counts"
  rc=${PIPESTATUS[0]}
  read -r t f <"$counts"
  tests=$((tests + t)) failed=$((failed + f))
  if ((rc != 0 && f == 0)); then
    tests=$((tests + 1)) failed=$((failed + 1))
    echo "not ok - build/host-cpp ends cleanly (exit status $rc)"
  fi
else
  tests=$((tests + 1)) failed=$((failed + 1))
  echo "not ok - make build/host-cpp (examples/host.cpp with $CXX)"
  as_comments "$log" 80
fi
# The build line the README and docs/c-api.md give hosts, as written there.
tests=$((tests + 1))
if cc examples/minimal.c -Isrc $(pkg-config --cflags lua5.4) build/libdlpack_lua.a \
     $(pkg-config --libs lua5.4) -ldl -lm -pthread -o build/minimal >"$log" 2>&1 && ./build/minimal >>"$log" 2>&1 </dev/null; then
  echo "ok - examples/minimal.c builds with the documented command line and runs"
else
  failed=$((failed + 1))
  echo "not ok - examples/minimal.c builds with the documented command line and runs"
  as_comments "$log" 40
fi
rm -f "$log" "$counts"
echo "1..$tests"
((failed == 0))
