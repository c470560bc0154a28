-- More ways to make tensors: zeros_like, ones_like, empty_like, full_like, linspace, eye; shapes
-- given as numbers (dlpack.zeros(2, 3), t:view(2, -1)); torch's dtype aliases.
local dlpack = require "dlpack"
local support = require "support"
local fab = require "fabricate"

local raises, raises_plain = support.raises, support.raises_plain

-- t's elements in row-major order, as a flat list
local function flat(t)
  local out, f = {}, t:reshape({-1})
  for i = 1, f:numel() do out[i] = f[i] end
  return out
end

-- a 2x3 int32 tensor {{1, 2, 3}, {4, 5, 6}} seen through a negative-stride, transposed view: 3x2
local function odd_view()
  return dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "int32"):slice(2, -1, 1, -1):transpose(1, 2)
end

describe("zeros_like, ones_like, empty_like and full_like", function()
  it("take t's shape, dtype and device, and give a new contiguous writable tensor", function()
    local t = odd_view():as_readonly()
    assert.are.same({-1, 3}, t.strides)
    for name, f in pairs({zeros_like = dlpack.zeros_like, ones_like = dlpack.ones_like,
                          empty_like = dlpack.empty_like}) do
      local r = f(t)
      assert.are.same({3, 2}, r.shape, name)
      assert.are.same({2, 1}, r.strides, name)
      assert.are.equal("int32", r.dtype, name)
      assert.are.equal("cpu", r.device, name)
      assert.is_false(r.readonly, name)
      assert.are_not.equal(t:data_ptr(), r:data_ptr(), name)
    end
    assert.are.same({{0, 0}, {0, 0}, {0, 0}}, dlpack.zeros_like(t):totable())
    assert.are.same({{1, 1}, {1, 1}, {1, 1}}, dlpack.ones_like(t):totable())
    assert.are.same({{-7, -7}, {-7, -7}, {-7, -7}}, dlpack.full_like(t, -7):totable())
    assert.are.same({{3, 6}, {2, 5}, {1, 4}}, t:totable(), "t itself is untouched")
  end)

  it("take a dtype (aliases too) and a device", function()
    local t = dlpack.zeros({2}, "uint8")
    assert.are.same({1.0, 1.0}, dlpack.ones_like(t, "float64"):totable())
    assert.are.equal("float64", dlpack.zeros_like(t, "double").dtype)
    assert.are.same({true, true}, dlpack.ones_like(t, "bool"):totable())
    assert.are.same({2.5, 2.5}, dlpack.full_like(t, 2.5, "half"):totable())
    assert.are.equal("cpu", dlpack.empty_like(t, nil, "cpu").device)
    assert.are.equal("int16", dlpack.full_like(t, 3, "short", {1, 0}).dtype)
  end)

  it("keep the shape of 0-d, empty and expanded tensors", function()
    assert.are.same({}, dlpack.zeros_like(dlpack.tensor(5)).shape)
    assert.are.equal(1.0, dlpack.ones_like(dlpack.tensor(5.5)):item())
    assert.are.same({0, 3}, dlpack.full_like(dlpack.zeros({0, 3}), 9).shape)
    -- empty tensors have no memory (NULL): nothing is filled (memset(NULL, 0, 0) is undefined)
    assert.are.same({2, 0}, dlpack.full_like(dlpack.zeros({2, 0}, "uint8"), 0).shape)
    assert.are.same({0}, dlpack.ones(0, "int8").shape)
    assert.are.same({0}, dlpack.full({0}, 0, "int32").shape)
    local e = dlpack.tensor({1, 2, 3}):expand(4, 3)
    assert.are.same({0, 1}, e.strides)
    local r = dlpack.full_like(e, 8)
    assert.are.same({3, 1}, r.strides)
    assert.are.same({8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8}, flat(r))
  end)

  it("refuse a value the dtype cannot hold, before allocating", function()
    local t = dlpack.zeros({2}, "uint8")
    raises_plain(function() dlpack.full_like(t, 300) end, "dlpack.full_like: 300 is out of range for uint8")
    raises_plain(function() dlpack.full_like(t, -1) end, "out of range for uint8")
    raises_plain(function() dlpack.full_like(t, 1.5) end, "1.5 is not an integer (dtype uint8)")
    raises_plain(function() dlpack.full_like(t, 0.5, "int8") end, "0.5 is not an integer (dtype int8)")
    raises(function() dlpack.full_like(t, true) end, "takes an integer")
    raises(function() dlpack.full_like(t, 1, "bool") end, "true or false")
    raises(function() dlpack.full_like(t, "1") end, "takes an integer, got string")
    raises(function() dlpack.full_like(t) end, "bad argument #2")
    raises(function() dlpack.ones_like(dlpack.zeros({2}, "complex64")) end, "complex64")
    raises(function() dlpack.full_like(dlpack.zeros({2}, "float8_e4m3fn"), 1) end, "float8_e4m3fn")
  end)

  it("make tensors of the dtypes without element access when nothing is written", function()
    local z = dlpack.zeros_like(dlpack.empty({3}, "float8_e5m2"))
    assert.are.equal("float8_e5m2", z.dtype)
    assert.are.equal(string.rep("\0", 3), z:tobytes())
    local p = dlpack.empty_like(dlpack.empty({5}, "float4_e2m1fn"))
    assert.are.equal(3, p.nbytes)
  end)

  it("raise on a released tensor, on a non-tensor and on further arguments", function()
    local t = dlpack.zeros({2})
    t:release()
    for _, f in ipairs({dlpack.zeros_like, dlpack.ones_like, dlpack.empty_like}) do
      raises(function() f(t) end, "released")
      raises(function() f({2}) end, "dlpack.tensor expected")
      raises(function() f(dlpack.zeros({1}), "float32", "cpu", 1) end, "unexpected argument")
    end
    raises(function() dlpack.full_like(t, 1) end, "released")
    raises(function() dlpack.full_like(dlpack.zeros({1}), 1, "float32", "cpu", 1) end, "unexpected argument")
    raises(function() dlpack.zeros_like(dlpack.zeros({1}), "float128") end, "unknown dtype 'float128'")
    raises(function() dlpack.zeros_like(dlpack.zeros({1}), nil, "gpu") end, "unknown device 'gpu'")
  end)

  it("use only t's metadata: a metamethod that releases t while a device is read changes nothing", function()
    local t = dlpack.zeros({2, 3}, "int16")
    local device = setmetatable({}, {__index = function(_, k)
      t:release()
      return ({1, 0})[k]
    end, __len = function() return 2 end})
    local r = dlpack.full_like(t, 4, nil, device)
    assert.are.same({{4, 4, 4}, {4, 4, 4}}, r:totable())
    assert.are.equal("int16", r.dtype)
    raises(function() return t[1] end, "released")
  end)

  it("raise naming the device for a tensor on a device that cannot allocate", function()
    local t = dlpack.from_dlpack((fab.versioned {device_type = 7, device_id = 1, shape = {2, 2},
                                                data = string.rep("\0", 16)}))
    assert.are.equal("vulkan:1", t.device)
    raises_plain(function() dlpack.zeros_like(t) end, "dlpack.zeros_like: cannot allocate memory on device vulkan:1")
    raises_plain(function() dlpack.full_like(t, 1) end, "dlpack.full_like: cannot allocate memory on device vulkan:1")
    assert.are.same({{0.0, 0.0}, {0.0, 0.0}}, dlpack.zeros_like(t, nil, "cpu"):totable())
    t:release()
  end)
end)

