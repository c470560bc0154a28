--- dlpack.unsafe: raw pointers in and out (for LuaJIT FFI, engines' buffers and C glue).
-- Kept out of `dlpack` so that a host running untrusted scripts can leave it out: see
-- lua/dlpack/entry.lua for how it is opened.
local unsafe = require "dlpack.entry"("dlpack.unsafe", "dlpack_lua_open_unsafe")

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
