-- Elementwise computing: arithmetic, comparisons, logic, bitwise, math, where, clamp,
-- masked_fill, equal, allclose, the Lua operators, out= and the in-place methods.
local dlpack = require "dlpack"
local support = require "support"

local INTEGERS = math.type ~= nil and _VERSION >= "Lua 5.3" -- integer subtype, // and bitwise operators

local function values(t) return t:totable() end

describe("elementwise arithmetic", function()
  it("adds, subtracts, multiplies and divides tensors of one dtype", function()
    local a = dlpack.tensor({1, 2, 3}, "float32")
    local b = dlpack.tensor({10, 20, 30}, "float32")
    assert.same({11, 22, 33}, values(dlpack.add(a, b)))
    assert.same({-9, -18, -27}, values(a:sub(b)))
    assert.same({10, 40, 90}, values(a:mul(b)))
    assert.same({0.5, 1, 1.5}, values(dlpack.div(a, 2)))
    assert.equal("float32", dlpack.add(a, b).dtype)
  end)

  it("floors integer division and gives the remainder the divisor's sign", function()
    local a = dlpack.tensor({7, -7, 7, -7}, "int32")
    local b = dlpack.tensor({2, 2, -2, -2}, "int32")
    assert.same({3, -4, -4, 3}, values(dlpack.idiv(a, b)))
    assert.same({1, 1, -1, -1}, values(dlpack.mod(a, b)))
    -- the smallest integer divided by -1 wraps, as NumPy's does
    assert.same({-128}, values(dlpack.idiv(dlpack.tensor({-128}, "int8"), -1)))
  end)

  it("floor-divides floats as NumPy does", function()
    local a = dlpack.tensor({1, -1, 5.5}, "float64")
    assert.same({9, -10, 2}, values(dlpack.idiv(a, dlpack.tensor({0.1, 0.1, 2}))))
    assert.same({1.5, 0.5}, values(dlpack.mod(dlpack.tensor({5.5, -5.5}), 2)))
  end)

  it("raises on integer division or modulo by zero, before writing anything", function()
    local a = dlpack.tensor({1, 2, 3}, "int64")
    support.raises(function() return dlpack.idiv(a, dlpack.tensor({1, 0, 1}, "int64")) end, "division by zero")
    support.raises(function() return dlpack.mod(a, 0) end, "division by zero")
    support.raises(function() a:idiv_(dlpack.tensor({1, 1, 0}, "int64")) end, "division by zero")
    assert.same({1, 2, 3}, values(a))
  end)

  it("raises for integers to negative integer powers and computes the others by squaring", function()
    local a = dlpack.tensor({2, 3, -2}, "int32")
    assert.same({8, 27, -8}, values(a:pow(3)))
    support.raises(function() return a:pow(-1) end, "negative integer powers")
    support.raises(function() return a:pow(dlpack.tensor({1, -1, 1}, "int32")) end, "negative integer powers")
    assert.same({0.5, 0.25}, values(dlpack.tensor({2, 4}, "float64"):pow(-2):sqrt()))
  end)

  it("wraps integer overflow", function()
    assert.same({0, 255}, values(dlpack.tensor({255, 0}, "uint8"):add(dlpack.tensor({1, 255}, "uint8"))))
    assert.same({-128}, values(dlpack.tensor({127}, "int8") + dlpack.tensor({1}, "int8")))
  end)

  it("propagates NaN through maximum and minimum", function()
    local nan = 0 / 0
    local r = dlpack.maximum(dlpack.tensor({1, nan, 3}), dlpack.tensor({2, 1, nan}))
    local v = values(r)
    assert.equal(2, v[1])
    assert.is_true(v[2] ~= v[2] and v[3] ~= v[3])
    assert.same({1, 1}, values(dlpack.minimum(dlpack.tensor({1, 5}, "int16"), 1)))
  end)

  it("treats bool add, mul, maximum and minimum as or, and, or, and; refuses bool sub", function()
    local a, b = dlpack.tensor({true, true, false}), dlpack.tensor({true, false, false})
    assert.same({true, true, false}, values(a + b))
    assert.same({true, false, false}, values(a * b))
    assert.equal("bool", (a + b).dtype)
    support.raises(function() return a - b end, "bool")
    assert.equal("int8", dlpack.idiv(a, true).dtype)
  end)
end)

describe("a -0.0 operand", function()
  it("keeps its sign in a float result on every Lua (5.1, 5.2 and LuaJIT count it as the integer 0)", function()
    local nz = -1 / math.huge -- not a literal: Lua 5.1 and LuaJIT merge the constants -0.0 and 0 of a chunk
    local function negative_zero(v) return v == 0 and 1 / v == -math.huge end
    local t = dlpack.tensor({1}, "float64")
    assert.is_true(negative_zero(dlpack.mul(t, nz)[1]))
    assert.is_true(negative_zero(dlpack.mul(dlpack.tensor({1}, "float32"), nz)[1]))
    assert.are.equal(-math.huge, dlpack.div(t, nz)[1])
    assert.is_true(dlpack.atan2(dlpack.zeros({1}, "float64"), nz)[1] > 3.14)
    assert.is_true(negative_zero(dlpack.where(dlpack.tensor({true}), nz, t)[1]))
    assert.is_true(negative_zero(dlpack.tensor({1}, "float64"):masked_fill(dlpack.tensor({true}), nz)[1]))
    -- where every number is a double, -0.0 is also what -i gives for an integer 0: it stays an integer
    assert.are.equal(support.INTEGERS and "float64" or "int32", dlpack.add(dlpack.tensor({1}, "int32"), nz).dtype)
  end)
end)

