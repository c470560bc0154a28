-- The habits that trap a newcomer (from torch7, NumPy or 0-based languages): each one answered
-- with an error that says what to write instead.
local dlpack = require "dlpack"
local support = require "support"

local raises_plain = support.raises_plain

describe("a newcomer's first hour", function()
  it("t:add(1) returns a new tensor; t:add_(1) changes t (torch7 changed t)", function()
    local t = dlpack.tensor({1, 2, 3})
    local r = t:add(1)
    assert.are.same({1, 2, 3}, t:totable())
    assert.are.same({2, 3, 4}, r:totable())
    assert.are.equal(t, t:add_(1))
    assert.are.same({2, 3, 4}, t:totable())
  end)

  it("a comparison operator says to use t:gt(x) and friends", function()
    local t, text = dlpack.tensor({0.2, 0.7}), "comparison operators cannot return tensors in Lua; use t:gt(x)"
    raises_plain(function() return t < t end, text)
    raises_plain(function() return t <= t end, text)
    -- Lua 5.1 and LuaJIT compare values of different types without asking the metatable
    if _VERSION ~= "Lua 5.1" then
      raises_plain(function() return t > 0.5 end, text)
      raises_plain(function() return 0.5 >= t end, text)
    end
    assert.are.same({false, true}, t:gt(0.5):totable())
  end)

  it("an index out of range says that indices start at 1", function()
    local t = dlpack.tensor({1, 2, 3})
    raises_plain(function() return t[0] end, "index 0 out of range (size 3; indices start at 1")
    raises_plain(function() return t[4] end, "index 4 out of range (size 3; indices start at 1")
    assert.are.equal(3, t[-1])
  end)

  it("a tensor released before the call is not said to be released while it ran", function()
    local r = dlpack.zeros({2})
    r:release()
    raises_plain(function() return r:add(1) end, "add: the tensor was released before the call")
    raises_plain(function() return dlpack.mul(2, r) end, "mul: the tensor was released before the call")
    raises_plain(function() return dlpack.add(dlpack.zeros({2}), 1, {out = r}) end,
      "out: the tensor was released")
  end)

  it("cat(a, b, dim) names the form that works", function()
    local t = dlpack.zeros({2})
    raises_plain(function() return dlpack.cat(t, t, 1) end,
      "dlpack.cat takes a table of tensors: dlpack.cat({a, b}, dim)")
    raises_plain(function() return dlpack.cat(t, t, 1) end, "bad argument #1") -- not #3
    raises_plain(function() return dlpack.stack(t, t) end, "dlpack.stack takes a table of tensors")
    assert.are.equal(4, dlpack.cat({t, t}, 1):numel())
  end)

  it("an unknown dtype lists the known names", function()
    raises_plain(function() return dlpack.zeros({2}, "flaot") end,
      "unknown dtype 'flaot' (known: bool, int8, int16, int32, int64, uint8")
    raises_plain(function() return dlpack.zeros({2}, "flaot") end, "float32, float64, complex64")
    raises_plain(function() return dlpack.zeros({2}, "flaot") end, "float, double, half, long")
  end)

  it("require 'dlpack.ffi' without LuaJIT says that it needs LuaJIT", function()
    if rawget(_G, "jit") then
      assert.is_table(require "dlpack.ffi")
    else
      raises_plain(function() return require "dlpack.ffi" end,
        "dlpack.ffi needs LuaJIT (its ffi module); this is Lua 5.")
      package.loaded["dlpack.ffi"] = nil
    end
  end)

  -- README's "Your own script": the paths of `make -s env` let a script outside the repository
  -- require the module built here (under the Lua of the default build)
  local own_script = "eval \"$(make -s env)\" lets a script of one's own require dlpack"
  if _VERSION ~= "Lua 5.4" or rawget(_G, "jit") or package.config:sub(1, 1) == "\\" then
    pending(own_script .. ": needs Lua 5.4 and a POSIX shell (stage 10)")
  else
    it(own_script, function()
      local dir = os.tmpname()
      os.remove(dir)
      assert(os.execute("mkdir " .. dir))
      local f = assert(io.open(dir .. "/my.lua", "w"))
      f:write('local dlpack = require "dlpack"\nprint(dlpack.ones({3}):sum())\n')
      f:close()
      local repo = io.popen("pwd"):read("l")
      local p = io.popen("cd " .. dir .. " && env -u LUA_PATH -u LUA_CPATH -u LD_PRELOAD sh -c 'eval \"$(make -s -C "
        .. repo .. " env)\" && lua5.4 my.lua' 2>&1")
      local out = p:read("a")
      p:close()
      os.execute("rm -r " .. dir)
      assert.are.equal("3.0\n", out)
    end)
  end

  -- docs/python.md: a PyTorch built for NumPy 1.x beside NumPy 2 (a stand-in that asks for the
  -- NumPy 1 C API as torch 1.13 does) makes NumPy print its traceback; import_torch keeps it out
  it("examples/quiet_torch.py imports a torch built for NumPy 1.x without NumPy 2's traceback", function()
    local env = "env -u LD_PRELOAD PYTHONPATH=spec/peers/torch_numpy1:build/pydeps:examples /usr/bin/python3 "
    local numpy = io.popen(env .. "-c 'import numpy; print(numpy.__version__)' 2>/dev/null"):read("l")
    if not numpy or tonumber(numpy:match("^(%d+)")) < 2 then
      pending("needs NumPy >= 2 in build/pydeps (make deps)")
      return
    end
    local p = io.popen(env .. "-c 'import torch' 2>&1")
    local plain = p:read("a")
    p:close()
    assert.is_truthy(plain:find("compiled using NumPy 1.x", 1, true), "the stand-in no longer shows the noise")
    p = io.popen(env .. "-c 'import quiet_torch; print(quiet_torch.import_torch().__version__)' 2>&1")
    local quiet = p:read("a")
    p:close()
    assert.are.equal("1.13-fake\n", quiet)
  end)
end)
