-- Helpers shared by the spec files: `local support = require "support"`
-- (spec/?.lua is on busted's lpath, see .busted). A plain module that defines no
-- globals. busted gives each spec file its own environment, so a required module
-- does not see busted's `assert`: it is luassert, the same module required here.
local assert = require "luassert"

local support = {}

-- Every dtype name the module knows, in the order of its dtype table.
support.DTYPES = {
  "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
  "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
  "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz",
  "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn",
  "float4_e2m1fn",
}

-- The integer dtypes, as a list and as a set.
support.INTS = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
support.IS_INT = {}
for _, d in ipairs(support.INTS) do support.IS_INT[d] = true end

-- The dtypes with element access that hold numbers, and those plus bool.
support.NUMERIC = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                   "float16", "bfloat16", "float32", "float64"}
support.ACCESSIBLE = {"bool", table.unpack(support.NUMERIC)}

-- Stage 11 runs every spec under a collector that works at every allocation (spec/helper.lua),
-- and stage 60 under valgrind (DLPACK_SPEC_FEWER_TRIALS=1), to find lifetime and memory bugs;
-- there, value checks that repeat over many random cases (models, long rows) run
-- `support.trials(n)` times, a tenth of the plain stage's n: they cost those stages the most,
-- and the values they check do not depend on the collector or the memory checker.
function support.trials(n)
  if os.getenv("DLPACK_SPEC_GC") == "incremental" or os.getenv("DLPACK_SPEC_FEWER_TRIALS") then
    return math.max(1, math.floor(n / 10))
  end
  return n
end

-- Calls fn, which must raise; returns the error value as raised.
local function error_of(fn)
  local ok, err = pcall(fn)
  assert.is_false(ok, "expected an error")
  return err
end

-- fn must raise; when pattern is given, the lowercased message must match it
-- as a Lua pattern. Returns the error value as raised (a string or an error object).
function support.raises(fn, pattern)
  local err = error_of(fn)
  if pattern then
    local msg = tostring(err):lower()
    assert.is_truthy(msg:find(pattern), "error '" .. tostring(err) .. "' does not match '" .. pattern .. "'")
  end
  return err
end

-- fn must raise; when text is given, the message must contain it as plain text,
-- ignoring case. Returns the message as a string.
function support.raises_plain(fn, text)
  local err = tostring(error_of(fn))
  if text then
    assert.is_truthy(err:lower():find(text:lower(), 1, true),
      "error '" .. err .. "' does not contain '" .. text .. "'")
  end
  return err
end

function support.is_nan(x) return x ~= x end

-- float32 values packed native-endian, as raw bytes
function support.f32(...) return string.pack(string.rep("f", select("#", ...)), ...) end

-- What differs between the Lua versions the specs run on (README.md, "Lua versions").
-- LUA54: Lua 5.4 or later (5.5), with `<close>` and the generational collector.
support.LUA54 = _VERSION == "Lua 5.4" or _VERSION == "Lua 5.5"
support.INTEGERS = math.type(1) == "integer" and math.type(2 ^ 53) == "float" -- 5.3 and 5.4
support.LUAJIT = type(rawget(_G, "jit")) == "table"
-- ipairs and pairs over userdata: Lua 5.2 asks __ipairs and __pairs, 5.3 and 5.4 __index and
-- __pairs; 5.1 and LuaJIT take tables only.
support.ITERATION = not support.LUAJIT and _VERSION ~= "Lua 5.1"
-- Weak-keyed tables are ephemerons from 5.2 on (not in 5.1 and LuaJIT).
support.EPHEMERONS = not support.LUAJIT and _VERSION ~= "Lua 5.1"
support.NO_ITERATION = "ipairs and pairs take only tables in " .. (support.LUAJIT and "LuaJIT" or _VERSION) ..
  " (iterate with for i = 1, #t)"

