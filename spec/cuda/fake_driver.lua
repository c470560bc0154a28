-- luacheck: std +busted
-- dlpack.cuda against the fake CUDA driver of spec/c/fakecuda.c (build/fakecuda.so).
--
-- Run by stage 45 (spec/stages/45-cuda-fake.t) with DLPACK_LUA_CUDA_DRIVER
-- pointing at build/fakecuda.so; the name does not match busted's `_spec`
-- pattern, so the normal run skips this file. By hand:
--   make build/fakecuda.so
--   DLPACK_LUA_CUDA_DRIVER=$PWD/build/fakecuda.so lua5.4 /usr/bin/busted spec/cuda/fake_driver.lua
--
-- The fake's streams are lazy queues: nothing runs until something forces it
-- (a synchronize, an event wait, fake.run), so a missing stream dependency shows
-- as stale bytes; device memory cannot be touched by the CPU (a module that
-- tries crashes); every misuse of the driver is counted by fake.errors(), which
-- must stay 0 after every test.
assert(os.getenv("DLPACK_LUA_CUDA_DRIVER"),
  "run this file with DLPACK_LUA_CUDA_DRIVER=$PWD/build/fakecuda.so (see spec/stages/45-cuda-fake.t)")
local dlpack = require "dlpack"
local support = require "support"
local fake = require "fakecuda"
local fab = require "fabricate"
local unsafe = require "dlpack.unsafe"

local cuda = dlpack.cuda
local raises = support.raises

local IS_COPIED = 2

local function gc()
  collectgarbage()
  collectgarbage()
end

local function errors_log()
  return table.concat(fake.error_log(), "\n")
end

-- bytes shown printable in failure messages (\xNN for the others)
local function esc(s)
  return (s:gsub("[%c\\\128-\255]", function(c) return ("\\x%02x"):format(c:byte()) end))
end

-- fake device memory now, printable
local function read(ptr, n)
  return esc(fake.read(ptr, n))
end

-- the bytes of a CUDA tensor, read by the module (a synchronous copy to the host)
local function host_bytes(t)
  return t:to("cpu"):tobytes()
end

local function u8(s)
  return dlpack.frombytes(s, "uint8")
end

local function calls(name)
  return fake.calls(name)
end

