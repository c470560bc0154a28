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

-- everything back where it was: memory freed once the queued work ran
local function settle()
  gc()
  if fake then fake.sync_all() end
  cuda.legacy_stream:synchronize()
  gc()
  if fake then fake.sync_all() end
end

-- `rounds` rounds with a collection step at every allocation, in each of which a finalizer
-- releases one CUDA operand (make(round) -> the CUDA operands, their CPU copies, the victim) while
-- one of ops_of(round) runs on them: it raises naming the release or gives the bytes the same op
-- gives on the CPU copies; some rounds see each, and nothing stays allocated on the device.
local function finalizer_rounds(rounds, make, ops_of)
  settle()
  local live = fake.live().device
  -- a cycle at every few allocations: the finalizer runs inside the op in some rounds
  local incremental = pcall(collectgarbage, "incremental", 1, 1000)
  if not incremental then collectgarbage("setpause", 1); collectgarbage("setstepmul", 1000) end
  local ok_count, released = 0, 0
  for round = 1, rounds do
    local pool, cpu, victim = make(round)
    setmetatable({}, {__gc = function() victim:release() end})
    -- ops that allocate little in Lua's heap leave a cycle unfinished for many rounds: a step of
    -- varying size here has the cycle end before, inside or after the op
    collectgarbage("step", round % 8 * 32)
    local ops = ops_of(round)
    local op = ops[round % #ops + 1]
    local ok, r = pcall(op, pool)
    -- the result itself may be the victim (an out): released before it was read back
    if ok then ok, r = pcall(function() return r:to("cpu"):tobytes() end) end
    if ok then
      ok_count = ok_count + 1
      assert.are.equal(op(cpu):tobytes(), r, "round " .. round)
    else
      assert.is_truthy(tostring(r):find("released", 1, true), tostring(r))
      released = released + 1
    end
  end
  if incremental then collectgarbage("incremental", 200, 100)
  else collectgarbage("setpause", 200); collectgarbage("setstepmul", 200) end
  assert.is_true(ok_count > 0 and released > 0, ok_count .. " rounds gave a result, " .. released .. " raised")
  settle()
  assert.are.equal(live, fake.live().device)
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
              tanh = true, sigmoid = true, pow = true, div = true, log2 = true, log10 = true, asin = true, acos = true,
              atan = true, sinh = true, cosh = true, erf = true, rsqrt = true, reciprocal = true, atan2 = true,
              hypot = true, norm = true}

