-- luacheck: std +busted
-- The two-process dlpack.ipc tests of CUDA tensors alone (spec/cuda/ipc_suite.lua, which the whole
-- CUDA suite spec/cuda/run.lua runs too), for a short check on a GPU machine:
--   bash spec/gpu/prepare.sh build && lua5.4 spec/gpu/ipc.lua
-- (`prepare.sh run` runs it as well, into gpu-ipc.tap). Against the real driver by default; the
-- fake one when DLPACK_LUA_CUDA_DRIVER names it. TAP, then "# N passed, M failed, K skipped";
-- exit status 0 only when nothing failed. Without a driver: "1..0 # SKIP <reason>".
local root = (arg and arg[0] or ""):match("^(.*)/spec/gpu/[^/]*$") or "."
local build = os.getenv("DLPACK_BUILD") or (root .. "/build")
package.path = table.concat({root .. "/lua/?.lua", root .. "/lua/?/init.lua", root .. "/spec/cuda/?.lua",
                             root .. "/spec/?.lua", package.path}, ";")
package.cpath = table.concat({build .. "/?.so", build .. "/gpu/?.so", package.cpath}, ";")

require "helper"
local harness = require "harness"
harness.install()

local loaded, dlpack = pcall(require, "dlpack")
if not loaded then
  print("Bail out! cannot load dlpack: " .. tostring(dlpack))
  os.exit(1)
end
local available, why = dlpack.cuda.is_available()
if not available then
  print("1..0 # SKIP CUDA is not available: " .. tostring(why))
  os.exit(0)
end

local probe = require "probe"
print("TAP version 13")
print(string.format("# dlpack.ipc on CUDA: %s driver, %d device(s)%s", probe.kind, dlpack.cuda.device_count(),
                    probe.kernels and ", gpu_kernels loaded" or ""))

-- as the CUDA suite does around every test: no misuse of the driver (the fake counts it)
local errors_before
before_each(function()
  collectgarbage()
  collectgarbage()
  probe.sync_all()
  errors_before = probe.errors()
end)
after_each(function()
  collectgarbage()
  collectgarbage()
  assert.are.equal(errors_before, probe.errors(), table.concat(probe.error_log(), "\n"))
end)

require "ipc_suite"
os.exit(harness.run() == 0 and 0 or 1)
