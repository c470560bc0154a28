-- A small test harness in plain Lua for the CUDA suite, so that the same suite
-- runs where busted is not installed (a GPU machine with only lua5.4): the
-- subset of busted's and luassert's API the suite uses (describe, it, pending,
-- before_each, after_each; assert.are.equal, are.same, are_not.equal, is_true,
-- is_false, is_nil, is_truthy), TAP output, and a last comment line
-- "# N passed, M failed, K skipped".
local harness = {}

-- ---- assertions -------------------------------------------------------------

local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

-- deep equality of plain values and tables (metatables are not consulted)
local function same(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  for k, v in pairs(a) do
    if not same(v, rawget(b, k)) then return false end
  end
  for k in pairs(b) do
    if rawget(a, k) == nil then return false end
  end
  return true
end

local function dump(v, depth)
  if type(v) ~= "table" then return show(v) end
  if (depth or 0) > 3 then return "{...}" end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(x, y) return tostring(x) < tostring(y) end)
  local parts = {}
  for _, k in ipairs(keys) do
    parts[#parts + 1] = (math.type(k) == "integer" and "" or tostring(k) .. " = ") .. dump(v[k], (depth or 0) + 1)
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

local function fail(message, detail)
  error((message and tostring(message) .. "\n" or "") .. detail, 3)
end

local assert_ = {
  are = {
    equal = function(want, got, message)
      if want ~= got then fail(message, "expected " .. show(want) .. ", got " .. show(got)) end
    end,
    same = function(want, got, message)
      if not same(want, got) then fail(message, "expected " .. dump(want) .. ", got " .. dump(got)) end
    end,
  },
  are_not = {
    equal = function(want, got, message)
      if want == got then fail(message, "expected a value other than " .. show(want)) end
    end,
  },
  is_true = function(v, message) if v ~= true then fail(message, "expected true, got " .. show(v)) end end,
  is_false = function(v, message) if v ~= false then fail(message, "expected false, got " .. show(v)) end end,
  is_nil = function(v, message) if v ~= nil then fail(message, "expected nil, got " .. show(v)) end end,
  is_truthy = function(v, message) if not v then fail(message, "expected a true value, got " .. show(v)) end end,
}
setmetatable(assert_, {
  __call = function(_, v, message, ...)
    if not v then error(message or "assertion failed!", 2) end
    return v, message, ...
  end,
})
harness.assert = assert_

-- ---- the tree of tests ------------------------------------------------------

local root = {name = nil, children = {}, before = {}, after = {}}
local current = root

local function add(node)
  node.parent = current
  current.children[#current.children + 1] = node
end

function harness.describe(name, fn)
  local node = {name = name, children = {}, before = {}, after = {}}
  add(node)
  local outer = current
  current = node
  fn()
  current = outer
end

function harness.it(name, fn) add({name = name, test = fn}) end
function harness.pending(name) add({name = name, pending = true}) end
function harness.before_each(fn) current.before[#current.before + 1] = fn end
function harness.after_each(fn) current.after[#current.after + 1] = fn end

local function full_name(node)
  local parts = {}
  while node and node.name do
    table.insert(parts, 1, node.name)
    node = node.parent
  end
  return table.concat(parts, " ")
end

-- the before_each functions from the outermost block in, the after_each ones from the innermost out
local function hooks(node, key)
  local chain, list = {}, {}
  local n = node.parent
  while n do
    table.insert(chain, 1, n)
    n = n.parent
  end
  for _, block in ipairs(chain) do
    for _, fn in ipairs(block[key]) do list[#list + 1] = fn end
  end
  if key == "after" then
    local reversed = {}
    for i = #list, 1, -1 do reversed[#reversed + 1] = list[i] end
    return reversed
  end
  return list
end

-- Runs every test defined so far; prints TAP; returns the number of failures.
function harness.run()
  local count, passed, failed, skipped = 0, 0, 0, 0
  local function comment(text)
    for line in (tostring(text) .. "\n"):gmatch("(.-)\n") do print("# " .. line) end
  end
  local function visit(node)
    if node.children then
      for _, child in ipairs(node.children) do visit(child) end
      return
    end
    count = count + 1
    if node.pending then -- busted's pending(reason): the reason is the name
      skipped = skipped + 1
      print(string.format("ok %d - %s # SKIP %s", count, full_name(node.parent), node.name))
      return
    end
    local name = full_name(node)
    local ok, err = true, nil
    for _, fn in ipairs(hooks(node, "before")) do
      if ok then ok, err = xpcall(fn, debug.traceback) end
    end
    if ok then ok, err = xpcall(node.test, debug.traceback) end
    for _, fn in ipairs(hooks(node, "after")) do
      local ok2, err2 = xpcall(fn, debug.traceback)
      if ok and not ok2 then ok, err = ok2, err2 end
    end
    if ok then
      passed = passed + 1
      print(string.format("ok %d - %s", count, name))
    else
      failed = failed + 1
      print(string.format("not ok %d - %s", count, name))
      comment(err)
    end
    io.stdout:flush()
  end
  visit(root)
  print("1.." .. count)
  print(string.format("# %d passed, %d failed, %d skipped", passed, failed, skipped))
  return failed
end

-- Makes the harness the globals the suite uses, and `require "luassert"` its assert.
function harness.install()
  for _, name in ipairs({"describe", "it", "pending", "before_each", "after_each"}) do
    _G[name] = harness[name]
  end
  _G.assert = assert_
  package.loaded.luassert = assert_
end

return harness