-- a Lua producer of the protocol around tensor t that records the opts it gets
local function producer(t)
  local seen = {}
  local obj = setmetatable({}, {
    __dlpack_device = function() return dlpack.device_type[t.device:match("^[%a_]+")] or 1, 0 end,
    __dlpack = function(_, opts)
      seen[#seen + 1] = opts
      return dlpack.to_dlpack(t, opts)
    end,
  })
  return obj, seen
end

local errors_before

before_each(function()
  gc()
  fake.sync_all()
  errors_before = fake.errors()
end)

after_each(function()
  gc()
  assert.are.equal(errors_before, fake.errors(), "misuse of the driver:\n" .. errors_log())
end)

describe("the fake driver", function()
  it("is the library the module loaded (one instance)", function()
    local ok, reason = cuda.is_available()
    assert.is_true(ok, reason)
    assert.is_true(fake.initialized())
    assert.is_true(fake.calls("cuInit") >= 1)
    assert.are.equal(2, cuda.device_count())
    assert.are.equal(fake.device_count(), cuda.device_count())
  end)
end)

describe("memory", function()
  local cases = {
    {device = "cuda:0", kind = "device", ordinal = 0},
    {device = "cuda:1", kind = "device", ordinal = 1},
    {device = "cuda_host", kind = "host", ordinal = 0},
    {device = "cuda_managed", kind = "managed", ordinal = 0},
  }

  it("is allocated with the right kind on the right device", function()
    for _, c in ipairs(cases) do
      local live = fake.live()
      local t = dlpack.empty({4, 5}, "float32", c.device)
      assert.are.equal(c.device, t.device)
      local a = fake.allocation(t:data_ptr())
      assert.is_truthy(a, c.device .. ": data_ptr() is not fake CUDA memory")
      assert.are.equal(c.kind, a.kind, c.device)
      assert.are.equal(c.ordinal, a.device, c.device)
      assert.are.equal(c.ordinal, fake.pointer_device(t:data_ptr()), c.device)
      assert.is_true(a.size >= 80, c.device)
      assert.are.equal(live[c.kind] + 1, fake.live()[c.kind], c.device)
      t:release()
      assert.are.equal(live[c.kind], fake.live()[c.kind], c.device .. ": released memory is freed")
    end
  end)

  it("'cuda' is cuda:0", function()
    local t = dlpack.empty({3}, "float32", "cuda")
    assert.are.equal("cuda:0", t.device)
    assert.are.equal(0, fake.allocation(t:data_ptr()).device)
  end)

  it("refuses a device the machine does not have", function()
    raises(function() dlpack.empty({2}, "float32", "cuda:2") end, "cuda")
    raises(function() dlpack.zeros({2}, "float32", "cuda:7") end, "cuda")
  end)

  it("zeros and full fill every kind of memory", function()
    for _, c in ipairs(cases) do
      local z = dlpack.zeros({3, 3}, "int32", c.device)
      assert.are.equal(string.rep("\0", 36), host_bytes(z), c.device)
      assert.are.equal(esc(string.rep("\0", 36)), read(z:data_ptr(), 36), c.device .. " (read by the fake)")
      local f = dlpack.full({2, 2}, 2.5, "float64", c.device)
      assert.are.same({{2.5, 2.5}, {2.5, 2.5}}, f:to("cpu"):totable(), c.device)
      assert.are.equal(esc(string.pack("dddd", 2.5, 2.5, 2.5, 2.5)), read(f:data_ptr(), 32), c.device)
    end
  end)

  it("of a zero-size tensor needs no allocation", function()
    for _, c in ipairs(cases) do
      local t = dlpack.zeros({0, 4}, "float32", c.device)
      assert.are.same({0, 4}, t.shape)
      assert.are.equal(c.device, t.device)
      assert.are.same({}, t:to("cpu"):totable())
    end
  end)

  it("on the device cannot be touched by the CPU but gives a clear error", function()
    local t = dlpack.zeros({4}, "float32", "cuda:0")
    raises(function() return t[1] end, "cuda")
    raises(function() t[1] = 3 end, "cuda")
    raises(function() t:fill(1) end, "cuda")
    raises(function() t:totable() end, "cuda")
    raises(function() t:tobytes() end, "cuda")
    raises(function() t:item() end, "cuda")
    assert.are.equal("string", type(tostring(t))) -- never reads the elements
  end)

  it("pinned and managed memory is host-accessible", function()
    for _, device in ipairs({"cuda_host", "cuda_managed"}) do
      local t = dlpack.zeros({3}, "float32", device)
      t[2] = 1.5
      assert.are.same({0, 1.5, 0}, t:totable(), device)
      assert.are.equal(esc(string.pack("fff", 0, 1.5, 0)), read(t:data_ptr(), 12), device)
    end
  end)

  it("is freed exactly once, by release, <close> or the collector", function()
    local live = fake.live().total
    local frees = calls("cuMemFree_v2") + calls("cuMemFreeHost")
    do
      local a = dlpack.empty({8}, "float32", "cuda:0")
      local b <close> = dlpack.empty({8}, "float32", "cuda_host")
      local v = a:view({2, 4}) -- a view holds the memory too
      a:release()
      a:release()
      assert.are.equal(live + 2, fake.live().total, "the view keeps the block")
      v:release()
      assert.are.equal(live + 1, fake.live().total)
      do
        local _ = dlpack.empty({8}, "float32", "cuda_managed") -- dropped
      end
      gc()
      assert.are.equal(live + 1, fake.live().total, "the collector freed the dropped tensor")
      assert.is_truthy(b)
    end
    assert.are.equal(live, fake.live().total, "<close> freed b")
    assert.are.equal(frees + 3, calls("cuMemFree_v2") + calls("cuMemFreeHost"))
  end)

  it("is freed with the function of its kind", function()
    local host, dev = calls("cuMemFreeHost"), calls("cuMemFree_v2")
    dlpack.empty({4}, "uint8", "cuda_host"):release()
    assert.are.equal(host + 1, calls("cuMemFreeHost"))
    dlpack.empty({4}, "uint8", "cuda_managed"):release()
    dlpack.empty({4}, "uint8", "cuda:1"):release()
    assert.are.equal(dev + 2, calls("cuMemFree_v2"))
  end)

  it("survives a failed allocation with a clear error and no leak", function()
    local live = fake.live().total
    fake.fail_next("cuMemAlloc_v2", 2) -- CUDA_ERROR_OUT_OF_MEMORY
    raises(function() dlpack.empty({4}, "float32", "cuda:0") end, "cuda")
    fake.fail_next("cuMemsetD8Async", 2)
    raises(function() dlpack.zeros({4}, "float32", "cuda:0") end, "cuda")
    assert.are.equal(live, fake.live().total, "nothing leaked")
    local t = dlpack.zeros({4}, "float32", "cuda:0") -- and it works again
    assert.are.same({0, 0, 0, 0}, t:to("cpu"):totable())
  end)
end)

describe("copies", function()
  local values = {
    bool = {true, false, true},
    int8 = {-128, 0, 127},
    uint8 = {0, 1, 255},
    int16 = {-32768, 5, 32767},
    int32 = {-7, 0, 2147483647},
    int64 = {math.mininteger, 0, math.maxinteger},
    float16 = {0.5, -2, 65504},
    bfloat16 = {1, -0.5, 256},
    float32 = {1.5, -2.25, 1e10},
    float64 = {math.pi, -1e300, 0.1},
  }

  it("host -> cuda:0 -> cuda:1 -> host keeps every value", function()
    for dtype, v in pairs(values) do
      local src = dlpack.tensor(v, dtype)
      local d0 = src:to("cuda:0")
      assert.are.equal("cuda:0", d0.device)
      assert.are.equal(dtype, d0.dtype)
      assert.are.equal(esc(src:tobytes()), read(d0:data_ptr(), src.nbytes), dtype)
      local d1 = d0:to("cuda:1")
      assert.are.equal("cuda:1", d1.device)
      assert.are.equal(1, fake.allocation(d1:data_ptr()).device, dtype)
      local back = d1:to("cpu")
      assert.are.equal("cpu", back.device)
      assert.are.same(v, back:totable(), dtype)
      assert.are.equal(esc(src:tobytes()), esc(back:tobytes()), dtype)
    end
  end)

  it("through pinned and managed memory keeps the values", function()
    local src = dlpack.tensor({{1, 2}, {3, 4}}, "float32")
    for _, device in ipairs({"cuda_host", "cuda_managed"}) do
      local d = src:to(device)
      assert.are.equal(device, d.device)
      assert.are.same(src:totable(), d:totable(), device)
      assert.are.same(src:totable(), d:to("cuda:1"):to(device):totable(), device)
    end
  end)

  it("convert dtypes on the host side", function()
    local src = dlpack.tensor({0.5, 1.25, -3}, "float64")
    local d = src:to({device = "cuda:0", dtype = "float32"})
    assert.are.equal("float32", d.dtype)
    assert.are.equal(esc(string.pack("fff", 0.5, 1.25, -3)), read(d:data_ptr(), 12))
    local back = d:to({device = "cpu", dtype = "float64"})
    assert.are.equal("float64", back.dtype)
    assert.are.same({0.5, 1.25, -3}, back:totable())
    local i = d:to({device = "cpu", dtype = "int32"})
    assert.are.equal("int32", i.dtype)
  end)

  it("refuse to convert dtypes between CUDA devices", function()
    local d = dlpack.tensor({1, 2}, "float32"):to("cuda:0")
    raises(function() d:to("float64") end, "convert")
    raises(function() d:to({device = "cuda:1", dtype = "float64"}) end, "convert")
    raises(function() dlpack.empty({2}, "float64", "cuda:1"):copy(d) end, "convert")
  end)

  it("need the CUDA side contiguous, the host side not", function()
    local host = dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "float32")
    local d = host:transpose(1, 2):to("cuda:0") -- host side strided: fine
    assert.are.same({{1, 4}, {2, 5}, {3, 6}}, d:to("cpu"):totable())
    raises(function() d:transpose(1, 2):to("cpu") end, "contiguous")
    raises(function() d:transpose(1, 2):to("cuda:1") end, "contiguous")
    local dst = dlpack.empty({2, 3}, "float32", "cuda:0")
    raises(function() dst:transpose(1, 2):copy(dlpack.zeros({3, 2}, "float32")) end, "contiguous")
    -- a contiguous view with an offset is fine
    local row = dlpack.tensor({{1, 2}, {3, 4}}, "float32"):to("cuda:0"):select(1, 2)
    assert.are.same({3, 4}, row:to("cpu"):totable())
  end)

  it("t:copy(src) between host and devices", function()
    local d0 = dlpack.empty({3}, "int32", "cuda:0")
    assert.are.equal(d0, d0:copy(dlpack.tensor({7, 8, 9}, "int32")))
    local d1 = dlpack.empty({3}, "int32", "cuda:1"):copy(d0)
    local h = dlpack.zeros({3}, "float64"):copy(d1)
    assert.are.same({7, 8, 9}, h:totable())
    raises(function() d0:copy(dlpack.zeros({4}, "int32")) end, "shape")
  end)

  it("clone, to(same device) and copy = true stay on the device", function()
    local d = dlpack.tensor({{1, 2}, {3, 4}}, "float32"):to("cuda:1")
    assert.are.equal(d, d:to("cuda:1"))
    assert.are.equal(d, d:to({device = "cuda:1"}))
    for _, c in ipairs({d:clone(), d:to({device = "cuda:1", copy = true})}) do
      assert.are.equal("cuda:1", c.device)
      assert.are_not.equal(d:data_ptr(), c:data_ptr())
      assert.are.equal(1, fake.allocation(c:data_ptr()).device)
      assert.are.same({{1, 2}, {3, 4}}, c:to("cpu"):totable())
    end
  end)

  it("without a stream are synchronous", function()
    local src = dlpack.tensor({1, 2, 3, 4}, "float32")
    local d = src:to("cuda:0")
    assert.are.equal(0, fake.pending(1, 0), "legacy stream drained")
    assert.are.equal(esc(src:tobytes()), read(d:data_ptr(), 16))
    local h = dlpack.zeros({4}, "float32"):copy(d)
    assert.are.same({1, 2, 3, 4}, h:totable())
  end)

  it("on a stream stay pending until the stream is synchronized (device -> host)", function()
    local s = cuda.Stream()
    local d = dlpack.tensor({1, 2, 3, 4}, "float32"):to("cuda:0")
    local h = dlpack.zeros({4}, "float32")
    assert.are.equal(h, h:copy(d, {stream = s}))
    assert.is_true(fake.pending(s.handle) > 0, "the copy is queued on s")
    assert.are.same({0, 0, 0, 0}, h:totable(), "not yet written")
    s:synchronize()
    assert.are.equal(0, fake.pending(s.handle))
    assert.are.same({1, 2, 3, 4}, h:totable())
    local h2 = d:to({device = "cpu", stream = s})
    assert.are.equal("cpu", h2.device)
    assert.is_true(fake.pending(s.handle) > 0)
    s:synchronize()
    assert.are.same({1, 2, 3, 4}, h2:totable())
  end)

  it("on a stream stay pending until the stream is synchronized (host -> device)", function()
    local s = cuda.Stream()
    local d = dlpack.zeros({4}, "float32", "cuda:0")
    d:copy(dlpack.tensor({5, 6, 7, 8}, "float32"), {stream = s})
    assert.is_true(fake.pending(s.handle) > 0)
    assert.are.equal(esc(string.rep("\0", 16)), read(d:data_ptr(), 16), "not yet written")
    s:synchronize()
    assert.are.equal(esc(string.pack("ffff", 5, 6, 7, 8)), read(d:data_ptr(), 16))
    local d2 = dlpack.tensor({1, 2}, "float64"):to({device = "cuda:0", dtype = "float32", stream = s})
    assert.is_true(fake.pending(s.handle) > 0)
    s:synchronize()
    assert.are.equal(esc(string.pack("ff", 1, 2)), read(d2:data_ptr(), 8))
  end)

  it("on a stream keep the host memory alive until they ran", function()
    local s = cuda.Stream()
    local d = dlpack.zeros({64}, "float64", "cuda:0")
    local expect
    do
      local src = dlpack.tensor((function()
        local v = {}
        for i = 1, 64 do v[i] = i * 1.5 end
        return v
      end)(), "float64")
      expect = src:tobytes()
      d:copy(src, {stream = s})
      src:release() -- and the staging memory of a conversion, below
    end
    local d32 = dlpack.zeros({64}, "float32", "cuda:0")
    d32:copy(dlpack.tensor({1, 2, 3, 4}, "float64"):expand({16, 4}):reshape({64}), {stream = s})
    gc()
    for _ = 1, 20 do dlpack.tensor({9, 9, 9, 9, 9, 9, 9, 9}, "float64") end -- reuse freed memory
    s:synchronize()
    assert.are.equal(esc(expect), read(d:data_ptr(), 512))
    assert.are.equal(esc(string.pack("ffff", 1, 2, 3, 4):rep(16)), read(d32:data_ptr(), 256))
  end)

  it("on a stream into host memory that is released early", function()
    local s = cuda.Stream()
    local d = dlpack.full({16}, 3, "int32", "cuda:0")
    local h = dlpack.zeros({16}, "int32")
    h:copy(d, {stream = s})
    h:release()
    gc()
    s:synchronize()
  end)

  it("on a stream order after the work pending on both blocks", function()
    local p, s = cuda.Stream(), cuda.Stream()
    local d = dlpack.zeros({4}, "uint8", "cuda:0")
    fake.write(p.handle, d:data_ptr(), "slow")
    d:copy(u8("xxxx"), {stream = p}) -- d's pending work is on p
    fake.write(p.handle, d:data_ptr(), "PPPP")
    local h = dlpack.zeros({4}, "uint8")
    h:copy(d, {stream = s})
    s:synchronize() -- s alone: must run p's work first
    assert.are.equal(esc("PPPP"), esc(h:tobytes()))
    assert.are.equal(0, fake.pending(p.handle))
  end)

  it("without a stream wait for the block's pending work", function()
    local p = cuda.Stream()
    local d = dlpack.zeros({4}, "uint8", "cuda:0")
    d:copy(u8("abcd"), {stream = p})
    fake.write(p.handle, d:data_ptr(), "WXYZ")
    assert.are.equal("WXYZ", host_bytes(d))
  end)
end)

