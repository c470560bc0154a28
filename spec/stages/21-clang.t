#!/usr/bin/env bash
# The module built with Clang (build/clang) under the Makefile's full -Werror flags, then the
# conformance suite and the spec files of the code Clang treats differently from GCC (complex
# values, the matmul kernels and BLAS calls, the AVX-512 sort, the copies, the CPU levels)
# against that build. Needs clang (.ci/deps installs it); without it, one SKIP.
source "$(dirname "$0")/lib.sh"
command -v clang >/dev/null || skip_all "clang not found (install clang)"
SUITE=${DLPACK_CONFORMANCE:-$(dirname "$ROOT")/shared/conformance/run.lua}

step "make CC=clang BUILD=build/clang all (-Werror)" make -s -j2 CC=clang BUILD=build/clang all || exit 0

export LUA_CPATH="$ROOT/build/clang/?.so;;"
if [[ -f $SUITE ]]; then
  out=build/stages/clang-conformance.out
  "$LUA" "$SUITE" >"$out" 2>&1 </dev/null
  "$LUA" spec/stages/conformance_tap.lua "$SUITE" "$out" "$?"
else
  echo "ok - conformance suite under Clang # SKIP not found at $SUITE (CI puts shared/ beside the repo)"
fi
run_tap clang-specs "$LUA" "$BUSTED" -o TAP --cpath="$ROOT/build/clang/?.so" \
  spec/complex_spec.lua spec/gemm_spec.lua spec/blas_spec.lua spec/sort_spec.lua spec/cpu_spec.lua \
  spec/create_spec.lua spec/views_spec.lua spec/functions_spec.lua spec/compute_attack_spec.lua
