-- dlpack.unsafe stays out of reach of a sandboxed script: one that can call `require` and
-- rewrite every field of `package`, but has no package.loadlib, debug, io, os or binary
-- chunks (README, "Safety"). Each attack runs in a fresh lua_State made by a C host
-- (fabricate's run_threads), so that nothing here changes the state busted runs in.
local dlpack = require "dlpack"
local fab = require "fabricate"

local CORE = package.searchpath("dlpack.core", package.cpath)
local LUA_DIR = (package.searchpath("dlpack.unsafe", package.path) or "lua/dlpack/unsafe.lua")
  :gsub("/dlpack/unsafe%.lua$", "")

-- The names of every luaopen_* function the module's library exports (nil without nm).
local function luaopen_symbols()
  local p = io.popen("nm -D --defined-only '" .. CORE .. "' 2>/dev/null")
  if not p then return nil end
  local names = {}
  for line in p:lines() do
    local name = line:match("%s[TtWw]%s+(luaopen_[%w_]+)$")
    if name then names[#names + 1] = name end
  end
  p:close()
  table.sort(names)
  return #names > 0 and names or nil
end

-- Runs code in a fresh state on another thread; returns what it returned (its error raises).
local function in_fresh_state(code)
  local r = fab.run_threads(code, 1)[1]
  assert.is_true(r.ok, tostring(r.value))
  return r.value
end

-- The sandbox a host builds (README, "Safety"), then the attacker's code, which returns a
-- list of the ways it found (one per line) or "".
local SANDBOX = [[
  local CORE, LUA_DIR = %q, %q
  package.loadlib = nil
  debug, io, os, dofile, loadfile, loadstring = nil, nil, nil, nil, nil, nil
  local load_ = load
  load = function(chunk, name, mode, env)
    if mode ~= "t" and mode ~= nil then error("binary chunks are off") end
    return load_(chunk, name, "t", env)
  end
  if package.preload then package.preload.ffi = nil end
  package.loaded.ffi = nil
  package.loaded.debug, package.loaded.io, package.loaded.os = nil, nil, nil
]]

local ATTACKER = [[
  local UNSAFE_NAMES = {"adopt", "take", "wrap", "wrap_stream", "address", "pointer"}
  local found = {}
  local function unsafe_in(v)
    if type(v) ~= "table" then return nil end
    for _, k in ipairs(UNSAFE_NAMES) do
      if type(rawget(v, k)) == "function" then return k end
    end
  end
  local saved = {path = package.path, cpath = package.cpath, searchers = {}}
  local searchers = package.searchers or package.loaders
  for i, s in ipairs(searchers) do saved.searchers[i] = s end
  local function restore()
    package.path, package.cpath = saved.path, saved.cpath
    for i = #searchers, 1, -1 do searchers[i] = nil end
    for i, s in ipairs(saved.searchers) do searchers[i] = s end
  end
  local function try(how, name)
    package.loaded[name] = nil
    local ok, v = pcall(require, name)
    local k = ok and unsafe_in(v)
    if k then found[#found + 1] = how .. ", require '" .. name .. "' gives " .. k end
  end
  local dir = CORE:gsub("/dlpack/core%.so$", "")
  local NAMES = {"dlpack.unsafe", "dlpack_unsafe", "unsafe", "dlpack.unsafe-x", "x-dlpack.unsafe",
                 "dlpack-unsafe", "x-dlpack_unsafe", "dlpack.unsafe.core", "dlpack.core", "dlpack",
                 "dlpack_core", "core", "x.dlpack.unsafe"}
  for _, n in ipairs(EXTRA_NAMES) do NAMES[#NAMES + 1] = n end
  local CPATHS = {CORE, CORE .. ";" .. CORE, dir .. "/?.so", dir .. "/dlpack/?.so", dir .. "/?/core.so",
                  dir .. "/dlpack/core.so;" .. dir .. "/?.so", dir .. "/?", "?", saved.cpath}
  local PATHS = {"", LUA_DIR .. "/?.lua", LUA_DIR .. "/dlpack/unsafe.lua", LUA_DIR .. "/?/init.lua", saved.path}
  -- every cpath and path template with every name, the searchers as they are
  for _, cpath in ipairs(CPATHS) do
    for _, path in ipairs(PATHS) do
      package.cpath, package.path = cpath, path
      for _, name in ipairs(NAMES) do try("cpath '" .. cpath .. "', path '" .. path .. "'", name) end
    end
  end
  restore()
  -- the searchers reordered: the all-in-one C loader or the C loader first, or alone
  local orders = {{4, 3, 2, 1}, {3, 4}, {4}, {3}, {1, 3, 4}}
  for _, order in ipairs(orders) do
    for _, cpath in ipairs(CPATHS) do
      package.cpath, package.path = cpath, ""
      for i = #searchers, 1, -1 do searchers[i] = nil end
      for i, k in ipairs(order) do searchers[i] = saved.searchers[k] end
      local how = "searchers {" .. table.concat(order, ",") .. "}, cpath '" .. cpath .. "'"
      for _, name in ipairs(NAMES) do try(how, name) end
    end
  end
  restore()
  -- package.loaded and package.preload rewritten, dlpack required again under other names
  package.loaded.dlpack, package.loaded["dlpack.core"] = nil, nil
  package.preload["dlpack.unsafe"] = function(...) return require("dlpack.core", ...) end
  try("preload pointing at dlpack.core", "dlpack.unsafe")
  package.preload["dlpack.unsafe"] = nil
  setmetatable(package.loaded, {__index = function(_, k) return nil end})
  for _, name in ipairs(NAMES) do try("a metatable on package.loaded", name) end
  setmetatable(package.loaded, nil)
  -- every function reachable from the safe module's table, its metatables included
  local seen = {}
  local function walk(v, where)
    if seen[v] then return end
    seen[v] = true
    local k = unsafe_in(v)
    if k then found[#found + 1] = where .. " holds " .. k end
    if type(v) == "table" then
      for key, value in pairs(v) do
        if type(value) == "table" then walk(value, where .. "." .. tostring(key)) end
      end
    end
    local mt = getmetatable(v)
    if type(mt) == "table" then walk(mt, where .. "'s metatable") end
  end
  walk(require "dlpack", "dlpack")
  walk(getmetatable(require("dlpack").zeros({1})), "a tensor's metatable")
  return table.concat(found, "\n")
]]

-- The attack, with extra module names to require, in a fresh sandboxed state.
local function attack(extra_names)
  local list = {}
  for i, n in ipairs(extra_names) do list[i] = ("%q"):format(n) end
  return in_fresh_state(SANDBOX:format(CORE, LUA_DIR) .. "local EXTRA_NAMES = {" .. table.concat(list, ", ") ..
    "}\n" .. ATTACKER)
end

describe("dlpack.unsafe and a sandboxed script", function()
  it("is reached by no require, whatever the script does to package", function()
    local found = attack({})
    assert.are.equal("", found, "a sandboxed script reached dlpack.unsafe:\n" .. found)
  end)

  it("is reached by no luaopen_* function of the module's library (listed by nm)", function()
    local symbols = luaopen_symbols()
    if not symbols then return pending("nm not found (binutils): the library's symbols cannot be listed") end
    assert.are.same({"luaopen_dlpack", "luaopen_dlpack_core"}, symbols)
    local names = {}
    for i, s in ipairs(symbols) do names[i] = s:gsub("^luaopen_", "") end
    assert.are.equal("", attack(names))
  end)

  it("says why when the sandbox removed package.loadlib", function()
    local code = SANDBOX:format(CORE, LUA_DIR) .. [[
      package.loaded["dlpack.unsafe"] = nil
      local ok, err = pcall(require, "dlpack.unsafe")
      return ok and "opened" or err
    ]]
    local err = in_fresh_state(code)
    assert.is_truthy(tostring(err):find("package.loadlib", 1, true), err)
  end)

  it("is offered where package.loadlib is (a trusted script), sharing capsules with dlpack", function()
    local r = in_fresh_state([[
      local d = require "dlpack"
      local unsafe = require "dlpack.unsafe"
      local ptr, name = unsafe.take(d.to_dlpack(d.tensor({1, 2, 3})))
      return table.concat(d.from_dlpack(unsafe.adopt(ptr, name)):totable(), ",")
    ]])
    assert.are.equal("1,2,3", r)
  end)

  it("has no luaopen_ entry point: a host opens it through C (dlpack_lua_open_unsafe)", function()
    assert.is_nil(package.loadlib(CORE, "luaopen_dlpack_unsafe"))
    assert.are.equal("function", type(package.loadlib(CORE, "dlpack_lua_open_unsafe")))
    assert.are.equal("function", type(require("dlpack.unsafe").adopt))
    assert.is_nil(dlpack.adopt)
  end)
end)
