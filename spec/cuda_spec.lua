-- dlpack.cuda on a machine without a CUDA driver (the normal run): every CUDA
-- entry point answers with `false` or a clear error that names CUDA, never a
-- crash. The CUDA logic itself is specified by the CUDA suite, spec/cuda/suite.lua,
-- run against a fake driver (stage 45) and on a real GPU (docs/gpu.md).
local dlpack = require "dlpack"
local unsafe = require "dlpack.unsafe"
local support = require "support"

local cuda = dlpack.cuda
local raises = support.raises

-- A real driver (a GPU machine) or a fake one (DLPACK_LUA_CUDA_DRIVER) makes the
-- "no driver" expectations moot; the parts that hold anyway still run.
local available = cuda.is_available()

describe("dlpack.cuda without a driver", function()
  it("is_available() never raises and answers a boolean", function()
    local ok, a, reason = pcall(cuda.is_available)
    assert.is_true(ok, tostring(a))
    assert.are.equal("boolean", type(a))
    if not a then
      assert.are.equal("string", type(reason))
      assert.is_true(#reason > 0, "a non-empty reason")
    end
    -- and keeps answering the same
    assert.are.equal(a, (cuda.is_available()))
  end)

  it("legacy_stream and per_thread_stream stand for the DLPack stream values 1 and 2", function()
    assert.are.equal(1, cuda.legacy_stream.handle)
    assert.are.equal(2, cuda.per_thread_stream.handle)
    assert.are.equal("number", type(cuda.legacy_stream.handle))
    assert.is_true(math.type(cuda.legacy_stream.handle) == "integer")
  end)

  it("unsafe.wrap_stream stores a foreign handle without needing a driver", function()
    local s = unsafe.wrap_stream(12345)
    assert.are.equal(12345, s.handle)
    assert.are.equal(0, s.device)
    local s1 = unsafe.wrap_stream(12345, 1)
    assert.are.equal(1, s1.device)
    s:close()
    s:close() -- idempotent, and it never destroys a foreign stream
    s1:close()
  end)

  it("unsafe.wrap_stream refuses stream 0, ambiguous on CUDA, and device ids out of range", function()
    raises(function() unsafe.wrap_stream(0) end, "stream 0")
    raises(function() unsafe.wrap_stream(12345, 64) end, "device")
    raises(function() unsafe.wrap_stream(12345, -1) end, "device")
  end)

  it("has no way to wrap a raw stream handle outside dlpack.unsafe", function()
    assert.is_nil(cuda.Stream.wrap)
    assert.is_nil(rawget(cuda, "wrap_stream"))
  end)

  it("refuses a stream for a CPU tensor", function()
    local t = dlpack.zeros({2})
    raises(function() dlpack.to_dlpack(t, {stream = cuda.legacy_stream}) end, "stream")
    raises(function() dlpack.to_dlpack(t, {stream = 1}) end, "stream")
    raises(function() dlpack.to_dlpack(t, {stream = 2}) end, "stream")
    raises(function() dlpack.to_dlpack(t, {stream = unsafe.wrap_stream(12345)}) end, "stream")
    raises(function() dlpack.from_dlpack(t, {stream = 1}) end, "stream")
    -- the CPU suite's behaviour without a stream is unchanged
    local u = dlpack.from_dlpack(dlpack.to_dlpack(t))
    assert.are.same({0, 0}, u:totable())
  end)

  describe("when no driver is found", function()
    if available then
      pending("a CUDA driver is available here: the CUDA suite covers it (spec/cuda/run.lua)")
      return
    end

    it("gives a reason and counts no device", function()
      local a, reason = cuda.is_available()
      assert.is_false(a)
      assert.is_truthy(reason:lower():find("cuda") or reason:lower():find("libcuda"), reason)
      assert.are.equal(0, cuda.device_count())
    end)

    it("refuses to allocate CUDA memory with an error naming CUDA", function()
      for _, device in ipairs({"cuda:0", "cuda", "cuda:1", "cuda_host", "cuda_managed"}) do
        raises(function() dlpack.empty({2}, "float32", device) end, "cuda")
        raises(function() dlpack.zeros({2}, "float32", device) end, "cuda")
        raises(function() dlpack.full({2}, 1.5, "float32", device) end, "cuda")
      end
    end)

    it("refuses to create streams and events with an error naming CUDA", function()
      raises(function() cuda.Stream() end, "cuda")
      raises(function() cuda.Stream({device = 1, priority = -1}) end, "cuda")
      raises(function() cuda.Event() end, "cuda")
      raises(function() cuda.Event({timing = true}) end, "cuda")
    end)

    it("refuses copies to CUDA devices with an error naming CUDA", function()
      local t = dlpack.tensor({1, 2, 3}, "float32")
      raises(function() t:to("cuda:0") end, "cuda")
      raises(function() t:to("cuda") end, "cuda")
      raises(function() t:to("cuda_host") end, "cuda")
      raises(function() t:to({device = "cuda:0", dtype = "float64"}) end, "cuda")
      raises(function() dlpack.from_dlpack(t, {device = "cuda:0"}) end, "cuda")
      -- the tensor is untouched and still usable
      assert.are.same({1, 2, 3}, t:totable())
    end)

    it("dlpack.ipc makes no shareable CUDA memory, and a CUDA tensor that arrives is a clear error", function()
      if support.WINDOWS then
        pending(support.NOT_WINDOWS)
        return
      end
      local ipc = require "dlpack.ipc"
      raises(function() ipc.zeros({2}, "float32", "cuda:0") end, "cuda is not available")
      raises(function() ipc.empty({2}, "uint8", "cuda:1") end, "cuda is not available")
      local shared = ipc.share(dlpack.zeros({2}))
      assert.is_true(shared.shareable) -- cpu memory is shared as ever
      local python = os.execute("python3 -c 'import os; os.memfd_create' >/dev/null 2>&1")
      if python ~= true and python ~= 0 then -- (Lua 5.1 and LuaJIT answer a status)
        pending("needs python3 with os.memfd_create (spec/cuda/ipc_hostile.py)")
        return
      end
      -- descriptors open in this process (less the pipe to the listing command)
      local procfs = require "ipc.proc"
      local pid = procfs.pid()
      local path = "@dlpack-no-cuda-" .. pid
      local l = ipc.listen(path)
      local proc = assert(io.popen("python3 spec/cuda/ipc_hostile.py " .. path .. " memfd pipe 2>&1"))
      local ch = l:accept(30)
      l:close()
      assert.is_truthy(ch, "the peer did not connect")
      -- garbage from earlier tests that holds a descriptor goes now, not half-way
      -- through the count (a generational collector may take it at any step)
      local before = procfs.descriptors(nil, {collect = true})
      raises(function() ch:recv(30) end, "a tensor on cuda:0 arrived, but cuda is not available")
      raises(function() ch:recv(30) end, "cuda is not available")
      assert.are.equal(before, (procfs.descriptors()), "the descriptors that came are closed")
      assert.is_nil(ch:recv(0), "the channel still works")
      ch:close()
      local out = proc:read("*a")
      proc:close()
      assert.is_truthy(out:find("sent memfd pipe", 1, true), out)
      assert.is_true(shared.shareable)
    end)

    it("a wrapped stream's methods raise errors naming CUDA", function()
      local s = unsafe.wrap_stream(12345)
      raises(function() s:synchronize() end, "cuda")
      raises(function() s:query() end, "cuda")
      raises(function() s:record() end, "cuda")
      raises(function() cuda.legacy_stream:synchronize() end, "cuda")
      raises(function() cuda.per_thread_stream:query() end, "cuda")
      s:close()
    end)
  end)
end)
