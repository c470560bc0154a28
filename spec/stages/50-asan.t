#!/usr/bin/env bash
# The busted specs against the module built with AddressSanitizer and UBSan
# (`make asan` -> build/asan), any report fatal, leaks included.
source "$(dirname "$0")/lib.sh"
command -v gcc >/dev/null || skip_all "gcc not found"
LIBASAN=$(gcc -print-file-name=libasan.so)
[[ -f $LIBASAN ]] || skip_all "gcc's libasan.so not found (install libasan8)"

build_or_exit asan-build

# Lua unloads C modules (dlclose) when the state closes, before LeakSanitizer
# runs at exit; a leak's stack would then show "<unknown module>" instead of our
# functions. This shim keeps every library loaded so that reports stay readable.
SHIM=build/asan/keep_loaded.so
if [[ ! -f $SHIM ]]; then
  printf 'int dlclose(void *handle);\nint dlclose(void *handle) { (void)handle; return 0; }\n' \
    | gcc -shared -fPIC -O1 -x c -o "$SHIM" - || skip_all "cannot build $SHIM"
fi

# Any error is fatal and makes the run fail: ASan aborts at the first report,
# UBSan halts (the module is also built with -fno-sanitize-recover=all), LSan
# fails the exit status. spec/lsan.supp may only name the interpreter's frames.
export ASAN_OPTIONS="halt_on_error=1:allocator_may_return_null=1:abort_on_error=0:exitcode=86:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:strict_string_checks=1"
export LSAN_OPTIONS="exitcode=87:suppressions=$ROOT/spec/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:exitcode=88"
export LUA_CPATH="$ROOT/build/asan/?.so;;"

LD_PRELOAD="$LIBASAN $ROOT/$SHIM" \
  run_tap asan "$LUA" "$BUSTED" -o TAP --cpath="$ROOT/build/asan/?.so"