describe("streams", function()
  it("Stream() owns a non-blocking stream on device 0", function()
    local streams = fake.live().streams
    local s = cuda.Stream()
    assert.are.equal("number", type(s.handle))
    assert.is_true(s.handle > 2)
    assert.are.equal(0, s.device)
    local info = fake.stream_info(s.handle)
    assert.are.equal("created", info.kind)
    assert.are.equal(0, info.device)
    assert.are.equal(1, info.flags, "CU_STREAM_NON_BLOCKING")
    assert.are.equal(streams + 1, fake.live().streams)
    local h = s.handle
    s:close()
    assert.is_true(fake.stream_info(h).destroyed)
    assert.are.equal(streams, fake.live().streams)
  end)

  it("Stream{device =, priority =} honours both", function()
    local s = cuda.Stream({device = 1, priority = -1})
    assert.are.equal(1, s.device)
    local info = fake.stream_info(s.handle)
    assert.are.equal(1, info.device)
    assert.are.equal(-1, info.priority)
    raises(function() cuda.Stream({device = 2}) end, "cuda")
  end)

  it("close is idempotent and destroys the stream once", function()
    local s = cuda.Stream()
    local h = s.handle
    local destroys = calls("cuStreamDestroy_v2")
    s:close()
    s:close()
    assert.is_true(fake.stream_info(h).destroyed)
    assert.are.equal(destroys + 1, calls("cuStreamDestroy_v2"))
    raises(function() s:synchronize() end, "closed")
    raises(function() return s.handle end, "closed")
  end)

  it("closes with <close> and with the collector", function()
    local h1, h2
    do
      local s <close> = cuda.Stream()
      h1 = s.handle
    end
    assert.is_true(fake.stream_info(h1).destroyed)
    do
      local s = cuda.Stream()
      h2 = s.handle
    end
    gc()
    assert.is_true(fake.stream_info(h2).destroyed)
  end)

  it("a closed stream lets its pending work finish", function()
    local d = dlpack.zeros({4}, "uint8", "cuda:0")
    local s = cuda.Stream()
    fake.write(s.handle, d:data_ptr(), "done")
    s:close()
    assert.are.equal(esc("done"), read(d:data_ptr(), 4))
  end)

  it("unsafe.wrap_stream does not own the stream", function()
    local s = cuda.Stream({device = 1})
    local w = unsafe.wrap_stream(s.handle, 1)
    assert.are.equal(s.handle, w.handle)
    assert.are.equal(1, w.device)
    w:close()
    w = nil -- luacheck: ignore
    gc()
    assert.is_false(fake.stream_info(s.handle).destroyed)
    local w2 = unsafe.wrap_stream(s.handle, 1)
    local d = dlpack.zeros({2}, "uint8", "cuda:1")
    fake.write(s.handle, d:data_ptr(), "ok")
    assert.is_false(w2:query())
    w2:synchronize()
    assert.is_true(w2:query())
    assert.are.equal(esc("ok"), read(d:data_ptr(), 2))
    -- a light userdata handle is accepted too
    assert.is_truthy(unsafe.wrap_stream(d:data_ptr()).handle)
  end)

  it("query answers without running anything; synchronize runs the stream", function()
    local s = cuda.Stream()
    local d = dlpack.zeros({3}, "uint8", "cuda:0")
    assert.is_true(s:query())
    fake.write(s.handle, d:data_ptr(), "abc")
    assert.is_false(s:query())
    assert.is_false(s:query())
    assert.are.equal(1, fake.pending(s.handle))
    assert.are.equal(esc("\0\0\0"), read(d:data_ptr(), 3))
    s:synchronize()
    assert.is_true(s:query())
    assert.are.equal(esc("abc"), read(d:data_ptr(), 3))
  end)

  it("wait(stream) orders one stream after another and returns self", function()
    local a, b = cuda.Stream(), cuda.Stream()
    local d = dlpack.zeros({4}, "uint8", "cuda:0")
    fake.write(a.handle, d:data_ptr(), "AAAA")
    assert.are.equal(b, b:wait(a))
    fake.write(b.handle, d:data_ptr(), "BB")
    b:synchronize()
    assert.are.equal(0, fake.pending(a.handle), "a ran up to the wait")
    assert.are.equal(esc("BBAA"), read(d:data_ptr(), 4))
  end)

  it("wait(event) and record() order streams through an event", function()
    local a, b = cuda.Stream(), cuda.Stream()
    local d = dlpack.zeros({4}, "uint8", "cuda:0")
    fake.write(a.handle, d:data_ptr(), "1111")
    local ev = a:record()
    assert.are.equal("userdata", type(ev))
    fake.write(a.handle, d:data_ptr(), "2222") -- after the record: not waited for
    assert.are.equal(b, b:wait(ev))
    b:synchronize()
    assert.are.equal(esc("1111"), read(d:data_ptr(), 4))
    assert.are.equal(1, fake.pending(a.handle))
    a:synchronize()
    assert.are.equal(esc("2222"), read(d:data_ptr(), 4))
  end)

  it("record(event) records the given event", function()
    local s = cuda.Stream()
    local ev = cuda.Event()
    local d = dlpack.zeros({1}, "uint8", "cuda:0")
    fake.write(s.handle, d:data_ptr(), "r")
    assert.are.equal(ev, s:record(ev))
    assert.is_false(ev:query())
    s:synchronize()
    assert.is_true(ev:query())
  end)

  it("work on cuda:1 with a stream of device 1", function()
    local s = cuda.Stream({device = 1})
    local d = dlpack.zeros({4}, "float32", "cuda:1")
    d:copy(dlpack.tensor({1, 2, 3, 4}, "float32"), {stream = s})
    s:synchronize()
    assert.are.same({1, 2, 3, 4}, d:to("cpu"):totable())
    local ev = s:record()
    ev:synchronize()
    assert.is_true(ev:query())
  end)

  it("legacy_stream and per_thread_stream synchronize and query", function()
    local d = dlpack.zeros({2}, "uint8", "cuda:0")
    fake.write(1, d:data_ptr(), "LL", 0)
    assert.is_false(cuda.legacy_stream:query())
    cuda.legacy_stream:synchronize()
    assert.is_true(cuda.legacy_stream:query())
    assert.are.equal(esc("LL"), read(d:data_ptr(), 2))
    fake.write(2, d:data_ptr(), "PT", 0)
    assert.is_false(cuda.per_thread_stream:query())
    cuda.per_thread_stream:synchronize()
    assert.are.equal(esc("PT"), read(d:data_ptr(), 2))
  end)

end)

