-- The other process of the CUDA dlpack.ipc tests (spec/cuda/ipc_suite.lua), started by them:
--   lua5.4 spec/cuda/ipc_peer.lua PATH MODE
-- connects to the listener at PATH and, for every tensor it receives, prints one line
--   got <device> <dtype> <shape> <strides> <shareable> <readonly> <hex bytes, or "-" when not contiguous>
-- then, by MODE: "echo" sends the tensor back as it came (forwarding: zero-copy), "write" first
-- fills it with 119 (unless it is read-only or not contiguous) and then sends it back. It ends,
-- printing "end <the error>", when the channel closes or fails.
local dlpack = require "dlpack"
local ipc = require "dlpack.ipc"

local path, mode = arg[1], arg[2]
local ch = ipc.connect(path, 20)
if not ch then
  print("end nobody listens at " .. tostring(path))
  os.exit(1)
end

local function hex(s)
  return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

local function show(list)
  local parts = {}
  for i = 1, #list do parts[i] = tostring(list[i]) end
  return "{" .. table.concat(parts, ",") .. "}"
end

while true do
  local ok, t = pcall(ch.recv, ch, 20)
  if not ok or not t then
    print("end " .. tostring(t))
    break
  end
  local bytes = t:is_contiguous() and hex(t:to("cpu"):tobytes()) or "-"
  print(table.concat({"got", t.device, t.dtype, show(t.shape), show(t.strides), tostring(t.shareable),
                      tostring(t.readonly), bytes}, " "))
  io.stdout:flush()
  if mode == "write" and not t.readonly and t:is_contiguous() then t:copy(dlpack.full(t.shape, 119, t.dtype)) end
  ch:send(t)
end
ch:close()
