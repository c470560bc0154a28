-- Views share memory and never copy.
local dlpack = require "dlpack"
local support = require "support"

local raises = support.raises

-- a {2, 3} int32 tensor 1..6 and a {2, 3, 4} float64 tensor 1..24
local function m23() return dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "int32") end
local function c234()
  local rows = {}
  for i = 1, 2 do
    rows[i] = {}
    for j = 1, 3 do
      rows[i][j] = {}
      for k = 1, 4 do rows[i][j][k] = (i - 1) * 12 + (j - 1) * 4 + k end
    end
  end
  return dlpack.tensor(rows, "float64")
end

describe("view", function()
  it("reshapes a contiguous tensor and shares memory", function()
    local t = m23()
    local v = t:view({3, 2})
    assert.are.same({3, 2}, v.shape)
    assert.are.same({2, 1}, v.strides)
    assert.are.same({{1, 2}, {3, 4}, {5, 6}}, v:totable())
    v:set(3, 1, 50)
    assert.are.equal(50, t:get(2, 2))
    t:set(1, 1, 10)
    assert.are.equal(10, v:get(1, 1))
  end)

  it("infers one -1 entry", function()
    local t = c234()
    assert.are.same({6, 4}, t:view({-1, 4}).shape)
    assert.are.same({24}, t:view({-1}).shape)
    assert.are.same({2, 12}, t:view({2, -1}).shape)
  end)

  it("turns a one-element tensor into 0-d and back", function()
    local s = dlpack.tensor({7}):view({})
    assert.are.equal(0, s.ndim)
    assert.are.equal(7, s:item())
    assert.are.same({1, 1}, s:view({1, 1}).shape)
  end)

  it("raises on a size mismatch", function()
    raises(function() m23():view({4}) end)
    raises(function() m23():view({-1, 4}) end)
  end)

  it("raises on two -1 entries and on bad sizes", function()
    raises(function() m23():view({-1, -1}) end)
    raises(function() m23():view({-2, -3}) end)
    raises(function() m23():view({1.5, 4}) end)
  end)

  it("raises on a non-contiguous tensor", function()
    raises(function() m23():transpose(1, 2):view({6}) end)
  end)
end)

describe("reshape", function()
  it("gives a view when possible", function()
    local t = m23()
    local r = t:reshape({6})
    r[6] = 60
    assert.are.equal(60, t:get(2, 3))
  end)

  it("copies when a view is impossible", function()
    local t = m23()
    local r = t:transpose(1, 2):reshape({6})
    assert.are.same({1, 4, 2, 5, 3, 6}, r:totable())
    r[1] = 100
    assert.are.equal(1, t:get(1, 1))
  end)

  it("accepts -1 and raises on a size mismatch", function()
    assert.are.same({3, 2}, m23():reshape({-1, 2}).shape)
    raises(function() m23():reshape({5}) end)
  end)
end)

describe("transpose", function()
  it("swaps two dimensions and their strides", function()
    local t = c234()
    local tt = t:transpose(1, 3)
    assert.are.same({4, 3, 2}, tt.shape)
    assert.are.same({1, 4, 12}, tt.strides)
    assert.are.equal(t:get(2, 3, 4), tt:get(4, 3, 2))
    assert.are.equal(t:get(1, 2, 3), tt:get(3, 2, 1))
  end)

  it("shares memory", function()
    local t = m23()
    local tt = t:transpose(1, 2)
    tt:set(3, 1, 30)
    assert.are.equal(30, t:get(1, 3))
  end)

  it("accepts negative dimensions", function()
    assert.are.same({2, 4, 3}, c234():transpose(-1, -2).shape)
  end)

  it("is the identity when both dimensions are equal", function()
    assert.are.same({2, 3}, m23():transpose(2, 2).shape)
  end)

  it("raises on dimensions out of range", function()
    raises(function() m23():transpose(1, 3) end)
    raises(function() m23():transpose(0, 1) end)
    raises(function() m23():transpose(1, -3) end)
  end)
end)

