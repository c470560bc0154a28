-- Creating tensors: empty, zeros, ones, full, arange, tensor, frombytes.
local dlpack = require "dlpack"
local support = require "support"
-- Specs of integer subtypes and of the int64 range (Lua 5.3+): pending elsewhere, with why.
local it_int = support.INTEGERS and it or function(name) pending(name .. ": " .. support.NO_INTEGERS) end

local ALL = support.DTYPES
-- dtypes with element access, and their item sizes
local ACCESSIBLE = support.ACCESSIBLE
local ITEMSIZE = {
  bool = 1, int8 = 1, int16 = 2, int32 = 4, int64 = 8, uint8 = 1, uint16 = 2, uint32 = 4, uint64 = 8,
  float16 = 2, bfloat16 = 2, float32 = 4, float64 = 8, complex64 = 8, complex128 = 16,
  float8_e3m4 = 1, float8_e4m3 = 1, float8_e4m3b11fnuz = 1, float8_e4m3fn = 1, float8_e4m3fnuz = 1,
  float8_e5m2 = 1, float8_e5m2fnuz = 1, float8_e8m0fnu = 1,
}
local INTEGER = support.IS_INT

local raises, raises_plain = support.raises, support.raises_plain

-- the value 1 in the Lua type that a dtype's elements have
local function one(dtype)
  if dtype == "bool" then return true end
  if INTEGER[dtype] then return 1 end
  return 1.0
end
local function zero(dtype)
  if dtype == "bool" then return false end
  if INTEGER[dtype] then return 0 end
  return 0.0
end

local function all_elements(t)
  local out = {}
  local flat = t:reshape({-1})
  for i = 1, flat:numel() do out[i] = flat[i] end
  return out
end

describe("empty", function()
  it("defaults to float32 on the cpu", function()
    local t = dlpack.empty({2, 3})
    assert.are.equal("float32", t.dtype)
    assert.are.equal("cpu", t.device)
    assert.are.same({2, 3}, t.shape)
    assert.are.same({3, 1}, t.strides)
    assert.is_false(t.readonly)
  end)

  it("creates a tensor of every dtype with its shape", function()
    for _, dtype in ipairs(ALL) do
      local t = dlpack.empty({3, 2}, dtype)
      assert.are.equal(dtype, t.dtype)
      assert.are.same({3, 2}, t.shape)
      assert.are.equal(6, t:numel())
      if ITEMSIZE[dtype] then
        assert.are.equal(ITEMSIZE[dtype], t.itemsize, dtype .. " itemsize")
        assert.are.equal(6 * ITEMSIZE[dtype], t.nbytes, dtype .. " nbytes")
      end
    end
  end)

  it("accepts an explicit cpu device", function()
    assert.are.equal("cpu", dlpack.empty({1}, "int8", "cpu").device)
  end)

  it("gives memory aligned to 256 bytes, for small tensors (kept with their owner) and large ones", function()
    for _, n in ipairs({1, 3, 63, 64, 65, 300, 100000}) do
      local t = dlpack.zeros({n}, "float32")
      local address = tonumber(tostring(t:data_ptr()):match("(%x+)$"), 16)
      assert.are.equal(0, address % 256, n .. " elements")
      assert.are.equal(0, t[n]) -- the last element is inside the block (ASan and valgrind check it)
    end
  end)

  it("creates 0-d and zero-size tensors", function()
    local s = dlpack.empty({})
    assert.are.equal(0, s.ndim)
    assert.are.equal(1, s:numel())
    assert.are.same({}, s.shape)
    local e = dlpack.empty({0, 5}, "int32")
    assert.are.equal(0, e:numel())
    assert.are.equal(0, e.nbytes)
    assert.are.same({0, 5}, e.shape)
  end)
end)

