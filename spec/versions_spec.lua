-- What differs between Lua 5.1, 5.2, 5.3, 5.4 and LuaJIT (README.md, "Lua versions"): each
-- decision, tested on the runtime it concerns. Stage 10 runs these under 5.4, stages 15 to 18 under
-- the others.
local dlpack = require "dlpack"
local support = require "support"

local raises, raises_plain = support.raises, support.raises_plain

describe("on every Lua", function()
  it("formats integers in error messages (%I)", function()
    local t = dlpack.zeros({3})
    raises_plain(function() return t[10] end, "index 10 out of range (size 3; indices start at 1")
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

  it("reads every int64 and uint64 value a double holds, and raises naming a value it would change", function()
    local t = dlpack.zeros({4}, "int64")
    t[1], t[2], t[3], t[4] = 2 ^ 53, 2 ^ 53 + 2, -2 ^ 63, 2 ^ 62 + 2 ^ 10
    assert.are.same({2 ^ 53, 2 ^ 53 + 2, -2 ^ 63, 2 ^ 62 + 2 ^ 10}, t:totable())
    local u = dlpack.full({1}, 2 ^ 63, "float64"):to("uint64")
    assert.are.equal(2 ^ 63, u[1])
    -- 2^53 + 1 (from its two 32-bit halves), 2^63 - 1 and 2^64 - 1 are no double
    local odd = dlpack.frombytes(string.pack("<I4I4", 1, 2 ^ 21), "int64")
    raises_plain(function() return odd[1] end, "int64 element 9007199254740993 has no exact Lua number")
    raises_plain(function() return dlpack.full({1}, 2 ^ 63, "float64"):to("int64")[1] end,
      "int64 element 9223372036854775807 has no exact Lua number")
    raises_plain(function() return dlpack.full({1}, -1, "int64"):to("uint64"):item() end,
      "uint64 element 18446744073709551615 has no exact Lua number")
  end)

  it("raises for a size or count a double would round, rather than giving it back changed", function()
    local s = dlpack.zeros({1}, "int8"):expand({2 ^ 62}):slice(1, 1, -1, 3) -- ceil(2^62 / 3) elements
    for _, read in ipairs({function() return s.shape end, function() return s:size(1) end,
                           function() return #s end, function() return s:numel() end}) do
      raises_plain(read, "1537228672809129302 has no exact Lua number")
    end
    local t = dlpack.zeros({1}, "int8"):expand({2 ^ 60}) -- a double holds 2^60
    assert.are.equal(2 ^ 60, t:size(1))
    assert.are.equal(2 ^ 60, t:numel())
  end)

  it("writes numbers to int64 and uint64 by value, up to 2^63 and 2^64", function()
    local u = dlpack.zeros({1}, "uint64")
    u[1] = 2 ^ 64 - 2 ^ 11
    assert.are.equal(2 ^ 64 - 2 ^ 11, u[1])
    raises(function() u[1] = -1 end, "-1 is out of range for uint64")
    raises(function() dlpack.full({1}, 2 ^ 63, "int64") end, "out of range for int64")
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

  it("writes a Lua integer's 64 bits to uint64, as reads give them back (string.pack's J)", function()
    local u = dlpack.zeros({2}, "uint64")
    u[1], u[2] = -1, math.mininteger
    assert.are.equal(string.pack("<I8I8", -1, math.mininteger), u:tobytes())
    assert.are.same({-1, math.mininteger}, u:totable())
    assert.are.equal(string.rep("\255", 8), dlpack.full({1}, -1, "uint64"):tobytes())
  end)

  it("writes floats to uint64 by value: integral, from 0 up to 2^64", function()
    local u = dlpack.zeros({1}, "uint64")
    u[1] = 2 ^ 63
    assert.are.equal(math.mininteger, u[1])
    u[1] = 2 ^ 64 - 2 ^ 11
    assert.are.equal(-2048, u[1])
    raises(function() u[1] = -1.0 end, "-1%.?0? is out of range for uint64")
    raises(function() u[1] = 2 ^ 64 end, "out of range for uint64")
  end)
end)

describe("int64 and uint64 values round-trip on every Lua", function()
  -- the uint64 values 0, 2^53, 2^63, the largest double below 2^64, and (5.3+) 2^64 - 1
  local function samples()
    local bytes = {string.pack("<I8", 0), string.pack("<I4I4", 0, 2 ^ 21), string.pack("<I4I4", 0, 2 ^ 31),
                   string.pack("<I4I4", 0xFFFFF800, 0xFFFFFFFF)}
    if support.INTEGERS then bytes[#bytes + 1] = string.rep("\255", 8) end
    return bytes
  end

  it("writes back every uint64 element it reads, 2^63 and above included", function()
    for _, bytes in ipairs(samples()) do
      local u = dlpack.frombytes(bytes, "uint64")
      local v = u[1]
      u[1] = u[1]
      u:set(1, u:get(1))
      u:fill(v)
      assert.are.equal(bytes, u:tobytes())
      assert.are.equal(bytes, dlpack.full({1}, v, "uint64"):tobytes())
      assert.are.equal(bytes, dlpack.tensor({v}, "uint64"):tobytes())
      assert.are.equal(bytes, dlpack.tensor(v, "uint64"):tobytes())
    end
  end)

  it("writes 2^63 to uint64 from the number 2^63, a float", function()
    local u = dlpack.zeros({1}, "uint64")
    u[1] = 2 ^ 63
    assert.are.equal(string.pack("<I4I4", 0, 2 ^ 31), u:tobytes())
    assert.are.equal(u:tobytes(), dlpack.full({1}, 2 ^ 63, "uint64"):tobytes())
  end)

  it("writes back int64 elements from -2^63 up", function()
    local t = dlpack.frombytes(string.pack("<I4I4", 0, 2 ^ 31), "int64") -- -2^63
    t[1] = t[1]
    assert.are.equal(string.pack("<I4I4", 0, 2 ^ 31), t:tobytes())
  end)

  it("says 'out of range', not 'not an integer', for integral numbers beyond the dtype", function()
    local u, i = dlpack.zeros({1}, "uint64"), dlpack.zeros({1}, "int64")
    for _, case in ipairs({{u, 2 ^ 64}, {u, -2 ^ 63}, {i, 2 ^ 63}, {i, -2 ^ 64}, {i, math.huge}}) do
      local err = raises(function() case[1][1] = case[2] end, "out of range for " .. case[1].dtype)
      assert.is_falsy(err:find("not an integer"), err)
    end
    raises(function() i[1] = 0.5 end, "0%.5 is not an integer")
    raises_plain(function() i[1] = 0 / 0 end, "nan is not an integer")
  end)

  it("keeps arange to values: a uint64 range takes no negatives, and counts in int64", function()
    raises(function() dlpack.arange(-3, 2, 1, "uint64") end, "-3 is out of range for uint64")
    raises(function() dlpack.arange(0, 2 ^ 63, 2 ^ 62, "uint64") end,
      "stop .* is out of range %(arange counts in int64%)")
    assert.are.same({0, 1, 2}, dlpack.arange(0, 3, 1, "uint64"):totable())
  end)
end)

describe("<close> and release()", function()
  it("release() works everywhere", function()
    local t = dlpack.zeros({2})
    t:release()
    raises(function() return t[1] end, "released")
  end)

  if support.LUA54 then
    it("the metatable closes tensors under 5.4 and 5.5", function()
      local t = dlpack.zeros({2})
      getmetatable(t).__close(t)
      raises(function() return t[1] end, "released")
    end)
  else
    pending("local t <close>: " .. support.NO_CLOSE)
  end
end)
