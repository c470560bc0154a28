-- Exchange through capsules and the __dlpack protocol.
local dlpack = require "dlpack"
local support = require "support"

local ALL = support.DTYPES
local SUBBYTE = {float6_e2m3fn = true, float6_e3m2fn = true, float4_e2m1fn = true}

local raises = support.raises

local function exchange(t, export_opts, import_opts)
  return dlpack.from_dlpack(dlpack.to_dlpack(t, export_opts), import_opts)
end

-- a {3, 4} float64 tensor holding 1..12
local function m34()
  return dlpack.tensor({{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}}, "float64")
end

describe("round trips", function()
  it("keep dtype, shape, strides and memory for every dtype", function()
    for _, dtype in ipairs(ALL) do
      local t = dlpack.zeros({2, 3}, dtype)
      local u = exchange(t)
      assert.are.equal(dtype, u.dtype)
      assert.are.same({2, 3}, u.shape, dtype)
      assert.are.same(t.strides, u.strides, dtype)
      assert.are.equal(t:data_ptr(), u:data_ptr(), dtype)
      assert.are.equal("cpu", u.device)
      assert.is_false(u.readonly)
    end
  end)

  it("keep the bytes of every whole-byte dtype", function()
    for _, dtype in ipairs(ALL) do
      if not SUBBYTE[dtype] and dtype ~= "bool" then
        local bytes = "\1\2\3\4\5\6\7\8\9\10\11\12\13\14\15\16\17\18\19\20\21\22\23\24\25\26\27\28\29\30\31\32"
        local t = dlpack.frombytes(bytes, dtype)
        assert.are.equal(bytes, exchange(t):tobytes(), dtype)
        assert.are.equal(bytes, exchange(t, {max_version = {0, 8}}):tobytes(), dtype .. " legacy")
      end
    end
  end)

  it("keep every dtype through a legacy capsule", function()
    for _, dtype in ipairs(ALL) do
      local u = exchange(dlpack.zeros({4}, dtype), {max_version = {0, 8}})
      assert.are.equal(dtype, u.dtype)
      assert.are.same({4}, u.shape)
    end
  end)

  it("keep element values", function()
    local t = dlpack.tensor({{true, false}, {false, true}})
    assert.are.same({{true, false}, {false, true}}, exchange(t):totable())
    local h = dlpack.tensor({0.5, -2, 65504}, "float16")
    assert.are.same({0.5, -2, 65504}, exchange(h):totable())
    local i = dlpack.tensor({math.mininteger, math.maxinteger}, "int64")
    assert.are.same({math.mininteger, math.maxinteger}, exchange(i):totable())
  end)

  it("keep 0-d and zero-size shapes", function()
    for _, shape in ipairs({{}, {0}, {0, 4}, {3, 0}, {2, 0, 3}}) do
      local u = exchange(dlpack.zeros(shape, "int32"))
      assert.are.same(shape, u.shape)
      local l = exchange(dlpack.zeros(shape, "int32"), {max_version = {0, 8}})
      assert.are.same(shape, l.shape)
    end
    local s = exchange(dlpack.tensor(42))
    assert.are.equal(0, s.ndim)
    assert.are.equal(42, s:item())
  end)

  it("keep shapes of size-1 dimensions up to 32 dimensions", function()
    for ndim = 1, 32 do
      local shape = {}
      for i = 1, ndim do shape[i] = 1 end
      local t = dlpack.full(shape, ndim, "int16")
      local u = exchange(t)
      assert.are.equal(ndim, u.ndim)
      assert.are.same(shape, u.shape)
      assert.are.same(t.strides, u.strides)
      assert.are.equal(ndim, u:reshape({1}):item())
    end
  end)
end)