describe("events", function()
  it("record returns the event; query and synchronize follow the stream", function()
    local s = cuda.Stream()
    local d = dlpack.zeros({3}, "uint8", "cuda:0")
    local ev = cuda.Event()
    assert.is_true(ev:query(), "never recorded: complete")
    fake.write(s.handle, d:data_ptr(), "xyz")
    assert.are.equal(ev, ev:record(s))
    fake.write(s.handle, d:data_ptr(), "XYZ")
    assert.is_false(ev:query())
    ev:synchronize()
    assert.is_true(ev:query())
    assert.are.equal(esc("xyz"), read(d:data_ptr(), 3), "ran up to the record only")
    assert.are.equal(1, fake.pending(s.handle))
  end)

  it("record() without a stream records on the legacy stream", function()
    local d = dlpack.zeros({2}, "uint8", "cuda:0")
    fake.write(1, d:data_ptr(), "ls", 0)
    local ev = cuda.Event():record()
    assert.is_false(ev:query())
    ev:synchronize()
    assert.are.equal(esc("ls"), read(d:data_ptr(), 2))
  end)

  it("elapsed measures milliseconds between two executed events", function()
    local s = cuda.Stream()
    local e1, e2 = cuda.Event({timing = true}), cuda.Event({timing = true})
    e1:record(s)
    e2:record(s)
    raises(function() e1:elapsed(e2) end, "cuda") -- not ready yet
    s:synchronize()
    local ms = e1:elapsed(e2)
    assert.are.equal("number", type(ms))
    assert.is_true(ms >= 0 and ms < 1000, tostring(ms))
    local e3 = s:record() -- timing by default
    s:synchronize()
    local ms2 = e3:elapsed(e1) -- a later event first: negative or zero
    assert.is_true(ms2 <= 0.0001, tostring(ms2))
  end)

  it("elapsed refuses events made without timing", function()
    local s = cuda.Stream()
    local e1, e2 = cuda.Event({timing = false}), cuda.Event()
    e1:record(s)
    e2:record(s)
    s:synchronize()
    raises(function() e1:elapsed(e2) end, "cuda")
  end)

  it("close is idempotent; <close> and the collector destroy events", function()
    local events = fake.live().events
    local ev = cuda.Event()
    assert.are.equal(events + 1, fake.live().events)
    ev:close()
    ev:close()
    assert.are.equal(events, fake.live().events)
    raises(function() ev:query() end, "closed")
    do
      local e <close> = cuda.Event()
      assert.is_truthy(e)
    end
    do
      local _ = cuda.Event()
    end
    gc()
    assert.are.equal(events, fake.live().events)
  end)

  it("of device 1 record on device 1's streams", function()
    local ev = cuda.Event({device = 1})
    local s1 = cuda.Stream({device = 1})
    ev:record(s1)
    ev:synchronize()
    -- an event of device 1 cannot be recorded on a stream of device 0
    local s0 = cuda.Stream()
    raises(function() ev:record(s0) end, "cuda")
    errors_before = fake.errors() -- the fake counted the refused record as misuse
  end)
end)

