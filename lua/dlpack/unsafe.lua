--- dlpack.unsafe: raw managed-tensor pointers (for LuaJIT FFI and C glue).
-- Kept out of `dlpack` so that a host running untrusted scripts can leave it out.
-- The functions live in the same C library as `dlpack.core`, so both share one
-- capsule table; this file only opens that library's second entry point.
require "dlpack"
local path = assert(package.searchpath("dlpack.core", package.cpath))
local open = assert(package.loadlib(path, "luaopen_dlpack_unsafe"))
return open()