-- to_dlpack(t) and from_dlpack(capsule) without options take a short path of their own; an
-- empty options table takes the general one. Both must give the same capsule, the same tensor
-- and the same errors.
describe("calls without options", function()
  local unsafe = require "dlpack.unsafe"

  -- what to_dlpack(t, ...) gives: its error, or the capsule's kind and the tensor it holds
  local function outcome(t, ...)
    local ok, r = pcall(dlpack.to_dlpack, t, ...)
    if not ok then return {error = tostring(r)} end
    local info = dlpack.capsule_info(r)
    local u = dlpack.from_dlpack(r)
    return {name = info.name, dtype = u.dtype, shape = u.shape, strides = u.strides, readonly = u.readonly,
            device = u.device, bytes = u:tobytes(), shared = u:data_ptr() == t:data_ptr()}
  end

  it("export what an empty options table exports, or raise the same error", function()
    local base = dlpack.tensor({{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}}, "float32")
    local keep = dlpack.tensor({1, 2, 3, 4}, "int32")
    local released = dlpack.zeros({2}, "int8")
    released:release()
    local cases = {
      base, base:transpose(1, 2), base[2], base:as_readonly(), dlpack.tensor(7, "int64"),
      dlpack.zeros({0, 3}, "float64"), dlpack.zeros({5}, "float4_e2m1fn"), released,
      unsafe.wrap(keep:data_ptr(), {4}, "int32", keep),
    }
    for k, t in ipairs(cases) do
      assert.are.same(outcome(t, {}), outcome(t), "case " .. k)
    end
    for _, bad in ipairs({unsafe.pointer(16), 1, "x", {}, true}) do
      local a = select(2, pcall(dlpack.to_dlpack, bad))
      local b = select(2, pcall(dlpack.to_dlpack, bad, {}))
      assert.are.equal(tostring(b), tostring(a))
    end
  end)

  it("import what an empty options table imports, or raise the same error", function()
    local t = dlpack.tensor({1, 2, 3}, "int16")
    local a, b = dlpack.from_dlpack(dlpack.to_dlpack(t)), dlpack.from_dlpack(dlpack.to_dlpack(t), {})
    assert.are.same({a.dtype, a.shape, a.strides, a:data_ptr(), a:tobytes()},
                    {b.dtype, b.shape, b.strides, b:data_ptr(), b:tobytes()})
    local used = dlpack.to_dlpack(t)
    dlpack.from_dlpack(used)
    for _, bad in ipairs({used, unsafe.pointer(16)}) do
      local x = select(2, pcall(dlpack.from_dlpack, bad))
      local y = select(2, pcall(dlpack.from_dlpack, bad, {}))
      assert.are.equal(tostring(y), tostring(x))
    end
  end)
end)

describe("strides of views after exchange", function()
  local function views()
    local t = m34()
    return {
      row = t:narrow(1, 2, 1),
      column = t:narrow(2, 3, 1),
      column_1d = t:select(2, 2),
      transpose = t:transpose(1, 2),
      reversed_columns = t:slice(2, -1, 1, -1),
      reversed_rows_step2 = t:slice(1, -1, 1, -2),
      corner = t:narrow(1, 2, 1):narrow(2, 2, 1),
      unsqueezed = t:unsqueeze(2),
      expanded = t:select(1, 1):unsqueeze(1):expand({5, 4}),
      interior = t:narrow(1, 2, 2):narrow(2, 2, 2),
    }
  end

  for name, _ in pairs(views()) do
    it("are preserved exactly for a " .. name .. " view, with its values", function()
      local v = views()[name]
      for _, opts in ipairs({{}, {max_version = {0, 8}}}) do
        local u = exchange(v, opts)
        assert.are.same(v.shape, u.shape)
        assert.are.same(v.strides, u.strides)
        assert.are.same(v:totable(), u:totable())
        assert.are.equal(v:data_ptr(), u:data_ptr())
      end
    end)
  end

  it("point at the right memory for a view with an offset", function()
    local t = m34()
    local u = exchange(t:narrow(1, 3, 1):narrow(2, 4, 1))
    assert.are.equal(12.0, u:get(1, 1))
    u:set(1, 1, -12)
    assert.are.equal(-12.0, t:get(3, 4))
  end)
end)