describe("exporting a CUDA tensor (the module as producer)", function()
  -- t's pending work is on p: an asynchronous copy, then a slow "kernel"
  local function produced_on(p, device)
    local t = dlpack.zeros({4}, "uint8", device or "cuda:0")
    t:copy(u8("ab.."), {stream = p})
    fake.write(p.handle, t:data_ptr(), "WXYZ")
    return t
  end

  it("makes the consumer's stream wait for the producer's stream", function()
    local p, c = cuda.Stream(), cuda.Stream()
    local t = produced_on(p)
    local waits = calls("cuStreamWaitEvent")
    local cap = dlpack.to_dlpack(t, {stream = c})
    assert.is_true(calls("cuStreamWaitEvent") > waits)
    assert.is_true(fake.pending(p.handle) > 0, "nothing ran yet")
    assert.is_true(fake.pending(c.handle) > 0, "c waits")
    c:synchronize() -- the consumer's stream alone
    assert.are.equal(esc("WXYZ"), read(t:data_ptr(), 4))
    assert.are.equal(0, fake.pending(p.handle))
    dlpack.release_capsule(cap)
  end)

  it("refuses the consumer's stream as an integer handle, and takes it wrapped by dlpack.unsafe", function()
    local p, c = cuda.Stream(), cuda.Stream()
    local t = produced_on(p)
    raises(function() dlpack.to_dlpack(t, {stream = c.handle}) end, "unsafe.wrap_stream")
    local u = dlpack.from_dlpack(dlpack.to_dlpack(t, {stream = unsafe.wrap_stream(c.handle)}))
    assert.are.equal(t:data_ptr(), u:data_ptr())
    c:synchronize()
    assert.are.equal(esc("WXYZ"), read(u:data_ptr(), 4))
  end)

  it("inserts no wait for stream -1", function()
    local p, c = cuda.Stream(), cuda.Stream()
    local t = produced_on(p)
    local waits, records = calls("cuStreamWaitEvent"), calls("cuEventRecord")
    local cap = dlpack.to_dlpack(t, {stream = -1})
    assert.are.equal(waits, calls("cuStreamWaitEvent"))
    assert.are.equal(records, calls("cuEventRecord"))
    c:synchronize()
    assert.is_true(fake.pending(p.handle) > 0, "p untouched")
    dlpack.release_capsule(cap)
  end)

  it("inserts no wait when the consumer uses the producer's stream", function()
    local p = cuda.Stream()
    local t = produced_on(p)
    local waits = calls("cuStreamWaitEvent")
    dlpack.release_capsule(dlpack.to_dlpack(t, {stream = p}))
    assert.are.equal(waits, calls("cuStreamWaitEvent"))
  end)

  it("refuses stream 0 and other invalid streams", function()
    local t = dlpack.zeros({2}, "float32", "cuda:0")
    raises(function() dlpack.to_dlpack(t, {stream = 0}) end, "stream 0")
    raises(function() dlpack.to_dlpack(t, {stream = -2}) end, "stream")
    raises(function() dlpack.to_dlpack(t, {stream = 1.5}) end, "stream")
    raises(function() dlpack.to_dlpack(t, {stream = {}}) end, "stream")
  end)

  it("orders the legacy stream for stream 1 and for no stream", function()
    for _, opts in ipairs({{stream = 1}, {stream = cuda.legacy_stream}, {}}) do
      local p = cuda.Stream()
      local t = produced_on(p)
      local cap = dlpack.to_dlpack(t, opts)
      assert.is_true(fake.pending(p.handle) > 0)
      cuda.legacy_stream:synchronize()
      assert.are.equal(esc("WXYZ"), read(t:data_ptr(), 4))
      dlpack.release_capsule(cap)
    end
  end)

  it("orders the per-thread stream for stream 2", function()
    for _, stream in ipairs({2, cuda.per_thread_stream}) do
      local p = cuda.Stream()
      local t = produced_on(p)
      local cap = dlpack.to_dlpack(t, {stream = stream})
      assert.is_true(fake.pending(p.handle) > 0)
      cuda.per_thread_stream:synchronize()
      assert.are.equal(esc("WXYZ"), read(t:data_ptr(), 4))
      dlpack.release_capsule(cap)
    end
  end)

  it("through the protocol method __dlpack", function()
    local p, c = cuda.Stream(), cuda.Stream()
    local t = produced_on(p)
    local cap = getmetatable(t).__dlpack(t, {stream = c, max_version = {1, 3}})
    assert.are.same({2, 0}, {getmetatable(t).__dlpack_device(t)})
    c:synchronize()
    assert.are.equal(esc("WXYZ"), read(t:data_ptr(), 4))
    dlpack.release_capsule(cap)
  end)

  it("of a tensor on cuda:1 orders device 1's streams", function()
    local p, c = cuda.Stream({device = 1}), cuda.Stream({device = 1})
    local t = produced_on(p, "cuda:1")
    local cap = dlpack.to_dlpack(t, {stream = c})
    c:synchronize()
    assert.are.equal(esc("WXYZ"), read(t:data_ptr(), 4))
    dlpack.release_capsule(cap)
    t = produced_on(p, "cuda:1")
    cap = dlpack.to_dlpack(t, {stream = 1})
    assert.is_true(fake.pending(1, 1) > 0, "device 1's legacy stream waits")
    assert.are.equal(0, fake.pending(1, 0), "not device 0's")
    fake.run(1, 1)
    assert.are.equal(esc("WXYZ"), read(t:data_ptr(), 4))
    dlpack.release_capsule(cap)
  end)

  it("to the host (dl_device = {1, 0}) copies and sets IS_COPIED", function()
    local t = dlpack.tensor({1.5, 2.5, 3.5}, "float32"):to("cuda:0")
    local ptr, name = unsafe.take(dlpack.to_dlpack(t, {dl_device = {1, 0}}))
    local info = fab.inspect(ptr, name)
    assert.are.equal(1, info.device_type)
    assert.are.equal(0, info.device_id)
    assert.are.equal(IS_COPIED, info.flags & IS_COPIED)
    assert.are_not.equal(t:data_ptr(), info.data)
    local u = dlpack.from_dlpack(unsafe.adopt(ptr, name))
    assert.are.equal("cpu", u.device)
    assert.are.same({1.5, 2.5, 3.5}, u:totable())
    u[1] = 9
    assert.are.same({1.5, 2.5, 3.5}, t:to("cpu"):totable(), "a copy")
  end)

  it("to the host waits for the tensor's pending work", function()
    local p = cuda.Stream()
    local t = produced_on(p)
    local u = dlpack.from_dlpack(dlpack.to_dlpack(t, {dl_device = {1, 0}}))
    assert.are.equal(esc("WXYZ"), esc(u:tobytes()))
  end)

  it("to the host with copy = false is a BufferError", function()
    local t = dlpack.zeros({2}, "float32", "cuda:0")
    local err = raises(function() dlpack.to_dlpack(t, {dl_device = {1, 0}, copy = false}) end)
    assert.is_true(dlpack.is_buffer_error(err), tostring(err))
  end)

  it("with copy = true on the device copies and sets IS_COPIED", function()
    local t = dlpack.tensor({1, 2}, "int32"):to("cuda:1")
    local ptr, name = unsafe.take(dlpack.to_dlpack(t, {copy = true}))
    local info = fab.inspect(ptr, name)
    assert.are.same({2, 1}, {info.device_type, info.device_id})
    assert.are.equal(IS_COPIED, info.flags & IS_COPIED)
    assert.are_not.equal(t:data_ptr(), info.data)
    local u = dlpack.from_dlpack(unsafe.adopt(ptr, name))
    assert.are.equal("cuda:1", u.device)
    assert.are.same({1, 2}, u:to("cpu"):totable())
  end)

  it("to another device type is a BufferError", function()
    local t = dlpack.zeros({2}, "float32", "cuda:0")
    local err = raises(function() dlpack.to_dlpack(t, {dl_device = {10, 0}}) end)
    assert.is_true(dlpack.is_buffer_error(err), tostring(err))
  end)

  it("keeps the memory alive in an unconsumed capsule and frees it once", function()
    local live = fake.live().total
    local t = dlpack.tensor({1, 2, 3}, "float32"):to("cuda:0")
    local cap = dlpack.to_dlpack(t)
    t:release()
    assert.are.equal(live + 1, fake.live().total)
    local u = dlpack.from_dlpack(cap)
    assert.are.same({1, 2, 3}, u:to("cpu"):totable())
    u:release()
    assert.are.equal(live, fake.live().total)
    local cap2 = dlpack.to_dlpack(dlpack.zeros({2}, "float32", "cuda_host"))
    gc()
    assert.are.equal(live + 1, fake.live().total)
    dlpack.release_capsule(cap2)
    assert.are.equal(live, fake.live().total)
  end)

  it("of pinned and managed memory shares it", function()
    for _, device in ipairs({"cuda_host", "cuda_managed"}) do
      local t = dlpack.tensor({4, 5}, "float32"):to(device)
      local u = dlpack.from_dlpack(dlpack.to_dlpack(t))
      assert.are.equal(device, u.device)
      assert.are.equal(t:data_ptr(), u:data_ptr())
      u[1] = 7
      assert.are.same({7, 5}, t:totable())
    end
  end)
end)

