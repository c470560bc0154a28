#!/usr/bin/env bash
# examples/host.c: a C host that embeds Lua and links build/libdlpack_lua.a; it prints TAP.
# examples/host_ipc.c: a host handing its own socket and memfd to scripts (dlpack.ipc's C API).
# spec/c/host_threads.c: a host whose own job system runs the module's large operations.
# spec/c/host_hostile.c: the C API given NULLs, a state without the module, its own exports edited.
# examples/host.cpp: the same C API from a C++ host (compiled with c++, linked the same way).
# examples/minimal.c: the example of docs/c-api.md, built with the command line given there.
source "$(dirname "$0")/lib.sh"
build build/host && run_tap build/host ./build/host
build build/host-ipc && run_tap build/host-ipc ./build/host-ipc
build build/host-threads && run_tap build/host-threads ./build/host-threads
build build/host-hostile && run_tap build/host-hostile ./build/host-hostile

CXX=${CXX:-c++}
if ! command -v "$CXX" >/dev/null; then
  echo "ok - C++ host # SKIP no C++ compiler ($CXX; install g++)"
else
  build build/host-cpp && run_tap build/host-cpp ./build/host-cpp
fi

# The build line the README and docs/c-api.md give hosts, as written there.
minimal() {
  cc examples/minimal.c -Isrc $(pkg-config --cflags lua5.4) build/libdlpack_lua.a \
    $(pkg-config --libs lua5.4) -ldl -lm -pthread -o build/minimal && ./build/minimal
}
step "examples/minimal.c builds with the documented command line and runs" minimal
exit 0
