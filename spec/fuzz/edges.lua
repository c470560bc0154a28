-- The fuzzer's operations at the edges of the boundary (spec/fuzz/fuzz.lua registers them):
--
--   require_tricks  a script that can only call `require` rewrites package.cpath, package.path,
--                   package.loaded, package.preload and package.searchers, with package.loadlib
--                   removed as a sandbox removes it: no dlpack.unsafe function may come back.
--   closing_state   a random script in a fresh lua_State (fabricate's run_threads), closed at its
--                   end: C producers' capsules it drops, tensors and capsules made by finalizers
--                   that run before and after the module's cleanup at lua_close, a stopped
--                   collector. Every fabricated tensor must be deleted exactly once by the time
--                   the state is closed.
--   int64_edge      tensors with a size of 2^63 - 1 (an empty one, or one element expanded),
--                   views and element access with indices and bounds at both ends of int64:
--                   results or clear errors, and (under UBSan) no signed overflow.
--
-- Like every generator of the fuzzer, these draw from math.random only, and the number of
-- draws never depends on what the module answered.
local G = require "fuzz.gen"

local R = math.random
local MAXINT, MININT = math.maxinteger, math.mininteger
local E = {}

local UNSAFE_NAMES = { "adopt", "take", "wrap", "wrap_stream", "address", "pointer" }

-- The name of a dlpack.unsafe function that v (the value a require returned) holds, or nil.
-- `take` is also the safe API's indexing function (a tensor and an index); dlpack.unsafe's takes a
-- capsule: told apart by what each says to no argument.
local function is_unsafe(k, f)
  if k ~= "take" then return true end
  local ok, err = pcall(f)
  return ok or tostring(err):find("capsule", 1, true) ~= nil
end

local function unsafe_in(v)
  if type(v) ~= "table" then return nil end
  for _, k in ipairs(UNSAFE_NAMES) do
    local f = rawget(v, k)
    if type(f) == "function" and is_unsafe(k, f) then return k end
  end
end
E.is_unsafe = is_unsafe

---------------------------------------------------------------------------
-- require_tricks

local NAMES = { "dlpack.unsafe", "dlpack_unsafe", "unsafe", "dlpack.unsafe-x", "x-dlpack.unsafe", "x-dlpack_unsafe",
  "dlpack-unsafe", "dlpack.unsafe.core", "dlpack.core", "dlpack", "dlpack_core", "dlpack.core-unsafe" }

local function templates(core)
  local dir = core:gsub("/dlpack/core%.so$", "")
  return { core, core .. ";" .. core, dir .. "/?.so", dir .. "/dlpack/?.so", dir .. "/?/core.so", dir .. "/?",
    dir .. "/dlpack/core.so;" .. dir .. "/?.so", "?", package.cpath }
end

local function lua_templates()
  local unsafe = package.searchpath("dlpack.unsafe", package.path)
  local dir = unsafe and unsafe:gsub("/dlpack/unsafe%.lua$", "") or "lua"
  return { "", dir .. "/?.lua", dir .. "/dlpack/unsafe.lua", dir .. "/?/init.lua", package.path }
end

-- Which searchers, in which order (indices into the standard four).
local ORDERS = { { 1, 2, 3, 4 }, { 4, 3, 2, 1 }, { 3, 4 }, { 4 }, { 3 }, { 1, 3, 4 }, { 2, 4, 3 } }

local function require_tricks()
  local core = package.searchpath("dlpack.core", package.cpath)
  if not core then return function() end end
  local CPATHS, PATHS = templates(core), lua_templates()
  return function(S)
    local cpath, path, name, order = G.pick(CPATHS), G.pick(PATHS), G.pick(NAMES), G.pick(ORDERS)
    local clear, preload = R(4), R(3)
    local desc = string.format("[sandbox] package.cpath = %q; package.path = %q; searchers {%s}; %s%srequire %q",
      cpath, path, table.concat(order, ", "),
      clear == 1 and "package.loaded.dlpack, ['dlpack.core'] = nil; " or "",
      preload == 1 and "package.preload['dlpack.unsafe'] = <loads dlpack.core>; " or "", name)
    local searchers = package.searchers
    local saved = { path = package.path, cpath = package.cpath, loadlib = package.loadlib, searchers = {},
      dlpack = package.loaded.dlpack, core = package.loaded["dlpack.core"], unsafe = package.loaded["dlpack.unsafe"] }
    for i, s in ipairs(searchers) do saved.searchers[i] = s end
    package.loadlib = nil -- what a sandbox removes
    package.cpath, package.path = cpath, path
    for i = #searchers, 1, -1 do searchers[i] = nil end
    for i, k in ipairs(order) do searchers[i] = saved.searchers[k] end
    if clear == 1 then package.loaded.dlpack, package.loaded["dlpack.core"] = nil, nil end
    package.loaded["dlpack.unsafe"] = nil
    if preload == 1 then package.preload["dlpack.unsafe"] = function() return require "dlpack.core" end end
    local ok, res = S:call(desc, require, name)
    package.loadlib, package.path, package.cpath = saved.loadlib, saved.path, saved.cpath
    for i = #searchers, 1, -1 do searchers[i] = nil end
    for i, s in ipairs(saved.searchers) do searchers[i] = s end
    package.loaded.dlpack, package.loaded["dlpack.core"] = saved.dlpack, saved.core
    package.loaded["dlpack.unsafe"], package.preload["dlpack.unsafe"] = saved.unsafe, nil
    if name ~= "dlpack" and name ~= "dlpack.core" and name ~= "dlpack_core" then package.loaded[name] = nil end
    local k = ok and unsafe_in(res)
    if k then S:fail("a script that can only call require reached dlpack.unsafe (" .. k .. ")") end
  end
end

---------------------------------------------------------------------------
-- closing_state

-- What a finalizer (or the script itself) does; some make fabricated tensors, whose deleters
-- must all have run once the state is closed.
local DEEDS = {
  "G[#G + 1] = d.zeros({8})",
  "G[#G + 1] = d.tensor({1, 2, 3}):narrow(1, 2, 2)",
  -- fabricate's capsules are a host's: whoever fails to import one hands it back
  "local c = versioned({shape = {4}}); local ok, t = pcall(d.from_dlpack, c)\n" ..
    "if ok then G[#G + 1] = t else d.release_capsule(c) end",
  "local c = versioned({shape = {3}}); local ok = pcall(d.from_dlpack, c); if not ok then d.release_capsule(c) end",
  "local p = producer({shape = {2}}); local c = getmetatable(p).__dlpack(p, {})",
  "local p = producer({shape = {2}, legacy = true}); G[#G + 1] = getmetatable(p).__dlpack(p)",
  "local p = producer({shape = {5}}); G[#G + 1] = d.from_dlpack(p)",
  "local p = producer({}); G[#G + 1] = d.from_dlpack(getmetatable(p).__dlpack(p, {max_version = {1, 0}}))",
  "G[#G + 1] = d.to_dlpack(d.zeros({2}))",
  -- a script capsule of a fabricated tensor, dropped: it goes back at close once isolated
  "if ISOLATED then local c = versioned({shape = {2}}); local ok, t = pcall(d.from_dlpack, c)\n" ..
    "if ok then d.to_dlpack(t) else d.release_capsule(c) end end",
  "if G[1] then G[1]:release() end",
  "G[#G + 1] = G[#G] and d.from_dlpack(G[#G])",
  "collectgarbage()",
  "collectgarbage('step')",
  "G[#G + 1] = require('dlpack.unsafe').wrap_stream(12345)",
}
local SETTINGS = { "", "collectgarbage('stop')", "collectgarbage('generational')",
  "collectgarbage('incremental', 1, 1000)", "fab.isolate(); ISOLATED = true" }

local PRELUDE = [[
local fab, try = require "fabricate", function(f) pcall(f) end
local d
G, K = {}, {}
local function versioned(spec) return (fab.versioned(spec)) end
local function producer(spec)
  local p = fab.c_producer(spec)
  return setmetatable({}, {__dlpack = getmetatable(p).__dlpack, __dlpack_device = getmetatable(p).__dlpack_device})
end
]]

-- A finalizer doing deed: kept until lua_close, or garbage at once (it then runs whenever the
-- collector finds it; before `require "dlpack"` returned, it does nothing).
local function finalizer(deed)
  return (R(2) == 1 and "K[#K + 1] = " or "") .. "setmetatable({}, {__gc = function() if d then try(function() " ..
    deed .. " end) end end})"
end

local function closing_state(env)
  local fab = env.fab
  return function(S)
    local parts = { PRELUDE }
    for _ = 1, R(0, 3) do parts[#parts + 1] = finalizer(G.pick(DEEDS)) end -- run after the cleanup
    parts[#parts + 1] = "d = require 'dlpack'"
    parts[#parts + 1] = G.pick(SETTINGS)
    for _ = 1, R(1, 8) do
      local deed = G.pick(DEEDS)
      parts[#parts + 1] = R(3) == 1 and finalizer(deed) or ("try(function() " .. deed .. " end)")
    end
    local chunk = table.concat(parts, "\n")
    if not fab then return end
    collectgarbage("stop") -- nothing of this state may run a deleter meanwhile
    local live, deleted, double = fab.live(), fab.deleted(), fab.double_deletes()
    local ok, results = S:call("[fresh lua_State, closed at its end]\n" .. chunk, fab.run_threads, chunk, 1)
    local made = fab.deleted() - deleted -- every one, when none is left alive (checked below)
    collectgarbage("restart")
    if not ok then
      S:fail("fabricate.run_threads raised: " .. tostring(results))
    elseif not results[1].ok then
      S:fail("the script raised: " .. tostring(results[1].value))
    end
    if fab.live() ~= live then
      S:fail(string.format("lua_close left %d fabricated tensors alive (deleters never run)", fab.live() - live))
    end
    if fab.double_deletes() ~= double then S:fail("a deleter ran twice") end
    S.fab_expected = S.fab_expected + made
  end
end

---------------------------------------------------------------------------
-- int64_edge

local EDGE = { -1, 0, 1, 2, -2, 3, MAXINT, MAXINT - 1, MININT, MININT + 1, -MAXINT, 1 << 62, -(1 << 62) }
local EDGE_SHAPES = { { MAXINT }, { 1, MAXINT }, { MAXINT, 1 }, { 0, MAXINT }, { MAXINT, 0 }, { 1 << 62, 4, 0 },
  { 0, MAXINT, 1 }, { MAXINT, 0, MAXINT } }

local function edge(S, T, dlpack)
  -- the tensor: an expanded element (all 2^63 - 1 elements alias one) or an empty tensor
  local shape = G.pick(EDGE_SHAPES)
  local dtype = G.pick({ "int8", "int64", "uint16", "float64", "bool" }) -- values read back exactly
  local empty = false
  for _, n in ipairs(shape) do if n == 0 then empty = true end end
  local value = G.valid_value(dtype)
  local name = "X" .. S:serial()
  local ok, t
  if empty then
    ok, t = S:call(string.format("%s = dlpack.empty(%s, %q)", name, G.fmt_list(shape), dtype), dlpack.empty, shape,
      dtype)
  else
    local ones = {}
    for i = 1, #shape do ones[i] = 1 end
    ok, t = S:call(string.format("%s = dlpack.full(%s, %s, %q):expand(%s)", name, G.fmt_list(ones), G.fmt(value),
      dtype, G.fmt_list(shape)), function() return dlpack.full(ones, value, dtype):expand(shape) end)
  end
  if not ok then
    S:fail("making an int64-edge tensor raised: " .. tostring(t))
    return
  end
  -- a chain of views and accesses on it
  local cur, cname = t, name
  for _ = 1, R(1, 5) do
    local which, a, b, c = R(17), G.pick(EDGE), G.pick(EDGE), G.pick(EDGE)
    local d = R(-3, 3)
    local r, call
    if which == 1 then
      call = string.format("%s:narrow(%d, %s, %s)", cname, d, G.fmt(a), G.fmt(b))
      ok, r = S:call(call, T.narrow, cur, d, a, b)
    elseif which == 2 then
      call = string.format("%s:slice(%d, %s, %s, %s)", cname, d, G.fmt(a), G.fmt(b), G.fmt(c))
      ok, r = S:call(call, T.slice, cur, d, a, b, c ~= 0 and c or nil)
    elseif which == 3 then
      call = string.format("%s:select(%d, %s)", cname, d, G.fmt(a))
      ok, r = S:call(call, T.select, cur, d, a)
    elseif which == 4 then
      call = string.format("%s[%s]", cname, G.fmt(a))
      ok, r = S:call(call, function() return cur[a] end)
      if ok and type(r) ~= "userdata" and not empty and r ~= value and not (r ~= r and value ~= value) then
        S:fail(call .. " read " .. G.fmt(r) .. ", the expanded element is " .. G.fmt(value))
      end
    elseif which == 5 then
      call = string.format("%s[%s] = %s", cname, G.fmt(a), G.fmt(value))
      ok = S:call(call, function() cur[a] = value end)
    elseif which == 6 then
      call = string.format("%s:transpose(%d, %d)", cname, d, R(-3, 3))
      ok, r = S:call(call, T.transpose, cur, d, R(-3, 3))
    elseif which == 7 then
      call = string.format("%s:unsqueeze(%d)", cname, d)
      ok, r = S:call(call, T.unsqueeze, cur, d)
    elseif which == 8 then
      call = cname .. ":squeeze()"
      ok, r = S:call(call, T.squeeze, cur)
    elseif which == 9 then
      local to = { a, b }
      call = string.format("%s:expand(%s)", cname, G.fmt_list(to))
      ok, r = S:call(call, T.expand, cur, to)
    elseif which == 10 then
      local to = { a, -1 }
      call = string.format("%s:reshape(%s)", cname, G.fmt_list(to))
      ok, r = S:call(call, T.reshape, cur, to)
    elseif which == 11 then
      call = string.format("#%s, %s:size(%d), %s:stride(%d), %s:numel()", cname, cname, d, cname, d, cname)
      ok = S:call(call, function() return #cur, cur:size(d), cur:stride(d), cur:numel(), cur:is_contiguous() end)
    elseif which == 12 then
      call = string.format("tostring(%s), %s:totable()", cname, cname)
      ok = S:call(call, function() return tostring(cur), pcall(T.totable, cur) end)
    elseif which == 13 then
      call = string.format("dlpack.from_dlpack(dlpack.to_dlpack(%s))", cname)
      ok, r = S:call(call, function() return dlpack.from_dlpack(dlpack.to_dlpack(cur)) end)
    elseif which == 15 then
      -- bytes past int64 (2^62 elements of 4 bytes): a clear error, never a short block
      call = string.format("%s:tobytes(), %s.nbytes", cname, cname)
      ok = S:call(call, function()
        local done, bytes = pcall(T.tobytes, cur)
        local numel, size, nbytes = cur:numel(), cur.itemsize, cur.nbytes
        local right -- an integer when numel * itemsize fits int64, else a float
        if numel <= MAXINT // size then right = math.type(nbytes) == "integer" and nbytes == numel * size
        else right = math.type(nbytes) == "float" and nbytes == numel * 1.0 * size end
        if not right then S:fail(call .. ": nbytes is " .. G.fmt(nbytes) .. " for " .. numel .. " elements") end
        if done and #bytes ~= nbytes then S:fail(call .. ": " .. #bytes .. " bytes, nbytes " .. G.fmt(nbytes)) end
      end)
    elseif which == 16 then
      -- a copy into 2^63 - 1 expanded elements writes the element once
      call = string.format("%s:copy(dlpack.full({1}, %s, %q):expand(%s:size()))", cname, G.fmt(value), dtype, cname)
      ok = S:call(call, function()
        local src = cur.ndim > 0 and dlpack.full({1}, value, dtype):expand(cur:size()) or dlpack.full({}, value, dtype)
        return cur:copy(src)
      end)
    else
      call = string.format("%s:get(%s, %s)", cname, G.fmt(a), G.fmt(b))
      ok, r = S:call(call, T.get, cur, a, b)
    end
    if ok and type(r) == "userdata" and not dlpack.is_capsule(r) then
      if cur ~= t then pcall(T.release, cur) end
      cur, cname = r, "V" .. S:serial()
    end
  end
  if cur ~= t then pcall(T.release, cur) end
  pcall(T.release, t)
end

---------------------------------------------------------------------------

-- env: {dlpack =, fab =, T =}; op(name, weight, fn) adds to the catalog.
function E.register(op, env)
  op("require_tricks", 2, require_tricks())
  op("closing_state", 1, closing_state(env))
  op("int64_edge", 3, function(S) edge(S, env.T, env.dlpack) end)
end

return E
