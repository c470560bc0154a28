-- dlpack.unsafe and dlpack.ipc stay out of reach of a sandboxed script: one that can call `require` and
-- rewrite every field of `package`, but has no package.loadlib, debug, io, os or binary
-- chunks (README, "Safety"). Each attack runs in a fresh lua_State made by a C host
-- (fabricate's run_threads), so that nothing here changes the state busted runs in.
local dlpack = require "dlpack"
local fab = require "fabricate"
local support = require "support"

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
-- list of the ways it found (one per line) or "". The host opens the C modules scripts may use
-- (here dlpack, kept in package.preload) and then removes the C searchers: with them, a script
-- that points package.cpath at the Lua library itself (liblua5.4.so, libluajit-5.1.so) gets
-- luaopen_package (a fresh package.loadlib), luaopen_debug, luaopen_io or LuaJIT's luaopen_ffi.
-- KEEP_C_SEARCHERS leaves them in, to show that the module's own library offers nothing.
local SANDBOX = [[
  local CORE, LUA_DIR, KEEP_C_SEARCHERS = %q, %q, %s
  local dlpack_ = require "dlpack"
  dlpack_.deny_file_access() -- dlpack.save and dlpack.load open files by path
  package.preload.dlpack = function() return dlpack_ end
  if not KEEP_C_SEARCHERS then
    local searchers = package.searchers or package.loaders
    searchers[4], searchers[3] = nil, nil
  end
  package.loadlib = nil
  debug, io, os, dofile, loadfile, loadstring = nil, nil, nil, nil, nil, nil
  -- text chunks only: Lua 5.1's load has no mode, so the first byte is checked here
  local load_, setfenv_, concat = load, setfenv, table.concat
  load = function(chunk, name, mode, env)
    if type(chunk) == "function" then
      local parts = {}
      for piece in chunk do
        if piece == "" then break end
        parts[#parts + 1] = piece
      end
      chunk = concat(parts)
    end
    if type(chunk) ~= "string" or chunk:byte(1) == 27 then return nil, "binary chunks are off" end
    if not setfenv_ then return load_(chunk, name, "t", env) end
    local f, err = load_(function() local c = chunk; chunk = nil; return c end, name)
    if f and env then setfenv_(f, env) end
    return f, err
  end
  jit = nil
  for _, k in ipairs({"ffi", "jit", "jit.util", "jit.profile", "jit.opt", "debug", "io", "os"}) do
    package.loaded[k] = nil
    if package.preload then package.preload[k] = nil end
  end
]]

local ATTACKER = [[
  local UNSAFE_NAMES = {"adopt", "take", "wrap", "wrap_stream", "address", "pointer", "listen", "connect", "share"}
  local found = {}
  -- `take` is also the safe API's indexing function (a tensor and an index); dlpack.unsafe's takes a capsule
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
    for _, k in ipairs({"save", "load"}) do -- a module table with file access left on
      local f = rawget(v, k)
      if type(f) == "function" and not tostring(select(2, pcall(f, "x.npy"))):find("denied", 1, true) then return k end
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
                 "dlpack_core", "core", "x.dlpack.unsafe", "dlpack.ipc", "ipc", "dlpack_ipc", "dlpack.ipc.core",
                 "dlpack.entry"}
  for _, n in ipairs(EXTRA_NAMES) do NAMES[#NAMES + 1] = n end
  local CPATHS = {CORE, CORE .. ";" .. CORE, dir .. "/?.so", dir .. "/dlpack/?.so", dir .. "/?/core.so",
                  dir .. "/dlpack/core.so;" .. dir .. "/?.so", dir .. "/?", "?", saved.cpath}
  local PATHS = {"", LUA_DIR .. "/?.lua", LUA_DIR .. "/dlpack/unsafe.lua", LUA_DIR .. "/dlpack/ipc.lua",
                 LUA_DIR .. "/dlpack/entry.lua", LUA_DIR .. "/?/init.lua", saved.path}
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
  -- the Lua libraries on disk: their luaopen_package, luaopen_debug, luaopen_io, luaopen_os and
  -- LuaJIT's luaopen_ffi would give what the sandbox removed. Only the searchers are called (they
  -- load the library and find the function), never the loader itself.
  for _, lib in ipairs(LUA_LIBS) do
    package.cpath = lib
    for _, name in ipairs({"package", "debug", "io", "os", "ffi", "jit", "x-package", "x-debug"}) do
      for i, searcher in ipairs(searchers) do
        local ok, loader = pcall(searcher, name)
        if ok and type(loader) == "function" then
          found[#found + 1] = "searcher " .. i .. ", cpath '" .. lib .. "', gives a loader for '" .. name .. "'"
        end
      end
    end
  end
  restore()
  -- binary chunks (bytecode can corrupt the interpreter), and string.dump's output in particular
  local bytecode = string.dump(function() return 1 end)
  if load(bytecode) then found[#found + 1] = "load takes a binary chunk" end
  local sent = false
  if load(function() if not sent then sent = true; return bytecode end end) then
    found[#found + 1] = "load takes a binary chunk from a function"
  end
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

-- The Lua and LuaJIT shared libraries this machine has (ldconfig's cache and the usual folders);
-- none on Windows, which has neither.
local function lua_libraries()
  local libs, seen = {}, {}
  if support.WINDOWS then return libs end
  local function add(path)
    local base = path:match("[^/]+$")
    local lua_lib = base:match("^liblua%d") or base:match("^libluajit") or base:match("^liblua%.so")
    if seen[path] or not lua_lib then return end
    if base:match("^liblua%d[%d.]*%-") then return end -- liblua5.4-filesystem and the like
    local f = io.open(path, "rb")
    if not f then return end
    f:close()
    seen[path] = true
    libs[#libs + 1] = path
  end
  local p = io.popen("{ ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null")
  if p then
    for line in p:lines() do
      local path = line:match("=>%s*(%S+)$")
      if path then add(path) end
    end
    p:close()
  end
  for _, dir in ipairs({"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                        "/usr/lib", "/usr/lib64", "/usr/local/lib"}) do
    for _, v in ipairs({"5.1", "5.2", "5.3", "5.4"}) do
      add(dir .. "/liblua" .. v .. ".so.0")
      add(dir .. "/liblua" .. v .. ".so")
    end
    add(dir .. "/libluajit-5.1.so.2")
    add(dir .. "/libluajit-5.1.so")
    add(dir .. "/liblua.so")
  end
  table.sort(libs)
  return libs
end

local function quoted(list)
  local out = {}
  for i, n in ipairs(list) do out[i] = ("%q"):format(n) end
  return "{" .. table.concat(out, ", ") .. "}"
end

-- The attack, with extra module names to require, in a fresh sandboxed state. opts.keep_c_searchers:
-- a host that leaves the C searchers in; opts.libs: the Lua libraries to point package.cpath at.
local function attack(extra_names, opts)
  opts = opts or {}
  return in_fresh_state(SANDBOX:format(CORE, LUA_DIR, tostring(opts.keep_c_searchers == true)) ..
    "local EXTRA_NAMES = " .. quoted(extra_names) .. "\nlocal LUA_LIBS = " .. quoted(opts.libs or {}) .. "\n" ..
    ATTACKER)
end

describe("dlpack.unsafe and a sandboxed script", function()
  it("is reached by no require, whatever the script does to package", function()
    local found = attack({}, {libs = lua_libraries()})
    assert.are.equal("", found, "a sandboxed script reached dlpack.unsafe:\n" .. found)
  end)

  it("is reached by no require of the module's own library, where a host leaves the C searchers in", function()
    local found = attack({}, {keep_c_searchers = true})
    assert.are.equal("", found, "a sandboxed script reached dlpack.unsafe:\n" .. found)
  end)

  it("needs the C searchers gone: with them, a Lua library on disk gives package.loadlib back", function()
    if support.WINDOWS then return pending("lists Linux's Lua libraries (ldconfig): " .. support.NOT_WINDOWS) end
    local libs = lua_libraries()
    if #libs == 0 then return pending("no Lua shared library found on this machine") end
    local found = attack({}, {keep_c_searchers = true, libs = libs})
    assert.is_truthy(found:find("gives a loader for 'package'", 1, true), found)
  end)

  it("is reached by no luaopen_* function of the module's library (listed by nm)", function()
    if support.WINDOWS then return pending("nm reads ELF files (stage 47 lists core.dll's exports itself)") end
    local symbols = luaopen_symbols()
    if not symbols then return pending("nm not found (binutils): the library's symbols cannot be listed") end
    assert.are.same({"luaopen_dlpack", "luaopen_dlpack_core"}, symbols)
    local names = {}
    for i, s in ipairs(symbols) do names[i] = s:gsub("^luaopen_", "") end
    assert.are.equal("", attack(names, {keep_c_searchers = true}))
  end)

  it("says why when the sandbox removed package.loadlib", function()
    local code = SANDBOX:format(CORE, LUA_DIR, "false") .. [[
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

  it("makes tensors and streams with their metatables when opened before dlpack", function()
    local r = in_fresh_state(([[
      local unsafe = package.loadlib(%q, "dlpack_lua_open_unsafe")()
      local t = unsafe.wrap(unsafe.pointer(4096), {0}, "float32", {})
      local s = unsafe.wrap_stream(12345)
      local d = require "dlpack"
      return tostring(getmetatable(t) == getmetatable(d.zeros({1}))) .. " " ..
             tostring(getmetatable(s) == getmetatable(d.cuda.legacy_stream)) .. " " .. tostring(t.shape[1])
    ]]):format(CORE))
    assert.are.equal("true true 0", r)
  end)

  it("has no luaopen_ entry point: a host opens it through C (dlpack_lua_open_unsafe)", function()
    assert.is_nil(package.loadlib(CORE, "luaopen_dlpack_unsafe"))
    assert.are.equal("function", type(package.loadlib(CORE, "dlpack_lua_open_unsafe")))
    assert.are.equal("function", type(require("dlpack.unsafe").adopt))
    assert.is_nil(dlpack.adopt)
  end)
end)

describe("dlpack.ipc and a sandboxed script", function()
  if support.WINDOWS then
    pending("dlpack.ipc: " .. support.NOT_WINDOWS)
    return
  end
  -- the attack above also requires dlpack.ipc under every name and path, and counts listen,
  -- connect and share among the functions it must not reach
  it("says why when the sandbox removed package.loadlib", function()
    local code = SANDBOX:format(CORE, LUA_DIR, "false") .. [[
      package.loaded["dlpack.ipc"] = nil
      local ok, err = pcall(require, "dlpack.ipc")
      return ok and "opened" or err
    ]]
    local err = in_fresh_state(code)
    assert.is_truthy(tostring(err):find("dlpack.ipc needs package.loadlib", 1, true), err)
  end)

  it("has no luaopen_ entry point: a host opens it through C (dlpack_lua_open_ipc)", function()
    assert.is_nil(package.loadlib(CORE, "luaopen_dlpack_ipc"))
    assert.are.equal("function", type(package.loadlib(CORE, "dlpack_lua_open_ipc")))
    assert.are.equal("function", type(require("dlpack.ipc").listen))
    assert.is_nil(dlpack.listen)
  end)

  it("makes shareable tensors with the tensor metatable when opened before dlpack", function()
    local r = in_fresh_state(([[
      local ipc = package.loadlib(%q, "dlpack_lua_open_ipc")()
      local t = ipc.zeros({2})
      local d = require "dlpack"
      return tostring(getmetatable(t) == getmetatable(d.zeros({1}))) .. " " .. tostring(t.shareable)
    ]]):format(CORE))
    assert.are.equal("true true", r)
  end)
end)
