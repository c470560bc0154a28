-- luacheck: std +busted
-- What a hostile script does to the computing and creating functions on CUDA tensors (part of the
-- CUDA suite: spec/cuda/suite.lua runs it after compute_suite.lua): the device argument of every
-- creating function, finalizers that release operands in the middle of a reduction or a product,
-- options that do not exist (out= on reductions and products), 64 dimensions, empty shapes with
-- huge dimensions, driver failures injected into loading, launching, allocating and cuBLAS, and a
-- launch larger than one grid. Each gives the CPU's result or a clear error, leaks nothing and
-- frees nothing twice (the suite checks the fake's misuse count after every test).
local dlpack = require "dlpack"
local probe = require "probe"
local support = require "support"
local fake = probe.fake
local cuda = dlpack.cuda
local raises = support.raises_plain

local function fake_it(name, fn)
  if not fake then
    pending(name .. ": needs the fake driver's counters or fault injection")
  elseif cuda.device_count() < 2 then
    pending(name .. ": needs two CUDA devices")
  else
    it(name, fn)
  end
end

local function two_devices_it(name, fn)
  if cuda.device_count() < 2 then pending(name .. ": needs two CUDA devices") else it(name, fn) end
end

-- nothing queued, nothing unreferenced, no memory held for work done
local function settle()
  collectgarbage()
  collectgarbage()
  if fake then fake.sync_all() end
  cuda.legacy_stream:synchronize()
  collectgarbage()
  collectgarbage()
end

local function host(t) return t:to("cpu") end

describe("CUDA attacks", function()
  local src = dlpack.tensor({1, 2, 3}, "float32")
  -- each creating function with its device argument last
  local MAKERS = {
    zeros = function(dev) return dlpack.zeros({2, 3}, "float32", dev) end,
    ones = function(dev) return dlpack.ones({2, 3}, "int16", dev) end,
    empty = function(dev) return dlpack.empty({2, 3}, "uint8", dev) end,
    full = function(dev) return dlpack.full({2, 3}, 7, "float64", dev) end,
    rand = function(dev) return dlpack.rand({5}, "float32", dev) end,
    randn = function(dev) return dlpack.randn({5}, "float64", dev) end,
    randint = function(dev) return dlpack.randint(-3, 9, {5}, "int32", dev) end,
    arange = function(dev) return dlpack.arange(0, 10, 3, "int64", dev) end,
    linspace = function(dev) return dlpack.linspace(-1, 1, 5, "float32", dev) end,
    eye = function(dev) return dlpack.eye(3, 2, "float32", dev) end,
    zeros_like = function(dev) return dlpack.zeros_like(src, nil, dev) end,
    ones_like = function(dev) return dlpack.ones_like(src, "int8", dev) end,
    empty_like = function(dev) return dlpack.empty_like(src, nil, dev) end,
    full_like = function(dev) return dlpack.full_like(src, 2.5, nil, dev) end,
  }
  local DETERMINISTIC = {zeros = true, ones = true, full = true, arange = true, linspace = true, eye = true,
                         zeros_like = true, ones_like = true, full_like = true}

  it("the device argument of every creating function: hostile values raise naming the problem", function()
    local released = dlpack.zeros({1})
    released:release()
    local HOSTILE = {
      {5, "a device is a string or {device_type, device_id}, got number"},
      {-1, "got number"}, {0 / 0, "got number"}, {true, "got boolean"}, {print, "got function"},
      {coroutine.create(print), "got thread"}, {released, "got userdata"},
      {"cuda:99", "CUDA device ids go from 0 to 63"}, {"cuda:99999999999999999999", "CUDA device ids go from 0 to 63"},
      {"cuda:-1", "the device id must be a non-negative integer"}, {"cuda:", "non-negative integer"},
      {"cuda:0x1", "non-negative integer"}, {"cuda:0\0", "embedded NUL"}, {"gpu:0", "unknown device"},
      {"cpu:0", "takes no device id"}, {"cuda:2", "no CUDA device 2"}, {"cuda:63", "no CUDA device 63"},
      {{2, -1}, "invalid device id -1"}, {{2, math.maxinteger}, "invalid device id"}, {{2, 70}, "invalid device id"},
      {{99, 0}, "unsupported device type 99"}, {{-2, 0}, "unsupported device type -2"},
      {{2}, "two integers"}, {{2, 0.5}, "two integers"}, {{}, "two integers"}, {{"x", 0}, "two integers"},
      {setmetatable({}, {__index = function() error("device table says no") end}), "device table says no"},
    }
    for _, make in pairs(MAKERS) do
      for _, case in ipairs(HOSTILE) do raises(function() return make(case[1]) end, case[2]) end
    end
  end)

  two_devices_it("valid devices, also tables with lying metamethods, make the tensor there with CPU values", function()
    local VALID = {
      {"cuda:1", "cuda:1"}, {{2, 0}, "cuda:0"}, {{"2", "1"}, "cuda:1"}, {"cuda_host", "cuda_host"}, {"cpu", "cpu"},
      {{1, 0}, "cpu"},
    }
    for name, make in pairs(MAKERS) do
      local want = make("cpu")
      for _, case in ipairs(VALID) do
        local got = make(case[1])
        assert.are.equal(case[2], got.device, name)
        assert.are.equal(want.dtype, got.dtype, name)
        assert.are.same(want.shape, got.shape, name)
        if DETERMINISTIC[name] then assert.are.equal(want:tobytes(), host(got):tobytes(), name) end
      end
      -- a table whose __index answers cuda:1 the first time it is read and junk after: read once
      local reads = 0
      local lying = setmetatable({}, {__index = function(_, k)
        reads = reads + 1
        if reads <= 2 then return k == 1 and 2 or 1 end
        return "not a number"
      end})
      assert.are.equal("cuda:1", make(lying).device, name)
      assert.are.equal(2, reads, name .. ": each field read once")
    end
  end)

  it("a device table whose __index releases the *_like source raises 'released' or makes the tensor", function()
    for _, fn in ipairs({"zeros_like", "ones_like", "empty_like"}) do
      local t = dlpack.tensor({1, 2}, "float32"):to("cuda:0")
      local evil = setmetatable({}, {__index = function(_, k)
        t:release()
        collectgarbage()
        return k == 1 and 2 or 0
      end})
      local ok, r = pcall(dlpack[fn], t, nil, evil)
      if ok then
        assert.are.same({2}, r.shape)
        assert.are.equal("cuda:0", r.device)
      else
        assert.is_truthy(tostring(r):find("released", 1, true), tostring(r))
      end
    end
    settle()
  end)

  two_devices_it("an empty operand with a stream of another device raises as a non-empty one does", function()
    -- the launch of nothing returned before the stream's device was checked
    local s1 = cuda.Stream({device = 1})
    local e, x = dlpack.zeros({0}, "float32", "cuda:0"), dlpack.zeros({3}, "float32", "cuda:0")
    for _, t in ipairs({x, e}) do
      raises(function() return dlpack.add(t, t, {stream = s1}) end, "the stream is on cuda:1, the operands on cuda:0")
      raises(function() return dlpack.neg(t, {stream = s1}) end, "the stream is on cuda:1")
      raises(function() return dlpack.clamp(t, 0, 1, {stream = s1}) end, "the stream is on cuda:1")
      raises(function() return dlpack.where(t:to("bool"), t, 1, {stream = s1}) end, "the stream is on cuda:1")
    end
    assert.are.same({0}, dlpack.add(e, e, {stream = cuda.Stream({device = 0})}).shape)
    s1:close()
  end)

  two_devices_it("equal of operands on two devices raises naming both, also when their shapes differ", function()
    -- equal answered false for shapes that differ before it looked at the devices
    local x = dlpack.arange(0, 8, 1, "float32"):to("cuda:0")
    raises(function() return dlpack.equal(x, dlpack.zeros({3})) end,
           "equal: operands on different devices: cuda:0 and cpu")
    raises(function() return dlpack.equal(dlpack.zeros({3}, "float32", "cuda:1"), x) end, "cuda:1 and cuda:0")
    raises(function() return dlpack.equal(x, dlpack.zeros({8})) end, "cuda:0 and cpu")
    assert.is_false(dlpack.equal(x, dlpack.zeros({3}, "float32", "cuda:0")))
    assert.is_false(dlpack.equal(dlpack.zeros({2}), dlpack.zeros({3}, "float32", "cuda_host")))
  end)

  two_devices_it("reshape of a non-contiguous CUDA tensor copies on the device, as contiguous() does", function()
    -- it raised "whose memory the CPU cannot access"
    local h = dlpack.arange(0, 24, 1, "int32"):view({4, 6})
    local d = h:to("cuda:1")
    local cases = {
      function(t) return t:transpose(1, 2):reshape(24) end,
      function(t) return t:slice(2, 1, 6, 2):reshape(-1) end,
      function(t) return t:flip(1):reshape(2, 12) end,
      function(t) return t:narrow(2, 2, 3):reshape(3, 4) end,
      function(t) return t:select(2, 1):unsqueeze(2):expand(4, 3):reshape(12) end,
    }
    for i, f in ipairs(cases) do
      local want, got = f(h), f(d)
      assert.are.equal("cuda:1", got.device, i)
      assert.are.same(want.shape, got.shape, i)
      assert.is_true(got:is_contiguous(), i)
      assert.are.equal(want:tobytes(), host(got):tobytes(), i)
    end
    local released = d:transpose(1, 2)
    released:release()
    raises(function() return released:reshape(24) end, "released")
  end)

  it("out= is not an option of reductions and products, on the device as on the CPU", function()
    local x = dlpack.tensor({{1, 2}, {3, 4}}, "float32")
    local d = x:to("cuda:0")
    for _, fn in ipairs({"sum", "prod", "mean", "var", "std", "min", "max", "argmin", "argmax", "any", "all"}) do
      local _, want = pcall(dlpack[fn], x, 1, {out = x})
      assert.are.equal("dlpack." .. fn .. ": unknown option 'out'", want)
      assert.are.equal(want, select(2, pcall(dlpack[fn], d, 1, {out = d})))
      assert.are.equal(want, select(2, pcall(dlpack[fn], d, 1, {out = d:narrow(1, 1, 1)})))
    end
    raises(function() return dlpack.matmul(d, d, {out = d}) end, "unexpected argument")
    raises(function() return dlpack.dot(d:view(4), d:view(4), {out = d}) end, "unexpected argument")
    assert.are.same({{7, 10}, {15, 22}}, host(dlpack.matmul(d, d)):totable(), "d unchanged")
  end)

  two_devices_it("finalizers release operands in the middle of a reduction or product: result or 'released'", function()
    local results, releases = 0, 0
    for trial = 1, 40 do
      local a = dlpack.arange(0, 12, 1, "float32"):view({3, 4}):to(trial % 2 == 0 and "cuda:0" or "cuda:1")
      local b = a:transpose(1, 2):contiguous()
      local victims = {a, b}
      for k = 1, 3 do
        setmetatable({}, {__gc = function()
          releases = releases + 1
          victims[(trial + k) % 2 + 1]:release()
        end})
      end
      collectgarbage("step", trial % 5)
      local calls = {
        function() return a:sum(1) end, function() return a:var(2, {correction = 0}) end,
        function() return a:argmax() end, function() return a:max(2) end, function() return dlpack.matmul(a, b) end,
        function() return dlpack.dot(a:view(12), b:view(12)) end, function() return b:mean() end,
      }
      local ok, r = pcall(calls[trial % #calls + 1])
      if ok then
        results = results + 1
      else
        assert.is_truthy(tostring(r):find("released", 1, true), tostring(r))
      end
      -- a dims table whose __index releases the input and collects
      local evil = setmetatable({}, {__len = function() return 1 end, __index = function()
        a:release()
        collectgarbage()
        return 1
      end})
      ok, r = pcall(dlpack.sum, a, evil)
      if not ok then assert.is_truthy(tostring(r):find("released", 1, true), tostring(r)) end
    end
    settle()
    assert.is_true(releases > 0, "the finalizers ran")
    assert.is_true(results >= 0)
  end)

  it("64-dimension CUDA tensors through elementwise functions, reductions and copies", function()
    local shape = {}
    for i = 1, 64 do shape[i] = (i == 5 or i == 40) and 2 or 1 end
    local h = dlpack.arange(0, 4, 1, "int32"):view(shape)
    local perm = {}
    for i = 1, 64 do perm[i] = 65 - i end
    local hp = h:permute(perm)
    local d = h:to("cuda:0"):permute(perm)
    assert.are.equal(hp:add(1):tobytes(), host(d + 1):tobytes())
    assert.are.equal(hp:mul(hp):tobytes(), host(d * d):tobytes())
    assert.are.equal(hp:contiguous():tobytes(), host(d:contiguous()):tobytes())
    assert.are.equal(hp:to("float64"):tobytes(), host(d:to("float64")):tobytes())
    assert.are.equal(hp:sum(), d:sum())
    assert.are.equal(hp:sum(25):tobytes(), host(d:sum(25)):tobytes())
    assert.are.equal(hp:argmax(), d:argmax())
    assert.are.equal(hp:max(60):tobytes(), host(d:max(60)):tobytes())
    local out = dlpack.zeros(hp.shape, "int32", "cuda:0")
    out:copy(d)
    assert.are.equal(hp:contiguous():tobytes(), host(out):tobytes())
    local too_many = {}
    for i = 1, 65 do too_many[i] = 1 end
    raises(function() return d:reshape(too_many) end, "65")
  end)

  it("empty tensors with huge dimensions on the device: no launch walks them, errors as on the CPU", function()
    local huge = 2 ^ 62
    local shapes = {{0, huge}, {huge, 0}, {2, 0, huge // 2}}
    -- f on the host tensor and on the device one: the same error, or results of the same shape
    local function both(what, f, h, d)
      local okh, rh = pcall(f, h)
      local okd, rd = pcall(f, d)
      assert.are.equal(okh, okd, what .. ": " .. tostring(okh and rd or rh))
      if not okh then
        assert.are.equal(rh, rd, what)
      elseif type(rh) == "userdata" then
        assert.are.same(rh.shape, rd.shape, what)
        assert.are.equal(rh.dtype, rd.dtype, what)
        assert.are.equal(0, rd:numel(), what)
      else
        assert.is_true(rh == rd or (rh ~= rh and rd ~= rd), what)
      end
    end
    local CALLS = {
      add = function(t) return t + 1 end, neg = function(t) return -t end, sum = function(t) return t:sum() end,
      sum1 = function(t) return t:sum(1) end, sum2 = function(t) return t:sum(2, {keepdim = true}) end,
      prod = function(t) return t:prod() end, any = function(t) return t:any() end,
      all2 = function(t) return t:all(2) end, max1 = function(t) return t:max(1) end,
      argmin = function(t) return t:argmin() end, mean = function(t) return t:mean() end,
      var2 = function(t) return t:var(2) end, clone = function(t) return t:clone() end,
      to = function(t) return t:to("float64") end, contiguous = function(t) return t:transpose(1, 2):contiguous() end,
      cat = function(t) return dlpack.cat({t, t}) end, stack = function(t) return dlpack.stack({t, t}) end,
      equal = function(t) return dlpack.equal(t, t) end, allclose = function(t) return dlpack.allclose(t, t) end,
      where = function(t) return dlpack.where(t:to("bool"), t, 0) end,
      matmul = function(t) return dlpack.matmul(t:transpose(1, 2), t) end,
    }
    for _, shape in ipairs(shapes) do
      local h = dlpack.empty(shape, "float32")
      local d = dlpack.empty(shape, "float32", "cuda:0")
      assert.are.same(h.shape, d.shape)
      for what, f in pairs(CALLS) do both(what .. " " .. table.concat(shape, "x"), f, h, d) end
      assert.are.same(h.shape, d:to("cpu").shape)
    end
    -- a product over an empty inner dimension of huge outer ones: the sizes overflow, as on the CPU
    local a, b = dlpack.empty({huge, 0}, "float32"), dlpack.empty({0, huge}, "float32")
    local okh, h = pcall(dlpack.matmul, a, b)
    local okd, d = pcall(dlpack.matmul, a:to("cuda:0"), b:to("cuda:0"))
    assert.are.equal(okh, okd)
    if not okh then assert.are.equal(h, d) end
    local e = dlpack.empty({0, 2 ^ 40}, "float32", "cuda:0")
    local z = dlpack.zeros({1, 3}, "float32", "cuda:0"):expand(2 ^ 40, 3)
    assert.are.same({0, 3}, dlpack.matmul(e, z).shape)
    assert.are.same({2, 0}, dlpack.cat({dlpack.empty({1, 0}, "float32", "cuda:0"),
                                        dlpack.empty({1, 0}, "float32", "cuda:0")}).shape)
  end)

  fake_it("driver failures in loading, launching, allocating, cuBLAS, random draws: an error, no leak", function()
    local x = dlpack.arange(0, 4000, 1, "float32"):view({4, 1000}):to("cuda:1")
    local i = dlpack.arange(0, 12, 1, "int16"):view({3, 4}):to("cuda:1")
    local xi, x16 = x:sum(2), dlpack.tensor({1, 2}, "uint32"):to("cuda:1")
    settle()
    local live = fake.live()
    local function fails(fname, code, fn, text, times, after)
      fake.fail_next(fname, code, times or 1, after or 0)
      raises(fn, text)
      fake.fail_next(fname, 0, 0)
    end
    -- a family or a kernel found for the first time on this device (the suite may have loaded
    -- some before: a call that loads nothing does not fail)
    for _, f in ipairs({"cuModuleLoadData", "cuModuleGetFunction"}) do
      for _, call in ipairs({function() return x16:sum() end, function() return x16:max() end,
                             function() return x16:var() end, function() return x16:argmin() end}) do
        local before = fake.calls(f)
        fake.fail_next(f, 200)
        local ok, err = pcall(call)
        fake.fail_next(f, 0, 0)
        if fake.calls(f) > before then
          assert.is_false(ok, f)
          assert.is_truthy(tostring(err):find("CUDA error 200", 1, true), tostring(err))
        else
          assert.is_true(ok, tostring(err))
        end
      end
    end
    for _, alloc in ipairs({"cuMemAllocAsync", "cuMemAlloc_v2"}) do
      -- (an old driver has no cuMemAllocAsync)
      for after = 0, pcall(fake.fail_next, alloc, 0, 0) and 2 or -1 do
        local ok, err = pcall(function()
          fake.fail_next(alloc, 2, 1, after)
          return x:sum(2), x:var(), x:argmax(1), i:matmul(i:transpose(1, 2)), dlpack.rand({9}, "float32", "cuda:1")
        end)
        fake.fail_next(alloc, 0, 0)
        if not ok then assert.is_truthy(tostring(err):find("memory", 1, true) or tostring(err):find("CUDA error"),
                                        tostring(err)) end
      end
    end
    fails("cuLaunchKernel", 1, function() return x:mean(1) end, "dlpack.mean: CUDA error 1")
    fails("cuLaunchKernel", 1, function() return x:std(2, {correction = 0}) end, "dlpack.std: CUDA error 1", 1, 2)
    fails("cuLaunchKernel", 719, function() return dlpack.rand({100}, "float32", "cuda:1") end, "CUDA error 719")
    fails("cuLaunchKernel", 719, function() return dlpack.randint(0, 9, {100}, "int8", "cuda:1") end, "719")
    fails("cuLaunchKernel", 2, function() return dlpack.arange(0, 100, 1, "int32", "cuda:1") end, "CUDA error 2")
    fails("cuLaunchKernel", 2, function() return i:matmul(i:transpose(1, 2)) end, "matmul: CUDA error 2")
    if cuda.blas() then
      fails("cublasGemmEx", 13, function() return x:view({40, 100}):matmul(x:view({100, 40})) end,
            "CUBLAS_STATUS_EXECUTION_FAILED")
      fails("cublasSetStream_v2", 14, function() return dlpack.dot(x:view(4000), x:view(4000)) end, "cublasSetStream")
    end
    fails("cuMemcpyAsync", 999, function() return x:sum() end, "CUDA error 999") -- a full reduction reads back
    settle()
    assert.are.equal(live.device, fake.live().device, "the results and temporaries of the failed calls are freed")
    assert.are.equal(live.streams, fake.live().streams)
    assert.are.equal(live.events, fake.live().events)
    assert.are.equal(xi:to("cpu"):tobytes(), x:sum(2):to("cpu"):tobytes(), "the same results after the failures")
  end)

  fake_it("a launch over more elements than one grid covers is capped at 65535 blocks and grid-strides", function()
    local n = 65535 * 256 + 1000
    local x = dlpack.zeros({n}, "uint8", "cuda:0")
    local y = x + 3
    assert.are.equal(65535, fake.live().last_grid)
    assert.are.equal(256, fake.live().last_block)
    local h = host(y)
    assert.are.equal(3, h[1])
    assert.are.equal(3, h[n - 1000])
    assert.are.equal(3, h[n])
    assert.are.equal(3 * n, dlpack.sum(h))
    local small = dlpack.zeros({1000}, "uint8", "cuda:0") + 1
    assert.are.equal(4, fake.live().last_grid, "ceil(1000 / 256) blocks")
    assert.are.equal(1000, dlpack.sum(host(small)))
  end)
end)
