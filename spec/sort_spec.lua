-- Sorting, scans and statistics: sort argsort topk (src/compute/sort.c), cumsum cumprod softmax
-- log_softmax (src/compute/scan.c), median quantile.
local dlpack = require "dlpack"
local support = require "support"

local is_nan = support.is_nan

local function raises(pattern, f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error matching " .. pattern)
  assert.matches(pattern, tostring(err))
end

local function values(t)
  if t.dtype == "bool" then t = t:to("int8") end
  return t:totable()
end

-- sorted values and positions checked against the input: ordered (NaN last), stable for ties
local function check_sorted(t, v, i, descending)
  local a, vs, is = values(t), values(v), values(i)
  assert.are.equal(#a, #vs)
  -- no allocation per element (a message only on failure): stage 11 collects at every allocation
  for k = 1, #vs do
    local x = a[is[k]]
    if not (x == vs[k] or (is_nan(x) and is_nan(vs[k]))) then error("value " .. k) end
    if k > 1 then
      local p, q = vs[k - 1], vs[k]
      local before
      if descending then before = is_nan(p) or (not is_nan(q) and p >= q)
      else before = is_nan(q) or (not is_nan(p) and p <= q) end
      if not before then error("order at " .. k) end
      if (p == q or (is_nan(p) and is_nan(q))) and is[k - 1] >= is[k] then error("stable at " .. k) end
    end
  end
end

describe("sort", function()
  it("returns the sorted values and their 1-based int64 positions, NaN last, -0.0 equal to 0.0", function()
    local negative_zero = -tonumber("0.0") -- a literal -0.0 is the constant 0 in Lua 5.1's constant table
    local t = dlpack.tensor({3, 1, 0 / 0, negative_zero, 2, 0.0, -1, 1}, "float32")
    local v, i = t:sort()
    assert.are.equal("float32", v.dtype)
    assert.are.equal("int64", i.dtype)
    assert.are.same({7, 4, 6, 2, 8, 5, 1, 3}, values(i))
    local vs = values(v)
    for k, want in ipairs({-1, 0, 0, 1, 1, 2, 3}) do assert.are.equal(want, vs[k]) end
    assert.are.equal(-math.huge, 1 / vs[2]) -- -0.0 first: it came first
    assert.is_true(is_nan(vs[8]))
  end)

  it("descending puts NaN first, as torch, and keeps ties in order", function()
    local t = dlpack.tensor({3, 1, 0 / 0, 2, 1}, "float64")
    local v, i = t:sort(true)
    assert.are.same({3, 1, 4, 2, 5}, values(i))
    assert.is_true(is_nan(values(v)[1]))
    local v2, i2 = dlpack.sort(t, 1, {descending = true, stable = true})
    assert.is_true(dlpack.equal(i, i2))
    assert.is_true(is_nan(values(v2)[1]))
    local _, i3 = t:sort({descending = true})
    assert.are.same(values(i), values(i3))
  end)

  it("sorts every real dtype, short and long lines", function()
    for _, dtype in ipairs({"float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64",
                            "uint8", "uint16", "uint32", "uint64", "bool"}) do
      for _, n in ipairs({1, 7, 40, 1000, support.trials(dtype == "float32" and 70000 or 3000)}) do
        local t = (dlpack.rand({n}, "float64") * 200 - 100):to(dtype)
        local v, i = t:sort()
        check_sorted(t, v, i, false)
        local dv, di = t:sort(1, true)
        check_sorted(t, dv, di, true)
        assert.is_true(dlpack.equal(v, t:sort(nil, {indices = false})), dtype .. " " .. n)
      end
    end
  end)

  it("keeps NaN and -0.0 of long lines (gathered, not decoded)", function()
    local n = support.trials(100000)
    local t = dlpack.rand({n}, "float32") - 0.5
    t[5] = 0 / 0
    t[6] = -0.0
    t[7] = 0.0
    local v, i = t:sort()
    check_sorted(t, v, i, false)
    local only = t:sort(nil, {indices = false})
    assert.is_true(is_nan(only[n]))
  end)

  it("sorts long lines of 32-bit values alone as it sorts them with their positions", function()
    -- from 65536 elements, values alone go the three-pass way (src/compute/sort.c, sort_long32)
    local n = 70000
    local wide = dlpack.arange(0, n, "int64") * 2654435761
    local lines = {
      {(dlpack.rand({n}, "float64") * 4e9 - 2e9):to("int32"), 1},
      {(dlpack.rand({n}, "float64") * 4e9):to("uint32"), 1},
      {dlpack.rand({n}, "float32") - 0.5, 1},
      {(wide % 4294967296):to("float32") / 4294967296 - 0.5, 1}, -- make bench's input
      {dlpack.full({n}, 3.5, "float32"), 1},                     -- one key: no pass
      {(wide % 7):to("int32") - 3, 1},                           -- one digit varies
      {(wide % 4194304):to("uint32"), 1},                        -- two digits vary
      {(dlpack.rand({n, 2}, "float32") - 0.5):transpose(1, 2), 2}, -- strided lines
    }
    for k, case in ipairs(lines) do
      local t, dim = case[1], case[2]
      for _, descending in ipairs({false, true}) do
        local v = t:sort(dim, {descending = descending})
        local alone = t:sort(dim, {descending = descending, indices = false})
        if v:tobytes() ~= alone:tobytes() then error("line " .. k .. (descending and " descending" or "")) end
      end
    end
    local t = lines[4][1]
    check_sorted(t, t:sort())
  end)

  -- Values alone of 32-bit dtypes go through src/compute/sort_avx512.c on AVX-512 processors (a
  -- quicksort of keys, zeros and NaNs refilled in input order); sorting with positions never does.
  -- Both must give the same bits, on inputs made to find the network's and the partition's edges.
  describe("values alone of 32-bit dtypes, bit for bit as with their positions", function()
    local seed = 12345
    local function random32() -- a linear congruential generator: the same inputs everywhere
      seed = (seed * 1103515245 + 12345) % 2147483648
      local high = seed
      seed = (seed * 1103515245 + 12345) % 2147483648
      return (high * 65536 + seed % 65536) % 4294967296
    end
    local float_specials = {0x7fc00000, 0xffc00000, 0x7f800001, 0xff800123, 0x7fffffff, 0x00000000, 0x80000000,
                            0x7f800000, 0xff800000, 0x00000001, 0x807fffff, 0x00000010, 0x3f800000, 0xbf800000}
    local int_specials = {0x80000000, 0x7fffffff, 0, 0xffffffff, 1, 0x80000001}
    -- element i (0-based) of n, as the bits of a 32-bit element
    local patterns = {
      random = function() return random32() end,
      equal = function() return 0x40490fdb end,
      largest = function(_, _, _, dtype) -- every key the largest ascending (NaN), the least descending
        return ({float32 = 0x7fc00000, int32 = 0x7fffffff, uint32 = 0xffffffff})[dtype]
      end,
      sorted = function(i) return 0x3f000000 + i end,
      reversed = function(i, n) return 0x3f000000 + n - i end,
      organ_pipe = function(i, n) return 0x3f000000 + math.min(i, n - i) end,
      few_values = function() return 0x3f000000 + random32() % 3 end,
      specials = function(_, _, specials) return specials[random32() % #specials + 1] end,
      mixed = function(_, _, specials)
        return random32() % 4 == 0 and specials[random32() % #specials + 1] or random32()
      end,
    }
    local names = {"random", "equal", "largest", "sorted", "reversed", "organ_pipe", "few_values", "specials",
                   "mixed"}
    local function line(dtype, pattern, n)
      local specials = dtype == "float32" and float_specials or int_specials
      -- packed 200 elements a string: few allocations, which the collector stage runs a cycle after
      local chunks, part = {}, {}
      for i = 0, n - 1 do
        part[#part + 1] = patterns[pattern](i, n, specials, dtype)
        if #part == 200 or i == n - 1 then
          chunks[#chunks + 1] = string.pack(string.rep("<I4", #part), table.unpack(part))
          part = {}
        end
      end
      return dlpack.frombytes(table.concat(chunks), dtype, {n})
    end
    local function same(t, dim, what)
      for _, descending in ipairs({false, true}) do
        local with_positions = t:sort(dim, {descending = descending})
        local alone = t:sort(dim, {descending = descending, indices = false})
        if with_positions:tobytes() ~= alone:tobytes() then
          error(what .. (descending and " descending" or " ascending"))
        end
      end
    end
    -- every length to 70 (the vector and the one-register network), then the edges of the
    -- networks of 2..16 registers, and of the partition's ends
    local lengths = {}
    for n = 1, 70 do lengths[n] = n end
    for _, n in ipairs({71, 96, 127, 128, 129, 160, 191, 192, 193, 224, 253, 254, 255, 256, 257, 511, 1000, 4097,
                        support.trials(100007)}) do
      lengths[#lengths + 1] = n
    end

    for _, dtype in ipairs({"float32", "int32", "uint32"}) do
      it(dtype .. ": equal, largest, sorted, reversed, organ pipe, few values, NaN, zeros, infinities, extremes",
         function()
        for _, n in ipairs(lengths) do
          for _, pattern in ipairs(names) do same(line(dtype, pattern, n), 1, dtype .. " " .. pattern .. " " .. n) end
        end
      end)
    end

    -- the pivot's sample grows at 32768 elements; from 131072 the two sides of the first partition
    -- are sorted on two threads
    it("long lines: the sample's edge and the two-thread sort", function()
      local threads = dlpack.get_num_threads()
      dlpack.set_num_threads(2)
      local ok, err = pcall(function()
        for _, n in ipairs({32767, 32768, 32769, 65536, support.trials(131073), support.trials(300001)}) do
          for _, pattern in ipairs({"random", "few_values", "mixed", "organ_pipe"}) do
            same(line("float32", pattern, n), 1, "float32 " .. pattern .. " " .. n)
          end
          same(line("uint32", "mixed", n), 1, "uint32 mixed " .. n)
        end
      end)
      dlpack.set_num_threads(threads)
      assert(ok, err)
    end)

    it("strided lines and many lines", function()
      local t = line("float32", "mixed", 4000):view(40, 100)
      same(t, 2, "rows")
      same(t, 1, "columns")
      same(t:transpose(1, 2), 2, "transposed")
      same(line("int32", "mixed", 2000):view(1000, 2), 1, "int32 columns")
    end)

    if dlpack.cpu() ~= "avx512" then
      pending("the AVX-512 sort is not exercised here: dlpack.cpu() is " .. dlpack.cpu() ..
              " (the comparisons above ran the portable sort on both sides)")
    end

    -- Past its depth limit the quicksort heap-sorts the rest of a range; no input above reaches
    -- it. The test build in build/gen stops after one partition, so that there every line longer
    -- than the networks' 256 keys is partitioned once and both sides heap-sorted (on two threads
    -- from 512 elements: that build's tasks are of 256), zeros and NaNs then refilled as always.
    local gen = support.BUILD .. "/gen/dlpack/core." .. support.SO
    local f = io.open(gen, "rb")
    if dlpack.cpu() ~= "avx512" then
      pending("the AVX-512 sort's heap sort: dlpack.cpu() is " .. dlpack.cpu())
    elseif not f then
      pending("the AVX-512 sort's heap sort: " .. gen .. " (make test-build) is not built")
    else
      f:close()
      it("its heap sort (past the depth limit) gives the same bits", function()
        local script = [[
          local dlpack = require "dlpack"
          dlpack.set_num_threads(2)
          dlpack.manual_seed(31)
          local specials = dlpack.tensor({0x7fc00000, 0xffc00000, 0x7f800001, 0, 0x80000000, 0x7f800000,
                                          0xff800000, 1, 0x7fffffff, 0xffffffff}, "int64")
          local checked = 0
          for _, n in ipairs({257, 1000, 4097, 40000, 131073}) do
            local bits = dlpack.randint(0, 2 ^ 32, {n}, "int64")
            local special = dlpack.take(specials, dlpack.randint(1, 11, {n}, "int64"))
            local lines = {
              random = bits,
              mixed = dlpack.where(dlpack.lt(dlpack.rand({n}), 0.3), special, bits),
              few_values = dlpack.add(dlpack.mod(bits, 3), 0x3f000000),
              sorted = dlpack.add(dlpack.arange(0, n, "int64"), 0x3f000000),
              reversed = dlpack.sub(0x3f000000 + n, dlpack.arange(0, n, "int64")),
            }
            for name, line in pairs(lines) do
              for _, dtype in ipairs({"float32", "int32", "uint32"}) do
                local t = dlpack.frombytes(line:to("uint32"):tobytes(), dtype)
                for _, descending in ipairs({false, true}) do
                  local alone = t:sort(1, {descending = descending, indices = false})
                  local with_positions = t:sort(1, {descending = descending})
                  if alone:tobytes() ~= with_positions:tobytes() then
                    error(("%s %s %d %s"):format(dtype, name, n, descending and "descending" or "ascending"))
                  end
                  checked = checked + 1
                end
              end
            end
          end
          print("ok " .. checked)
        ]]
        local out = support.run_lua(script, {LUA_PATH = package.path,
                                             LUA_CPATH = support.BUILD .. "/gen/?." .. support.SO .. ";;"})
        assert.are.equal("ok 150\n", out)
      end)
    end
  end)

  it("sorts along any dimension of strided layouts", function()
    local m = dlpack.tensor({{3, 1, 2}, {9, 8, 7}, {5, 6, 4}}, "int32")
    local v, i = m:sort(1)
    assert.are.same({{3, 1, 2}, {5, 6, 4}, {9, 8, 7}}, values(v))
    assert.are.same({{1, 1, 1}, {3, 3, 3}, {2, 2, 2}}, values(i))
    v, i = m:transpose(1, 2):sort(2)
    assert.are.same({{3, 5, 9}, {1, 6, 8}, {2, 4, 7}}, values(v))
    assert.are.same({{1, 3, 2}, {1, 3, 2}, {1, 3, 2}}, values(i))
    v = m:narrow(2, 1, 3):flip(2):sort(-1)
    assert.are.same({{1, 2, 3}, {7, 8, 9}, {4, 5, 6}}, values(v))
    local e = dlpack.tensor({5}, "int64"):expand({4})
    assert.are.same({1, 2, 3, 4}, values(select(2, e:sort())))
  end)

  it("argsort gives the positions only", function()
    local t = dlpack.tensor({{3, 2, 1}, {1, 3, 2}})
    assert.are.same({{3, 2, 1}, {1, 3, 2}}, values(t:argsort()))
    assert.are.same({{2, 1, 1}, {1, 2, 2}}, values(dlpack.argsort(t, 1)))
    assert.are.same({{1, 2, 3}, {2, 3, 1}}, values(t:argsort(2, {descending = true})))
  end)

  it("takes empty tensors, 0-d tensors and empty tensors with huge other sizes", function()
    local v, i = dlpack.empty({0}, "float32"):sort()
    assert.are.same({0}, v.shape)
    assert.are.same({0}, i.shape)
    v, i = dlpack.empty({2 ^ 62, 0}, "float64"):sort(1)
    assert.are.same({2 ^ 62, 0}, v.shape)
    assert.are.same({2 ^ 62, 0}, i.shape)
    v, i = dlpack.empty({0, 2 ^ 62}, "float64"):sort(2)
    assert.are.same({0, 2 ^ 62}, v.shape)
    assert.are.same({0, 2 ^ 62}, i.shape)
    v, i = dlpack.tensor(5):sort()
    assert.are.equal(5, v:item())
    assert.are.equal(1, i:item())
    v, i = dlpack.topk(dlpack.empty({0}), 0)
    assert.are.same({0}, v.shape)
    assert.are.same({0}, i.shape)
  end)

  it("refuses complex tensors, bad dims, options and arguments", function()
    raises("complex numbers have no order", dlpack.sort, dlpack.zeros({3}, "complex64"))
    raises("dimension 3 out of range", dlpack.sort, dlpack.zeros({3, 2}), 3)
    raises("dimension 0 out of range", dlpack.argsort, dlpack.zeros({3, 2}), 0)
    raises("unknown option 'decending'", dlpack.sort, dlpack.zeros({3}), 1, {decending = true})
    raises("option names are strings", dlpack.sort, dlpack.zeros({3}), 1, {true})
    raises("descending must be true, false or nil", dlpack.sort, dlpack.zeros({3}), 1, {descending = 1})
    raises("unexpected argument", dlpack.sort, dlpack.zeros({3}), 1, {}, 4)
    raises("an options table expected", dlpack.sort, dlpack.zeros({3}), 1, "x")
    raises("unknown option 'indices'", dlpack.argsort, dlpack.zeros({3}), 1, {indices = false})
  end)
end)

describe("topk", function()
  it("gives the k largest (or smallest) in order with their positions, NaN largest", function()
    local t = dlpack.tensor({5, 1, 0 / 0, 4, 2, 4})
    local v, i = dlpack.topk(t, 3)
    assert.are.same({3, 1, 4}, values(i))
    assert.is_true(is_nan(values(v)[1]))
    v, i = t:topk(2, 1, {largest = false})
    assert.are.same({1, 2}, values(v))
    assert.are.same({2, 5}, values(i))
    v, i = t:topk(2, {largest = false, sorted = true})
    assert.are.same({1, 2}, values(v))
    assert.are.same({2, 5}, values(i))
  end)

  it("works along a dimension", function()
    local m = dlpack.tensor({{1, 9, 3}, {7, 2, 8}}, "int16")
    local v, i = m:topk(1, 1)
    assert.are.same({{7, 9, 8}}, values(v))
    assert.are.same({{2, 1, 2}}, values(i))
    v, i = m:topk(2)
    assert.are.same({{9, 3}, {8, 7}}, values(v))
    assert.are.same({{2, 3}, {3, 1}}, values(i))
  end)

  it("refuses k out of range", function()
    local t = dlpack.zeros({4})
    raises("k = 5 out of range", dlpack.topk, t, 5)
    raises("k = %-1 out of range", dlpack.topk, t, -1)
    raises("k = 1 out of range", dlpack.topk, dlpack.empty({0}), 1)
    raises("number expected", dlpack.topk, t)
    raises("unknown option 'smallest'", dlpack.topk, t, 1, 1, {smallest = true})
  end)
end)

describe("sorting functions against hostile scripts", function()
  it("survive option tables whose metamethods release the tensor", function()
    local function releasing(t) return setmetatable({}, {__index = function() t:release() end}) end
    local calls = {
      function(t) return t:sort(1, releasing(t)) end,
      function(t) return t:argsort(1, releasing(t)) end,
      function(t) return t:topk(2, 1, releasing(t)) end,
    }
    for k, call in ipairs(calls) do
      local t = dlpack.full({64}, 3, "float64")
      local ok, err = pcall(call, t)
      if not ok then assert.is_truthy(tostring(err):find("released", 1, true), k .. ": " .. tostring(err)) end
    end
  end)

  it("refuse released tensors", function()
    local t = dlpack.zeros({3})
    t:release()
    raises("released", dlpack.sort, t)
    raises("released", dlpack.topk, t, 1)
  end)
end)

describe("cumsum and cumprod", function()
  it("scan along a dimension in NumPy's accumulator dtypes", function()
    local m = dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "int8")
    local c = m:cumsum(2)
    assert.are.equal("int64", c.dtype)
    assert.are.same({{1, 3, 6}, {4, 9, 15}}, values(c))
    assert.are.same({{1, 2, 3}, {5, 7, 9}}, values(dlpack.cumsum(m, 1)))
    assert.are.same({{1, 2, 6}, {4, 20, 120}}, values(m:cumprod(-1)))
    assert.are.equal("uint64", dlpack.tensor({1, 2}, "uint8"):cumsum(1).dtype)
    assert.are.equal("int64", dlpack.tensor({true, true, false}, "bool"):cumsum(1).dtype)
    assert.are.same({1, 2, 2}, values(dlpack.tensor({true, true, false}, "bool"):cumsum(1)))
    assert.are.equal("float16", dlpack.tensor({1, 2}, "float16"):cumsum(1).dtype)
  end)

  it("without dim scan the elements in row-major order into one line, as NumPy's axis=None", function()
    local m = dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "float32")
    assert.are.same({1, 3, 6, 10, 15, 21}, values(m:cumsum()))
    assert.are.same({1, 5, 7, 12, 15, 21}, values(m:transpose(1, 2):cumsum()))
    assert.are.same({1, 5, 7, 12, 15, 21}, values(m:transpose(1, 2):cumsum(nil, {})))
    assert.are.same({7}, values(dlpack.tensor(7):cumsum()))
    assert.are.same({0}, dlpack.empty({0, 2 ^ 62}):cumsum().shape)
  end)

  it("take dtype= and out= (which may be the input)", function()
    local t = dlpack.tensor({100, 100, 100}, "int8")
    assert.are.same({100, -56, 44}, values(t:cumsum(1, {dtype = "int8"})))
    assert.are.same({100, 200, 300}, values(t:cumsum(1, {dtype = "float32"})))
    local f = dlpack.tensor({1, 2, 3, 4}, "float64")
    local r = f:cumsum(1, {out = f})
    assert.are.equal(f, r)
    assert.are.same({1, 3, 6, 10}, values(f))
    local o = dlpack.zeros({4}, "float32")
    f:cumprod(1, {out = o})
    assert.are.same({1, 3, 18, 180}, values(o))
    raises("out has shape {3}", dlpack.cumsum, f, 1, {out = dlpack.zeros({3})})
    raises("cannot write the float64 result into out of dtype int32", dlpack.cumsum, f, 1,
           {out = dlpack.zeros({4}, "int32")})
    raises("unknown option 'keepdim'", dlpack.cumsum, f, 1, {keepdim = true})
  end)

  it("round each float16 step as NumPy, and scan complex numbers", function()
    local h = dlpack.full({3000}, 1, "float16"):cumsum(1)
    assert.are.equal(2048, h[3000]) -- 2048 + 1 rounds back to 2048 in float16
    local z = dlpack.tensor({1, 2}):to("complex64")
    assert.are.equal("complex64", z:cumsum(1).dtype)
  end)

  it("keep strided layouts and scan empty lines", function()
    local m = dlpack.arange(1, 7, "int32"):view({2, 3}):transpose(1, 2)
    assert.are.same({{1, 5}, {2, 7}, {3, 9}}, values(m:cumsum(2)))
    assert.are.same({2, 0}, dlpack.empty({2, 0}):cumsum(2).shape)
    raises("dimension 3 out of range", dlpack.cumsum, m, 3)
  end)
end)

describe("softmax and log_softmax", function()
  it("give float lines that sum to 1, the maximum subtracted (no overflow)", function()
    local t = dlpack.tensor({{1, 2, 3}, {1000, 1001, 1002}}, "float32")
    local s = t:softmax(2)
    assert.are.equal("float32", s.dtype)
    for _, row in ipairs(values(s)) do
      assert.is_true(math.abs(row[1] - 0.09003057) < 1e-6)
      assert.is_true(math.abs(row[3] - 0.66524096) < 1e-6)
    end
    local l = dlpack.log_softmax(t, 2)
    assert.is_true(math.abs(values(l)[2][3] - -0.40760596) < 1e-6)
    assert.is_true(dlpack.allclose(l:exp(), s, 1e-5, 1e-6))
    local d = dlpack.tensor({{1, 2}, {3, 4}}, "float64"):softmax(1)
    assert.is_true(math.abs(values(d)[1][1] - 1 / (1 + math.exp(2))) < 1e-15)
  end)

  it("give float32 for integers, keep float16, and take dtype=", function()
    assert.are.equal("float32", dlpack.tensor({1, 2}, "int32"):softmax(1).dtype)
    assert.are.equal("float16", dlpack.tensor({1, 2}, "float16"):softmax(1).dtype)
    assert.are.equal("float64", dlpack.tensor({1, 2}, "int32"):log_softmax(1, {dtype = "float64"}).dtype)
    assert.are.equal("bfloat16", dlpack.tensor({1, 2}, "int32"):softmax(1, {dtype = "bfloat16"}).dtype)
    raises("the result is a real float", dlpack.softmax, dlpack.tensor({1, 2}), 1, {dtype = "int32"})
    raises("the result is a real float", dlpack.softmax, dlpack.zeros({2}, "complex64"), 1)
    raises("dim expected", dlpack.softmax, dlpack.zeros({2}))
  end)

  it("propagate NaN through the line, and give NaN for lines of -inf", function()
    local s = dlpack.tensor({{1, 0 / 0, 2}, {-math.huge, -math.huge, -math.huge}}, "float32"):softmax(2)
    for _, v in ipairs(values(s)[1]) do assert.is_true(is_nan(v)) end
    for _, v in ipairs(values(s)[2]) do assert.is_true(is_nan(v)) end
    local z = dlpack.tensor({-math.huge, 0}, "float32"):softmax(1)
    assert.are.same({0, 1}, values(z))
  end)

  it("find the maximum and a NaN of long float32 lines wherever they are (each lane, the tail)", function()
    for _, n in ipairs({8, 13, 1000}) do
      local places = {n - 1, n}
      for k = 1, math.min(n, 16) do places[#places + 1] = k end
      for _, k in ipairs(places) do
        local t = dlpack.rand({2, n}, "float32")
        t[1][k] = 90 -- exp(90 - m) overflows unless m is 90
        t[2][k] = 0 / 0
        local s = values(t:softmax(2))
        assert.is_true(math.abs(s[1][k] - 1) < 1e-6, n .. " " .. k)
        local numbers = 0 -- counted, then asserted once: an assert a value allocates (slow in stage 11)
        for _, v in ipairs(s[2]) do if not is_nan(v) then numbers = numbers + 1 end end
        assert.are.equal(0, numbers, n .. " " .. k)
      end
    end
  end)

  it("work along strided dimensions, on long and empty lines", function()
    local t = dlpack.rand({300, 7}, "float32")
    local a, b = t:softmax(1), t:transpose(1, 2):contiguous():softmax(2):transpose(1, 2)
    assert.is_true(dlpack.allclose(a, b, 1e-6, 0))
    assert.is_true(math.abs(a:sum(1)[3] - 1) < 1e-5)
    assert.are.same({0, 3}, dlpack.empty({0, 3}):softmax(2).shape)
    assert.are.same({3, 0}, dlpack.empty({3, 0}):log_softmax(2).shape)
  end)
end)

describe("median and quantile", function()
  local m = dlpack.tensor({{3, 1, 4, 1}, {5, 9, 2, 6}, {5, 3, 5, 8}}, "float32")

  it("median is NumPy's: the mean of the two middle elements, over all or along a dimension", function()
    assert.are.equal(4.5, m:median())
    assert.are.same({5, 3, 4, 6}, values(m:median(1)))
    local k = m:median(2, {keepdim = true})
    assert.are.same({{2}, {5.5}, {5}}, values(k))
    assert.are.equal("float32", k.dtype)
    assert.are.equal("float64", dlpack.median(m:to("int32"), 1).dtype)
    assert.are.equal(4.5, dlpack.median(m:to("int32")))
    assert.are.same({1, 1}, m:median(nil, {keepdim = true}).shape)
  end)

  it("median propagates NaN and gives NaN for an empty line", function()
    assert.is_true(is_nan(dlpack.tensor({1, 0 / 0, 3}):median()))
    assert.is_true(is_nan(dlpack.empty({0}):median()))
    local r = dlpack.tensor({{1, 0 / 0}, {1, 2}}):median(2)
    assert.is_true(is_nan(values(r)[1]))
    assert.are.equal(1.5, values(r)[2])
  end)

  it("quantile interpolates linearly as NumPy, for numbers, lists and tensors of q", function()
    assert.are.equal(3, dlpack.quantile(m, 0.3))
    local q = dlpack.quantile(m, {0.1, 0.5, 0.9}, 2)
    assert.are.same({3, 3}, q.shape)
    assert.are.equal("float64", q.dtype)
    assert.is_true(dlpack.allclose(q, dlpack.tensor({{1, 2.9, 3.6}, {2, 5.5, 5}, {3.7, 8.1, 7.1}}), 1e-12, 1e-12))
    assert.are.same({{5, 6, 4.5, 7}}, values(dlpack.quantile(m, 0.75, 1, {keepdim = true})))
    local qt = dlpack.quantile(m, dlpack.tensor({0, 1}, "float32"), 1)
    assert.are.same({{3, 1, 2, 1}, {5, 9, 5, 8}}, values(qt))
    assert.are.equal("float32", qt.dtype)
    assert.are.equal(3.0703125, dlpack.quantile(m:to("float16"), 0.37)) -- float16 arithmetic, as NumPy
    assert.is_true(is_nan(dlpack.quantile(dlpack.tensor({1, 0 / 0}), 0.5)))
  end)

  it("quantile refuses q outside [0, 1], other methods and empty lines", function()
    raises("quantiles must be in the range", dlpack.quantile, m, 1.5)
    raises("quantiles must be in the range", dlpack.quantile, m, {0.5, 0 / 0})
    raises("only \"linear\"", dlpack.quantile, m, 0.5, 1, {method = "nearest"})
    raises("not defined", dlpack.quantile, dlpack.empty({0}), 0.5)
    raises("q must be a number", dlpack.quantile, m, "x")
    raises("q must be a list of numbers", dlpack.quantile, m, {"x"})
    raises("complex numbers have no order", dlpack.median, dlpack.zeros({2}, "complex64"))
    raises("unknown option 'keepdims'", dlpack.median, m, 1, {keepdims = true})
  end)
end)

describe("unique", function()
  it("gives the sorted distinct values, 1-based inverse positions in t's shape and counts (NumPy's)", function()
    local u, inv, counts = dlpack.unique(dlpack.tensor({{1, 2}, {2, 0 / 0}}), {return_inverse = true,
                                                                               return_counts = true})
    assert.are.same({1, 2}, {values(u)[1], values(u)[2]})
    assert.is_true(is_nan(values(u)[3]))
    assert.are.same({{1, 2}, {2, 3}}, values(inv))
    assert.are.same({1, 2, 1}, values(counts))
    local c
    u, c = dlpack.tensor({3, 1, 3, 2}, "int16"):unique({return_counts = true})
    assert.are.equal("int16", u.dtype)
    assert.are.same({1, 2, 3}, values(u))
    assert.are.same({1, 1, 2}, values(c))
  end)

  it("collapses NaNs and signed zeros, takes strided, 0-d and empty tensors", function()
    local u = dlpack.tensor({0.0, -0.0, 0 / 0, 0 / 0}):unique()
    assert.are.equal(2, u:numel())
    assert.are.equal(math.huge, 1 / values(u)[1])
    local m = dlpack.tensor({{5, 1}, {5, 1}}, "uint8"):transpose(1, 2)
    local _, inv = m:unique({return_inverse = true})
    assert.are.same({{2, 2}, {1, 1}}, values(inv))
    local e, ei = dlpack.empty({2 ^ 62, 0}):unique({return_inverse = true})
    assert.are.same({0}, e.shape)
    assert.are.same({2 ^ 62, 0}, ei.shape)
    local z, zi = dlpack.tensor(5):unique({return_inverse = true})
    assert.are.same({5}, values(z))
    assert.are.same({}, zi.shape)
  end)

  it("refuses complex tensors and unknown options", function()
    raises("complex numbers have no order", dlpack.unique, dlpack.zeros({2}, "complex64"))
    raises("unknown option 'return_index'", dlpack.unique, dlpack.zeros({2}), {return_index = true})
  end)

  it("with dim gives NumPy's unique slices along it, sorted lexicographically", function()
    local negative_zero = -tonumber("0.0") -- a literal -0.0 is the constant 0 in Lua 5.1's constant table
    local t = dlpack.tensor({{1, 0 / 0}, {1, 0 / 0}, {negative_zero, 2}, {0.0, 2}, {0, 1}})
    local u, inv, counts = t:unique({dim = 1, return_inverse = true, return_counts = true})
    assert.are.same({4, 2}, u.shape)
    assert.are.same({{0, 1}, {0, 2}}, values(u:narrow(1, 1, 2)))
    assert.are.equal(-math.huge, 1 / u:get(2, 1)) -- -0.0 and 0.0 are one value, the first sorted stands
    assert.are.same({3, 4, 2, 2, 1}, values(inv)) -- one per slice (NumPy's 1-d inverse), 1-based
    assert.are.same({1, 2, 1, 1}, values(counts)) -- slices holding NaN stay apart (NumPy compares them as records)
    assert.is_true(is_nan(u:get(3, 2)) and is_nan(u:get(4, 2)))
    local b = dlpack.tensor({{3, 1, 3}, {2, 0, 2}}, "int16")
    local ub, ib = dlpack.unique(b, {dim = -1, return_inverse = true})
    assert.are.equal("int16", ub.dtype)
    assert.are.same({{1, 3}, {0, 2}}, values(ub))
    assert.are.same({2, 1, 2}, values(ib))
    assert.is_true(ub:is_contiguous())
    assert.are.same({{1, 3}, {0, 2}}, values(b:transpose(1, 2):unique({dim = 1}):transpose(1, 2)))
    -- uint64 beyond int64 sorts after the others; bool slices
    local big = dlpack.tensor({{1, 2}, {3, 4}}, "uint64") - 2
    assert.are.same({2, 2}, big:unique({dim = 1}).shape)
    assert.are.equal(0, big:unique({dim = 1}):get(2, 2))
    local bools = dlpack.tensor({{true, true}, {false, true}, {true, true}})
    assert.are.same({{0, 1}, {1, 1}}, values(bools:unique({dim = 1})))
  end)

  it("with dim takes empty, huge empty, 0-d and 64-dim tensors, and refuses bad dims", function()
    assert.are.same({0, 3}, dlpack.zeros({0, 3}):unique({dim = 1}).shape)
    local e, ei, ec = dlpack.zeros({2, 0}):unique({dim = 1, return_counts = true, return_inverse = true})
    assert.are.same({1, 0}, e.shape) -- slices of no element are all equal
    assert.are.same({2}, values(ec))
    assert.are.same({1, 1}, values(ei))
    local h, hc = dlpack.zeros({0, 2 ^ 40}, "int8"):unique({dim = 2, return_counts = true})
    assert.are.same({0, 1}, h.shape)
    assert.are.same({2 ^ 40}, values(hc))
    raises("dim 1 out of range %(tensor has 0%)", dlpack.unique, dlpack.tensor(5), {dim = 1})
    raises("dim 3 out of range %(tensor has 2%)", dlpack.unique, dlpack.zeros({2, 2}), {dim = 3})
    raises("dim 0 out of range", dlpack.unique, dlpack.zeros({2, 2}), {dim = 0})
    raises("dim must be an integer or nil, got a number with a fraction", dlpack.unique, dlpack.zeros({2}), {dim = 1.5})
    raises("dim must be an integer or nil, got string", dlpack.unique, dlpack.zeros({2}), {dim = "1"})
    local shape = {}
    for i = 1, 64 do shape[i] = 1 end
    shape[64] = 3
    local x = dlpack.tensor({2, 1, 2}):view(shape)
    local u64, i64 = x:unique({dim = 64, return_inverse = true})
    assert.are.same({1, 2}, values(u64:view({2})))
    assert.are.same({2, 1, 2}, values(i64))
  end)

  it("with dim reads lying option tables once and survives the tensor released by a finalizer", function()
    local reads = 0
    local lying = setmetatable({}, {__index = function(_, k)
      if k ~= "dim" then return nil end
      reads = reads + 1
      return reads == 1 and 1 or 99
    end})
    local t = dlpack.tensor({{2, 2}, {1, 1}, {2, 2}})
    assert.are.same({{1, 1}, {2, 2}}, values(t:unique(lying)))
    assert.are.equal(1, reads)
    local raising = setmetatable({}, {__index = function(_, k) if k == "dim" then error("dim read") end end})
    raises("dim read", dlpack.unique, t, raising)
    local released = dlpack.tensor({{1}})
    released:release()
    raises("released", dlpack.unique, released, {dim = 1})
  end)
end)

describe("norm", function()
  local t = dlpack.tensor({{1, -2}, {3, 4}})

  it("is NumPy's linalg.norm: vector norms along a dim, matrix norms of 2-d tensors", function()
    assert.is_true(math.abs(t:norm() - math.sqrt(30)) < 1e-15)
    assert.is_true(math.abs(t:norm("fro") - math.sqrt(30)) < 1e-15)
    assert.are.equal(6, t:norm(1))
    assert.are.equal(7, t:norm(1 / 0))
    assert.are.equal(4, t:norm(-1))
    assert.are.equal(3, t:norm(-1 / 0))
    local v = dlpack.norm(t, 2, 1)
    assert.are.equal("float64", v.dtype)
    assert.is_true(math.abs(values(v)[2] - math.sqrt(20)) < 1e-15)
    assert.are.same({2, 2}, values(dlpack.norm(t, 0, 2)))
    assert.are.same({2, 1}, dlpack.norm(t, 3, 2, true).shape)
    assert.are.same({1, 1}, dlpack.norm(t, nil, nil, true).shape)
    local swapped = dlpack.norm(t, 1 / 0, {2, 1}) -- the rows are dim 2: the largest column sum
    assert.are.same({}, swapped.shape)
    assert.are.equal(6, swapped:item())
    assert.are.equal("float32", dlpack.norm(t:to("float32"), 2, 1).dtype)
    assert.are.equal(0, dlpack.empty({0}):norm(1 / 0))
  end)

  it("gives the matrix norms of singular values: 2 (largest), -2 (smallest), 'nuc' (their sum)", function()
    -- {{1, -2}, {3, 4}}: singular values sqrt(15 +- sqrt(125))
    local s1, s2 = math.sqrt(15 + math.sqrt(125)), math.sqrt(15 - math.sqrt(125))
    assert.is_true(math.abs(t:norm(2) - s1) < 1e-14 * s1)
    assert.is_true(math.abs(t:norm(-2) - s2) < 1e-14 * s1)
    assert.is_true(math.abs(t:norm("nuc") - (s1 + s2)) < 1e-14 * s1)
    -- batched over the other dims, dims in either order, keepdim; the dtype of the input's floats
    local b = dlpack.stack({t, t * 2, dlpack.eye(2) * -3}):to("float32")
    local n2 = dlpack.norm(b, 2, {2, 3})
    assert.are.equal("float32", n2.dtype)
    assert.are.same({3}, n2.shape)
    assert.is_true(math.abs(n2:get(2) - 2 * s1) < 1e-5 * s1)
    assert.are.equal(3, n2:get(3))
    assert.are.same({3, 1, 1}, dlpack.norm(b, "nuc", {3, 2}, true).shape)
    assert.are.equal(6, dlpack.norm(b, "nuc", {3, 2}):get(3))
    -- wide, tall and rank-deficient matrices, strided layouts, integers in float64
    local w = dlpack.tensor({{1, 2, 3}, {2, 4, 6}}, "int32")
    assert.is_true(math.abs(w:norm(2) - math.sqrt(70)) < 1e-13)
    assert.is_true(math.abs(w:norm(-2)) < 1e-7)
    assert.is_true(math.abs(w:t():norm("nuc") - math.sqrt(70)) < 1e-13)
    assert.is_true(math.abs(dlpack.norm(w, 2, {2, 1}):item() - math.sqrt(70)) < 1e-13)
    -- NumPy's edges: empty matrices, NaN and infinity; float16 too (NumPy's linalg refuses it)
    assert.are.equal(0, dlpack.zeros({0, 3}):norm(2))
    assert.are.equal(0, dlpack.zeros({3, 0}):norm("nuc"))
    assert.are.same({4}, dlpack.norm(dlpack.zeros({4, 0, 2}), 2, {2, 3}).shape)
    raises("ord %-2 of an empty matrix %(0 x 3%)", dlpack.norm, dlpack.zeros({0, 3}), -2)
    raises("holding NaN are not defined", dlpack.norm, dlpack.tensor({{1, 0 / 0}, {0, 1}}), 2)
    assert.is_true(is_nan(dlpack.tensor({{1, 1 / 0}, {0, 1}}):norm("nuc")))
    assert.are.equal("float16", dlpack.norm(t:to("float16"), 2, {1, 2}).dtype)
    raises("matrix ord 2 of complex tensors is not supported", dlpack.norm, t:to("complex64"), 2)
    -- large and tiny values: scaled before the sums of squares
    assert.is_true(math.abs(dlpack.tensor({{3e300, 0}, {0, 4e300}}):norm(2) / 4e300 - 1) < 1e-15)
    assert.is_true(math.abs(dlpack.tensor({{3e-300, 0}, {0, 4e-300}}):norm("nuc") / 7e-300 - 1) < 1e-15)
  end)

  it("matrix norms of singular values survive a tensor released on the way, and 64-dim batches", function()
    local released = dlpack.tensor({{1, 2}, {3, 4}})
    released:release()
    raises("released", dlpack.norm, released, 2)
    local shape = {}
    for i = 1, 64 do shape[i] = 1 end
    shape[63], shape[64] = 2, 2
    local x = dlpack.eye(2):view(shape) * 5
    assert.are.equal(10, dlpack.norm(x, "nuc", {63, 64}):view({1}):item())
  end)

  it("refuses orders it does not compute, bad dims and non-tensors", function()
    raises("matrix ord number 3 is not supported", dlpack.norm, t, 3)
    raises("is for matrices", dlpack.norm, t, "fro", 1)
    raises("a tensor expected", dlpack.norm, 5)
    raises("dimension 3 out of range", dlpack.norm, t, 2, 3)
    raises("an ord needs a 1%-d or 2%-d tensor", dlpack.norm, dlpack.zeros({2, 2, 2}), 1)
    raises("ord must be", dlpack.norm, t, "max")
    raises("dim must be", dlpack.norm, t, 2, setmetatable({1, 2}, {}))
    raises("keepdim must be", dlpack.norm, t, 2, 1, 1)
  end)
end)

describe("randperm and shuffle", function()
  it("randperm gives 1..n in a seeded order, the same for the same seed", function()
    dlpack.manual_seed(1)
    local p = dlpack.randperm(10)
    assert.are.equal("int64", p.dtype)
    -- Fisher-Yates from the end with the generator's below() (docs/api.md, "Random numbers")
    assert.are.same({4, 7, 2, 6, 1, 10, 3, 9, 5, 8}, values(p))
    dlpack.manual_seed(1)
    assert.are.same(values(p), values(dlpack.randperm(10, "int16")))
    dlpack.manual_seed(9) -- the value spec/random_reference.py's independent model prints
    assert.are.same({4, 9, 10, 12, 11, 5, 6, 8, 7, 2, 3, 1}, values(dlpack.randperm(12)))
    local big = dlpack.randperm(5000)
    assert.are.same(values(dlpack.arange(1, 5001)), values(big:sort()))
    assert.are.same({0}, dlpack.randperm(0).shape)
    raises("does not fit int8", dlpack.randperm, 200, "int8")
    raises("makes integers", dlpack.randperm, 3, "float32")
    raises("must not be negative", dlpack.randperm, -1)
    raises("n must be an integer", dlpack.randperm, 2.5)
  end)

  it("shuffle gives a new tensor of t's slices along dim 1 in a seeded order", function()
    local m = dlpack.arange(1, 13):view(4, 3)
    dlpack.manual_seed(1)
    local s = m:shuffle()
    assert.are.same({{1, 2, 3}, {10, 11, 12}, {4, 5, 6}, {7, 8, 9}}, values(s))
    assert.are.same({{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10, 11, 12}}, values(m))
    dlpack.manual_seed(1)
    local t = dlpack.shuffle(m:transpose(1, 2))
    assert.are.same({3, 4}, t.shape)
    assert.are.same({1, 4, 7, 10}, values(t)[1])
    assert.are.same({0, 5}, dlpack.empty({0, 5}):shuffle().shape)
    assert.are.same({2 ^ 62, 0}, dlpack.empty({2 ^ 62, 0}):shuffle().shape)
    raises("0%-d tensor", dlpack.shuffle, dlpack.tensor(1))
    local r = dlpack.zeros({3})
    r:release()
    raises("released", dlpack.shuffle, r)
  end)
end)
