-- The fuzzer's operations on the reductions, the matrix products and joining (registered by
-- spec/fuzz/compute.lua, whose operands and model helpers they share):
--
--   reduce   sum prod mean var std min max argmin argmax any all, as module functions and methods,
--            with dim nil, a number, a table of dims (repeated, out of range, evil) and opts
--            (keepdim, dtype, correction, unknown keys, hostile values)
--   matmul   matmul and dot of 1-d, 2-d and batched operands (shapes that multiply or not)
--   join     cat and stack of lists of tensors (agreeing or not, evil lists), flip
--
-- The model: the errors a valid-looking call must raise, the result dtype and shape (or a Lua
-- value over all dims), and the elements where Lua computes them exactly: integer sums and
-- products (wrapping in int64/uint64), float sums and means of values whose partial sums are
-- exact, min/max (NaN first), argmin/argmax (the first index, the first NaN), any/all, integer
-- and bool products and exact float products, cat/stack/flip values.
local G = require "fuzz.gen"
local CM = require "fuzz.compute_model"
local model = require "fuzz.model"
local H = require("fuzz.compute").H

local R = math.random
local fmt = G.fmt
local M = {}

local REDUCE = { "sum", "prod", "mean", "var", "std", "min", "max", "argmin", "argmax", "any", "all" }

local function kind(d) return CM.kind(d) end

-- A resolved dimension (1..nd), or nil.
local function resolve(d, nd)
  d = math.tointeger(d) -- integral floats count (lua_tointegerx)
  if not d then return nil end
  if d < 0 then d = nd + d + 1 end
  if d < 1 or d > nd then return nil end
  return d
end

-- The reduced dims of `dim` for a tensor of nd dims: a set (list of booleans), or nil, reason.
local function reduced_dims(dim, nd)
  local set = {}
  if dim == nil then
    for k = 1, nd do set[k] = true end
    return set
  end
  if type(dim) == "number" then
    local d = resolve(dim, nd)
    if not d then return nil, "dim" end
    set[d] = true
    return set
  end
  if type(dim) ~= "table" or getmetatable(dim) then return nil, "unknown" end
  if #dim > 64 then return nil, "dim" end
  if #dim == 0 and next(dim) ~= nil then return nil, "dim" end -- {n = 3}: opts where dim goes, refused
  for i = 1, #dim do
    local d = resolve(dim[i], nd)
    if not d or set[d] then return nil, "dim" end
    set[d] = true
  end
  return set
end

