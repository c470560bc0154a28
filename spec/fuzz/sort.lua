-- The fuzzer's operations on the sorting, scanning and statistics functions (registered by
-- spec/fuzz/compute.lua, whose operands and model helpers they share):
--
--   sort   sort argsort topk cumsum cumprod softmax log_softmax median quantile, as module functions
--          and methods, with dim nil, in range, out of range or hostile, k in and out of range, and
--          options (valid, unknown keys, hostile values and tables)
--
-- The model: the errors a valid-looking call must raise (complex sorts, dims out of range, k out
-- of range, unknown options, operands that do not compute), the result dtype and shape, and for
-- known 1-d operands the values: a stable sort (NaN last; descending NaN first) with positions
-- that point at equal elements, and integer cumsums wrapping in int64.
local G = require "fuzz.gen"
local CM = require "fuzz.compute_model"
local model = require "fuzz.model"
local H = require("fuzz.compute").H

local R = math.random
local fmt = G.fmt
local M = {}

local FNS = { "sort", "argsort", "topk", "cumsum", "cumprod", "softmax", "log_softmax", "median", "quantile",
  "unique" }
local OPTS = {
  sort = { descending = "boolean", stable = "boolean", indices = "boolean" },
  argsort = { descending = "boolean", stable = "boolean" },
  topk = { largest = "boolean", sorted = "boolean" },
  cumsum = { dtype = "dtype" }, cumprod = { dtype = "dtype" },
  softmax = { dtype = "dtype" }, log_softmax = { dtype = "dtype" },
  median = { keepdim = "boolean" }, quantile = { keepdim = "boolean" },
  unique = { return_inverse = "boolean", return_counts = "boolean", dim = "dim" },
}

local function kind(d) return CM.kind(d) end

-- The result dtype of fn on dtype d (opts dtype od), or nil, reason.
local function result_dtype(fn, d, od)
  local k = kind(d)
  if fn == "sort" or fn == "topk" then return d end
  if fn == "argsort" then return "int64" end
  if fn == "cumsum" or fn == "cumprod" then
    if od then return od end
    if k == "u" then return "uint64" end
    if k == "b" or k == "i" then return "int64" end
    return d
  end
  if fn == "softmax" or fn == "log_softmax" then
    local r = od or (k == "f" and d or "float32")
    if kind(r) ~= "f" then return nil, "a real float result" end
    return r
  end
  return k == "f" and d or "float64"
end

local function is_nan(x) return x ~= x end

-- A stable sort model of a list: the positions in order (NaN last, or first when descending).
local function order(list, d, descending)
  local idx = {}
  for i = 1, #list do idx[i] = i end
  local function key(v) if d == "bool" then return v and 1 or 0 end return v end
  local function before(i, j) -- strictly before: i's element comes first
    local a, b = key(list[i]), key(list[j])
    if descending then a, b = b, a end -- (so NaN, last among a < b, comes first)
    local na, nb = is_nan(a), is_nan(b)
    if na or nb then return nb and not na end
    if d == "uint64" then return math.ult(a, b) end
    return a < b
  end
  -- insertion sort: stable
  for i = 2, #idx do
    local v, j = idx[i], i - 1
    while j >= 1 and before(v, idx[j]) do idx[j + 1] = idx[j]; j = j - 1 end
    idx[j + 1] = v
  end
  return idx
end