describe("result dtypes (NumPy 2)", function()
  local cases = {
    {"int8", "uint8", "int16"}, {"int64", "uint64", "float64"}, {"int32", "float32", "float64"},
    {"float16", "bfloat16", "float32"}, {"uint8", "float16", "float16"}, {"int16", "float16", "float32"},
    {"bool", "int8", "int8"}, {"uint32", "int32", "int64"}, {"uint16", "int32", "int32"},
    {"float32", "float64", "float64"}, {"int8", "bfloat16", "bfloat16"}, {"bool", "bool", "bool"},
  }
  for _, c in ipairs(cases) do
    it(c[1] .. " + " .. c[2] .. " is " .. c[3], function()
      local a, b = dlpack.ones({2}, c[1]), dlpack.ones({2}, c[2])
      assert.equal(c[3], dlpack.add(a, b).dtype)
      assert.equal(c[3], dlpack.add(b, a).dtype)
    end)
  end

  it("takes Lua numbers as weak scalars", function()
    assert.equal("uint8", (dlpack.ones({2}, "uint8") + 1).dtype)
    assert.equal("float32", (dlpack.ones({2}, "float32") * 0.5).dtype)
    assert.equal("float16", (2 * dlpack.ones({2}, "float16")).dtype)
    assert.equal("int64", (dlpack.ones({2}, "bool") + 1).dtype)
    if INTEGERS then -- on 5.1, 5.2 and LuaJIT 0.5 is a float, 1.0 an integer: numbers are doubles there
      assert.equal("float64", (dlpack.ones({2}, "int32") * 0.5).dtype)
      assert.equal("float64", (dlpack.ones({2}, "int32") + 1.0).dtype)
    end
    assert.equal("float64", (dlpack.ones({2}, "int32") * 0.5).dtype)
  end)

  it("refuses a Lua integer the tensor's integer dtype cannot hold", function()
    support.raises(function() return dlpack.ones({2}, "uint8") + 300 end, "300 is out of range for uint8")
    support.raises(function() return dlpack.ones({2}, "uint8") - (-1) end, "out of range for uint8")
  end)

  it("compares with integers outside the dtype by value", function()
    assert.same({true, true}, values(dlpack.lt(dlpack.tensor({0, 255}, "uint8"), 300)))
    assert.same({false, false}, values(dlpack.lt(dlpack.tensor({0, 255}, "uint8"), -1)))
  end)

  it("gives float functions of integers the smallest float that holds them", function()
    assert.equal("float16", dlpack.exp(dlpack.zeros({1}, "int8")).dtype)
    assert.equal("float16", dlpack.sqrt(dlpack.zeros({1}, "bool")).dtype)
    assert.equal("float32", dlpack.sin(dlpack.zeros({1}, "uint16")).dtype)
    assert.equal("float64", dlpack.log1p(dlpack.zeros({1}, "int32")).dtype)
    assert.equal("float64", dlpack.div(dlpack.ones({1}, "int8"), dlpack.ones({1}, "int8")).dtype)
    assert.equal("int16", dlpack.floor(dlpack.ones({1}, "int16")).dtype)
    assert.equal("bool", dlpack.isnan(dlpack.ones({1}, "int16")).dtype)
  end)

  it("computes float16 and bfloat16 in float32 and rounds once", function()
    local a = dlpack.tensor({2049}, "float32"):to("float16") -- 2048 in float16
    assert.same({2048}, values(a))
    assert.same({2050}, values(dlpack.add(a, dlpack.tensor({2}, "float16"))))
    assert.same({256}, values(dlpack.tensor({255}, "bfloat16") + dlpack.tensor({1}, "bfloat16")))
  end)

  it("refuses the 8-, 6- and 4-bit floats, naming the dtype", function()
    local t = dlpack.zeros({2}, "float8_e4m3fn")
    support.raises(function() return t + 1 end, "float8_e4m3fn.*to")
  end)
end)

describe("broadcasting", function()
  it("aligns shapes at the last dimension and stretches size-1 dimensions", function()
    local a = dlpack.tensor({{1}, {2}}, "int32")           -- {2, 1}
    local b = dlpack.tensor({10, 20, 30}, "int32")         -- {3}
    assert.same({{11, 21, 31}, {12, 22, 32}}, values(a + b))
    assert.same({2, 3}, (a + b).shape)
  end)

  it("names both shapes when they do not broadcast", function()
    support.raises(function() return dlpack.zeros({2, 3}) + dlpack.zeros({4}) end, "{2, 3} and {4}")
  end)

  it("works on transposed, sliced, flipped and expanded views", function()
    local m = dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "float64")
    assert.same({{2, 8}, {4, 10}, {6, 12}}, values(m:transpose(1, 2) * dlpack.tensor({2, 2})))
    assert.same({{3, 1}, {6, 4}}, values(m:slice(2, 3, 1, -2) + 0))
    assert.same({{5, 6, 7}, {8, 9, 10}}, values(m + m:select(2, 1):unsqueeze(2):expand({2, 3}):select(1, 2)))
  end)

  it("handles 0-d and empty tensors", function()
    local s = dlpack.tensor(5, "int32")
    assert.equal(0, (s + 1).ndim)
    assert.equal(6, (s + 1):item())
    local e = dlpack.zeros({0, 3})
    assert.same({0, 3}, (e + dlpack.ones({3})).shape)
  end)