describe("zeros", function()
  it("fills every accessible dtype with zero", function()
    for _, dtype in ipairs(ACCESSIBLE) do
      local t = dlpack.zeros({2, 2}, dtype)
      for _, v in ipairs(all_elements(t)) do
        assert.are.equal(zero(dtype), v, dtype)
        if INTEGER[dtype] then assert.are.equal("integer", math.type(v), dtype) end
      end
    end
  end)

  it("creates zero bytes for dtypes without element access", function()
    for _, dtype in ipairs({"complex64", "complex128", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu",
        "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e5m2fnuz"}) do
      local t = dlpack.zeros({3}, dtype)
      assert.are.equal(dtype, t.dtype)
      assert.are.equal(string.rep("\0", 3 * ITEMSIZE[dtype]), t:tobytes(), dtype)
    end
  end)

  it("creates sub-byte dtypes", function()
    for _, dtype in ipairs({"float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"}) do
      local t = dlpack.zeros({4, 2}, dtype)
      assert.are.equal(dtype, t.dtype)
      assert.are.same({4, 2}, t.shape)
    end
  end)

  it("creates a 0-d zero", function()
    assert.are.equal(0.0, dlpack.zeros({}):item())
    assert.are.equal(0, dlpack.zeros({}, "int16"):item())
  end)
end)

describe("full", function()
  it("fills every accessible dtype with the value", function()
    for _, dtype in ipairs(ACCESSIBLE) do
      local t = dlpack.full({3, 2}, one(dtype), dtype)
      assert.are.equal(dtype, t.dtype)
      for _, v in ipairs(all_elements(t)) do assert.are.equal(one(dtype), v, dtype) end
    end
  end)

  it("defaults to float32", function()
    local t = dlpack.full({2}, 2.5)
    assert.are.equal("float32", t.dtype)
    assert.are.equal(2.5, t[2])
  end)

  it("raises on a value the integer dtype cannot hold", function()
    raises(function() dlpack.full({2}, 1.5, "int32") end)
    raises(function() dlpack.full({2}, 256, "uint8") end)
    raises(function() dlpack.full({2}, -1, "uint16") end)
  end)

  it("raises on a value that is not a number or boolean", function()
    raises(function() dlpack.full({2}, "abc", "float32") end)
    raises(function() dlpack.full({2}, {}, "float32") end)
  end)

  it("says 'an int8' and 'a uint8' in its messages, by the first sound of the dtype name", function()
    local want = {int8 = "an int8 element", int64 = "an int64 element", uint8 = "a uint8 element",
                  uint64 = "a uint64 element", float32 = "a float32 element", bfloat16 = "a bfloat16 element",
                  bool = "a bool element"}
    for dtype, text in pairs(want) do
      local msg = support.raises_plain(function() dlpack.full({2}, "x", dtype) end, text)
      assert.is_falsy(msg:find("a int", 1, true) or msg:find("an uint", 1, true), msg)
    end
  end)
end)

describe("ones", function()
  it("fills every accessible dtype with one (true for bool)", function()
    for _, dtype in ipairs(ACCESSIBLE) do
      local t = dlpack.ones({3, 2}, dtype)
      assert.are.equal(dtype, t.dtype)
      assert.are.same({3, 2}, t.shape)
      for _, v in ipairs(all_elements(t)) do assert.are.equal(one(dtype), v, dtype) end
    end
  end)

  it("defaults to float32 on the cpu, like zeros", function()
    local t = dlpack.ones({2})
    assert.are.equal("float32", t.dtype)
    assert.are.equal("cpu", t.device)
    assert.are.same({1.0, 1.0}, t:totable())
    assert.are.equal("cpu", dlpack.ones({2}, "int8", "cpu").device)
    assert.are.equal(1.0, dlpack.ones({}):item())
    assert.are.same({0, 3}, dlpack.ones({0, 3}).shape)
  end)

  it("raises on an unknown dtype or device, and on dtypes without element access", function()
    raises(function() dlpack.ones({2}, "word") end, "word")
    raises(function() dlpack.ones({2}, "float32", "tpu:0") end, "tpu")
    raises(function() dlpack.ones({2}, "float32", "vulkan:0") end, "vulkan")
    raises(function() dlpack.ones({2}, "complex64") end, "complex64")
    raises(function() dlpack.ones({2}, 5) end)
  end)
end)

