-- The part of busted the specs use, in plain Lua, for the runtimes busted cannot run under
-- (Lua 5.5: Debian's busted needs C modules built for 5.4; a Windows Lua). The assertions are
-- the real luassert's (pure Lua: LUA_PATH must find luassert and say).
--   lua spec/runner.lua [spec files...]      (default: every spec/*_spec.lua)
-- As busted does: spec/helper.lua runs first; each file runs in its own environment, with
-- describe, it, pending, setup, teardown, before_each, after_each and luassert as `assert`,
-- and the globals and package.loaded it adds are dropped after it; a describe's body runs when
-- its turn comes; `pending(reason)` inside an `it` ends that test as pending. Prints TAP ("ok N
-- - describe ... it", "not ok N - ..." with the error as comments, "ok N - name # SKIP reason")
-- and exits with status 0 when no test failed, 1 otherwise.
local luassert = require "luassert"

-- loadfile with an environment on every version (5.1 and LuaJIT: setfenv).
local setfenv = rawget(_G, "setfenv")
local function load_in(path, env)
  if not setfenv then return loadfile(path, "t", env) end
  local chunk, err = loadfile(path)
  if chunk then setfenv(chunk, env) end
  return chunk, err
end

local function spec_files()
  local files = {}
  local windows = package.config:sub(1, 1) == "\\"
  local list = io.popen(windows and "dir /b /on spec\\*_spec.lua" or "ls spec/*_spec.lua")
  for name in list:lines() do
    files[#files + 1] = name:find("[/\\]") and name or "spec/" .. name
  end
  list:close()
  return files
end

local count, failed = 0, 0

local function comment(text)
  for line in (tostring(text):gsub("\n+$", "") .. "\n"):gmatch("(.-)\n") do print("# " .. line) end
end

local function report(ok, name, detail)
  count = count + 1
  if ok then
    print(string.format("ok %d - %s", count, name))
  else
    failed = failed + 1
    print(string.format("not ok %d - %s", count, name))
    comment(detail)
  end
  io.stdout:flush()
end

-- The error a `pending` inside a running test raises: the test then reports as skipped.
local PENDING = {}
local function traceback(err)
  if getmetatable(err) == PENDING then return err end
  return debug.traceback(tostring(err), 2)
end

-- A block (a file or a describe): its body, which declares its children when it runs.
local current, running
local function new_block(name, parent, body)
  return {name = name, parent = parent, body = body, children = {}, setup = {}, teardown = {},
          before_each = {}, after_each = {}}
end

local function full_name(block, name)
  local parts = {tostring(name)}
  while block and block.name do
    table.insert(parts, 1, tostring(block.name))
    block = block.parent
  end
  return table.concat(parts, " ")
end

-- Calls the before_each functions from the outermost block in (or the after_each ones from the
-- innermost out); the first error wins.
local function run_hooks(block, key, ok, err)
  local chain = {}
  while block do
    if key == "before_each" then table.insert(chain, 1, block) else chain[#chain + 1] = block end
    block = block.parent
  end
  for _, b in ipairs(chain) do
    for _, fn in ipairs(b[key]) do
      if not ok and key == "before_each" then return ok, err end
      local ok2, err2 = xpcall(fn, traceback)
      -- a hook's error wins over a test's `pending`: a skip must not hide a failure
      if not ok2 and (ok or (getmetatable(err) == PENDING and getmetatable(err2) ~= PENDING)) then
        ok, err = ok2, err2
      end
    end
  end
  return ok, err
end

local function run_test(block, test)
  if test.pending then -- pending(reason) in a describe: the reason is the name
    count = count + 1
    print(string.format("ok %d - %s # SKIP %s", count, full_name(block.parent, block.name), test.pending))
    return
  end
  local name = full_name(block, test.name)
  running = true -- `pending` in a hook or the test ends this test as pending
  local ok, err = run_hooks(block, "before_each", true)
  if ok then ok, err = xpcall(test.fn, traceback) end
  ok, err = run_hooks(block, "after_each", ok, err)
  running = false
  if not ok and getmetatable(err) == PENDING then
    count = count + 1
    print(string.format("ok %d - %s # SKIP %s", count, name, err.message))
  else
    report(ok, name, err)
  end
end

local function run_block(block)
  current = block
  local ok, err = xpcall(block.body, traceback)
  current = block.parent
  if not ok then return report(false, full_name(block.parent, block.name or "suite " .. block.file), err) end
  for _, fn in ipairs(block.setup) do
    ok, err = xpcall(fn, traceback)
    if not ok then return report(false, full_name(block, "setup"), err) end
  end
  for _, child in ipairs(block.children) do
    if child.body then run_block(child) else run_test(block, child) end
  end
  for _, fn in ipairs(block.teardown) do
    ok, err = xpcall(fn, traceback)
    if not ok then report(false, full_name(block, "teardown"), err) end
  end
end

local function add(key, fn) local list = current[key]; list[#list + 1] = fn end

local api = {
  describe = function(name, body)
    local list = current.children
    list[#list + 1] = new_block(name, current, body)
  end,
  it = function(name, fn) add("children", {name = name, fn = fn}) end,
  pending = function(reason)
    if running then error(setmetatable({message = reason}, PENDING)) end
    add("children", {pending = reason})
  end,
  setup = function(fn) add("setup", fn) end,
  teardown = function(fn) add("teardown", fn) end,
  before_each = function(fn) add("before_each", fn) end,
  after_each = function(fn) add("after_each", fn) end,
}

-- The file's own environment: busted's functions and luassert before the globals.
local function environment()
  local env = setmetatable({assert = luassert}, {__index = _G})
  for name, fn in pairs(api) do env[name] = fn end
  return env
end

local helper = assert(load_in("spec/helper.lua", environment()))
helper()

for _, path in ipairs(#arg > 0 and arg or spec_files()) do
  local globals, loaded = {}, {}
  for k, v in pairs(_G) do globals[k] = v end
  for k, v in pairs(package.loaded) do loaded[k] = v end
  local chunk, err = load_in(path, environment())
  if chunk then
    local file = new_block(nil, nil, chunk)
    file.file = path
    -- an error of the runner's own (outside any test) fails the file, not the whole run silently
    local ok, failure = xpcall(function() run_block(file) end, traceback)
    running = false
    if not ok then report(false, "suite " .. path .. " (the runner stopped in it)", failure) end
  else
    report(false, "suite " .. path, err)
  end
  for k in pairs(_G) do if globals[k] == nil then _G[k] = nil end end
  for k in pairs(package.loaded) do if loaded[k] == nil then package.loaded[k] = nil end end
end

print("1.." .. count)
os.exit(failed == 0 and 0 or 1, true)
