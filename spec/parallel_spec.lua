-- Large CPU operations on several threads (docs/api.md, "Threads"): the same bytes on 1, 2, 3 and
-- 7 threads for elementwise operations (any layout, broadcasting, conversions, out=), for
-- reductions (floating-point sums included: the split depends on the sizes only) and for
-- functions of whole lines (softmax, scans, sorts), for copies (strided, converting, fills) and
-- gathers (take, gather, index_select: the first bad index named), and the settings' argument
-- checks. The host's job system (dlpack_lua_set_parallel_for) is tested by spec/c/host_threads.c
-- (stage 30), the pool under ThreadSanitizer by spec/threads_spec.lua.
local dlpack = require "dlpack"
local support = require "support"

local raises = support.raises
local COUNTS = {1, 2, 3, 7}

-- fn() -> a list of tensors or numbers, the same on every thread count (compared as bytes).
local function same_on_all_counts(fn)
  local before = dlpack.get_num_threads()
  local reference
  for _, n in ipairs(COUNTS) do
    dlpack.set_num_threads(n)
    local ok, got = pcall(fn)
    if not ok then
      dlpack.set_num_threads(before)
      error(got, 0)
    end
    local bytes = {}
    for i, v in ipairs(got) do -- tensors, or the numbers and booleans of whole reductions
      bytes[i] = type(v) == "userdata" and v:tobytes() or type(v) .. string.format(" %.17g", v == true and 1 or v or 0)
    end
    if not reference then
      reference = bytes
    else
      for i = 1, #reference do
        assert(reference[i] == bytes[i], "result " .. i .. " differs on " .. n .. " threads from one thread's")
      end
    end
  end
  dlpack.set_num_threads(before)
end