describe("memory sharing", function()
  it("shares memory both ways", function()
    local t = dlpack.zeros({3}, "int32")
    local u = exchange(t)
    u[2] = 5
    assert.are.equal(5, t[2])
    t[3] = 7
    assert.are.equal(7, u[3])
  end)

  it("shares memory through a legacy capsule, writable", function()
    local t = dlpack.zeros({3}, "int32")
    local u = exchange(t, {max_version = {0, 8}})
    assert.is_false(u.readonly)
    u[1] = 4
    assert.are.equal(4, t[1])
  end)

  it("shares memory when from_dlpack is given the tensor itself", function()
    local t = dlpack.zeros({3}, "float64")
    local u = dlpack.from_dlpack(t)
    u[2] = 42
    assert.are.equal(42.0, t[2])
  end)

  it("gives independent memory with copy = true", function()
    local t = dlpack.tensor({1, 2, 3}, "int32")
    for _, u in ipairs({dlpack.from_dlpack(t, {copy = true}), exchange(t, {copy = true}),
        exchange(t, {copy = true, max_version = {0, 8}}), exchange(t, nil, {copy = true})}) do
      assert.are.same({1, 2, 3}, u:totable())
      assert.are.equal("int32", u.dtype)
      u[1] = 100
      assert.are.equal(1, t[1])
      assert.are_not.equal(t:data_ptr(), u:data_ptr())
    end
  end)

  it("copies a non-contiguous view correctly with copy = true", function()
    local t = m34()
    local v = t:transpose(1, 2):slice(2, -1, 1, -1)
    local u = dlpack.from_dlpack(v, {copy = true})
    assert.are.same(v:totable(), u:totable())
  end)

  it("shares memory with copy = false on the same device", function()
    local t = dlpack.zeros({2}, "int8")
    for _, u in ipairs({dlpack.from_dlpack(t, {copy = false}), exchange(t, {copy = false}),
        exchange(t, nil, {copy = false})}) do
      u[1] = 3
      assert.are.equal(3, t[1])
      t[1] = 0
    end
  end)

  it("shares memory with device = 'cpu'", function()
    local t = dlpack.zeros({2}, "int8")
    local u = dlpack.from_dlpack(t, {device = "cpu"})
    u[2] = 9
    assert.are.equal(9, t[2])
    local w = exchange(t, {device = "cpu"})
    w[1] = 8
    assert.are.equal(8, t[1])
    local x = dlpack.from_dlpack(dlpack.to_dlpack(t), {device = "cpu", copy = false})
    assert.are.equal(8, x[1])
  end)

  it("raises for device = 'cuda:0' with copy = false", function()
    local t = dlpack.zeros({2})
    raises(function() dlpack.from_dlpack(t, {device = "cuda:0", copy = false}) end)
    raises(function() dlpack.to_dlpack(t, {device = "cuda:0", copy = false}) end)
  end)

  it("raises for an unknown target device", function()
    local t = dlpack.zeros({2})
    raises(function() dlpack.from_dlpack(t, {device = "tpu:0"}) end, "tpu")
    raises(function() dlpack.to_dlpack(t, {device = "tpu:0"}) end, "tpu")
  end)
end)

describe("max_version negotiation", function()
  local t = dlpack.zeros({2}, "float32")

  it("gives a legacy capsule for major 0", function()
    local cap = dlpack.to_dlpack(t, {max_version = {0, 8}})
    assert.is_false(dlpack.capsule_info(cap).versioned)
    dlpack.release_capsule(cap)
  end)

  it("gives a versioned capsule when max_version is absent", function()
    local cap = dlpack.to_dlpack(t)
    assert.is_true(dlpack.capsule_info(cap).versioned)
    dlpack.release_capsule(cap)
    local cap2 = dlpack.to_dlpack(t, {})
    assert.is_true(dlpack.capsule_info(cap2).versioned)
    dlpack.release_capsule(cap2)
  end)

  for _, mv in ipairs({{1, 0}, {1, 3}, {1, 99}, {2, 0}, {100, 3}}) do
    it("gives our 1.x versioned capsule for max_version {" .. mv[1] .. ", " .. mv[2] .. "}", function()
      local cap = dlpack.to_dlpack(t, {max_version = mv})
      assert.is_true(dlpack.capsule_info(cap).versioned)
      local u = dlpack.from_dlpack(cap)
      assert.are.same({2}, u.shape)
    end)
  end

  it("raises on a malformed max_version", function()
    raises(function() dlpack.to_dlpack(t, {max_version = "1.3"}) end)
    raises(function() dlpack.to_dlpack(t, {max_version = {-1, 0}}) end)
  end)
end)

