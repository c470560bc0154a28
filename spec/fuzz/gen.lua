-- Value generators for the fuzzer (spec/fuzz/fuzz.lua).
--
-- Every generator draws from math.random only, and the number of draws never
-- depends on the state of the module (what is live, what raised): a seed gives
-- the same sequence of calls whatever the module does. Every generator returns
-- a value and a description that names it without addresses, so that the
-- description of a call is the same in every run of a seed.
local G = {}

local R = math.random

G.DTYPES = {
  "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
  "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
  "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz",
  "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn",
}

-- dtypes with element access (API.md: at least these)
G.ELEM = {
  bool = true, int8 = true, int16 = true, int32 = true, int64 = true, uint8 = true, uint16 = true,
  uint32 = true, uint64 = true, float16 = true, bfloat16 = true, float32 = true, float64 = true,
}
-- packed sub-byte dtypes: their views are refused (README, Limits)
G.SUBBYTE = { float6_e2m3fn = true, float6_e3m2fn = true, float4_e2m1fn = true }
G.INTRANGE = {
  int8 = { -128, 127 }, int16 = { -32768, 32767 }, int32 = { -2147483648, 2147483647 },
  int64 = { math.mininteger, math.maxinteger }, uint8 = { 0, 255 }, uint16 = { 0, 65535 },
  uint32 = { 0, 4294967295 }, uint64 = { 0, math.maxinteger },
}
G.FLOAT = { float16 = true, bfloat16 = true, float32 = true, float64 = true }

function G.chance(p) return R() < p end
function G.pick(list) return list[R(#list)] end
function G.int(a, b) return R(a, b) end

-- A number in a form that reads back the same: integers as %d, floats with %q-like precision.
function G.fmt(v)
  local ty = type(v)
  if ty == "number" then
    if math.type(v) == "integer" then
      if v == math.mininteger then return "math.mininteger" end
      if v == math.maxinteger then return "math.maxinteger" end
      return string.format("%d", v)
    end
    if v ~= v then return "0/0" end
    if v == math.huge then return "1/0" end
    if v == -math.huge then return "-1/0" end
    if v == 0 and 1 / v < 0 then return "-0.0" end
    local s = string.format("%.17g", v)
    if not s:find("[%.eEn]") then s = s .. ".0" end
    return s
  elseif ty == "string" then
    if #v > 40 then return string.format("string.rep(%q, %d)", v:sub(1, 1), #v) end
    return (string.format("%q", v):gsub("\n", "n"))
  elseif ty == "nil" or ty == "boolean" then
    return tostring(v)
  end
  return "<" .. ty .. ">"
end

-- A byte string as a Lua literal with every byte escaped ("\2\1\255\0"): descriptions stay text.
function G.fmt_bytes(s)
  return '"' .. s:gsub(".", function(c) return "\\" .. c:byte() end) .. '"'
end

-- A list description: {1, 2, 3}
function G.fmt_list(list, n)
  local parts = {}
  for i = 1, n or #list do parts[i] = G.fmt(list[i]) end
  return "{" .. table.concat(parts, ", ") .. "}"
end

G.HOSTILE_NUMBERS = {
  0, -1, 1, 2, 3, -2, 7, 64, 65, 4096,
  math.maxinteger, math.mininteger, math.maxinteger - 1, math.mininteger + 1,
  2147483647, 2147483648, -2147483648, -2147483649, 4294967295, 4294967296, 4294967297,
  9007199254740992, 9007199254740993, 4611686018427387904, -4611686018427387904,
  2.0 ^ 31, 2.0 ^ 32, 2.0 ^ 53, 2.0 ^ 62, 2.0 ^ 63, -(2.0 ^ 63), 2.0 ^ 64, 1e308, -1e308,
  1 / 0, -1 / 0, 0 / 0, -0.0, 0.5, -0.5, 1e-300, 1.0, 2.0, -1.0, 1e9,
}

G.HOSTILE_STRINGS = {
  "", "1", "0x10", "1e400", " 2 ", "-1", "nan", "inf", "1.5", "9223372036854775808",
  "float32", "int64 ", "bfloat16", "complex128", "float4_e2m1fn", "Float32", "float32\0",
  "cuda", "cuda:0", "cuda:-1", "cuda:99999999999", "cuda:64", "cpu:1", "cpu", "cpu:0", "rocm:0",
  "opencl:3", "cuda_host", "cuda_managed", "rocm_host", "trn:2147483648", "\0", string.rep("x", 1000),
  "dltensor_versioned", "dltensor", "shape", "released", "__index", "%s%s%n", "read-only",
}

function G.hostile_number()
  local v = G.pick(G.HOSTILE_NUMBERS)
  return v, G.fmt(v)
end

function G.hostile_string()
  local v = G.pick(G.HOSTILE_STRINGS)
  return v, G.fmt(v)
end

-- A small "valid-looking" integer: indices, dims, sizes (often in range, sometimes not).
function G.small_int()
  local v = R(-6, 6)
  return v, G.fmt(v)
end

-- Values that fit a dtype (and read back exactly): for set/fill/full.
-- Always two draws, whatever the dtype.
function G.valid_value(dtype)
  local k, r = R(4), R(0, 1 << 30)
  if dtype == "bool" then return r % 2 == 0 end
  local range = G.INTRANGE[dtype]
  if range then
    if k == 1 then return range[1] end
    if k == 2 then return range[2] end
    local lo, hi = math.max(range[1], -300), math.min(range[2], 300)
    return lo + r % (hi - lo + 1)
  end
  -- multiples of 1/4 up to 50 are exact in float16, bfloat16, float32 and float64
  return (r % 401 - 200) / 4
end

-- A shape with a small number of elements (at most 256): 0-d, empty, size-1 dims.
function G.valid_shape(maxdims)
  local nd = G.pick({ 0, 1, 1, 2, 2, 2, 3, 3, 4, 5 })
  if maxdims and nd > maxdims then nd = maxdims end
  local shape, n = {}, 1
  for i = 1, nd do
    local s = G.pick({ 1, 1, 2, 2, 3, 3, 4, 0, 5 })
    if n * s > 256 then s = 1 end
    shape[i] = s
    n = n * s
  end
  return shape
end

return G
