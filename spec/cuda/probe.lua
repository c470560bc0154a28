-- What the CUDA suite needs to see and do beside the module, on either driver:
--
--   fake  the fake driver of spec/c/fakecuda.c (module `fakecuda`), loaded by the
--         module through DLPACK_LUA_CUDA_DRIVER: its streams are lazy queues that
--         run only when forced, it counts every driver call and can fail one.
--   gpu   a real driver and GPU, seen through `gpu_kernels` (spec/gpu/kernels.cu,
--         built with nvcc): work is delayed by a sleep kernel instead.
--
-- Both give:
--   probe.kind                        "fake" or "gpu"
--   probe.write(stream, ptr, bytes [, device])
--                                     queue a write of bytes to device memory on a stream,
--                                     behind later-running work (gpu: a 100 ms kernel)
--   probe.hold(stream [, device])     make work queued next on the stream stay pending
--                                     for a while (fake: nothing runs until forced anyway)
--   probe.pending(stream [, device])  true while the stream has unfinished work
--   probe.read(ptr, n)                n bytes of CUDA memory now, without waiting for any stream
--   probe.allocation(ptr)             {kind = "device"|"host"|"managed", device = ordinal}
--   probe.sync_all()                  finish every stream of every device
--   probe.errors(), probe.error_log() misuse of the driver the fake saw (gpu: 0, {})
-- and, for the tests that need one of them:
--   probe.fake                        the fakecuda module (counts, fault injection), or nil
--   probe.kernels                     the gpu_kernels module (sleep, fill, count_ne, ...), or nil
--   probe.no_kernels                  why probe.kernels is nil
local probe = {}

-- The fake is the library DLPACK_LUA_CUDA_DRIVER names (one instance with the module's driver:
-- build/fakecuda.so, or build/old-driver/fakecuda.so), else whatever `require` finds.
local function load_fake()
  local path = os.getenv("DLPACK_LUA_CUDA_DRIVER")
  local open = path and path ~= "" and package.loadlib(path, "luaopen_fakecuda")
  if open then
    package.loaded.fakecuda = open()
    return true, package.loaded.fakecuda
  end
  return pcall(require, "fakecuda")
end
local fake_ok, fake = load_fake()
if fake_ok and fake.initialized() then
  probe.kind, probe.fake = "fake", fake
  probe.write = fake.write
  probe.hold = function() end
  probe.pending = function(stream, device) return fake.pending(stream, device) > 0 end
  probe.read = fake.read
  probe.allocation = fake.allocation
  probe.sync_all = fake.sync_all
  probe.errors = fake.errors
  probe.error_log = fake.error_log
  probe.no_kernels = "the fake driver runs no kernels"
  return probe
end

probe.kind = "gpu"
local ok, kernels = false, "DLPACK_GPU_NO_KERNELS is set"
if (os.getenv("DLPACK_GPU_NO_KERNELS") or "") == "" then ok, kernels = pcall(require, "gpu_kernels") end
if not ok then
  probe.no_kernels = "gpu_kernels is not loaded (make gpu-build builds it with nvcc): " .. tostring(kernels)
  local function missing() error(probe.no_kernels, 2) end
  probe.write, probe.hold, probe.pending, probe.read, probe.allocation = missing, missing, missing, missing, missing
  probe.sync_all = function() end
else
  probe.kernels = kernels
  local DELAY_MS = 100
  probe.write = function(stream, ptr, bytes, device) kernels.write(stream, ptr, bytes, DELAY_MS, device) end
  probe.hold = function(stream, device) kernels.sleep(stream, DELAY_MS, device) end
  probe.pending = kernels.pending
  probe.read = kernels.read
  probe.allocation = kernels.allocation
  probe.sync_all = kernels.sync_all
end
probe.errors = function() return 0 end
probe.error_log = function() return {} end
return probe