end)

describe("comparisons, logic and bitwise", function()
  it("compare to bool tensors", function()
    local a, b = dlpack.tensor({1, 2, 3}), dlpack.tensor({3, 2, 1})
    assert.same({false, true, false}, values(dlpack.eq(a, b)))
    assert.same({true, false, true}, values(a:ne(b)))
    assert.same({true, false, false}, values(a:lt(b)))
    assert.same({true, true, false}, values(a:le(b)))
    assert.same({false, false, true}, values(a:gt(b)))
    assert.same({false, true, true}, values(a:ge(b)))
  end)

  it("keeps == an identity test", function()
    local a = dlpack.tensor({1})
    assert.is_false(a == a:clone())
    assert.is_true(a == a)
  end)

  it("logical functions treat nonzero as true", function()
    local a, b = dlpack.tensor({0, 1, 2}, "int8"), dlpack.tensor({0, 0, 5}, "float32")
    assert.same({false, false, true}, values(dlpack.logical_and(a, b)))
    assert.same({false, true, true}, values(dlpack.logical_or(a, b)))
    assert.same({false, true, false}, values(dlpack.logical_xor(a, b)))
    assert.same({true, false, false}, values(dlpack.logical_not(a)))
  end)

  it("bitwise functions take integers and bool", function()
    local a, b = dlpack.tensor({12, 10}, "uint8"), dlpack.tensor({10, 6}, "uint8")
    assert.same({8, 2}, values(dlpack.band(a, b)))
    assert.same({14, 14}, values(dlpack.bor(a, b)))
    assert.same({6, 12}, values(dlpack.bxor(a, b)))
    assert.same({243, 245}, values(dlpack.bnot(a)))
    assert.same({48, 40}, values(dlpack.shl(a, 2)))
    assert.same({3, 2}, values(dlpack.shr(a, 2)))
    assert.same({0, -1}, values(dlpack.shr(dlpack.tensor({5, -5}, "int8"), 9)))
    assert.same({false, true}, values(dlpack.bnot(dlpack.tensor({true, false}))))
    support.raises(function() return dlpack.band(dlpack.ones({1}), 1) end, "integer and bool")
    support.raises(function() return dlpack.shl(dlpack.ones({1}), 1) end, "integer")
  end)
end)

describe("unary math", function()
  it("computes the float functions", function()
    local x = dlpack.tensor({0, 1, 4}, "float64")
    assert.same({0, 1, 2}, values(x:sqrt()))
    assert.same({1, math.exp(1), math.exp(4)}, values(x:exp()))
    assert.same({0}, values(dlpack.tensor({1}):log()))
    assert.same({0, math.sin(1), math.sin(4)}, values(x:sin()))
    assert.same({0.5}, values(dlpack.tensor({0}):sigmoid()))
    assert.same({0}, values(dlpack.tensor({0}):tanh()))
  end)

  it("keeps integer dtypes for neg, abs, sign, floor, ceil, round and trunc", function()
    local i = dlpack.tensor({-3, 0, 5}, "int16")
    assert.same({3, 0, -5}, values(-i))
    assert.same({3, 0, 5}, values(i:abs()))
    assert.same({-1, 0, 1}, values(i:sign()))
    assert.same({-3, 0, 5}, values(i:round()))
    assert.equal("int16", i:round().dtype)
  end)

  it("rounds to nearest even, floors, ceils and truncates floats", function()
    local f = dlpack.tensor({0.5, 1.5, 2.5, -0.5, -1.7}, "float32")
    assert.same({0, 2, 2, -0, -2}, values(f:round()))
    assert.same({0, 1, 2, -1, -2}, values(f:floor()))
    assert.same({1, 2, 3, -0, -1}, values(f:ceil()))
    assert.same({0, 1, 2, -0, -1}, values(f:trunc()))
  end)

  it("classifies floats", function()
    local f = dlpack.tensor({0 / 0, 1 / 0, -1 / 0, 1})
    assert.same({true, false, false, false}, values(f:isnan()))
    assert.same({false, true, true, false}, values(f:isinf()))
    assert.same({false, false, false, true}, values(f:isfinite()))
    assert.same({false}, values(dlpack.ones({1}, "int32"):isnan()))
    assert.same({true}, values(dlpack.ones({1}, "int32"):isfinite()))
  end)
end)

describe("Lua operators", function()
  it("call the functions, with a number on either side", function()
    local a = dlpack.tensor({1, 2, 4}, "float64")
    assert.same({3, 4, 6}, values(a + 2))
    assert.same({3, 4, 6}, values(2 + a))
    assert.same({1, 0, -2}, values(2 - a))
    assert.same({2, 4, 8}, values(2 * a))
    assert.same({4, 2, 1}, values(4 / a))
    assert.same({1, 0, 0}, values(a % 2))
    assert.same({1, 4, 16}, values(a ^ 2))
    assert.same({2, 4, 16}, values(2 ^ a))
    assert.same({-1, -2, -4}, values(-a))
  end)

  if INTEGERS then
    it("include // & | ~ << >> on Lua 5.3 and later", function()
      local ops = load([[
        local a = ...
        return a // 2, a & 6, a | 1, a ~ 3, ~a, a << 1, a >> 1
      ]])
      local a = dlpack.tensor({5, 7}, "int32")
      local r = {ops(a)}
      assert.same({2, 3}, values(r[1]))
      assert.same({4, 6}, values(r[2]))
      assert.same({5, 7}, values(r[3]))
      assert.same({6, 4}, values(r[4]))
      assert.same({-6, -8}, values(r[5]))
      assert.same({10, 14}, values(r[6]))
      assert.same({2, 3}, values(r[7]))
    end)
  end
end)