describe("read-only exchange", function()
  it("exports READ_ONLY and re-imports read-only", function()
    local base = dlpack.tensor({1, 2}, "int32")
    local r = base:as_readonly()
    local u = exchange(r)
    assert.is_true(u.readonly)
    raises(function() u[1] = 5 end, "read%-only")
    base[1] = 7
    assert.are.equal(7, u[1])
    assert.is_true(dlpack.from_dlpack(r).readonly)
  end)

  it("refuses a legacy export of a read-only tensor with a BufferError", function()
    local r = dlpack.tensor({1, 2}, "int32"):as_readonly()
    local err = raises(function() dlpack.to_dlpack(r, {max_version = {0, 8}}) end)
    assert.is_truthy(tostring(err):find("dlpack.BufferError", 1, true), tostring(err))
    assert.is_true(dlpack.is_buffer_error(err))
    local err2 = raises(function() dlpack.to_dlpack(r, {max_version = {0, 8}, copy = false}) end)
    assert.is_true(dlpack.is_buffer_error(err2))
    local err3 = raises(function() getmetatable(r).__dlpack(r, {max_version = {0, 8}}) end)
    assert.is_true(dlpack.is_buffer_error(err3))
  end)

  it("allows a legacy export of a read-only tensor with copy = true, writable and independent", function()
    local base = dlpack.tensor({1, 2}, "int32")
    local cap = dlpack.to_dlpack(base:as_readonly(), {max_version = {0, 8}, copy = true})
    assert.is_false(dlpack.capsule_info(cap).versioned)
    local w = dlpack.from_dlpack(cap)
    assert.is_false(w.readonly)
    w[1] = 7
    assert.are.equal(1, base[1])
  end)

  it("gives a writable tensor when a read-only one is imported with copy = true", function()
    local r = dlpack.tensor({1, 2}, "int32"):as_readonly()
    local c = dlpack.from_dlpack(r, {copy = true})
    assert.is_false(c.readonly)
    c[1] = 3
    assert.are.equal(1, r[1])
  end)
end)

describe("is_buffer_error", function()
  it("is false for argument errors", function()
    local ok, err = pcall(dlpack.zeros, {2}, "float99")
    assert.is_false(ok)
    assert.is_false(dlpack.is_buffer_error(err))
    local ok2, err2 = pcall(dlpack.to_dlpack, 42)
    assert.is_false(ok2)
    assert.is_false(dlpack.is_buffer_error(err2))
  end)

  it("is false for values that are not errors", function()
    assert.is_false(dlpack.is_buffer_error(nil))
    assert.is_false(dlpack.is_buffer_error(42))
    assert.is_false(dlpack.is_buffer_error({}))
    assert.is_false(dlpack.is_buffer_error("some other failure"))
  end)

  it("is true for a string carrying the marker", function()
    assert.is_true(dlpack.is_buffer_error("x.lua:1: dlpack.BufferError: cannot export"))
    assert.is_true(dlpack.is_buffer_error("dlpack.BufferError"))
  end)

  it("finds the marker after an embedded NUL, and not a cut one", function()
    assert.is_true(dlpack.is_buffer_error("x\0y: dlpack.BufferError: cannot export"))
    assert.is_false(dlpack.is_buffer_error("dlpack.Buffer\0Error"))
    assert.is_false(dlpack.is_buffer_error("dlpack.BufferErro"))
  end)
end)

describe("streams on the cpu", function()
  it("raise when a stream is passed for a CPU tensor", function()
    local t = dlpack.zeros({2})
    raises(function() dlpack.to_dlpack(t, {stream = 1}) end)
    raises(function() dlpack.to_dlpack(t, {stream = 2}) end)
    raises(function() dlpack.to_dlpack(t, {stream = 12345}) end)
    raises(function() getmetatable(t).__dlpack(t, {stream = 1}) end)
  end)
end)

