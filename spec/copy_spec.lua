-- Copies and conversion: clone, contiguous, copy, to, fill, totable, tobytes, frombytes.
local dlpack = require "dlpack"
local support = require "support"
-- Specs of integer subtypes and of the int64 range (Lua 5.3+): pending elsewhere, with why.
local it_int = support.INTEGERS and it or function(name) pending(name .. ": " .. support.NO_INTEGERS) end

local raises = support.raises

local INTS = support.INTS
local SIGNED = {int8 = true, int16 = true, int32 = true, int64 = true,
                float16 = true, bfloat16 = true, float32 = true, float64 = true}
local IS_INT = support.IS_INT
local NUMERIC = support.NUMERIC

local is_nan = support.is_nan

-- a 1-d tensor of `dtype` holding `values` (numbers, or booleans for bool)
local function vec(values, dtype)
  local t = dlpack.zeros({#values}, dtype)
  for i, v in ipairs(values) do t[i] = v end
  return t
end

-- `values` as `dtype` elements read back: integers for integer dtypes, floats otherwise
local function expect_numbers(t, values, what)
  local got = t:totable()
  assert.are.equal(#values, #got, what)
  for i, v in ipairs(values) do
    assert.are.equal(v, got[i], what .. " [" .. i .. "]")
    if IS_INT[t.dtype] then
      assert.are.equal("integer", math.type(got[i]), what .. " [" .. i .. "] is an integer")
    else
      assert.are.equal("float", math.type(got[i]), what .. " [" .. i .. "] is a float")
    end
  end
end

describe("clone", function()
  it("copies into new contiguous memory with the same dtype and device", function()
    local t = dlpack.tensor({{1, 2}, {3, 4}}, "int16")
    local c = t:clone()
    assert.are.equal("int16", c.dtype)
    assert.are.equal("cpu", c.device)
    assert.are.same(t:totable(), c:totable())
    c:set(1, 1, 100)
    assert.are.equal(1, t:get(1, 1))
    assert.are_not.equal(t:data_ptr(), c:data_ptr())
  end)

  it("makes views contiguous", function()
    local t = dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "float32")
    for _, v in ipairs({t:transpose(1, 2), t:slice(2, -1, 1, -1), t:narrow(2, 2, 2),
        t:select(2, 2):unsqueeze(2):expand({2, 4})}) do
      local c = v:clone()
      assert.is_true(c:is_contiguous())
      assert.are.same(v.shape, c.shape)
      assert.are.same(v:totable(), c:totable())
      for _, s in ipairs(c.strides) do assert.is_true(s > 0) end
    end
  end)

  it("is writable even when the source is read-only", function()
    local r = dlpack.tensor({1, 2}):as_readonly()
    local c = r:clone()
    assert.is_false(c.readonly)
    c[1] = 5
    assert.are.equal(1, r[1])
  end)

  it("clones 0-d and empty tensors", function()
    assert.are.equal(3, dlpack.tensor(3):clone():item())
    assert.are.same({0, 2}, dlpack.zeros({0, 2}):clone().shape)
  end)

  it("clones dtypes without element access", function()
    local s = string.pack("=ffff", 1, 2, 3, 4)
    local c = dlpack.frombytes(s, "complex64"):clone()
    assert.are.equal("complex64", c.dtype)
    assert.are.equal(s, c:tobytes())
  end)
end)

describe("contiguous", function()
  it("returns the tensor itself when it is already contiguous", function()
    local t = dlpack.zeros({2, 3})
    assert.are.equal(t, t:contiguous())
    assert.is_true(rawequal(t, t:contiguous()))
  end)

  it("copies a non-contiguous tensor in row-major order", function()
    local t = dlpack.tensor({{1, 2}, {3, 4}}, "int32")
    local c = t:transpose(1, 2):contiguous()
    assert.is_true(c:is_contiguous())
    assert.are.same({2, 1}, c.strides)
    assert.are.same({{1, 3}, {2, 4}}, c:totable())
    c:set(1, 1, 9)
    assert.are.equal(1, t:get(1, 1))
  end)
end)

describe("copy", function()
  it("copies values and returns the destination", function()
    local dst = dlpack.zeros({2, 2}, "int32")
    local src = dlpack.tensor({{1, 2}, {3, 4}}, "int32")
    assert.are.equal(dst, dst:copy(src))
    assert.are.same({{1, 2}, {3, 4}}, dst:totable())
    src:set(1, 1, 50)
    assert.are.equal(1, dst:get(1, 1))
  end)

  it("copies into and from non-contiguous views", function()
    local dst = dlpack.zeros({2, 3}, "float64")
    dst:transpose(1, 2):copy(dlpack.tensor({{1, 2}, {3, 4}, {5, 6}}, "float64"))
    assert.are.same({{1, 3, 5}, {2, 4, 6}}, dst:totable())
    local col = dlpack.zeros({2}, "float64"):copy(dst:select(2, 3))
    assert.are.same({5, 6}, col:totable())
  end)

  it("raises when the shapes differ", function()
    raises(function() dlpack.zeros({2, 2}):copy(dlpack.zeros({4})) end)
    raises(function() dlpack.zeros({2, 2}):copy(dlpack.zeros({2, 3})) end)
  end)

  it("raises when the source is not a tensor", function()
    raises(function() dlpack.zeros({2}):copy({1, 2}) end)
    raises(function() dlpack.zeros({2}):copy(nil) end)
  end)

  it_int("converts between every pair of numeric dtypes", function()
    for _, from in ipairs(NUMERIC) do
      for _, to in ipairs(NUMERIC) do
        local values = {0, 1, 2, 100, 127}
        if SIGNED[from] and SIGNED[to] then values = {0, 1, -1, -100, -128, 127} end
        local src = vec(values, from)
        local dst = dlpack.zeros({#values}, to):copy(src)
        expect_numbers(dst, values, from .. " -> " .. to)
      end
    end
  end)

  it_int("converts between bool and every numeric dtype", function()
    for _, d in ipairs(NUMERIC) do
      local b = dlpack.zeros({3}, "bool"):copy(vec({0, 1, 0}, d))
      assert.are.same({false, true, false}, b:totable(), d .. " -> bool")
      local n = dlpack.zeros({3}, d):copy(vec({true, false, true}, "bool"))
      expect_numbers(n, {1, 0, 1}, "bool -> " .. d)
    end
    local b2 = dlpack.zeros({2}, "bool"):copy(vec({true, false}, "bool"))
    assert.are.same({true, false}, b2:totable())
  end)

  it("converts anything to bool as ~= 0", function()
    local f = vec({0.0, -0.0, 0.5, 0 / 0, -2.0, math.huge}, "float64")
    assert.are.same({false, false, true, true, true, true}, dlpack.zeros({6}, "bool"):copy(f):totable())
    local i = vec({0, 2, -1, 256}, "int32")
    assert.are.same({false, true, true, true}, dlpack.zeros({4}, "bool"):copy(i):totable())
    local h = vec({0.0, 2 ^ -24}, "float16")
    assert.are.same({false, true}, dlpack.zeros({2}, "bool"):copy(h):totable())
  end)

  it("truncates floats toward zero when converting to integers", function()
    local f = vec({2.7, -2.7, 0.5, -0.5, 99.999}, "float64")
    expect_numbers(dlpack.zeros({5}, "int32"):copy(f), {2, -2, 0, 0, 99}, "float64 -> int32")
    local h = vec({1.5, -1.5}, "float16")
    expect_numbers(dlpack.zeros({2}, "int8"):copy(h), {1, -1}, "float16 -> int8")
  end)

  it_int("saturates floats at the limits of the integer dtype", function()
    local f = vec({300, -300, 1e30, -1e30, math.huge, -math.huge}, "float64")
    expect_numbers(dlpack.zeros({6}, "int8"):copy(f), {127, -128, 127, -128, 127, -128}, "-> int8")
    expect_numbers(dlpack.zeros({6}, "uint8"):copy(f), {255, 0, 255, 0, 255, 0}, "-> uint8")
    expect_numbers(dlpack.zeros({6}, "int16"):copy(f), {300, -300, 32767, -32768, 32767, -32768}, "-> int16")
    expect_numbers(dlpack.zeros({6}, "int64"):copy(f),
      {300, -300, math.maxinteger, math.mininteger, math.maxinteger, math.mininteger}, "-> int64")
    expect_numbers(dlpack.zeros({2}, "uint32"):copy(vec({-5.5, 5e9}, "float32")), {0, 4294967295}, "-> uint32")
    expect_numbers(dlpack.zeros({2}, "uint64"):copy(vec({-1.0, -1e30}, "float64")), {0, 0}, "-> uint64")
  end)

  it("converts NaN to 0 for every integer dtype", function()
    for _, d in ipairs(INTS) do
      expect_numbers(dlpack.zeros({1}, d):copy(vec({0 / 0}, "float64")), {0}, "nan -> " .. d)
      expect_numbers(dlpack.zeros({1}, d):copy(vec({0 / 0}, "float32")), {0}, "nan32 -> " .. d)
    end
  end)

  it("wraps integers converted to a narrower integer dtype", function()
    expect_numbers(dlpack.zeros({5}, "int8"):copy(vec({300, -1, 128, 256, -129}, "int32")),
      {44, -1, -128, 0, 127}, "int32 -> int8")
    expect_numbers(dlpack.zeros({1}, "uint8"):copy(vec({-1}, "int64")), {255}, "int64 -> uint8")
    expect_numbers(dlpack.zeros({1}, "uint16"):copy(vec({-1}, "int64")), {65535}, "int64 -> uint16")
    expect_numbers(dlpack.zeros({1}, "uint32"):copy(vec({-1}, "int64")), {4294967295}, "int64 -> uint32")
    expect_numbers(dlpack.zeros({1}, "int16"):copy(vec({65535}, "uint16")), {-1}, "uint16 -> int16")
    expect_numbers(dlpack.zeros({1}, "int8"):copy(vec({255}, "uint8")), {-1}, "uint8 -> int8")
    expect_numbers(dlpack.zeros({1}, "int32"):copy(vec({2 ^ 40 + 5}, "int64")), {5}, "int64 -> int32")
    expect_numbers(dlpack.zeros({1}, "uint8"):copy(vec({-2}, "int8")), {254}, "int8 -> uint8")
  end)

  it("rounds to nearest even when converting to narrower floats", function()
    local f = vec({1 / 3, 65520, 1 + 2 ^ -11}, "float64")
    local h = dlpack.zeros({3}, "float16"):copy(f)
    assert.are.same({0.333251953125, math.huge, 1.0}, h:totable())
    local b = dlpack.zeros({2}, "bfloat16"):copy(vec({1 / 3, 257}, "float64"))
    assert.are.same({0.333984375, 256.0}, b:totable())
    local s = dlpack.zeros({1}, "float32"):copy(vec({16777217}, "int32"))
    assert.are.same({16777216.0}, s:totable())
  end)

  it("keeps NaN and infinities between float dtypes", function()
    for _, from in ipairs({"float16", "bfloat16", "float32", "float64"}) do
      for _, to in ipairs({"float16", "bfloat16", "float32", "float64"}) do
        local got = dlpack.zeros({3}, to):copy(vec({0 / 0, math.huge, -math.huge}, from)):totable()
        assert.is_true(is_nan(got[1]), from .. " -> " .. to)
        assert.are.equal(math.huge, got[2])
        assert.are.equal(-math.huge, got[3])
      end
    end
  end)

  it("keeps the real part when converting complex to real", function()
    local c64 = dlpack.frombytes(string.pack("=ffff", 1.5, 2.5, -3.0, 4.0), "complex64")
    assert.are.same({1.5, -3.0}, dlpack.zeros({2}, "float64"):copy(c64):totable())
    local c128 = dlpack.frombytes(string.pack("=dddd", 7.0, 1.0, -2.0, 0.5), "complex128")
    assert.are.same({7.0, -2.0}, dlpack.zeros({2}, "float32"):copy(c128):totable())
    assert.are.same({7, -2}, dlpack.zeros({2}, "int32"):copy(c128):totable())
  end)

  it("converts real to complex with a zero imaginary part", function()
    local c = dlpack.zeros({2}, "complex128"):copy(vec({3.0, -1.0}, "float64"))
    assert.are.equal(string.pack("=dddd", 3.0, 0.0, -1.0, 0.0), c:tobytes())
    local c64 = dlpack.zeros({1}, "complex64"):copy(vec({5}, "int16"))
    assert.are.equal(string.pack("=ff", 5.0, 0.0), c64:tobytes())
  end)

  it("converts between complex64 and complex128", function()
    local c64 = dlpack.frombytes(string.pack("=ff", 1.5, -2.5), "complex64")
    local c128 = dlpack.zeros({1}, "complex128"):copy(c64)
    assert.are.equal(string.pack("=dd", 1.5, -2.5), c128:tobytes())
  end)

  it("reverses correctly from an overlapping reversed view of the same memory", function()
    local t = dlpack.tensor({1, 2, 3, 4, 5}, "int32")
    t:copy(t:slice(1, -1, 1, -1))
    assert.are.same({5, 4, 3, 2, 1}, t:totable())
    local e = dlpack.tensor({1, 2, 3, 4}, "float64")
    e:copy(e:slice(1, -1, 1, -1))
    assert.are.same({4, 3, 2, 1}, e:totable())
  end)

  it("shifts correctly between overlapping views in either direction", function()
    local t = dlpack.tensor({1, 2, 3, 4, 5}, "int64")
    t:narrow(1, 2, 4):copy(t:narrow(1, 1, 4))
    assert.are.same({1, 1, 2, 3, 4}, t:totable())
    local u = dlpack.tensor({1, 2, 3, 4, 5}, "int64")
    u:narrow(1, 1, 4):copy(u:narrow(1, 2, 4))
    assert.are.same({2, 3, 4, 5, 5}, u:totable())
  end)

  it("transposes correctly in place from a transposed view of itself", function()
    local m = dlpack.tensor({{1, 2, 3}, {4, 5, 6}, {7, 8, 9}}, "int16")
    m:copy(m:transpose(1, 2))
    assert.are.same({{1, 4, 7}, {2, 5, 8}, {3, 6, 9}}, m:totable())
  end)

  it("converts dtype correctly between overlapping memory", function()
    local t = dlpack.tensor({1, 2, 3, 4}, "int32")
    local f = dlpack.zeros({4}, "float64"):copy(t:slice(1, -1, 1, -1))
    assert.are.same({4, 3, 2, 1}, f:totable())
    t:copy(t:slice(1, -1, 1, -1):clone())
    assert.are.same({4, 3, 2, 1}, t:totable())
  end)

  it("copies 0-d and empty tensors", function()
    local s = dlpack.zeros({}, "int32"):copy(dlpack.tensor(4, "int64"))
    assert.are.equal(4, s:item())
    local e = dlpack.zeros({0, 3}):copy(dlpack.zeros({0, 3}, "int8"))
    assert.are.same({0, 3}, e.shape)
  end)
end)

describe("to", function()
  it("converts to a dtype into a new tensor", function()
    local t = dlpack.tensor({1, 2, 3}, "int32")
    local f = t:to("float32")
    assert.are.equal("float32", f.dtype)
    assert.are.same({1.0, 2.0, 3.0}, f:totable())
    f[1] = 10
    assert.are.equal(1, t[1])
  end)

  it("returns the tensor itself when nothing changes", function()
    local t = dlpack.tensor({1, 2, 3}, "int32")
    assert.is_true(rawequal(t, t:to("int32")))
    assert.is_true(rawequal(t, t:to("cpu")))
    assert.is_true(rawequal(t, t:to({dtype = "int32"})))
    assert.is_true(rawequal(t, t:to({device = "cpu"})))
    assert.is_true(rawequal(t, t:to({dtype = "int32", device = "cpu", copy = false})))
    assert.is_true(rawequal(t, t:to({})))
  end)

  it("copies when copy is true even if nothing changes", function()
    local t = dlpack.tensor({1, 2, 3}, "int32")
    local c = t:to({copy = true})
    assert.is_false(rawequal(t, c))
    assert.are.equal("int32", c.dtype)
    assert.are.equal("cpu", c.device)
    c[1] = 100
    assert.are.equal(1, t[1])
    local c2 = t:to({dtype = "int32", device = "cpu", copy = true})
    c2[2] = 100
    assert.are.equal(2, t[2])
  end)

  it("takes the table form with dtype and device", function()
    local t = dlpack.tensor({{1, 2}, {3, 4}}, "int64")
    local f = t:to({dtype = "float64", device = "cpu"})
    assert.are.equal("float64", f.dtype)
    assert.are.equal("cpu", f.device)
    assert.are.same({{1.0, 2.0}, {3.0, 4.0}}, f:totable())
  end)

  it("converts non-contiguous views in their logical order", function()
    local t = dlpack.tensor({{1, 2}, {3, 4}}, "int64")
    assert.are.same({{1.0, 3.0}, {2.0, 4.0}}, t:transpose(1, 2):to("float32"):totable())
    assert.are.same({3, 1}, t:select(2, 1):slice(1, -1, 1, -1):to("int8"):totable())
  end)

  it("uses the same conversion rules as copy", function()
    local f = dlpack.tensor({2.7, -2.7, 1e30, 0 / 0}, "float64")
    assert.are.same({2, -2, 127, 0}, f:to("int8"):totable())
    assert.are.same({44, -1}, dlpack.tensor({300, -1}, "int32"):to("int8"):totable())
    assert.are.same({false, true}, dlpack.tensor({0, 3}):to("bool"):totable())
  end)

  it("raises on an unknown dtype or device, naming it", function()
    local t = dlpack.zeros({2})
    raises(function() t:to("float99") end, "float99")
    raises(function() t:to({dtype = "float99"}) end, "float99")
    raises(function() t:to({device = "tpu:0"}) end, "tpu")
  end)

  it("names a positive argument number in its error messages", function()
    local t = dlpack.zeros({2})
    for _, target in ipairs({"float99", {dtype = "float99"}, {device = "tpu:0"}, {dtype = 5}}) do
      local err = raises(function() t:to(target) end)
      assert.is_falsy(tostring(err):find("#%-"), tostring(err))
    end
  end)
end)

describe("to with a dtype and a device", function()
  it("takes a dtype and a device in either order, as torch's .to", function()
    local t = dlpack.tensor({1, 2, 3}, "int32")
    for _, args in ipairs({{"float64", "cpu"}, {"cpu", "float64"}}) do
      local f = t:to(args[1], args[2])
      assert.are.equal("float64", f.dtype)
      assert.are.equal("cpu", f.device)
      assert.are.same({1.0, 2.0, 3.0}, f:totable())
    end
    assert.is_true(rawequal(t, t:to("int32", "cpu")))
    assert.is_true(rawequal(t, t:to("int32", nil)))
  end)

  it("honours the device next to a dtype instead of ignoring it", function()
    -- pinned memory (a producer's cuda_host tensor on host memory) to float64 on the CPU: both change
    local fab = require "fabricate"
    local pinned = dlpack.from_dlpack((fab.versioned {device_type = 3, shape = {3}}))
    assert.are.equal("cuda_host", pinned.device)
    local f = pinned:to("float64", "cpu")
    assert.are.equal("float64", f.dtype)
    assert.are.equal("cpu", f.device)
    assert.are.same({1.0, 2.0, 3.0}, f:totable())
    pinned:release() -- the producer's deleter runs now, not in another spec's count
    -- and asks for CUDA memory when told "cuda" (here CUDA may be missing: then it says so)
    local ok, r = pcall(function() return dlpack.zeros({2}):to("float64", "cuda") end)
    if ok then
      assert.are.same({"float64", "cuda:0"}, {r.dtype, r.device})
    else
      assert.is_truthy(tostring(r):lower():find("cuda"), tostring(r))
    end
  end)

  it("refuses two dtypes, two devices, a second argument that is not a name, and a third", function()
    local t = dlpack.zeros({2})
    raises(function() t:to("float64", "int8") end, "a second dtype")
    raises(function() t:to("cpu", "cpu") end, "a second device")
    raises(function() t:to("float64", 1) end, "a dtype or device name expected, got number")
    raises(function() t:to("float64", {device = "cpu"}) end, "a dtype or device name expected, got table")
    raises(function() t:to("float64", "cpu", "x") end, "unexpected argument")
    raises(function() t:to("float64", "cpu", false) end, "unexpected argument")
    raises(function() t:to({dtype = "float64"}, "cpu") end, "unexpected argument")
    raises(function() t:to("float64", "gpu") end, "'gpu' is neither a dtype nor a device")
  end)
end)

describe("fill", function()
  it("sets every element and returns the tensor", function()
    local t = dlpack.zeros({2, 3}, "int16")
    assert.are.equal(t, t:fill(7))
    assert.are.same({{7, 7, 7}, {7, 7, 7}}, t:totable())
  end)

  it("fills only the elements of a view", function()
    local t = dlpack.zeros({2, 3}, "float32")
    t:narrow(2, 2, 2):fill(1)
    assert.are.same({{0, 1, 1}, {0, 1, 1}}, t:totable())
    local v = dlpack.zeros({5}, "int8")
    v:slice(1, 5, 1, -2):fill(3)
    assert.are.same({3, 0, 3, 0, 3}, v:totable())
    local tt = dlpack.zeros({2, 2}, "int8")
    tt:transpose(1, 2):select(1, 1):fill(4)
    assert.are.same({{4, 0}, {4, 0}}, tt:totable())
  end)

  it("fills bool, 0-d and empty tensors", function()
    assert.are.same({true, true}, dlpack.zeros({2}, "bool"):fill(true):totable())
    assert.are.equal(2.5, dlpack.zeros({}, "float64"):fill(2.5):item())
    assert.are.same({}, dlpack.zeros({0}, "int32"):fill(1):totable())
  end)

  it("rounds floats and checks integers as element writes do", function()
    assert.are.equal(0.333984375, dlpack.zeros({1}, "bfloat16"):fill(1 / 3)[1])
    raises(function() dlpack.zeros({1}, "int32"):fill(0.5) end)
    raises(function() dlpack.zeros({1}, "uint8"):fill(256) end)
  end)
end)

describe("totable", function()
  it("gives nested tables in row-major order", function()
    local t = dlpack.tensor({{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}}, "int32")
    assert.are.same({{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}}, t:totable())
  end)

  it("gives a scalar for a 0-d tensor", function()
    assert.are.equal(5, dlpack.tensor(5):totable())
    assert.are.equal(2.5, dlpack.tensor(2.5):totable())
    assert.are.equal(true, dlpack.tensor(true):totable())
  end)

  it_int("gives integers for integer dtypes, floats for float dtypes, booleans for bool", function()
    for _, d in ipairs(INTS) do
      assert.are.equal("integer", math.type(dlpack.zeros({1}, d):totable()[1]), d)
    end
    for _, d in ipairs({"float16", "bfloat16", "float32", "float64"}) do
      assert.are.equal("float", math.type(dlpack.zeros({1}, d):totable()[1]), d)
    end
    assert.are.equal("boolean", type(dlpack.zeros({1}, "bool"):totable()[1]))
  end)

  it("gives empty tables for zero-size dimensions", function()
    assert.are.same({}, dlpack.zeros({0}):totable())
    assert.are.same({{}, {}}, dlpack.zeros({2, 0}):totable())
    assert.are.same({}, dlpack.zeros({0, 2}):totable())
  end)

  it("follows the logical order of views", function()
    local t = dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "int64")
    assert.are.same({{1, 4}, {2, 5}, {3, 6}}, t:transpose(1, 2):totable())
    assert.are.same({{3, 2, 1}, {6, 5, 4}}, t:slice(2, -1, 1, -1):totable())
    assert.are.same({{2, 2}, {5, 5}}, t:select(2, 2):unsqueeze(2):expand({2, 2}):totable())
  end)

  it("returns new tables that do not alias the tensor", function()
    local t = dlpack.tensor({1, 2})
    local tab = t:totable()
    tab[1] = 100
    assert.are.equal(1, t[1])
  end)
end)

describe("tobytes", function()
  it("packs contiguous tensors as native-endian bytes", function()
    assert.are.equal(string.pack("=i1i1", -1, 2), dlpack.tensor({-1, 2}, "int8"):tobytes())
    assert.are.equal(string.pack("=i2i2", -300, 2), dlpack.tensor({-300, 2}, "int16"):tobytes())
    assert.are.equal(string.pack("=i4i4", -70000, 2), dlpack.tensor({-70000, 2}, "int32"):tobytes())
    assert.are.equal(string.pack("=i8i8", math.mininteger, 2),
      dlpack.tensor({math.mininteger, 2}, "int64"):tobytes())
    assert.are.equal(string.pack("=I1I1", 255, 2), dlpack.tensor({255, 2}, "uint8"):tobytes())
    assert.are.equal(string.pack("=I2I2", 65535, 2), dlpack.tensor({65535, 2}, "uint16"):tobytes())
    assert.are.equal(string.pack("=I4I4", 4294967295, 2), dlpack.tensor({4294967295, 2}, "uint32"):tobytes())
    assert.are.equal(string.pack("=I8I8", math.maxinteger, 2),
      dlpack.tensor({math.maxinteger, 2}, "uint64"):tobytes())
    assert.are.equal(string.pack("=ff", 0.5, -2), dlpack.tensor({0.5, -2}, "float32"):tobytes())
    assert.are.equal(string.pack("=dd", 0.1, -2), dlpack.tensor({0.1, -2}, "float64"):tobytes())
    assert.are.equal("\1\0\1", dlpack.tensor({true, false, true}):tobytes())
  end)

  it("packs float16 and bfloat16 bit patterns", function()
    assert.are.equal(string.pack("=I2I2I2I2", 0x3C00, 0xC000, 0x3800, 0x7C00),
      dlpack.tensor({1, -2, 0.5, math.huge}, "float16"):tobytes())
    assert.are.equal(string.pack("=I2I2I2I2", 0x3F80, 0xC000, 0x3F00, 0x7F80),
      dlpack.tensor({1, -2, 0.5, math.huge}, "bfloat16"):tobytes())
  end)

  it("gives the row-major elements of views", function()
    local t = dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "int32")
    assert.are.equal(string.pack("=i4i4i4i4i4i4", 1, 4, 2, 5, 3, 6), t:transpose(1, 2):tobytes())
    assert.are.equal(string.pack("=i4i4i4", 3, 2, 1), t:select(1, 1):slice(1, -1, 1, -1):tobytes())
    assert.are.equal(string.pack("=i4i4", 2, 5), t:select(2, 2):tobytes())
    assert.are.equal(string.pack("=i4i4i4i4i4i4", 1, 2, 3, 1, 2, 3), t[1]:expand({2, 3}):tobytes())
    assert.are.equal(string.pack("=i4i4", 4, 6), t:slice(2, 1, 3, 2)[2]:tobytes())
  end)

  -- strided tensors are gathered on the C stack (up to 1 KiB), in a block of their own, or (Lua 5.5,
  -- beyond 1 KiB) in the string's own memory
  it("gives the row-major bytes of transposes of every size", function()
    for _, case in ipairs({{"uint8", "=I1", 256}, {"int32", "=i4"}, {"int64", "=i8"}}) do
      local dtype, format, wrap = case[1], case[2], case[3]
      for _, size in ipairs({{4, 4}, {16, 16}, {16, 17}, {8, 33}, {33, 40}, {300, 301}}) do
        local n, m = size[1], size[2]
        local values = dlpack.arange(0, n * m, "int64")
        if wrap then values = values % wrap end
        local t = values:to(dtype):reshape({n, m}):transpose(1, 2)
        local want = {}
        for j = 0, m - 1 do
          for i = 0, n - 1 do want[#want + 1] = string.pack(format, wrap and (i * m + j) % wrap or i * m + j) end
        end
        assert.are.equal(table.concat(want), t:tobytes(), dtype .. " " .. n .. "x" .. m)
      end
    end
  end)

  it("runs no collector the script stopped (Lua 5.5's buffers take a collector step)", function()
    if _VERSION == "Lua 5.1" then return pending("tables have no __gc in Lua 5.1 and LuaJIT") end
    local t = dlpack.zeros({64, 64}, "float32"):transpose(1, 2)
    collectgarbage()
    collectgarbage("stop")
    local ran = 0
    for _ = 1, 50 do setmetatable({}, {__gc = function() ran = ran + 1 end}) end
    for _ = 1, 500 do local _ = t:tobytes() end
    local seen = ran
    collectgarbage("restart")
    collectgarbage()
    assert.are.equal(0, seen)
    assert.are.equal(50, ran)
  end)

  it("gives the one element of a 0-d tensor and nothing for an empty one", function()
    assert.are.equal(string.pack("=d", 1.5), dlpack.tensor(1.5):tobytes())
    assert.are.equal("", dlpack.zeros({0, 3}):tobytes())
  end)

  it("round-trips through frombytes", function()
    local t = dlpack.tensor({{1.5, -2}, {3, 4}}, "float32"):transpose(1, 2)
    local back = dlpack.frombytes(t:tobytes(), "float32", {2, 2})
    assert.are.same(t:totable(), back:totable())
  end)
end)

describe("frombytes", function()
  it("copies the string, so the tensor is independent and writable", function()
    local s = string.pack("=i2i2", 1, 2)
    local a = dlpack.frombytes(s, "int16")
    local b = dlpack.frombytes(s, "int16")
    a[1] = 9
    assert.are.equal(1, b[1])
    assert.are.equal(string.pack("=i2i2", 1, 2), s)
  end)
end)
