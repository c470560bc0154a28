-- luacheck: std +busted
-- Runs the CUDA suite (spec/cuda/suite.lua) with plain Lua, no busted: prints
-- TAP and ends with "# N passed, M failed, K skipped"; exits 0 only when nothing
-- failed. From the repository root, after `make` (and `make gpu-build` on a GPU
-- machine, for the kernels the hardware tests use):
--   lua5.4 spec/cuda/run.lua            (--ipc: only spec/cuda/ipc_suite.lua, as spec/gpu/ipc.lua)
-- The driver is the system's libcuda, or the library DLPACK_LUA_CUDA_DRIVER
-- names (the fake driver, build/fakecuda.so; .dll on Windows). Without one it prints
-- "1..0 # SKIP <reason>" and exits 0. Module paths: the in-tree lua/ and spec/,
-- then $DLPACK_BUILD (default build/) and its gpu/ folder, come first.
local root = (arg and arg[0] or ""):match("^(.*)/spec/%w+/[^/]*$") or "." -- spec/gpu/ipc.lua runs it too
local build = os.getenv("DLPACK_BUILD") or (root .. "/build")
package.path = table.concat({root .. "/lua/?.lua", root .. "/lua/?/init.lua", root .. "/spec/cuda/?.lua",
                             root .. "/spec/?.lua", package.path}, ";")
local so = package.config:sub(1, 1) == "\\" and "dll" or "so" -- Windows (stage 47): DLLs
package.cpath = table.concat({build .. "/?." .. so, build .. "/gpu/?." .. so, package.cpath}, ";")

require "helper" -- DLPACK_SPEC_GC: the collector mode, as for the busted specs
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
print(string.format("# dlpack %s, %s, %s driver, %d CUDA device(s)%s", dlpack._VERSION, _VERSION, probe.kind,
                    dlpack.cuda.device_count(), probe.kernels and ", gpu_kernels loaded" or ""))
if arg and (arg[1] == "--ipc" or (arg[0] or ""):match("spec/gpu/ipc%.lua$")) then
  -- the two-process dlpack.ipc tests alone (spec/gpu/ipc.lua), with the check the suite makes
  -- around every test: no misuse of the driver (the fake counts it)
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
else
  dofile(root .. "/spec/cuda/suite.lua")
end
os.exit(harness.run() == 0 and 0 or 1)
