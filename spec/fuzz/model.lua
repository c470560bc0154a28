-- A small pure-Lua model of tensors for the fuzzer's checks: shapes, strides,
-- row-major element order of nested tables, the bytes of tobytes().
local M = {}

function M.numel(shape)
  local n = 1
  for i = 1, #shape do n = n * shape[i] end
  return n
end

function M.contiguous_strides(shape)
  local st, acc = {}, 1
  for i = #shape, 1, -1 do
    st[i] = acc
    acc = acc * math.max(shape[i], 1)
  end
  return st
end

function M.same_list(a, b)
  if type(a) ~= "table" or type(b) ~= "table" or #a ~= #b then return false end
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return true
end

local function same_value(a, b)
  if a ~= a and b ~= b then return true end -- NaN
  return a == b
end
M.same_value = same_value

-- Deep equality of totable() results (NaN equal to NaN).
function M.same_table(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return same_value(a, b) end
  if #a ~= #b then return false end
  for i = 1, #a do
    if not M.same_table(a[i], b[i]) then return false end
  end
  return true
end

-- Element at a multi-index of a totable() result.
function M.at(tbl, idx)
  local v = tbl
  for i = 1, #idx do v = v[idx[i]] end
  return v
end

-- Builds the nested table of shape `shape` whose element at idx is fn(idx)
-- (idx is reused: copy it to keep it).
function M.build(shape, fn)
  local idx = {}
  local function rec(d)
    if d > #shape then return fn(idx) end
    local t = {}
    for i = 1, shape[d] do
      idx[d] = i
      t[i] = rec(d + 1)
    end
    idx[d] = nil
    return t
  end
  return rec(1)
end

-- Row-major list of the elements of a totable() result of shape `shape`.
function M.flat(tbl, shape)
  local out = {}
  M.build(shape, function(idx) out[#out + 1] = M.at(tbl, idx) end)
  return out
end

-- The nested table of shape `shape` filled row-major from list `flat`.
function M.unflat(flat, shape)
  local k = 0
  return M.build(shape, function()
    k = k + 1
    return flat[k]
  end)
end

-- Resolves a dimension argument (1-based, negative from the end) for ndim dims.
function M.dim(d, ndim)
  if math.type(d) ~= "integer" then return nil end
  if d < 0 then d = ndim + d + 1 end
  if d < 1 or d > ndim then return nil end
  return d
end

local function f16_bits(x)
  -- x is exactly representable in float16 (it was read from a float16 tensor)
  local b = string.unpack("<I4", string.pack("<f", x))
  local sign = (b >> 16) & 0x8000
  local e = (b >> 23) & 0xff
  local m = b & 0x7fffff
  if e == 0xff then return m == 0 and (sign | 0x7c00) or nil end
  if e == 0 then return m == 0 and sign or nil end
  local ue = e - 127 + 15
  if ue >= 31 then return nil end
  if ue >= 1 then
    if m & 0x1fff ~= 0 then return nil end
    return sign | (ue << 10) | (m >> 13)
  end
  -- subnormal half: value = f * 2^-24
  local full = m | 0x800000 -- 24 bits of significand
  local shift = 13 + (1 - ue)
  if shift > 24 or full & ((1 << shift) - 1) ~= 0 then return nil end
  return sign | (full >> shift)
end

local PACK = {
  int8 = "<i1", int16 = "<i2", int32 = "<i4", int64 = "<i8",
  uint8 = "<I1", uint16 = "<I2", uint32 = "<I4", uint64 = "<i8",
  float32 = "<f", float64 = "<d",
}

-- The bytes tobytes() must give for the row-major element list `flat` of
-- dtype `dtype`, or nil where the model does not know them (NaN payloads).
function M.pack(dtype, flat)
  local parts = {}
  for i = 1, #flat do
    local v = flat[i]
    if type(v) == "number" and v ~= v then return nil end
    local fmt = PACK[dtype]
    if fmt then
      if dtype == "float32" and math.abs(v) < math.huge and math.abs(v) > 3.4028234663852886e38 then return nil end
      parts[i] = string.pack(fmt, v)
    elseif dtype == "bool" then
      parts[i] = v and "\1" or "\0"
    elseif dtype == "bfloat16" then
      local b = string.unpack("<I4", string.pack("<f", v))
      if b & 0xffff ~= 0 then return nil end
      parts[i] = string.pack("<I2", b >> 16)
    elseif dtype == "float16" then
      local h = f16_bits(v)
      if not h then return nil end
      parts[i] = string.pack("<I2", h)
    else
      return nil
    end
  end
  return table.concat(parts)
end

return M
