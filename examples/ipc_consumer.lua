-- examples/ipc_consumer.lua: the reading side of examples/ipc_producer.lua (docs/ipc.md).
--
-- A game loop: every tick polls the channel with recv(0), which returns nil at once when no
-- frame is there, so the loop never blocks on the producer. Each frame ({480, 640, 3} uint8)
-- arrives without a copy: the tensor maps the producer's own memory. The consumer checks it
-- (its frame counter, and a sum of all its bytes against the value the header says), writes a
-- mark into it, and sends it back: the producer reuses the buffer, and finds the mark in its
-- own tensor, which only shared memory explains. The frames/s it prints include that sum over
-- every byte of every frame, which costs more than passing the frame.
--
-- Run either side first, in two terminals (the one started first waits up to 30 s):
--   lua5.4 examples/ipc_consumer.lua           then   lua5.4 examples/ipc_producer.lua
-- or both at once: lua5.4 examples/ipc_producer.lua --spawn (it starts this consumer itself).
-- Options: --path P (socket path; '@name' is the abstract namespace; default @dlpack-ipc-demo).
-- From a checkout, the module paths: LUA_PATH='lua/?.lua;;' LUA_CPATH='build/?.so;;' (the
-- Makefile exports them), or `make LUA=luajit` and LUA_CPATH='build/luajit/?.so;;' for LuaJIT.
local ipc = require "dlpack.ipc"

local path = "@dlpack-ipc-demo"
local i = 1
while arg[i] do
  if arg[i] == "--path" and arg[i + 1] then
    path, i = arg[i + 1], i + 2
  else
    io.stderr:write("usage: ipc_consumer.lua [--path P]\n")
    os.exit(2)
  end
end

-- Wall-clock seconds, to 10 ms (Linux, as dlpack.ipc is).
local function now()
  local f = assert(io.open("/proc/uptime"))
  local s = f:read("*n")
  f:close()
  return s
end

local ch = ipc.connect(path, 30) -- waits up to 30 s for the producer to listen
if not ch then
  io.stderr:write("consumer: nobody listened at ", path, " within 30 s\n")
  os.exit(1)
end

local H, W = 480, 640
local frames, polls, checksum, expected = 0, 0, 0, 0
local start
while true do
  local ok, frame = pcall(ch.recv, ch, 0) -- one poll per tick
  if not ok then
    if not tostring(frame):find("closed", 1, true) then error(frame, 0) end
    break -- the producer is done (or gone)
  end
  if frame then
    start = start or now()
    -- The header the producer wrote: the frame counter in the bytes of pixel (1, 1), the
    -- buffer's index in pixel (1, 2); every other byte holds counter % 251.
    local count = frame:get(1, 1, 1) + 256 * frame:get(1, 1, 2) + 65536 * frame:get(1, 1, 3)
    if count ~= expected then error(("consumer: frame %d arrived where %d was due"):format(count, expected)) end
    local value = count % 251
    local header = frame:get(1, 1, 1) + frame:get(1, 1, 2) + frame:get(1, 1, 3) + frame:get(1, 2, 1)
    local sum = frame:sum() -- reads every byte of the producer's memory
    if sum ~= value * (H * W * 3 - 4) + header then
      error(("consumer: frame %d sums to %.0f, not what its header says"):format(count, sum))
    end
    checksum = (checksum + sum) % 4294967296
    frame:set(H, W, 3, (value + 1) % 256) -- the mark the producer looks for in its own buffer
    ch:send(frame) -- give the buffer back (zero-copy too)
    frame:release() -- unmap it now rather than at the next collection
    frames, expected = frames + 1, expected + 1
  else
    polls = polls + 1 -- a tick with no new frame: a game would draw the last one again
  end
end
ch:close()

local seconds = start and math.max(now() - start, 0.01) or 0.01
print(("consumer: %d frames of %dx%dx3 uint8 in %.2f s: %.0f frames/s, %.0f MB/s of frames read; " ..
       "%d empty polls; checksum %08x"):format(frames, H, W, seconds, frames / seconds,
       frames * H * W * 3 / seconds / 1e6, polls, checksum))