describe("arange", function()
  local function values(t) return t:totable() end

  it("counts from 0 to stop - 1, as int64, with one argument", function()
    local t = dlpack.arange(5)
    assert.are.equal("int64", t.dtype)
    assert.are.same({0, 1, 2, 3, 4}, values(t))
    assert.are.same({0}, dlpack.arange(0).shape)
    assert.are.same({0}, dlpack.arange(-3).shape)
  end)

  it("takes start, stop and step, strictly before stop, as NumPy does", function()
    assert.are.same({2, 3, 4}, values(dlpack.arange(2, 5)))
    assert.are.same({1, 4, 7}, values(dlpack.arange(1, 10, 3)))
    assert.are.same({1, 4, 7}, values(dlpack.arange(1, 8, 3)))
    assert.are.same({10, 7, 4, 1}, values(dlpack.arange(10, 0, -3)))
    assert.are.same({-1, -2}, values(dlpack.arange(-1, -3, -1)))
    assert.are.same({0}, dlpack.arange(5, 2).shape)
    assert.are.same({0}, dlpack.arange(2, 5, -1).shape)
    assert.are.same({0}, dlpack.arange(3, 3).shape)
  end)

  it("gives float64 when any number is a float", function()
    local t = dlpack.arange(1, 2, 0.25)
    assert.are.equal("float64", t.dtype)
    assert.are.same({1.0, 1.25, 1.5, 1.75}, values(t))
    if support.INTEGERS then -- where numbers are doubles, 5.0 is the integer 5 (README, "Lua versions")
      assert.are.equal("float64", dlpack.arange(5.0).dtype)
      assert.are.same({0.0, 1.0, 2.0}, values(dlpack.arange(3.0)))
    end
    assert.are.equal(10, dlpack.arange(0, 1, 0.1):numel())         -- ceil((1 - 0) / 0.1)
    assert.are.equal(3, dlpack.arange(0, 1.1, 0.5):numel())
    assert.are.same({0.5, -0.5}, values(dlpack.arange(0.5, -1, -1)))
    assert.are.same({0}, dlpack.arange(0.5, 0.25).shape)
  end)

  it("takes a dtype after the numbers", function()
    local t = dlpack.arange(4, "float32")
    assert.are.equal("float32", t.dtype)
    assert.are.same({0.0, 1.0, 2.0, 3.0}, values(t))
    assert.are.same({1, 3}, values(dlpack.arange(1, 5, 2, "int8")))
    assert.are.same({0.0, 0.5}, values(dlpack.arange(0, 1, 0.5, "float16")))
    assert.are.same({0, 1, 2}, values(dlpack.arange(0.0, 3.0, "uint8")))   -- integral floats
    assert.are.same({0, 3, 6, 9}, values(dlpack.arange(0, 10, 3, "float64")))
    assert.are.equal("float64", dlpack.arange(0, 10, 3, "float64").dtype)
    for _, dtype in ipairs(support.NUMERIC) do
      assert.are.equal(3, dlpack.arange(3, dtype):numel(), dtype)
    end
  end)

  it("raises on a step of 0", function()
    raises(function() dlpack.arange(0, 5, 0) end, "step")
    raises(function() dlpack.arange(0, 5, 0.0) end, "step")
    raises(function() dlpack.arange(0, 5, -0.0) end, "step")
  end)

  it("raises on NaN and infinities, naming the argument", function()
    support.raises_plain(function() dlpack.arange(0 / 0) end, "stop must be a finite number, got nan")
    support.raises_plain(function() dlpack.arange(-(0 / 0)) end, "got nan")
    support.raises_plain(function() dlpack.arange(0, -math.huge) end, "stop must be a finite number, got -inf")
    raises(function() dlpack.arange(math.huge) end, "stop.*finite")
    raises(function() dlpack.arange(-math.huge, 0) end, "start.*finite")
    raises(function() dlpack.arange(0, 1, 0 / 0) end, "step.*finite")
    raises(function() dlpack.arange(0, 1, math.huge) end, "step.*finite")
  end)

  it("raises on counts that do not fit, never allocating them", function()
    raises(function() dlpack.arange(support.MININT, support.MAXINT) end, "2%^63")
    raises(function() dlpack.arange(support.MAXINT, support.MININT, -1) end, "2%^63")
    raises(function() dlpack.arange(-1e300, 1e300) end, "2%^63")
    raises(function() dlpack.arange(-1e308, 1e308, 1e-300) end, "2%^63")
    raises(function() dlpack.arange(0, 1, 1e-300) end, "2%^63")
    raises(function() dlpack.arange(1e18) end, "too many bytes")
    raises(function() dlpack.arange(0, support.MAXINT, 2) end, "too many bytes")
    raises(function() dlpack.arange(2 ^ 62, "int8") end)
  end)

  it_int("reaches the ends of int64 without overflowing", function()
    local M, m = math.maxinteger, math.mininteger
    local P62 = math.tointeger(2 ^ 62)
    assert.are.same({M - 2, M - 1}, values(dlpack.arange(M - 2, M)))
    assert.are.same({m, m + 1}, values(dlpack.arange(m, m + 2)))
    assert.are.same({M, M - 1}, values(dlpack.arange(M, M - 2, -1)))
    assert.are.same({m + 2, m + 1}, values(dlpack.arange(m + 2, m, -1)))
    assert.are.same({m, m + P62, 0, P62}, values(dlpack.arange(m, M, P62)))
    assert.are.same({0}, dlpack.arange(m, M, m).shape)               -- a negative step
    assert.are.same({M, -1}, values(dlpack.arange(M, m, m)))
    assert.are.same({m, -1, M - 1}, values(dlpack.arange(m, M, M)))
    assert.are.same({M, 0, m + 1}, values(dlpack.arange(M, m, m + 1)))
  end)

  it("raises when the values do not fit the dtype", function()
    raises(function() dlpack.arange(0, 300, 1, "uint8") end, "out of range")
    raises(function() dlpack.arange(-1, 3, "uint32") end, "out of range")
    raises(function() dlpack.arange(120, 130, 1, "int8") end, "out of range")
    raises(function() dlpack.arange(0, -2, -1, "uint64") end, "out of range")
    assert.are.same({127}, values(dlpack.arange(127, 128, "int8")))
  end)

  it("raises on fractional numbers for an integer dtype, naming the argument", function()
    raises(function() dlpack.arange(0.5, 3, "int32") end, "start")
    raises(function() dlpack.arange(3.5, "int64") end, "stop")
    raises(function() dlpack.arange(0, 3, 0.5, "int16") end, "step")
    raises(function() dlpack.arange(0, 2 ^ 63, "int64") end, "stop")
  end)

  it("raises on arguments of the wrong type or number", function()
    raises(function() dlpack.arange() end, "number expected")
    raises(function() dlpack.arange("5") end, "number expected")
    raises(function() dlpack.arange({}) end, "number expected")
    raises(function() dlpack.arange(setmetatable({}, {__index = function() error("ran") end})) end,
      "number expected")
    raises(function() dlpack.arange(1, 2, 3, 4) end, "dtype")
    raises(function() dlpack.arange(1, nil, 3) end, "a device is a string")
    raises(function() dlpack.arange(1, "int32", 3) end, "a device is a string")
    raises(function() dlpack.arange(1, "int32", "cpu", 3) end, "unexpected")
    assert.are.equal("cpu", dlpack.arange(1, "int32", "cpu").device) -- CUDA devices: spec/cuda
    raises(function() dlpack.arange(5, "word") end, "word")
    raises(function() dlpack.arange(5, {}) end)
    raises(function() dlpack.arange(2, "bool") end, "bool")
    raises(function() dlpack.arange(2, "complex64") end, "complex64")
    raises(function() dlpack.arange(2, "float8_e4m3fn") end, "float8_e4m3fn")
  end)
end)

