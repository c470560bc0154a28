#!/usr/bin/env lua5.4
--[[
The fuzzer of the safe API (everything `require "dlpack"` gives; never
`dlpack.unsafe`, never the debug library against the module).

  lua5.4 spec/fuzz/fuzz.lua [--seed S] [--steps N] [--seeds K] [--seconds T]
                            [--corpus M] [--verbose]

Runs seed S (then S+1, ... for K seeds, or until T seconds have passed): N
random calls of the safe API with hostile arguments (wrong types, huge,
negative and NaN numbers, numeric strings, light userdata, tables whose
metamethods throw, lie, or release tensors in the middle of a call, finalizers
that release tensors or re-enter the module, producers written in Lua that
return anything), each checked against a small pure-Lua model when its
arguments were valid; then M malformed foreign tensors made by fabricate.so
(spec/fuzz/corpus.lua). Every call runs under pcall: errors are normal. A
seed fails on a model violation or a wrong deleter count; a crash or a
sanitizer report ends the process. The same seed gives the same calls.
--verbose prints each call (flushed) before it runs, so the last line before
a crash names it. Exit status: 0 when every seed passed, 1 otherwise.
]]

local here = ((arg and arg[0]) or "spec/fuzz/fuzz.lua"):match("^(.*)/[^/]*$") or "."
package.path = here .. "/../?.lua;" .. package.path
local runner = require "fuzz.runner"
runner.paths(here)

local G = require "fuzz.gen"
local model = require "fuzz.model"
local CM = require "fuzz.compute_model"
local corpus = require "fuzz.corpus"

local options = { seed = 1, steps = 400, seeds = 1, seconds = nil, corpus = 30, verbose = false, without = {},
  contract = true }
runner.options("fuzz", options, "lua5.4 spec/fuzz/fuzz.lua [--seed S] [--steps N] [--seeds K] [--seconds T] "
    .. "[--corpus M] [--verbose] [--without raw,OP,...] [--skip-contract | --contract-only]", {
  ["--corpus"] = function(_, num) options.corpus = num("--corpus") end,
  ["--skip-contract"] = function() options.contract = false end,
  ["--contract-only"] = function() options.seeds = 0 end,
  ["--without"] = function(next_arg)
    for w in (next_arg() or ""):gmatch("[^,]+") do options.without[w] = true end
  end,
})

local dlpack = require "dlpack"
local okfab, fab = pcall(require, "fabricate")
if not okfab then fab = nil end
local T = dlpack.Tensor
local cuda = dlpack.cuda
local R = math.random
local fmt = G.fmt
local out = io.stdout
local VERBOSE = options.verbose
local WITHOUT = options.without

local NSLOT, NCAP = 24, 8
local VALID = 80 -- percent of arguments drawn valid
local HOST = { cpu = true, cuda_host = true, cuda_managed = true, rocm_host = true }

-- Finalizers and releasing metamethods act only while a fuzzed call runs, so
-- that the model checks between calls see a stable pool.
local armed = false
local CURRENT -- the running seed's state

local function hit(entry)
  if armed and entry and entry.t and not CURRENT.without.release then
    CURRENT.hits = CURRENT.hits + 1
    pcall(T.release, entry.t)
  end
end

local function live(t)
  local ok, err = pcall(T.numel, t)
  return ok, err
end

local function info(t)
  if type(t) ~= "userdata" then return nil end
  local ok, r = pcall(function()
    return { shape = t.shape, strides = t.strides, ndim = t.ndim, dtype = t.dtype, readonly = t.readonly,
      device = t.device, numel = t:numel(), ptr = t:data_ptr(), itemsize = t.itemsize, contig = t:is_contiguous() }
  end)
  if not ok then return nil end
  r.host = HOST[r.device] == true
  r.elem = G.ELEM[r.dtype] and r.host
  r.sub = G.SUBBYTE[r.dtype]
  return r
end

-- The Lua values t:totable() makes, tables and elements: an empty tensor of shape {2^31 - 1, 0}
-- makes 2^31 tables (minutes, and all the memory there is), so such calls are left out.
local function totable_values(inf)
  local count, rows = 1.0, 1.0
  for k = 1, #inf.shape - 1 do
    rows = rows * inf.shape[k]
    count = count + rows
  end
  return count + inf.numel
end

local function values(t, inf)
  if not (inf and inf.elem and inf.numel <= 512 and totable_values(inf) <= 1e5) then return nil end
  local ok, tbl = pcall(T.totable, t)
  if ok then return tbl end
  return nil
end

local function msg_has(err, pat) return type(err) == "string" and err:find(pat, 1, true) ~= nil end

---------------------------------------------------------------------------
-- The state of one seed

local S = {}
S.__index = S

function S.new(seed)
  return setmetatable({ seed = seed, step = 0, calls = 0, failures = {}, pool = {}, caps = {}, nserial = 0,
    hits = 0, hits0 = 0, disturbed = false, fab_expected = 0, dlpack = dlpack, fab = fab, T = T, last = "-",
    without = WITHOUT }, S)
end

function S:serial()
  self.nserial = self.nserial + 1
  return self.nserial
end

-- S:fail(msg) and S:note(desc) (what runs next: calls, corpus entries, checks in --verbose output)
runner.seed_methods(S, VERBOSE)

function S.check_note(_, label)
  if VERBOSE then
    out:write("    check ", label, "\n")
    out:flush()
  end
end

