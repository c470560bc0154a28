-- Five classes of wrong results an attack on the computing functions found, each with NumPy 2's
-- answer (or its error): value checks read in another dtype than the loop's, pow's negative
-- exponents under dtype=, bool bytes other than 0 and 1, int64 against uint64 compared in
-- float64, and 64-bit integers rounded twice on their way to a narrow float. The sixth class
-- (overlap through two mappings of one shared block) is in spec/ipc_spec.lua.
--
-- Every Lua: 64-bit edge values are made by the module's own integer arithmetic (2^53 + 1 is an
-- int64 tensor plus 1), not by Lua numbers, which are doubles on 5.1, 5.2 and LuaJIT.
local dlpack = require "dlpack"

local INTEGERS = math.type ~= nil and _VERSION >= "Lua 5.3" and math.type(1) == "integer"

local function values(t) return t:totable() end

-- An int64 or uint64 tensor of 2^e + add (add an integral Lua number exact in a double, taken as
-- an integer: a Lua 5.4 float would make the sum float64).
local function big(dtype, e, add)
  local t = dlpack.tensor({2 ^ (e - 1)}, dtype) * 2
  add = add or 0
  if INTEGERS then add = math.tointeger(add) end -- (compat53's refuses beyond 2^53 on the older Luas)
  if add > 0 then t = t + add elseif add < 0 then t = t - (-add) end
  return t
end

local function raises(pattern, f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error matching " .. pattern)
  assert.matches(pattern, tostring(err))
end

describe("value checks read operands as the loop does", function()
  it("idiv and mod with a complex divisor and dtype= read it as the loop's integers (no over-read)", function()
    local t = dlpack.tensor({7, -7}, "int32")
    local u = dlpack.tensor({2, 3}):to("complex128")
    assert.same({3, -3}, values(dlpack.idiv(t, u, {dtype = "int32"})))
    assert.same({1, 2}, values(dlpack.mod(t, u, {dtype = "int32"})))
    local zero = dlpack.tensor({2, 0}):to("complex128")
    raises("idiv: integer division by zero", dlpack.idiv, t, zero, {dtype = "int32"})
    raises("mod: integer division by zero", dlpack.mod, t, zero, {dtype = "int32"})
    -- 0.5 + 1i is 0 as an int32 (the real part, truncated)
    local half = dlpack.frombytes(dlpack.tensor({2, 0, 0.5, 1}):tobytes(), "complex128")
    raises("integer division by zero", dlpack.idiv, t, half, {dtype = "int32"})
  end)

  it("a divisor that is zero only in the computing dtype raises", function()
    local t = dlpack.tensor({1, 2}, "int32")
    raises("idiv: integer division by zero", dlpack.idiv, t, dlpack.tensor({256, 2}, "int16"), {dtype = "int8"})
    raises("mod: integer division by zero", dlpack.mod, t, dlpack.tensor({2, 512}, "int16"), {dtype = "uint8"})
    raises("integer division by zero", dlpack.idiv, t, dlpack.tensor({0.5, 1}), {dtype = "int64"})
    -- uint64 2^32 is 0 as an int32, at the end of a strided, transposed divisor
    local d = dlpack.tensor({{1, 1}, {1, 2 ^ 32}}, "uint64"):transpose(1, 2)
    raises("integer division by zero", dlpack.idiv, dlpack.ones({2, 2}, "int32"), d, {dtype = "int32"})
    -- the same divisors in their own dtype divide
    assert.same({0, 1}, values(dlpack.idiv(t, dlpack.tensor({256, 2}, "int16"))))
  end)

  it("nothing is written when the check raises (out= and in place)", function()
    local out = dlpack.full({2}, 9, "int8")
    raises("integer division by zero", dlpack.idiv, dlpack.tensor({1, 2}, "int8"), dlpack.tensor({1, 256}, "int16"),
           {dtype = "int8", out = out})
    assert.same({9, 9}, values(out))
    local t = dlpack.tensor({5, 6}, "int8")
    raises("idiv_: integer division by zero", t.idiv_, t, dlpack.tensor({1, 0}, "int16"))
    assert.same({5, 6}, values(t))
  end)
end)

describe("pow under dtype= refuses negative integer exponents as the loop reads them", function()
  it("an int16 200 is -56 in int8", function()
    raises("pow: integers to negative integer powers are not allowed", dlpack.pow, dlpack.tensor({2, 3}, "int8"),
           dlpack.tensor({200, 1}, "int16"), {dtype = "int8"})
  end)

  it("uint64 2^64 - 1 is -1 in int64; float64 -1 is -1", function()
    local u = big("uint64", 64, -1)
    raises("negative integer powers", dlpack.pow, dlpack.tensor({2}, "int64"), u, {dtype = "int64"})
    raises("negative integer powers", dlpack.pow, dlpack.tensor({2, 2}, "int64"), dlpack.tensor({1, -1}),
           {dtype = "int64"})
    raises("negative integer powers", dlpack.pow, dlpack.tensor({2}, "int32"), dlpack.tensor({-1}, "int8"),
           {dtype = "int16"})
  end)

  it("exponents that stay non-negative compute", function()
    assert.same({8, 1}, values(dlpack.pow(dlpack.tensor({2, 3}, "int8"), dlpack.tensor({3, 256}, "int16"),
                                          {dtype = "int8"})))
    assert.same({1}, values(dlpack.pow(dlpack.tensor({2}, "int64"), dlpack.tensor({-0.5}), {dtype = "int64"})))
    -- unsigned loops have no negative exponents: 255 is 255
    assert.same({1}, values(dlpack.pow(dlpack.tensor({1}, "uint8"), dlpack.tensor({-1}, "int8"), {dtype = "uint8"})))
  end)
end)

describe("bool bytes other than 0 and 1 are true everywhere", function()
  local function b() return dlpack.frombytes("\2\1\2\0", "bool") end
  local T, F = true, false

  it("the binary functions give NumPy's answers and write 0 or 1", function()
    local want = {
      eq = {T, T, T, F}, ne = {F, F, F, T}, mul = {T, T, T, F}, minimum = {T, T, T, F}, band = {T, T, T, F},
      bxor = {F, F, F, T}, maximum = {T, T, T, T}, add = {T, T, T, T}, bor = {T, T, T, T},
      logical_and = {T, T, T, F}, logical_xor = {F, F, F, T}, ge = {T, T, T, F}, lt = {F, F, F, T},
      le = {T, T, T, T}, gt = {F, F, F, F},
    }
    for name, expected in pairs(want) do
      local r = dlpack[name](b(), true)
      assert.same(expected, values(r), name)
      if r.dtype == "bool" then
        for i = 1, 4 do assert.equal(expected[i] and 1 or 0, r:tobytes():byte(i), name) end
      end
    end
    -- two non-canonical tensors with different true bytes are equal
    local c = dlpack.frombytes("\1\255\128\0", "bool")
    assert.same({T, T, T, T}, values(dlpack.eq(b(), c)))
    assert.is_true(dlpack.equal(b(), c))
    assert.is_true(dlpack.equal(b(), b():to("int32"):ne(0)))
  end)

  it("unary functions, clamp, where and masked_fill", function()
    assert.equal("\1\1\1\0", b():abs():tobytes())
    assert.equal("\1\1\1\0", b():floor():tobytes())
    assert.equal("\0\0\0\1", b():logical_not():tobytes())
    assert.equal("\0\0\0\1", b():bnot():tobytes())
    assert.equal("\1\1\1\0", dlpack.clamp(b(), false, true):tobytes())
    assert.equal("\1\1\1\1", dlpack.clamp(b(), true, true):tobytes())
    assert.equal("\1\1\1\0", dlpack.where(dlpack.tensor({T, T, T, T}), b(), false):tobytes())
    assert.same({1, 1, 1, 0}, values(dlpack.where(b(), 1, 0)))
    local t = dlpack.zeros({4}, "int32")
    t:masked_fill(dlpack.frombytes("\255\0\128\1", "bool"), 7)
    assert.same({7, 0, 7, 7}, values(t))
    local x = b()
    x:bxor_(true)
    assert.equal("\0\0\0\1", x:tobytes())
  end)

  it("conversions, copies, element reads and reductions", function()
    assert.same({1, 1, 1, 0}, values(b():to("int32")))
    assert.same({1, 1, 1, 0}, values(b():to("float32")))
    local t = dlpack.zeros({4}, "uint8")
    t:copy(b())
    assert.same({1, 1, 1, 0}, values(t))
    assert.same({T, T, T, F}, values(b()))
    assert.equal(3, b():sum())
    assert.equal(0, b():prod())
    assert.equal(1, dlpack.frombytes("\2\1\2", "bool"):prod())
    assert.is_true(b():any())
    assert.is_false(b():all())
    assert.is_true(dlpack.frombytes("\2\255\128", "bool"):all())
    assert.is_true(b():max())
    assert.is_false(b():min())
    assert.equal(1, b():argmax()) -- the first true (indices count from 1)
    assert.equal(4, b():argmin())
    assert.same({1, 1, 1, 0}, values(dlpack.add(b(), dlpack.zeros({4}, "int8"))))
    assert.same({2, 1, 2, 0}, {b():tobytes():byte(1, 4)}) -- the bytes themselves are kept
  end)
end)

describe("int64 (any signed integer) against uint64 compares exactly", function()
  -- a = {2^53 + 1, 2^63 - 1}, u = {2^53, 2^63}
  local function a() return dlpack.cat({big("int64", 53, 1), big("int64", 62) - 1 + big("int64", 62)}) end
  local function u() return dlpack.cat({big("uint64", 53), big("uint64", 63)}) end

  it("every comparison, both orders", function()
    assert.same({false, false}, values(dlpack.eq(a(), u())))
    assert.same({true, true}, values(dlpack.ne(a(), u())))
    assert.same({false, true}, values(dlpack.lt(a(), u())))
    assert.same({false, true}, values(dlpack.le(a(), u())))
    assert.same({true, false}, values(dlpack.gt(a(), u())))
    assert.same({true, false}, values(dlpack.ge(a(), u())))
    assert.same({true, false}, values(dlpack.lt(u(), a())))
    assert.same({false, true}, values(dlpack.gt(u(), a())))
    assert.same({false, false}, values(u():eq(a())))
    assert.is_false(dlpack.equal(a(), u()))
  end)

  it("negative values, narrower signed dtypes, strided operands and out=", function()
    local neg = dlpack.tensor({-1, -5, 0}, "int8")
    local un = dlpack.cat({big("uint64", 64, -1), dlpack.tensor({0, 0}, "uint64")})
    assert.same({true, true, false}, values(dlpack.lt(neg, un)))
    assert.same({false, false, true}, values(dlpack.eq(neg, un)))
    local out = dlpack.zeros({3}, "int32")
    dlpack.ge(un, neg, {out = out})
    assert.same({1, 1, 1}, values(out))
    assert.same({true, false}, values(dlpack.lt(a():flip(1), u():flip(1))))
  end)

  it("Lua integers against uint64", function()
    local top = big("uint64", 64, -1) -- 2^64 - 1
    assert.same({false}, values(dlpack.eq(top, -1)))
    assert.same({false}, values(dlpack.lt(top, -1)))
    assert.same({true}, values(dlpack.gt(dlpack.tensor({0}, "uint64"), -1)))
    assert.same({true}, values(dlpack.ne(top, -1)))
  end)

  it("integers against floats still compare in float64 (a first operand that is an integer is read as one)", function()
    local u32, f32 = dlpack.tensor({8388620, 5}, "uint32"), dlpack.tensor({827.875, 6}, "float32")
    assert.same({true, false}, values(dlpack.ge(u32, f32)))
    assert.same({false, true, false}, values(dlpack.le(dlpack.tensor({16, 2, 13}, "uint64"), 6.25)))
    assert.same({1}, values(dlpack.tensor({-9}, "int64"):ge_(dlpack.tensor({-11.75}, "float16"))))
    assert.same({false, true, false}, values(dlpack.eq(dlpack.tensor({1, 2, 3}), 2.0)))
    assert.same({false, true}, values(dlpack.lt(5, dlpack.tensor({1.5, 7.5}))))
    assert.is_true(dlpack.equal(dlpack.tensor({1, 2}), dlpack.tensor({1.0, 2.0})))
    -- longer than a block of the conversion buffers (an int64 read into float64's place overran them)
    assert.is_true(dlpack.eq(dlpack.arange(0, 1000, "int32"), dlpack.arange(0, 1000, "float64")):all())
    assert.equal(50001, dlpack.lt(dlpack.arange(0, 100000, "int64"), 50000.5):sum())
  end)

  it("dtype= still computes in the dtype asked for", function()
    assert.same({true, true}, values(dlpack.eq(a(), u(), {dtype = "float64"})))
  end)

  it("maximum, minimum and clamp keep NumPy's float64 result (rounding is monotonic)", function()
    local m = dlpack.maximum(a(), u())
    assert.equal("float64", m.dtype)
    assert.same({2 ^ 53, 2 ^ 63}, values(m))
    assert.same({2 ^ 53, 2 ^ 63}, values(dlpack.minimum(a(), u())))
  end)
end)

-- The exact float of the integer 2^e * m (for a small m), given as a double.
describe("64-bit integers reach float32, bfloat16, float16 and complex64 in one rounding", function()
  -- x = 2^62 + 2^38 + 1: through a double it is 2^62 + 2^38 (a tie), then 2^62 in float32;
  -- rounded once it is 2^62 + 2^39
  local function x() return big("int64", 62, 2 ^ 38 + 1) end
  local want32 = 2 ^ 62 + 2 ^ 39

  it("to, copy, add(dtype=), sum(dtype=), out= and complex64's real part", function()
    assert.same({want32}, values(x():to("float32")))
    local c = dlpack.zeros({1}, "float32")
    c:copy(x())
    assert.same({want32}, values(c))
    assert.same({want32}, values(dlpack.add(x(), 0, {dtype = "float32"})))
    assert.equal(want32, x():sum(nil, {dtype = "float32"}))
    local o = dlpack.zeros({1}, "float32")
    dlpack.add(x(), 0, {dtype = "int64", out = o})
    assert.same({want32}, values(o))
    assert.same({want32, 0}, dlpack.frombytes(x():to("complex64"):tobytes(), "float32"):totable())
    assert.same({-want32}, values(dlpack.neg(x()):to("float32")))
  end)

  it("uint64 too", function()
    local u = big("uint64", 63, 2 ^ 39 + 1) -- 2^63 + 2^39 + 1: float32 2^63 + 2^40
    assert.same({2 ^ 63 + 2 ^ 40}, values(u:to("float32")))
  end)

  it("bfloat16 (8 bits) and float16", function()
    -- 2^40 + 2^32 + 1: through a double exact, so only bfloat16's own rounding: up, 2^40 + 2^33
    assert.same({2 ^ 40 + 2 ^ 33}, values(big("int64", 40, 2 ^ 32 + 1):to("bfloat16")))
    -- 2^62 + 2^54 + 1: a double rounds it to 2^62 + 2^54, a tie that bfloat16 rounds down to 2^62;
    -- rounded once it is above the tie: 2^62 + 2^55
    assert.same({2 ^ 62 + 2 ^ 55}, values((big("int64", 62, 2 ^ 54) + 1):to("bfloat16")))
    assert.same({math.huge}, values(big("int64", 62, 1):to("float16")))
    assert.same({65504}, values(dlpack.tensor({65519}, "int64"):to("float16")))
    assert.same({math.huge}, values(dlpack.tensor({65520}, "int64"):to("float16")))
  end)

  -- Lua integers: scalars and elements written from them (dlpack.tensor, full, set)
  local it_int = INTEGERS and it or pending
  it_int("Lua integers written into narrow floats round once (Lua 5.3+)", function()
    local v = math.tointeger(2 ^ 62) + math.tointeger(2 ^ 38) + 1
    assert.same({want32}, values(dlpack.tensor({v}, "float32")))
    assert.same({want32}, values(dlpack.full({1}, v, "float32")))
    local t = dlpack.zeros({1}, "float32")
    t[1] = v
    assert.same({want32}, values(t))
    assert.same({want32}, values(dlpack.add(dlpack.zeros({1}, "float32"), v)))
    assert.same({2 ^ 62 + 2 ^ 55}, values(dlpack.tensor({math.tointeger(2 ^ 62 + 2 ^ 54) + 1}, "bfloat16")))
  end)

  -- The exact reference: an integer (its unsigned 64 bits) rounded to nearest even at p bits, as
  -- a double (infinity above maxfinite), and the same for a signed value. Lua 5.3's integer
  -- operators, in a chunk that the older Luas never compile.
  local exact, exact_signed, random_integers = (INTEGERS and load or function() return function() end end)([[
    local function exact(u, p, maxfinite)
      if u == 0 then return 0.0 end
      local n = 64
      while (u >> (n - 1)) & 1 == 0 do n = n - 1 end
      local r
      if n <= p then
        r = u >= 0 and u + 0.0 or (u >> 1) * 2.0 + (u & 1)
      else
        local drop = n - p
        local kept, rest, half = u >> drop, u & ((1 << drop) - 1), 1 << (drop - 1)
        if math.ult(half, rest) or (rest == half and kept & 1 == 1) then kept = kept + 1 end
        r = kept * 2.0 ^ drop
      end
      if maxfinite and r > maxfinite then return math.huge end
      return r
    end
    local function exact_signed(v, p, maxfinite)
      if v < 0 then return -exact(0 - v, p, maxfinite) end -- 0 - mininteger: 2^63's bits
      return exact(v, p, maxfinite)
    end
    -- n random integers of 1 to 64 bits, a third of them near the ties of a double rounding
    local function random_integers(n)
      local vals = {}
      for i = 1, n do
        local bits, v = math.random(1, 64), math.random(0, 0xFFFFFFFF) << 32 | math.random(0, 0xFFFFFFFF)
        if bits < 64 then v = v >> (64 - bits) end
        if i % 3 == 0 then v = (v & ~((1 << 39) - 1)) | ((1 << 38) + 1) end
        vals[i] = v
      end
      return vals
    end
    return exact, exact_signed, random_integers
  ]])()

  it_int("random int64 and uint64 against an exact reference (Lua 5.3+)", function()
    math.randomseed(22)
    local n = 3000
    local vals = random_integers(n)
    local s = dlpack.tensor(vals, "int64")
    local u = dlpack.frombytes(s:tobytes(), "uint64")
    local formats = {{"float32", 24}, {"bfloat16", 8}, {"float16", 11, 65504}}
    for _, f in ipairs(formats) do
      local gs, gu = values(s:to(f[1])), values(u:to(f[1]))
      for i = 1, n do
        local ws, wu = exact_signed(vals[i], f[2], f[3]), exact(vals[i], f[2], f[3])
        assert(gs[i] == ws, ("int64 %d to %s: got %.17g, want %.17g"):format(vals[i], f[1], gs[i], ws))
        assert(gu[i] == wu, ("uint64 bits %d to %s: got %.17g, want %.17g"):format(vals[i], f[1], gu[i], wu))
      end
    end
    local re = dlpack.frombytes(s:to("complex64"):tobytes(), "float32"):totable()
    for i = 1, n do assert.equal(exact_signed(vals[i], 24), re[2 * i - 1]) end
  end)
end)