describe("tensor", function()
  it("infers int64 from integers", function()
    local t = dlpack.tensor({{1, 2, 3}, {4, 5, 6}})
    assert.are.equal("int64", t.dtype)
    assert.are.same({2, 3}, t.shape)
    assert.are.same({{1, 2, 3}, {4, 5, 6}}, t:totable())
    assert.are.equal("integer", math.type(t[2][3]))
  end)

  it_int("infers float64 when any element is a float", function()
    assert.are.equal("float64", dlpack.tensor({1, 2.5}).dtype)
    assert.are.equal("float64", dlpack.tensor({1.0, 2.0}).dtype)
    assert.are.equal("float64", dlpack.tensor({{1, 2}, {3, 0.5}}).dtype)
  end)

  it("infers bool from booleans", function()
    local t = dlpack.tensor({{true, false}, {false, true}})
    assert.are.equal("bool", t.dtype)
    assert.are.same({{true, false}, {false, true}}, t:totable())
  end)

  it("makes a 0-d tensor from a scalar", function()
    local i = dlpack.tensor(7)
    assert.are.equal(0, i.ndim); assert.are.equal("int64", i.dtype); assert.are.equal(7, i:item())
    local f = dlpack.tensor(2.5)
    assert.are.equal(0, f.ndim); assert.are.equal("float64", f.dtype); assert.are.equal(2.5, f:item())
    local b = dlpack.tensor(true)
    assert.are.equal(0, b.ndim); assert.are.equal("bool", b.dtype); assert.is_true(b:item())
  end)

  it("takes an explicit dtype for every accessible dtype", function()
    for _, dtype in ipairs(ACCESSIBLE) do
      local t = dlpack.tensor({zero(dtype), one(dtype)}, dtype)
      assert.are.equal(dtype, t.dtype)
      assert.are.same({zero(dtype), one(dtype)}, t:totable(), dtype)
    end
  end)

  it("makes deep nestings", function()
    local t = dlpack.tensor({{{1}, {2}}, {{3}, {4}}, {{5}, {6}}}, "int16")
    assert.are.same({3, 2, 1}, t.shape)
    assert.are.equal(6, t:get(3, 2, 1))
  end)

  it("makes a zero-size tensor from an empty table", function()
    local t = dlpack.tensor({})
    assert.are.same({0}, t.shape)
    assert.are.equal(0, t:numel())
  end)

  it("infers float64 for an empty table, as for any input that is not all booleans or integers", function()
    -- API.md: "otherwise float64"; NumPy's np.array([]) is float64 too
    assert.are.equal("float64", dlpack.tensor({}).dtype)
    assert.are.equal("float64", dlpack.tensor({{}, {}}).dtype)
  end)

  it("raises on ragged input", function()
    raises(function() dlpack.tensor({{1, 2}, {3}}) end)
    raises(function() dlpack.tensor({{1, 2}, 3}) end)
    raises(function() dlpack.tensor({1, {2}}) end)
    raises(function() dlpack.tensor({{{1}, {2}}, {{3}, {4, 5}}}) end)
  end)

  it("raises on elements that are not numbers or booleans", function()
    raises(function() dlpack.tensor({1, "x"}) end)
    raises(function() dlpack.tensor({1, function() end}) end)
  end)

  it("raises when an explicit integer dtype cannot hold a value", function()
    raises(function() dlpack.tensor({1, 300}, "int8") end)
    raises(function() dlpack.tensor({0.5}, "int32") end)
  end)

  it("raises on an unknown dtype, naming it", function()
    raises(function() dlpack.tensor({1}, "int128") end, "int128")
  end)

  it("refuses a device or any other argument after the dtype, rather than ignoring it", function()
    raises(function() dlpack.tensor({1, 2}, "int64", "cpu") end, "unexpected argument")
    raises(function() dlpack.tensor({1, 2}, nil, "cuda") end, "unexpected argument")
    raises(function() dlpack.tensor(dlpack.zeros({2}), "int64", "cpu") end, "to%(device%)")
    assert.are.same({1, 2}, dlpack.tensor({1, 2}, "int64", nil):totable())
  end)
end)

