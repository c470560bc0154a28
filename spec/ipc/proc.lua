--- What the dlpack.ipc specs read in /proc, in one place: spec/ipc_spec.lua and its other process
-- (spec/ipc/peer.lua), spec/ipc_attack_spec.lua, spec/ipc_hostile_spec.lua,
-- spec/ipc_python_spec.lua, spec/cuda_spec.lua and spec/cuda/ipc_suite.lua.
local proc = {}

-- This process's id (read by this process itself, not by a child it starts).
function proc.pid()
  local f = assert(io.open("/proc/self/stat"))
  local id = f:read("*l"):match("^(%d+)")
  f:close()
  return id
end

local PID = proc.pid()

-- The open descriptors of process id (default: this one), as "N -> target" lines. A child lists
-- them (`ls -l`), less its own pipe: the listing's output goes through a pipe of which this process
-- holds one end, and popen may not have closed the other end yet while `ls` runs. With only ==
-- "ipc", sockets and memfds alone: what dlpack.ipc makes (the pipes and files that popen and
-- io.open make come and go).
local function listing(id, only)
  local p = assert(io.popen("me=$(readlink /proc/$$/fd/1); ls -l /proc/" .. (id or PID) .. "/fd 2>/dev/null | "
                            .. "grep -vF \"$me\""))
  local lines = {}
  for line in p:lines() do
    local entry = line:match("(%d+ %-> .*)$")
    if entry and (only ~= "ipc" or entry:find("-> socket:", 1, true) or entry:find("-> /memfd:", 1, true)) then
      lines[#lines + 1] = entry
    end
  end
  p:close()
  return lines
end

-- How many descriptors process id (default: this one) has open, and their listing (for an
-- assertion's message). opts: only = "ipc" (sockets and memfds alone), collect = true (a full
-- collection first: garbage tensors, channels and listeners hold descriptors, and a generational
-- or incremental collector would otherwise close some of them in the middle of a count).
function proc.descriptors(id, opts)
  opts = opts or {}
  if opts.collect then
    collectgarbage()
    collectgarbage()
  end
  local lines = listing(id, opts.only)
  return #lines, table.concat(lines, "\n")
end

-- The descriptors of another process (id): the fewest of three listings, since the other may
-- still be closing what it released after its last message.
function proc.fds_of(id)
  local fewest = math.huge
  for _ = 1, 3 do fewest = math.min(fewest, (proc.descriptors(id))) end
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

-- Mappings of memfds in this process (any: this module's, Python's, the fake CUDA driver's).
function proc.memfd_maps()
  local n = 0
  for line in io.lines("/proc/self/maps") do
    if line:find("memfd:", 1, true) then n = n + 1 end
  end
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