describe("out and in place", function()
  it("writes into out, converting to its dtype, and returns it", function()
    local out = dlpack.zeros({3}, "int16")
    local r = dlpack.add(dlpack.tensor({1.7, 2.2, 3.9}), 1, {out = out})
    assert.equal(out, r)
    assert.same({2, 3, 4}, values(out))
  end)

  it("returns out when an input overlapping it was read into a temporary first", function()
    local base = dlpack.arange(6, "float64")
    local a, out = base:narrow(1, 1, 5), base:narrow(1, 2, 5) -- out is a shifted by one element
    assert.is_true(rawequal(out, dlpack.add(a, 1, {out = out})))
    assert.same({0, 1, 2, 3, 4, 5}, values(base))
    local t = dlpack.arange(4, "float64")
    local f = t:flip(1) -- a view of t, read reversed
    assert.is_true(rawequal(f, f:add_(t)))
    assert.same({3, 3, 3, 3}, values(t))
  end)

  it("computes in opts.dtype", function()
    local r = dlpack.add(dlpack.tensor({100}, "int8"), dlpack.tensor({100}, "int8"), {dtype = "int16"})
    assert.equal("int16", r.dtype)
    assert.same({200}, values(r))
  end)

  it("refuses out of another shape, a read-only out, an expanded out and unknown options", function()
    local a = dlpack.ones({3})
    support.raises(function() dlpack.add(a, a, {out = dlpack.zeros({4})}) end, "shape")
    support.raises(function() dlpack.add(a, a, {out = dlpack.zeros({3}):as_readonly()}) end, "read%-only")
    support.raises(function() dlpack.add(a, a, {out = dlpack.zeros({1}):expand({3})}) end, "expanded")
    support.raises(function() dlpack.add(a, a, {outt = a}) end, "unknown option 'outt'")
    support.raises(function() dlpack.add(a, a, {out = 5}) end, "out must be a tensor")
  end)

  it("updates in place with the _ methods and returns the tensor", function()
    local t = dlpack.tensor({1, 4, 9}, "float32")
    assert.equal(t, t:add_(1))
    assert.same({2, 5, 10}, values(t))
    t:sqrt_()
    local function f32(x) return (string.unpack("f", string.pack("f", x))) end
    assert.same({f32(math.sqrt(2)), f32(math.sqrt(5)), f32(math.sqrt(10))}, values(t))
    local c = dlpack.tensor({-5, 0.5, 5}):clamp_(0, 1)
    assert.same({0, 0.5, 1}, values(c))
  end)

  it("refuses in-place results that the same_kind rule does not cast", function()
    local i = dlpack.tensor({1, 2}, "int32")
    support.raises(function() i:div_(2) end, "float64.*int32")
    support.raises(function() i:add_(0.5) end, "same_kind")
    support.raises(function() dlpack.tensor({1}, "uint8"):add_(dlpack.tensor({1}, "int8")) end, "int16.*uint8")
    i:add_(dlpack.tensor({1, 1}, "int64")) -- int64 -> int32 is the same kind
    assert.same({2, 3}, values(i))
  end)

  it("reads every input before writing when out overlaps one (NumPy's rule)", function()
    local s = dlpack.tensor({1, 2, 3, 4, 5}, "float64")
    dlpack.add(s:narrow(1, 1, 4), 10, {out = s:narrow(1, 2, 4)})
    assert.same({1, 11, 12, 13, 14}, values(s))
    local r = dlpack.tensor({1, 2, 3, 4})
    r:add_(r:slice(1, 4, 1, -1))
    assert.same({5, 5, 5, 5}, values(r))
    local m = dlpack.tensor({{1, 2}, {3, 4}})
    dlpack.add(m:transpose(1, 2), 0, {out = m})
    assert.same({{1, 3}, {2, 4}}, values(m))
  end)
end)

describe("where, clamp, masked_fill, equal, allclose", function()
  it("where selects and promotes", function()
    local c = dlpack.tensor({true, false, true})
    local r = dlpack.where(c, dlpack.tensor({1, 2, 3}, "int8"), dlpack.tensor({10, 20, 30}, "int16"))
    assert.same({1, 20, 3}, values(r))
    assert.equal("int16", r.dtype)
    assert.same({{1, 0}, {1, 0}}, values(dlpack.where(dlpack.tensor({1, 0}, "uint8"), 1, dlpack.zeros({2, 2}, "int8"))))
  end)

  it("clamp takes either bound or both", function()
    local t = dlpack.tensor({-2, 0, 2}, "int32")
    assert.same({-1, 0, 1}, values(t:clamp(-1, 1)))
    assert.same({-2, 0, 1}, values(t:clamp(nil, 1)))
    assert.same({0, 0, 2}, values(dlpack.clamp(t, 0)))
    assert.equal("float64", t:clamp(0.5, 1).dtype)
    assert.same({1, 1, 1}, values(t:clamp(2, 1))) -- lo > hi gives hi, as NumPy's clip
    support.raises(function() return t:clamp() end, "bound")
  end)

  it("masked_fill sets the masked elements in place", function()
    local t = dlpack.tensor({{1, 2}, {3, 4}}, "int32")
    assert.equal(t, t:masked_fill(dlpack.tensor({true, false}), 0))
    assert.same({{0, 2}, {0, 4}}, values(t))
    support.raises(function() t:masked_fill(dlpack.tensor({true, false}), 0.5) end, "same_kind")
  end)

  it("equal and allclose", function()
    local a = dlpack.tensor({1, 2, 3})
    assert.is_true(dlpack.equal(a, dlpack.tensor({1, 2, 3}, "int32")))
    assert.is_false(dlpack.equal(a, dlpack.tensor({1, 2, 4})))
    assert.is_false(dlpack.equal(a, dlpack.tensor({1, 2})))
    assert.is_false(dlpack.equal(dlpack.tensor({0 / 0}), dlpack.tensor({0 / 0})))
    assert.is_true(dlpack.allclose(a, a + 1e-9))
    assert.is_false(dlpack.allclose(a, a + 1e-3))
    assert.is_true(dlpack.allclose(a, a + 1e-3, 0, 1e-2))
    assert.is_true(dlpack.allclose(dlpack.tensor({1 / 0}), dlpack.tensor({1 / 0})))
    assert.is_false(dlpack.allclose(dlpack.tensor({0 / 0}), dlpack.tensor({0 / 0})))
  end)
end)