describe("linspace", function()
  -- values computed by NumPy 2.4 (np.linspace(a, b, n, dtype=...)), printed with %.17g
  it("gives NumPy's values, endpoint included, float32 by default", function()
    local t = dlpack.linspace(0, 1, 5)
    assert.are.equal("float32", t.dtype)
    assert.are.same({0, 0.25, 0.5, 0.75, 1}, t:totable())
    assert.are.same({0, 0.16666666666666666, 0.33333333333333331, 0.5, 0.66666666666666663, 0.83333333333333326, 1},
      dlpack.linspace(0, 1, 7, "float64"):totable())
    assert.are.same({0.10000000000000001, 0.20000000000000001, 0.29999999999999999, 0.40000000000000002, 0.5,
                     0.59999999999999998, 0.69999999999999996}, dlpack.linspace(0.1, 0.7, 7, "double"):totable())
    assert.are.same({0.10000000149011612, 0.20000000298023224, 0.30000001192092896, 0.40000000596046448, 0.5,
                     0.60000002384185791, 0.69999998807907104}, dlpack.linspace(0.1, 0.7, 7):totable())
    assert.are.same({1, 0, -1, -2}, dlpack.linspace(1, -2, 4, "float64"):totable())
    assert.are.same({3, 3, 3, 3}, dlpack.linspace(3, 3, 4, "float64"):totable())
    assert.are.same({1000000000000000, 1000000000000001, 1000000000000002, 1000000000000003},
      dlpack.linspace(1e15, 1e15 + 3, 4, "float64"):totable())
    assert.are.same({0, 0.5, 1}, dlpack.linspace(0, 1, 3, "float16"):totable())
  end)

  it("multiplies and divides as NumPy when the step underflows to 0", function()
    assert.are.same({0, 0, 4.9406564584124654e-324}, dlpack.linspace(0, 5e-324, 3, "float64"):totable())
    assert.are.same({0, 4.999944335913415e-321, 9.9998886718268301e-321},
      dlpack.linspace(0, 1e-320, 3, "float64"):totable())
  end)

  it("floors toward -inf for integer dtypes, as np.linspace(..., dtype=int)", function()
    assert.are.same({-1, -1, 0, 0, 1}, dlpack.linspace(-1, 1, 5, "int64"):totable())
    assert.are.same({-3, -2, -1, 0, 1, 2}, dlpack.linspace(-2.5, 2.5, 6, "int32"):totable())
    assert.are.same({0, 85, 170, 255}, dlpack.linspace(0, 255, 4, "uint8"):totable())
    assert.are.same({-7, -4, 0, 3, 7}, dlpack.linspace(-7, 7, 5, "char"):totable())
  end)

  it("gives a for n = 1 and an empty tensor for n = 0", function()
    assert.are.same({5}, dlpack.linspace(5, 7, 1, "float64"):totable())
    assert.are.same({-2}, dlpack.linspace(-1.5, 7, 1, "int8"):totable())
    local e = dlpack.linspace(0, 1, 0)
    assert.are.same({0}, e.shape)
    assert.are.equal("float32", e.dtype)
  end)

  it("refuses bad counts and bounds, naming them", function()
    raises_plain(function() dlpack.linspace(0, 1, -1) end, "the count must be a non-negative integer, got -1")
    raises_plain(function() dlpack.linspace(0, 1, 2.5) end, "the count must be a non-negative integer, got 2.5")
    raises_plain(function() dlpack.linspace(0, 1, 0 / 0) end, "got nan")
    raises_plain(function() dlpack.linspace(0 / 0, 1, 3) end, "start must be a finite number, got nan")
    raises_plain(function() dlpack.linspace(0, math.huge, 3) end, "stop must be a finite number, got inf")
    raises_plain(function() dlpack.linspace(-math.huge, 0, 3) end, "start must be a finite number, got -inf")
    raises(function() dlpack.linspace("0", 1, 3) end, "number expected, got string")
    raises(function() dlpack.linspace(0, 1, "3") end, "number expected, got string")
    raises(function() dlpack.linspace(0, 1) end, "number expected, got no value")
    raises_plain(function() dlpack.linspace(-1e308, 1e308, 3) end, "stop - start overflows")
    assert.are.equal("cpu", dlpack.linspace(0, 1, 3, "float32", "cpu").device) -- CUDA devices: spec/cuda
    raises(function() dlpack.linspace(0, 1, 3, "float32", "cpu", 1) end, "unexpected argument")
  end)

  it("raises cleanly when the bytes of n elements overflow or cannot be allocated", function()
    raises_plain(function() dlpack.linspace(0, 1, 2 ^ 62) end,
      "dlpack.linspace: 4611686018427387904 elements of float32 are too many bytes")
    raises_plain(function() dlpack.linspace(0, 1, 2 ^ 61, "float64") end, "too many bytes")
  end)

  it("refuses dtypes that cannot hold the values, bool and dtypes without element access", function()
    raises_plain(function() dlpack.linspace(0, 300, 3, "uint8") end, "do not fit uint8")
    raises_plain(function() dlpack.linspace(-0.5, 1, 3, "uint8") end, "do not fit uint8")
    raises_plain(function() dlpack.linspace(-129, 0, 2, "int8") end, "do not fit int8")
    assert.are.same({-128, 127}, dlpack.linspace(-128, 127.9, 2, "int8"):totable())
    raises_plain(function() dlpack.linspace(0, 2 ^ 63, 2, "int64") end, "do not fit int64")
    raises_plain(function() dlpack.linspace(0, 1, 3, "bool") end, "linspace of bool is not supported")
    raises(function() dlpack.linspace(0, 1, 3, "complex64") end, "complex64")
    raises(function() dlpack.linspace(0, 1, 3, "float8_e4m3fn") end, "float8_e4m3fn")
    raises_plain(function() dlpack.linspace(0, 1, 3, "float128") end, "unknown dtype 'float128'")
  end)
end)

