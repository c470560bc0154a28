-- The fuzzer's operation on the indexing functions (registered by spec/fuzz/compute.lua, whose
-- operands and helpers it shares):
--
--   index   nonzero (with and without as_tuple), argwhere, count_nonzero (dim nil, a number, a
--           table, keepdim), masked_select, index_select, gather, take (flat and along a dim),
--           scatter and scatter_,
--           on operands of any dtype and layout (released and read-only ones too), index tensors
--           of every integer dtype (indices in range, 0, beyond the size, negative past the
--           start, int64 and uint64 edges; transposed), float and bool index dtypes, hostile
--           values and evil option tables in any place; out= (the gathering functions and the
--           counting ones: any shape, the operand itself) exercised without a prediction.
--
-- The model (pure Lua, from API.md): when every argument was drawn valid and nothing was
-- released during the call, whether it must raise, and otherwise the result's shape and
-- elements; scatter_ must leave its tensor unchanged when it raises.
local G = require "fuzz.gen"
local CM = require "fuzz.compute_model"
local model = require "fuzz.model"
local H = require("fuzz.compute").H

local R = math.random
local fmt = G.fmt
local M = {}

local FUNCTIONS = { "nonzero", "argwhere", "count_nonzero", "masked_select", "index_select", "gather", "take",
  "scatter", "scatter_" }
local IDTYPES = { "int64", "int64", "int32", "int16", "int8", "uint8", "uint16", "uint32", "uint64", "float32", "bool" }

local function copy(list) local c = {} for i, v in ipairs(list) do c[i] = v end return c end
local function truthy(d, v) if d == "bool" then return v end return v ~= 0 end

-- An index value for a dimension of `size`: mostly in range (negatives from the end where the
-- dtype is signed), sometimes 0, size + 1, -size - 1 or an edge of int64.
local function draw_index(d, size)
  local k = R(20)
  local signed = d:sub(1, 1) == "i"
  if k == 1 then return 0 end
  if k == 2 then return size + 1 end
  if k == 3 and signed then return -size - 1 end
  if k == 4 and d == "int64" then return G.pick({ math.mininteger, math.maxinteger }) end
  if k == 4 and d == "uint64" then return -1 end -- 2^64 - 1
  if size == 0 then return 1 end
  local v = R(1, size)
  if signed and R(2) == 1 then v = v - size - 1 end
  return v
end