describe("threads", function()
  local default
  setup(function() default = dlpack.get_num_threads() end)
  after_each(function() dlpack.set_num_threads(0) end)

  it("get_num_threads is a whole number from 1 to 256; set_num_threads(0) goes back to the default", function()
    assert.is_true(default >= 1 and default <= 256 and default % 1 == 0)
    dlpack.set_num_threads(3)
    assert.are.equal(3, dlpack.get_num_threads())
    dlpack.set_num_threads(256)
    assert.are.equal(256, dlpack.get_num_threads())
    dlpack.set_num_threads(0)
    assert.are.equal(default, dlpack.get_num_threads())
    assert.is_nil(dlpack.set_num_threads(2))
  end)

  it("set_num_threads refuses what is not a whole number from 0 to 256", function()
    local expected = "dlpack.set_num_threads: a whole number from 0 %(the default%) to 256 expected, got "
    raises(function() dlpack.set_num_threads(-1) end, expected .. "%-1")
    raises(function() dlpack.set_num_threads(257) end, expected .. "257")
    raises(function() dlpack.set_num_threads(1.5) end, expected .. "1.5")
    raises(function() dlpack.set_num_threads(2 ^ 63) end, expected)
    raises(function() dlpack.set_num_threads(math.huge) end, expected)
    raises(function() dlpack.set_num_threads(0 / 0) end, expected)
    raises(function() dlpack.set_num_threads("2") end, expected .. "string")
    raises(function() dlpack.set_num_threads() end, expected .. "no value")
    raises(function() dlpack.set_num_threads(2, 3) end, "dlpack.set_num_threads")
    assert.are.equal(default, dlpack.get_num_threads())
  end)

  -- it runs new processes of the interpreter: not under a preloaded sanitizer runtime (stage 52's
  -- ThreadSanitizer), whose shell children crash
  local spawn = not os.getenv("LD_PRELOAD") and it or pending
  spawn("DLPACK_LUA_NUM_THREADS sets the default; a value that is not 1 to 256 is ignored", function()
    local script = 'package.path = ' .. string.format("%q", package.path) .. '; package.cpath = ' ..
        string.format("%q", package.cpath) .. '; print(require("dlpack").get_num_threads())'
    local unset = support.run_lua(script, {DLPACK_LUA_NUM_THREADS = ""}) -- the processors' count
    assert.is_truthy(unset:match("^%d+\n$"), unset)
    assert.are.equal("5\n", support.run_lua(script, {DLPACK_LUA_NUM_THREADS = "5"}))
    for _, ignored in ipairs({"0", "many", "300", "-2", "2.5", " 3", "+3", "3 ", "0x10", "2.0"}) do
      assert.are.equal(unset, support.run_lua(script, {DLPACK_LUA_NUM_THREADS = ignored}))
    end
  end)

  -- A job wakes only the pool threads it takes. Counted by the threads' voluntary context switches
  -- (Linux's /proc): a thread that wakes and finds no work sleeps again, one switch each time.
  local status = not support.WINDOWS and io.open("/proc/self/stat")
  local pid = status and status:read("*l"):match("^(%d+)")
  if status then status:close() end
  local tasks = pid and io.popen("ls /proc/" .. pid .. "/task 2>/dev/null")
  local listed = tasks and tasks:read("*a") or ""
  if tasks then tasks:close() end
  local function switches() -- thread id -> voluntary context switches, for all threads but the main one
    local by_thread, ls = {}, io.popen("ls /proc/" .. pid .. "/task")
    for tid in ls:read("*a"):gmatch("%d+") do
      local f = tid ~= pid and io.open("/proc/" .. pid .. "/task/" .. tid .. "/status")
      if f then
        by_thread[tid] = tonumber(f:read("*a"):match("voluntary_ctxt_switches:%s*(%d+)"))
        f:close()
      end
    end
    ls:close()
    return by_thread
  end
  local wakes = "a 2-task operation wakes one pool thread, not every started one"
  if not listed:match("%d") then
    pending(wakes .. ": needs Linux's /proc/<pid>/task")
  else
    it(wakes, function()
      dlpack.set_num_threads(64)
      assert.is_number(dlpack.sum(dlpack.ones({64 * 2 * 65536}, "float32"))) -- 128 tasks: 63 threads start
      dlpack.set_num_threads(2)
      local x = dlpack.rand({2 * 65536 + 8}, "float32") -- 2 tasks: the caller and one pool thread
      local before = switches()
      for _ = 1, 300 do dlpack.exp(x) end
      -- the threads that woke again and again: one (all 63 did before); a thread still settling
      -- after the large sum (slow under a sanitizer) may wake once or twice
      local woke = 0
      for tid, n in pairs(switches()) do
        if before[tid] and n > before[tid] + 20 then woke = woke + 1 end
      end
      assert(woke <= 2, woke .. " pool threads woke more than 20 times for 300 operations of 2 tasks")
    end)
  end

  it("elementwise results are the same on any number of threads: odd shapes, strides, broadcasting", function()
    dlpack.manual_seed(7)
    local a = dlpack.randn({517, 1031}, "float32")       -- 533027 elements
    local b = dlpack.randn({1031}, "float32")            -- broadcast along rows
    local c = dlpack.randn({1031, 517}, "float64").T     -- transposed: another order of strides
    local d = dlpack.randn({517 * 3 * 89}, "float32"):reshape({517 * 89, 3})
    local e = dlpack.randint(-50, 50, {517, 1031}, "int32")
    local h = dlpack.randn({517, 1031}, "float16")
    same_on_all_counts(function()
      local out = dlpack.empty({1031, 517}, "float32").T -- a strided out=
      dlpack.mul(a, b, {out = out})
      return {
        dlpack.add(a, b), dlpack.exp(a), dlpack.mul(a, c), out,
        dlpack.add(d, dlpack.tensor({1, 2, 3}, "float32")), -- rows of 3 folded into one long row
        dlpack.add(e, 0.5), dlpack.mul(h, 3), dlpack.sub(a:slice(2, -1, 1, -2), 1), -- negative strides
        dlpack.where(dlpack.gt(a, 0), a, c),
      }
    end)
  end)

  it("in place and aliasing outputs give one thread's result", function()
    same_on_all_counts(function()
      dlpack.manual_seed(3)
      local a = dlpack.randn({700001}, "float64")
      a:mul_(2)
      local b = a:clone()
      dlpack.add(b:narrow(1, 1, 700000), b:narrow(1, 2, 700000), {out = b:narrow(1, 2, 700000)})
      return {a, b}
    end)
  end)

  it("sums, means, variances and products are the same bit for bit on any number of threads", function()
    dlpack.manual_seed(11)
    local x = dlpack.randn({1000003}, "float32")
    local y = dlpack.randn({1000003}, "float64")
    local m = dlpack.randn({517, 1031}, "float32")
    local t = dlpack.randn({1031, 517}, "float64").T
    local i = dlpack.randint(-1000, 1000, {517, 1031}, "int64")
    local h = dlpack.randn({300001}, "float16")
    local z = x:to("complex64")
    same_on_all_counts(function()
      return {
        dlpack.sum(x), dlpack.sum(y), dlpack.mean(x), dlpack.var(y), dlpack.std(x),
        dlpack.sum(x:slice(1, 1, -1, 2)), dlpack.sum(x:slice(1, -1, 1, -1)),
        dlpack.sum(m, 1), dlpack.sum(m, 2), dlpack.mean(m, 1), dlpack.var(m, 2), dlpack.std(t, 1),
        dlpack.sum(t), dlpack.sum(t, 2), dlpack.sum(i), dlpack.prod(i:narrow(2, 1, 3), 2), dlpack.prod(m, 1),
        dlpack.sum(h), dlpack.mean(h), dlpack.sum(z),
        dlpack.any(dlpack.gt(m, 4)), dlpack.all(dlpack.lt(m, 4), 2),
        dlpack.max(m), dlpack.argmin(m, 2),
      }
    end)
  end)

  it("min, max, argmin and argmax are the same on any number of threads: NaN, ties, layouts", function()
    dlpack.manual_seed(13)
    local x = dlpack.randn({1000003}, "float32")
    local nan = x:clone()
    nan[654321] = 0 / 0 -- the first NaN wins, whichever task finds the later one first
    nan[987654] = -(0 / 0)
    local late = x:clone()
    late[999999] = 0 / 0
    local ties = dlpack.randint(0, 3, {700001}, "int32") -- the first of equal values wins
    local flat = dlpack.zeros({500000}, "float64")
    flat[400000] = -0.0 -- equal to 0: the first zero's value and position stay
    local m = dlpack.randn({517, 1031}, "float64")
    m:set(400, 9, 0 / 0)
    local t = dlpack.randn({1031, 517}, "float32").T -- transposed
    local h = dlpack.randn({300001}, "float16")
    local u = dlpack.randint(0, 255, {1031, 517}, "uint8")
    local rows = dlpack.randn({2, 300000}, "float32")
    local empty = dlpack.zeros({300000, 0}, "float32")
    same_on_all_counts(function()
      local v, i = dlpack.max(m, 2)
      local v2, i2 = dlpack.min(t, 1)
      return {
        dlpack.max(x), dlpack.min(x), dlpack.argmax(x), dlpack.argmin(x),
        dlpack.max(nan), dlpack.argmax(nan), dlpack.argmin(nan), dlpack.argmax(late), dlpack.min(late),
        dlpack.argmax(ties), dlpack.argmin(ties), dlpack.max(ties),
        dlpack.min(flat), dlpack.argmin(flat), dlpack.max(flat), dlpack.argmax(flat),
        dlpack.max(m), dlpack.argmax(m), v, i, dlpack.argmin(m, 1), v2, i2, dlpack.argmax(t), dlpack.argmax(t, 2),
        dlpack.max(h), dlpack.argmin(h), dlpack.max(u), dlpack.argmax(u, 1), dlpack.argmin(u, 2),
        dlpack.max(x:slice(1, -1, 1, -3)), dlpack.argmax(x:slice(1, -1, 1, -3)), dlpack.argmin(rows, 2),
        dlpack.max(empty, 1), dlpack.argmax(empty, 1), -- over a dim of 300000 of an empty tensor: empty
      }
    end)
    assert.are.equal(654321, dlpack.argmax(nan))
    assert.are.equal(654321, dlpack.argmin(nan))
    assert.are.equal(999999, dlpack.argmin(late))
    assert.are.equal(1, dlpack.argmin(flat))
    assert.are.equal("\0\0\0\0\0\0\0\0", dlpack.min(flat, 1):tobytes()) -- +0, the first zero
    assert.are.equal(dlpack.argmax(ties), dlpack.argmax(ties:narrow(1, 1, 100)))
    for _, n in ipairs({1, 3}) do
      dlpack.set_num_threads(n)
      raises(function() dlpack.max(empty) end, "no identity")
    end
  end)

  it("min and max over outer dims join parts of rows: NaN, ties and signed zeros across the parts", function()
    dlpack.manual_seed(17)
    local ties = dlpack.randint(0, 3, {3001, 257}, "int32") -- equal values in every part: the first wins
    local f = dlpack.randn({2999, 301}, "float32")
    for c = 1, 301, 7 do f:set(2000 + c, c, 0 / 0) end -- a NaN in a late part
    for c = 1, 301, 11 do -- two NaNs: the first
      f:set(1500, c, 0 / 0)
      f:set(2900, c, -(0 / 0))
    end
    local z = dlpack.zeros({2500, 100}, "float64")
    for c = 1, 100 do z:set(2400, c, -0.0) end -- a later zero of the other sign: the first stays
    local three = dlpack.randn({60, 50, 130}, "float64") -- two reduced dims: positions among both
    local h = dlpack.randn({1500, 200}, "float16") -- converted into the accumulator first
    -- between one task's size and two (65536 < n < 131072): not split, whatever the outputs
    local mid = dlpack.arange(100000, "float64"):view(50, 2000)
    same_on_all_counts(function()
      local mv, mi = dlpack.max(mid, 1)
      local wv, wi = dlpack.max(mid:view(2, 50000), 2)
      assert.are.equal(99999, wv[2])
      assert.are.equal(50000, wi[2])
      assert.are.equal(50, mi[2000])
      assert.are.equal(400, dlpack.argmax(mid:view(400, 250), 1)[250])
      return {mv, mi, wv, wi, dlpack.argmin(mid:view(400, 250), 1)}
    end)
    same_on_all_counts(function()
      local v1, i1 = dlpack.max(ties, 1)
      local v2, i2 = dlpack.min(ties, 1)
      local v3, i3 = dlpack.max(f, 1)
      local v4, i4 = dlpack.min(f, 1)
      local v5, i5 = dlpack.max(z, 1)
      local v6, i6 = dlpack.max(three, {1, 2})
      local v7, i7 = dlpack.min(h, 1)
      return {v1, i1, v2, i2, v3, i3, v4, i4, v5, i5, v6, i6, v7, i7, dlpack.argmin(three, {1, 2})}
    end)
    -- and the answers are right (one element at a time here), on several threads
    dlpack.set_num_threads(3)
    local v1, i1 = dlpack.max(ties, 1)
    local _, i3 = dlpack.max(f, 1)
    local v5, i5 = dlpack.max(z, 1)
    local v6, i6 = dlpack.max(three, {1, 2})
    dlpack.set_num_threads(default)
    for c = 1, 257 do
      local best, at = ties:get(1, c), 1
      for r = 2, 3001 do
        local x = ties:get(r, c)
        if x > best then best, at = x, r end
      end
      assert.are.equal(best, v1[c])
      assert.are.equal(at, i1[c])
    end
    for c = 1, 301 do
      local nan_at = c % 11 == 1 and 1500 or c % 7 == 1 and 2000 + c or nil
      if nan_at then assert.are.equal(nan_at, i3[c]) end
    end
    for c = 1, 100 do
      assert.are.equal(1, i5[c])
      assert.are.equal(1 / 0, 1 / v5[c]) -- +0
    end
    for c = 1, 130, 13 do
      local best, at = -1 / 0, 0
      for p = 1, 3000 do
        local x = three:get(math.floor((p - 1) / 50) + 1, (p - 1) % 50 + 1, c)
        if x > best then best, at = x, p end
      end
      assert.are.equal(best, v6[c])
      assert.are.equal(at, i6[c])
    end
  end)

  it("functions of whole lines (softmax, scans, sorts) split the lines into parts: one thread's bytes", function()
    -- each part of the lines has its own scratch: lines read through it (strided, float16, float64)
    -- would mix if two parts shared one; the parts are of whole lines, the last one shorter
    dlpack.manual_seed(23)
    local x = dlpack.randn({600, 301}, "float32") -- parts of at least 218 lines: 3 at most, the last of 164
    x:set(5, 7, 0 / 0) -- a line of NaN results, and a NaN sorted last (its line gathers by position)
    x:set(400, 1, -1 / 0)
    x:narrow(1, 9, 1):fill(-1 / 0) -- a line of -inf only: NaN, as torch
    local h = dlpack.randn({700, 200}, "float16")
    local d = dlpack.randn({300, 500}, "float64")
    local i = dlpack.randint(-1000, 1000, {400, 400}, "int32")
    local u = dlpack.randint(0, 2 ^ 40, {260, 600}, "int64")
    local cube = dlpack.randn({40, 50, 80}, "float32")
    same_on_all_counts(function()
      local v, at = dlpack.sort(x, 2)
      local tv, ti = dlpack.topk(d, 7, 1)
      local cv, ci = dlpack.sort(cube, 2, {descending = true})
      return {
        dlpack.softmax(x, 2), dlpack.softmax(x, 1), dlpack.log_softmax(x, 2), dlpack.log_softmax(x.T, 1),
        dlpack.softmax(h, 2), dlpack.softmax(h, 1), dlpack.softmax(d, 1), dlpack.log_softmax(d, 2),
        dlpack.softmax(i, 2), dlpack.softmax(cube, 2),
        dlpack.cumsum(x, 2), dlpack.cumsum(x, 1), dlpack.cumprod(h, 2), dlpack.cumsum(i, 1), dlpack.cumprod(d, 2),
        v, at, dlpack.argsort(x, 1), dlpack.sort(x, 2, {indices = false}), dlpack.sort(h, 1, true),
        dlpack.sort(i, 1, {descending = true}), dlpack.argsort(u, 2), dlpack.sort(u.T, 2),
        tv, ti, cv, ci, dlpack.median(d, 2), dlpack.quantile(x, 0.25, 1),
      }
    end)
    -- and what one thread gives is right: a line in the middle of a part, by itself
    dlpack.set_num_threads(3)
    local line = x:narrow(1, 300, 1)
    assert.are.equal(dlpack.softmax(line, 2):tobytes(), dlpack.softmax(x, 2):narrow(1, 300, 1):tobytes())
    assert.are.equal(dlpack.sort(line, 2):tobytes(), dlpack.sort(x, 2):narrow(1, 300, 1):tobytes())
    assert.are.equal(dlpack.cumsum(line, 2):tobytes(), dlpack.cumsum(x, 2):narrow(1, 300, 1):tobytes())
    local s = dlpack.softmax(x, 2)
    assert.is_true(s:get(5, 1) ~= s:get(5, 1)) -- NaN: the line holds one
    assert.is_true(s:get(9, 300) ~= s:get(9, 300)) -- NaN: the line is -inf only
    assert.is_true(math.abs(dlpack.sum(s:narrow(1, 300, 1)) - 1) < 1e-5)
  end)

  it("large copies, conversions and fills split into parts: one thread's bytes, and the right ones", function()
    -- a copy of at least 3 MiB is cut along its largest dimension (whole 64 x 64 tiles when a
    -- transpose is tiled along it); each dtype size has its own tile code
    dlpack.manual_seed(29)
    local m = dlpack.randn({1031, 1517}, "float32")       -- 6 MiB
    local cube = dlpack.randn({97, 101, 103}, "float64")  -- 7.7 MiB
    local bytes = dlpack.randint(0, 256, {2011, 2003}, "uint8")
    local halves = dlpack.randn({1501, 1499}, "float16")
    local wide = dlpack.randn({701, 733}, "float64"):to("complex128") -- 16-byte elements
    local over = dlpack.from_dlpack((require("fabricate").versioned {shape = {1500, 1500}, strides = {1, 1}}))
    same_on_all_counts(function()
      local filled = dlpack.zeros({1517, 2063}, "float32")
      filled:slice(2, 1, -1, 2):fill(7)                  -- a strided fill
      local into = dlpack.zeros({1517, 1031}, "float32").T
      into:copy(m)                                      -- into a transposed destination
      over:copy(dlpack.arange(1500 * 1500, "float32"):view(1500, 1500)) -- writes bytes twice: one thread
      return {
        m.T:contiguous(), m.T:clone(), m:slice(1, -1, 1, -1):clone(), cube:permute({3, 1, 2}):clone(),
        cube:transpose(1, 3):to("float32"), bytes.T:clone(), halves.T:to("float32"), wide.T:clone(),
        dlpack.frombytes(m.T:tobytes(), "uint8"), filled, into, over:clone(),
      }
    end)
    dlpack.set_num_threads(3)
    local t, p, c = m.T:contiguous(), cube:permute({3, 1, 2}):clone(), m:slice(1, -1, 1, -1):clone()
    dlpack.set_num_threads(default)
    for _, at in ipairs({{1, 1}, {1517, 1031}, {64, 65}, {700, 1000}, {1500, 2}}) do
      assert.are.equal(m:get(at[2], at[1]), t:get(at[1], at[2]))
      assert.are.equal(m:get(1032 - at[2], at[1]), c:get(at[2], at[1]))
    end
    for _, at in ipairs({{1, 1, 1}, {97, 101, 103}, {50, 64, 65}, {1, 101, 77}}) do
      assert.are.equal(cube:get(at[1], at[2], at[3]), p:get(at[3], at[1], at[2]))
    end
  end)

  it("large gathers (take, gather, index_select) split into tasks: one thread's bytes and first bad index", function()
    dlpack.manual_seed(31)
    local src = dlpack.randn({4 * 1024 * 1024}, "float32")
    local m = dlpack.randn({2000, 700}, "float64")
    local flat = dlpack.randint(1, 4 * 1024 * 1024 + 1, {1000003}, "int64")
    local rows = dlpack.randint(1, 2001, {1500, 700}, "int32")
    local picks = dlpack.randint(-2000, 0, {301}, "int64") -- negative: from the end; 210700 elements out
    local narrow = dlpack.randint(1, 256, {600000}, "uint8")
    local within = dlpack.randint(1, 1400001, {700000}, "int64")
    same_on_all_counts(function()
      return {
        dlpack.take(src, flat), dlpack.gather(m, 1, rows), dlpack.index_select(m, 1, picks),
        dlpack.take(src, narrow), dlpack.take(m.T, within),
        dlpack.gather(m.T, 2, rows.T), dlpack.take(src:view(1024, 4096), flat:view(1000003)),
      }
    end)
    local t = dlpack.take(src, flat)
    for _, i in ipairs({1, 500000, 1000003}) do assert.are.equal(src[flat[i]], t[i]) end
    -- two bad indices in the last quarter: the first one is named, on any number of threads
    local bad = flat:clone()
    bad[900000] = 0
    bad[950000] = 4 * 1024 * 1024 + 5
    bad[1000000] = -1
    for _, n in ipairs(COUNTS) do
      dlpack.set_num_threads(n)
      raises(function() dlpack.take(src, bad) end, "index 0 out of range %(4194304 elements; indices start at 1%)")
      local out = dlpack.zeros({1000003}, "float32")
      raises(function() dlpack.take(src, bad, {out = out}) end, "index 0 out of range")
    end
    dlpack.set_num_threads(default)
  end)

  it("a long product multiplies fixed parts (from its length only): one thread's value on any number", function()
    local n = 2 ^ 20 + 7 -- 16 parts of 65536 elements (the last 7 shorter)
    local x = dlpack.add(dlpack.mul(dlpack.rand({n}, "float64"), 2 ^ -10), 1 - 2 ^ -11)
    local values = x:totable()
    local parts = math.min(math.floor(n / 65536), 64)
    local len = math.floor((n + parts - 1) / parts)
    local expected = 1
    for lo = 1, n, len do
      local p = 1
      for i = lo, math.min(lo + len - 1, n) do p = p * values[i] end
      expected = expected * p
    end
    local f = x:to("float32")
    local c = f:to("complex64")
    local i = dlpack.randint(-3, 4, {n}, "int64")
    for _, k in ipairs({1, 2, 3}) do
      dlpack.set_num_threads(k)
      assert.are.equal(expected, dlpack.prod(x))
    end
    same_on_all_counts(function()
      return {dlpack.prod(x), dlpack.prod(f), dlpack.prod(f:slice(1, -1, 1, -2)), dlpack.prod(c), dlpack.prod(i)}
    end)
  end)

  it("a split sum has the bits of one pairwise pass (what one thread computes, unsplit)", function()
    -- a long row of values whose sum rounds differently in any other order of additions
    local n = 2 ^ 21 + 13
    local x = dlpack.rand({n}, "float32")
    x:narrow(1, 1, 1):fill(2 ^ 24)
    dlpack.set_num_threads(1)
    local one = dlpack.sum(x)
    for _, k in ipairs({2, 5, 64}) do
      dlpack.set_num_threads(k)
      assert.are.equal(one, dlpack.sum(x))
    end
  end)

  -- The test build in build/gen splits work into tasks of 256 elements (the module's: 65536), so
  -- that layouts drawn at random, a few thousand elements each, run in dozens of tasks: every
  -- splitting path (the walks of elementwise operations and reductions, the parts of rows and
  -- lines, the pairwise sums) against drawn shapes, strides, flips and broadcasts. It runs in a
  -- new process of the interpreter, or here when this is the test build (stage 52 loads the one
  -- built with ThreadSanitizer so, where new processes cannot run).
  local DRAWN = [=[
    local dlpack = require "dlpack"
    math.randomseed(20261129)
    local R = math.random
    local DTYPES = {"float32", "float64", "float16", "int32", "int64", "uint8"}
    local FLOAT = {float32 = true, float64 = true, float16 = true}
    local COPIES = {clone = true, to = true, copy_into_transposed = true, take = true, gather = true}
    local function result(ok, v, w) -- the bytes of what an operation gave, or its error
      if not ok then return "error " .. tostring(v) end
      local parts = {}
      for _, x in ipairs({v, w}) do
        parts[#parts + 1] = type(x) == "userdata" and x:tobytes() or string.format("%s %.17g", type(x),
          x == true and 1 or x or 0)
      end
      return table.concat(parts, "|")
    end
    local checked = 0
    for case = 1, 120 do
      local dtype = DTYPES[R(#DTYPES)]
      local ndim = R(1, 4)
      local shape, numel = {}, 1
      for d = 1, ndim do
        shape[d] = R(1, math.max(2, math.floor((6000 / numel) ^ (1 / (ndim - d + 1))) * 2))
        numel = numel * shape[d]
      end
      local x = FLOAT[dtype] and dlpack.randn(shape, dtype) or dlpack.randint(-100, 100, shape, "int64"):to(dtype)
      local how = {dtype, table.concat(shape, "x")}
      for _ = 1, R(0, 3) do -- views: a transpose, a flip, a slice with a step
        local kind, d = R(3), R(ndim)
        if kind == 1 and ndim > 1 then
          local e = R(ndim)
          x = x:transpose(d, e)
          how[#how + 1] = ("transpose(%d, %d)"):format(d, e)
        elseif kind == 2 then
          x = x:flip({d})
          how[#how + 1] = ("flip(%d)"):format(d)
        elseif x:size(d) > 2 then
          x = x:slice(d, 1, -1, 2)
          how[#how + 1] = ("slice(%d, 1, -1, 2)"):format(d)
        end
      end
      local d = R(x:dim())
      local flat_index = dlpack.randint(1, x:numel() + 1, {R(1, 2 * x:numel())}, "int64")
      local along_d = dlpack.randint(-x:size(d), x:size(d) + 1, x:size(), R(2) == 1 and "int64" or "int32")
      along_d = dlpack.where(dlpack.eq(along_d, 0), 1, along_d):to(along_d.dtype) -- no 0: 1-based or from the end
      local row = FLOAT[dtype] and dlpack.randn({x:size(x:dim())}, dtype) or dlpack.ones({x:size(x:dim())}, dtype)
      local ops = {
        add = function() return dlpack.add(x, row) end, -- broadcast along the last dimension
        mul = function() return dlpack.mul(x, 3) end,
        exp = function() return dlpack.exp(x) end,
        where = function() return dlpack.where(dlpack.gt(x, 0), x, row) end,
        sum = function() return dlpack.sum(x) end,
        sum_dim = function() return dlpack.sum(x, d) end,
        mean_dim = function() return dlpack.mean(x, d) end,
        prod_dim = function() return dlpack.prod(x, d) end,
        max = function() return dlpack.max(x) end,
        max_dim = function() return dlpack.max(x, d) end,
        argmin_dim = function() return dlpack.argmin(x, d) end,
        any_dim = function() return dlpack.any(dlpack.gt(x, 1), d) end,
        softmax = function() return dlpack.softmax(x, d) end,
        cumsum = function() return dlpack.cumsum(x, d) end,
        sort = function() return dlpack.sort(x, d) end,
        topk = function() return dlpack.topk(x, math.min(3, x:size(d)), d) end,
        mean = function() return dlpack.mean(x) end,
        var_dim = function() return dlpack.var(x, d) end,
        argmax = function() return dlpack.argmax(x) end,
        all_dim = function() return dlpack.all(dlpack.lt(x, 2), d) end,
        log_softmax = function() return dlpack.log_softmax(x, d) end,
        cumprod = function() return dlpack.cumprod(x, d) end,
        argsort = function() return dlpack.argsort(x, d, {descending = true}) end,
        median = function() return dlpack.median(x, d) end,
        take = function() return dlpack.take(x, flat_index) end, -- gathers: runs of indices
        gather = function() return dlpack.gather(x, d, along_d) end,
        clone = function() return x:clone() end, -- copies: split along their largest dimension
        to = function() return x:to(dtype == "float64" and "float32" or "float64") end,
        copy_into_transposed = function()
          local n = x:size(x:dim())
          local m = math.floor(x:numel() / n)
          local into = dlpack.empty({n, m}, dtype).T
          into:copy(x:reshape({m, n}))
          return into
        end,
      }
      for name, op in pairs(ops) do
        dlpack.set_num_threads(1)
        local one = result(pcall(op))
        dlpack.set_num_threads(3)
        local three = result(pcall(op))
        if one ~= three then
          error(("case %d, %s of %s along %d: 3 threads differ from one (%s)"):format(case, name,
            table.concat(how, " "), d, one:sub(1, 80)))
        end
        if COPIES[name] and one:match("^error") then -- every copy and gather here can be done: an error is a bug
          error(("case %d, %s of %s: %s"):format(case, name, table.concat(how, " "), one))
        end
        checked = checked + 1
      end
    end
    return checked
  ]=]
  local gen = support.BUILD .. "/gen/dlpack/core." .. support.SO
  local built = io.open(gen, "rb")
  if built then built:close() end
  local name = "splits drawn layouts of small tensors into small tasks: one thread's bytes (the test build)"
  if support.BUILD:match("[/\\]gen$") then
    it(name, function() assert.are.equal(3480, assert((rawget(_G, "loadstring") or load)(DRAWN))()) end)
  elseif not built then
    pending(name .. ": " .. gen .. " (make test-build) is not built")
  elseif os.getenv("LD_PRELOAD") then
    pending(name .. ": it runs a new process of the interpreter, which a preloaded sanitizer runtime crashes")
  else
    it(name, function()
      local cpath = support.BUILD .. "/gen/?." .. support.SO .. ";;"
      local out = support.run_lua("print(assert((loadstring or load)(" .. string.format("%q", DRAWN) .. "))())",
                                  {LUA_PATH = package.path, LUA_CPATH = cpath})
      assert.are.equal("3480\n", out)
    end)
  end
end)