describe("importing (the module as consumer)", function()
  it("passes stream 1 to a CUDA producer when no stream is given", function()
    local t = dlpack.zeros({2}, "float32", "cuda:0")
    local obj, seen = producer(t)
    local u = dlpack.from_dlpack(obj)
    assert.are.equal(1, #seen)
    assert.are.equal(1, seen[1].stream)
    assert.is_truthy(seen[1].max_version)
    assert.are.equal(t:data_ptr(), u:data_ptr())
  end)

  it("passes opts.stream to the producer as given: a stream object or a DLPack value", function()
    local t = dlpack.zeros({2}, "float32", "cuda:0")
    local c = cuda.Stream()
    local obj, seen = producer(t)
    dlpack.from_dlpack(obj, {stream = c})
    assert.are.equal(c, seen[1].stream)
    dlpack.from_dlpack(obj, {stream = 2})
    assert.are.equal(2, seen[2].stream)
    raises(function() dlpack.from_dlpack(obj, {stream = c.handle}) end, "raw pointer")
    raises(function() dlpack.from_dlpack(obj, {stream = 0}) end, "stream 0")
    assert.are.equal(2, #seen, "the producer is not called for a refused stream")
  end)

  it("keeps the consumer's stream alive when the producer closes it in the middle of the import", function()
    local t = dlpack.zeros({4}, "uint8", "cuda:0")
    local c = cuda.Stream()
    local obj = setmetatable({}, {
      __dlpack_device = function() return 2, 0 end,
      __dlpack = function(_, opts)
        c:close()
        collectgarbage()
        return dlpack.to_dlpack(t, {max_version = opts.max_version})
      end,
    })
    local u = dlpack.from_dlpack(obj, {stream = c})
    raises(function() return c.handle end, "closed")
    assert.are.equal(t:data_ptr(), u:data_ptr())
    u:release()
    gc()
  end)

  it("passes no stream to a CPU producer", function()
    local obj, seen = producer(dlpack.zeros({2}))
    dlpack.from_dlpack(obj)
    assert.is_nil(seen[1].stream)
  end)

  it("considers an imported tensor's work to be on the stream it passed", function()
    local t = dlpack.zeros({4}, "uint8", "cuda:0")
    local c, d = cuda.Stream(), cuda.Stream()
    local obj = producer(t)
    local u = dlpack.from_dlpack(obj, {stream = c})
    fake.write(c.handle, u:data_ptr(), "QQQQ") -- the consumer works on c
    local cap = dlpack.to_dlpack(u, {stream = d})
    d:synchronize()
    assert.are.equal(esc("QQQQ"), read(u:data_ptr(), 4))
    assert.are.equal(0, fake.pending(c.handle))
    dlpack.release_capsule(cap)
  end)

  it("copies a CUDA producer's tensor to the host for device = 'cpu'", function()
    local t = dlpack.tensor({1, 2, 3}, "int16"):to("cuda:1")
    local obj = producer(t)
    local u = dlpack.from_dlpack(obj, {device = "cpu"})
    assert.are.equal("cpu", u.device)
    assert.are.same({1, 2, 3}, u:totable())
    u[1] = 100
    assert.are.same({1, 2, 3}, t:to("cpu"):totable())
    local v = dlpack.from_dlpack(t, {device = "cpu"})
    assert.are.same({1, 2, 3}, v:totable())
    raises(function() dlpack.from_dlpack(t, {device = "cpu", copy = false}) end, "cop")
  end)

  it("copies a host tensor to a device for device = 'cuda:N'", function()
    local h = dlpack.tensor({1, 2}, "float64")
    local u = dlpack.from_dlpack(h, {device = "cuda:1"})
    assert.are.equal("cuda:1", u.device)
    assert.are.equal(1, fake.allocation(u:data_ptr()).device)
    assert.are.same({1, 2}, u:to("cpu"):totable())
  end)

  it("imports a foreign CUDA capsule on its device and hands it back once", function()
    local n = support.deletes(function()
      local cap = fab.versioned({device_type = 2, device_id = 1})
      local t = dlpack.from_dlpack(cap)
      assert.are.equal("cuda:1", t.device)
      t:release()
    end)
    assert.are.equal(1, n)
  end)
end)

describe("several devices", function()
  it("every call runs with its device's context and restores the caller's", function()
    for _, current in ipairs({0, 1}) do
      fake.set_current(current)
      local s = cuda.Stream({device = 1 - current})
      local t = dlpack.zeros({4}, "float32", "cuda:" .. (1 - current))
      assert.are.equal(1 - current, fake.allocation(t:data_ptr()).device)
      t:copy(dlpack.tensor({1, 2, 3, 4}, "float32"), {stream = s})
      s:synchronize()
      local ev = s:record()
      ev:synchronize()
      assert.are.same({1, 2, 3, 4}, t:to("cpu"):totable())
      dlpack.release_capsule(dlpack.to_dlpack(t, {stream = s}))
      dlpack.release_capsule(dlpack.to_dlpack(t, {stream = 1}))
      t:release()
      s:close()
      ev:close()
      assert.are.equal(current, fake.current_device(), "the caller's context is current again")
    end
    fake.set_current(nil)
    local t = dlpack.zeros({2}, "float32", "cuda:1")
    t:release()
    assert.is_nil(fake.current_device(), "no context current again")
  end)

  it("copy between devices waits for the source's pending work on another device", function()
    local p0 = cuda.Stream({device = 0})
    local a = dlpack.zeros({4}, "uint8", "cuda:0")
    a:copy(u8("...."), {stream = p0})
    fake.write(p0.handle, a:data_ptr(), "DEV0")
    local b = dlpack.empty({4}, "uint8", "cuda:1")
    b:copy(a)
    assert.are.equal(esc("DEV0"), read(b:data_ptr(), 4))
    local s1 = cuda.Stream({device = 1})
    local c = dlpack.empty({4}, "uint8", "cuda:1")
    a:copy(u8("...."), {stream = p0})
    fake.write(p0.handle, a:data_ptr(), "AGIN")
    c:copy(a, {stream = s1})
    s1:synchronize()
    assert.are.equal(esc("AGIN"), read(c:data_ptr(), 4))
  end)

  it("copy between devices waits for the source device's legacy stream", function()
    -- the producer's work is on device 0's legacy stream (it was passed stream 1)
    local t = dlpack.zeros({4}, "uint8", "cuda:0")
    local u = dlpack.from_dlpack((producer(t)))
    fake.write(1, u:data_ptr(), "LEG0", 0)
    local b = dlpack.empty({4}, "uint8", "cuda:1")
    b:copy(u)
    assert.are.equal(esc("LEG0"), read(b:data_ptr(), 4))
    local h = dlpack.zeros({4}, "uint8")
    fake.write(1, u:data_ptr(), "AGN0", 0)
    fake.set_current(1) -- whatever context the caller has current
    h:copy(u)
    fake.set_current(nil)
    assert.are.equal(esc("AGN0"), esc(h:tobytes()))
  end)

  it("exporting a cuda:0 tensor to a consumer stream of device 1", function()
    local p = cuda.Stream({device = 0})
    local c = cuda.Stream({device = 1})
    local t = dlpack.zeros({4}, "uint8", "cuda:0")
    t:copy(u8("...."), {stream = p})
    fake.write(p.handle, t:data_ptr(), "XDEV")
    local cap = dlpack.to_dlpack(t, {stream = c})
    c:synchronize()
    assert.are.equal(esc("XDEV"), read(t:data_ptr(), 4))
    dlpack.release_capsule(cap)
  end)

  it("frees every allocation exactly once in the end", function()
    gc()
    fake.sync_all()
    local live = fake.live()
    assert.are.equal(0, live.device, "device blocks still allocated")
    assert.are.equal(0, live.host, "pinned blocks still allocated")
    assert.are.equal(0, live.managed, "managed blocks still allocated")
  end)
end)

describe("threads", function()
  it("several lua_States on several threads use streams, copies and per-thread streams at once", function()
    local r = fab.run_threads([[
      local dlpack = require "dlpack"
      local fake = require "fakecuda"
      local _, index = ...
      local device = index % 2
      local s = dlpack.cuda.Stream({device = device})
      local values = {}
      for i = 1, 64 do values[i] = index * 1000 + i end
      local d = dlpack.empty({64}, "int32", "cuda:" .. device)
      for _ = 1, 20 do
        d:copy(dlpack.tensor(values, "int32"), {stream = s})
        local h = d:to({device = "cpu", stream = s})
        s:synchronize()
        assert(h:tobytes() == dlpack.tensor(values, "int32"):tobytes(), "wrong bytes on thread " .. index)
      end
      -- this thread's per-thread stream is its own queue (checked before the
      -- barrier: after it, threads that end free memory, which synchronizes)
      local p = dlpack.empty({4}, "uint8", "cuda:" .. device)
      fake.write(2, p:data_ptr(), string.format("T%03d", index), device)
      local mine = fake.pending(2, device)
      assert(mine == 1, "per-thread queue shared between threads: " .. mine)
      wait_all()
      local cap = dlpack.to_dlpack(p, {stream = 2}) -- p's work is on the legacy stream: the per-thread one waits
      require("dlpack.unsafe").wrap_stream(2, device):synchronize() -- this device's per-thread stream
      dlpack.release_capsule(cap)
      assert(fake.current_device() == nil, "a context was left current")
      local bytes = require("dlpack.unsafe").wrap_stream(2, device):query() and p:to("cpu"):tobytes()
      d:release()
      p:release()
      s:close()
      return bytes
    ]], 8)
    for i, res in ipairs(r) do
      assert.is_true(res.ok, tostring(res.value))
      assert.are.equal(string.format("T%03d", i), res.value)
    end
    gc()
  end)
end)

-- last: a module that breaks its shared stream objects would fail the tests after it
describe("the shared stream objects", function()
  it("closing legacy_stream or per_thread_stream leaves them usable", function()
    cuda.legacy_stream:close()
    cuda.per_thread_stream:close()
    assert.are.equal(1, cuda.legacy_stream.handle)
    assert.are.equal(2, cuda.per_thread_stream.handle)
    cuda.legacy_stream:synchronize()
  end)
end)
