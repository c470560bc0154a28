-- The malformed-producer corpus of the fuzzer: managed tensors fabricated by
-- spec/c/fabricate.c with random field values, imported with
-- dlpack.from_dlpack. Each import gives a tensor (then exercised) or raises;
-- the caller checks the deleter counts once everything is released.
--
-- A consumer cannot know how large a foreign buffer is, so a spec that
-- describes a valid tensor stays inside the buffer fabricate allocates for it
-- (default_bytes() in fabricate.c: the extent of the non-negative strides from
-- byte_offset, at least 64 bytes). Negative strides are paid for with
-- byte_offset. Invalid specs (that the module must refuse: overflowing sizes,
-- ndim > 64, NULL data or shape with elements, wrapping byte_offset, bad
-- dtypes, devices, versions) may describe anything.
local G = require "fuzz.gen"
local model = require "fuzz.model"

local R = math.random
local C = {}

-- name, code, bits
local DT = {
  { "int8", 0, 8 }, { "int16", 0, 16 }, { "int32", 0, 32 }, { "int64", 0, 64 },
  { "uint8", 1, 8 }, { "uint16", 1, 16 }, { "uint32", 1, 32 }, { "uint64", 1, 64 },
  { "float16", 2, 16 }, { "float32", 2, 32 }, { "float64", 2, 64 }, { "bfloat16", 4, 16 },
  { "complex64", 5, 64 }, { "complex128", 5, 128 }, { "bool", 6, 8 },
  { "float8_e3m4", 7, 8 }, { "float8_e4m3", 8, 8 }, { "float8_e4m3b11fnuz", 9, 8 },
  { "float8_e4m3fn", 10, 8 }, { "float8_e4m3fnuz", 11, 8 }, { "float8_e5m2", 12, 8 },
  { "float8_e5m2fnuz", 13, 8 }, { "float8_e8m0fnu", 14, 8 }, { "float6_e2m3fn", 15, 6 },
  { "float6_e3m2fn", 16, 6 }, { "float4_e2m1fn", 17, 4 },
}
-- dtypes whose counting fill (1, 2, 3, ... per slot) the model can predict
local COUNTED = { int16 = true, int32 = true, int64 = true, uint8 = true, uint16 = true, uint32 = true,
  uint64 = true, float32 = true, float64 = true, int8 = true }

local HOST_DEVICES = { 1, 1, 1, 1, 1, 1, 3, 13, 11 }
local OTHER_DEVICES = { 2, 4, 7, 8, 9, 10, 12, 14, 15, 16, 17, 18 }