describe("permute", function()
  it("reorders dimensions", function()
    local t = c234()
    local p = t:permute({3, 1, 2})
    assert.are.same({4, 2, 3}, p.shape)
    assert.are.same({1, 12, 4}, p.strides)
    assert.are.equal(t:get(2, 3, 1), p:get(1, 2, 3))
    p:set(4, 1, 1, -1)
    assert.are.equal(-1.0, t:get(1, 1, 4))
  end)

  it("raises on a repeated dimension, a missing one, or the wrong length", function()
    raises(function() c234():permute({1, 1, 2}) end)
    raises(function() c234():permute({1, 2}) end)
    raises(function() c234():permute({1, 2, 3, 4}) end)
    raises(function() c234():permute({1, 2, 4}) end)
  end)
end)

describe("narrow", function()
  it("keeps length entries from start and shares memory", function()
    local t = m23()
    local n = t:narrow(2, 2, 2)
    assert.are.same({2, 2}, n.shape)
    assert.are.same({3, 1}, n.strides)
    assert.are.same({{2, 3}, {5, 6}}, n:totable())
    n:set(2, 1, 55)
    assert.are.equal(55, t:get(2, 2))
  end)

  it("accepts a negative start counting from the end", function()
    assert.are.same({{3}, {6}}, m23():narrow(2, -1, 1):totable())
  end)

  it("gives an empty view for length 0", function()
    assert.are.same({2, 0}, m23():narrow(2, 2, 0).shape)
  end)

  it("raises when the range leaves the dimension", function()
    raises(function() m23():narrow(2, 2, 3) end)
    raises(function() m23():narrow(2, 0, 1) end)
    raises(function() m23():narrow(2, 4, 1) end)
    raises(function() m23():narrow(2, 1, -1) end)
    raises(function() m23():narrow(3, 1, 1) end)
  end)
end)

describe("select", function()
  it("removes the dimension and shares memory", function()
    local t = c234()
    local s = t:select(2, 3)
    assert.are.same({2, 4}, s.shape)
    assert.are.same({12, 1}, s.strides)
    assert.are.equal(t:get(2, 3, 4), s:get(2, 4))
    s:set(1, 1, 0)
    assert.are.equal(0.0, t:get(1, 3, 1))
  end)

  it("accepts negative indices", function()
    assert.are.same({3, 6}, m23():select(2, -1):totable())
  end)

  it("gives a 0-d tensor from a 1-d one", function()
    local s = dlpack.tensor({4, 5}):select(1, 2)
    assert.are.equal(0, s.ndim)
    assert.are.equal(5, s:item())
  end)

  it("raises on an index or dimension out of range", function()
    raises(function() m23():select(1, 3) end)
    raises(function() m23():select(1, 0) end)
    raises(function() m23():select(1, -3) end)
    raises(function() m23():select(3, 1) end)
    raises(function() dlpack.tensor(1):select(1, 1) end)
  end)
end)

