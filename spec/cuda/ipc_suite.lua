-- luacheck: std +busted
-- dlpack.ipc with CUDA tensors: part of the CUDA suite (spec/cuda/suite.lua loads it), so it runs
-- against the fake driver in `make test` (stage 45) and unchanged against a real GPU (docs/gpu.md).
-- Two processes: this one and spec/cuda/ipc_peer.lua (a Lua peer that reports what it received,
-- writes into it and sends it back) or spec/cuda/ipc_hostile.py (crafted messages). The fake
-- driver backs cuMemCreate with memfds, so the two processes share its "device memory" as two
-- processes share a GPU's.
local dlpack = require "dlpack"
-- Windows (package.config's directory separator): dlpack.ipc does not exist there (it passes POSIX
-- descriptors over AF_UNIX sockets; require raises), nor does the fake's cuMemCreate (801).
if package.config:sub(1, 1) == "\\" then
  describe("dlpack.ipc with CUDA tensors", function()
    pending("not on Windows: dlpack.ipc needs POSIX descriptors and AF_UNIX sockets")
  end)
  return
end
local ipc = require "dlpack.ipc"
local support = require "support"
local probe = require "probe"
local fake = probe.fake

local cuda = dlpack.cuda
local raises = support.raises

local DIR = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$")) or "spec/cuda"
local MIB2 = 2 * 1024 * 1024

-- the interpreter running this suite, for the peer
local function interpreter()
  local i = -1
  while arg and arg[i - 1] do i = i - 1 end
  return arg and arg[i] or "lua5.4"
end

local function quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local procfs = require "ipc.proc"
local PID = procfs.pid()

local serial = 0
local function new_path()
  serial = serial + 1
  return ("@dlpack-cuda-ipc-%s-%d"):format(PID, serial)
end

-- descriptors this process has open now (spec/ipc/proc.lua: less the pipe to the command that lists them)
local function open_fds()
  return (procfs.descriptors())
end

local function hex(s)
  return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

local function host_bytes(t)
  return t:to("cpu"):tobytes()
end

local function u8(s)
  return dlpack.frombytes(s, "uint8")
end

local function gc()
  collectgarbage()
  collectgarbage()
end

-- A channel to a new peer process (ipc_peer.lua in mode, or the command cmd given the path) and
-- the peer's output (a popen handle).
local function start(mode, cmd)
  local path = new_path()
  local l = ipc.listen(path)
  local env = ("LUA_PATH=%s LUA_CPATH=%s "):format(quote(package.path), quote(package.cpath))
  cmd = cmd and cmd(path)
    or (quote(interpreter()) .. " " .. quote(DIR .. "/ipc_peer.lua") .. " " .. quote(path) .. " " .. mode)
  local proc = assert(io.popen(env .. cmd .. " 2>&1"))
  local ch = l:accept(30)
  l:close()
  if not ch then error("the peer did not connect: " .. tostring(proc:read("a"))) end
  return ch, proc
end

-- Close the channel; the peer's remaining output, after it exited with status 0 (unless any_status:
-- Python under a sanitizer's LD_PRELOAD may exit with LeakSanitizer's status, for its own leaks).
local function finish(ch, proc, any_status)
  ch:close()
  local rest = proc:read("a")
  local ok, _, code = proc:close()
  assert.is_true(any_status or (ok == true and code == 0),
                 "the peer failed (status " .. tostring(code) .. "):\n" .. rest)
  return rest
end

-- the line ipc_peer.lua prints for a tensor
local function line_for(device, dtype, shape, strides, readonly, bytes)
  return table.concat({"got", device, dtype, "{" .. table.concat(shape, ",") .. "}",
                       "{" .. table.concat(strides, ",") .. "}", "true", tostring(readonly), bytes}, " ")
end

local function fake_it(name, fn)
  if fake then it(name, fn) else pending(name .. ": needs the fake driver") end
