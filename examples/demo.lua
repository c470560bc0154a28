-- examples/demo.lua: what dlpack for Lua is for, in one page.  Run: make demo
local dlpack = require "dlpack"

local function show(label, value) print(("%-44s %s"):format(label, tostring(value))) end
local function section(title) print(("\n== %s"):format(title)) end
local function rows(x)                  -- {{1.0, 2.0}, {3.0, 4.0}}
  local r = {}
  for i, row in ipairs(x:totable()) do r[i] = "{" .. table.concat(row, ", ") .. "}" end
  return "{" .. table.concat(r, ", ") .. "}"
end

section("A tensor")
local t = dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "float32")
print(t)
show("shape, strides, dtype, device", ("{%s}  {%s}  %s  %s"):format(
  table.concat(t.shape, ", "), table.concat(t.strides, ", "), t.dtype, t.device))

section("Views share memory (no copy)")
local tt = t:transpose(1, 2)            -- {3, 2}, strides {1, 3}
local col = t:slice(2, 1, 3, 2)         -- columns 1 and 3: inclusive bounds, step 2
tt[3][2] = 60                           -- writes element (2, 3) of t
col:set(1, 1, 10)                       -- writes element (1, 1) of t
show("t after writing through two views", rows(t))
show("transpose strides / contiguous?", ("{%s} / %s"):format(table.concat(tt.strides, ", "), tt:is_contiguous()))

section("Exchange through a capsule (zero copy)")
local cap = dlpack.to_dlpack(t)         -- what a C library or another lua_State consumes
local info = dlpack.capsule_info(cap)
show("capsule: versioned, consumed", ("%s, %s"):format(info.versioned, info.consumed))
local u = dlpack.from_dlpack(cap)       -- the consumer's tensor
show("same data_ptr as the producer's?", u:data_ptr() == t:data_ptr())
u[1][1] = -1
show("producer sees the consumer's write: t[1][1]", t[1][1])

section("Consumed exactly once")
local ok, err = pcall(dlpack.from_dlpack, cap)
show("second from_dlpack(cap) fails", not ok)
show("  with", err)

section("Read-only travels with the tensor")
local ro = dlpack.from_dlpack(t:as_readonly())   -- through the __dlpack protocol
show("imported readonly", ro.readonly)
ok, err = pcall(function() ro[1][1] = 0 end)
show("writing it fails", not ok and err)
err = select(2, pcall(dlpack.to_dlpack, ro, {max_version = {0, 8}}))  -- legacy capsules cannot say read-only
show("legacy export is a buffer error?", dlpack.is_buffer_error(err))
show("  with", err)
show("...but a bad argument is not", dlpack.is_buffer_error(select(2, pcall(dlpack.zeros, "nope"))))

section("Lifetime")
local view = t:narrow(1, 2, 1)
t:release()                             -- this tensor lets go; the view keeps the memory
show("view still reads", rows(view))
show("t after release", select(2, pcall(function() return t.shape end)))

print("\nC hosts: examples/host.c.  PyTorch and NumPy in one process: spec/peers.")