describe("slice", function()
  local function v5() return dlpack.tensor({1, 2, 3, 4, 5}, "int32") end

  it("has inclusive bounds like string.sub", function()
    assert.are.same({2, 3, 4}, v5():slice(1, 2, 4):totable())
    assert.are.same({1, 2, 3, 4, 5}, v5():slice(1, 1, 5):totable())
    assert.are.same({3}, v5():slice(1, 3, 3):totable())
  end)

  it("counts negative bounds from the end", function()
    assert.are.same({4, 5}, v5():slice(1, -2, -1):totable())
    assert.are.same({2, 3, 4}, v5():slice(1, 2, -2):totable())
  end)

  it("takes a positive step", function()
    local s = v5():slice(1, 1, 5, 2)
    assert.are.same({1, 3, 5}, s:totable())
    assert.are.same({2}, s.strides)
    assert.are.same({1, 3}, v5():slice(1, 1, 4, 2):totable())
    assert.are.same({2, 5}, v5():slice(1, 2, 5, 3):totable())
  end)

  it("gives negative strides for a negative step", function()
    local r = v5():slice(1, -1, 1, -1)
    assert.are.same({5}, r.shape)
    assert.are.same({-1}, r.strides)
    assert.are.same({5, 4, 3, 2, 1}, r:totable())
    local r2 = v5():slice(1, 5, 1, -2)
    assert.are.same({-2}, r2.strides)
    assert.are.same({5, 3, 1}, r2:totable())
    assert.are.same({4, 3}, v5():slice(1, 4, 3, -1):totable())
  end)

  it("writes through negative strides to the right elements", function()
    local t = v5()
    local r = t:slice(1, -1, 1, -1)
    r[1] = 50
    r[5] = 10
    assert.are.same({10, 2, 3, 4, 50}, t:totable())
  end)

  it("slices any dimension and keeps the others", function()
    local t = c234()
    local s = t:slice(3, 4, 1, -1)
    assert.are.same({2, 3, 4}, s.shape)
    assert.are.same({12, 4, -1}, s.strides)
    assert.are.equal(t:get(1, 1, 4), s:get(1, 1, 1))
    local s2 = t:slice(2, 1, 3, 2)
    assert.are.same({2, 2, 4}, s2.shape)
    assert.are.equal(t:get(2, 3, 2), s2:get(2, 2, 2))
  end)

  it("gives size 0 for an empty range", function()
    assert.are.same({0}, v5():slice(1, 3, 2).shape)
    assert.are.same({0}, v5():slice(1, 2, 1).shape)
  end)

  it("gives size 0 for an empty range just past either end, as string.sub does", function()
    assert.are.same({0}, v5():slice(1, 6, 5).shape)
    assert.are.same({0}, v5():slice(1, 1, 0).shape)
  end)

  it("composes: a reversed slice of a reversed slice is the original order", function()
    local t = v5()
    local rr = t:slice(1, -1, 1, -1):slice(1, -1, 1, -1)
    assert.are.same({1, 2, 3, 4, 5}, rr:totable())
    assert.are.same({1}, rr.strides)
  end)

  it("raises on out-of-range bounds", function()
    raises(function() v5():slice(1, 0, 3) end)
    raises(function() v5():slice(1, 2, 6) end)
    raises(function() v5():slice(1, -6, 2) end)
    raises(function() v5():slice(2, 1, 1) end)
  end)

  it("raises on a zero step", function()
    raises(function() v5():slice(1, 1, 5, 0) end)
  end)
end)

describe("squeeze and unsqueeze", function()
  it("squeeze removes every size-1 dimension", function()
    local t = dlpack.zeros({1, 3, 1, 2})
    assert.are.same({3, 2}, t:squeeze().shape)
    assert.are.same({}, dlpack.zeros({1, 1}):squeeze().shape)
  end)

  it("squeeze(dim) removes that size-1 dimension only", function()
    local t = dlpack.zeros({1, 3, 1, 2})
    assert.are.same({3, 1, 2}, t:squeeze(1).shape)
    assert.are.same({1, 3, 2}, t:squeeze(3).shape)
    assert.are.same({1, 3, 2}, t:squeeze(-2).shape)
  end)

  it("squeeze shares memory", function()
    local t = dlpack.zeros({1, 3}, "int8")
    t:squeeze()[2] = 7
    assert.are.equal(7, t:get(1, 2))
  end)

  it("unsqueeze inserts a size-1 dimension at dim", function()
    local t = m23()
    assert.are.same({1, 2, 3}, t:unsqueeze(1).shape)
    assert.are.same({2, 1, 3}, t:unsqueeze(2).shape)
    assert.are.same({2, 3, 1}, t:unsqueeze(3).shape)
    assert.are.same({1}, dlpack.tensor(5):unsqueeze(1).shape)
  end)

  it("unsqueeze shares memory", function()
    local t = m23()
    t:unsqueeze(1):set(1, 2, 3, 60)
    assert.are.equal(60, t:get(2, 3))
  end)

  it("raise on dimensions out of range", function()
    raises(function() m23():unsqueeze(4) end)
    raises(function() m23():unsqueeze(0) end)
    raises(function() m23():squeeze(3) end)
    raises(function() m23():squeeze(0) end)
  end)
end)

