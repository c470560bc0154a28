#!/usr/bin/env lua5.4
--[[
The .npy half of the fuzzer (README.md): dlpack.load against files that are valid .npy files
mutated at random.

  lua5.4 spec/fuzz/npy.lua [--seed S] [--steps N] [--seeds K] [--seconds T] [--verbose]
                           [--break accept|values]
  bash spec/fuzz/asan.sh --npy --seed S ...     (the same under ASan+UBSan)

Each step writes a valid file (any of the 14 dtypes NumPy has, both byte orders, C or Fortran
order, 0-d to 4-d shapes with empty ones, versions 1.0, 2.0 and 3.0, the header written with its
keys in any order, either quote, spaces, tabs and trailing commas, or by dlpack.save), mutates it
(0 to 4 of: bytes flipped or set to edge values, runs inserted, deleted or duplicated, the file
cut short or made longer, the header length set to edge values, the version changed, numbers in
the header replaced by huge, negative, zero-led or overflowing ones, the descr replaced by one
the module lacks, keys and punctuation dropped or doubled) and loads it, mapped or not.
A model written from NumPy's format description (numpy/lib/format.py) and the module's rules
(docs/api.md) decides whether the file must load, and what it must give: the dtype, shape,
strides, read-only flag and every byte (swapped for the other byte order). A refusal must be
a Lua error that starts with "dlpack.load: ". After every seed nothing of it may stay mapped
(/proc/self/maps).

--break makes the model wrong on purpose (accept: every file expected to load; values: the
data expected one byte later): a run must then fail. Output and exit status as fuzz.lua's.
]]

local here = ((arg and arg[0]) or "spec/fuzz/npy.lua"):match("^(.*)/[^/]*$") or "."
package.path = here .. "/../?.lua;" .. package.path
local runner = require "fuzz.runner"
runner.paths(here)

local options = { seed = 1, steps = 300, seeds = 1, seconds = nil, verbose = false, broken = nil }
runner.options("fuzz-npy", options, "lua5.4 spec/fuzz/npy.lua [--seed S] [--steps N] [--seeds K] [--seconds T] "
    .. "[--verbose] [--break accept|values]", {
  ["--corpus"] = function(_, num) num("--corpus") end, -- the CPU half's option: nothing to do here
  ["--break"] = function(next_arg)
    local b = next_arg()
    if b ~= "accept" and b ~= "values" then
      io.stderr:write("fuzz-npy: --break takes accept or values\n")
      os.exit(2)
    end
    options.broken = b
  end,
})

local dlpack = require "dlpack"
local BROKEN, VERBOSE = options.broken, options.verbose

local DTYPES = {
  {"bool", "b1", 1}, {"int8", "i1", 1}, {"int16", "i2", 2}, {"int32", "i4", 4}, {"int64", "i8", 8},
  {"uint8", "u1", 1}, {"uint16", "u2", 2}, {"uint32", "u4", 4}, {"uint64", "u8", 8},
  {"float16", "f2", 2}, {"float32", "f4", 4}, {"float64", "f8", 8}, {"complex64", "c8", 8},
  {"complex128", "c16", 16},
}
local BY_CODE = {}
for _, d in ipairs(DTYPES) do BY_CODE[d[2]] = d end
local OTHER_DESCRS = {"|O", "<U5", "|S3", "|V4", "<M8[ns]", "<m8[s]", "<f16", "<c32", "f4", "|i4", "<b2", "<i3",
                      "<bf16", "", "<", "<f4 ", "\"<f4\"", "<f4\\"}
local PTRDIFF_HALF = math.maxinteger // 2 -- the module's limit on a tensor's bytes (PTRDIFF_MAX / 2)

---------------------------------------------------------------------------
-- The model: what dlpack.load must do with a file (its bytes) and mmap.

local function le(s, at, n)
  local v = 0
  for i = n - 1, 0, -1 do v = v * 256 + s:byte(at + i) end
  return v
end

