#!/usr/bin/env lua5.4
--[[
The fake-CUDA half of the fuzzer (the CPU half is fuzz.lua; README.md).

  DLPACK_LUA_CUDA_DRIVER=build/fakecuda.so FAKECUDA_DEVICES=2 \
    lua5.4 spec/fuzz/cuda.lua [--seed S] [--steps N] [--seeds K] [--seconds T] [--verbose]
  bash spec/fuzz/asan.sh --cuda --seed S ...     (the same under ASan+UBSan)

Runs seed S (then S+1, ... for K seeds, or until T seconds have passed): N
random steps over a pool of tensors on cpu, cuda:0, cuda:1, cuda_host and
cuda_managed (uint8, int32, float32, float64, packed and padded fp4; whole
tensors, narrow and strided views, read-only views, producers' tensors made by
fabricate.so, aliases), stream objects of both devices and the legacy and
per-thread streams: copies, to() and clone() with and without a stream,
releases, dropped tensors and collector steps, exports to a consumer stream on
which a consumer (fake.copy) queues work before the capsule is released or
imported back, the GPU making progress (fake.run of a stream), stream
synchronisations, closed and replaced streams, and failures of the driver
injected into the next step (fake.fail_next on cuStreamSynchronize,
cuEventQuery, cuEventRecord, cuStreamWaitEvent, cuMemcpyAsync, cuMemAlloc_v2,
...), computing on CUDA tensors (elementwise functions, reductions, matrix products,
Lua's operators, joins, equal/allclose, indexing, sorting and quantiles, cumsum/cumprod/shuffle) checked
against the module's CPU path on
the same values, the functions made of others (tile, roll, outer, einsum, norm, ...) on pinned and
managed memory (cpu results, the CPU path's bytes), operands on two devices and streams of another device (which
must raise naming both), and the device argument of the creating functions
(valid, lying and hostile). A value model follows every tensor: after fake.sync_all() (the GPU
catching up) each tensor must hold what the copies imply. The fake's queues
run only when forced, so memory freed while queued work uses it is read or
written after its free: ASan reports it, or the fake counts a misuse.

A seed fails on a value that differs from the model, a call that raised where
the model says it is valid (no failure injected) or succeeded where it must
raise, any misuse counted by the fake, or when, after everything is released,
synchronised and collected, the fake's live allocations, streams and events
or the fabricated tensors are not back to their counts before the seed. The
same seed gives the same steps: only math.random is drawn, and every step draws
the same values whatever the module answered. Output and exit status as
fuzz.lua's: one line per seed, 0 when every seed passed, 1 otherwise.
]]

local here = ((arg and arg[0]) or "spec/fuzz/cuda.lua"):match("^(.*)/[^/]*$") or "."
package.path = here .. "/../?.lua;" .. package.path
local runner = require "fuzz.runner"
runner.paths(here)

local options = { seed = 1, steps = 300, seeds = 1, seconds = nil, verbose = false }
runner.options("fuzz-cuda", options,
  "lua5.4 spec/fuzz/cuda.lua [--seed S] [--steps N] [--seeds K] [--seconds T] [--verbose]",
  { ["--corpus"] = function(_, num) num("--corpus") end }) -- the CPU half's option: nothing to do here

local dlpack = require "dlpack"
if dlpack.cpu() == "avx512" then
  io.stderr:write("fuzz (cuda): the CPU's AVX-512 math loops round otherwise than the device's C library math, " ..
                  "which the model compares bit for bit: run with DLPACK_LUA_CPU=avx2 (spec/fuzz/asan.sh does)\n")
  os.exit(2)
end
local cuda = dlpack.cuda
do
  local ok, why = cuda.is_available()
  if not ok then
    io.stderr:write("fuzz-cuda: CUDA is not available (DLPACK_LUA_CUDA_DRIVER must name build/fakecuda.so): ",
      tostring(why), "\n")
    os.exit(2)
  end
end
local okfake, fake = pcall(require, "fakecuda")
if not okfake or not fake.initialized() or fake.device_count() < 2 then
  io.stderr:write("fuzz-cuda: needs the fake driver with two devices (FAKECUDA_DEVICES=2), loaded as `fakecuda` ",
    "from the same file as DLPACK_LUA_CUDA_DRIVER\n")
  os.exit(2)
end
local fab = require "fabricate"

local R = math.random
local VERBOSE = options.verbose
local T = dlpack.Tensor

local NSLOT, NCAP = 12, 4
local INJECT_PERCENT = 15
local CHECK_EVERY = 40

local DEVICES = { "cpu", "cuda:0", "cuda:1", "cuda_host", "cuda_managed" }
local HOSTLIKE = { cpu = true, cuda_host = true, cuda_managed = true }
-- devices whose work is ordered by streams: the only ones a stream is passed for
local STREAMED = { ["cuda:0"] = true, ["cuda:1"] = true, cuda_managed = true }
local SIZES = { 0, 1, 2, 5, 8, 16, 33, 64 }

-- What the model knows of a dtype: the bytes of n elements, and how to read them back.
local KINDS = {
  { name = "uint8", dtype = "uint8", fmt = "B", size = 1 },
  { name = "int32", dtype = "int32", fmt = "<i4", size = 4 },
  { name = "float32", dtype = "float32", fmt = "<f", size = 4 },
  { name = "float64", dtype = "float64", fmt = "<d", size = 8 },
  { name = "fp4", dtype = "float4_e2m1fn", fp4 = true },
  { name = "fp4 padded", dtype = "float4_e2m1fn", fp4 = true, padded = true },
  { name = "bool", dtype = "bool", fmt = "B", size = 1 },
  { name = "int8", dtype = "int8", fmt = "<i1", size = 1 },
  { name = "int64", dtype = "int64", fmt = "<i8", size = 8 },
  { name = "float16", dtype = "float16", fmt = "<I2", size = 2 }, -- values: the bit patterns
}
local function packed(kind) return kind.fp4 and not kind.padded end
local NUMERIC, KIND_OF = {}, {} -- the kinds that compute, and the kind of each of their dtypes
for _, k in ipairs(KINDS) do
  if not k.fp4 then
    NUMERIC[#NUMERIC + 1] = k
    KIND_OF[k.dtype] = k
  end
end

-- Driver functions whose next call(s) a step may make fail, and the codes they return.
local INJECT = { "cuStreamSynchronize", "cuEventQuery", "cuEventRecord", "cuStreamWaitEvent", "cuMemcpyAsync",
  "cuMemAlloc_v2", "cuMemsetD8Async", "cuEventCreate", "cuMemHostAlloc", "cuMemAllocManaged", "cuStreamQuery",
  "cuMemAllocAsync", "cuMemFreeAsync", "cuLaunchKernel", "cuModuleLoadData", "cuModuleGetFunction",
  "cublasGemmEx", "cublasGemmStridedBatchedEx", "cublasSetStream_v2" }
local CODES = { 2, 999, 700 } -- out of memory, unknown, illegal address

local function decode(kind, bytes, n)
  local vals = {}
  if packed(kind) then
    for i = 1, n do
      local b = bytes:byte((i - 1) // 2 + 1)
      vals[i] = i % 2 == 1 and b & 15 or b >> 4
    end
  elseif kind.fp4 then
    for i = 1, n do vals[i] = bytes:byte(i) end
  else
    for i = 1, n do vals[i] = string.unpack(kind.fmt, bytes, (i - 1) * kind.size + 1) end
  end
  return vals
end

local function packed_bytes(vals, n)
  local b = {}
  for i = 1, n, 2 do b[#b + 1] = string.char(vals[i] | ((vals[i + 1] or 0) << 4)) end
  return table.concat(b)
end

-- The bytes of n values of a kind (unknown ones as zeros).
local function encode(kind, vals, n)
  if packed(kind) then
    local v = {}
    for i = 1, n do v[i] = vals[i] or 0 end
    return packed_bytes(v, n)
  end
  local b = {}
  for i = 1, n do b[i] = kind.fp4 and string.char(vals[i] or 0) or string.pack(kind.fmt, vals[i] or 0) end
  return table.concat(b)
end

-- A new host tensor of n values of a computing kind.
local function host_tensor(kind, vals, n)
  return dlpack.frombytes(encode(kind, vals, n), kind.dtype, { n })
end

-- Is the element (bytes) of a float dtype a NaN?
local function is_nan(dtype, e)
  if dtype == "float32" or dtype == "float64" then
    local v = string.unpack(dtype == "float32" and "<f" or "<d", e)
    return v ~= v
  end
  local u = string.unpack("<I2", e)
  if dtype == "float16" then return u & 0x7c00 == 0x7c00 and u & 0x3ff ~= 0 end
  if dtype == "bfloat16" then return u & 0x7f80 == 0x7f80 and u & 0x7f ~= 0 end
  return false
end

-- Are two elements of a dtype (bytes) the same? The same bytes, or two NaNs: the sign and payload of
-- a NaN are not specified by IEEE 754 (the CPU's vectorised float32 sigmoid keeps a NaN's sign,
-- the kernel built from the same expression flips it), and are not compared.
local FLOATS = { float16 = 2, bfloat16 = 2, float32 = 4, float64 = 8 }
local function same_element(dtype, a, b)
  return a == b or (FLOATS[dtype] ~= nil and #a == #b and is_nan(dtype, a) and is_nan(dtype, b))
end

-- The same bytes of n elements of a dtype, but for NaNs (same_element).
local function same_bytes(dtype, a, b)
  if a == b then return true end
  local size = FLOATS[dtype]
  if not size or #a ~= #b then return false end
  for i = 1, #a, size do
    if not same_element(dtype, a:sub(i, i + size - 1), b:sub(i, i + size - 1)) then return false end
  end
  return true
end

-- Two values of a kind are the same bytes (-0.0 is not 0.0; NaN is NaN, whatever its sign).
local function same(kind, a, b)
  if a == nil or b == nil then return a == b end
  if kind.fmt then return same_element(kind.dtype, string.pack(kind.fmt, a), string.pack(kind.fmt, b)) end
  return a == b
end

-- What the module's CPU conversion makes of vals (a kind's values, nil unknown) in kind `to`.
local function convert(vals, from, to, n)
  if from.dtype == to.dtype or from.fp4 or to.fp4 then
    local v = {}
    for i = 1, n do v[i] = vals[i] end
    return v
  end
  local v = n > 0 and decode(to, host_tensor(from, vals, n):to(to.dtype):tobytes(), n) or {}
  for i = 1, n do
    if vals[i] == nil then v[i] = nil end
  end
  return v
end

-- Lua numbers (small integers) as a kind's values, as the module's CPU path makes them.
local function from_numbers(kind, nums, n)
  if kind.fp4 then return nums end
  if n == 0 or nums[1] == nil then return {} end
  return decode(kind, dlpack.tensor({ table.unpack(nums, 1, n) }, "int64"):to(kind.dtype):tobytes(), n)
end

---------------------------------------------------------------------------
-- The model: roots (blocks of memory) with one value per element (nil: unknown), entries (tensors
-- on a root: start, step, len), and the GPU work queued since the last fake.sync_all().

local function idx(e, k) return e.start + (k - 1) * e.step + 1 end
local function contiguous(e) return e.step == 1 or e.len <= 1 end

local function vals_of(e)
  local v = {}
  for k = 1, e.len do v[k] = e.root.vals[idx(e, k)] end
  return v
end

local function set_vals(e, v)
  for k = 1, e.len do e.root.vals[idx(e, k)] = v[k] end
end

local function indices(e)
  local l = {}
  for k = 1, e.len do l[k] = idx(e, k) end
  return l
end

local S = {}
S.__index = S

function S.new(seed)
  return setmetatable({ seed = seed, step = 0, calls = 0, failures = {}, pool = {}, caps = {}, pending = {},
    nroot = 0, nfab = 0, last = "-" }, S)
end

runner.seed_methods(S, VERBOSE) -- S:fail(msg), S:note(desc)

-- Runs f(...) under pcall; returns pcall's results.
function S:call(desc, f, ...)
  self.calls = self.calls + 1
  self:note(desc)
  return pcall(f, ...)
end

function S:new_root(kind, n, device, vals)
  self.nroot = self.nroot + 1
  return { id = self.nroot, kind = kind, n = n, device = device, vals = vals or {} }
end

-- Device memory of a root, which the checks read with fake.read.
function S.track(_, r, t)
  if not HOSTLIKE[r.device] and not r.fabdev and r.n > 0 then r.ptr, r.nbytes = t:data_ptr(), t.nbytes end
end

function S.entry(_, t, r, device, name, start, step, len, readonly)
  return { t = t, root = r, kind = r.kind, device = device, name = name, start = start or 0, step = step or 1,
    len = len or r.n, readonly = readonly or false }
end

-- Work queued on the GPU: the copy reads src (a root, or nil for memory the model does not follow)
-- and writes dst's elements (an entry, or nil).
function S:queue(src_root, dst)
  self.pending[#self.pending + 1] = { src = src_root, dst = dst and dst.root, dst_idx = dst and indices(dst) or {} }
end

function S:writes_pending(r)
  for _, p in ipairs(self.pending) do
    if p.dst == r then return true end
  end
  return false
end

-- The CPU wrote root r now, whatever the GPU has queued on it: queued writes to r may land after
-- (r unknown), and queued copies that read r (and those that read their results) read either.
function S:cpu_wrote(r)
  if self:writes_pending(r) then r.vals = {} end
  local affected, changed = { [r] = true }, true
  while changed do
    changed = false
    for _, p in ipairs(self.pending) do
      if p.src and affected[p.src] and p.dst then
        for _, i in ipairs(p.dst_idx) do p.dst.vals[i] = nil end
        if not affected[p.dst] then
          affected[p.dst] = true
          changed = true
        end
      end
    end
  end
end

-- A host-to-host copy on the CPU now: src read (stale while the GPU has writes to it queued), dst
-- written.
function S:cpu_copy(dst, src_vals, src_root)
  if src_root and self:writes_pending(src_root) then src_vals = {} end
  set_vals(dst, src_vals)
  self:cpu_wrote(dst.root)
end

---------------------------------------------------------------------------
-- Streams: the stream a step passes, and the queue fake.run advances.

function S:make_streams()
  self.streams = {}
  for i, d in ipairs({ 0, 0, 1, 1 }) do
    self.streams[i] = { obj = cuda.Stream({ device = d }), device = d, name = "S" .. i }
  end
end

-- A stream option for work on device `on` (a device string), from c (1..10, drawn by the caller):
-- nil, -1, 1, 2, the default stream objects or one of the pool's (either device).
function S:stream_arg(on, c)
  if not STREAMED[on] then return nil, "nil" end
  if c == 1 then return nil, "nil"
  elseif c == 2 then return -1, "-1"
  elseif c == 3 then return 1, "1"
  elseif c == 4 then return 2, "2"
  elseif c == 5 then return cuda.legacy_stream, "legacy_stream"
  elseif c == 6 then return cuda.per_thread_stream, "per_thread_stream"
  end
  local s = self.streams[c - 6]
  return s.obj, s.name
end

-- The queue a stream option names for work on `on`: handle and device, or nil.
function S.queue_of(_, stream, on)
  local dev = on == "cuda:1" and 1 or 0
  if stream == nil or stream == -1 then return nil end
  if stream == 1 or stream == cuda.legacy_stream then return 1, dev end
  if stream == 2 or stream == cuda.per_thread_stream then return 2, dev end
  return stream.handle, stream.device
end

---------------------------------------------------------------------------
-- Failures injected into the next step.

function S:arm(o)
  local roll, f, code, times = R(100), INJECT[R(#INJECT)], CODES[R(#CODES)], R(2)
  if roll > INJECT_PERCENT or o.name == "check" then return nil end
  self:note(string.format("fake.fail_next(%q, %d, %d)", f, code, times))
  fake.fail_next(f, code, times)
  return f
end

function S.disarm(_, f)
  if f then fake.fail_next(f, 0, 0) end
end

---------------------------------------------------------------------------
-- The pool

function S:put(slot, e)
  self.pool[slot] = e -- what was there is dropped: the collector releases it
end

-- A live entry at slot, or nil.
function S:get(slot)
  local e = self.pool[slot]
  if e and not e.released then return e end
  return nil
end

-- The outcome of a call the model says is valid (or not): checks and reports; true when it ran.
function S:outcome(ok, err, valid, why, injected)
  if ok and not valid then
    self:fail("succeeded, but must raise (" .. why .. ")")
  elseif not ok and valid and not injected then
    self:fail("raised, but is valid: " .. tostring(err))
  elseif not ok and not valid and not injected and type(err) == "string" and not err:find(why, 1, true) then
    self:fail("raised, but not for the reason expected (" .. why .. "): " .. err)
  end
  return ok
end

---------------------------------------------------------------------------
-- Operations. Each draws all its numbers first (the same count whatever the pool holds).

local ops = {}
local function op(name, weight, fn) ops[#ops + 1] = { name = name, weight = weight, fn = fn } end

-- new tensors: a host tensor moved to a device (on a stream or not), zeros, empty, full, a
-- producer's tensor (fabricate.so) on the host or labelled cuda:0
op("new", 12, function(st, injected)
  local slot, d, k, n, how = R(NSLOT), DEVICES[R(#DEVICES)], KINDS[R(#KINDS)], SIZES[R(#SIZES)], R(6)
  local fill, sc = R(0, 15), R(10)
  local vals = {}
  for i = 1, 64 do vals[i] = R(0, 15) end
  local stream, sdesc = st:stream_arg(HOSTLIKE[d] and "cpu" or d, sc) -- to() from a host tensor
  local name = "T" .. slot
  if k.padded and n == 0 then n = 1 end
  for i = n + 1, 64 do vals[i] = nil end
  local ok, t, desc
  local known, async, fabdev = from_numbers(k, vals, n), false, false
  if how == 1 or how == 2 then
    local function make()
      local h
      if k.padded then
        h = dlpack.from_dlpack((fab.versioned({ code = 17, bits = 4, shape = { n }, flags = 4,
          data = string.char(table.unpack(vals, 1, n)) })))
      elseif k.fp4 then
        h = dlpack.frombytes(packed_bytes(vals, n), k.dtype, { n })
      else
        h = host_tensor(k, from_numbers(k, vals, n), n)
      end
      if how == 2 then return h:to({ device = d, stream = stream }) end
      return h:to(d)
    end
    async = how == 2 and st:queue_of(stream, d) ~= nil and d ~= "cuda_managed"
    desc = string.format("%s = <%s %s %d>:to(%s%s)", name, k.name, "host", n, d,
      how == 2 and (", stream = " .. sdesc) or "")
    if k.padded then st.nfab = st.nfab + 1 end
    ok, t = st:call(desc, make)
  elseif how == 3 and not k.padded then
    ok, t = st:call(string.format("%s = dlpack.zeros({%d}, %q, %q)", name, n, k.dtype, d), dlpack.zeros, { n },
      k.dtype, d)
    known = {}
    for i = 1, n do known[i] = 0 end
    known = from_numbers(k, known, n)
  elseif how == 4 and not k.padded then
    ok, t = st:call(string.format("%s = dlpack.empty({%d}, %q, %q)", name, n, k.dtype, d), dlpack.empty, { n },
      k.dtype, d)
    known = {}
  elseif how == 5 and not k.fp4 then
    local fv = fill
    if k.dtype == "bool" then fv, fill = fill % 2 == 1, fill % 2 end
    ok, t = st:call(string.format("%s = dlpack.full({%d}, %s, %q, %q)", name, n, tostring(fv), k.dtype, d), dlpack.full,
      { n }, fv, k.dtype, d)
    known = {}
    for i = 1, n do known[i] = fill end
    known = from_numbers(k, known, n)
  elseif not k.fp4 and (k.dtype == "uint8" or k.dtype == "int32" or k.dtype:find("float[36]")) then
    -- a producer's tensor: on the host, or host memory it labels cuda:0
    local dev = (d == "cuda:0" or d == "cuda:1") and "cuda:0" or "cpu"
    local codes = { uint8 = { 1, 8 }, int32 = { 0, 32 }, float32 = { 2, 32 }, float64 = { 2, 64 } }
    local c = codes[k.dtype]
    st.nfab = st.nfab + 1
    ok, t = st:call(string.format("%s = from_dlpack(fab.versioned{%s, %s, {%d}})", name, k.dtype, dev, n), function()
      return dlpack.from_dlpack((fab.versioned({ device_type = dev == "cpu" and 1 or 2, device_id = 0, code = c[1],
        bits = c[2], shape = { n } })))
    end)
    known = {}
    for i = 1, n do known[i] = i end
    d = dev
    fabdev = dev ~= "cpu"
  else
    return
  end
  if not ok then
    if not injected then st:fail("raised: " .. tostring(t)) end
    return
  end
  local r = st:new_root(k, n, d, {})
  for i = 1, n do r.vals[i] = known[i] end
  r.fabdev = fabdev -- host memory a producer labels cuda:0: no kernel may touch it
  st:track(r, t)
  local e = st:entry(t, r, d, name)
  if async then st:queue(nil, e) end
  st:put(slot, e)
end)

-- views: narrow, every other element, read-only, an alias relabelled cpu, from_dlpack of itself
op("view", 8, function(st, injected)
  local slot, from, how, a, b, sarg = R(NSLOT), R(NSLOT), R(7), R(64), R(64), R(10)
  local e = st:get(from)
  if not e then return end
  local t, name = e.t, "T" .. slot
  local n = e.len
  local ok, v
  local valid, why = true, ""
  local start, step, len, device, readonly = e.start, e.step, n, e.device, e.readonly
  if how == 1 then
    local first = n > 0 and (a - 1) % n + 1 or 1
    len = n > 0 and (b - 1) % (n - first + 2) or 0
    valid, why = not packed(e.kind), "packed"
    ok, v = st:call(string.format("%s = %s:narrow(1, %d, %d)", name, e.name, first, len), T.narrow, t, 1, first, len)
    start = e.start + (first - 1) * e.step
  elseif how == 2 then
    if n < 2 then return end
    valid, why = not packed(e.kind), "packed"
    len = (n + 1) // 2
    ok, v = st:call(string.format("%s = %s:slice(1, 1, %d, 2)", name, e.name, n), T.slice, t, 1, 1, n, 2)
    step = e.step * 2
  elseif how == 3 then
    ok, v = st:call(string.format("%s = %s:as_readonly()", name, e.name), T.as_readonly, t)
    readonly = true
  elseif how == 4 then
    if not HOSTLIKE[e.device] then return end
    ok, v = st:call(string.format("%s = %s:to('cpu')", name, e.name), T.to, t, "cpu")
    device = "cpu"
  elseif how == 6 then
    valid, why = not packed(e.kind), "packed"
    ok, v = st:call(string.format("%s = %s:flip(1)", name, e.name), T.flip, t, 1)
    if n > 0 then start, step = e.start + (n - 1) * e.step, -e.step end
  else
    local stream, sdesc = st:stream_arg(e.device, sarg)
    ok, v = st:call(string.format("%s = from_dlpack(%s, {stream = %s})", name, e.name, sdesc), dlpack.from_dlpack,
      t, { stream = stream })
  end
  if not st:outcome(ok, v, valid, why, injected) or not ok then return end
  if v == t then return end -- nothing to do: the tensor itself
  st:put(slot, st:entry(v, e.root, device, name, start, step, len, readonly))
end)

-- Is copying src into dst valid? Returns valid, the reason it is not, and how it runs (plan.kernel:
-- a kernel on the device, queued; plan.fab: a kernel would touch a producer's host memory labelled
-- cuda:0, which the fake cannot check, and the step is skipped).
local function copy_plan(dst, src)
  local dh, sh = HOSTLIKE[dst.device], HOSTLIKE[src.device]
  local plan = { host = dh and sh }
  if dst.len ~= src.len then return false, "shapes differ" end
  if dst.readonly then return false, "read-only" end
  local convertible = dst.kind.fp4 == src.kind.fp4
  if plan.host then
    if not convertible then return false, "convert" end
    return true, nil, plan
  end
  -- a kernel may touch a producer's host memory labelled cuda:0 (even on the way to an error)
  for _, e in ipairs({ dst, src }) do
    local fabricated = e.root and e.root.fabdev
    if fabricated and (not contiguous(e) or (not dh and not sh and dst.device == src.device)) then plan.fab = true end
  end
  if plan.fab then return true, nil, plan end
  local function kernel(p)
    if p then p.kernel = true end
  end
  if not dh and not sh and dst.device == src.device and not dst.kind.fp4 and not src.kind.fp4 and
      (dst.kind.dtype ~= src.kind.dtype or not contiguous(dst) or not contiguous(src)) then
    plan.kernel = true -- converting or strided on one device
    return true, nil, plan
  end
  -- a strided device side (not fp4) goes through a contiguous temporary on its device
  if not dh and not contiguous(dst) and not dst.kind.fp4 then
    local valid, why, p = copy_plan(setmetatable({ step = 1, start = 0 }, { __index = dst }), src)
    kernel(p)
    return valid, why, p
  end
  if not sh and not contiguous(src) and not src.kind.fp4 then
    local valid, why, p = copy_plan(dst, setmetatable({ step = 1, start = 0 }, { __index = src }))
    kernel(p)
    return valid, why, p
  end
  if not dh and not contiguous(dst) then return false, "contiguous" end
  if not sh and not contiguous(src) then return false, "contiguous" end
  if not dh and not sh then
    if dst.kind.dtype ~= src.kind.dtype then return false, "convert" end
    if packed(dst.kind) ~= packed(src.kind) then return false, "padded" end
    return true, nil, plan
  end
  if not convertible then return false, "convert" end
  local host, dev = dh and dst or src, dh and src or dst
  -- the module stages a host side that differs from the device side on the host
  local staged = host.kind.dtype ~= dev.kind.dtype or packed(host.kind) ~= packed(dev.kind) or not contiguous(host)
  plan.src_staged = sh and staged
  plan.dst_staged = dh and staged
  return true, nil, plan
end

-- The model's effect of a copy of src_vals (of src) into dst that ran (ok) or failed (injected).
function S:copy_effect(dst, src, src_vals, plan, stream_dev, stream, ok)
  if not ok then -- work may be queued, or not: dst unknown, and its queued copy reads src
    set_vals(dst, {})
    self:queue(src.root, dst)
    if HOSTLIKE[dst.device] then self:cpu_wrote(dst.root) end
    return
  end
  if plan.host then
    self:cpu_copy(dst, convert(src_vals, src.kind, dst.kind, dst.len), src.root)
    return
  end
  local async = plan.kernel or self:queue_of(stream, stream_dev) ~= nil and not plan.dst_staged
  set_vals(dst, convert(src_vals, src.kind, dst.kind, dst.len))
  if async then self:queue(not plan.src_staged and src.root or nil, dst) end
end

-- dst:copy(src [, {stream = s}])
op("copy", 20, function(st, injected)
  local di, si, sameroot, a, sc = R(NSLOT), R(NSLOT), R(4), R(64), R(10)
  local dst, src = st:get(di), st:get(si)
  if not dst or not src then return end
  if sameroot == 1 and contiguous(src) and src.len > 1 and not packed(src.kind) then
    -- overlapping views of one block: src and a shifted view of it
    local shift = (a - 1) % (src.len - 1) + 1
    local ok, v = st:call(string.format("V = %s:narrow(1, %d, %d)", src.name, 1 + shift, src.len - shift),
      T.narrow, src.t, 1, 1 + shift, src.len - shift)
    if not ok then
      if not injected then st:fail("raised: " .. tostring(v)) end
      return
    end
    dst = st:entry(v, src.root, src.device, "V", src.start + shift, 1, src.len - shift, src.readonly)
    local ok2, w = st:call(string.format("W = %s:narrow(1, 1, %d)", src.name, src.len - shift), T.narrow, src.t, 1,
      1, src.len - shift)
    if not ok2 then
      if not injected then st:fail("raised: " .. tostring(w)) end
      return
    end
    src = st:entry(w, src.root, src.device, "W", src.start, 1, src.len - shift, src.readonly)
  end
  local sd = HOSTLIKE[dst.device] and src.device or dst.device
  local stream, sdesc = st:stream_arg(sd, sc)
  local valid, why, plan = copy_plan(dst, src)
  if plan and plan.fab then return end
  local src_vals = vals_of(src)
  local ok, err = st:call(string.format("%s:copy(%s, {stream = %s})", dst.name, src.name, sdesc), T.copy, dst.t,
    src.t, { stream = stream })
  if not st:outcome(ok, err, valid, why or "", injected) and not valid then return end
  st:copy_effect(dst, src, src_vals, plan, sd, stream, ok)
end)

-- src:to({device =, dtype =, stream =, copy =})
op("to", 12, function(st, injected)
  local slot, si, di, ki, c, other, sc = R(NSLOT), R(NSLOT), R(#DEVICES), R(3), R(3), R(#NUMERIC), R(10)
  local src = st:get(si)
  if not src then return end
  local d = DEVICES[di]
  local kind = src.kind
  if ki == 1 and not src.kind.fp4 then kind = NUMERIC[other] end
  local sd = HOSTLIKE[d] and src.device or d
  local stream, sdesc = st:stream_arg(sd, sc)
  local copy = c == 1 or nil
  local name = "T" .. slot
  local dest = { len = src.len, readonly = false, device = d, kind = kind, step = 1, root = {} }
  if kind.dtype == src.kind.dtype then dest.kind = src.kind end -- a clone keeps the padding
  local unchanged = kind.dtype == src.kind.dtype and not copy
  local valid, why, plan = true, nil, { host = HOSTLIKE[d] and HOSTLIKE[src.device] }
  if not unchanged or (d ~= src.device and not (d == "cpu" and HOSTLIKE[src.device])) then
    valid, why, plan = copy_plan(dest, src)
  end
  if plan and plan.fab then return end
  local src_vals = vals_of(src)
  local ok, t = st:call(string.format("%s = %s:to({device = %q, dtype = %q, stream = %s, copy = %s})", name,
    src.name, d, kind.dtype, sdesc, tostring(copy)), T.to, src.t,
    { device = d, dtype = kind.dtype, stream = stream, copy = copy })
  if not st:outcome(ok, t, valid, why or "", injected) or not ok then return end
  if t == src.t then return end
  if unchanged and d == "cpu" and src.device ~= "cpu" and HOSTLIKE[src.device] then -- relabelled, not copied
    st:put(slot, st:entry(t, src.root, "cpu", name, src.start, src.step, src.len, src.readonly))
    return
  end
  local r = st:new_root(dest.kind, src.len, d, {})
  st:track(r, t)
  local e = st:entry(t, r, d, name)
  st:copy_effect(e, src, src_vals, plan, sd, stream, true)
  st:put(slot, e)
end)

-- t:clone(), t:contiguous() (the tensor itself when it is contiguous)
op("clone", 6, function(st, injected)
  local slot, si, how = R(NSLOT), R(NSLOT), R(2)
  local src = st:get(si)
  if not src then return end
  local name = "T" .. slot
  local host = HOSTLIKE[src.device]
  local valid = host or contiguous(src) or not src.kind.fp4
  if not host and not contiguous(src) and src.root.fabdev then return end -- a kernel on a producer's host memory
  local src_vals = vals_of(src)
  local fn = how == 1 and T.clone or T.contiguous
  local ok, t = st:call(string.format("%s = %s:%s()", name, src.name, how == 1 and "clone" or "contiguous"), fn, src.t)
  if not st:outcome(ok, t, valid, "contiguous", injected) or not ok then return end
  if how == 2 and contiguous(src) then
    if t ~= src.t then st:fail("contiguous() of a contiguous tensor is not the tensor itself") end
    return
  end
  local r = st:new_root(src.kind, src.len, src.device, {})
  st:track(r, t)
  local e = st:entry(t, r, src.device, name)
  if host then
    st:cpu_copy(e, src_vals, src.root)
  else
    set_vals(e, src_vals)
    st:queue(src.root, e)
  end
  st:put(slot, e)
end)

-- release (kept in the pool: later calls must raise "released"), or drop to the collector
op("release", 8, function(st)
  local slot, how = R(NSLOT), R(3)
  local e = st:get(slot)
  if not e then return end
  if how == 1 then
    st:call(string.format("T%d = nil", slot), function() end)
    st.pool[slot] = nil
    return
  end
  local ok, err = st:call(string.format("%s:release()", e.name), T.release, e.t)
  if not ok then st:fail("release raised: " .. tostring(err)) end
  for _, o in pairs(st.pool) do
    if o.t == e.t then o.released = true end
  end
end)

-- a released tensor raises "released"
op("released", 2, function(st)
  local slot = R(NSLOT)
  local e = st.pool[slot]
  if not (e and e.released) then return end
  local ok, err = st:call(string.format("%s:to('cuda:0')", e.name), T.to, e.t, "cuda:0")
  st:outcome(ok, err, false, "released", false)
end)

op("gc", 5, function(st)
  local how, k = R(3), R(0, 50)
  if how == 1 then
    st:call("collectgarbage()", collectgarbage)
  else
    st:call(string.format("collectgarbage('step', %d)", k), collectgarbage, "step", k)
  end
end)

-- the GPU makes progress on one queue
op("run", 8, function(st)
  local q = R(8)
  if q <= 4 then
    local s = st.streams[q]
    st:call(string.format("fake.run(%s)", s.name), fake.run, s.obj.handle)
  else
    local h, d = q <= 6 and 1 or 2, q % 2
    st:call(string.format("fake.run(%d, %d)", h, d), fake.run, h, d)
  end
end)

-- synchronise a stream (and let go of what completed)
op("sync", 5, function(st, injected)
  local q = R(6)
  local s, name
  if q <= 4 then s, name = st.streams[q].obj, st.streams[q].name
  elseif q == 5 then s, name = cuda.legacy_stream, "legacy_stream"
  else s, name = cuda.per_thread_stream, "per_thread_stream" end
  local ok, err = st:call(name .. ":synchronize()", s.synchronize, s)
  st:outcome(ok, err, true, "", injected)
end)

-- close a stream of the pool (records that hold it keep it) and make a new one
op("close", 2, function(st, injected)
  local q = R(4)
  local s = st.streams[q]
  st:call(s.name .. ":close()", s.obj.close, s.obj)
  local ok, obj = st:call(string.format("%s = dlpack.cuda.Stream({device = %d})", s.name, s.device), cuda.Stream,
    { device = s.device })
  if ok then
    s.obj = obj
  elseif not injected then
    st:fail("Stream() raised: " .. tostring(obj))
  end
  -- on failure the closed object stays: later uses raise "closed", which the next close replaces
end)

-- export for a consumer stream; a foreign consumer queues a copy of the memory there (and later
-- releases the capsule), or the capsule comes back to from_dlpack
op("export", 6, function(st, injected)
  local ci, si, foreign, sc = R(NCAP), R(NSLOT), R(2) == 1, R(10)
  local e = st:get(si)
  if not e then return end
  local stream, sdesc = st:stream_arg(e.device, sc)
  local ok, cap = st:call(string.format("K%d = to_dlpack(%s, {stream = %s})", ci, e.name, sdesc), dlpack.to_dlpack,
    e.t, { stream = stream })
  if not st:outcome(ok, cap, true, "", injected) or not ok then return end
  local old = st.caps[ci]
  if old then st:call(string.format("release_capsule(<old K%d>)", ci), dlpack.release_capsule, old.cap) end
  local entry = { cap = cap, src = e, foreign = foreign }
  st.caps[ci] = entry
  local h, dev = st:queue_of(stream, e.device)
  if foreign and h and contiguous(e) and e.len > 0 then
    local nb = math.min(e.t.nbytes, 64)
    local scratch = st.scratch[dev]
    st:call(string.format("fake.copy(<consumer stream %s>, scratch%d, %s, %d)", sdesc, dev, e.name, nb), fake.copy, h,
      scratch:data_ptr(), e.t:data_ptr(), nb, dev)
    st:queue(e.root, nil)
  end
end)

op("consume", 6, function(st, injected)
  local ci = R(NCAP)
  local c = st.caps[ci]
  if not c then return end
  st.caps[ci] = nil
  if c.foreign then
    local ok, err = st:call(string.format("release_capsule(K%d)", ci), dlpack.release_capsule, c.cap)
    st:outcome(ok, err, true, "", injected)
    return
  end
  local e = c.src
  local slot = ci -- imports land in the first slots
  local ok, t = st:call(string.format("T%d = from_dlpack(K%d)", slot, ci), dlpack.from_dlpack, c.cap)
  if not st:outcome(ok, t, true, "", injected) or not ok then return end
  st:put(slot, st:entry(t, e.root, e.device, "T" .. slot, e.start, e.step, e.len, e.readonly))
end)

-- The values of entry e as its memory holds them now (the GPU having caught up): device memory
-- read with fake.read (the whole block, for strided and reversed views), host memory with tobytes.
function S.read(_, e)
  if e.len == 0 then return {} end
  if HOSTLIKE[e.device] then return decode(e.kind, e.t:tobytes(), e.len) end
  local r = e.root
  if r.ptr and fake.allocation(r.ptr) then
    local all, v = decode(r.kind, fake.read(r.ptr, r.nbytes), r.n), {}
    for k = 1, e.len do v[k] = all[idx(e, k)] end
    return v
  end
  return decode(e.kind, e.t:to("cpu"):tobytes(), e.len) -- a producer's memory: the fake does not track it
end

-- The GPU catches up (fake.sync_all(): nothing is pending any more).
function S:catch_up()
  self:note("check: fake.sync_all()")
  fake.sync_all()
  self.pending = {}
end

-- Entry e must hold what the model says.
function S:check_entry(e, what)
  if not (HOSTLIKE[e.device] or contiguous(e) or e.root.ptr) then return end
  local ok, vals = pcall(self.read, self, e)
  if not ok then
    self:fail(string.format("%s: reading %s raised: %s", what, e.name, tostring(vals)))
    return
  end
  for k = 1, e.len do
    local want = e.root.vals[idx(e, k)]
    if want ~= nil and not same(e.kind, vals[k], want) then
      self:fail(string.format("%s: %s (%s on %s, %d elements)[%d] is %s, the model says %s", what, e.name,
        e.kind.name, e.device, e.len, k, tostring(vals[k]), tostring(want)))
      return
    end
  end
end

-- The GPU catches up; every tensor must hold what the model says.
function S:check()
  self:catch_up()
  for slot = 1, NSLOT do
    local e = self:get(slot)
    if e then self:check_entry(e, "check") end
  end
end


---------------------------------------------------------------------------
-- Computing on one CUDA device, checked against the module's own CPU path on the same values: the
-- blocks the operands (and out) live on are copied to the host from the model (after the GPU
-- caught up, if the model does not know them all), the same views are taken there, and the same
-- call runs on both. The fake runs the kernels as C compiled from the CPU's expressions: results
-- must be the same bytes, errors the same messages.

local BINARY = { "add", "sub", "mul", "div", "idiv", "mod", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt",
  "ge", "logical_and", "logical_or", "logical_xor", "band", "bor", "bxor", "shl", "shr", "atan2", "hypot" }
local UNARY = { "neg", "abs", "sign", "floor", "ceil", "round", "trunc", "sqrt", "exp", "log", "log1p", "expm1", "sin",
  "cos", "tan", "tanh", "sigmoid", "logical_not", "isnan", "isinf", "isfinite", "bnot", "log2", "log10", "asin", "acos",
  "atan", "sinh", "cosh", "erf", "rsqrt", "reciprocal", "square" }
local SCALARS = { 0, 1, -1, 2, 3, 7, 0.5, -2.5, 300, 1e300, true, false, math.maxinteger, 0 / 0, 1 / 0, -0.0 }
local DTYPES = { "bool", "int8", "uint8", "int16", "int32", "int64", "uint64", "float16", "bfloat16", "float32",
  "float64" }

local function show(v)
  if type(v) == "table" then return v.name end
  if type(v) == "number" and v ~= v then return "0/0" end
  return tostring(v)
end

-- A view of tensor t (the whole block of e's root) with e's start, step and length.
local function same_view(t, e)
  local v
  if e.len == 0 then
    v = t:narrow(1, 1, 0)
  else
    local first = e.start + 1
    v = t:slice(1, first, first + (e.len - 1) * e.step, e.step)
  end
  if e.readonly then v = v:as_readonly() end
  return v
end

-- The entries an operation on `on` may take: live, on that device, not fp4, in memory the fake knows.
function S:on_device(on)
  local l = {}
  for slot = 1, NSLOT do
    local e = self:get(slot)
    if e and e.device == on and not e.kind.fp4 and not e.root.fabdev then l[#l + 1] = e end
  end
  return l
end

-- Host copies of the roots of entries (the model's values; the GPU catches up first when the
-- model does not know them all, and the model learns what the memory holds).
function S:host_roots(entries)
  local hosts, unknown = {}, false
  for _, e in ipairs(entries) do
    for i = 1, e.root.n do
      if e.root.vals[i] == nil then unknown = true end
    end
  end
  if unknown then
    self:catch_up()
    for _, e in ipairs(entries) do
      local r = e.root
      if r.n > 0 then r.vals = decode(r.kind, fake.read(r.ptr, r.nbytes), r.n) end
    end
  end
  for _, e in ipairs(entries) do
    if not hosts[e.root] then hosts[e.root] = host_tensor(e.root.kind, e.root.vals, e.root.n) end
  end
  return hosts
end

op("compute", 24, function(st, injected)
  local on = R(2) == 1 and "cuda:0" or "cuda:1"
  local fam, fi, ui = R(12), R(#BINARY), R(#UNARY)
  local s1, s2, s3, samelen = R(NSLOT), R(NSLOT), R(NSLOT), R(5) > 1
  local k1, k2, k3, sc1, sc2 = R(4), R(4), R(4), SCALARS[R(#SCALARS)], SCALARS[R(#SCALARS)]
  local outmode, dti, inplace, sti, verify, swap = R(6), R(#DTYPES + 8), R(4) == 1, R(8), R(3) == 1, R(4) == 1
  local pool = st:on_device(on)
  if #pool == 0 then return end
  local function pick(slot, len)
    for k = 0, #pool - 1 do
      local e = pool[(slot + k - 1) % #pool + 1]
      if len == nil or e.len == len then return e end
    end
    return pool[(slot - 1) % #pool + 1]
  end
  local a = pick(s1)
  local b = pick(s2, samelen and a.len or nil)
  local c = pick(s3, samelen and a.len or nil)
  -- a scalar in place of an operand now and then (k == 1)
  local opb, opc = b, c
  if k2 == 1 then opb = sc1 end -- (false is a scalar too)
  if k3 == 1 then opc = sc2 end
  local dtype = DTYPES[dti] -- nil 8 times in 19
  local stream, sdesc = nil, "nil"
  if sti <= 4 then
    stream, sdesc = st:stream_arg(on, ({ 3, 5, on == "cuda:0" and 7 or 9, on == "cuda:0" and 8 or 10 })[sti])
  end
  local name, args, n
  local method, opts_ok = false, true
  if fam <= 4 then
    name, args, n = BINARY[fi], { a, opb }, 2
    if swap and k2 == 1 and not inplace then args = { opb, a } end
  elseif fam <= 6 then
    name, args, n = UNARY[ui], { a }, 1
  elseif fam == 7 then
    name, args, n = "where", { c, a, opb }, 3
    inplace = false
  elseif fam == 8 then
    name, args, n = "clamp", { a }, 3
    if k2 <= 2 then args[2] = opb end
    if k3 <= 2 then args[3] = opc end
    if args[2] == nil and args[3] == nil then args[3] = c end
  elseif fam == 9 then
    name, args, n, method, opts_ok = "masked_fill", { a, c, sc1 }, 3, true, false
  elseif fam == 10 then
    name, args, n, method, opts_ok = "fill", { a, sc1 }, 2, true, false
  elseif fam == 11 then
    name, args, n, opts_ok = k1 <= 2 and "cat" or "stack", { { a, b } }, 1, false
    inplace = false
  else
    name, args, n, opts_ok = k1 <= 2 and "equal" or "allclose", { a, b }, 2, false
    inplace = false
  end
  if method then inplace = true end
  -- the result's length (1-d operands broadcast), for a pool tensor to write it into
  local len = a.len
  if opts_ok then
    for i = 1, n do
      local x = args[i]
      if type(x) == "table" and x.len ~= len and len == 1 then len = x.len end
    end
  end
  local out
  if opts_ok and not inplace then
    if outmode == 3 then
      for _, e in ipairs(pool) do
        if e.len == len and e ~= a then out = e end
      end
    elseif outmode == 4 and a.len == len then
      out = a
    elseif outmode == 5 and a.len == len then
      local okf, v = st:call(string.format("V = %s:flip(1)", a.name), T.flip, a.t, 1)
      if not okf then
        if not injected then st:fail("flip raised: " .. tostring(v)) end
        return
      end
      out = st:entry(v, a.root, a.device, "V", a.len > 0 and a.start + (a.len - 1) * a.step or a.start,
        a.len > 0 and -a.step or a.step, a.len, a.readonly)
    end
  end
  local target = inplace and a or out
  -- every entry the call touches, and their host copies
  local touched = { a }
  for i = 1, n do
    local x = args[i]
    if type(x) == "table" and x.root then touched[#touched + 1] = x end
    if type(x) == "table" and not x.root then
      for _, y in ipairs(x) do touched[#touched + 1] = y end
    end
  end
  if out then touched[#touched + 1] = out end
  local hosts = st:host_roots(touched)
  local function on_device(x) return type(x) == "table" and (x.root and x.t or nil) end
  local function on_host(x) return type(x) == "table" and x.root and same_view(hosts[x.root], x) or nil end
  local dargs, hargs, descs = {}, {}, {}
  for i = 1, n do
    local x = args[i]
    if type(x) == "table" and not x.root then -- a list
      dargs[i], hargs[i] = {}, {}
      local d = {}
      for j, y in ipairs(x) do
        dargs[i][j], hargs[i][j], d[j] = y.t, same_view(hosts[y.root], y), y.name
      end
      descs[i] = "{" .. table.concat(d, ", ") .. "}"
    elseif type(x) == "table" then
      dargs[i], hargs[i], descs[i] = on_device(x), on_host(x), x.name
    else
      dargs[i], hargs[i], descs[i] = x, x, show(x)
    end
  end
  local dopts, hopts
  if opts_ok and not inplace then
    dopts, hopts = { dtype = dtype, stream = stream }, { dtype = dtype }
    if out then dopts.out, hopts.out = out.t, same_view(hosts[out.root], out) end
    dargs[n + 1], hargs[n + 1] = dopts, hopts
    descs[n + 1] = string.format("{out = %s, dtype = %s, stream = %s}", out and out.name or "nil", tostring(dtype),
      sdesc)
  end
  local nargs = dopts and n + 1 or n
  local fn = inplace and T[name .. (method and "" or "_")] or dlpack[name]
  local text = string.format(inplace and "%s:%s%s(%s)" or "R = %s%s%s(%s)", inplace and a.name or "dlpack.",
    name, inplace and not method and "_" or "", table.concat(descs, ", ", inplace and 2 or 1, nargs))
  if inplace then text = text:gsub("%(, ", "(") end
  local okd, rd = st:call(text, fn, table.unpack(dargs, 1, nargs))
  st:disarm(injected) -- nothing more fails: the reads below are the checks' own
  local okh, rh = pcall(fn, table.unpack(hargs, 1, nargs))
  local function effect_unknown()
    if not target then return end
    set_vals(target, {})
    for _, e in ipairs(touched) do st:queue(e.root, target) end
  end
  if not okd and injected then
    effect_unknown()
    return
  end
  if okd ~= okh then
    st:fail(string.format("the CPU path %s (%s), the device %s (%s)", okh and "succeeded" or "raised", tostring(rh),
      okd and "succeeded" or "raised", tostring(rd)))
    effect_unknown()
    return
  end
  if not okd then
    if rd ~= rh then st:fail(string.format("the device raised %q, the CPU path %q", tostring(rd), tostring(rh))) end
    return
  end
  if type(rh) ~= "userdata" then -- equal, allclose
    if rd ~= rh then st:fail(string.format("the device answered %s, the CPU path %s", tostring(rd), tostring(rh))) end
    return
  end
  if target then
    if rd ~= target.t then
      st:fail(string.format("the call did not return its out or in-place tensor: %s, not %s", tostring(rd),
        target.name))
    end
    local r = target.root
    r.vals = decode(r.kind, hosts[r]:tobytes(), r.n) -- the CPU's result, where target maps
    for _, e in ipairs(touched) do st:queue(e.root, target) end
    if verify then
      st:catch_up()
      st:check_entry(target, "compute")
    end
    return
  end
  if rd.device ~= on or rd.dtype ~= rh.dtype or #rd.shape ~= #rh.shape then
    st:fail(string.format("the result is %s %s on %s, the CPU's %s %s", rd.dtype, #rd.shape, rd.device, rh.dtype,
      #rh.shape))
    return
  end
  for i, v in ipairs(rh.shape) do
    if rd.shape[i] ~= v then st:fail("the result's shape differs from the CPU's") return end
  end
  local kind = KIND_OF[rh.dtype]
  if verify or not kind or #rh.shape ~= 1 then
    local okr, got = pcall(function() return rd:to("cpu"):tobytes() end)
    if not okr then
      st:fail("reading the result raised: " .. tostring(got))
    elseif not same_bytes(rh.dtype, got, rh:tobytes()) then
      st:fail(string.format("the result's bytes differ from the CPU's (%s %s)", rh.dtype, tostring(rh)))
    end
  end
  if kind and #rh.shape == 1 then -- into the pool
    local slot = s3
    local r = st:new_root(kind, rh.shape[1], on, decode(kind, rh:tobytes(), rh.shape[1]))
    st:track(r, rd)
    local e = st:entry(rd, r, on, "T" .. slot)
    for _, x in ipairs(touched) do st:queue(x.root, e) end
    st:put(slot, e)
  end
end)

---------------------------------------------------------------------------
-- Reductions, products, Lua operators, two devices and the device argument of the creating
-- functions: each call runs on the device and again on the module's CPU path with the same
-- values (host copies of the operands' blocks, the same views), as `compute` does. Float
-- reductions and products may sum in another order on the device: their values agree within a
-- bound from the same call on the magnitudes (4 (n + 3) eps times it, n the elements per output,
-- plus a rounding of the result's dtype), everything else bit for bit.

local REDUCTIONS = { "sum", "prod", "mean", "var", "std", "min", "max", "argmin", "argmax", "any", "all" }
local EPS = { float16 = 2 ^ -24, bfloat16 = 2 ^ -24, float32 = 2 ^ -24, float64 = 2 ^ -53 }
local ROUNDING = { float16 = 2 ^ -11, bfloat16 = 2 ^ -8 }
local FMAX = { float16 = 65504, bfloat16 = 3.3e38, float32 = 3.4e38, float64 = 1.7e308 }

-- The values of a result as a flat list of float64 numbers; a Lua value as a list of one.
local function flat(v)
  if type(v) ~= "userdata" then return { v } end
  local bytes = v:to("cpu"):to("float64"):tobytes()
  local out = {}
  for i = 1, #bytes // 8 do out[i] = string.unpack("<d", bytes, (i - 1) * 8 + 1) end
  return out
end

local function numel(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

-- Does the device's result d agree with the CPU's h? bounds: nil (bit for bit) or a function that
-- gives each element's bound as a flat list, with the magnitude (scale) the bound is made from.
function S:agree(h, d, on, bounds)
  if type(h) ~= type(d) then
    self:fail(string.format("the device answered a %s (%s), the CPU a %s (%s)", type(d), tostring(d), type(h),
      tostring(h)))
    return
  end
  local dtype
  if type(h) == "userdata" then
    if d.device ~= on or d.dtype ~= h.dtype or #d.shape ~= #h.shape or numel(d.shape) ~= numel(h.shape) then
      self:fail(string.format("the result is %s of %d dims on %s, the CPU's %s of %d dims", d.dtype, #d.shape,
        d.device, h.dtype, #h.shape))
      return
    end
    for i, s in ipairs(h.shape) do
      if d.shape[i] ~= s then return self:fail("the result's shape differs from the CPU's") end
    end
    local okr, got = pcall(function() return d:to("cpu"):tobytes() end)
    if not okr then return self:fail("reading the result raised: " .. tostring(got)) end
    if same_bytes(h.dtype, got, h:tobytes()) then return end
    dtype = h.dtype
  else
    if h == d or (h ~= h and d ~= d) then
      if math.type(h) ~= math.type(d) then self:fail("the device's value is a " .. tostring(math.type(d))) end
      return
    end
    dtype = bounds and bounds.dtype
  end
  if not bounds or not EPS[dtype] then
    return self:fail(string.format("the device's result differs from the CPU's (%s): %s, the CPU %s", tostring(dtype),
      tostring(d), tostring(h)))
  end
  local want, got, bound, scale = flat(h), flat(d), bounds.fn()
  for i = 1, #want do
    local w, g, b, s = want[i], got[i], bound[i] or 0, scale[i] or 0
    b = b + (ROUNDING[dtype] or 0) * math.abs(w)
    local finite_w, finite_g = w == w and math.abs(w) < math.huge, g == g and math.abs(g) < math.huge
    local ok
    if w ~= w then ok = g ~= g or s ~= s or s == math.huge -- NaN: from a NaN, or inf - inf in some order
    elseif finite_w and finite_g then ok = math.abs(w - g) <= b
    else ok = w == g or s ~= s or s >= FMAX[dtype] / 4 end -- an overflow in one order and not another
    if not ok then
      return self:fail(string.format("element %d: the CPU %.17g, the device %.17g (bound %.3g, scale %.3g, %s)", i, w,
        g, b, s, dtype))
    end
  end
end

-- Runs fn on the device's arguments and then on the host's; both must raise the same message or
-- give results that agree. `limitation`: a message the device may raise where the CPU does not.
function S:versus(text, on, injected, bounds, fn, dargs, hargs, nargs, limitation)
  local okd, d1, d2 = self:call(text, fn, table.unpack(dargs, 1, nargs))
  self:disarm(injected)
  local okh, h1, h2 = pcall(fn, table.unpack(hargs, 1, nargs))
  if not okd and injected then return end
  if not okd and self.may_release and tostring(d1):find("released", 1, true) then return end
  if not okd and okh and limitation and tostring(d1):find(limitation, 1, true) then return end
  if okd ~= okh then
    return self:fail(string.format("the CPU path %s (%s), the device %s (%s)", okh and "succeeded" or "raised",
      tostring(h1), okd and "succeeded" or "raised", tostring(d1)))
  end
  if not okd then
    if d1 ~= h1 then self:fail(string.format("the device raised %q, the CPU path %q", tostring(d1), tostring(h1))) end
    return
  end
  if bounds then bounds.dtype = type(h1) == "userdata" and h1.dtype or bounds.dtype_of() end
  self:agree(h1, d1, on, bounds)
  if h2 ~= nil or d2 ~= nil then self:agree(h2, d2, on, nil) end -- min, max: the indices
end

-- A device pool entry of `on` and its host twin (the same view of a host copy of its block),
-- seen through a shape: 1-d, two rows, a stride-0 expansion to three rows, two rows transposed.
-- (A reshape of a strided view copies: with a failure injected it may raise, and nil is returned.)
function S:operand(on, slot, shape_k, injected)
  local pool = self:on_device(on)
  if #pool == 0 then return nil end
  local e = pool[(slot - 1) % #pool + 1]
  local hosts = self:host_roots({ e })
  local h = same_view(hosts[e.root], e)
  local view, desc = function(t) return t end, e.name
  if shape_k == 2 and e.len % 2 == 0 and e.len > 0 then
    view, desc = function(t) return t:reshape(2, -1) end, desc .. ":reshape(2, -1)"
  elseif shape_k == 3 then
    view, desc = function(t) return t:unsqueeze(1):expand(3, e.len) end, desc .. ":unsqueeze(1):expand(3, n)"
  elseif shape_k == 4 and e.len % 2 == 0 and e.len > 0 then
    view, desc = function(t) return t:reshape(2, -1):transpose(1, 2) end, desc .. ":reshape(2, -1):transpose(1, 2)"
  end
  local ok, d = self:call("V = " .. desc, view, e.t)
  if not ok then
    if not injected then self:fail("raised: " .. tostring(d)) end
    return nil
  end
  return d, view(h), desc, e
end

local DIMS = { nil, 1, -1, 2, 0, 1.0, 1.5, "1", { 1 }, { 1, 2 }, { 2, 1 }, { 1, 1 }, {}, { -1, 3 }, true }
local CORRECTIONS = { 0, 1, 2, -1, 0.5, 1 / 0, 0 / 0, "x", 40 }

op("reduce", 10, function(st, injected)
  local on = R(2) == 1 and "cuda:0" or "cuda:1"
  local slot, shape_k, fi, di, oi, dti, ci, method = R(NSLOT), R(4), R(#REDUCTIONS), R(#DIMS + 2), R(6), R(#DTYPES),
    R(#CORRECTIONS), R(2) == 1
  local evil = R(8)
  local d, h, desc, e = st:operand(on, slot, shape_k, injected)
  if not d then return end
  local name = REDUCTIONS[fi]
  local dim = DIMS[di] -- nil 3 times in 17
  local opts
  if oi == 2 then opts = { keepdim = true }
  elseif oi == 3 then opts = { dtype = DTYPES[dti] }
  elseif oi == 4 then opts = { correction = CORRECTIONS[ci], keepdim = ci % 2 == 0 }
  elseif oi == 5 then opts = { keepdims = true }
  elseif oi == 6 then opts = { dtype = DTYPES[dti], keepdim = true, correction = ci <= 2 and ci - 1 or nil } end
  -- now and then the dims table (as {1}) or the options table (as {}) releases the operand in the
  -- middle of the call and runs the collector: a result that agrees, or an error naming "released"
  local ddim, dopts, released = dim, opts, false
  local function release()
    released = true
    pcall(T.release, d)
    collectgarbage()
  end
  if evil == 1 then
    dim, ddim = { 1 }, setmetatable({}, { __len = function() return 1 end, __index = function(_, k)
      if k ~= 1 then return nil end
      release()
      return 1
    end })
  elseif evil == 2 then
    opts, dopts = {}, setmetatable({}, { __index = function()
      release()
      return nil
    end })
  end
  local function show_opts(o)
    if not o then return "nil" end
    local l = {}
    for _, k in ipairs({ "keepdim", "keepdims", "dtype", "correction" }) do
      if o[k] ~= nil then l[#l + 1] = k .. " = " .. show(o[k]) end
    end
    return "{" .. table.concat(l, ", ") .. "}"
  end
  local fn = method and T[name] or dlpack[name]
  local text = string.format("R = %s(%s, %s, %s)", method and ("T." .. name) or ("dlpack." .. name), desc,
    type(dim) == "table" and "{" .. table.concat(dim, ", ") .. "}" or show(dim), show_opts(opts))
  local bounds = {}
  bounds.dtype_of = function() return dlpack[name](h, dim, { keepdim = true, dtype = opts and opts.dtype }).dtype end
  bounds.fn = function()
    local keep = { keepdim = opts and opts.keepdim or false }
    local mag = dlpack.abs(h:to("float64"))
    local scale
    if name == "sum" or name == "mean" then scale = flat(dlpack[name](mag, dim, keep))
    elseif name == "prod" then scale = flat(dlpack.prod(mag, dim, keep))
    else
      local m = flat(dlpack.mean(mag * mag, dim, keep))
      local c = type(opts.correction) == "number" and opts.correction or 1
      local per = numel(h.shape) // math.max(1, #m)
      for i, v in ipairs(m) do
        m[i] = per - c > 0 and v * per / (per - c) or 1 / 0
        if name == "std" then m[i] = math.sqrt(m[i]) end
      end
      scale = m
    end
    local n = math.max(1, numel(h.shape) // math.max(1, #scale))
    local b = {}
    for i, s in ipairs(scale) do
      b[i] = 4 * (n + 3) * EPS[bounds.dtype] * s
      if name == "std" then b[i] = math.sqrt(b[i] * s) + b[i] end
    end
    return b, scale
  end
  if name == "var" or name == "std" then opts = opts or {} end
  if evil <= 2 then text = text .. (evil == 1 and " -- dims" or " -- opts") .. " release the operand mid-call" end
  st.may_release = evil <= 2
  st:versus(text, on, injected, bounds, fn, { d, ddim, dopts or opts }, { h, dim, opts }, 3,
    "CUDA tensors do not convert inside a computation yet")
  st.may_release = false
  if released and d == e.t then
    for _, o in pairs(st.pool) do
      if o.t == d then o.released = true end
    end
  end
end)

-- cumsum, cumprod and shuffle: bit for bit (the pool's lines are short: one thread scans each
-- in the CPU's order); shuffle from the same generator state on both sides
local SCANS = { "cumsum", "cumprod", "shuffle" }
local SCAN_DIMS = { nil, 1, -1, 2, 0, 3 }
op("scan", 4, function(st, injected)
  local on = R(2) == 1 and "cuda:0" or "cuda:1"
  local slot, shape_k, fi, di, dti, oi, method, seed = R(NSLOT), R(4), R(#SCANS), R(#SCAN_DIMS + 1), R(#DTYPES),
    R(3), R(2) == 1, R(1000)
  local d, h, desc = st:operand(on, slot, shape_k, injected)
  if not d then return end
  local name = SCANS[fi]
  local dim, opts = SCAN_DIMS[di], nil
  if oi == 2 then opts = { dtype = DTYPES[dti] } end
  local fn = method and T[name] or dlpack[name]
  local text, nargs
  if name == "shuffle" then
    local shuffle = fn
    fn, nargs = function(t)
      dlpack.manual_seed(seed)
      return shuffle(t)
    end, 1
    text = string.format("dlpack.manual_seed(%d); R = %s(%s)", seed, method and "T.shuffle" or "dlpack.shuffle", desc)
  else
    nargs = opts and 3 or 2
    text = string.format("R = %s(%s, %s, %s)", method and ("T." .. name) or ("dlpack." .. name), desc, show(dim),
      opts and "{dtype = " .. show(opts.dtype) .. "}" or "nil")
  end
  st:versus(text, on, injected, nil, fn, { d, dim, opts }, { h, dim, opts }, nargs,
    "is not shuffled on CUDA devices")
end)

op("matmul", 6, function(st, injected)
  local on = R(2) == 1 and "cuda:0" or "cuda:1"
  local s1, s2, rows, how, trans, method = R(NSLOT), R(NSLOT), R(4), R(5), R(3) == 1, R(2) == 1
  local pool = st:on_device(on)
  if #pool == 0 then return end
  local a, b = pool[(s1 - 1) % #pool + 1], pool[(s2 - 1) % #pool + 1]
  local hosts = st:host_roots({ a, b })
  local ha, hb = same_view(hosts[a.root], a), same_view(hosts[b.root], b)
  local ta, tb = a.name, b.name
  local va, vb = function(t) return t end, function(t) return t end
  local name = how == 1 and "dot" or "matmul"
  local k = a.len
  if how >= 3 and a.len > 0 then -- (m, k) @ (k, n), or (n, k) transposed
    local m = ({ 1, 2, 4, 8 })[rows]
    if a.len % m == 0 then
      k = a.len // m
      va, ta = function(t) return t:reshape(m, k) end, string.format("%s:reshape(%d, %d)", ta, m, k)
      if b.len % k == 0 and k > 0 then
        local n = b.len // k
        if trans then
          vb, tb = function(t) return t:reshape(n, k):transpose(1, 2) end,
            string.format("%s:reshape(%d, %d):transpose(1, 2)", tb, n, k)
        else
          vb, tb = function(t) return t:reshape(k, n) end, string.format("%s:reshape(%d, %d)", tb, k, n)
        end
      end
    end
  elseif how == 2 then -- 1-d @ 1-d
    name = "matmul"
  end
  local okv, da, db = st:call(string.format("A, B = %s, %s", ta, tb), function() return va(a.t), vb(b.t) end)
  if not okv then
    if not injected then st:fail("raised: " .. tostring(da)) end
    return
  end
  ha, hb = va(ha), vb(hb)
  local fn = method and T[name] or dlpack[name]
  local text = string.format("R = %s(A, B)", method and ("T." .. name) or ("dlpack." .. name))
  local bounds = {}
  bounds.dtype_of = function() return dlpack.matmul(ha:unsqueeze(1), hb:unsqueeze(2)).dtype end -- 1-d, 1-d
  bounds.fn = function()
    local scale = flat(dlpack.matmul(dlpack.abs(ha:to("float64")), dlpack.abs(hb:to("float64"))))
    local bound = {}
    for i, s in ipairs(scale) do bound[i] = 4 * (k + 3) * EPS[bounds.dtype] * s end
    return bound, scale
  end
  st:versus(text, on, injected, bounds, fn, { da, db }, { ha, hb }, 2)
end)

-- Lua's operators on CUDA tensors, a number on either side
local OPERATORS = {
  { "+", function(x, y) return x + y end }, { "-", function(x, y) return x - y end },
  { "*", function(x, y) return x * y end }, { "/", function(x, y) return x / y end },
  { "%", function(x, y) return x % y end }, { "^", function(x, y) return x ^ y end },
  { "//", function(x, y) return x // y end }, { "&", function(x, y) return x & y end },
  { "|", function(x, y) return x | y end }, { "~", function(x, y) return x ~ y end },
  { "<<", function(x, y) return x << y end }, { ">>", function(x, y) return x >> y end },
  { "-", function(x) return -x end, unary = true }, { "~", function(x) return ~x end, unary = true },
}

op("operator", 8, function(st, injected)
  local on = R(2) == 1 and "cuda:0" or "cuda:1"
  local s1, s2, k1, k2, oi, sc = R(NSLOT), R(NSLOT), R(4), R(4), R(#OPERATORS), SCALARS[R(#SCALARS)]
  local o = OPERATORS[oi]
  local da, ha, ta = st:operand(on, s1, k1 == 4 and 1 or k1, injected)
  if not da then return end
  local db, hb, tb
  if o.unary then
    st:versus(string.format("R = %s%s", o[1], ta), on, injected, nil, o[2], { da }, { ha }, 1)
    return
  end
  if type(sc) == "boolean" then sc = sc and 1 or 0 end -- Lua's operators take numbers
  if k2 <= 2 then
    db, hb, tb = sc, sc, show(sc)
  else
    db, hb, tb = st:operand(on, s2, k1 == 4 and 1 or k1, injected)
    if not db then return end
  end
  if k2 == 1 then da, db, ha, hb, ta, tb = db, da, hb, ha, tb, ta end -- the number on the left
  st:versus(string.format("R = %s %s %s", ta, o[1], tb), on, injected, nil, o[2], { da, db }, { ha, hb }, 2)
end)

-- Operands on two devices (cuda:0 and cuda:1, or a CUDA device and the CPU) raise naming both;
-- a stream of another device raises naming both devices.
local CROSS = {
  { "add", function(x, y) return dlpack.add(x, y) end }, { "+", function(x, y) return x + y end },
  { "where", function(x, y) return dlpack.where(dlpack.ne(x, 0), x, y) end },
  { "clamp", function(x, y) return dlpack.clamp(x, y) end },
  { "matmul", function(x, y) return dlpack.matmul(x, y) end }, { "dot", function(x, y) return dlpack.dot(x, y) end },
  { "cat", function(x, y) return dlpack.cat({ x, y }) end },
  { "stack", function(x, y) return dlpack.stack({ x, y }) end },
  { "equal", function(x, y) return dlpack.equal(x, y) end },
  { "allclose", function(x, y) return dlpack.allclose(x, y) end },
  { "add_", function(x, y) return x:add_(y) end }, { "masked_fill", function(x, y) return x:masked_fill(y, 1) end },
}

op("cross", 4, function(st, injected)
  local s1, s2, ci, other, sti = R(NSLOT), R(NSLOT), R(#CROSS), R(3), R(4)
  local pa, pb = st:on_device("cuda:0"), st:on_device(other == 1 and "cpu" or "cuda:1")
  if other == 3 then -- a stream of the other device for work on this one
    if #pa == 0 then return end
    local a = pa[(s1 - 1) % #pa + 1]
    local s = st.streams[2 + (sti - 1) % 2 + 1]
    local ok, err = st:call(string.format("R = dlpack.add(%s, 1, {stream = %s})", a.name, s.name), dlpack.add, a.t, 1,
      { stream = s.obj })
    if injected then return end
    if ok then return st:fail("a stream of cuda:1 for operands on cuda:0 was taken") end
    if not tostring(err):find("the stream is on cuda:1, the operands on cuda:0", 1, true) then
      st:fail("raised, but not naming both devices: " .. tostring(err))
    end
    return
  end
  if #pa == 0 or #pb == 0 then return end
  local a, b = pa[(s1 - 1) % #pa + 1], pb[(s2 - 1) % #pb + 1]
  if b.device == "cpu" and b.kind.dtype ~= "bool" and CROSS[ci][1] == "masked_fill" then return end
  if sti == 1 then a, b = b, a end
  local c = CROSS[ci]
  local ok, err = st:call(string.format("%s(%s, %s)", c[1], a.name, b.name), c[2], a.t, b.t)
  if injected then return end
  if ok then return st:fail(string.format("%s of %s and %s succeeded", c[1], a.device, b.device)) end
  err = tostring(err)
  if not (err:find(a.device, 1, true) and err:find(b.device, 1, true)) then
    if not err:find("on different devices", 1, true) then
      st:fail(string.format("raised, but not naming both devices (%s, %s): %s", a.device, b.device, err))
    end
  end
end)

-- The device argument of the creating functions: valid ones (strings, {2, id}, tables whose
-- __index answers once and lies after) make the tensor there with the CPU's values (the random
-- ones: the documented draw is reproducible and in range); hostile ones raise naming the problem.
local function lying_device(id)
  local reads = 0
  return setmetatable({}, { __index = function(_, k)
    reads = reads + 1
    if reads <= 2 then return k == 1 and 2 or id end
    return "a lie"
  end })
end
local DEVICE_ARGS = {
  { "cuda:0", "cuda:0" }, { "cuda:1", "cuda:1" }, { { 2, 0 }, "cuda:0" }, { { 2, 1 }, "cuda:1" }, { "cpu", "cpu" },
  { nil, nil }, { "lying cuda:1", "cuda:1", lying = 1 }, { "lying cuda:0", "cuda:0", lying = 0 },
  { "cuda:99", false, "CUDA device ids go from 0 to 63" }, { "cuda:2", false, "no CUDA device 2" },
  { "cuda:-1", false, "non-negative integer" }, { { 2, -1 }, false, "invalid device id -1" },
  { -1, false, "got number" }, { 0, false, "got number" }, { true, false, "got boolean" },
  { { 2 }, false, "two integers" }, { { 2, 0.5 }, false, "two integers" }, { "cuda:0\0", false, "embedded NUL" },
  { "throwing", false, "device says no", throwing = true }, { { 99, 0 }, false, "unsupported device type" },
  { "cuda:99999999999999999999", false, "CUDA device ids" }, { print, false, "got function" },
}
local CREATORS = { "zeros", "ones", "empty", "full", "arange", "linspace", "eye", "rand", "randn", "randint",
  "zeros_like", "ones_like", "empty_like", "full_like" }
local RANDOM = { rand = true, randn = true, randint = true, empty = true, empty_like = true }

op("create", 6, function(st, injected)
  local ci, ai, n, slot, dti, seed = R(#CREATORS), R(#DEVICE_ARGS), R(0, 9), R(NSLOT), R(#DTYPES), R(1000)
  local name, arg = CREATORS[ci], DEVICE_ARGS[ai]
  local dev, desc = arg[1], show(arg[1])
  if arg.lying then dev = lying_device(arg.lying)
  elseif arg.throwing then dev = setmetatable({}, { __index = function() error("device says no") end })
  elseif type(dev) == "table" then desc = "{" .. table.concat(dev, ", ") .. "}" end
  local src = st:get(slot)
  local dtype = DTYPES[dti]
  if name == "rand" or name == "randn" then dtype = ({ "float32", "float64", "float16", "bfloat16" })[dti % 4 + 1]
  elseif name == "linspace" or name == "eye" then dtype = dtype == "bool" and "float32" or dtype end
  local function make(device)
    if name == "zeros" or name == "ones" or name == "empty" then return dlpack[name]({ n, 2 }, dtype, device)
    elseif name == "full" then return dlpack.full({ n }, 3, dtype, device)
    elseif name == "arange" then return dlpack.arange(0, n, 1, dtype, device)
    elseif name == "linspace" then return dlpack.linspace(-2, 5, n, dtype, device)
    elseif name == "eye" then return dlpack.eye(n, 3, dtype, device)
    elseif name == "rand" or name == "randn" then return dlpack[name]({ n }, dtype, device)
    elseif name == "randint" then
      return dlpack.randint(dtype == "bool" and 0 or -1, 2, { n }, dtype == "uint64" and "int64" or dtype, device)
    elseif name == "full_like" then return dlpack.full_like(src.t, 1, nil, device) end
    return dlpack[name](src.t, nil, device)
  end
  if name:find("_like$") and (not src or src.kind.fp4 or src.root.fabdev) then return end
  local want_dev = arg[2]
  if want_dev == nil then want_dev = name:find("_like$") and src.device or "cpu" end
  dlpack.manual_seed(seed)
  local okd, d = st:call(string.format("R = dlpack.%s(..., %s, device = %s)", name, tostring(dtype), desc), make, dev)
  st:disarm(injected)
  if injected and not okd then return end
  local okh, h = pcall(make, "cpu")
  if arg[2] == false then
    if okd then return st:fail("device " .. desc .. " was taken") end
    if okh and not tostring(d):find(arg[3], 1, true) then -- (another argument may be refused first)
      st:fail(string.format("raised, but not for the reason expected (%s): %s", arg[3], tostring(d)))
    end
    return
  end
  if okd ~= okh then
    return st:fail(string.format("the CPU path %s (%s), on %s %s (%s)", okh and "succeeded" or "raised", tostring(h),
      desc, okd and "succeeded" or "raised", tostring(d)))
  end
  if not okd then
    if d ~= h then st:fail(string.format("on %s it raised %q, on the CPU %q", desc, tostring(d), tostring(h))) end
    return
  end
  if d.device ~= want_dev or d.dtype ~= h.dtype or numel(d.shape) ~= numel(h.shape) then
    return st:fail(string.format("made %s %s, expected %s %s", d.device, d.dtype, want_dev, h.dtype))
  end
  if not RANDOM[name] then
    local okr, got = pcall(function() return d:to("cpu"):tobytes() end)
    if not okr or not same_bytes(h.dtype, got, h:tobytes()) then st:fail("the values differ from the CPU's") end
  elseif name ~= "empty" and name ~= "empty_like" then
    dlpack.manual_seed(seed)
    local again = make(dev == nil and nil or want_dev)
    local a, b = d:to("cpu"), again:to("cpu")
    if a:tobytes() ~= b:tobytes() then st:fail("the same seed drew other numbers") end
    if name == "rand" and n > 0 then
      local f = a:to("float64")
      if dlpack.any(dlpack.lt(f, 0)) or dlpack.any(dlpack.ge(f, 1)) then st:fail("rand outside [0, 1)") end
    end
  end
end)

-- The indexing functions on a pool tensor of the device and an index made for the call (1-based,
-- sometimes out of range, any integer dtype) or a pool tensor as the mask or src: the same call
-- on the host copies must give the same bytes or the same error. Results stay out of the pool.
local INDEX = { "gather", "index_select", "take", "scatter", "nonzero", "argwhere", "count_nonzero", "masked_select" }
local IDTYPES = { "int64", "int32", "int8", "uint8", "uint64", "int16" }
op("index", 6, function(st, injected)
  local on = R(2) == 1 and "cuda:0" or "cuda:1"
  local fi, s1, s2, idt, n, bad = R(#INDEX), R(NSLOT), R(NSLOT), IDTYPES[R(#IDTYPES)], R(0, 6), R(8) == 1
  local values = {}
  for i = 1, 8 do values[i] = R(1, 40) end
  local pool = st:on_device(on)
  if #pool == 0 then return end
  local a, b = pool[(s1 - 1) % #pool + 1], pool[(s2 - 1) % #pool + 1]
  local name = INDEX[fi]
  local len = a.len
  local list = {}
  for i = 1, n do
    local v = len > 0 and (values[i] - 1) % len + 1 or 1
    if idt:sub(1, 1) == "i" and values[i] % 3 == 0 and (idt ~= "int8" or len <= 128) then v = v - len - 1 end
    list[i] = v
  end
  if bad and n > 0 then -- 0 or one past the end (0 where that does not fit an int8 or uint8 index)
    local top = ({ int8 = 127, uint8 = 255 })[idt]
    list[1] = (values[8] % 2 == 0 or (top and len >= top)) and 0 or len + 1
  end
  local hosts = st:host_roots({ a, b })
  local okx, index = pcall(dlpack.tensor, list, idt)
  if not okx then st:fail("making an index raised: " .. tostring(index)) return end
  local okc, dindex = st:call(string.format("I = dlpack.tensor({%s}, %q):to(%q)", table.concat(list, ", "), idt, on),
    T.to, index, on)
  if not okc then
    if not injected then st:fail("copying an index raised: " .. tostring(dindex)) end
    return
  end
  local ha, hb = same_view(hosts[a.root], a), same_view(hosts[b.root], b)
  local dargs, hargs, text
  if name == "gather" or name == "index_select" then
    dargs, hargs, text = { a.t, 1, dindex }, { ha, 1, index }, string.format("R = %s:%s(1, I)", a.name, name)
  elseif name == "take" then
    dargs, hargs, text = { a.t, dindex }, { ha, index }, string.format("R = dlpack.take(%s, I)", a.name)
  elseif name == "scatter" then
    dargs, hargs = { a.t, 1, dindex, b.t }, { ha, 1, index, hb }
    text = string.format("R = %s:scatter(1, I, %s)", a.name, b.name)
  elseif name == "masked_select" then
    dargs, hargs, text = { a.t, b.t }, { ha, hb }, string.format("R = %s:masked_select(%s)", a.name, b.name)
  else
    dargs, hargs, text = { a.t }, { ha }, string.format("R = %s:%s()", a.name, name)
  end
  local fn = dlpack[name]
  local okd, rd = st:call(text, fn, table.unpack(dargs))
  st:disarm(injected)
  local okh, rh = pcall(fn, table.unpack(hargs))
  if not okd and injected then return end
  if okd ~= okh then
    st:fail(string.format("%s: the CPU path %s (%s), the device %s (%s)", text, okh and "succeeded" or "raised",
      tostring(rh), okd and "succeeded" or "raised", tostring(rd)))
  elseif not okd then
    if rd ~= rh then
      st:fail(string.format("%s: the device raised %q, the CPU path %q", text, tostring(rd), tostring(rh)))
    end
  elseif type(rh) ~= "userdata" then
    if rd ~= rh then st:fail(string.format("%s: the device answered %s, the CPU path %s", text, tostring(rd),
      tostring(rh))) end
  else
    local okr, got = pcall(function() return rd:to("cpu"):tobytes() end)
    if not okr then st:fail(text .. ": reading the result raised: " .. tostring(got))
    elseif rd.device ~= on or rd.dtype ~= rh.dtype or not same_bytes(rh.dtype, got, rh:tobytes()) then
      st:fail(string.format("%s: the result differs from the CPU's (%s)", text, tostring(rh)))
    end
    pcall(T.release, rd)
  end
  pcall(T.release, dindex)
end)

-- One call's results on the device side (dres: pcall's results, packed) against the CPU path's
-- (hres): the same success or the same error, then each result the same number, or a tensor on
-- want_device with the same dtype and bytes (released after). `side` names the device side.
function S:agree_results(text, side, want_device, dres, hres)
  local okd, okh = dres[1], hres[1]
  if okd ~= okh then
    self:fail(string.format("%s: the CPU path %s (%s), %s %s (%s)", text, okh and "succeeded" or "raised",
      tostring(hres[2]), side, okd and "succeeded" or "raised", tostring(dres[2])))
  elseif not okd then
    if dres[2] ~= hres[2] then
      self:fail(string.format("%s: %s raised %q, the CPU path %q", text, side, tostring(dres[2]), tostring(hres[2])))
    end
  else
    for i = 2, hres.n do
      local rd, rh = dres[i], hres[i]
      if type(rh) ~= "userdata" then
        if tostring(rd) ~= tostring(rh) then
          self:fail(string.format("%s: %s answered %s, the CPU path %s", text, side, tostring(rd), tostring(rh)))
        end
      else
        local okr, got = pcall(function() return rd:to("cpu"):tobytes() end)
        if not okr then self:fail(text .. ": reading the result raised: " .. tostring(got))
        elseif rd.device ~= want_device or rd.dtype ~= rh.dtype or not same_bytes(rh.dtype, got, rh:tobytes()) then
          self:fail(string.format("%s: result %d (%s) differs from the CPU's (%s)", text, i - 1, tostring(rd),
            tostring(rh)))
        end
        pcall(T.release, rd)
      end
    end
  end
end

-- sorting, the statistics on the sorted lines and unique: every result against the CPU path's, a
-- tensor's bytes or a Lua number (packed fp4 raises alike on both)
local SORTS = { "sort", "argsort", "topk", "median", "quantile", "unique" }
local QS = { 0.5, 0, 1, { 0.25, 0.75, 0.1 }, 0.9 }
op("sort", 5, function(st, injected)
  local on = R(2) == 1 and "cuda:0" or "cuda:1"
  local fi, s1, desc, kk, qi, whole = R(#SORTS), R(NSLOT), R(2) == 1, R(0, 8), R(#QS), R(3) == 1
  local pool = st:on_device(on)
  if #pool == 0 then return end
  local a = pool[(s1 - 1) % #pool + 1]
  local name = SORTS[fi]
  local hosts = st:host_roots({ a })
  local ha = same_view(hosts[a.root], a)
  local dim = not whole and 1 or nil
  local extra, shown
  if name == "topk" then
    local k = math.min(kk, a.len)
    extra, shown = { k, 1, { largest = desc } }, string.format("%d, 1, {largest = %s}", k, tostring(desc))
  elseif name == "quantile" then
    extra = { QS[qi], dim }
    shown = type(QS[qi]) == "table" and "{" .. table.concat(QS[qi], ", ") .. "}" or tostring(QS[qi])
    shown = shown .. ", " .. tostring(dim)
  elseif name == "median" then
    extra, shown = { dim }, tostring(dim)
  elseif name == "unique" then
    extra = { { return_inverse = desc, return_counts = kk % 2 == 0 } }
    shown = string.format("{return_inverse = %s, return_counts = %s}", tostring(desc), tostring(kk % 2 == 0))
  else
    extra, shown = { 1, { descending = desc } }, string.format("1, {descending = %s}", tostring(desc))
  end
  local text = string.format("R = %s:%s(%s)", a.name, name, shown)
  local fn = dlpack[name]
  local dres = table.pack(st:call(text, fn, a.t, table.unpack(extra, 1, 3)))
  st:disarm(injected)
  local hres = table.pack(pcall(fn, ha, table.unpack(extra, 1, 3)))
  if not dres[1] and injected then return end
  st:agree_results(text, "the device", on, dres, hres)
end)

-- The functions made of the module's own, on pinned and managed memory, which the CPU reads: they
-- run on the CPU and give cpu tensors, the bytes (or numbers, or errors) of the same call on a cpu
-- copy of the values
local COMPOSED = { "tile", "repeat", "repeat_interleave", "roll", "outer", "diag", "tril", "einsum", "norm", "unique" }
op("composed", 3, function(st, injected)
  local on = R(2) == 1 and "cuda_host" or "cuda_managed"
  local fi, s1, k = R(#COMPOSED), R(NSLOT), R(0, 3)
  local pool = st:on_device(on)
  if #pool == 0 then return end
  local a = pool[(s1 - 1) % #pool + 1]
  st:catch_up() -- the GPU's writes to this memory land first: the CPU reads it without a stream
  local ha = host_tensor(a.kind, decode(a.kind, a.t:tobytes(), a.len), a.len)
  local name = COMPOSED[fi]
  local fn, dargs, hargs, shown = dlpack[name], { a.t }, { ha }
  if name == "tile" or name == "repeat" then
    dargs[2], hargs[2], shown = { k, 1 }, { k, 1 }, string.format("{%d, 1}", k)
  elseif name == "outer" then
    dargs[2], hargs[2], shown = a.t, ha, a.name
  elseif name == "einsum" then
    local eq = ({ "i->", "i,i->", "i,j->ij", "i->i" })[k + 1]
    fn, dargs, hargs = dlpack.einsum, { eq, a.t, a.t }, { eq, ha, ha }
    if not eq:find(",") then dargs[3], hargs[3] = nil, nil end
  elseif name == "norm" then
    local ord = ({ 2, 1, math.huge, -2 })[k + 1]
    dargs[2], hargs[2], shown = ord, ord, tostring(ord)
  elseif name == "unique" then
    dargs[2], hargs[2], shown = { dim = 1 }, { dim = 1 }, "{dim = 1}"
  else -- repeat_interleave, roll, diag, tril (of a 1-d tensor: raises alike)
    dargs[2], hargs[2], shown = k - 1, k - 1, tostring(k - 1)
  end
  local text
  if name == "einsum" then
    text = string.format("R = dlpack.einsum(%q, %s%s)", dargs[1], a.name, dargs[3] and ", " .. a.name or "")
  else
    text = string.format("R = dlpack.%s(%s, %s)", name, a.name, shown)
  end
  local dres = table.pack(st:call(text, fn, table.unpack(dargs, 1, 3)))
  st:disarm(injected)
  local hres = table.pack(pcall(fn, table.unpack(hargs, 1, 3)))
  if not dres[1] and injected then return end
  st:agree_results(text, on .. " memory", "cpu", dres, hres)
end)

op("check", 2, function(st) st:check() end)

---------------------------------------------------------------------------

local pick_op = runner.picker(ops)

local function live_counts()
  local l = fake.live()
  return { device = l.device, host = l.host, managed = l.managed, streams = l.streams, events = l.events }
end

local function settle()
  for _ = 1, 3 do
    collectgarbage()
    collectgarbage()
    fake.sync_all()
    cuda.legacy_stream:synchronize() -- lets go of what was held for completed work
  end
end

local function run_seed(seed, steps)
  math.randomseed(seed)
  local st = S.new(seed)
  settle()
  local live0, errors0 = live_counts(), fake.errors()
  local fab_live0, fab_deleted0 = fab.live(), fab.deleted()
  local modes = { "incremental", "generational" }
  collectgarbage(modes[seed % 2 + 1])
  st:make_streams()
  st.scratch = { [0] = dlpack.zeros({ 64 }, "uint8", "cuda:0"), [1] = dlpack.zeros({ 64 }, "uint8", "cuda:1") }
  for _ = 1, steps do
    st.step = st.step + 1
    local o = pick_op()
    local injected = st:arm(o)
    o.fn(st, injected)
    st:disarm(injected)
    if fake.errors() ~= errors0 then
      local log = fake.error_log()
      st:fail("the fake counted misuse of the driver: " .. tostring(log[#log]))
      errors0 = fake.errors()
    end
    if st.step % CHECK_EVERY == 0 then st:check() end
  end
  st.step = st.step + 1
  st:check()
  -- teardown: release everything, let the GPU finish, collect: the counts are back
  st:note("teardown")
  for _, c in pairs(st.caps) do pcall(dlpack.release_capsule, c.cap) end
  for _, e in pairs(st.pool) do pcall(T.release, e.t) end
  for _, s in ipairs(st.streams) do pcall(s.obj.close, s.obj) end
  st.scratch[0]:release()
  st.scratch[1]:release()
  st.pool, st.caps, st.streams, st.scratch = {}, {}, {}, nil
  settle()
  local live = live_counts()
  for _, k in ipairs({ "device", "host", "managed", "streams", "events" }) do
    if live[k] ~= live0[k] then
      st:fail(string.format("after the teardown %d live %s (before the seed: %d)", live[k], k, live0[k]))
    end
  end
  if fake.errors() ~= errors0 then st:fail("the fake counted misuse of the driver in the teardown") end
  if fab.live() ~= fab_live0 then
    st:fail(string.format("%d fabricated tensors still live (before: %d)", fab.live(), fab_live0))
  end
  if fab.deleted() - fab_deleted0 > st.nfab then
    st:fail(string.format("%d deleter calls for %d fabricated tensors", fab.deleted() - fab_deleted0, st.nfab))
  end
  collectgarbage("incremental")
  return st
end

runner.run(options, "fuzz (cuda)", function(seed) return run_seed(seed, options.steps) end, 0, function(seed)
  return string.format("bash spec/fuzz/asan.sh --cuda --seed %d --seeds 1 --steps %d --verbose", seed, options.steps)
end)
