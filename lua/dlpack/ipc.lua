--- dlpack.ipc: tensors shared between processes of one machine without copying (docs/ipc.md).
-- Kept out of `dlpack` as dlpack.unsafe is (it opens sockets and maps other processes'
-- memory): see lua/dlpack/entry.lua for how it is opened.
return require "dlpack.entry"("dlpack.ipc", "dlpack_lua_open_ipc")