-- The interpreter running the specs (busted's arg[-1] and below), and the build folder the
-- module came from (build/ for Lua 5.4, build/<lua>/ for the others).
support.LUA = "lua5.4"
for i = -1, -10, -1 do
  if not (arg and arg[i]) then break end
  support.LUA = arg[i]
end
support.BUILD = (package.searchpath("dlpack.core", package.cpath) or "build/dlpack/core.so")
  :gsub("[/\\]dlpack[/\\]core%.%w+$", "")

-- Windows (the stage that runs the specs under Wine): no POSIX shell, no dlpack.ipc, and
-- libraries are .dll files. Specs of Linux-only things are pending there with this reason.
support.WINDOWS = package.config:sub(1, 1) == "\\"
support.SO = support.WINDOWS and "dll" or "so"
support.NOT_WINDOWS = "needs Linux (a POSIX shell, ELF tools or dlpack.ipc), not Windows"

-- A name for a temporary file. os.tmpname on Windows names a file in the root of the drive,
-- which only an administrator may write: there the folder is TEMP.
function support.tmpname()
  if not support.WINDOWS then return os.tmpname() end
  return (os.getenv("TEMP") or ".") .. string.format("\\dlpack-spec-%d-%d.tmp", os.time(), math.random(1, 1e9))
end

-- Runs `script` (Lua source) in a new process of the interpreter running the specs, with the
-- environment variables in `env` (a table; values are strings), and returns what it wrote on
-- stdout and stderr. The chunk goes through a file: no shell quoting of code on any system.
function support.run_lua(script, env)
  local file = support.tmpname()
  local f = assert(io.open(file, "w"))
  f:write(script)
  f:close()
  local names = {}
  for name in pairs(env or {}) do names[#names + 1] = name end
  table.sort(names)
  local cmd = {}
  if support.WINDOWS then -- cmd.exe: `set "NAME=value"&& ...`, the whole line in one more pair of quotes
    for _, name in ipairs(names) do cmd[#cmd + 1] = 'set "' .. name .. "=" .. env[name] .. '"&& ' end
    cmd = '"' .. table.concat(cmd) .. '"' .. support.LUA .. '" "' .. file .. '" 2>&1"'
  else
    for _, name in ipairs(names) do cmd[#cmd + 1] = name .. "='" .. env[name]:gsub("'", "'\\''") .. "' " end
    cmd = table.concat(cmd) .. "'" .. support.LUA .. "' '" .. file .. "' 2>&1"
  end
  local p = assert(io.popen(cmd))
  local out = p:read("*a")
  p:close()
  os.remove(file)
  return out
end

-- The collector mode under which finalizers run almost all the time ("incremental" with a
-- tiny pause), as code for a chunk: 5.5 sets the parameters with "param", 5.4 with the mode,
-- earlier versions with "setpause" and "setstepmul".
support.EAGER_GC = _VERSION == "Lua 5.5"
  and 'collectgarbage("incremental"); collectgarbage("param", "pause", 0); collectgarbage("param", "stepmul", 100000); '
    .. 'collectgarbage("param", "stepsize", 64)'
  or support.LUA54 and 'collectgarbage("incremental", 1, 1000)'
  or 'collectgarbage("setpause", 1); collectgarbage("setstepmul", 1000)'

-- An object whose finalizer is fn: tables take __gc from 5.2 on; on 5.1 and LuaJIT only
-- userdata does (newproxy).
function support.on_gc(fn)
  local newproxy = rawget(_G, "newproxy")
  if newproxy then
    local p = newproxy(true)
    getmetatable(p).__gc = fn
    return p
  end
  return setmetatable({}, {__gc = fn})
end

-- For chunks that run in a fresh state: on 5.1 and LuaJIT, a local setmetatable that gives
-- `setmetatable({}, {__gc = fn})` its finalizer (as a userdata); elsewhere nothing.
support.GC_SETMETATABLE = rawget(_G, "newproxy") and [[
  local setmetatable = function(t, mt)
    if not mt.__gc then return setmetatable(t, mt) end
    local p = newproxy(true)
    getmetatable(p).__gc = mt.__gc
    return p
  end
]] or ""

-- The largest and smallest int64 values a number of this Lua holds: math.maxinteger and
-- math.mininteger where Lua has integers, else the doubles nearest them (2^63 - 1024, -2^63),
-- for the specs of hostile sizes and indices.
support.MAXINT = support.INTEGERS and math.maxinteger or 2 ^ 63 - 1024
support.MININT = support.INTEGERS and math.mininteger or -2 ^ 63

support.NO_INTEGERS = "needs integer subtypes and the whole int64 range (Lua 5.3+); in " .. _VERSION ..
  " numbers are doubles, exact to 2^53"

-- `local x <close>` is Lua 5.4 syntax: its specs live in spec/close54.lua, which a spec file
-- requires only there; elsewhere it shows this as a pending spec.
support.NO_CLOSE = "`local x <close>` is Lua 5.4 syntax, not in " .. _VERSION .. " (t:release() works everywhere)"

-- Runs fn and returns how many deleters of tensors fabricated by spec/c/fabricate.c
-- ran meanwhile (fabricate is loaded only by the specs that call this).
function support.deletes(fn)
  local fab = require "fabricate"
  local before = fab.deleted()
  fn()
  return fab.deleted() - before
end

return support
