-- A pure-Lua model of the computing functions for the fuzzer (spec/fuzz/compute.lua): NumPy 2's
-- result dtypes (written from API.md and NumPy's rules, not from the C code), broadcasting, the
-- errors a valid-looking call must raise, and element values for the operations where Lua's own
-- arithmetic gives the exact answer. Lua 5.4 (integers, bit operators, string.pack).
--
-- Values are what totable() gives: booleans, Lua integers (uint64 from 2^63 up as the negative
-- integer with the same 64 bits), Lua floats. A model function returns nil for "not modelled":
-- the caller then checks nothing about that value.
local M = {}

-- kind: "b" bool, "u" unsigned, "i" signed, "f" float; bits: the width
M.DT = {
  bool = { "b", 8 }, int8 = { "i", 8 }, int16 = { "i", 16 }, int32 = { "i", 32 }, int64 = { "i", 64 },
  uint8 = { "u", 8 }, uint16 = { "u", 16 }, uint32 = { "u", 32 }, uint64 = { "u", 64 },
  float16 = { "f", 16 }, bfloat16 = { "f", 16 }, float32 = { "f", 32 }, float64 = { "f", 64 },
}
M.COMPUTES = {}
for k in pairs(M.DT) do M.COMPUTES[k] = true end
-- complex64 and complex128 compute in the elementwise functions (docs/api.md, "Complex") but are
-- not modelled: a call with a complex operand or out is predicted as unknown (checked only for
-- sanitizer reports and crashes), as long as no operand must make it raise first.
M.COMPLEX = { complex64 = true, complex128 = true }

local function kind(d) return M.DT[d][1] end
local function bits(d) return M.DT[d][2] end
M.kind, M.bits = kind, bits

local INT_OF = { i = { [8] = "int8", [16] = "int16", [32] = "int32", [64] = "int64" },
  u = { [8] = "uint8", [16] = "uint16", [32] = "uint32", [64] = "uint64" } }

-- The smallest float holding every value of an integer dtype, by rank (0 float16, 1 float32, 2 float64).
local function int_float_rank(d) return bits(d) <= 8 and 0 or bits(d) <= 16 and 1 or 2 end
local function float_rank(d) return d == "float64" and 2 or d == "float32" and 1 or 0 end
local FLOAT_OF_RANK = { [0] = "float16", [1] = "float32", [2] = "float64" }

-- numpy.result_type of two tensor dtypes (bfloat16 promotes as float16, and with float16 to float32).
function M.promote(a, b)
  if a == b then return a end
  local ka, kb = kind(a), kind(b)
  if ka == "b" then return b end
  if kb == "b" then return a end
  if ka == "f" and kb == "f" then
    local ra, rb = float_rank(a), float_rank(b)
    if ra == rb then return "float32" end -- float16 with bfloat16
    return ra > rb and a or b
  end
  if ka == "f" or kb == "f" then
    local f, i = (ka == "f") and a or b, (ka == "f") and b or a
    local r = int_float_rank(i)
    if r <= float_rank(f) then return f end
    return FLOAT_OF_RANK[r]
  end
  if ka == kb then return bits(a) >= bits(b) and a or b end
  local s, u = (ka == "i") and a or b, (ka == "i") and b or a
  if bits(u) < bits(s) then return s end
  if bits(u) == 64 then return "float64" end
  return INT_OF.i[bits(u) * 2]
end

-- numpy.result_type of several tensor dtypes: NumPy promotes the highest kinds first (so uint16,
-- int8 and float16 give float32, where pairing from the left would give float64).
function M.promote_many(list)
  local p
  for _, k in ipairs({ "f", "i", "u", "b" }) do
    for _, d in ipairs(list) do
      if kind(d) == k then p = p and M.promote(p, d) or d end
    end
  end
  return p
end

-- A weak Lua scalar ("b", "i", "f") beside the tensors' promoted dtype p (nil: no tensor).
function M.promote_weak(p, w)
  if w == "b" then return p or "bool" end
  if w == "i" then
    if not p or kind(p) == "b" then return "int64" end
    return p
  end
  if not p or kind(p) ~= "f" then return "float64" end
  return p
end

-- NumPy's can_cast(from, to, "same_kind"): safe, or not to a lower kind (b < u < i < f).
local KORDER = { b = 0, u = 1, i = 2, f = 3 }
function M.same_kind(from, to)
  if from == to or M.promote(from, to) == to then return true end
  return KORDER[kind(from)] <= KORDER[kind(to)]
end

-- NumPy broadcasting of a list of shapes; nil when they do not broadcast.
function M.broadcast(shapes)
  local nd = 0
  for _, s in ipairs(shapes) do nd = math.max(nd, #s) end
  local r = {}
  for k = 1, nd do
    local size = 1
    for _, s in ipairs(shapes) do
      local d = #s - nd + k
      local v = d >= 1 and s[d] or 1
      if v ~= 1 then
        if size ~= 1 and size ~= v then return nil end
        size = v
      end
    end
    r[k] = size
  end
  return r
end

---------------------------------------------------------------------------
-- Values

local function is_int(d) local k = kind(d); return k == "i" or k == "u" end
M.is_int = is_int

-- An integer (any 64-bit pattern) wrapped to the dtype's width, as totable() gives it.
function M.wrap(d, v)
  local b = bits(d)
  if b == 64 then return v end
  v = v & ((1 << b) - 1)
  if kind(d) == "i" and v >= (1 << (b - 1)) then v = v - (1 << b) end
  return v
end

-- The real value of an integer element as a (correctly rounded) float.
local function int_to_float(d, v)
  if d == "uint64" and v < 0 then
    -- halve with the lost bit kept sticky, convert, double: rounds once
    return (((v >> 1) | (v & 1)) + 0.0) * 2.0
  end
  return v + 0.0
end

local function f64bits(x) return string.unpack("<i8", string.pack("<d", x)) end

-- x (a float) rounded to nearest even with p fraction bits, smallest normal exponent emin and
-- largest finite value max (float16, bfloat16).
local function round_small(x, p, emin, max)
  if x ~= x or x == 0 or x == math.huge or x == -math.huge then return x end
  local a = math.abs(x)
  local e = ((f64bits(a) >> 52) & 0x7ff) - 1023
  if e < emin then e = emin end
  local q = 2.0 ^ (e - p)
  local s = a / q
  local fl = math.floor(s)
  local diff = s - fl
  if diff > 0.5 or (diff == 0.5 and fl % 2 == 1) then fl = fl + 1 end
  local r = fl * q
  if r > max then r = math.huge end
  return x < 0 and -r or r
end

-- x rounded to float dtype d.
function M.round(d, x)
  if d == "float64" then return x end
  if d == "float32" then
    if x ~= x then return x end
    if math.abs(x) >= 3.4028235677973366e38 then -- past float32's largest + half an ulp
      return x > 0 and math.huge or -math.huge
    end
    return (string.unpack("<f", string.pack("<f", x)))
  end
  if d == "float16" then return round_small(x, 10, -14, 65504.0) end
  return round_small(x, 7, -126, 3.3895313892515355e38) -- bfloat16
end

-- Significant bits of the narrow floats (an integer converts to them with one rounding).
M.PREC = { float32 = 24, bfloat16 = 8, float16 = 11 }

-- The integer v (unsigned: v is a uint64 bit pattern) converted to the narrow float dtype d
-- (float32, bfloat16, float16) with one rounding to nearest even, computed exactly on integers
-- (NumPy's casts round once: int64 2^62 + 2^38 + 1 is 2^62 + 2^39 in float32, where a detour
-- through float64 gives 2^62). float16 overflows to inf from 65520 up; float32 and bfloat16
-- hold every 64-bit integer.
function M.int_round(d, v, unsigned)
  local p = M.PREC[d]
  local neg, m = false, v
  if not unsigned and v < 0 then neg, m = true, -v end -- math.mininteger: the pattern of 2^63
  if m == 0 then return 0.0 end
  local n = 64
  while (m >> (n - 1)) == 0 do n = n - 1 end -- the bit length (logical shifts)
  local r
  if n <= p then
    r = m + 0.0 -- below 2^24: exact
  else
    local sh = n - p
    local q, rem, half = m >> sh, m & ((1 << sh) - 1), 1 << (sh - 1)
    if rem > half or (rem == half and q & 1 == 1) then q = q + 1 end
    r = q * 2.0 ^ sh -- q <= 2^p: exact
  end
  if d == "float16" and r > 65504.0 then r = math.huge end
  return neg and -r or r
end

-- An exact comparison of two integers, x and y, either of which may be a uint64 bit pattern
-- (xu, yu): -1, 0 or 1. NumPy 2 compares int64 with uint64 exactly (not in float64).
function M.mixed_cmp(x, xu, y, yu)
  local xbig, ybig = xu and x < 0, yu and y < 0 -- 2^63 and up
  if xbig ~= ybig then return xbig and 1 or -1 end
  if x < y then return -1 end
  return x > y and 1 or 0
end

local function trunc(x) return x >= 0 and math.floor(x) or math.ceil(x) end

-- v (of dtype `from`) converted to dtype `to`, or nil where the model does not know it.
function M.convert(v, from, to)
  if v == nil then return nil end
  if from == to then return v end
  local kf, kt = kind(from), kind(to)
  if kt == "b" then
    if kf == "b" then return v end
    return v ~= 0 -- NaN is nonzero
  end
  if kf == "b" then
    if kt == "f" then return v and 1.0 or 0.0 end
    return v and 1 or 0
  end
  if kf ~= "f" then
    if kt ~= "f" then return M.wrap(to, v) end
    if to == "float64" then return int_to_float(from, v) end
    return M.int_round(to, v, from == "uint64")
  end
  if kt == "f" then return M.round(to, v) end
  -- float to integer: the truncated value when the dtype holds it
  if v ~= v or v == math.huge or v == -math.huge then return nil end
  local t = math.tointeger(trunc(v))
  if not t then return nil end
  local b = bits(to)
  if kt == "u" then
    if t < 0 or (b < 64 and t >= (1 << b)) then return nil end
  elseif b < 64 and (t < -(1 << (b - 1)) or t >= (1 << (b - 1))) then
    return nil
  end
  return t
end

-- Does the Lua integer v fit integer dtype d (a weak scalar's range check)?
function M.fits(d, v)
  local b, k = bits(d), kind(d)
  if k == "u" then return v >= 0 and (b == 64 or v < (1 << b)) end
  if b == 64 then return true end
  return v >= -(1 << (b - 1)) and v < (1 << (b - 1))
end

-- Unsigned 64-bit floor division and remainder of bit patterns (b ~= 0).
local function udivmod(a, b)
  if a >= 0 and b > 0 then return a // b, a % b end
  if b < 0 then -- b >= 2^63: the quotient is 0 or 1
    if math.ult(a, b) then return 0, a end
    return 1, a - b
  end
  local q = ((a >> 1) // b) << 1
  local r = a - q * b
  if not math.ult(r, b) then q, r = q + 1, r - b end
  return q, r
end

local function ilt(d, x, y) if d == "uint64" then return math.ult(x, y) end return x < y end

local function fmax(x, y)
  if x ~= x then return x end
  if y ~= y then return y end
  return x > y and x or y
end
local function fmin(x, y)
  if x ~= x then return x end
  if y ~= y then return y end
  return x < y and x or y
end

local function round_even(x)
  if x ~= x or x == math.huge or x == -math.huge then return x end
  local fl = math.floor(x)
  local diff = x - fl
  if diff > 0.5 or (diff == 0.5 and fl % 2 == 1) then fl = fl + 1 end
  return fl + 0.0
end

local function truthy(d, v) if kind(d) == "b" then return v end return v ~= 0 end

-- Binary operations on values already in the compute dtype c (the result's, or for the
-- comparisons the promoted one). Returns the value, or nil when not modelled.
local BIN = {}
function BIN.add(c, x, y)
  local k = kind(c)
  if k == "b" then return x or y end
  if k == "f" then return M.round(c, x + y) end
  return M.wrap(c, x + y)
end
function BIN.sub(c, x, y)
  local k = kind(c)
  if k == "f" then return M.round(c, x - y) end
  return M.wrap(c, x - y)
end
function BIN.mul(c, x, y)
  local k = kind(c)
  if k == "b" then return x and y end
  if k == "f" then return M.round(c, x * y) end
  return M.wrap(c, x * y)
end
function BIN.div(c, x, y) return M.round(c, x / y) end
function BIN.idiv(c, x, y)
  if kind(c) == "f" then return nil end -- npy_divmod's rounding: not modelled
  if y == 0 then return nil end
  if c == "uint64" then return (udivmod(x, y)) end
  return M.wrap(c, x // y)
end
function BIN.mod(c, x, y)
  if kind(c) == "f" then return nil end
  if y == 0 then return nil end
  if c == "uint64" then return select(2, udivmod(x, y)) end
  return M.wrap(c, x % y)
end
function BIN.pow(c, x, y)
  if kind(c) == "f" then return nil end -- libm's pow: not modelled
  local r, base, e = 1, x, y
  if kind(c) == "i" and e < 0 then return nil end
  while e ~= 0 do
    if e & 1 == 1 then r = r * base end
    base = base * base
    e = e >> 1
  end
  return M.wrap(c, r)
end
function BIN.maximum(c, x, y)
  local k = kind(c)
  if k == "b" then return x or y end
  if k == "f" then return fmax(x, y) end
  return ilt(c, x, y) and y or x
end
function BIN.minimum(c, x, y)
  local k = kind(c)
  if k == "b" then return x and y end
  if k == "f" then return fmin(x, y) end
  return ilt(c, y, x) and y or x
end
local function cmp(lt)
  return function(c, x, y)
    if kind(c) == "b" then x, y = x and 1 or 0, y and 1 or 0 end
    if kind(c) == "f" and (x ~= x or y ~= y) then return false end
    return lt(c, x, y)
  end
end
BIN.eq = cmp(function(_, x, y) return x == y end)
BIN.ne = function(c, x, y)
  if kind(c) == "f" and (x ~= x or y ~= y) then return true end
  return x ~= y
end
BIN.lt = cmp(function(c, x, y) return ilt(c, x, y) end)
BIN.le = cmp(function(c, x, y) return not ilt(c, y, x) end)
BIN.gt = cmp(function(c, x, y) return ilt(c, y, x) end)
BIN.ge = cmp(function(c, x, y) return not ilt(c, x, y) end)
BIN.logical_and = function(c, x, y) return truthy(c, x) and truthy(c, y) end
BIN.logical_or = function(c, x, y) return truthy(c, x) or truthy(c, y) end
BIN.logical_xor = function(c, x, y) return truthy(c, x) ~= truthy(c, y) end
local function bitop(f, fb)
  return function(c, x, y)
    if kind(c) == "b" then return fb(x, y) end
    return M.wrap(c, f(x, y))
  end
end
BIN.band = bitop(function(x, y) return x & y end, function(x, y) return x and y end)
BIN.bor = bitop(function(x, y) return x | y end, function(x, y) return x or y end)
BIN.bxor = bitop(function(x, y) return x ~ y end, function(x, y) return x ~= y end)
function BIN.shl(c, x, y)
  local b = bits(c)
  if y < 0 or y >= b or (c == "uint64" and y < 0) then return 0 end
  return M.wrap(c, x << y)
end
function BIN.shr(c, x, y)
  local b = bits(c)
  local neg = kind(c) == "i" and x < 0
  if y < 0 or y >= b then return neg and -1 or 0 end
  if neg then return ~((~x) >> y) end -- arithmetic shift
  return x >> y
end
M.BIN = BIN

local UN = {}
function UN.neg(c, x)
  if kind(c) == "f" then return -x end
  return M.wrap(c, 0 - x)
end
function UN.abs(c, x)
  local k = kind(c)
  if k == "b" then return x end
  if k == "f" then return math.abs(x) end
  if k == "u" then return x end
  return x < 0 and M.wrap(c, 0 - x) or x
end
function UN.sign(c, x)
  local k = kind(c)
  if k == "f" then
    if x > 0 then return 1.0 elseif x < 0 then return -1.0 end
    if x == 0 then return 0.0 end
    return x -- NaN
  end
  if k == "u" then return x ~= 0 and 1 or 0 end
  return x > 0 and 1 or x < 0 and -1 or 0
end
local function rounding(f)
  return function(c, x)
    if kind(c) ~= "f" then return x end
    if x ~= x or x == math.huge or x == -math.huge then return x end
    return f(x) + 0.0
  end
end
UN.floor = rounding(math.floor)
UN.ceil = rounding(math.ceil)
UN.trunc = rounding(trunc)
UN.round = rounding(round_even)
function UN.sqrt(c, x)
  if x < 0 then return 0 / 0 end -- NaN (any sign)
  return M.round(c, math.sqrt(x))
end
function UN.isnan(c, x) return kind(c) == "f" and x ~= x end
function UN.isinf(c, x) return kind(c) == "f" and (x == math.huge or x == -math.huge) end
function UN.isfinite(c, x) return kind(c) ~= "f" or (x == x and x ~= math.huge and x ~= -math.huge) end
function UN.logical_not(c, x) return not truthy(c, x) end
function UN.bnot(c, x)
  if kind(c) == "b" then return not x end
  return M.wrap(c, ~x)
end
-- reciprocal: 1 / x, integers truncated (a 0 raises before: compute.lua); floats rounded once
-- (a quotient in double rounds to float32 as a float32 division would)
function UN.reciprocal(c, x)
  local k = kind(c)
  if k == "u" then return x == 1 and 1 or 0 end
  if k == "i" then return (x == 1 or x == -1) and x or 0 end
  return M.round(c, 1 / x)
end
M.UN = UN

-- How each function picks its dtypes: arity and rule (as API.md and docs/api.md say).
M.FN = {
  add = { 2, "arith" }, sub = { 2, "arith" }, mul = { 2, "arith" }, div = { 2, "div" }, idiv = { 2, "arith" },
  mod = { 2, "arith" }, pow = { 2, "arith" }, maximum = { 2, "arith" }, minimum = { 2, "arith" },
  eq = { 2, "compare" }, ne = { 2, "compare" }, lt = { 2, "compare" }, le = { 2, "compare" },
  gt = { 2, "compare" }, ge = { 2, "compare" }, logical_and = { 2, "compare" }, logical_or = { 2, "compare" },
  logical_xor = { 2, "compare" }, band = { 2, "bitwise" }, bor = { 2, "bitwise" }, bxor = { 2, "bitwise" },
  shl = { 2, "shift" }, shr = { 2, "shift" }, logical_not = { 1, "classify" }, isnan = { 1, "classify" },
  isinf = { 1, "classify" }, isfinite = { 1, "classify" }, bnot = { 1, "bitwise" }, neg = { 1, "keep" },
  abs = { 1, "keep" }, sign = { 1, "keep" }, floor = { 1, "keep" }, ceil = { 1, "keep" }, round = { 1, "keep" },
  trunc = { 1, "keep" }, sqrt = { 1, "floatfn" }, exp = { 1, "floatfn" }, log = { 1, "floatfn" },
  log1p = { 1, "floatfn" }, expm1 = { 1, "floatfn" }, sin = { 1, "floatfn" }, cos = { 1, "floatfn" },
  tan = { 1, "floatfn" }, tanh = { 1, "floatfn" }, sigmoid = { 1, "floatfn" }, where = { 3, "where" },
  log2 = { 1, "floatfn" }, log10 = { 1, "floatfn" }, asin = { 1, "floatfn" }, acos = { 1, "floatfn" },
  atan = { 1, "floatfn" }, sinh = { 1, "floatfn" }, cosh = { 1, "floatfn" }, erf = { 1, "floatfn" },
  rsqrt = { 1, "floatfn" }, reciprocal = { 1, "arith" }, square = { 1, "arith" }, atan2 = { 2, "floatfn" },
  hypot = { 2, "floatfn" },
}
M.BOOL_LOOP = { add = true, mul = true, maximum = true, minimum = true }

-- The dtypes of a call: `ops` a list of operands {dtype = d} (tensors) or {weak = "b"|"i"|"f", v = value},
-- `dtype` the dtype option (nil: none). Returns p (the promoted dtype), result, compute (the dtype the
-- inputs are converted to), or nil and an error reason; nil, nil when the model does not know.
function M.dtypes(fn, ops, dtype)
  local spec = M.FN[fn]
  local rule = spec[2]
  local first = rule == "where" and 2 or 1
  local strong = {}
  for k = first, #ops do
    if ops[k].dtype then strong[#strong + 1] = ops[k].dtype end
  end
  local p = M.promote_many(strong)
  for k = first, #ops do
    if ops[k].weak then p = M.promote_weak(p, ops[k].weak) end
  end
  if rule == "compare" then -- uint8 < 300 compares by value
    for k = 1, #ops do
      local o = ops[k]
      if o.weak == "i" and is_int(p) and not M.fits(p, o.v) then p = M.promote(p, "int64") end
    end
  end
  if dtype then
    p = dtype
    -- the dtype option where the contract is clear: the computing dtype and the result
    local k = kind(p)
    if rule == "div" and k ~= "f" then return nil, "div with an integer dtype" end
    if rule == "floatfn" and k ~= "f" then return nil end
    if rule == "arith" and k == "b" and not M.BOOL_LOOP[fn] then return nil end
  end
  local result, k = p, kind(p)
  if rule == "arith" then
    if k == "b" and not M.BOOL_LOOP[fn] then
      if fn == "sub" then return nil, "bool sub" end
      result = "int8"
    end
  elseif rule == "div" then
    if k ~= "f" then result = "float64" end
  elseif rule == "compare" or rule == "classify" then
    result = "bool"
  elseif rule == "bitwise" then
    if k == "f" then return nil, "bitwise on floats" end
  elseif rule == "shift" then
    if k == "f" then return nil, "shift on floats" end
    if k == "b" then result = "int8" end
  elseif rule == "floatfn" then
    if k ~= "f" then result = FLOAT_OF_RANK[int_float_rank(p)] end
    if #strong == 2 and #ops == 2 and not dtype then
      -- two tensors (atan2, hypot): the first loop both cast to safely (int8 with uint8: float16)
      local function float_of(d) return kind(d) == "f" and d or FLOAT_OF_RANK[int_float_rank(d)] end
      result = M.promote(float_of(strong[1]), float_of(strong[2]))
    end
  elseif rule == "keep" then
    if k == "b" and (fn == "neg" or fn == "sign") then return nil, "bool " .. fn end
  end
  local compute = (rule == "compare" or rule == "classify") and p or result
  return p, result, compute
end

-- Walks the broadcast shape `shape`; fn(idx) for each multi-index (idx reused).
local function each(shape, fn)
  local n = #shape
  for k = 1, n do if shape[k] == 0 then return end end
  local idx = {}
  for k = 1, n do idx[k] = 1 end
  while true do
    fn(idx)
    local k = n
    while k >= 1 do
      idx[k] = idx[k] + 1
      if idx[k] <= shape[k] then break end
      idx[k] = 1
      k = k - 1
    end
    if k < 1 then return end
  end
end
M.each = each

-- The element of an operand (a totable() result of shape `oshape`) at the broadcast index idx.
function M.element(tbl, oshape, idx)
  local v = tbl
  local off = #idx - #oshape
  for k = 1, #oshape do v = v[oshape[k] == 1 and 1 or idx[off + k]] end
  return v
end

return M
