-- make bench: costs of the module's hot paths, each as a ratio to a baseline measured in
-- the same run (never as absolute goals: machines differ). Run with the in-tree build on
-- the paths (the Makefile sets LUA_PATH/LUA_CPATH).
local dlpack = require "dlpack"

local clock = os.clock
local function per_op(n, fn)
  fn(math.max(1, n // 100)) -- warm up
  local best = math.huge
  for _ = 1, 5 do
    local t0 = clock()
    fn(n)
    best = math.min(best, clock() - t0)
  end
  return best / n
end

local function report(name, cost, base, base_name)
  print(string.format("%-44s %9.1f ns  %6.2fx %s", name, cost * 1e9, cost / base, base_name))
end

local t = dlpack.zeros({64, 64}, "float32")
local v = dlpack.zeros({4096}, "float64")
local lua_table = {}
for i = 1, 4096 do lua_table[i] = 0.0 end

-- Baselines: a view (one userdata, no exchange) and a Lua table read.
local view = per_op(200000, function(n) for _ = 1, n do local _ = t:narrow(1, 1, 1) end end)
local table_read = per_op(2000000, function(n)
  local s = 0.0
  for i = 1, n do s = s + lua_table[(i & 4095) + 1] end
  return s
end)

print("baselines: a view " .. string.format("%.1f ns", view * 1e9) ..
      ", a Lua table read " .. string.format("%.1f ns", table_read * 1e9))

report("to_dlpack + from_dlpack (versioned)", per_op(200000, function(n)
  for _ = 1, n do local _ = dlpack.from_dlpack(dlpack.to_dlpack(t)) end
end), view, "a view")
report("to_dlpack + from_dlpack (legacy)", per_op(200000, function(n)
  local legacy = {max_version = {0, 8}}
  for _ = 1, n do local _ = dlpack.from_dlpack(dlpack.to_dlpack(t, legacy)) end
end), view, "a view")
report("from_dlpack(tensor) (protocol shortcut)", per_op(200000, function(n)
  for _ = 1, n do local _ = dlpack.from_dlpack(t) end
end), view, "a view")
local producer = setmetatable({}, {
  __dlpack_device = function() return 1, 0 end,
  __dlpack = function(_, opts) return dlpack.to_dlpack(t, opts) end,
})
report("from_dlpack(Lua producer)", per_op(100000, function(n)
  for _ = 1, n do local _ = dlpack.from_dlpack(producer) end
end), view, "a view")
report("t[i] read (1-d float64)", per_op(2000000, function(n)
  local s = 0.0
  for i = 1, n do s = s + v[(i & 4095) + 1] end
  return s
end), table_read, "a Lua table read")
report("t:get(i, j) read (2-d float32)", per_op(1000000, function(n)
  local s = 0.0
  for i = 1, n do s = s + t:get((i & 63) + 1, 1) end
  return s
end), table_read, "a Lua table read")
local big_src, big_dst = dlpack.zeros({1024, 1024}, "float32"), dlpack.zeros({1024, 1024}, "float32")
local memcpy_like = per_op(50, function(n) for _ = 1, n do big_dst:copy(big_src) end end)
report("copy 4 MiB transposed (strided)", per_op(10, function(n)
  local tt = big_src:transpose(1, 2)
  for _ = 1, n do big_dst:copy(tt) end
end), memcpy_like, "a contiguous 4 MiB copy")
report("copy 4 MiB float32 -> float64 (convert)", per_op(10, function(n)
  local d = dlpack.zeros({1024, 1024}, "float64")
  for _ = 1, n do d:copy(big_src) end
end), memcpy_like, "a contiguous 4 MiB copy")

-- CUDA (bench/cuda.c, built as build/bench_cuda by `make bench`): copy bandwidth from pinned
-- memory as a ratio to cuMemcpy*Async and the cost of an exchange with a stream wait; it
-- prints why it skips on a machine without a GPU.
local cuda_bench = (os.getenv("DLPACK_BUILD") or "build") .. "/bench_cuda"
local exe = io.open(cuda_bench, "rb")
if exe then
  exe:close()
  io.stdout:flush()
  os.execute(cuda_bench)
else
  print("cuda: skipped (" .. cuda_bench .. " is not built)")
end
