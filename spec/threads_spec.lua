-- Threads and lua_States: capsules are not tied to the state that made them,
-- consumption is exactly-once across states and threads, and deleters run from
-- any thread. The other states are made by spec/c/fabricate.c (fab.run_threads
-- runs a chunk in n fresh lua_States on n threads at once; each chunk gets
-- (capsule or nil, index) and a global wait_all() that waits for all threads).
local dlpack = require "dlpack"
local unsafe = require "dlpack.unsafe"
local fab = require "fabricate"
local support = require "support"

local f32 = support.f32
local deletes = support.deletes

local function all_ok(results)
  for i, r in ipairs(results) do
    assert.is_true(r.ok, "thread " .. i .. ": " .. tostring(r.value))
  end
end

describe("threads and states", function()
  after_each(function()
    collectgarbage()
    collectgarbage()
    assert.are.equal(0, fab.double_deletes(), "a deleter ran twice")
    assert.are.equal(0, fab.tampered(), "a consumer wrote into a producer's DLTensor")
  end)

  it("consumes a capsule in another lua_State on another thread", function()
    local cap = fab.versioned { data = f32(1, 2, 3, 4) }
    local n = deletes(function()
      local r = fab.run_threads([[
        local dlpack = require "dlpack"
        local cap = ...
        local t = dlpack.from_dlpack(cap)
        local bytes = t:tobytes()
        t:release()
        return bytes
      ]], 1, cap)
      all_ok(r)
      assert.are.equal(f32(1, 2, 3, 4), r[1].value)
    end)
    assert.are.equal(1, n)
    assert.has_error(function() dlpack.from_dlpack(cap) end)
    local ok, err = pcall(dlpack.from_dlpack, cap)
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find("consumed", 1, true), tostring(err))
  end)

  it("passes a capsule from one live lua_State to another on other threads", function()
    local r = fab.run_threads([[
      local dlpack = require "dlpack"
      local fab = require "fabricate"
      local _, index = ...
      if index == 1 then -- producer: exports, posts, stays alive until the consumer is done
        local t = dlpack.tensor({ 1.25, 2.25, 3.25 })
        fab.post(dlpack.to_dlpack(t))
        t:release()
        wait_all()
        return "posted"
      end
      local cap = assert(fab.receive(10), "nothing was posted")
      local t = dlpack.from_dlpack(cap)
      local s = t:tobytes()
      t:release()
      wait_all()
      return s
    ]], 2)
    all_ok(r)
    assert.are.equal("posted", r[1].value)
    assert.are.equal(string.pack("ddd", 1.25, 2.25, 3.25), r[2].value)
  end)

  it("consumes here a capsule made by a lua_State that has closed since", function()
    -- the thread's state imports a fabricated tensor, exports it and closes with the capsule
    -- unconsumed: capsules are not tied to their state, so this (still open) state consumes it
    local r
    local n = deletes(function()
      r = fab.run_threads([[
        local dlpack = require "dlpack"
        local fab = require "fabricate"
        local pack = string.pack or (pcall(require, "compat53.string") and require("compat53.string").pack)
          or require("pack_ffi").pack -- Lua 5.1, 5.2, LuaJIT (Windows: spec/pack_ffi.lua)
        local t = dlpack.from_dlpack((fab.versioned { data = pack("ffff", 1, 2, 3, 4) }))
        local cap = dlpack.to_dlpack(t:transpose(1, 1))
        t:release()
        return cap
      ]], 1)
      all_ok(r)
    end)
    assert.are.equal(0, n)
    local cap = r[1].value
    n = deletes(function()
      local t = dlpack.from_dlpack(cap)
      assert.are.same({ 1, 2, 3, 4 }, t:totable())
      t:release()
    end)
    assert.are.equal(1, n)
    local ok, err = pcall(dlpack.from_dlpack, cap)
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find("consumed", 1, true), tostring(err))
  end)

  it("keeps capsules made through the C API after the state that made them closes", function()
    local r = fab.run_threads([[
      require "dlpack"
      local fab = require "fabricate"
      local pack = string.pack or (pcall(require, "compat53.string") and require("compat53.string").pack)
          or require("pack_ffi").pack -- Lua 5.1, 5.2, LuaJIT (Windows: spec/pack_ffi.lua)
      return (fab.versioned { data = pack("ffff", 9, 8, 7, 6) })
    ]], 1)
    all_ok(r)
    local cap = r[1].value
    assert.is_true(dlpack.is_capsule(cap))
    local n = deletes(function()
      local t = dlpack.from_dlpack(cap)
      assert.are.same({ 9, 8, 7, 6 }, t:totable())
      t:release()
    end)
    assert.are.equal(1, n)
  end)

  it("lets exactly one of many states consume a capsule at once", function()
    local cap = fab.versioned {}
    local n = deletes(function()
      local r = fab.run_threads([[
        local dlpack = require "dlpack"
        local cap = ...
        wait_all()
        local ok, t = pcall(dlpack.from_dlpack, cap)
        if not ok then return tostring(t) end
        local s = t:tobytes()
        t:release()
        return s
      ]], 8, cap)
      local winners, consumed = 0, 0
      for _, x in ipairs(r) do
        assert.is_true(x.ok, tostring(x.value))
        if x.value == f32(1, 2, 3, 4) then
          winners = winners + 1
        elseif tostring(x.value):find("consumed", 1, true) then
          consumed = consumed + 1
        else
          error("unexpected answer: " .. tostring(x.value))
        end
      end
      assert.are.equal(1, winners)
      assert.are.equal(7, consumed)
    end)
    assert.are.equal(1, n)
  end)

  it("lets exactly one of many threads take a capsule through the C API", function()
    for _, form in ipairs { "versioned", "legacy" } do
      local cap = (form == "legacy" and fab.legacy or fab.versioned) {}
      local n = deletes(function()
        local ok, consumed, other = fab.race_consume(cap, 16)
        assert.are.equal(1, ok)
        assert.are.equal(15, consumed)
        assert.are.equal(0, other)
      end)
      assert.are.equal(1, n)
      assert.are.equal(2, (fab.consume(cap))) -- DLPACK_LUA_CONSUMED
    end
  end)

  it("releases tensors imported and exported in many states at once", function()
    collectgarbage()
    collectgarbage()
    local live_before = fab.live()
    local n = deletes(function()
      local r = fab.run_threads([[
        local dlpack = require "dlpack"
        local fab = require "fabricate"
        wait_all()
        local sum = 0
        for i = 1, 50 do
          local t = dlpack.from_dlpack((fab.versioned { shape = { 4 } }))
          local u = dlpack.from_dlpack(dlpack.to_dlpack(t))
          t:release()
          sum = sum + u[4]
          if i % 2 == 0 then u:release() end
        end
        collectgarbage()
        return sum
      ]], 8)
      all_ok(r)
      for _, x in ipairs(r) do assert.are.equal(200, x.value) end
    end)
    assert.are.equal(400, n)
    assert.are.equal(live_before, fab.live())
  end)

  it("calls an exported tensor's deleter from another thread after its state released it", function()
    local t = dlpack.from_dlpack((fab.versioned {}))
    local ptr, name = unsafe.take(dlpack.to_dlpack(t))
    assert.are.equal(0, deletes(function() t:release() end))
    collectgarbage()
    assert.are.equal(1, deletes(function() fab.delete_on_thread(ptr, name) end))
  end)

  it("runs large operations in several lua_States on several threads at once, on the pool", function()
    -- each state's sums and products split into tasks on the module's pool (3 threads), while the
    -- other states compute too (one job at a time uses the pool; the others run their tasks inline)
    local before = dlpack.get_num_threads()
    dlpack.set_num_threads(3)
    local r = fab.run_threads([[
      local dlpack = require "dlpack"
      dlpack.manual_seed(9)
      local a = dlpack.randn({300007}, "float32")
      wait_all()
      local parts = {}
      for k = 1, 3 do
        parts[k] = string.format("%.17g", dlpack.sum(dlpack.mul(a, k)))
      end
      return table.concat(parts, " ") .. dlpack.sum(a:reshape({300007, 1}):expand({300007, 2}), 1):tobytes()
    ]], 4)
    dlpack.set_num_threads(before)
    all_ok(r)
    for i = 2, #r do assert.are.equal(r[1].value, r[i].value) end
  end)

  it("keeps an exported tensor valid after its lua_State is closed", function()
    local ok, values = fab.export_and_close("versioned")
    assert.is_true(ok)
    assert.are.same({ 1.5, 4.5, 2.5, 5.5, 3.5, 6.5 }, values)
    ok, values = fab.export_and_close("legacy")
    assert.is_true(ok)
    assert.are.same({ 1.5, 4.5, 2.5, 5.5, 3.5, 6.5 }, values)
  end)
end)