-- An index tensor of dtype d and shape s with values drawn for `size` (a table of sizes per
-- element position, or a number); returns { t, dtype, shape, tbl (1-based values as Lua numbers,
-- uint64 beyond 2^63 negative) } or nil when it cannot be made.
local function make_index(env, d, s, size)
  local tbl
  if d == "float32" or d == "bool" then
    local ok, t = pcall(env.dlpack.zeros, s, d)
    if not ok then return nil end
    return { t = t, dtype = d, shape = s }
  end
  tbl = model.build(s, function(idx) return draw_index(d, type(size) == "function" and size(idx) or size) end)
  local r = G.INTRANGE[d]
  local fits = true
  CM.each(s, function(idx)
    local v = model.at(tbl, idx)
    if d ~= "uint64" and (v < r[1] or v > r[2]) then fits = false end
    if d == "uint64" and v < 0 and v ~= -1 then fits = false end
  end)
  if not fits then tbl = model.build(s, function() return 1 end) end
  -- made from a flat list and viewed (a nested table cannot say {0, 3}); sometimes transposed
  local ts = copy(s)
  local transposed = #s >= 2 and R(3) == 1
  if transposed then ts[1], ts[2] = s[2], s[1] end
  local flat = {}
  CM.each(ts, function(idx)
    local c = copy(idx)
    if transposed then c[1], c[2] = idx[2], idx[1] end
    flat[#flat + 1] = model.at(tbl, c)
  end)
  local ok, t = pcall(function()
    local base = #s == 0 and env.dlpack.tensor(flat[1], d) or env.dlpack.tensor(flat, d):view(ts)
    return transposed and base:transpose(1, 2) or base
  end)
  if not ok then return nil end
  return { t = t, dtype = d, shape = s, tbl = tbl }
end

-- The 0-based position of a 1-based index v (uint64 read unsigned) in `size`, or nil.
local function resolve(v, size, unsigned)
  if unsigned and v < 0 then return nil end
  if v < 0 then v = v + size + 1 end
  if v < 1 or v > size then return nil end
  return v
end

-- Row-major multi-indices of the elements of shape s (fresh tables).
local function positions(s)
  local list = {}
  CM.each(s, function(idx) list[#list + 1] = copy(idx) end)
  return list
end

-- The model's answer: { err = true } or { shape, tbl } (a Lua value for count_nonzero over all).
local function predict(fn, kt, ki, dim, extra)
  if not kt.computes then return { err = true } end
  local s, nd = kt.shape, #kt.shape
  if fn == "nonzero" or fn == "argwhere" then
    if extra == "tuple" and nd == 0 then return { err = true } end
    local rows = {}
    for _, idx in ipairs(positions(s)) do
      if truthy(kt.dtype, model.at(kt.tbl, idx)) then rows[#rows + 1] = idx end
    end
    if extra == "tuple" then
      local cols = {}
      for d = 1, nd do
        cols[d] = {}
        for i, r in ipairs(rows) do cols[d][i] = r[d] end
      end
      return { tuple = cols, n = #rows }
    end
    return { shape = { #rows, nd }, tbl = rows }
  end
  if fn == "count_nonzero" then
    if dim == nil then
      local n = 0
      for _, idx in ipairs(positions(s)) do if truthy(kt.dtype, model.at(kt.tbl, idx)) then n = n + 1 end end
      return { value = n }
    end
    local d = model.dim(dim, nd)
    if not d then return { err = true } end
    local rs = copy(s)
    table.remove(rs, d)
    return { shape = rs, tbl = model.build(rs, function(idx)
      local n, full = 0, copy(idx)
      table.insert(full, d, 0)
      for i = 1, s[d] do
        full[d] = i
        if truthy(kt.dtype, model.at(kt.tbl, full)) then n = n + 1 end
      end
      return n
    end) }
  end
  -- the index functions
  if not ki.tbl then return { err = true } end -- a float or bool index dtype
  local unsigned = ki.dtype:sub(1, 1) == "u"
  if fn == "take" then
    local n = model.numel(s)
    local flat = model.flat(kt.tbl, s)
    local out, bad = {}, false
    local tbl = model.build(ki.shape, function(idx)
      local k = resolve(model.at(ki.tbl, idx), n, unsigned)
      if not k then bad = true; return 0 end
      return flat[k]
    end)
    if bad then return { err = true } end
    out.shape, out.tbl = ki.shape, tbl
    return out
  end
  local d = model.dim(dim, nd)
  if not d then return { err = true } end
  if fn == "take_dim" then -- np.take with an axis: t's shape with dim replaced by index's
    local ni = #ki.shape
    for _, idx in ipairs(positions(ki.shape)) do
      if not resolve(model.at(ki.tbl, idx), s[d], unsigned) then return { err = true } end
    end
    local rs = {}
    for k = 1, d - 1 do rs[#rs + 1] = s[k] end
    for k = 1, ni do rs[#rs + 1] = ki.shape[k] end
    for k = d + 1, nd do rs[#rs + 1] = s[k] end
    return { shape = rs, tbl = model.build(rs, function(idx)
      local c, at = {}, {}
      for k = 1, ni do at[k] = idx[d - 1 + k] end
      for k = 1, nd do c[k] = k < d and idx[k] or k > d and idx[k - 1 + ni] or nil end
      c[d] = resolve(model.at(ki.tbl, at), s[d], unsigned)
      return model.at(kt.tbl, c)
    end) }
  end
  if fn == "index_select" then
    if #ki.shape > 1 then return { err = true } end
    local list = #ki.shape == 0 and { ki.tbl } or ki.tbl
    local rs = copy(s)
    rs[d] = #list
    for _, v in ipairs(list) do if not resolve(v, s[d], unsigned) then return { err = true } end end
    return { shape = rs, tbl = model.build(rs, function(idx)
      local c = copy(idx)
      c[d] = resolve(list[idx[d]], s[d], unsigned)
      return model.at(kt.tbl, c)
    end) }
  end
  if #ki.shape ~= nd then return { err = true } end
  for k = 1, nd do if k ~= d and ki.shape[k] > s[k] then return { err = true } end end
  for _, idx in ipairs(positions(ki.shape)) do
    if not resolve(model.at(ki.tbl, idx), s[d], unsigned) then return { err = true } end
  end
  if fn == "gather" then
    return { shape = ki.shape, tbl = model.build(ki.shape, function(idx)
      local c = copy(idx)
      c[d] = resolve(model.at(ki.tbl, idx), s[d], unsigned)
      return model.at(kt.tbl, c)
    end) }
  end
  -- scatter with a value `extra` of t's dtype: later positions overwrite earlier ones
  local r = model.build(s, function(idx) return model.at(kt.tbl, idx) end)
  for _, idx in ipairs(positions(ki.shape)) do
    local c = copy(idx)
    c[d] = resolve(model.at(ki.tbl, idx), s[d], unsigned)
    local row = r
    for k = 1, nd - 1 do row = row[c[k]] end
    row[c[nd]] = extra
  end
  return { shape = s, tbl = r }
end

local function index_op(S, env)
  local fn = G.pick(FUNCTIONS)
  local rs = H.result_shape()
  local t = H.operand(S, env, rs, { tensor = true })
  local kt = H.know(env, t)
  local inf = type(t.v) == "userdata" and env.info(t.v)
  local repeats = false -- a stride-0 dim of more than one element: not written in place
  for k = 1, inf and inf.numel > 0 and inf.ndim or 0 do
    if inf.shape[k] > 1 and inf.strides[k] == 0 then repeats = true end
  end
  local tshape = kt and kt.shape or rs
  local nd = #tshape
  local dim = nd > 0 and R(-nd, nd) or R(-1, 1)
  if dim == 0 then dim = 1 end
  if R(12) == 1 then dim = G.pick({ nd + 1, -nd - 1, 0, 2.5, math.maxinteger }) end
  local take_dim = fn == "take" and R(2) == 1
  local idtype = G.pick(IDTYPES)
  local index, ishape, value
  local args, descs = {}, {}
  if fn == "index_select" then
    ishape = R(5) == 1 and {} or { R(0, 4) }
    if R(15) == 1 then ishape = { 1, 1 } end
  elseif fn == "take" then
    ishape = H.result_shape()
  elseif fn == "gather" or fn == "scatter" or fn == "scatter_" then
    local d = type(dim) == "number" and model.dim(math.tointeger(dim), nd) or nil
    ishape = {}
    for k = 1, nd do ishape[k] = k == d and R(0, 3) or R(0, tshape[k] + (R(10) == 1 and 1 or 0)) end
  end
  if ishape then
    local d = type(dim) == "number" and model.dim(math.tointeger(dim), nd) or nil
    local size = fn == "take" and not take_dim and model.numel(tshape) or (d and tshape[d] or 1)
    index = make_index(env, idtype, ishape, size)
    if not index then return end
  end
  -- the arguments, with hostile values in their places now and then
  local hostile = R(10) == 1
  local function arg(v, desc)
    args[#args + 1] = v
    descs[#descs + 1] = desc
  end
  arg(t.v, t.desc)
  local opts, known_opts = nil, true
  if fn == "nonzero" then
    local k = R(4)
    if k == 1 then opts = { as_tuple = true }
    elseif k == 2 then opts = S:evil(); known_opts = false
    elseif k == 3 then opts = { as_tuple = R(2) == 1 and "yes" or nil, as_tupel = true }; known_opts = false end
    if opts then arg(opts, "opts") end
  elseif fn == "count_nonzero" then
    if R(2) == 1 then arg(dim, fmt(dim)) else dim = nil end
  elseif fn == "masked_select" then
    local m = H.operand(S, env, tshape, { tensor = R(4) > 1 })
    index = { mask = m }
    arg(m.v, m.desc)
  elseif fn == "take" then
    arg(index.t, "index")
    if take_dim then arg(dim, fmt(dim)) end
  elseif fn ~= "argwhere" then
    arg(dim, fmt(dim))
    arg(index.t, "index")
  end
  if fn == "scatter" or fn == "scatter_" then
    value = R(-3, 9)
    arg(value, fmt(value))
  end
  if (fn == "gather" or fn == "index_select" or fn == "take") and R(6) == 1 then
    opts = R(2) == 1 and S:evil() or { out = H.operand(S, env, ishape or rs, { tensor = true }).v }
    known_opts = false
    arg(opts, "opts")
  end
  -- out= of the counting functions: a tensor of any shape (mostly wrong), t itself, or evil
  local counting = fn == "argwhere" or fn == "masked_select" or (fn == "count_nonzero" and #args == 2) or
    (fn == "nonzero" and not opts)
  if counting and R(6) == 1 then
    local k = R(3)
    opts = k == 1 and S:evil() or { out = k == 2 and t.v or H.operand(S, env, H.result_shape(), { tensor = true }).v }
    known_opts = false
    arg(opts, "opts")
  end
  if hostile then
    local k = R(#args)
    local v, vd = S:hostile()
    args[k], descs[k] = v, vd
  end
  H.add_victims(S, { t, index and index.mask })
  if index and index.t then S.ctx.victims[#S.ctx.victims + 1] = { t = index.t, name = "index" } end
  local desc = string.format("dlpack.%s(%s)", fn, table.concat(descs, ", "))
  local call = fn == "scatter_" and env.T.scatter_ or env.dlpack[fn]
  local before = kt and kt.tbl
  local ok, res = S:call(desc, call, table.unpack(args, 1, #args))
  local known = kt and not kt.released and kt.tbl and not hostile and known_opts and kt.host and
    (not index or not index.mask) and S:quiet()
  if known and fn == "scatter_" and kt.readonly then known = false end
  if known and fn == "scatter_" and repeats then
    if ok then S:fail(desc .. ": wrote a tensor that repeats elements") end
    known = false
  end
  local takes_dim = fn ~= "nonzero" and fn ~= "argwhere" and (fn ~= "take" or take_dim) and
    fn ~= "masked_select" and not (fn == "count_nonzero" and dim == nil)
  if known and takes_dim and not math.tointeger(dim) then
    if ok then S:fail(desc .. ": a dim that is no integer was taken") end
    known = false
  end
  if known then
    local extra = value
    if fn == "nonzero" and opts and opts.as_tuple then extra = "tuple" end
    local name = fn == "scatter_" and "scatter" or take_dim and "take_dim" or fn
    local p = predict(name, kt, index or {}, dim and math.tointeger(dim), extra)
    -- the value does not convert strictly (a negative Lua integer is a uint64's bits, as in fill)
    local unsigned = CM.kind(kt.dtype) == "u" and kt.dtype ~= "uint64"
    if (fn == "scatter" or fn == "scatter_") and (kt.dtype == "bool" or (unsigned and value < 0)) then
      p = { err = true }
    end
    if p.err then
      if ok then S:fail(desc .. ": the model says this raises, it returned " .. tostring(res)) end
      if fn == "scatter_" and before then
        local oka, after = pcall(env.T.totable, t.v)
        if oka and not model.same_table(after, before) then S:fail(desc .. ": raised but wrote its tensor") end
      end
    elseif not ok then
      S:fail(desc .. ": raised " .. tostring(res))
    elseif p.value then
      if res ~= p.value then S:fail(string.format("%s: gave %s, the model %s", desc, fmt(res), fmt(p.value))) end
    elseif p.tuple then
      for dd, col in ipairs(p.tuple) do
        local okv, got = pcall(env.T.totable, res[dd])
        if not okv or not model.same_table(got, col) then S:fail(desc .. ": as_tuple column " .. dd .. " differs") end
      end
    else
      local okv, got = pcall(env.T.totable, res)
      local want = p.tbl
      if #p.shape == 0 then want = model.at(p.tbl, {}) end
      if not okv then S:fail(desc .. ": reading the result raised " .. tostring(got))
      elseif not model.same_table(got, want) then
        S:fail(desc .. ": the result differs from the model's")
      end
      if fn == "scatter_" and not rawequal(res, t.v) then S:fail(desc .. ": did not return its tensor") end
    end
  end
  if index and index.t then pcall(env.T.release, index.t) end
  local made = { t }
  if index and index.mask then made[2] = index.mask end
  H.drop(env, H.fresh_recs(made), res, { t.v })
end

function M.register(op, env)
  op("index", 3, function(S) index_op(S, env) end)
end

return M