-- The header dict (text) parsed as the module's strict parser does: descr, fortran, shape; or nil.
local function parse_dict(h)
  if h:find("[^\t\n\r\32-\126]") then return nil end
  local pos = 1
  local function ws() pos = h:find("[^ \t\n\r]", pos) or #h + 1 end
  local function lit(c)
    ws()
    if h:sub(pos, pos) == c then pos = pos + 1; return true end
    return false
  end
  local function str()
    ws()
    local q = h:sub(pos, pos)
    if q ~= "'" and q ~= '"' then return nil end
    local e = h:find(q, pos + 1, true)
    if not e then return nil end
    local s = h:sub(pos + 1, e - 1)
    if s:find("[\\\n\r]") or #s > 31 then return nil end
    pos = e + 1
    return s
  end
  local function name_char(c) return c ~= "" and c:find("^[%w_]") ~= nil end
  local function bool()
    ws()
    for _, w in ipairs({"True", "False"}) do
      if h:sub(pos, pos + #w - 1) == w and not name_char(h:sub(pos + #w, pos + #w)) then
        pos = pos + #w
        return w == "True"
      end
    end
    return nil
  end
  local function size()
    ws()
    local digits = h:match("^%d+", pos)
    if not digits then return nil end
    if digits:sub(1, 1) == "0" and name_char(h:sub(pos + 1, pos + 1)) then return nil end
    if name_char(h:sub(pos + #digits, pos + #digits)) then return nil end
    if #digits > 19 or (#digits == 19 and digits > "9223372036854775807") then return nil end
    pos = pos + #digits
    return math.tointeger(tonumber(digits))
  end
  local function shape()
    if not lit("(") then return nil end
    local dims = {}
    if lit(")") then return dims end
    while true do
      if #dims == 64 then return nil end
      local v = size()
      if not v then return nil end
      dims[#dims + 1] = v
      if lit(",") then
        if lit(")") then return dims end
      elseif lit(")") then
        if #dims == 1 then return nil end
        return dims
      else
        return nil
      end
    end
  end
  local function descr()
    local d = str()
    if not d then return nil end
    local order, code = d:sub(1, 1), d:sub(2)
    local info = BY_CODE[code]
    if not info or not (order == "<" or order == ">" or order == "|" or order == "=") then return nil end
    if order == "|" and info[3] > 1 then return nil end
    return {info = info, swap = info[3] > 1 and order == ">"}
  end
  local got = {}
  if not lit("{") then return nil end
  while not lit("}") do
    local key = str()
    if key ~= "descr" and key ~= "fortran_order" and key ~= "shape" then return nil end
    if got[key] ~= nil then return nil end
    if not lit(":") then return nil end
    local v
    if key == "descr" then v = descr() elseif key == "fortran_order" then v = bool() else v = shape() end
    if v == nil then return nil end
    got[key] = v
    if not lit(",") then
      if lit("}") then break end
      return nil
    end
  end
  if got.descr == nil or got.fortran_order == nil or got.shape == nil then return nil end
  ws()
  if pos <= #h then return nil end
  return got
end

-- What load must give: nil (a refusal), or {dtype, shape, fortran, swap, offset, nbytes, itemsize}.
local function model(s, mmap)
  if #s < 10 or s:sub(1, 6) ~= "\147NUMPY" then return nil end
  local major, minor = s:byte(7, 8)
  if major < 1 or major > 3 or minor ~= 0 then return nil end
  local w = major == 1 and 2 or 4
  if #s < 8 + w then return nil end
  local hlen = le(s, 9, w)
  if hlen > 1048576 or 8 + w + hlen > #s then return nil end
  local dict = parse_dict(s:sub(9 + w, 8 + w + hlen))
  if not dict then return nil end
  local numel, itemsize = 1, dict.descr.info[3]
  for _, d in ipairs(dict.shape) do if d == 0 then numel = 0 end end
  if numel ~= 0 then
    for _, d in ipairs(dict.shape) do
      if numel > math.maxinteger // d then return nil end
      numel = numel * d
    end
  end
  if numel > PTRDIFF_HALF // itemsize then return nil end
  local offset, nbytes = 8 + w + hlen, numel * itemsize
  if nbytes > #s - offset then return nil end
  if mmap and dict.descr.swap then return nil end
  return {dtype = dict.descr.info[1], shape = dict.shape, fortran = dict.fortran_order, swap = dict.descr.swap,
          offset = offset + (BROKEN == "values" and 1 or 0), nbytes = nbytes, itemsize = itemsize}
end

---------------------------------------------------------------------------
-- Valid files, and mutations of them

local function rand_bytes(n)
  local t = {}
  for i = 1, n do t[i] = math.random(0, 255) end
  local parts = {}
  for i = 1, n, 4096 do parts[#parts + 1] = string.char(table.unpack(t, i, math.min(n, i + 4095))) end
  return table.concat(parts)
end

local function pick(list) return list[math.random(#list)] end

local function valid_file(path)
  local d = pick(DTYPES)
  local ndim = math.random(0, 4)
  local shape, numel = {}, 1
  for i = 1, ndim do
    shape[i] = math.random(6) == 1 and 0 or math.random(1, 5)
    numel = numel * shape[i]
  end
  if math.random(8) == 1 then -- written by the module itself, to a file of its own (path may be
    -- mapped by tensors kept, and save refuses to write a file this process maps)
    local t = dlpack.frombytes(rand_bytes(numel * d[3]), d[1], shape)
    local own = path .. "-saved"
    dlpack.save(own, t)
    local f = assert(io.open(own, "rb"))
    local s = f:read("a")
    f:close()
    os.remove(own)
    return s
  end
  local order = d[3] == 1 and pick({"|", "<", ">", "="}) or pick({"<", ">", "<", "="})
  local q = math.random(2) == 1 and "'" or '"'
  local function sp() return pick({"", " ", " ", "  ", "\t", "\n "}) end
  local dims = {}
  for i, v in ipairs(shape) do dims[i] = tostring(v) end
  local tuple = "(" .. table.concat(dims, "," .. sp()) .. ((ndim == 1 or math.random(3) == 1 and ndim > 0)
    and "," or "") .. ")"
  local items = {
    q .. "descr" .. q .. sp() .. ":" .. sp() .. q .. order .. d[2] .. q,
    q .. "fortran_order" .. q .. sp() .. ":" .. sp() .. (math.random(2) == 1 and "True" or "False"),
    q .. "shape" .. q .. sp() .. ":" .. sp() .. tuple,
  }
  for i = 3, 2, -1 do
    local j = math.random(i)
    items[i], items[j] = items[j], items[i]
  end
  local dict = "{" .. sp() .. table.concat(items, "," .. sp()) .. (math.random(2) == 1 and ", " or "") .. "}"
  local version = pick({1, 1, 2, 3})
  local w = version == 1 and 2 or 4
  local header = dict
  if math.random(4) > 1 then
    local total = 8 + w + #dict + 1
    header = dict .. string.rep(" ", (64 - total % 64) % 64) .. "\n"
  end
  local len = ""
  for i = 0, w - 1 do len = len .. string.char((#header >> (8 * i)) & 255) end
  return "\147NUMPY" .. string.char(version, 0) .. len .. header .. rand_bytes(numel * d[3])
end

local EDGE_BYTES = {0, 1, 9, 10, 13, 32, 34, 39, 40, 41, 44, 45, 48, 57, 58, 91, 92, 123, 125, 127, 128, 147, 255}
local NUMBERS = {"0", "1", "-1", "00", "07", "0x10", "1_0", "2.5", "1e3", "9223372036854775807",
                 "9223372036854775808", "18446744073709551616", "4611686018427387904", "4294967296",
                 "99999999999999999999999", "2147483648", "-9223372036854775808", ""}

local function mutate(s)
  local n = #s
  local kind = math.random(12)
  local at = math.random(math.max(n, 1))
  if kind == 1 then -- a byte set
    return s:sub(1, at - 1) .. string.char(pick(EDGE_BYTES)) .. s:sub(at + 1)
  elseif kind == 2 then -- a bit flipped
    local b = s:byte(at) or 0
    return s:sub(1, at - 1) .. string.char(b ~ (1 << math.random(0, 7))) .. s:sub(at + 1)
  elseif kind == 3 then -- cut short
    return s:sub(1, math.random(0, n))
  elseif kind == 4 then -- made longer
    return s .. rand_bytes(math.random(1, 80))
  elseif kind == 5 then -- a run deleted
    return s:sub(1, at - 1) .. s:sub(at + math.random(1, 16))
  elseif kind == 6 then -- a run duplicated or inserted
    return s:sub(1, at) .. (math.random(2) == 1 and s:sub(at, at + math.random(0, 16)) or rand_bytes(math.random(8)))
      .. s:sub(at + 1)
  elseif kind == 7 then -- the header length set to an edge value
    local w = (s:byte(7) or 1) == 1 and 2 or 4
    local v = pick({0, 1, 2, 63, 64, 0xffff, 0xffffffff, 1048576, 1048577, n - 9, n - 10, n - 11, n, n + 1})
    local bytes = ""
    for i = 0, w - 1 do bytes = bytes .. string.char((v >> (8 * i)) & 255) end
    return s:sub(1, 8) .. bytes .. s:sub(9 + w)
  elseif kind == 8 then -- the version
    return s:sub(1, 6) .. string.char(pick({0, 1, 2, 3, 4, 255}), pick({0, 0, 0, 1})) .. s:sub(9)
  elseif kind == 9 then -- a number in the header replaced
    local starts = {}
    for p in s:sub(1, 200):gmatch("()%d+") do starts[#starts + 1] = p end
    if #starts == 0 then return s end
    local p = pick(starts)
    local e = s:find("%D", p) or n + 1
    return s:sub(1, p - 1) .. pick(NUMBERS) .. s:sub(e)
  elseif kind == 10 then -- the descr replaced
    return (s:gsub("(['\"])([<>|=][a-z]%d+)%1", function(quote) return quote .. pick(OTHER_DESCRS) .. quote end, 1))
  elseif kind == 11 then -- a piece of punctuation dropped or doubled
    local marks = {}
    for p in s:sub(1, 200):gmatch("()[{}():,'\"]") do marks[#marks + 1] = p end
    if #marks == 0 then return s end
    local p = pick(marks)
    return s:sub(1, p - 1) .. (math.random(2) == 1 and "" or s:sub(p, p):rep(2)) .. s:sub(p + 1)
  else -- a True/False swapped for another word
    return (s:gsub("([TF][ra][ul]s?e)", function() return pick({"true", "1", "None", "Fals", "TrueX", "False"}) end, 1))
  end
end

---------------------------------------------------------------------------
-- A seed

local S = {}
S.__index = S
runner.seed_methods(S, VERBOSE)

local function swapped(data, itemsize, complex)
  local w = complex and itemsize // 2 or itemsize
  return (data:gsub(string.rep(".", w), function(e) return e:reverse() end))
end

local function dims_text(shape) return "{" .. table.concat(shape, ", ") .. "}" end

function S:check(s, mmap, path)
  local want = model(s, mmap)
  self.calls = self.calls + 1
  local ok, t = pcall(dlpack.load, path, {mmap = mmap})
  if not ok then
    if not tostring(t):find("^dlpack%.load: ") then
      self:fail("an error that is not load's own: " .. tostring(t))
    elseif want or BROKEN == "accept" then
      self:fail("refused a file the model takes: " .. tostring(t))
    end
    return
  end
  self.loaded = self.loaded + 1
  if not want then
    self:fail(("loaded a file the model refuses: %s %s"):format(t.dtype, dims_text(t.shape)))
    t:release()
    return
  end
  local problem
  if t.dtype ~= want.dtype then problem = "dtype " .. t.dtype .. ", want " .. tostring(want.dtype)
  elseif dims_text(t.shape) ~= dims_text(want.shape) then
    problem = "shape " .. dims_text(t.shape) .. ", want " .. dims_text(want.shape)
  elseif t.readonly ~= mmap then problem = "readonly " .. tostring(t.readonly)
  elseif t:numel() > 0 then
    local stored = t
    if want.fortran and #want.shape > 1 then -- column-major: reversed, it is row-major
      local order = {}
      for i = 1, #want.shape do order[i] = #want.shape + 1 - i end
      stored = t:permute(order)
    end
    local data = s:sub(want.offset + 1, want.offset + want.nbytes)
    if want.swap then data = swapped(data, want.itemsize, want.dtype:find("complex") ~= nil) end
    if not stored:is_contiguous() then problem = "the file's order is not the tensor's layout: strides "
      .. dims_text(t.strides)
    elseif stored:tobytes() ~= data then problem = "the elements differ from the file's" end
  end
  if problem then self:fail(problem) end
  t:release()
end

local function mapped(path)
  local f = io.open("/proc/self/maps")
  if not f then return false end
  local s = f:read("a")
  f:close()
  return s:find(path, 1, true) ~= nil
end

local function run_seed(seed, steps)
  math.randomseed(seed)
  local st = setmetatable({seed = seed, step = 0, calls = 0, loaded = 0, failures = {}, last = "-"}, S)
  local path = os.tmpname()
  local kept = {}
  for _ = 1, steps do
    st.step = st.step + 1
    local s = valid_file(path)
    local n = math.random(0, 4)
    for _ = 1, n do s = mutate(s) end
    local mmap = math.random(2) == 1
    local f = assert(io.open(path, "wb"))
    f:write(s)
    f:close()
    st:note(("load(%d bytes, %d mutations, mmap = %s)"):format(#s, n, tostring(mmap)))
    st:check(s, mmap, path)
    if mmap and math.random(8) == 1 then -- some mapped tensors kept until the end of the seed
      local ok, t = pcall(dlpack.load, path, {mmap = true})
      if ok then kept[#kept + 1] = t end
    end
  end
  st.step = st.step + 1
  st:note("teardown")
  for i, t in ipairs(kept) do if i % 2 == 0 then t:release() end end -- the others left to the collector
  kept = nil -- luacheck: ignore 311
  collectgarbage()
  collectgarbage()
  if mapped(path) then st:fail("the file is still mapped after every tensor on it was collected") end
  -- a seed whose files nearly all load, or nearly none, tests half of what it should
  if st.loaded < steps // 10 or st.loaded > steps - steps // 10 then
    st:fail(("%d of %d files loaded: the mutations are out of balance"):format(st.loaded, steps))
  end
  os.remove(path)
  return st
end

runner.run(options, "fuzz-npy", function(seed) return run_seed(seed, options.steps) end, 0, function(seed)
  return string.format("lua5.4 spec/fuzz/npy.lua --seed %d --steps %d%s --verbose", seed, options.steps,
    BROKEN and (" --break " .. BROKEN) or "")
end)
