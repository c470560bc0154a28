-- Complex tensors in the elementwise functions: arithmetic, eq/ne, abs, the math functions,
-- sign, round, logic, classification, where, masked_fill, cat, stack, out=, in place, the Lua
-- operators, and the functions that raise for complex (docs/api.md, "Complex").
--
-- Complex tensors have no element access: they are made from the bytes of a float tensor of
-- their parts (re, im, re, im, ...) and read back the same way, which works on every Lua (no
-- string.pack, which 5.1, 5.2 and LuaJIT lack).
local dlpack = require "dlpack"
local support = require "support"

local INTEGERS = math.type ~= nil and _VERSION >= "Lua 5.3" -- the // operator

local REAL = {complex64 = "float32", complex128 = "float64"}

-- A complex tensor of dtype from the flat list of parts {re1, im1, re2, im2, ...}, with shape.
local function C(dtype, parts, shape)
  return dlpack.frombytes(dlpack.tensor(parts, REAL[dtype]):tobytes(), dtype, shape or {#parts / 2})
end

-- The parts of a complex tensor t in row-major order, {re1, im1, ...} (any layout).
local function parts(t)
  return dlpack.frombytes(t:tobytes(), REAL[t.dtype]):totable()
end

-- The float32 value of x (what a complex64 part holds).
local function f32(x) return dlpack.tensor({x}, "float32"):totable()[1] end

local function close(want, got, tol)
  assert.equal(#want, #got)
  for i = 1, #want do
    local ok = want[i] == got[i] or math.abs(want[i] - got[i]) <= (tol or 1e-12) * math.max(1, math.abs(want[i]))
    assert.is_true(ok, ("part %d: got %.17g, want %.17g"):format(i, got[i], want[i]))
  end
end

local function cosh(x) return (math.exp(x) + math.exp(-x)) / 2 end
local function sinh(x) return (math.exp(x) - math.exp(-x)) / 2 end

local NAN, INF = 0 / 0, math.huge

describe("complex arithmetic", function()
  for _, dt in ipairs({"complex64", "complex128"}) do
    it("adds, subtracts and multiplies exactly (" .. dt .. ")", function()
      local a = C(dt, {1, 2, 3, -4, 0, 0})
      local b = C(dt, {5, 6, -1, 1, 2, -3})
      local s = dlpack.add(a, b)
      assert.equal(dt, s.dtype)
      assert.same({6, 8, 2, -3, 2, -3}, parts(s))
      assert.same({-4, -4, 4, -5, -2, 3}, parts(a:sub(b)))
      -- (1+2i)(5+6i) = -7+16i, (3-4i)(-1+i) = 1+7i
      assert.same({-7, 16, 1, 7, 0, 0}, parts(dlpack.mul(a, b)))
      assert.same({-1, -2, -3, 4, 0, 0}, parts(dlpack.neg(a)))
    end)

    it("divides (Smith's algorithm, as NumPy), exactly where the quotient is exact (" .. dt .. ")", function()
      local a = C(dt, {3, 1, 4, 0, 1, 0})
      local b = C(dt, {1, 1, 2, 2, 0, 2})
      -- (3+i)/(1+i) = 2-i, 4/(2+2i) = 1-i, 1/(2i) = -0.5i
      assert.same({2, -1, 1, -1, 0, -0.5}, parts(dlpack.div(a, b)))
      assert.equal(dt, dlpack.div(a, b).dtype)
      -- (1+2i)/(3+4i) = (11+2i)/25
      local q = parts(dlpack.div(C(dt, {1, 2}), C(dt, {3, 4})))
      close({11 / 25, 2 / 25}, q, dt == "complex64" and 1e-7 or 1e-16)
      -- division by 0 gives infinities or NaN, not an error
      local z = parts(dlpack.div(C(dt, {1, 1}), C(dt, {0, 0})))
      assert.same({INF, INF}, z)
    end)

    it("raises to powers: integral exponents by repeated products, as NumPy (" .. dt .. ")", function()
      local a = C(dt, {1, 2, 1, 1, 2, 0, 0, 0})
      assert.same({-3, 4, 0, 2, 4, 0, 0, 0}, parts(dlpack.pow(a, 2)))
      assert.same({-11, -2, -2, 2, 8, 0, 0, 0}, parts(a:pow(3)))
      assert.same({1, 0, 1, 0, 1, 0, 1, 0}, parts(dlpack.pow(a, 0))) -- 0 ** 0 is 1
      -- (1+i)^-1 = 0.5-0.5i; 0 to a negative power is NaN (NumPy's)
      local r = parts(dlpack.pow(a, -1))
      assert.same({0.5, -0.5, 0.5, 0}, {r[3], r[4], r[5], r[6]})
      assert.is_true(r[7] ~= r[7] and r[8] ~= r[8])
      -- i ** 0.5 = (1+i)/sqrt(2); 2 ** i = cos(ln 2) + i sin(ln 2)
      local tol = dt == "complex64" and 1e-6 or 1e-15
      close({math.sqrt(0.5), math.sqrt(0.5)}, parts(dlpack.pow(C(dt, {0, 1}), 0.5)), tol)
      close({math.cos(math.log(2)), math.sin(math.log(2))}, parts(dlpack.pow(C(dt, {2, 0}), C(dt, {0, 1}))), tol)
      -- 0 ** b is 0 when b's real part is positive
      assert.same({0, 0}, parts(dlpack.pow(C(dt, {0, 0}), C(dt, {0.5, 3}))))
    end)
  end

  it("keeps the complex dtype of a tensor beside a Lua number (weak scalars)", function()
    local z = C("complex64", {1, 2, -3, 4})
    local h = z * 0.5
    assert.equal("complex64", h.dtype)
    assert.same({0.5, 1, -1.5, 2}, parts(h))
    assert.equal("complex64", (z + 1).dtype)
    assert.same({2, 2, -2, 4}, parts(z + 1))
    assert.same({0, -2, 4, -4}, parts(1 - z))
    assert.equal("complex128", (C("complex128", {1, 1}) * 3).dtype)
    assert.equal("complex64", dlpack.mul(z, true).dtype)
    -- a float that float32 cannot hold exactly is rounded to complex64's parts, as NumPy 2
    assert.same({f32(0.1), 0}, parts(dlpack.add(C("complex64", {0, 0}), 0.1)))
  end)

  it("promotes with real tensors as NumPy 2 does", function()
    local z = C("complex64", {1, 1})
    local cases = {
      {"bool", "complex64"}, {"int8", "complex64"}, {"uint8", "complex64"}, {"int16", "complex64"},
      {"uint16", "complex64"}, {"int32", "complex128"}, {"int64", "complex128"}, {"uint64", "complex128"},
      {"float16", "complex64"}, {"bfloat16", "complex64"}, {"float32", "complex64"}, {"float64", "complex128"},
      {"complex128", "complex128"},
    }
    for _, c in ipairs(cases) do
      local t = REAL[c[1]] and C(c[1], {1, 0}) or dlpack.ones({1}, c[1])
      local r = dlpack.add(z, t)
      assert.equal(c[2], r.dtype, c[1])
      assert.equal(c[2], dlpack.add(t, z).dtype, c[1])
      assert.same({2, 1}, parts(r))
    end
  end)

  it("broadcasts, and reads transposed, reversed and expanded views", function()
    local col = C("complex128", {1, 1, 2, 2}, {2, 1})
    local row = C("complex128", {10, 0, 20, 0, 30, 0}, {3})
    local s = dlpack.add(col, row)
    assert.same({2, 3}, {s:size(1), s:size(2)})
    assert.same({11, 1, 21, 1, 31, 1, 12, 2, 22, 2, 32, 2}, parts(s))
    -- a transposed view: m is {{1, 2}, {3, 4}} + i {{1, 2}, {3, 4}}, m^T times i
    local m = C("complex128", {1, 1, 2, 2, 3, 3, 4, 4}, {2, 2})
    local i = C("complex128", {0, 1})
    assert.same({-1, 1, -3, 3, -2, 2, -4, 4}, parts(dlpack.mul(m:transpose(1, 2), i)))
    -- a reversed (negative-stride) view on either side, complex64 this time
    local v = C("complex64", {1, 0, 2, 0, 3, 0})
    local w = C("complex64", {0, 1, 0, 2, 0, 3})
    assert.same({1, 3, 2, 2, 3, 1}, parts(dlpack.add(v, w:slice(1, -1, 1, -1))))
    assert.same({3, 1, 2, 2, 1, 3}, parts(v:flip(1) + w))
    -- an expanded (stride 0) operand
    local e = C("complex64", {1, -1}):expand(3)
    assert.same({2, -1, 3, -1, 4, -1}, parts(e + v))
    -- 0-d and empty tensors
    local z0 = C("complex128", {2, 3}, {})
    assert.equal(0, (z0 * z0).ndim)
    assert.same({-5, 12}, parts(z0 * z0))
    local empty = dlpack.zeros({0, 2}, "complex64")
    assert.same({0, 2}, {(empty + 1).shape[1], (empty + 1).shape[2]})
  end)

  it("works through the Lua operators + - * / ^ and unary -", function()
    local a = C("complex128", {1, 2})
    local b = C("complex128", {3, -1})
    assert.same({4, 1}, parts(a + b))
    assert.same({-2, 3}, parts(a - b))
    assert.same({5, 5}, parts(a * b))
    close({0.1, 0.7}, parts(a / b), 1e-15)
    assert.same({-3, 4}, parts(a ^ 2))
    assert.same({-1, -2}, parts(-a))
    assert.same({2, 4}, parts(2 * a))
    close({0.4, -0.8}, parts(2 / a), 1e-15)
  end)
end)

describe("complex comparisons, abs, logic and classification", function()
  it("compares for equality (NaN in either part is unequal)", function()
    local a = C("complex64", {1, 2, 1, 2, NAN, 0, 0, 0})
    local b = C("complex64", {1, 2, 1, -2, NAN, 0, -0.0, -0.0})
    assert.same({true, false, false, true}, dlpack.eq(a, b):totable())
    assert.same({false, true, true, false}, dlpack.ne(a, b):totable())
    assert.same({false, false, false, false}, dlpack.eq(a, C("complex128", {1, 0})):totable())
    assert.same({true}, dlpack.eq(C("complex64", {3, 0}), 3):totable())
    assert.same({true}, dlpack.eq(C("complex128", {3, 0}), dlpack.tensor({3}, "int32")):totable())
    assert.is_true(dlpack.equal(a:narrow(1, 1, 2), b:narrow(1, 1, 1):expand(2)))
    assert.is_false(dlpack.equal(a, b))
    assert.is_true(dlpack.equal(C("complex64", {1, 2}), C("complex128", {1, 2})))
  end)

  it("gives the magnitude as a real dtype: complex64 float32, complex128 float64", function()
    local a = dlpack.abs(C("complex64", {3, 4, -5, 12, 0, -2, INF, NAN}))
    assert.equal("float32", a.dtype)
    assert.same({5, 13, 2, INF}, a:totable())
    local b = C("complex128", {3, -4, 1, 1}):abs()
    assert.equal("float64", b.dtype)
    assert.same({5, math.sqrt(2)}, b:totable())
  end)

  it("finds NaN and infinities in either part", function()
    local z = C("complex128", {NAN, 0, 0, NAN, INF, 0, 0, -INF, INF, NAN, 1, 2})
    assert.same({true, true, false, false, true, false}, dlpack.isnan(z):totable())
    assert.same({false, false, true, true, true, false}, dlpack.isinf(z):totable())
    assert.same({false, false, false, false, false, true}, dlpack.isfinite(z):totable())
  end)

  it("takes nonzero (either part) as true in the logic functions", function()
    local a = C("complex64", {0, 0, 0, 1, 2, 0, 0, -0.0})
    local b = C("complex64", {1, 0, 1, 0, 0, 0, 0, 0})
    assert.same({false, false, true, true}, dlpack.logical_not(b):totable())
    assert.same({false, true, false, false}, dlpack.logical_and(a, b):totable())
    assert.same({true, true, true, false}, dlpack.logical_or(a, b):totable())
    assert.same({true, false, true, false}, dlpack.logical_xor(a, b):totable())
  end)
end)

describe("complex math functions", function()
  it("computes sqrt exp log sin cos tan tanh log1p expm1 as <complex.h> and NumPy", function()
    local x, y = 0.5, -1.25
    local z = C("complex128", {x, y})
    local ex = math.exp(x)
    local want = {
      exp = {ex * math.cos(y), ex * math.sin(y)},
      log = {math.log(math.sqrt(x * x + y * y)), math.atan(y / x)},
      sin = {math.sin(x) * cosh(y), math.cos(x) * sinh(y)},
      cos = {math.cos(x) * cosh(y), -math.sin(x) * sinh(y)},
      log1p = {math.log(math.sqrt((1 + x) ^ 2 + y * y)), math.atan(y / (1 + x))},
      expm1 = {ex * math.cos(y) - 1, ex * math.sin(y)},
    }
    local d = math.cos(2 * x) + cosh(2 * y)
    want.tan = {math.sin(2 * x) / d, sinh(2 * y) / d}
    local dh = cosh(2 * x) + math.cos(2 * y)
    want.tanh = {sinh(2 * x) / dh, math.sin(2 * y) / dh}
    local r = math.sqrt(math.sqrt(x * x + y * y))
    local half = math.atan(y / x) / 2
    want.sqrt = {r * math.cos(half), r * math.sin(half)}
    for name, w in pairs(want) do
      local got = dlpack[name](z)
      assert.equal("complex128", got.dtype, name)
      close(w, parts(got), 1e-13)
      local got32 = z:to("complex64")[name](z:to("complex64"))
      assert.equal("complex64", got32.dtype, name)
      close(w, parts(got32), 1e-5)
    end
  end)

  it("gives the exact values where there are some", function()
    assert.same({0, 2, 3, 0}, parts(dlpack.sqrt(C("complex128", {-4, 0, 9, 0}))))
    assert.same({1, 0}, parts(dlpack.exp(C("complex64", {0, 0}))))
    assert.same({0, math.pi}, parts(dlpack.log(C("complex128", {-1, 0}))))
    local e = parts(dlpack.exp(C("complex128", {0, math.pi})))
    close({-1, 0}, e, 1e-15)
    assert.same({-INF, 0}, parts(dlpack.log(C("complex128", {0, 0}))))
  end)

  it("gives sign z/|z| and 0 for 0 (NumPy 2)", function()
    assert.same({3 / 5, 4 / 5, 0, 0, 0, -1, -1, 0}, parts(dlpack.sign(C("complex128", {3, 4, 0, 0, 0, -7, -INF, 1}))))
    local s = parts(C("complex64", {3, 4}):sign())
    assert.same({f32(0.6), f32(0.8)}, s)
  end)

  it("rounds both parts to nearest even", function()
    local r = parts(dlpack.round(C("complex64", {1.5, 2.5, -0.5, -1.5, 0.25, 3.75})))
    assert.same({2, 2, 0, -2, 0, 4}, r)
    assert.equal(-1, 1 / r[3] > 0 and 1 or -1) -- -0.5 rounds to -0
  end)
end)

describe("complex selection, joining, out= and in place", function()
  it("selects with where and fills with masked_fill", function()
    local a = C("complex64", {1, 1, 2, 2, 3, 3})
    local b = C("complex128", {-1, 0, -2, 0, -3, 0})
    local w = dlpack.where(dlpack.tensor({true, false, true}), a, b)
    assert.equal("complex128", w.dtype)
    assert.same({1, 1, -2, 0, 3, 3}, parts(w))
    assert.same({1, 1, 0.5, 0, 3, 3}, parts(dlpack.where(dlpack.tensor({1, 0, 1}, "int8"), a, 0.5)))
    -- a complex condition: nonzero (either part) is true
    local cond = C("complex64", {0, 1, 0, 0, 2, 0})
    assert.same({1, 1, -2, 0, 3, 3}, parts(dlpack.where(cond, a, b)))
    local f = a:clone():masked_fill(dlpack.tensor({false, true, false}), 7)
    assert.same({1, 1, 7, 0, 3, 3}, parts(f))
    assert.same({0, 0, 2, 2, 0, 0}, parts(a:clone():masked_fill(dlpack.tensor({true, false, true}), b:mul(0))))
    support.raises(function() dlpack.zeros({3}):masked_fill(dlpack.tensor({true, false, true}), a) end,
      "complex64 cannot be cast to float32")
  end)

  it("joins with cat and stack, promoting as the arithmetic does", function()
    local a = C("complex64", {1, 2})
    local c = dlpack.cat({a, dlpack.tensor({3}, "float32")})
    assert.equal("complex64", c.dtype)
    assert.same({1, 2, 3, 0}, parts(c))
    local s = dlpack.stack({a, C("complex128", {5, 6})})
    assert.equal("complex128", s.dtype)
    assert.same({1, 2, 5, 6}, parts(s))
  end)

  it("writes into out: a complex out of another width, or a real out that keeps the real part", function()
    local a = C("complex64", {1, 2, 3, 4})
    local out = dlpack.zeros({2}, "complex128")
    assert.is_true(rawequal(out, dlpack.mul(a, a, {out = out})))
    assert.same({-3, 4, -7, 24}, parts(out))
    -- converted as copy converts (complex to real keeps the real part), not NumPy's same_kind
    local real = dlpack.zeros({2}, "float64")
    dlpack.mul(a, a, {out = real})
    assert.same({-3, -7}, real:totable())
    local mag = dlpack.zeros({2}, "complex64")
    dlpack.abs(a, {out = mag})
    assert.same({f32(math.sqrt(5)), 0, 5, 0}, parts(mag))
    -- dtype= converts the inputs first, as copy converts: a real dtype takes the real part
    -- (docs/api.md: abs(z):to(...) gives the magnitude), a complex one computes real inputs as complex
    local z = C("complex64", {-3, 4})
    assert.same({3}, dlpack.abs(z, {dtype = "float64"}):totable())
    local m = dlpack.abs(z, {dtype = "complex128"})
    assert.equal("float64", m.dtype)
    assert.same({5}, m:totable())
    local r = dlpack.add(dlpack.tensor({1, 2}, "float32"), 1, {dtype = "complex128"})
    assert.equal("complex128", r.dtype)
    assert.same({2, 0, 3, 0}, parts(r))
  end)

  it("computes in place on a complex tensor, and refuses a complex result in a real one", function()
    local a = C("complex128", {1, 2, 3, 4})
    assert.is_true(rawequal(a, a:add_(C("complex64", {1, 1, 1, 1}))))
    assert.same({2, 3, 4, 5}, parts(a))
    a:mul_(2)
    assert.same({4, 6, 8, 10}, parts(a))
    a:add_(dlpack.tensor({1, 2}, "int32"))
    assert.same({5, 6, 10, 10}, parts(a))
    a:sqrt_()
    close({math.sqrt(5 + math.sqrt(61)) / math.sqrt(2), 6 / (2 * (math.sqrt(5 + math.sqrt(61)) / math.sqrt(2)))},
      {parts(a)[1], parts(a)[2]}, 1e-14)
    -- an overlapping view: reversed into itself
    local v = C("complex64", {1, 0, 2, 0, 3, 0})
    v:add_(v:flip(1))
    assert.same({4, 0, 4, 0, 4, 0}, parts(v))
    local f = dlpack.zeros({2}, "float32")
    support.raises(function() f:add_(C("complex64", {1, 0, 1, 0})) end,
      "add_: the result dtype complex64 cannot be cast to float32 in place")
    support.raises(function() f:mul_(C("complex128", {1, 0})) end, "complex128 cannot be cast to float32")
  end)
end)

describe("complex: what raises", function()
  local z = C("complex64", {1, 2, 3, 4})

  it("refuses the ordered functions (complex numbers have no order)", function()
    for _, name in ipairs({"lt", "le", "gt", "ge", "maximum", "minimum"}) do
      support.raises_plain(function() return dlpack[name](z, z) end,
        name .. ": complex64 is not supported (complex numbers have no order)")
    end
    support.raises_plain(function() return dlpack.clamp(z, 0, 1) end, "clamp: complex64 is not supported")
    support.raises_plain(function() return z:clamp(nil, 1) end, "clamp: complex64 is not supported")
    support.raises_plain(function() return dlpack.lt(dlpack.zeros({2}), C("complex128", {0, 0})) end,
      "lt: complex128 is not supported")
  end)

  it("refuses what NumPy does not define for complex, naming the function and dtype", function()
    for _, name in ipairs({"idiv", "mod"}) do
      support.raises_plain(function() return dlpack[name](z, z) end,
        name .. ": complex64 is not supported (not defined for complex numbers)")
    end
    for _, name in ipairs({"floor", "ceil", "trunc", "sigmoid"}) do
      support.raises_plain(function() return dlpack[name](z) end, name .. ": complex64 is not supported")
      support.raises_plain(function() return z:clone()[name .. "_"](z:clone()) end, name .. "_: complex64")
    end
    for _, name in ipairs({"band", "bor", "bxor"}) do
      support.raises_plain(function() return dlpack[name](z, z) end,
        name .. ": takes integer and bool dtypes, got complex64")
    end
    support.raises_plain(function() return dlpack.bnot(z) end, "bnot: takes integer and bool dtypes, got complex64")
    support.raises_plain(function() return dlpack.shl(z, 1) end, "shl: takes integer dtypes, got complex64")
    support.raises_plain(function() return z % 2 end, "mod: complex64 is not supported")
    if INTEGERS then
      local idiv = load("local z = ... return z // 2")
      support.raises_plain(function() return idiv(z) end, "idiv: complex64 is not supported")
    end
  end)

  it("keeps matmul real-only", function()
    support.raises(function() return dlpack.matmul(C("complex64", {1, 0, 1, 0}, {1, 2}), dlpack.ones({2, 1})) end,
      "complex")
  end)
end)

describe("complex allclose", function()
  it("compares magnitudes of differences", function()
    local a = C("complex128", {1, 1, 2, -2})
    assert.is_true(dlpack.allclose(a, C("complex64", {1, 1, 2, -2})))
    assert.is_false(dlpack.allclose(a, C("complex128", {1, 1.001, 2, -2})))
    assert.is_true(dlpack.allclose(a, C("complex128", {1, 1.001, 2, -2}), 1e-3))
    -- the imaginary part counts: a real tensor equal to the real parts is not close
    assert.is_false(dlpack.allclose(a, dlpack.tensor({1, 2})))
    assert.is_true(dlpack.allclose(C("complex64", {1, 0, 2, 0}), dlpack.tensor({1, 2})))
    assert.is_true(dlpack.allclose(C("complex64", {INF, 0}), C("complex64", {INF, 0})))
    assert.is_false(dlpack.allclose(C("complex64", {INF, 0}), C("complex64", {INF, 1})))
    assert.is_false(dlpack.allclose(C("complex64", {NAN, 0}), C("complex64", {NAN, 0})))
  end)
end)
