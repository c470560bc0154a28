-- The fuzzer's operations on the computing functions (spec/fuzz/fuzz.lua registers them), checked
-- against the pure-Lua model of spec/fuzz/compute_model.lua:
--
--   compute      one elementwise function (add ... where) as a module function, an in-place
--                `_` method or a Lua operator, with operands made for the call (every computing
--                dtype; contiguous, transposed, reversed, expanded, strided, read-only, released,
--                0-d and empty), Lua scalars (in and out of range, NaN, inf, booleans), pool
--                tensors (any dtype, any view) and hostile values; `opts` with `out` (the result
--                shape or another, read-only, expanded, released, an input itself or a reversed
--                view of one) and `dtype`, or hostile and evil option tables.
--   clamp        clamp and clamp_ with scalar, tensor and missing bounds.
--   masked_fill  masks of any dtype and shape, values as scalars and tensors.
--   equal/allclose
--
-- When every argument was drawn valid (or is a pool tensor the model can read) and nothing was
-- released during the call, the model says whether the call must raise, and otherwise the result's
-- dtype and shape and, for the operations Lua computes exactly, its elements; an `out` tensor must
-- hold the result and nothing else of its owner may change; in place returns the tensor itself;
-- a call that must raise leaves its output unchanged.
--
-- Every draw comes from math.random (through S:lcg for values), and the number of draws never
-- depends on what the module answered.
local G = require "fuzz.gen"
local CM = require "fuzz.compute_model"
local model = require "fuzz.model"

local R = math.random
local fmt = G.fmt
local C = {}

local CDTYPES = { "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
  "bfloat16", "float32", "float64" }
-- dtypes drawn for operands: mostly computing ones, sometimes the others (which must raise)
local ODTYPES = { "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
  "bfloat16", "float32", "float64", "bool", "int8", "int32", "int64", "uint8", "float32", "float64", "float16",
  "uint64", "int16", "complex64", "complex128", "float8_e4m3fn" }

local BINARY = { "add", "sub", "mul", "div", "idiv", "mod", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt",
  "ge", "logical_and", "logical_or", "logical_xor", "band", "bor", "bxor", "shl", "shr", "atan2", "hypot" }
local UNARY = { "neg", "abs", "sign", "sqrt", "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "sigmoid",
  "floor", "ceil", "round", "trunc", "isnan", "isinf", "isfinite", "logical_not", "bnot", "log2", "log10", "asin",
  "acos", "atan", "sinh", "cosh", "erf", "rsqrt", "reciprocal", "square" }
local OPERATOR = {
  add = function(a, b) return a + b end, sub = function(a, b) return a - b end,
  mul = function(a, b) return a * b end, div = function(a, b) return a / b end,
  mod = function(a, b) return a % b end, pow = function(a, b) return a ^ b end,
  idiv = function(a, b) return a // b end, band = function(a, b) return a & b end,
  bor = function(a, b) return a | b end, bxor = function(a, b) return a ~ b end,
  shl = function(a, b) return a << b end, shr = function(a, b) return a >> b end,
  neg = function(a) return -a end, bnot = function(a) return ~a end,
}
local OPSYM = { add = "+", sub = "-", mul = "*", div = "/", mod = "%", pow = "^", idiv = "//", band = "&", bor = "|",
  bxor = "~", shl = "<<", shr = ">>", neg = "-", bnot = "~" }

local MAXF = { float16 = 65504.0, bfloat16 = 3.3895313892515355e38, float32 = 3.4028234663852886e38,
  float64 = 1.7976931348623157e308 }
local TINYF = { float16 = 5.960464477539063e-08, bfloat16 = 1.1754943508222875e-38, float32 = 1.401298464324817e-45,
  float64 = 5e-324 }

-- Bit lengths of the integers near a power of two that near_pow2 draws, per dtype (uint64's 64:
-- from 2^63 up, the negative Lua integers).
local NEAR = { int16 = { 9, 12, 15 }, uint16 = { 12, 16 }, int32 = { 12, 24, 25, 31 }, uint32 = { 24, 25, 32 },
  int64 = { 24, 25, 31, 53, 54, 62, 63 }, uint64 = { 24, 53, 54, 63, 64 } }

