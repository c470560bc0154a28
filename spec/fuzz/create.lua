-- The fuzzer's operations for the more ways to make tensors (spec/fuzz/fuzz.lua registers them):
--
--   like         zeros_like, ones_like, empty_like, full_like of a pool tensor (or a hostile
--                value), with a dtype (aliases too) and a device given or not: the shape, dtype,
--                device and values of the result, contiguous and writable.
--   linspace_eye linspace(a, b, n, dtype) and eye(n, m, dtype): the first and last values, the
--                diagonal, floors for integer dtypes, the shape.
--   random       rand, randn, randint with shapes as tables or numbers, dtypes, bounds at the
--                int64 edges, manual_seed: the range of every value, and that the same seed
--                gives the same bytes.
--   numbers      empty/zeros/ones(2, 3, dtype) and t:view/reshape(sizes as numbers).
--
-- Like every generator of the fuzzer, these draw from math.random only, and the number of
-- draws never depends on what the module answered.
local G = require "fuzz.gen"
local model = require "fuzz.model"

local R = math.random
local fmt = G.fmt
local C = {}

local ALIASES = { float = "float32", double = "float64", half = "float16", long = "int64", int = "int32",
  short = "int16", byte = "uint8", char = "int8" }
local ALIAS_NAMES = { "float", "double", "half", "long", "int", "short", "byte", "char" }

-- A dtype argument: nil (kept), a canonical name, an alias, or hostile. Always the same draws.
local function dtype_arg(S)
  local k, alias = R(4), G.pick(ALIAS_NAMES)
  local d, dd, dv = S:dtype_arg()
  if not dv then return d, dd, false, nil end
  if k == 1 then return nil, "nil", true, nil end
  if k == 2 then return alias, fmt(alias), true, ALIASES[alias] end
  return d, dd, true, d
end

-- The elements of a totable() result, flat, in row-major order.
local function flat(tbl, shape)
  if #shape == 0 then return { tbl } end
  return model.flat(tbl, shape)
end

local function all_equal(list, v)
  for i = 1, #list do
    if not model.same_value(list[i], v) then return false end
  end
  return true
end

