-- make bench: each row times an operation of the module against a baseline measured in the
-- same process: a C loop built with the module's flags working on the same buffers
-- (bench/baselines.c), or the same operation on a smaller or contiguous input. Rounds of the
-- two are interleaved (alternating which goes first); a row prints the median ratio of the
-- rounds, their spread (lowest and highest), and its goal. Ratios, not times, are the figures
-- to compare across machines.
-- NumPy and PyTorch times for the same operations come from a separate process
-- (bench/peers.py), shown alongside where they are installed; rows whose baseline they are use
-- one run of it, or new runs interleaved with the module's rounds (DLPACK_BENCH_PEER_ROUNDS).

-- The bench times what a default install does. On some processors the environment sets
-- OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE (older OpenBLAS builds need them there): the module keeps
-- a process's own OPENBLAS_CORETYPE, so the BLAS rows would time the kernels they name rather than
-- those the module picks, and they slow a current NumPy. The bench runs itself again without them
-- (DLPACK_BENCH_KEEP_OPENBLAS=1 keeps them: the rows then time the environment's choice).
if (os.getenv("OPENBLAS_CORETYPE") or os.getenv("OPENBLAS_L2_SIZE")) and not os.getenv("DLPACK_BENCH_KEEP_OPENBLAS")
    and not os.getenv("DLPACK_BENCH_CHILD") then
  print(string.format("make bench: runs without OPENBLAS_CORETYPE=%s and OPENBLAS_L2_SIZE=%s from the environment, " ..
                      "as a default install (DLPACK_BENCH_KEEP_OPENBLAS=1 keeps them)",
                      tostring(os.getenv("OPENBLAS_CORETYPE")), tostring(os.getenv("OPENBLAS_L2_SIZE"))))
  io.stdout:flush()
  local command, first = { "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE" }, 0
  while arg[first - 1] do first = first - 1 end -- the interpreter and its options, as given
  for k = first, #arg do command[#command + 1] = "'" .. arg[k]:gsub("'", "'\\''") .. "'" end
  local ok, _, code = os.execute(table.concat(command, " "))
  if type(ok) == "number" then os.exit(ok == 0 and 0 or 1) end -- Lua 5.1: the status alone
  os.exit(ok == true or code or 1)
end

local dlpack = require "dlpack"
local base = require "bench.baselines"

local now = base.now
-- DLPACK_BENCH_CHILD: a child the bench started for rows that need another environment (it runs
-- only those, without NumPy and CUDA)
local CHILD = os.getenv("DLPACK_BENCH_CHILD") ~= nil

-- The processor's name (Linux), for the rows whose ratio depends on it.
local function cpu_name()
  local f = io.open("/proc/cpuinfo")
  local text = f and f:read("*a") or ""
  if f then f:close() end
  local name = text:match("model name%s*:%s*([^\n]+)") or "processor unknown"
  for _, feature in ipairs({"avx512f", "avx2", "fma"}) do
    if text:find(" " .. feature .. "%f[%s]") then name = name .. " " .. feature end
  end
  return name
end
local ROUNDS = tonumber(os.getenv("DLPACK_BENCH_ROUNDS")) or 15
-- DLPACK_BENCH_ONLY=pattern[,pattern...]: only the rows whose key matches one of the Lua patterns
-- (e.g. "add,sum"); the others are left out.
local ONLY = os.getenv("DLPACK_BENCH_ONLY")
local function wanted(key)
  if not ONLY then return true end
  for pattern in ONLY:gmatch("[^,]+") do
    if key:match(pattern) then return true end
  end
  return false
end
local TARGET = 0.03 -- seconds a timed batch should take

-- Seconds per operation of fn(n), which runs the operation n times.
local function per_op(fn, n)
  local t0 = now()
  fn(n)
  return (now() - t0) / n
end

-- A batch size that makes fn take about TARGET seconds. A first call goes before: what only it
-- pays (the first capsule's slot table, the C allocator tidying the blocks a freed heap left)
-- would otherwise make batches of one call, timed mostly by the clock.
local function batch(fn)
  fn(1)
  local n = 1
  while true do
    local t = per_op(fn, n) * n
    if t >= TARGET / 8 then return math.max(1, math.floor(n * TARGET / t)) end
    n = n * 4
  end
end

local function median(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  local m = #s
  if m % 2 == 1 then return s[(m + 1) / 2] end
  return (s[m / 2] + s[m / 2 + 1]) / 2
end

local function fmt_time(t)
  if t >= 1e-3 then return string.format("%8.2f ms", t * 1e3) end
  if t >= 1e-6 then return string.format("%8.2f us", t * 1e6) end
  return string.format("%8.1f ns", t * 1e9)
end

-- Timings of the same operations in NumPy and PyTorch (another process, bench/peers.py with
-- `args`), by row key.
local function peer_times(args)
  local times = {}
  local python = os.getenv("PYTHON") or "/usr/bin/python3"
  -- On some processors the environment sets OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE (older
  -- OpenBLAS builds compute wrong results there); they slow a current NumPy, so the process that
  -- times NumPy runs without them. Nothing else changes.
  local pipe = not CHILD and io.popen("env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE " .. python ..
                                      " bench/peers.py " .. args .. " 2>/dev/null")
  if pipe then
    for line in pipe:lines() do
      local key, who, t = line:match("^(%S+) (%S+) (%S+)$")
      if key then
        times[key] = times[key] or {}
        times[key][who] = tonumber(t)
      end
    end
    pipe:close()
  end
  return times
end
local peers = peer_times("")
-- DLPACK_BENCH_PEER_ROUNDS=n: a row against NumPy or PyTorch takes n rounds, each timing the
-- module and then a new bench/peers.py process for that row alone (which goes first
-- alternates), and prints the median of the rounds' ratios: slower, but a loaded machine then
-- slows both sides of a ratio alike.
local PEER_ROUNDS = tonumber(os.getenv("DLPACK_BENCH_PEER_ROUNDS"))

local rows = {}
local met = 0

-- One row: fn and baseline each take a repeat count. goal is the highest acceptable ratio (nil:
-- the row only reports, and is not counted among the goals).
local function row(key, name, goal, fn, baseline, baseline_name)
  if not wanted(key) then return end
  collectgarbage()
  local n1, n2 = batch(fn), batch(baseline)
  local ratios, ours, theirs = {}, {}, {}
  for r = 1, ROUNDS do -- which side goes first alternates, so that drift favours neither
    if r % 2 == 1 then
      ours[r] = per_op(fn, n1)
      theirs[r] = per_op(baseline, n2)
    else
      theirs[r] = per_op(baseline, n2)
      ours[r] = per_op(fn, n1)
    end
    ratios[r] = ours[r] / theirs[r]
  end
  local ratio = median(ratios)
  local lo, hi = math.huge, 0
  for _, x in ipairs(ratios) do lo, hi = math.min(lo, x), math.max(hi, x) end
  local ok = goal and ratio <= goal
  if ok then met = met + 1 end
  local p, others = peers[key], ""
  if p then
    if p.numpy then others = others .. " numpy" .. fmt_time(p.numpy) end
    if p.torch then others = others .. " torch" .. fmt_time(p.torch) end
  end
  if goal then rows[#rows + 1] = key end
  print(string.format("%-44s %s vs %s %6.2fx [%5.2f-%5.2f]  %s  (baseline: %s)%s",
    name, fmt_time(median(ours)), fmt_time(median(theirs)), ratio, lo, hi,
    goal and string.format("goal <= %-4g %s", goal, ok and "met" or "MISSED") or "(reported)  ",
    baseline_name, others))
end

-- A row whose baseline is a time of bench/peers.py (`who`: numpy or torch), measured in the same
-- `make bench` run by another process: the ratio of the median of ROUNDS batches of fn to it.
local function peer_row(key, name, goal, fn, who, baseline_name)
  if not wanted(key) then return end
  local theirs = peers[key] and peers[key][who]
  if not theirs then
    print(string.format("%-44s skipped: no %s time from bench/peers.py (is %s installed?)", name, who, who))
    return
  end
  collectgarbage()
  local n = batch(fn)
  local ours, ratios, lo, hi = {}, {}, math.huge, 0
  local ratio
  if PEER_ROUNDS then
    local others = {}
    for r = 1, PEER_ROUNDS do
      if r % 2 == 1 then ours[r] = per_op(fn, n) end
      local again = peer_times("--only=" .. key)
      others[r] = again[key] and again[key][who] or theirs
      if r % 2 == 0 then ours[r] = per_op(fn, n) end
      ratios[r] = ours[r] / others[r]
      lo, hi = math.min(lo, ratios[r]), math.max(hi, ratios[r])
    end
    ratio, theirs = median(ratios), median(others)
  else
    for r = 1, ROUNDS do
      ours[r] = per_op(fn, n)
      lo, hi = math.min(lo, ours[r] / theirs), math.max(hi, ours[r] / theirs)
    end
    ratio = median(ours) / theirs
  end
  local ok = ratio <= goal
  if ok then met = met + 1 end
  rows[#rows + 1] = key .. "/" .. who
  print(string.format("%-44s %s vs %s %6.2fx [%5.2f-%5.2f]  goal <= %-4g %s  (baseline: %s, %s)",
    name, fmt_time(median(ours)), fmt_time(theirs), ratio, lo, hi, goal, ok and "met" or "MISSED", baseline_name,
    who))
end

-- A row whose baseline is NumPy timed in the same process: bench/lupa_rows.py runs the module's
-- loop inside Python through lupa, alternating rounds of it with NumPy's, so that the load of the
-- machine weighs on both sides of each round's ratio alike. Skipped, visibly, without lupa.
local function lupa_row(key, name, goal, baseline_name)
  if not wanted(key) or CHILD then return end
  local python = os.getenv("PYTHON") or "/usr/bin/python3"
  local pipe = io.popen("env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE " .. python .. " bench/lupa_rows.py --only=" ..
                        key .. " --rounds=" .. ROUNDS .. " 2>&1")
  local text = pipe:read("*a")
  pipe:close()
  local ratio, lo, hi, ours, theirs = text:match(key .. " (%S+) (%S+) (%S+) (%S+) (%S+)")
  if not ratio then
    print(string.format("%-44s skipped: %s", name, text:match("# ([^\n]*)") or "bench/lupa_rows.py printed no row"))
    return
  end
  ratio = tonumber(ratio)
  local ok = ratio <= goal
  if ok then met = met + 1 end
  rows[#rows + 1] = key .. "/lupa"
  print(string.format("%-44s %s vs %s %6.2fx [%5.2f-%5.2f]  goal <= %-4g %s  (baseline: %s, numpy in the process)",
    name, fmt_time(tonumber(ours)), fmt_time(tonumber(theirs)), ratio, tonumber(lo), tonumber(hi), goal,
    ok and "met" or "MISSED", baseline_name))
end

-- A row whose function is not in the module yet: one visible line, not counted.
local function skip_row(name, why)
  print(string.format("%-44s skipped: %s", name, why))
end

print(string.format("make bench: median of %d interleaved rounds, ratio [lowest-highest] to a baseline in the same " ..
  "process; NumPy/PyTorch times from a separate process", ROUNDS))

-- The processor, as the computing rows depend on it: the build of the loops in use
-- (dlpack.cpu(); DLPACK_LUA_CPU forces a lower one) and the vector features the processor reports.
do
  local level, detected = dlpack.cpu()
  local model, flags = "?", {}
  local f = io.open("/proc/cpuinfo", "r")
  if f then
    for line in f:lines() do
      if line:match("^model name") and model == "?" then model = line:match(":%s*(.-)%s*$") end
      if line:match("^flags") and #flags == 0 then
        for flag in line:gmatch("%S+") do
          if flag:match("^avx") or flag == "fma" or flag == "f16c" then flags[#flags + 1] = flag end
        end
      end
    end
    f:close()
  end
  print(string.format("cpu: %s; the module's %s loops (detected %s%s); %s", model, level, detected,
    os.getenv("DLPACK_LUA_CPU") and ", DLPACK_LUA_CPU=" .. os.getenv("DLPACK_LUA_CPU") or "",
    #flags > 0 and table.concat(flags, " ") or "no /proc/cpuinfo flags"))
end

-- ---- exchange ----

local big = dlpack.zeros({10000000}, "float32")
local one = dlpack.zeros({1}, "float32")
local small = dlpack.zeros({3, 4}, "float32")
local function round_trip(t)
  return function(n)
    for _ = 1, n do local _ = dlpack.from_dlpack(dlpack.to_dlpack(t)) end
  end
end

do -- a Lua heap of about 50 MB that the collector has to walk
  local ballast = {} -- luacheck: ignore 241 (only there to be walked)
  for i = 1, 400000 do ballast[i] = {i, i + 0.5} end
  row("roundtrip_big_heap", string.format("from_dlpack(to_dlpack(t)) 10^7 vs 1 elt (%d MB heap)",
      math.floor(collectgarbage("count") / 1024)), 1.2, round_trip(big), round_trip(one), "1 element")
end -- ballast is out of scope here: the collector below frees it
collectgarbage()
row("roundtrip_big", string.format("from_dlpack(to_dlpack(t)) 10^7 vs 1 elt (%d MB heap)",
    math.floor(collectgarbage("count") / 1024)), 1.2, round_trip(big), round_trip(one), "1 element")
local floor = base.floor
row("roundtrip_small", "from_dlpack(to_dlpack(t)) 3x4", 1.5, round_trip(small),
    function(n) for _ = 1, n do local _ = floor() end end, "finalised userdata + malloc, from Lua")
big:release()

-- ---- element access ----

local N = 4096
local v = dlpack.zeros({N}, "float64")
local a = base.array(N)
local function reader(t)
  return function(n)
    local s, k = 0.0, 1
    for _ = 1, n do
      s = s + t[k]
      k = k + 1
      if k > N then k = 1 end
    end
    return s
  end
end
local function writer(t)
  return function(n)
    local k = 1
    for i = 1, n do
      t[k] = i
      k = k + 1
      if k > N then k = 1 end
    end
  end
end
row("index_read", "t[i] read (1-d float64)", 1.3, reader(v), reader(a), "C __index")
row("index_write", "t[i] = v write (1-d float64)", 1.3, writer(v), writer(a), "C __newindex")

-- ---- fill and conversions ----

local MiB16 = 16 * 1024 * 1024
local f32 = dlpack.empty({MiB16 / 4}, "float32")
local u8 = dlpack.empty({MiB16}, "uint8")
row("fill_f32", "t:fill(0) float32 16 MiB", 1.3, function(n) for _ = 1, n do f32:fill(0) end end,
    function(n) base.memset(f32, 0, 4, n) end, "memset")
row("fill_u8", "t:fill(7) uint8 16 MiB", 1.3, function(n) for _ = 1, n do u8:fill(7) end end,
    function(n) base.memset(u8, 7, 1, n) end, "memset")

local M = 2 * 1024 * 1024
local s64 = dlpack.full({M}, 1.25, "float64")
local d32 = dlpack.empty({M}, "float32")
local s32 = dlpack.full({M}, 3, "int32")
local d64 = dlpack.empty({M}, "float64")
local src32 = dlpack.full({M}, 1.5, "float32")
local h16 = dlpack.empty({M}, "float16")
local b16 = dlpack.empty({M}, "bfloat16")
row("convert_f64_f32", "d:copy(s) float64 -> float32 (2M)", 1.5, function(n) for _ = 1, n do d32:copy(s64) end end,
    function(n) base.f64_to_f32(d32, s64, n) end, "C cast loop")
row("convert_i32_f64", "d:copy(s) int32 -> float64 (2M)", 1.5, function(n) for _ = 1, n do d64:copy(s32) end end,
    function(n) base.i32_to_f64(d64, s32, n) end, "C cast loop")
row("convert_f32_f16", "d:copy(s) float32 -> float16 (2M)", 2, function(n) for _ = 1, n do h16:copy(src32) end end,
    function(n) base.f32_to_f16(h16, src32, n) end, "C bit-trick loop")
-- float16 -> float32: F16C's instructions where the processor has them (DLPACK_LUA_CPU=baseline:
-- the portable loop), against a C loop of the bits and against NumPy's astype (4M elements)
local M4h = 4 * 1024 * 1024
local f4h = dlpack.empty({M4h}, "float32")
local h4 = dlpack.sub(dlpack.mul(dlpack.rand({M4h}, "float32"), 4), 2):to("float16") -- [-2, 2), as NumPy's
local function f16_to_f32(n) for _ = 1, n do f4h:copy(h4) end end
row("convert_f16_f32", "d:copy(s) float16 -> float32 (4M)", 1.5, f16_to_f32,
    function(n) base.f16_to_f32(f4h, h4, n) end, "C bit-by-bit loop")
peer_row("convert_f16_f32", "  s:to('float32') vs NumPy astype", 1.5,
         function(n) for _ = 1, n do local _ = h4:to("float32") end end, "numpy", "h.astype(np.float32)")
row("convert_f32_bf16", "d:copy(s) float32 -> bfloat16 (2M)", 2, function(n) for _ = 1, n do b16:copy(src32) end end,
    function(n) base.f32_to_bf16(b16, src32, n) end, "C bit-trick loop")
-- 64-bit integers beyond 2^53 round once (a double that is a midpoint of the narrow float is
-- redone rounded to odd): float32 against the int64 -> float64 conversion (both scalar without
-- AVX-512), bfloat16 against values below 2^53 (exact through a double)
local big64 = dlpack.arange(0, M, "int64") * 4398046511104 + 12345 -- up to 2^63, low bits set
local small64 = dlpack.arange(0, M, "int64")
row("convert_i64_f32", "d:copy(s) int64 beyond 2^53 -> float32 (2M)", 1.5,
    function(n) for _ = 1, n do d32:copy(big64) end end, function(n) for _ = 1, n do d64:copy(big64) end end,
    "int64 -> float64")
row("convert_i64_bf16", "d:copy(s) int64 beyond 2^53 -> bfloat16 (2M)", 1.5,
    function(n) for _ = 1, n do b16:copy(big64) end end, function(n) for _ = 1, n do b16:copy(small64) end end,
    "int64 below 2^53 -> bfloat16")
-- int64 against uint64 compares exactly (its own loops), int64 against int64 in the same loop shape
local u64 = dlpack.arange(0, M, "uint64")
local cmp_out = dlpack.empty({M}, "bool")
row("eq_i64_u64", "eq(int64, uint64, {out =}) exact (2M)", 1.5,
    function(n) for _ = 1, n do dlpack.eq(small64, u64, {out = cmp_out}) end end,
    function(n) for _ = 1, n do dlpack.eq(small64, big64, {out = cmp_out}) end end, "eq(int64, int64)")

-- ---- layout changes ----

local sq = dlpack.full({2048, 2048}, 1, "float32")
local sq_t = sq:transpose(1, 2)
local sq_dst = dlpack.empty({2048, 2048}, "float32")
row("transpose", "dst:copy(src:transpose(1, 2)) 2048^2 float32", 1.2,
    function(n) for _ = 1, n do sq_dst:copy(sq_t) end end, function(n) base.transpose(sq_dst, sq, n) end,
    "32x32-blocked C transpose")

-- bytes (an image's planes): 16x16 blocks of them transposed in SSE2 registers
local sq8 = dlpack.full({2048, 2048}, 1, "uint8")
local sq8_t, sq8_dst = sq8:transpose(1, 2), dlpack.empty({2048, 2048}, "uint8")
peer_row("transpose_u8", "dst:copy(src:transpose(1, 2)) 2048^2 uint8", 1,
         function(n) for _ = 1, n do sq8_dst:copy(sq8_t) end end, "numpy", "np.copyto(dst, src.T)")

local cube = dlpack.full({64, 256, 256}, 1, "float32")
local cube_p = cube:permute({3, 1, 2})
row("permute_clone", "t:permute({3, 1, 2}):clone() 16 MiB float32", 1.2,
    function(n) for _ = 1, n do cube_p:clone():release() end end, function(n) base.permute3(cube, n) end,
    "malloc + blocked C copy + free")
row("clone", "t:clone() 16 MiB", 1.5, function(n) for _ = 1, n do f32:clone():release() end end,
    function(n) base.malloc_memcpy_free(f32, MiB16, n) end, "malloc + memcpy + free")
row("make_drop", "make and drop a 1 MiB tensor (zeros)", 3,
    function(n) for _ = 1, n do local _ = dlpack.zeros({262144}, "float32") end end,
    function(n) base.malloc_memset_free(1024 * 1024, n) end, "malloc + memset + free")

do -- the 8 MB string goes with the block: a larger Lua heap slows the rows of small tensors below
  local bytes8 = string.rep("\1", 8 * 1000 * 1000)
  local landing = dlpack.empty({#bytes8}, "uint8")
  row("frombytes", "dlpack.frombytes(s, 'uint8') 8 MB", 2,
      function(n) for _ = 1, n do dlpack.frombytes(bytes8, "uint8"):release() end end,
      function(n) base.copy_string(landing, bytes8, n) end, "memcpy")
end

local m = dlpack.full({1000, 1000}, 2, "float32")
local m_t = m:transpose(1, 2)
row("tobytes_strided", "t:transpose(1, 2):tobytes() 1000^2 float32", 2,
    function(n) for _ = 1, n do local _ = m_t:tobytes() end end,
    function(n) for _ = 1, n do local _ = m:tobytes() end end, "contiguous tobytes")

-- .npy files: a mapped load costs the same whatever the file's size (it reads the header and maps,
-- touching no data); a plain load reads the file into a new tensor.
if wanted("npy") then
  local npy_big, npy_small, mapped = os.tmpname(), os.tmpname(), {mmap = true}
  dlpack.save(npy_big, dlpack.zeros({16 * 1024 * 1024}, "float32")) -- 64 MiB
  dlpack.save(npy_small, dlpack.zeros({1024}, "float32"))           -- 4 KiB
  row("npy_mmap", "dlpack.load(path, {mmap = true}) 64 MiB file", 1.2,
      function(n) for _ = 1, n do dlpack.load(npy_big, mapped):release() end end,
      function(n) for _ = 1, n do dlpack.load(npy_small, mapped):release() end end, "the same, 4 KiB file")
  row("npy_read", "dlpack.load(path) 64 MiB file", nil,
      function(n) for _ = 1, n do dlpack.load(npy_big):release() end end,
      function(n) for _ = 1, n do local f = io.open(npy_big, "rb"); f:read("*a"); f:close() end end,
      "io.open(path):read('a')")
  os.remove(npy_big)
  os.remove(npy_small)
end

-- ---- computing (issue 16) ----

-- The first function of the list the module lacks, as a reason to skip.
local function lacks(...)
  for _, name in ipairs({...}) do
    if dlpack[name] == nil then return "no dlpack." .. name .. " yet" end
  end
  return nil
end

-- Inputs: 64 float32 values in [-2, 2) repeated (bench/peers.py makes the same), so that the
-- math functions see varied values.
local M4 = 4 * 1024 * 1024
local pattern = {}
for i = 1, 64 do pattern[i] = (i - 1) / 16 - 2 end
pattern = dlpack.tensor(pattern, "float32"):tobytes()
local fa = dlpack.frombytes(string.rep(pattern, M4 / 64), "float32")
local fb = dlpack.full({M4}, 0.75, "float32")
local fc = dlpack.empty({M4}, "float32")
local into_fc = {out = fc}

local why = lacks("add")
if why then
  skip_row("dlpack.add(a, b, {out = c}) float32 4M", why)
else
  local function add_out(n) for _ = 1, n do dlpack.add(fa, fb, into_fc) end end
  row("add_f32_out", "dlpack.add(a, b, {out = c}) float32 4M", 1.2, add_out,
      function(n) base.add_f32(fc, fa, fb, n) end, "C loop c[i] = a[i] + b[i]")
  peer_row("add_f32_out", "  the same vs NumPy", 1.0, add_out, "numpy", "np.add(a, b, out=c)")
  local img = dlpack.full({480, 640, 3}, 1.5, "float32")
  local chan = dlpack.tensor({0.25, 0.5, 0.75}, "float32")
  local img_flat = dlpack.full({480 * 640 * 3}, 1.5, "float32")
  local chan_flat = dlpack.full({480 * 640 * 3}, 0.5, "float32")
  local into_img = {out = dlpack.empty({480, 640, 3}, "float32")}
  local into_flat = {out = dlpack.empty({480 * 640 * 3}, "float32")}
  row("add_broadcast", "add {480,640,3} + {3} float32, out=", 2.0,
      function(n) for _ = 1, n do dlpack.add(img, chan, into_img) end end,
      function(n) for _ = 1, n do dlpack.add(img_flat, chan_flat, into_flat) end end,
      "contiguous add of as many elements")
end

why = lacks("exp")
if why then
  skip_row("dlpack.exp(a, {out = c}) float32 4M", why)
else
  peer_row("exp_f32", "dlpack.exp(a, {out = c}) float32 4M", 1.0,
           function(n) for _ = 1, n do dlpack.exp(fa, into_fc) end end, "numpy", "np.exp(a, out=c)")
end

why = lacks("pow")
if why then
  skip_row("dlpack.pow(b, a, {out = c}) float32 4M", why)
else -- b is 0.75 and a in [-2, 2): every lane takes the AVX-512 loop's formula
  peer_row("pow_f32", "dlpack.pow(b, a, {out = c}) float32 4M", 2.0,
           function(n) for _ = 1, n do dlpack.pow(fb, fa, into_fc) end end, "numpy", "np.power(b, a, out=c)")
end

why = lacks("sum")
if why then
  skip_row("dlpack.sum(a) float32 4M", why)
else
  local function sum(n) for _ = 1, n do local _ = dlpack.sum(fa) end end
  row("sum_f32", "dlpack.sum(a) float32 4M", 1.2, sum, function(n) base.sum_f32(fa, n) end,
      "C pairwise sum, NumPy's blocking")
  peer_row("sum_f32", "  the same vs NumPy", 1.0, sum, "numpy", "np.sum(a)")
end

-- fn(n) on `threads` threads of the module's pool, then the default again
local function on_threads(threads, fn)
  return function(n)
    dlpack.set_num_threads(threads)
    fn(n)
    dlpack.set_num_threads(0)
  end
end

why = lacks("add", "sum", "max", "argmin", "prod", "set_num_threads")
if why then
  skip_row("add, sum, max, argmin, prod float32 16M on 2 threads", why)
elseif wanted("add_f32_2threads") or wanted("sum_f32_2threads") or wanted("max_f32_2threads") or
    wanted("argmin_f32_2threads") or wanted("prod_f32_2threads") or wanted("c_sum_f32_2threads") or
    wanted("add_f32_past_cache") then
  -- the same operation on 2 threads of the module's pool against 1 (docs/api.md, "Threads"): the
  -- ratio says what the second core brings (a machine busy with other work brings less)
  local M16 = 16 * 1024 * 1024
  local x16, y16, z16 = dlpack.rand({M16}, "float32"), dlpack.rand({M16}, "float32"), dlpack.empty({M16}, "float32")
  local into_z16 = {out = z16}
  local function add16(n) for _ = 1, n do dlpack.add(x16, y16, into_z16) end end
  local function sum16(n) for _ = 1, n do local _ = dlpack.sum(x16) end end
  -- a 64 MB output, larger than most last-level caches, is stored past the cache (docs/api.md,
  -- "The processor"): against a C loop whose plain stores read each line before writing it
  row("add_f32_past_cache", string.format("add(a, b, {out = c}) float32 16M, 1 thread (past the cache from %d MiB)",
      math.floor((select(3, dlpack.cpu()) or 0) / 1048576)), 0.9, on_threads(1, add16),
      function(n) base.add_f32(z16, x16, y16, n) end, "C loop c[i] = a[i] + b[i]")
  row("add_f32_2threads", "add(a, b, {out = c}) float32 16M, 2 threads", 0.6, on_threads(2, add16),
      on_threads(1, add16), "the same on 1 thread")
  row("sum_f32_2threads", "dlpack.sum(a) float32 16M, 2 threads", 0.6, on_threads(2, sum16), on_threads(1, sum16),
      "the same on 1 thread")
  local function max16(n) for _ = 1, n do local _ = dlpack.max(x16) end end
  local function argmin16(n) for _ = 1, n do local _ = dlpack.argmin(x16) end end
  local p16 = dlpack.add(dlpack.mul(x16, 2 ^ -20), 1) -- near 1: no overflow
  local function prod16(n) for _ = 1, n do local _ = dlpack.prod(p16) end end
  row("max_f32_2threads", "dlpack.max(a) float32 16M, 2 threads", 0.6, on_threads(2, max16), on_threads(1, max16),
      "the same on 1 thread")
  row("argmin_f32_2threads", "dlpack.argmin(a) float32 16M, 2 threads", 0.6, on_threads(2, argmin16),
      on_threads(1, argmin16), "the same on 1 thread")
  row("prod_f32_2threads", "dlpack.prod(a) float32 16M, 2 threads", 0.6, on_threads(2, prod16), on_threads(1, prod16),
      "the same on 1 thread")
  -- the bound of the rows above on this machine: what a second core brings to a C loop reading
  -- the same memory (where it is above 0.6, the memory, not the module, misses the goal)
  row("c_sum_f32_2threads", "  C pairwise sum float32 16M, 2 threads", nil,
      function(n) base.sum_f32_threads(x16, n, 2) end, function(n) base.sum_f32_threads(x16, n, 1) end,
      "the same on 1 thread")
end

why = lacks("sort", "set_num_threads")
if why then
  skip_row("dlpack.sort(x, 2) {4096, 1000} float32, 2 threads", why)
elseif wanted("sort_2threads") then
  -- functions of whole lines (softmax, scans, sorts) split the lines into parts (docs/api.md,
  -- "Threads"): sorting them on 2 threads of the module's pool against 1
  local lines = dlpack.rand({4096, 1000}, "float32")
  local function sort(n) for _ = 1, n do local _, _ = dlpack.sort(lines, 2) end end
  row("sort_2threads", "dlpack.sort(x, 2) {4096, 1000} float32, 2 threads", 0.6, on_threads(2, sort),
      on_threads(1, sort), "the same on 1 thread")
end

why = lacks("argmax")
if why then
  skip_row("dlpack.argmax(a) float32 4M", why)
else
  peer_row("argmax_f32", "dlpack.argmax(a) float32 4M", 1.2,
           function(n) for _ = 1, n do local _ = dlpack.argmax(fa) end end, "numpy", "np.argmax(a)")
  -- over the outer dim: a row of outputs compared with each row of the input
  local rows4k = fa:reshape({4096, 1024})
  peer_row("max_outer_f32", "dlpack.max(a, 1) float32 {4096, 1024}", 1.2,
           function(n) for _ = 1, n do local _ = dlpack.max(rows4k, 1) end end, "numpy", "np.max(a, axis=0)")
end

-- 1M indices spread over the 4M elements (bench/peers.py makes the same, 0-based for NumPy)
why = lacks("gather")
if why then
  skip_row("dlpack.gather(a, 1, index) 1M of float32 4M", why)
else
  local index = dlpack.arange(1024 * 1024) * 2654435761 % M4 + 1
  peer_row("gather", "dlpack.gather(a, 1, index) 1M of float32 4M", 1.2,
           function(n) for _ = 1, n do dlpack.gather(fa, 1, index):release() end end, "numpy", "np.take(a, index)")
  peer_row("take", "dlpack.take(a, index) 1M of float32 4M", 1.2,
           function(n) for _ = 1, n do dlpack.take(fa, index):release() end end, "numpy", "np.take(a, index)")
end

-- Sorting and scans: 4M float32 in [-0.5, 0.5) from a multiplicative hash of the index (bench/peers.py
-- makes the same), and softmax over the last dimension of {4096, 1000}.
why = lacks("sort", "argsort", "cumsum", "softmax")
if why then
  skip_row("dlpack.sort(r, 1, {indices = false}) float32 4M", why)
else
  local r = (dlpack.arange(0, M4, "int64") * 2654435761 % 4294967296):to("float32") / 4294967296 - 0.5
  local values_only = {indices = false}
  peer_row("sort_f32", "dlpack.sort(r, 1, {indices = false}) float32 4M", 1.2,
           function(n) for _ = 1, n do local _ = dlpack.sort(r, 1, values_only) end end, "numpy", "np.sort(r)")
  peer_row("sort_f32_indices", "dlpack.sort(r) values and indices, float32 4M", 1.0,
           function(n) for _ = 1, n do local _ = dlpack.sort(r) end end, "numpy", "np.argsort(r, kind='stable')")
  peer_row("argsort_f32", "dlpack.argsort(r) float32 4M", 1.0,
           function(n) for _ = 1, n do local _ = dlpack.argsort(r) end end, "numpy", "np.argsort(r, kind='stable')")
  peer_row("cumsum_f32", "dlpack.cumsum(a, 1) float32 4M", 1.2,
           function(n) for _ = 1, n do local _ = dlpack.cumsum(fa, 1) end end, "numpy", "np.cumsum(a)")
  local logits = fa:narrow(1, 1, 4096 * 1000):view(4096, 1000)
  peer_row("softmax_f32", "dlpack.softmax(x, 2) {4096, 1000} float32", 1.2,
           function(n) for _ = 1, n do local _ = dlpack.softmax(logits, 2) end end, "torch",
           "torch.softmax(x, 1), one thread")
  peer_row("softmax_f32", "  the same vs NumPy", 1.0,
           function(n) for _ = 1, n do local _ = dlpack.softmax(logits, 2) end end, "numpy",
           "e = np.exp(x - x.max(1, keepdims=True)); e / e.sum(1, keepdims=True)")
end

why = lacks("matmul")
if why then
  skip_row("dlpack.matmul(a, b) float32 512x512", why)
else
  local ma = dlpack.frombytes(string.rep(pattern, 512 * 512 / 64), "float32", {512, 512})
  local mb = dlpack.full({512, 512}, 0.5, "float32")
  local blas, info = dlpack.blas()
  if not CHILD and wanted("matmul") then
    local detail = type(info) == "table" and info.coretype
      and string.format(" (core type %s, chosen by %s; %s)", info.coretype, info.coretype_by, info.config) or ""
    print(string.format("matmul: %s; BLAS %s%s", cpu_name(), tostring(blas or info), detail))
  end
  peer_row("matmul_f32", "dlpack.matmul(a, b) float32 512x512", 1.2,
           function(n) for _ = 1, n do local _ = dlpack.matmul(ma, mb) end end, "numpy", "a @ b")
  -- The module's own kernel (the one without BLAS) against OpenBLAS on one thread, with the core
  -- type the module picks: in a child process, where DLPACK_LUA_BLAS=none leaves the module
  -- without BLAS and the baseline calls the library itself; both on one thread
  -- (DLPACK_LUA_NUM_THREADS=1), and then the own kernel on 2 threads against 1.
  if CHILD then
    local library = os.getenv("DLPACK_BENCH_BLAS")
    local function own(x, y) return function(n) for _ = 1, n do local _ = dlpack.matmul(x, y) end end end
    for _, dt in ipairs({"float32", "float64"}) do
      local x, y, z = ma:to(dt), mb:to(dt), dlpack.empty({512, 512}, dt)
      row("matmul_own_" .. dt, "  own kernel " .. dt .. " 512x512 (no BLAS)", 2.0, own(x, y),
          function(n) base.gemm(library, z, x, y, n) end, "OpenBLAS, one thread")
    end
    row("matmul_own_2threads", "  own kernel float32 512x512, 2 threads", 0.6, on_threads(2, own(ma, mb)),
        on_threads(1, own(ma, mb)), "the same on 1 thread")
  elseif type(info) == "table" and info.coretype and wanted("matmul_own") and base.gemm then
    local command = string.format("env DLPACK_BENCH_CHILD=1 DLPACK_LUA_BLAS=none DLPACK_BENCH_ONLY=matmul_own " ..
                                  "DLPACK_LUA_NUM_THREADS=1 " ..
                                  "DLPACK_BENCH_BLAS=%s OPENBLAS_CORETYPE=%s OPENBLAS_NUM_THREADS=1 %s bench/run.lua",
                                  blas, info.coretype, arg[-1] or "lua")
    local pipe = assert(io.popen(command))
    for line in pipe:lines() do
      if line:match("^  own kernel") then
        print(line)
        rows[#rows + 1] = "matmul_own"
        if line:match(" met  ") then met = met + 1 end
      end
    end
    pipe:close()
  elseif wanted("matmul_own") then
    skip_row("  own kernel vs OpenBLAS", "no OpenBLAS found")
  end
end

why = lacks("add")
if why then
  skip_row("dlpack.add(a, b) of 3 elements (allocating)", why)
else
  local s1, s2 = dlpack.tensor({1, 2, 3}, "float32"), dlpack.tensor({4, 5, 6}, "float32")
  peer_row("add_small", "dlpack.add(a, b) of 3 elements (allocating)", 1.0,
           function(n) for _ = 1, n do local _ = dlpack.add(s1, s2) end end, "numpy", "np.add(a, b)")
  lupa_row("add_small", "  the same, Lua inside Python (lupa)", 1.0, "np.add(a, b)")
end

-- The motivating case of issue 16: a 480x640x3 uint8 camera frame normalised for a model,
-- channels first, written the natural way.
why = lacks("div", "sub")
if why then
  skip_row("normalise a 480x640x3 uint8 frame", why)
else
  local bytes = {}
  for i = 0, 255 do bytes[#bytes + 1] = string.char((i * 37) % 256) end
  bytes = table.concat(bytes)
  local frame = dlpack.frombytes(string.rep(bytes, 480 * 640 * 3 / 256), "uint8", {480, 640, 3})
  local mean = dlpack.tensor({{{0.485}}, {{0.456}}, {{0.406}}}, "float32")
  local std = dlpack.tensor({{{0.229}}, {{0.224}}, {{0.225}}}, "float32")
  local mean3, std3 = mean:view({3}), std:view({3})
  local chw = dlpack.empty({3, 480, 640}, "float32")
  local function normalise(n)
    for _ = 1, n do
      local x = frame:permute({3, 1, 2}):to("float32")
      local _ = (x / 255 - mean) / std
    end
  end
  row("normalize_frame", "normalise a 480x640x3 uint8 frame, CHW", nil, normalise,
      function(n) base.normalize_frame(chw, frame, mean3, std3, n) end, "one fused C loop")
  peer_row("normalize_frame", "  the same vs NumPy", 1.2, normalise, "numpy",
           "(x.transpose(2, 0, 1).astype(np.float32) / 255 - mean) / std")
end

-- ---- sharing between processes: dlpack.ipc (issue 17) ----

-- Round trips through an echo process (bench/ipc_echo.lua, the same interpreter and paths):
-- ch:send(t) and the tensor the echo sent back received and released. The baselines: the same
-- with a 4 KB tensor, and the 6 MB's bytes written to the same channel's socket and read back
-- (bench/baselines.c), in records of 192 KiB, the largest the default socket buffer takes (a
-- SOCK_SEQPACKET record must fit it).
if wanted("ipc_6mb_4kb") or wanted("ipc_6mb_bytes") then
  local ok, ipc = pcall(require, "dlpack.ipc")
  if not ok then
    skip_row("dlpack.ipc send + recv 6 MB", "require 'dlpack.ipc' failed: " .. tostring(ipc))
  else
    local stat = assert(io.open("/proc/self/stat"))
    local path = "@dlpack-bench-" .. stat:read("*l"):match("^(%d+)")
    stat:close()
    local lua = "lua5.4" -- the interpreter running this script (arg[-1] and below)
    for k = -1, -10, -1 do
      if not arg[k] then break end
      lua = arg[k]
    end
    local paths = string.format("package.path = [==[%s]==]; package.cpath = [==[%s]==]", package.path, package.cpath)
    local listener = ipc.listen(path)
    local echo = assert(io.popen(lua .. " -e '" .. paths:gsub("'", "'\\''") .. "' bench/ipc_echo.lua " .. path))
    local ch = assert(listener:accept(10), "bench/ipc_echo.lua did not connect")
    listener:close()
    local frame = ipc.empty({1080, 1920, 3}, "uint8") -- 6,220,800 bytes, a 1080p RGB frame
    local page = ipc.empty({4096}, "uint8")
    frame:fill(7)
    page:fill(7)
    local function round_trips(t)
      return function(n)
        for _ = 1, n do
          ch:send(t)
          assert(ch:recv(10)):release()
        end
      end
    end
    row("ipc_6mb_4kb", "ch:send + recv (echo) 6 MB vs 4 KB", 1.5, round_trips(frame), round_trips(page),
        "the same with a 4 KB tensor")
    local back = dlpack.empty({frame.nbytes}, "uint8")
    local CHUNK = 192 * 1024
    row("ipc_6mb_bytes", "ch:send + recv (echo) 6 MB vs its bytes", 0.05, round_trips(frame),
        function(n)
          ch:send(dlpack.tensor({frame.nbytes, CHUNK, n}, "int64"))
          base.bytes_out_in(ch:fileno(), frame, back, frame.nbytes, CHUNK, n)
        end, "the bytes through the same socket and back")
    ch:close()
    echo:close()
  end
end

-- Lua to Python and back: the echo is examples/dlpack_ipc.py (NumPy arrays on the mapped
-- memory, sent back zero-copy); the baseline, bench/ipc_shm.py, is the same 6.2 MB round trip
-- between two Python processes with multiprocessing.shared_memory (attach, view, name back),
-- timed by that script in the same run.
if wanted("ipc_python") then
  local ok, ipc = pcall(require, "dlpack.ipc")
  local python = os.getenv("PYTHON") or "/usr/bin/python3"
  local env = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE PYTHONPATH=build/pydeps "
  local shm = io.popen(env .. python .. " bench/ipc_shm.py 2>/dev/null")
  local line = shm and shm:read("*l")
  if shm then shm:close() end
  local t = line and tonumber(line:match("^ipc_python shm (%S+)$"))
  if not ok then
    skip_row("dlpack.ipc Lua to Python and back, 6 MB", "require 'dlpack.ipc' failed: " .. tostring(ipc))
  elseif not t then
    skip_row("dlpack.ipc Lua to Python and back, 6 MB", "no time from bench/ipc_shm.py (NumPy for " .. python .. "?)")
  else
    peers.ipc_python = {shm = t}
    local stat = assert(io.open("/proc/self/stat"))
    local path = "@dlpack-bench-py-" .. stat:read("*l"):match("^(%d+)")
    stat:close()
    local listener = ipc.listen(path)
    local echo = assert(io.popen(env .. python .. " examples/dlpack_ipc.py echo " .. path))
    local ch = listener:accept(30)
    listener:close()
    if not ch then
      skip_row("dlpack.ipc Lua to Python and back, 6 MB", "examples/dlpack_ipc.py echo did not connect")
    else
      local frame = ipc.empty({1080, 1920, 3}, "uint8")
      frame:fill(7)
      peer_row("ipc_python", "Lua to Python and back (echo), 6 MB", 1.0, function(n)
        for _ = 1, n do
          ch:send(frame)
          assert(ch:recv(10)):release()
        end
      end, "shm", "multiprocessing.shared_memory between two Python processes")
      ch:close()
    end
    echo:close()
  end
end

-- ---- LuaJIT: element loops through dlpack.ffi.pointer (make bench LUA=luajit) ----

if rawget(_G, "jit") then
  local ffi = require "ffi"
  local dlffi = require "dlpack.ffi"
  local count = 1000000
  local ft = dlpack.full({count}, 1, "float64")
  local p, strides = dlffi.pointer(ft)
  assert(strides[1] == 1) -- contiguous: the same loop as over the plain buffer
  local buf = ffi.new("double[?]", count)
  for i = 0, count - 1 do buf[i] = 1 end
  local sink = 0
  row("ffi_loop", "sum through dlpack.ffi.pointer(t), 10^6 float64 (LuaJIT)", 1.2,
      function(n)
        for _ = 1, n do
          local s = 0
          for i = 0, count - 1 do s = s + p[i] end
          sink = sink + s
        end
      end,
      function(n)
        for _ = 1, n do
          local s = 0
          for i = 0, count - 1 do s = s + buf[i] end
          sink = sink + s
        end
      end, "the same loop over ffi.new")
  assert(sink > 0)
end

print(string.format("%d of %d rows met their goal", met, #rows))
if CHILD then return end

-- CUDA (bench/cuda.c, built as build/bench_cuda by `make bench`): copy bandwidth from pinned
-- memory as a ratio to cuMemcpy*Async and the cost of an exchange with a stream wait; it
-- prints why it skips on a machine without a GPU.
local cuda_bench = (os.getenv("DLPACK_BUILD") or "build") .. "/bench_cuda"
local exe = io.open(cuda_bench, "rb")
if exe then
  exe:close()
  io.stdout:flush()
  os.execute(cuda_bench)
else
  print("cuda: skipped (" .. cuda_bench .. " is not built)")
end
-- Its rows that PyTorch has a counterpart for (bench/cuda_rows.lua) against PyTorch on the same
-- GPU, in one process: bench/cuda_torch.py runs Lua inside Python through
-- build/gpu/libluapeer.so (make gpu-build); it prints why it skips.
io.stdout:flush()
os.execute((os.getenv("PYTHON") or "python3") .. " bench/cuda_torch.py")
