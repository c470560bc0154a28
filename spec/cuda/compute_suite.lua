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
  float16 = {-2.5, -0.0, 0.0, 1.5, 3.25, 60000}, bfloat16 = {-2.5, -0.0, 0.0, 1.5, 3.25, 1e30},
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
        if pcall(dlpack[op], x) then agrees(op .. " " .. dtype, dlpack[op], x) end
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

  it("operands of different dtypes convert on the device, through float16 where the CPU does", function()
    local pairs_ = {{"int32", "float32"}, {"uint8", "int8"}, {"int64", "uint64"}, {"float16", "bfloat16"},
                    {"bool", "float16"}, {"uint32", "float64"}, {"float16", "int16"}}
    for _, p in ipairs(pairs_) do
      local x, y = dlpack.tensor(VALUES[p[1]], p[1]), dlpack.tensor(VALUES[p[2]], p[2])
      for _, op in ipairs({"add", "mul", "maximum", "lt", "eq", "div"}) do
        if pcall(dlpack[op], x, y) then agrees(op .. " " .. p[1] .. " " .. p[2], dlpack[op], x, y) end
      end
    end
    agrees("sqrt of int16", dlpack.sqrt, dlpack.tensor(VALUES.int16, "int16"))
    agrees("dtype=", function(a, b) return dlpack.add(a, b, {dtype = "float16"}) end,
           dlpack.tensor(VALUES.float32, "float32"), dlpack.tensor(VALUES.int8, "int8"))
    agrees("out= of another dtype", function(a, b)
      local out = dlpack.zeros({6}, "float16", a.device)
      dlpack.mul(a, b, {out = out})
      return out
    end, dlpack.tensor(VALUES.float64, "float64"), dlpack.tensor(VALUES.float64, "float64"))
    agrees("in place, cast back", function(a) return a:clone():mul_(2.5) end, dlpack.tensor(VALUES.float16, "float16"))
    raises(function() return dlpack.tensor({1, 2}, "int32"):to("cuda:0"):add_(0.5) end, "same_kind")
  end)

  it("converts between every pair of real dtypes on the device as the CPU does", function()
    local names = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                   "bfloat16", "float32", "float64"}
    local extreme = {float64 = {-1e300, -70000.75, -1.5, 0.5, 255.5, 1e19, 0 / 0, 1 / 0, -2 ^ 63, 2 ^ 64}}
    for _, from in ipairs(names) do
      local x = dlpack.tensor(extreme[from] or VALUES[from], from)
      for _, to in ipairs(names) do
        agrees("to " .. from .. " -> " .. to, function(t) return t:to(to) end, x)
      end
    end
    local wide = dlpack.tensor({2 ^ 62 + 2 ^ 38 + 1, -(2 ^ 62 + 2 ^ 38 + 1), 2 ^ 53 + 1}, "int64")
    agrees("int64 to float32 in one rounding", function(t) return t:to("float32") end, wide)
    agrees("int64 to bfloat16 in one rounding", function(t) return t:to("bfloat16") end, wide)
  end)

  it("contiguous, clone and copy stay on the device, any strides", function()
    local m = dlpack.arange(60, "float32"):view({3, 4, 5})
    agrees("contiguous of a transpose", function(t) return t:transpose(1, 3):contiguous() end, m)
    agrees("clone of a flipped slice", function(t) return t:flip(2):clone() end, m)
    agrees("copy converting", function(t)
      local d = dlpack.zeros({5, 4, 3}, "int16", t.device)
      return d:copy(t:transpose(1, 3))
    end, m)
    local d = m:to("cuda:0")
    local launches = fake and fake.calls("cuLaunchKernel")
    local c = d:transpose(1, 2):contiguous()
    assert.are.equal("cuda:0", c.device)
    if fake then assert.is_true(fake.calls("cuLaunchKernel") > launches, "a kernel copied") end
    assert.are.equal(d, d:contiguous(), "already contiguous: itself")
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
    raises(function() return dlpack.zeros({2}, "complex64", "cuda:0") + 1 end, "does not run on CUDA devices yet")
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

-- What a hostile script or a broken producer does to the computing functions on CUDA tensors:
-- each must raise a clear error or give the CPU's result, leak nothing, free nothing twice and
-- never let a kernel touch freed memory (the suite checks probe.errors() after every test).
describe("compute attacks", function()
  it("equal reads a CUDA result back before looking at it (it read device memory on the host)", function()
    local a = dlpack.tensor({1, 2, 3}, "float32"):to("cuda:0")
    local b = dlpack.tensor({1, 2, 4}, "float32"):to("cuda:0")
    assert.is_true(dlpack.equal(a, a))
    assert.is_false(dlpack.equal(a, b))
    assert.is_false(a:equal(a:flip(1)))
    assert.is_true(dlpack.equal(dlpack.zeros({0, 3}, "int8", "cuda:0"), dlpack.zeros({0, 3}, "int8", "cuda:0")))
    raises(function() return dlpack.equal(a, a:to("cpu")) end, "operands on different devices: cuda:0 and cpu")
  end)
end)