describe("computing safely", function()
  it("refuses released tensors, strings and tables as operands", function()
    local a = dlpack.ones({2})
    local b = dlpack.ones({2})
    b:release()
    support.raises(function() return a + b end, "released")
    support.raises(function() return a + "1" end, "tensor, number or boolean expected, got string")
    support.raises(function() return dlpack.add(a, {}) end, "got table")
  end)

  it("raises naming the device for memory the CPU cannot read", function()
    local fab = require "fabricate"
    local t = dlpack.from_dlpack((fab.versioned {device_type = 2, device_id = 0, shape = {2}}))
    support.raises(function() return t + 1 end, "cuda:0")
    support.raises(function() return dlpack.ones({2}) + t end, "cuda:0")
    support.raises(function() dlpack.add(dlpack.ones({2}), 1, {out = t}) end, "cuda:0")
    t:release()
  end)

  it("is not fooled by an option table whose metamethods release the operands", function()
    local a, b = dlpack.ones({4}), dlpack.ones({4})
    local opts = setmetatable({}, {__index = function() a:release(); b:release() end})
    support.raises(function() dlpack.add(a, b, opts) end, "released")
  end)
end)

describe("the iteration engine under the elementwise functions", function()
  -- element by element with get(), the slow and obvious way (small shapes only)
  local function check_add(a, b)
    local r = a + b
    local shape = r.shape
    local idx = {}
    for k = 0, r:numel() - 1 do
      local rest = k
      for d = #shape, 1, -1 do
        idx[d] = rest % shape[d] + 1
        rest = (rest - idx[d] + 1) / shape[d]
      end
      local function at(t)
        local i = {}
        local shift = #shape - t.ndim
        for d = 1, t.ndim do i[d] = t.shape[d] == 1 and 1 or idx[d + shift] end
        return t:get(table.unpack(i))
      end
      assert.equal(at(a) + at(b), r:get(table.unpack(idx)))
    end
  end
  -- the same sum from contiguous copies of both operands broadcast (no short rows to fold)
  local function check_folded(a, b)
    local r = a + b
    local shape = r.shape
    assert.is_true(dlpack.equal(r, a:expand(shape):contiguous() + b:expand(shape):contiguous()))
  end

  it("folds a short broadcast row into long rows, converting dtypes on the way", function()
    local frame = dlpack.arange(4 * 5 * 3):view({4, 5, 3})
    check_add(frame, dlpack.tensor({100, 200, 300}, "int32"))
    check_add(frame:to("uint8"), dlpack.tensor({1, 2, 3}, "int16"))
    check_add(frame:to("float32"), dlpack.tensor({0.5, 1.5, 2.5}, "float64"))
    check_add(frame, dlpack.tensor({{1}, {2}, {3}, {4}, {5}}, "int64"))
    check_add(frame:transpose(1, 2), dlpack.tensor({1, 2, 3, 4}, "int64"):unsqueeze(2))
    check_add(dlpack.arange(4 * 3 * 2):view({4, 3, 2}):slice(1, 4, 1, -1), dlpack.tensor({10, 20}, "int8"))
    local big = dlpack.arange(97 * 41 * 3):view({97, 41, 3})
    check_folded(big, dlpack.tensor({1, 2, 3}, "float16"))
    check_folded(big:to("bfloat16"), dlpack.tensor({0.5, 1, 2}, "float32"))
    check_folded(big:transpose(1, 2), dlpack.tensor({7, 8, 9}, "uint8"))
    check_folded(dlpack.arange(600):view({200, 3}), dlpack.tensor({1, 2, 3}, "float16"))
  end)

  it("walks same-shape operands as one row only when every one is row-major", function()
    -- the one-row path: tensors of the result's shape, contiguous, with and without scalars and
    -- conversions, empty, one element, 0-d, and as long as a task of the threads
    check_add(dlpack.arange(12):view({3, 4}), dlpack.arange(12, "float32"):view({3, 4}))
    check_add(dlpack.tensor({1, 2, 3}, "int8"), dlpack.tensor({4, 5, 6}, "float16"))
    assert.same({{2, 3}, {4, 5}}, values(dlpack.tensor({{1, 2}, {3, 4}}, "int16") + 1))
    assert.same({5}, values(dlpack.tensor({2}, "float64") + dlpack.tensor({3}, "float64")))
    assert.equal(7, (dlpack.tensor(3, "int32") + dlpack.tensor(4, "int32")):item())
    assert.same({0, 3}, (dlpack.zeros({0, 3}) + dlpack.zeros({0, 3})).shape)
    local long = dlpack.arange(3 * 65536, "float64")
    assert.is_true(dlpack.equal(long + long, long * 2))
    -- the same shapes, not row-major: the general walk reads them by their strides
    local m = dlpack.arange(12):view({3, 4})
    local t = dlpack.arange(12):view({4, 3}):transpose(1, 2)
    check_add(m, t)
    check_add(t, m)
    check_add(m:slice(2, 1, 4, 2), m:slice(2, 2, 4, 2))
    check_add(m:slice(2, 1, 1):expand({3, 4}), m)
  end)

  it("computes float32 exp within one unit in the last place, with the IEEE special values", function()
    local x = dlpack.linspace(-104, 89, 20001, "float64"):to("float32")
    local y, ref = x:exp(), x:to("float64"):exp():to("float32")
    -- the distance in ulps: the difference of the bit patterns as int32 (all results are >= 0)
    local function bits(t) return dlpack.frombytes(t:tobytes(), "int32"):to("int64") end
    assert.is_true(dlpack.abs(bits(y) - bits(ref)):max() <= 1)
    local s = dlpack.tensor({0 / 0, 1 / 0, -1 / 0, 89, -104, 0}, "float32"):exp():totable()
    assert.is_true(s[1] ~= s[1])
    assert.same({1 / 0, 0, 1 / 0, 0, 1}, {s[2], s[3], s[4], s[5], s[6]})
  end)
end)

