#!/usr/bin/env bash
# The busted specs under Lua 5.1 (runtime_specs in lib.sh).
source "$(dirname "$0")/lib.sh"
runtime_specs lua5.1
