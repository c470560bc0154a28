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

-- matmul and dot on CUDA tensors: cuBLAS for float products when one is found (stage 45 runs the
-- suite with the fake driver's cuBLAS and with DLPACK_LUA_CUBLAS=none), the module's kernel
-- (kernels.cu, family 13) for the rest; every result against the CPU path on the same values
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
