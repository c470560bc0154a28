-- Indexing with tensors: nonzero, argwhere, count_nonzero, masked_select, index_select, gather,
-- scatter/scatter_ and take (NumPy 2's and torch's, with 1-based indices). spec/peers/oracle.py
-- checks them against NumPy on many dtypes and layouts; here: the contract case by case, the
-- errors, and what hostile arguments get.
local dlpack = require "dlpack"
local support = require "support"

local raises, raises_plain = support.raises, support.raises_plain

local function values(t) return t:totable() end
local function i64(v) return dlpack.tensor(v, "int64") end

describe("nonzero and argwhere", function()
  local t = dlpack.tensor({{1, 0, 3}, {0, 5, 0}}, "float32")

  it("give torch's {n, ndim} int64 tensor of 1-based indices, row-major", function()
    local r = t:nonzero()
    assert.are.equal("int64", r.dtype)
    assert.same({{1, 1}, {1, 3}, {2, 2}}, values(r))
    assert.same({{1, 1}, {1, 3}, {2, 2}}, values(dlpack.argwhere(t)))
    assert.same({{1, 1}, {2, 2}, {3, 1}}, values(t:transpose(1, 2):nonzero())) -- in the view's order
  end)

  it("give NumPy's tuple as a table of 1-d tensors with as_tuple", function()
    local r = dlpack.nonzero(t, {as_tuple = true})
    assert.are.equal(2, #r)
    assert.same({1, 1, 2}, values(r[1]))
    assert.same({1, 3, 2}, values(r[2]))
    raises(function() dlpack.nonzero(dlpack.tensor(1), {as_tuple = true}) end, "at least one dim")
  end)

  it("read truth as NumPy does: -0.0 is zero, NaN is true, bool bytes, complex parts", function()
    assert.same({{2}, {3}}, values(dlpack.tensor({-0.0, 0 / 0, 1}):nonzero()))
    assert.same({{2}}, values(dlpack.tensor({0, -0.0}, "float16"):add(dlpack.tensor({0, 1}, "float16")):nonzero()))
    assert.same({{2}}, values(dlpack.frombytes("\0\7", "bool"):nonzero()))
    assert.same({{1}}, values(dlpack.tensor({2, 0}):to("complex64"):nonzero()))
  end)

  it("handle 0-d, empty, empty with huge dims and 64-dim tensors", function()
    assert.same({1, 0}, dlpack.tensor(5):nonzero().shape)
    assert.same({0, 0}, dlpack.tensor(0):nonzero().shape)
    assert.same({0, 2}, dlpack.empty({0, 2 ^ 62}):nonzero().shape)
    local shape = {}
    for i = 1, 64 do shape[i] = 1 end
    shape[64] = 2
    local r = dlpack.ones(shape):nonzero()
    assert.same({2, 64}, r.shape)
    assert.are.equal(2, r:get(2, 64))
  end)

  it("refuse unknown options, non-boolean values and CUDA-less devices' dtypes", function()
    raises_plain(function() t:nonzero({as_tupel = true}) end, "unknown option 'as_tupel'")
    raises_plain(function() t:nonzero({as_tuple = 1}) end, "as_tuple must be true or false")
    raises_plain(function() t:nonzero({[1] = true}) end, "option names are strings")
    raises_plain(function() t:argwhere({as_tuple = true}) end, "argwhere: unknown option 'as_tuple'")
    raises_plain(function() t:argwhere({}, 1) end, "unexpected argument")
    raises_plain(function() dlpack.zeros({2}, "float8_e4m3fn"):nonzero() end, "float8_e4m3fn")
    -- an options table with metamethods is read raw: they never run
    local opts = setmetatable({}, {__index = function() error("ran __index") end,
                                   __pairs = function() error("ran __pairs") end})
    assert.same({3, 2}, t:nonzero(opts).shape)
  end)
end)

describe("count_nonzero", function()
  local t = dlpack.tensor({{1, 0, 3}, {0, 5, 0}}, "int32")

  it("counts over everything as a Lua integer, over dims as an int64 tensor", function()
    assert.are.equal(3, t:count_nonzero())
    assert.same({1, 1, 1}, values(dlpack.count_nonzero(t, 1)))
    assert.same({2, 1}, values(t:count_nonzero(-1)))
    assert.same({{2}, {1}}, values(t:count_nonzero(2, {keepdim = true})))
    assert.same({{3}}, values(t:count_nonzero(nil, {keepdim = true})))
    assert.are.equal(3, t:count_nonzero({1, 2}):item())
    assert.same({2, 1}, values(t:transpose(1, 2):count_nonzero(1)))
    assert.are.equal("int64", t:count_nonzero(1).dtype)
  end)

  it("refuses dims out of range or twice, and options in the place of dim", function()
    raises(function() t:count_nonzero(3) end, "dimension 3 out of range")
    raises(function() t:count_nonzero({1, -2}) end, "given twice")
    raises(function() t:count_nonzero({keepdim = true}) end, "options go third")
    raises(function() dlpack.tensor(1):count_nonzero(1) end, "out of range")
    raises_plain(function() t:count_nonzero(1, {keepdims = true}) end, "unknown option 'keepdims'")
  end)

  it("counts empty tensors and empty ones with huge dims", function()
    assert.are.equal(0, dlpack.empty({0, 2 ^ 62}):count_nonzero())
    assert.same({0}, dlpack.empty({2 ^ 62, 0}):count_nonzero(1).shape)
    assert.same({1, 0}, dlpack.empty({2 ^ 62, 0}):count_nonzero(1, {keepdim = true}).shape)
  end)
end)

describe("masked_select", function()
  it("selects where the mask (any dtype, broadcast with t) is nonzero, row-major, as 1-d", function()
    local t = dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "int16")
    assert.same({3, 5}, values(t:masked_select(dlpack.tensor({{false, false, true}, {false, true, false}}))))
    assert.same({2, 3, 5, 6}, values(t:masked_select(dlpack.tensor({0, 7, -0.5}))))
    assert.same({4, 6}, values(t:transpose(1, 2):masked_select(dlpack.tensor({{false, true}, {false, false},
                                                                            {false, true}}))))
    -- t broadcast over the mask (torch's rule)
    assert.same({1, 2, 2}, values(dlpack.tensor({1, 2}):masked_select(dlpack.tensor({{1, 0}, {0, 1}, {0, 1}}))))
    assert.are.equal("int16", t:masked_select(dlpack.tensor(true)).dtype)
    assert.same({0}, t:masked_select(dlpack.tensor(false)).shape)
  end)

  it("refuses shapes that do not broadcast and broadcasts past 64 bits", function()
    raises(function() dlpack.zeros({2, 3}):masked_select(dlpack.zeros({3, 2})) end, "do not broadcast")
    local tall, wide = dlpack.zeros({1, 1}):expand({2 ^ 40, 1}), dlpack.zeros({1, 1}):expand({1, 2 ^ 40})
    raises(function() tall:masked_select(wide) end, "64 bits")
    raises(function() dlpack.zeros({2}):masked_select({1, 0}) end, "mask must be a tensor, got table")
    assert.same({0}, dlpack.empty({0, 1}):masked_select(dlpack.zeros({1, 1}):expand({1, 2 ^ 62})).shape)
  end)
end)

describe("out= of nonzero, argwhere, count_nonzero and masked_select", function()
  local t = dlpack.tensor({{1, 0, 3}, {0, 5, 0}}, "float32")

  it("write the result into out of exactly the result's shape, any layout and same_kind dtype", function()
    local out = dlpack.zeros({2, 3}, "int32"):transpose(1, 2)
    assert.are.equal(out, t:nonzero({out = out}))
    assert.same({{1, 1}, {1, 3}, {2, 2}}, values(out))
    local f = dlpack.zeros({3, 2}, "float64")
    assert.are.equal(f, dlpack.argwhere(t, {out = f}))
    assert.same({{1, 1}, {1, 3}, {2, 2}}, values(f))
    local c = dlpack.zeros({3}, "int64")
    assert.are.equal(c, t:count_nonzero(1, {out = c}))
    assert.same({1, 1, 1}, values(c))
    local all = dlpack.zeros({}, "int64") -- over every dim: a 0-d out (keepdim: {1, 1})
    assert.are.equal(all, t:count_nonzero(nil, {out = all}))
    assert.are.equal(3, all:item())
    local kept = dlpack.zeros({1, 1}, "float32")
    t:count_nonzero(nil, {out = kept, keepdim = true})
    assert.are.equal(3, kept:get(1, 1))
    local m = dlpack.zeros({6}, "float64"):slice(1, 1, 6, 2) -- every other element
    assert.are.equal(m, t:masked_select(t:gt(0), {out = m}))
    assert.same({1, 3, 5}, values(m))
    local e = dlpack.zeros({0, 2}, "int64") -- nothing true: an empty out
    assert.are.equal(e, dlpack.zeros({2, 2}):nonzero({out = e}))
  end)

  it("refuse an out of another shape or dtype naming the problem, and leave it unchanged", function()
    local out = dlpack.full({2, 2}, 7, "int64")
    raises_plain(function() t:nonzero({out = out}) end, "nonzero: out has shape {2, 2}, the result {3, 2}")
    assert.same({{7, 7}, {7, 7}}, values(out))
    raises_plain(function() t:nonzero({out = dlpack.zeros({3, 2}, "bool")}) end,
                 "nonzero: cannot write int64 values into an out of bool (same_kind casting)")
    raises_plain(function() t:nonzero({out = dlpack.zeros({3, 2}), as_tuple = true}) end,
                 "nonzero: out= takes the {n, ndim} result; as_tuple gives a table (drop one)")
    raises_plain(function() t:nonzero({out = {}}) end, "nonzero: out must be a tensor, got table")
    raises_plain(function() t:argwhere({out = dlpack.zeros({3, 2}):as_readonly()}) end, "read-only")
    raises_plain(function() t:count_nonzero(nil, {out = dlpack.zeros({1})}) end,
                 "count_nonzero: out has shape {1}, the result {}")
    raises_plain(function() t:count_nonzero(2, {out = dlpack.zeros({2}, "uint8")}) end,
                 "cannot write int64 values into an out of uint8 (same_kind casting)")
    raises_plain(function() t:masked_select(t:gt(0), {out = dlpack.zeros({4})}) end,
                 "masked_select: out has shape {4}, the result {3}")
    raises_plain(function() t:masked_select(t:gt(0), {out = dlpack.zeros({3}, "int32")}) end,
                 "cannot write float32 values into an out of int32 (same_kind casting)")
    raises_plain(function() t:masked_select(t:gt(0), {out = dlpack.zeros({1}):expand(3)}) end,
                 "masked_select: out repeats elements (an expanded view) and cannot be written")
    raises_plain(function() t:masked_select(t:gt(0), {outt = 1}) end, "unknown option 'outt'")
    raises_plain(function() t:masked_select(t:gt(0), {}, 1) end, "unexpected argument")
  end)

  it("read the operands as they were when out aliases them", function()
    local big = dlpack.tensor({{0, 1, 1}, {1, 1, 1}, {0, 0, 0}}, "int64")
    local want = values(big:narrow(1, 1, 2):narrow(2, 1, 2):nonzero())
    local view = big:narrow(1, 1, 2):narrow(2, 1, 2)
    -- out overlaps the tensor it reads (rows 1..3 of big, 2 columns): the result goes through a temporary
    view:nonzero({out = big:narrow(2, 1, 2)})
    assert.same(want, values(big:narrow(2, 1, 2)))
    local y = dlpack.tensor({1, 2, 3, 4})
    y:masked_select(y:gt(1), {out = y:narrow(1, 1, 3)}) -- out is the tensor it selects from
    assert.same({2, 3, 4, 4}, values(y))
    local mask = dlpack.tensor({1, 0, 1}, "int64")
    dlpack.ones({3}, "int64"):masked_select(mask, {out = mask:narrow(1, 1, 2)}) -- out is the mask
    assert.same({1, 1, 1}, values(mask))
    local c = dlpack.tensor({{1, 0}, {2, 0}}, "int64")
    c:count_nonzero(2, {out = c:select(2, 2)}) -- out is a column of the tensor counted
    assert.same({{1, 1}, {2, 1}}, values(c))
  end)

  it("read option tables through metamethods once (count_nonzero, masked_select) or raw (nonzero)", function()
    local reads = 0
    local out = dlpack.zeros({3})
    local lying = setmetatable({}, {__index = function(_, k)
      if k ~= "out" then return nil end
      reads = reads + 1
      return reads == 1 and out or dlpack.zeros({99})
    end})
    assert.are.equal(out, t:masked_select(t:gt(0), lying))
    assert.are.equal(1, reads)
    local raising = setmetatable({}, {__index = function() error("ran __index") end})
    raises(function() t:count_nonzero(1, raising) end, "ran __index")
    local raw = setmetatable({}, {__index = function() error("ran __index") end})
    assert.same({3, 2}, t:nonzero(raw).shape) -- nonzero's options are read raw
  end)
end)

describe("index_select, gather and take", function()
  local t = dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "float64")

  it("index_select picks slices along a dim, 1-based, negatives from the end", function()
    assert.same({{3, 1, 3}, {6, 4, 6}}, values(t:index_select(2, i64({3, 1, -1}))))
    assert.same({{4, 5, 6}}, values(dlpack.index_select(t, 1, i64({-1}))))
    assert.same({{2}, {5}}, values(t:index_select(-1, i64(2)))) -- a 0-d index keeps the dim
    assert.same({2, 0}, t:index_select(2, i64({})).shape)
    raises(function() t:index_select(1, i64({{1}})) end, "0%-d or 1%-d")
  end)

  it("gather is torch's: r[i][j] = t[index[i][j]][j] along dim 1", function()
    assert.same({{1, 5, 3}}, values(t:gather(1, i64({{1, 2, 1}}))))
    assert.same({{3, 3}, {4, 6}}, values(dlpack.gather(t, 2, i64({{3, -1}, {1, 3}}))))
    assert.same({{2}, {2}}, values(t:transpose(1, 2):gather(1, i64({{2}, {2}}))))
    assert.same({{3}, {5}}, values(t:gather(2, i64({{3, 1}, {2, 2}}):narrow(2, 1, 1))))
    raises(function() t:gather(1, i64({{1, 1, 1, 1}})) end, "does not fit")
    raises(function() t:gather(1, i64({1, 1})) end, "does not fit")
  end)

  it("take is NumPy's: flat row-major indices of any shape, which the result has", function()
    assert.same({{6, 1}, {2, 3}}, values(dlpack.take(t, i64({{-1, 1}, {2, 3}}))))
    assert.same({1, 4, 2}, values(t:transpose(1, 2):take(i64({1, 2, 3}))))
    assert.are.equal(5, dlpack.take(t, i64(5)):item())
    assert.are.equal(7, dlpack.take(dlpack.tensor(7), i64({1})):totable()[1])
  end)

  it("take with a dim is np.take's axis: t's shape with dim replaced by index's", function()
    local x = dlpack.arange(24):view(2, 3, 4)
    local r = dlpack.take(x, i64({{3, 1}, {-1, 2}}), 2)
    assert.same({2, 2, 2, 4}, r.shape)
    assert.are.equal(x:get(2, 2, 3), r:get(2, 2, 2, 3)) -- index {2, 2} is 2
    assert.are.equal(x:get(1, 3, 4), r:get(1, 1, 1, 4))
    assert.same({{1, 5, 9}, {13, 17, 21}}, values(dlpack.take(x, i64(2), -1))) -- a 0-d index drops the dim
    assert.same(values(x:index_select(3, i64({4, 1}))), values(x:take(i64({4, 1}), 3)))
    assert.same({{4, 1}, {5, 2}, {6, 3}}, values(t:transpose(1, 2):take(i64({-1, 1}), 2)))
    assert.same({2, 0, 4}, dlpack.take(x, i64({}), 2).shape)
    -- nil in the place of dim: the flat take, options fourth
    local out = dlpack.zeros({2}, "int64")
    assert.are.equal(out, dlpack.take(x, i64({24, 1}), nil, {out = out}))
    assert.same({23, 0}, values(out))
  end)

  it("take with a dim checks the dim, the index and out as the other functions do", function()
    local x = dlpack.arange(6):view(2, 3)
    raises_plain(function() dlpack.take(x, i64({4}), 2) end, "take: index 4 out of range for dimension 2 (size 3)")
    raises_plain(function() dlpack.take(x, i64({0}), 1) end, "take: index 0 out of range for dimension 1 (size 2; "
                 .. "indices start at 1)")
    raises_plain(function() dlpack.take(x, i64({1}), 3) end, "dimension 3 out of range (tensor has 2)")
    raises_plain(function() dlpack.take(dlpack.tensor(5), i64({1}), 1) end, "dimension 1 out of range (tensor has 0)")
    raises_plain(function() dlpack.take(x, i64({1}), 1.5) end, "number has no integer representation")
    raises_plain(function() dlpack.take(x, i64({1}), "2") end, "an options table expected, got string")
    raises_plain(function() dlpack.take(x, i64({1}), 1, {}, 1) end, "unexpected argument")
    raises(function() dlpack.take(x, i64({1, 2}), 2, {out = dlpack.zeros({2, 3}, "int64")}) end,
           "out has shape {2, 3}, the result {2, 2}")
    local kept = dlpack.full({2, 2}, 9, "int64")
    raises(function() dlpack.take(x, i64({1, 9}), 2, {out = kept}) end, "out of range")
    assert.same({{9, 9}, {9, 9}}, values(kept))
    -- an empty result still checks its indices (as index_select; NumPy's take does not look)
    raises(function() dlpack.take(dlpack.empty({0, 3}), i64({4}), 2) end, "index 4 out of range")
    assert.same({0, 1}, dlpack.take(dlpack.empty({0, 3}), i64({3}), 2).shape)
    assert.same({0, 2 ^ 62, 1, 2}, dlpack.take(dlpack.empty({0, 2 ^ 62, 3}), i64({{1, 2}}), 3).shape)
    -- int64 edges of the index along a dim
    local min = dlpack.tensor({-2 ^ 62}, "int64") * 2
    raises_plain(function() dlpack.take(x, min, 1) end, "-9223372036854775808 out of range for dimension 1")
    local umax = dlpack.tensor({0}, "uint64") - 1
    raises_plain(function() dlpack.take(x, umax, 2) end, "18446744073709551615 out of range for dimension 2")
  end)

  it("take with a dim: lying option tables, out aliasing the tensor or the index, 64-dim results", function()
    local x = dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "int64")
    local raising = setmetatable({}, {__index = function() error("ran __index") end})
    raises(function() dlpack.take(x, i64({3, 2, 1}), 2, raising) end, "ran __index")
    assert.same({{1, 2, 3}, {4, 5, 6}}, values(x))
    -- a different out at every read: the one read is the one written and returned
    local outs = {}
    local lying = setmetatable({}, {__index = function(_, k)
      if k ~= "out" then return nil end
      outs[#outs + 1] = dlpack.zeros({2, 3}, "int64")
      return outs[#outs]
    end})
    local r = dlpack.take(x, i64({3, 2, 1}), 2, lying)
    assert.are.equal(1, #outs)
    assert.are.equal(outs[1], r)
    assert.same({{3, 2, 1}, {6, 5, 4}}, values(r))
    assert.are.equal(x, dlpack.take(x, i64({3, 2, 1}), 2, {out = x})) -- out is the tensor it reads
    assert.same({{3, 2, 1}, {6, 5, 4}}, values(x))
    local idx = i64({{2, 1}, {1, 1}})
    dlpack.take(i64({7, 8}), idx, 1, {out = idx}) -- the index is its own out
    assert.same({{8, 7}, {7, 7}}, values(idx))
    local shape, ishape = {}, {}
    for i = 1, 63 do shape[i], ishape[i] = 1, 1 end
    ishape[63] = 2
    local wide = dlpack.take(dlpack.arange(3):view({1, 3}), dlpack.tensor({3, 1}, "int64"):view(ishape), 2)
    assert.are.equal(64, wide.ndim)
    assert.same({2, 0}, values(wide:view({2})))
    shape[64] = 1
    raises_plain(function() dlpack.take(dlpack.zeros(shape), dlpack.zeros({1, 1}, "int64") + 1, 64) end,
                 "take: the result would have 65 dims (at most 64)")
  end)

  it("take index tensors of every integer dtype, any layout", function()
    for _, dtype in ipairs(support.INTS) do
      local index = dlpack.tensor({{1, 3}, {2, 1}}, dtype):transpose(1, 2)
      assert.same({{1, 2}, {3, 1}}, values(dlpack.take(dlpack.tensor({1, 2, 3}), index)), dtype)
    end
  end)

  it("refuse float and bool index dtypes naming them, and indices that are not tensors", function()
    raises_plain(function() t:gather(1, dlpack.tensor({{1}}, "float64")) end,
                 "index must have an integer dtype, got float64")
    raises_plain(function() t:index_select(1, dlpack.tensor({true})) end, "integer dtype, got bool")
    raises_plain(function() dlpack.take(t, dlpack.tensor({1}, "float16")) end, "got float16")
    raises_plain(function() dlpack.take(t, {1, 2}) end, "index must be a tensor, got table")
    local liar = setmetatable({}, {__index = function() error("ran __index") end, __len = function() return 1 end})
    raises_plain(function() t:gather(1, liar) end, "index must be a tensor, got table")
  end)

  it("refuse indices out of range naming the index and the size, 0 saying where they start", function()
    raises_plain(function() t:gather(2, i64({{0}, {1}})) end,
                 "gather: index 0 out of range for dimension 2 (size 3; indices start at 1)")
    raises_plain(function() t:index_select(1, i64({1, 3})) end, "index 3 out of range for dimension 1 (size 2)")
    raises_plain(function() t:index_select(1, i64({-3})) end, "index -3 out of range")
    raises_plain(function() dlpack.take(t, i64({7})) end, "take: index 7 out of range (6 elements)")
    raises_plain(function() dlpack.take(t, dlpack.tensor({255}, "uint8")) end, "index 255 out of range")
    -- int64 and uint64 edges: no wrap-around to a valid index
    local min = dlpack.tensor({-2 ^ 62}, "int64") * 2
    raises_plain(function() dlpack.take(t, min) end, "-9223372036854775808 out of range")
    local umax = dlpack.tensor({0}, "uint64") - 1
    raises_plain(function() dlpack.take(t, umax) end, "18446744073709551615 out of range")
    raises_plain(function() dlpack.take(t, dlpack.tensor({0}, "uint64")) end, "indices start at 1")
    -- an empty t still checks its indices (NumPy and torch do)
    raises(function() dlpack.empty({0, 3}):index_select(2, i64({4})) end, "out of range")
    raises(function() dlpack.empty({0}):take(i64({1})) end, "out of range %(0 elements")
  end)

  it("gathers long lines the same into contiguous and strided results, whatever the index dtype", function()
    -- contiguous results of 4- and 8-byte elements from contiguous indices take their own loop
    local n = 5000
    local src = dlpack.arange(1, 3 * n + 1, "float64")
    local base = dlpack.arange(0, n, "int64") * 7919 % (3 * n) + 1
    for _, dtype in ipairs({"float32", "int64", "int16"}) do
      local from = src:to(dtype)
      for _, idtype in ipairs({"int64", "int32", "uint32", "uint16"}) do
        local index = (idtype:sub(1, 1) == "u" and base or base - (base % 2) * (3 * n + 1)):to(idtype)
        local got = dlpack.take(from, index)
        local strided = dlpack.zeros({n, 2}, dtype):select(2, 1)
        dlpack.take(from, index, {out = strided})
        assert.is_true(dlpack.equal(got, strided), dtype .. " " .. idtype)
        assert.is_true(dlpack.equal(got, from:gather(1, index)), dtype .. " " .. idtype)
        assert.are.equal(from[base[n]], got[n])
      end
      local bad = base:clone()
      bad[n] = 3 * n + 1
      raises_plain(function() dlpack.take(from, bad) end, "index " .. (3 * n + 1) .. " out of range")
      local kept = dlpack.full({n}, 9, dtype)
      raises(function() dlpack.take(from, bad, {out = kept}) end, "out of range")
      assert.are.equal(9, kept[1])
    end
  end)

  it("write out= (any layout, a same_kind dtype), and never when an index is out of range", function()
    local out = dlpack.zeros({3, 2}):transpose(1, 2)
    assert.are.equal(out, t:index_select(2, i64({3, 2, 1}), {out = out}))
    assert.same({{3, 2, 1}, {6, 5, 4}}, values(out))
    local wide = dlpack.zeros({2}, "float64")
    dlpack.take(dlpack.tensor({1, 2, 3}, "int32"), i64({3, 1}), {out = wide})
    assert.same({3, 1}, values(wide))
    local kept = dlpack.full({2}, 9, "float64")
    raises(function() dlpack.take(t, i64({1, 99}), {out = kept}) end, "out of range")
    assert.same({9, 9}, values(kept))
    raises(function() dlpack.take(t, i64({1, 99}), {out = dlpack.full({2}, 9, "int8")}) end, "same_kind")
    raises(function() dlpack.take(t, i64({1}), {out = dlpack.zeros({2})}) end, "out has shape {2}, the result {1}")
    raises(function() dlpack.take(t, i64({1}), {out = dlpack.zeros({1}):as_readonly()}) end, "read%-only")
    raises(function() dlpack.take(t, i64({1}), {out = {}}) end, "out must be a tensor")
    raises_plain(function() dlpack.take(t, i64({1}), {outt = 1}) end, "unknown option 'outt'")
  end)

  it("give the right values when out aliases the tensor or the index", function()
    local x = dlpack.tensor({10, 20, 30, 40}, "int64")
    dlpack.take(x, dlpack.tensor({4, 3, 2, 1}), {out = x})
    assert.same({40, 30, 20, 10}, values(x))
    local idx = dlpack.tensor({2, 1, 2}, "int64")
    dlpack.take(dlpack.tensor({7, 8}, "int64"), idx, {out = idx}) -- the index is its own out
    assert.same({8, 7, 8}, values(idx))
    local y = dlpack.tensor({1, 2, 3, 4}, "float64")
    y:narrow(1, 2, 3):gather(1, i64({3, 2, 1}), {out = y:narrow(1, 1, 3)})
    assert.same({4, 3, 2, 4}, values(y))
  end)

  it("handle empty inputs, empty with huge dims and 64-dim tensors", function()
    assert.same({2, 0, 2 ^ 62}, dlpack.empty({3, 0, 2 ^ 62}):index_select(1, i64({1, -1})).shape)
    assert.same({2, 0}, dlpack.empty({3, 0}):index_select(1, i64({1, 3})).shape)
    assert.same({0, 2 ^ 62}, dlpack.empty({0, 2 ^ 62}):gather(1, dlpack.empty({0, 2 ^ 62}, "int64")).shape)
    assert.same({0}, dlpack.take(dlpack.empty({0}), i64({})).shape)
    local shape, ishape = {}, {}
    for i = 1, 64 do shape[i], ishape[i] = 1, 1 end
    shape[64], ishape[64] = 3, 2
    local x = dlpack.arange(3):view(shape)
    local index = dlpack.tensor({3, 1}, "int64"):view(ishape)
    assert.same({2, 0}, values(x:gather(64, index):view({2})))
    assert.same({2, 0}, values(x:index_select(-1, i64({3, 1})):view({2})))
  end)
end)

describe("scatter and scatter_", function()
  it("are torch's: t[index[i][j]][j] = src[i][j] along dim 1, out of place or in place", function()
    local t = dlpack.zeros({2, 3}, "int32")
    local r = t:scatter(1, i64({{2, 1, 2}}), dlpack.tensor({{7, 8, 9}}, "int32"))
    assert.same({{0, 8, 0}, {7, 0, 9}}, values(r))
    assert.same({{0, 0, 0}, {0, 0, 0}}, values(t))
    assert.are.equal(t, t:scatter_(2, i64({{-1}, {1}}), 5))
    assert.same({{0, 0, 5}, {5, 0, 0}}, values(t))
    assert.same({{1, 0, 0}, {0, 0, 1}}, values(dlpack.scatter(dlpack.zeros({2, 3}), 2, i64({{1}, {3}}), 1)))
  end)

  it("let the last write win for duplicate indices (row-major order of index)", function()
    local r = dlpack.zeros({3}):scatter(1, i64({2, 2, 2, 1}), dlpack.tensor({1, 2, 3, 4}))
    assert.same({4, 3, 0}, values(r))
    local r2 = dlpack.zeros({1, 2}):scatter(1, i64({{1, 1}, {1, 1}}):transpose(1, 2),
                                            dlpack.tensor({{1, 2}, {3, 4}}):transpose(1, 2))
    assert.same({{2, 4}}, values(r2)) -- index positions (1,1) (1,2) (2,1) (2,2) in turn
  end)

  it("convert src by the same_kind rule and values strictly", function()
    local t = dlpack.zeros({3}, "float32")
    t:scatter_(1, i64({1, 3}), dlpack.tensor({1.5, 2}, "float64"))
    assert.same({1.5, 0, 2}, values(t))
    t:scatter_(1, i64({2}), dlpack.tensor({7}, "int8"))
    assert.same({1.5, 7, 2}, values(t))
    raises(function() dlpack.zeros({3}, "int8"):scatter_(1, i64({1}), dlpack.tensor({1.5})) end, "same_kind")
    raises(function() dlpack.zeros({3}, "uint8"):scatter(1, i64({1}), 300) end, "300")
    raises(function() dlpack.zeros({3}):scatter(1, i64({1})) end, "src must be a tensor or a value")
  end)

  it("check every index before writing any", function()
    local t = dlpack.zeros({3})
    raises_plain(function() t:scatter_(1, i64({1, 2, 4}), 9) end, "scatter_: index 4 out of range for dimension 1")
    assert.same({0, 0, 0}, values(t))
    raises_plain(function() t:scatter_(1, i64({0}), 9) end, "indices start at 1")
    raises(function() t:scatter_(1, dlpack.tensor({1}, "float64"), 9) end, "integer dtype, got float64")
    raises(function() dlpack.zeros({2, 2}):scatter_(1, i64({{1, 1, 1}}), 1) end, "does not fit")
    raises(function() dlpack.zeros({2, 2}):scatter_(1, i64({{1, 1}}), dlpack.zeros({1, 1})) end, "does not fit")
    raises(function() dlpack.zeros({2}):as_readonly():scatter_(1, i64({1}), 1) end, "read%-only")
  end)

  it("read src and index as they were when they alias the tensor written", function()
    local t = dlpack.tensor({1, 2, 3}, "int64")
    t:scatter_(1, dlpack.tensor({2, 3, 1}, "int64"), t) -- a rotation, from the old values
    assert.same({3, 1, 2}, values(t))
    local i = dlpack.tensor({2, 1}, "int64")
    i:scatter_(1, i, i) -- index, src and destination all one tensor
    assert.same({1, 2}, values(i))
  end)

  it("handle empty indices and huge empty dims", function()
    assert.same({1, 2}, values(dlpack.tensor({1, 2}):scatter(1, i64({}), 9)))
    local e = dlpack.empty({0, 2 ^ 62})
    assert.same({0, 2 ^ 62}, e:scatter(2, dlpack.empty({0, 5}, "int64"), 1).shape)
  end)
end)

describe("the indexing functions and aliased destinations", function()
  it("refuse to write a tensor that repeats elements, in place or as out", function()
    local e = dlpack.tensor({1, 2}, "float32"):view(1, 2):expand(3, 2)
    assert.has_error(function() e:scatter_(1, i64({{1, 1}}), 7) end,
      "scatter_: the tensor repeats elements (an expanded view) and cannot be written")
    assert.same({{1, 2}, {1, 2}, {1, 2}}, e:totable())
    local out = dlpack.zeros({1}, "float32"):expand(2)
    assert.has_error(function() dlpack.take(dlpack.tensor({5, 6}), i64({1, 2}), {out = out}) end,
      "take: out repeats elements (an expanded view) and cannot be written")
    -- a size-1 dim of stride 0 repeats nothing
    local one = dlpack.tensor({4, 5}, "float32"):view(1, 2)
    assert.same({{9, 9}}, one:scatter_(1, i64({{1, 1}}), 9):totable())
  end)

  it("index_select of an empty tensor by a 0-d index checks the index", function()
    local t = dlpack.empty({0, 3})
    assert.same({0, 1}, t:index_select(2, dlpack.tensor(2, "int64")).shape)
    assert.has_error(function() t:index_select(2, dlpack.tensor(4, "int64")) end)
  end)
end)

describe("the indexing functions and devices", function()
  it("refuse memory the CPU cannot read naming the device", function()
    -- a CUDA tensor without a driver cannot even be made; the CUDA suite checks the message
    -- "does not run on CUDA devices yet"; here the functions exist as module functions and methods
    for _, name in ipairs({"nonzero", "argwhere", "count_nonzero", "masked_select", "index_select", "gather",
                           "scatter", "take"}) do
      assert.are.equal("function", type(dlpack[name]), name)
      assert.are.equal("function", type(dlpack.zeros({1})[name]), name)
    end
    assert.are.equal("function", type(dlpack.zeros({1}).scatter_))
  end)
end)
