-- What differs between Lua 5.1, 5.2, 5.3, 5.4 and LuaJIT (README.md, "Lua versions"): each
-- decision, tested on the runtime it concerns. Stage 10 runs these under 5.4, stages 15 to 18 under
-- the others.
local dlpack = require "dlpack"
local support = require "support"

local raises, raises_plain = support.raises, support.raises_plain

describe("on every Lua", function()
  it("formats integers in error messages (%I)", function()
    local t = dlpack.zeros({3})
    raises_plain(function() return t[10] end, "index 10 out of range (size 3)")
    raises_plain(function() dlpack.frombytes("abc", "int32") end, "3 bytes")
  end)

  it("refuses non-integral sizes and indices, as 5.3 does", function()
    local t = dlpack.zeros({3})
    raises(function() return t:get(1.5) end, "integer")
    raises(function() dlpack.zeros({2.5}) end, "integer")
    raises(function() t[1] = 0; dlpack.zeros({3}, "int32")[1] = 1.5 end, "not an integer")
  end)

  it("takes integral floats as integers", function()
    local t = dlpack.zeros({2.0 ^ 2}, "int32")
    t[2.0] = 7.0
    assert.are.equal(7, t[2])
    assert.are.same({4}, t.shape)
  end)

  it("honours __len and __index of shape tables", function()
    local shape = setmetatable({}, {__len = function() return 2 end, __index = function(_, i) return i + 1 end})
    assert.are.same({2, 3}, dlpack.zeros(shape).shape)
  end)

  it("runs the finalizer of a dropped tensor (userdata __gc)", function()
    local fab = require "fabricate"
    local before = fab.deleted()
    do local _ = dlpack.from_dlpack((fab.versioned {})) end
    collectgarbage()
    collectgarbage()
    assert.are.equal(1, fab.deleted() - before)
  end)
end)

describe("where numbers are doubles (5.1, 5.2, LuaJIT)", function()
  if support.INTEGERS then
    pending("this is " .. _VERSION .. ", which has integers (see the next block)")
    return
  end

  it("reads integer elements exactly up to 2^53, and raises naming the value beyond", function()
    local t = dlpack.zeros({2}, "int64")
    t[1] = 2 ^ 53
    t[2] = 2 ^ 53 + 2
    assert.are.equal(2 ^ 53, t[1])
    raises_plain(function() return t[2] end, "int64 element 9007199254740994 is beyond 2^53")
    local u = dlpack.full({1}, 2 ^ 63, "float64"):to("uint64")
    raises_plain(function() return u[1] end, "uint64 element 9223372036854775808 is beyond 2^53")
  end)

  it("infers int64 for integral numbers within 2^53, float64 otherwise", function()
    assert.are.equal("int64", dlpack.tensor({1, 2, 3}).dtype)
    assert.are.equal("int64", dlpack.tensor({1.0, 2}).dtype) -- 1.0 is 1 here
    assert.are.equal("float64", dlpack.tensor({1, 2.5}).dtype)
    assert.are.equal("float64", dlpack.tensor({2 ^ 60}).dtype)
  end)
end)

describe("where numbers have integers (5.3, 5.4)", function()
  if not support.INTEGERS then
    pending("this is " .. _VERSION .. ", whose numbers are doubles (see the previous block)")
    return
  end

  it("reads the whole int64 range, and uint64 beyond 2^63 as negative integers", function()
    local t = dlpack.tensor({math.maxinteger, math.mininteger}, "int64")
    assert.are.equal(math.maxinteger, t[1])
    assert.are.equal(math.mininteger, t[2])
    assert.are.equal(-1, dlpack.full({1}, -1, "int64"):to("uint64")[1])
  end)

  it("infers int64 for integers and float64 when any element is a float", function()
    assert.are.equal("int64", dlpack.tensor({1, 2, 3}).dtype)
    assert.are.equal("float64", dlpack.tensor({1.0, 2}).dtype)
  end)
end)

describe("<close> and release()", function()
  it("release() works everywhere", function()
    local t = dlpack.zeros({2})
    t:release()
    raises(function() return t[1] end, "released")
  end)

  if support.LUA54 then
    it("the metatable closes tensors under 5.4", function()
      local t = dlpack.zeros({2})
      getmetatable(t).__close(t)
      raises(function() return t[1] end, "released")
    end)
  else
    pending("local t <close>: " .. support.NO_CLOSE)
  end
end)
