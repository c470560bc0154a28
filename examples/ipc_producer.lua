-- examples/ipc_producer.lua: camera-like frames for another process, without copying them
-- (docs/ipc.md). The reading side is examples/ipc_consumer.lua.
--
-- The producer owns a pool of three {480, 640, 3} uint8 frames in shareable memory (a sealed
-- memfd each, made once). For every frame it takes a free buffer, writes the frame into it
-- (the frame counter in the bytes of pixel (1, 1), the buffer's index in pixel (1, 2), every
-- other byte counter % 251) and sends it: only a descriptor and the layout cross the socket,
-- never the 921,600 bytes. The consumer sends each buffer back when it is done with it, after
-- writing a mark into it; the producer finds that mark in its own tensor (zero-copy both
-- ways), and only then writes into that buffer again, so no frame is overwritten while it is
-- being read.
--
-- Run either side first, in two terminals (the one started first waits up to 30 s):
--   lua5.4 examples/ipc_consumer.lua           then   lua5.4 examples/ipc_producer.lua
-- or both at once, the producer starting the consumer with the same interpreter and paths:
--   lua5.4 examples/ipc_producer.lua --spawn
-- Options: --frames N (default 300), --path P (socket path; '@name' is the abstract
-- namespace, no file; default @dlpack-ipc-demo).
-- From a checkout, the module paths: LUA_PATH='lua/?.lua;;' LUA_CPATH='build/?.so;;' (the
-- Makefile exports them), or `make LUA=luajit` and LUA_CPATH='build/luajit/?.so;;' for LuaJIT.
local ipc = require "dlpack.ipc"

local path, count, spawn = "@dlpack-ipc-demo", 300, false
local i = 1
while arg[i] do
  if arg[i] == "--path" and arg[i + 1] then
    path, i = arg[i + 1], i + 2
  elseif arg[i] == "--frames" and tonumber(arg[i + 1]) then
    count, i = tonumber(arg[i + 1]), i + 2
  elseif arg[i] == "--spawn" then
    spawn, i = true, i + 1
  else
    io.stderr:write("usage: ipc_producer.lua [--frames N] [--path P] [--spawn]\n")
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

local listener = ipc.listen(path)
local consumer -- --spawn: the consumer's output, read at the end
if spawn then
  -- The interpreter running this script (arg[-1] and below) and its module paths.
  local lua = "lua5.4"
  for k = -1, -10, -1 do
    if not arg[k] then break end
    lua = arg[k]
  end
  local script = (arg[0] or "examples/ipc_producer.lua"):gsub("ipc_producer%.lua$", "ipc_consumer.lua")
  local paths = ("package.path = [==[%s]==]; package.cpath = [==[%s]==]"):format(package.path, package.cpath)
  local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
  consumer = assert(io.popen(("%s -e %s %s --path %s 2>&1"):format(lua, quote(paths), quote(script), quote(path))))
else
  print("producer: waiting for a consumer at " .. path .. " (lua5.4 examples/ipc_consumer.lua)")
end
local ch = listener:accept(30)
listener:close() -- one consumer; a file path's socket file goes with the listener
if not ch then
  io.stderr:write("producer: no consumer connected within 30 s\n")
  os.exit(1)
end

local H, W = 480, 640
local pool = {ipc.zeros({H, W, 3}, "uint8"), ipc.zeros({H, W, 3}, "uint8"), ipc.zeros({H, W, 3}, "uint8")}
local free, holds = {1, 2, 3}, {} -- holds[k]: the frame number buffer k went out with
local marked, checksum = 0, 0

-- Take back the buffers the consumer returned: wait up to `timeout` for the first one.
local function take_back(timeout)
  local back = ch:recv(timeout)
  while back do
    local k = back:get(1, 2, 1)
    back:release()
    -- the consumer's mark, seen in this process's own tensor: the memory is shared
    if pool[k]:get(H, W, 3) == (holds[k] % 251 + 1) % 256 then marked = marked + 1 end
    free[#free + 1], holds[k] = k, nil
    back = ch:recv(0)
  end
end

local start = now()
for n = 0, count - 1 do
  if #free == 0 then take_back(10) else take_back(0) end
  local k = table.remove(free)
  if not k then error("producer: the consumer returned no buffer within 10 s") end
  local frame, value = pool[k], n % 251
  frame:fill(value)
  frame:set(1, 1, 1, n % 256)
  frame:set(1, 1, 2, math.floor(n / 256) % 256)
  frame:set(1, 1, 3, math.floor(n / 65536) % 256)
  frame:set(1, 2, 1, k)
  local header = n % 256 + math.floor(n / 256) % 256 + math.floor(n / 65536) % 256 + k
  checksum = (checksum + value * (H * W * 3 - 4) + header) % 4294967296
  holds[k] = n
  ch:send(frame) -- a descriptor and the layout: no copy of the frame
end
while #free < #pool do take_back(10) end -- the last frames come back
local seconds = math.max(now() - start, 0.01)
ch:close()

print(("producer: %d frames of %dx%dx3 uint8 in %.2f s: %.0f frames/s, %.0f MB/s of frames written; " ..
       "%d of %d came back with the consumer's mark in this process's own buffer (zero-copy); checksum %08x")
      :format(count, H, W, seconds, count / seconds, count * H * W * 3 / seconds / 1e6, marked, count, checksum))
if consumer then
  io.write(consumer:read("*a"))
  consumer:close()
end