describe("functions that take no more arguments", function()
  it("refuse one more rather than ignoring it (nil is fine)", function()
    local t = dlpack.zeros({2, 1})
    local calls = {
      {"dlpack.zeros", function() return dlpack.zeros({2}, "int8", "cpu", "cuda") end},
      {"dlpack.empty", function() return dlpack.empty({2}, nil, nil, {}) end},
      {"dlpack.ones", function() return dlpack.ones({2}, "int8", "cpu", 1) end},
      {"dlpack.full", function() return dlpack.full({2}, 1, "int8", "cpu", "int16") end},
      {"clone", function() return t:clone("float64") end},
      {"contiguous", function() return t:contiguous({}) end},
      {"copy", function() return t:copy(t, {}, "x") end},
      {"fill", function() return t:fill(1, 2) end},
      {"squeeze", function() return t:squeeze(2, 1) end},
      {"dlpack.to_dlpack", function() return dlpack.to_dlpack(t, {}, {copy = true}) end},
      {"dlpack.from_dlpack", function() return dlpack.from_dlpack(t, nil, "cpu") end},
    }
    for _, c in ipairs(calls) do
      raises_plain(c[2], "unexpected argument (" .. c[1] .. " takes")
    end
    assert.are.same({2}, dlpack.zeros({2}, "int8", "cpu", nil).shape)
    assert.are.same({2}, t:clone(nil):squeeze(2, nil).shape)
  end)
end)

