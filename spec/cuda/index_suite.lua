-- luacheck: std +busted
-- Indexing with tensors on CUDA tensors (part of the CUDA suite: spec/cuda/suite.lua runs it):
-- gather, index_select, take and scatter run as kernels (family 42) and must give the CPU
-- path's bytes; their indices are checked on the device before anything is written; nonzero,
-- argwhere, count_nonzero and masked_select count with running sums on the device.
local dlpack = require "dlpack"
local cuda = dlpack.cuda
local raises = require("support").raises_plain

local function dev(t) return t:to("cuda:0") end

-- fn on CUDA copies of the tensors among args, against fn on the host ones, byte for byte
local function agrees(what, fn, ...)
  local args, on = {...}, {}
  for i, a in ipairs(args) do on[i] = type(a) == "userdata" and dev(a) or a end
  local want = fn(table.unpack(args))
  local got = fn(table.unpack(on))
  assert.are.equal("cuda:0", got.device, what)
  assert.are.equal(want.dtype, got.dtype, what)
  assert.are.same(want.shape, got.shape, what)
  assert.are.equal(want:tobytes(), got:to("cpu"):tobytes(), what)
end

describe("indexing with tensors on CUDA tensors", function()
  local DTYPES = {"bool", "int16", "float32", "float64", "int64", "complex128", "uint8"}

  it("gather, index_select and take give the CPU's bytes for every element size and index dtype", function()
    for _, dtype in ipairs(DTYPES) do
      local t = dlpack.arange(24):view(4, 6):to(dtype)
      for _, idt in ipairs({"int64", "int8", "uint64", "int32", "uint16"}) do
        local signed = idt:sub(1, 1) == "i"
        local i2 = dlpack.tensor({{1, 4, signed and -1 or 2, 3, 2, 1}, {4, 4, 1, 2, 3, signed and -4 or 1}}, idt)
        agrees("gather " .. dtype .. " " .. idt, function(x, i) return x:gather(1, i) end, t, i2)
        agrees("gather (dim 2) " .. dtype, function(x, i) return x:gather(2, i) end, t, i2:narrow(2, 1, 3))
        local i1 = dlpack.tensor({6, 1, signed and -2 or 3, 6}, idt)
        agrees("index_select " .. dtype .. " " .. idt, function(x, i) return x:index_select(2, i) end, t, i1)
        agrees("index_select (0-d index) " .. dtype, function(x, i) return x:index_select(1, i) end, t,
               dlpack.tensor(2, idt))
        agrees("take " .. dtype .. " " .. idt, function(x, i) return dlpack.take(x, i) end, t, i2)
        agrees("take (dim 2) " .. dtype .. " " .. idt, function(x, i) return dlpack.take(x, i, 2) end, t, i2)
        agrees("take (dim 1, 0-d index) " .. dtype, function(x, i) return dlpack.take(x, i, -2) end, t,
               dlpack.tensor(signed and -1 or 3, idt))
      end
      -- strided operands: a transposed tensor, a transposed index, a reversed tensor
      local i = dlpack.tensor({{1, 2}, {3, 4}, {4, 1}}, "int64"):transpose(1, 2)
      agrees("gather transposed " .. dtype, function(x, ii) return x:transpose(1, 2):gather(2, ii) end, t, i)
      agrees("take transposed " .. dtype, function(x, ii) return dlpack.take(x:transpose(1, 2), ii) end, t, i)
      agrees("take (dim) transposed " .. dtype, function(x, ii) return dlpack.take(x:transpose(1, 2), ii, 1) end, t, i)
      agrees("index_select reversed " .. dtype, function(x, ii) return x:slice(2, -1, 1, -1):index_select(1, ii) end,
             t, dlpack.tensor({4, 1}))
    end
  end)

  it("scatter and scatter_ give the CPU's bytes, the last of duplicate indices winning", function()
    for _, dtype in ipairs(DTYPES) do
      local t = dlpack.zeros({3, 4}, dtype)
      local index = dlpack.tensor({{1, 3, 1, 2}, {1, 3, 2, 2}, {1, 1, 3, -1}}, "int64")
      local src = dlpack.arange(1, 13):view(3, 4):to(dtype)
      agrees("scatter " .. dtype, function(x, i, s) return x:scatter(1, i, s) end, t, index, src)
      agrees("scatter (dim 2) " .. dtype, function(x, i, s) return x:scatter(2, i:narrow(2, 1, 2), s) end,
             t, index, src)
      local function transposed(x, i, s)
        return x:scatter(1, i:narrow(1, 1, 3):narrow(2, 1, 3):transpose(1, 2), s:transpose(1, 2))
      end
      agrees("scatter transposed " .. dtype, transposed, t, index, dlpack.arange(1, 13):view(4, 3):to(dtype))
      if dtype ~= "bool" and dtype ~= "complex128" then
        agrees("scatter a value " .. dtype, function(x, i) return x:scatter(1, i, 5) end, t, index)
      end
      local d = dev(t)
      assert.are.equal(d, d:scatter_(1, dev(index), dev(src)))
      assert.are.equal(t:scatter(1, index, src):tobytes(), d:to("cpu"):tobytes(), "scatter_ " .. dtype)
    end
    -- an index in int8 that is also the tensor written: read as it was
    local x = dlpack.tensor({2, 3, 1}, "int64")
    local want = x:clone():scatter_(1, x, x)
    local on = dev(x)
    on:scatter_(1, on, on)
    assert.are.same(want:totable(), on:to("cpu"):totable())
  end)

  it("check every index on the device before anything is written, naming it as the host does", function()
    local t = dev(dlpack.arange(6):view(2, 3))
    raises(function() return t:gather(2, dev(dlpack.tensor({{1, 4}, {1, 1}}))) end,
           "gather: index 4 out of range for dimension 2 (size 3)")
    raises(function() return t:index_select(1, dev(dlpack.tensor({0}, "uint8"))) end,
           "index_select: index 0 out of range for dimension 1 (size 2; indices start at 1)")
    raises(function() return dlpack.take(t, dev(dlpack.tensor({-7}, "int8"))) end,
           "take: index -7 out of range (6 elements)")
    raises(function() return dlpack.take(t, dev(dlpack.tensor({0}, "uint64") - 1)) end,
           "take: index 18446744073709551615 out of range")
    raises(function() return dlpack.take(t, dev(dlpack.tensor({{1, -4}}, "int16")), 2) end,
           "take: index -4 out of range for dimension 2 (size 3)")
    raises(function() return dlpack.take(dlpack.empty({0, 3}, "float32", "cuda:0"), dev(dlpack.tensor({4})), 2) end,
           "take: index 4 out of range for dimension 2")
    raises(function() return dlpack.empty({0, 3}, "float32", "cuda:0"):index_select(2, dev(dlpack.tensor({9}))) end,
           "out of range")
    local kept = dev(dlpack.full({2, 3}, 7))
    raises(function() return kept:scatter_(1, dev(dlpack.tensor({{1, 1, 3}})), 1) end, "index 3 out of range")
    assert.are.same({{7, 7, 7}, {7, 7, 7}}, kept:to("cpu"):totable())
    local out = dev(dlpack.full({1, 2}, 9))
    raises(function() return t:gather(2, dev(dlpack.tensor({{1, 5}})), {out = out}) end, "index 5 out of range")
    assert.are.same({{9, 9}}, out:to("cpu"):totable())
    raises(function() return t:gather(2, dev(dlpack.tensor({{1}}, "float64"))) end, "integer dtype, got float64")
  end)

  it("write out= on the device, also when it aliases an operand", function()
    local x = dev(dlpack.tensor({10, 20, 30, 40}, "int64"))
    dlpack.take(x, dev(dlpack.tensor({4, 3, 2, 1})), {out = x})
    assert.are.same({40, 30, 20, 10}, x:to("cpu"):totable())
    local wide = dlpack.zeros({2}, "float64", "cuda:0")
    assert.are.equal(wide, dlpack.take(dev(dlpack.tensor({1, 2, 3}, "int32")), dev(dlpack.tensor({3, 1})),
                                       {out = wide}))
    assert.are.same({3, 1}, wide:to("cpu"):totable())
  end)

  it("nonzero, argwhere, count_nonzero and masked_select give the CPU's results", function()
    local cases = {
      dlpack.tensor({{1, 0, 3}, {0, 5, 0}}, "float32"), dlpack.tensor({-0.0, 0 / 0, 0, 1}),
      dlpack.frombytes("\0\7\0\1", "bool"), dlpack.tensor({{0, 2}, {0, 0}}):to("complex64"),
      dlpack.tensor(5, "int16"), dlpack.tensor(0, "uint8"), dlpack.zeros({0, 3}), dlpack.zeros({2, 3}, "float16"),
      dlpack.arange(3000):view(30, 100):transpose(1, 2) % 7, -- more than one block of the running sums
      (dlpack.arange(2 ^ 21) % 3):to("int8"), -- three levels of blocks
    }
    for k, t in ipairs(cases) do
      local what = "case " .. k .. " (" .. t.dtype .. ")"
      agrees("nonzero " .. what, function(x) return x:nonzero() end, t)
      agrees("argwhere " .. what, function(x) return dlpack.argwhere(x) end, t)
      local want, got = t:count_nonzero(), dev(t):count_nonzero()
      assert.are.equal(want, got, "count_nonzero " .. what)
      if t.ndim > 0 then
        local tuple, host = dev(t):nonzero({as_tuple = true}), t:nonzero({as_tuple = true})
        for d = 1, t.ndim do assert.are.same(host[d]:totable(), tuple[d]:to("cpu"):totable(), what) end
        agrees("count_nonzero(-1) " .. what, function(x) return x:count_nonzero(-1) end, t)
        agrees("count_nonzero(1, keepdim) " .. what, function(x) return x:count_nonzero(1, {keepdim = true}) end, t)
        local mask = t:ne(0)
        agrees("masked_select " .. what, function(x, m) return x:masked_select(m) end, t, mask)
        agrees("masked_select (broadcast) " .. what,
               function(x, m) return x:masked_select(m) end, t, mask:narrow(1, 1, math.min(1, t:size(1))))
      end
      if t.ndim == 2 then
        agrees("count_nonzero({1, 2}) " .. what, function(x) return x:count_nonzero({1, 2}) end, t)
      end
    end
  end)

  it("write out= on the device for nonzero, argwhere, count_nonzero and masked_select", function()
    local t = dlpack.tensor({{1, 0, 3}, {0, 5, 0}}, "float32")
    local d = dev(t)
    local out = dev(dlpack.zeros({2, 3}, "int32")):transpose(1, 2)
    assert.are.equal(out, d:nonzero({out = out}))
    assert.are.same({{1, 1}, {1, 3}, {2, 2}}, out:to("cpu"):totable())
    local f = dev(dlpack.zeros({3, 2}))
    assert.are.equal(f, dlpack.argwhere(d, {out = f}))
    assert.are.same(t:argwhere():totable(), f:to("cpu"):totable())
    local c = dev(dlpack.zeros({3}, "int64"))
    assert.are.equal(c, d:count_nonzero(1, {out = c}))
    assert.are.same({1, 1, 1}, c:to("cpu"):totable())
    local all = dev(dlpack.zeros({}, "int64"))
    assert.are.equal(all, d:count_nonzero(nil, {out = all}))
    assert.are.equal(3, all:to("cpu"):item())
    local m = dev(dlpack.zeros({6})):slice(1, 1, 6, 2)
    assert.are.equal(m, d:masked_select(d:gt(0), {out = m}))
    assert.are.same({1, 3, 5}, m:to("cpu"):totable())
    -- out aliasing the tensor read, and a wrong out left as it was
    local y = dev(dlpack.tensor({1, 2, 3, 4}))
    y:masked_select(y:gt(1), {out = y:narrow(1, 1, 3)})
    assert.are.same({2, 3, 4, 4}, y:to("cpu"):totable())
    local kept = dev(dlpack.full({2, 2}, 7, "int64"))
    raises(function() return d:nonzero({out = kept}) end, "nonzero: out has shape {2, 2}, the result {3, 2}")
    raises(function() return d:masked_select(d:gt(0), {out = dev(dlpack.zeros({4}))}) end,
           "masked_select: out has shape {4}, the result {3}")
    assert.are.same({{7, 7}, {7, 7}}, kept:to("cpu"):totable())
    raises(function() return d:nonzero({out = dlpack.zeros({3, 2})}) end, "operands on different devices")
    raises(function() return d:count_nonzero(1, {out = dlpack.zeros({3})}) end, "operands on different devices")
  end)

  it("refuse operands on two devices naming both", function()
    local t = dev(dlpack.arange(6))
    raises(function() return t:gather(1, dlpack.tensor({1})) end, "operands on different devices: cuda:0 and cpu")
    raises(function() return dlpack.take(dlpack.arange(3), dev(dlpack.tensor({1}))) end,
           "operands on different devices")
    raises(function() return t:masked_select(dlpack.tensor({true})) end, "operands on different devices")
    if cuda.device_count() > 1 then
      raises(function() return t:index_select(1, dlpack.tensor({1}):to("cuda:1")) end, "cuda:0 and cuda:1")
    end
  end)
end)