describe("expand", function()
  it("broadcasts size-1 dimensions with stride 0", function()
    local t = dlpack.tensor({{1, 2, 3}}, "int16")
    local e = t:expand({4, 3})
    assert.are.same({4, 3}, e.shape)
    assert.are.same({0, 1}, e.strides)
    assert.are.same({{1, 2, 3}, {1, 2, 3}, {1, 2, 3}, {1, 2, 3}}, e:totable())
  end)

  it("adds new leading dimensions with stride 0", function()
    local e = dlpack.tensor({1, 2, 3}, "int16"):expand({2, 3})
    assert.are.same({2, 3}, e.shape)
    assert.are.same({0, 1}, e.strides)
    assert.are.equal(3, e:get(2, 3))
  end)

  it("shares memory with the base", function()
    local t = dlpack.tensor({{1}, {2}}, "float32")
    local e = t:expand({2, 5})
    t:set(2, 1, 20)
    for j = 1, 5 do assert.are.equal(20.0, e:get(2, j)) end
  end)

  it("is not contiguous when it broadcasts", function()
    assert.is_false(dlpack.zeros({1, 3}):expand({4, 3}):is_contiguous())
  end)

  it("raises when a dimension of size other than 1 would change", function()
    raises(function() dlpack.zeros({2, 3}):expand({4, 3}) end)
    raises(function() dlpack.zeros({2, 3}):expand({3}) end)
    raises(function() dlpack.zeros({1, 3}):expand({4, -2}) end)
  end)
end)

describe("as_readonly", function()
  it("gives a read-only view sharing memory", function()
    local t = m23()
    local r = t:as_readonly()
    assert.is_true(r.readonly)
    assert.is_false(t.readonly)
    assert.are.same(t.shape, r.shape)
    assert.are.same(t.strides, r.strides)
    assert.are.equal(t:data_ptr(), r:data_ptr())
    t:set(1, 1, 11)
    assert.are.equal(11, r:get(1, 1))
  end)
end)

describe("views keep the dtype and device of their base", function()
  it("for every view operation", function()
    local t = dlpack.zeros({2, 3}, "uint16")
    for _, v in ipairs({t:view({6}), t:reshape({3, 2}), t:transpose(1, 2), t:permute({2, 1}),
        t:narrow(1, 1, 1), t:select(1, 1), t:slice(2, 3, 1, -1), t:unsqueeze(1), t:squeeze(),
        t:unsqueeze(1):expand({4, 2, 3}), t:as_readonly(), t[1]}) do
      assert.are.equal("uint16", v.dtype)
      assert.are.equal("cpu", v.device)
    end
  end)
end)

describe("view arguments", function()
  it("raise on shapes that are neither tables nor numbers, and on non-integer dimensions", function()
    raises(function() m23():view("6") end, "shape expected as a table or as numbers, got string")
    raises(function() m23():view(6.5) end, "shape%[1%] must be a size or %-1, got 6.5")
    raises(function() m23():transpose(1.5, 2) end)
    raises(function() m23():narrow("a", 1, 1) end)
    raises(function() m23():select(1) end)
    raises(function() m23():slice(1) end)
    raises(function() m23():permute(nil) end)
    raises(function() m23():expand(nil) end)
  end)

  it("raise when called on something that is not a tensor", function()
    local t = m23()
    local view, narrow = t.view, t.narrow
    raises(function() view({}, {6}) end)
    raises(function() narrow("t", 1, 1, 1) end)
    raises(function() view(nil, {6}) end)
  end)

  it("name a positive argument number in their messages", function()
    for _, fn in ipairs({
      function() m23():permute({1, 3}) end,
      function() c234():permute({1, 2, 4}) end,
      function() m23():transpose(1, 5) end,
      function() m23():expand({2, 5}) end,
    }) do
      local err = raises(fn)
      assert.is_falsy(tostring(err):find("#%-"), tostring(err))
    end
  end)
end)