-- The CPU's own vector loops (AVX-512: float32 exp sigmoid log tanh sin cos pow, within 2 units in the
-- last place) differ from the C library's rounding that the fake's kernels (C) and a GPU have.
local VECTOR_MATH = {exp = true, sigmoid = true, log = true, tanh = true, sin = true, cos = true, pow = true}
-- (float16 and bfloat16 compute in float32; a NaN's sign may differ too)
local cpu_vector_math = dlpack.cpu() == "avx512"
local HALF_OR_SINGLE = {float32 = true, float16 = true, bfloat16 = true}

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
  local rtol = ({float64 = 1e-13, float32 = 1e-6, float16 = 1e-3, bfloat16 = 1e-2})[want.dtype]
  local name = what:match("^(%w+)")
  local vector = cpu_vector_math and VECTOR_MATH[name] and HALF_OR_SINGLE[want.dtype]
  if (probe.kind == "gpu" or vector) and MATH[name] and rtol then
    -- a GPU's libm: within a few units in the last place of the dtype; NaN where the CPU has NaN
    local g, w = got:to("float64"):totable(), want:to("float64"):totable()
    local function close(a, b)
      if type(a) == "table" then
        for k = 1, #a do
          if not close(a[k], b[k]) then return false end
        end
        return true
      end
      return (a ~= a and b ~= b) or a == b or math.abs(a - b) <= rtol * math.abs(b)
    end
    assert.is_true(close(g, w), what)
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
                    "logical_and", "logical_or", "logical_xor", "band", "bor", "bxor", "shl", "shr", "atan2", "hypot"}
    for dtype, values in pairs(VALUES) do
      local x = dlpack.tensor(values, dtype)
      local y = dlpack.tensor({values[6], values[1], values[3], values[2], values[5], values[4]}, dtype)
      for _, op in ipairs(binary) do
        local ok, err = pcall(dlpack[op], x, y)
        if ok then
          agrees(op .. " " .. dtype, dlpack[op], x, y)
        else -- what the CPU refuses (bool sub, float band, a zero divisor) the device refuses alike
          local gpu_ok, gpu_err = pcall(dlpack[op], x:to("cuda:0"), y:to("cuda:0"))
          assert.is_false(gpu_ok, op .. " " .. dtype)
          assert.are.equal(err, gpu_err, op .. " " .. dtype)
        end
      end
    end
  end)

  it("every unary operation agrees with the CPU", function()
    local unary = {"neg", "abs", "sign", "sqrt", "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh",
                   "sigmoid", "floor", "ceil", "round", "trunc", "isnan", "isinf", "isfinite", "logical_not", "bnot",
                   "log2", "log10", "asin", "acos", "atan", "sinh", "cosh", "erf", "rsqrt", "reciprocal", "square"}
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

  it("fills on the device: full, ones, fill of a strided or expanded view", function()
    local launches = fake and fake.calls("cuLaunchKernel")
    local f = dlpack.full({2, 3}, 2.5, "float16", "cuda:0")
    if fake then assert.is_true(fake.calls("cuLaunchKernel") > launches, "a kernel filled") end
    assert.are.same({{2.5, 2.5, 2.5}, {2.5, 2.5, 2.5}}, host(f):totable())
    assert.are.same({1, 1}, host(dlpack.ones({2}, "int64", "cuda:0")):totable())
    local m = dlpack.zeros({3, 4}, "int32", "cuda:0")
    m:transpose(1, 2):narrow(1, 1, 2):fill(7)
    assert.are.same({{7, 7, 0, 0}, {7, 7, 0, 0}, {7, 7, 0, 0}}, host(m):totable())
    local big = dlpack.zeros({1}, "uint8", "cuda:0"):expand({2 ^ 40})
    big:fill(9) -- one element, however many times it repeats
    assert.are.same({9}, host(big:narrow(1, 1, 1)):totable())
    raises(function() m:fill(2 ^ 40) end, "out of range")
  end)

  it("allclose compares on the device with NumPy's isclose", function()
    local a = dlpack.tensor({1, 2, 0 / 0, 1 / 0, 1e-9}, "float64")
    local cases = {
      {a, a:clone()}, {a, dlpack.tensor({1, 2, 0 / 0, 1 / 0, 0}, "float64")},
      {dlpack.tensor({1, 2}, "float32"), dlpack.tensor({1.00001, 2}, "float64")},
      {dlpack.tensor({100, 1e6}, "int32"), dlpack.tensor({100, 1e6 + 1}, "int64")},
      {dlpack.tensor({1 / 0}, "float32"), dlpack.tensor({-1 / 0}, "float32")},
    }
    for i, c in ipairs(cases) do
      for _, tol in ipairs({{}, {0, 0}, {1e-3, 1e-3}}) do
        local want = dlpack.allclose(c[1], c[2], tol[1], tol[2])
        local got = dlpack.allclose(c[1]:to("cuda:0"), c[2]:to("cuda:0"), tol[1], tol[2])
        assert.are.equal(want, got, "case " .. i)
      end
    end
    local launches = fake and fake.calls("cuLaunchKernel")
    assert.is_true(dlpack.allclose(a:to("cuda:0"), a:to("cuda:0"), 0, 0) == false) -- NaN is close to nothing
    if fake then assert.is_true(fake.calls("cuLaunchKernel") > launches, "a kernel compared") end
  end)

  it("rand, randn and randint draw on the device, reproducibly, as docs/api.md specifies", function()
    -- the documented counter-based draw, in Lua 5.4 integer arithmetic (wrapping, logical shifts)
    local G = 0x9e3779b97f4a7c15
    local function mix(z)
      z = (z ~ (z >> 30)) * 0xbf58476d1ce4e5b9
      z = (z ~ (z >> 27)) * 0x94d049bb133111eb
      return z ~ (z >> 31)
    end
    local function draw(key, i, t) return mix(mix(key + (t + 1) * G) + (i + 1) * G) end
    local function rotl(x, k) return (x << k) | (x >> (64 - k)) end
    local seed, state = 42, {} -- the key: the first draw of xoshiro256** seeded with 42 (docs/api.md)
    for k = 1, 4 do
      seed = seed + G
      state[k] = mix(seed)
    end
    local key = rotl(state[2] * 5, 7) * 9
    dlpack.manual_seed(42)
    local launches = fake and fake.calls("cuLaunchKernel")
    local u = dlpack.rand({1000}, "float64", "cuda:0")
    if fake then assert.is_true(fake.calls("cuLaunchKernel") > launches, "drawn by a kernel") end
    assert.are.equal("cuda:0", u.device)
    local values = host(u):totable()
    for i = 1, 5 do assert.are.equal(((draw(key, i - 1, 0) >> 11) * 2.0 ^ -53), values[i]) end
    for _, v in ipairs(values) do assert.is_true(v >= 0 and v < 1) end
    dlpack.manual_seed(42)
    assert.are.equal(u:to("cpu"):tobytes(), host(dlpack.rand({1000}, "float64", "cuda:0")):tobytes(), "same seed")
    assert.are_not.equal(u:to("cpu"):tobytes(), host(dlpack.rand({1000}, "float64", "cuda:0")):tobytes())
    local n = host(dlpack.randn({4000}, "float32", "cuda:0"):to("float64"))
    local mean = dlpack.tensor(n:totable()):sum() / 4000
    assert.is_true(math.abs(mean) < 0.1, "mean " .. mean)
    local k = host(dlpack.randint(-3, 5, {2000}, "int8", "cuda:0")):totable()
    local seen = {}
    for _, v in ipairs(k) do
      assert.is_true(v >= -3 and v < 5)
      seen[v] = true
    end
    for v = -3, 4 do assert.is_true(seen[v], "value " .. v .. " drawn") end
    assert.are.same({0}, dlpack.randint(0, 1, {1}, "bool", "cuda:0"):to("int32"):to("cpu"):totable())
    assert.are.same({0}, dlpack.rand({0}, "float32", "cuda:0").shape)
    raises(function() return dlpack.rand({2}, "float32", "rocm:0") end, "rocm")
  end)

  it("arange, linspace and eye make CUDA tensors on the device, with the CPU's values", function()
    local function same(what, make, ...)
      local args = {...}
      local want = make(table.unpack(args))
      args[#args + 1] = "cuda:0"
      local got = make(table.unpack(args))
      assert.are.equal("cuda:0", got.device, what)
      assert.are.equal(want.dtype, got.dtype, what)
      assert.are.equal(want:tobytes(), host(got):tobytes(), what)
    end
    local launches = fake and fake.calls("cuLaunchKernel")
    same("arange int64", dlpack.arange, 2, 40, 3, "int64")
    if fake then assert.is_true(fake.calls("cuLaunchKernel") > launches, "a kernel") end
    same("arange down", dlpack.arange, 10, -10, -3, "int8")
    same("arange floats", dlpack.arange, -1.5, 2.25, 0.125, "float32")
    same("arange float16 of integers", dlpack.arange, 0, 70000, 999, "float16")
    same("arange uint64", dlpack.arange, 2 ^ 62, 2 ^ 62 + 50, 7, "uint64")
    for _, n in ipairs({0, 1, 2, 7, 100}) do
      same("linspace " .. n, dlpack.linspace, -1, 3.5, n, "float64")
      same("linspace int " .. n, dlpack.linspace, -7, 9, n, "int16")
    end
    same("linspace bfloat16", dlpack.linspace, 0, 1, 33, "bfloat16")
    same("eye", dlpack.eye, 4, "float32")
    same("eye 2x5", dlpack.eye, 2, 5, "int32")
    same("eye 0", dlpack.eye, 0, 3, "uint8")
    raises(function() return dlpack.arange(0, 3, 1, "int32", "cuda:0", 1) end, "unexpected argument")
  end)

  it("cat and stack join on the device, converting as the CPU does", function()
    local a = dlpack.arange(6, "int16"):view({2, 3})
    local b = dlpack.tensor({{0.5, 1.5, 2.5}}, "float32")
    agrees("cat", function(x, y) return dlpack.cat({x, y}) end, a, b)
    agrees("cat along 2", function(x) return dlpack.cat({x, x:flip(2)}, 2) end, a)
    agrees("stack", function(x, y) return dlpack.stack({x:transpose(1, 2), y:transpose(1, 2)}, 2) end, a, a)
    local d = a:to("cuda:0")
    raises(function() return dlpack.cat({d, a}) end,
           "operands on different devices: list[1] is on cuda:0, list[2] on cpu")
    raises(function() return dlpack.stack({a, d}) end, "list[2] is on cuda:0, list[1] on cpu")
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
    agrees("masked_fill", function(a, mask) return a:masked_fill(mask, -7) end, m,
           dlpack.tensor({true, false, false, true}))
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
    raises(function() return dlpack.lt(dlpack.zeros({2}, "complex64", "cuda:0"), 1) end,
           "lt: complex64 is not supported (complex numbers have no order)")
    local perm = dlpack.randperm(3, "int64", "cuda:0") -- drawn on the host, copied to the device
    assert.are.equal("cuda:0", tostring(perm.device))
    assert.are.same({1, 2, 3}, (host(perm):sort()):totable())
    for _, dtype in ipairs({"int8", "uint16", "int64"}) do -- zero divisors and negative exponents, on the device
      local i = dlpack.tensor({1, 2, 3}, dtype):to("cuda:0")
      local z = dlpack.tensor({{3, 2, 1}, {1, 0, 1}}, dtype):to("cuda:0")
      raises(function() return dlpack.idiv(i, z) end, "integer division by zero")
      raises(function() return dlpack.mod(i, z:to("int32")) end, "integer division by zero")
      agrees("idiv by a tensor " .. dtype, dlpack.idiv, dlpack.tensor({7, -8, 9}, "int64"),
             dlpack.tensor({2, 3, dtype:match("^u") and 4 or -4}, dtype))
      if dtype:match("^int") then
        local e = dlpack.tensor({1, -1, 2}, dtype):to("cuda:0")
        raises(function() return dlpack.pow(i, e) end, "negative integer powers")
      end
    end
    raises(function() return dlpack.idiv(dlpack.zeros({2}, "int32", "cuda:0"), 0) end, "integer division by zero")
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

  it("runs on opts.stream when given, after the operands' pending work", function()
    local s = cuda.Stream()
    local a = dlpack.tensor({1, 2, 3}, "float32"):to("cuda:0")
    local b = dlpack.tensor({4, 5, 6}, "int32"):to("cuda:0") -- converted on the same stream
    local launches = fake and fake.calls("cuLaunchKernel")
    local r = dlpack.add(a, b, {stream = s})
    if fake then
      assert.is_true(fake.calls("cuLaunchKernel") >= launches + 2, "a conversion and the addition")
      assert.is_true(fake.pending(s.handle) > 0, "queued on s, not run yet")
    end
    assert.are.same({5, 7, 9}, host(r):totable())
    assert.are.same({5, 7, 9}, host(dlpack.add(a, b, {stream = cuda.legacy_stream})):totable())
    raises(function() return dlpack.add(dlpack.ones({2}), 1, {stream = s}) end,
           "stream must be nil or -1 for a tensor on cpu")
    raises(function() return dlpack.add(a, 1, {stream = 7}) end, "wrap_stream")
    s:close()
    raises(function() return dlpack.add(a, 1, {stream = s}) end, "the stream was closed")
  end)

  it("a copy that needs a kernel takes a stream of another device, as a driver copy does", function()
    if cuda.device_count() < 2 then return pending("needs two CUDA devices") end
    local s1 = cuda.Stream({device = 1})
    local a = dlpack.tensor({1, 2, 3, 4, 5}, "float32"):to("cuda:0")
    local want = dlpack.tensor({1, 3, 5}, "float32")
    -- a strided side gathered on cuda:0, converted on cuda:0, scattered into cuda:0: each on s1
    local g = a:slice(1, 1, 5, 2):to({device = "cpu", stream = s1})
    s1:synchronize()
    assert.are.equal(want:tobytes(), g:tobytes())
    local c = a:slice(1, 1, 5, 2):to("float64", "cuda:0")
    local d = dlpack.zeros({3}, "float64", "cuda:0")
    d:copy(a:slice(1, 1, 5, 2), {stream = s1})
    local e = dlpack.zeros({6}, "float32", "cuda:0")
    e:slice(1, 1, 6, 2):copy(want, {stream = s1})
    s1:synchronize()
    assert.are.equal(host(c):tobytes(), host(d):tobytes())
    assert.are.same({1, 0, 3, 0, 5, 0}, host(e):totable())
    s1:close()
  end)

  it("computes on memory whose pending work is on another device's stream (a copy given one)", function()
    if cuda.device_count() < 2 then return pending("needs two CUDA devices") end
    local s1 = cuda.Stream({device = 1})
    local a = dlpack.zeros({4}, "float32", "cuda:0")
    a:copy(dlpack.ones({4}, "float32", "cuda:0"), {stream = s1})
    a:fill(2) -- it raised "the stream is on cuda:1, the operands on cuda:0"
    a:add_(1)
    local m = dlpack.tensor({true, false, true, false}):to("cuda:0")
    m:copy(m:flip(1), {stream = s1})
    a:masked_fill(m, 7)
    assert.are.same({3, 7, 3, 7}, host(a):totable())
    -- clamp takes opts.stream as the other computing functions do (it raised "unknown option")
    local s0 = cuda.Stream()
    local r = dlpack.clamp(a, 4, 6, {stream = s0})
    if fake then assert.is_true(fake.pending(s0.handle) > 0, "queued on s0") end
    assert.are.same({4, 6, 4, 6}, host(r):totable())
    s0:close()
    s1:close()
  end)

  it("a zero divisor or negative exponent raises also when the broadcast result is empty, as on the CPU", function()
    local empty = dlpack.zeros({0}, "int32", "cuda:0")
    for _, f in ipairs({"idiv", "mod"}) do
      raises(function() return dlpack[f](empty, dlpack.zeros({1}, "int32", "cuda:0")) end,
             f .. ": integer division by zero")
    end
    raises(function() return dlpack.pow(empty, dlpack.tensor({-1}, "int32"):to("cuda:0")) end,
           "pow: integers to negative integer powers are not allowed")
    assert.are.same({0}, dlpack.mod(empty, dlpack.ones({1}, "int32", "cuda:0")).shape)
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

  -- fake_only: needs the fake's counters or fault injection, on cuda:0
  local function fake_only(name, fn)
    if fake then it(name, fn) else pending(name .. ": needs the fake driver") end
  end
  local function device_live() return fake and fake.live().device or 0 end

  fake_only("option tables whose metamethods release an operand or out, or collect, raise and leak nothing", function()
    settle()
    local live = device_live()
    do
      local a = dlpack.tensor({1, 2, 3}, "int8"):to("cuda:0")
      local b = dlpack.tensor({1, 2, 3}, "float32"):to("cuda:0")
      local out = dlpack.zeros({3}, "float16", "cuda:0")
      raises(function()
        return dlpack.add(a, b, setmetatable({}, {__index = function() a:release() end}))
      end, "add: the tensor was released")
      raises(function()
        return dlpack.add(b, b, setmetatable({out = out}, {__index = function() out:release(); gc() end}))
      end, "out: the tensor was released")
      local c = dlpack.zeros({3}, "float64", "cuda:0")
      raises(function()
        return c:copy(b:flip(1), setmetatable({}, {__index = function() b:release(); c:release() end}))
      end, "copy: the tensor was released")
    end
    settle()
    assert.are.equal(live, device_live())
  end)

  fake_only("finalizers that release operands or out while temporaries are allocated: an error or the CPU's result",
    function()
      local base = dlpack.arange(12, "float32"):view({3, 4})
      local dtypes = {"int8", "float16", "float32", "int64", "bool", "uint8"}
      finalizer_rounds(150, function(round)
        local pool, cpu = {}, {}
        for i = 1, 5 do
          cpu[i] = base:to(dtypes[(round * i) % #dtypes + 1])
          pool[i] = cpu[i]:to("cuda:0")
          if (round + i) % 3 == 0 then pool[i], cpu[i] = pool[i]:flip(1), cpu[i]:flip(1) end
        end
        return pool, cpu, pool[round % 5 + 1]
      end, function()
        return {
          function(t) return (t[1]:sort(2, true)) end,
          function(t) return select(2, t[4]:flip(2):topk(2, 1, {largest = false})) end,
          function(t) return t[2]:median(1) end,
          function(t) return t[3].dtype == "bool" and t[3]:median(2) or t[3]:quantile({0.5, 0.25}) end,
          function(t) return select(2, t[5]:unique({return_inverse = true, return_counts = true})) end,
          function(t) return dlpack.add(t[1], t[2]) end,
          function(t) return dlpack.where(t[5], t[1], t[2]) end,
          function(t) return dlpack.mul(t[3], t[3]:flip(2)) end,
          function(t) return dlpack.clamp(t[1], t[2], t[4]) end,
          function(t) return dlpack.sqrt(t[2]) end,
          function(t) return t[4]:to("float16") end,
        }
      end)
    end)

  it("out aliasing or partly overlapping the inputs (flips, transposes, expanded inputs) gives the CPU's result",
    function()
      local m = dlpack.arange(24, "int32"):view({4, 6})
      local cases = {
        function(a) return dlpack.add(a, a:flip(1), {out = a}) end,
        function(a) local s = a:narrow(2, 1, 4); dlpack.sub(s, s:transpose(1, 2), {out = s}); return a end,
        function(a) local f = a:to("float16"); dlpack.mul(f, f:flip(2), {out = f}); return f end,
        function(a) local f = a:to("float32"); return dlpack.add(f, f, {out = f, dtype = "float64"}) end,
        function(a)
          local f = a:view({24})
          dlpack.add(f:narrow(1, 2, 20), f:narrow(1, 1, 20), {out = f:narrow(1, 3, 20)})
          return a
        end,
        function(a) local f = a:view({24}):to("float32"); dlpack.add(f:narrow(1, 2, 20), 1, {out = f:narrow(1, 3, 20)})
          return f end,
        function(a) return dlpack.where(a:to("bool"), a, a:flip(1), {out = a}) end,
        function(a) return dlpack.clamp(a, a:flip(1), a:flip(2), {out = a}) end,
        function(a) return dlpack.add(a:narrow(1, 1, 1):expand({4, 6}), a, {out = a}) end,
        function(a) return a:copy(a:flip(1)) end,
        function(a) local f = a:view({24}); f:narrow(1, 2, 20):copy(f:narrow(1, 1, 20)); return a end,
        function(a) local s = a:narrow(2, 1, 4); s:copy(s:to("float64"):transpose(1, 2)); return a end,
      }
      for i, case in ipairs(cases) do
        local want = case(m:clone())
        local got = case(m:to("cuda:0"))
        assert.are.equal(want:tobytes(), got:contiguous():to("cpu"):tobytes(), "case " .. i)
      end
    end)

  fake_only("a driver failure at any call of a computation raises, leaks nothing and leaves later ops work", function()
    local names = {"cuMemAlloc_v2", "cuMemAllocAsync", "cuMemFreeAsync", "cuMemFree_v2", "cuStreamWaitEvent",
                   "cuEventCreate", "cuEventRecord", "cuEventQuery", "cuEventDestroy_v2", "cuStreamSynchronize",
                   "cuModuleLoadData", "cuModuleGetFunction", "cuLaunchKernel", "cuCtxSetCurrent"}
    local ops = {
      function(a, b, _, o) return dlpack.add(a, b, {out = o}) end,
      function(a, b, c) return dlpack.where(c, a, b) end,
      function(a) local t = a:clone(); t:add_(t:flip(1)); return t end,
      function(_, b, _, o) return o:copy(b:flip(1)) end,
      function(_, b) return dlpack.equal(b, b:flip(1)) and b or b:flip(1) end,
      function(_, b) return (b:flip(1):sort(1, true)) end,
      function(a) return a:quantile(0.5, 1, {keepdim = true}) end,
    }
    local s = cuda.Stream()
    local hits = 0
    for i, op in ipairs(ops) do
      for _, name in ipairs(names) do
        local counted = pcall(fake.calls, name) -- the old driver has no stream-ordered allocator
        for after = 0, 8 do
          if not counted then break end
          settle()
          local live, errors = device_live(), fake.errors()
          local a = dlpack.tensor({1, 2, 3, 4}, "int8"):to({device = "cuda:0", stream = s})
          local b = dlpack.tensor({1, 2, 3, 5}, "float32"):to("cuda:0")
          local c = dlpack.tensor({true, false, true, false}):to("cuda:0")
          local o = dlpack.zeros({4}, "float16", "cuda:0")
          local want = op(a:to("cpu"), b:to("cpu"), c:to("cpu"), o:to("cpu")):tobytes()
          local before = fake.calls(name)
          fake.fail_next(name, 999, 1, after)
          local ok, r = pcall(op, a, b, c, o)
          local hit = fake.calls(name) > before + after
          fake.fail_next(name, 0, 0)
          local what = string.format("op %d, %s failing after %d calls", i, name, after)
          if ok then
            assert.are.equal(want, r:contiguous():to("cpu"):tobytes(), what)
          else
            assert.is_truthy(tostring(r):find("CUDA error 999", 1, true), what .. ": " .. tostring(r))
          end
          a, b, c, o, r = nil, nil, nil, nil, nil -- luacheck: ignore 311
          settle()
          assert.are.equal(live, device_live(), what .. ": nothing leaks")
          assert.are.equal(errors, fake.errors(), what .. ": no misuse\n" .. table.concat(fake.error_log(), "\n"))
          local x = dlpack.tensor({1, 2}, "int8"):to("cuda:0")
          assert.are.same({2, 4}, (x + dlpack.tensor({1, 2}, "float32"):to("cuda:0")):to("cpu"):totable(), what)
          if not hit then break end
          hits = hits + 1
        end
      end
    end
    assert.is_true(hits > 20, "failures injected: " .. hits)
    s:close()
  end)

  fake_only("misaligned device views of a producer's tensor raise before any kernel is queued", function()
    local fab = require "fabricate"
    local launches = fake.calls("cuLaunchKernel")
    for _, offset in ipairs({1, 2, 6}) do
      local cap = fab.versioned({device_type = 2, device_id = 0, code = 2, bits = 32, shape = {3},
                                 byte_offset = offset})
      local x = dlpack.from_dlpack(cap)
      raises(function() return x + 1 end, "add: a CUDA operand's elements are not aligned to their size (4 bytes)")
      raises(function() return x:to("float64") end, "not aligned to their size")
      raises(function() return x:flip(1):contiguous() end, "not aligned to their size")
      raises(function() return x:add_(1) end, "not aligned to their size")
      raises(function() return dlpack.zeros({3}, "float32", "cuda:0"):copy(x:flip(1)) end, "not aligned to their size")
    end
    assert.are.equal(launches, fake.calls("cuLaunchKernel"))
  end)

  it("64 dimensions that do not merge, permuted and flipped", function()
    local shape, perm = {}, {}
    for i = 1, 64 do shape[i], perm[i] = i <= 12 and 2 or 1, 65 - i end
    local function f(t)
      local v = t:permute(perm)
      for d = 1, 64, 3 do v = v:flip(d) end
      return dlpack.add(v, v:to("float32"):flip(60))
    end
    local x = dlpack.arange(4096, "int16"):view(shape)
    assert.are.equal(f(x):tobytes(), f(x:to("cuda:0")):contiguous():to("cpu"):tobytes())
  end)

  fake_only("two lua_States on two threads compute at once, and lua_close leaves queued kernels to finish", function()
    local fab = require "fabricate"
    settle()
    local live, errors = device_live(), fake.errors()
    local r = fab.run_threads([[
      local dlpack = require "dlpack"
      local _, index = ...
      local x = dlpack.arange(600, "int16"):view({6, 100})
      local y = dlpack.arange(100, "float32")
      local want = (dlpack.add(x:flip(1), y) * 3):tobytes()
      wait_all()
      for _ = 1, 10 do
        local dx, dy = x:to("cuda:0"), y:to("cuda:0")
        assert((dlpack.add(dx:flip(1), dy) * 3):to("cpu"):tobytes() == want, "wrong bytes on thread " .. index)
      end
      _G.keep = {} -- left to lua_close with their kernels queued
      local dx = x:to("cuda:0")
      for i = 1, 4 do _G.keep[i] = dlpack.add(dx:flip(1), 1.5) end
      _G.s = dlpack.cuda.Stream()
      _G.y = dx:to("float64"):flip(2)
      _G.z = dlpack.mul(_G.y, _G.y:to("int8"))
      return true
    ]], 4)
    for _, res in ipairs(r) do assert.is_true(res.ok, tostring(res.value)) end
    settle()
    assert.are.equal(live, device_live(), "nothing leaks")
    assert.are.equal(errors, fake.errors(), table.concat(fake.error_log(), "\n"))
  end)
end)

-- matmul and dot on CUDA tensors: cuBLAS for float products when one is found (stage 45 runs the
-- suite with the fake driver's cuBLAS and with DLPACK_LUA_CUBLAS=none), the module's kernel
-- (kernels.cu, family 27) for the rest; every result against the CPU path on the same values
describe("matrix products on CUDA tensors", function()
  local blas = cuda.blas()
  local REAL = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
                "float32", "float64"}

  -- a tensor of the shape whose element n (row-major, from 0) is n % mod - off in dtype (small
  -- integers: every route, every summation order gives the same values)
  local function grid(shape, dtype, seed)
    local n = 1
    for _, size in ipairs(shape) do n = n * size end
    local mod, off = 7, 3
    if dtype == "bool" then mod, off = 3, 0 elseif dtype:match("^uint") then mod, off = 5, 0 end
    return ((dlpack.arange(n) + (seed or 0)) % mod - off):view(shape):to(dtype)
  end

  local function same_result(what, want, got, rtol)
    if type(want) ~= "userdata" then -- two 1-d operands: a Lua value
      if rtol and want ~= 0 then
        assert.is_true(math.abs(got - want) <= rtol * math.abs(want), what .. ": " .. tostring(got))
      else
        assert.are.equal(want, got, what)
      end
      return
    end
    assert.are.equal("cuda:0", got.device, what)
    assert.are.equal(want.dtype, got.dtype, what)
    assert.are.same(want.shape, got.shape, what)
    got = host(got)
    if rtol then
      assert.is_true(dlpack.allclose(got:to("float64"), want:to("float64"), rtol, 1e-6), what)
    else
      assert.are.equal(want:tobytes(), got:tobytes(), what)
    end
  end

  -- op(a, b) on the host against op on device copies of a and b, each seen through a view
  -- function (the same view of the device copy: device tensors are copied contiguous)
  local function product_agrees(what, op, a, b, va, vb, rtol)
    local function ident(t) return t end
    va, vb = va or ident, vb or ident
    same_result(what, dlpack[op](va(a), vb(b)), dlpack[op](va(a:to("cuda:0")), vb(b:to("cuda:0"))), rtol)
  end

  local function fake_only(name, fn)
    if fake then it(name, fn) else pending(name .. ": needs the fake driver's counters") end
  end
  local function blas_fake_it(name, fn)
    if not blas then
      pending(name .. ": no cuBLAS (" .. select(2, cuda.blas()) .. ")")
    else
      fake_it(name, fn)
    end
  end

  fake_only("floats go through cuBLAS when one is found, integers and bool through the module's kernel", function()
    local function routes(fn)
      local g, s, k = fake.calls("cublasGemmEx"), fake.calls("cublasGemmStridedBatchedEx"), fake.calls("cuLaunchKernel")
      fn()
      return fake.calls("cublasGemmEx") - g, fake.calls("cublasGemmStridedBatchedEx") - s,
             fake.calls("cuLaunchKernel") - k
    end
    local f = grid({3, 4}, "float32"):to("cuda:0")
    local i = grid({3, 4}, "int32"):to("cuda:0")
    local batch = grid({5, 3, 4}, "float32"):to("cuda:0")
    local x = dlpack.tensor({true, false}):to("cuda:0")
    if blas then
      assert.are.same({1, 0, 0}, {routes(function() return f:matmul(f:transpose(1, 2)) end)})
      assert.are.same({0, 1, 0}, {routes(function() return batch:matmul(f:transpose(1, 2)) end)})
      -- {2, 1} x {3}: two strided batches of 3 (the batch dimensions do not merge)
      assert.are.same({0, 2, 0}, {routes(function()
        return dlpack.matmul(grid({2, 1, 3, 4}, "float32"):to("cuda:0"), grid({3, 4, 2}, "float32"):to("cuda:0"))
      end)})
      -- what cuBLAS cannot read in place or convert: the kernel
      assert.are.same({0, 0, 1}, {routes(function() return f:flip(1):matmul(f:transpose(1, 2)) end)})
      local d = grid({4, 3}, "float64"):to("cuda:0")
      assert.are.same({0, 0, 1}, {routes(function() return f:matmul(d) end)})
    else
      assert.are.same({0, 0, 1}, {routes(function() return f:matmul(f:transpose(1, 2)) end)})
    end
    assert.are.same({0, 0, 1}, {routes(function() return i:matmul(i:transpose(1, 2)) end)})
    assert.are.same({0, 0, 1}, {routes(function() return dlpack.dot(x, x) end)})
  end)

  it("every real dtype, 1-d, 2-d, batched and broadcast shapes, gives the CPU's values and dtype", function()
    local shapes = {{{5}, {5}}, {{4}, {4, 3}}, {{3, 4}, {4}}, {{3, 4}, {4, 5}}, {{2, 3, 4}, {4, 5}},
                    {{4}, {2, 4, 3}}, {{2, 1, 3, 4}, {5, 4, 2}}, {{1, 1}, {1, 1}}, {{7, 33}, {33, 1}}}
    for _, dtype in ipairs(REAL) do
      for _, s in ipairs(shapes) do
        local what = string.format("matmul %s {%s} {%s}", dtype, table.concat(s[1], ","), table.concat(s[2], ","))
        product_agrees(what, "matmul", grid(s[1], dtype, 1), grid(s[2], dtype, 2))
        if #s[1] <= 2 and #s[2] <= 2 then
          product_agrees("dot" .. what:sub(7), "dot", grid(s[1], dtype, 1), grid(s[2], dtype, 2))
        end
      end
    end
  end)

  it("mixed dtypes promote as on the CPU", function()
    local pairs_ = {{"int8", "uint8"}, {"int32", "float32"}, {"float16", "bfloat16"}, {"bool", "int8"},
                    {"uint64", "int64"}, {"float16", "float32"}, {"uint8", "float16"}, {"bool", "float64"},
                    {"int16", "bfloat16"}, {"uint32", "int8"}}
    for _, p in ipairs(pairs_) do
      product_agrees("matmul " .. p[1] .. " " .. p[2], "matmul", grid({2, 3, 4}, p[1], 1), grid({4, 5}, p[2], 2))
      product_agrees("dot " .. p[1] .. " " .. p[2], "dot", grid({6}, p[1], 1), grid({6}, p[2], 2))
    end
  end)

  it("transposed, sliced, narrowed, flipped and expanded operands", function()
    local views = {
      transposed = function(t) return t:transpose(1, 2) end,
      sliced = function(t) return t:slice(1, 1, -1, 2):slice(2, 1, -1, 3) end,
      narrowed = function(t) return t:narrow(2, 2, 3) end,
      flipped = function(t) return t:flip({1, 2}) end,
      reversed = function(t) return t:slice(1, -1, 1, -1) end,
      expanded = function(t) return t:narrow(1, 2, 1):expand({6, 6}) end,
    }
    for _, dtype in ipairs({"float32", "float64", "float16", "bfloat16", "int32", "uint8", "bool"}) do
      for name, v in pairs(views) do
        -- each factor {6, 6} seen through the view, the other one contiguous, then both
        local a, b = grid({6, 6}, dtype, 1), grid({6, 6}, dtype, 2)
        local shape = v(a).shape
        product_agrees("a " .. name .. " " .. dtype, "matmul", a, grid({shape[2], 4}, dtype, 2), v)
        product_agrees("b " .. name .. " " .. dtype, "matmul", grid({3, shape[1]}, dtype, 3), b, nil, v)
        product_agrees("both " .. name .. " " .. dtype, "matmul", a, b, v, function(t) return v(t):transpose(1, 2) end)
      end
      -- batches of transposed matrices, and a batch dimension expanded (stride 0)
      product_agrees("batch transposed " .. dtype, "matmul", grid({3, 4, 5}, dtype, 1), grid({3, 6, 4}, dtype, 2),
                     function(t) return t:transpose(2, 3) end, function(t) return t:transpose(2, 3) end)
      product_agrees("batch expanded " .. dtype, "matmul", grid({1, 4, 5}, dtype, 1), grid({3, 5, 2}, dtype, 2),
                     function(t) return t:expand({3, 4, 5}) end)
    end
  end)

  it("integers wrap and bool is any product, as on the CPU", function()
    product_agrees("int8 wraps", "dot", dlpack.tensor({100, 100}, "int8"), dlpack.tensor({100, 1}, "int8"))
    assert.are.equal(116, dlpack.dot(dlpack.tensor({100, 100}, "int8"):to("cuda:0"),
                                     dlpack.tensor({100, 1}, "int8"):to("cuda:0")))
    product_agrees("uint32 wraps", "matmul", dlpack.tensor({{4294967295, 3}}, "uint32"),
                   dlpack.tensor({{4294967295}, {7}}, "uint32"))
    product_agrees("int64 wraps", "matmul", dlpack.tensor({{2 ^ 62, 3}}, "int64"), dlpack.tensor({{4}, {-5}}, "int64"))
    product_agrees("uint64 wraps", "dot", dlpack.tensor({2 ^ 63, 2 ^ 62}, "uint64"), dlpack.tensor({2, 4}, "uint64"))
    product_agrees("int16 by uint16", "matmul", dlpack.tensor({{-30000, 2}}, "int16"),
                   dlpack.tensor({{60000}, {3}}, "uint16"))
    -- bool bytes other than 0 and 1 (a producer's 0/255 mask) are true
    local mask = dlpack.frombytes("\255\0\2\0", "bool", {2, 2})
    product_agrees("bool bytes", "matmul", mask, dlpack.frombytes("\0\7\0\0", "bool", {2, 2}))
    assert.are.equal(true, dlpack.dot(dlpack.frombytes("\0\9", "bool"):to("cuda:0"),
                                      dlpack.frombytes("\3\5", "bool"):to("cuda:0")))
  end)

  it("an empty sum gives zeros, an empty result stays empty", function()
    for _, dtype in ipairs({"float32", "float64", "float16", "int32", "uint64", "bool"}) do
      product_agrees("k = 0 " .. dtype, "matmul", dlpack.zeros({3, 0}, dtype), dlpack.zeros({0, 4}, dtype))
      product_agrees("k = 0 batched " .. dtype, "matmul", dlpack.zeros({2, 3, 0}, dtype), dlpack.zeros({0, 4}, dtype))
      product_agrees("dot k = 0 " .. dtype, "dot", dlpack.zeros({0}, dtype), dlpack.zeros({0}, dtype))
      product_agrees("m = 0 " .. dtype, "matmul", dlpack.zeros({0, 3}, dtype), dlpack.zeros({3, 2}, dtype))
      product_agrees("batch 0 " .. dtype, "matmul", dlpack.zeros({0, 2, 3}, dtype), dlpack.zeros({3, 2}, dtype))
    end
    local z = dlpack.matmul(dlpack.zeros({3, 0}, "float32", "cuda:0"), dlpack.zeros({0, 4}, "float32", "cuda:0"))
    assert.are.same({0, 0, 0, 0}, host(z)[1]:totable())
  end)

  it("float values agree with the CPU within rounding", function()
    for _, case in ipairs({{"float32", 1e-5}, {"float64", 1e-12}, {"float16", 1e-2}, {"bfloat16", 2e-2}}) do
      local dtype, rtol = case[1], case[2]
      local a, b = dlpack.rand({3, 17, 37}, dtype), dlpack.rand({37, 9}, dtype)
      product_agrees("rand " .. dtype, "matmul", a, b, nil, nil, rtol)
      product_agrees("rand transposed " .. dtype, "matmul", a, dlpack.rand({9, 37}, dtype), nil,
                     function(t) return t:transpose(1, 2) end, rtol)
      product_agrees("rand dot " .. dtype, "dot", dlpack.rand({300}, dtype), dlpack.rand({300}, dtype), nil, nil, rtol)
    end
  end)

  it("errors are the CPU's; operands on two devices raise naming both", function()
    local d = grid({2, 3}, "float32"):to("cuda:0")
    local h = grid({3, 2}, "float32")
    raises(function() return dlpack.matmul(d, h) end, "dlpack.matmul: operands on different devices: cuda:0 and cpu")
    raises(function() return h:matmul(d) end, "matmul: operands on different devices: cuda:0 and cpu")
    raises(function() return dlpack.dot(d, dlpack.zeros({3}, "float32", "cuda_host")) end,
           "operands on different devices: cuda:0 and cuda_host")
    if cuda.device_count() > 1 then
      raises(function() return dlpack.matmul(d, grid({3, 2}, "float32"):to("cuda:1")) end,
             "operands on different devices: cuda:0 and cuda:1")
    end
    local function same_error(fn, a, b)
      local want = support.raises_plain(function() return fn(a, b) end)
      local da = type(a) == "userdata" and a:to("cuda:0") or a
      local db = type(b) == "userdata" and b:to("cuda:0") or b
      local got = support.raises_plain(function() return fn(da, db) end)
      assert.are.equal(want:match(":%d+: (.*)$") or want, got:match(":%d+: (.*)$") or got)
    end
    same_error(dlpack.matmul, grid({2, 3}, "float32"), grid({4, 5}, "float32"))
    same_error(dlpack.matmul, grid({2, 2, 3}, "int32"), grid({3, 3, 4}, "int32"))
    same_error(dlpack.matmul, grid({2, 3}, "float32"), 2)
    same_error(dlpack.matmul, dlpack.zeros({}, "float32"), grid({3}, "float32"))
    same_error(dlpack.dot, grid({2, 2, 3}, "float32"), grid({3}, "float32"))
    same_error(dlpack.matmul, dlpack.zeros({2, 2}, "complex64"), dlpack.zeros({2, 2}, "complex64"))
    same_error(dlpack.matmul, dlpack.zeros({2, 2}, "float8_e4m3fn"), dlpack.zeros({2, 2}, "float8_e4m3fn"))
    local released = grid({2, 2}, "float32"):to("cuda:0")
    released:release()
    raises(function() return dlpack.matmul(released, d) end, "operand 1 was released")
  end)

  it("operands released right after the call are held until the product ran", function()
    local r
    do
      local a = grid({4, 5}, "float32"):to("cuda:0")
      local b = grid({5, 3}, "int64"):to("cuda:0")
      local c = grid({5, 3}, "float32"):to("cuda:0")
      r = {a:matmul(b), a:matmul(c)}
      a:release()
      b:release()
      c:release()
    end
    gc()
    same_result("held (kernel)", dlpack.matmul(grid({4, 5}, "float32"), grid({5, 3}, "int64")), r[1])
    same_result("held", dlpack.matmul(grid({4, 5}, "float32"), grid({5, 3}, "float32")), r[2])
  end)

  it("runs after the operands' pending work, on their stream", function()
    local s = cuda.Stream()
    for _, dtype in ipairs({"float32", "int32"}) do
      local a = grid({3, 4}, dtype):to({device = "cuda:0", stream = s}) -- queued on s
      local b = grid({4, 2}, dtype):to({device = "cuda:0", stream = s})
      same_result("after pending " .. dtype, dlpack.matmul(grid({3, 4}, dtype), grid({4, 2}, dtype)), a:matmul(b))
    end
    s:close()
  end)

  fake_only("cuBLAS handles: one per device, default math (no TF32), float32 sums", function()
    if not blas then
      assert.are.same({}, fake.cublas_handles(), "DLPACK_LUA_CUBLAS=none: cuBLAS is never called")
      return
    end
    local x = grid({2, 2}, "float32"):to("cuda:0")
    for _ = 1, 3 do x:matmul(x) end
    local per_device = {}
    for _, h in ipairs(fake.cublas_handles()) do
      if not h.destroyed then
        per_device[h.device] = (per_device[h.device] or 0) + 1
        assert.are.equal(16, h.math_mode, "CUBLAS_DEFAULT_MATH with CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION")
      end
    end
    assert.are.equal(1, per_device[0])
  end)

  -- on device 1, where no product ran before: the handle is made by the first product there
  blas_fake_it("a cuBLAS handle that cannot be made raises, naming cuBLAS and why, and nothing leaks", function()
    local a = grid({3, 4}, "float32"):to("cuda:1")
    local live = fake.live()
    fake.fail_next("cublasCreate_v2", 3)
    raises(function() return a:matmul(a:transpose(1, 2)) end,
           "matmul: cuBLAS (" .. blas .. ") on cuda:1: cublasCreate failed with CUBLAS_STATUS_ALLOC_FAILED (3); " ..
           "DLPACK_LUA_CUBLAS=none computes with the module's own kernel")
    fake.fail_next("cublasSetMathMode", 7)
    raises(function() return a:matmul(a:transpose(1, 2)) end,
           "cublasSetMathMode failed with CUBLAS_STATUS_INVALID_VALUE")
    local destroyed = 0
    for _, h in ipairs(fake.cublas_handles()) do destroyed = destroyed + (h.destroyed and 1 or 0) end
    assert.are.equal(1, destroyed, "the handle whose setup failed is destroyed")
    gc()
    fake.sync_all()
    gc()
    assert.are.equal(live.device, fake.live().device, "the results of the failed calls are freed")
    -- not remembered: the next product makes the handle
    same_result("after a failed create", dlpack.matmul(grid({3, 4}, "float32"), grid({4, 3}, "float32")),
                dlpack.matmul(a, grid({4, 3}, "float32"):to("cuda:1")):to("cuda:0"))
  end)

  fake_it("a product that fails to queue raises, and nothing leaks", function()
    local f = grid({3, 4}, "float32"):to("cuda:1")
    local i = grid({3, 4}, "int16"):to("cuda:1")
    local live = fake.live()
    fake.fail_next("cuModuleLoadData", 200) -- the first product of the kernel on this device
    raises(function() return i:matmul(i:transpose(1, 2)) end, "matmul: CUDA error 200")
    fake.fail_next("cuLaunchKernel", 1)
    raises(function() return dlpack.dot(i:narrow(1, 1, 1), i:narrow(1, 2, 1):transpose(1, 2)) end, "dot: CUDA error 1")
    if blas then
      fake.fail_next("cublasGemmEx", 13)
      raises(function() return f:matmul(f:transpose(1, 2)) end,
             "cublasGemmEx failed with CUBLAS_STATUS_EXECUTION_FAILED")
      fake.fail_next("cublasSetStream_v2", 1)
      raises(function() return f:matmul(f:transpose(1, 2)) end, "cublasSetStream failed")
      -- the second strided batch of two fails: the first is queued, and its operands held
      fake.fail_next("cublasGemmStridedBatchedEx", 14)
      local a, b = grid({2, 1, 3, 4}, "float32"):to("cuda:1"), grid({3, 4, 2}, "float32"):to("cuda:1")
      local before = fake.calls("cublasGemmStridedBatchedEx")
      raises(function() return dlpack.matmul(a, b) end, "CUBLAS_STATUS_INTERNAL_ERROR")
      assert.are.equal(before + 1, fake.calls("cublasGemmStridedBatchedEx"), "the first call failed: none more")
    else
      fake.fail_next("cuLaunchKernel", 2)
      raises(function() return f:matmul(f:transpose(1, 2)) end, "matmul: CUDA error 2")
    end
    gc()
    fake.sync_all()
    gc()
    assert.are.equal(live.device, fake.live().device, "the results of the failed calls are freed")
    same_result("after the failures", dlpack.matmul(grid({3, 4}, "int16"), grid({3, 4}, "int16"):transpose(1, 2)),
                i:matmul(i:transpose(1, 2)):to("cpu"):to("cuda:0"))
  end)

  -- last: it makes the handle of every device
  it("several lua_States on several threads multiply at once (one handle per device, one thread at a time)", function()
    local r = require("fabricate").run_threads([[
      local dlpack = require "dlpack"
      local _, index = ...
      local device = "cuda:" .. index % dlpack.cuda.device_count()
      for _, dtype in ipairs({"float32", "int32", "float16"}) do
        local a = (dlpack.arange(48) % 7 - 3):view({4, 12}):to(dtype)
        local b = (dlpack.arange(36) % 5):view({3, 12}):to(dtype):transpose(1, 2)
        local want = dlpack.matmul(a, b):tobytes()
        local da, db = a:to(device), b:contiguous():to(device)
        for _ = 1, 10 do
          assert(dlpack.matmul(da, db):to("cpu"):tobytes() == want, "wrong product on thread " .. index)
        end
      end
      return true
    ]], 8)
    for _, res in ipairs(r) do assert.is_true(res.ok, tostring(res.value)) end
  end)
end)

-- The reductions on CUDA tensors (src/compute/reduce.c plans once; the kernels of
-- src/compute/cuda/kernels.cu, families 28-31, run the plan), against the CPU path on the same
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
    local i64 = values("int64", 120):view({4, 30})
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
      -- integers into a narrower integer dtype: converting first or last wraps alike
      {"sum", i64, {dtype = "int32"}}, {"prod", i64, {dtype = "int16"}}, {"sum", u64, {dtype = "int8"}},
      {"prod", u64, {dtype = "uint32"}},
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
    assert.is_true(dlpack.equal(dev(a), dev(a:to("int64"))), "converted on the device first")
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
    -- broadcasting; complex operands (and complex against real) compute on the device too
    local row = dlpack.tensor({1, 2, 3}, "float32")
    local m = dlpack.tensor({{1, 2, 3}, {1, 2, 3.001}}, "float64")
    assert.are.equal(dlpack.allclose(m, row), dlpack.allclose(dev(m), dev(row)))
    assert.are.equal(dlpack.allclose(m, row, 1e-3), dlpack.allclose(dev(m), dev(row), 1e-3))
    local z = dlpack.frombytes(dlpack.tensor({1, 0, 2, 1e-9, 3, 0}, "float64"):tobytes(), "complex128", {3})
    local z64 = z:to("complex64")
    for _, pair in ipairs({{z, z64}, {z, row}, {z64, row}, {row, z}}) do
      for _, rtol in ipairs({1e-5, 1e-10, 0}) do
        assert.are.equal(dlpack.allclose(pair[1], pair[2], rtol), dlpack.allclose(dev(pair[1]), dev(pair[2]), rtol))
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

-- The more functions (docs/api.md, "More functions") on CUDA tensors: the new elementwise ones are
-- kernels of the one op table; the shape functions compose views, cat, where and copies, so each
-- must give the CPU's result on the device.
describe("more functions on CUDA tensors", function()
  local function dev(t) return t:to("cuda:0") end

  it("reciprocal of integers raises for a zero on the device too, and computes otherwise", function()
    local x = dlpack.tensor({1, -1, 2, 0}, "int32")
    raises(function() return dlpack.reciprocal(dev(x)) end, "reciprocal: integer division by zero")
    agrees("reciprocal int32", dlpack.reciprocal, dlpack.tensor({1, -1, 2, 7}, "int32"))
    agrees("square uint8", dlpack.square, dlpack.tensor({0, 3, 16, 255}, "uint8"))
    agrees("atan2 int8 uint8", dlpack.atan2, dlpack.tensor({1, -2, 3}, "int8"), dlpack.tensor({4, 5, 0}, "uint8"))
  end)

  it("softmax and log_softmax run on the device: the CPU's values within float rounding", function()
    local t = dlpack.tensor({{1, 2, 3, -1}, {0 / 0, 5, -1, 0}, {-math.huge, 0, 1, 2}}, "float32")
    for _, case in ipairs({{"float32", 2}, {"float32", 1}, {"float64", -1}, {"float16", 2}, {"int32", 2}}) do
      local x = case[1] == "int32" and dlpack.tensor({{1, 2}, {3, 4}}, "int32") or t:to(case[1])
      for _, name in ipairs({"softmax", "log_softmax"}) do
        local want = dlpack[name](x, case[2])
        local got = dlpack[name](x:to("cuda:0"), case[2])
        local what = name .. " " .. case[1] .. " dim " .. case[2]
        assert.are.equal("cuda:0", got.device, what)
        assert.are.equal(want.dtype, got.dtype, what)
        local tol = case[1] == "float16" and 1e-3 or 1e-5
        assert.is_true(dlpack.isclose(got:to("cpu"):to("float64"), want:to("float64"), tol, tol, true):all(), what)
      end
    end
    assert.are.same({0, 3}, dlpack.softmax(dlpack.empty({0, 3}, "float32", "cuda:0"), 2).shape)
    local one = dlpack.softmax(dlpack.tensor(3.0):to("cuda:0"), 1, {dtype = "float16"})
    assert.are.equal("float16", one.dtype)
    raises(function() return dlpack.softmax(dlpack.zeros({2}, "complex64", "cuda:0"), 1) end,
           "the result is a real float")
  end)

  it("norm runs on the device: the CPU's values, a Lua number over every element", function()
    local t = dlpack.tensor({{3, -4, 0}, {1, 2, -2}}, "float32")
    for _, ord in ipairs({false, 1, 2, math.huge, -math.huge, 0, 3}) do
      agrees("norm ord " .. tostring(ord), function(x) return dlpack.norm(x, ord or nil, 2) end, t)
    end
    agrees("norm fro", function(x) return dlpack.norm(x, "fro", {1, 2}, true) end, t)
    -- the norms of singular values: computed on the host in float64, the result copied to the device
    for _, ord in ipairs({2, -2, "nuc"}) do
      agrees("norm " .. ord, function(x) return dlpack.norm(x, ord, {2, 1}, true) end, t)
      agrees("norm " .. ord .. " batched", function(x) return dlpack.norm(x, ord, {1, 3}) end,
             dlpack.arange(24, "float64"):view(2, 3, 4))
    end
    for _, ord in ipairs({2, 1}) do -- a sum in another order on a GPU: within float32's rounding
      local want, got = dlpack.norm(t, ord == 1 and 1 or nil), dlpack.norm(t:to("cuda:0"), ord == 1 and 1 or nil)
      assert.are.equal("number", type(got))
      assert.is_true(math.abs(got - want) <= 1e-6 * want, tostring(got) .. " vs " .. tostring(want))
    end
  end)

  it("isclose gives the CPU's bool tensor, with equal_nan", function()
    local a = dlpack.tensor({1, 0 / 0, math.huge, 2, 1e-9}, "float64")
    local b = dlpack.tensor({1 + 1e-9, 0 / 0, math.huge, 3, 0}, "float32")
    agrees("isclose", dlpack.isclose, a, b)
    agrees("isclose rtol atol", function(x, y) return dlpack.isclose(x, y, 0.5, 0.1) end, a, b)
    agrees("isclose equal_nan", function(x, y) return dlpack.isclose(x, y, nil, nil, true) end, a, b)
    agrees("isclose broadcast", function(x) return dlpack.isclose(x, 2) end, a)
  end)

  it("views, tables of views and the shape functions give the CPU's values on the device", function()
    local t = dlpack.arange(24, "float32"):view(2, 3, 4)
    local m = dlpack.arange(12, "int32"):view(3, 4)
    agrees("T", function(x) return x.T:contiguous() end, t)
    agrees("t", function(x) return x:t():contiguous() end, m)
    agrees("flatten", function(x) return x:flatten(2) end, t)
    agrees("ravel of a transposed view", function(x) return x.T:ravel() end, t)
    agrees("diagonal", function(x) return x:diagonal(1):contiguous() end, m)
    for i = 1, 2 do
      agrees("split " .. i, function(x) return dlpack.split(x, 2, 3)[i]:contiguous() end, t)
      agrees("chunk " .. i, function(x) return dlpack.chunk(x, 2, -1)[i]:contiguous() end, t)
      agrees("unbind " .. i, function(x) return dlpack.unbind(x)[i]:contiguous() end, t)
    end
    agrees("tile", function(x) return dlpack.tile(x, 2, 1, 3) end, t)
    agrees("tile of a transposed view", function(x) return dlpack.tile(x.T, 2, 1) end, t)
    agrees("roll flat of a view, by 0", function(x) return dlpack.roll(x.T, 0) end, t)
    agrees("roll flat of a view", function(x) return dlpack.roll(x.T, 7) end, t)
    agrees("outer of sliced views", function(x) return dlpack.outer(x:slice(1, 1, -1, 2), x:flip()) end,
           dlpack.arange(6, "float32"))
    agrees("vstack and hstack of sliced views",
           function(x) return dlpack.vstack({x:slice(1, 1, -1, 2), dlpack.hstack({x:slice(1, 2, -1, 2)})}) end,
           dlpack.arange(6, "float32"))
    agrees("repeat", function(x) return dlpack["repeat"](x, {2, 2}) end, m)
    agrees("repeat_interleave", function(x) return dlpack.repeat_interleave(x, 3, 2) end, m)
    agrees("roll", function(x) return dlpack.roll(x, {1, -2}, {1, 3}) end, t)
    agrees("roll flat", function(x) return dlpack.roll(x, 5) end, t)
    agrees("tril", function(x) return dlpack.tril(x, 1) end, t)
    agrees("triu", function(x) return dlpack.triu(x, -1) end, m)
    agrees("triu bool", function(x) return dlpack.triu(x:bool()) end, m)
    agrees("diag of a vector", function(x) return dlpack.diag(x, -2) end, dlpack.arange(4, "float64"))
    agrees("diag of a matrix", function(x) return dlpack.diag(x, 1) end, m)
    agrees("outer", dlpack.outer, dlpack.arange(3, "int16"), dlpack.arange(4, "float32"))
    agrees("hstack", function(x, y) return dlpack.hstack({x, y}) end, m, m)
    agrees("vstack", function(x, y) return dlpack.vstack({x, y}) end, dlpack.arange(4), dlpack.arange(4))
    agrees("concatenate", function(x, y) return dlpack.concatenate({x, y}, 2) end, m, m)
    local a, b = dlpack.arange(24, "float64"):view(2, 3, 4), dlpack.arange(20, "float64"):view(4, 5)
    agrees("einsum batched", function(x, y) return dlpack.einsum("bij,jk->bki", x, y) end, a, b)
    agrees("einsum trace", function(x) return dlpack.einsum("ii->", x) end, dlpack.arange(9, "int64"):view(3, 3))
    agrees("einsum ellipsis", function(x, y) return dlpack.einsum("...j,j", x, y) end, a, dlpack.arange(4, "float64"))
    local i8 = dlpack.full({3, 4}, 100, "int8")
    agrees("einsum dtype=", function(x, y) return dlpack.einsum("ij,jk", x, y, {dtype = "int32"}) end, i8, i8:t())
    -- out= on the device: out takes part in the promotion (NumPy's), any layout, out aliasing an operand
    local function into_out(x, y)
      local out = dlpack.zeros({3, 3}, "int16", x.device):t()
      assert.are.equal(out, dlpack.einsum("ij,kj->ik", x, y, {out = out}))
      return out
    end
    agrees("einsum out=", into_out, i8, i8)
    agrees("einsum out = operand", function(x) return dlpack.einsum("ij->ji", x, {out = x}) end,
           dlpack.arange(9, "float64"):view(3, 3))
    local host_out = dlpack.zeros({4, 4}, "int8")
    raises(function() dlpack.einsum("ij,jk", i8:t():to("cuda:0"), i8:to("cuda:0"), {out = host_out}) end,
           "einsum: operands on different devices: cuda:0 and cpu")
    for _, name in ipairs({"float", "double", "half", "bfloat16", "long", "int", "short", "char", "byte", "bool"}) do
      agrees(name .. "()", function(x) return x[name](x) end, m)
    end
  end)
end)

-- Complex dtypes on the device: complex_rules.h's rules, the CPU's loops' too (but pow beyond its
-- exact cases, the C library's cpow on the CPU). On the fake driver the kernels are the CPU's
-- code: bit for bit, but for pow; on a GPU its math functions may differ in the last bits.
describe("complex dtypes on CUDA tensors", function()
  local INF, NAN = math.huge, 0 / 0
  -- a complex tensor of the pairs {re, im, re, im, ...}
  local function cplx(dtype, parts, shape)
    local real = dtype == "complex64" and "float32" or "float64"
    return dlpack.frombytes(dlpack.tensor(parts, real):tobytes(), dtype, shape or {#parts // 2})
  end
  local PARTS = {1, 2, -3, 0.5, 0, 0, -0.0, -0.0, 4, 0, 0, -2, 2.5, -1.5, 1e30, 1, -7, 100, 0.25, 95,
                 INF, 1, -INF, 2, 3, INF, NAN, 1, 1, NAN, INF, INF, -INF, NAN, 1e-40, 3e-39, 0.5, 1e-30, -1, 0}
  local X, Y = {}, {}
  for _, dtype in ipairs({"complex64", "complex128"}) do
    X[dtype] = cplx(dtype, PARTS)
    local rev = {}
    for i = #PARTS - 1, 1, -2 do rev[#rev + 1], rev[#rev + 2] = PARTS[i], PARTS[i + 1] end
    Y[dtype] = cplx(dtype, rev)
  end
  -- the pairs of a result (any dtype) as a flat list of float64 values
  local function parts(t)
    t = t:to("cpu")
    local bytes = t.dtype:match("^complex") and t:to("complex128"):tobytes() or t:to("float64"):tobytes()
    local out = {}
    for i = 1, #bytes // 8 do out[i] = string.unpack("d", bytes, (i - 1) * 8 + 1) end
    return out
  end
  local EXACT = {add = true, sub = true, mul = true, div = true, eq = true, ne = true, neg = true, round = true,
                 isnan = true, isinf = true, isfinite = true, logical_and = true, logical_or = true,
                 logical_xor = true, logical_not = true, where = true}
  -- fn on device copies against fn on the host: bit for bit on the fake (pow: within a few units in
  -- the last place of the magnitude), the same NaN and infinities, and on a GPU alike for the math
  local function agrees_c(what, fn, ...)
    local args, dev = {...}, {}
    for i, a in ipairs(args) do dev[i] = type(a) == "userdata" and a:to("cuda:0") or a end
    local okw, want = pcall(fn, table.unpack(args))
    local okg, got = pcall(fn, table.unpack(dev))
    assert.are.equal(okw, okg, what .. ": " .. tostring(okw and got or want))
    if not okw then
      assert.are.equal(want, got, what)
      return
    end
    assert.are.equal("cuda:0", got.device, what)
    assert.are.equal(want.dtype, got.dtype, what)
    assert.are.same(want.shape, got.shape, what)
    local op = what:match("^([%w_]+)")
    if (probe.kind ~= "gpu" or EXACT[op]) and op ~= "pow" then
      assert.are.equal(want:tobytes(), host(got):tobytes(), what)
      return
    end
    -- exp(b log a) carries log's rounding times |b log a| (up to about 100 here): pow's bound is wider
    local eps = (want.dtype == "complex64" or want.dtype == "float32") and 2 ^ -20 or 2 ^ -48
    if op == "pow" then eps = eps * 256 end
    local g, w = parts(got), parts(want)
    for i = 1, #w do
      local mag = math.max(math.abs(w[i]), math.abs(w[i % 2 == 1 and i + 1 or i - 1] or 0))
      local ok = (g[i] ~= g[i] and w[i] ~= w[i]) or g[i] == w[i] or math.abs(g[i] - w[i]) <= eps * mag
      assert.is_true(ok, what .. " at " .. i .. ": " .. tostring(g[i]) .. " vs " .. tostring(w[i]))
    end
  end

  it("log2, log10, reciprocal and square agree with the CPU; asin acos atan sinh cosh raise on the device", function()
    for _, dtype in ipairs({"complex64", "complex128"}) do
      for _, op in ipairs({"log2", "log10", "reciprocal", "square"}) do
        agrees_c(op .. " " .. dtype, dlpack[op], X[dtype])
      end
      for _, op in ipairs({"asin", "acos", "atan", "sinh", "cosh"}) do
        local cpu = dlpack[op](X[dtype])
        assert.are.equal(dtype, cpu.dtype)
        raises(function() return dlpack[op](X[dtype]:to("cuda:0")) end, op .. ": does not run on CUDA devices yet")
      end
    end
  end)

  it("every binary function agrees with the CPU; the ordering ones raise alike", function()
    for _, dtype in ipairs({"complex64", "complex128"}) do
      for _, op in ipairs({"add", "sub", "mul", "div", "pow", "eq", "ne", "logical_and", "logical_or", "logical_xor",
                           "lt", "le", "gt", "ge", "maximum", "minimum", "idiv", "mod", "band", "shl"}) do
        agrees_c(op .. " " .. dtype, dlpack[op], X[dtype], Y[dtype])
      end
      -- integral powers by squaring (exact on both), 0 ^ b, z ^ 0, fractional ones
      local e = cplx(dtype, {2, 0, -3, 0, 0, 0, 0.5, 0, 1, 1, 0, 0, -1, 0, 7, 0, 0.5, -2, 3, 0, 2, 0, 1, 0, 98, 0,
                             -2, 0, 1.5, 0, 0, 2, 5, 0, 2, 0})
      agrees_c("pow exponents " .. dtype, dlpack.pow, cplx(dtype, {1.5, -0.5, 2, 1}, {1, 2}):expand(9, 2):reshape(18),
               e)
      agrees_c("pow of zero " .. dtype, dlpack.pow, dlpack.zeros({18}, dtype), e)
    end
  end)

  it("every unary function agrees with the CPU, special values included; the others raise alike", function()
    for _, dtype in ipairs({"complex64", "complex128"}) do
      for _, op in ipairs({"neg", "abs", "sign", "sqrt", "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh",
                           "round", "isnan", "isinf", "isfinite", "logical_not", "floor", "ceil", "trunc", "sigmoid",
                           "bnot"}) do
        agrees_c(op .. " " .. dtype, dlpack[op], X[dtype])
        agrees_c(op .. " of Y " .. dtype, dlpack[op], Y[dtype])
      end
    end
    agrees_c("clamp", dlpack.clamp, X.complex64, 0, 1)
  end)

  it("mixed real and complex operands promote as on the CPU; weak scalars; operators", function()
    local z64, z128 = X.complex64, X.complex128
    for _, dtype in ipairs({"bool", "int8", "int64", "uint8", "uint64", "float16", "bfloat16", "float32", "float64"}) do
      local r = dlpack.tensor({1, 0, -2, 3, 0.5, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, "float64"):to(dtype)
      agrees_c("add " .. dtype .. " c64", dlpack.add, r, z64)
      agrees_c("mul c128 " .. dtype, dlpack.mul, z128, r)
      agrees_c("div " .. dtype .. " c64", dlpack.div, r, z64)
      agrees_c("eq " .. dtype, dlpack.eq, r, z64)
    end
    agrees_c("add c64 c128", dlpack.add, z64, z128)
    agrees_c("mul weak", function(a) return a * 0.5 end, z64)
    agrees_c("sub weak left", function(a) return 2 - a end, z64)
    agrees_c("pow weak 2", function(a) return a ^ 2 end, z128)
    agrees_c("pow weak 0.5", function(a) return a ^ 0.5 end, z64)
    agrees_c("div weak true", function(a) return a / true end, z64)
    agrees_c("neg operator", function(a) return -a end, z128)
    agrees_c("add bool weak", function(a) return dlpack.add(a, false) end, z64)
  end)

  it("broadcasting, strides, negative strides, empty and 0-d operands", function()
    local m = cplx("complex128", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 3})
    local row = cplx("complex64", {0.5, -1, 2, 0, -3, 3}, {3})
    agrees_c("add broadcast", dlpack.add, m, row)
    agrees_c("mul transposed", dlpack.mul, m:permute(2, 1), cplx("complex128", {1, 1, 2, -1}, {2}))
    agrees_c("sqrt flipped", function(a) return dlpack.sqrt(a:flip(1)) end, m)
    agrees_c("exp sliced", function(a) return dlpack.exp(a:slice(2, 1, 3, 2)) end, m)
    agrees_c("div flipped both", function(a, b) return dlpack.div(a:flip({1, 2}), b) end, m, row)
    agrees_c("add empty", dlpack.add, dlpack.zeros({0, 3}, "complex64"), row)
    agrees_c("log 0-d", dlpack.log, cplx("complex64", {-1, 0}, {}))
    agrees_c("mul 0-d and 1-d", dlpack.mul, cplx("complex128", {0, 1}, {}), row)
    agrees_c("expand", function(a) return dlpack.tanh(a:view(1, 3):expand(4, 3)) end, row)
  end)

  it("out=, dtype=, in place, and out aliasing an input on the device", function()
    local a, b = X.complex64, Y.complex64
    for _, odt in ipairs({"complex64", "complex128", "float32", "float64", "int32", "bool", "float16"}) do
      agrees_c("mul out " .. odt, function(x, y) return dlpack.mul(x, y, {out = dlpack.zeros({20}, odt, x.device)}) end,
               a, b)
    end
    agrees_c("add dtype complex128", function(x, y) return dlpack.add(x, y, {dtype = "complex128"}) end,
             dlpack.tensor({1, 2, 3}, "float32"), dlpack.tensor({5, 1, -1}, "int16"))
    agrees_c("abs dtype float64", function(x) return dlpack.abs(x, {dtype = "float64"}) end, a)
    agrees_c("abs dtype complex128", function(x) return dlpack.abs(x, {dtype = "complex128"}) end, a)
    agrees_c("add_", function(x, y) return x:clone():add_(y) end, a, b)
    agrees_c("mul_ weak", function(x) return x:clone():mul_(2) end, a)
    agrees_c("sqrt_", function(x) return x:clone():sqrt_() end, X.complex128)
    agrees_c("float add_ complex raises", function(x, y) return x:add_(y) end, dlpack.zeros({20}, "float32"), a)
    agrees_c("add_ own flip", function(x) local c = x:clone() return c:add_(c:flip(1)) end, a)
    agrees_c("mul out = input", function(x, y) return dlpack.mul(x, y, {out = x}) end, X.complex128:clone(),
             Y.complex128)
    agrees_c("sub out = flipped input", function(x) return dlpack.sub(x, x:flip(1), {out = x}) end,
             X.complex128:clone())
  end)

  it("hostile option tables raise as on the CPU", function()
    local bad_index = setmetatable({}, {__index = function(_, k) error("no key " .. tostring(k)) end})
    local bad_dtype = {dtype = setmetatable({}, {__tostring = function() return "complex64" end})}
    local wrong_out = {out = "not a tensor"}
    for _, opts in ipairs({bad_index, bad_dtype, wrong_out, {dtype = "int4"}, {dtype = "float8_e4m3fn"},
                           {unknown = true}}) do
      agrees_c("add hostile", function(x, y) return dlpack.add(x, y, opts) end, X.complex64, Y.complex64)
    end
    agrees_c("out of another shape", function(x, y)
      return dlpack.add(x, y, {out = dlpack.zeros({3}, "complex64", x.device)})
    end, X.complex64, Y.complex64)
    agrees_c("out an expanded view", function(x, y)
      return dlpack.add(x, y, {out = dlpack.zeros({1}, "complex64", x.device):expand(20)})
    end, X.complex64, Y.complex64)
    local cpu_out = dlpack.zeros({20}, "complex64")
    raises(function() return dlpack.add(X.complex64:to("cuda:0"), X.complex64:to("cuda:0"), {out = cpu_out}) end,
           "operands on different devices: cuda:0 and cpu")
  end)

  it("where, masked_fill, cat and stack of complex and mixed operands", function()
    local mask = dlpack.tensor({true, false, true, true, false, false, true, false, true, false, true, false, true,
                                false, true, false, true, true, false, false})
    agrees_c("where", dlpack.where, mask, X.complex64, Y.complex128)
    agrees_c("where scalar", dlpack.where, mask, X.complex64, 2.5)
    agrees_c("where real", dlpack.where, mask, dlpack.arange(20, "float32"), Y.complex64)
    agrees_c("masked_fill", function(x, m) return x:clone():masked_fill(m, -1.5) end, X.complex128, mask)
    agrees_c("cat", function(x, y, z) return dlpack.cat({x, y, z}) end, X.complex64, Y.complex128,
             dlpack.arange(3, "int32"))
    agrees_c("stack", function(x, y) return dlpack.stack({x, y}, 2) end, X.complex64, dlpack.arange(20, "float64"))
  end)

  it("conversions between complex and every real dtype run on the device", function()
    local reals = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                   "bfloat16", "float32", "float64"}
    for _, c in ipairs({"complex64", "complex128"}) do
      local z = cplx(c, {1.5, 2, -3.75, 0, 0, -1, 300.5, 0, -1e10, 5, 70000, 0, 0.1, 0.2, NAN, 1, INF, 0, 0, 0})
      for _, r in ipairs(reals) do
        agrees_c(c .. " to " .. r, function(t) return t:to(r) end, z)
        local v = dlpack.tensor(VALUES[r] or {1, -2, 3, 0.5, 0, 7}, r)
        agrees_c(r .. " to " .. c, function(t) return t:to(c) end, v)
        agrees_c(r .. " to " .. c .. " flipped", function(t) return t:flip(1):to(c) end, v)
        agrees_c("copy " .. c .. " into " .. r, function(t) return dlpack.zeros({10}, r, t.device):copy(t) end, z)
      end
      local other = c == "complex64" and "complex128" or "complex64"
      agrees_c(c .. " to " .. other, function(t) return t:to(other) end, z)
      agrees_c(c .. " strided to " .. other, function(t) return t:slice(1, 1, 10, 3):to(other) end, z)
      agrees_c(c .. " copy into a transposed view", function(t)
        local d = dlpack.zeros({5, 2}, other, t.device)
        d.T:copy(t:view(2, 5))
        return d
      end, z)
    end
  end)

  it("equal and allclose of complex tensors run on the device", function()
    for _, dtype in ipairs({"complex64", "complex128"}) do
      local a = cplx(dtype, {1, 2, 3, 4, INF, 0, 0, -1})
      local b = cplx(dtype, {1, 2, 3, 4.0000001, INF, 0, 0, -1})
      local c = cplx(dtype, {1, 2, 3, 5, INF, 0, 0, -1})
      local n = cplx(dtype, {1, 2, NAN, 4, INF, 0, 0, -1})
      local d = function(t) return t:to("cuda:0") end
      for _, pair in ipairs({{a, a}, {a, b}, {a, c}, {n, n}, {a, dlpack.tensor({1, 3, 0, 0}, "float32")}}) do
        assert.are.equal(dlpack.equal(pair[1], pair[2]), dlpack.equal(d(pair[1]), d(pair[2])))
        assert.are.equal(dlpack.allclose(pair[1], pair[2]), dlpack.allclose(d(pair[1]), d(pair[2])))
        assert.are.equal(dlpack.allclose(pair[1], pair[2], 0, 1e-3),
                         dlpack.allclose(d(pair[1]), d(pair[2]), 0, 1e-3))
      end
      assert.is_true(dlpack.allclose(d(a), d(b)))
      assert.is_false(dlpack.allclose(d(a), d(c)))
      assert.is_false(dlpack.equal(d(n), d(n)))
    end
  end)
end)


-- ---------------------------------------------------------------------------------------------
-- cumsum and cumprod (src/compute/scan.c, kernels.cu family 46) and shuffle (src/compute/random.c)
-- on CUDA tensors: the CPU's bits (each line scanned in the CPU's order), the CPU's permutation
-- ---------------------------------------------------------------------------------------------
describe("scans and shuffle on CUDA tensors", function()
  local SCAN_DTYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                       "bfloat16", "float32", "float64", "complex64", "complex128"}
  -- values of each dtype for a shape: small integers with signs (products wrap in the narrow
  -- dtypes, sums round in float16), some zeros; complex ones with both parts set
  local function sample(dtype, shape, seed)
    dlpack.manual_seed(seed or 7)
    local x = dlpack.randint(-4, 5, shape, "int64"):to("float64") * 0.75
    if dtype == "bool" then return dlpack.gt(x, 0) end
    if dtype:match("^complex") then
      local real = dtype == "complex64" and "float32" or "float64"
      local re, im = x:to(real), (x:flip(1) * 0.5):to(real)
      return dlpack.frombytes(dlpack.stack({re, im}, x.ndim + 1):tobytes(), dtype, shape)
    end
    if dtype:match("int") then return (x * 4):to(dtype) end
    return x:to(dtype)
  end
  -- fn on the CPU tensor and on its CUDA copy (made by to_device from the copy), the same bits
  local function scans_alike(what, fn, x, to_device)
    local d = x:to("cuda:0")
    if to_device then x, d = to_device(x), to_device(d) end
    local ok_w, want = pcall(fn, x)
    local ok_g, got = pcall(fn, d)
    assert.are.equal(ok_w, ok_g, what .. ": " .. tostring(ok_w and got or want))
    if not ok_w then
      assert.are.equal(want, got, what)
      return
    end
    assert.are.equal("cuda:0", tostring(got.device), what)
    assert.are.equal(want.dtype, got.dtype, what)
    assert.are.same(want.shape, got.shape, what)
    assert.are.equal(want:tobytes(), host(got):tobytes(), what)
  end

  it("cumsum and cumprod give the CPU's bits for every dtype and dim, and without dim", function()
    for _, dtype in ipairs(SCAN_DTYPES) do
      local x = sample(dtype, {3, 4, 5})
      for _, fn in ipairs({"cumsum", "cumprod"}) do
        for _, dim in ipairs({1, 2, 3, -1, -2, -3}) do
          scans_alike(fn .. " " .. dtype .. " dim " .. dim, function(t) return dlpack[fn](t, dim) end, x)
          scans_alike(fn .. " method " .. dtype .. " dim " .. dim, function(t) return t[fn](t, dim) end, x)
        end
        scans_alike(fn .. " " .. dtype .. " flat", function(t) return dlpack[fn](t) end, x)
        scans_alike(fn .. " " .. dtype .. " 1-d", function(t) return dlpack[fn](t) end, x:view({60}))
        local one = x:view({60}):narrow(1, 5, 1):view({})
        assert.are.equal(0, one.ndim)
        scans_alike(fn .. " " .. dtype .. " 0-d", function(t) return dlpack[fn](t, 1) end, one)
        scans_alike(fn .. " " .. dtype .. " 0-d flat", function(t) return dlpack[fn](t) end, one)
      end
    end
  end)

  it("strided, flipped, expanded, narrowed and misaligned-looking views scan as the CPU scans them", function()
    local views = {
      function(t) return t:transpose(1, 3) end,
      function(t) return t:flip(2) end,
      function(t) return t:narrow(3, 2, 3):transpose(1, 2) end,
      function(t) return t:narrow(1, 2, 1):expand({4, 4, 5}) end,
      function(t) return t:permute({2, 3, 1}):flip(1) end,
      function(t) return t:view({60}):narrow(1, 3, 40):view({8, 5}) end,
    }
    for _, dtype in ipairs({"float32", "float16", "bfloat16", "int8", "uint64", "complex128", "bool"}) do
      local x = sample(dtype, {3, 4, 5}, 11)
      for v, view in ipairs(views) do
        for _, fn in ipairs({"cumsum", "cumprod"}) do
          scans_alike(fn .. " " .. dtype .. " view " .. v .. " flat", function(t) return dlpack[fn](t) end, x, view)
          for dim = 1, view(x).ndim do
            local what = fn .. " " .. dtype .. " view " .. v .. " dim " .. dim
            scans_alike(what, function(t) return dlpack[fn](t, dim) end, x, view)
          end
        end
      end
    end
  end)

  it("empty tensors, long lines (float16 saturating as on the CPU) and lines of one element", function()
    for _, shape in ipairs({{0}, {0, 3}, {3, 0}, {2, 0, 4}}) do
      for _, dtype in ipairs({"float32", "int8", "bool", "complex64"}) do
        local e = dlpack.zeros(shape, dtype)
        for dim = 1, #shape do
          scans_alike("cumsum empty dim " .. dim, function(t) return t:cumsum(dim) end, e)
          scans_alike("cumprod empty dim " .. dim, function(t) return t:cumprod(dim) end, e)
        end
        scans_alike("cumsum empty flat", function(t) return t:cumsum() end, e)
      end
    end
    local huge = dlpack.empty({0, 2 ^ 62}, "float32", "cuda:0")
    assert.are.same({0}, huge:cumsum().shape)
    assert.are.same({0, 2 ^ 62}, huge:cumprod(2).shape)
    local h = dlpack.full({3000}, 1, "float16")
    scans_alike("float16 ones", function(t) return t:cumsum(1) end, h)
    assert.are.equal(2048, host(h:to("cuda:0"):cumsum(1)):totable()[3000])
    scans_alike("bfloat16 long", function(t) return t:cumsum(1) end, sample("bfloat16", {2, 2500}, 3):view({5000}))
    scans_alike("float32 lines", function(t) return t:cumsum(1) end, dlpack.rand({2047, 3}, "float32"))
    scans_alike("float64 rows", function(t) return t:cumprod(2) end, dlpack.rand({300, 7}, "float64") + 0.5)
    scans_alike("one element lines", function(t) return t:cumsum(2) end, sample("int32", {6, 1}))
  end)

  -- launches of the calls fn makes (the fake's count), nil on a GPU
  local function launches(fn)
    if not fake then return nil, fn() end
    fake.sync_all()
    local before = fake.live().launches
    local r = fn()
    fake.sync_all() -- the fake counts a kernel when it runs
    return fake.live().launches - before, r
  end

  it("few long lines are scanned in chunks: integers and bool the CPU's bits, floats within the bound", function()
    -- a line of 2048 elements or more, in fewer than 16384 lines: chunks of 1024, their totals, the join
    for _, dtype in ipairs({"int8", "int64", "uint16", "uint64", "bool"}) do
      local x = sample(dtype, {2, 2500}, 9)
      for _, fn in ipairs({"cumsum", "cumprod"}) do
        scans_alike(fn .. " " .. dtype .. " chunked rows", function(t) return dlpack[fn](t, 2) end, x)
        scans_alike(fn .. " " .. dtype .. " chunked columns", function(t) return dlpack[fn](t, 1) end, x:t())
        scans_alike(fn .. " " .. dtype .. " chunked flat", function(t) return dlpack[fn](t) end, x:flip(2))
        scans_alike(fn .. " " .. dtype .. " chunked, dtype", function(t) return dlpack[fn](t, 2, {dtype = "int32"}) end,
                    x)
      end
    end
    local ones, ones_short, halves = dlpack.ones({3000}, "int64", "cuda:0"), dlpack.ones({2047}, "int64", "cuda:0"),
                                     dlpack.ones({3000}, "float16", "cuda:0")
    local n, r = launches(function() return dlpack.cumsum(ones, 1) end)
    if n then assert.are.equal(4, n) end -- the chunks, their totals, the join (and the copy)
    assert.are.equal(3000, host(r):totable()[3000])
    n = launches(function() return dlpack.cumsum(ones_short, 1) end)
    if n then assert.are.equal(2, n) end -- one thread for the line
    n = launches(function() return dlpack.cumsum(halves, 1) end)
    if n then assert.are.equal(2, n) end -- float16 and bfloat16: always whole lines
    -- a line of 2^21 + 5: the totals themselves chunked (two levels)
    local big = dlpack.arange(2 ^ 21 + 5, "int64"):to("uint8")
    local on_device = big:to("cuda:0")
    n, r = launches(function() return on_device:cumsum() end)
    if n then assert.are.equal(6, n) end
    assert.are.equal(big:cumsum():tobytes(), host(r):tobytes())
    -- floats: element i of a line (1-based) within 2 i u sum(|x_j|, j <= i) of the CPU's sum, and
    -- within 2 i u |p_i| of its product p_i (complex: 2 i 3u |p_i|), u the dtype's unit roundoff
    local U = {float32 = 2 ^ -24, float64 = 2 ^ -53, complex64 = 2 ^ -24, complex128 = 2 ^ -53}
    local function within(what, want, got, bound)
      local w, g, b = want:to("complex128"):tobytes(), got:to("cpu"):to("complex128"):tobytes(), bound:tobytes()
      local i, count = 0, #w // 16
      for k = 1, count do
        local wr, wi = string.unpack("dd", w, (k - 1) * 16 + 1)
        local gr, gi = string.unpack("dd", g, (k - 1) * 16 + 1)
        local lim = string.unpack("d", b, (k - 1) * 8 + 1)
        local d = math.sqrt((wr - gr) ^ 2 + (wi - gi) ^ 2)
        assert.is_true(d <= lim, what .. " at " .. k .. ": " .. d .. " > " .. lim)
        if d > 0 then i = i + 1 end
      end
      return i
    end
    for _, dtype in ipairs({"float32", "float64", "complex64", "complex128"}) do
      local u = U[dtype]
      dlpack.manual_seed(5)
      local x = (dlpack.rand({3, 3000}, "float64") - 0.3):to(dtype)
      if dtype:match("^complex") then x = x + sample(dtype, {3, 3000}, 4) * 0.01 end
      local pos = dlpack.arange(1, 3001, "float64"):view({1, 3000})
      local abs = dlpack.abs(x):to("float64")
      local want, got = x:cumsum(2), x:to("cuda:0"):cumsum(2)
      local differ = within("cumsum " .. dtype, want, got, abs:cumsum(2) * pos * (2 * u))
      assert.is_true(dtype:match("^complex") ~= nil or differ > 0) -- the bound is exercised
      local f = (dlpack.rand({3, 3000}, "float64") * 0.02 + 0.99):to(dtype)
      local prods = f:cumprod(2)
      local k = dtype:match("^complex") and 3 or 1
      within("cumprod " .. dtype, prods, f:to("cuda:0"):cumprod(2),
             dlpack.abs(prods):to("float64") * pos * (2 * k * u) + 1e-300)
    end
  end)

  it("dtype= and out= as on the CPU: conversions, same_kind casting, strided and aliasing out", function()
    local x = sample("int16", {4, 5})
    for _, dtype in ipairs({"int8", "uint8", "int32", "float16", "bfloat16", "float32", "float64", "complex64",
                            "bool", "uint64"}) do
      scans_alike("cumsum dtype " .. dtype, function(t) return t:cumsum(2, {dtype = dtype}) end, x)
      scans_alike("cumprod dtype " .. dtype, function(t) return dlpack.cumprod(t, 1, {dtype = dtype}) end, x)
      scans_alike("cumsum flat dtype " .. dtype, function(t) return t:cumsum(nil, {dtype = dtype}) end, x:t())
      scans_alike("cumsum opts only " .. dtype, function(t) return t:cumsum({dtype = dtype}) end, x)
    end
    scans_alike("complex to float", function(t) return t:cumsum(1, {dtype = "float32"}) end, sample("complex64", {3}))
    local outs = {
      function(t) local o = dlpack.zeros({4, 5}, "float64", t.device); t:cumsum(2, {out = o}); return o end,
      function(t) local o = dlpack.zeros({5, 4}, "float32", t.device):t(); t:cumprod(1, {out = o}); return o end,
      function(t) local o = dlpack.zeros({20}, "int64", t.device); t:cumsum(nil, {out = o}); return o end,
      function(t) local f = t:to("float32"); return f:cumsum(2, {out = f}) end, -- out is the input
      function(t) local f = t:to("int32"); dlpack.cumsum(f:flip(1), 1, {out = f}); return f end,
      function(t) local f = t:to("int64"); local r = f:cumprod(1, {out = f:t():t()}); return r end,
      function(t) local o = dlpack.zeros({4, 5}, "float16", t.device); t:cumsum(1, {dtype = "float32", out = o})
        return o end,
    }
    for i, case in ipairs(outs) do scans_alike("out case " .. i, case, x) end
    local d = x:to("cuda:0")
    local o = dlpack.zeros({4, 5}, "int64", "cuda:0")
    assert.are.equal(o, d:cumsum(1, {out = o}))
    raises(function() return d:cumsum(1, {out = dlpack.zeros({5, 4}, "int64", "cuda:0")}) end,
           "dlpack.cumsum: out has shape {5, 4}, the result has shape {4, 5}")
    raises(function() return d:cumsum(1, {out = dlpack.zeros({4, 5}, "int64")}) end,
           "dlpack.cumsum: operands on different devices: cuda:0 and cpu")
    raises(function() return x:cumprod(1, {out = dlpack.zeros({4, 5}, "int64", "cuda:0")}) end,
           "dlpack.cumprod: operands on different devices: cuda:0 and cpu")
    raises(function() return d:to("float32"):cumsum(1, {out = dlpack.zeros({4, 5}, "int32", "cuda:0")}) end,
           "cannot write the float32 result into out of dtype int32")
    raises(function() return d:cumsum(1, {keepdim = true}) end, "unknown option 'keepdim'")
    raises(function() return d:cumsum(3) end, "dimension 3 out of range")
    if cuda.device_count() > 1 then
      raises(function() return d:cumsum(1, {out = dlpack.zeros({4, 5}, "int64", "cuda:1")}) end,
             "operands on different devices: cuda:0 and cuda:1")
    end
  end)

  it("shuffle draws the CPU's permutation and gathers the slices on the device", function()
    local cases = {
      {"int64", {6}}, {"float32", {5, 3}}, {"complex128", {4, 2, 3}}, {"bool", {7, 2}}, {"float16", {3, 4}},
      {"uint8", {9}}, {"bfloat16", {1, 5}},
    }
    for _, case in ipairs(cases) do
      local x = sample(case[1], case[2], 5)
      for v, view in ipairs({function(t) return t end, function(t) return t:flip(1) end,
                             function(t) return x.ndim > 1 and t:transpose(1, x.ndim) or t:narrow(1, 2, 3) end}) do
        dlpack.manual_seed(42 + v)
        local want = dlpack.shuffle(view(x))
        local after_want = dlpack.rand({3}):tobytes()
        dlpack.manual_seed(42 + v)
        local got = view(x:to("cuda:0")):shuffle()
        local after_got = dlpack.rand({3}):tobytes() -- the generator moved as far
        assert.are.equal("cuda:0", tostring(got.device))
        assert.are.equal(want.dtype, got.dtype)
        assert.are.same(want.shape, got.shape)
        assert.is_true(got:is_contiguous())
        assert.are.equal(want:tobytes(), host(got):tobytes(), case[1] .. " view " .. v)
        assert.are.equal(after_want, after_got)
      end
    end
    for _, shape in ipairs({{0}, {0, 5}, {3, 0}}) do
      local e = dlpack.zeros(shape, "float32", "cuda:0")
      dlpack.manual_seed(1)
      local before = dlpack.rand({2}):tobytes()
      dlpack.manual_seed(1)
      assert.are.same(shape, e:shuffle().shape)
      assert.are.equal(before, dlpack.rand({2}):tobytes()) -- nothing drawn
    end
    assert.are.same({2 ^ 62, 0}, dlpack.empty({2 ^ 62, 0}, "int8", "cuda:0"):shuffle().shape)
    raises(function() return dlpack.shuffle(dlpack.zeros({}, "float32", "cuda:0")) end, "0-d tensor")
    local fp8 = dlpack.frombytes("\1\2\3\4\5\6\7\8", "float8_e4m3fn", {4, 2}) -- one byte each: moved as bytes
    dlpack.manual_seed(9)
    local want = fp8:shuffle()
    dlpack.manual_seed(9)
    assert.are.equal(want:tobytes(), host(fp8:to("cuda:0"):shuffle()):tobytes())
    raises(function() return dlpack.zeros({4, 2}, "float4_e2m1fn"):to("cuda:0"):shuffle() end,
           'dlpack.shuffle: float4_e2m1fn is not shuffled on CUDA devices (copy to the host with t:to("cpu"))')
    local r = dlpack.zeros({3}, "float32", "cuda:0")
    r:release()
    raises(function() return dlpack.shuffle(r) end, "released")
  end)

  it("finalizers that release the input or out while the result is allocated: an error or the CPU's result",
    function()
      if not fake then return pending("needs the fake driver's counters") end
      local base = dlpack.arange(12, "float32"):view({3, 4})
      local dtypes = {"int8", "float16", "float32", "int64", "bool", "complex64"}
      finalizer_rounds(120, function(round)
        local pool, cpu = {}, {}
        for i = 1, 3 do
          cpu[i] = base:to(dtypes[(round * i) % #dtypes + 1])
          pool[i] = cpu[i]:to("cuda:0")
          if (round + i) % 3 == 0 then pool[i], cpu[i] = pool[i]:flip(1), cpu[i]:flip(1) end
        end
        pool[4], cpu[4] = dlpack.zeros({3, 4}, "float64", "cuda:0"), dlpack.zeros({3, 4}, "float64")
        return pool, cpu, pool[round % 4 + 1]
      end, function(round)
        return {
          function(t) return dlpack.cumsum(t[1], 2) end,
          function(t) return dlpack.cumprod(t[2]) end,
          function(t) return dlpack.cumsum(t[3], 1, {out = t[4]}) end,
          function(t) return dlpack.cumprod(t[1]:t(), 1, {dtype = "float32"}) end,
          function(t) dlpack.manual_seed(round); return t[2]:shuffle() end,
        }
      end)
    end)
end)

describe("sorting on CUDA tensors", function()
  -- values with repeats (stability), NaN, -0.0 and 0.0, infinities, in every sortable dtype
  local function data(dtype, n, seed)
    local pool = {}
    for _, v in ipairs(VALUES[dtype]) do pool[#pool + 1] = v end
    if dtype:match("^b?float") then
      local nan, negzero = 0 / 0, -(0.0 * 1)
      pool[#pool + 1], pool[#pool + 2], pool[#pool + 3], pool[#pool + 4] = nan, negzero, math.huge, -math.huge
    end
    local list, x = {}, seed
    for i = 1, n do
      x = (x * 1103515245 + 12345) % 2147483648
      list[i] = pool[x % #pool + 1]
    end
    return dlpack.tensor(list, dtype)
  end

  -- every result of fn on the device, against fn on the host: same dtype, shape and bytes
  local function same(what, fn, t)
    local want = {fn(t)}
    local got = {fn(t:to("cuda:0"))}
    assert.are.equal(#want, #got, what)
    for i = 1, #want do
      assert.are.equal("cuda:0", tostring(got[i].device), what)
      assert.are.equal(want[i].dtype, got[i].dtype, what)
      assert.are.same(want[i].shape, got[i].shape, what)
      assert.are.equal(want[i]:tobytes(), got[i]:to("cpu"):tobytes(), what .. " (result " .. i .. ")")
    end
  end

  it("sort, argsort and topk agree with the CPU in every sortable dtype, both orders, along each dim", function()
    for dtype in pairs(VALUES) do
      local m = data(dtype, 3 * 37, #dtype):view({3, 37})
      for _, dim in ipairs({1, 2, -1}) do
        local n = m.shape[dim < 0 and 2 or dim]
        for _, desc in ipairs({false, true}) do
          local what = string.format("%s dim %d descending %s", dtype, dim, tostring(desc))
          same("sort " .. what, function(t) return t:sort(dim, {descending = desc}) end, m)
          same("argsort " .. what, function(t) return t:argsort(dim, {descending = desc}) end, m)
          same("sort of a transposed view " .. what, function(t) return t.T:sort(dim, desc) end, m)
          same("topk " .. what, function(t) return t:topk(math.min(5, n), dim, {largest = not desc}) end, m)
        end
      end
      same("sort values only " .. dtype, function(t) return t:sort(2, {indices = false}) end, m)
      same("topk of all " .. dtype, function(t) return t:topk(37, 2) end, m)
      same("topk 0 " .. dtype, function(t) return t:topk(0, 2) end, m)
    end
  end)

  it("lines of every length up to past a power of two, strided and flipped inputs, 0-d and empty tensors", function()
    for _, n in ipairs({1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 33, 64, 100, 257}) do
      for _, dtype in ipairs({"float32", "int8", "float16", "uint64"}) do
        local t = data(dtype, 2 * n, n)
        same("sort " .. n .. " " .. dtype, function(x) return x:sort() end, t)
        same("lines of " .. n .. " " .. dtype, function(x) return x:view({2, n}):sort(2, true) end, t)
        same("steps of 2 " .. n .. " " .. dtype, function(x) return x:slice(1, 1, 2 * n, 2):topk(1) end, t)
        same("flipped " .. n .. " " .. dtype, function(x) return x:flip(1):argsort() end, t)
      end
    end
    local b = data("bfloat16", 4 * 5 * 6, 7):view({4, 5, 6})
    for dim = 1, 3 do
      same("3-d, dim " .. dim, function(x) return x:permute({3, 1, 2}):sort(dim) end, b)
      same("3-d topk, dim " .. dim, function(x) return x:permute({2, 3, 1}):topk(2, dim, {largest = false}) end, b)
    end
    same("0-d", function(x) return x:sort() end, dlpack.tensor(2.5, "float32"))
    same("0-d topk", function(x) return x:topk(1, 1) end, dlpack.tensor(-3, "int16"))
    same("0-d argsort", function(x) return x:argsort(-1, {descending = true}) end, dlpack.tensor(0 / 0, "float64"))
    for _, shape in ipairs({{0}, {0, 5}, {5, 0}, {0, 2 ^ 40}, {2 ^ 40, 0, 3}}) do
      local e = dlpack.zeros(shape, "float32")
      same("empty " .. #shape, function(x) return x:sort() end, e)
      same("empty along 1 " .. #shape, function(x) return x:sort(1, {descending = true}) end, e)
      same("empty topk " .. #shape, function(x) return x:topk(0, 1) end, e)
    end
  end)

  it("equal elements keep their order, whatever the order asked", function()
    local t = dlpack.tensor({2, 1, 2, 1, 2, 0 / 0, 1, 0 / 0, -0.0, 0.0, -0.0, 2, 1, 0.0}, "float64")
    for _, desc in ipairs({false, true}) do
      local _, i = t:to("cuda:0"):sort(1, desc)
      local _, want = t:sort(1, desc)
      assert.are.same(want:totable(), i:to("cpu"):totable())
    end
    local _, i = t:to("cuda:0"):sort()
    assert.are.same({9, 10, 11, 14, 2, 4, 7, 13, 1, 3, 5, 12, 6, 8}, i:to("cpu"):totable())
    local ones = dlpack.ones({1000}, "int32"):to("cuda:0")
    assert.are.same(dlpack.arange(1, 1001, 1, "int64"):totable(), ones:argsort(1, true):to("cpu"):totable())
  end)

  it("median and quantile agree with the CPU: every dtype, dims, keepdim, q lists and tensors, NaN lines", function()
    for dtype in pairs(VALUES) do
      for _, n in ipairs({1, 2, 7, 12}) do
        local m = data(dtype, 3 * n, n + #dtype):view({3, n})
        same("median " .. dtype .. " " .. n, function(t) return t:median(2) end, m)
        same("median dim 1 keepdim " .. dtype, function(t) return t:median(1, {keepdim = true}) end, m)
        same("median of all " .. dtype, function(t) return t:median(nil, {keepdim = true}) end, m)
        assert.are.equal(tostring(m:median()), tostring(m:to("cuda:0"):median()), "median value " .. dtype)
        if dtype ~= "bool" then
          same("quantile list " .. dtype, function(t) return t:quantile({0, 0.25, 0.5, 0.9, 1}, 2) end, m)
          same("quantile transposed " .. dtype, function(t) return t.T:quantile(0.3, 2, {keepdim = true}) end, m)
          same("quantile of all " .. dtype, function(t) return t:quantile({0.75}) end, m)
          same("quantile float16 tensor " .. dtype, function(t)
            return t:quantile(dlpack.tensor({0.1, 0.6}, "float16"), 1)
          end, m)
          same("quantile 0-d float32 tensor " .. dtype, function(t)
            return t:quantile(dlpack.tensor(0.7, "float32"), 2)
          end, m)
          assert.are.equal(tostring(m:quantile(0.4)), tostring(m:to("cuda:0"):quantile(0.4)), "quantile " .. dtype)
        end
      end
    end
    same("median of empty lines", function(t) return t:median(2) end, dlpack.zeros({3, 0}, "float32"))
    same("median of an empty tensor", function(t) return t:median(2) end, dlpack.zeros({0, 2 ^ 40}, "float64"))
    same("no quantiles", function(t) return t:quantile({}, 1) end, dlpack.ones({4, 2}, "int16"))
    local three = dlpack.tensor(3, "int8")
    assert.are.equal(tostring(three:median()), tostring(three:to("cuda:0"):median()))
    raises(function() return dlpack.zeros({0}, "float32", "cuda:0"):quantile(0.5) end, "are not defined")
    raises(function() return dlpack.zeros({2}, "bool", "cuda:0"):quantile(0.5) end, "bool tensors are not supported")
    raises(function() return dlpack.zeros({2}, "complex64", "cuda:0"):median() end, "complex numbers have no order")
  end)

  it("unique agrees with the CPU: every dtype, inverse and counts, strided inputs, empty and 0-d tensors", function()
    local combos = {{}, {return_inverse = true}, {return_counts = true}, {return_inverse = true, return_counts = true}}
    for dtype in pairs(VALUES) do
      for _, n in ipairs({1, 2, 9, 40}) do
        local m = data(dtype, 2 * n, n * 7 + #dtype):view({2, n})
        for c, opts in ipairs(combos) do
          same("unique " .. dtype .. " " .. n .. " " .. c, function(t) return t:unique(opts) end, m)
          same("unique transposed " .. dtype .. " " .. c, function(t) return dlpack.unique(t.T, opts) end, m)
        end
      end
    end
    for c, opts in ipairs(combos) do
      same("unique empty " .. c, function(t) return t:unique(opts) end, dlpack.zeros({0, 2 ^ 40}, "int8"))
      same("unique 0-d " .. c, function(t) return t:unique(opts) end, dlpack.tensor(0 / 0, "float16"))
      same("unique all equal " .. c, function(t) return t:unique(opts) end, dlpack.ones({3, 300}, "uint64"))
    end
    raises(function() return dlpack.zeros({2}, "complex128", "cuda:0"):unique() end, "complex numbers have no order")
  end)

  it("unique with dim agrees with the CPU (computed on the host) and returns tensors on the device", function()
    local combos = {{dim = 1}, {dim = 2, return_inverse = true}, {dim = -1, return_counts = true},
                    {dim = 1, return_inverse = true, return_counts = true}}
    for dtype in pairs(VALUES) do
      local m = data(dtype, 12, 5 + #dtype):view({6, 2}) -- rows of two from a small pool: repeated rows
      for c, opts in ipairs(combos) do
        same("unique dim " .. dtype .. " " .. c, function(t) return t:unique(opts) end, m)
        same("unique dim transposed " .. dtype .. " " .. c, function(t) return dlpack.unique(t.T, opts) end, m)
      end
    end
    for c, opts in ipairs(combos) do
      same("unique dim empty " .. c, function(t) return t:unique(opts) end, dlpack.zeros({0, 3}, "int8"))
    end
    raises(function() return dlpack.zeros({2, 2}, "float32", "cuda:0"):unique({dim = 3}) end, "dim 3 out of range")
  end)

  it("sort runs on the operand's stream and its results are on the operand's device", function()
    local s = cuda.Stream()
    local t = data("int32", 50, 3):to({device = "cuda:0", stream = s})
    local v, i = t:sort()
    assert.are.equal("cuda:0", tostring(v.device))
    assert.are.equal("cuda:0", tostring(i.device))
    local hv, hi = data("int32", 50, 3):sort()
    assert.are.equal(hv:tobytes(), v:to("cpu"):tobytes())
    assert.are.equal(hi:tobytes(), i:to("cpu"):tobytes())
    s:close()
  end)
end)
