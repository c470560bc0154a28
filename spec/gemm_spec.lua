-- The module's own matrix-product kernel (src/compute/gemm.c), forced by DLPACK_LUA_BLAS=none in a
-- child process, once for each of its builds (DLPACK_LUA_GEMM limits the widest one the processor
-- runs: AVX-512, AVX2 or the portable one), against a plain triple loop in Lua: random floats
-- within a bound of their rounding, integers exactly, on shapes that are not multiples of the
-- kernel's tiles and blocks and on operands in every layout.
local support = require "support"

-- The chunk the child runs: prints one line per failing product, then "checked N".
local CHECKS = [==[
local dlpack = require "dlpack"
assert(dlpack.blas() == nil, "a BLAS computes")
dlpack.manual_seed(7)
local failures, checked = {}, 0

-- elementwise reference: r[i][j] = sum over k of a[i][k] * b[k][j], and the sum of the magnitudes
local function reference(a, b)
  local m, k, n = #a, #b, #b[1]
  local r, mag = {}, {}
  for i = 1, m do
    r[i], mag[i] = {}, {}
    for j = 1, n do
      local s, t = 0, 0
      for q = 1, k do
        local p = a[i][q] * b[q][j]
        s, t = s + p, t + math.abs(p)
      end
      r[i][j], mag[i][j] = s, t
    end
  end
  return r, mag
end

local EPS = {float32 = 2 ^ -24, float64 = 2 ^ -53}

-- a's data in layouts the kernel reads in place or packs
local LAYOUTS = {
  contiguous = function(t) return t end,
  transposed = function(t) return t:transpose(1, 2):contiguous():transpose(1, 2) end,
  strided = function(t)
    local m, k = t.shape[1], t.shape[2]
    local big = dlpack.zeros({2 * m, 3 * k}, t.dtype)
    big:slice(1, 1, 2 * m, 2):slice(2, 1, 3 * k, 3):copy(t)
    return big:slice(1, 1, 2 * m, 2):slice(2, 1, 3 * k, 3)
  end,
  flipped = function(t) return t:flip({1, 2}):contiguous():flip({1, 2}) end,
}

local function check(m, k, n, dt, la, lb)
  local a, b
  if EPS[dt] then
    a, b = dlpack.rand({m, k}, dt) - 0.5, dlpack.rand({k, n}, dt) - 0.5
  else
    a = dlpack.randint(-1000, 1000, {m, k}, "int64"):to(dt)
    b = dlpack.randint(-1000, 1000, {k, n}, "int64"):to(dt)
  end
  local r = dlpack.matmul(LAYOUTS[la](a), LAYOUTS[lb](b))
  checked = checked + 1
  local shape = table.concat(r.shape, "x")
  if shape ~= m .. "x" .. n then
    failures[#failures + 1] = string.format("%s %dx%dx%d %s.%s: shape %s", dt, m, k, n, la, lb, shape)
    return
  end
  local want, mag = reference(a:to("float64"):totable(), b:to("float64"):totable())
  local got = r:to("float64"):totable()
  for i = 1, m do
    for j = 1, n do
      local bound = EPS[dt] and 2 * (k + 2) * EPS[dt] * mag[i][j] or 0
      if math.abs(got[i][j] - want[i][j]) > bound then
        failures[#failures + 1] = string.format("%s %dx%dx%d %s.%s: (%d, %d) is %.17g, not %.17g", dt, m, k, n,
                                                la, lb, i, j, got[i][j], want[i][j])
        return
      end
    end
  end
end

-- sizes around the tiles (MR up to 12, NR up to 32), the MC, NC and KC blocks (144, 2048, 256)
local SHAPES = {{1, 1, 1}, {1, 37, 1}, {1, 300, 45}, {45, 300, 1}, {13, 7, 33}, {12, 256, 32}, {25, 257, 65},
                {145, 31, 17}, {3, 5, 2049}, {97, 513, 70}}
for _, dt in ipairs({"float32", "float64", "int32", "int64"}) do
  for _, s in ipairs(SHAPES) do check(s[1], s[2], s[3], dt, "contiguous", "contiguous") end
  for _, la in ipairs({"contiguous", "transposed", "strided", "flipped"}) do
    for _, lb in ipairs({"contiguous", "transposed", "strided", "flipped"}) do check(19, 41, 35, dt, la, lb) end
  end
end
-- the vector forms and a broadcast batch
local v = dlpack.rand({300}, "float32")
local m = dlpack.rand({300, 37}, "float32")
local x = dlpack.matmul(v, m)
local y = dlpack.matmul(v:view(1, 300), m):view(37)
checked = checked + 1
if not dlpack.equal(x, y) then failures[#failures + 1] = "1-d by 2-d differs from 1 x k by k x n" end
local batch = dlpack.matmul(dlpack.rand({3, 1, 13, 29}, "float64"), dlpack.rand({4, 29, 31}, "float64"))
checked = checked + 1
if table.concat(batch.shape, "x") ~= "3x4x13x31" then failures[#failures + 1] = "batch shape" end
-- k = 0 and empty products
checked = checked + 1
local z = dlpack.matmul(dlpack.zeros({5, 0}, "float32"), dlpack.zeros({0, 7}, "float32"))
if table.concat(z.shape, "x") ~= "5x7" or dlpack.sum(dlpack.abs(z)) ~= 0 then
  failures[#failures + 1] = "k = 0 is not zeros"
end
checked = checked + 1
local e = dlpack.matmul(dlpack.zeros({0, 4}, "float64"), dlpack.zeros({4, 9}, "float64"))
if table.concat(e.shape, "x") ~= "0x9" then failures[#failures + 1] = "m = 0" end
for _, f in ipairs(failures) do print(f) end
print("checked " .. checked)
]==]

-- Products large enough to split their rows into parts (each packing its own blocks of A, all
-- reading one packed block of B): the same bytes on 1, 2, 3 and 7 threads, and the reference's
-- values where it is quick. Prints one line per difference, then "compared N".
local SPLITS = [==[
local dlpack = require "dlpack"
assert(dlpack.blas() == nil, "a BLAS computes")
dlpack.manual_seed(11)
local failures, compared = {}, 0
local function operands(m, k, n, dt)
  if dt == "float32" or dt == "float64" then return dlpack.rand({m, k}, dt) - 0.5, dlpack.rand({k, n}, dt) - 0.5 end
  return dlpack.randint(-1000, 1000, {m, k}, "int64"):to(dt), dlpack.randint(-1000, 1000, {k, n}, "int64"):to(dt)
end
-- rows in parts (as many as share out evenly among the threads: one part on 1 thread, others on 2,
-- 3 and 7); 1000 rows in up to 16 parts; two blocks of B's columns (NC 2048); three of K (KC 256);
-- under the size that splits
local SHAPES = {{200, 300, 150}, {1000, 40, 64}, {75, 40, 2100}, {150, 600, 40}, {40, 40, 40}}
for _, dt in ipairs({"float32", "float64", "int32", "int64"}) do
  for _, s in ipairs(SHAPES) do
    local a, b = operands(s[1], s[2], s[3], dt)
    local layouts = {{a, b}, {a:transpose(1, 2):contiguous():transpose(1, 2), b:flip({1})}}
    for l, ops in ipairs(layouts) do
      local one
      for _, threads in ipairs({1, 2, 3, 7}) do
        dlpack.set_num_threads(threads)
        local bytes = dlpack.matmul(ops[1], ops[2]):tobytes()
        one = one or bytes
        compared = compared + 1
        if bytes ~= one then
          failures[#failures + 1] = string.format("%s %dx%dx%d layout %d: %d threads differ from one", dt, s[1],
                                                  s[2], s[3], l, threads)
        end
      end
    end
  end
end
-- one split product against the reference, row by row (float64: within its rounding)
local a, b = operands(200, 300, 150, "float64")
local r = dlpack.matmul(a, b)
for _, i in ipairs({1, 47, 48, 49, 96, 200}) do -- the first and last rows of parts
  local want = dlpack.sum(dlpack.mul(a:narrow(1, i, 1):view(300, 1), b), 1)
  compared = compared + 1
  if not dlpack.allclose(r:narrow(1, i, 1):view(150), want, 1e-12, 1e-12) then
    failures[#failures + 1] = "row " .. i .. " differs from the reference"
  end
end
for _, f in ipairs(failures) do print(f) end
print("compared " .. compared)
]==]

describe("the module's own matrix-product kernel", function()
  for _, build in ipairs({"", "avx2", "portable"}) do
    local name = build == "" and "the widest build this processor runs" or "the " .. build .. " build"
    -- a child with the kernel forced (and limited to the build) runs the chunk
    local function run(chunk)
      local env = {DLPACK_LUA_BLAS = "none", LUA_PATH = package.path, LUA_CPATH = package.cpath}
      if build ~= "" then env.DLPACK_LUA_GEMM = build end
      return support.run_lua(chunk, env)
    end
    it("agrees with a plain triple loop in " .. name .. " (odd shapes, every layout, k = 0, empty)", function()
      assert.are.equal("checked 108\n", run(CHECKS))
    end)
    it("splits large products into parts of rows: the same bytes on any number of threads in " .. name, function()
      assert.are.equal("compared 166\n", run(SPLITS))
    end)
  end
end)
