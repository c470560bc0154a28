#!/usr/bin/env lua5.4
--[[
The dlpack.ipc half of the fuzzer (README.md): the receiver of the wire
format and the life of a channel, against a hostile peer played in this
process through raw sockets and descriptors (fabricate.so's ipc_* helpers).

  lua5.4 spec/fuzz/ipc.lua [--seed S] [--steps N] [--seeds K] [--seconds T] [--verbose]
                           [--break values|readonly|accept|leak]
  bash spec/fuzz/asan.sh --ipc --seed S ...     (the same under ASan+UBSan)

Runs seed S (then S+1, ... for K seeds, or until T seconds have passed): a
listener (an abstract name or a file in /tmp), a raw SOCK_SEQPACKET peer
socket connected to it and the channel accepted from it, then N random steps.
The peer sends valid messages (wire format v1 encoded here, CRC-32 included:
any of the 26 dtypes, 0-d to 6-d shapes, empty ones, transposed, strided,
negative, zero and junk strides, offsets, READ_ONLY and IS_SUBBYTE_TYPE_PADDED)
on memfds sealed and sized so that the layout fits and filled with a known
pattern; the same messages mutated (bit flips, fields set to edge values,
ndim 65, sizes that overflow, offsets past the end, the length and the CRC
recomputed or not, records cut short or made longer) and/or with the wrong
descriptors (none, two, many, a pipe, a regular file, a socket, an unsealed,
a too small or too large, a hugetlb memfd, a read-only reopened one). A model
written from docs/ipc.md decides for every message whether recv must refuse
it (an error starting with "recv: ") or give a tensor, and which: shape,
strides, dtype, read-only flag and the elements (tobytes, get, and the
elements at both ends of the span through select). The life-cycle steps: recv
with timeouts (nil when empty, "closed" after the peer left), writes on
either side seen on the other (zero copy), views, releases, drops, full
collections with the descriptors counted, ch:send of received, shared and
plain tensors (copy/readonly options) read raw by the peer and checked (the
layout, the descriptor's seals, access and contents) and sometimes sent back,
channels closed with messages waiting, the peer closing, and finalizers armed
to close the channel, recv on it or release a tensor during the next call.
One block mapped twice in this process (a message received twice, or a shared
tensor beside what came back of it) is written through one mapping while the
other is read (copy, add_, out=, masked_fill, clamp_, reversed and shifted
views, a re-import through to_dlpack/from_dlpack, a read-only receive): the
model says what reading every input first gives. Step 2 of every seed is one
(a reversed copy or add_), so that every seed catches a writer that misses
overlap through two addresses of one set of pages.

A seed fails on a model violation, an error that is not recv's own, or when,
after everything is closed and collected, this process's descriptors or
memfd mappings differ from their counts before the seed (the leak check).
The same seed gives the same calls: only math.random is drawn, and the draws
depend on the model, never on what the module answered. --break makes the
model wrong on purpose (values: the pattern shifted by one byte; readonly: a
read-only descriptor or a write seal ignored; accept: every message expected
to be taken; leak: a descriptor left open at the end): a run must then fail,
which shows that the checks can fail. Output and exit status as fuzz.lua's.
]]

local here = ((arg and arg[0]) or "spec/fuzz/ipc.lua"):match("^(.*)/[^/]*$") or "."
package.path = here .. "/../?.lua;" .. package.path
local runner = require "fuzz.runner"
runner.paths(here)

local BREAKS = { values = true, readonly = true, accept = true, leak = true }
local options = { seed = 1, steps = 200, seeds = 1, seconds = nil, verbose = false, broken = nil }
runner.options("fuzz-ipc", options, "lua5.4 spec/fuzz/ipc.lua [--seed S] [--steps N] [--seeds K] [--seconds T] "
    .. "[--verbose] [--break values|readonly|accept|leak]", {
  ["--corpus"] = function(_, num) num("--corpus") end, -- the CPU half's option: nothing to do here
  ["--break"] = function(next_arg)
    local b = next_arg()
    if not BREAKS[b] then
      io.stderr:write("fuzz-ipc: --break takes values, readonly, accept or leak\n")
      os.exit(2)
    end
    options.broken = b
  end,
})

local dlpack = require "dlpack"
local okipc, ipc = pcall(require, "dlpack.ipc")
local okfab, fab = pcall(require, "fabricate")
if not okipc or not okfab or not fab.ipc_connect then
  io.stderr:write("fuzz-ipc: needs dlpack.ipc and build/fabricate.so with its ipc_* helpers (Linux): ",
    tostring(okipc and fab or ipc), "\n")
  os.exit(2)
end

local R = math.random
local T = dlpack.Tensor
local out = io.stdout
local VERBOSE = options.verbose
local BROKEN = options.broken
local MAXI, MINI = math.maxinteger, math.mininteger

local NSLOT = 12       -- tensors the receiver keeps
local MAX_QUEUE = 16   -- messages waiting in the channel
local MAX_PEER_FILES = 6
local FULL_CHECK = 4096 -- elements compared one by one up to this many (else samples)

---------------------------------------------------------------------------
-- The wire format (docs/ipc.md, version 1)

local MAGIC, HEADER, MAX_NDIM = "DLIP", 56, 64
local WIRE_MAX = HEADER + 16 * MAX_NDIM
local MAX_RECEIVED_FDS = 8 -- the receiver's control buffer: more is an error (MSG_CTRUNC)
local SEAL, SHRINK, GROW, WRITE, FUTURE_WRITE = 1, 2, 4, 8, 16
local READ_ONLY, PADDED = 1, 4
local HUGE_PAGE = 2 * 1024 * 1024

-- name, DLPack code, bits, itemsize; fmt: how `get` reads one (nil: no element access)
local DTYPES = {
  { "bool", 6, 8, 1, "bool" }, { "int8", 0, 8, 1, "<i1" }, { "int16", 0, 16, 2, "<i2" },
  { "int32", 0, 32, 4, "<i4" }, { "int64", 0, 64, 8, "<i8" }, { "uint8", 1, 8, 1, "<I1" },
  { "uint16", 1, 16, 2, "<I2" }, { "uint32", 1, 32, 4, "<I4" }, { "uint64", 1, 64, 8, "<i8" },
  { "float16", 2, 16, 2, "half" }, { "bfloat16", 4, 16, 2, "bf16" }, { "float32", 2, 32, 4, "<f" },
  { "float64", 2, 64, 8, "<d" }, { "complex64", 5, 64, 8 }, { "complex128", 5, 128, 16 },
  { "float8_e3m4", 7, 8, 1 }, { "float8_e4m3", 8, 8, 1 }, { "float8_e4m3b11fnuz", 9, 8, 1 },
  { "float8_e4m3fn", 10, 8, 1 }, { "float8_e4m3fnuz", 11, 8, 1 }, { "float8_e5m2", 12, 8, 1 },
  { "float8_e5m2fnuz", 13, 8, 1 }, { "float8_e8m0fnu", 14, 8, 1 }, { "float6_e2m3fn", 15, 6, 1 },
  { "float6_e3m2fn", 16, 6, 1 }, { "float4_e2m1fn", 17, 4, 1 },
}
local BY_CODE = {}
for i, d in ipairs(DTYPES) do
  DTYPES[i] = { name = d[1], code = d[2], bits = d[3], itemsize = d[4], fmt = d[5] }
  BY_CODE[d[2] * 256 + d[3]] = DTYPES[i]
end
-- dtypes whose bytes `fill` writes exactly as string.pack does (the receiver's writes)
local FILLABLE = { bool = "bool", int8 = "<i1", int16 = "<i2", int32 = "<i4", int64 = "<i8", uint8 = "<I1",
  uint16 = "<I2", uint32 = "<I4", uint64 = "<i8" }

local CRC = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do c = (c & 1 ~= 0) and (0xEDB88320 ~ (c >> 1)) or (c >> 1) end
  CRC[i] = c
end
local function crc32(s)
  local c = 0xFFFFFFFF
  for i = 1, #s, 200 do
    local b = { s:byte(i, i + 199) }
    for k = 1, #b do c = CRC[(c ~ b[k]) & 255] ~ (c >> 8) end
  end
  return c ~ 0xFFFFFFFF
end

-- int64 arithmetic that says when it overflows (nil), as layout.c's dlp_add and dlp_mul
local function add(a, b)
  local r = a + b
  if (a >= 0) == (b >= 0) and (r >= 0) ~= (a >= 0) then return nil end
  return r
end
local function mul(a, b)
  if a == 0 or b == 0 then return 0 end
  if (a == -1 and b == MINI) or (b == -1 and a == MINI) then return nil end
  local r = a * b
  if r // b ~= a then return nil end
  return r
end

-- The bytes of message m (fields as on the wire; m.shape and m.strides may have another count than
-- m.ndim; m.length and m.crc, when set, replace the computed ones).
local function encode(m)
  local parts = { string.pack("<c4I2I2I4I4I4I4BBI2I4i8i8i8", m.magic, m.version & 0xFFFF, m.kind & 0xFFFF, 0, 0,
    m.devtype & 0xFFFFFFFF, m.devid & 0xFFFFFFFF, m.code & 255, m.bits & 255, m.lanes & 0xFFFF,
    m.ndim & 0xFFFFFFFF, m.flags, m.size, m.offset) }
  for i = 1, #m.shape do parts[#parts + 1] = string.pack("<i8", m.shape[i]) end
  for i = 1, #m.strides do parts[#parts + 1] = string.pack("<i8", m.strides[i]) end
  local b = table.concat(parts)
  b = b:sub(1, 8) .. string.pack("<I4", (m.length or #b) & 0xFFFFFFFF) .. b:sub(13)
  return b:sub(1, 12) .. string.pack("<I4", m.crc or crc32(b)) .. b:sub(17)
end

-- The bytes b with their CRC field set right (when they have one).
local function fix_crc(b)
  if #b < 16 then return b end
  local z = b:sub(1, 12) .. "\0\0\0\0" .. b:sub(17)
  return b:sub(1, 12) .. string.pack("<I4", crc32(z)) .. b:sub(17)
end

local function numel_of(shape)
  for _, s in ipairs(shape) do if s < 0 then return nil end end
  for _, s in ipairs(shape) do if s == 0 then return 0 end end
  local n = 1
  for _, s in ipairs(shape) do
    n = mul(n, s)
    if not n then return nil end
  end
  return n
end

local function packed_bytes(bits, numel) return numel // 8 * bits + (numel % 8 * bits + 7) // 8 end

-- The bytes a layout reaches, relative to its element 0: lo (<= 0), hi (exclusive), as layout.c's
-- dlp_span_of; nil when it overflows or (packed) is not contiguous. numel 0 reaches nothing.
local function span_of(shape, strides, d, packed)
  local numel = numel_of(shape)
  if not numel then return nil end
  if numel == 0 then return 0, 0, 0 end
  if packed then
    local expected = 1
    for i = #shape, 1, -1 do
      if shape[i] ~= 1 and strides[i] ~= expected then return nil end
      expected = expected * shape[i]
    end
    return 0, packed_bytes(d.bits, numel), numel
  end
  local lo, hi = 0, 0
  for i = 1, #shape do
    if shape[i] ~= 1 then
      local reach = mul(strides[i], shape[i] - 1)
      reach = reach and mul(reach, d.itemsize)
      if not reach then return nil end
      if reach < 0 then lo = add(lo, reach) else hi = add(hi, reach) end
      if not lo or not hi then return nil end
    end
  end
  hi = add(hi, d.itemsize)
  if not hi then return nil end
  return lo, hi, numel
end

-- Decodes a record as the receiver must (docs/ipc.md: lengths first, every value in range): the
-- message, or nil and why not.
local function decode(b)
  local n = #b
  if n < HEADER then return nil, "too short" end
  if n > WIRE_MAX then return nil, "too long" end
  if b:sub(1, 4) ~= MAGIC then return nil, "magic" end
  local version, kind, length, crc = string.unpack("<I2I2I4I4", b, 5)
  if version ~= 1 then return nil, "version" end
  if kind ~= 1 then return nil, "kind" end
  if length ~= n then return nil, "length field" end
  if crc32(b:sub(1, 12) .. "\0\0\0\0" .. b:sub(17)) ~= crc then return nil, "checksum" end
  local ndim = string.unpack("<I4", b, 29)
  if ndim > MAX_NDIM then return nil, "ndim" end
  if n ~= HEADER + 16 * ndim then return nil, "length for ndim" end
  local m = { ndim = ndim, shape = {}, strides = {} }
  m.devtype, m.devid, m.code, m.bits, m.lanes, m.flags, m.size, m.offset =
    string.unpack("<i4i4BBI2xxxxi8i8i8", b, 17) -- (ndim, at 28, read above)
  for i = 1, ndim do
    m.shape[i] = string.unpack("<i8", b, HEADER + 1 + 8 * (i - 1))
    m.strides[i] = string.unpack("<i8", b, HEADER + 1 + 8 * (ndim + i - 1))
  end
  if m.devtype ~= 1 or m.devid ~= 0 then return nil, "device" end -- cuda: no driver for a memfd
  if m.lanes ~= 1 then return nil, "lanes" end
  m.dtype = BY_CODE[m.code * 256 + m.bits]
  if not m.dtype then return nil, "dtype" end
  if m.flags & ~(READ_ONLY | PADDED) ~= 0 then return nil, "flags" end
  if m.flags & PADDED ~= 0 and m.dtype.bits >= 8 then return nil, "padded flag on a byte dtype" end
  m.padded = m.flags & PADDED ~= 0
  m.packed = m.dtype.bits < 8 and not m.padded
  for i = 1, ndim do if m.shape[i] < 0 then return nil, "negative size" end end
  m.numel = numel_of(m.shape)
  if not m.numel then return nil, "numel overflows" end
  return m
end

---------------------------------------------------------------------------
-- Files (memfds the peer made, or the module's own) and what is in them

-- The pattern: a file filled with salt holds at pos the byte BASE[(pos + salt) % PERIOD] (BASE made
-- once, by its own generator: math.random's draws stay the fuzzer's). A prime period, so that an
-- offset wrong by a page, or by any amount short of 8191 bytes, reads other bytes.
local PERIOD = 8191
local BASE
do
  local x, t = 12345, {}
  for i = 1, PERIOD do
    x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    t[i] = (x >> 16) & 255
  end
  BASE = string.char(table.unpack(t, 1, 4000)) .. string.char(table.unpack(t, 4001, PERIOD))
end
local BASE2 = BASE .. BASE

-- A file model: size, seals, the pattern written over [w0, w1) (zeros elsewhere), then writes in `over`.
local function fbyte(f, pos)
  if BROKEN == "values" then pos = pos + 1 end
  local v = f.over[pos]
  if v then return v end
  if pos >= f.w0 and pos < f.w1 then return BASE:byte((pos + f.salt) % PERIOD + 1) end
  return 0
end

-- The bytes [pos, pos + n) of the pattern with salt.
local function pattern_string(salt, pos, n)
  local parts, left = {}, n
  while left > 0 do
    local at = (pos + salt) % PERIOD
    local k = math.min(left, PERIOD)
    parts[#parts + 1] = BASE2:sub(at + 1, at + k)
    pos, left = pos + k, left - k
  end
  return table.concat(parts)
end

local function fbytes(f, pos, n)
  if BROKEN ~= "values" and next(f.over) == nil and pos >= f.w0 and pos + n <= f.w1 then
    return pattern_string(f.salt, pos, n) -- (the common case, at C speed)
  end
  local t = {}
  for i = 0, n - 1 do t[i + 1] = fbyte(f, pos + i) end
  local parts = {}
  for i = 1, n, 4096 do parts[#parts + 1] = string.char(table.unpack(t, i, math.min(n, i + 4095))) end
  return table.concat(parts)
end

---------------------------------------------------------------------------
-- The state of one seed

local S = {}
S.__index = S
runner.seed_methods(S, VERBOSE)

function S.new(seed)
  return setmetatable({ seed = seed, step = 0, calls = 0, failures = {}, last = "-", pool = {}, queue = {},
    files = {}, nfile = 0, nmsg = 0, nowner = 0, ntensor = 0, lcg = seed }, S)
end

function S.check_note(_, label)
  if VERBOSE then
    out:write("    check ", label, "\n")
    out:flush()
  end
end

-- Calls fn(...) under pcall, counted, after S:note(desc).
function S:call(desc, fn, ...)
  self:note(desc)
  self.calls = self.calls + 1
  return pcall(fn, ...)
end

local function list(t)
  local s = {}
  for i, v in ipairs(t) do s[i] = string.format("%d", v) end
  return "{" .. table.concat(s, ",") .. "}"
end

local function seals_name(s)
  local n = {}
  for bit, name in pairs({ [SEAL] = "SEAL", [SHRINK] = "SHRINK", [GROW] = "GROW", [WRITE] = "WRITE",
    [FUTURE_WRITE] = "FUTURE_WRITE" }) do
    if s & bit ~= 0 then n[#n + 1] = name end
  end
  table.sort(n)
  return #n > 0 and table.concat(n, "|") or "none"
end

-- A new memfd of the peer's (or another kind of descriptor), filled over [w0, w1) with a pattern,
-- then sealed. The model of it, with fd the peer's descriptor. kind: memfd or hugetlb.
function S:new_file(size, seals, w0, w1, kind)
  self.nfile = self.nfile + 1
  local f = { id = self.nfile, size = size, seals = 0, salt = R(0, 0x3FFFFFFF), w0 = w0, w1 = w1, over = {},
    kind = kind or "memfd" }
  self.calls = self.calls + 1
  local fd, why = fab.ipc_make_fd(f.kind, size)
  if not fd then
    if f.kind == "hugetlb" then return nil end -- no huge pages here: the caller sends something else
    error("fuzz-ipc: cannot make a memfd of " .. size .. " bytes: " .. tostring(why))
  end
  f.fd = fd
  if w1 > w0 and f.kind == "memfd" then
    assert(fab.ipc_write(fd, w0, pattern_string(f.salt, w0, w1 - w0)))
  else
    f.w1 = f.w0
  end
  if seals ~= 0 then
    -- F_SEAL_FUTURE_WRITE is Linux 5.1: without it the model takes the seals that held
    if not fab.ipc_seal(fd, seals) and not fab.ipc_seal(fd, seals & ~FUTURE_WRITE) and f.kind == "memfd" then
      error("fuzz-ipc: cannot seal a memfd with " .. seals_name(seals))
    end
  end
  local info = fab.ipc_fd_info(fd)
  f.seals, f.ino = info.seals, info.ino
  self.files[#self.files + 1] = f
  return f
end

-- The peer keeps a few files open (to write them, to send them again); it closes the oldest.
function S:trim_files()
  local open = self:peer_files()
  for i = 1, #open - MAX_PEER_FILES do
    fab.ipc_close(open[i].fd)
    open[i].fd = nil
  end
end

-- Draws for the checks (which elements to read), apart from math.random: how many a check makes
-- may depend on what the module answered (in a finalizer's step), and the calls must not.
function S:prand(lo, hi)
  self.lcg = self.lcg * 6364136223846793005 + 1442695040888963407
  local span = hi - lo + 1
  if span <= 0 then return lo end
  return lo + (self.lcg >> 33) % span
end

function S:peer_files()
  local open = {}
  for _, f in ipairs(self.files) do if f.fd then open[#open + 1] = f end end
  return open
end

---------------------------------------------------------------------------
-- Valid layouts and messages

local EDGE_STRIDES = { 0, -1, 1 << 40, MAXI, MINI, 12345, -(1 << 62) }

local function contiguous_strides(shape)
  -- as layout.c's dlp_contiguous_strides (size-1 dimensions get the running step)
  local strides, step = {}, 1
  for i = #shape, 1, -1 do
    strides[i] = step
    if shape[i] > 1 then step = mul(step, shape[i]) or MAXI end
  end
  return strides
end

-- A random layout {dtype, padded, packed, shape, strides}, numel at most `cap`.
local function gen_layout(cap)
  local d = DTYPES[R(#DTYPES)]
  local padded = d.bits < 8 and R(2) == 1
  local packed = d.bits < 8 and not padded
  local ndim = ({ 0, 1, 1, 2, 2, 2, 3, 3, 4, 5, 6 })[R(11)]
  local shape = {}
  for i = 1, ndim do shape[i] = ({ 1, 2, 2, 3, 3, 4, 5, 7 })[R(8)] end
  local empty = ndim > 0 and R(12) == 1
  if empty then shape[R(ndim)] = 0 end
  while (numel_of(shape) or 0) > cap do
    local big = 1
    for i = 2, ndim do if shape[i] > shape[big] then big = i end end
    shape[big] = shape[big] // 2
  end
  local strides
  if packed then
    strides = contiguous_strides(shape)
  else
    -- physical order: a random permutation of the dimensions (transposed layouts)
    local order = {}
    for i = 1, ndim do order[i] = i end
    if R(3) == 1 then
      for i = ndim, 2, -1 do
        local j = R(i)
        order[i], order[j] = order[j], order[i]
      end
    end
    strides = {}
    local step = 1
    for k = ndim, 1, -1 do
      local i = order[k]
      local mult = (R(4) == 1 and step * 3 * math.max(shape[i], 1) <= 1 << 16) and R(2, 3) or 1 -- strided
      strides[i] = step * mult
      step = step * mult * math.max(shape[i], 1)
    end
    for i = 1, ndim do
      if R(5) == 1 then strides[i] = -strides[i] end -- reversed
      if R(9) == 1 then strides[i] = 0 end -- broadcast
    end
  end
  for i = 1, ndim do -- the strides of size-1 dimensions say nothing: any value
    if shape[i] == 1 and R(3) == 1 then strides[i] = EDGE_STRIDES[R(#EDGE_STRIDES)] end
  end
  if empty and R(2) == 1 then
    for i = 1, ndim do if R(2) == 1 then strides[i] = EDGE_STRIDES[R(#EDGE_STRIDES)] end end
  end
  return { dtype = d, padded = padded, packed = packed, shape = shape, strides = strides }
end

local function new_message(lay, file, offset, flags)
  return { magic = MAGIC, version = 1, kind = 1, devtype = 1, devid = 0, code = lay.dtype.code,
    bits = lay.dtype.bits, lanes = 1, ndim = #lay.shape, flags = flags | (lay.padded and PADDED or 0),
    size = file.size, offset = offset, shape = { table.unpack(lay.shape) }, strides = { table.unpack(lay.strides) } }
end

-- A valid message on a new or reused file: m, its descriptor (a model) and a short description.
function S:valid_message()
  local lay = gen_layout(R(8) == 1 and 4096 or 256)
  local lo, hi, numel = span_of(lay.shape, lay.strides, lay.dtype, lay.packed)
  local flags = R(4) == 1 and READ_ONLY or 0
  local reuse = {}
  for _, g in ipairs(self:peer_files()) do
    if g.kind == "memfd" and g.seals & (SHRINK | GROW) == SHRINK | GROW then reuse[#reuse + 1] = g end
  end
  local f, offset
  if #reuse > 0 and R(4) == 1 then
    f = reuse[R(#reuse)]
    if numel > 0 and hi - lo <= f.size then offset = -lo + R(0, f.size - (hi - lo))
    elseif numel == 0 then offset = R(0, f.size)
    else f = nil end
  end
  if not f then
    local seals = SHRINK | GROW | (R(3) == 1 and SEAL or 0) | (R(8) == 1 and WRITE or 0)
      | (R(10) == 1 and FUTURE_WRITE or 0)
    if numel == 0 then
      local size = ({ 0, 0, 1, 4096, 10000 })[R(5)]
      f = self:new_file(size, seals, 0, size)
      offset = R(0, size)
    else
      offset = -lo + (R(2) == 1 and R(0, 5) * lay.dtype.itemsize or R(0, 40))
      local far = R(25) == 1 -- past 4 GiB in a sparse memfd: only the pages around it are written
      if far then offset = offset + (1 << 32) + R(0, 1000) * 4096 end
      local size = offset + hi + ({ 0, 0, 1, 7, 100, 4096, 5000 })[R(7)]
      local w0 = far and math.max(0, offset + lo - R(0, 5000)) or 0
      local w1 = far and math.min(size, offset + hi + R(0, 5000)) or size
      f = self:new_file(size, seals, w0, w1)
    end
  end
  local m = new_message(lay, f, offset, flags)
  local ro = R(6) == 1
  return m, { kind = f.kind, file = f, rdonly = ro, reopen = ro }
end

---------------------------------------------------------------------------
-- The receiver's model: what recv must do with a record and its descriptors

local function describe_layout(m)
  return string.format("%s %s strides %s offset %d%s%s", m.dtype.name, list(m.shape), list(m.strides), m.offset,
    m.flags & READ_ONLY ~= 0 and " READ_ONLY" or "", m.padded and " PADDED" or "")
end

-- {err = why} or {tensor = an entry without its tensor yet}. atts: descriptor models.
local function expect_recv(b, atts)
  local function refuse(why)
    if BROKEN == "accept" then return { tensor = { shape = {}, strides = {} }, desc = "(broken) " .. why } end
    return { err = why }
  end
  if #b > WIRE_MAX then return refuse("a record longer than any message") end
  if #atts > MAX_RECEIVED_FDS then return refuse("more descriptors than the receiver takes") end
  local m, why = decode(b)
  if not m then return refuse(why) end
  if #atts ~= 1 then return refuse(#atts .. " descriptors") end
  local a = atts[1]
  if a.kind ~= "memfd" then return refuse("a " .. a.kind) end
  local f = a.file
  if f.seals & (SHRINK | GROW) ~= SHRINK | GROW then return refuse("a memfd sealed " .. seals_name(f.seals)) end
  if f.size ~= m.size then return refuse(string.format("size %d, the memfd has %d", m.size, f.size)) end
  local lo, hi = span_of(m.shape, m.strides, m.dtype, m.packed)
  if not lo then return refuse(m.packed and "packed, not contiguous" or "the span overflows") end
  if m.numel > 0 then
    if m.offset < 0 then return refuse("offset past 2^63") end
    local first, last = add(m.offset, lo), add(m.offset, hi)
    if not first or not last then return refuse("offset + span overflows") end
    if first < 0 or math.ult(m.size, last) then return refuse("outside the memfd") end
  end
  local readonly = m.flags & READ_ONLY ~= 0
  if BROKEN ~= "readonly" then readonly = readonly or a.rdonly or f.seals & (WRITE | FUTURE_WRITE) ~= 0 end
  return { tensor = { dtype = m.dtype, shape = m.shape, strides = m.strides, offset = m.offset, padded = m.padded,
    packed = m.packed, readonly = readonly, file = f, numel = m.numel }, desc = describe_layout(m) }
end

---------------------------------------------------------------------------
-- Checking a tensor against its model entry

local function half(h)
  local sign = (h & 0x8000) ~= 0 and -1 or 1
  local e, f = (h >> 10) & 31, h & 1023
  if e == 0 then return sign * f * 2.0 ^ -24 end
  if e == 31 then return f == 0 and sign * math.huge or 0 / 0 end
  return sign * (1024 + f) * 2.0 ^ (e - 25)
end

local function decode_element(d, s)
  if d.fmt == "bool" then return s:byte(1) ~= 0 end
  if d.fmt == "half" then return half(string.unpack("<I2", s)) end
  if d.fmt == "bf16" then return (string.unpack("<f", string.pack("<I4", string.unpack("<I2", s) << 16))) end
  return (string.unpack(d.fmt, s))
end

local function same_value(a, b)
  if type(a) == "number" and type(b) == "number" and a ~= a then return b ~= b end
  return a == b and math.type(a) == math.type(b)
end

-- The byte offset in its file of the element at 0-based index idx of entry e.
local function address(e, idx)
  local a = e.offset
  for k = 1, #idx do a = a + idx[k] * e.strides[k] * e.dtype.itemsize end
  return a
end

-- The elements of e in row-major order, as tobytes gives them (e.numel <= FULL_CHECK).
local function expected_bytes(e)
  local d = e.dtype
  if e.numel == 0 then return "" end
  if e.packed then return fbytes(e.file, e.offset, packed_bytes(d.bits, e.numel)) end
  local parts, idx, nd = {}, {}, #e.shape
  for k = 1, nd do idx[k] = 0 end
  for _ = 1, e.numel do
    parts[#parts + 1] = fbytes(e.file, address(e, idx), d.itemsize)
    for k = nd, 1, -1 do
      idx[k] = idx[k] + 1
      if idx[k] < e.shape[k] then break end
      idx[k] = 0
    end
  end
  return table.concat(parts)
end

local function same_list(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

-- Whether tensor t is what entry e says (nil) or why not: the layout, the read-only flag and the
-- elements (all of them when few, else the two ends of the span and one more, through select).
function S:mismatch(t, e)
  local ok, p = pcall(function()
    return { shape = t.shape, strides = t.strides, dtype = t.dtype, readonly = t.readonly, device = t.device,
      shareable = t.shareable, numel = t:numel() }
  end)
  if not ok then return "its properties raised: " .. tostring(p) end
  if not same_list(p.shape, e.shape) then return "shape " .. list(p.shape) .. ", the model says " .. list(e.shape) end
  if p.dtype ~= e.dtype.name then return "dtype " .. p.dtype .. ", the model says " .. e.dtype.name end
  if p.numel > 0 then
    for k = 1, #e.shape do -- (a view's size-1 dimensions have the strides the module gives them)
      if p.strides[k] ~= e.strides[k] and not (e.loose1 and e.shape[k] == 1) then
        return "strides " .. list(p.strides) .. ", the model says " .. list(e.strides)
      end
    end
  end
  if p.readonly ~= e.readonly then
    return "readonly " .. tostring(p.readonly) .. ", the model says " .. tostring(e.readonly)
  end
  if p.device ~= "cpu" or p.shareable ~= true then
    return "device " .. p.device .. ", shareable " .. tostring(p.shareable)
  end
  if e.numel == 0 then return nil end
  local nbytes = e.packed and packed_bytes(e.dtype.bits, e.numel) or e.numel * e.dtype.itemsize
  if e.numel <= FULL_CHECK then
    self:check_note("tobytes of " .. (e.name or "the tensor"))
    local okb, got = pcall(T.tobytes, t)
    if not okb then return "tobytes raised: " .. tostring(got) end
    local want = expected_bytes(e)
    if got ~= want then
      local at = 1
      while got:byte(at) == want:byte(at) do at = at + 1 end
      return string.format("tobytes differs from the memfd's bytes at byte %d of %d (%s, the model says %s)", at,
        nbytes, tostring(got:byte(at)), tostring(want:byte(at)))
    end
  end
  if e.packed then return nil end
  -- the elements at both ends of the span and one at random, each through select down to 0-d
  local nd = #e.shape
  local picks = { {}, {}, {} }
  for k = 1, nd do
    local lo_end = (e.strides[k] < 0) and e.shape[k] - 1 or 0
    picks[1][k] = lo_end
    picks[2][k] = e.shape[k] - 1 - lo_end
    picks[3][k] = self:prand(0, e.shape[k] - 1)
  end
  for _, idx in ipairs(picks) do
    local want = fbytes(e.file, address(e, idx), e.dtype.itemsize)
    local okv, got = pcall(function()
      local v = t
      for k = 1, nd do v = v:select(1, idx[k] + 1) end
      return v:tobytes()
    end)
    if not okv then return "select down to element " .. list(idx) .. " raised: " .. tostring(got) end
    if got ~= want then return "element " .. list(idx) .. " (0-based) differs from the memfd's bytes" end
    if e.dtype.fmt then
      local args = {}
      for k = 1, nd do args[k] = idx[k] + 1 end
      local okg, v = pcall(nd == 0 and T.item or T.get, t, table.unpack(args))
      if not okg then return "get" .. list(args) .. " raised: " .. tostring(v) end
      local w = decode_element(e.dtype, want)
      if not same_value(v, w) then
        return string.format("get%s gives %s, the memfd holds %s", list(args), tostring(v), tostring(w))
      end
    end
  end
  return nil
end

---------------------------------------------------------------------------
-- The channel, the peer, and the descriptor count

function S:connect()
  self.calls = self.calls + 1
  local fd, why = fab.ipc_connect(self.path)
  if not fd then return self:fail("the peer cannot connect to " .. self.path .. ": " .. tostring(why)) end
  self.peer = fd
  local ok, ch = self:call("ch = listener:accept(1)", self.listener.accept, self.listener, 1)
  if not ok or not ch then
    self.ch = nil
    return self:fail("accept did not give the waiting connection: " .. tostring(ch))
  end
  self.ch, self.ch_closed, self.peer_closed, self.queue, self.eof = ch, false, false, {}, false
end

-- Closes what is left of the channel and both of its ends, then connects again.
function S:reconnect()
  if self.ch then self:call("ch:close()", self.ch.close, self.ch) end
  if self.peer then fab.ipc_close(self.peer) end
  self.ch, self.peer = nil, nil
  self:connect()
end

function S:live_owners()
  local owners, n, mapped = {}, 0, 0
  for _, e in pairs(self.pool) do
    if not e.released and not owners[e.owner] then
      owners[e.owner] = true
      n = n + 1
      if e.mapped then mapped = mapped + 1 end
    end
  end
  return n, mapped
end

-- After a full collection, the descriptors are the listener's, the channel's, the peer's socket, the
-- peer's open files and one per live shareable block; memfd mappings at most one per mapped block.
function S:count_check(label)
  collectgarbage()
  collectgarbage()
  local fds, maps = fab.ipc_counts()
  local owners, mapped = self:live_owners()
  local want = self.fds0 + 1 + (self.ch and not self.ch_closed and 1 or 0) + (self.peer and 1 or 0)
    + #self:peer_files() + owners
  self:check_note(string.format("%s: %d descriptors (the model: %d), %d memfd mappings (at most %d)", label, fds,
    want, maps, self.maps0 + mapped))
  if fds ~= want then
    self:fail(string.format("%s: %d descriptors open, the model says %d (%d live blocks)", label, fds, want, owners))
  end
  if maps > self.maps0 + mapped then
    self:fail(string.format("%s: %d memfd mappings, at most %d expected", label, maps, self.maps0 + mapped))
  end
end

---------------------------------------------------------------------------
-- The pool of tensors the receiver holds

function S:add_entry(e, t)
  self.ntensor = self.ntensor + 1
  e.t, e.name = t, e.name or ("R" .. self.ntensor)
  e.mapped = e.numel > 0
  local slot = R(NSLOT)
  self.pool[slot] = e -- the tensor that was there is dropped (to the collector)
  return e
end

function S:pick_entry(pred)
  local c = {}
  for s = 1, NSLOT do
    local e = self.pool[s]
    if e and (not pred or pred(e)) then c[#c + 1] = e end
  end
  if #c == 0 then return nil end
  return c[R(#c)]
end

---------------------------------------------------------------------------
-- Sending from the peer

-- Sends the record b with the descriptors atts (models; their fds made here) and queues what recv
-- must do with it.
function S:peer_send(b, atts, what)
  local fds, temps = {}, {}
  for i, a in ipairs(atts) do
    local fd = a.fd or (a.file and a.file.fd)
    if a.reopen then
      fd = assert(fab.ipc_reopen(a.file.fd))
      temps[#temps + 1] = fd
    elseif a.temp then
      temps[#temps + 1] = fd
    end
    fds[i] = fd
  end
  self.nmsg = self.nmsg + 1
  local exp = expect_recv(b, atts)
  exp.n = self.nmsg
  local kinds = {}
  for i, a in ipairs(atts) do kinds[i] = (a.rdonly and "read-only " or "") .. a.kind end
  self:note(string.format("peer sends message %d (%s; %d bytes, %d descriptors: %s): %s", self.nmsg, what, #b,
    #atts, table.concat(kinds, ", "), exp.err and ("recv must refuse it: " .. exp.err) or ("a tensor " .. exp.desc)))
  self.calls = self.calls + 1
  local ok, why = fab.ipc_send(self.peer, b, fds)
  for _, fd in ipairs(temps) do fab.ipc_close(fd) end
  self:trim_files()
  if ok then
    self.queue[#self.queue + 1] = exp
  elseif not self.ch_closed then
    self:fail("the peer's send failed: " .. tostring(why))
  end
end

-- The wrong descriptors for message m on file f (models; kinds the receiver must refuse, or a
-- read-only reopened one or a write-sealed copy, which it takes read-only).
function S:wrong_descriptors(m, f)
  local w = R(11)
  local function extra(kind, size)
    local fd = assert(fab.ipc_make_fd(kind, size or 0))
    return { kind = kind, fd = fd, temp = true }
  end
  local function copy(size, seals)
    local g = self:new_file(size, seals, f.w0, math.min(f.w1, size))
    return { kind = "memfd", file = g }, "a memfd sealed " .. seals_name(g.seals) .. " of " .. size .. " bytes"
  end
  local main = { kind = "memfd", file = f }
  if w == 1 then return {}, "no descriptor" end
  if w == 2 then return { main, { kind = "memfd", file = f } }, "the memfd twice" end
  if w == 3 then return { extra("pipe"), main }, "a pipe, then the memfd" end
  if w == 4 then
    local atts = { main }
    for _ = 1, R(2, 12) do atts[#atts + 1] = extra(({ "pipe", "socket", "file" })[R(3)]) end
    return atts, "many descriptors"
  end
  if w == 5 then return { extra(({ "pipe", "socket", "file" })[R(3)], m.size >= 0 and m.size < 1 << 40
    and m.size or 0) }, "not a memfd" end
  if w == 6 then
    local a, d = copy(f.size, ({ 0, SHRINK, GROW, SEAL, SHRINK | SEAL })[R(5)])
    return { a }, "unsealed: " .. d
  end
  if w == 7 then
    local a, d = copy(math.max(0, f.size + ({ -1, 1, -4096, 4096, -f.size })[R(5)]), SHRINK | GROW)
    return { a }, "another size: " .. d
  end
  if w == 8 then
    local g = self:new_file(HUGE_PAGE, SHRINK | GROW, 0, 0, "hugetlb")
    if not g then return { extra("pipe") }, "hugetlb (not here: a pipe)" end
    m.size = HUGE_PAGE -- the size the hugetlb memfd has: only the filesystem is wrong
    return { { kind = "hugetlb", file = g } }, "a hugetlb memfd"
  end
  if w == 9 then return { { kind = "memfd", file = f, rdonly = true, reopen = true } }, "read-only reopened" end
  if w == 10 then
    local a, d = copy(f.size, SHRINK | GROW | WRITE)
    return { a }, "write-sealed: " .. d
  end
  return { main, extra("memfd", 4096) }, "the memfd and another memfd"
end

-- Edge values for fields (masked to the field's width by encode)
local EDGES = { 0, 1, -1, 2, 64, 65, 255, 256, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 32, 1 << 62, MAXI, MINI }

-- Mutates message m (and maybe the record it encodes to): a list of what was done, and the bytes.
function S.mutate(_, m)
  local done = {}
  local crc_stale, cut
  local crc0 = string.unpack("<I4", encode(m), 13) -- the CRC before the mutations
  for _ = 1, R(3) do
    local op = R(12)
    if op <= 3 then -- a field set to an edge value
      local fields = { "magic", "version", "kind", "length", "devtype", "devid", "code", "bits", "lanes", "ndim",
        "flags", "size", "offset" }
      for i = 1, #m.shape do fields[#fields + 1] = "shape" .. i; fields[#fields + 1] = "stride" .. i end
      local name = fields[R(#fields)]
      local v = R(4) == 1 and R(-1000, 1000) or EDGES[R(#EDGES)]
      if name == "magic" then m.magic = ({ "dlip", "DLIQ", "\0\0\0\0", "PILD" })[R(4)]
      elseif name:match("^shape") then m.shape[tonumber(name:match("%d+"))] = v
      elseif name:match("^stride") then m.strides[tonumber(name:match("%d+"))] = v
      else m[name] = v end
      done[#done + 1] = name .. "=" .. (name == "magic" and string.format("%q", m.magic) or string.format("%d", v))
    elseif op == 4 then -- the offset just past the end, or far past it
      m.offset = ({ m.size, m.size + 1, 2 * m.size + 4096, MAXI, -1, MINI })[R(6)]
      done[#done + 1] = string.format("offset=%d", m.offset)
    elseif op == 5 then -- sizes whose product overflows, or a size past the memfd
      local big = ({ 1 << 31, 1 << 32, 1 << 62, MAXI, 3037000500 })[R(5)]
      for i = 1, #m.shape do if R(2) == 1 then m.shape[i] = big end end
      done[#done + 1] = "sizes " .. list(m.shape)
    elseif op == 6 then -- ndim: another count of entries (65, one more or less), or size-1 dims added
      local k = R(4)
      if k == 1 then
        m.ndim = 65
        while #m.shape < 65 do m.shape[#m.shape + 1] = 1; m.strides[#m.strides + 1] = 1 end
        done[#done + 1] = "ndim 65 with 65 entries"
      elseif k == 2 then
        m.ndim = m.ndim + ({ 1, -1, 64, 0x80000000 })[R(4)]
        done[#done + 1] = string.format("ndim field %d", m.ndim)
      elseif #m.shape < MAX_NDIM - 2 then -- still valid: size-1 dimensions with any stride
        for _ = 1, R(2) do
          local at = R(#m.shape + 1)
          table.insert(m.shape, at, 1)
          table.insert(m.strides, at, EDGE_STRIDES[R(#EDGE_STRIDES)])
        end
        m.ndim = #m.shape
        done[#done + 1] = "size-1 dimensions added: " .. list(m.shape)
      end
    elseif op == 7 then
      m.flags = m.flags ~ ({ READ_ONLY, PADDED, 2, 8, 1 << 63 })[R(5)]
      done[#done + 1] = string.format("flags 0x%x", m.flags)
    elseif op == 8 then -- strides that reach outside, or overflow
      local i = #m.strides > 0 and R(#m.strides) or nil
      if i then
        m.strides[i] = ({ m.strides[i] * 2 + 1, -m.strides[i] - 1, 1 << 61, -(1 << 61), MAXI // 2 })[R(5)]
        done[#done + 1] = "strides " .. list(m.strides)
      end
    elseif op == 9 then
      crc_stale = true
      done[#done + 1] = "stale CRC"
    elseif op == 10 then
      cut = R(2) == 1 and "truncate" or "extend"
      done[#done + 1] = cut
    elseif op == 11 then
      m.size = ({ m.size + 1, m.size - 1, 0, MAXI, -1 })[R(5)]
      done[#done + 1] = string.format("size=%d", m.size)
    else
      done[#done + 1] = "bit flips"
      m.flips = {}
      for _ = 1, R(4) do m.flips[#m.flips + 1] = { R(0, 2000), 1 << R(0, 7) } end
    end
  end
  if crc_stale then m.crc = crc0 end
  local b = encode(m)
  if m.flips then
    local bytes = { b:byte(1, -1) }
    for _, fl in ipairs(m.flips) do
      local at = fl[1] % #bytes + 1
      bytes[at] = bytes[at] ~ fl[2]
    end
    b = string.char(table.unpack(bytes))
    if R(2) == 1 and not crc_stale then b = fix_crc(b); done[#done + 1] = "CRC recomputed" end
  end
  if cut == "truncate" then
    b = b:sub(1, R(0, #b - 1))
  elseif cut == "extend" then
    local more = R(3) == 1 and (WIRE_MAX + 1 - #b + R(0, 60)) or R(1, 40)
    b = b .. string.rep(string.char(R(0, 255)), math.max(more, 1))
  end
  if cut and #b >= 16 and R(2) == 1 then -- the length field made to agree, and the CRC
    b = b:sub(1, 8) .. string.pack("<I4", #b) .. b:sub(13)
    if not crc_stale then b = fix_crc(b) end
    done[#done + 1] = "length and CRC made to agree"
  end
  return b, table.concat(done, ", ")
end

---------------------------------------------------------------------------
-- Steps

local ops = {}
local RECV -- the recv step (set below), which the two-mappings step runs for what waits
local function op(name, weight, fn) ops[#ops + 1] = { name = name, weight = weight, fn = fn } end

local function ensure_channel(st)
  if not st.ch or st.ch_closed or st.peer_closed then st:reconnect() end
  return st.ch ~= nil
end

op("send_valid", 20, function(st)
  if not ensure_channel(st) then return end
  local m, a = st:valid_message()
  st:peer_send(encode(m), { a }, "valid")
end)

op("send_mutated", 22, function(st)
  if not ensure_channel(st) then return end
  local m, a = st:valid_message()
  local f = a.file
  local atts, what = { a }, nil
  if R(3) == 1 then atts, what = st:wrong_descriptors(m, f) end
  local b, done = st:mutate(m)
  st:peer_send(b, atts, "mutated: " .. done .. (what and ("; descriptors: " .. what) or ""))
end)

op("send_wrong_descriptors", 8, function(st)
  if not ensure_channel(st) then return end
  local m, a = st:valid_message()
  local atts, what = st:wrong_descriptors(m, a.file)
  st:peer_send(encode(m), atts, "valid, descriptors: " .. what)
end)

-- The outcome of recv for the queued message exp: checks it, and keeps a tensor in the pool.
function S:recv_outcome(exp, ok, r)
  if not ok then
    if type(r) ~= "string" or not r:find("^recv: ") then
      return self:fail("recv raised an error that is not recv's own: " .. tostring(r))
    end
    if exp.tensor then
      return self:fail(string.format("recv refused message %d (%s), the model takes it: %s", exp.n, r, exp.desc))
    end
    self:check_note("refused as expected: " .. r)
    return
  end
  if r == nil then return self:fail(string.format("recv returned nil with message %d waiting", exp.n)) end
  if exp.err then
    self:fail(string.format("recv took message %d, which the model refuses (%s)", exp.n, exp.err))
    pcall(T.release, r)
    return
  end
  local e = { owner = nil }
  for k, v in pairs(exp.tensor) do e[k] = v end
  self.nowner = self.nowner + 1
  e.owner = self.nowner
  local why = self:mismatch(r, e)
  if why then
    self:fail(string.format("message %d: the received tensor's %s (%s)", exp.n, why, exp.desc))
    pcall(T.release, r)
    return
  end
  return self:add_entry(e, r)
end

op("recv", 34, function(st)
  if not st.ch then return end
  local q = st.queue
  local ch = st.ch
  if st.ch_closed then
    local ok, r = st:call("ch:recv(0)   -- closed by this side", ch.recv, ch, 0)
    if ok or not tostring(r):find("closed", 1, true) then st:fail("recv on a closed channel: " .. tostring(r)) end
    return
  end
  if #q == 0 then
    local timeout = ({ 0, 0, 0.001 })[R(3)]
    local ok, r = st:call(string.format("ch:recv(%g)   -- %s", timeout, st.peer_closed and "the peer is gone"
      or "nothing waits"), ch.recv, ch, timeout)
    if st.peer_closed then
      if ok or not tostring(r):find("closed", 1, true) then
        st:fail("recv after the peer closed, nothing waiting: " .. tostring(r) .. " (an error naming 'closed')")
      end
    elseif not ok or r ~= nil then
      st:fail("recv with nothing waiting: " .. tostring(r) .. " (nil expected)")
      if ok and r then pcall(T.release, r) end
    end
    return
  end
  local exp = table.remove(q, 1)
  local k = R(4)
  local timeout = ({ false, 0, 0.5, 1e12 })[k]
  local ok, r
  if timeout then
    ok, r = st:call(string.format("ch:recv(%g)   -- message %d", timeout, exp.n), ch.recv, ch, timeout)
  else
    ok, r = st:call(string.format("ch:recv()   -- message %d", exp.n), ch.recv, ch)
  end
  if exp.err and not ok and tostring(r):find("closed", 1, true) and st.peer_closed then return end
  st:recv_outcome(exp, ok, r)
end)

-- ch:send of a pool tensor (received, a view, shared) or a plain one; the peer reads it raw and
-- checks the message and the descriptor (the same file for shareable memory, unless copy = true),
-- and sometimes sends it back unchanged.
op("send_back", 12, function(st)
  if not ensure_channel(st) then return end
  local src, e, plain_bytes
  local kind = R(3)
  if kind == 1 then e = st:pick_entry() end
  if not e then
    local d = DTYPES[R(#DTYPES)]
    local shape = {}
    for i = 1, R(0, 3) do shape[i] = R(0, 4) end
    local numel = numel_of(shape)
    local nbytes = d.bits < 8 and packed_bytes(d.bits, numel) or numel * d.itemsize
    local salt = R(0, 0x3FFFFFFF)
    plain_bytes = pattern_string(salt, 0, nbytes)
    local ok, t = st:call(string.format("x = dlpack.frombytes(<%d bytes>, %q, %s)", nbytes, d.name, list(shape)),
      dlpack.frombytes, plain_bytes, d.name, shape)
    if not ok then return st:fail("frombytes: " .. tostring(t)) end
    src = t
    e = { dtype = d, shape = shape, strides = contiguous_strides(shape), offset = 0, packed = d.bits < 8,
      padded = false, readonly = false, numel = numel, name = "x",
      file = { size = nbytes, seals = SHRINK | GROW, salt = salt, w0 = 0, w1 = nbytes, over = {} } }
    if kind == 3 then -- made shareable: then it is in the pool, the module's own memfd
      local ok2, s = st:call("S = ipc.share(x)", ipc.share, t)
      if not ok2 then return st:fail("ipc.share: " .. tostring(s)) end
      st.nowner = st.nowner + 1
      e.owner, e.name, e.shared = st.nowner, nil, true
      local why = st:mismatch(s, e)
      if why then return st:fail("ipc.share gave a tensor whose " .. why) end
      src = s
      st:add_entry(e, s)
    end
  else
    src = e.t
  end
  local shareable = e.shared or e.owner ~= nil
  local opts = {}
  local okeys = {}
  if R(3) == 1 then opts.readonly = R(2) == 1; okeys[#okeys + 1] = "readonly = " .. tostring(opts.readonly) end
  if R(3) == 1 then opts.copy = R(2) == 1; okeys[#okeys + 1] = "copy = " .. tostring(opts.copy) end
  if R(3) == 1 then opts.timeout = ({ 0, 5 })[R(2)]; okeys[#okeys + 1] = "timeout = " .. opts.timeout end
  local desc = string.format("ch:send(%s, {%s})", e.name or "x", table.concat(okeys, ", "))
  local ok, r = st:call(desc, st.ch.send, st.ch, src, opts)
  if e.released then
    if ok or not tostring(r):find("released", 1, true) then
      st:fail(desc .. " of a released tensor: " .. tostring(r))
    end
    return
  end
  if not shareable and opts.copy == false then
    if ok or not tostring(r):find("shareable", 1, true) then
      st:fail(desc .. " of a tensor that is not shareable, copy = false: " .. tostring(r))
    end
    return
  end
  if not ok or r ~= true then return st:fail(desc .. " failed: " .. tostring(r)) end
  -- the peer reads it
  st.calls = st.calls + 1
  local b, fds = fab.ipc_recv(st.peer)
  if not b then return st:fail("the peer received nothing after " .. desc .. ": " .. tostring(fds)) end
  local function close_all() for _, fd in ipairs(fds) do fab.ipc_close(fd) end end
  if #fds ~= 1 then
    close_all()
    return st:fail(string.format("%s: the message came with %d descriptors", desc, #fds))
  end
  local m, why = decode(b)
  if not m then
    close_all()
    return st:fail(desc .. ": the peer cannot decode the message: " .. why)
  end
  local info = fab.ipc_fd_info(fds[1])
  local readonly = opts.readonly == true or e.readonly
  -- shareable memory goes as it is, unless copy = true (a snapshot in a new block, contiguous)
  local zero_copy = shareable and opts.copy ~= true
  local want_strides = zero_copy and e.strides or contiguous_strides(e.shape)
  local problems = {}
  if m.dtype ~= e.dtype then problems[#problems + 1] = "dtype " .. m.dtype.name end
  if not same_list(m.shape, e.shape) then problems[#problems + 1] = "shape " .. list(m.shape) end
  if m.numel > 0 and not same_list(m.strides, want_strides) then
    problems[#problems + 1] = "strides " .. list(m.strides) .. " for " .. list(want_strides)
  end
  if (m.flags & READ_ONLY ~= 0) ~= readonly then problems[#problems + 1] = "READ_ONLY " .. tostring(not readonly) end
  if m.padded ~= (e.padded == true) then problems[#problems + 1] = "PADDED " .. tostring(m.padded) end
  if info.size ~= m.size then
    problems[#problems + 1] = string.format("size %d, the memfd has %d", m.size, info.size)
  end
  if info.seals < 0 or info.seals & (SHRINK | GROW) ~= SHRINK | GROW or not info.shmem then
    problems[#problems + 1] = "a descriptor that is not a sealed memfd (seals " .. info.seals .. ")"
  end
  if info.rdonly ~= readonly then problems[#problems + 1] = "descriptor read-only: " .. tostring(info.rdonly) end
  if zero_copy and e.file.ino and info.ino ~= e.file.ino then problems[#problems + 1] = "another file (a copy)" end
  if not zero_copy and e.file.ino and info.ino == e.file.ino then
    problems[#problems + 1] = "the same file (no copy)"
  end
  if zero_copy and e.numel > 0 and m.offset ~= e.offset then
    problems[#problems + 1] = string.format("offset %d, the view's is %d", m.offset, e.offset)
  end
  -- the elements through the descriptor, where the message says they are
  local back = { dtype = m.dtype, shape = m.shape, strides = m.strides, offset = m.offset, packed = m.packed,
    numel = m.numel, file = nil }
  if #problems == 0 and m.numel > 0 and m.numel <= FULL_CHECK then
    local lo, hi = span_of(m.shape, m.strides, m.dtype, m.packed)
    local first = m.offset + lo
    local raw = fab.ipc_read(fds[1], first, hi - lo) or ""
    local f = { size = info.size, seals = info.seals, salt = 0, w0 = 0, w1 = 0, over = {} }
    for i = 1, #raw do f.over[first + i - 1] = raw:byte(i) end
    back.file = f
    local saved = BROKEN
    BROKEN = nil -- the bytes just read are what they are
    local got = expected_bytes(back)
    BROKEN = saved
    local want = plain_bytes or expected_bytes(e)
    if got ~= want then problems[#problems + 1] = "elements that differ from the tensor's" end
  end
  if #problems > 0 then
    close_all()
    return st:fail(desc .. ": the peer read " .. table.concat(problems, "; "))
  end
  st:check_note("the peer read " .. describe_layout(m))
  if not e.file.ino and zero_copy then e.file.ino = info.ino end
  -- sometimes the peer sends it back as it came (forwarding: zero-copy both ways)
  if R(3) == 1 and #st.queue < MAX_QUEUE and back.file then
    local g = zero_copy and e.file or back.file -- the same file: writes on either side show in both
    g.kind = g.kind or "memfd"
    local a = { kind = "memfd", file = g, rdonly = info.rdonly, fd = fds[1] }
    st:peer_send(b, { a }, "the message received, sent back")
  end
  close_all()
end)

-- The peer writes into one of its memfds: a tensor on it sees the bytes (zero copy).
op("peer_write", 4, function(st)
  local files = {}
  for _, g in ipairs(st:peer_files()) do if g.kind == "memfd" then files[#files + 1] = g end end
  if #files == 0 then return end
  local f = files[R(#files)]
  if f.size == 0 then return end
  local at = R(0, f.size - 1)
  local n = math.min(R(1, 64), f.size - at)
  local bytes = {}
  for i = 1, n do bytes[i] = R(0, 255) end
  local s = string.char(table.unpack(bytes))
  st:note(string.format("peer writes %d bytes at %d of file %d (sealed %s)", n, at, f.id, seals_name(f.seals)))
  st.calls = st.calls + 1
  local ok = fab.ipc_write(f.fd, at, s)
  local sealed = f.seals & (WRITE | FUTURE_WRITE) ~= 0
  if ok and sealed then return st:fail("the peer wrote into a memfd sealed against writes") end
  if not ok and not sealed then return st:fail("the peer could not write its memfd") end
  if ok then for i = 1, n do f.over[at + i - 1] = bytes[i] end end
  local e = st:pick_entry(function(x) return x.file == f and not x.released end)
  if e then
    local why = st:mismatch(e.t, e)
    if why then st:fail(string.format("after the peer wrote file %d, %s's %s", f.id, e.name, why)) end
  end
end)

-- The receiver fills a tensor (integer and bool dtypes: exact bytes): the peer reads them (zero
-- copy), or it raises "read-only".
op("local_write", 4, function(st)
  local e = st:pick_entry(function(x) return not x.released and FILLABLE[x.dtype.name] and x.numel <= FULL_CHECK end)
  if not e then return end
  local fmt = FILLABLE[e.dtype.name]
  local v
  if fmt == "bool" then v = R(2) == 1 else v = R(0, 100) end
  local ok, r = st:call(string.format("%s:fill(%s)", e.name, tostring(v)), T.fill, e.t, v)
  if e.readonly then
    if ok or not tostring(r):find("read-only", 1, true) then
      st:fail(e.name .. ":fill of a read-only tensor: " .. tostring(r))
    end
    return
  end
  if not ok then return st:fail(e.name .. ":fill raised: " .. tostring(r)) end
  local s = fmt == "bool" and string.char(v and 1 or 0) or string.pack(fmt, v)
  local idx, nd = {}, #e.shape
  for k = 1, nd do idx[k] = 0 end
  for _ = 1, e.numel do
    local a = address(e, idx)
    for i = 1, #s do e.file.over[a + i - 1] = s:byte(i) end
    for k = nd, 1, -1 do
      idx[k] = idx[k] + 1
      if idx[k] < e.shape[k] then break end
      idx[k] = 0
    end
  end
  if e.numel > 0 and e.file.fd then -- the peer sees it through its own descriptor
    for k = 1, nd do idx[k] = R(0, e.shape[k] - 1) end
    local a = address(e, idx)
    local got = fab.ipc_read(e.file.fd, a, #s)
    if got ~= s then st:fail(string.format("the peer reads %q at %d after %s:fill(%s)", tostring(got), a, e.name,
      tostring(v))) end
  end
  -- another tensor on the same file sees it too
  local other = st:pick_entry(function(x) return x.file == e.file and not x.released end)
  if other then
    local why = st:mismatch(other.t, other)
    if why then st:fail(string.format("after %s:fill, %s's %s", e.name, other.name, why)) end
  end
end)

-- Views of received tensors (transpose, reversed slice, narrow, select, as_readonly): their own
-- entries, on the same block, checked and later sent as views.
op("view", 5, function(st)
  local e = st:pick_entry(function(x) return not x.packed and #x.shape > 0 end)
  if not e then return end
  local nd = #e.shape
  local k = R(5)
  local d = R(nd)
  local v = { dtype = e.dtype, shape = { table.unpack(e.shape) }, strides = { table.unpack(e.strides) },
    offset = e.offset, padded = e.padded, packed = false, readonly = e.readonly, file = e.file, owner = e.owner,
    shared = e.shared }
  local desc, fn, args
  local isz = e.dtype.itemsize
  if k == 1 then
    local d2 = R(nd)
    desc, fn, args = string.format("%s:transpose(%d, %d)", e.name, d, d2), T.transpose, { d, d2 }
    v.shape[d], v.shape[d2] = v.shape[d2], v.shape[d]
    v.strides[d], v.strides[d2] = v.strides[d2], v.strides[d]
  elseif k == 2 then
    if e.shape[d] == 0 then return end
    desc, fn, args = string.format("%s:slice(%d, -1, 1, -1)", e.name, d), T.slice, { d, -1, 1, -1 }
    v.offset = v.offset + (e.shape[d] - 1) * e.strides[d] * isz
    v.strides[d] = -e.strides[d]
  elseif k == 3 then
    if e.shape[d] == 0 then return end
    local start = R(e.shape[d])
    local len = R(0, e.shape[d] - start + 1)
    desc, fn, args = string.format("%s:narrow(%d, %d, %d)", e.name, d, start, len), T.narrow, { d, start, len }
    v.offset = v.offset + (start - 1) * e.strides[d] * isz
    v.shape[d] = len
  elseif k == 4 then
    if e.shape[d] == 0 then return end
    local i = R(e.shape[d])
    desc, fn, args = string.format("%s:select(%d, %d)", e.name, d, i), T.select, { d, i }
    v.offset = v.offset + (i - 1) * e.strides[d] * isz
    table.remove(v.shape, d)
    table.remove(v.strides, d)
  else
    desc, fn, args = e.name .. ":as_readonly()", T.as_readonly, {}
    v.readonly = true
  end
  v.numel = numel_of(v.shape)
  if v.numel == 0 then v.offset = e.offset end
  local ok, t = st:call(desc, fn, e.t, table.unpack(args))
  if e.released then
    if ok or not tostring(t):find("released", 1, true) then
      st:fail(desc .. " of a released tensor: " .. tostring(t))
    end
    return
  end
  if not ok then return st:fail(desc .. " raised: " .. tostring(t)) end
  v.name = "V" .. (st.ntensor + 1)
  v.loose1 = true
  local why = st:mismatch(t, v)
  if why then return st:fail(desc .. ": the view's " .. why) end
  v.loose1 = nil
  v.strides = t.strides -- (as the module made those of size-1 dimensions)
  st:add_entry(v, t)
  v.mapped = e.mapped
end)

op("release", 4, function(st)
  local e = st:pick_entry()
  if not e then return end
  local ok, r = st:call(e.name .. ":release()", T.release, e.t)
  if not ok then return st:fail(e.name .. ":release raised: " .. tostring(r)) end
  e.released = true
  local ok2, r2 = st:call(e.name .. ":tobytes()   -- released", T.tobytes, e.t)
  if ok2 or not tostring(r2):find("released", 1, true) then st:fail("a released tensor's tobytes: " .. tostring(r2)) end
end)

op("drop", 3, function(st)
  local s = R(NSLOT)
  if not st.pool[s] then return end
  st:note(string.format("drop %s (to the collector)", st.pool[s].name))
  st.pool[s] = nil
  if R(2) == 1 then collectgarbage("step", 0) end
end)

op("collect", 4, function(st)
  st:note("collectgarbage(); count descriptors and mappings")
  st:count_check("after a full collection")
end)

-- ch:close() while messages wait: they go with the socket; the channel says closed.
op("close_channel", 2, function(st)
  if not st.ch or st.ch_closed then return end
  st:call(string.format("ch:close()   -- %d messages waiting", #st.queue), st.ch.close, st.ch)
  st:call("ch:close()   -- again", st.ch.close, st.ch)
  st.ch_closed, st.queue = true, {}
  local ok, r = st:call("ch:send(zeros)   -- closed", st.ch.send, st.ch, dlpack.zeros({ 2 }))
  if ok or not tostring(r):find("closed", 1, true) then st:fail("send on a closed channel: " .. tostring(r)) end
  st:count_check("after closing the channel with messages waiting")
end)

-- The peer goes with messages waiting: recv gives them, then an error naming "closed".
op("peer_close", 2, function(st)
  if not st.peer or st.peer_closed or st.ch_closed then return end
  st:note(string.format("the peer closes its socket (%d messages waiting)", #st.queue))
  fab.ipc_close(st.peer)
  st.peer, st.peer_closed = nil, true
end)

op("reconnect", 2, function(st)
  st:note("reconnect")
  st:reconnect()
end)

op("peer_closes_files", 2, function(st)
  st:note("the peer closes its memfds")
  for _, f in ipairs(st:peer_files()) do
    fab.ipc_close(f.fd)
    f.fd = nil
  end
end)

-- Arguments from a hostile script: errors, and the channel as it was.
op("bad_args", 2, function(st)
  if not st.ch then return end
  local k = R(5)
  local calls = {
    { "ch:recv(-1)", st.ch.recv, st.ch, -1 },
    { "ch:recv(0/0)", st.ch.recv, st.ch, 0 / 0 },
    { "ch:recv('soon')", st.ch.recv, st.ch, "soon" },
    { "ch:send(nil)", st.ch.send, st.ch, nil },
    { "ch:send(zeros, {bogus = 1})", st.ch.send, st.ch, dlpack.zeros({ 1 }), { bogus = 1 } },
  }
  local c = calls[k]
  local ok = st:call(c[1], table.unpack(c, 2))
  if ok then st:fail(c[1] .. " did not raise") end
end)

-- A finalizer armed to close the channel, recv on it, or release a pool tensor, during the next
-- call (recv or send) under an eager collector: the outcome is any of those the model allows; then
-- the channel starts again.
op("finalizer", 4, function(st)
  if not ensure_channel(st) then return end
  while #st.queue < 2 do -- messages for recv to take while the finalizer runs
    local m, a = st:valid_message()
    st:peer_send(encode(m), { a }, "valid, for the finalizer's step")
  end
  local action = R(3)
  local victim = st:pick_entry()
  local what = ({ "closes the channel", "calls recv(0)", "releases " .. (victim and victim.name or "nothing") })[action]
  local main = R(2)
  local ch = st.ch
  local src = main == 2 and (victim and victim.t or dlpack.zeros({ 3 }, "int16")) or nil
  local desc = main == 1 and "ch:recv(0)   -- a finalizer " .. what
    or "ch:send(" .. (victim and victim.name or "zeros") .. ")   -- a finalizer " .. what
  local box = { armed = true, got = {} }
  st:note(desc)
  st.calls = st.calls + 1
  -- armed: a collector that runs a whole cycle at every allocation (a pause of 1, which Lua stores
  -- as 0; a huge step), at rest after a full collection; then a garbage object with the finalizer:
  -- the call's first allocation (recv's holder of the mapping, send's copy) runs it
  collectgarbage("incremental", 1, 1000, 20)
  collectgarbage()
  setmetatable({}, { __gc = function()
    if not box.armed then return end
    box.armed, box.inside = false, box.during
    if action == 1 then ch:close()
    elseif action == 2 then box.got[#box.got + 1] = { pcall(ch.recv, ch, 0) }
    elseif victim then pcall(T.release, victim.t) end
  end })
  box.during = true
  local ok, r
  if main == 1 then ok, r = pcall(ch.recv, ch, 0) else ok, r = pcall(ch.send, ch, src) end
  box.during = false
  st:restore_gc()
  collectgarbage() -- it runs now if it did not inside the call
  box.armed = false
  st:check_note(box.inside and "the finalizer ran inside the call" or "the finalizer ran after the call")
  if action == 3 and victim then victim.released = true end
  -- each outcome: an error of the call's own, nil, or a tensor that some waiting message gives
  local outcomes = { { ok, r, main == 1 and "recv" or "send" } }
  for _, g in ipairs(box.got) do outcomes[#outcomes + 1] = { g[1], g[2], "recv" } end
  for _, o in ipairs(outcomes) do
    local good, res, name = o[1], o[2], o[3]
    if not good then
      -- (a tensor released by the finalizer is an argument error: "bad argument #2 ... released")
      if not tostring(res):find("^" .. name .. ": ") and not (name == "send" and tostring(res):find("released")) then
        st:fail(string.format("%s with a finalizer that %s raised: %s", name, what, tostring(res)))
      end
    elseif name == "recv" and res ~= nil then
      local matched = false
      for _, exp in ipairs(st.queue) do
        if exp.tensor and exp.tensor.dtype then
          local e = {}
          for kk, vv in pairs(exp.tensor) do e[kk] = vv end
          if not st:mismatch(res, e) then matched = true; break end
        end
      end
      if not matched then
        st:fail("recv with a finalizer that " .. what .. " gave a tensor no waiting message gives")
      end
      pcall(T.release, res)
    end
  end
  -- the peer takes what was sent, then both ends start again
  if main == 2 and ok then
    local b, fds = fab.ipc_recv(st.peer)
    if b then for _, fd in ipairs(fds) do fab.ipc_close(fd) end end
  end
  st:reconnect()
  st:count_check("after a finalizer that " .. what)
end)

---------------------------------------------------------------------------
-- One block mapped twice in this process: the same message received twice (one of them read-only
-- now and then), or a shared tensor beside what came back of it. Two addresses, one set of pages:
-- a write through one mapping that reads the other (copy, in place, out=, masked_fill, clamp_, a
-- re-import through to_dlpack/from_dlpack) must give what it gives when every input is read first.

local ALIAS_DTYPES = { "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32" }

local function wrap_to(d, v)
  if d.bits == 64 then return v end
  local m = 1 << d.bits
  v = v & (m - 1)
  if d.name:sub(1, 1) == "i" and v >= m >> 1 then v = v - m end
  return v
end

-- The values of the 1-d entry e, from its file's model.
local function model_values(e)
  local vals, fmt = {}, FILLABLE[e.dtype.name]
  for i = 0, e.shape[1] - 1 do vals[i + 1] = string.unpack(fmt, fbytes(e.file, address(e, { i }), e.dtype.itemsize)) end
  return vals
end

local function model_store(e, vals)
  local fmt = FILLABLE[e.dtype.name]
  for i = 0, e.shape[1] - 1 do
    local b, a = string.pack(fmt, wrap_to(e.dtype, vals[i + 1])), address(e, { i })
    for j = 1, #b do e.file.over[a + j - 1] = b:byte(j) end
  end
end

-- A 1-d view of the 1-d entry e: the model's entry and the call that makes it.
local function view_of(e, how, first, len)
  local v = { dtype = e.dtype, shape = { len }, strides = { e.strides[1] }, file = e.file, owner = e.owner,
    readonly = e.readonly, numel = len, padded = false, packed = false,
    offset = e.offset + (first - 1) * e.strides[1] * e.dtype.itemsize }
  if how == "reversed" then
    v.offset = v.offset + (len - 1) * e.strides[1] * e.dtype.itemsize
    v.strides[1] = -e.strides[1]
    return v, string.format("%s:narrow(1, %d, %d):slice(1, -1, 1, -1)", e.name, first, len),
      function(t) return t:narrow(1, first, len):slice(1, -1, 1, -1) end
  end
  return v, string.format("%s:narrow(1, %d, %d)", e.name, first, len), function(t) return t:narrow(1, first, len) end
end

-- Takes the message the peer just queued (the queue was empty): the entry, or nil after a failure.
function S:take_queued(why)
  local exp = table.remove(self.queue, 1)
  local ok, r = self:call(string.format("ch:recv(1)   -- message %d, %s", exp.n, why), self.ch.recv, self.ch, 1)
  local e = self:recv_outcome(exp, ok, r)
  if e == nil and not self.failures[1] then self:fail("recv of " .. why .. " gave no tensor") end
  return e
end

-- Two entries on one file, the same 1-d layout, through two mappings of it; nil after a failure.
function S:two_mappings(d, n)
  local bytes = n * d.itemsize
  if R(2) == 1 then -- the peer sends one message twice (the second read-only now and then: flag or descriptor)
    local size = bytes + 16 * d.itemsize
    local f = self:new_file(size, SHRINK | GROW, 0, size)
    local lay = { dtype = d, padded = false, packed = false, shape = { n }, strides = { 1 } }
    local m = new_message(lay, f, R(0, 16) * d.itemsize, 0)
    self:peer_send(encode(m), { { kind = "memfd", file = f } }, "the block, once")
    local ro = ({ false, false, "READ_ONLY", "a read-only descriptor" })[R(4)]
    if ro == "READ_ONLY" then m.flags = READ_ONLY end
    local again = { kind = "memfd", file = f, rdonly = ro == "a read-only descriptor" }
    again.reopen = again.rdonly
    self:peer_send(encode(m), { again }, "the block, twice" .. (ro and ", " .. ro or ""))
    local a = self:take_queued("the block, once")
    local b = a and self:take_queued("the block, twice")
    return a, b, "received twice"
  end
  -- a shared tensor, sent and sent back: beside its own mapping, the one recv makes
  local salt = R(0, 0x3FFFFFFF)
  local ok, x = self:call(string.format("x = dlpack.frombytes(<%d bytes>, %q, {%d})", bytes, d.name, n),
    dlpack.frombytes, pattern_string(salt, 0, bytes), d.name, { n })
  if not ok then return self:fail("frombytes: " .. tostring(x)) end
  local ok2, sh = self:call("S = ipc.share(x)", ipc.share, x)
  if not ok2 then return self:fail("ipc.share: " .. tostring(sh)) end
  self.nowner = self.nowner + 1
  local e = self:add_entry({ dtype = d, shape = { n }, strides = { 1 }, offset = 0, packed = false, padded = false,
    readonly = false, numel = n, owner = self.nowner, shared = true,
    file = { size = bytes, seals = SHRINK | GROW, salt = salt, w0 = 0, w1 = bytes, over = {}, kind = "memfd" } }, sh)
  local ro = R(3) == 1
  local ok3, r = self:call(string.format("ch:send(%s%s)", e.name, ro and ", {readonly = true}" or ""), self.ch.send,
    self.ch, sh, { readonly = ro })
  if not ok3 or r ~= true then return self:fail("ch:send of a shared tensor: " .. tostring(r)) end
  self.calls = self.calls + 1
  local b, fds = fab.ipc_recv(self.peer)
  if not b or #fds ~= 1 then return self:fail("the peer did not get the shared tensor with one descriptor") end
  local info = fab.ipc_fd_info(fds[1])
  e.file.ino = info.ino
  self:peer_send(b, { { kind = "memfd", file = e.file, fd = fds[1], rdonly = info.rdonly } }, "sent back")
  fab.ipc_close(fds[1])
  local back = self:take_queued("the shared tensor sent back")
  return e, back, "shared and received"
end

-- forced: the whole source reversed, copied or added (a step no unread-input bug survives)
function S:alias_step(forced)
  if not ensure_channel(self) then return end
  while #self.queue > 0 and not self.ch_closed do RECV.fn(self) end -- what waits first, in order
  if self.ch_closed or self.peer_closed then self:reconnect() end
  local name, d = ALIAS_DTYPES[R(#ALIAS_DTYPES)], nil
  for _, x in ipairs(DTYPES) do if x.name == name then d = x end end
  local n = R(2, 40)
  local a, b, how = self:two_mappings(d, n)
  if not a or not b then return end
  -- the destination is a writable one; the source the other, or a re-import of it
  local dst, src = a, b
  if R(2) == 1 and not b.readonly then dst, src = b, a end
  if dst.readonly then dst, src = src, dst end
  local shape = forced and 1 or R(3)
  local len, dfirst, sfirst, dhow, shw = n, 1, 1, "straight", R(4) == 1 and not forced and "straight" or "reversed"
  if shape == 2 then len, dfirst, sfirst, shw = n - 1, 2, 1, "straight" -- reads what the write before wrote
  elseif shape == 3 then len, dfirst, sfirst, dhow, shw = n - 1, 1, 2, "reversed", "straight" end
  local dv, ddesc, dmake = view_of(dst, dhow, dfirst, len)
  local sv, sdesc, smake = view_of(src, shw, sfirst, len)
  local okv, dt, st_ = pcall(function() return dmake(dst.t), smake(src.t) end)
  if not okv then return self:fail("views for two mappings: " .. tostring(dt)) end
  self:note(string.format("D = %s; X = %s   -- one block through two mappings (%s)", ddesc, sdesc, how))
  if not src.readonly and R(4) == 1 then
    local ok, t = self:call("X = dlpack.from_dlpack(dlpack.to_dlpack(X))   -- a re-import", function()
      return dlpack.from_dlpack(dlpack.to_dlpack(st_))
    end)
    if not ok then return self:fail("re-import of a mapped view: " .. tostring(t)) end
    st_ = t
  end
  local old_d, old_s = model_values(dv), model_values(sv)
  local new, desc, fn = {}
  local k = forced and R(2) or R(5)
  local v = R(0, 100)
  if k == 1 then
    desc, fn = "D:copy(X)", function() return dt:copy(st_) end
    for i = 1, len do new[i] = old_s[i] end
  elseif k == 2 then
    desc, fn = "D:add_(X)", function() return dt:add_(st_) end
    for i = 1, len do new[i] = old_d[i] + old_s[i] end
  elseif k == 3 then
    desc, fn = "dlpack.sub(X, D, {out = D})", function() return dlpack.sub(st_, dt, { out = dt }) end
    for i = 1, len do new[i] = old_s[i] - old_d[i] end
  elseif k == 4 then
    desc, fn = string.format("D:masked_fill(X, %d)", v), function() return dt:masked_fill(st_, v) end
    for i = 1, len do new[i] = old_s[i] ~= 0 and v or old_d[i] end
  else
    desc, fn = "D:clamp_(X, nil)", function() return dt:clamp_(st_, nil) end
    for i = 1, len do new[i] = math.max(old_d[i], old_s[i]) end
  end
  local ok, r = self:call(desc, fn)
  if not ok then return self:fail(string.format("%s through two mappings (%s) raised: %s", desc, how, tostring(r))) end
  model_store(dv, new)
  for _, x in ipairs({ dst, src }) do
    local why = self:mismatch(x.t, x)
    if why then
      return self:fail(string.format("after %s through two mappings of one block (%s: D = %s, X = %s), %s's %s", desc,
        how, ddesc, sdesc, x.name, why))
    end
  end
end

op("two_mappings", 3, function(st) st:alias_step(false) end)

---------------------------------------------------------------------------
-- Running a seed

local pick_op = runner.picker(ops)
local ALIAS_STEP = 2
for _, o in ipairs(ops) do if o.name == "recv" then RECV = o end end

local GC_MODES = {}
local function set_gc(seed)
  local g = seed % 4
  if g == 0 then GC_MODES[seed] = { "incremental", R(0, 40), R(100, 1000), R(0, 8) }
  elseif g == 1 then GC_MODES[seed] = { "generational", R(1, 20), R(10, 100) }
  elseif g == 2 then GC_MODES[seed] = { "incremental", 100, 400, 6 }
  else GC_MODES[seed] = { "incremental", 200, 100, 13 } end
  collectgarbage(table.unpack(GC_MODES[seed]))
  return table.concat(GC_MODES[seed], " ")
end

function S:restore_gc()
  collectgarbage(table.unpack(GC_MODES[self.seed]))
end

local function pid()
  local f = assert(io.open("/proc/self/stat"))
  local id = f:read("*l"):match("^(%d+)")
  f:close()
  return id
end
local PID = pid()

local function run_seed(seed, steps)
  math.randomseed(seed)
  local st = S.new(seed)
  collectgarbage()
  collectgarbage()
  st.fds0, st.maps0 = fab.ipc_counts()
  local gcdesc = set_gc(seed)
  local file_path = seed % 2 == 0
  st.path = file_path and string.format("/tmp/dlpack-fuzzipc-%s-%d.sock", PID, seed)
    or string.format("@dlpack-fuzzipc-%s-%d", PID, seed)
  if VERBOSE then out:write("[", seed, "] gc ", gcdesc, "; listener at ", file_path and "/tmp/..." or "@...", "\n") end
  local ok, l = st:call("listener = ipc.listen(path)", ipc.listen, st.path)
  if not ok then
    st:fail("ipc.listen: " .. tostring(l))
    return st
  end
  st.listener = l
  st:connect()
  for _ = 1, steps do
    st.step = st.step + 1
    local o = pick_op()
    if #st.queue >= MAX_QUEUE and o.name:match("^send_") and o.name ~= "send_back" then o = RECV end
    if st.step == ALIAS_STEP then st:alias_step(true) -- every seed writes through two mappings at least once
    else o.fn(st) end
  end
  -- teardown: everything released, closed and collected; the counts as before the seed
  st.step = st.step + 1
  st:note("teardown")
  for s = 1, NSLOT do
    if st.pool[s] then pcall(T.release, st.pool[s].t) end
  end
  st.pool = {}
  if st.ch then st.ch:close() end
  if st.peer then fab.ipc_close(st.peer) end
  local keep = nil
  for _, f in ipairs(st.files) do
    if f.fd then
      if BROKEN == "leak" and not keep then keep = f.fd else fab.ipc_close(f.fd) end
      f.fd = nil
    end
  end
  st.listener:close()
  st.listener, st.ch, st.peer, st.queue, st.files = nil, nil, nil, {}, {}
  collectgarbage()
  collectgarbage()
  local fds, maps = fab.ipc_counts()
  if fds ~= st.fds0 then st:fail(string.format("leak: %d descriptors open after the seed, %d before", fds, st.fds0)) end
  if maps ~= st.maps0 then
    st:fail(string.format("leak: %d memfd mappings after the seed, %d before", maps, st.maps0))
  end
  if file_path then
    local f = io.open(st.path, "r")
    if f then f:close() end
    local _, why = io.open(st.path, "r")
    if not (why and why:find("No such file", 1, true)) then st:fail("the listener's socket file is still there") end
  end
  if keep then fab.ipc_close(keep) end
  collectgarbage("incremental", 200, 100, 13)
  return st
end

runner.run(options, "fuzz-ipc", function(seed) return run_seed(seed, options.steps) end, 0, function(seed)
  return string.format("lua5.4 spec/fuzz/ipc.lua --seed %d --steps %d%s --verbose", seed, options.steps,
    BROKEN and (" --break " .. BROKEN) or "")
end)
