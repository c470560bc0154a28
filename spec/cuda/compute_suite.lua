-- luacheck: std +busted
-- The computing functions on CUDA tensors (part of the CUDA suite: spec/cuda/suite.lua runs it
-- before its final checks). Each result is compared with the module's own CPU path on the same
-- values: bit for bit on the fake driver, which runs the C build of the very kernels
-- (src/compute/cuda/kernels.cu); on a GPU the math functions may differ from the CPU's libm in
-- the last bits, so those compare with allclose there.
local dlpack = require "dlpack"
local probe = require "probe"
local support = require "support"
local fake = probe.fake
local cuda = dlpack.cuda
local raises = support.raises_plain

-- fake_it: counts the fake driver's calls or makes it fail, on device 1, where the suite computed
-- nothing before (the kernel families load once per device)
local function fake_it(name, fn)
  if not fake then
    pending(name .. ": needs the fake driver's counters or fault injection")
  elseif cuda.device_count() < 2 then
    pending(name .. ": needs two CUDA devices")
  else
    it(name, fn)
  end
end

local function gc()
  collectgarbage()
  collectgarbage()
end

-- values of every compute dtype with the cases that matter: signs, zero, the ends of the range
local VALUES = {
  bool = {true, false, true, true, false, false},
  int8 = {-128, -3, 0, 5, 7, 127}, int16 = {-300, -3, 0, 5, 7, 32767}, int32 = {-70000, -3, 0, 5, 7, 2147483647},
  int64 = {-2 ^ 40, -3, 0, 5, 7, 2 ^ 50}, uint8 = {0, 1, 3, 5, 200, 255}, uint16 = {0, 1, 3, 5, 7, 65535},
  uint32 = {0, 1, 3, 5, 7, 4294967295}, uint64 = {0, 1, 3, 5, 7, 2 ^ 60},
  float32 = {-2.5, -0.0, 0.0, 1.5, 3.25, 1e30}, float64 = {-2.5, -0.0, 0.0, 1.5, 3.25, 1e300},
}
local MATH = {sqrt = true, exp = true, log = true, log1p = true, expm1 = true, sin = true, cos = true, tan = true,
              tanh = true, sigmoid = true, pow = true, div = true}

local function host(t)
  return t:to("cpu")
end

-- the result of fn on CUDA copies of the operands, against fn on the host ones
local function agrees(what, fn, ...)
  local args, dev = {...}, {}
  for i, a in ipairs(args) do dev[i] = type(a) == "userdata" and a:to("cuda:0") or a end
  local want = fn(table.unpack(args))
  local got = fn(table.unpack(dev))
  assert.are.equal("cuda:0", got.device, what)
  assert.are.equal(want.dtype, got.dtype, what)
  assert.are.same(want.shape, got.shape, what)
  got = host(got)
  if probe.kind == "gpu" and MATH[what:match("^(%w+)")] and (want.dtype == "float32" or want.dtype == "float64") then
    assert.is_true(dlpack.allclose(got, want, {rtol = 1e-6, atol = 0, equal_nan = true}), what)
  else
    assert.are.equal(want:tobytes(), got:tobytes(), what)
  end
end

