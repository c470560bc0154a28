-- The builds of the computing loops (portable, AVX2, AVX-512) chosen at run time, and
-- DLPACK_LUA_CPU, which forces a lower one: every level the processor has computes the same
-- results, but for float32 exp, sigmoid, log, tanh, sin, cos and pow (the AVX-512 build has loops
-- of its own for them), which keep their bounds (VECTOR_MATH).
local dlpack = require "dlpack"
local support = require "support"

local LEVELS = {"baseline", "avx2", "avx512"}
local RANK = {baseline = 1, avx2 = 2, avx512 = 3}
-- the float32 functions with a loop of their own in the AVX-512 build, and their bounds in units in
-- the last place of the correctly rounded result
local VECTOR_MATH = {exp = 1, sigmoid = 2, log = 1, tanh = 2, sin = 2, cos = 2, pow = 1}

-- A chunk run in a new process under each level: every line "name hex-of-bytes".
local BATTERY = [[
local dlpack = require "dlpack"
print("level " .. dlpack.cpu())
local function hex(t)
  return (t:contiguous():tobytes():gsub(".", function(c) return string.format("%02x", c:byte()) end))
end
local special = {0 / 0, 1 / 0, -1 / 0, 0, -0.0, 1e-40, -1e-40, 88.72, 88.73, -103.9, -104.5, 1e30, -1e30}
local values = {}
for i = 1, 203 do values[i] = ((i * 7919) % 2001 - 1000) / 37 end -- [-27, 27]
for i, v in ipairs(special) do values[203 + i] = v end
for _, dt in ipairs({"float32", "float64"}) do
  local x = dlpack.tensor(values, dt)
  local y = dlpack.tensor(values, dt):flip({1})
  local strided = dlpack.tensor(values, dt):slice(1, 1, -1, 3)
  for _, f in ipairs({"exp", "log", "sin", "cos", "tanh", "sigmoid", "sqrt", "abs", "floor", "expm1", "log1p"}) do
    for n = 1, 40, 13 do print(f .. "_" .. dt .. "_" .. n, hex(dlpack[f](x:slice(1, 1, n)))) end
    print(f .. "_" .. dt, hex(dlpack[f](x)))
    print(f .. "_" .. dt .. "_strided", hex(dlpack[f](strided)))
  end
  for _, f in ipairs({"add", "mul", "div", "pow", "maximum", "eq", "lt", "ge", "atan2"}) do
    print(f .. "_" .. dt, hex(dlpack[f](x, y)))
    print(f .. "_" .. dt .. "_scalar", hex(dlpack[f](x, 0.75)))
  end
  for _, to in ipairs({"float16", "bfloat16", "int32", "uint8", "float32", "float64"}) do
    print("to_" .. to .. "_" .. dt, hex(x:to(to)))
  end
  print("sum_" .. dt, hex(dlpack.tensor({x:slice(1, 1, 203):sum()}, "float64")))
  print("max_" .. dt, hex(dlpack.tensor({x:slice(1, 1, 203):max(), x:slice(1, 1, 203):argmax()}, "float64")))
end
-- long reductions: the vector leaves of the pairwise sums, the vector checks of min/max blocks
-- (sorted input: a new best in every block), NaN, and the outer-dimension loops
dlpack.manual_seed(9)
for _, dt in ipairs({"float32", "float64"}) do
  local r = dlpack.randn({4099, 37}, dt)
  local nan = r:clone()
  nan:set(3000, 5, 0 / 0)
  local up = dlpack.sort(r:flatten())
  print("reduce_long_" .. dt, hex(dlpack.tensor({r:sum(), r:max(), r:argmax(), r:min(), r:argmin(), r:var(),
    nan:max(), nan:argmin(), up:max(), up:argmax(), up:flip({1}):argmin()}, "float64")),
    hex(r:sum(2)), hex(r:sum(1)), hex(r:max(1)), hex(r:argmin(2)), hex(r:std(1)))
end
-- softmax and log_softmax of float32 lines (the AVX-512 build's exp and sum of a line: the other
-- builds' bits), lengths around the vectors' 8 and 16, NaN, infinities and large values
dlpack.manual_seed(5)
for _, n in ipairs({7, 8, 9, 16, 17, 24, 33, 1001}) do
  local x = dlpack.mul(dlpack.randn({5, n}, "float32"), 30)
  x:set(2, 3, 0 / 0)
  x:set(3, 2, 1 / 0)
  x:set(4, 1, -1 / 0)
  print("softmax_" .. n, hex(dlpack.softmax(x, 2)), hex(dlpack.log_softmax(x, 2)))
end
-- min/max/argmin/argmax over an outer dimension (the outputs a row, compared lane by lane): 67
-- outputs (whole vectors and a tail), a column holding NaNs (the first one wins), one of equal
-- values (the first position), one of zeros of both signs (the first one's sign)
for _, dt in ipairs({"float32", "float64"}) do
  local rows = dlpack.randn({300, 67}, dt)
  rows:set(10, 3, 0 / 0)
  rows:set(200, 3, 0 / 0)
  rows:set(1, 4, 0 / 0)
  rows:narrow(2, 7, 1):fill(1.5)
  local zeros = {}
  for i = 1, 300 do zeros[i] = i % 2 == 0 and 0 or -tonumber("0.0") end
  rows:narrow(2, 8, 1):copy(dlpack.tensor(zeros, dt):reshape({300, 1}))
  print("reduce_outer_" .. dt, hex(rows:max(1)), hex(rows:argmax(1)), hex(rows:min(1)), hex(rows:argmin(1)),
        hex(rows:narrow(2, 2, 60):max(1)))
end
-- the same over the integer dtypes (AVX-512's compares, signed or unsigned): 131 outputs (two
-- 64-lane blocks of int8 and a tail), extremes, equal values in one column (the first position)
for _, dt in ipairs({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}) do
  local size, signed = #dlpack.zeros({1}, dt):tobytes(), dt:sub(1, 1) == "i"
  local top = signed and string.rep("\255", size - 1) .. "\127" or string.rep("\255", size) -- little-endian
  local bottom = signed and string.rep("\0", size - 1) .. "\128" or string.rep("\0", size)
  local rows = dlpack.randint(0, 100, {200, 131}, "int64"):to(dt)
  if signed then rows = rows - 50 end
  rows:narrow(1, 150, 1):narrow(2, 5, 1):copy(dlpack.frombytes(top, dt):reshape({1, 1}))
  rows:narrow(1, 30, 1):narrow(2, 6, 1):copy(dlpack.frombytes(bottom, dt):reshape({1, 1}))
  rows:narrow(1, 90, 1):narrow(2, 9, 1):copy(dlpack.frombytes(top, dt):reshape({1, 1}))
  rows:narrow(1, 91, 1):narrow(2, 9, 1):copy(dlpack.frombytes(bottom, dt):reshape({1, 1}))
  rows:narrow(2, 7, 1):fill(3)
  print("reduce_outer_" .. dt, hex(rows:max(1)), hex(rows:argmax(1)), hex(rows:min(1)), hex(rows:argmin(1)),
        hex(rows:narrow(2, 2, 100):max(1)))
end
-- float32 math against float64 rounded once (the correctly rounded result but for
-- rare ties), in units in the last place: the distance of the bit patterns (all results >= 0)
local function bits(t) return dlpack.frombytes(t:tobytes(), "int32"):to("int64") end
-- bit patterns as sign and magnitude, so that the distance counts across zero too
local function signed(b) return dlpack.where(dlpack.lt(b, 0), -2147483648 - b, b) end
local function ulps(got, want) return dlpack.abs(signed(bits(got)) - signed(bits(want))):max() end
local dense = dlpack.linspace(-88.7, 89, 200001, "float64"):to("float32")
for _, f in ipairs({"exp", "sigmoid", "log", "tanh", "sin", "cos"}) do
  local x = f == "log" and dlpack.abs(dense) or dense
  local got, want = dlpack[f](x), dlpack[f](x:to("float64")):to("float32")
  print("ulps_" .. f, string.format("%d", ulps(got, want)))
end
-- pow on (0, 89] (and 0) with exponents in [-20, 20], overflow and subnormal results included
local base, power = dlpack.abs(dense), dlpack.linspace(-20, 20, 200001, "float64"):to("float32"):flip({1})
print("ulps_pow", string.format("%d", ulps(dlpack.pow(base, power),
                                           dlpack.pow(base:to("float64"), power:to("float64")):to("float32"))))
-- pow's lanes that the AVX-512 loop leaves to the C library (x <= 0, inf or NaN; y inf or NaN),
-- and results a float32 holds exactly: the same bits in every build
local px = dlpack.tensor({-2, -2, -0.0, 0, 0, 1, 1, 0 / 0, 1 / 0, -1 / 0, 2, 0.5, 4, 9, 3, 10, 2, -8, 5, 16}, "float32")
local py = dlpack.tensor({3, 0.5, -1, 0, -2, 0 / 0, 1 / 0, 0, -1, 3, 1 / 0, -1 / 0, 0.5, 0.5, 2, 5, -149, 0.5, 0, 0.25},
                         "float32")
print("pow_special_float32", hex(dlpack.pow(px, py)), hex(dlpack.pow(px, 2)),
      hex(dlpack.pow(2, dlpack.tensor({3, -149, 0, 1 / 0, 0 / 0, -1 / 0, 10, -3}, "float32"))))
local i = dlpack.arange(-300, 300, "int32")
print("int_add", hex(dlpack.add(i, i:flip({1}))), hex(dlpack.lt(i, 7)), hex(i:to("float32")))
local z = dlpack.tensor({1, 2, 3, 4, -1.5, 0.25}, "float64"):to("complex128")
print("complex_div", hex(dlpack.div(z, z:flip({1}))), hex(dlpack.exp(z)))
-- transposes move the bits as they are, through the AVX2 build's register blocks (8x8 of 4
-- bytes, 4x4 of 8, 2x2 of 16) or the baseline's: a 64x64 tile, blocks and elements left over
local counts = dlpack.arange(0, 70 * 67, "float64"):mul(1.25):reshape({70, 67})
for _, dt in ipairs({"float32", "float64", "complex128"}) do
  print("transpose_" .. dt, hex(counts:to(dt):transpose(1, 2)))
end
]]

local function run(level)
  local out = support.run_lua(BATTERY, {DLPACK_LUA_CPU = level})
  local lines = {}
  local got = out:match("^level (%w+)")
  assert(got, out)
  for name, bytes in out:gmatch("\n(%S+)\t([^\n]*)") do lines[name] = bytes end
  return got, lines
end

describe("the builds of the loops chosen at run time", function()
  local level, detected = dlpack.cpu()

  it("dlpack.cpu() names the level in use and the one the processor allows", function()
    assert.is_truthy(RANK[level], level)
    assert.is_truthy(RANK[detected], detected)
    assert.is_true(RANK[level] <= RANK[detected])
  end)

  it("DLPACK_LUA_CPU lowers the level, never raises it; an unknown value changes nothing", function()
    if support.WINDOWS then return pending(support.NOT_WINDOWS) end
    -- the child's processor as the child sees it (under valgrind, this process is shown no AVX-512)
    local out = support.run_lua('print(require("dlpack").cpu())', {DLPACK_LUA_CPU = "sse9"})
    local seen = out:match("^(%w+)\t")
    assert.is_truthy(RANK[seen], out)
    assert.equal(seen .. "\t" .. seen, out:match("^%w+\t%w+"))
    for _, want in ipairs(LEVELS) do
      out = support.run_lua('print(require("dlpack").cpu())', {DLPACK_LUA_CPU = want})
      local expect = RANK[want] <= RANK[seen] and want or seen
      assert.equal(expect .. "\t" .. seen, out:match("^%w+\t%w+"))
    end
  end)

  local reference
  for _, want in ipairs(LEVELS) do
    local name = "computes what the portable build computes under DLPACK_LUA_CPU=" .. want
    if RANK[want] > RANK[detected] then
      pending(name .. ": this processor allows " .. detected .. " at most")
    elseif support.WINDOWS then
      pending(name .. ": " .. support.NOT_WINDOWS)
    else
      it(name, function()
        if not reference then
          local got
          got, reference = run("baseline")
          assert.equal("baseline", got)
        end
        local got, lines = run(want)
        assert.equal(want, got)
        local count = 0
        for key, bytes in pairs(reference) do
          count = count + 1
          assert(lines[key], key .. " missing")
          -- only float32 exp, sigmoid, log, tanh, sin, cos and pow may differ (in their last
          -- places: the bounds are checked below)
          local f = key:match("^(%a+)_float32") or key:match("^ulps_(%a+)$")
          if lines[key] ~= bytes and not VECTOR_MATH[f] then error(key .. " differs") end
        end
        assert.is_true(count > 150 and reference.reduce_long_float64 ~= nil)
        -- the bounds docs/api.md gives, on 200001 points of [-88.7, 89] (log: of their magnitudes)
        for f, bound in pairs(VECTOR_MATH) do
          assert.is_true(tonumber(lines["ulps_" .. f]) <= bound, f .. ": " .. lines["ulps_" .. f])
        end
      end)
    end
  end
end)