describe("the __dlpack protocol", function()
  local function producer(inner, log)
    return setmetatable({}, {
      __dlpack = function(self, opts)
        log[#log + 1] = {what = "dlpack", self = self, opts = opts}
        return dlpack.to_dlpack(inner, opts)
      end,
      __dlpack_device = function(self)
        log[#log + 1] = {what = "device", self = self}
        return 1, 0
      end,
    })
  end

  it("consumes a Lua producer that delegates to to_dlpack, sharing memory", function()
    local inner = dlpack.tensor({10, 20, 30}, "float32")
    local t = dlpack.from_dlpack(producer(inner, {}))
    assert.are.same({10, 20, 30}, t:totable())
    t[3] = 33
    assert.are.equal(33.0, inner[3])
  end)

  it("calls __dlpack_device first, then __dlpack with max_version set to 1.3", function()
    local log = {}
    local p = producer(dlpack.zeros({2}), log)
    dlpack.from_dlpack(p)
    assert.are.equal(2, #log)
    assert.are.equal("device", log[1].what)
    assert.are.equal("dlpack", log[2].what)
    assert.are.equal(p, log[1].self)
    assert.are.equal(p, log[2].self)
    local opts = log[2].opts
    assert.are.equal("table", type(opts))
    assert.are.equal("table", type(opts.max_version))
    assert.are.equal(1, opts.max_version[1] or opts.max_version.major)
    assert.are.equal(3, opts.max_version[2] or opts.max_version.minor)
  end)

  it("passes copy = true to the producer and gives independent memory", function()
    local log = {}
    local inner = dlpack.tensor({1, 2}, "int32")
    local t = dlpack.from_dlpack(producer(inner, log), {copy = true})
    assert.is_true(log[#log].opts.copy)
    t[1] = 9
    assert.are.equal(1, inner[1])
  end)

  it("raises when a Lua __dlpack returns a raw pointer", function()
    local inner = dlpack.tensor({1, 2, 3}, "int64")
    local forged = setmetatable({}, {
      __dlpack = function() return inner:data_ptr(), "dltensor_versioned" end,
      __dlpack_device = function() return 1, 0 end,
    })
    raises(function() dlpack.from_dlpack(forged) end)
    local legacy = setmetatable({}, {
      __dlpack = function() return inner:data_ptr(), "dltensor" end,
      __dlpack_device = function() return 1, 0 end,
    })
    raises(function() dlpack.from_dlpack(legacy) end)
    assert.are.same({1, 2, 3}, inner:totable())
  end)

  it("raises when a Lua __dlpack returns a real managed-tensor pointer", function()
    local unsafe = require "dlpack.unsafe"
    local inner = dlpack.tensor({1, 2, 3}, "int64")
    local ptr, name = unsafe.take(dlpack.to_dlpack(inner))
    local forged = setmetatable({}, {
      __dlpack = function() return ptr, name end,
      __dlpack_device = function() return 1, 0 end,
    })
    raises(function() dlpack.from_dlpack(forged) end)
    -- hand the pointer back so that its deleter runs
    local u = dlpack.from_dlpack(unsafe.adopt(ptr, name))
    assert.are.same({1, 2, 3}, u:totable())
  end)

  it("raises when __dlpack returns something that is not a capsule", function()
    for _, bad in ipairs({42, "capsule", {}, false}) do
      local p = setmetatable({}, {
        __dlpack = function() return bad end,
        __dlpack_device = function() return 1, 0 end,
      })
      raises(function() dlpack.from_dlpack(p) end)
    end
  end)

  it("propagates an error raised by the producer", function()
    local p = setmetatable({}, {
      __dlpack = function() error("producer refuses") end,
      __dlpack_device = function() return 1, 0 end,
    })
    raises(function() dlpack.from_dlpack(p) end, "producer refuses")
  end)

  it("raises for a value without __dlpack", function()
    raises(function() dlpack.from_dlpack({}) end)
    raises(function() dlpack.from_dlpack(42) end)
    raises(function() dlpack.from_dlpack("tensor") end)
    raises(function() dlpack.from_dlpack(nil) end)
    raises(function() dlpack.from_dlpack(setmetatable({}, {})) end)
  end)

  it("refuses a light userdata that is not a capsule", function()
    local t = dlpack.tensor({1, 2})
    raises(function() dlpack.from_dlpack(t:data_ptr()) end)
    assert.are.same({1, 2}, t:totable())
  end)

  it("works on tensors through their metatable", function()
    local t = dlpack.tensor({5, 6}, "int16")
    local mt = getmetatable(t)
    local dt, id = mt.__dlpack_device(t)
    assert.are.equal(1, dt)
    assert.are.equal(0, id)
    assert.are.equal("integer", math.type(dt))
    assert.are.equal("integer", math.type(id))
    local cap = mt.__dlpack(t, {max_version = {1, 3}})
    assert.is_true(dlpack.is_capsule(cap))
    assert.is_true(dlpack.capsule_info(cap).versioned)
    assert.are.same({5, 6}, dlpack.from_dlpack(cap):totable())
    local legacy = mt.__dlpack(t, {max_version = {0, 8}})
    assert.is_false(dlpack.capsule_info(legacy).versioned)
    dlpack.release_capsule(legacy)
    local plain = mt.__dlpack(t)
    assert.is_true(dlpack.is_capsule(plain))
    dlpack.release_capsule(plain)
  end)

  it("accepts dl_device for the cpu and copy in __dlpack on tensors", function()
    local t = dlpack.tensor({5, 6}, "int16")
    local mt = getmetatable(t)
    local u = dlpack.from_dlpack(mt.__dlpack(t, {max_version = {1, 3}, dl_device = {1, 0}}))
    u[1] = 50
    assert.are.equal(50, t[1])
    local c = dlpack.from_dlpack(mt.__dlpack(t, {max_version = {1, 3}, copy = true}))
    c[1] = 0
    assert.are.equal(50, t[1])
    raises(function() mt.__dlpack(t, {max_version = {1, 3}, dl_device = {2, 0}, copy = false}) end)
  end)
end)
