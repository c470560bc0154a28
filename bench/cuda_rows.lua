-- bench/cuda_rows.lua: the CUDA bench's rows that PyTorch has a counterpart for, written once
-- for their two hosts:
--   build/bench_cuda (bench/cuda.c, part of `make bench`) times them alone and prints each one's
--     time and throughput;
--   bench/cuda_torch.py times them against torch in the same process, on the same GPU (Lua runs
--     inside Python through build/gpu/libluapeer.so), and prints ratios.
-- `dofile` returns a table: rows[i] = {key =, name =, work =, unit =, prepare = fn(), run =
-- fn(reps)}. prepare makes the inputs on cuda:0 (on the host, then copied) and runs the operation
-- once: when that raises (an operation the module does not have on CUDA tensors yet), the host
-- prints the row as skipped with the message. run(reps) does the operation reps times and waits
-- for the device. `work` is what one operation does, in `unit` (FLOP or bytes moved), for a
-- throughput; `per_call` rows report the time of one call instead.
-- DLPACK_BENCH_CUDA_SCALE (default 1) divides every side of the inputs: a quick run on the
-- fake driver checks the rows themselves.
local dlpack = require "dlpack"

local scale = tonumber(os.getenv("DLPACK_BENCH_CUDA_SCALE") or "") or 1
local DEV = "cuda:0"
local function side(n) return math.max(1, n // scale) end

local function sync() dlpack.cuda.legacy_stream:synchronize() end -- the operations run there

local rows = {}
rows.sizes = {} -- filled below: the sides bench/cuda_torch.py gives torch's inputs
local function row(key, name, work, unit, prepare, op)
  local state
  rows[#rows + 1] = {
    key = key, name = name, work = work, unit = unit,
    prepare = function()
      state = prepare()
      op(state)
      sync()
    end,
    run = function(reps)
      for _ = 1, reps do op(state) end
      sync()
    end,
    release = function() state = nil collectgarbage() collectgarbage() end,
  }
end

local N = side(8192)
local function square(dtype)
  return {a = dlpack.full({N, N}, 0.5, dtype, DEV), b = dlpack.full({N, N}, 0.25, dtype, DEV)}
end
local function matmul(s) dlpack.matmul(s.a, s.b):release() end -- a new result each time, as torch's a @ b
row("cuda_matmul_f32", string.format("matmul %d^3 float32 (no TF32)", N), 2 * N ^ 3, "FLOP",
    function() return square("float32") end, matmul)
row("cuda_matmul_bf16", string.format("matmul %d^3 bfloat16", N), 2 * N ^ 3, "FLOP",
    function() return square("bfloat16") end, matmul)

local M = side(16384) * side(16384) -- 256M elements, 1 GiB of float32
local function vectors()
  local pattern = {}
  for i = 1, 64 do pattern[i] = (i - 1) / 16 - 2 end
  local a = dlpack.tensor(pattern, "float32"):expand({M // 64, 64}):contiguous():view({M // 64 * 64})
  return {a = a:to(DEV), b = dlpack.full({M // 64 * 64}, 0.75, "float32", DEV),
          c = dlpack.empty({M // 64 * 64}, "float32", DEV)}
end
local elements = M // 64 * 64
local count = elements >= 1 << 20 and (elements >> 20) .. "M" or tostring(elements)
row("cuda_add_f32_out", "add(a, b, {out = c}) float32 " .. count, 12 * elements, "B",
    vectors, function(s) dlpack.add(s.a, s.b, {out = s.c}) end)
row("cuda_exp_f32_out", "exp(a, {out = c}) float32 " .. count, 8 * elements, "B",
    vectors, function(s) dlpack.exp(s.a, {out = s.c}) end)
row("cuda_f32_to_f16", "t:to('float16') float32 " .. count, 6 * elements, "B",
    vectors, function(s) s.a:to("float16"):release() end)
row("cuda_transpose_copy", string.format("t:transpose(1, 2):contiguous() %d^2 float32", N), 8 * N * N, "B",
    function() return square("float32") end, function(s) s.a:transpose(1, 2):contiguous():release() end)

local H, W = side(1080), side(1920)
row("cuda_normalize_frame", string.format("normalise a %dx%dx3 uint8 frame to float32 CHW", H, W), H * W * 3 * 5, "B",
    function()
      local bytes = {}
      for i = 0, 255 do bytes[#bytes + 1] = string.char((i * 37) % 256) end
      bytes = table.concat(bytes):rep(H * W * 3 // 256 + 1):sub(1, H * W * 3)
      return {frame = dlpack.frombytes(bytes, "uint8", {H, W, 3}):to(DEV),
              mean = dlpack.tensor({{{0.485}}, {{0.456}}, {{0.406}}}, "float32"):to(DEV),
              std = dlpack.tensor({{{0.229}}, {{0.224}}, {{0.225}}}, "float32"):to(DEV)}
    end,
    function(s)
      local x = s.frame:permute({3, 1, 2}):to("float32")
      local _ = (x / 255 - s.mean) / s.std
    end)

row("cuda_add_small", "add(a, b) of 3 float32 elements, per call from Lua", 1, "call",
    function()
      return {a = dlpack.tensor({1, 2, 3}, "float32"):to(DEV), b = dlpack.tensor({4, 5, 6}, "float32"):to(DEV)}
    end,
    function(s) local _ = dlpack.add(s.a, s.b) end)

rows.sizes = {n = N, elements = elements, height = H, width = W}
local blas, why = dlpack.cuda.blas()
rows.route = blas and ("float products through cuBLAS (" .. blas .. ")")
             or ("float products through the module's own kernel: " .. tostring(why))
return rows
