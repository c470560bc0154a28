-- The two-process dlpack.ipc tests of CUDA tensors alone (spec/cuda/ipc_suite.lua, which the whole
-- CUDA suite spec/cuda/run.lua runs too), for a short check on a GPU machine:
--   bash spec/gpu/prepare.sh build && lua5.4 spec/gpu/ipc.lua
-- (`prepare.sh run` runs it as well, into gpu-ipc.tap). Against the real driver by default; the
-- fake one when DLPACK_LUA_CUDA_DRIVER names it. TAP, then "# N passed, M failed, K skipped";
-- exit status 0 only when nothing failed. Without a driver: "1..0 # SKIP <reason>".
-- It is spec/cuda/run.lua --ipc (which knows this file's name).
local root = (arg and arg[0] or ""):match("^(.*)/spec/gpu/[^/]*$") or "."
dofile(root .. "/spec/cuda/run.lua")
