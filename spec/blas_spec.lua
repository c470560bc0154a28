-- The system's CBLAS as the module opens it (src/compute/blas.c): the OpenBLAS core type it sets
-- for the processor, the process's own OPENBLAS_CORETYPE kept, DLPACK_LUA_BLAS_CORETYPE=keep, and
-- by numbers: a product timed with the core type the module picks against OpenBLAS's own pick.
-- Each case runs in a child process: the library reads its environment once, when it is loaded.
local dlpack = require "dlpack"
local support = require "support"

-- What dlpack.blas() says in a child with env, and (timed = true) the best of 7 float32 512 x 512
-- products in seconds, on one OpenBLAS thread. Lines "field=value".
local REPORT = [==[
local dlpack = require "dlpack"
local name, info = dlpack.blas()
if not name then print("none=" .. info) return end
local keys = {}
for k in pairs(info) do keys[#keys + 1] = k end
table.sort(keys)
for _, k in ipairs(keys) do print(k .. "=" .. tostring(info[k])) end
print("environment=" .. tostring(os.getenv("OPENBLAS_CORETYPE")))
if TIMED then
  local a, b = dlpack.rand({512, 512}, "float32"), dlpack.rand({512, 512}, "float32")
  dlpack.matmul(a, b)
  local clock = os.clock -- one thread: processor time is the product's time
  local best = math.huge
  for _ = 1, 7 do
    local t = clock()
    dlpack.matmul(a, b)
    best = math.min(best, clock() - t)
  end
  print("seconds=" .. best)
end
]==]

-- (the environment of the specs may set OPENBLAS_CORETYPE: the child starts without it)
local function child(env, timed)
  local e = {LUA_PATH = package.path, LUA_CPATH = package.cpath, OPENBLAS_NUM_THREADS = "1"}
  for k, v in pairs(env) do e[k] = v end
  local file = support.tmpname()
  local f = assert(io.open(file, "w"))
  f:write("TIMED = " .. tostring(timed or false) .. "\n" .. REPORT)
  f:close()
  local cmd = {"env -u OPENBLAS_CORETYPE -u DLPACK_LUA_BLAS_CORETYPE -u DLPACK_LUA_BLAS"}
  for k, v in pairs(e) do cmd[#cmd + 1] = k .. "='" .. v:gsub("'", "'\\''") .. "'" end
  cmd[#cmd + 1] = "'" .. support.LUA .. "' '" .. file .. "' 2>&1"
  local p = assert(io.popen(table.concat(cmd, " ")))
  local out = p:read("*a")
  p:close()
  os.remove(file)
  local fields = {}
  for k, v in out:gmatch("([%w_]+)=([^\n]*)") do fields[k] = v end
  fields.output = out
  return fields
end

-- the core type the module sets on this processor, as blas.c decides it
local function expected_coretype()
  local f = io.open("/proc/cpuinfo")
  if not f then return nil end
  local flags = (f:read("*a"):match("\nflags%s*:([^\n]*)") or "") .. " "
  f:close()
  local function has(x) return flags:find(" " .. x .. " ", 1, true) ~= nil end
  if has("avx512f") and has("avx512cd") and has("avx512bw") and has("avx512dq") and has("avx512vl") then
    return "SkylakeX"
  end
  if has("avx2") and has("fma") then return "Haswell" end
  return nil
end

local name, info = dlpack.blas()
local openblas = name and info.coretype and not support.WINDOWS
local it_openblas = openblas and it or function(n) pending(n .. ": no OpenBLAS here") end
local want = expected_coretype()

describe("dlpack.blas()", function()
  it("names the library and, for OpenBLAS, its core type, configuration and threads", function()
    if not name then
      assert.are.equal("string", type(info))
      return
    end
    assert.are.equal("string", type(name))
    assert.are.equal(name, info.library)
    if info.coretype then
      assert.are.equal("string", type(info.config))
      assert.matches("OpenBLAS", info.config)
      assert.are.equal("number", type(info.threads))
      assert.is_true(info.threads >= 1)
    end
  end)

  it_openblas("sets OPENBLAS_CORETYPE for this processor while it opens OpenBLAS, and removes it again", function()
    local f = child({})
    if want then
      assert.are.equal(want, f.coretype_set, f.output)
      assert.are.equal(want, f.coretype, f.output)
      assert.are.equal("dlpack", f.coretype_by, f.output)
    else
      assert.is_nil(f.coretype_set, f.output)
      assert.are.equal("OpenBLAS", f.coretype_by, f.output)
    end
    assert.are.equal("nil", f.environment, f.output)
  end)

  it_openblas("keeps the process's own OPENBLAS_CORETYPE", function()
    local f = child({OPENBLAS_CORETYPE = "Nehalem"})
    assert.are.equal("Nehalem", f.coretype, f.output)
    assert.are.equal("OPENBLAS_CORETYPE", f.coretype_by, f.output)
    assert.is_nil(f.coretype_set, f.output)
    assert.are.equal("Nehalem", f.environment, f.output)
  end)

  it_openblas("leaves the choice to OpenBLAS with DLPACK_LUA_BLAS_CORETYPE=keep, or sets the one it names",
              function()
    local f = child({DLPACK_LUA_BLAS_CORETYPE = "keep"})
    assert.are.equal("OpenBLAS", f.coretype_by, f.output)
    assert.is_nil(f.coretype_set, f.output)
    f = child({DLPACK_LUA_BLAS_CORETYPE = "Nehalem"})
    assert.are.equal("Nehalem", f.coretype, f.output)
    assert.are.equal("DLPACK_LUA_BLAS_CORETYPE", f.coretype_by, f.output)
    -- a name OpenBLAS does not know: it detects the processor, and says so
    f = child({DLPACK_LUA_BLAS_CORETYPE = "NoSuchCore"})
    assert.are.equal("NoSuchCore", f.coretype_set, f.output)
    assert.are.equal("OpenBLAS", f.coretype_by, f.output)
    assert.are_not.equal("NoSuchCore", f.coretype, f.output)
  end)

  -- OpenBLAS's generic kernels (what it falls back to on a processor newer than the release) are
  -- several times slower than its AVX2 and AVX-512 ones (4-6x on an Intel Xeon, 2.3-3.7x on an
  -- AMD EPYC): the pick must show in the time. Each side's best over up to three rounds of
  -- children, so that a round another process disturbed does not decide.
  local it_fast = openblas and want and it or function(n) pending(n .. ": no OpenBLAS or no AVX2 here") end
  it_fast("picks kernels at least 1.5 times as fast as OpenBLAS's generic ones (timed, one thread)", function()
    local t, g, o, own = math.huge, math.huge, math.huge, nil
    for _ = 1, 3 do
      local picked = child({}, true)
      local generic = child({OPENBLAS_CORETYPE = "Prescott"}, true)
      own = child({DLPACK_LUA_BLAS_CORETYPE = "keep"}, true)
      local t1, g1, o1 = tonumber(picked.seconds), tonumber(generic.seconds), tonumber(own.seconds)
      assert(t1 and g1 and o1, picked.output .. generic.output .. own.output)
      t, g, o = math.min(t, t1), math.min(g, g1), math.min(o, o1)
      if t * 1.5 <= g and t <= o * 1.5 then break end
    end
    assert.is_true(t * 1.5 <= g, string.format("%s %.2f ms, Prescott %.2f ms", want, t * 1e3, g * 1e3))
    -- where OpenBLAS knows the processor, its own pick is as fast (within the noise)
    assert.is_true(t <= o * 1.5, string.format("%s %.2f ms, OpenBLAS's pick (%s) %.2f ms", want, t * 1e3,
                                               own.coretype, o * 1e3))
  end)
end)