local function describe(spec)
  local keys = { "legacy", "major", "minor", "flags", "device_type", "device_id", "code", "bits", "lanes",
    "ndim", "shape", "strides", "byte_offset", "data", "deleter" }
  local parts = {}
  for _, k in ipairs(keys) do
    local v = spec[k]
    if v ~= nil then
      if type(v) == "table" then parts[#parts + 1] = k .. " = " .. G.fmt_list(v)
      else parts[#parts + 1] = k .. " = " .. G.fmt(v) end
    end
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end
C.describe = describe

-- A valid spec (within its buffer). Returns spec, facts (what the model knows).
local function valid_spec(S)
  local dt = G.pick(DT)
  local name, code, bits = dt[1], dt[2], dt[3]
  local itemsize = (bits + 7) // 8
  local nd = G.pick({ 0, 1, 1, 2, 2, 3, 4 })
  local shape = {}
  for i = 1, nd do shape[i] = G.pick({ 0, 1, 1, 2, 2, 3, 3, 4 }) end
  local spec = { code = code, bits = bits, shape = shape }
  local facts = { dtype = name, shape = shape, itemsize = itemsize, basic = true }
  local numel = model.numel(shape)
  -- strides: default row-major, NULL (row-major), or any small ones incl. 0 and negative
  local k = R(6)
  local strides
  if k == 1 then
    spec.strides = false
    strides = model.contiguous_strides(shape)
  elseif k <= 3 then
    strides = model.contiguous_strides(shape)
    if nd == 0 then spec.strides = {} end
  else
    strides = {}
    for i = 1, nd do strides[i] = R(-3, 3) * (R(2) == 1 and 1 or R(1, 5)) end
    -- a size-1 or empty dimension may have any stride
    for i = 1, nd do
      if shape[i] <= 1 and R(3) == 1 and not S.without.hugestride then
        strides[i] = G.pick({ math.maxinteger, math.mininteger, 1099511627776 })
      end
    end
    spec.strides = strides
    facts.custom_strides = true
  end
  facts.strides = strides
  -- negative strides are paid for with byte_offset
  local negspan = 0
  if numel > 0 then
    for i = 1, nd do
      if strides[i] < 0 and shape[i] > 1 then negspan = negspan + (shape[i] - 1) * -strides[i] end
    end
  end
  local extra = G.pick({ 0, 0, 0, 1, 2 }) * itemsize
  if R(8) == 1 and not S.without.misaligned then extra = extra + 1; facts.misaligned = true end
  local bo = negspan * itemsize + extra
  if numel == 0 and R(4) == 1 then
    bo = G.pick({ 1099511627776, 4096, 4611686018427387904 })
    facts.basic = false
  end
  if bo ~= 0 or R(3) == 1 then spec.byte_offset = bo end
  facts.byte_offset, facts.negspan = bo, negspan
  -- device: host memory mostly; sometimes a device the CPU cannot read (never dereferenced)
  if R(6) == 1 then
    spec.device_type = G.pick(OTHER_DEVICES)
    spec.device_id = G.pick({ 0, 0, 1, 63 })
    facts.basic = false
    facts.nonhost = true
  else
    spec.device_type = G.pick(HOST_DEVICES)
    if spec.device_type ~= 1 then facts.basic = false end
  end
  spec.legacy = R(4) == 1
  if not spec.legacy then
    spec.major = 1
    spec.minor = G.pick({ 0, 1, 2, 3, 3, 3, 7 })
    local f = G.pick({ 0, 0, 0, 1, 2, 3, 4, 1 << 20 })
    if f ~= 0 then spec.flags = f end
    facts.readonly = f & 1 ~= 0
    if f & ~3 ~= 0 or spec.minor > 3 then facts.basic = false end
  else
    facts.readonly = false
  end
  if numel == 0 and R(4) == 1 then spec.data = false end
  if R(8) == 1 then spec.deleter = false end
  if G.SUBBYTE[name] or facts.custom_strides or facts.misaligned or not G.ELEM[name] then
    facts.basic = facts.basic and not facts.custom_strides and not facts.misaligned
  end
  facts.counted = COUNTED[name] and not facts.nonhost and extra % itemsize == 0 and (bo % itemsize == 0)
  return spec, facts
end

-- Mutations that make a spec invalid (the module must refuse it).
local MUTATIONS = {
  function(s) s.legacy = false; s.major = G.pick({ 0, 2, 99, 4294967295 }); return "major" end,
  function(s) s.device_type = G.pick({ 0, 5, 6, 19, 20, 1000, -1, 2147483647 }); return "device_type" end,
  function(s)
    s.device_type = 2; s.device_id = G.pick({ -1, 64, 2147483647, -2147483648 })
    return "device_id"
  end,
  function(s) s.code = G.pick({ 3, 18, 19, 200, 255 }); return "code" end,
  function(s) s.code = G.pick({ 0, 1, 2 }); s.bits = G.pick({ 0, 1, 3, 7, 12, 24, 128, 255 }); return "bits" end,
  function(s) s.lanes = G.pick({ 0, 2, 4, 65535 }); return "lanes" end,
  function(s) s.ndim = G.pick({ -1, -2147483648, 65, 100, 4097, 100000 }); return "ndim" end,
  function(s) s.ndim = G.pick({ 1, 2, 3 }); s.shape = false; return "shape NULL" end,
  function(s)
    local nd = R(1, 3)
    s.shape = {}
    for i = 1, nd do s.shape[i] = R(1, 3) end
    s.shape[R(nd)] = G.pick({ -1, -2, math.mininteger, -4294967296 })
    s.ndim, s.strides = nil, nil -- ndim follows the shape (an earlier mutation may have set it)
    return "negative shape"
  end,
  function(s)
    s.shape = G.pick({ { 4294967296, 4294967296 }, { 4611686018427387904, 4 }, { math.maxinteger, 2 },
      { 3037000500, 3037000500, 2 }, { 2, math.maxinteger } })
    s.ndim, s.strides = nil, false
    return "numel overflow"
  end,
  function(s)
    local nd = R(1, 3)
    s.shape, s.strides = {}, {}
    for i = 1, nd do s.shape[i] = R(1, 3); s.strides[i] = 1 end
    local d = R(nd)
    s.shape[d] = 4
    s.strides[d] = G.pick({ 4611686018427387904, -4611686018427387904, math.maxinteger, math.mininteger })
    s.ndim, s.byte_offset = nil, nil
    return "stride overflow"
  end,
  function(s)
    s.shape = { R(1, 4) }
    s.ndim, s.strides = nil, nil
    s.byte_offset = G.pick({ -1, -8, -64, -4096 })
    return "byte_offset wraps"
  end,
  function(s)
    s.shape = { R(1, 4), R(1, 3) }
    s.ndim, s.strides = nil, nil
    s.data = false
    return "data NULL"
  end,
  function(s)
    s.legacy = false; s.major = 1; s.flags = 4; s.code = 2; s.bits = G.pick({ 3, 5, 7 })
    return "subbyte"
  end,
}

local function invalid_spec(S)
  local spec = valid_spec(S)
  local what = {}
  for _ = 1, G.pick({ 1, 1, 1, 2 }) do what[#what + 1] = MUTATIONS[R(#MUTATIONS)](spec) end
  -- a NULL deleter now and then on the invalid ones too
  if R(8) == 1 then spec.deleter = false else spec.deleter = nil end
  return spec, { invalid = table.concat(what, "+") }
end

-- Expected elements of an import whose buffer holds 1, 2, 3, ... per slot.
local function counted_value(facts, idx)
  -- slots are counted from byte_offset: the element at byte_offset + slot*itemsize holds slot + 1
  local slot = 0
  for i = 1, #idx do slot = slot + (idx[i] - 1) * facts.strides[i] end
  if slot < 0 then return 0 end
  local v = slot + 1
  if facts.dtype == "int8" then v = (v + 128) % 256 - 128 elseif facts.dtype == "uint8" then v = v % 256 end
  if facts.dtype:sub(1, 5) == "float" then v = v + 0.0 end
  return v
end

-- Runs n fabricated imports. S gives dlpack, fab, the pool and the reporting.
function C.run(S, n, nslot)
  local dlpack, fab, T = S.dlpack, S.fab, S.T
  for i = 1, n do
    S.step = S.step + 1
    local keep = R(nslot * 3) -- drawn before anything can fail: the same draws whatever happens
    local spec, facts
    if R(3) == 1 then spec, facts = invalid_spec(S) else spec, facts = valid_spec(S) end
    local legacy = spec.legacy
    spec.legacy = nil
    local form = G.pick({ "capsule", "capsule", "capsule", "capsule", "raw", "pairs", "wrap", "select" })
    if S.without.raw then form = "capsule" end
    local opts_kind = R(6)
    local desc = string.format("corpus #%d %s %s%s %s", i, facts.invalid and ("invalid(" .. facts.invalid .. ")") or
      "valid", legacy and "legacy" or "versioned", form ~= "capsule" and (" " .. form) or "", describe(spec))
    S:note(desc)
    local okb, cap = pcall(legacy and fab.legacy or fab.versioned, spec)
    local ptr, pname
    if form ~= "capsule" then okb, ptr, pname = pcall(legacy and fab.raw_legacy or fab.raw_versioned, spec) end
    if not okb then
      S:fail("fabricate refused its spec: " .. tostring(cap or ptr))
    else
      if spec.deleter ~= false then S.fab_expected = S.fab_expected + 1 end
      if form ~= "capsule" then
        -- the raw form must be refused, whoever returns it
        if spec.deleter ~= false then S.fab_expected = S.fab_expected + 1 end
        local producer
        if form == "raw" then
          producer = setmetatable({}, { __dlpack = function() return ptr, pname end,
            __dlpack_device = function() return 1, 0 end })
        elseif form == "pairs" then
          producer = setmetatable({}, { __dlpack = pairs, __pairs = function() return ptr, pname end,
            __dlpack_device = function() return 1, 0 end })
        elseif form == "wrap" then
          producer = setmetatable({}, { __dlpack = coroutine.wrap(function() return ptr, pname end),
            __dlpack_device = function() return 1, 0 end })
        else
          producer = setmetatable({}, { __dlpack = select, __dlpack_device = function() return 1, 0 end })
        end
        local ok, r = S:call(desc .. " from_dlpack(raw producer)", dlpack.from_dlpack, producer)
        if ok then
          S:fail("from_dlpack accepted a raw managed-tensor pointer returned by a " .. form .. " __dlpack")
          pcall(T.release, r)
        end
        r = nil -- luacheck: ignore
        collectgarbage()
        -- the module must not own it: hand it back ourselves
        if spec.deleter ~= false then fab.delete(ptr) end
      end
      local opts
      if opts_kind == 1 then opts = { copy = true } elseif opts_kind == 2 then opts = { device = "cpu" } end
      local ok, t = S:call(desc .. " from_dlpack(capsule" .. (opts and (opts.copy and ", {copy = true})" or
        ", {device = \"cpu\"})") or ")"), dlpack.from_dlpack, cap, opts)
      -- consumed, whatever the outcome
      local oki, info = pcall(dlpack.capsule_info, cap)
      if not (oki and type(info) == "table" and info.consumed == true) then
        S:fail("capsule not marked consumed after from_dlpack (" .. (ok and "imported" or "refused") .. ")")
        pcall(dlpack.release_capsule, cap)
      end
      local ok2, err2 = pcall(dlpack.from_dlpack, cap)
      if ok2 then
        S:fail("a capsule imported twice")
        pcall(T.release, err2)
      elseif not tostring(err2):find("consumed") then
        S:fail("second consumption of a capsule raised without 'consumed': " .. tostring(err2))
      end
      if ok then
        if facts.invalid then
          S:fail("an invalid tensor (" .. facts.invalid .. ") was imported")
        end
        C.exercise(S, t, facts, opts)
        if not facts.invalid and spec.deleter ~= false and not opts and keep <= nslot then
          local name = "F" .. S:serial()
          S:put(t, name, keep, name)
        else
          pcall(T.release, t)
        end
      elseif facts.basic and not opts then
        S:fail("a valid CPU tensor was refused: " .. tostring(t))
      end
      t = nil -- luacheck: ignore
    end
  end
end

-- Exercises an imported tensor (reads stay within its buffer by construction).
function C.exercise(S, t, facts, opts)
  local dlpack, T = S.dlpack, S.T
  local okp, shape = pcall(function() return t.shape end)
  if not okp then S:fail("shape of an import raised: " .. tostring(shape)); return end
  if not facts.invalid and not model.same_list(shape, facts.shape) then
    S:fail("import shape " .. G.fmt_list(shape) .. " ~= " .. G.fmt_list(facts.shape))
  end
  local strides = t.strides
  if not facts.invalid and not opts and model.numel(facts.shape) > 0 then
    for d = 1, #facts.shape do
      if facts.shape[d] > 1 and strides[d] ~= facts.strides[d] then
        S:fail("import strides " .. G.fmt_list(strides) .. " ~= " .. G.fmt_list(facts.strides))
        break
      end
    end
  end
  if not facts.invalid and not opts and t.readonly ~= facts.readonly then
    S:fail("import readonly " .. tostring(t.readonly) .. ", flags say " .. tostring(facts.readonly))
  end
  S:check_note("import: totable, tobytes, tostring, views")
  local okt, tbl = pcall(T.totable, t)
  if okt and facts.counted and not facts.invalid then
    local want = model.build(facts.shape, function(idx) return counted_value(facts, idx) end)
    if not model.same_table(tbl, want) then S:fail("import values differ from the producer's buffer") end
  end
  pcall(T.tobytes, t)
  pcall(tostring, t)
  if #shape >= 2 then pcall(T.transpose, t, 1, 2) end
  if #shape >= 1 and shape[1] > 0 then
    local okv, v = pcall(T.select, t, 1, 1)
    if okv then pcall(T.totable, v); pcall(T.release, v) end
  end
  -- export and import again: the same memory
  S:check_note("import: export and re-import, clone")
  local okc, cap = pcall(dlpack.to_dlpack, t)
  if okc then
    local okr, t2 = pcall(dlpack.from_dlpack, cap)
    if okr then
      local okp1, p1 = pcall(T.data_ptr, t)
      local okp2, p2 = pcall(T.data_ptr, t2)
      if not facts.nonhost and okp1 and okp2 and p1 ~= p2 then S:fail("re-import of an import moved its data") end
      pcall(T.release, t2)
    else
      pcall(dlpack.release_capsule, cap)
    end
  end
  local okl, c = pcall(T.clone, t)
  if okl then pcall(T.release, c) end
end

return C