local function draw_opts(S, fn)
  local m = R(10)
  if m <= 4 then return nil, nil end
  local names = OPTS[fn]
  if m <= 8 then
    local o, parts = {}, {}
    for name, ty in pairs(names) do
      if R(2) == 1 then
        if ty == "boolean" then o[name] = R(2) == 1
        elseif ty == "dim" then o[name] = G.pick({ 1, -1, 2, 0, 5, 1.5 })
        else o[name] = G.pick({ "float32", "float64", "int8", "int64", "float16", "complex64", "nosuch" }) end
        parts[#parts + 1] = name .. " = " .. fmt(o[name])
      end
    end
    table.sort(parts)
    return o, "{" .. table.concat(parts, ", ") .. "}"
  end
  if m == 9 then return { keepdims = true }, "{keepdims = true}" end
  return S:hostile()
end

local function sort_op(S, env)
  local fn = G.pick(FNS)
  local rs = H.result_shape()
  local t = H.operand(S, env, rs, { tensor = true })
  local nd = t.rec and #t.rec.shape or #rs
  local dim, dimd
  local dm = R(8)
  if dm <= 2 and fn ~= "softmax" and fn ~= "log_softmax" then dim, dimd = nil, "nil"
  elseif dm <= 6 then
    dim = 1 + R(0, math.max(nd, 1) - 1)
    if R(3) == 1 then dim = dim - nd - 1 end
    dimd = fmt(dim)
  elseif dm == 7 then dim = nd + R(1, 3); dimd = fmt(dim)
  else dim, dimd = S:hostile() end
  local opts, od = draw_opts(S, fn)
  local extra, ed, drawn_list = {}, {}, false
  if fn == "topk" then
    local k = R(0, 6) - 1
    if R(6) == 1 then k, ed[1] = S:hostile() else ed[1] = fmt(k) end
    extra[1] = k
  elseif fn == "quantile" then
    local q = G.pick({ 0, 0.25, 0.5, 1, 1.5, -0.1, 0 / 0 })
    if R(4) == 1 then q = { 0.1, 0.9 } end
    if R(8) == 1 then q, ed[1] = S:hostile() else ed[1] = type(q) == "table" and "{0.1, 0.9}" or fmt(q) end
    drawn_list = ed[1] == "{0.1, 0.9}" -- a hostile table is not modelled (it may hold {64, 3})
    extra[1] = q
  end
  local method = R(2) == 1
  H.add_victims(S, { t })
  local args = {}
  if fn == "topk" or fn == "quantile" then args[1] = ed[1] or "nil" end
  args[#args + 1] = dimd
  if od then args[#args + 1] = od end
  local desc = string.format("%s%s(%s, %s)", method and "T." or "dlpack.", fn, t.desc, table.concat(args, ", "))
  local kt = H.know(env, t)
  local f = method and env.T[fn] or env.dlpack[fn]
  local ok, r1, r2
  if fn == "unique" then
    dim = nil
    desc = string.format("%s%s(%s%s)", method and "T." or "dlpack.", fn, t.desc, od and (", " .. od) or "")
    ok, r1, r2 = S:call(desc, f, t.v, opts)
  elseif fn == "topk" or fn == "quantile" then -- (k or q may be a hostile nil)
    ok, r1, r2 = S:call(desc, f, t.v, extra[1], dim, opts)
  else ok, r1, r2 = S:call(desc, f, t.v, dim, opts) end
  local function done()
    if type(r1) == "userdata" then pcall(env.T.release, r1) end
    if type(r2) == "userdata" then pcall(env.T.release, r2) end
    H.drop(env, H.fresh_recs({ t }), nil, nil)
  end
  if not kt or not S:quiet() or (od and not opts) then return done() end
  -- the prediction: nil err and not unknown means the call must succeed as modelled
  local err, unknown
  if kt.weak then err = "not a tensor"
  elseif kt.dtype == "complex64" or kt.dtype == "complex128" then -- (operand_error refuses complex)
    if fn == "cumsum" or fn == "cumprod" then unknown = true else err = "complex" end
  else err = H.operand_error({ kt }) end
  if not err and type(opts) == "table" then
    if getmetatable(opts) then unknown = true end
    for name, v in next, opts do -- (not pairs: opts may have a hostile __pairs)
      local ty = OPTS[fn][name]
      if not ty then err = "unknown option"
      elseif ty == "boolean" and type(v) ~= "boolean" then err = "option type"
      elseif ty == "dim" and math.type(v) ~= "integer" then err = "option type"
      elseif ty == "dim" and not model.dim(v, #kt.shape) then err = "dim"
      elseif ty == "dtype" and not CM.COMPUTES[v] then unknown = true end
    end
  elseif not err and opts ~= nil then
    unknown = true
  end
  local rd
  if not err and not unknown then
    local why
    rd, why = result_dtype(fn, kt.dtype, opts and opts.dtype)
    if not rd then err = why end
    if (fn == "cumsum" or fn == "cumprod") and opts and opts.dtype and kind(opts.dtype) == "c" then unknown = true end
  end
  local d0
  if not err and not unknown then
    if dim == nil then
      if fn == "softmax" or fn == "log_softmax" then err = "dim" end
    elseif type(dim) ~= "number" or math.type(dim) ~= "integer" then
      unknown = true
    else
      local n = #kt.shape
      if n == 0 then
        if dim ~= 1 and dim ~= -1 then err = "dim" end
      else
        d0 = model.dim(dim, n)
        if not d0 then err = "dim" end
      end
    end
  end
  local line = 1
  if not err and not unknown and #kt.shape > 0 then
    local ld = d0 or #kt.shape
    if fn ~= "median" and fn ~= "quantile" and fn ~= "cumsum" and fn ~= "cumprod" then line = kt.shape[ld]
    elseif dim ~= nil then line = kt.shape[ld]
    else line = model.numel(kt.shape) end
  end
  if not err and not unknown and fn == "topk" then
    local k = extra[1]
    if math.type(k) ~= "integer" then unknown = true
    elseif k < 0 or k > line then err = "k out of range" end
  end
  if not err and not unknown and fn == "quantile" then
    if kt.dtype == "bool" then err = "bool"
    elseif type(extra[1]) == "number" then
      local q = extra[1]
      if not (q >= 0 and q <= 1) then err = "q range" elseif line == 0 then err = "empty" end
    elseif drawn_list then
      if line == 0 then err = "empty" end
    else unknown = true end
  end
  if err then
    if ok then S:fail(string.format("%s: succeeded where the model expects an error (%s)", desc, err)) end
    return done()
  end
  if unknown then return done() end
  if not ok then
    S:fail(desc .. ": raised: " .. tostring(r1))
    return done()
  end
  S:check_note(desc)
  if fn == "median" or fn == "quantile" then return done() end -- dtype and shape: the oracle's
  if fn == "unique" then
    local inf = env.info(r1)
    local ud = opts and opts.dim and model.dim(opts.dim, #kt.shape)
    if ud then -- the distinct slices along ud: t's shape but for ud, at most as many (one when t has slices)
      local good = inf and inf.dtype == kt.dtype and inf.ndim == #kt.shape
      for k = 1, #kt.shape do
        if good and k ~= ud and inf.shape[k] ~= kt.shape[k] then good = false end
      end
      if good and (inf.shape[ud] > kt.shape[ud] or (kt.shape[ud] > 0) ~= (inf.shape[ud] > 0)) then good = false end
      if not good then S:fail(desc .. ": the slices do not have the input's shape and dtype, at most as many") end
    elseif not inf or inf.dtype ~= kt.dtype or inf.ndim ~= 1 or inf.numel > model.numel(kt.shape) then
      S:fail(desc .. ": the values are not a 1-d tensor of the input's dtype, at most as long")
    end
    return done()
  end
  local shape = {}
  for k = 1, #kt.shape do shape[k] = kt.shape[k] end
  if (fn == "cumsum" or fn == "cumprod") and dim == nil then shape = { model.numel(kt.shape) } end
  if fn == "topk" and #shape > 0 then shape[d0 or #shape] = extra[1] end
  local first = (fn == "sort" and opts and opts.indices == false) and r1 or r1
  local inf = env.info(first)
  if not inf then S:fail(desc .. ": the result is not a tensor"); return done() end
  local want_dtype = rd
  if fn == "argsort" then want_dtype = "int64" end
  if inf.dtype ~= want_dtype then S:fail(string.format("%s: dtype %s, expected %s", desc, inf.dtype, want_dtype)) end
  if not model.same_list(inf.shape, shape) then
    S:fail(string.format("%s: shape %s, expected %s", desc, G.fmt_list(inf.shape), G.fmt_list(shape)))
    return done()
  end
  -- values of 1-d known operands
  if kt.tbl and #kt.shape == 1 and G.ELEM[kt.dtype] and kind(kt.dtype) ~= "c" then
    local list = kt.tbl
    if fn == "sort" or fn == "argsort" or fn == "topk" then
      local descending = (fn == "topk" and not (opts and opts.largest == false)) or
        (fn ~= "topk" and opts and opts.descending) or false
      local want = order(list, kt.dtype, descending)
      local pos = fn == "argsort" and r1 or ((fn == "sort" and opts and opts.indices == false) and nil or r2)
      if pos then
        local got = env.values(pos, env.info(pos))
        for i = 1, #got do
          if got[i] ~= want[i] then
            S:fail(string.format("%s: position %d is %s, the model says %d", desc, i, fmt(got[i]), want[i]))
            break
          end
        end
      end
    elseif fn == "cumsum" and rd == "int64" and kind(kt.dtype) ~= "f" and dim ~= nil then
      local got, acc = env.values(r1, inf), 0
      for i = 1, #list do
        local v = list[i]
        if kt.dtype == "bool" then v = v and 1 or 0 end
        if kt.dtype == "uint64" then break end
        acc = acc + v
        if got[i] ~= acc then
          S:fail(string.format("%s: element %d is %s, the model says %s", desc, i, fmt(got[i]), fmt(acc)))
          break
        end
      end
    end
  end
  return done()
end

function M.register(op, env)
  op("sort", 4, function(S) sort_op(S, env) end)
end

return M