-- Elements of tbl (shape `shape`) grouped by the kept dims: a list over the output's row-major
-- cells (kept dims only) of row-major lists over the reduced dims.
local function groups(tbl, shape, set)
  local kept, red = {}, {}
  for k = 1, #shape do
    if set[k] then red[#red + 1] = shape[k] else kept[#kept + 1] = shape[k] end
  end
  local out = {}
  CM.each(kept, function(kidx)
    local list = {}
    local idx = {}
    CM.each(red, function(ridx)
      local a, b = 1, 1
      for k = 1, #shape do
        if set[k] then idx[k] = ridx[b]; b = b + 1 else idx[k] = kidx[a]; a = a + 1 end
      end
      list[#list + 1] = model.at(tbl, idx)
    end)
    out[#out + 1] = list
  end)
  return out, kept, red
end

-- Are float values "nice" (finite, multiples of 1/16 up to 2048): every partial sum of up to 64 of
-- them is exact in float32 and float64, whatever the order.
local function nice(list)
  for _, v in ipairs(list) do
    if v ~= v or v == math.huge or v == -math.huge or math.abs(v) > 2048 or (v * 16) % 1 ~= 0 then return false end
  end
  return true
end
local function has_nan(list)
  for _, v in ipairs(list) do if v ~= v then return true end end
  return false
end

local function result_dtype(fn, d, dopt)
  if dopt and (fn == "sum" or fn == "prod" or fn == "mean" or fn == "var" or fn == "std") then return dopt end
  local k = kind(d)
  if fn == "sum" or fn == "prod" then
    if k == "u" then return "uint64" end
    if k == "b" or k == "i" then return "int64" end
    return d
  end
  if fn == "mean" or fn == "var" or fn == "std" then return k == "f" and d or "float64" end
  if fn == "argmin" or fn == "argmax" then return "int64" end
  if fn == "any" or fn == "all" then return "bool" end
  return d
end

local function less(d, x, y)
  if d == "bool" then return (x and 1 or 0) < (y and 1 or 0) end
  if d == "uint64" then return math.ult(x, y) end
  return x < y
end

-- The value (and index) of reduction fn over `list` (elements of dtype d), result dtype rd; nil
-- where not modelled.
local function reduce_list(fn, list, d, rd)
  local n = #list
  if fn == "any" or fn == "all" then
    local any, all = false, true
    for _, v in ipairs(list) do
      local t
      if d == "bool" then t = v else t = v ~= 0 end
      if t then any = true else all = false end
    end
    if fn == "any" then return any end
    return all
  end
  if fn == "min" or fn == "max" or fn == "argmin" or fn == "argmax" then
    local best, bi = list[1], 1
    if kind(d) == "f" then
      for i, v in ipairs(list) do
        if v ~= v then
          if fn == "argmin" or fn == "argmax" then return i end
          return v, i
        end
      end
    end
    for i = 2, n do
      local v = list[i]
      if (fn == "min" or fn == "argmin") and less(d, v, best) then best, bi = v, i end
      if (fn == "max" or fn == "argmax") and less(d, best, v) then best, bi = v, i end
    end
    if fn == "argmin" or fn == "argmax" then return bi end
    return best, bi
  end
  if fn == "sum" or fn == "prod" then
    if kind(rd) ~= "f" and kind(rd) ~= "b" then
      local acc = fn == "sum" and 0 or 1
      for _, v in ipairs(list) do
        local x = CM.convert(v, d, rd)
        if x == nil then return nil end
        if fn == "sum" then acc = acc + x else acc = acc * x end
      end
      return CM.wrap(rd, acc)
    end
    if fn == "prod" or kind(rd) ~= "f" then return nil end
    local xs = {}
    for i, v in ipairs(list) do
      xs[i] = CM.convert(v, d, rd)
      if xs[i] == nil then return nil end
    end
    if has_nan(xs) then return 0 / 0 end
    if not nice(xs) then return nil end
    local acc = 0.0
    for _, x in ipairs(xs) do acc = acc + x end
    return CM.round(rd, acc)
  end
  if fn == "mean" then
    if kind(rd) ~= "f" then return nil end
    if n == 0 then return 0 / 0 end
    local xs = {}
    for i, v in ipairs(list) do
      if kind(d) ~= "f" and type(v) == "number" and math.abs(v) > 2048 then return nil end
      xs[i] = CM.convert(v, d, rd == "float64" and "float64" or rd)
      if xs[i] == nil then return nil end
    end
    if has_nan(xs) then return 0 / 0 end
    if not nice(xs) then return nil end
    local acc = 0.0
    for _, x in ipairs(xs) do acc = acc + x end
    return CM.round(rd, acc / n)
  end
  return nil -- var, std
end

local function draw_dim(S, nd)
  local mode, r = R(10), R(0, 1 << 20)
  if mode <= 4 then return nil, "nil" end
  if mode <= 7 then
    local d = 1 + r % math.max(nd, 1)
    if (r >> 6) % 3 == 0 then d = d - nd - 1 end
    if (r >> 8) % 8 == 0 then d = nd + 1 + (r >> 10) % 3 end
    return d, fmt(d)
  end
  if mode <= 9 then
    local list = {}
    for k = 1, nd do
      if (r >> k) % 2 == 0 then list[#list + 1] = ((r >> (k + 8)) % 3 == 0) and k - nd - 1 or k end
    end
    if (r >> 16) % 6 == 0 then list[#list + 1] = 1 end -- maybe repeated
    return list, G.fmt_list(list)
  end
  if R(2) == 1 then
    local base = {}
    for k = 1, math.min(nd, 2) do base[k] = k end
    return S:evil(base)
  end
  return S:hostile()
end

local function reduce(S, env)
  local fn = G.pick(REDUCE)
  local rs = H.result_shape()
  local t = H.operand(S, env, rs, { tensor = true })
  local nd = t.rec and #t.rec.shape or #rs
  local dim, dimd = draw_dim(S, nd)
  local omode = R(12)
  local dopt = G.pick({ "int8", "int64", "uint64", "float32", "float64", "float16", "bool", "complex64", "nosuch" })
  local kd = R(2) == 1
  local corr = G.pick({ 0, 1, 2, 0.5, -1, 1 / 0 })
  local hv, hd = S:hostile()
  local opts, od
  if omode <= 5 then od = nil
  elseif omode <= 7 then opts, od = { keepdim = kd }, "{keepdim = " .. tostring(kd) .. "}"
  elseif omode == 8 then opts, od = { dtype = dopt }, "{dtype = " .. fmt(dopt) .. "}"
  elseif omode == 9 then opts, od = { correction = corr }, "{correction = " .. fmt(corr) .. "}"
  elseif omode == 10 then
    opts, od = { keepdim = kd, dtype = dopt }, "{keepdim = " .. tostring(kd) .. ", dtype = " .. fmt(dopt) .. "}"
  elseif omode == 11 then opts, od = { keepdims = true }, "{keepdims = true}"
  else opts, od = hv, hd end
  local method = R(2) == 1
  H.add_victims(S, { t })
  local desc = string.format("%s%s(%s, %s%s)", method and "T." or "dlpack.", fn, t.desc, dimd,
    od and (", " .. od) or "")
  local kt = H.know(env, t)
  local f = method and env.T[fn] or env.dlpack[fn]
  local ok, r1, r2 = S:call(desc, f, t.v, dim, opts)
  if not kt or not S:quiet() then H.drop(env, H.fresh_recs({ t }), nil, nil); return end
  if omode >= 11 then
    if ok and omode == 11 then S:fail(desc .. ": an unknown option was accepted") end
    H.drop(env, H.fresh_recs({ t }), nil, nil)
    return
  end
  -- the prediction
  local err, unknown
  if kt.weak then err = "not a tensor"
  elseif kt.dtype == "complex64" or kt.dtype == "complex128" then unknown = true
  else err = H.operand_error({ kt }) end
  local keepdim = opts and opts.keepdim or false
  local has_dtype = opts and opts.dtype ~= nil
  if not err and not unknown then
    if has_dtype then
      if fn ~= "sum" and fn ~= "prod" and fn ~= "mean" and fn ~= "var" and fn ~= "std" then err = "no dtype here"
      elseif not CM.COMPUTES[opts.dtype] then
        if opts.dtype == "complex64" and fn ~= "var" and fn ~= "std" then unknown = true else err = "dtype" end
      elseif (fn == "mean" or fn == "var" or fn == "std") and kind(opts.dtype) ~= "f" then err = "dtype kind"
      end
    end
    if opts and opts.correction ~= nil and fn ~= "var" and fn ~= "std" then err = "correction" end
    if opts and opts.correction == 1 / 0 then err = "correction" end
    if opts and type(opts.correction) == "number" and opts.correction < 0 then unknown = true end
  end
  local set, why
  if not err and not unknown then
    set, why = reduced_dims(dim, #kt.shape)
    if not set then
      if why == "unknown" then unknown = true else err = why end
    end
  end
  if not err and not unknown and (fn == "min" or fn == "max" or fn == "argmin" or fn == "argmax") then
    local count = 1
    for k = 1, #kt.shape do if set[k] then count = count * kt.shape[k] end end
    if count == 0 then err = "empty" end
  end
  if err then
    if ok then S:fail(string.format("%s: succeeded where the model expects an error (%s)", desc, err)) end
  elseif not unknown then
    if not ok then
      S:fail(desc .. ": raised: " .. tostring(r1))
    else
      S:check_note(desc)
      local rd = result_dtype(fn, kt.dtype, has_dtype and opts.dtype or nil)
      local full = dim == nil and not keepdim
      local gs
      if kt.tbl then gs = groups(kt.tbl, kt.shape, set) end
      if full then
        if type(r1) == "userdata" then
          S:fail(desc .. ": over all dims gave a tensor")
        elseif gs then
          local want = reduce_list(fn, gs[1], kt.dtype, rd)
          if rd == "bool" and fn ~= "any" and fn ~= "all" and want ~= nil and type(want) ~= "boolean" then
            want = want ~= 0
          end
          if want ~= nil and (type(r1) ~= type(want) or not model.same_value(r1, want)) then
            S:fail(string.format("%s: %s, the model says %s", desc, fmt(r1), fmt(want)))
          end
        end
      else
        local shape = {}
        for k = 1, #kt.shape do
          if not set[k] then shape[#shape + 1] = kt.shape[k] elseif keepdim then shape[#shape + 1] = 1 end
        end
        local inf = env.info(r1)
        if not inf then
          S:fail(desc .. ": the result is not a tensor")
        else
          if inf.dtype ~= rd then S:fail(string.format("%s: dtype %s, expected %s", desc, inf.dtype, rd)) end
          if not model.same_list(inf.shape, shape) then
            S:fail(string.format("%s: shape %s, expected %s", desc, G.fmt_list(inf.shape), G.fmt_list(shape)))
          elseif gs and inf.numel <= 512 then
            local got = env.values(r1, inf)
            local gidx = (fn == "min" or fn == "max") and env.values(r2, env.info(r2)) or nil
            if (fn == "min" or fn == "max") and not gidx then S:fail(desc .. ": no tensor of indices") end
            local flat_got = model.flat(got, shape)
            local flat_idx = gidx and model.flat(gidx, shape)
            for c, list in ipairs(gs) do
              local want, wi = reduce_list(fn, list, kt.dtype, rd)
              if rd == "bool" and fn ~= "any" and fn ~= "all" and want ~= nil and type(want) ~= "boolean" then
                want = want ~= 0
              end
              if want ~= nil and (type(flat_got[c]) ~= type(want) or not model.same_value(flat_got[c], want)) then
                S:fail(string.format("%s: cell %d is %s, the model says %s", desc, c, fmt(flat_got[c]), fmt(want)))
                break
              end
              if flat_idx and wi and flat_idx[c] ~= wi then
                S:fail(string.format("%s: index of cell %d is %s, the model says %d", desc, c, fmt(flat_idx[c]), wi))
                break
              end
            end
          end
        end
      end
    end
  end
  local keep = {}
  if type(r1) == "userdata" then pcall(env.T.release, r1) end
  if type(r2) == "userdata" then pcall(env.T.release, r2) end
  H.drop(env, H.fresh_recs({ t }), nil, keep)
end

---------------------------------------------------------------------------
-- matmul, dot

local function mm_shape(nd, outer, k, batch)
  if nd == 1 then return { k } end
  local s = { outer, k }
  if nd == 3 then table.insert(s, 1, batch) end
  return s
end

local function matmul(S, env)
  local which = R(4) == 1 and "dot" or "matmul"
  local m, k, n = G.pick({ 0, 1, 2, 3, 4 }), G.pick({ 0, 1, 2, 3, 4 }), G.pick({ 0, 1, 2, 3, 4 })
  local nda, ndb = G.pick({ 1, 2, 2, 3 }), G.pick({ 1, 2, 2, 3 })
  local ba, bb = G.pick({ 1, 2, 3 }), G.pick({ 1, 2, 3 })
  local kb = R(8) == 1 and k + 1 or k
  local da, db = G.pick(H.ODTYPES), G.pick(H.ODTYPES)
  local sa = mm_shape(nda, m, k, ba)
  local sbb = mm_shape(ndb, n, kb, bb)
  -- b is {..., k, n}: drawn as {..., n, k} and transposed when 2-d or more
  local sb = H.copy_list(sbb)
  local mode = R(10)
  local a, b
  if mode <= 8 then
    a = { rec = H.fresh(S, env, da, sa) }
    local rb = H.fresh(S, env, db, sb)
    if ndb >= 2 then
      local ok, v = pcall(env.T.transpose, rb.t, -1, -2)
      if ok then rb = { t = v, base = rb.base, fresh = true, dtype = rb.dtype, name = rb.name .. "'",
        shape = (function()
          local s = H.copy_list(sb)
          s[#s], s[#s - 1] = s[#s - 1], s[#s]
          return s
        end)(), released = rb.released, readonly = rb.readonly, expanded = rb.expanded, map = rb.map,
        bshape = rb.bshape, layout = rb.layout } end
    end
    b = { rec = rb }
    a.v, a.desc, b.v, b.desc = a.rec.t, a.rec.name, rb.t, rb.name
  else
    a = H.operand(S, env, sa)
    b = H.operand(S, env, sb)
  end
  H.add_victims(S, { a, b })
  local desc = string.format("dlpack.%s(%s, %s)", which, a.desc, b.desc)
  local ka, kb2 = H.know(env, a), H.know(env, b)
  local ok, res = S:call(desc, env.dlpack[which], a.v, b.v)
  if ka and kb2 and S:quiet() then
    local err
    if ka.weak or kb2.weak then err = "not a tensor" else err = H.operand_error({ ka, kb2 }) end
    local A, B = ka.shape, kb2.shape
    if not err then
      if #A == 0 or #B == 0 then err = "0-d" end
      if which == "dot" and (#A > 2 or #B > 2) then err = "dot dims" end
    end
    local rshape, rdt
    if not err then
      local ai = A[#A]
      local bi = #B == 1 and B[1] or B[#B - 1]
      if ai ~= bi then err = "inner" end
      local abatch, bbatch = {}, {}
      for i = 1, #A - 2 do abatch[i] = A[i] end
      for i = 1, #B - 2 do bbatch[i] = B[i] end
      local batch = CM.broadcast({ abatch, bbatch })
      if not err and not batch then err = "batch" end
      if not err then
        rshape = H.copy_list(batch)
        if #A >= 2 then rshape[#rshape + 1] = A[#A - 1] end
        if #B >= 2 then rshape[#rshape + 1] = B[#B] end
        rdt = CM.promote(ka.dtype, kb2.dtype)
      end
    end
    if err then
      if ok then S:fail(string.format("%s: succeeded where the model expects an error (%s)", desc, err)) end
    else
      if not ok then S:fail(desc .. ": raised: " .. tostring(res))
      else
        S:check_note(desc)
        -- the value at a result index: the inner product of a row of A and a column of B
        local kk = A[#A]
        local function cell(idx)
          if not (ka.tbl and kb2.tbl) then return nil end
          local nb = #rshape - ((#A >= 2) and 1 or 0) - ((#B >= 2) and 1 or 0)
          local bidx = {}
          for i = 1, nb do bidx[i] = idx[i] end
          local row = (#A >= 2) and idx[nb + 1] or nil
          local col = (#B >= 2) and idx[#idx] or nil
          local acc = 0
          if kind(rdt) == "f" then acc = 0.0 elseif rdt == "bool" then acc = false end
          local floats = {}
          for j = 1, kk do
            local ia, ib = {}, {}
            local offa, offb = nb - (#A - 2), nb - (#B - 2)
            for i = 1, #A - 2 do ia[i] = (A[i] == 1) and 1 or bidx[offa + i] end
            for i = 1, #B - 2 do ib[i] = (B[i] == 1) and 1 or bidx[offb + i] end
            if #A >= 2 then ia[#ia + 1] = row end
            ia[#ia + 1] = j
            ib[#ib + 1] = j
            if #B >= 2 then ib[#ib + 1] = col end
            local x = CM.convert(model.at(ka.tbl, ia), ka.dtype, rdt)
            local y = CM.convert(model.at(kb2.tbl, ib), kb2.dtype, rdt)
            if x == nil or y == nil then return nil end
            if rdt == "bool" then acc = acc or (x and y)
            elseif kind(rdt) == "f" then floats[#floats + 1] = x; floats[#floats + 1] = y
            else acc = acc + x * y end
          end
          if rdt == "bool" then return acc end
          if kind(rdt) ~= "f" then return CM.wrap(rdt, acc) end
          for _, v in ipairs(floats) do
            if v ~= v or math.abs(v) > 64 or (v * 4) % 1 ~= 0 then return nil end
          end
          for i = 1, #floats, 2 do acc = acc + floats[i] * floats[i + 1] end
          return CM.round(rdt, acc)
        end
        if #A == 1 and #B == 1 then
          local want = cell({})
          if type(res) == "userdata" then S:fail(desc .. ": two 1-d operands gave a tensor")
          elseif want ~= nil and (type(res) ~= type(want) or not model.same_value(res, want)) then
            S:fail(string.format("%s: %s, the model says %s", desc, fmt(res), fmt(want)))
          end
        else
          local inf = env.info(res)
          if not inf then S:fail(desc .. ": the result is not a tensor")
          elseif inf.dtype ~= rdt then S:fail(string.format("%s: dtype %s, expected %s", desc, inf.dtype, rdt))
          elseif not model.same_list(inf.shape, rshape) then
            S:fail(string.format("%s: shape %s, expected %s", desc, G.fmt_list(inf.shape), G.fmt_list(rshape)))
          elseif inf.numel <= 512 then
            local want = model.build(rshape, function(idx) return cell(H.copy_list(idx)) end)
            local got = env.values(res, inf)
            local bad = got and H.first_diff(got, want, rshape)
            if bad then
              S:fail(string.format("%s: element %s is %s, the model says %s", desc, G.fmt_list(bad),
                fmt(model.at(got, bad)), fmt(model.at(want, bad))))
            end
          end
        end
      end
    end
  end
  if type(res) == "userdata" then pcall(env.T.release, res) end
  H.drop(env, H.fresh_recs({ a, b }), nil, nil)
end

---------------------------------------------------------------------------
-- cat, stack, flip

local function join(S, env)
  local which = G.pick({ "cat", "stack", "flip" })
  local rs = H.result_shape()
  local count = G.pick({ 1, 2, 2, 3 })
  local jd = R(math.max(#rs, 1) + 1) - 1 -- 0..nd: the joined dim (0: a hostile or out-of-range one)
  local neg = R(3) == 1
  local items = {}
  for i = 1, count do
    local s = H.copy_list(rs)
    if which == "cat" and jd >= 1 and jd <= #s then s[jd] = G.pick({ 0, 1, 2, 3 }) end
    if R(8) == 1 then s = H.result_shape() end -- may not agree
    local mode = R(10)
    if mode <= 8 then
      local rec = H.fresh(S, env, G.pick(H.ODTYPES), s)
      items[i] = { rec = rec, v = rec.t, desc = rec.name }
    else
      items[i] = H.operand(S, env, s)
    end
  end
  local lmode = R(10)
  local ev, evd = S:evil({})
  local list, ld = {}, {}
  for i = 1, count do list[i], ld[i] = items[i].v, items[i].desc end
  local listd = "{" .. table.concat(ld, ", ") .. "}"
  if lmode == 1 then list, listd = {}, "{}"
  elseif lmode == 2 then
    for i = 1, count do rawset(ev, i, items[i].v) end
    list, listd = ev, evd .. "+" .. listd
  end
  local dim = jd
  if which == "stack" then dim = R(#rs + 2) - 1 end
  if neg and dim >= 1 then
    local n = which == "stack" and #rs + 1 or #rs
    dim = dim - n - 1
  end
  local hv, hd = S:hostile()
  local dmode = R(10)
  local dimv, dimd = dim, fmt(dim)
  if dmode == 1 then dimv, dimd = nil, "nil" elseif dmode == 2 then dimv, dimd = hv, hd end
  H.add_victims(S, items)
  local ok, res, desc
  local ks = {}
  for i = 1, count do ks[i] = H.know(env, items[i]) end
  if which == "flip" then
    local t = items[1]
    local fd
    if dmode == 3 then fd, dimd = { 1, 1 }, "{1, 1}" elseif dmode <= 5 then fd = dimv else fd = { dimv } end
    if dmode > 5 then dimd = "{" .. dimd .. "}" end
    desc = string.format("%s:flip(%s)", t.desc, dimd)
    ok, res = S:call(desc, env.T.flip, t.v, fd)
    local kt = ks[1]
    if kt and S:quiet() and dmode ~= 2 then
      local err, set
      if kt.weak then err = "not a tensor" elseif kt.released then err = "released"
      elseif not kt.host then err = "device" else
        set = reduced_dims(fd, #kt.shape)
        if not set then err = "dims" end
      end
      if err then
        if ok then S:fail(desc .. ": succeeded where the model expects an error (" .. err .. ")") end
      elseif not ok then
        if kt.computes then S:fail(desc .. ": raised: " .. tostring(res)) end
      else
        S:check_note(desc)
        local inf = env.info(res)
        if not inf or inf.dtype ~= kt.dtype or not model.same_list(inf.shape, kt.shape) then
          S:fail(desc .. ": not a view of the same dtype and shape")
        elseif kt.tbl then
          local want = model.build(kt.shape, function(idx)
            local s = {}
            for k = 1, #idx do s[k] = set[k] and (kt.shape[k] - idx[k] + 1) or idx[k] end
            return model.at(kt.tbl, s)
          end)
          local got = env.values(res, inf)
          local bad = got and H.first_diff(got, want, kt.shape)
          if bad then S:fail(desc .. ": element " .. G.fmt_list(bad) .. " differs") end
        end
      end
    end
    if ok and type(res) == "userdata" and not rawequal(res, t.v) then pcall(env.T.release, res) end
    H.drop(env, H.fresh_recs(items), nil, nil)
    return
  end
  desc = string.format("dlpack.%s(%s, %s)", which, listd, dimd)
  ok, res = S:call(desc, env.dlpack[which], list, dimv)
  local known = lmode ~= 2 and dmode ~= 2
  for i = 1, count do if not ks[i] then known = false end end
  if known and S:quiet() then
    local err, unknown
    if lmode == 1 then err = "empty list" end
    local dtypes = {}
    for i = 1, (err and 0 or count) do
      local k = ks[i]
      if k.weak then err = "not a tensor" elseif k.released then err = "released"
      elseif not k.host then err = "device"
      elseif not k.computes then unknown = true
      else dtypes[#dtypes + 1] = k.dtype end
    end
    local rshape
    if not err and not unknown then
      local s1 = ks[1].shape
      local nd = #s1
      local d = dimv == nil and 1 or dimv
      if which == "cat" then
        d = resolve(d, nd)
        if nd == 0 then err = "0-d" elseif not d then err = "dim" end
        if not err then
          rshape = H.copy_list(s1)
          rshape[d] = 0
          for i = 1, count do
            local s = ks[i].shape
            if #s ~= nd then err = "ndim"; break end
            for k = 1, nd do if k ~= d and s[k] ~= s1[k] then err = "sizes" end end
            rshape[d] = rshape[d] + s[d]
          end
        end
        dimv = d
      else
        d = resolve(d, nd + 1)
        if not d then err = "dim" end
        for i = 2, count do if not model.same_list(ks[i].shape, s1) then err = "shapes" end end
        if not err then
          rshape = H.copy_list(s1)
          table.insert(rshape, d, count)
        end
        dimv = d
      end
    end
    if err then
      if ok then S:fail(string.format("%s: succeeded where the model expects an error (%s)", desc, err)) end
    elseif not unknown then
      if not ok then S:fail(desc .. ": raised: " .. tostring(res))
      else
        S:check_note(desc)
        local rdt = CM.promote_many(dtypes)
        local inf = env.info(res)
        if not inf then S:fail(desc .. ": the result is not a tensor")
        elseif inf.dtype ~= rdt then S:fail(string.format("%s: dtype %s, expected %s", desc, inf.dtype, rdt))
        elseif not model.same_list(inf.shape, rshape) then
          S:fail(string.format("%s: shape %s, expected %s", desc, G.fmt_list(inf.shape), G.fmt_list(rshape)))
        elseif inf.numel <= 512 then
          local want = model.build(rshape, function(idx)
            local i, s = 1, H.copy_list(idx)
            if which == "cat" then
              while s[dimv] > ks[i].shape[dimv] do s[dimv] = s[dimv] - ks[i].shape[dimv]; i = i + 1 end
            else
              i = table.remove(s, dimv)
            end
            if not ks[i].tbl then return nil end
            return CM.convert(model.at(ks[i].tbl, s), ks[i].dtype, rdt)
          end)
          local got = env.values(res, inf)
          local bad = got and H.first_diff(got, want, rshape)
          if bad then
            S:fail(string.format("%s: element %s is %s, the model says %s", desc, G.fmt_list(bad),
              fmt(model.at(got, bad)), fmt(model.at(want, bad))))
          end
        end
      end
    end
  end
  if type(res) == "userdata" then pcall(env.T.release, res) end
  H.drop(env, H.fresh_recs(items), nil, nil)
end

function M.register(op, env)
  op("reduce", 6, function(S) reduce(S, env) end)
  op("matmul", 3, function(S) matmul(S, env) end)
  op("join", 3, function(S) join(S, env) end)
end

return M
