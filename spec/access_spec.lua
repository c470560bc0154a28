-- Properties, queries and element access.
local dlpack = require "dlpack"
local support = require "support"
-- Specs of integer subtypes and of the int64 range (Lua 5.3+): pending elsewhere, with why.
local it_int = support.INTEGERS and it or function(name) pending(name .. ": " .. support.NO_INTEGERS) end

local raises = support.raises

-- the address of a light userdata as an integer
local function addr(p)
  local hex = tostring(p):match("0x(%x+)") or tostring(p):match(":%s*(%x+)")
  return tonumber(hex, 16)
end

local is_nan = support.is_nan
local function is_negzero(x) return x == 0 and 1 / x < 0 end

-- store x in a one-element tensor of `dtype` and read it back
local function roundtrip(dtype, x)
  local t = dlpack.zeros({1}, dtype)
  t[1] = x
  return t[1]
end

describe("properties", function()
  local t
  before_each(function() t = dlpack.zeros({2, 3, 4}, "int16") end)

  it("reports shape and strides in elements", function()
    assert.are.same({2, 3, 4}, t.shape)
    assert.are.same({12, 4, 1}, t.strides)
  end)

  it("returns new shape and strides tables each time", function()
    local s = t.shape
    s[1] = 99
    assert.are.same({2, 3, 4}, t.shape)
    local st = t.strides
    st[1] = 99
    assert.are.same({12, 4, 1}, t.strides)
    assert.are_not.equal(t.shape, t.shape)
  end)

  it("reports ndim, dtype, device, itemsize, nbytes, byte_offset and readonly", function()
    assert.are.equal(3, t.ndim)
    assert.are.equal("int16", t.dtype)
    assert.are.equal("cpu", t.device)
    assert.are.equal(2, t.itemsize)
    assert.are.equal(48, t.nbytes)
    assert.are.equal("integer", math.type(t.byte_offset))
    assert.is_true(t.byte_offset >= 0)
    assert.is_false(t.readonly)
  end)

  it("reports integers for the integer properties", function()
    assert.are.equal("integer", math.type(t.ndim))
    assert.are.equal("integer", math.type(t.itemsize))
    assert.are.equal("integer", math.type(t.nbytes))
    assert.are.equal("integer", math.type(t.shape[1]))
    assert.are.equal("integer", math.type(t.strides[1]))
  end)

  it("describes a 0-d tensor", function()
    local s = dlpack.zeros({}, "float64")
    assert.are.equal(0, s.ndim)
    assert.are.same({}, s.shape)
    assert.are.same({}, s.strides)
    assert.are.equal(8, s.nbytes)
  end)

  it("reports nbytes of a view as numel * itemsize", function()
    local v = t:narrow(3, 1, 2)
    assert.are.equal(12 * 2, v.nbytes)
  end)
end)