-- An integer of dtype d with bit length e near a power of two and low bits at the rounding point of
-- a float of p significant bits (8, 11, 24, 53: bfloat16, float16, float32, float64): a tie, one
-- above or below it, a sticky low bit; the conversions to the narrow floats must round once.
local function near_pow2(d, nextv)
  local es = NEAR[d]
  local e = es[nextv() % #es + 1]
  local p = ({ 8, 11, 24, 53 })[nextv() % 4 + 1]
  local m = 1 << (e - 1)
  if e > p then
    local ulp = 1 << (e - p)
    local tails = { 0, ulp >> 1, (ulp >> 1) - 1, (ulp >> 1) + 1, 1, ulp - 1, (ulp >> 1) | 1 }
    m = m + (nextv() % 8) * ulp + tails[nextv() % #tails + 1]
  else
    m = m + nextv() % 16
  end
  if G.INTRANGE[d][1] < 0 and nextv() % 3 == 0 then m = -m end
  return m
end

-- A value of dtype d that the dtype holds exactly: mostly small, sometimes an edge.
local function draw_value(d, nextv)
  local x = nextv()
  if d == "bool" then return x % 2 == 0 end
  local r = G.INTRANGE[d]
  if r then
    if x % 8 == 0 then
      local edges = { r[1], r[2], 0, 1, r[1] + 1, r[2] - 1, 2 }
      if d == "uint64" then -- 2^53, 2^53 + 1, 2^63, 2^64 - 1 (bit patterns)
        edges = { 0, 1, 2, r[2], r[2] - 1, 1 << 53, (1 << 53) + 1, math.mininteger, -1 }
      elseif d == "int64" then
        edges = { r[1], r[2], 0, 1, -1, r[1] + 1, r[2] - 1, 2, 1 << 53, (1 << 53) + 1, -(1 << 53) - 1 }
      end
      return edges[(x >> 3) % #edges + 1]
    end
    if x % 8 == 1 and NEAR[d] then return near_pow2(d, nextv) end
    local lo, hi = math.max(r[1], -20), math.min(r[2], 20)
    return lo + (x >> 3) % (hi - lo + 1)
  end
  if MAXF[d] then
    if x % 10 == 0 then
      local edges = { 0 / 0, math.huge, -math.huge, -0.0, 0.5, -0.5, 2.5, -2.5, 1.5, MAXF[d], -MAXF[d], TINYF[d] }
      return edges[(x >> 4) % #edges + 1]
    end
    -- sometimes more bits than float16 and bfloat16 hold (dlpack.tensor rounds them)
    if x % 10 == 1 then return ((x >> 4) % 65536 - 32768) / 16 end
    return ((x >> 4) % 401 - 200) / 4
  end
  return 0 -- dtypes without element access: zeros
end

-- the bytes of a true in a non-canonical bool tensor
local NONCANON = { 1, 2, 3, 0x7f, 0x80, 0xfe, 0xff, 0x10 }

local function copy_list(l)
  local c = {}
  for i = 1, #l do c[i] = l[i] end
  return c
end

-- A Lua scalar: kind "i", "f" or "b".
local function draw_scalar(nextv)
  local x = nextv()
  local k = x % 10
  if k <= 4 then
    local v
    if x % 7 == 0 then
      local edges = { 300, -1, 70000, 1 << 40, math.maxinteger, math.mininteger, 128, 256, -129, 65536, 0 }
      v = edges[(x >> 4) % #edges + 1]
    else
      v = (x >> 4) % 21 - 6
    end
    return v, "i"
  elseif k <= 8 then
    local v
    if x % 5 == 0 then
      local edges = { 0 / 0, math.huge, -math.huge, -0.0, 1e300, 0.5, 2.5, -1.5, 1e-300, 70000.5 }
      v = edges[(x >> 4) % #edges + 1]
    else
      v = ((x >> 4) % 81 - 40) / 4
    end
    return v, "f"
  end
  return (x >> 4) % 2 == 0, "b"
end

-- Shapes: the result shape of a call, and operand shapes that broadcast to it.
local function result_shape()
  local nd = G.pick({ 0, 1, 1, 2, 2, 2, 3, 3 })
  local s = {}
  for i = 1, nd do s[i] = G.pick({ 1, 2, 2, 3, 3, 4, 0 }) end
  return s
end

local function operand_shape(rs)
  local mode = R(10)
  local r = R(0, 1 << 20)
  if mode == 1 then return result_shape() end -- anything: often does not broadcast
  local drop = (mode <= 3) and (r % (#rs + 1)) or 0
  local s = {}
  for i = drop + 1, #rs do
    local v = rs[i]
    if (r >> (4 + i)) % 4 == 0 then v = 1 end
    s[#s + 1] = v
  end
  return s
end

---------------------------------------------------------------------------
-- Tensors made for a call: { t, base, map (index in t -> index in base), bshape, dtype, shape,
-- layout, name, released, readonly, expanded }

local LAYOUTS = { "contiguous", "contiguous", "contiguous", "contiguous", "contiguous", "transposed", "transposed",
  "reversed", "reversed", "expanded", "strided", "strided", "readonly", "released" }

-- Draws a tensor of dtype d and shape s (all draws first), makes it unarmed; returns its record.
local function fresh(S, env, d, s, layout, tag)
  local nextv = S:lcg()
  layout = layout or G.pick(LAYOUTS)
  local nd = #s
  local bshape, map = copy_list(s), nil
  local lay = layout
  if lay == "transposed" and nd < 2 then lay = "contiguous" end
  local rdim, edim
  for k = 1, nd do
    if not rdim and s[k] >= 2 then rdim = k end
    if not edim and s[k] >= 2 then edim = k end
  end
  if lay == "reversed" and not rdim then lay = "contiguous" end
  if lay == "expanded" and not edim then lay = "contiguous" end
  if lay == "strided" and (nd == 0 or s[1] == 0) then lay = "contiguous" end
  if lay == "transposed" then
    bshape[1], bshape[nd] = s[nd], s[1]
    map = function(idx)
      local c = copy_list(idx)
      c[1], c[nd] = idx[nd], idx[1]
      return c
    end
  elseif lay == "reversed" then
    map = function(idx)
      local c = copy_list(idx)
      c[rdim] = s[rdim] - idx[rdim] + 1
      return c
    end
  elseif lay == "expanded" then
    bshape[edim] = 1
    map = function(idx)
      local c = copy_list(idx)
      c[edim] = 1
      return c
    end
  elseif lay == "strided" then
    bshape[1] = 2 * s[1]
    map = function(idx)
      local c = copy_list(idx)
      c[1] = 2 * idx[1] - 1
      return c
    end
  end
  local n = model.numel(bshape)
  local flat = {}
  for i = 1, n do flat[i] = draw_value(d, nextv) end
  -- a bool tensor whose true bytes are not all 1 (frombytes of 2, 0x7f, 0x80, 255...): every
  -- operation must take any nonzero byte as true
  local bytes
  if d == "bool" and n > 0 and nextv() % 3 == 0 then
    local b = {}
    for i = 1, n do b[i] = flat[i] and NONCANON[nextv() % #NONCANON + 1] or 0 end
    bytes = string.char(table.unpack(b))
  end
  local name = (tag or "F") .. S:serial()
  local desc
  if bytes and n <= 24 then
    desc = string.format("%s = <bool %s %s frombytes %s>", name, G.fmt_list(bshape), lay, G.fmt_bytes(bytes))
  elseif n <= 24 then
    desc = string.format("%s = <%s %s %s %s>", name, d, G.fmt_list(bshape), lay, G.fmt_list(flat))
  else
    desc = string.format("%s = <%s %s %s, %d values%s>", name, d, G.fmt_list(bshape), lay, n,
      bytes and ", non-canonical bytes" or "")
  end
  S:note(desc)
  local ok, base
  if bytes then
    ok, base = pcall(env.dlpack.frombytes, bytes, "bool", bshape)
    if ok then
      -- element reads take any nonzero byte as true
      local okr, got = pcall(env.T.totable, base)
      if not okr or not model.same_table(got, model.unflat(flat, bshape)) then
        S:fail(string.format("%s: totable of a bool tensor from bytes %s is %s", name, G.fmt_bytes(bytes),
          okr and G.fmt_list(model.flat(got, bshape)) or tostring(got)))
      end
    end
  elseif not G.ELEM[d] or n == 0 then
    ok, base = pcall(env.dlpack.zeros, bshape, d)
  elseif nd == 0 then
    ok, base = pcall(env.dlpack.tensor, flat[1], d)
  else
    ok, base = pcall(env.dlpack.tensor, model.unflat(flat, bshape), d)
  end
  if not ok then
    S:fail("making an operand raised: " .. tostring(base))
    return { t = false, name = name, bad = true, dtype = d, shape = s, layout = lay }
  end
  local t = base
  local T = env.T
  if lay == "transposed" then t = T.transpose(base, 1, nd)
  elseif lay == "reversed" then t = T.slice(base, rdim, -1, 1, -1)
  elseif lay == "expanded" then t = T.expand(base, s)
  elseif lay == "strided" then t = T.slice(base, 1, 1, 2 * s[1] - 1, 2)
  elseif lay == "readonly" then t = T.as_readonly(base)
  end
  local rec = { t = t, base = base, map = map or function(idx) return idx end, bshape = bshape, dtype = d, shape = s,
    layout = lay, name = name, readonly = lay == "readonly", expanded = lay == "expanded" and model.numel(s) > 0,
    fresh = true }
  if lay == "released" then
    T.release(t)
    rec.released = true
  end
  return rec
end

-- A view of rec's base that overlaps rec other than element for element: its base reversed along
-- the first dimension of size >= 2 (nil when there is none).
local function reversed_view(S, env, rec)
  if not rec.fresh or rec.layout ~= "contiguous" or rec.dtype == nil then return nil end
  local d
  for k = 1, #rec.shape do
    if rec.shape[k] >= 2 then d = k; break end
  end
  if not d then return nil end
  local ok, v = pcall(env.T.slice, rec.base, d, -1, 1, -1)
  if not ok then return nil end
  local s = rec.shape
  local name = "O" .. S:serial()
  S:note(string.format("%s = %s:slice(%d, -1, 1, -1)", name, rec.name, d))
  return { t = v, base = rec.base, map = function(idx)
    local c = copy_list(idx)
    c[d] = s[d] - idx[d] + 1
    return c
  end, bshape = rec.bshape, dtype = rec.dtype, shape = s, layout = "reversed", name = name, fresh = true }
end

-- An operand: a fresh tensor, a Lua scalar, a pool tensor or a hostile value.
-- Returns { v = value, desc, rec (fresh) | weak (scalar kind) | pool (entry) | hostile = true }.
local function operand(S, env, rs, opts)
  local mode = R(100)
  local d = G.pick(ODTYPES)
  local s = operand_shape(rs)
  local nextv = S:lcg()
  local sv, sk = draw_scalar(nextv)
  if opts and opts.tensor and mode <= 80 then mode = 1 end
  if mode <= 62 then
    local rec = fresh(S, env, d, s)
    return { v = rec.t, desc = rec.name, rec = rec }
  elseif mode <= 80 then
    return { v = sv, desc = fmt(sv), weak = sk }
  elseif mode <= 92 then
    local t, td, e = S:self_arg()
    if not e then return { v = t, desc = td, hostile = true } end
    return { v = t, desc = td, pool = e }
  end
  local v, vd = S:hostile()
  return { v = v, desc = vd, hostile = true }
end

-- What the model knows of an operand: { dtype, shape, tbl, released, host, readonly, expanded }
-- or { weak, v }; nil when it knows nothing (hostile values, pool tensors it cannot read).
local function know(env, o)
  if o.weak then return { weak = o.weak, v = o.v } end
  if o.hostile then return nil end
  if o.rec then
    local r = o.rec
    if r.bad then return nil end
    if r.released then return { released = true } end
    local tbl = G.ELEM[r.dtype] and env.values(r.t, env.info(r.t)) or nil
    return { dtype = r.dtype, shape = r.shape, tbl = tbl, host = true, device = "cpu", readonly = r.readonly,
      expanded = r.expanded, rec = r, computes = CM.COMPUTES[r.dtype] }
  end
  local t = o.pool.t
  if not t then return nil end
  local inf = env.info(t)
  if not inf then
    if type(t) == "userdata" and not env.live(t) then return { released = true } end
    return nil
  end
  local expanded = false
  for k = 1, inf.ndim do
    if inf.shape[k] > 1 and inf.strides[k] == 0 and inf.numel > 0 then expanded = true end
  end
  local tbl = (inf.elem and CM.COMPUTES[inf.dtype]) and env.values(t, inf) or nil
  if inf.elem and CM.COMPUTES[inf.dtype] and inf.numel <= 512 and not tbl then return nil end
  if inf.numel > 512 then tbl = nil end
  return { dtype = inf.dtype, shape = inf.shape, tbl = tbl, host = inf.host, device = inf.device,
    readonly = inf.readonly, expanded = expanded, computes = CM.COMPUTES[inf.dtype] and not inf.sub, pool = o.pool }
end

-- The dtype a scalar is read as (the weak kind's own).
local WEAK_DTYPE = { i = "int64", f = "float64", b = "bool" }

local function element_of(k, idx)
  if k.weak then return k.v end
  if not k.tbl then return nil end
  return CM.element(k.tbl, k.shape, idx)
end

local function dtype_of(k) return k.weak and WEAK_DTYPE[k.weak] or k.dtype end

---------------------------------------------------------------------------
-- The model of one call

-- Checks an output target k (its knowledge) for a result of shape rs and dtype `result`; returns an
-- error reason, or nil. inplace: the same_kind rule applies.
local function out_error(k, rs, result, inplace)
  if k.weak then return "not a tensor" end
  if k.released then return "released" end
  if not k.host then return "device" end
  if not k.computes and not CM.COMPLEX[k.dtype] then return "dtype does not compute" end
  if k.readonly then return "read-only" end
  if not model.same_list(k.shape, rs) then return "shape" end
  if k.expanded then return "expanded" end
  if inplace and result and not CM.same_kind(result, k.dtype) then return "same_kind" end
  return nil
end

-- Any tensor operand that must make the call raise before the dtypes matter.
local function operand_error(ks)
  for _, k in ipairs(ks) do
    if k.released then return "released" end
    if not k.weak then
      if not k.host then return "device" end
      if not k.computes then return "dtype does not compute" end
    end
  end
  return nil
end

-- operand_error for the elementwise functions, where complex tensors compute.
local function elementwise_error(ks)
  for _, k in ipairs(ks) do
    if k.released then return "released" end
    if not k.weak then
      if not k.host then return "device" end
      if not k.computes and not CM.COMPLEX[k.dtype] then return "dtype does not compute" end
    end
  end
  return nil
end

-- Whether a tensor among ks (or the out k_out) is complex: the model does not know those calls.
local function has_complex(ks, k_out)
  for _, k in ipairs(ks) do if not k.weak and CM.COMPLEX[k.dtype] then return true end end
  return k_out ~= nil and not k_out.weak and CM.COMPLEX[k_out.dtype] == true
end

-- The comparisons, from mixed_cmp's -1, 0, 1.
local CMP_EXACT = {
  eq = function(c) return c == 0 end, ne = function(c) return c ~= 0 end, lt = function(c) return c < 0 end,
  le = function(c) return c <= 0 end, gt = function(c) return c > 0 end, ge = function(c) return c >= 0 end,
}
C.CMP_EXACT = CMP_EXACT

-- Are all the operands integers or bools (tensors or weak scalars)?
local function all_integer(ks)
  for _, k in ipairs(ks) do
    if k.weak == "f" then return false end
    if not k.weak and CM.kind(k.dtype) == "f" then return false end
  end
  return true
end

-- The expected outcome of fn(ks...) with dtype option `dtype` into output k_out (nil: a new tensor;
-- inplace: k_out is ks[1]). Returns { err = reason } or { dtype, shape, values (nested, nil entries
-- unknown) }, or nil when the model does not know.
local function predict(fn, ks, dtype, k_out, inplace)
  local e = elementwise_error(ks)
  if e then return { err = e } end
  if has_complex(ks, k_out) then return nil end
  local ops = {}
  for i, k in ipairs(ks) do ops[i] = k.weak and { weak = k.weak, v = k.v } or { dtype = k.dtype } end
  if dtype and not CM.COMPUTES[dtype] then return nil end
  local p, result, compute = CM.dtypes(fn, ops, dtype)
  if not p then
    if result then return { err = result } end
    return nil
  end
  local rule = CM.FN[fn][2]
  -- weak integers the compute dtype cannot hold raise (the comparisons compare them by value)
  for i, k in ipairs(ks) do
    local take = (rule == "where" and i == 1) and "bool" or compute
    if k.weak == "i" and CM.is_int(take) and not CM.fits(take, k.v) then return { err = "scalar range" } end
  end
  local shapes = {}
  for _, k in ipairs(ks) do if not k.weak then shapes[#shapes + 1] = k.shape end end
  local rs = CM.broadcast(shapes)
  if not rs then return { err = "broadcast" } end
  if k_out then
    local oe = out_error(k_out, rs, result, inplace)
    if oe then return { err = oe } end
  end
  -- integer division by zero, negative integer powers: decided on the divisor or exponent as the
  -- loop reads it, converted to the computing dtype (an int16 256 is 0 in int8, a float64 0.5 is 0
  -- in int64, a uint64 2^64 - 1 is -1 in int64, an int16 200 is -56 in int8)
  local function scan(k, bad)
    local found, unknown = false, false
    local function one(v)
      local c = CM.convert(v, dtype_of(k), compute)
      if c == nil then unknown = true elseif bad(c) then found = true end
    end
    if k.weak then one(k.v)
    elseif k.tbl then CM.each(k.shape, function(idx) one(model.at(k.tbl, idx)) end)
    else unknown = true end
    if found then return true end
    if unknown then return nil end
    return false
  end
  if (fn == "idiv" or fn == "mod") and CM.is_int(compute) then
    local z = scan(ks[2], function(c) return c == 0 end)
    if z == nil then return nil end
    if z then return { err = "division by zero" } end
  end
  if fn == "reciprocal" and CM.is_int(compute) then
    local z = scan(ks[1], function(c) return c == 0 end)
    if z == nil then return nil end
    if z then return { err = "division by zero" } end
  end
  if fn == "pow" and CM.kind(compute) == "i" then
    local z = scan(ks[2], function(c) return c < 0 end)
    if z == nil then return nil end
    if z then return { err = "negative power" } end
  end
  -- the values
  local outd = k_out and k_out.dtype or result
  local f = CM.BIN[fn] or CM.UN[fn]
  local values
  if CMP_EXACT[fn] and not dtype and compute == "float64" and all_integer(ks) then
    -- a signed integer against uint64: NumPy 2 compares them exactly (not in float64)
    values = model.build(rs, function(idx)
      local xs, us = {}, {}
      for i, k in ipairs(ks) do
        local v = element_of(k, idx)
        if v == nil then return nil end
        if v == true then v = 1 elseif v == false then v = 0 end
        xs[i], us[i] = v, dtype_of(k) == "uint64"
      end
      return CM.convert(CMP_EXACT[fn](CM.mixed_cmp(xs[1], us[1], xs[2], us[2])), result, outd)
    end)
  elseif f or fn == "where" then
    values = model.build(rs, function(idx)
      local xs = {}
      for i, k in ipairs(ks) do
        local v = element_of(k, idx)
        if v == nil then return nil end
        local to = (rule == "where" and i == 1) and "bool" or compute
        xs[i] = CM.convert(v, dtype_of(k), to)
        if xs[i] == nil then return nil end
      end
      local r
      if fn == "where" then
        if xs[1] then r = xs[2] else r = xs[3] end
      else
        r = f(compute, xs[1], xs[2])
      end
      if r == nil then return nil end
      return CM.convert(r, result, outd)
    end)
  end
  return { dtype = outd, result = result, shape = rs, values = values, compute = compute }
end

---------------------------------------------------------------------------
-- Checking an outcome

local function snapshot(env, rec)
  if not (rec and rec.fresh and G.ELEM[rec.dtype]) then return nil end
  return env.values(rec.base, env.info(rec.base))
end

-- Compares the nested `got` with `want` (nil entries of want unchecked); returns the first index
-- that differs, or nil.
local function first_diff(got, want, shape)
  local bad
  CM.each(shape, function(idx)
    if bad then return end
    local w = model.at(want, idx)
    if w ~= nil then
      local g = model.at(got, idx)
      if type(g) ~= type(w) or not model.same_value(g, w) then bad = copy_list(idx) end
    end
  end)
  return bad
end

local function fmt_idx(idx) return G.fmt_list(idx) end

-- After a call into target rec (out or in place) that succeeded: rec's base holds the result where
-- rec maps and its old values elsewhere; before: the base's totable() before the call.
local function check_owner(S, what, rec, before, want, written)
  if not before then return end
  local okb, after = pcall(rec.base.totable, rec.base)
  if not okb then S:fail(what .. ": totable of out's owner raised: " .. tostring(after)); return end
  local expect = model.build(rec.bshape, function(idx) return model.at(before, idx) end)
  if written then
    CM.each(rec.shape, function(idx)
      local bi = rec.map(idx)
      local w = want and model.at(want, idx)
      -- unknown results: take what is there
      if w == nil then w = model.at(after, bi) end
      local row = expect
      for k = 1, #bi - 1 do row = row[bi[k]] end
      if #bi == 0 then expect = w else row[bi[#bi]] = w end
    end)
  end
  local bad = first_diff(after, expect, rec.bshape)
  if bad then
    S:fail(string.format("%s: out's owner %s at %s is %s, expected %s", what, rec.name, fmt_idx(bad),
      fmt(model.at(after, bad)), fmt(model.at(expect, bad))))
  end
end

-- Checks the outcome of a call against the prediction p; ident: the tensor the call must return
-- (out, or self in place), target: its record when it was made for the call (the owner check).
local STATS = { unknown = 0, err = 0, ok = 0, values = 0 }
C.STATS = STATS
local function check(S, env, what, p, ok, res, target, ident, before)
  if not p then STATS.unknown = STATS.unknown + 1; return end
  if p.err then STATS.err = STATS.err + 1; STATS[p.err] = (STATS[p.err] or 0) + 1 else STATS.ok = STATS.ok + 1 end
  if p.values then STATS.values = STATS.values + 1 end
  if p.err then
    if ok then
      S:fail(string.format("%s: succeeded where the model expects an error (%s)", what, p.err))
    elseif target and before then
      check_owner(S, what .. " (raised)", target, before, nil, false)
    end
    return
  end
  if not ok then
    S:fail(string.format("%s: raised where the model expects a %s result: %s", what, p.dtype, tostring(res)))
    return
  end
  if ident ~= nil and not rawequal(res, ident) then
    S:fail(what .. ": did not return its out/in-place tensor")
    return
  end
  S:check_note(what)
  local inf = env.info(res)
  if not inf then S:fail(what .. ": the result is not a live tensor"); return end
  if inf.dtype ~= p.dtype then S:fail(string.format("%s: dtype %s, expected %s", what, inf.dtype, p.dtype)) end
  if not model.same_list(inf.shape, p.shape) then
    S:fail(string.format("%s: shape %s, expected %s", what, G.fmt_list(inf.shape), G.fmt_list(p.shape)))
    return
  end
  if ident == nil and inf.device ~= "cpu" then S:fail(what .. ": result on " .. inf.device) end
  if ident == nil and not inf.contig then S:fail(what .. ": a new result is not contiguous") end
  if p.values and inf.dtype == p.dtype and inf.numel <= 512 then
    local got = env.values(res, inf)
    if not got then S:fail(what .. ": totable of the result raised"); return end
    local bad = first_diff(got, p.values, p.shape)
    if bad then
      S:fail(string.format("%s: element %s is %s, the model says %s (result %s, computed in %s)", what, fmt_idx(bad),
        fmt(model.at(got, bad)), fmt(model.at(p.values, bad)), tostring(p.result), tostring(p.compute)))
    end
  end
  if target and before then check_owner(S, what, target, before, p.values, true) end
end

-- Releases what a call made (its fresh tensors and a new result), so that the pool stays small;
-- `args` are the call's own arguments (pool tensors among them stay).
local function drop(env, recs, res, args)
  for _, r in ipairs(recs) do
    if r and r.t then
      pcall(env.T.release, r.t)
      pcall(env.T.release, r.base)
    end
  end
  if type(res) ~= "userdata" then return end
  for _, a in ipairs(args or {}) do if rawequal(res, a) then return end end
  pcall(env.T.release, res)
end

---------------------------------------------------------------------------
-- Options tables

-- An opts table for a call whose result has shape rs and (predicted) dtype rd; returns
-- the table (or nil), its description, the out record (fresh, or {pool}), the dtype option, and
-- whether the model knows the table (false: hostile).
local function draw_opts(S, env, rs, rd, inputs)
  local mode = R(100)
  local od = G.pick(CDTYPES)
  local lay = G.pick(LAYOUTS)
  local wrong = result_shape()
  local dopt = G.pick({ "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
    "bfloat16", "float32", "float64", "complex64", "float8_e5m2", "float", "double", "nosuch" })
  local which = R(#inputs > 0 and #inputs or 1)
  local use_rd = R(2) == 1
  local ev = R(6)
  if mode <= 40 then return nil, nil, nil, nil, true end
  if mode <= 62 then
    local rec = fresh(S, env, (use_rd and rd) or od, rs, lay, "O")
    return { out = rec.t }, "{out = " .. rec.name .. "}", rec, nil, true
  elseif mode <= 67 then
    local rec = fresh(S, env, od, wrong, lay, "O")
    return { out = rec.t }, "{out = " .. rec.name .. "}", rec, nil, true
  elseif mode <= 75 then
    local inp = inputs[which]
    local rec = inp and inp.rec
    if rec and not rec.bad then
      if R(2) == 1 then
        local v = reversed_view(S, env, rec)
        if v then return { out = v.t }, "{out = " .. v.name .. "}", v, nil, true end
      end
      return { out = rec.t }, "{out = " .. rec.name .. "}", rec, nil, true
    end
    local f = fresh(S, env, rd or od, rs, "contiguous", "O")
    return { out = f.t }, "{out = " .. f.name .. "}", f, nil, true
  elseif mode <= 83 then
    return { dtype = dopt }, "{dtype = " .. fmt(dopt) .. "}", nil, dopt, true
  elseif mode <= 87 then
    local rec = fresh(S, env, od, rs, lay, "O")
    return { out = rec.t, dtype = dopt }, "{out = " .. rec.name .. ", dtype = " .. fmt(dopt) .. "}", rec, dopt, true
  elseif mode <= 91 then
    local t, td, e = S:self_arg()
    return { out = t }, "{out = " .. td .. "}", e and { pool = e, t = t } or nil, nil, e ~= nil
  end
  -- hostile: a value, an evil table with valid keys set raw, a lying __index, an unknown key
  local rec = fresh(S, env, od, rs, "contiguous", "O")
  S.ctx.victims[#S.ctx.victims + 1] = rec
  local victim = S.ctx.victims[R(#S.ctx.victims)]
  local pe = S.pool[R(#S.pool)]
  if ev == 1 then
    local v, vd = S:hostile()
    return v, vd, rec, nil, false
  elseif ev == 2 then
    local e, ed = S:evil({})
    rawset(e, "out", rec.t)
    return e, ed .. "+{out = " .. rec.name .. "}", rec, nil, false
  elseif ev == 3 then
    local e, ed = S:evil({})
    return e, ed, rec, nil, false
  elseif ev == 4 then
    local o = setmetatable({}, { __index = function(_, k)
      if k == "out" then
        if victim and victim.t then pcall(env.T.release, victim.t) end
        collectgarbage()
        return rec.t
      end
      return nil
    end })
    return o, "<opts whose __index releases " .. (victim and victim.name or "?") .. " and gives out = " ..
      rec.name .. ">", rec, nil, false
  elseif ev == 5 then
    local o = setmetatable({}, { __index = function(_, k)
      if k == "dtype" then return pe.t end
      if k == "out" then return pe.t end
      return nil
    end })
    return o, "<opts whose __index gives " .. pe.name .. ">", rec, nil, false
  end
  local v, vd = S:hostile()
  return { out = rec.t, [G.pick({ "outt", "keepdim", "correction", 1, "dtype" })] = v },
    "{out = " .. rec.name .. ", <key> = " .. vd .. "}", rec, nil, false
end

---------------------------------------------------------------------------
-- The operations

local function fresh_recs(list)
  local recs = {}
  for _, o in ipairs(list) do if o and o.rec then recs[#recs + 1] = o.rec end end
  return recs
end

local function add_victims(S, list)
  for _, o in ipairs(list) do
    if o and o.rec and o.rec.t then S.ctx.victims[#S.ctx.victims + 1] = o.rec end
    if o and o.pool then S.ctx.victims[#S.ctx.victims + 1] = o.pool end
  end
end

-- the predicted result dtype of fn on the drawn operands (for choosing out's dtype), or nil
local function guess_dtype(fn, inputs)
  local ops = {}
  for i, o in ipairs(inputs) do
    if o.weak then ops[i] = { weak = o.weak, v = o.v }
    elseif o.rec and CM.COMPUTES[o.rec.dtype] then ops[i] = { dtype = o.rec.dtype }
    else return nil end
  end
  local p, result = CM.dtypes(fn, ops, nil)
  return p and result or nil
end

local function elementwise(S, env)
  local fn
  local kind = R(10)
  if kind <= 6 then fn = G.pick(BINARY) elseif kind <= 9 then fn = G.pick(UNARY) else fn = "where" end
  local arity = CM.FN[fn][1]
  local form = R(10) -- 1-6 function, 7-8 in place, 9-10 operator
  local pool_it, slot = R(4) == 1, R(env.NSLOT) -- a new result joins the pool
  local rs = result_shape()
  local inputs = {}
  for i = 1, arity do inputs[i] = operand(S, env, rs, { tensor = i == 1 and form >= 7 and form <= 8 }) end
  if fn == "where" and R(2) == 1 then -- a bool condition, the common case
    inputs[1] = { rec = fresh(S, env, "bool", operand_shape(rs)) }
    inputs[1].v, inputs[1].desc = inputs[1].rec.t, inputs[1].rec.name
  end
  local rd = guess_dtype(fn, inputs)
  local opts, od, orec, dopt, oknown = draw_opts(S, env, rs, rd, inputs)
  if fn == "where" and (form >= 7) then form = 1 end
  if form >= 9 and not OPERATOR[fn] then form = 1 end
  local all = { table.unpack(inputs) }
  all[#all + 1] = orec
  add_victims(S, inputs)
  if orec and orec.fresh then S.ctx.victims[#S.ctx.victims + 1] = orec end
  local descs = {}
  for i = 1, arity do descs[i] = inputs[i].desc end
  local args = {}
  for i = 1, arity do args[i] = inputs[i].v end
  local ks, known = {}, true
  for i = 1, arity do
    ks[i] = know(env, inputs[i])
    if not ks[i] then known = false end
  end
  local target, before, k_out, ok, res, desc
  if form <= 6 then
    desc = string.format("dlpack.%s(%s%s)", fn, table.concat(descs, ", "), od and (", " .. od) or "")
    if opts ~= nil or not oknown then args[arity + 1] = opts end
    if orec then
      target = orec.fresh and orec or nil
      k_out = orec.fresh and know(env, { rec = orec }) or (orec.pool and know(env, { pool = orec.pool }))
      if not k_out then known = false end
    end
    before = snapshot(env, target)
    ok, res = S:call(desc, env.dlpack[fn], table.unpack(args, 1, arity + 1))
  elseif form <= 8 then
    desc = string.format("%s:%s_(%s)", descs[1], fn, table.concat(descs, ", ", 2))
    target = inputs[1].rec
    k_out = ks[1]
    before = snapshot(env, target)
    local m = env.T[fn .. "_"]
    ok, res = S:call(desc, m, table.unpack(args, 1, arity))
    if not inputs[1].rec and not inputs[1].pool then known = known and false end
    dopt, oknown = nil, true
  else
    if arity == 1 then desc = OPSYM[fn] .. descs[1]
    else desc = descs[1] .. " " .. OPSYM[fn] .. " " .. descs[2] end
    ok, res = S:call(desc, OPERATOR[fn], args[1], args[2])
    if ks[1] and ks[1].weak and (arity == 1 or (ks[2] and ks[2].weak)) then known = false end
    dopt, oknown, k_out, target = nil, true, nil, nil
  end
  if known and oknown and S:quiet() then
    if form >= 7 and form <= 8 and ks[1] and ks[1].weak then
      if ok then S:fail(desc .. ": an in-place method on a number succeeded") end
    else
      local p = predict(fn, ks, dopt, k_out, form >= 7 and form <= 8)
      local ident
      if form <= 6 then ident = orec and orec.t elseif form <= 8 then ident = inputs[1].v end
      check(S, env, desc, p, ok, res, target, ident, before)
    end
  end
  local argv = {}
  for i = 1, arity do argv[i] = inputs[i].v end
  argv[#argv + 1] = orec and orec.t
  local new = ok and type(res) == "userdata"
  for _, a in ipairs(argv) do if rawequal(a, res) then new = false end end
  if new and pool_it then
    S:put_small(res, "Z" .. S:serial(), slot)
    res = nil
  end
  drop(env, fresh_recs(all), res, argv)
end

-- clamp(t, lo, hi [, opts]) and t:clamp_(lo, hi)
local function clamp(S, env)
  local rs = result_shape()
  local inplace = R(4) == 1
  local t = operand(S, env, rs, { tensor = true })
  local los, his = R(3), R(3) -- 1: nil, 2: scalar, 3: tensor
  if los == 1 and his == 1 and R(4) > 1 then los = 2 end
  local lo = operand(S, env, rs)
  local hi = operand(S, env, rs)
  local function bound(b, o)
    if b == 1 then return { v = nil, desc = "nil", none = true } end
    if b == 2 and not o.weak then
      local v, k = draw_scalar(S:lcg())
      return { v = v, desc = fmt(v), weak = k }
    end
    return o
  end
  lo, hi = bound(los, lo), bound(his, hi)
  local rd = t.rec and CM.COMPUTES[t.rec.dtype] and t.rec.dtype or nil
  local opts, od, orec, dopt, oknown
  if inplace then oknown = true else opts, od, orec, dopt, oknown = draw_opts(S, env, rs, rd, { t }) end
  add_victims(S, { t, lo, hi })
  if orec and orec.fresh then S.ctx.victims[#S.ctx.victims + 1] = orec end
  local desc, ok, res, target
  if inplace then
    desc = string.format("%s:clamp_(%s, %s)", t.desc, lo.desc, hi.desc)
    target = t.rec
  else
    desc = string.format("dlpack.clamp(%s, %s, %s%s)", t.desc, lo.desc, hi.desc, od and (", " .. od) or "")
    target = orec and orec.fresh and orec or nil
  end
  local before = snapshot(env, target)
  -- knowledge, before the call
  local kt, klo, khi = know(env, t), not lo.none and know(env, lo), not hi.none and know(env, hi)
  local k_out = inplace and kt or (orec and (orec.fresh and know(env, { rec = orec }) or
    (orec.pool and know(env, { pool = orec.pool }))))
  if inplace then
    ok, res = S:call(desc, env.T.clamp_, t.v, lo.v, hi.v)
  else
    ok, res = S:call(desc, env.dlpack.clamp, t.v, lo.v, hi.v, opts)
  end
  local known = oknown and kt and (lo.none or klo) and (hi.none or khi) and (not orec or k_out)
  if known and S:quiet() then
    local p
    if kt.weak then
      p = { err = "not a tensor" }
    elseif lo.none and hi.none then
      p = { err = "no bound" }
    else
      -- promote t with the bounds together (NumPy's rule for several dtypes)
      local ks = { kt }
      if not lo.none then ks[#ks + 1] = klo end
      if not hi.none then ks[#ks + 1] = khi end
      local e = elementwise_error(ks)
      local ops = {}
      for i, k in ipairs(ks) do ops[i] = k.weak and { weak = k.weak, v = k.v } or { dtype = k.dtype } end
      if e then p = { err = e }
      elseif has_complex(ks, k_out) or (dopt and not CM.COMPUTES[dopt]) then p = nil
      else
        local pd = dopt
        if not pd then
          local strong = {}
          for _, o in ipairs(ops) do if o.dtype then strong[#strong + 1] = o.dtype end end
          pd = CM.promote_many(strong)
          for _, o in ipairs(ops) do if o.weak then pd = CM.promote_weak(pd, o.weak) end end
        end
        if lo.none or hi.none then
          p = predict(lo.none and "minimum" or "maximum", { kt, lo.none and khi or klo }, pd, k_out, inplace)
        else
          -- one pass, min(max(t, lo), hi) in that dtype: modelled as maximum into a fresh tensor,
          -- then minimum of that with hi into the output (out's rules apply once, at the end)
          local p1 = predict("maximum", { kt, klo }, pd, nil, false)
          if not p1 or p1.err then
            p = p1
          else
            local mid = { dtype = p1.dtype, shape = p1.shape, tbl = p1.values, host = true, computes = true }
            local has_unknown = false
            CM.each(p1.shape, function(idx) if model.at(p1.values, idx) == nil then has_unknown = true end end)
            if has_unknown then mid.tbl = nil end
            p = predict("minimum", { mid, khi }, pd, k_out, inplace)
            if p and not p.err and not mid.tbl then p.values = nil end
          end
        end
      end
    end
    local ident
    if inplace then ident = t.v else ident = orec and orec.t end
    check(S, env, desc, p, ok, res, target, ident, p and before or nil) -- one pass: nothing written on error
  end
  drop(env, fresh_recs({ t, lo, hi, orec and orec.fresh and { rec = orec } or nil }), res,
    { t.v, lo.v, hi.v, orec and orec.t })
end

-- t:masked_fill(mask, v)
local function masked_fill(S, env)
  local rs = result_shape()
  local t = operand(S, env, rs, { tensor = true })
  local tshape = t.rec and t.rec.shape or rs
  local mk = R(3)
  local mask
  if mk == 1 then
    mask = { rec = fresh(S, env, "bool", operand_shape(tshape)) }
    mask.v, mask.desc = mask.rec.t, mask.rec.name
  else
    mask = operand(S, env, tshape)
  end
  local v = operand(S, env, tshape)
  if R(2) == 1 and not v.weak then
    local x, k = draw_scalar(S:lcg())
    v = { v = x, desc = fmt(x), weak = k }
  end
  add_victims(S, { t, mask, v })
  local desc = string.format("%s:masked_fill(%s, %s)", t.desc, mask.desc, v.desc)
  local kt, km, kv = know(env, t), know(env, mask), know(env, v)
  local before = snapshot(env, t.rec)
  local ok, res = S:call(desc, env.T.masked_fill, t.v, mask.v, v.v)
  if kt and km and kv and S:quiet() then
    local p
    if kt.weak then p = { err = "not a tensor" }
    else
      -- where(mask, v, t) into t
      p = predict("where", { km, kv, kt }, nil, kt, true)
    end
    check(S, env, desc, p, ok, res, t.rec, t.v, before)
  end
  drop(env, fresh_recs({ t, mask, v }), res, { t.v, mask.v, v.v })
end

-- dlpack.equal(a, b), dlpack.allclose(a, b [, rtol [, atol]])
local function tests(S, env)
  local which = R(2)
  local rs = result_shape()
  local a = operand(S, env, rs, { tensor = true })
  local same = R(3) > 1
  local b
  if same and a.rec then
    local d = G.pick(ODTYPES)
    b = { rec = fresh(S, env, R(2) == 1 and a.rec.dtype or d, a.rec.shape) }
    b.v, b.desc = b.rec.t, b.rec.name
  else
    b = operand(S, env, rs, { tensor = true })
  end
  local tolmode = R(6)
  local rtol, atol = G.pick({ 0, 1e-5, 0.1, 1, 0.5 }), G.pick({ 0, 1e-8, 0.25, 2 })
  local hv, hd = S:hostile()
  add_victims(S, { a, b })
  local ka, kb = know(env, a), know(env, b)
  local ok, res, desc
  if which == 1 then
    desc = string.format("dlpack.equal(%s, %s)", a.desc, b.desc)
    ok, res = S:call(desc, env.dlpack.equal, a.v, b.v)
  else
    local args = { a.v, b.v }
    local ds = { a.desc, b.desc }
    local tv = true
    if tolmode == 2 then args[3], ds[3] = rtol, fmt(rtol)
    elseif tolmode == 3 then args[3], args[4], ds[3], ds[4] = rtol, atol, fmt(rtol), fmt(atol)
    elseif tolmode == 4 then args[3], ds[3], tv = hv, hd, false
    elseif tolmode == 5 then args[3], args[4], ds[3], ds[4], tv = rtol, hv, fmt(rtol), hd, false end
    if tolmode == 1 or tolmode == 6 then rtol, atol = 1e-5, 1e-8 elseif tolmode == 2 then atol = 1e-8 end
    desc = string.format("dlpack.allclose(%s)", table.concat(ds, ", "))
    ok, res = S:call(desc, env.dlpack.allclose, table.unpack(args, 1, #ds))
    if not tv then ka = nil end
  end
  if ka and kb and S:quiet() then
    local want, err
    if ka.weak or kb.weak then
      err = "not a tensor"
    elseif ka.released or kb.released then
      err = "released"
    elseif which == 1 and not model.same_list(ka.shape, kb.shape) then
      -- shapes differ: false, unless the devices differ and one is a CUDA device or not the host's
      -- (then it raises naming both, as for equal shapes)
      local cuda_or_far = not ka.host or not kb.host or ka.device:find("^cuda:") or kb.device:find("^cuda:")
      if ka.device ~= kb.device and cuda_or_far then err = "device" else want = false end
    else
      err = elementwise_error({ ka, kb })
      local rs2 = not err and CM.broadcast({ ka.shape, kb.shape })
      if not err and not rs2 then err = "broadcast" end
      if not err and ka.tbl and kb.tbl then
        local pd = which == 1 and CM.promote(ka.dtype, kb.dtype) or "float64"
        -- int64 (any signed integer) against uint64: equal compares exactly, as NumPy 2
        local exact = which == 1 and pd == "float64" and all_integer({ ka, kb })
        local any_false, any_unknown = false, false
        CM.each(rs2, function(idx)
          local x = CM.convert(CM.element(ka.tbl, ka.shape, idx), ka.dtype, pd)
          local y = CM.convert(CM.element(kb.tbl, kb.shape, idx), kb.dtype, pd)
          if exact then
            x = CM.convert(CM.element(ka.tbl, ka.shape, idx), ka.dtype, "int64")
            y = CM.convert(CM.element(kb.tbl, kb.shape, idx), kb.dtype, "int64")
          end
          if x == nil or y == nil then any_unknown = true; return end
          local close
          if exact then close = CM.mixed_cmp(x, ka.dtype == "uint64", y, kb.dtype == "uint64") == 0
          elseif which == 1 then close = CM.BIN.eq(pd, x, y)
          elseif x == math.huge or x == -math.huge or y == math.huge or y == -math.huge then
            close = x == y -- an infinity is close only to itself
          else close = math.abs(x - y) <= atol + rtol * math.abs(y) end
          if not close then any_false = true end
        end)
        if any_false then want = false elseif not any_unknown then want = true end
      end
    end
    if err then
      if ok then S:fail(desc .. ": succeeded where the model expects an error (" .. err .. ")") end
    else
      if not ok then
        S:fail(desc .. ": raised: " .. tostring(res))
      elseif type(res) ~= "boolean" then
        S:fail(desc .. ": returned a " .. type(res))
      elseif want ~= nil and res ~= want then
        S:fail(string.format("%s: %s, the model says %s", desc, tostring(res), tostring(want)))
      end
    end
  end
  drop(env, fresh_recs({ a, b }), nil, nil)
end

---------------------------------------------------------------------------
-- Targeted slices (operation `exact`): the NumPy rules where a shortcut in C gives a plausible
-- wrong answer, each with operands made to hit it (a few calls a seed)
--   cast    idiv mod pow shl shr with `dtype =` (and sometimes `out`) and a divisor, exponent or
--           shift of another dtype (wider integers, uint64, floats, bool, complex) whose values
--           change when converted to the computing dtype: int16 256 is 0 in int8, 200 is -56,
--           uint64 2^64 - 1 is -1 in int64, float64 0.5 is 0; the zero and negative-power
--           checks must read them converted (complex ones: only no sanitizer report)
--   bool    bool tensors made by frombytes with true bytes 2, 0x7f, 0x80, 255...: comparisons,
--           arithmetic, bitwise, logic, where, masked_fill, equal, to, copy, the reductions and
--           element reads must take any nonzero byte as true
--   mixed   a signed integer tensor against uint64 (or a negative Lua integer) with values near
--           2^53, 2^62, 2^63 and 2^64 - 1 that float64 cannot tell apart: the comparisons and
--           equal are exact (NumPy 2), maximum/minimum give float64
--   narrow  integers near 2^24, 2^31, 2^53, 2^62, 2^63 with low bits at the rounding point,
--           converted to float32, bfloat16, float16 and complex64 by to, copy, add(dtype =),
--           add(out =) and sum(dtype =): one rounding to nearest even (CM.int_round)

local INTD = { "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64" }
local CASTB = { "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64",
  "bool", "complex128", "complex64", "int16", "uint64", "float64" }

-- A contiguous 1-d tensor of dtype d holding vals (complex: from float64; bool with `bytes`: from
-- those bytes), as an operand record for know().
local function literal(S, env, d, vals, bytes)
  local name = "E" .. S:serial()
  local n = #vals
  if bytes then S:note(string.format("%s = dlpack.frombytes(%s, \"bool\")", name, G.fmt_bytes(bytes)))
  else S:note(string.format("%s = dlpack.tensor(%s, %q)", name, G.fmt_list(vals), d)) end
  local ok, t
  if bytes then ok, t = pcall(env.dlpack.frombytes, bytes, "bool")
  elseif CM.COMPLEX[d] then
    ok, t = pcall(function() return env.dlpack.tensor(vals, "float64"):to(d) end)
  else
    ok, t = pcall(env.dlpack.tensor, vals, d)
  end
  if not ok then
    S:fail("making an operand raised: " .. tostring(t))
    return { v = false, desc = name, rec = { t = false, name = name, bad = true, dtype = d, shape = { n } } }
  end
  local rec = { t = t, base = t, map = function(idx) return idx end, bshape = { n }, dtype = d, shape = { n },
    layout = "contiguous", name = name, fresh = true }
  return { v = t, desc = name, rec = rec }
end

-- A value for operand dtype bd that becomes 0 (kind "zero"), negative ("neg") or a shift past the
-- width when converted to the integer dtype d, or an ordinary one.
local function cast_value(bd, d, nextv)
  local b = CM.bits(d)
  local x = nextv()
  local cands
  if bd == "bool" then return x % 4 ~= 0 end
  if CM.COMPLEX[bd] or CM.kind(bd) == "f" then
    cands = { 0.5, -0.5, 0.25, 1.5, 2.0, -1.0, -2.0, 3.0, 1.0 }
  else
    cands = { 1 << b, 3 << b, (1 << b) + 1, (1 << (b - 1)) + 8, (1 << b) - 1, 1 << (b - 1), 1, 2, 3, -1, 5 }
    if b == 64 then cands = { -1, math.mininteger, 1, 2, 3, 5, -2 } end
  end
  local v = cands[x % #cands + 1]
  if math.type(v) == "integer" and not CM.COMPLEX[bd] and CM.kind(bd) ~= "f" then
    local r = G.INTRANGE[bd]
    if bd ~= "uint64" and (v < r[1] or v > r[2]) then v = 1 + (x >> 4) % 3 end
    if bd == "uint64" and v < 0 and b < 64 then v = 1 + (x >> 4) % 3 end
  end
  return v
end

local function slice_cast(S, env)
  local fn = G.pick({ "idiv", "mod", "idiv", "mod", "pow", "pow", "shl", "shr" })
  local d = G.pick(INTD)
  local ad = G.pick(INTD)
  local bd = G.pick(CASTB)
  local n = R(1, 3)
  local with_out = R(4) == 1
  local od = G.pick({ d, "int64", "float64", d })
  local nextv = S:lcg()
  local av, bv = {}, {}
  for i = 1, n do
    av[i] = 1 + nextv() % 9
    bv[i] = cast_value(bd, d, nextv)
  end
  local a, b = literal(S, env, ad, av), literal(S, env, bd, bv)
  local orec = with_out and fresh(S, env, od, { n }, "contiguous", "O") or nil
  local opts = { dtype = d, out = orec and orec.t }
  local desc = string.format("dlpack.%s(%s, %s, {dtype = %q%s})", fn, a.desc, b.desc, d,
    orec and (", out = " .. orec.name) or "")
  add_victims(S, { a, b })
  local ka, kb = know(env, a), know(env, b)
  local k_out = orec and know(env, { rec = orec })
  local before = snapshot(env, orec)
  local ok, res = S:call(desc, env.dlpack[fn], a.v, b.v, opts)
  if ka and kb and (not orec or k_out) and S:quiet() then
    check(S, env, desc, predict(fn, { ka, kb }, d, k_out, false), ok, res, orec, orec and orec.t, before)
  end
  drop(env, fresh_recs({ a, b, orec and { rec = orec } }), res, { orec and orec.t })
end

-- the bytes of n bools drawn from nextv (true: one of NONCANON), and the bools
local function bool_bytes(n, nextv)
  local bs, vs = {}, {}
  for i = 1, n do
    local x = nextv()
    vs[i] = x % 3 ~= 0
    bs[i] = vs[i] and NONCANON[(x >> 3) % #NONCANON + 1] or 0
  end
  return string.char(table.unpack(bs)), vs
end

local BOOLFN = { "eq", "ne", "lt", "gt", "mul", "add", "maximum", "minimum", "band", "bor", "bxor", "logical_and",
  "logical_xor", "logical_not", "bnot", "where", "masked_fill", "equal", "to", "copy", "sum", "any", "all", "max",
  "min", "argmax", "argmin", "prod", "get", "eq", "ne", "bxor" }

local function slice_bool(S, env)
  local fn = G.pick(BOOLFN)
  local n = R(1, 5)
  local other = R(4) -- 1 a weak bool, 2 a canonical bool tensor, 3 another non-canonical one, 4 int32
  local d = G.pick({ "int32", "uint8", "int64", "float32", "float64", "float16", "int8" })
  local nextv = S:lcg()
  local bytes, vs = bool_bytes(n, nextv)
  local bytes2, vs2 = bool_bytes(n, nextv)
  local wv = nextv() % 2 == 0
  local iv, dv = {}, {} -- int32 values, values of d
  for i = 1, n do
    iv[i] = nextv() % 7 - 3
    dv[i] = CM.kind(d) == "u" and iv[i] + 3 or iv[i]
  end
  local b = literal(S, env, "bool", vs, bytes)
  local o
  if other == 1 then o = { v = wv, desc = tostring(wv), weak = "b" }
  elseif other == 2 then o = literal(S, env, "bool", vs2)
  elseif other == 3 then o = literal(S, env, "bool", vs2, bytes2)
  else o = literal(S, env, "int32", iv) end
  add_victims(S, { b, o })
  local kb, ko = know(env, b), know(env, o)
  local made = { b, o }
  local desc, ok, res, p, target, ident, before
  local want -- a Lua value (reductions, equal, get)
  if CM.FN[fn] and fn ~= "where" then
    local ar = CM.FN[fn][1]
    desc = string.format("dlpack.%s(%s%s)", fn, b.desc, ar == 2 and (", " .. o.desc) or "")
    if ar == 2 then ok, res = S:call(desc, env.dlpack[fn], b.v, o.v)
    else ok, res = S:call(desc, env.dlpack[fn], b.v) end
    if kb and ko then p = predict(fn, ar == 2 and { kb, ko } or { kb }, nil, nil, false) end
  elseif fn == "where" then
    local x, y = literal(S, env, "int32", iv), literal(S, env, d, dv)
    made[#made + 1], made[#made + 2] = x, y
    desc = string.format("dlpack.where(%s, %s, %s)", b.desc, x.desc, y.desc)
    ok, res = S:call(desc, env.dlpack.where, b.v, x.v, y.v)
    local kx, ky = know(env, x), know(env, y)
    if kb and kx and ky then p = predict("where", { kb, kx, ky }, nil, nil, false) end
  elseif fn == "masked_fill" then
    local t = literal(S, env, d, dv)
    made[#made + 1] = t
    desc = string.format("%s:masked_fill(%s, 9)", t.desc, b.desc)
    local kt = know(env, t)
    target, ident, before = t.rec, t.v, snapshot(env, t.rec)
    ok, res = S:call(desc, env.T.masked_fill, t.v, b.v, 9)
    if kb and kt then p = predict("where", { kb, { weak = "i", v = 9 }, kt }, nil, kt, true) end
  elseif fn == "equal" then
    local c = literal(S, env, "bool", vs)
    made[#made + 1] = c
    desc = string.format("dlpack.equal(%s, %s)", b.desc, c.desc)
    ok, res = S:call(desc, env.dlpack.equal, b.v, c.v)
    want = true
  elseif fn == "to" or fn == "copy" then
    if fn == "to" then
      desc = string.format("%s:to(%q)", b.desc, d)
      ok, res = S:call(desc, env.T.to, b.v, d)
    else
      local z = literal(S, env, d, dv)
      made[#made + 1] = z
      desc = string.format("%s:copy(%s)", z.desc, b.desc)
      ok, res = S:call(desc, env.T.copy, z.v, b.v)
    end
    local vals = {}
    for i = 1, n do vals[i] = CM.convert(vs[i], "bool", d) end
    p = { dtype = d, shape = { n }, values = vals, result = "bool", compute = d }
    if fn == "copy" then ident = made[#made].v end
  elseif fn == "get" then
    local i = 1 + nextv() % n
    desc = string.format("%s:get(%d), %s[%d], %s:item()", b.desc, i, b.desc, i, b.desc)
    ok, res = S:call(desc, function()
      local g, ix = b.v:get(i), b.v[i]
      local it = n == 1 and b.v:item() or g
      if g ~= ix or g ~= it then
        return "get " .. tostring(g) .. ", [] " .. tostring(ix) .. ", item " .. tostring(it)
      end
      return g
    end)
    want = vs[i]
  else -- reductions over all dims: Lua values
    desc = string.format("dlpack.%s(%s)", fn, b.desc)
    ok, res = S:call(desc, env.dlpack[fn], b.v)
    local cnt, first, firstf = 0, nil, nil
    for i = 1, n do
      if vs[i] then cnt = cnt + 1; first = first or i else firstf = firstf or i end
    end
    if fn == "sum" then want = cnt
    elseif fn == "prod" then want = cnt == n and 1 or 0
    elseif fn == "any" or fn == "max" then want = cnt > 0
    elseif fn == "all" or fn == "min" then want = cnt == n
    elseif fn == "argmax" then want = first or 1
    else want = firstf or 1 end
  end
  if S:quiet() then
    if want ~= nil then
      if not ok then S:fail(desc .. ": raised: " .. tostring(res))
      elseif res ~= want then S:fail(string.format("%s: %s, NumPy gives %s", desc, fmt(res), fmt(want))) end
    elseif p then
      check(S, env, desc, p, ok, res, target, ident, before)
    end
  end
  drop(env, fresh_recs(made), res, { ident })
end

-- pairs near the values float64 cannot tell apart: {signed, uint64 bit pattern}
local function mixed_pair(sd, nextv)
  local x = nextv()
  local da, db = x % 3 - 1, (x >> 2) % 3 - 1
  if sd ~= "int64" then
    local r = G.INTRANGE[sd]
    local sv = ({ -1, 0, 1, r[1], r[2], 7 })[(x >> 4) % 6 + 1]
    local uv = ({ -1, 0, 1, math.mininteger, r[2], 7, r[2] + 1 })[(x >> 7) % 7 + 1]
    return sv, uv
  end
  local c = ({ 1 << 53, (1 << 53) + 2, 1 << 62, math.maxinteger, 1 << 24, 0, math.maxinteger - 1024 })[(x >> 4) % 7 + 1]
  local sv, uv = c + da, c + db -- maxinteger + 1 wraps to the pattern of 2^63: right for uint64
  if c == math.maxinteger and da == 1 then sv = math.maxinteger end
  if c == 0 and db == -1 then uv = -1 end -- 2^64 - 1
  if c == 0 and da == 1 then sv = -1 end
  return sv, uv
end

local MIXFN = { "eq", "ne", "lt", "le", "gt", "ge", "eq", "lt", "maximum", "minimum", "equal", "scalar" }

local function slice_mixed(S, env)
  local fn = G.pick(MIXFN)
  local sd = G.pick({ "int64", "int64", "int64", "int8", "int16", "int32" })
  local swap = R(2) == 1
  local n = R(1, 4)
  local nextv = S:lcg()
  local sv, uv = {}, {}
  for i = 1, n do sv[i], uv[i] = mixed_pair(sd, nextv) end
  local cfn = G.pick({ "eq", "ne", "lt", "le", "gt", "ge" })
  local scalar = -1 - nextv() % 3
  local a, b = literal(S, env, sd, sv), literal(S, env, "uint64", uv)
  if swap then a, b = b, a end
  add_victims(S, { a, b })
  local ka, kb = know(env, a), know(env, b)
  local desc, ok, res
  if fn == "equal" then
    desc = string.format("dlpack.equal(%s, %s)", a.desc, b.desc)
    ok, res = S:call(desc, env.dlpack.equal, a.v, b.v)
    if S:quiet() then
      local want = true
      for i = 1, n do
        if CM.mixed_cmp(sv[i], false, uv[i], true) ~= 0 then want = false end
      end
      if not ok then S:fail(desc .. ": raised: " .. tostring(res))
      elseif res ~= want then S:fail(string.format("%s: %s, NumPy gives %s", desc, fmt(res), fmt(want))) end
    end
  else
    local args, ks
    if fn == "scalar" then
      local u = swap and a or b
      fn = cfn
      args, ks = { u.v, scalar }, { know(env, u), { weak = "i", v = scalar } }
      desc = string.format("dlpack.%s(%s, %d)", fn, u.desc, scalar)
    else
      args, ks = { a.v, b.v }, { ka, kb }
      desc = string.format("dlpack.%s(%s, %s)", fn, a.desc, b.desc)
    end
    ok, res = S:call(desc, env.dlpack[fn], args[1], args[2])
    if ks[1] and ks[2] and S:quiet() then check(S, env, desc, predict(fn, ks, nil, nil, false), ok, res) end
  end
  drop(env, fresh_recs({ a, b }), res, nil)
end

local function slice_narrow(S, env)
  local d = G.pick({ "int64", "uint64", "int32", "int64", "uint64", "uint32" })
  local ft = G.pick({ "float32", "bfloat16", "float16", "complex64", "float32", "bfloat16" })
  local how = R(5) -- 1 to, 2 copy, 3 add(dtype =), 4 add(out =), 5 sum(dtype =)
  local n = R(1, 4)
  local nextv = S:lcg()
  local vals = {}
  for i = 1, n do vals[i] = near_pow2(d, nextv) end
  if CM.COMPLEX[ft] and (how == 3 or how == 4 or how == 5) then how = 1 end
  if how == 5 then n = 1; vals = { vals[1] } end
  local x = literal(S, env, d, vals)
  local made = { x }
  add_victims(S, { x })
  local real = ft == "complex64" and "float32" or ft
  local want = {}
  for i = 1, n do want[i] = CM.int_round(real, vals[i], d == "uint64") end
  local desc, ok, res, ident
  if how == 1 then
    desc = string.format("%s:to(%q)", x.desc, ft)
    ok, res = S:call(desc, env.T.to, x.v, ft)
  elseif how == 2 then
    local z = literal(S, env, ft, (function() local zz = {} for i = 1, n do zz[i] = 0 end return zz end)())
    made[#made + 1] = z
    desc = string.format("%s:copy(%s)", z.desc, x.desc)
    ok, res = S:call(desc, env.T.copy, z.v, x.v)
    ident = z.v
  elseif how == 3 then
    desc = string.format("dlpack.add(%s, 0, {dtype = %q})", x.desc, ft)
    ok, res = S:call(desc, env.dlpack.add, x.v, 0, { dtype = ft })
  elseif how == 4 then
    local zeros = {}
    for i = 1, n do zeros[i] = 0 end
    local z, o = literal(S, env, d, zeros), literal(S, env, ft, zeros)
    made[#made + 1], made[#made + 2] = z, o
    desc = string.format("dlpack.add(%s, %s, {out = %s})", x.desc, z.desc, o.desc)
    ok, res = S:call(desc, env.dlpack.add, x.v, z.v, { out = o.v })
    ident = o.v
  else
    desc = string.format("dlpack.sum(%s, nil, {dtype = %q})", x.desc, ft)
    ok, res = S:call(desc, env.dlpack.sum, x.v, nil, { dtype = ft })
  end
  if S:quiet() then
    if not ok then
      S:fail(desc .. ": raised: " .. tostring(res))
    elseif how == 5 then
      if res ~= want[1] then
        S:fail(string.format("%s: %s, one rounding gives %s", desc, fmt(res), fmt(want[1])))
      end
    elseif ident ~= nil and not rawequal(res, ident) then
      S:fail(desc .. ": did not return its out tensor")
    else
      S:check_note(desc)
      local okv, got
      if ft == "complex64" then
        okv, got = pcall(function()
          local s, g = res:tobytes(), {}
          for i = 1, n do
            local re, im = string.unpack("<ff", s, 8 * (i - 1) + 1)
            g[i] = im == 0 and re or "imaginary part " .. fmt(im)
          end
          return g
        end)
      else
        okv, got = pcall(env.T.totable, res)
      end
      if not okv then S:fail(desc .. ": reading the result raised: " .. tostring(got))
      else
        for i = 1, n do
          if got[i] ~= want[i] then
            S:fail(string.format("%s: element %d (%s %s) is %s, one rounding to %s gives %s", desc, i, d,
              fmt(vals[i]), fmt(got[i]), ft, fmt(want[i])))
            break
          end
        end
      end
    end
  end
  drop(env, fresh_recs(made), res, { ident })
end

local function exact(S, env)
  local k = R(4)
  if k == 1 then slice_cast(S, env)
  elseif k == 2 then slice_bool(S, env)
  elseif k == 3 then slice_mixed(S, env)
  else slice_narrow(S, env) end
end

-- for spec/fuzz/reduce.lua
C.H = { fresh = fresh, operand = operand, know = know, operand_error = operand_error, first_diff = first_diff,
  drop = drop, fresh_recs = fresh_recs, add_victims = add_victims, result_shape = result_shape,
  operand_shape = operand_shape, draw_value = draw_value, ODTYPES = ODTYPES, CDTYPES = CDTYPES, LAYOUTS = LAYOUTS,
  copy_list = copy_list }

-- env: { dlpack, T, info, values, live, NSLOT }; op(name, weight, fn) adds to the catalog.
function C.register(op, env)
  op("compute", 14, function(S) elementwise(S, env) end)
  op("clamp", 2, function(S) clamp(S, env) end)
  op("masked_fill", 2, function(S) masked_fill(S, env) end)
  op("equal_allclose", 2, function(S) tests(S, env) end)
  op("exact", 4, function(S) exact(S, env) end)
  require("fuzz.reduce").register(op, env)
  require("fuzz.index").register(op, env)
  require("fuzz.sort").register(op, env)
end

return C