describe("computing on CUDA tensors", function()
  it("add runs on the device and gives the CPU's result", function()
    local a = dlpack.tensor({1, 2, 3}, "float32")
    local launches = fake and fake.live().launches
    local r = a:to("cuda:0") + a:to("cuda:0")
    assert.are.equal("cuda:0", r.device)
    assert.are.same({2, 4, 6}, host(r):totable())
    if fake then assert.is_true(fake.live().launches > launches, "a kernel ran") end
  end)

  it("every binary operation of every compute dtype agrees with the CPU", function()
    local binary = {"add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
                    "logical_and", "logical_or", "logical_xor", "band", "bor", "bxor", "shl", "shr"}
    for dtype, values in pairs(VALUES) do
      local x = dlpack.tensor(values, dtype)
      local y = dlpack.tensor({values[6], values[1], values[3], values[2], values[5], values[4]}, dtype)
      for _, op in ipairs(binary) do
        local ok, result = pcall(dlpack[op], x, y) -- what the CPU refuses (bool sub, float band) is not asked
        if ok then
          local dx, dy = x:to("cuda:0"), y:to("cuda:0")
          if op == "pow" and result.dtype:match("^int") then -- negative exponents are refused on the host
            raises(function() return dlpack[op](dx, dy) end, "not checked on the device yet")
          elseif result.dtype ~= dtype and result.dtype ~= "bool" then -- the CPU converts (bool << bool)
            raises(function() return dlpack[op](dx, dy) end, "do not convert inside a computation yet")
          else
            agrees(op .. " " .. dtype, dlpack[op], x, y)
          end
        end
      end
    end
  end)

  it("every unary operation agrees with the CPU", function()
    local unary = {"neg", "abs", "sign", "sqrt", "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh",
                   "sigmoid", "floor", "ceil", "round", "trunc", "isnan", "isinf", "isfinite", "logical_not", "bnot"}
    for dtype, values in pairs(VALUES) do
      local x = dlpack.tensor(values, dtype)
      for _, op in ipairs(unary) do
        local ok, result = pcall(dlpack[op], x)
        if ok and result.dtype ~= dtype and result.dtype ~= "bool" then -- sqrt of an integer: converts
          raises(function() return dlpack[op](x:to("cuda:0")) end, "do not convert inside a computation yet")
        elseif ok then
          agrees(op .. " " .. dtype, dlpack[op], x)
        end
      end
    end
  end)

  it("floor division and remainder by a number, weak scalars on both sides", function()
    for _, dtype in ipairs({"int8", "int32", "int64", "uint8", "uint64", "float32", "float64"}) do
      local x = dlpack.tensor(VALUES[dtype], dtype)
      agrees("idiv " .. dtype, function(t) return dlpack.idiv(t, 3) end, x)
      agrees("mod " .. dtype, function(t) return dlpack.mod(t, -3 > 0 and 3 or 3) end, x)
      agrees("scalar first " .. dtype, function(t) return dlpack.sub(100, t) end, x)
    end
    agrees("float scalar", function(t) return t * 0.5 end, dlpack.tensor({1, 2, 3}, "float32"))
  end)

  it("broadcasts and walks any strides: transposed, sliced, flipped and expanded views", function()
    local m = dlpack.arange(24, "int32"):view({2, 3, 4})
    local row = dlpack.tensor({1, 2, 3, 4}, "int32")
    agrees("broadcast", dlpack.add, m, row)
    agrees("transposed", function(a) return a:transpose(1, 3) * 2 end, m)
    agrees("flipped", function(a) return a:flip(2) - a end, m)
    agrees("column", function(a, b) return a + b end, m, dlpack.tensor({10, 20, 30}, "int32"):view({3, 1}))
    agrees("where", function(c, a, b) return dlpack.where(c, a, b) end, dlpack.tensor({true, false, true, false}),
           row, dlpack.tensor({-1, -2, -3, -4}, "int32"))
    agrees("clamp", function(a) return dlpack.clamp(a, 3, 20) end, m)
    agrees("64 dimensions", function(a) return a + 1 end, dlpack.ones({2, 1, 2}, "float64")
      :view({2, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
             1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}))
    local empty = dlpack.zeros({0, 3}, "float32"):to("cuda:0")
    assert.are.same({0, 3}, (empty + 1).shape)
  end)

  it("out=, in place and the operators write device memory", function()
    local a = dlpack.tensor({1, 2, 3, 4}, "float64"):to("cuda:0")
    local out = dlpack.zeros({4}, "float64", "cuda:0")
    assert.are.equal(out, dlpack.mul(a, 10, {out = out}))
    assert.are.same({10, 20, 30, 40}, host(out):totable())
    a:add_(1)
    assert.are.same({2, 3, 4, 5}, host(a):totable())
    a:add_(a:flip(1)) -- overlaps itself other than element for element: read into a temporary first
    assert.are.same({7, 7, 7, 7}, host(a):totable())
    assert.are.same({-7, -7, -7, -7}, host(-a):totable())
  end)

  it("operands on two devices raise naming both; what does not run on the device yet says so", function()
    local d = dlpack.tensor({1, 2}, "float32"):to("cuda:0")
    local h = dlpack.tensor({1, 2}, "float32")
    raises(function() return d + h end, "add: operands on different devices: cuda:0 and cpu")
    raises(function() return dlpack.add(h, d) end, "operands on different devices: cuda:0 and cpu")
    raises(function() return dlpack.add(d, d, {out = h}) end, "operands on different devices: cuda:0 and cpu")
    raises(function() return d + dlpack.tensor({1, 2}, "int32"):to("cuda:0") end, "convert with :to first")
    raises(function() return dlpack.tensor({1, 2}, "float16"):to("cuda:0") + 1 end, "convert with :to first")
    raises(function()
      local i = dlpack.tensor({1, 2}, "int32"):to("cuda:0")
      return dlpack.idiv(i, i)
    end, "integer division by a CUDA tensor is not checked on the device yet")
    raises(function() return dlpack.zeros({4}, "float8_e4m3fn", "cuda:0") + 1 end, "does not compute")
  end)

  it("operands released right after the call are held until the kernel ran", function()
    local r
    do
      local a = dlpack.tensor({1, 2, 3}, "int64"):to("cuda:0")
      local b = dlpack.tensor({10, 20, 30}, "int64"):to("cuda:0")
      r = a * b
      a:release()
      b:release()
    end
    gc()
    assert.are.same({10, 40, 90}, host(r):totable())
  end)

  it("runs on the operands' stream after their pending work", function()
    local s = cuda.Stream()
    local a = dlpack.tensor({1, 2, 3}, "int32"):to({device = "cuda:0", stream = s}) -- queued on s
    local r = a + 1
    assert.are.same({2, 3, 4}, host(r):totable())
    s:close()
  end)

  fake_it("loads a family's PTX once per device, on first use", function()
    local before = fake.live().modules
    local x = dlpack.tensor({1, 2}, "uint16"):to("cuda:1")
    for _ = 1, 3 do x = x + x end
    assert.are.equal(before + 1, fake.live().modules, "one family (uint16) loaded")
  end)

  fake_it("a module that fails to load or a launch that fails raises, and nothing leaks", function()
    local x = dlpack.tensor({1, 2}, "int16"):to("cuda:1")
    local live = fake.live()
    fake.fail_next("cuModuleLoadData", 200)
    raises(function() return x + x end, "add: CUDA error 200")
    fake.fail_next("cuLaunchKernel", 1)
    raises(function() return x + x end, "add: CUDA error 1")
    gc()
    fake.sync_all()
    gc()
    assert.are.equal(live.device, fake.live().device, "the outputs of the failed calls are freed")
    assert.are.same({2, 4}, host(x + x):totable())
  end)
end)