local function like(S, env)
  local dlpack = env.dlpack
  local kind = R(4)
  local slot = R(env.NSLOT)
  local t, td, e = S:self_arg()
  local dtype, dd, dv, want_dtype = dtype_arg(S)
  local dmode = R(10)
  local dev, devd = nil, "nil"
  local hv, hd = S:hostile()
  if dmode == 1 then dev, devd = "cpu", "\"cpu\"" elseif dmode == 2 then dev, devd = { 1, 0 }, "{1, 0}"
  elseif dmode >= 9 then dev, devd = hv, hd end
  local inf = e and env.info(t)
  local eff = want_dtype or (inf and inf.dtype) or "float64"
  local value, vd, vv = S:value_arg(eff)
  local names = { "empty_like", "zeros_like", "ones_like", "full_like" }
  local fname = names[kind]
  local name = "L" .. S:serial()
  local ok, res
  if kind == 4 then
    ok, res = S:call(string.format("%s = dlpack.full_like(%s, %s, %s, %s)", name, td, vd, dd, devd), dlpack.full_like,
      t, value, dtype, dev)
  else
    ok, res = S:call(string.format("%s = dlpack.%s(%s, %s, %s)", name, fname, td, dd, devd), dlpack[fname], t, dtype,
      dev)
  end
  local valid = inf and dv and dmode <= 8 and inf.device == "cpu" and
    (kind <= 2 or (G.ELEM[eff] and (kind == 3 or vv)))
  if ok then
    local rinf = env.info(res)
    -- (not when t was released under the call: the result may then have t's freed memory)
    if valid and rinf and S:quiet(e) then
      if not model.same_list(rinf.shape, inf.shape) then S:fail(fname .. ": shape " .. G.fmt_list(rinf.shape)) end
      if rinf.dtype ~= eff then S:fail(fname .. ": dtype " .. rinf.dtype .. ", expected " .. eff) end
      if rinf.device ~= "cpu" then S:fail(fname .. ": device " .. rinf.device) end
      if rinf.readonly then S:fail(fname .. ": read-only") end
      if not rinf.contig then S:fail(fname .. ": not contiguous") end
      if rinf.numel > 0 and rinf.ptr == inf.ptr then S:fail(fname .. ": shares t's memory") end
      if kind >= 2 and rinf.elem then
        local want = kind == 4 and value or (kind == 3 and (eff == "bool" or 1)) or (eff ~= "bool" and 0)
        local got = env.values(res, rinf)
        if got and not all_equal(flat(got, rinf.shape), want) then S:fail(fname .. ": values differ") end
      end
    end
    S:put_small(res, name, slot)
  elseif valid and not S.disturbed then
    S:valid_raised(res)
  end
end

local INT_DTYPES = { "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64" }

local function linspace_eye(S, env)
  local dlpack = env.dlpack
  local which = R(2)
  local a, b = (R(0, 400) - 200) / 4, (R(0, 400) - 200) / 4
  local n = G.pick({ 0, 1, 2, 3, 5, 8, 17 })
  local dk, idt = R(6), G.pick(INT_DTYPES)
  local any = G.pick(G.DTYPES)
  local dtype = ({ false, "float64", idt, "float32", any, "double" })[dk] or nil
  local hostile_at = R(8) -- 1..3: that argument hostile
  local hv, hd = S:hostile()
  local args = { a, b, n, dtype }
  if which == 2 then args = { R(0, 6), R(0, 6), dtype } end
  local descs = {}
  local nargs = which == 1 and 4 or 3
  if hostile_at <= 3 then args[hostile_at] = hv end
  for i = 1, nargs do descs[i] = (hostile_at == i and hd) or (type(args[i]) == "string" and fmt(args[i])) or
    (args[i] == nil and "nil") or fmt(args[i]) end
  local fname = which == 1 and "linspace" or "eye"
  local name = "E" .. S:serial()
  local ok, res = S:call(string.format("%s = dlpack.%s(%s)", name, fname, table.concat(descs, ", ")), dlpack[fname],
    table.unpack(args, 1, nargs))
  local eff = ALIASES[dtype] or dtype or "float32"
  local valid = hostile_at > 3 and G.ELEM[eff] and (which == 2 or eff ~= "bool")
  if valid and which == 1 and G.INTRANGE[eff] then
    local lo, hi = G.INTRANGE[eff][1], G.INTRANGE[eff][2]
    for _, v in ipairs(n >= 2 and { a, b } or n == 1 and { a } or {}) do
      if math.floor(v) < lo or math.floor(v) > hi then valid = false end
    end
  end
  if ok then
    local rinf = env.info(res)
    if valid and rinf then
      local shape = which == 1 and { n } or { args[1], args[2] }
      if not model.same_list(rinf.shape, shape) then S:fail(fname .. ": shape " .. G.fmt_list(rinf.shape)) end
      if rinf.dtype ~= eff then S:fail(fname .. ": dtype " .. rinf.dtype) end
      local got = env.values(res, rinf)
      if got and which == 1 and n >= 1 then
        local int = G.INTRANGE[eff] ~= nil
        -- quarters are exact in every float dtype; integers take the floor
        local first, last = int and math.floor(a) or a, int and math.floor(b) or b
        if got[1] ~= first then S:fail("linspace: first " .. fmt(got[1]) .. ", expected " .. fmt(first)) end
        if n >= 2 and got[n] ~= last then S:fail("linspace: last " .. fmt(got[n]) .. ", expected " .. fmt(last)) end
        for i = 2, n do
          if (b >= a and got[i] < got[i - 1]) or (b < a and got[i] > got[i - 1]) then
            S:fail("linspace: not monotonic at " .. i)
            break
          end
        end
      elseif got and which == 2 then
        local one, zero = eff == "bool" or 1, eff ~= "bool" and 0
        local want = model.build(shape, function(idx) return idx[1] == idx[2] and one or zero end)
        if not model.same_table(got, want) then S:fail("eye: values differ from the identity") end
      end
    end
    S:put_small(res, name, R(env.NSLOT))
  else
    R(env.NSLOT) -- the same draws either way
    if valid and not S.disturbed then S:valid_raised(res) end
  end
end

local FLOATS = { "float16", "bfloat16", "float32", "float64", "half", "double", "float" }

local function random(S, env)
  local dlpack, T = env.dlpack, env.T
  local which = R(3)
  local shape, sd, sv = S:shape_arg()
  local as_numbers = R(3) == 1 and sv and #shape > 0
  local fdt, idt = G.pick(FLOATS), G.pick(INT_DTYPES)
  local dk = R(6)
  local hv, hd = S:hostile()
  local any = G.pick(G.DTYPES)
  local dtype, ddesc
  if dk == 1 then
    dtype, ddesc = nil, "nil"
  elseif dk <= 4 then
    dtype = which == 3 and idt or fdt
  elseif dk == 5 then
    dtype = any
  else
    dtype, ddesc = hv, hd
  end
  ddesc = ddesc or fmt(dtype)
  local bk = R(6)
  local edges = { { math.mininteger, math.maxinteger }, { -5, 5 }, { 0, 1 }, { 0, 256 }, { -128, 128 },
    { math.maxinteger - 1, math.maxinteger }, { 3, 3 }, { 0, 1 << 32 } }
  local bounds = edges[R(#edges)]
  local lo, hi = bounds[1], bounds[2]
  if bk == 1 then lo = hv end
  local seed, reseed = R(-1000, 1000), R(4) == 1
  local args, descs = {}, {}
  if which == 3 then
    args[1], args[2] = lo, hi
    descs[1], descs[2] = bk == 1 and hd or fmt(lo), fmt(hi)
  end
  if as_numbers then
    for i = 1, #shape do args[#args + 1], descs[#descs + 1] = shape[i], fmt(shape[i]) end
  else
    args[#args + 1], descs[#descs + 1] = shape, sd
  end
  args[#args + 1], descs[#descs + 1] = dtype, ddesc
  local fname = ({ "rand", "randn", "randint" })[which]
  local name = "R" .. S:serial()
  local nargs = #descs
  if reseed then pcall(dlpack.manual_seed, seed) end
  local ok, res = S:call(string.format("%s = dlpack.%s(%s)", name, fname, table.concat(descs, ", ")), dlpack[fname],
    table.unpack(args, 1, nargs))
  local eff = ALIASES[dtype] or dtype or (which == 3 and "int64" or "float32")
  local valid = sv and dk <= 4 and (which ~= 3 or bk ~= 1)
  if valid and which == 3 then
    local range = G.INTRANGE[eff]
    valid = lo < hi and range and lo >= range[1] and hi - 1 <= range[2]
  end
  if ok then
    local rinf = env.info(res)
    if valid and rinf then
      if not model.same_list(rinf.shape, shape) then S:fail(fname .. ": shape " .. G.fmt_list(rinf.shape)) end
      if rinf.dtype ~= eff then S:fail(fname .. ": dtype " .. rinf.dtype .. ", expected " .. eff) end
      local got = env.values(res, rinf)
      if got then
        for _, v in ipairs(flat(got, shape)) do
          local bad = (which == 1 and not (v >= 0 and v < 1)) or (which == 2 and v ~= v) or
            (which == 3 and not (v >= lo and v <= hi - 1))
          if bad then
            S:fail(fname .. ": value " .. fmt(v) .. " out of range")
            break
          end
        end
      end
      if reseed and not S.disturbed then -- the same seed, the same bytes
        pcall(dlpack.manual_seed, seed)
        local ok2, again = pcall(dlpack[fname], table.unpack(args, 1, nargs))
        local b1, b2 = ok2 and select(2, pcall(T.tobytes, res)), ok2 and select(2, pcall(T.tobytes, again))
        if not ok2 or b1 ~= b2 then S:fail(fname .. ": manual_seed(" .. seed .. ") did not repeat the numbers") end
        if ok2 then pcall(T.release, again) end
      end
    end
    S:put_small(res, name, R(env.NSLOT))
  else
    R(env.NSLOT)
    if valid and not S.disturbed then S:valid_raised(res) end
  end
end

local function numbers(S, env)
  local dlpack, T = env.dlpack, env.T
  local which = R(4)
  local shape = G.valid_shape()
  local dtype = G.pick(G.DTYPES)
  local t, td, e = S:self_arg()
  local name = "N" .. S:serial()
  local slot = R(env.NSLOT)
  local descs = {}
  for i = 1, #shape do descs[i] = fmt(shape[i]) end
  if which <= 2 then
    if #shape == 0 then shape, descs = { 1 }, { "1" } end
    local fname = which == 1 and "zeros" or "ones"
    local args = { table.unpack(shape) }
    args[#args + 1] = dtype
    local ok, res = S:call(string.format("%s = dlpack.%s(%s, %q)", name, fname, table.concat(descs, ", "), dtype),
      dlpack[fname], table.unpack(args, 1, #shape + 1))
    local valid = which == 1 or G.ELEM[dtype]
    if ok then
      local rinf = env.info(res)
      if valid and rinf then
        if not model.same_list(rinf.shape, shape) then S:fail(fname .. ": shape " .. G.fmt_list(rinf.shape)) end
        local got = env.values(res, rinf)
        local want = which == 2 and (dtype == "bool" or 1) or (dtype ~= "bool" and 0)
        if got and not all_equal(flat(got, shape), want) then S:fail(fname .. ": values differ") end
      end
      S:put_small(res, name, slot)
    elseif valid and not S.disturbed then
      S:valid_raised(res)
    end
    return
  end
  -- t:reshape(n) / t:view(1, n, 1) with the sizes as numbers: the elements in row-major order
  local inf = e and env.info(t)
  local src = inf and env.values(t, inf)
  local n = inf and inf.numel or 1
  local sizes = which == 3 and { n } or { 1, -1, 1 }
  local mname = which == 3 and "reshape" or "view"
  local ok, res = S:call(string.format("%s = %s:%s(%s)", name, td, mname, which == 3 and fmt(n) or "1, -1, 1"),
    T[mname], t, table.unpack(sizes))
  local valid = inf and not inf.sub and (which == 3 or inf.contig)
  if ok then
    local rinf = env.info(res)
    if valid and rinf and S:quiet(e) then
      local want_shape = which == 3 and { n } or { 1, n, 1 }
      if not model.same_list(rinf.shape, want_shape) then S:fail(mname .. ": shape " .. G.fmt_list(rinf.shape)) end
      local got = env.values(res, rinf)
      if src and got then
        local a, b = flat(src, inf.shape), flat(got, want_shape)
        for i = 1, #a do
          if not model.same_value(a[i], b[i]) then
            S:fail(mname .. ": element " .. i .. " differs")
            break
          end
        end
      end
    end
    S:put_small(res, name, slot, e and e.root)
  elseif valid and S:quiet(e) then
    S:valid_raised(res)
  end
end

-- env: {dlpack =, T =, info =, values =, NSLOT =}; op(name, weight, fn) adds to the catalog.
function C.register(op, env)
  op("like", 3, function(S) like(S, env) end)
  op("linspace_eye", 2, function(S) linspace_eye(S, env) end)
  op("random", 3, function(S) random(S, env) end)
  op("numbers", 2, function(S) numbers(S, env) end)
end

return C
