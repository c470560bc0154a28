-- The specs of `local x <close>` (Lua 5.4 syntax), kept out of the *_spec.lua files so that
-- those still load on Lua 5.1 to 5.3 and LuaJIT, which require this file only under Lua 5.4
-- (elsewhere they show a pending spec saying why). A required module does not see busted's
-- globals: `it` comes as an argument, assert is luassert.
local assert = require "luassert"
local dlpack = require "dlpack"
local support = require "support"

local raises = support.raises

return {
  -- spec/lifetime_spec.lua
  lifetime = function(it, full_collect)
    it("releases the tensor at the end of the block", function()
      local w
      do
        local c <close> = dlpack.zeros({2})
        c[1] = 1
        w = c
      end
      raises(function() return w[1] end, "released")
    end)

    it("releases the tensor when the block raises", function()
      local w
      local ok = pcall(function()
        local c <close> = dlpack.zeros({2})
        w = c
        error("boom")
      end)
      assert.is_false(ok)
      raises(function() return w[1] end, "released")
    end)

    it("leaves views made in the block alive", function()
      local v
      do
        local c <close> = dlpack.tensor({1, 2, 3})
        v = c:narrow(1, 2, 2)
      end
      full_collect()
      assert.are.same({2, 3}, v:totable())
    end)

    it("can close a tensor that was already released", function()
      do
        local c <close> = dlpack.zeros({2})
        c:release()
      end
    end)
  end,

  -- spec/foreign_spec.lua: import(spec, form) makes a fabricated foreign tensor
  foreign = function(it, import)
    it("calls the deleter once through <close>", function()
      local n = support.deletes(function()
        local t <close> = import({}, "legacy")
        assert.are.same({ 1, 2, 3, 4 }, t:totable())
      end)
      assert.are.equal(1, n)
    end)
  end,
}