-- The reductions on CUDA tensors (src/compute/reduce.c plans once; the kernels of
-- src/compute/cuda/kernels.cu, families 20-23, run the plan), against the CPU path on the same
-- values and views. Integers, bool, min/max and the indices must agree exactly. Float sums,
-- products, means, variances: the device folds each output in slices joined pairwise, the CPU
-- pairwise in blocks: a different order, so the last bits may differ. Any order of the n - 1
-- additions of n terms errs by at most (n - 1) u sum|x| (u the accumulator's unit roundoff, to
-- first order), and so does each path: they differ by at most 2 n u sum|x| (sum, mean: over n);
-- a product by 2 n u |prod|; a variance by about 2 (n + 3) u mean(x^2) (the mean's own error
-- enters squared), and since |sqrt a - sqrt b| <= sqrt |a - b|, a standard deviation by the root
-- of that. The checks take twice those bounds, plus one rounding of the result's dtype when it
-- is narrower than the accumulator (float16, bfloat16). A missing or doubled element moves a sum
-- by at least 1/8 here, far beyond them.
describe("reductions on CUDA tensors", function()
  local REDUCTIONS = {"sum", "prod", "mean", "var", "std", "min", "max", "argmin", "argmax", "any", "all"}
  local EPS = {float16 = 2 ^ -24, bfloat16 = 2 ^ -24, float32 = 2 ^ -24, float64 = 2 ^ -53, complex64 = 2 ^ -24,
               complex128 = 2 ^ -53}
  local ROUNDING = {float16 = 2 ^ -11, bfloat16 = 2 ^ -8}
  local DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                  "bfloat16", "float32", "float64", "complex64", "complex128"}

  local function numel(shape)
    local n = 1
    for _, s in ipairs(shape) do n = n * s end
    return n
  end

  -- n values of dtype on the host: the ends of the range for the integers (sums wrap), multiples
  -- of 1/8 up to 6.25 for the floats (exact in every float dtype: float sums of them are exact),
  -- values near 1 for float products (1 + k/64, or k/1024 for long ones: no overflow nor
  -- underflow in any order)
  local function values(dtype, n, prod)
    local real = dtype == "complex64" and "float32" or dtype == "complex128" and "float64" or dtype
    local list = {}
    for i = 1, (dtype:match("^complex") and 2 * n or n) do
      if VALUES[real] and not real:match("^float") then
        list[i] = VALUES[real][(i * 5) % 6 + 1]
      elseif prod then
        list[i] = 1 + ((i * 7) % 17 - 8) / (n > 10000 and 1024 or 64)
      else
        list[i] = ((i * 37) % 101 - 50) / 8
      end
    end
    local t = dlpack.tensor(list, real)
    if dtype:match("^complex") then t = dlpack.frombytes(t:tobytes(), dtype, {n}) end
    return t
  end

  -- the values of a result as a flat list of numbers (complex: re, im, ...); a Lua value as a list of one
  local function flat(v)
    if type(v) ~= "userdata" then return {v} end
    v = v:to("cpu")
    local bytes = v.dtype:match("^complex") and v:to("complex128"):tobytes() or v:to("float64"):tobytes()
    local out = {}
    for i = 1, #bytes // 8 do out[i] = string.unpack("d", bytes, (i - 1) * 8 + 1) end
    return out
  end

  local function with(opts, extra)
    local t = {}
    for k, v in pairs(opts or {}) do t[k] = v end
    for k, v in pairs(extra) do t[k] = v end
    return t
  end

  -- The bound on |cuda - cpu| for each element of op's result (see above), as a flat list.
  local function bounds(op, hx, dim, opts, result_dtype)
    local eps = EPS[result_dtype]
    local mag = dlpack.abs(hx):to("float64")
    local keep = {keepdim = opts and opts.keepdim or false}
    local outputs = numel(dlpack.sum(mag, dim, {keepdim = true}).shape)
    local n = math.max(1, numel(hx.shape) // math.max(1, outputs)) -- elements per output
    local scale
    if op == "sum" or op == "mean" then scale = flat(dlpack[op](mag, dim, keep))
    elseif op == "prod" then scale = flat(dlpack.prod(mag, dim, keep))
    elseif op == "var" or op == "std" then scale = flat(dlpack.mean(mag * mag, dim, keep))
    else return nil end
    local out = {}
    for i, s in ipairs(scale) do
      local b = 4 * (n + 3) * eps * s
      if op == "std" then b = math.sqrt(b) end
      out[i] = b
    end
    return out
  end

  -- op on the host view hx and the device view dx, with dim and opts: the same errors, or results
  -- of the same kind, dtype and shape, on the device, agreeing as the header says
  local function agrees_r(label, op, hx, dx, dim, opts)
    local okh, h1, h2 = pcall(dlpack[op], hx, dim, opts)
    local okd, d1, d2 = pcall(dlpack[op], dx, dim, opts)
    assert.are.equal(okh, okd, label .. ": " .. tostring(okh and d1 or h1))
    if not okh then
      assert.are.equal(h1, d1, label)
      return
    end
    assert.are.equal(type(h1), type(d1), label)
    local result_dtype
    if type(h1) == "userdata" then
      assert.are.equal("cuda:0", d1.device, label)
      assert.are.equal(h1.dtype, d1.dtype, label)
      assert.are.same(h1.shape, d1.shape, label)
      result_dtype = h1.dtype
    else
      assert.are.equal(math.type(h1), math.type(d1), label)
      result_dtype = dlpack[op](hx, dim, with(opts, {keepdim = true})).dtype
    end
    assert.are.equal(h2 == nil, d2 == nil, label)
    if h2 ~= nil then -- min, max: the indices
      assert.are.equal("cuda:0", d2.device, label)
      assert.are.equal(h2:tobytes(), host(d2):tobytes(), label .. " (indices)")
    end
    if not EPS[result_dtype] then -- integers, bool: exactly
      if type(h1) == "userdata" then assert.are.equal(h1:tobytes(), host(d1):tobytes(), label)
      else assert.are.equal(h1, d1, label) end
      return
    end
    local want, got, bound = flat(h1), flat(d1), bounds(op, hx, dim, opts, result_dtype)
    assert.are.equal(#want, #got, label)
    for i = 1, #want do
      local w, g = want[i], got[i]
      local b = bound and bound[(i - 1) // (#want // #bound) + 1] or 0
      b = b + (ROUNDING[result_dtype] or 0) * math.abs(w)
      local ok = (w ~= w and g ~= g) or w == g or math.abs(w - g) <= b
      assert.is_true(ok, string.format("%s: element %d: cpu %.17g, cuda %.17g (bound %.3g)", label, i, w, g, b))
    end
  end

  local DIMS = {{nil}, {1}, {2}, {-1}, {{1, 3}}, {{3, 2}}, {{1, 2, 3}}, {{}}}

  it("every reduction of every dtype over every choice of dims agrees with the CPU", function()
    local launches = fake and fake.live().launches
    for _, dtype in ipairs(DTYPES) do
      for _, op in ipairs(REDUCTIONS) do
        local base = values(dtype, 120, op == "prod"):view({4, 6, 5})
        local dev = base:to("cuda:0")
        for _, d in ipairs(DIMS) do
          for _, keepdim in ipairs({false, true}) do
            local opts = keepdim and {keepdim = true} or nil
            agrees_r(string.format("%s %s dim %s keepdim %s", op, dtype, type(d[1]) == "table" and
                     "{" .. table.concat(d[1], ",") .. "}" or tostring(d[1]), keepdim), op, base, dev, d[1], opts)
          end
        end
      end
    end
    if fake then assert.is_true(fake.live().launches > launches, "kernels ran") end
  end)

  it("long rows, many outputs and whole tensors: slices joined over several merges", function()
    for _, dtype in ipairs({"int64", "uint8", "float32", "float64", "float16", "bool", "complex64"}) do
      for _, op in ipairs(REDUCTIONS) do
        local base = values(dtype, 6000, op == "prod"):view({3, 2000})
        local dev = base:to("cuda:0")
        for _, dim in ipairs({2, 1}) do agrees_r(op .. " " .. dtype .. " dim " .. dim, op, base, dev, dim) end
        local whole = values(dtype, 70000, op == "prod")
        agrees_r(op .. " " .. dtype .. " whole", op, whole, whole:to("cuda:0"))
      end
    end
  end)

  it("transposed, flipped, sliced and expanded views, and 64 dimensions", function()
    local base = values("int32", 120):view({4, 6, 5})
    local fbase = values("float64", 120):view({4, 6, 5})
    local views = {
      transposed = function(t) return t:transpose(1, 3) end,
      permuted = function(t) return t:permute(2, 3, 1) end,
      flipped = function(t) return t:slice(2, -1, 1, -1) end,
      sliced = function(t) return t:slice(3, 1, 5, 2):narrow(1, 2, 3) end,
      expanded = function(t) return t:narrow(2, 2, 1):expand({4, 6, 5}) end,
      leading = function(t) return t:select(2, 3):expand({7, 4, 5}) end,
    }
    for name, view in pairs(views) do
      for _, b in ipairs({base, fbase}) do
        local hx, dx = view(b), view(b:to("cuda:0"))
        for _, op in ipairs(REDUCTIONS) do
          for _, d in ipairs(DIMS) do
            agrees_r(name .. " " .. b.dtype .. " " .. op, op, hx, dx, d[1])
            agrees_r(name .. " " .. b.dtype .. " " .. op .. " keepdim", op, hx, dx, d[1], {keepdim = true})
          end
        end
      end
    end
    local shape = {}
    for i = 1, 64 do shape[i] = (i == 1 or i == 40 or i == 64) and 2 or 1 end
    local many = values("float32", 8):view(shape)
    local dmany = many:to("cuda:0")
    for _, op in ipairs(REDUCTIONS) do
      for _, dim in ipairs({1, 40, -1, {1, 64}, {2, 3, 40}}) do agrees_r("64 dims " .. op, op, many, dmany, dim) end
      agrees_r("64 dims " .. op .. " all", op, many, dmany)
    end
  end)

  it("stride-0 dims are not walked: sums times their size, products to their power, indices at the first", function()
    local big = dlpack.tensor({3}, "int64"):to("cuda:0"):expand({2 ^ 62})
    assert.are.equal(dlpack.tensor({3}, "int64"):expand({2 ^ 62}):sum(), big:sum())
    assert.are.equal(dlpack.tensor({3}, "int64"):expand({2 ^ 62}):prod(), big:prod())
    assert.are.equal(1, big:argmax())
    for _, dtype in ipairs({"int16", "uint64", "float32", "float64", "complex128", "bool"}) do
      local b = values(dtype, 6, true):view({2, 1, 3})
      local hx, dx = b:expand({2, 5, 3}), b:to("cuda:0"):expand({2, 5, 3})
      for _, op in ipairs(REDUCTIONS) do
        for _, dim in ipairs({2, {1, 2}, {2, 3}}) do agrees_r("expanded " .. dtype .. " " .. op, op, hx, dx, dim) end
        agrees_r("expanded " .. dtype .. " " .. op .. " all", op, hx, dx)
        agrees_r("expanded " .. dtype .. " var correction", "var", hx, dx, 2, {correction = 1})
      end
    end
  end)

  it("NaN: min and max propagate it, the indices point at the first NaN; ties give the first", function()
    for _, dtype in ipairs({"float16", "bfloat16", "float32", "float64"}) do
      local list = {}
      for i = 1, 3000 do list[i] = (i * 13) % 7 end -- the maximum 6 many times, in every slice
      local ties = dlpack.tensor(list, dtype)
      list[2100], list[700] = 0 / 0, 0 / 0
      list[2999] = math.huge
      local nan = dlpack.tensor(list, dtype)
      for _, x in ipairs({ties, nan, ties:view({3, 1000}), nan:view({3, 1000}), nan:view({1000, 3}),
                          nan:view({3, 1000}):transpose(1, 2)}) do
        local dx = x:to("cuda:0")
        for _, op in ipairs({"min", "max", "argmin", "argmax", "sum", "mean", "any", "all", "var"}) do
          agrees_r("nan " .. dtype .. " " .. op, op, x, dx)
          agrees_r("nan " .. dtype .. " " .. op .. " dim 1", op, x, dx, 1)
          agrees_r("nan " .. dtype .. " " .. op .. " dim -1", op, x, dx, -1)
        end
      end
      local dnan = nan:to("cuda:0")
      assert.is_true(dnan:max() ~= dnan:max(), "max is NaN")
      assert.are.equal(700, dnan:argmax())
      assert.are.equal(700, dnan:argmin())
      assert.are.equal(dlpack.tensor(list, dtype):argmin(), dnan:argmin())
      local ones = dlpack.ones({5000}, dtype):to("cuda:0")
      assert.are.equal(1, ones:argmax())
      assert.are.equal(1, ones:argmin())
    end
  end)

  it("empty inputs and outputs: the identities, NaN means, and the same errors", function()
    for _, dtype in ipairs({"bool", "int32", "uint64", "float32", "float16", "complex128"}) do
      local base = dlpack.zeros({0, 3}, dtype)
      local dev = base:to("cuda:0")
      for _, op in ipairs(REDUCTIONS) do
        for _, d in ipairs({{nil}, {1}, {2}, {{1, 2}}, {{}}}) do
          agrees_r("empty " .. dtype .. " " .. op, op, base, dev, d[1])
          agrees_r("empty " .. dtype .. " " .. op .. " keepdim", op, base, dev, d[1], {keepdim = true})
        end
      end
    end
    local scalar = dlpack.tensor(-2.5, "float32") -- 0-d: no dim to name, {} reduces nothing
    for _, op in ipairs(REDUCTIONS) do
      for _, d in ipairs({{nil}, {{}}, {1}}) do agrees_r("0-d " .. op, op, scalar, scalar:to("cuda:0"), d[1]) end
    end
    local e = dlpack.zeros({0, 3}, "float32"):to("cuda:0")
    assert.are.same({0, 0, 0}, host(e:sum(1)):totable())
    assert.are.same({1, 1, 1}, host(e:prod(1)):totable())
    assert.are.equal(0, e:sum())
    assert.is_true(e:mean() ~= e:mean(), "the mean of nothing is NaN")
    assert.is_false(e:any())
    assert.is_true(e:all())
    assert.are.same({0}, e:sum(2).shape)
    raises(function() return e:max() end, "dlpack.max: the reduction of an empty tensor or dimension has no identity")
    raises(function() return e:argmin(1) end, "dlpack.argmin: the reduction of an empty tensor or dimension has no")
  end)

  it("dtype= and correction as on the CPU; conversions through another dtype raise for now", function()
    local i8 = values("int8", 120):view({4, 30})
    local f32 = values("float32", 120):view({4, 30})
    local f64 = values("float64", 120):view({4, 30})
    local u64 = values("uint64", 120):view({4, 30})
    local b = values("bool", 120):view({4, 30})
    local cases = {
      {"sum", i8, {dtype = "int64"}}, {"sum", i8, {dtype = "float64"}}, {"sum", i8, {dtype = "float32"}},
      {"sum", i8, {dtype = "uint64"}}, {"prod", i8, {dtype = "float64"}}, {"sum", f32, {dtype = "float64"}},
      {"sum", f64, {dtype = "float32"}}, {"sum", f32, {dtype = "int64"}}, {"sum", f64, {dtype = "uint64"}},
      {"sum", f32, {dtype = "complex128"}}, {"mean", i8, {dtype = "float32"}}, {"mean", u64, {dtype = "float32"}},
      {"mean", f32, {dtype = "complex64"}}, {"var", f64, {dtype = "float32"}}, {"std", i8, {dtype = "float16"}},
      {"var", i8, {correction = 1}}, {"std", f32, {correction = 1.5}}, {"var", f64, {correction = 30}},
      {"std", f64, {correction = 31}}, {"var", f32, {correction = 200}}, {"sum", b, {dtype = "bool"}},
      {"sum", b, {dtype = "int8"}}, {"mean", b, {dtype = "float64"}}, {"sum", u64, {dtype = "int64"}},
      {"mean", i8, {dtype = "float16"}}, {"prod", b, {dtype = "uint16"}}, {"sum", i8, {dtype = "int16"}},
      {"mean", u64}, {"var", u64}, {"sum", u64, {dtype = "float32"}},
    }
    for _, c in ipairs(cases) do
      local label = c[1] .. " " .. c[2].dtype .. " " ..
                    (c[3] and (c[3].dtype or "") .. " " .. tostring(c[3].correction) or "")
      local dx = c[2]:to("cuda:0")
      for _, dim in ipairs({1, 2}) do agrees_r(label, c[1], c[2], dx, dim, c[3]) end
      agrees_r(label .. " all", c[1], c[2], dx, nil, c[3])
      agrees_r(label .. " keepdim", c[1], c[2], dx, nil, with(c[3], {keepdim = true}))
    end
    -- the CPU converts these through the result's dtype first (float64 -> int32 -> int64)
    local d = f64:to("cuda:0")
    raises(function() return d:sum(nil, {dtype = "int32"}) end,
           "dlpack.sum: CUDA tensors do not convert inside a computation yet (float64 would be converted to int32)")
    raises(function() return values("int16", 8):to("cuda:0"):mean(1, {dtype = "float16"}) end,
           "convert with :to first")
    raises(function() return dlpack.prod(values("int32", 4):to("cuda:0"), nil, {dtype = "bool"}) end,
           "(int32 would be converted to bool)")
  end)

  it("errors name the same things as on the CPU", function()
    local h = values("float32", 24):view({2, 3, 4})
    local d = h:to("cuda:0")
    local z = values("complex64", 4)
    local calls = {
      {"sum", h, 4}, {"sum", h, {1, 1}}, {"sum", h, "x"}, {"sum", h, {1.5}}, {"sum", h, {keepdim = true}},
      {"sum", h, nil, {keepdims = true}}, {"min", h, nil, {dtype = "float64"}}, {"mean", h, nil, {dtype = "int32"}},
      {"var", h, nil, {dtype = "complex64"}}, {"sum", h, 0}, {"argmax", h, -4}, {"std", h, nil, {correction = "x"}},
      {"max", z}, {"argmin", z}, {"var", z}, {"std", z, 1},
    }
    for _, c in ipairs(calls) do
      local dx = c[2] == z and z:to("cuda:0") or d
      agrees_r("error " .. c[1], c[1], c[2], dx, c[3], c[4])
      local okh = pcall(dlpack[c[1]], c[2], c[3], c[4])
      assert.is_false(okh, "the CPU raises for " .. c[1])
    end
    local f8 = dlpack.zeros({4}, "float8_e4m3fn", "cuda:0")
    raises(function() return f8:sum() end, "dlpack.sum: dtype float8_e4m3fn does not compute")
    raises(function() return d:sum(1, {}, 3) end, "dlpack.sum")
  end)

  it("full reductions give the CPU's Lua values: integers, uint64 bits, booleans, complex 0-d tensors", function()
    local u = dlpack.tensor({2 ^ 63, 5}, "uint64")
    assert.are.equal(u:sum(), u:to("cuda:0"):sum())
    local i = dlpack.tensor({-7, 3, 9}, "int32"):to("cuda:0")
    assert.are.equal(5, i:sum())
    assert.are.equal(math.type(5), math.type(i:sum()))
    assert.are.equal(3, i:argmax())
    assert.are.equal(9, i:max())
    assert.are.equal(true, i:any())
    assert.are.equal(true, dlpack.sum(dlpack.tensor({false, true}):to("cuda:0"), nil, {dtype = "bool"}))
    assert.are.equal(false, dlpack.tensor({false, false}):to("cuda:0"):sum(nil, {dtype = "bool"}))
    local z = values("complex128", 4):to("cuda:0")
    local s = z:sum()
    assert.are.equal("cuda:0", s.device)
    assert.are.same({}, s.shape)
  end)

  it("an input released right after the call is held until the kernels ran", function()
    local r, v, ix
    do
      local a = values("int64", 6000):view({2, 3000}):to("cuda:0")
      local b = values("float32", 6000):view({3000, 2}):to("cuda:0")
      r = a:sum(2)
      v, ix = b:max(1)
      a:release()
      b:release()
    end
    gc()
    local h = values("int64", 6000):view({2, 3000})
    local hv, hi = values("float32", 6000):view({3000, 2}):max(1)
    assert.are.equal(h:sum(2):tobytes(), host(r):tobytes())
    assert.are.equal(hv:tobytes(), host(v):tobytes())
    assert.are.equal(hi:tobytes(), host(ix):tobytes())
  end)

  it("runs after the input's pending work on its stream", function()
    local s = cuda.Stream()
    local h = values("int32", 5000)
    local a = h:to({device = "cuda:0", stream = s}) -- queued on s
    assert.are.equal(h:sum(), a:sum())
    local m = a:view({50, 100}):max(2)
    assert.are.equal(h:view({50, 100}):max(2):tobytes(), host(m):tobytes())
    s:close()
  end)

  fake_it("loads a reduction family's PTX once per device, on first use", function()
    local x = values("float64", 40):to("cuda:1")
    local before = fake.live().modules
    for _ = 1, 3 do x:sum() x:max(1) x:var() end
    assert.are.equal(before + 1, fake.live().modules, "one family (float64 reductions) loaded")
  end)

  fake_it("a launch that fails raises, and nothing leaks (the first launch or a later merge)", function()
    local x = values("float32", 5000):view({5, 1000}):to("cuda:1")
    local function settle() -- nothing queued, nothing unreferenced, no memory held for work done
      gc()
      fake.sync_all()
      cuda.legacy_stream:synchronize()
      gc()
    end
    x:sum(2) -- the family loaded
    settle()
    local live = fake.live()
    fake.fail_next("cuLaunchKernel", 1)
    raises(function() return x:sum(2) end, "dlpack.sum: CUDA error 1")
    fake.fail_next("cuLaunchKernel", 1, 1, 1) -- pass 1 runs, its merge fails
    raises(function() return x:sum(2) end, "dlpack.sum: CUDA error 1")
    fake.fail_next("cuLaunchKernel", 1, 1, 1)
    raises(function() return x:max(2) end, "dlpack.max: CUDA error 1")
    fake.fail_next("cuLaunchKernel", 1, 1, 2) -- var: the means' two launches run, the deviations' first fails
    raises(function() return x:var() end, "dlpack.var: CUDA error 1")
    fake.fail_next("cuLaunchKernel", 1)
    raises(function() return x:argmax() end, "dlpack.argmax: CUDA error 1")
    settle()
    assert.are.equal(live.device, fake.live().device, "the results and temporaries of the failed calls are freed")
    local h = values("float32", 5000):view({5, 1000})
    assert.are.equal(h:argmax(), x:argmax())
    assert.are.equal(h:max(2):tobytes(), host(x:max(2)):tobytes())
  end)
end)

-- equal and allclose on CUDA tensors: the elementwise test on the device into a bool temporary,
-- then the `all` reduction there (allclose reads each operand in its own dtype, as the CPU
-- converts it to float64 or complex128)
describe("equal and allclose on CUDA tensors", function()
  local function dev(t) return t:to("cuda:0") end

  it("equal gives the CPU's answer, computed on the device", function()
    local a = dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "int32")
    local b = dlpack.tensor({{1, 2, 3}, {4, 5, 7}}, "int32")
    local launches = fake and fake.live().launches
    assert.is_true(dlpack.equal(dev(a), dev(a)))
    if fake then assert.is_true(fake.live().launches > launches, "kernels ran") end
    assert.is_false(dlpack.equal(dev(a), dev(b)))
    assert.is_false(dlpack.equal(dev(a), dev(a:view({3, 2}))), "shapes differ")
    assert.is_true(dev(a):equal(dev(a:transpose(1, 2)):transpose(1, 2)))
    local nan = dlpack.tensor({1, 0 / 0}, "float32")
    assert.are.equal(dlpack.equal(nan, nan), dlpack.equal(dev(nan), dev(nan)))
    assert.is_true(dlpack.equal(dev(dlpack.zeros({0, 4}, "float64")), dev(dlpack.zeros({0, 4}, "float64"))))
    local long = dlpack.arange(5000, "int64") -- several slices and a merge in the reduction
    local changed = dlpack.where(dlpack.eq(long, 4321), 0, long)
    assert.is_true(dlpack.equal(dev(long), dev(long + 0)))
    assert.is_false(dlpack.equal(dev(long), dev(changed)))
    raises(function() return dlpack.equal(dev(a), a) end, "equal: operands on different devices: cuda:0 and cpu")
    raises(function() return dlpack.equal(dev(a), dev(a:to("int64"))) end,
           "equal: CUDA tensors do not convert inside a computation yet")
    local u, i = dlpack.tensor({1, 2 ^ 63}, "uint64"), dlpack.tensor({1, -1}, "int64") -- compared exactly
    assert.are.equal(dlpack.equal(u, i), dlpack.equal(dev(u), dev(i)))
    assert.are.equal(dlpack.equal(u, u:to("int64")), dlpack.equal(dev(u), dev(u:to("int64"))))
  end)

  it("allclose gives the CPU's answer for every pair of dtypes, tolerances and NaN and infinities", function()
    local base = {1, 2.5, -3, 1e-9, 1000}
    local near = {1 + 1e-7, 2.5, -3, 2e-9, 1000}
    local far = {1, 2.6, -3, 1e-9, 1000}
    local relative = {1, 2.5, -3, 1e-9, 1000.5} -- close for rtol 1e-3, not for atol 1e-3
    local absolute = {1, 2.5, -3, 5e-7, 1000} -- close for atol 1e-5, not for rtol 1e-5
    local seen = {}
    for _, da in ipairs({"float32", "float64", "int32", "float16", "uint8", "bool"}) do
      for _, db in ipairs({"float64", "float32", "int64", "bfloat16"}) do
        for _, other in ipairs({base, near, far, relative, absolute}) do
          local a, b = dlpack.tensor(base, "float64"):to(da), dlpack.tensor(other, "float64"):to(db)
          for _, tol in ipairs({{}, {1e-3}, {0, 1e-3}, {0, 1e-5}, {0, 0}, {1e-12, 1e-12}}) do
            local want = dlpack.allclose(a, b, tol[1], tol[2])
            seen[want] = true
            assert.are.equal(want, dlpack.allclose(dev(a), dev(b), tol[1], tol[2]), da .. " " .. db)
          end
        end
      end
    end
    assert.is_true(seen[true] and seen[false], "both answers asked")
    local inf = dlpack.tensor({math.huge, -math.huge, 1}, "float64")
    assert.is_true(dlpack.allclose(dev(inf), dev(inf)))
    assert.is_false(dlpack.allclose(dev(inf), dev(dlpack.tensor({math.huge, math.huge, 1}, "float64"))))
    local nan = dlpack.tensor({0 / 0, 1}, "float32")
    assert.is_false(dlpack.allclose(dev(nan), dev(nan)))
    -- broadcasting, and complex operands against real ones
    local row = dlpack.tensor({1, 2, 3}, "float32")
    local m = dlpack.tensor({{1, 2, 3}, {1, 2, 3.001}}, "float64")
    assert.are.equal(dlpack.allclose(m, row), dlpack.allclose(dev(m), dev(row)))
    assert.are.equal(dlpack.allclose(m, row, 1e-3), dlpack.allclose(dev(m), dev(row), 1e-3))
    local z = dlpack.frombytes(dlpack.tensor({1, 0, 2, 1e-9, 3, 0}, "float64"):tobytes(), "complex128", {3})
    local z64 = z:to("complex64")
    for _, pair in ipairs({{z, z64}, {z, row}, {z64, row}, {row, z}}) do
      for _, tol in ipairs({{}, {0, 0}}) do
        assert.are.equal(dlpack.allclose(pair[1], pair[2], tol[1], tol[2]),
                         dlpack.allclose(dev(pair[1]), dev(pair[2]), tol[1], tol[2]),
                         pair[1].dtype .. " " .. pair[2].dtype)
      end
    end
    raises(function() return dlpack.allclose(dev(row), row) end, "allclose: operands on different devices")
    raises(function() return dlpack.allclose(dev(row), dev(row), -1) end, "allclose: rtol and atol must be finite")
  end)

  it("operands released right after the call are held until the kernels ran", function()
    local r
    do
      local a = dlpack.arange(3000, "float64"):to("cuda:0")
      local b = dlpack.arange(3000, "float32"):to("cuda:0")
      r = dlpack.allclose(a, b)
      a:release()
      b:release()
    end
    gc()
    assert.is_true(r)
  end)

  fake_it("a launch that fails raises naming the function, and nothing leaks", function()
    local x = dlpack.arange(600, "float32"):to("cuda:1")
    local function settle()
      gc()
      fake.sync_all()
      cuda.legacy_stream:synchronize()
      gc()
    end
    assert.is_true(dlpack.allclose(x, x))
    assert.is_true(dlpack.equal(x, x))
    settle()
    local live = fake.live()
    fake.fail_next("cuLaunchKernel", 1)
    raises(function() return dlpack.allclose(x, x) end, "allclose: CUDA error 1")
    fake.fail_next("cuLaunchKernel", 1, 1, 1) -- the test runs, the reduction fails
    raises(function() return dlpack.equal(x, x) end, "equal: CUDA error 1")
    settle()
    assert.are.equal(live.device, fake.live().device, "the temporaries of the failed calls are freed")
  end)
end)
