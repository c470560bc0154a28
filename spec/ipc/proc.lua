--- What the dlpack.ipc specs read in /proc, shared by spec/ipc_spec.lua and its other process
-- (spec/ipc/peer.lua).
local proc = {}

-- This process's id (read by this process itself, not by a child it starts).
function proc.pid()
  local f = assert(io.open("/proc/self/stat"))
  local id = f:read("*l"):match("^(%d+)")
  f:close()
  return id
end

-- The entries of /proc/ID/fd of process id, listed by ls: counted from the other process,
-- since a process that runs ls has the pipe's ends for a moment; the fewest of three listings,
-- since the other may still be closing what it released after its last message.
function proc.fds_of(id)
  local fewest = math.huge
  for _ = 1, 3 do
    local p = assert(io.popen("ls -1 /proc/" .. id .. "/fd"))
    local n = 0
    for _ in p:lines() do n = n + 1 end
    p:close()
    fewest = math.min(fewest, n)
  end
  return fewest
end

-- The mappings of this process (lines of /proc/self/maps), after a full collection.
function proc.maps()
  collectgarbage()
  collectgarbage()
  local n = 0
  for _ in io.lines("/proc/self/maps") do n = n + 1 end
  return n
end

-- Mappings of this module's memfds that are writable.
function proc.writable_memfd_maps()
  local n = 0
  for line in io.lines("/proc/self/maps") do
    if line:find("memfd:dlpack", 1, true) and line:match("^%S+%s+.w") then n = n + 1 end
  end
  return n
end

return proc