-- Finalizers that act during the next calls: release a victim, or re-enter the module.
function S:garbage()
  local ctx = self.ctx
  for _ = 1, R(0, 3) do
    local victim = ctx and ctx.victims[R(#ctx.victims)]
    local act = R(6)
    setmetatable({}, { __gc = function()
      if not armed or not victim then return end
      if act <= 3 then
        if not WITHOUT.finalizers then hit(victim) end
      elseif act == 4 then
        local ok, c = pcall(dlpack.to_dlpack, victim.t)
        if ok then pcall(dlpack.release_capsule, c) end
      elseif act == 5 then
        local ok, x = pcall(dlpack.zeros, { 3 }, "float64")
        if ok then pcall(T.release, x) end
      else
        local ok, x = pcall(dlpack.from_dlpack, victim.t)
        if ok then pcall(T.release, x) end
      end
    end })
  end
end

-- Runs f(...) under pcall with finalizers armed; returns pcall's results.
function S:call(desc, f, ...)
  self.calls = self.calls + 1
  self:garbage()
  self:note(desc)
  armed = true
  local r = table.pack(pcall(f, ...))
  armed = false
  -- anything released by a finalizer or a metamethod during this step's calls
  self.disturbed = self.hits ~= self.hits0
  return table.unpack(r, 1, r.n)
end

-- Stores tensor t in pool slot `slot`, releasing what was there.
function S:put(t, name, slot, rootid)
  local old = self.pool[slot]
  if old and old.t and not rawequal(old.t, t) then pcall(T.release, old.t) end
  self.pool[slot] = { t = t, name = name, root = rootid or name }
end

-- Stores t as put does when it has at most 4096 elements (the pool stays cheap to walk);
-- releases it otherwise.
function S:put_small(t, name, slot, rootid)
  local ok, n = pcall(T.numel, t)
  if ok and n <= 4096 then self:put(t, name, slot, rootid) else pcall(T.release, t) end
end

function S:put_cap(c, name, slot, known)
  local old = self.caps[slot]
  if old and old.cap then pcall(dlpack.release_capsule, old.cap) end
  self.caps[slot] = { cap = c, name = name, known = known }
end

---------------------------------------------------------------------------
-- Hostile values

local LIES = { 1, -1, 0, 2, 4611686018427387904, math.maxinteger, math.mininteger, "x", "2", true, false, 0 / 0,
  2.5, 1e308, -0.0 }

local FUNCS = { function() end, string.len, print, error, tostring }

function S.lcg()
  local x = R(1, 1 << 30)
  return function()
    x = (x * 1103515245 + 12345) % 2147483648
    return x >> 4
  end
end

-- A table whose metamethods throw, lie, release a victim, run the collector.
function S:evil(base)
  local ctx = self.ctx
  local victim = ctx.victims[R(#ctx.victims)]
  local vname = victim and victim.name or "?"
  local nextv = self:lcg()
  local tbl = {}
  if base then
    for i = 1, #base do tbl[i] = base[i] end
  else
    for i = 1, R(0, 4) do tbl[i] = R(1, 3) end
  end
  local mask = R(0, 2047)
  local mt, parts = {}, {}
  -- a budget of metamethod calls: a module that loops on a lying __len ends
  local budget = 2000
  local function spend()
    budget = budget - 1
    if budget < 0 then error("evil: metamethod budget spent") end
    return budget > 1950
  end
  if mask & 1 ~= 0 then
    local k = R(8)
    parts[#parts + 1] = "index" .. k
    mt.__index = function(_, _)
      local early = spend()
      if k == 1 then error("evil __index") end
      if k == 2 then hit(victim); return nextv() % 4 end
      if k == 3 then return LIES[nextv() % #LIES + 1] end
      if k == 4 then
        if early then collectgarbage() end
        return 1
      end
      if k == 5 then collectgarbage("step"); return nil end
      if k == 6 then hit(victim); error("evil __index after release") end
      if k == 7 then return coroutine.yield(1) end
      hit(victim)
      if early then collectgarbage() end
      return LIES[nextv() % #LIES + 1]
    end
  end
  if mask & 2 ~= 0 then
    local k = R(12)
    parts[#parts + 1] = "len" .. k
    mt.__len = function(self_)
      local early = spend()
      if k == 1 then error("evil __len") end
      if k == 2 then return -1 end
      if k == 3 then return 4611686018427387904 end
      if k == 4 then return math.maxinteger end
      if k == 5 then return 0.5 end
      if k == 6 then return "3" end
      if k == 7 then return (nextv() % 3 == 0) and 1000000 or nextv() % 5 end
      if k == 8 then hit(victim); return rawlen(self_) end
      if k == 9 then return 65 end
      if k == 10 then return nil end
      if k == 11 then
        if early then collectgarbage() end
        return rawlen(self_)
      end
      return rawlen(self_) + 1
    end
  end
  if mask & 4 ~= 0 then
    local k = R(3)
    parts[#parts + 1] = "tostring" .. k
    mt.__tostring = function()
      if k == 1 then error("evil __tostring") end
      if k == 2 then hit(victim); return "released " .. vname end
      return {}
    end
  end
  if mask & 8 ~= 0 then
    mt.__name = G.pick({ "evil%s%n", "dlpack.Tensor", 42 })
    parts[#parts + 1] = "name"
  end
  if mask & 16 ~= 0 then
    parts[#parts + 1] = "newindex"
    mt.__newindex = function() hit(victim); error("evil __newindex") end
  end
  if mask & 32 ~= 0 then
    parts[#parts + 1] = "ops"
    local f = function() hit(victim); return true end
    mt.__eq, mt.__lt, mt.__le, mt.__concat, mt.__unm, mt.__call = f, f, f, f, f, f
  end
  if mask & 64 ~= 0 then
    parts[#parts + 1] = "gc"
    mt.__gc = function() hit(victim) end
  end
  if mask & 128 ~= 0 then
    parts[#parts + 1] = "close"
    mt.__close = function() hit(victim) end
  end
  if mask & 256 ~= 0 then
    parts[#parts + 1] = "metatable"
    mt.__metatable = "locked"
  end
  if mask & 512 ~= 0 then
    parts[#parts + 1] = "pairs"
    mt.__pairs = function() hit(victim); return next, {}, nil end
  end
  setmetatable(tbl, mt)
  return tbl, "evil{" .. G.fmt_list(tbl, rawlen(tbl)):sub(2, -2) .. (#parts > 0 and "; " or "") ..
    table.concat(parts, ",") .. " -> " .. vname .. "}"
end

function S:hostile()
  local k = R(24)
  if k <= 4 then return G.hostile_number() end
  if k <= 6 then return G.hostile_string() end
  if k == 7 then return nil, "nil" end
  if k == 8 then
    local b = R(2) == 1
    return b, tostring(b)
  end
  if k == 9 then
    local i = R(#FUNCS)
    return FUNCS[i], "<function " .. i .. ">"
  end
  if k == 10 then return coroutine.create(function() end), "<coroutine>" end
  if k == 11 then
    if R(2) == 1 then return self.scratch_ptr, "<data_ptr of scratch>" end
    return self.dangling_ptr, "<data_ptr of a released tensor>"
  end
  if k == 12 then
    local c = self.caps[R(NCAP)]
    c.known = nil -- whatever it is passed to may consume it
    return c.cap, c.name
  end
  if k == 13 then
    local e = self.pool[R(NSLOT)]
    return e.t, e.name
  end
  if k == 14 then
    local j = R(8)
    if j == 1 then return {}, "{}" end
    if j == 2 then return { 1, 2 }, "{1, 2}" end
    if j == 3 then return { 1, "x" }, "{1, \"x\"}" end
    if j == 4 then return { { 1 } }, "{{1}}" end
    if j == 5 then return { n = 3 }, "{n = 3}" end
    if j == 6 then return { 1, nil, 3 }, "{1, nil, 3}" end
    if j == 7 then return { [0] = 1 }, "{[0] = 1}" end
    local t = {}
    t[1] = t
    return t, "<self-referencing table>"
  end
  if k <= 18 then return self:evil() end
  if k == 19 then
    if R(2) == 1 then return cuda.legacy_stream, "dlpack.cuda.legacy_stream" end
    return cuda.per_thread_stream, "dlpack.cuda.per_thread_stream"
  end
  if k == 20 then return io.stdout, "io.stdout" end
  if k == 21 then return self:producer() end
  if k == 22 then
    local t = {}
    for i = 1, R(1, 4) do t[i] = R(1, 3) end
    t[R(#t)] = G.pick(G.HOSTILE_NUMBERS)
    return t, G.fmt_list(t)
  end
  if k == 23 then
    local t = {}
    for i = 1, G.pick({ 64, 65, 100 }) do t[i] = 1 end
    return t, "{1 x " .. #t .. "}"
  end
  return math.maxinteger, "math.maxinteger"
end

-- A producer written in Lua: __dlpack and __dlpack_device return anything.
-- Returns the producer, its description, and what its __dlpack does.
function S:producer()
  local ctx = self.ctx
  local dk, devk = R(18), R(15)
  if WITHOUT.raw and (dk == 7 or dk == 13 or dk == 14 or dk == 15) then dk = 1 end
  local src = self.pool[R(NSLOT)]
  local capent = self.caps[R(NCAP)]
  local victim = ctx.victims[R(#ctx.victims)]
  local scratch = self.scratch_ptr
  local mt = {}
  local obj = setmetatable({}, mt)
  local dl
  if dk <= 3 then dl = function(_, o) return dlpack.to_dlpack(src.t, o) end
  elseif dk == 4 then
    dl = function()
      local c = dlpack.to_dlpack(src.t)
      dlpack.release_capsule(c)
      return c
    end
  elseif dk == 5 then
    capent.known = nil
    dl = function() return capent.cap end
  elseif dk == 6 then
    local v = G.pick({ 42, {}, "capsule", 0 / 0 })
    dl = function() return v end
  elseif dk == 7 then dl = function() return scratch, "dltensor_versioned" end
  elseif dk == 8 then dl = function() end
  elseif dk == 9 then dl = function() error("evil __dlpack") end
  elseif dk == 10 then dl = function() return src.t end
  elseif dk == 11 then dl = function(_, o) hit(victim); return dlpack.to_dlpack(src.t, o) end
  elseif dk == 12 then
    dl = function(_, o)
      local c = dlpack.to_dlpack(src.t, o)
      hit(src)
      collectgarbage()
      return c
    end
  elseif dk == 13 then
    dl = pairs
    mt.__pairs = function() return scratch, "dltensor_versioned" end
  elseif dk == 14 then dl = coroutine.wrap(function() return scratch, "dltensor_versioned" end)
  elseif dk == 15 then
    dl = table.unpack
    obj[1], obj[2] = scratch, "dltensor_versioned"
  elseif dk == 16 then dl = select
  elseif dk == 17 then dl = function(_, o) return dlpack.to_dlpack(src.t, o), 42, "extra" end
  else dl = function(self_) return dlpack.from_dlpack(self_) end
  end
  mt.__dlpack = dl
  local dev
  if devk <= 5 then dev = function() return 1, 0 end
  elseif devk == 6 then dev = function() return 2, 0 end
  elseif devk == 7 then
    local id = G.pick({ 2147483648, -1, math.maxinteger, 64 })
    dev = function() return 1, id end
  elseif devk == 8 then
    local ty = R(0, 20)
    dev = function() return ty, 0 end
  elseif devk == 9 then dev = function() return 0 / 0, 0 end
  elseif devk == 10 then dev = function() return "1", "0" end
  elseif devk == 11 then dev = function() return 1 end
  elseif devk == 12 then dev = function() end
  elseif devk == 13 then dev = function() error("evil __dlpack_device") end
  elseif devk == 14 then dev = function() hit(victim); return 1, 0 end
  end
  mt.__dlpack_device = dev
  local desc = string.format("producer{dlpack%d(%s%s), device%d}", dk, src.name,
    dk == 5 and (", " .. capent.name) or "", devk)
  return obj, desc, { dk = dk, devk = devk, src = src, raw = dk == 7 or dk == 13 or dk == 14 or dk == 15 }
end

---------------------------------------------------------------------------
-- Arguments: drawn valid (from the tensor's info) or hostile. The draws never
-- depend on the module's state: a released tensor gives an invalid argument.

function S:self_arg()
  local mode, e = R(100), self.pool[R(NSLOT)]
  self.ctx.victims[#self.ctx.victims + 1] = e
  if mode <= 4 then
    local v, d = self:hostile()
    return v, d, nil
  end
  return e.t, e.name, e
end

function S:dim_arg(inf, extra)
  local mode, r = R(100), R(0, 1 << 30)
  if mode > VALID then
    local v, d = self:hostile()
    return v, d, false
  end
  local n = inf and (inf.ndim + (extra and 1 or 0)) or 0
  if n == 0 then return 1, "1", false end
  local d = 1 + r % n
  if (r >> 8) % 3 == 0 then d = d - n - 1 end
  return d, fmt(d), true
end

function S:index_arg(size)
  local mode, r = R(100), R(0, 1 << 30)
  if mode > VALID then
    local v, d = self:hostile()
    return v, d, false
  end
  if not size or size < 1 then return 1, "1", false end
  local i = 1 + r % size
  if (r >> 8) % 3 == 0 then i = i - size - 1 end
  return i, fmt(i), true
end

function S:value_arg(dtype)
  local mode = R(100)
  local v = G.valid_value(dtype or "float64")
  if mode > VALID then
    local h, d = self:hostile()
    return h, d, false
  end
  if not dtype then return v, fmt(v), false end
  return v, fmt(v), true
end

function S:dtype_arg()
  local mode, d = R(100), G.pick(G.DTYPES)
  if mode > VALID then
    local v, desc = self:hostile()
    return v, desc, false
  end
  return d, fmt(d), true
end

function S:shape_arg()
  local mode, shape = R(100), G.valid_shape()
  if mode > VALID then
    if R(2) == 1 then
      local v, d = self:evil(shape)
      return v, d, false
    end
    local v, d = self:hostile()
    return v, d, false
  end
  return shape, G.fmt_list(shape), true
end

-- An opts table: valid fields from `valid` (a list of {key, value}), or hostile.
function S:opts_arg(choices)
  local mode, k = R(100), R(#choices)
  if mode > VALID then
    local j = R(4)
    if j == 1 then
      local v, d = self:hostile()
      return v, d, false
    end
    local base = choices[k]
    local tbl = {}
    if base then for key, val in pairs(base) do tbl[key] = val end end
    local keys = { "copy", "device", "stream", "max_version", "dtype", "dl_device", "priority" }
    local key = G.pick(keys)
    local v, d = self:hostile()
    if j == 2 then
      tbl[key] = v
      local e, ed = self:evil()
      for kk, vv in pairs(tbl) do rawset(e, kk, vv) end
      return e, ed .. "+{" .. key .. " = " .. d .. "}", false
    end
    tbl[key] = v
    return tbl, "{" .. key .. " = " .. d .. "}", false
  end
  local o = choices[k]
  if o == false then return nil, "nil", true end
  local parts, keys = {}, {}
  for key in pairs(o) do keys[#keys + 1] = key end
  table.sort(keys)
  for _, key in ipairs(keys) do
    local v = o[key]
    parts[#parts + 1] = key .. " = " .. (type(v) == "table" and G.fmt_list(v) or fmt(v))
  end
  -- a fresh copy each time: the module may not keep it
  local copy = {}
  for key, v in pairs(o) do
    if type(v) == "table" then
      local c = {}
      for i = 1, #v do c[i] = v[i] end
      copy[key] = c
    else
      copy[key] = v
    end
  end
  return copy, "{" .. table.concat(parts, ", ") .. "}", true
end

---------------------------------------------------------------------------
-- Model checks shared by the operations

-- Is everything still live, and did no finalizer or metamethod release a tensor?
function S:quiet(...)
  if self.disturbed then return false end
  for i = 1, select("#", ...) do
    local e = select(i, ...)
    if e ~= nil and not live(e) then return false end
  end
  return true
end

-- A valid call raised: allowed only when a tensor was released under it.
function S:valid_raised(err)
  if self.disturbed and msg_has(err, "released") then return end
  if self.disturbed then return end
  self:fail("a valid call raised: " .. tostring(err))
end

-- Checks a view result against its expected shape, strides (nil entries not
-- checked) and element map (view index -> source index).
function S:check_view(what, res, src_inf, src_tbl, shape, strides, map)
  self:check_note(what)
  local inf = info(res)
  if not inf then
    self:fail(what .. ": the result is not a live tensor")
    return
  end
  if not model.same_list(inf.shape, shape) then
    self:fail(string.format("%s: shape %s, expected %s", what, G.fmt_list(inf.shape), G.fmt_list(shape)))
    return
  end
  if inf.dtype ~= src_inf.dtype then self:fail(what .. ": dtype " .. inf.dtype .. " ~= " .. src_inf.dtype) end
  if strides and inf.numel > 0 then
    for d = 1, #shape do
      if strides[d] ~= nil and shape[d] > 1 and inf.strides[d] ~= strides[d] then
        self:fail(string.format("%s: strides %s, expected %s", what, G.fmt_list(inf.strides),
          G.fmt_list(strides, #shape)))
        break
      end
    end
  end
  if src_tbl and map then
    local got = values(res, inf)
    local want = model.build(shape, function(idx) return model.at(src_tbl, map(idx)) end)
    if got == nil then
      self:fail(what .. ": totable of the view raised")
    elseif not model.same_table(got, want) then
      self:fail(what .. ": the view's elements differ from the source's")
    end
  end
end

-- Exact conversions the model knows (nil: not modelled).
local function convert(v, from, to)
  if from == to then return v end
  -- integers into the narrow floats: one rounding (compute_model's exact reference)
  if G.INTRANGE[from] and CM.PREC[to] then return CM.int_round(to, v, from == "uint64") end
  if to == "float64" or (to == "float32" and (from == "float16" or from == "bfloat16" or from == "int8" or
      from == "uint8" or from == "int16" or from == "uint16" or from == "bool")) then
    if from == "bool" then return v and 1.0 or 0.0 end
    if math.type(v) == "integer" then
      if from == "uint64" and v < 0 then return nil end
      if math.abs(v) > (1 << 53) then return nil end
    end
    return v + 0.0
  end
  if to == "int64" then
    if from == "bool" then return v and 1 or 0 end
    if G.INTRANGE[from] then return v end
    if v ~= v then return 0 end
    if v >= 2.0 ^ 63 then return math.maxinteger end
    if v < -(2.0 ^ 63) then return math.mininteger end
    local tr = v >= 0 and math.floor(v) or math.ceil(v)
    return math.tointeger(tr)
  end
  if to == "bool" then
    if from == "bool" then return v end
    return v ~= 0
  end
  return nil
end

local function convert_table(tbl, shape, from, to)
  local ok = true
  local r = model.build(shape, function(idx)
    local v = convert(model.at(tbl, idx), from, to)
    if v == nil then ok = false end
    return v
  end)
  if ok then return r end
  return nil
end

-- A copy: same values (converted), a new independent memory.
function S:check_copy(what, res, src, src_inf, src_tbl, dtype)
  self:check_note(what)
  local inf = info(res)
  if not inf then self:fail(what .. ": the result is not a live tensor"); return end
  if not model.same_list(inf.shape, src_inf.shape) then
    self:fail(what .. ": shape " .. G.fmt_list(inf.shape) .. " ~= " .. G.fmt_list(src_inf.shape))
    return
  end
  dtype = dtype or src_inf.dtype
  if inf.dtype ~= dtype then self:fail(what .. ": dtype " .. inf.dtype .. ", expected " .. dtype) end
  if src_inf.numel > 0 and inf.ptr == src_inf.ptr then self:fail(what .. ": the copy shares the source's data") end
  if src_tbl and inf.elem then
    local want = convert_table(src_tbl, src_inf.shape, src_inf.dtype, dtype)
    local got = values(res, inf)
    if want and not model.same_table(got, want) then self:fail(what .. ": values differ from the source's") end
    -- independent memory: a write to the copy leaves the source alone
    if src_inf.numel > 0 and not inf.readonly and want then
      local idx = {}
      for d = 1, #inf.shape do idx[d] = 1 end
      local cur = model.at(got, idx)
      local new = (dtype == "bool") and not cur or ((cur == 1 or cur == 1.0) and 2 or 1)
      local args = {}
      for d = 1, #idx do args[d] = idx[d] end
      args[#idx + 1] = new
      local okset = pcall(T.set, res, table.unpack(args, 1, #idx + 1))
      if okset then
        local after = values(src, src_inf)
        if not model.same_table(after, src_tbl) then self:fail(what .. ": a write to the copy changed the source") end
      end
    end
  end
end

---------------------------------------------------------------------------
-- The catalog: every function and method of the safe API

local ops = {}
local function op(name, weight, fn) ops[#ops + 1] = { name = name, weight = weight, fn = fn } end

local function setup_pool(S_, slot, kind)
  -- a fresh tensor for a slot: any dtype, a small shape, sometimes a view
  local dtype, shape = G.pick(G.DTYPES), G.valid_shape()
  local k = kind or R(6)
  local v = G.valid_value(dtype)
  if not G.ELEM[dtype] and k == 1 then k = 3 end
  local name = "T" .. S_:serial()
  local desc, ok, t
  if dtype == "bool" and R(2) == 1 then
    -- non-canonical bools: any nonzero byte is true, for every function that reads them
    local b = {}
    for i = 1, model.numel(shape) do b[i] = G.pick({ 0, 0, 1, 2, 3, 0x7f, 0x80, 0xfe, 0xff }) end
    local bytes = string.char(table.unpack(b))
    desc = string.format("%s = dlpack.frombytes(%s, \"bool\", %s)", name, G.fmt_bytes(bytes), G.fmt_list(shape))
    ok, t = S_:call(desc, dlpack.frombytes, bytes, "bool", shape)
  elseif k == 1 then
    desc = string.format("%s = dlpack.full(%s, %s, %q)", name, G.fmt_list(shape), fmt(v), dtype)
    ok, t = S_:call(desc, dlpack.full, shape, v, dtype)
  elseif k == 2 then
    desc = string.format("%s = dlpack.empty(%s, %q)", name, G.fmt_list(shape), dtype)
    ok, t = S_:call(desc, dlpack.empty, shape, dtype)
  else
    desc = string.format("%s = dlpack.zeros(%s, %q)", name, G.fmt_list(shape), dtype)
    ok, t = S_:call(desc, dlpack.zeros, shape, dtype)
  end
  if ok then
    S_:put(t, name, slot)
  else
    S_:fail("creating a pool tensor raised: " .. tostring(t))
    S_.pool[slot] = { t = false, name = name .. "(failed)", root = name }
  end
end

op("refresh", 6, function(S_)
  setup_pool(S_, R(NSLOT))
end)

-- empty / zeros / full(shape, [value,] dtype, device)
op("create", 5, function(S_)
  local which = R(3)
  local slot = R(NSLOT)
  local shape, sd, sv = S_:shape_arg()
  local dtype, dd, dv = S_:dtype_arg()
  if R(8) == 1 then dtype, dd, dv = nil, "nil", true end -- dtype left out: float32
  local value, vd, vv = S_:value_arg(dv and (dtype or "float32") or "float64")
  local dmode, dev, devd = R(10), nil, "nil"
  if dmode == 1 then dev, devd = "cpu", "\"cpu\"" elseif dmode >= 9 then dev, devd = S_:hostile() end
  local name = "T" .. S_:serial()
  local ok, t
  if which == 1 then
    ok, t = S_:call(string.format("%s = dlpack.empty(%s, %s, %s)", name, sd, dd, devd), dlpack.empty, shape, dtype, dev)
  elseif which == 2 then
    ok, t = S_:call(string.format("%s = dlpack.zeros(%s, %s, %s)", name, sd, dd, devd), dlpack.zeros, shape, dtype, dev)
  else
    ok, t = S_:call(string.format("%s = dlpack.full(%s, %s, %s, %s)", name, sd, vd, dd, devd), dlpack.full, shape,
      value, dtype, dev)
  end
  local valid = sv and dv and (dmode <= 8) and
    (which ~= 3 or (vv and G.ELEM[dtype or "float32"] and (dtype or type(value) == "number")))
  if ok then
    local inf = info(t)
    if valid and inf then
      local want_dtype = dtype or "float32"
      if not model.same_list(inf.shape, shape) then S_:fail("created shape " .. G.fmt_list(inf.shape)) end
      if inf.dtype ~= want_dtype then S_:fail("created dtype " .. inf.dtype) end
      if inf.device ~= "cpu" then S_:fail("created on " .. inf.device) end
      if inf.readonly then S_:fail("created read-only") end
      if which ~= 1 and inf.elem then
        local fillv = value
        if which == 2 then
          fillv = 0
          if want_dtype == "bool" then fillv = false end
        end
        local got = values(t, inf)
        local want = model.build(shape, function() return fillv end)
        if not model.same_table(got, want) then S_:fail("created values differ from the fill value") end
      end
    end
    S_:put_small(t, name, slot)
  elseif valid and not S_.disturbed then
    S_:valid_raised(t)
  end
end)

-- dlpack.tensor(value [, dtype])
op("tensor", 4, function(S_)
  local slot, mode = R(NSLOT), R(100)
  local shape = G.valid_shape(4)
  local dk = R(5)
  local dtype = (dk == 1 and "bool") or (dk == 2 and "int64") or (dk == 3 and "float64") or G.pick(G.DTYPES)
  local explicit = R(2) == 1
  local nextv = S_:lcg()
  local function draw()
    local x = nextv()
    if dtype == "bool" then return x % 2 == 0 end
    local rng = G.INTRANGE[dtype]
    if rng then
      local lo, hi = math.max(rng[1], -300), math.min(rng[2], 300)
      return lo + x % (hi - lo + 1)
    end
    return (x % 401 - 200) / 4
  end
  local value, vd, valid
  if mode <= VALID then
    value = model.build(shape, draw)
    if #shape == 0 then value = draw() end
    vd = "<" .. G.fmt_list(shape) .. " " .. dtype .. " values>"
    -- nested tables cannot say the sizes after a 0: no model for empty inputs
    valid = G.ELEM[dtype] and (explicit or dk <= 3) and model.numel(shape) > 0
  else
    local j = R(5)
    if j == 1 then
      value, vd = { { 1, 2 }, { 3 } }, "{{1, 2}, {3}}"
    elseif j == 2 then
      local deep = {}
      local cur = deep
      for _ = 1, G.pick({ 65, 70, 200, 10000 }) do
        local n = {}
        cur[1] = n
        cur = n
      end
      cur[1] = 1
      value, vd = deep, "<deeply nested table>"
    elseif j == 3 then
      value, vd = S_:evil()
    elseif j == 4 then
      local e1, d1 = S_:evil({ 1, 2 })
      value, vd = { e1, { 3, 4 } }, "{" .. d1 .. ", {3, 4}}"
    else
      value, vd = S_:hostile()
    end
    valid = false
  end
  local name = "T" .. S_:serial()
  local ok, t
  if explicit then
    ok, t = S_:call(string.format("%s = dlpack.tensor(%s, %q)", name, vd, dtype), dlpack.tensor, value, dtype)
  else
    ok, t = S_:call(string.format("%s = dlpack.tensor(%s)", name, vd), dlpack.tensor, value)
  end
  if ok then
    if valid then
      local inf = info(t)
      if not inf or not model.same_list(inf.shape, shape) then
        S_:fail("dlpack.tensor: shape " .. (inf and G.fmt_list(inf.shape) or "?") .. ", expected " .. G.fmt_list(shape))
      elseif not explicit and inf.numel > 0 and inf.dtype ~= dtype then
        S_:fail("dlpack.tensor: inferred dtype " .. inf.dtype .. ", expected " .. dtype)
      elseif explicit or inf.numel > 0 then
        local got = values(t, inf)
        if not model.same_table(got, value) then S_:fail("dlpack.tensor: values differ from the input") end
      end
    end
    S_:put_small(t, name, slot)
  elseif valid and not S_.disturbed then
    S_:valid_raised(t)
  end
end)

-- dlpack.frombytes(s, dtype [, shape])
op("frombytes", 3, function(S_)
  local slot, mode = R(NSLOT), R(100)
  local dtype = G.pick({ "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
    "bfloat16", "float32", "float64", "complex64", "float8_e5m2" })
  local shape = G.valid_shape(3)
  local nextv = S_:lcg()
  local isz = ({ bool = 1, int8 = 1, uint8 = 1, float8_e5m2 = 1, int16 = 2, uint16 = 2, float16 = 2, bfloat16 = 2,
    int32 = 4, uint32 = 4, float32 = 4, int64 = 8, uint64 = 8, float64 = 8, complex64 = 8 })[dtype]
  local n = model.numel(shape)
  local bytes = {}
  for i = 1, n * isz do bytes[i] = string.char(dtype == "bool" and nextv() % 2 or nextv() % 256) end
  local s = table.concat(bytes)
  if dtype:sub(1, 5) == "float" or dtype == "complex64" or dtype == "bfloat16" then
    -- no NaN payloads: bytes of exact values (zeros for the rest)
    s = string.rep("\0", n * isz)
    if dtype == "float32" then
      local parts = {}
      for i = 1, n do parts[i] = string.pack("<f", (nextv() % 401 - 200) / 4) end
      s = table.concat(parts)
    elseif dtype == "float64" then
      local parts = {}
      for i = 1, n do parts[i] = string.pack("<d", (nextv() % 401 - 200) / 4) end
      s = table.concat(parts)
    end
  end
  local shape_mode = R(3)
  local args, desc, valid
  if mode <= VALID then
    valid = true
    if shape_mode == 1 and #shape == 1 then
      args = { s, dtype }
      desc = string.format("dlpack.frombytes(<%d bytes>, %q)", #s, dtype)
    else
      args = { s, dtype, shape }
      desc = string.format("dlpack.frombytes(<%d bytes>, %q, %s)", #s, dtype, G.fmt_list(shape))
    end
  else
    valid = false
    local j = R(5)
    local v, d = S_:hostile()
    if j == 1 then
      args = { s .. "x", dtype, shape }
      desc = string.format("dlpack.frombytes(<%d bytes>, %q, %s)", #s + 1, dtype, G.fmt_list(shape))
    elseif j == 2 then
      args = { s, v, shape }
      desc = string.format("dlpack.frombytes(<%d bytes>, %s, %s)", #s, d, G.fmt_list(shape))
    elseif j == 3 then
      args = { s, dtype, v }
      desc = string.format("dlpack.frombytes(<%d bytes>, %q, %s)", #s, dtype, d)
    elseif j == 4 then
      args = { v, dtype }
      desc = string.format("dlpack.frombytes(%s, %q)", d, dtype)
    else
      local e, ed = S_:evil(shape)
      args = { s, dtype, e }
      desc = string.format("dlpack.frombytes(<%d bytes>, %q, %s)", #s, dtype, ed)
    end
  end
  local name = "T" .. S_:serial()
  local ok, t = S_:call(name .. " = " .. desc, dlpack.frombytes, table.unpack(args, 1, 3))
  if ok then
    if valid then
      local inf = info(t)
      if not inf or not model.same_list(inf.shape, shape) then
        S_:fail("frombytes: shape " .. (inf and G.fmt_list(inf.shape) or "?") .. ", expected " .. G.fmt_list(shape))
      else
        local okb, b = pcall(T.tobytes, t)
        if not okb or b ~= s then S_:fail("frombytes: tobytes() differs from the input bytes") end
      end
    end
    S_:put(t, name, slot)
  elseif valid and not S_.disturbed then
    S_:valid_raised(t)
  end
end)

-- the views
local function view_common(S_, name, build)
  local slot = R(NSLOT)
  local t, td, e = S_:self_arg()
  local inf = e and info(t)
  local args, descs, valid, expect = build(S_, inf)
  local src_tbl = valid and inf and values(t, inf)
  local vname = "V" .. S_:serial()
  local ok, res = S_:call(string.format("%s = %s:%s(%s)", vname, td, name, table.concat(descs, ", ")), T[name], t,
    table.unpack(args, 1, #descs))
  valid = valid and inf and not inf.sub
  if ok then
    if valid and S_:quiet(e) and expect then
      local shape, strides, map = expect(inf)
      S_:check_view(name, res, inf, src_tbl, shape, strides, map)
      local rinf = info(res)
      if rinf and rinf.readonly ~= (inf.readonly or name == "as_readonly") then
        S_:fail(name .. ": readonly " .. tostring(rinf.readonly) .. " on a view of a tensor with readonly " ..
          tostring(inf.readonly))
      end
    end
    S_:put_small(res, vname, slot, e and e.root)
  elseif valid then
    S_:valid_raised(res)
  end
end

op("transpose", 3, function(S_)
  view_common(S_, "transpose", function(S2, inf)
    local a, ad, av = S2:dim_arg(inf)
    local b, bd, bv = S2:dim_arg(inf)
    return { a, b }, { ad, bd }, av and bv, function(i)
      local d1, d2 = model.dim(a, i.ndim), model.dim(b, i.ndim)
      local shape, strides = {}, {}
      for d = 1, i.ndim do shape[d], strides[d] = i.shape[d], i.strides[d] end
      shape[d1], shape[d2] = shape[d2], shape[d1]
      strides[d1], strides[d2] = strides[d2], strides[d1]
      return shape, strides, function(idx)
        local s = {}
        for d = 1, #idx do s[d] = idx[d] end
        s[d1], s[d2] = s[d2], s[d1]
        return s
      end
    end
  end)
end)

op("permute", 3, function(S_)
  view_common(S_, "permute", function(S2, inf)
    local mode, r = R(100), R(0, 1 << 30)
    if mode > VALID then
      local v, d = S2:hostile()
      return { v }, { d }, false
    end
    if not inf then return { { 1 } }, { "{1}" }, false end
    local perm = {}
    for d = 1, inf.ndim do perm[d] = d end
    for d = inf.ndim, 2, -1 do
      local j = 1 + (r + d * 7919) % d
      perm[d], perm[j] = perm[j], perm[d]
    end
    return { perm }, { G.fmt_list(perm) }, true, function(i)
      local shape, strides = {}, {}
      for d = 1, i.ndim do shape[d], strides[d] = i.shape[perm[d]], i.strides[perm[d]] end
      return shape, strides, function(idx)
        local s = {}
        for d = 1, #idx do s[perm[d]] = idx[d] end
        return s
      end
    end
  end)
end)

op("narrow", 3, function(S_)
  view_common(S_, "narrow", function(S2, inf)
    local dim, dd, dv = S2:dim_arg(inf)
    local mode, r = R(100), R(0, 1 << 30)
    local d = inf and dv and model.dim(dim, inf.ndim)
    local size = d and inf.shape[d]
    if mode > VALID then
      local s, sd = S2:hostile()
      local l, ld = G.small_int()
      return { dim, s, l }, { dd, sd, ld }, false
    end
    if not size then return { dim, 1, 1 }, { dd, "1", "1" }, false end
    local span = size < 1 << 40 and size or 1 << 40 -- (size + 1 would wrap for a size of 2^63 - 1)
    local start = 1 + r % (span + 1)
    local len = (r >> 10) % (span - start + 2)
    return { dim, start, len }, { dd, fmt(start), fmt(len) }, dv, function(i)
      local shape, strides = {}, {}
      for k = 1, i.ndim do shape[k], strides[k] = i.shape[k], i.strides[k] end
      shape[d] = len
      return shape, strides, function(idx)
        local s = {}
        for k = 1, #idx do s[k] = idx[k] end
        s[d] = s[d] + start - 1
        return s
      end
    end
  end)
end)

op("select", 3, function(S_)
  view_common(S_, "select", function(S2, inf)
    local dim, dd, dv = S2:dim_arg(inf)
    local d = inf and dv and model.dim(dim, inf.ndim)
    local idx, id, iv = S2:index_arg(d and inf.shape[d])
    return { dim, idx }, { dd, id }, dv and iv, function(i)
      local ix = idx < 0 and i.shape[d] + idx + 1 or idx
      local shape, strides = {}, {}
      for k = 1, i.ndim do
        if k ~= d then shape[#shape + 1], strides[#strides + 1] = i.shape[k], i.strides[k] end
      end
      return shape, strides, function(v)
        local s = {}
        for k = 1, d - 1 do s[k] = v[k] end
        s[d] = ix
        for k = d, #v do s[k + 1] = v[k] end
        return s
      end
    end
  end)
end)

op("slice", 3, function(S_)
  view_common(S_, "slice", function(S2, inf)
    local dim, dd, dv = S2:dim_arg(inf)
    local mode, r = R(100), R(0, 1 << 30)
    local d = inf and dv and model.dim(dim, inf.ndim)
    local size = d and inf.shape[d]
    if mode > VALID then
      local a, ad = S2:hostile()
      local b, bd = G.small_int()
      local c, cd = G.hostile_number()
      return { dim, a, b, c }, { dd, ad, bd, cd }, false
    end
    if not size or size < 1 then return { dim, 1, 1 }, { dd, "1", "1" }, false end
    local step = ({ 1, 1, 2, 3, -1, -2 })[1 + r % 6]
    local a, b = 1 + (r >> 4) % size, 1 + (r >> 9) % size
    if (step > 0 and a > b) or (step < 0 and a < b) then a, b = b, a end
    local first, last = a, b
    if (r >> 14) % 4 == 0 then first = a - size - 1 end
    if (r >> 16) % 4 == 0 then last = b - size - 1 end
    local args, descs = { dim, first, last }, { dd, fmt(first), fmt(last) }
    if step ~= 1 or (r >> 18) % 2 == 0 then args[4], descs[4] = step, fmt(step) end
    return args, descs, dv, function(i)
      local n = step > 0 and (b - a) // step + 1 or (a - b) // -step + 1
      local shape, strides = {}, {}
      for k = 1, i.ndim do shape[k], strides[k] = i.shape[k], i.strides[k] end
      shape[d], strides[d] = n, i.strides[d] * step
      return shape, strides, function(idx)
        local s = {}
        for k = 1, #idx do s[k] = idx[k] end
        s[d] = a + (idx[d] - 1) * step
        return s
      end
    end
  end)
end)

op("squeeze", 2, function(S_)
  view_common(S_, "squeeze", function(S2, inf)
    local none = R(3) == 1
    local dim, dd, dv = S2:dim_arg(inf)
    if none then
      return {}, {}, true, function(i)
        local shape, strides, keep = {}, {}, {}
        for k = 1, i.ndim do
          if i.shape[k] ~= 1 then
            shape[#shape + 1], strides[#strides + 1], keep[#keep + 1] = i.shape[k], i.strides[k], k
          end
        end
        return shape, strides, function(idx)
          local s = {}
          for k = 1, i.ndim do s[k] = 1 end
          for k = 1, #keep do s[keep[k]] = idx[k] end
          return s
        end
      end
    end
    return { dim }, { dd }, dv, function(i)
      local d = model.dim(dim, i.ndim)
      if i.shape[d] ~= 1 then return i.shape, i.strides, function(idx) return idx end end
      local shape, strides = {}, {}
      for k = 1, i.ndim do
        if k ~= d then shape[#shape + 1], strides[#strides + 1] = i.shape[k], i.strides[k] end
      end
      return shape, strides, function(idx)
        local s = {}
        for k = 1, d - 1 do s[k] = idx[k] end
        s[d] = 1
        for k = d, #idx do s[k + 1] = idx[k] end
        return s
      end
    end
  end)
end)

op("unsqueeze", 2, function(S_)
  view_common(S_, "unsqueeze", function(S2, inf)
    local dim, dd, dv = S2:dim_arg(inf, true)
    -- a 64-d tensor cannot take one more dimension: that call must raise
    return { dim }, { dd }, dv and (inf == nil or inf.ndim < 64), function(i)
      local d = model.dim(dim, i.ndim + 1)
      local shape, strides = {}, {}
      for k = 1, i.ndim do shape[k], strides[k] = i.shape[k], i.strides[k] end
      table.insert(shape, d, 1)
      local st = {}
      for k = 1, i.ndim + 1 do
        if k < d then st[k] = strides[k] elseif k > d then st[k] = strides[k - 1] end
      end
      return shape, st, function(idx)
        local s = {}
        for k = 1, #idx do if k ~= d then s[#s + 1] = idx[k] end end
        return s
      end
    end
  end)
end)

op("expand", 2, function(S_)
  view_common(S_, "expand", function(S2, inf)
    local mode, r = R(100), R(0, 1 << 30)
    if mode > VALID then
      local v, d = S2:hostile()
      return { v }, { d }, false
    end
    if not inf then return { { 2 } }, { "{2}" }, false end
    local lead = r % 3
    local shape, src_of = {}, {}
    for k = 1, lead do shape[k] = 1 + (r >> (2 + k)) % 3; src_of[k] = false end
    for k = 1, inf.ndim do
      local s = inf.shape[k]
      local bits = (r >> (6 + k * 2)) % 4
      if s == 1 and bits >= 2 then shape[#shape + 1] = bits
      elseif bits == 0 then shape[#shape + 1] = -1
      else shape[#shape + 1] = s end
      src_of[#shape] = k
    end
    -- more than 64 dimensions, or more than 4096 elements to check: the call may raise
    if #shape > 64 or model.numel(shape) > 4096 then return { shape }, { G.fmt_list(shape) }, false end
    return { shape }, { G.fmt_list(shape) }, true, function(i)
      local rs, st = {}, {}
      for k = 1, #shape do
        local sk = src_of[k]
        rs[k] = shape[k] == -1 and i.shape[sk] or shape[k]
        if not sk then st[k] = 0
        elseif i.shape[sk] == 1 and rs[k] ~= 1 then st[k] = 0
        else st[k] = i.strides[sk] end
      end
      return rs, st, function(idx)
        local s = {}
        for k = 1, #idx do
          local sk = src_of[k]
          if sk then s[sk] = (i.shape[sk] == 1) and 1 or idx[k] end
        end
        return s
      end
    end
  end)
end)

-- view(shape) (contiguous input) and reshape(shape): row-major order kept
local function reshape_shapes(n, r)
  local cands = { { n }, { 1, n }, { n, 1 }, { -1 } }
  for a = 2, n do
    if n % a == 0 then
      cands[#cands + 1] = { a, n // a }
      cands[#cands + 1] = { a, -1 }
    end
  end
  if n == 0 then cands = { { 0 }, { 1, 0 }, { 0, 3 }, { 2, 0, 1 } } end
  return cands[1 + r % #cands]
end

for _, vname in ipairs({ "view", "reshape" }) do
  op(vname, 3, function(S_)
    view_common(S_, vname, function(S2, inf)
      local mode, r = R(100), R(0, 1 << 30)
      if mode > VALID then
        if R(2) == 1 then
          local v, d = S2:evil({ -1 })
          return { v }, { d }, false
        end
        local v, d = S2:hostile()
        return { v }, { d }, false
      end
      if not inf then return { { -1 } }, { "{-1}" }, false end
      local shape = reshape_shapes(inf.numel, r)
      -- view() wants a contiguous input (reshape copies when it must)
      return { shape }, { G.fmt_list(shape) }, inf.contig or (vname == "reshape" and inf.device == "cpu"), function(i)
        local rs = {}
        for k = 1, #shape do rs[k] = shape[k] == -1 and i.numel // math.max(1, model.numel(shape) * -1) or shape[k] end
        local flat_src_shape = i.shape
        return rs, vname == "view" and model.contiguous_strides(rs) or nil, function(idx)
          -- row-major position in the result -> the same position in the source
          local pos, mul = 0, 1
          for k = #idx, 1, -1 do
            pos = pos + (idx[k] - 1) * mul
            mul = mul * rs[k]
          end
          local s = {}
          for k = #flat_src_shape, 1, -1 do
            s[k] = pos % flat_src_shape[k] + 1
            pos = pos // flat_src_shape[k]
          end
          return s
        end
      end
    end)
  end)
end

-- t:t() (at most 2 dims) and t:diagonal(k): views with known strides
op("t", 1, function(S_)
  view_common(S_, "t", function(_, inf)
    if not inf or inf.ndim > 2 then return {}, {}, false end
    return {}, {}, true, function(i)
      local shape, strides = {}, {}
      for d = 1, i.ndim do shape[d], strides[d] = i.shape[i.ndim + 1 - d], i.strides[i.ndim + 1 - d] end
      return shape, strides, function(idx)
        local s = {}
        for d = 1, #idx do s[#idx + 1 - d] = idx[d] end
        return s
      end
    end
  end)
end)

op("diagonal", 1, function(S_)
  view_common(S_, "diagonal", function(S2, inf)
    local mode, r = R(100), R(-3, 3)
    if mode > VALID then
      local v, d = S2:hostile()
      return { v }, { d }, false
    end
    if not inf or inf.ndim ~= 2 then return { r }, { fmt(r) }, false end
    return { r }, { fmt(r) }, true, function(i)
      local rows, cols = i.shape[1], i.shape[2]
      local r0, c0 = r < 0 and math.min(-r, rows) or 0, r > 0 and math.min(r, cols) or 0
      local n = math.min(rows - r0, cols - c0)
      return { n }, { i.strides[1] + i.strides[2] }, function(idx) return { r0 + idx[1], c0 + idx[1] } end
    end
  end)
end)

-- the composed "more functions" (docs/api.md): valid calls give the modelled shape (and, for
-- roll, T and einsum's identity, also into out=, the values); any arguments, hostile ones
-- included, raise cleanly
local function flat_list(tbl, list)
  list = list or {}
  if type(tbl) ~= "table" then list[#list + 1] = tbl; return list end
  for k = 1, #tbl do flat_list(tbl[k], list) end
  return list
end
local MORE = { "roll", "tril", "triu", "flatten", "ravel", "tile", "split", "chunk", "unbind", "T", "einsum", "diag",
  "repeat_interleave", "outer", "hstack", "vstack" }
op("more_functions", 3, function(S_)
  local slot = R(NSLOT)
  local t, td, e = S_:self_arg()
  local inf = e and info(t)
  local fn = MORE[R(#MORE)]
  local hostile = R(100) > VALID
  if not (inf and inf.numel <= 4096) then fn = "T" end -- outer, tile ... of big tensors: big results
  local arg, ad = 1, "1"
  if hostile then arg, ad = S_:hostile() end
  -- einsum's options: an out of t's shape and dtype, t itself, or an evil table
  local einsum_opts, evil_opts
  if fn == "einsum" and not hostile and R(2) == 1 then
    local k = R(3)
    if k == 1 then
      einsum_opts, evil_opts = S_:evil(), true
    elseif k == 2 or not inf then
      einsum_opts = { out = t }
    else
      local okz, z = pcall(dlpack.zeros, inf.shape, inf.dtype)
      einsum_opts = { out = okz and z or t }
    end
  end
  local calls = {
    roll = function() return dlpack.roll(t, arg) end, tril = function() return dlpack.tril(t, arg) end,
    triu = function() return dlpack.triu(t, arg) end, flatten = function() return T.flatten(t, arg) end,
    ravel = function() return T.ravel(t) end, tile = function() return dlpack.tile(t, arg, 2) end,
    split = function() return dlpack.split(t, arg) end, chunk = function() return dlpack.chunk(t, arg) end,
    unbind = function() return dlpack.unbind(t, arg) end, T = function() return t.T end,
    einsum = function()
      if einsum_opts then return dlpack.einsum("...", t, einsum_opts) end
      return dlpack.einsum(hostile and arg or "...", t)
    end,
    diag = function() return dlpack.diag(t, arg) end,
    repeat_interleave = function() return dlpack.repeat_interleave(t, arg) end,
    outer = function() return dlpack.outer(t, hostile and arg or t) end,
    hstack = function() return dlpack.hstack(hostile and arg or { t, t }) end,
    vstack = function() return dlpack.vstack(hostile and arg or { t }) end,
  }
  local tbl = inf and values(t, inf)
  local name = "M" .. S_:serial()
  local ok, res = S_:call(string.format("%s = %s(%s, %s)", name, fn, td, ad), calls[fn])
  local valid = inf and not hostile and not evil_opts and not inf.sub and inf.host and inf.ndim >= 1 and S_:quiet(e)
    and G.ELEM[inf.dtype] and inf.numel <= 4096
  if not ok then
    -- which valid calls may raise: tril/triu/diag by dims, flatten of a 1-dim range, empty splits,
    -- 2^63-element results of huge empty shapes
    return
  end
  if type(res) == "userdata" then S_:put_small(res, name, slot) end
  if not valid then return end
  local rinf = info(res)
  if fn == "roll" or fn == "T" or fn == "einsum" then
    if not rinf then S_:fail(fn .. ": not a live tensor"); return end
    local want = {}
    for d = 1, inf.ndim do want[d] = inf.shape[fn == "T" and inf.ndim + 1 - d or d] end
    if not model.same_list(rinf.shape, want) then
      S_:fail(string.format("%s: shape %s, expected %s", fn, G.fmt_list(rinf.shape), G.fmt_list(want)))
      return
    end
    local got = values(res, rinf)
    if fn == "roll" and tbl and got then
      local a, b = flat_list(tbl), flat_list(got)
      for k = 1, #a do
        if not model.same_value(b[(k % #a) + 1], a[k]) then S_:fail("roll: element " .. k .. " moved wrong"); break end
      end
    elseif fn == "einsum" and tbl and got and not model.same_table(got, tbl) then
      S_:fail("einsum('...'): the values differ from the operand's")
    end
    if fn == "einsum" and einsum_opts and not rawequal(res, einsum_opts.out) then
      S_:fail("einsum('...', {out = o}): did not return o")
    end
  elseif fn == "split" or fn == "chunk" or fn == "unbind" then
    local n = inf.shape[1]
    local want = fn == "chunk" and 1 or fn == "unbind" and n or n == 0 and 1 or n
    if type(res) ~= "table" or #res ~= want then
      S_:fail(fn .. ": " .. tostring(type(res) == "table" and #res) .. " pieces, expected " .. want)
    end
  elseif rinf and (fn == "ravel" or fn == "flatten") and rinf.numel ~= inf.numel then
    S_:fail(fn .. ": " .. rinf.numel .. " elements, expected " .. inf.numel)
  end
end)

op("as_readonly", 2, function(S_)
  view_common(S_, "as_readonly", function()
    return {}, {}, true, function(i)
      return i.shape, i.strides, function(idx) return idx end
    end
  end)
end)

-- t[i] (read): an element of a 1-d tensor, a view of an n-d one
op("index", 4, function(S_)
  local t, td, e = S_:self_arg()
  local inf = e and info(t)
  local strkey = R(6) == 1
  local key, kd, kv = S_:index_arg(inf and inf.ndim >= 1 and inf.shape[1] or nil)
  if strkey then
    key = G.pick({ "shape", "strides", "ndim", "dtype", "device", "itemsize", "nbytes", "byte_offset", "readonly",
      "numel", "nosuch", "1", "__index", "release", "" })
    kd, kv = fmt(key), false
  end
  local tbl = kv and inf and inf.elem and values(t, inf)
  local ok, res = S_:call(string.format("%s[%s]", td, kd), function() return t[key] end)
  if not kv or not inf then return end
  if inf.ndim == 0 then
    if ok then S_:fail("t[i] on a 0-d tensor did not raise") end
    return
  end
  if not ok then
    if inf.elem or (inf.ndim > 1 and not inf.sub) then S_:valid_raised(res) end
    return
  end
  if not S_:quiet(e) then return end
  local i = key < 0 and inf.shape[1] + key + 1 or key
  if inf.ndim == 1 then
    if tbl and not model.same_value(res, tbl[i]) then
      S_:fail(string.format("t[%d] = %s, totable() has %s", key, fmt(res), fmt(tbl[i])))
    end
  else
    local shape = {}
    for k = 2, inf.ndim do shape[k - 1] = inf.shape[k] end
    S_:check_view("index", res, inf, tbl, shape, { table.unpack(inf.strides, 2) }, function(idx)
      return { i, table.unpack(idx) }
    end)
    if type(res) == "userdata" and not rawequal(res, t) then pcall(T.release, res) end
  end
end)

-- t[i] = v
op("newindex", 4, function(S_)
  local t, td, e = S_:self_arg()
  local inf = e and info(t)
  local key, kd, kv = S_:index_arg(inf and inf.ndim >= 1 and inf.shape[1] or nil)
  if R(8) == 1 then
    key, kv = G.pick({ "shape", "x", "1", "release" }), false
    kd = fmt(key)
  end
  local v, vd, vv = S_:value_arg(inf and inf.dtype)
  local usetensor = R(6) == 1
  local src = S_.pool[R(NSLOT)]
  if usetensor then v, vd, vv = src.t, src.name, false end
  local ok, err = S_:call(string.format("%s[%s] = %s", td, kd, vd), function() t[key] = v end)
  if not (kv and vv and inf and inf.elem and inf.ndim >= 1) then return end
  if inf.ndim > 1 and inf.dtype == "bool" then return end -- "fills the sub-view with number v"
  if inf.readonly then
    if ok then S_:fail("t[i] = v on a read-only tensor did not raise")
    elseif not msg_has(err, "read-only") and not S_.disturbed then
      S_:fail("t[i] = v on a read-only tensor: the message lacks 'read-only': " .. tostring(err))
    end
    return
  end
  if not ok then S_:valid_raised(err); return end
  if not S_:quiet(e) then return end
  local i = key < 0 and inf.shape[1] + key + 1 or key
  local tbl = values(t, inf)
  if tbl then
    local sub = tbl[i]
    local shape = {}
    for k = 2, inf.ndim do shape[k - 1] = inf.shape[k] end
    local want = model.build(shape, function() return v end)
    if inf.ndim == 1 then want = v end
    if not model.same_table(sub, want) then S_:fail(string.format("after t[%d] = %s the elements differ", key, vd)) end
  end
end)

op("get", 4, function(S_)
  local t, td, e = S_:self_arg()
  local inf = e and info(t)
  local nr = R(0, 3)
  local n = inf and inf.ndim or nr
  local extra = R(8) == 1
  local args, descs, valid = {}, {}, true
  for d = 1, 6 do -- always six draws: the sequence does not depend on the tensor
    local v, vd, vv = S_:index_arg(inf and inf.shape[d])
    if d <= n then args[d], descs[d], valid = v, vd, valid and vv end
  end
  if n > 6 then valid = false end
  if extra then args[#args + 1], descs[#descs + 1], valid = 1, "1", false end
  local tbl = valid and inf and inf.elem and values(t, inf)
  local ok, res = S_:call(string.format("%s:get(%s)", td, table.concat(descs, ", ")), T.get, t,
    table.unpack(args, 1, #descs))
  if not (valid and inf and inf.elem) then return end
  if not ok then S_:valid_raised(res); return end
  if tbl and S_:quiet(e) then
    local idx = {}
    for d = 1, n do idx[d] = args[d] < 0 and inf.shape[d] + args[d] + 1 or args[d] end
    local want = model.at(tbl, idx)
    if not model.same_value(res, want) then S_:fail("get returned " .. fmt(res) .. ", totable() has " .. fmt(want)) end
  end
end)

op("set", 4, function(S_)
  local t, td, e = S_:self_arg()
  local inf = e and info(t)
  local nr = R(0, 3)
  local n = inf and inf.ndim or nr
  local args, descs, valid = {}, {}, true
  for d = 1, 6 do
    local v, vd, vv = S_:index_arg(inf and inf.shape[d])
    if d <= n then args[d], descs[d], valid = v, vd, valid and vv end
  end
  if n > 6 then valid = false end
  local v, vd, vv = S_:value_arg(inf and inf.dtype)
  args[#args + 1], descs[#descs + 1], valid = v, vd, valid and vv
  local ok, err = S_:call(string.format("%s:set(%s)", td, table.concat(descs, ", ")), T.set, t,
    table.unpack(args, 1, #descs))
  if not (valid and inf and inf.elem) then return end
  if inf.readonly then
    if ok then S_:fail("set on a read-only tensor did not raise")
    elseif not msg_has(err, "read-only") and not S_.disturbed then
      S_:fail("set on a read-only tensor: the message lacks 'read-only': " .. tostring(err))
    end
    return
  end
  if not ok then S_:valid_raised(err); return end
  if S_:quiet(e) then
    S_:check_note("get after set")
    local okg, got = pcall(T.get, t, table.unpack(args, 1, n))
    if not okg or not model.same_value(got, v) then
      S_:fail("get after set(" .. table.concat(descs, ", ") .. ") gave " .. fmt(got))
    end
  end
end)

op("item", 2, function(S_)
  local t, td, e = S_:self_arg()
  local inf = e and info(t)
  local tbl = inf and inf.elem and values(t, inf)
  local ok, res = S_:call(td .. ":item()", T.item, t)
  if not (inf and inf.elem) or not S_:quiet(e) then return end
  if inf.numel ~= 1 then
    if ok then S_:fail("item() on " .. inf.numel .. " elements did not raise") end
    return
  end
  if not ok then S_:valid_raised(res); return end
  local want = model.flat(tbl, inf.shape)[1]
  if not model.same_value(res, want) then S_:fail("item() = " .. fmt(res) .. ", totable() has " .. fmt(want)) end
end)

op("fill", 3, function(S_)
  local t, td, e = S_:self_arg()
  local inf = e and info(t)
  local v, vd, vv = S_:value_arg(inf and inf.dtype)
  local ok, res = S_:call(string.format("%s:fill(%s)", td, vd), T.fill, t, v)
  if not (vv and inf and inf.elem) then return end
  if inf.readonly then
    if ok then S_:fail("fill on a read-only tensor did not raise") end
    return
  end
  if not ok then S_:valid_raised(res); return end
  if not rawequal(res, t) then S_:fail("fill did not return the tensor itself") end
  if S_:quiet(e) then
    local got = values(t, inf)
    if got and not model.same_table(got, model.build(inf.shape, function() return v end)) then
      S_:fail("after fill(" .. vd .. ") the elements differ")
    end
  end
end)

-- t:copy(src): src drawn from the pool (any shape) or made with the same shape
op("copy", 3, function(S_)
  local t, td, e = S_:self_arg()
  local inf = e and info(t)
  local mode = R(100)
  local other = S_.pool[R(NSLOT)]
  local sdtype = G.pick({ "bool", "int8", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64" })
  local fillv = G.valid_value(sdtype)
  local src, sd, sv
  if mode <= 50 then
    -- a source of the same shape, made for the occasion
    local okc, s = S_:call(string.format("S = dlpack.full(shape of %s, %s, %q)", td, fmt(fillv), sdtype), dlpack.full,
      inf and inf.shape or { 2 }, fillv, sdtype)
    if okc then src, sd, sv = s, "S", inf ~= nil else src, sd, sv = nil, "nil", false end
  elseif mode <= 85 then
    src, sd, sv = other.t, other.name, false
  else
    src, sd = S_:hostile()
    sv = false
  end
  local ok, res = S_:call(string.format("%s:copy(%s)", td, sd), T.copy, t, src)
  if not (sv and inf and inf.elem) then
    if sd == "S" then pcall(T.release, src) end
    return
  end
  local own = src
  if inf.readonly then
    if ok then S_:fail("copy into a read-only tensor did not raise") end
  elseif not ok then
    S_:valid_raised(res)
  elseif S_:quiet(e) then
    if not rawequal(res, t) then S_:fail("copy did not return the tensor itself") end
    local want = convert(fillv, sdtype, inf.dtype)
    if want ~= nil then
      local got = values(t, inf)
      if got and not model.same_table(got, model.build(inf.shape, function() return want end)) then
        S_:fail(string.format("after copy from %s %s the elements differ", sdtype, fmt(fillv)))
      end
    end
  end
  pcall(T.release, own)
end)

-- clone / contiguous / to
op("clone", 3, function(S_)
  local slot = R(NSLOT)
  local t, td, e = S_:self_arg()
  local inf = e and info(t)
  local tbl = inf and values(t, inf)
  local name = "C" .. S_:serial()
  local ok, res = S_:call(string.format("%s = %s:clone()", name, td), T.clone, t)
  if ok then
    if inf and S_:quiet(e) then
      S_:check_copy("clone", res, t, inf, tbl)
      local okc, c = pcall(T.is_contiguous, res)
      if not (okc and c) then S_:fail("clone() is not contiguous") end
      local rinf = info(res)
      if rinf and rinf.readonly then S_:fail("clone() is read-only") end
    end
    S_:put(res, name, slot)
  elseif inf and inf.device == "cpu" and not inf.sub then
    S_:valid_raised(res)
  end
end)

op("contiguous", 2, function(S_)
  local slot = R(NSLOT)
  local t, td, e = S_:self_arg()
  local inf = e and info(t)
  local tbl = inf and values(t, inf)
  local okc, was = pcall(T.is_contiguous, t)
  local name = "C" .. S_:serial()
  local ok, res = S_:call(string.format("%s = %s:contiguous()", name, td), T.contiguous, t)
  if ok then
    if inf and S_:quiet(e) then
      if okc and was then
        if not rawequal(res, t) then S_:fail("contiguous() of a contiguous tensor is not the tensor itself") end
      else
        S_:check_copy("contiguous", res, t, inf, tbl)
        local okr, c = pcall(T.is_contiguous, res)
        if not (okr and c) then S_:fail("contiguous() is not contiguous") end
      end
    end
    S_:put(res, name, slot, okc and was and e and e.root or nil)
  elseif inf and inf.device == "cpu" and not inf.sub then
    S_:valid_raised(res)
  end
end)

op("to", 4, function(S_)
  local slot = R(NSLOT)
  local t, td, e = S_:self_arg()
  local inf = e and info(t)
  local kind = R(5)
  local dtype = G.pick({ "bool", "int8", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64",
    "complex64", "float8_e4m3fn" })
  local same = R(3) == 1
  local copy = R(3) == 1
  local target, tdsc, valid
  if kind == 1 then
    target, tdsc, valid = "cpu", "\"cpu\"", true
  elseif kind == 2 then
    if same and inf then dtype = inf.dtype end
    target, tdsc, valid = dtype, fmt(dtype), true
  elseif kind == 3 then
    if same and inf then dtype = inf.dtype end
    target, tdsc, valid = S_:opts_arg({ { dtype = dtype, copy = copy }, { dtype = dtype, device = "cpu" },
      { copy = copy }, { device = "cpu", copy = copy } })
  elseif kind == 4 then
    target, tdsc = S_:opts_arg({ { stream = G.pick({ -1, 1, 2, 0, 3, 12345 }) }, { device = "cuda" } })
    valid = false
  else
    target, tdsc = S_:hostile()
    valid = false
  end
  local tbl = inf and values(t, inf)
  local name = "C" .. S_:serial()
  local ok, res = S_:call(string.format("%s = %s:to(%s)", name, td, tdsc), T.to, t, target)
  if ok then
    if valid and inf and S_:quiet(e) then
      local want_dtype = (type(target) == "string" and target ~= "cpu" and target) or
        (type(target) == "table" and target.dtype) or inf.dtype
      local wants_copy = type(target) == "table" and target.copy == true
      if want_dtype == inf.dtype and not wants_copy then
        if not rawequal(res, t) then S_:fail("to() with nothing to change is not the tensor itself") end
      else
        S_:check_copy("to", res, t, inf, tbl, want_dtype)
      end
    end
    local same_t = rawequal(res, t)
    S_:put(res, name, slot, same_t and e and e.root or nil)
  elseif valid and inf and inf.elem and not S_.disturbed then
    local want_dtype = (type(target) == "string" and target ~= "cpu" and target) or
      (type(target) == "table" and target.dtype) or inf.dtype
    local nocopy = type(target) == "table" and target.copy == false and want_dtype ~= inf.dtype
    if G.ELEM[want_dtype] and not nocopy and inf.device == "cpu" then S_:valid_raised(res) end
  end
end)

-- queries
op("query", 6, function(S_)
  local t, td, e = S_:self_arg()
  local inf = e and info(t)
  local q = R(16)
  local dim, dd, dv = S_:dim_arg(inf)
  local ok, res
  if q == 1 then ok, res = S_:call(td .. ":numel()", T.numel, t)
  elseif q == 2 then ok, res = S_:call(string.format("%s:size(%s)", td, dd), T.size, t, dim)
  elseif q == 3 then ok, res = S_:call(td .. ":size()", T.size, t)
  elseif q == 4 then ok, res = S_:call(string.format("%s:stride(%s)", td, dd), T.stride, t, dim)
  elseif q == 5 then ok, res = S_:call(td .. ":stride()", T.stride, t)
  elseif q == 6 then ok, res = S_:call(td .. ":is_contiguous()", T.is_contiguous, t)
  elseif q == 7 then ok, res = S_:call(td .. ":data_ptr()", T.data_ptr, t)
  elseif q == 8 then ok, res = S_:call("#" .. td, function() return #t end)
  elseif q == 9 then ok, res = S_:call("tostring(" .. td .. ")", tostring, t)
  elseif q == 10 then
    local p = G.pick({ "shape", "strides", "ndim", "dtype", "device", "itemsize", "nbytes", "byte_offset", "readonly" })
    ok, res = S_:call(td .. "." .. p, function() return t[p] end)
    if ok and inf and S_:quiet(e) and (p == "shape" or p == "strides") then
      if not model.same_list(res, inf[p]) then S_:fail(p .. " changed between two reads") end
    end
    return
  elseif q == 11 then
    if inf and totable_values(inf) > 1e5 then return end
    ok, res = S_:call(td .. ":totable()", T.totable, t)
  elseif q == 12 then ok, res = S_:call(td .. ":tobytes()", T.tobytes, t)
  elseif q == 13 then ok, res = S_:call(td .. ":__dlpack_device()", T.__dlpack_device, t)
  elseif q == 14 then ok, res = S_:call(td .. ".foo = 1", function() t.foo = 1 end)
  elseif q == 15 then
    local mt = getmetatable(t)
    ok, res = S_:call("getmetatable(" .. td .. ").__index(" .. td .. ", " .. dd .. ")", function()
      return type(mt) == "table" and mt.__index(t, dim)
    end)
  else
    ok, res = S_:call(td .. ".shape (twice)", function() return t.shape, t.shape end)
  end
  if not (inf and S_:quiet(e)) then return end
  S_:check_note("query")
  local d = dv and model.dim(dim, inf.ndim)
  if q == 1 then
    if not ok or res ~= model.numel(inf.shape) then S_:fail("numel() = " .. fmt(res)) end
  elseif q == 2 and d then
    if not ok or res ~= inf.shape[d] then S_:fail("size(" .. dd .. ") = " .. fmt(res)) end
  elseif q == 3 then
    if ok and type(res) == "table" and not model.same_list(res, inf.shape) then S_:fail("size() differs from shape") end
  elseif q == 4 and d then
    if not ok or res ~= inf.strides[d] then S_:fail("stride(" .. dd .. ") = " .. fmt(res)) end
  elseif q == 8 then
    if inf.ndim == 0 and ok then S_:fail("#t on a 0-d tensor did not raise") end
    if inf.ndim > 0 and (not ok or res ~= inf.shape[1]) then S_:fail("#t = " .. fmt(res)) end
  elseif q == 9 then
    if not ok or type(res) ~= "string" then S_:fail("tostring raised: " .. tostring(res)) end
  elseif q == 11 and inf.elem then
    if not ok then S_:valid_raised(res) end
  elseif q == 12 and inf.host and not inf.sub then
    if not ok then
      S_:valid_raised(res)
    elseif inf.elem and inf.numel <= 512 then
      local tbl = values(t, inf)
      local want = tbl and model.pack(inf.dtype, model.flat(tbl, inf.shape))
      -- bool: the bytes as they are (a non-canonical true is any nonzero byte)
      local got = inf.dtype == "bool" and res:gsub("[^\0]", "\1") or res
      if want and want ~= got then S_:fail("tobytes() differs from string.pack of totable()") end
      if not inf.sub and #res ~= inf.numel * inf.itemsize then S_:fail("tobytes() has " .. #res .. " bytes") end
    end
  elseif q == 13 then
    if not ok or res ~= dlpack.device_type[(inf.device:match("^[%a_]+"))] then
      S_:fail("__dlpack_device() = " .. fmt(res) .. " for " .. inf.device)
    end
  end
end)

-- release / __close / __gc: the tensor is released; other tensors keep their hold
op("release", 3, function(S_)
  local t, td, e = S_:self_arg()
  local how = R(4)
  local others = {}
  if e and live(t) then
    for s = 1, NSLOT do
      local o = S_.pool[s]
      if o.t and not rawequal(o.t, t) and live(o.t) then others[#others + 1] = o end
    end
  end
  local ok, err
  if how == 1 then ok, err = S_:call(td .. ":release()", T.release, t)
  elseif how == 2 then
    ok, err = S_:call("getmetatable(" .. td .. ").__close(" .. td .. ")", function() getmetatable(t).__close(t) end)
  elseif how == 3 then
    ok, err = S_:call("getmetatable(" .. td .. ").__gc(" .. td .. ")", function() getmetatable(t).__gc(t) end)
  else
    ok, err = S_:call("do local x <close> = " .. td .. " end", function()
      local x <close> = t -- luacheck: ignore
    end)
  end
  if not e then return end
  if not ok then
    if not S_.disturbed then S_:fail("release raised: " .. tostring(err)) end
    return
  end
  S_:check_note("released")
  local okn, errn = live(t)
  if okn then S_:fail("the tensor is still usable after release")
  elseif not msg_has(errn, "released") then
    S_:fail("use after release: the message lacks 'released': " .. tostring(errn))
  end
  local okr, errr = pcall(T.release, t)
  if not okr then S_:fail("a second release raised: " .. tostring(errr)) end
  if not S_.disturbed then
    for _, o in ipairs(others) do
      local okl, el = live(o.t)
      if not okl then
        S_:fail("releasing " .. td .. " also released " .. o.name .. ": " .. tostring(el))
        break
      end
    end
  end
end)

-- any use of a released tensor raises 'released'
local RELEASED_USES = {
  { "numel", function(t) return t:numel() end }, { "totable", function(t) return t:totable() end },
  { "tobytes", function(t) return t:tobytes() end }, { "clone", function(t) return t:clone() end },
  { "shape", function(t) return t.shape end }, { "get", function(t) return t:get(1) end },
  { "data_ptr", function(t) return t:data_ptr() end }, { "len", function(t) return #t end },
  { "transpose", function(t) return t:transpose(1, 1) end }, { "to", function(t) return t:to("float64") end },
  { "fill", function(t) return t:fill(0) end }, { "to_dlpack", function(t) return dlpack.to_dlpack(t) end },
  { "from_dlpack", function(t) return dlpack.from_dlpack(t) end }, { "index", function(t) return t[1] end },
  { "__dlpack", function(t) return t:__dlpack() end },
  { "__dlpack_device", function(t) return t:__dlpack_device() end },
  { "as_readonly", function(t) return t:as_readonly() end }, { "copy", function(t) return t:copy(t) end },
  { "is_contiguous", function(t) return t:is_contiguous() end }, { "item", function(t) return t:item() end },
}
op("released_use", 3, function(S_)
  local e = S_.pool[R(NSLOT)]
  local u = RELEASED_USES[R(#RELEASED_USES)]
  local was_live = live(e.t)
  local ok, res = S_:call(e.name .. ":" .. u[1] .. "()  (released?)", u[2], e.t)
  local made = ok and type(res) == "userdata" and not rawequal(res, e.t)
  if made and dlpack.is_capsule(res) then pcall(dlpack.release_capsule, res) elseif made then pcall(T.release, res) end
  if was_live or not e.t then return end
  if ok then
    S_:fail("a released tensor answered " .. u[1] .. "()")
  elseif not msg_has(res, "released") then
    S_:fail("released tensor, " .. u[1] .. "(): the message lacks 'released': " .. tostring(res))
  end
end)

-- exchange
local EXPORT_OPTS = { false, { max_version = { 1, 0 } }, { max_version = { 1, 3 } }, { max_version = { 0, 0 } },
  { max_version = { 2, 0 } }, { copy = true }, { copy = false }, { device = "cpu" },
  { max_version = { 0, 0 }, copy = true } }

op("to_dlpack", 5, function(S_)
  local cslot = R(NCAP)
  local t, td, e = S_:self_arg()
  local inf = e and info(t)
  local o, od, ov = S_:opts_arg(EXPORT_OPTS)
  local name = "K" .. S_:serial()
  local ok, cap = S_:call(string.format("%s = dlpack.to_dlpack(%s, %s)", name, td, od), dlpack.to_dlpack, t, o)
  local legacy = ov and o and o.max_version and o.max_version[1] == 0
  if ok then
    S_:put_cap(cap, name, cslot, "fresh")
    if ov and inf and S_:quiet(e) then
      S_:check_note("capsule")
      if not dlpack.is_capsule(cap) then S_:fail("to_dlpack did not give a capsule") end
      local oki, ci = pcall(dlpack.capsule_info, cap)
      if not oki or ci.consumed ~= false or ci.versioned ~= not legacy then
        S_:fail("capsule_info of a new capsule: " .. (oki and ("consumed=" .. tostring(ci.consumed) .. " versioned=" ..
          tostring(ci.versioned)) or tostring(ci)))
      end
      if inf.readonly and legacy and not o.copy then S_:fail("a read-only tensor was exported as legacy") end
    end
  elseif ov and inf and S_:quiet(e) then
    if inf.readonly and legacy and not o.copy then
      if not dlpack.is_buffer_error(cap) then S_:fail("legacy export of a read-only tensor: not a BufferError: " ..
        tostring(cap)) end
    elseif not (o and o.copy == false) then
      S_:valid_raised(cap)
    end
  end
end)

op("__dlpack", 3, function(S_)
  local cslot = R(NCAP)
  local t, td, e = S_:self_arg()
  local inf = e and info(t)
  local o, od, ov = S_:opts_arg({ false, { max_version = { 1, 3 } }, { max_version = { 0, 3 } },
    { max_version = { 1, 1 }, dl_device = { 1, 0 } }, { copy = true }, { stream = -1 }, { stream = 1 },
    { dl_device = { 1, 0 }, copy = false } })
  local name = "K" .. S_:serial()
  local ok, cap = S_:call(string.format("%s = %s:__dlpack(%s)", name, td, od), T.__dlpack, t, o)
  if ok then
    S_:put_cap(cap, name, cslot, "fresh")
    if ov and inf and S_:quiet(e) then
      local versioned = o ~= nil and o.max_version ~= nil and o.max_version[1] >= 1
      local oki, ci = pcall(dlpack.capsule_info, cap)
      if not oki or ci.versioned ~= versioned then
        S_:fail("__dlpack(" .. od .. ") gave versioned=" .. tostring(oki and ci.versioned))
      end
    end
  end
end)

local IMPORT_OPTS = { false, false, { copy = true }, { copy = false }, { device = "cpu" },
  { device = "cpu", copy = true } }

op("from_dlpack", 8, function(S_)
  local slot = R(NSLOT)
  local kind = R(10)
  local o, od, ov = S_:opts_arg(IMPORT_OPTS)
  local x, xd, ce, e, pinfo
  local capent, ent = S_.caps[R(NCAP)], S_.pool[R(NSLOT)]
  S_.ctx.victims[#S_.ctx.victims + 1] = ent
  if kind <= 3 then
    x, xd, ce = capent.cap, capent.name, capent
  elseif kind <= 6 then
    x, xd, e = ent.t, ent.name, ent
  elseif kind <= 9 then
    x, xd, pinfo = S_:producer()
  else
    x, xd = S_:hostile()
  end
  local inf = e and info(e.t)
  local tbl = inf and values(e.t, inf)
  local known = ce and ce.known
  local name = "I" .. S_:serial()
  local ok, res = S_:call(string.format("%s = dlpack.from_dlpack(%s, %s)", name, xd, od), dlpack.from_dlpack, x, o)
  if ce then ce.known = nil end
  if ok then
    local rinf = info(res)
    if pinfo and pinfo.raw then
      S_:fail("from_dlpack accepted a raw pointer from a producer (" .. xd .. ")")
    elseif ce and known == "consumed" then
      S_:fail("a consumed capsule was imported again")
    elseif ce and not ov then
      ce.known = "consumed"
    elseif ce and ov then
      ce.known = "consumed"
      S_:check_note("capsule consumed")
      local oki, ci = pcall(dlpack.capsule_info, x)
      if not (oki and ci.consumed == true) then S_:fail("an imported capsule is not marked consumed") end
      local ok2, r2 = pcall(dlpack.from_dlpack, x)
      if ok2 then
        S_:fail("a capsule was imported twice")
        pcall(T.release, r2)
      elseif not msg_has(r2, "consumed") then
        S_:fail("second import of a capsule: the message lacks 'consumed': " .. tostring(r2))
      end
    elseif e and ov and inf and rinf and S_:quiet(e) then
      if o and o.copy then
        S_:check_copy("from_dlpack(copy)", res, e.t, inf, tbl)
      else
        S_:check_note("from_dlpack shares")
        if inf.numel > 0 and rinf.ptr ~= inf.ptr then S_:fail("from_dlpack(tensor) did not share memory") end
        if not model.same_list(rinf.shape, inf.shape) then S_:fail("from_dlpack(tensor) changed the shape") end
        for d = 1, inf.ndim do
          if inf.shape[d] > 1 and rinf.strides[d] ~= inf.strides[d] then
            S_:fail("from_dlpack(tensor) changed the strides " .. G.fmt_list(inf.strides) .. " -> " ..
              G.fmt_list(rinf.strides))
            break
          end
        end
        if rinf.dtype ~= inf.dtype then S_:fail("from_dlpack(tensor) changed the dtype") end
        if rinf.readonly ~= inf.readonly then S_:fail("from_dlpack(tensor) changed readonly") end
        if tbl and not model.same_table(values(res, rinf), tbl) then S_:fail("from_dlpack(tensor): values differ") end
      end
    elseif pinfo and pinfo.dk <= 3 and pinfo.devk <= 5 and ov and not o and S_:quiet(pinfo.src) then
      local sinf = info(pinfo.src.t)
      if sinf and rinf and sinf.host and sinf.device == "cpu" and sinf.numel > 0 and rinf.ptr ~= sinf.ptr then
        S_:fail("from_dlpack(producer of " .. pinfo.src.name .. ") did not share memory")
      end
    end
    S_:put_small(res, name, slot, e and e.root or (pinfo and pinfo.src.root))
  else
    if ce and known == "consumed" and ov and not msg_has(res, "consumed") and not S_.disturbed then
      S_:fail("import of a consumed capsule: the message lacks 'consumed': " .. tostring(res))
    elseif ce and known == "fresh" and ov and not o and not S_.disturbed then
      S_:valid_raised(res)
    elseif e and inf and ov and not o and S_:quiet(e) and inf.device == "cpu" then
      S_:valid_raised(res)
    end
  end
end)

op("capsule_fns", 4, function(S_)
  local which = R(4)
  local pick = R(3)
  local ce = S_.caps[R(NCAP)]
  local v, vd
  if pick == 1 then v, vd = S_:hostile() else v, vd = ce.cap, ce.name end
  local fname = ({ "is_capsule", "capsule_info", "release_capsule", "is_buffer_error" })[which]
  local known = pick ~= 1 and ce.known
  local ok, res = S_:call(string.format("dlpack.%s(%s)", fname, vd), dlpack[fname], v)
  if pick ~= 1 and which == 3 then ce.known = nil end
  if which == 1 and ok and type(res) ~= "boolean" then S_:fail("is_capsule returned a " .. type(res)) end
  if which == 1 and not ok then S_:fail("is_capsule raised: " .. tostring(res)) end
  if which == 4 and not ok and type(v) ~= "table" then S_:fail("is_buffer_error raised: " .. tostring(res)) end
  if which == 1 and ok and res and (v == S_.scratch_ptr or v == S_.dangling_ptr) then
    S_:fail("is_capsule(data_ptr) is true")
  end
  if which == 1 and known and ok and not res then S_:fail("is_capsule of a capsule is false") end
  if which == 2 and known and not S_.disturbed then
    if not ok or type(res) ~= "table" or res.consumed ~= (known == "consumed") then
      S_:fail("capsule_info of a " .. known .. " capsule: " .. (ok and type(res) == "table" and
        ("consumed=" .. tostring(res.consumed)) or tostring(res)))
    end
  end
  if which == 3 and known == "fresh" and not S_.disturbed then
    if not ok then S_:fail("release_capsule of a fresh capsule raised: " .. tostring(res)) end
    local oki, ci = pcall(dlpack.capsule_info, v)
    if not (oki and ci.consumed) then S_:fail("release_capsule did not mark the capsule consumed") end
    local ok2, r2 = pcall(dlpack.from_dlpack, v)
    if ok2 then
      S_:fail("a released capsule was imported")
      pcall(T.release, r2)
    elseif not msg_has(r2, "consumed") then
      S_:fail("import of a released capsule: the message lacks 'consumed': " .. tostring(r2))
    end
  end
  if which == 3 and ok and pick ~= 1 then ce.known = "consumed" end
end)

op("new_capsule", 2, function(S_)
  local cslot = R(NCAP)
  local e = S_.pool[R(NSLOT)]
  local legacy = R(4) == 1
  local name = "K" .. S_:serial()
  local o = legacy and { max_version = { 0, 0 } } or nil
  local ok, cap = S_:call(string.format("%s = dlpack.to_dlpack(%s%s)", name, e.name,
    legacy and ", {max_version = {0, 0}}" or ""), dlpack.to_dlpack, e.t, o)
  if ok then S_:put_cap(cap, name, cslot, "fresh") end
end)

-- CUDA: no GPU here; everything must raise or answer, never crash
op("cuda", 3, function(S_)
  local which = R(14)
  local s = R(2) == 1 and cuda.legacy_stream or cuda.per_thread_stream
  local sd = s == cuda.legacy_stream and "legacy_stream" or "per_thread_stream"
  local v, vd = S_:hostile()
  local o, od = S_:opts_arg({ false, { device = 0 }, { priority = -1 }, { device = "cuda:0" } })
  local ok, res
  if which == 1 then
    ok, res = S_:call("dlpack.cuda.is_available()", cuda.is_available)
    if not ok or type(res) ~= "boolean" then S_:fail("cuda.is_available() raised or is not a boolean") end
  elseif which == 2 then ok = S_:call("dlpack.cuda.device_count()", cuda.device_count)
  elseif which == 3 then
    ok, res = S_:call("dlpack.cuda.Stream(" .. od .. ")", cuda.Stream, o)
  elseif which == 4 then
    ok, res = S_:call("dlpack.cuda.Event(" .. od .. ")", cuda.Event, o)
  elseif which == 5 then ok = S_:call(sd .. ":synchronize()", function() return s:synchronize() end)
  elseif which == 6 then ok = S_:call(sd .. ":query()", function() return s:query() end)
  elseif which == 7 then ok = S_:call(sd .. ":wait(" .. vd .. ")", function() return s:wait(v) end)
  elseif which == 8 then ok = S_:call(sd .. ":record(" .. vd .. ")", function() return s:record(v) end)
  elseif which == 9 then ok = S_:call(sd .. ".handle, .device", function() return s.handle, s.device end)
  elseif which == 10 then ok = S_:call("tostring(" .. sd .. ")", tostring, s)
  elseif which == 11 then
    ok = S_:call("dlpack.cuda.Stream.__call(" .. vd .. ")", function()
      return getmetatable(cuda.Stream).__call(v)
    end)
  elseif which == 12 then
    ok = S_:call(sd .. "[" .. vd .. "]", function() return s[v] end)
  elseif which == 13 then
    ok = S_:call("getmetatable(" .. sd .. ").__index(" .. vd .. ", \"handle\")", function()
      return getmetatable(s).__index(v, "handle")
    end)
  else
    ok = S_:call("dlpack.cuda.Event.__call(" .. vd .. ")", function() return getmetatable(cuda.Event).__call(v) end)
  end
  if ok and (which == 3 or which == 4) and type(res) == "userdata" then
    pcall(function() res:close() end)
  end
  -- streams and events made or handled here: never close the module's constants
end)

op("stream_opt", 3, function(S_)
  -- the stream option: objects and -1, 1, 2 only; anything else raises
  local e = S_.pool[R(NSLOT)]
  local sv = G.pick({ -1, 1, 2, 0, 3, 7, 12345, 0x7f0000001000, math.maxinteger, math.mininteger, -2, 2.0, 0 / 0,
    "1", cuda.legacy_stream, cuda.per_thread_stream })
  local sdsc = (sv == cuda.legacy_stream and "legacy_stream") or (sv == cuda.per_thread_stream and "per_thread_stream")
    or fmt(sv)
  local where = R(4)
  local ok, res
  if where == 1 then
    ok, res = S_:call("dlpack.to_dlpack(" .. e.name .. ", {stream = " .. sdsc .. "})", dlpack.to_dlpack, e.t,
      { stream = sv })
    if ok then S_:put_cap(res, "K" .. S_:serial(), R(NCAP), "fresh") end
  elseif where == 2 then
    ok, res = S_:call("dlpack.from_dlpack(" .. e.name .. ", {stream = " .. sdsc .. "})", dlpack.from_dlpack, e.t,
      { stream = sv })
    if ok then pcall(T.release, res) end
  elseif where == 3 then
    ok, res = S_:call(e.name .. ":to({stream = " .. sdsc .. ", copy = true})", T.to, e.t, { stream = sv, copy = true })
    if ok then pcall(T.release, res) end
  else
    ok, res = S_:call(e.name .. ":__dlpack({stream = " .. sdsc .. "})", T.__dlpack, e.t, { stream = sv })
    if ok then S_:put_cap(res, "K" .. S_:serial(), R(NCAP), "fresh") end
  end
  local allowed = sv == -1 or sv == 1 or sv == 2 or sv == "1" or sv == cuda.legacy_stream or
    sv == cuda.per_thread_stream
  if ok and not allowed then S_:fail("stream = " .. sdsc .. " was accepted") end
end)

op("gc", 2, function(S_)
  if R(2) == 1 then S_:call("collectgarbage()", collectgarbage)
  else S_:call("collectgarbage(\"step\")", collectgarbage, "step") end
end)

-- calls with a self that is not a tensor
local METHODS = { "get", "set", "item", "numel", "size", "stride", "is_contiguous", "data_ptr", "release", "view",
  "reshape", "transpose", "permute", "narrow", "select", "slice", "squeeze", "unsqueeze", "expand", "as_readonly",
  "clone", "contiguous", "copy", "to", "fill", "totable", "tobytes", "__dlpack", "__dlpack_device" }
op("wrong_self", 2, function(S_)
  local m = G.pick(METHODS)
  local v, vd = S_:hostile()
  local a, ad = S_:hostile()
  local ok, res = S_:call(string.format("dlpack.Tensor.%s(%s, %s)", m, vd, ad), T[m], v, a)
  -- what it made is ours to hand back
  if ok and type(res) == "userdata" then
    if dlpack.is_capsule(res) then pcall(dlpack.release_capsule, res) else pcall(T.release, res) end
  end
end)

-- a call that yields from a metamethod inside a coroutine
op("coroutine", 1, function(S_)
  local e = S_.pool[R(NSLOT)]
  local shape = { -1 }
  local o = setmetatable({}, { __index = function() return coroutine.yield(shape) end })
  S_:call("coroutine.wrap(function() " .. e.name .. ":to(<yielding opts>) end)()", function()
    local co = coroutine.create(function() return T.to(e.t, o) end)
    local okc, r = coroutine.resume(co)
    if okc and type(r) == "userdata" then pcall(T.release, r) end
    return okc
  end)
end)

-- at the edges: package tricks, lua_close, sizes at the int64 edge (spec/fuzz/edges.lua)
require("fuzz.edges").register(op, { dlpack = dlpack, fab = fab, T = T })
-- the computing functions, checked against spec/fuzz/compute_model.lua (spec/fuzz/compute.lua)
require("fuzz.compute").register(op, { dlpack = dlpack, T = T, info = info, values = values, live = live,
  NSLOT = NSLOT })
-- the more ways to make tensors: *_like, linspace, eye, random, shapes as numbers (spec/fuzz/create.lua)
require("fuzz.create").register(op, { dlpack = dlpack, T = T, info = info, values = values, NSLOT = NSLOT })

---------------------------------------------------------------------------
-- Running a seed

local pick_op = runner.picker(ops)

local function set_gc(seed)
  local g = seed % 4
  local desc
  if g == 0 then
    local p, m, s = R(0, 40), R(100, 1000), R(0, 8)
    collectgarbage("incremental", p, m, s)
    desc = string.format("incremental(%d, %d, %d)", p, m, s)
  elseif g == 1 then
    local mi, ma = R(1, 20), R(10, 100)
    collectgarbage("generational", mi, ma)
    desc = string.format("generational(%d, %d)", mi, ma)
  elseif g == 2 then
    collectgarbage("incremental", 100, 400, 6)
    desc = "incremental(100, 400, 6)"
  else
    collectgarbage("incremental", 200, 100, 13)
    desc = "incremental(200, 100, 13)"
  end
  return desc
end

local function run_seed(seed, steps, ncorpus)
  math.randomseed(seed)
  local st = S.new(seed)
  CURRENT = st
  local gcdesc = set_gc(seed)
  if VERBOSE then out:write("[", seed, "] gc ", gcdesc, "\n") end
  local fab0 = fab and { live = fab.live(), deleted = fab.deleted(), double = fab.double_deletes(),
    tampered = fab.tampered() }
  st.ctx = { victims = {} }
  st.scratch = dlpack.zeros({ 256 }, "uint8")
  st.scratch_ptr = st.scratch:data_ptr()
  do
    local d = dlpack.zeros({ 64 }, "uint8")
    st.dangling_ptr = d:data_ptr()
    d:release()
  end
  for s = 1, NSLOT do setup_pool(st, s) end
  for c = 1, NCAP do
    local e = st.pool[c]
    local ok, cap = st:call("K" .. c .. " = dlpack.to_dlpack(" .. e.name .. ")", dlpack.to_dlpack, e.t)
    if not ok then
      ok, cap = st:call("K" .. c .. " = dlpack.to_dlpack(zeros)", dlpack.to_dlpack, dlpack.zeros({ 1 }))
    end
    st.caps[c] = { cap = ok and cap or false, name = "K" .. c, known = ok and "fresh" or nil }
  end
  -- the malformed-producer corpus first: its imports join the pool
  if fab and ncorpus > 0 then
    st.ctx = { victims = { st.pool[1] } }
    corpus.run(st, ncorpus, NSLOT)
  end
  for _ = 1, steps do
    st.step = st.step + 1
    st.hits0 = st.hits
    st.ctx = { victims = { st.pool[R(NSLOT)] } }
    local o = pick_op()
    if WITHOUT[o.name] then o = ops[1] end
    o.fn(st)
  end
  -- teardown: release everything, collect, count the deleters
  st.step = st.step + 1
  st:note("teardown")
  st.ctx = { victims = {} }
  for c = 1, NCAP do
    if st.caps[c].cap then pcall(dlpack.release_capsule, st.caps[c].cap) end
  end
  for s = 1, NSLOT do
    if st.pool[s].t then pcall(T.release, st.pool[s].t) end
  end
  pcall(T.release, st.scratch)
  st.pool, st.caps, st.scratch, st.ctx = {}, {}, nil, nil
  collectgarbage()
  collectgarbage()
  if fab then
    local live_n, deleted, double, tampered = fab.live(), fab.deleted(), fab.double_deletes(), fab.tampered()
    if live_n ~= fab0.live then
      st:fail(string.format("deleter count: %d fabricated tensors still live after release and collect (before: %d)",
        live_n, fab0.live))
    end
    if deleted - fab0.deleted ~= st.fab_expected then
      st:fail(string.format("deleter count: %d deleter calls for %d fabricated tensors with a deleter",
        deleted - fab0.deleted, st.fab_expected))
    end
    if double ~= fab0.double then st:fail(string.format("%d double deletes", double - fab0.double)) end
    if tampered ~= fab0.tampered then st:fail(string.format("%d fabricated tensors were written by the consumer",
      tampered - fab0.tampered)) end
    fab.reclaim()
  end
  collectgarbage("incremental", 200, 100, 13)
  CURRENT = nil
  return st
end

-- The safe API exposes no raw-pointer entry points (they live in dlpack.unsafe).
local contract_failures = {}
if options.contract and cuda.Stream.wrap ~= nil then
  contract_failures[#contract_failures + 1] = "dlpack.cuda.Stream.wrap exists (it belongs to dlpack.unsafe)"
end
for k in pairs(dlpack) do
  if options.contract and (k == "adopt" or k == "take" or k == "wrap" or k == "wrap_stream") and
    require("fuzz.edges").is_unsafe(k, dlpack[k]) then
    contract_failures[#contract_failures + 1] = "dlpack." .. k .. " exists in the safe API"
  end
end
table.sort(contract_failures)
for _, f in ipairs(contract_failures) do io.stderr:write("FAIL contract: ", f, "\n") end

if not fab then io.stderr:write("fuzz: fabricate.so not found: the malformed-producer corpus is skipped\n") end
if options.contract then
  out:write(string.format("contract: the safe API has no raw-pointer entry points: %s\n",
    #contract_failures == 0 and "ok" or "FAILED"))
end
runner.run(options, "fuzz", function(seed) return run_seed(seed, options.steps, options.corpus) end, #contract_failures,
  function(seed)
    local w = {}
    for k in pairs(WITHOUT) do w[#w + 1] = k end
    table.sort(w)
    return string.format("lua5.4 spec/fuzz/fuzz.lua --seed %d --steps %d --corpus %d%s --verbose", seed, options.steps,
      options.corpus, #w > 0 and (" --without " .. table.concat(w, ",")) or "")
  end)