describe("NumPy's finer rules", function()
  it("promotes three dtypes together, not pairwise from the left", function()
    local r = dlpack.clamp(dlpack.ones({2}, "uint16"), dlpack.zeros({2}, "int8"), dlpack.ones({2}, "float16"))
    assert.equal("float32", r.dtype) -- pairwise from the left would give float64
  end)

  it("rounds to a float16 result before writing a wider out", function()
    local out = dlpack.zeros({1}, "float32")
    dlpack.add(dlpack.tensor({2048}, "float16"), dlpack.tensor({1}, "float16"), {out = out})
    assert.same({2048}, values(out)) -- 2049 is not a float16
  end)

  it("converts operands to a float16 dtype= before computing", function()
    assert.same({2048}, values(dlpack.add(dlpack.tensor({2049}, "int16"), 0, {dtype = "float16"})))
  end)

  it("refuses true division in an integer dtype", function()
    support.raises(function() return dlpack.div(dlpack.ones({1}, "int32"), 2, {dtype = "int32"}) end, "float dtype")
  end)

  it("counts an infinity close only to itself", function()
    assert.is_false(dlpack.allclose(dlpack.tensor({1}), dlpack.tensor({1 / 0})))
    assert.is_false(dlpack.allclose(dlpack.tensor({1 / 0}), dlpack.tensor({-1 / 0})))
  end)

  it("writes into empty outs whatever their strides", function()
    local out = dlpack.zeros({0, 1}):expand({0, 3})
    assert.equal(out, dlpack.add(dlpack.zeros({0, 3}), 1, {out = out}))
  end)

  it("sees overlap between two imports of the same memory", function()
    local base = dlpack.tensor({1, 2, 3, 4, 5}, "float64")
    local a = dlpack.from_dlpack(dlpack.to_dlpack(base))
    local b = dlpack.from_dlpack(dlpack.to_dlpack(base))
    dlpack.add(a:narrow(1, 1, 4), 10, {out = b:narrow(1, 2, 4)})
    assert.same({1, 11, 12, 13, 14}, values(base))
  end)
end)

describe("short broadcast rows through float16", function()
  it("tiles an operand converted to float16 first", function()
    local r = dlpack.add(dlpack.zeros({4, 3}, "float16"), dlpack.tensor({2049, 1, 2}, "int16"))
    assert.equal("float32", r.dtype) -- float16 + int16
    local h = dlpack.add(dlpack.zeros({4, 3}, "float16"), dlpack.tensor({2049, 1, 2}, "int16"), {dtype = "float16"})
    assert.same({2048, 1, 2}, values(h[4]))
  end)
end)

