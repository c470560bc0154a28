--- dlpack.ffi (LuaJIT only): a typed FFI pointer to a tensor's first element, so that element
-- loops run at C speed.
--
--   local dlffi = require "dlpack.ffi"
--   local p, strides = dlffi.pointer(t)    -- e.g. `float *` and {s1, s2, ...} in elements
--   for i = 0, n - 1 do s = s + p[i * strides[1]] end
--
-- The pointer is valid while t's memory is: the returned cdata keeps t from being collected (its
-- finalizer refers to t), but pointers derived from it by arithmetic do not, and t:release()
-- ends its validity as it does t's. Only host memory (cpu, pinned, managed) is readable. A
-- read-only tensor gives a pointer to const elements (a write through it raises).
-- PUC Lua has no ffi module: say what is needed rather than listing the whole search path.
local has_ffi, ffi = pcall(require, "ffi")
if not has_ffi then error("dlpack.ffi needs LuaJIT (its ffi module); this is " .. _VERSION, 2) end
local dlpack = require "dlpack"

local M = {}

-- What getmetatable gives for every tensor (a read-only view); scripts cannot set it on a
-- userdata of their own (setmetatable takes tables only).
local TENSOR = getmetatable(dlpack.zeros({}))

-- The C type of one element per dtype; float16 and bfloat16 are their raw 16 bits, the 8/6/4-bit
-- floats their bytes.
M.ctypes = {
  bool = "bool", int8 = "int8_t", int16 = "int16_t", int32 = "int32_t", int64 = "int64_t",
  uint8 = "uint8_t", uint16 = "uint16_t", uint32 = "uint32_t", uint64 = "uint64_t",
  float16 = "uint16_t", bfloat16 = "uint16_t", float32 = "float", float64 = "double",
  complex64 = "complex float", complex128 = "complex double",
}

-- A read-only tensor's pointer points to const elements: its memory may be a read-only mapping
-- (dlpack.load's mmap), where a write through a plain pointer would kill the process.
local pointer_types = {[false] = {}, [true] = {}}
local function pointer_type(dtype, readonly)
  local ct = pointer_types[readonly][dtype]
  if not ct then
    ct = ffi.typeof((readonly and "const " or "") .. (M.ctypes[dtype] or "uint8_t") .. " *")
    pointer_types[readonly][dtype] = ct
  end
  return ct
end

local HOST = { cpu = true, cuda_host = true, cuda_managed = true, rocm_host = true }

--- pointer(t) -> ptr, strides: ptr (cdata) to t's first element, typed per t.dtype; strides
-- in elements, one per dimension (a Lua table, 1-based as t.strides).
function M.pointer(t)
  if type(t) ~= "userdata" or getmetatable(t) ~= TENSOR then
    error("bad argument #1 to 'dlpack.ffi.pointer' (dlpack.Tensor expected, got " .. type(t) .. ")", 2)
  end
  local live, device = pcall(function() return t.device end) -- a tensor's field raises only once released
  if not live then error("bad argument #1 to 'dlpack.ffi.pointer' (tensor was released)", 2) end
  if not HOST[device:match("^[%a_]+")] then
    error("dlpack.ffi.pointer: the tensor is on " .. device .. ", which the CPU cannot read", 2)
  end
  local p = ffi.cast(pointer_type(t.dtype, t.readonly), t:data_ptr())
  return ffi.gc(p, function() return t end), t.strides
end

return M
