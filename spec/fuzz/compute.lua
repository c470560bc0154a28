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
  "uint64", "int16", "complex64", "float8_e4m3fn" }

local BINARY = { "add", "sub", "mul", "div", "idiv", "mod", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt",
  "ge", "logical_and", "logical_or", "logical_xor", "band", "bor", "bxor", "shl", "shr" }
local UNARY = { "neg", "abs", "sign", "sqrt", "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "sigmoid",
  "floor", "ceil", "round", "trunc", "isnan", "isinf", "isfinite", "logical_not", "bnot" }
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

-- A value of dtype d that the dtype holds exactly: mostly small, sometimes an edge.
local function draw_value(d, nextv)
  local x = nextv()
  if d == "bool" then return x % 2 == 0 end
  local r = G.INTRANGE[d]
  if r then
    if x % 8 == 0 then
      local edges = { r[1], r[2], 0, 1, r[1] + 1, r[2] - 1, 2 }
      return edges[(x >> 3) % #edges + 1]
    end
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
  local name = (tag or "F") .. S:serial()
  local desc
  if n <= 24 then
    desc = string.format("%s = <%s %s %s %s>", name, d, G.fmt_list(bshape), lay, G.fmt_list(flat))
  else
    desc = string.format("%s = <%s %s %s, %d values>", name, d, G.fmt_list(bshape), lay, n)
  end
  S:note(desc)
  local ok, base
  if not G.ELEM[d] or n == 0 then
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
    return { dtype = r.dtype, shape = r.shape, tbl = tbl, host = true, readonly = r.readonly, expanded = r.expanded,
      rec = r, computes = CM.COMPUTES[r.dtype] }
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
  return { dtype = inf.dtype, shape = inf.shape, tbl = tbl, host = inf.host, readonly = inf.readonly,
    expanded = expanded, computes = CM.COMPUTES[inf.dtype] and not inf.sub, pool = o.pool }
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

local function has(tbl, shape, pred)
  local found = false
  CM.each(shape, function(idx)
    if not found and pred(model.at(tbl, idx)) then found = true end
  end)
  return found
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
  -- integer division by zero, negative integer powers
  if (fn == "idiv" or fn == "mod") and CM.is_int(compute) then
    local dv = ks[2]
    if dv.weak then
      if CM.convert(dv.v, WEAK_DTYPE[dv.weak], compute) == 0 then return { err = "division by zero" } end
    elseif dv.tbl then
      if has(dv.tbl, dv.shape, function(v) return v == 0 or v == false end) then
        return { err = "division by zero" }
      end
    else
      return nil
    end
  end
  if fn == "pow" and CM.kind(compute) == "i" then
    local ex = ks[2]
    if ex.weak then
      local v = CM.convert(ex.v, WEAK_DTYPE[ex.weak], compute)
      if v == nil then return nil end
      if v < 0 then return { err = "negative power" } end
    elseif CM.kind(ex.dtype) == "i" then
      if not ex.tbl then return nil end
      if has(ex.tbl, ex.shape, function(v) return v < 0 end) then return { err = "negative power" } end
    end
  end
  -- the values
  local outd = k_out and k_out.dtype or result
  local f = CM.BIN[fn] or CM.UN[fn]
  local values
  if f or fn == "where" then
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
      want = false
    else
      err = elementwise_error({ ka, kb })
      local rs2 = not err and CM.broadcast({ ka.shape, kb.shape })
      if not err and not rs2 then err = "broadcast" end
      if not err and ka.tbl and kb.tbl then
        local pd = which == 1 and CM.promote(ka.dtype, kb.dtype) or "float64"
        local any_false, any_unknown = false, false
        CM.each(rs2, function(idx)
          local x = CM.convert(CM.element(ka.tbl, ka.shape, idx), ka.dtype, pd)
          local y = CM.convert(CM.element(kb.tbl, kb.shape, idx), kb.dtype, pd)
          if x == nil or y == nil then any_unknown = true; return end
          local close
          if which == 1 then close = CM.BIN.eq(pd, x, y)
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
  require("fuzz.reduce").register(op, env)
end

return C