end
-- tests that queue work which runs late (fake: queues run when forced; GPU: gpu_kernels' slow writes)
local function writer_it(name, fn)
  if fake or probe.kernels then
    it(name, fn)
  else
    pending(name .. ": needs gpu_kernels: " .. tostring(probe.no_kernels))
  end
end
local has_python = os.execute("python3 -c 'import os; os.memfd_create' >/dev/null 2>&1")
local function python_it(name, fn)
  if has_python == true or has_python == 0 then
    it(name, fn)
  else
    pending(name .. ": needs python3 with os.memfd_create")
  end
end

describe("dlpack.ipc with CUDA tensors", function()
  it("ipc.zeros and ipc.empty on cuda:N make shareable, zeroed device memory", function()
    for device = 0, cuda.device_count() - 1 do
      local name = "cuda:" .. device
      local z = ipc.zeros({3, 5}, "float32", name)
      assert.is_true(z.shareable, name)
      assert.are.equal(name, z.device)
      assert.are.equal(string.rep("\0", 60), host_bytes(z), name)
      local e = ipc.empty({7}, "uint8", name)
      assert.is_true(e.shareable, name)
      assert.are.equal(string.rep("\0", 7), host_bytes(e), name) -- zeroed too (the fake fills new memory with 0xA5)
      if fake then
        local a = probe.allocation(z:data_ptr())
        assert.are.equal(device, a.device, name)
        assert.are.equal(MIB2, a.size, name .. ": one granule of 2 MiB")
      end
    end
    local empty = ipc.zeros({0}, "float32", "cuda:0")
    assert.is_true(empty.shareable)
    assert.is_false(dlpack.zeros({2}, "uint8", "cuda:0").shareable)
    raises(function() ipc.zeros({2}, "uint8", "cuda:" .. cuda.device_count()) end, "no cuda device")
    raises(function() ipc.zeros({2}, "uint8", "cuda_host") end, "not supported")
  end)

  it("ipc.share copies a device tensor into shareable device memory, once", function()
    local d = dlpack.zeros({4}, "uint8", "cuda:0")
    d:copy(u8("abcd"))
    local s = ipc.share(d)
    assert.is_true(s.shareable)
    assert.are.equal("cuda:0", s.device)
    assert.are.equal("abcd", host_bytes(s))
    assert.are.equal(s, ipc.share(s))
  end)

  it("values, dtypes and views travel; each side sees the other's writes (zero-copy both ways)", function()
    local ch, proc = start("write")
    local cases = {
      {"float32", {2, 3}, string.pack("<ffffff", 1, 2, 3, 4, 5, 6)},
      {"uint8", {5}, "hello"},
      {"int64", {2}, string.pack("<i8i8", -1, 1 << 40)},
      {"float64", {}, string.pack("<d", 0.25)},
    }
    for _, c in ipairs(cases) do
      local dtype, shape, bytes = c[1], c[2], c[3]
      local t = ipc.zeros(shape, dtype, "cuda:0")
      t:copy(dlpack.frombytes(bytes, dtype, shape))
      ch:send(t)
      local strides = t.strides
      assert.are.equal(line_for("cuda:0", dtype, shape, strides, false, hex(bytes)), proc:read("l"), dtype)
      local back = ch:recv(30) -- the same memory, mapped a second time
      assert.is_true(back.shareable)
      assert.are.equal("cuda:0", back.device)
      local written = host_bytes(dlpack.full(shape, 119, dtype))
      assert.are.equal(hex(written), hex(host_bytes(t)), dtype .. ": the sender sees the receiver's write")
      assert.are.equal(hex(written), hex(host_bytes(back)), dtype)
    end
    -- a view with an offset: rows 2 and 3 of 4
    local m = ipc.zeros({4, 3}, "uint8", "cuda:0")
    m:copy(dlpack.frombytes("abcdefghijkl", "uint8", {4, 3}))
    ch:send(m:slice(1, 2, 3))
    assert.are.equal(line_for("cuda:0", "uint8", {2, 3}, {3, 1}, false, hex("defghi")), proc:read("l"))
    local rows = ch:recv(30)
    assert.are.same({2, 3}, rows.shape)
    assert.are.equal("abc" .. string.rep("w", 6) .. "jkl", host_bytes(m), "only the rows sent were written")
    -- a reversed view travels as one (the peer cannot read it back: CUDA copies are contiguous)
    ch:send(m:slice(1, -1, 1, -1))
    assert.are.equal(line_for("cuda:0", "uint8", {4, 3}, {-3, 1}, false, "-"), proc:read("l"))
    local reversed = ch:recv(30)
    assert.are.same({-3, 1}, reversed.strides)
    assert.are.equal("abcwwwwwwjkl", host_bytes(reversed:slice(1, -1, 1, -1)))
    -- a flag: read-only on the other side (advisory for CUDA memory: docs/ipc.md)
    ch:send(m, {readonly = true})
    assert.are.equal(line_for("cuda:0", "uint8", {4, 3}, {3, 1}, true, hex("abcwwwwwwjkl")), proc:read("l"))
    assert.is_true(ch:recv(30).readonly)
    assert.are.equal("abcwwwwwwjkl", host_bytes(m), "a read-only tensor is not written")
    assert.is_truthy(finish(ch, proc):find("closed"))
  end)

  it("a device tensor that is not shareable is copied into shareable memory, or refused with copy = false", function()
    local ch, proc = start("write")
    local d = dlpack.zeros({4}, "uint8", "cuda:0")
    d:copy(u8("abcd"))
    local err = raises(function() ch:send(d, {copy = false}) end, "not in shareable memory")
    assert.is_true(dlpack.is_buffer_error(err), tostring(err))
    ch:send(d)
    assert.are.equal(line_for("cuda:0", "uint8", {4}, {1}, false, hex("abcd")), proc:read("l"))
    assert.are.equal("wwww", host_bytes(ch:recv(30)))
    assert.are.equal("abcd", host_bytes(d), "the copy was written, not d")
    finish(ch, proc)
  end)

  local multi = cuda.device_count() > 1 and it or function(name) pending(name .. ": needs two CUDA devices") end
  multi("a tensor on cuda:1 arrives on cuda:1", function()
    local ch, proc = start("echo")
    local t = ipc.zeros({2}, "uint8", "cuda:1")
    t:copy(u8("zy"))
    ch:send(t)
    assert.are.equal(line_for("cuda:1", "uint8", {2}, {1}, false, hex("zy")), proc:read("l"))
    local back = ch:recv(30)
    assert.are.equal("cuda:1", back.device)
    if fake then assert.are.equal(1, probe.allocation(back:data_ptr()).device) end
    finish(ch, proc)
  end)

  writer_it("send waits for the work queued on the stream given, or on the whole device without one", function()
    local ch, proc = start("echo")
    local s = cuda.Stream()
    local t = ipc.zeros({4}, "uint8", "cuda:0")
    probe.write(s.handle, t:data_ptr(), "WXYZ") -- late: runs only when forced (fake) or after a 100 ms kernel
    ch:send(t, {stream = s})
    assert.are.equal(line_for("cuda:0", "uint8", {4}, {1}, false, hex("WXYZ")), proc:read("l"))
    assert.is_false(probe.pending(s.handle))
    ch:recv(30)
    probe.write(s.handle, t:data_ptr(), "ABCD")
    ch:send(t) -- no stream: everything queued on cuda:0
    assert.are.equal(line_for("cuda:0", "uint8", {4}, {1}, false, hex("ABCD")), proc:read("l"))
    ch:recv(30)
    -- a tensor that is not shareable is copied on the stream given, after its work
    local d = dlpack.zeros({4}, "uint8", "cuda:0")
    probe.write(s.handle, d:data_ptr(), "QRST")
    ch:send(d, {stream = s})
    assert.are.equal(line_for("cuda:0", "uint8", {4}, {1}, false, hex("QRST")), proc:read("l"))
    assert.are.equal("QRST", host_bytes(ch:recv(30)))
    s:close()
    finish(ch, proc)
  end)

  fake_it("send with stream = -1 waits for nothing (the negative control of the test above)", function()
    local ch, proc = start("echo")
    local s = cuda.Stream()
    local t = ipc.zeros({4}, "uint8", "cuda:0")
    probe.write(s.handle, t:data_ptr(), "LATE")
    ch:send(t, {stream = -1})
    assert.are.equal(line_for("cuda:0", "uint8", {4}, {1}, false, hex("\0\0\0\0")), proc:read("l"))
    local back = ch:recv(30)
    s:synchronize()
    assert.are.equal("LATE", host_bytes(back), "the write lands in the shared memory afterwards")
    s:close()
    finish(ch, proc)
  end)

  it("refuses a stream for a cpu tensor and a stream that is not one", function()
    local path = new_path()
    local l = ipc.listen(path)
    local a = ipc.connect(path)
    local b = l:accept(5)
    raises(function() a:send(ipc.zeros({2}), {stream = cuda.legacy_stream}) end, "stream must be nil or %-1")
    raises(function() a:send(ipc.zeros({2}, "uint8", "cuda:0"), {stream = 12345}) end, "raw pointers")
    raises(function() a:send(ipc.zeros({2}, "uint8", "cuda:0"), {stream = 0}) end, "stream 0")
    assert.is_nil(b:recv(0), "nothing was sent")
    a:send(ipc.zeros({2}), {stream = -1})
    assert.are.equal("cpu", b:recv(5).device)
    a:close()
    b:close()
    l:close()
  end)

  fake_it("leaves nothing behind: handles, reservations, mappings and descriptors", function()
    gc()
    local fds, live = open_fds(), fake.live()
    local ch, proc = start("echo")
    for i = 1, 20 do
      local t = ipc.zeros({i}, "uint8", "cuda:" .. (i % cuda.device_count()))
      ch:send(t)
      proc:read("l")
      ch:recv(30)
    end
    finish(ch, proc)
    gc()
    cuda.legacy_stream:synchronize() -- lets go of memory held for queued work that completed since
    gc()
    local now = fake.live()
    assert.are.same({live.handles, live.reservations, live.mapped, live.device},
                    {now.handles, now.reservations, now.mapped, now.device})
    assert.are.equal(fds, open_fds())
  end)

  python_it("a hostile peer gets a clear error for each bad message, and the receiver goes on", function()
    local cases = {
      {"memfd", "cumemimportfromshareablehandle"},
      {"pipe", "cumemimportfromshareablehandle"},
      {"granularity", "not a positive multiple of cuda:0's allocation granularity"},
      {"span", "reaches outside the 2097152 bytes"},
      {"offset", "reaches outside"},
      {"device", "names cuda device 7"},
    }
    if fake then
      cases[#cases + 1] = {"forged-small", "cumemmap %(is the allocation smaller"}
      cases[#cases + 1] = {"forged"}
    end
    local names = {}
    for i, c in ipairs(cases) do names[i] = c[1] end
    gc()
    local live = fake and fake.live()
    local ch, proc = start(nil, function(path)
      return "python3 " .. quote(DIR .. "/ipc_hostile.py") .. " " .. quote(path) .. " " .. table.concat(names, " ")
    end)
    local fds = open_fds()
    for _, c in ipairs(cases) do
      if c[2] then
        raises(function() ch:recv(30) end, c[2])
      else -- fake: a memfd named as the fake's is its memory, from Python
        local t = ch:recv(30)
        assert.are.equal("cuda:0", t.device)
        assert.are.equal(string.pack("<ffff", 1.5, 2.5, 3.5, 4.5), host_bytes(t))
        t:release()
        gc()
      end
      assert.are.equal(fds, open_fds(), c[1] .. ": a descriptor leaked")
    end
    assert.is_nil(ch:recv(0), "the channel still works")
    assert.is_truthy(finish(ch, proc, true):find("sent memfd"))
    if fake then
      local now = fake.live()
      assert.are.same({live.handles, live.reservations, live.mapped}, {now.handles, now.reservations, now.mapped})
    end
  end)
end)
