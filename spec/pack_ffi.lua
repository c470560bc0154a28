-- string.pack and string.unpack for LuaJIT where lua-compat-5.3 gives none: its C half
-- (compat53.string) is a Linux build, which the Windows LuaJIT of stage 47 cannot load. Only
-- what the specs use: native or little-endian ("=", "<"; x86-64 is little-endian) floats,
-- doubles and integers of 1 to 8 bytes (f d b B h H i I j J, with a size after i and I),
-- through the FFI. spec/helper.lua installs them.
local ffi = require "ffi"

local CTYPES = {
  f = "float", d = "double", b = "int8_t", B = "uint8_t", h = "int16_t", H = "uint16_t",
  i = "int32_t", I = "uint32_t", j = "int64_t", J = "uint64_t",
  i1 = "int8_t", i2 = "int16_t", i4 = "int32_t", i8 = "int64_t",
  I1 = "uint8_t", I2 = "uint16_t", I4 = "uint32_t", I8 = "uint64_t",
}

local function ctypes_of(fmt)
  local list = {}
  for code, size in fmt:gmatch("(%S)(%d*)") do
    if code ~= "<" and code ~= "=" then
      local ctype = CTYPES[code .. size]
      if not ctype then error("pack_ffi: format '" .. code .. size .. "' is not supported", 3) end
      list[#list + 1] = ctype
    end
  end
  return list
end

local function pack(fmt, ...)
  local parts = {}
  for i, ctype in ipairs(ctypes_of(fmt)) do
    parts[i] = ffi.string(ffi.new(ctype .. "[1]", (select(i, ...))), ffi.sizeof(ctype))
  end
  return table.concat(parts)
end

local function unpack(fmt, s, pos)
  pos = pos or 1
  local values = {}
  for _, ctype in ipairs(ctypes_of(fmt)) do
    local size = ffi.sizeof(ctype)
    if pos + size - 1 > #s then error("pack_ffi: data string too short", 2) end
    local box = ffi.new(ctype .. "[1]")
    ffi.copy(box, s:sub(pos, pos + size - 1), size)
    values[#values + 1] = tonumber(box[0])
    pos = pos + size
  end
  values[#values + 1] = pos
  return (table.unpack or _G.unpack)(values)
end

return {pack = pack, unpack = unpack}
