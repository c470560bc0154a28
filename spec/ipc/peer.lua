-- The other process of spec/ipc_spec.lua: connects to the spec's listener and plays one part.
--   lua -e 'package.path = ...; package.cpath = ...' spec/ipc/peer.lua PATH MODE
-- (the spec passes its own package paths with -e, which every Lua and LuaJIT take before the
-- script). Prints "ok" and exits 0 when its part went as planned; an error ends it with the
-- message on stderr and status 1. The modes:
--   echo     sends back every tensor it receives and releases it, until the spec closes the
--            channel; a 0-d uint16 tensor holding 1 is a command instead: collect garbage and
--            send back {pid of this process, its mappings, descriptors of the spec's process}
--            (int64; the spec's pid is the third argument)
--   mirror   for every tensor r received: sends back r itself, r:clone() (not shareable, so
--            copied by default), and an int64 tensor {ndim, readonly, shareable, writable memfd
--            mappings, shape..., strides...} of what arrived here
--   readonly receives a tensor, tries to write it three ways, sends back {readonly, fill raised,
--            index assignment raised, writable memfd mappings} (int64)
--   write    zero-copy both ways: receives r, writes 10, 20, 30, 40 into it, sends r back as a
--            token; receives a token and sends back r's values as a plain copy; then sends a
--            shareable tensor of its own, waits for a token and sends back that tensor's values
--   kill     sends a shareable {5} float64 tensor 1.5, 2.5, ... then SIGKILLs itself
--   close    closes the channel at once and exits
local dlpack = require "dlpack"
local ipc = require "dlpack.ipc"

local path, mode = arg[1], arg[2] -- and the spec's pid in echo mode
local ch = assert(ipc.connect(path, 10), "no listener at " .. tostring(path))

local proc = require "ipc.proc"
local pid, fds_of, maps, writable_memfd_maps = proc.pid, proc.fds_of, proc.maps, proc.writable_memfd_maps

-- recv until the spec closes the channel: nil then.
local function next_tensor()
  local ok, t = pcall(ch.recv, ch, 10)
  if not ok then
    assert(tostring(t):find("closed", 1, true), t)
    return nil
  end
  return assert(t, "nothing came within 10 s")
end

if mode == "echo" then
  -- LuaJIT maps machine code for the traces it compiles, whenever it compiles one: off, as the
  -- spec counts the mappings of this process.
  if rawget(_G, "jit") then rawget(_G, "jit").off() end
  while true do
    local t = next_tensor()
    if not t then break end
    if t.ndim == 0 and t.dtype == "uint16" and t:item() == 1 then
      t:release()
      local reply = ipc.share(dlpack.tensor({tonumber(pid()), maps(), fds_of(arg[3])}, "int64"))
      ch:send(reply)
      reply:release()
    else
      ch:send(t)
      t:release()
    end
  end
elseif mode == "mirror" then
  while true do
    collectgarbage() -- unmaps what earlier rounds sent, for the count of writable mappings
    collectgarbage()
    local r = next_tensor()
    if not r then break end
    local info = {r.ndim, r.readonly and 1 or 0, r.shareable and 1 or 0, writable_memfd_maps()}
    for _, n in ipairs(r.shape) do info[#info + 1] = n end
    for _, n in ipairs(r.strides) do info[#info + 1] = n end
    ch:send(r)
    ch:send(r:clone())
    ch:send(dlpack.tensor(info, "int64"))
    r:release()
  end
elseif mode == "readonly" then
  local r = assert(next_tensor())
  local fill_raised = not pcall(r.fill, r, 7)
  local index_raised = not pcall(function() r[1] = 7 end)
  ch:send(dlpack.tensor({r.readonly and 1 or 0, fill_raised and 1 or 0, index_raised and 1 or 0,
                         writable_memfd_maps()}, "int64"))
  assert(next_tensor() == nil)
elseif mode == "write" then
  local r = assert(next_tensor())
  for i = 1, 4 do r[i] = 10 * i end
  ch:send(r)
  assert(next_tensor())
  ch:send(dlpack.tensor(r:totable(), "int32"))
  local mine = ipc.zeros({3}, "int32")
  ch:send(mine)
  assert(next_tensor())
  ch:send(dlpack.tensor(mine:totable(), "int32"))
  assert(next_tensor() == nil)
elseif mode == "kill" then
  ch:send(ipc.share(dlpack.tensor({1.5, 2.5, 3.5, 4.5, 5.5}, "float64")))
  os.execute("kill -KILL " .. pid())
  error("still alive after SIGKILL")
elseif mode == "close" then
  ch:close()
else
  error("unknown mode " .. tostring(mode))
end
ch:close()
print("ok")