describe("found by review", function()
  it("clamps in one pass: bounds that overlap the output are read before it is written", function()
    local t = dlpack.tensor({-2, -1, 1, 2}, "float32")
    t:clamp_(0, t)
    assert.same({-2, -1, 1, 2}, values(t))
    local x, o = dlpack.tensor({-2, -1, 1, 2}, "float32"), dlpack.tensor({-5, -5, 5, 5}, "float32")
    dlpack.clamp(x, 0, o, {out = o})
    assert.same({-5, -5, 1, 2}, values(o))
  end)

  it("clamps into an out of another dtype, broadcasts every bound, and writes nothing on error", function()
    local out = dlpack.zeros({3}, "int32")
    dlpack.clamp(dlpack.tensor({-1.5, 0.5, 2.5}, "float32"), 0, 2, {out = out})
    assert.same({0, 0, 2}, values(out))
    assert.same({2, 3}, dlpack.clamp(dlpack.tensor({1, 5, 9}), 0, dlpack.ones({2, 3})).shape)
    local u = dlpack.tensor({1, 5, 200}, "uint8")
    support.raises(function() u:clamp_(10, 300) end, "300 is out of range for uint8")
    assert.same({1, 5, 200}, values(u))
    local nan = values(dlpack.tensor({0 / 0}):clamp(0, 1))[1]
    assert.is_true(nan ~= nan)
  end)

  it("refuses an integer dtype for the float functions", function()
    support.raises(function() return dlpack.sqrt(dlpack.ones({2}), {dtype = "int32"}) end, "float dtype")
    support.raises(function() return dlpack.exp(dlpack.ones({2}), {dtype = "bool"}) end, "float dtype")
  end)

  it("multiplies 16-bit integers without overflowing C's int", function()
    assert.same({1}, values(dlpack.tensor({65535}, "uint16") * dlpack.tensor({65535}, "uint16")))
    assert.same({1}, values(dlpack.tensor({65535}, "uint16"):pow(2)))
  end)

  it("walks empty tensors whose other sizes multiply past 64 bits", function()
    local z = dlpack.zeros({0, 2 ^ 40, 2 ^ 40})
    assert.same({0, 2 ^ 40, 2 ^ 40}, (z + 1).shape)
    assert.same({0}, z:sum({2, 3}).shape)
    assert.same({0}, z:max({2, 3}).shape)
    assert.equal(0, dlpack.sum(z))
  end)

  it("refuses to stack 64-dimension tensors, and reads sparse lists without sizing by their border", function()
    local shape = {}
    for i = 1, 64 do shape[i] = 1 end
    local t = dlpack.zeros(shape)
    support.raises(function() return dlpack.stack({t, t}) end, "more than 64 dimensions")
    local sparse, one = {}, dlpack.ones({1})
    for k = 0, 20 do sparse[math.floor(2 ^ k)] = one end -- Lua's border search may say 2^20
    support.raises(function() return dlpack.cat(sparse) end, "list%[3%]")
  end)
end)

-- Two tensors of one dtype and shape, row-major, without options take a shorter path than
-- the general driver (an options table, even an empty one, takes the driver): both must give
-- the same dtype, shape and bytes, or the same error, for every dtype and binary function.
describe("the short path for two tensors of one dtype and shape", function()
  local FLOATS = {0, 1, -1, 2.5, -0.5, 1e30, 0 / 0, 1 / 0, -1 / 0, 7}
  local OTHERS = {0, 3, 2, -2.5, 0.25, 1e-3, 1, 0 / 0, -1 / 0, 7}
  local INT_A = {0, 1, -1, 100, -128, 127, 5, -7, 3, 64}
  local INT_B = {0, 3, 2, -2, 7, 1, 5, -7, 0, 64}
  local DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                  "float16", "bfloat16", "float32", "float64", "complex64", "complex128"}
  local OPS = {"add", "sub", "mul", "div", "idiv", "mod", "pow", "maximum", "minimum", "eq", "ne", "lt", "le",
               "gt", "ge", "logical_and", "logical_or", "logical_xor", "band", "atan2", "hypot"}
  local OPERATORS = {add = function(a, b) return a + b end, sub = function(a, b) return a - b end,
                     mul = function(a, b) return a * b end, div = function(a, b) return a / b end,
                     mod = function(a, b) return a % b end, pow = function(a, b) return a ^ b end}

  local function same(expected_ok, expected, ok, got, label)
    assert.are.equal(expected_ok, ok, label .. ": " .. tostring(ok and got or expected))
    if not ok then -- (an operator's error also names the line of the expression)
      assert.are.equal(tostring(expected), (tostring(got):gsub("^[^:]*:%d+: ", "")), label)
      return
    end
    assert.are.equal(expected.dtype, got.dtype, label)
    assert.are.same(expected.shape, got.shape, label)
    assert.are.equal(expected:tobytes(), got:tobytes(), label)
  end

  local function pairs_of(dtype)
    local int = support.IS_INT[dtype] or dtype == "bool"
    local a = dlpack.tensor(int and INT_A or FLOATS):to(dtype)
    local b = dlpack.tensor(int and INT_B or OTHERS):to(dtype)
    return {
      {a, b, "{10}"},
      {a:reshape({2, 5}), b:reshape({2, 5}), "{2, 5}"},
      {a:narrow(1, 3, 1):reshape({}), b:narrow(1, 1, 1):reshape({}), "0-d"},
      {a:narrow(1, 1, 0), b:narrow(1, 1, 0), "{0}"},
      {a:reshape({5, 2}):transpose(1, 2), b:reshape({5, 2}):transpose(1, 2), "transposed"},
    }
  end

  for _, dtype in ipairs(DTYPES) do
    it("gives what the driver gives, " .. dtype, function()
      for _, case in ipairs(pairs_of(dtype)) do
        local a, b = case[1], case[2]
        for _, op in ipairs(OPS) do
          local label = ("%s %s %s"):format(op, dtype, case[3])
          local expected_ok, expected = pcall(dlpack[op], a, b, {})
          local ok, got = pcall(dlpack[op], a, b)
          same(expected_ok, expected, ok, got, label)
          if OPERATORS[op] then
            ok, got = pcall(OPERATORS[op], a, b)
            same(expected_ok, expected, ok, got, label .. " (operator)")
          end
        end
      end
    end)
  end

  it("refuses a released operand, before and during the call", function()
    local a, b = dlpack.ones({3}), dlpack.ones({3})
    b:release()
    support.raises(function() return dlpack.add(a, b) end, "add: the tensor was released before the call")
    support.raises(function() return b * a end, "mul: the tensor was released before the call")
  end)
end)

