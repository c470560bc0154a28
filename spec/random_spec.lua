-- Random tensors: rand, randn, randint and manual_seed. The pinned numbers were computed once by
-- spec/random_reference.py, a model of the generator written from docs/api.md ("Random
-- numbers"), not from src/compute/random.c: a platform, compiler or Lua version that drew other numbers
-- fails here.
local dlpack = require "dlpack"
local support = require "support"

local raises, raises_plain = support.raises, support.raises_plain
local unpack = table.unpack
local it_int = support.INTEGERS and it or function(name) pending(name .. ": " .. support.NO_INTEGERS) end

-- the bytes of s as lowercase hex
local function hex(s)
  return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

describe("manual_seed and the generator", function()
  it("gives the pinned xoshiro256** numbers for a seed, on every Lua", function()
    dlpack.manual_seed(42)
    assert.are.same({0.083862971059882163, 0.37898025066266861, 0.68004341102813937, 0.92469294532538759},
      dlpack.rand(4, "float64"):totable())
    dlpack.manual_seed(0)
    assert.are.same({0.60126299941790484, 0.74777409254723981, 0.10301998939503632},
      dlpack.rand({3}, "double"):totable())
    dlpack.manual_seed(-1) -- its 64 bits: 2^64 - 1
    assert.are.same({0.55989270405052116, 0.7674350796247662}, dlpack.rand(2, "float64"):totable())
  end)

  it("repeats the numbers after the same seed and continues the stream across calls", function()
    dlpack.manual_seed(42)
    local a = dlpack.rand(2, "float64"):totable()
    local b = dlpack.rand(2, "float64"):totable()
    assert.are.same({0.083862971059882163, 0.37898025066266861}, a)
    assert.are.same({0.68004341102813937, 0.92469294532538759}, b)
    dlpack.manual_seed(42.0)
    assert.are.same(a, dlpack.rand(2, "float64"):totable())
  end)

  it("is one generator per lua_State, which coroutines share", function()
    dlpack.manual_seed(42)
    local co = coroutine.wrap(function() return dlpack.rand(2, "float64"):totable() end)
    assert.are.same({0.083862971059882163, 0.37898025066266861}, co())
    assert.are.same({0.68004341102813937, 0.92469294532538759}, dlpack.rand(2, "float64"):totable())
  end)

  it("starts from seed 0 in a new lua_State", function()
    local script = [[
      local dlpack = require "dlpack"
      local v = dlpack.rand(3, "float64"):totable()
      io.write(string.format("%.17g %.17g %.17g", v[1], v[2], v[3]))
    ]]
    local out = support.run_lua(script, {LUA_PATH = package.path, LUA_CPATH = package.cpath})
    assert.are.equal("0.60126299941790484 0.74777409254723981 0.10301998939503632", out)
  end)

  it("draws nothing for empty tensors and for calls that raise", function()
    dlpack.manual_seed(42)
    assert.are.same({0, 3}, dlpack.rand(0, 3).shape)
    raises(function() dlpack.rand(2, "int32") end)
    raises(function() dlpack.randint(5, 5, 2) end)
    raises(function() dlpack.rand(2, 2 ^ 62) end)
    assert.are.same({0.083862971059882163}, dlpack.rand(1, "float64"):totable())
  end)

  it("takes the seed after the shape was read: a metamethod that seeds is seen", function()
    dlpack.manual_seed(1)
    local shape = setmetatable({}, {__len = function() return 1 end, __index = function()
      dlpack.manual_seed(42)
      return 2
    end})
    assert.are.same({0.083862971059882163, 0.37898025066266861}, dlpack.rand(shape, "float64"):totable())
  end)

  it("keeps its state where scripts cannot reach it without the debug library, and checks what it finds", function()
    dlpack.rand(1)
    local registry, key = debug.getregistry(), nil
    for k, v in pairs(registry) do
      if type(k) == "userdata" and type(v) == "userdata" and getmetatable(v) == nil then key = k end
    end
    assert.is_not_nil(key)
    -- a script with the debug library puts another userdata there: it is not written to
    local victim = dlpack.zeros({8}, "uint8")
    registry[key] = victim
    dlpack.manual_seed(42)
    assert.are.same({0.083862971059882163}, dlpack.rand(1, "float64"):totable())
    assert.are.same({0, 0, 0, 0, 0, 0, 0, 0}, victim:totable())
    registry[key] = 12
    dlpack.manual_seed(42)
    assert.are.same({0.083862971059882163}, dlpack.rand(1, "float64"):totable())
  end)

  it("refuses seeds that are not integers", function()
    raises_plain(function() dlpack.manual_seed(1.5) end, "the seed must be an integer from -2^63 to 2^63 - 1, got 1.5")
    raises_plain(function() dlpack.manual_seed(0 / 0) end, "got nan")
    raises_plain(function() dlpack.manual_seed(2 ^ 63) end, "the seed must be an integer")
    raises(function() dlpack.manual_seed("1") end, "number expected, got string")
    raises(function() dlpack.manual_seed() end, "number expected, got no value")
    raises(function() dlpack.manual_seed(1, 2) end, "unexpected argument")
  end)
end)

describe("rand", function()
  it("is float32 in [0, 1) by default, from 24 bits of each draw", function()
    dlpack.manual_seed(42)
    local t = dlpack.rand(2, 2)
    assert.are.equal("float32", t.dtype)
    assert.are.same({2, 2}, t.shape)
    assert.are.same({{0.083862960338592529, 0.37898021936416626}, {0.68004339933395386, 0.92469292879104614}},
      t:totable())
  end)

  it("takes float16 (11 bits) and bfloat16 (8 bits)", function()
    dlpack.manual_seed(42)
    assert.are.same({0.08349609375, 0.37890625, 0.6796875, 0.92431640625}, dlpack.rand({4}, "half"):totable())
    dlpack.manual_seed(42)
    assert.are.same({0.08203125, 0.37890625, 0.6796875, 0.921875}, dlpack.rand(4, "bfloat16"):totable())
  end)

  it("stays in [0, 1) and covers it", function()
    for _, dtype in ipairs({"float16", "bfloat16", "float32", "float64"}) do
      local v = dlpack.rand(20000, dtype):totable()
      local lo, hi, sum = 1, 0, 0
      for i = 1, #v do
        lo, hi, sum = math.min(lo, v[i]), math.max(hi, v[i]), sum + v[i]
      end
      assert.is_true(lo >= 0 and lo < 0.01, dtype .. " min " .. lo)
      assert.is_true(hi < 1 and hi > 0.99, dtype .. " max " .. hi)
      assert.is_true(math.abs(sum / #v - 0.5) < 0.01, dtype .. " mean " .. sum / #v)
    end
  end)

  it("gives a 0-d tensor for {}", function()
    dlpack.manual_seed(42)
    assert.are.equal(0.083862971059882163, dlpack.rand({}, "float64"):item())
  end)

  it("refuses other dtypes, bad shapes and further arguments", function()
    raises_plain(function() dlpack.rand(2, "int32") end,
      "dlpack.rand makes float16, bfloat16, float32 or float64, not int32 (use dlpack.randint)")
    raises_plain(function() dlpack.randn(2, "complex64") end, "not complex64")
    raises_plain(function() dlpack.rand(2, "float8_e4m3fn") end, "not float8_e4m3fn")
    raises_plain(function() dlpack.rand(2, -1) end, "shape[2] must be a non-negative integer, got -1")
    raises_plain(function() dlpack.randn(0.5) end, "shape[1] must be a non-negative integer, got 0.5")
    raises_plain(function() dlpack.rand() end, "shape expected as a table or as numbers, got no value")
    raises_plain(function() dlpack.rand(2 ^ 62, 2) end, "shape has more elements than fit in 64 bits")
    raises_plain(function() dlpack.rand(2 ^ 62, "float64") end, "too many bytes")
    assert.are.equal("cpu", dlpack.rand(2, "float32", "cpu").device) -- a device: CUDA ones in spec/cuda
    raises(function() dlpack.rand(2, "float32", "cpu", 1) end, "unexpected argument")
    raises(function() dlpack.rand({2}, nil, "gpu:0") end, "device")
    raises(function() dlpack.rand(setmetatable({}, {__len = function() return 2 ^ 40 end})) end, "length")
  end)
end)

describe("randn", function()
  -- seed 7: the polar method's first pairs give these float64 numbers
  local SEVEN = {0.96436185272551833, -1.0637531974798473, -0.30393012386565671, -1.0989693210013467,
                 0.30479435832638674}

  it("gives the pinned standard normal numbers (Marsaglia's polar method)", function()
    dlpack.manual_seed(7)
    assert.are.same(SEVEN, dlpack.randn(5, "float64"):totable())
    dlpack.manual_seed(11)
    assert.are.same({-0.087213318717930491, -0.13008783418359873, -1.5752627106120098},
      dlpack.randn({3}, "double"):totable())
  end)

  it("rounds the float64 numbers to the dtype, float32 by default", function()
    dlpack.manual_seed(7)
    local t = dlpack.randn(5)
    assert.are.equal("float32", t.dtype)
    assert.are.same({0.96436184644699097, -1.0637532472610474, -0.3039301335811615, -1.0989693403244019,
                     0.30479437112808228}, t:totable())
    dlpack.manual_seed(7)
    assert.are.same({0.96484375, -1.0625, -0.3046875, -1.1015625, 0.3046875}, dlpack.randn(5, "bfloat16"):totable())
    dlpack.manual_seed(7)
    assert.are.same({0.96435546875, -1.0634765625, -0.303955078125, -1.0986328125, 0.3046875},
      dlpack.randn(5, "float16"):totable())
  end)

  it("drops the second number of the last pair when a call asks for an odd count", function()
    dlpack.manual_seed(7)
    assert.are.same({SEVEN[1]}, dlpack.randn(1, "float64"):totable())
    assert.are.same({SEVEN[3], SEVEN[4]}, dlpack.randn(2, "float64"):totable())
  end)

  it("has mean 0 and standard deviation 1", function()
    dlpack.manual_seed(3)
    local v = dlpack.randn(40000, "float64"):totable()
    local sum, squares = 0, 0
    for i = 1, #v do sum, squares = sum + v[i], squares + v[i] * v[i] end
    local mean = sum / #v
    assert.is_true(math.abs(mean) < 0.02, "mean " .. mean)
    assert.is_true(math.abs(math.sqrt(squares / #v - mean * mean) - 1) < 0.02, "std")
  end)
end)

describe("randint", function()
  it("gives the pinned numbers in [lo, hi), int64 by default", function()
    dlpack.manual_seed(123)
    local t = dlpack.randint(-5, 5, {10})
    assert.are.equal("int64", t.dtype)
    assert.are.same({-4, 4, -1, -4, -2, 4, -2, 1, 2, -1}, t:totable())
    dlpack.manual_seed(123)
    assert.are.same({{0, 2, 1, 0, 1}, {2, 1, 1, 2, 1}}, dlpack.randint(0, 3, 2, 5):totable())
    assert.are.same({0.65221543415855687}, dlpack.rand(1, "float64"):totable(), "one draw each")
  end)

  it("takes the narrow dtypes and bool, with their full ranges", function()
    dlpack.manual_seed(9)
    assert.are.same({0, 64, 33, 187, 235, 190, 174, 129}, dlpack.randint(0, 256, 8, "uint8"):totable())
    dlpack.manual_seed(9)
    assert.are.same({-128, -64, -95, 59, 107, 62, 46, 1}, dlpack.randint(-128, 128, 8, "char"):totable())
    dlpack.manual_seed(9)
    assert.are.same({false, false, false, true, true, true, true, true}, dlpack.randint(0, 2, 8, "bool"):totable())
    assert.are.same({1, 1, 1}, dlpack.randint(1, 2, 3, "int16"):totable())
  end)

  it("reaches the int64 limits, unbiased (Lemire's method rejects as the reference does)", function()
    -- compared as bytes (little-endian), which every Lua can do
    dlpack.manual_seed(5) -- 2^63 + 1 values: about half the draws are rejected
    assert.are.equal("b4672a65bca8eaa46e129326ad0811cdd7dd5d78e65824d3c4bcf331203982e7"
      .. "fc07738ead9e67ae612b63a24e5113a0", hex(dlpack.randint(-2 ^ 63, 1, 6):tobytes()))
  end)

  it_int("takes math.mininteger and math.maxinteger as bounds", function()
    dlpack.manual_seed(123)
    assert.are.equal("f869a0d1a18f5ab25d4d6d65c7e335782ea6f2c3462baaf7",
      hex(dlpack.randint(math.mininteger, math.maxinteger, 3):tobytes()))
    local t = dlpack.randint(math.maxinteger - 1, math.maxinteger, 4)
    assert.are.same({math.maxinteger - 1, math.maxinteger - 1, math.maxinteger - 1, math.maxinteger - 1}, t:totable())
    assert.are.same({math.mininteger}, dlpack.randint(math.mininteger, math.mininteger + 1, 1):totable())
    dlpack.manual_seed(9)
    assert.are.equal("2fd00c7b76a75400fc7da9e8c2cd3020",
      hex(dlpack.randint(0, math.maxinteger, 2, "uint64"):tobytes()))
  end)

  it("spreads evenly over a small range", function()
    local counts = {0, 0, 0}
    for _, v in ipairs(dlpack.randint(1, 4, 30000, "int8"):totable()) do counts[v] = counts[v] + 1 end
    for k = 1, 3 do assert.is_true(math.abs(counts[k] - 10000) < 500, "count " .. counts[k]) end
  end)

  it("raises when lo >= hi or the dtype cannot hold the range", function()
    raises_plain(function() dlpack.randint(5, 5, 2) end, "hi must be greater than lo (lo 5, hi 5)")
    raises_plain(function() dlpack.randint(5, -5, 2) end, "hi must be greater than lo")
    raises_plain(function() dlpack.randint(0, 257, 2, "uint8") end,
      "dlpack.randint: the range [0, 257) does not fit uint8 (0 to 255)")
    raises_plain(function() dlpack.randint(-1, 3, 2, "uint8") end, "does not fit uint8")
    raises_plain(function() dlpack.randint(-129, 0, 2, "int8") end, "does not fit int8 (-128 to 127)")
    raises_plain(function() dlpack.randint(0, 3, 2, "bool") end, "does not fit bool (0 to 1)")
    raises_plain(function() dlpack.randint(-1, 0, 2, "uint64") end, "does not fit uint64")
    raises_plain(function() dlpack.randint(0, 2 ^ 40, 2, "int32") end, "does not fit int32")
  end)

  it("refuses bounds that are not integers, float dtypes and bad shapes", function()
    raises_plain(function() dlpack.randint(0.5, 3, 2) end, "lo must be an integer from -2^63 to 2^63 - 1, got 0.5")
    raises_plain(function() dlpack.randint(0, 2 ^ 63, 2) end, "hi must be an integer")
    raises_plain(function() dlpack.randint(0, 0 / 0, 2) end, "got nan")
    raises(function() dlpack.randint(0, "3", 2) end, "number expected, got string")
    raises(function() dlpack.randint(0, 3) end, "shape expected as a table or as numbers, got no value")
    raises_plain(function() dlpack.randint(0, 3, 2, "float32") end,
      "dlpack.randint makes integers or bool, not float32")
    assert.are.equal("cpu", dlpack.randint(0, 3, 2, "int32", "cpu").device)
    raises(function() dlpack.randint(0, 3, 2, "int32", "cpu", 0) end, "unexpected argument")
    raises_plain(function() dlpack.randint(0, 3, {2, -2}) end, "shape[2] must be a non-negative integer, got -2")
    assert.are.same({3, 1}, dlpack.randint(0, 3, unpack({3, 1})).shape)
  end)
end)
