-- bench/ipc_echo.lua PATH: the other process of the dlpack.ipc rows of bench/run.lua, started
-- by it with the same interpreter and module paths. Connects to PATH and, until the channel
-- closes, sends back every tensor it receives (then releases it); a 1-d int64 tensor
-- {nbytes, chunk, n} is a command instead: n times, read nbytes of raw bytes from the channel's
-- socket and write them back in records of at most chunk bytes (bench/baselines.c,
-- bytes_in_out), the baseline of a tensor's bytes crossing the same socket.
local dlpack = require "dlpack"
local ipc = require "dlpack.ipc"
local base = require "bench.baselines"

local ch = assert(ipc.connect(arg[1], 10), "no listener at " .. tostring(arg[1]))
local buf
while true do
  local ok, t = pcall(ch.recv, ch)
  if not ok then
    assert(tostring(t):find("closed", 1, true), t)
    break
  end
  if t.dtype == "int64" then
    local nbytes, chunk, n = t[1], t[2], t[3]
    t:release()
    if not buf or buf.nbytes < nbytes then buf = dlpack.empty({nbytes}, "uint8") end
    base.bytes_in_out(ch:fileno(), buf, nbytes, chunk, n)
  else
    ch:send(t)
    t:release()
  end
end
ch:close()
