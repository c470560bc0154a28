#!/usr/bin/env bash
# The busted specs under LuaJIT 2.1 (runtime_specs in lib.sh).
source "$(dirname "$0")/lib.sh"
runtime_specs luajit