describe("eye", function()
  it("gives the n x n identity, float32 by default", function()
    local t = dlpack.eye(3)
    assert.are.equal("float32", t.dtype)
    assert.are.same({{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, t:totable())
  end)

  it("takes m and a dtype, or a dtype after n", function()
    assert.are.same({{1, 0, 0}, {0, 1, 0}}, dlpack.eye(2, 3):totable())
    local r = dlpack.eye(3, 2, "int32")
    assert.are.equal("int32", r.dtype)
    assert.are.same({{1, 0}, {0, 1}, {0, 0}}, r:totable())
    assert.are.equal("int64", dlpack.eye(2, "long").dtype)
    assert.are.same({{true, false}, {false, true}}, dlpack.eye(2, nil, "bool"):totable())
    assert.are.same({{1.0}}, dlpack.eye(1, 1, "bfloat16"):totable())
  end)

  it("gives empty tensors for n = 0 or m = 0", function()
    assert.are.same({0, 0}, dlpack.eye(0).shape)
    assert.are.same({3, 0}, dlpack.eye(3, 0).shape)
    assert.are.same({0, 4}, dlpack.eye(0, 4).shape)
    assert.are.same({0, 2 ^ 62}, dlpack.eye(0, 2 ^ 62).shape)
  end)

  it("refuses negative, fractional and overflowing sizes and dtypes without element access", function()
    raises_plain(function() dlpack.eye(-1) end, "n must be a non-negative integer, got -1")
    raises_plain(function() dlpack.eye(2, 1.5) end, "m must be a non-negative integer, got 1.5")
    raises(function() dlpack.eye(0 / 0) end, "got nan")
    raises(function() dlpack.eye("3") end, "number expected, got string")
    raises_plain(function() dlpack.eye(2 ^ 62) end, "dlpack.eye: the shape has more elements than fit in 64 bits")
    raises_plain(function() dlpack.eye(2 ^ 31, 2 ^ 31) end, "too many bytes")
    raises(function() dlpack.eye(2, 2, "complex128") end, "complex128")
    assert.are.equal("cpu", dlpack.eye(2, 2, "int32", "cpu").device) -- CUDA devices: spec/cuda
    raises(function() dlpack.eye(2, 2, "int32", "cpu", 1) end, "unexpected argument")
    raises(function() dlpack.eye(2, "int32", 3) end, "a device is a string")
  end)
end)

describe("shapes as numbers", function()
  it("make empty, zeros and ones as a table would", function()
    assert.are.same({2, 3}, dlpack.zeros(2, 3).shape)
    assert.are.same({{0, 0, 0}, {0, 0, 0}}, dlpack.zeros(2, 3, "int32"):totable())
    assert.are.equal("int32", dlpack.zeros(2, 3, "int32").dtype)
    assert.are.equal("cpu", dlpack.zeros(2, 3, nil, "cpu").device)
    assert.are.same({4}, dlpack.empty(4).shape)
    assert.are.equal("float64", dlpack.empty(4, 1, "double").dtype)
    assert.are.same({{1, 1}, {1, 1}}, dlpack.ones(2, 2, "int8"):totable())
    assert.are.same({0, 5}, dlpack.ones(0, 5).shape)
    assert.are.equal(1.0, dlpack.ones(1, 1, 1, 1):reshape({-1})[1])
  end)

  it("raise on negative, fractional and NaN sizes, naming the argument", function()
    raises(function() dlpack.zeros(2, -1) end, "bad argument #2 to '[%w.]*zeros' %(shape%[2%] must be a non%-negative "
      .. "integer, got %-1%)")
    raises_plain(function() dlpack.zeros(2, 0 / 0) end, "shape[2] must be a non-negative integer, got nan")
    raises_plain(function() dlpack.ones(1.5) end, "shape[1] must be a non-negative integer, got 1.5")
    raises_plain(function() dlpack.empty(3, math.huge) end, "shape[2] must be a non-negative integer, got inf")
    raises_plain(function() dlpack.zeros(2 ^ 62, 4) end, "shape has more elements than fit in 64 bits")
    raises_plain(function() dlpack.zeros(2 ^ 61, 2) end, "too many bytes")
    raises_plain(function() dlpack.zeros() end, "shape expected as a table or as numbers, got no value")
    raises_plain(function() dlpack.zeros(2, "3") end, "unknown dtype '3'")
    raises(function() dlpack.zeros(2, 3, "float32", "cpu", 1) end, "unexpected argument")
    local many = {}
    for i = 1, 65 do many[i] = 1 end
    raises_plain(function() dlpack.zeros(table.unpack(many)) end, "shape has more than 64 entries")
    for i = 1, 64 do many[i] = 1 end
    many[65] = nil
    assert.are.equal(64, dlpack.zeros(table.unpack(many)).ndim)
  end)

  it("work for view, reshape, permute and expand", function()
    local t = dlpack.arange(6)
    assert.are.same({{0, 1, 2}, {3, 4, 5}}, t:view(2, 3):totable())
    assert.are.same({{0, 1}, {2, 3}, {4, 5}}, t:reshape(3, -1):totable())
    assert.are.same({{0, 3}, {1, 4}, {2, 5}}, t:view(2, 3):permute(2, 1):totable())
    assert.are.same({{0, 3}, {1, 4}, {2, 5}}, t:view(2, 3):permute(-1, -2):totable())
    assert.are.same({{0, 3}, {1, 4}, {2, 5}}, t:view(2, 3):permute(2, 1):reshape(3, 2):totable())
    assert.are.same({{7, 8, 9}, {7, 8, 9}}, dlpack.tensor({7, 8, 9}):expand(2, 3):totable())
    assert.are.same({2, 3}, dlpack.tensor({7, 8, 9}):expand(2, -1).shape)
    assert.are.same({6}, t:view(-1).shape)
    assert.are.same({}, dlpack.tensor({5}):view({}).shape)
  end)

  it("raise in views on bad sizes and on arguments after the shape", function()
    local t = dlpack.arange(6)
    raises_plain(function() t:view(2, -1, -1) end, "only one dimension can be -1")
    raises_plain(function() t:view(4, -1) end, "cannot infer the -1 dimension")
    raises_plain(function() t:view(2, 1.5) end, "shape[2] must be a size or -1, got 1.5")
    raises_plain(function() t:view(2, -2) end, "shape[2] must be a size or -1, got -2")
    raises(function() t:view({2, 3}, 5) end, "unexpected argument")
    raises(function() t:view(2, 3, "x") end, "unexpected argument")
    raises(function() t:reshape(6, nil, 1) end, "unexpected argument")
    raises_plain(function() t:view(2, 3):permute(2, 2) end, "not a permutation")
    raises_plain(function() t:view(2, 3):permute(2) end, "expected 2 dimensions")
    raises_plain(function() t:view(2, 3):permute(1, 2.5) end, "permutation[2] must be an integer, got 2.5")
    raises(function() t:view(2, 3):permute(2, 1, "x") end, "unexpected argument")
    raises_plain(function() t:expand(2, 3) end, "cannot expand dimension 2 from 6 to 3")
    raises_plain(function() t:expand(-1, 6) end, "shape[1] is new and cannot be -1")
    raises(function() t:expand(2, 6, {}) end, "unexpected argument")
  end)

  it("are read raw: tables with lying metamethods are read through them, numbers never", function()
    local calls = 0
    local shape = setmetatable({}, {__len = function() calls = calls + 1; return 2 end,
                                    __index = function(_, i) calls = calls + 1; return i + 1 end})
    assert.are.same({2, 3}, dlpack.zeros(shape).shape)
    assert.are.equal(3, calls)
    local liar = setmetatable({}, {__len = function() return 2 ^ 40 end})
    raises_plain(function() dlpack.zeros(liar) end, "shape has a length of")
    local huge = setmetatable({}, {__len = function() return 2 end, __index = function() return 2 ^ 62 end})
    raises_plain(function() dlpack.ones(huge) end, "shape has more elements than fit in 64 bits")
    local t = dlpack.arange(6)
    local releasing = setmetatable({}, {__len = function() return 2 end, __index = function(_, i)
      t:release()
      return ({2, 3})[i]
    end})
    raises(function() t:view(releasing) end, "released")
  end)
end)

describe("dtype aliases", function()
  local ALIASES = {float = "float32", double = "float64", half = "float16", long = "int64", int = "int32",
                   short = "int16", byte = "uint8", char = "int8"}

  it("are accepted wherever a dtype name is, and t.dtype gives the canonical name", function()
    for alias, name in pairs(ALIASES) do
      assert.are.equal(name, dlpack.zeros({2}, alias).dtype, alias)
      assert.are.equal(name, dlpack.empty(2, alias).dtype, alias)
      assert.are.equal(name, dlpack.full({1}, 1, alias).dtype, alias)
      assert.are.equal(name, dlpack.tensor({1, 2}, alias).dtype, alias)
      assert.are.equal(name, dlpack.arange(3, alias).dtype, alias)
      assert.are.equal(name, dlpack.frombytes(string.rep("\0", 8), alias).dtype, alias)
      assert.are.equal(name, dlpack.zeros({1}):to(alias).dtype, alias)
      assert.are.equal(name, dlpack.zeros({1}):to({dtype = alias}).dtype, alias)
      assert.are.equal(name, dlpack.zeros({1}):to(alias, "cpu").dtype, alias)
      assert.are.equal(name, dlpack.zeros_like(dlpack.zeros({1}), alias).dtype, alias)
    end
  end)

  it("leave other names unknown (they are case-sensitive)", function()
    raises_plain(function() dlpack.zeros({2}, "Float") end, "unknown dtype 'Float'")
    raises_plain(function() dlpack.zeros({2}, "int128") end, "unknown dtype 'int128'")
    raises_plain(function() dlpack.zeros({2}, "float\0") end, "contains an embedded NUL")
    raises_plain(function() dlpack.zeros({1}):to("longs") end, "'longs' is neither a dtype nor a device")
  end)
end)