describe("frombytes", function()
  it("copies bytes with a default 1-d shape", function()
    local s = string.pack("=i4i4i4", 1, -2, 3)
    local t = dlpack.frombytes(s, "int32")
    assert.are.same({3}, t.shape)
    assert.are.same({1, -2, 3}, t:totable())
    assert.is_false(t.readonly)
    t[1] = 10
    assert.are.equal(10, t[1])
  end)

  it("takes an explicit shape", function()
    local s = string.pack("=dddddd", 1, 2, 3, 4, 5, 6)
    local t = dlpack.frombytes(s, "float64", {2, 3})
    assert.are.same({2, 3}, t.shape)
    assert.are.equal(6.0, t:get(2, 3))
  end)

  it("makes a 0-d tensor with shape {}", function()
    local t = dlpack.frombytes(string.pack("=i2", -7), "int16", {})
    assert.are.equal(0, t.ndim)
    assert.are.equal(-7, t:item())
  end)

  it("round-trips the bytes of every whole-byte dtype", function()
    local bytes = "\1\0\2\0\3\0\4\0\5\0\6\0\7\0\8\0\9\0\10\0\11\0\12\0\13\0\14\0\15\0\16\0"
    for dtype, size in pairs(ITEMSIZE) do
      if dtype ~= "bool" then
        local t = dlpack.frombytes(bytes, dtype)
        assert.are.equal(dtype, t.dtype)
        assert.are.same({math.floor(#bytes / size)}, t.shape, dtype)
        assert.are.equal(bytes, t:tobytes(), dtype)
      end
    end
    local b = dlpack.frombytes("\1\0\1", "bool")
    assert.are.same({true, false, true}, b:totable())
  end)

  it("makes an empty tensor from an empty string", function()
    local t = dlpack.frombytes("", "float32")
    assert.are.same({0}, t.shape)
  end)

  it("raises when the string size does not match the shape", function()
    raises(function() dlpack.frombytes("abc", "int16") end)
    raises(function() dlpack.frombytes(string.rep("\0", 12), "int32", {2, 2}) end)
    raises(function() dlpack.frombytes(string.rep("\0", 20), "int32", {2, 2}) end)
  end)

  it("raises on an unknown dtype", function()
    raises(function() dlpack.frombytes("abcd", "word") end, "word")
  end)

  it("refuses a device or any other argument after the shape, rather than ignoring it", function()
    raises(function() dlpack.frombytes("abcd", "uint8", {4}, "cpu") end, "unexpected argument")
    raises(function() dlpack.frombytes("abcd", "uint8", nil, "cpu") end, "unexpected argument")
  end)

  it("says in words what does not match", function()
    local msg = support.raises_plain(function() dlpack.frombytes("abc", "int32") end,
      "the string has 3 bytes, not a whole number of int32 elements (4 bytes each)")
    assert.is_truthy(msg:find("multiple of 4", 1, true), msg)
    support.raises_plain(function() dlpack.frombytes("abc", "int32", {2, 2}) end,
      "the shape {2, 2} holds 4 int32 elements (16 bytes), but the string has 3 bytes")
    support.raises_plain(function() dlpack.frombytes("abc", "int32", {}) end,
      "the shape {} holds 1 int32 element (4 bytes)")
    support.raises_plain(function() dlpack.frombytes("abc", "int8", {support.MAXINT}) end,
      "but the string has 3 bytes")
    support.raises_plain(function() dlpack.frombytes("abc", "int32", {support.MAXINT}) end,
      "more bytes than fit in 64 bits")
  end)
end)

describe("bad shapes", function()
  local makers = {
    empty = function(shape) return dlpack.empty(shape) end,
    zeros = function(shape) return dlpack.zeros(shape) end,
    full = function(shape) return dlpack.full(shape, 1) end,
    ones = function(shape) return dlpack.ones(shape) end,
  }

  for name, make in pairs(makers) do
    it(name .. " raises on a negative size, naming the shape argument", function()
      local err = raises(function() make({2, -1}) end)
      local msg = tostring(err)
      assert.is_truthy(msg:find("#1") or msg:lower():find("shape"), msg)
    end)

    it(name .. " raises on a non-integral size, naming the shape argument", function()
      local err = raises(function() make({2.5}) end)
      local msg = tostring(err)
      assert.is_truthy(msg:find("#1") or msg:lower():find("shape"), msg)
    end)

    it(name .. " raises on a size that is not a number", function()
      raises(function() make({"two"}) end)
      raises(function() make({{}}) end)
    end)

    it(name .. " raises when the shape is not a table", function()
      raises(function() make("2x2") end)
      raises(function() make(nil) end)
    end)
  end

  it("raises on a shape whose byte size overflows, naming the function", function()
    raises(function() dlpack.empty({2 ^ 40, 2 ^ 40}, "float64") end, "empty")
    raises(function() dlpack.empty({2 ^ 62}, "int64") end, "empty")
    raises(function() dlpack.zeros({2 ^ 62, 4}, "uint8") end, "zeros")
    raises(function() dlpack.ones({2 ^ 62, 4}, "int16") end, "ones")
  end)
end)

describe("devices at creation", function()
  it("raises on an unknown device, naming it", function()
    raises(function() dlpack.zeros({2}, "float32", "tpu:0") end, "tpu")
    raises(function() dlpack.zeros({2}, "float32", "cpu:x") end)
  end)

  it("raises on allocation for a device the module cannot allocate on, naming it", function()
    raises(function() dlpack.empty({2}, "float32", "vulkan:0") end, "vulkan")
    raises(function() dlpack.zeros({2}, "float32", "opencl:1") end, "opencl")
  end)
end)

describe("numeric strings", function()
  it("are no sizes, indices, dimensions or tolerances anywhere (Lua would convert them)", function()
    local t = dlpack.zeros({2, 3})
    raises_plain(function() dlpack.zeros({2, "3"}) end, "shape[2] must be a non-negative integer, got the string '3'")
    raises_plain(function() t:view({"3", 2}) end, "got the string '3'")
    raises_plain(function() t:sum({"1"}) end, "got the string '1'")
    raises_plain(function() t:permute({"2", 1}) end, "got the string '2'")
    raises_plain(function() t:get("2", "3") end, "number expected, got string")
    raises_plain(function() t:narrow("2", 1, 1) end, "number expected, got string")
    raises_plain(function() t:select(1, "1") end, "number expected, got string")
    raises_plain(function() t:cumsum("1") end, "number expected, got string")
    raises_plain(function() t:chunk("2", 1) end, "number expected, got string")
    raises_plain(function() t:size("1") end, "number expected, got string")
    raises_plain(function() t:topk("1") end, "number expected, got string")
    raises_plain(function() dlpack.isclose(t, t, "1e-5") end, "number expected, got string")
    assert.are.same({3, 2}, t:view({3, 2}).shape) -- numbers, of course
  end)
end)
