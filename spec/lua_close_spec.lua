-- lua_close: what a closing state hands back, refuses and releases. Each case runs in a fresh
-- lua_State made by a C host (fabricate's run_threads), which closes it when the chunk returns;
-- fabricate counts the deleters of the tensors it made, whichever state or thread runs them.
local support = require "support"
local fab = require "fabricate"

-- Runs code in fresh states (n at once, default 1) and closes them; returns the first one's
-- result. Any error of a chunk fails the spec.
local function in_fresh_state(code, n)
  local results = fab.run_threads(support.GC_SETMETATABLE .. code, n or 1)
  for _, r in ipairs(results) do assert.is_true(r.ok, tostring(r.value)) end
  return results[1].value
end

-- Runs fn, then checks that every tensor fabricate made meanwhile was deleted, exactly `deletes`
-- of them, none twice; returns fab.notes().
local function counting(deletes, fn)
  local live, deleted, double = fab.live(), fab.deleted(), fab.double_deletes()
  fab.notes()
  fn()
  assert.are.equal(live, fab.live(), "fabricated tensors left alive")
  assert.are.equal(deletes, fab.deleted() - deleted, "deleters run")
  assert.are.equal(double, fab.double_deletes(), "deleters run twice")
  return fab.notes()
end

describe("a capsule a C producer makes for a script (dlpack_lua_push_capsule)", function()
  it("goes back to its producer when the script drops it and its state closes", function()
    counting(2, function()
      in_fresh_state([[
        local fab, d = require "fabricate", require "dlpack"
        local p = fab.c_producer({shape = {3}})
        local cap = getmetatable(p).__dlpack(p, {})          -- called by the script itself
        assert(d.is_capsule(cap) and not d.capsule_info(cap).consumed)
        local legacy = fab.c_producer({shape = {2}, legacy = true})
        getmetatable(legacy).__dlpack(legacy)                 -- dropped at once
      ]])
    end)
  end)

  it("is deleted once when the script consumes it, and not again at close", function()
    counting(1, function()
      in_fresh_state([[
        local fab, d = require "fabricate", require "dlpack"
        local p = fab.c_producer({shape = {3}})
        kept = d.from_dlpack(getmetatable(p).__dlpack(p))
        assert(kept[3] == 3)
      ]])
    end)
  end)

  it("can be consumed by another state while its own state is open", function()
    counting(1, function()
      local code = [[
        local fab, d = require "fabricate", require "dlpack"
        local _, index = ...
        if index == 1 then
          local p = fab.c_producer({shape = {4}})
          fab.post(getmetatable(p).__dlpack(p))
          wait_all()                                         -- stays open until the other consumed it
          return ""
        end
        local t = d.from_dlpack(fab.receive(10))
        wait_all()
        return t:totable()[4]
      ]]
      local results = fab.run_threads(code, 2)
      assert.is_true(results[1].ok, tostring(results[1].value))
      assert.is_true(results[2].ok, tostring(results[2].value))
      assert.are.equal(4, results[2].value)
    end)
  end)

  it("is consumed for good once its state closed (it went back to its producer)", function()
    local dlpack = require "dlpack"
    counting(1, function()
      in_fresh_state([[
        local fab = require "fabricate"
        require "dlpack"
        local p = fab.c_producer({shape = {4}})
        fab.post(getmetatable(p).__dlpack(p))
      ]])
    end)
    local cap = fab.receive(1)
    support.raises(function() dlpack.from_dlpack(cap) end, "consumed")
    assert.is_true(dlpack.capsule_info(cap).consumed)
  end)
end)

describe("capsules that scripts make", function()
  it("outlive their state, consumable by another, until the last state closes", function()
    local dlpack = require "dlpack"
    counting(1, function()
      in_fresh_state([[
        local fab, d = require "fabricate", require "dlpack"
        fab.post(d.to_dlpack(d.from_dlpack((fab.versioned({shape = {3}})))))
      ]])
      assert.are.same({1, 2, 3}, dlpack.from_dlpack(fab.receive(1)):totable())
      collectgarbage()
      collectgarbage()
    end)
  end)

  it("go back when their state closes once the host isolated it (dlpack_lua_isolate_capsules)", function()
    local dlpack = require "dlpack"
    counting(101, function()
      in_fresh_state([[
        local fab, d = require "fabricate", require "dlpack"
        fab.isolate()
        for _ = 1, 100 do d.to_dlpack(d.from_dlpack((fab.versioned({shape = {2}})))) end
        fab.post(d.from_dlpack((fab.versioned({shape = {3}}))):__dlpack({max_version = {1, 0}}))
      ]])
    end)
    local cap = fab.receive(1)
    support.raises(function() dlpack.from_dlpack(cap) end, "consumed")
  end)
end)

describe("finalizers that run during lua_close", function()
  it("get a clear error from every function that would make a tensor or capsule after the module's cleanup",
    function()
      -- made before `require "dlpack"`, this finalizer runs after the module's cleanup (and after
      -- every tensor made later was finalized)
      local notes = counting(2, function()
        in_fresh_state([[
          local fab = require "fabricate"
          local d, unsafe, producer
          keep = setmetatable({}, {__gc = function()
            local tries = {
              stream = function() return unsafe.wrap_stream(12345) end,
              zeros = function() return d.zeros({4}) end,
              tensor = function() return d.tensor({1, 2}) end,
              full = function() return d.full({3}, 7, "int8") end,
              import = function()
                local cap = fab.versioned({shape = {2}})
                local ok, err = pcall(d.from_dlpack, cap)
                if not ok then d.release_capsule(cap); error(err, 0) end
                return err
              end,
              c_producer = function() return getmetatable(producer).__dlpack(producer) end,
            }
            for _, name in ipairs({"zeros", "tensor", "full", "import", "c_producer", "stream"}) do
              local ok, err = pcall(tries[name])
              fab.note(name .. ": " .. (ok and "made" or tostring(err)))
            end
          end})
          d = require "dlpack"
          unsafe = require "dlpack.unsafe"
          producer = fab.c_producer({shape = {2}})
        ]])
      end)
      assert.are.equal(6, #notes, table.concat(notes, "\n"))
      for _, note in ipairs(notes) do
        assert.is_truthy(note:find("this lua_State is closing", 1, true), note)
      end
    end)

  it("have what they make before the module's cleanup released by it", function()
    if _VERSION == "Lua 5.1" and not rawget(_G, "jit") then
      -- Lua 5.1's lua_close runs pending finalizers from the collector steps that allocations
      -- inside a finalizer take, so the module's cleanup may run in the middle of this one (seen
      -- since the module registers the computing functions: a larger heap, other step timing)
      pending("Lua 5.1: the module's cleanup may run inside this finalizer (a known issue)")
      return
    end
    -- made after `require "dlpack"`: these finalizers run before the module's cleanup
    counting(2, function()
      in_fresh_state([[
        local fab, d = require "fabricate", require "dlpack"
        local base = d.tensor({1, 2, 3})
        local function producer_capsule()
          local p = fab.c_producer({})
          return getmetatable(p).__dlpack(p)
        end
        keep = setmetatable({}, {__gc = function()
          made = {
            d.from_dlpack((fab.versioned({shape = {5}}))),
            d.zeros({1000}),
            base:narrow(1, 2, 2),
            d.from_dlpack(producer_capsule()),
            require("dlpack.unsafe").wrap_stream(12345),
          }
          fab.note("made " .. #made)
        end})
      ]])
    end)
  end)

  it("leak nothing when they make tensors while the script stopped the collector", function()
    counting(2, function()
      in_fresh_state([[
        local fab, d = require "fabricate", require "dlpack"
        collectgarbage("stop")
        kept = {d.from_dlpack((fab.versioned({shape = {3}}))), d.zeros({10})}
        for _ = 1, 100 do d.zeros({10}) end
        local p = fab.c_producer({})
        kept[3] = d.from_dlpack(getmetatable(p).__dlpack(p))
      ]])
    end)
  end)
end)
