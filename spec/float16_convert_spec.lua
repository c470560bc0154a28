-- float16 <-> float32 and float16 -> float64 conversions: the F16C loops (processors with AVX2 and
-- F16C) give the bits of the portable rules (src/core/convert_rules.h) for all 65536 float16
-- values, for float32 values around every float16 and every rounding midpoint, for random float32
-- bit patterns, and for NaN payloads (signalling and quiet, both signs), compared with a process
-- under DLPACK_LUA_CPU=baseline. Contiguous rows (the vector loops, their tails) and strided ones.
local dlpack = require "dlpack"
local support = require "support"

-- Writes every conversion's bytes to the file named by the first line's path, in order.
local SCRIPT = [[
local dlpack = require "dlpack"
local path = ...
local out = assert(io.open(path, "wb"))
local function u32_as_f32(i) return dlpack.frombytes(i:to("uint32"):tobytes(), "float32") end
local function f32_bits(f) return dlpack.frombytes(f:contiguous():tobytes(), "uint32"):to("int64") end
-- all 65536 float16 values, in the order of their bits
local halves = dlpack.frombytes(dlpack.arange(0, 65536, "int64"):to("uint16"):tobytes(), "float16")
local f = halves:to("float32")
out:write(f:tobytes(), halves:flip({1}):to("float32"):tobytes(), halves:slice(1, 2, -1, 3):to("float32"):tobytes())
out:write(dlpack.empty({65536}, "float32"):copy(halves):tobytes())
out:write(halves:narrow(1, 3, 65533):to("float32"):tobytes()) -- rows not a multiple of 8 long
-- float16 -> float64 (F16C to float32, then exact): the same values, every layout
out:write(halves:to("float64"):tobytes(), halves:flip({1}):to("float64"):tobytes(),
          halves:narrow(1, 3, 65533):to("float64"):tobytes(), dlpack.empty({65536}, "float64"):copy(halves):tobytes())
-- float32 patterns: each float16's image and its neighbours, the midpoints to the next float16
-- (normal ones: 4096 patterns up) and theirs, the subnormal midpoints, random patterns, NaNs
local b = f32_bits(f)
local parts = {}
for _, j in ipairs({-1, 0, 1, 4095, 4096, 4097}) do parts[#parts + 1] = dlpack.add(b, j) end
local mids = f32_bits(dlpack.mul(dlpack.add(dlpack.arange(0, 2048, "float64"), 0.5), 2 ^ -24):to("float32"))
for _, j in ipairs({-1, 0, 1}) do parts[#parts + 1] = dlpack.add(mids, j) end
dlpack.manual_seed(2024)
parts[#parts + 1] = dlpack.randint(0, 2 ^ 32, {400000}, "int64")
parts[#parts + 1] = dlpack.tensor({0x7F800001, 0x7FBFFFFF, 0x7FC00000, 0x7FC00001, 0x7FFFFFFF, 0xFF800001,
  0xFFC00000, 0xFFFFFFFF, 0x7F802000, 0x7FA00000, 0x7F800000, 0xFF800000, 0x7F7FFFFF, 0x477FEFFF, 0x477FF000,
  0x477FE000, 0xC77FF000, 0x00000001, 0x007FFFFF, 0x80000001, 0x33000000, 0x33000001, 0x32FFFFFF, 0x387FC000,
  0x38800000, 0x387FFFFF, 0, 0x80000000}, "int64")
local x = u32_as_f32(dlpack.cat(parts))
out:write(x:to("float16"):tobytes(), x:flip({1}):to("float16"):tobytes(), x:slice(1, 2, -1, 5):to("float16"):tobytes())
out:write(dlpack.empty({x:numel()}, "float16"):copy(x):tobytes(), x:narrow(1, 2, 999):to("float16"):tobytes())
-- computing on float16 converts through float32 rows (reductions, clamps of NaN-free values)
local finite = halves:narrow(1, 1, 31744) -- 0 to 65504
out:write(dlpack.tensor({finite:sum(), finite:max(), halves:argmax()}, "float64"):tobytes())
out:close()
print(dlpack.cpu())
]]

local function run(level)
  local path = support.tmpname()
  local env = level and {DLPACK_LUA_CPU = level} or {}
  local printed = support.run_lua("package.path = " .. string.format("%q", package.path) .. "; package.cpath = " ..
    string.format("%q", package.cpath) .. "\n" .. SCRIPT:gsub("local path = %.%.%.", "local path = " ..
    string.format("%q", path)), env)
  local f = assert(io.open(path, "rb"), printed)
  local bytes = f:read("*a")
  f:close()
  os.remove(path)
  return printed:match("^(%w+)"), bytes, printed
end

describe("float16 <-> float32 conversions", function()
  it("follow the portable rules for NaN payloads, rounding ties, overflow and subnormals", function()
    local function half_bits(values)
      local h = dlpack.frombytes(dlpack.tensor(values, "int64"):to("uint32"):tobytes(), "float32"):to("float16")
      return dlpack.frombytes(h:tobytes(), "uint16"):to("int64"):totable()
    end
    assert.are.same({0x7E00, 0x7E00, 0xFE00, 0x7C00, 0x7BFF, 0xFC00, 0x0001, 0x0000, 0x0001, 0x0400, 0x7C00},
      half_bits({0x7F800001, 0x7FC00001, 0xFFFFFFFF, 0x477FF000, 0x477FEFFF, 0xC77FF000, 0x33000001,
        0x33000000, 0x33400000, 0x387FF000, 0x7F800000}))
    -- float16 NaNs keep their bits: a signalling one stays signalling, payloads move up 13 places
    local h = dlpack.frombytes(dlpack.tensor({0x7C01, 0xFDFF, 0x7E00, 0x7FFF, 0x0001, 0x8400}, "int64")
      :to("uint16"):tobytes(), "float16")
    local f = dlpack.frombytes(h:to("float32"):tobytes(), "uint32"):to("int64"):totable()
    assert.are.same({0x7F802000, 0xFFBFE000, 0x7FC00000, 0x7FFFE000, 0x33800000, 0xB8800000}, f)
  end)

  local spawn = (support.WINDOWS or os.getenv("LD_PRELOAD")) and pending or it
  spawn("give the portable build's bits for all 65536 float16 values and float32 edge cases", function()
    local base_level, base = run("baseline")
    assert.are.equal("baseline", base_level)
    local level, bytes, printed = run(nil)
    assert.is_truthy(level, printed)
    assert.is_true(#base > 65536 * 4 * 4 and #base == #bytes)
    if level == "baseline" then return pending("this processor has no AVX2: only the portable loops run") end
    if bytes ~= base then
      for i = 1, #base do
        if base:byte(i) ~= bytes:byte(i) then error("byte " .. i .. " differs from the portable build's") end
      end
    end
  end)
end)