describe("queries", function()
  local t
  before_each(function() t = dlpack.zeros({2, 3, 4}, "float32") end)

  it("numel counts the elements", function()
    assert.are.equal(24, t:numel())
    assert.are.equal(1, dlpack.zeros({}):numel())
    assert.are.equal(0, dlpack.zeros({3, 0}):numel())
  end)

  it("size returns the shape, or one dimension", function()
    assert.are.same({2, 3, 4}, t:size())
    assert.are.equal(3, t:size(2))
    assert.are.equal(4, t:size(-1))
    assert.are.equal(2, t:size(-3))
  end)

  it("size raises on a dimension out of range", function()
    raises(function() t:size(0) end)
    raises(function() t:size(4) end)
    raises(function() t:size(-4) end)
  end)

  it("stride returns the strides, or one dimension", function()
    assert.are.same({12, 4, 1}, t:stride())
    assert.are.equal(4, t:stride(2))
    assert.are.equal(1, t:stride(-1))
  end)

  it("stride raises on a dimension out of range", function()
    raises(function() t:stride(0) end)
    raises(function() t:stride(4) end)
  end)

  it("is_contiguous is true for new tensors and false for transposes", function()
    assert.is_true(t:is_contiguous())
    assert.is_false(t:transpose(1, 3):is_contiguous())
    assert.is_false(t:narrow(3, 1, 2):is_contiguous())
    assert.is_true(t:narrow(1, 2, 1):is_contiguous())
    assert.is_true(dlpack.zeros({}):is_contiguous())
  end)

  it("is_contiguous is false for negative and zero strides", function()
    assert.is_false(dlpack.zeros({3}):slice(1, -1, 1, -1):is_contiguous())
    assert.is_false(dlpack.zeros({1, 3}):expand({2, 3}):is_contiguous())
    assert.is_false(dlpack.zeros({6}):slice(1, 1, 6, 2):is_contiguous())
  end)

  it("is_contiguous ignores the strides of size-1 and empty dimensions", function()
    assert.is_true(dlpack.zeros({1, 4}):transpose(1, 2):is_contiguous())
    assert.is_true(dlpack.zeros({4}):unsqueeze(2):is_contiguous())
    assert.is_true(dlpack.zeros({0, 3}):transpose(1, 2):is_contiguous())
  end)

  it("data_ptr gives a light userdata at the first element", function()
    local p = t:data_ptr()
    assert.are.equal("userdata", type(p))
    assert.is_nil(getmetatable(p))
    assert.are.equal(p, t:data_ptr())
    local row = t:select(1, 2)
    assert.are.equal(addr(p) + 12 * 4, addr(row:data_ptr()))
    local elem = t:narrow(3, 3, 2)
    assert.are.equal(addr(p) + 2 * 4, addr(elem:data_ptr()))
  end)

  it("# gives the size of dimension 1", function()
    assert.are.equal(2, #t)
    assert.are.equal(3, #t[1])
    assert.are.equal(0, #dlpack.zeros({0}))
  end)

  it("# raises on a 0-d tensor", function()
    raises(function() return #dlpack.zeros({}) end)
  end)

  it("dim gives the number of dimensions, and raises on a released tensor", function()
    assert.are.equal(3, t:dim())
    assert.are.equal(2, t[1]:dim())
    assert.are.equal(0, dlpack.zeros({}):dim())
    assert.are.equal(1, dlpack.zeros({0}):dim())
    assert.are.equal(64, dlpack.zeros({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
      1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
      1, 1, 1, 1, 1, 1, 1, 1}):dim())
    local r = dlpack.zeros({2})
    r:release()
    raises(function() return r:dim() end, "released")
    raises(function() return t.dim(42) end)
    raises(function() return t.dim({}) end)
  end)
end)

describe("unknown fields", function()
  local t = dlpack.zeros({2, 3})

  it("raise an error naming the field", function()
    support.raises_plain(function() return t.shpae end, "'shpae'")
    support.raises_plain(function() return t.Shape end, "'Shape'")
    support.raises_plain(function() return t.nosuch end, "no field")
    raises(function() return t[""] end, "no field")
    raises(function() return t["1"] end, "no field")
    raises(function() return t._x end, "no field")
  end)

  it("leave names starting with __ free: they read as nil, for protocol probes", function()
    assert.is_nil(t.__dlpack_device__)
    assert.is_nil(t.__name)
    assert.is_nil(t.__nosuch)
    assert.is_nil(t.__)
  end)

  it("do not change methods, properties, or methods added to dlpack.Tensor", function()
    assert.are.same({2, 3}, t.shape)
    assert.are.equal("function", type(t.numel))
    assert.are.equal("function", type(t.__dlpack))
    dlpack.Tensor.double_numel = function(self) return 2 * self:numel() end
    assert.are.equal(12, t:double_numel())
    dlpack.Tensor.double_numel = nil
    raises(function() return t.double_numel end, "double_numel")
  end)

  it("on a released tensor raise released", function()
    local r = dlpack.zeros({2})
    r:release()
    raises(function() return r.shpae end, "released")
    raises(function() return r.__nosuch end, "released")
  end)
end)

describe("iteration", function()
  if not support.ITERATION then
    pending(support.NO_ITERATION)
    return
  end
  -- The ipairs in scope is Lua's own (a C function) or, where busted loads it on 5.1 and 5.2,
  -- lua-compat-5.3's: a Lua function that reads t[i] until nil, so it cannot be told the end
  -- and raises there (README, "Lua versions").
  local C_IPAIRS = debug.getinfo(ipairs, "S").what == "C"
  local NO_IPAIRS = "the ipairs in scope is a Lua function (lua-compat-5.3's), which reads t[n + 1]"
  local function it_ipairs(name, fn)
    if C_IPAIRS then it(name, fn) else pending(name .. ": " .. NO_IPAIRS) end
  end
  local function collect(iter, ...)
    local keys, values = {}, {}
    for k, v in iter(...) do keys[#keys + 1] = k; values[#values + 1] = v end
    return keys, values
  end

  for _, iter in ipairs({ipairs, pairs}) do
    local name = iter == ipairs and "ipairs" or "pairs"
    local it = iter == ipairs and it_ipairs or it -- luacheck: ignore 431

    it(name .. " walks the elements of a 1-d tensor and stops after the last", function()
      local keys, values = collect(iter, dlpack.tensor({10, 20, 30}, "int32"))
      assert.are.same({1, 2, 3}, keys)
      assert.are.same({10, 20, 30}, values)
      keys, values = collect(iter, dlpack.tensor({true, false}))
      assert.are.same({1, 2}, keys)
      assert.are.same({true, false}, values)
      keys, values = collect(iter, dlpack.tensor({1, 2, 3, 4, 5, 6}, "float32"):slice(1, -1, 1, -2))
      assert.are.same({1, 2, 3}, keys)
      assert.are.same({6.0, 4.0, 2.0}, values)
    end)

    it(name .. " walks the rows of an n-d tensor as views", function()
      local t = dlpack.tensor({{1, 2}, {3, 4}, {5, 6}})
      local keys, rows = collect(iter, t)
      assert.are.same({1, 2, 3}, keys)
      for i, row in ipairs(rows) do
        assert.are.same({2}, row.shape)
        assert.are.same(t[i]:totable(), row:totable())
      end
      rows[2][1] = 30
      assert.are.equal(30, t:get(2, 1))
      local _, cols = collect(iter, t:transpose(1, 2))
      assert.are.same({{1, 30, 5}, {2, 4, 6}}, {cols[1]:totable(), cols[2]:totable()})
    end)

    it(name .. " yields nothing for an empty tensor", function()
      assert.are.same({}, (collect(iter, dlpack.zeros({0}))))
      assert.are.same({}, (collect(iter, dlpack.zeros({0, 3}))))
      assert.are.equal(3, #(collect(iter, dlpack.zeros({3, 0}))))
    end)

    it(name .. " raises on a 0-d tensor", function()
      raises(function() collect(iter, dlpack.tensor(5)) end, "0%-d")
    end)

    it(name .. " raises on a released tensor, also when released during the walk", function()
      local t = dlpack.tensor({1, 2, 3})
      t:release()
      raises(function() collect(iter, t) end, "released")
      local u = dlpack.tensor({{1, 2}, {3, 4}})
      raises(function() for i in iter(u) do if i == 1 then u:release() end end end, "released")
    end)

    it(name .. " raises on dtypes without element access, naming the dtype", function()
      raises(function() collect(iter, dlpack.zeros({2}, "complex64")) end, "complex64")
      assert.are.equal(2, #(collect(iter, dlpack.zeros({2, 2}, "complex64"))))
    end)
  end

  it_ipairs("t[n + 1] written in a script still raises; only ipairs' own lookups see the end", function()
    local t = dlpack.tensor({10, 20, 30})
    raises(function() return t[4] end, "out of range")
    raises(function() return t[#t + 1] end, "out of range")
    raises(function() return t[0] end, "out of range")
    raises(function() return t[5] end, "out of range")
    raises(function() return t[-4] end, "out of range")
    raises(function() return dlpack.zeros({2, 2})[3] end, "out of range")
    raises(function() return rawequal(getmetatable(t).__index(t, 4), nil) end, "out of range")
    -- ipairs' iterator called by hand: the end is nil, every other index raises
    local f = ipairs(t)
    assert.are.same({3, 30}, {f(t, 2)})
    assert.is_nil(f(t, 3))
    raises(function() return f(t, 4) end, "out of range")
    raises(function() return f(t, -1) end, "out of range")
    raises(function() return f(t, math.maxinteger) end, "out of range")
    raises(function() return f(t, math.mininteger) end, "out of range")
  end)

  it("__ipairs, which Lua 5.2's ipairs asks, gives the walk of pairs", function()
    local t = dlpack.tensor({10, 20})
    local mt = getmetatable(t)
    assert.are.equal(mt.__pairs, mt.__ipairs)
    assert.are.same({{1, 2}, {10, 20}}, {collect(mt.__ipairs, t)})
  end)

  it_ipairs("ipairs ends a tensor held in a table field or a coroutine the same way", function()
    local holder = {t = dlpack.tensor({1, 2})}
    local n = 0
    for _ in ipairs(holder.t) do n = n + 1 end
    assert.are.equal(2, n)
    local co = coroutine.wrap(function()
      for _, v in ipairs(holder.t) do coroutine.yield(v) end
      return "done"
    end)
    assert.are.same({1, 2, "done"}, {co(), co(), co()})
  end)

  it("pairs' iterator refuses hostile control values and states", function()
    local t = dlpack.tensor({10, 20, 30})
    local f, s, k = pairs(t)
    assert.are.equal(t, s)
    assert.are.equal(0, k)
    assert.are.same({1, 10}, {f(t, 0)})
    assert.is_nil(f(t, 3))
    raises(function() return f(t, 4) end, "out of range")
    raises(function() return f(t, -1) end, "out of range")
    raises(function() return f(t, math.maxinteger) end, "out of range")
    raises(function() return f(t, math.mininteger) end, "out of range")
    raises(function() return f(t, 1.5) end)
    raises(function() return f(t, 0 / 0) end)
    raises(function() return f(t, "x") end)
    raises(function() return f(t, nil) end)
    raises(function() return f({}, 0) end)
    raises(function() return f(42, 0) end)
    raises(function() return f(dlpack.tensor(1), 0) end, "0%-d")
    local mt = getmetatable(t)
    raises(function() return mt.__pairs({}) end)
    raises(function() return mt.__pairs(dlpack.tensor(1)) end, "0%-d")
    -- the iterator works for any tensor given as the state
    local u = dlpack.tensor({{7, 8}})
    assert.are.same({7, 8}, select(2, f(u, 0)):totable())
  end)
end)

describe("indexing", function()
  it("reads elements of a 1-d tensor, with negative indices from the end", function()
    local t = dlpack.tensor({10, 20, 30, 40}, "int32")
    assert.are.equal(10, t[1])
    assert.are.equal(40, t[4])
    assert.are.equal(40, t[-1])
    assert.are.equal(10, t[-4])
    assert.are.equal(30, t[-2])
  end)

  it("raises on out-of-range indices", function()
    local t = dlpack.tensor({10, 20, 30, 40}, "int32")
    raises(function() return t[0] end)
    raises(function() return t[5] end)
    raises(function() return t[-5] end)
    raises(function() return t[math.maxinteger] end)
    raises(function() return t[math.mininteger] end)
  end)

  it("raises on a non-integral index", function()
    local t = dlpack.tensor({10, 20}, "int32")
    raises(function() return t[1.5] end)
  end)

  it("gives a view without the first dimension on an n-d tensor", function()
    local t = dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "float64")
    local row = t[2]
    assert.are.same({3}, row.shape)
    assert.are.equal(5.0, row[2])
    row[2] = 50
    assert.are.equal(50.0, t:get(2, 2))
    assert.are.equal(6.0, t[-1][-1])
  end)

  it("raises when indexing a 0-d tensor", function()
    local s = dlpack.tensor(3)
    raises(function() return s[1] end)
    raises(function() s[1] = 4 end)
  end)

  it("writes elements of a 1-d tensor, with negative indices", function()
    local t = dlpack.zeros({3}, "int64")
    t[1] = 5
    t[-1] = 7
    assert.are.same({5, 0, 7}, t:totable())
  end)

  it("raises on out-of-range writes", function()
    local t = dlpack.zeros({3}, "int64")
    raises(function() t[0] = 1 end)
    raises(function() t[4] = 1 end)
    raises(function() t[-4] = 1 end)
  end)

  it("fills a sub-view with a number on an n-d tensor", function()
    local t = dlpack.zeros({2, 3}, "int32")
    t[2] = 9
    assert.are.same({{0, 0, 0}, {9, 9, 9}}, t:totable())
    t[-2] = 4
    assert.are.same({{4, 4, 4}, {9, 9, 9}}, t:totable())
  end)

  it("copies a tensor into a sub-view on an n-d tensor", function()
    local t = dlpack.zeros({2, 3}, "float64")
    t[1] = dlpack.tensor({1, 2, 3}, "int64")
    assert.are.same({{1.0, 2.0, 3.0}, {0.0, 0.0, 0.0}}, t:totable())
  end)

  it("raises when the copied tensor's shape does not match the sub-view", function()
    local t = dlpack.zeros({2, 3}, "float64")
    raises(function() t[1] = dlpack.tensor({1, 2}) end)
  end)
end)

describe("get, set and item", function()
  it("get and set take exactly ndim indices", function()
    local t = dlpack.zeros({2, 3}, "int32")
    t:set(2, 3, 8)
    assert.are.equal(8, t:get(2, 3))
    assert.are.equal(8, t:get(-1, -1))
    t:set(-2, -3, 1)
    assert.are.equal(1, t:get(1, 1))
    raises(function() t:get(1) end)
    raises(function() t:get(1, 1, 1) end)
    raises(function() t:set(1, 5) end)
    raises(function() t:set(1, 1, 1, 5) end)
  end)

  it("get and set raise on out-of-range indices", function()
    local t = dlpack.zeros({2, 3}, "int32")
    raises(function() t:get(3, 1) end)
    raises(function() t:get(1, 0) end)
    raises(function() t:set(1, 4, 1) end)
    raises(function() t:set(-3, 1, 1) end)
  end)

  it("get and set work on 0-d tensors with no index", function()
    local s = dlpack.zeros({}, "float64")
    s:set(2.5)
    assert.are.equal(2.5, s:get())
  end)

  it("item reads the only element of any one-element tensor", function()
    assert.are.equal(4, dlpack.tensor(4):item())
    assert.are.equal(4, dlpack.full({1, 1, 1}, 4, "int8"):item())
    assert.are.equal(1.5, dlpack.tensor({1.5}):item())
  end)

  it("item raises unless the tensor has exactly one element", function()
    raises(function() dlpack.zeros({2}):item() end)
    raises(function() dlpack.zeros({0}):item() end)
  end)
end)

describe("bool elements", function()
  it("read and write Lua booleans", function()
    local t = dlpack.zeros({2}, "bool")
    assert.is_false(t[1])
    t[1] = true
    assert.is_true(t[1])
    t:set(2, true)
    t[2] = false
    assert.is_false(t:get(2))
    assert.are.equal("boolean", type(t[1]))
  end)
end)

describe("integer elements", function()
  local LIMITS = {
    int8 = {-128, 127}, int16 = {-32768, 32767}, int32 = {-2147483648, 2147483647},
    int64 = {math.mininteger, math.maxinteger},
    uint8 = {0, 255}, uint16 = {0, 65535}, uint32 = {0, 4294967295},
    uint64 = {0, math.maxinteger},
  }
  local OUTSIDE = {
    int8 = {-129, 128}, int16 = {-32769, 32768}, int32 = {-2147483649, 2147483648},
    int64 = {-2.0 ^ 64, 2.0 ^ 63},
    uint8 = {-1, 256}, uint16 = {-1, 65536}, uint32 = {-1, 4294967296},
    uint64 = {-1.0, 2.0 ^ 64}, -- the integer -1 is 2^64 - 1 on 5.3+ (versions_spec.lua)
  }

  for dtype, lim in pairs(LIMITS) do
    it(dtype .. " holds its minimum and maximum as Lua integers", function()
      local t = dlpack.zeros({2}, dtype)
      t[1] = lim[1]
      t[2] = lim[2]
      assert.are.equal(lim[1], t[1])
      assert.are.equal(lim[2], t[2])
      assert.are.equal("integer", math.type(t[1]))
      assert.are.equal("integer", math.type(t[2]))
    end)

    it(dtype .. " raises on out-of-range values", function()
      local t = dlpack.zeros({1}, dtype)
      for _, v in ipairs(OUTSIDE[dtype]) do
        raises(function() t[1] = v end)
        raises(function() t:set(1, v) end)
        raises(function() t:fill(v) end)
        raises(function() dlpack.full({1}, v, dtype) end)
      end
      assert.are.equal(0, t[1])
    end)

    it(dtype .. " raises on non-integral values", function()
      local t = dlpack.zeros({1}, dtype)
      for _, v in ipairs({0.5, -1.5, 1e-300, 0 / 0, math.huge, -math.huge}) do
        raises(function() t[1] = v end)
        raises(function() t:set(1, v) end)
        raises(function() t:fill(v) end)
      end
      assert.are.equal(0, t[1])
    end)

    it(dtype .. " accepts integral floats as integers", function()
      local t = dlpack.zeros({1}, dtype)
      t[1] = 3.0
      assert.are.equal(3, t[1])
      assert.are.equal("integer", math.type(t[1]))
    end)

    it(dtype .. " raises on a non-numeric value", function()
      local t = dlpack.zeros({1}, dtype)
      raises(function() t[1] = "abc" end)
      raises(function() t[1] = {} end)
    end)
  end

  it("signed types keep negative values", function()
    for _, dtype in ipairs({"int8", "int16", "int32", "int64"}) do
      assert.are.equal(-5, roundtrip(dtype, -5), dtype)
    end
  end)
end)

describe("float16 elements", function()
  it("round to nearest, ties to even", function()
    assert.are.equal(0.333251953125, roundtrip("float16", 1 / 3))
    assert.are.equal(1.0, roundtrip("float16", 1 + 2 ^ -11))
    assert.are.equal(1 + 2 ^ -9, roundtrip("float16", 1 + 3 * 2 ^ -11))
    assert.are.equal(1 + 2 ^ -10, roundtrip("float16", 1 + 2 ^ -11 + 2 ^ -20))
    assert.are.equal(2048.0, roundtrip("float16", 2049))
    assert.are.equal(2052.0, roundtrip("float16", 2051))
  end)

  it("round directly from the double, without double rounding through float32", function()
    assert.are.equal(1 + 2 ^ -10, roundtrip("float16", 1 + 2 ^ -11 + 2 ^ -40))
  end)

  it("hold the largest finite value and overflow to infinity", function()
    assert.are.equal(65504.0, roundtrip("float16", 65504))
    assert.are.equal(65504.0, roundtrip("float16", 65519))
    assert.are.equal(math.huge, roundtrip("float16", 65520))
    assert.are.equal(math.huge, roundtrip("float16", 1e6))
    assert.are.equal(-math.huge, roundtrip("float16", -1e6))
    assert.are.equal(-65504.0, roundtrip("float16", -65519))
  end)

  it("hold subnormals and round them to nearest even", function()
    assert.are.equal(2 ^ -24, roundtrip("float16", 2 ^ -24))
    assert.are.equal(1023 * 2 ^ -24, roundtrip("float16", 1023 * 2 ^ -24))
    assert.are.equal(2 ^ -14, roundtrip("float16", 2 ^ -14))
    assert.are.equal(0.0, roundtrip("float16", 2 ^ -25))
    assert.are.equal(2 ^ -24, roundtrip("float16", 2 ^ -25 + 2 ^ -40))
    assert.are.equal(2 ^ -23, roundtrip("float16", 1.5 * 2 ^ -24))
    assert.are.equal(2 ^ -23, roundtrip("float16", 2.5 * 2 ^ -24))
    assert.are.equal(3 * 2 ^ -24, roundtrip("float16", 3 * 2 ^ -24))
    assert.are.equal(0.0, roundtrip("float16", 2 ^ -26))
    assert.is_true(is_negzero(roundtrip("float16", -2 ^ -26)))
  end)

  it_int("keep infinities, NaN and negative zero", function()
    assert.are.equal(math.huge, roundtrip("float16", math.huge))
    assert.are.equal(-math.huge, roundtrip("float16", -math.huge))
    assert.is_true(is_nan(roundtrip("float16", 0 / 0)))
    assert.is_true(is_negzero(roundtrip("float16", -0.0)))
  end)

  it_int("read back as Lua floats", function()
    assert.are.equal("float", math.type(roundtrip("float16", 2)))
  end)

  it("round the same way in full and fill", function()
    assert.are.equal(0.333251953125, dlpack.full({1}, 1 / 3, "float16")[1])
    assert.are.equal(0.333251953125, dlpack.zeros({1}, "float16"):fill(1 / 3)[1])
  end)
end)

describe("bfloat16 elements", function()
  it("round to nearest, ties to even", function()
    assert.are.equal(0.333984375, roundtrip("bfloat16", 1 / 3))
    assert.are.equal(1.0, roundtrip("bfloat16", 1 + 2 ^ -8))
    assert.are.equal(1 + 2 ^ -6, roundtrip("bfloat16", 1 + 3 * 2 ^ -8))
    assert.are.equal(256.0, roundtrip("bfloat16", 257))
    assert.are.equal(260.0, roundtrip("bfloat16", 259))
  end)

  it("round directly from the double, without double rounding through float32", function()
    assert.are.equal(1 + 2 ^ -7, roundtrip("bfloat16", 1 + 2 ^ -8 + 2 ^ -40))
  end)

  it("hold the largest finite value and overflow to infinity", function()
    local max = (2 - 2 ^ -7) * 2 ^ 127
    assert.are.equal(max, roundtrip("bfloat16", max))
    assert.are.equal(math.huge, roundtrip("bfloat16", (2 - 2 ^ -8) * 2 ^ 127))
    assert.are.equal(math.huge, roundtrip("bfloat16", 1e39))
    assert.are.equal(-math.huge, roundtrip("bfloat16", -1e39))
  end)

  it("hold subnormals and round them to nearest even", function()
    assert.are.equal(2 ^ -133, roundtrip("bfloat16", 2 ^ -133))
    assert.are.equal(2 ^ -126, roundtrip("bfloat16", 2 ^ -126))
    assert.are.equal(0.0, roundtrip("bfloat16", 2 ^ -134))
    assert.are.equal(2 ^ -132, roundtrip("bfloat16", 3 * 2 ^ -134))
    assert.are.equal(0.0, roundtrip("bfloat16", 1e-300))
  end)

  it_int("keep infinities, NaN and negative zero", function()
    assert.are.equal(math.huge, roundtrip("bfloat16", math.huge))
    assert.are.equal(-math.huge, roundtrip("bfloat16", -math.huge))
    assert.is_true(is_nan(roundtrip("bfloat16", 0 / 0)))
    assert.is_true(is_negzero(roundtrip("bfloat16", -0.0)))
  end)
end)

describe("float32 and float64 elements", function()
  local function f32(x) return (string.unpack("=f", string.pack("=f", x))) end

  it("float32 rounds to the nearest single", function()
    for _, x in ipairs({0.1, 1 / 3, -2.75, 1e-40, 123456789.0, 3.4028234663852886e38}) do
      assert.are.equal(f32(x), roundtrip("float32", x), tostring(x))
    end
    assert.are.equal(1.0, roundtrip("float32", 1 + 2 ^ -24))
    assert.are.equal(1 + 2 ^ -22, roundtrip("float32", 1 + 3 * 2 ^ -24))
    assert.are.equal(2 ^ -149, roundtrip("float32", 2 ^ -149))
    assert.are.equal(0.0, roundtrip("float32", 2 ^ -150))
  end)

  it("float32 overflows to infinity and keeps NaN", function()
    assert.are.equal(math.huge, roundtrip("float32", 1e39))
    assert.are.equal(-math.huge, roundtrip("float32", -1e39))
    assert.is_true(is_nan(roundtrip("float32", 0 / 0)))
  end)

  it("float64 is exact", function()
    for _, x in ipairs({0.1, 1 / 3, 1e308, 5e-324, -0.0, math.huge, -math.huge}) do
      local y = roundtrip("float64", x)
      assert.are.equal(x, y)
    end
    assert.is_true(is_negzero(roundtrip("float64", -0.0)))
    assert.is_true(is_nan(roundtrip("float64", 0 / 0)))
  end)

  it_int("floats accept Lua integers and read back floats", function()
    local t = dlpack.zeros({1}, "float64")
    t[1] = 3
    assert.are.equal(3.0, t[1])
    assert.are.equal("float", math.type(t[1]))
    t[1] = math.maxinteger
    assert.are.equal(2.0 ^ 63, t[1])
  end)

  it("floats raise on non-numeric values", function()
    local t = dlpack.zeros({1}, "float32")
    raises(function() t[1] = "abc" end)
    raises(function() t[1] = {} end)
  end)
end)

describe("read-only tensors", function()
  it("raise on every kind of write with a message containing read-only", function()
    local base = dlpack.tensor({{1, 2}, {3, 4}}, "int32")
    local r = base:as_readonly()
    assert.is_true(r.readonly)
    raises(function() r[1][1] = 5 end, "read%-only")
    raises(function() r[1] = 5 end, "read%-only")
    raises(function() r:set(1, 1, 5) end, "read%-only")
    raises(function() r:fill(0) end, "read%-only")
    raises(function() r:copy(base) end, "read%-only")
    raises(function() r[2] = dlpack.tensor({7, 8}, "int32") end, "read%-only")
    assert.are.same({{1, 2}, {3, 4}}, base:totable())
  end)

  it("can still be read", function()
    local r = dlpack.tensor({1, 2, 3}, "int8"):as_readonly()
    assert.are.equal(2, r[2])
    assert.are.equal(3, r:get(3))
    assert.are.same({1, 2, 3}, r:totable())
  end)

  it("give read-only views", function()
    local r = dlpack.zeros({2, 3}, "float32"):as_readonly()
    for _, v in ipairs({r[1], r:narrow(2, 1, 2), r:transpose(1, 2), r:select(1, 1), r:view({6}),
        r:slice(2, 1, -1, 2), r:unsqueeze(1), r:expand({2, 3})}) do
      assert.is_true(v.readonly)
    end
    raises(function() r[1][1] = 1 end, "read%-only")
    raises(function() r:view({6})[1] = 1 end, "read%-only")
  end)

  it("show writes made through a writable alias", function()
    local base = dlpack.zeros({2}, "int64")
    local r = base:as_readonly()
    base[2] = 9
    assert.are.equal(9, r[2])
    assert.is_false(base.readonly)
  end)
end)

describe("element access of dtypes without element support", function()
  local NOACCESS = {
    "complex64", "complex128", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
    "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn",
    "float6_e3m2fn", "float4_e2m1fn",
  }
  for _, dtype in ipairs(NOACCESS) do
    it("raises naming " .. dtype .. " on reads and writes", function()
      local t = dlpack.zeros({2}, dtype)
      local pat = dtype
      raises(function() return t[1] end, pat)
      raises(function() t[1] = 0 end, pat)
      raises(function() return t:get(1) end, pat)
      raises(function() t:set(1, 0) end, pat)
      raises(function() return dlpack.zeros({1}, dtype):item() end, pat)
    end)
  end
end)
