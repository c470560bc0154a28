-- Reductions: sum prod mean var std min max argmin argmax any all (src/compute/reduce.c).
local dlpack = require "dlpack"
local support = require "support"

local raises = support.raises
local is_nan = support.is_nan

local LUA53 = _VERSION >= "Lua 5.3"

-- {{1, 2, 3}, {4, 5, 6}} in dtype
local function m23(dtype) return dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, dtype or "int32") end

-- a {2, 3, 4} float64 tensor holding 1..24 in row-major order
local function c234(dtype) return dlpack.arange(1, 25, dtype or "float64"):view({2, 3, 4}) end

-- the two float64 halves of each complex element
local function complex_parts(t)
  local bytes = t:to("complex128"):contiguous():tobytes()
  local out = {}
  for i = 1, #bytes, 16 do
    local re, im = string.unpack("<dd", bytes, i)
    out[#out + 1] = {re, im}
  end
  return out
end

describe("full reductions", function()
  it("give Lua values: numbers, booleans and 1-based indices", function()
    local t = m23()
    assert.are.equal(21, t:sum())
    assert.are.equal(720, t:prod())
    assert.are.equal(3.5, t:mean())
    assert.are.equal(1, t:min())
    assert.are.equal(6, t:max())
    assert.are.equal(1, t:argmin())
    assert.are.equal(6, t:argmax())
    assert.is_true(t:any())
    assert.is_true(t:all())
    assert.are.equal(35 / 12, t:var())
    assert.are.equal(math.sqrt(35 / 12), t:std())
    assert.are.equal(3.5, t:var(nil, {correction = 1}))
    assert.are.equal(math.sqrt(3.5), t:std(nil, {correction = 1}))
  end)

  it("are module functions too", function()
    local t = m23()
    for _, name in ipairs({"sum", "prod", "mean", "var", "std", "min", "max", "argmin", "argmax", "any", "all"}) do
      assert.are.equal(t[name](t), dlpack[name](t))
    end
    assert.are.same(t:sum(1):totable(), dlpack.sum(t, 1):totable())
  end)

  it("give integer sums as Lua integers on 5.3 and later", function()
    local s = m23("int8"):sum()
    assert.are.equal(21, s)
    if LUA53 then assert.are.equal("integer", math.type(s)) end
    if LUA53 then assert.are.equal("integer", math.type(m23():argmax())) end
    if LUA53 then assert.are.equal("float", math.type(m23("float32"):sum())) end
  end)

  it("return the row-major index of the tensor as it is seen", function()
    local t = m23() -- transposed: {{1, 4}, {2, 5}, {3, 6}}
    assert.are.equal(6, t:transpose(1, 2):argmax())
    assert.are.equal(1, t:transpose(1, 2):argmin())
    local r = t:slice(2, -1, 1, -1) -- {{3, 2, 1}, {6, 5, 4}}
    assert.are.equal(4, r:argmax())
    assert.are.equal(3, r:argmin())
    assert.are.equal(2, m23():transpose(1, 2):slice(1, -1, 1, -1):argmax()) -- {{3, 6}, {2, 5}, {1, 4}}
  end)

  it("pick the first of equal values", function()
    local t = dlpack.tensor({3, 1, 3, 1, 3}, "int16")
    assert.are.equal(1, t:argmax())
    assert.are.equal(2, t:argmin())
    local u = dlpack.tensor({{1, 7}, {7, 1}}, "float32"):transpose(1, 2) -- {{1, 7}, {7, 1}} seen
    assert.are.equal(2, u:argmax())
    assert.are.equal(1, u:argmin())
  end)

  it("work on 0-d tensors", function()
    local t = dlpack.tensor(7, "int32")
    assert.are.equal(0, t:dim())
    assert.are.equal(7, t:sum())
    assert.are.equal(7, t:max())
    assert.are.equal(1, t:argmax())
    assert.are.equal(0, t:var())
    assert.are.equal(7, t:sum({}):item())
  end)
end)

describe("reductions over dims", function()
  it("take a number, a negative number or a table of dims", function()
    local t = m23()
    assert.are.same({5, 7, 9}, t:sum(1):totable())
    assert.are.same({6, 15}, t:sum(2):totable())
    assert.are.same({6, 15}, t:sum(-1):totable())
    assert.are.same({5, 7, 9}, t:sum(-2):totable())
    assert.are.same({6, 15}, t:sum({2}):totable())
    local all = t:sum({2, 1})
    assert.are.same({}, all.shape)
    assert.are.equal(21, all:item())
    assert.are.same({2, 3}, t:sum({}).shape)
    local c = c234()
    assert.are.same({{66, 72, 78, 84}}, c:sum({1, 2}, {keepdim = true}):view({1, 4}):totable())
    assert.are.same({1, 1, 4}, c:sum({1, -2}, {keepdim = true}).shape)
    assert.are.same({{10, 26, 42}, {58, 74, 90}}, c:sum(3):totable())
    assert.are.same({3}, c:sum({1, 3}).shape)
    assert.are.same({68, 100, 132}, c:sum({1, 3}):totable())
  end)

  it("keep the reduced dims with keepdim", function()
    local t = m23()
    local s = t:sum(2, {keepdim = true})
    assert.are.same({2, 1}, s.shape)
    assert.are.same({{6}, {15}}, s:totable())
    local a = t:sum(nil, {keepdim = true})
    assert.are.same({1, 1}, a.shape)
    assert.are.equal(21, a:item())
    assert.are.same({1, 1}, t:argmax(nil, {keepdim = true}).shape)
    assert.are.equal(6, t:argmax(nil, {keepdim = true}):item())
  end)

  it("min and max give values and 1-based int64 indices", function()
    local t = dlpack.tensor({{1, 5, 5}, {4, 2, 6}}, "int32")
    local v, i = t:max(2)
    assert.are.equal("int32", v.dtype)
    assert.are.equal("int64", i.dtype)
    assert.are.same({5, 6}, v:totable())
    assert.are.same({2, 3}, i:totable())
    v, i = t:min(1)
    assert.are.same({1, 2, 5}, v:totable())
    assert.are.same({1, 2, 1}, i:totable())
    v, i = t:max(1, {keepdim = true})
    assert.are.same({{4, 5, 6}}, v:totable())
    assert.are.same({{2, 1, 2}}, i:totable())
    assert.are.same({2, 3}, t:argmax(2):totable())
    assert.are.same({1, 2, 1}, t:argmin(1):totable())
  end)

  it("index among several reduced dims in their row-major order", function()
    local c = c234()
    local v, i = c:max({2, 3})
    assert.are.same({12, 24}, v:totable())
    assert.are.same({12, 12}, i:totable())
    assert.are.same({1, 1}, c:argmin({2, 3}):totable())
    assert.are.same({{2, 2, 2, 2}, {2, 2, 2, 2}, {2, 2, 2, 2}},
      c:permute({2, 3, 1}):argmax(3):totable())
  end)

  it("handle transposed, sliced, negative-stride and expanded inputs", function()
    local c = c234()
    local p = c:permute({3, 1, 2}) -- {4, 2, 3}
    assert.are.same({{15, 51}, {18, 54}, {21, 57}, {24, 60}}, p:sum(3):totable())
    assert.are.same({{2.5, 6.5, 10.5}, {14.5, 18.5, 22.5}}, p:mean(1):totable())
    local v, i = p:max(2)
    assert.are.same({{13, 17, 21}, {14, 18, 22}, {15, 19, 23}, {16, 20, 24}}, v:totable())
    assert.are.same({{2, 2, 2}, {2, 2, 2}, {2, 2, 2}, {2, 2, 2}}, i:totable())
    local r = c:slice(3, -1, 1, -1) -- the last dim reversed
    assert.are.same({{4, 8, 12}, {16, 20, 24}}, r:max(3):totable())
    assert.are.same({{1, 1, 1}, {1, 1, 1}}, r:argmax(3):totable())
    assert.are.same({{4, 4, 4}, {4, 4, 4}}, r:argmin(3):totable())
    local s = c:slice(3, 1, 4, 2) -- {2, 3, 2}: 1, 3 | 5, 7 ...
    assert.are.same({{4, 12, 20}, {28, 36, 44}}, s:sum(3):totable())
    assert.are.equal(144, s:sum())
    local e = dlpack.tensor({1, 5, 2}, "int32"):expand({4, 3})
    assert.are.same({4, 20, 8}, e:sum(1):totable())
    assert.are.same({8, 8, 8, 8}, e:sum(2):totable())
    assert.are.same({1, 625, 16}, e:prod(1):totable())
    assert.are.equal(2, e:argmax())
    assert.are.same({1, 1, 1}, e:argmax(1):totable())
    assert.are.same({2, 2, 2, 2}, e:argmax(2):totable())
  end)

  it("reduce a dim the input is contiguous along and one it is not (rows added into the output)", function()
    local t = dlpack.arange(4096 * 10, "int64"):view({4096, 10}) -- element (i, j) = 10 (i - 1) + j - 1
    local cols = t:sum(1)
    assert.are.same({4096}, t:sum(2).shape)
    assert.are.equal(45, t:sum(2):get(1))
    assert.are.equal(10 * 40950 + 45, t:sum(2):get(4096))
    for j = 1, 10 do assert.are.equal(10 * 4096 * 4095 / 2 + 4096 * (j - 1), cols:get(j)) end
    local f = t:to("float64")
    assert.are.same(cols:totable(), f:sum(1):to("int64"):totable())
    assert.are.same(t:sum(2):totable(), f:sum(2):to("int64"):totable())
    local v, i = f:max(1)
    assert.are.equal(40950, v:get(1))
    assert.are.equal(4096, i:get(10))
  end)
end)

describe("result dtypes", function()
  it("follow NumPy 2 for sum and prod", function()
    local expect = {
      bool = "int64", int8 = "int64", int16 = "int64", int32 = "int64", int64 = "int64",
      uint8 = "uint64", uint16 = "uint64", uint32 = "uint64", uint64 = "uint64",
      float16 = "float16", bfloat16 = "bfloat16", float32 = "float32", float64 = "float64",
    }
    for dtype, want in pairs(expect) do
      local t = dlpack.ones({2, 3}, dtype)
      assert.are.equal(want, t:sum(1).dtype, dtype)
      assert.are.equal(want, t:prod(1).dtype, dtype)
      assert.are.same({2, 2, 2}, t:sum(1):to("int64"):totable(), dtype)
      assert.are.same({1, 1, 1}, t:prod(1):to("int64"):totable(), dtype)
    end
  end)

  it("give mean, var and std of integers float64, of floats their own dtype", function()
    for _, dtype in ipairs({"bool", "int8", "uint16", "int64"}) do
      assert.are.equal("float64", dlpack.ones({2}, dtype):mean(1).dtype)
      assert.are.equal("float64", dlpack.ones({2}, dtype):var(1).dtype)
      assert.are.equal("float64", dlpack.ones({2}, dtype):std(1).dtype)
    end
    for _, dtype in ipairs({"float16", "bfloat16", "float32", "float64"}) do
      local t = dlpack.tensor({1, 2, 3, 4}, dtype)
      assert.are.equal(dtype, t:mean(1).dtype)
      assert.are.equal(2.5, t:mean(1):item())
      assert.are.equal(1.25, t:var(1):item())
      assert.are.equal(dtype, t:std(1).dtype)
    end
    assert.are.equal(2.5, dlpack.tensor({1, 2, 3, 4}, "uint8"):mean())
  end)

  it("take opts.dtype as the accumulation and result dtype", function()
    local t = dlpack.tensor({100, 100, 100}, "int8")
    assert.are.equal(300, t:sum())
    assert.are.equal("int8", t:sum(1, {dtype = "int8"}).dtype)
    assert.are.equal(44, t:sum(nil, {dtype = "int8"})) -- 300 wraps to 44
    assert.are.equal(300, t:sum(nil, {dtype = "float32"}))
    assert.are.equal("float32", t:mean(1, {dtype = "float32"}).dtype)
    assert.are.equal("float16", t:sum(1, {dtype = "float16"}).dtype)
    -- elements are converted to dtype first, as NumPy: 1.5 + 1.5 in int64 is 2
    assert.are.equal(2, dlpack.tensor({1.5, 1.5}, "float64"):sum(nil, {dtype = "int64"}))
    assert.is_true(dlpack.tensor({1, -1}, "int32"):sum(nil, {dtype = "bool"}))
    -- also into a half dtype that accumulates in the input's own float32: -1704.375 and 1915.25 are
    -- float16 -1704 and 1915 (the sum 211, not 210.875); whole, along a dim, with keepdim, in tasks
    local function num(r) return type(r) == "number" and r or r:item() end
    local x = dlpack.cat({dlpack.tensor({-1704.375, 1915.25}, "float32"), dlpack.zeros({10}, "float32")})
    for _, dtype in ipairs({"float16", "bfloat16"}) do
      local want_sum, want_mean = num(x:to(dtype):sum()), num(x:to(dtype):mean())
      assert.are.equal(want_sum, num(x:sum(nil, {dtype = dtype})), dtype)
      assert.are.equal(want_sum, num(x:sum(1, {dtype = dtype})), dtype)
      assert.are.equal(want_mean, num(x:mean(nil, {dtype = dtype, keepdim = true})), dtype)
      assert.are.equal(num(x:to(dtype):prod()), num(x:prod(nil, {dtype = dtype})), dtype)
    end
    assert.are.equal(211, num(x:sum(nil, {dtype = "float16"})))
    local big = x:narrow(1, 1, 2):reshape({1, 2}):expand({150000, 2}):contiguous():reshape({2, 150000})
    assert.are.same(big:to("bfloat16"):sum(2):totable(), big:sum(2, {dtype = "bfloat16"}):totable())
    assert.are.equal("float64", dlpack.tensor({1, 2}, "float32"):var(1, {dtype = "float64"}).dtype)
    raises(function() t:mean(nil, {dtype = "int32"}) end, "dlpack.mean: dtype int32 cannot hold")
    raises(function() t:var(nil, {dtype = "complex128"}) end, "dlpack.var: dtype complex128")
    raises(function() t:max(nil, {dtype = "int32"}) end, "unknown option 'dtype'")
    raises(function() t:sum(nil, {correction = 1}) end, "unknown option 'correction'")
    raises(function() t:sum(nil, {dtype = "float8_e4m3fn"}) end, "does not compute")
  end)

  it("accumulate integers in 64 bits", function()
    local t = dlpack.full({70000}, 70000, "int32")
    assert.are.equal(4900000000, t:sum())
    assert.are.equal(4900000000, t:sum(1):item())
    local u = dlpack.full({3}, 255, "uint8")
    assert.are.equal(765, u:sum())
    assert.are.equal(16581375, u:prod())
  end)
end)

describe("every dtype family", function()
  it("sum, prod, min, max, argmin, argmax, any and all", function()
    for _, dtype in ipairs(support.NUMERIC) do
      local t = dlpack.tensor({3, 1, 4, 1, 6}, dtype)
      assert.are.equal(15, t:sum(), dtype)
      assert.are.equal(72, t:prod(), dtype)
      assert.are.equal(3, t:mean(), dtype)
      assert.are.equal(1, t:min(), dtype)
      assert.are.equal(6, t:max(), dtype)
      assert.are.equal(2, t:argmin(), dtype)
      assert.are.equal(5, t:argmax(), dtype)
      assert.is_true(t:all(), dtype)
      assert.is_false(dlpack.zeros({3}, dtype):any(), dtype)
      local v, i = t:view({5, 1}):max(1)
      assert.are.equal(dtype, v.dtype)
      assert.are.same({6}, v:totable(), dtype)
      assert.are.same({5}, i:totable(), dtype)
    end
  end)

  it("bool", function()
    local t = dlpack.tensor({false, true, true, false}, "bool")
    assert.are.equal(2, t:sum())
    assert.are.equal(0, t:prod())
    assert.are.equal(0.5, t:mean())
    assert.is_false(t:min())
    assert.is_true(t:max())
    assert.are.equal(2, t:argmax())
    assert.are.equal(1, t:argmin())
    assert.is_true(t:any())
    assert.is_false(t:all())
    assert.are.equal("bool", t:max(1).dtype)
    assert.are.same({true, true}, t:view({2, 2}):any(1):totable())
    assert.are.same({false, false}, t:view({2, 2}):all(2):totable())
  end)

  it("negative and extreme integers", function()
    local t = dlpack.tensor({-128, 127, -1}, "int8")
    assert.are.equal(-128, t:min())
    assert.are.equal(127, t:max())
    assert.are.equal(-2, t:sum())
    local u = dlpack.tensor({0, 4294967295}, "uint32")
    assert.are.equal(4294967295, u:max())
    assert.are.equal(2, u:argmax())
    if LUA53 then
      local big = dlpack.tensor({math.maxinteger, math.mininteger, 0}, "int64")
      assert.are.equal(math.maxinteger, big:max())
      assert.are.equal(math.mininteger, big:min())
      assert.are.equal(-1, big:sum())
    end
  end)

  it("complex sums, products and means (0-d tensors over all dims: Lua has no complex number)", function()
    local t = dlpack.tensor({{1, 2}, {3, 4}}, "float64"):to("complex128")
    local s = t:sum()
    assert.are.equal("complex128", s.dtype)
    assert.are.same({}, s.shape)
    assert.are.same({{10, 0}}, complex_parts(s))
    assert.are.same({{4, 0}, {6, 0}}, complex_parts(t:sum(1)))
    assert.are.same({{24, 0}}, complex_parts(t:prod()))
    assert.are.same({{2.5, 0}}, complex_parts(t:to("complex64"):mean()))
    assert.are.equal("complex64", t:to("complex64"):sum(2).dtype)
    -- (1 + 2i)(1 + 2i) = -3 + 4i: bytes of two complex128 elements 1+2i
    local z = dlpack.frombytes(string.pack("<dddd", 1, 2, 1, 2), "complex128")
    assert.are.same({{-3, 4}}, complex_parts(z:prod()))
    assert.are.same({{2, 4}}, complex_parts(z:sum()))
    assert.is_true(dlpack.frombytes(string.pack("<dd", 0, 1), "complex128"):any())
    raises(function() t:max() end, "dlpack.max: complex128 tensors are not supported")
    raises(function() t:argmin(1) end, "dlpack.argmin: complex128")
    raises(function() t:var() end, "dlpack.var: complex128")
  end)

  it("refuse the 8-, 6- and 4-bit floats", function()
    local t = dlpack.zeros({2}, "float8_e4m3fn")
    raises(function() t:sum() end, "dlpack.sum: dtype float8_e4m3fn does not compute")
    raises(function() t:max(1) end, "dlpack.max: dtype float8_e4m3fn")
  end)
end)

describe("accuracy", function()
  it("sums float32 pairwise: 2^24 + 8 ones give their exact count", function()
    local n = 2 ^ 24 + 8
    local t = dlpack.ones({n}, "float32")
    -- a float32 accumulator that adds one at a time stops at 2^24 = 16777216
    assert.are.equal(16777224, t:sum())
    assert.are.equal(1, t:mean())
    assert.are.equal(16777224, t:view({1, n}):sum(2):item())
    -- strided rows are summed pairwise too
    assert.are.equal(2 ^ 23 + 4, t:slice(1, 1, n, 2):sum())
  end)

  it("accumulates float16 and bfloat16 in float32 and rounds once", function()
    -- 4096 halves: a float16 accumulator stalls at 1024 (1024 + 0.5 rounds to even); float32's is exact
    local t = dlpack.full({4096}, 0.5, "float16")
    assert.are.equal(2048, t:sum())
    local b = dlpack.full({1000}, 1, "bfloat16")
    assert.are.equal(1000, b:sum()) -- bfloat16 holds 1000 exactly; its own accumulator stops at 256
    assert.are.equal(1, b:mean())
  end)
end)

describe("NaN", function()
  local nan = 0 / 0
  it("propagates through min and max; argmin and argmax find the first NaN", function()
    local t = dlpack.tensor({1, nan, 3, nan}, "float64")
    assert.is_true(is_nan(t:max()))
    assert.is_true(is_nan(t:min()))
    assert.are.equal(2, t:argmax())
    assert.are.equal(2, t:argmin())
    assert.is_true(is_nan(t:sum()))
    assert.is_true(t:all()) -- NaN is not zero
    local m = dlpack.tensor({{1, 9}, {nan, 2}, {3, nan}}, "float32")
    local v, i = m:max(1)
    assert.is_true(is_nan(v:get(1)) and is_nan(v:get(2)))
    assert.are.same({2, 3}, i:totable())
    v, i = m:min(2)
    assert.are.same({1, 1, 2}, i:totable())
    assert.are.equal(1, v:get(1))
    assert.is_true(is_nan(v:get(2)))
  end)

  it("is found in long contiguous rows", function()
    local t = dlpack.arange(1000, "float32")
    t:set(700, nan)
    t:set(900, nan)
    assert.are.equal(700, t:argmax())
    assert.are.equal(700, t:argmin())
    assert.is_true(is_nan(t:max()))
    local u = dlpack.arange(1000, "float64")
    assert.are.equal(1000, u:argmax())
    assert.are.equal(1, u:argmin())
    u:set(513, 5000)
    u:set(600, 5000)
    assert.are.equal(513, u:argmax())
    assert.are.equal(5000, u:max())
  end)
end)

describe("empty tensors", function()
  it("sum to 0, multiply to 1, mean to NaN, any false, all true", function()
    local e = dlpack.zeros({0}, "float32")
    assert.are.equal(0, e:sum())
    assert.are.equal(1, e:prod())
    assert.is_true(is_nan(e:mean()))
    assert.is_true(is_nan(e:var()))
    assert.is_false(e:any())
    assert.is_true(e:all())
    assert.are.equal(0, dlpack.zeros({0}, "int32"):sum())
    local z = dlpack.zeros({0, 3}, "int32")
    assert.are.same({0, 0, 0}, z:sum(1):totable())
    assert.are.same({1, 1, 1}, z:prod(1):totable())
    assert.are.same({0}, z:sum(2).shape)
    assert.are.same({0}, z:max(2).shape) -- no output: nothing to reduce
  end)

  it("raise for min, max, argmin and argmax over nothing", function()
    local e = dlpack.zeros({0, 3})
    for _, name in ipairs({"min", "max", "argmin", "argmax"}) do
      raises(function() e[name](e) end, "dlpack%." .. name .. ": the reduction of an empty")
      raises(function() e[name](e, 1) end, "dlpack%." .. name .. ": the reduction of an empty")
    end
  end)

  -- what a .npy header such as (0, 9223372036854775807) loads as: nothing to walk, whatever the
  -- other sizes (cumsum walked 2^62 empty lines; a sum multiplied a stride past 64 bits)
  it("with other sizes near 2^63 return at once: reductions, scans, softmax, sorts along any dim", function()
    for _, shape in ipairs({{0, 2 ^ 62}, {2 ^ 62, 0}, {2 ^ 62, 0, 2 ^ 62}}) do
      local e = dlpack.zeros(shape, "float32")
      for dim = 1, #shape do
        for _, name in ipairs({"cumsum", "cumprod", "softmax", "log_softmax", "sort", "argsort"}) do
          assert.are.same(shape, e[name](e, dim).shape)
        end
        for _, name in ipairs({"sum", "prod", "mean", "var", "any", "all", "median"}) do
          local ok, r = pcall(e[name], e, dim) -- an output of 2^62 elements is refused by its size
          assert(ok or r:match("too many bytes") or r:match("more elements than fit"), r)
          if ok then assert.are.equal(#shape - 1, #r.shape) end
        end
      end
      if #shape == 2 then -- matrix norms: an empty matrix has no singular value to find
        for _, ord in ipairs({2, "nuc", 1, -1, "fro", math.huge}) do
          local ok, r = pcall(e.norm, e, ord) -- ord 1 and inf sum along a dim of 2^62 first, -1 takes a min
          assert(ok and r == 0 or not ok and (r:match("too many bytes") or r:match("has no identity")), r)
        end
      end
    end
  end)

  it("give var and std NaN or inf when the correction reaches the count, as NumPy", function()
    local t = dlpack.tensor({1, 2}, "float64")
    assert.are.equal(math.huge, t:var(nil, {correction = 2}))
    assert.are.equal(math.huge, t:std(nil, {correction = 3}))
    assert.is_true(is_nan(dlpack.tensor({1, 1}, "float64"):var(nil, {correction = 2})))
    assert.are.equal(1 / 6, t:var(nil, {correction = -1}))
  end)
end)

describe("expanded inputs", function()
  it("reduce stride-0 dims without walking them", function()
    local t = dlpack.tensor({3}, "int64"):expand({2 ^ 62})
    assert.are.equal(-(2 ^ 62), t:sum()) -- 3 * 2^62 wraps in int64
    assert.are.equal(3, t:max())
    assert.are.equal(1, t:argmax())
    assert.are.equal(3, t:mean())
    assert.are.equal(0, t:var())
    assert.is_true(t:all())
    local f = dlpack.tensor({0.5}, "float64"):expand({2 ^ 62})
    assert.are.equal(2 ^ 61, f:sum())
    assert.are.equal(0, dlpack.tensor({0.5}, "float64"):expand({2 ^ 62}):prod())
    local w = dlpack.tensor({{1, 5, 2}}, "int32"):expand({2 ^ 40, 3})
    assert.are.same({2 ^ 40, 5 * 2 ^ 40, 2 ^ 41}, w:sum(1):totable())
    assert.are.equal(2, w:argmax())
    local v, i = w:max(1)
    assert.are.same({1, 5, 2}, v:totable())
    assert.are.same({1, 1, 1}, i:totable())
    assert.are.same({1, 5, 2}, w:mean(1):totable())
    assert.are.same({0, 0, 0}, w:var(1):totable())
    assert.are.same({2, 2, 2, 2, 2}, dlpack.tensor({2, 1, 1}, "int64"):view({3, 1}):expand({3, 5}):argmin(1):totable())
  end)

  it("index the first element of a stride-0 dim among the others", function()
    -- {2, 3} with dim 1 expanded: argmax over both dims counts row-major over {2, 3}
    local e = dlpack.tensor({{1, 9, 4}}, "float32"):expand({2, 3})
    assert.are.equal(2, e:argmax())
    assert.are.equal(1, e:argmin())
    local v, i = e:max({1, 2})
    assert.are.equal(9, v:item())
    assert.are.equal(2, i:item())
    local c = dlpack.tensor({{7}, {8}}, "int16"):expand({2, 3}) -- {{7, 7, 7}, {8, 8, 8}}
    assert.are.equal(4, c:argmax())
    assert.are.same({1, 1}, c:argmax(2):totable())
    assert.are.equal(45, c:sum())
  end)
end)

describe("argument errors", function()
  it("refuse out-of-range, repeated and malformed dims", function()
    local t = m23()
    raises(function() t:sum(3) end, "'sum' %(dimension 3 out of range %(tensor has 2%)%)")
    raises(function() t:sum(-3) end, "dimension %-3 out of range")
    raises(function() t:sum(0) end, "dimension 0 out of range")
    raises(function() t:max({1, 5}) end, "'max' %(dimension 5 out of range")
    raises(function() dlpack.max(t, {1, 5}) end, "#2 to 'max' %(dimension 5 out of range")
    raises(function() t:sum({1, -2}) end, "dimension %-2 given twice")
    raises(function() t:sum({2, 2}) end, "dimension 2 given twice")
    raises(function() t:sum(1.5) end, "dim must be an integer")
    raises(function() t:sum("1") end, "dim must be a number, a table of dimensions or nil, got string")
    raises(function() t:sum({1.5}) end, "dim%[1%] must be an integer")
    raises(function() t:sum({"x"}) end, "dim%[1%] must be an integer")
    -- opts where dim goes: refused, not read as "no dimensions" (which {} is: a copy, as NumPy's axis=())
    raises(function() dlpack.sum(t, {out = dlpack.zeros({})}) end, "dim is a table with named keys")
    raises(function() t:max({keepdim = true}) end, "opts come after dim")
    assert.are.same(t:totable(), t:sum({}):totable())
    raises(function() t:argmax(1, 2) end, "options table expected")
    raises(function() t:sum(1, {keepdims = true}) end, "unknown option 'keepdims'")
    raises(function() t:sum(1, {keepdim = 1}) end, "keepdim must be true, false or nil")
    raises(function() t:sum(1, nil, 3) end, "unexpected argument")
    raises(function() dlpack.sum() end, "tensor expected")
    raises(function() dlpack.sum(5) end, "tensor expected")
  end)

  it("refuse any dim on a 0-d tensor (NumPy's AxisError)", function()
    local t = dlpack.tensor(1.5, "float32")
    raises(function() t:sum(1) end, "dimension 1 out of range %(tensor has 0%)")
    raises(function() t:argmax(-1) end, "dimension %-1 out of range")
  end)

  it("read a dim table through metamethods before touching memory", function()
    local t = m23()
    local proxy = setmetatable({}, {__index = function(_, k) return k end, __len = function() return 2 end})
    if #proxy == 2 then -- tables honour __len (Lua 5.2 and later)
      assert.are.same({}, t:sum(proxy).shape)
      local liar = setmetatable({}, {__len = function() return 2 ^ 40 end})
      raises(function() t:sum(liar) end, "dim has a length of")
      local releasing = setmetatable({}, {
        __len = function() return 1 end,
        __index = function() t:release(); return 1 end,
      })
      raises(function() t:sum(releasing) end, "released")
    end
    local u = m23()
    local opts = setmetatable({}, {__index = function() u:release(); return nil end})
    raises(function() u:sum(1, opts) end, "released")
  end)

  it("refuse a released tensor", function()
    local t = m23()
    t:release()
    raises(function() t:sum() end, "released")
  end)

  it("name the device of memory they cannot compute on", function()
    local fab = require "fabricate"
    local r = dlpack.from_dlpack((fab.versioned {device_type = 10, device_id = 0, shape = {2}}))
    support.raises_plain(function() return r:sum() end, "dlpack.sum: the tensor is on device rocm:0")
    r:release()
    if not dlpack.cuda.is_available() then -- CUDA tensors compute on their device (spec/cuda/compute_suite.lua)
      local t = dlpack.from_dlpack((fab.versioned {device_type = 2, device_id = 0, shape = {2}}))
      support.raises_plain(function() return t:argmax(1) end,
                           "dlpack.argmax (a tensor on cuda:0): CUDA is not available")
      t:release()
    end
  end)
end)

-- A plain Lua model of the reductions over dims, for random shapes and layouts.
local function flat_with_coords(value, shape)
  local out = {}
  local coords = {}
  local function walk(v, d)
    if d > #shape then
      local c = {}
      for i = 1, #shape do c[i] = coords[i] end
      out[#out + 1] = {v = v, c = c}
      return
    end
    for i = 1, shape[d] do
      coords[d] = i
      walk(v[i], d + 1)
    end
  end
  walk(value, 1)
  return out
end

local function model(t, dims)
  local shape, reduced = t.shape, {}
  for _, d in ipairs(dims) do reduced[d] = true end
  local groups, order = {}, {}
  for _, e in ipairs(flat_with_coords(t:totable(), shape)) do
    local key, pos = {}, 0
    for i = 1, #shape do
      if reduced[i] then pos = pos * shape[i] + (e.c[i] - 1) else key[#key + 1] = e.c[i] end
    end
    local k = table.concat(key, ",")
    local g = groups[k]
    if not g then
      g = {sum = 0, n = 0, any = false, all = true}
      groups[k] = g
      order[#order + 1] = k
    end
    local v = e.v
    g.sum, g.n = g.sum + v, g.n + 1
    if g.max == nil or v > g.max then g.max, g.argmax = v, pos + 1 end
    if g.min == nil or v < g.min then g.min, g.argmin = v, pos + 1 end
    g.any = g.any or v ~= 0
    g.all = g.all and v ~= 0
  end
  return groups, order
end

local function flat(value, shape)
  local out = {}
  for i, e in ipairs(flat_with_coords(value, shape)) do out[i] = e.v end
  return out
end

describe("a plain Lua model", function()
  it("agrees on random shapes, layouts, dims and dtypes", function()
    math.randomseed(16)
    local dtypes = {"int32", "float64", "float32", "uint8", "int64", "int16", "uint32"}
    for _ = 1, support.trials(150) do
      local ndim = math.random(1, 4)
      local shape = {}
      for i = 1, ndim do shape[i] = math.random(1, 5) end
      local n = 1
      for i = 1, ndim do n = n * shape[i] end
      local values = {}
      for i = 1, n do values[i] = math.random(0, 9) end
      local dtype = dtypes[math.random(#dtypes)]
      local t = dlpack.tensor(values, dtype):view(shape)
      -- a random layout: a permutation, a reversed dim, a stride-2 slice, an expanded dim
      local perm = {}
      for i = 1, ndim do perm[i] = i end
      for i = ndim, 2, -1 do
        local j = math.random(i)
        perm[i], perm[j] = perm[j], perm[i]
      end
      t = t:permute(perm)
      local d = math.random(ndim)
      if math.random() < 0.4 then t = t:slice(d, -1, 1, -1) end
      d = math.random(ndim)
      if math.random() < 0.3 and t.shape[d] >= 3 then t = t:slice(d, 1, t.shape[d], 2) end
      d = math.random(ndim)
      if math.random() < 0.3 and t.shape[d] == 1 then
        local s = {}
        for i = 1, ndim do s[i] = t.shape[i] end
        s[d] = 4
        t = t:expand(s)
      end
      local dims = {}
      for i = 1, ndim do if math.random() < 0.5 then dims[#dims + 1] = i end end
      if #dims == 0 then dims[1] = math.random(ndim) end
      local groups, order = model(t, dims)
      local label = dtype .. " shape " .. table.concat(t.shape, "x") .. " strides " .. table.concat(t.strides, ",")
        .. " dims " .. table.concat(dims, ",")
      local s = flat(t:sum(dims):totable(), t:sum(dims).shape)
      local mx, ix = t:max(dims)
      local mn, ia = t:min(dims)
      local results = {
        sum = s, max = flat(mx:totable(), mx.shape), argmax = flat(ix:totable(), ix.shape),
        min = flat(mn:totable(), mn.shape), argmin = flat(ia:totable(), ia.shape),
        any = flat(t:any(dims):totable(), mx.shape), all = flat(t:all(dims):totable(), mx.shape),
        mean = flat(t:mean(dims, {dtype = "float64"}):totable(), mx.shape),
      }
      assert.are.same(flat(t:argmax(dims):totable(), mx.shape), results.argmax, label)
      assert.are.same(flat(t:argmin(dims):totable(), mx.shape), results.argmin, label)
      for k, key in ipairs(order) do
        local g = groups[key]
        assert.are.equal(g.sum, results.sum[k], label)
        assert.are.equal(g.max, results.max[k], label)
        assert.are.equal(g.argmax, results.argmax[k], label)
        assert.are.equal(g.min, results.min[k], label)
        assert.are.equal(g.argmin, results.argmin[k], label)
        assert.are.equal(g.any, results.any[k], label)
        assert.are.equal(g.all, results.all[k], label)
        assert.are.equal(g.sum / g.n, results.mean[k], label)
      end
      -- over all dims: Lua values
      local all = model(t, (function() local a = {} for i = 1, ndim do a[i] = i end return a end)())
      local g = all[""]
      assert.are.equal(g.sum, t:sum(), label)
      assert.are.equal(g.argmax, t:argmax(), label)
      assert.are.equal(g.argmin, t:argmin(), label)
      assert.are.equal(g.max, t:max(), label)
    end
  end)

  it("agrees on long rows (the vectorised blocks), forwards, backwards and strided", function()
    math.randomseed(61)
    for _ = 1, support.trials(24) do
      local a, b = math.random(1, 3), math.random(200, 900)
      local values = {}
      for i = 1, a * b do values[i] = math.random(0, 999) end
      if math.random() < 0.3 then values[math.random(#values)] = 0 / 0 end
      local dtype = math.random() < 0.5 and "float32" or "float64"
      local t = dlpack.tensor(values, dtype):view({a, b})
      if math.random() < 0.5 then t = t:slice(2, -1, 1, -1) end
      if math.random() < 0.5 then t = t:transpose(1, 2) end
      local row = t.shape[1] > t.shape[2] and 1 or 2
      local label = dtype .. " shape " .. table.concat(t.shape, "x") .. " strides " .. table.concat(t.strides, ",")
      local data = flat_with_coords(t:totable(), t.shape)
      -- the model of argmax/argmin along `row` with NumPy's NaN rule, and of the whole tensor
      local best = {}
      for n, e in ipairs(data) do
        local k = e.c[3 - row]
        local g = best[k] or {}
        best[k] = g
        local v, pos = e.v, e.c[row]
        if g.max == nil or (v > g.max or (v ~= v and g.max == g.max)) then g.max, g.imax = v, pos end
        if g.min == nil or (v < g.min or (v ~= v and g.min == g.min)) then g.min, g.imin = v, pos end
        if best.all == nil or (v > best.all or (v ~= v and best.all == best.all)) then best.all, best.iall = v, n end
      end
      local ix, iy = t:argmax(row), t:argmin(row)
      for k = 1, t.shape[3 - row] do
        assert.are.equal(best[k].imax, ix:get(k), label)
        assert.are.equal(best[k].imin, iy:get(k), label)
      end
      assert.are.equal(best.iall, t:argmax(), label)
      local sum = 0
      for _, e in ipairs(data) do sum = sum + e.v end
      if sum == sum then assert.are.equal(sum, t:sum(nil, {dtype = "float64"}), label) end
    end
  end)
end)

describe("full reductions on Luas without integers", function()
  it("raise for an integer result a double cannot hold, as element reads do", function()
    local t = dlpack.frombytes(string.pack("<i8i8", 2 ^ 62, 3), "int64")
    if _VERSION >= "Lua 5.3" then -- integers: the exact value
      assert.equal(math.tointeger(2 ^ 62) + 3, t:sum())
    else
      support.raises(function() return t:sum() end, "no exact lua number")
    end
  end)
end)