-- Outputs larger than the last-level cache are stored past it, a chunk at a time (elementwise.c,
-- run_streamed). DLPACK_LUA_STREAM_FROM=1 streams every output row of 256 bytes or more, 0 none:
-- a child process of each saves the results of the same operations, and they must be the same
-- bytes. Streamed: odd lengths, a scalar operand, a bool output, an output 4 bytes off 16-byte
-- alignment, complex128, a transposed input. Not streamed, and the same all the same: a periodic
-- broadcast, conversions (through float16, into an out= of another dtype, promotions), in place,
-- three operands. On 1 and on 3 threads.
describe("outputs stored past the cache", function()
  local STREAMED = [=[
    local dlpack = require "dlpack"
    local prefix = assert(os.getenv("DLPACK_SPEC_PREFIX"))
    local N = 100003
    local function f32(...) return dlpack.randn({...}, "float32") end
    local cases = {
      function() return dlpack.add(f32(N), f32(N)) end,
      function() return dlpack.mul(f32(20001, 3), dlpack.tensor({1, -2, 3}, "float32")) end, -- periodic
      function() return dlpack.sub(dlpack.randint(-9, 9, {N}, "int64"), 7) end,
      function() return dlpack.exp(f32(N):to("float16")) end, -- through float32
      function() return dlpack.gt(f32(N), 0) end, -- bool
      function()
        local a = f32(N)
        a:add_(f32(N))
        return a
      end,
      function()
        local big = dlpack.zeros({N + 1}, "float32")
        dlpack.mul(f32(N), 3, {out = big:narrow(1, 2, N)}) -- 4 bytes past the allocation's alignment
        return big
      end,
      function() return dlpack.add(f32(N), f32(N), {out = dlpack.empty({N}, "float64")}) end,
      function() return dlpack.where(dlpack.gt(f32(N), 0), f32(N), f32(N)) end,
      function() return dlpack.mul(f32(1001, 2):to("complex128"), f32(1001, 2):to("complex128")) end,
      function() return dlpack.add(f32(300, 400):transpose(1, 2), 1) end,
      function() return dlpack.add(dlpack.randint(0, 9, {N}, "int32"), f32(N)) end, -- promoted
    }
    for _, threads in ipairs({1, 3}) do
      dlpack.set_num_threads(threads)
      for i, make in ipairs(cases) do
        dlpack.manual_seed(i)
        dlpack.save(prefix .. threads .. "_" .. i .. ".npy", make())
      end
    end
    print(select(3, dlpack.cpu()) .. " " .. #cases)
  ]=]

  -- the results of the chunk run with the module at cpath and DLPACK_LUA_STREAM_FROM=from, as
  -- {dtype, size, bytes} per case and thread count
  local function results(cpath, from)
    local prefix = support.tmpname()
    os.remove(prefix)
    local out = support.run_lua(STREAMED, {DLPACK_LUA_STREAM_FROM = from, DLPACK_SPEC_PREFIX = prefix,
                                           LUA_PATH = package.path, LUA_CPATH = cpath})
    assert.are.equal(from .. " 12\n", out)
    local got = {}
    for _, threads in ipairs({1, 3}) do
      for i = 1, 12 do
        local file = prefix .. threads .. "_" .. i .. ".npy"
        local t = dlpack.load(file)
        os.remove(file)
        got[#got + 1] = {t.dtype, t:size(), t:tobytes(), ("case %d on %d threads"):format(i, threads)}
      end
    end
    return got
  end
  local function same_results(plain, streamed)
    for k, p in ipairs(plain) do
      local s = streamed[k]
      assert.are.equal(p[1], s[1], p[4])
      assert.are.same(p[2], s[2], p[4])
      assert(p[3] == s[3], p[4] .. " differs")
    end
  end

  local gen = support.BUILD .. "/gen/dlpack/core." .. support.SO
  local built = io.open(gen, "rb")
  if built then built:close() end
  local name = "gives the bytes of plain stores (DLPACK_LUA_STREAM_FROM=1 against 0)"
  local small = "gives the bytes of plain stores in chunks of 256 bytes (the test build)"
  if os.getenv("LD_PRELOAD") then
    local why = ": it runs new processes of the interpreter, which a preloaded sanitizer runtime crashes"
    pending(name .. why)
    pending(small .. why)
  else
    it(name, function() same_results(results(package.cpath, "0"), results(package.cpath, "1")) end)
    if built then
      it(small, function()
        same_results(results(package.cpath, "0"), results(support.BUILD .. "/gen/?." .. support.SO .. ";;", "1"))
      end)
    else
      pending(small .. ": " .. gen .. " (make test-build) is not built")
    end
  end

  it("streams outputs of at least the last-level cache's size by default (dlpack.cpu's third value)", function()
    local from = select(3, dlpack.cpu())
    if os.getenv("DLPACK_LUA_STREAM_FROM") then
      return pending("DLPACK_LUA_STREAM_FROM is set: " .. tostring(from) .. " bytes")
    elseif support.BUILD:match("[/\\]gen$") then
      assert.are.equal(4096, from) -- the test build streams small outputs
    else -- 0 off x86-64
      assert(from == 0 or from >= 4 * 1024 * 1024, "stores past the cache from " .. tostring(from) .. " bytes")
    end
  end)
end)
