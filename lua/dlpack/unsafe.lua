--- dlpack.unsafe: raw pointers in and out (for LuaJIT FFI, engines' buffers and C glue).
-- Kept out of `dlpack` so that a host running untrusted scripts can leave it out.
-- The functions live in the same C library as `dlpack.core`, so both share one
-- capsule table; this file only opens that library's second entry point,
-- `dlpack_lua_open_unsafe`, through package.loadlib. That entry point is not
-- named luaopen_*, so `require` alone never reaches it: a sandbox that removes
-- package.loadlib leaves dlpack.unsafe out (README, "Safety").
require "dlpack"
if type(package.loadlib) ~= "function" then
  error("dlpack.unsafe needs package.loadlib, which this Lua does not offer (a sandbox leaves "
        .. "dlpack.unsafe out; a host that links the module opens it with dlpack_lua_open_unsafe)", 2)
end

-- package.searchpath is 5.2+ (LuaJIT has it); Lua 5.1 gets the same search here.
local function searchpath(name, path)
  if package.searchpath then return package.searchpath(name, path) end
  local file = name:gsub("%.", "/")
  for template in path:gmatch("[^;]+") do
    local candidate = template:gsub("%?", file)
    local f = io.open(candidate, "rb")
    if f then f:close(); return candidate end
  end
end

local path = assert(searchpath("dlpack.core", package.cpath))
local open = assert(package.loadlib(path, "dlpack_lua_open_unsafe"))
local unsafe = open()

-- LuaJIT: wrap also takes an FFI pointer or array (cdata), as the address it points to.
local has_ffi, ffi = pcall(require, "ffi")
if has_ffi then
  local wrap = unsafe.wrap
  unsafe.wrap = function(ptr, ...)
    if type(ptr) == "cdata" then ptr = tonumber(ffi.cast("uintptr_t", ptr)) end
    return wrap(ptr, ...)
  end
end

return unsafe
