-- Matrix products: dlpack.matmul and dlpack.dot (NumPy's rules), through the system's CBLAS
-- for float32/float64 when one is found and through the module's own kernel otherwise; the
-- data are small integers, so that every path must give exactly the same values.
local dlpack = require "dlpack"
local support = require "support"

local raises = support.raises
local unpack = table.unpack or rawget(_G, "unpack")
local it_int = support.INTEGERS and it or function(name) pending(name .. ": " .. support.NO_INTEGERS) end
local REAL = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "bfloat16", "float32", "float64"}

-- A nested table of the given shape whose entry at (i, j, ...) is f(i, j, ...).
local function build(shape, f, dim, idx)
  dim, idx = dim or 1, idx or {}
  local t = {}
  for i = 1, shape[dim] do
    idx[dim] = i
    if dim == #shape then t[i] = f(unpack(idx, 1, dim)) else t[i] = build(shape, f, dim + 1, idx) end
  end
  return t
end

-- Small integer values for a dtype (bool: booleans), different for each seed.
local function value(dtype, seed, n)
  local v = (n * 7 + seed * 5 + 3) % 7
  if dtype == "bool" then return v % 3 == 0 end
  if dtype:find("^uint") then return v % 5 end
  return v - 3
end

-- A tensor of the shape whose element n (row-major, from 0) is n % mod - off.
local function grid(shape, mod, off, dtype)
  local n = 1
  for _, size in ipairs(shape) do n = n * size end
  return (dlpack.arange(n):view(shape) % mod - off):to(dtype)
end

local function matrix(rows, cols, dtype, seed)
  local n = 0
  return build({rows, cols}, function()
    n = n + 1
    return value(dtype, seed, n)
  end)
end

local function transpose(x)
  local t = {}
  for i = 1, #x[1] do
    t[i] = {}
    for j = 1, #x do t[i][j] = x[j][i] end
  end
  return t
end

-- The product of two nested 2-d tables, as the result dtype says (bool: any product true).
local function ref(x, y, bool)
  local r = {}
  for i = 1, #x do
    r[i] = {}
    for j = 1, #y[1] do
      local s = 0
      if bool then s = false end
      for k = 1, #y do
        if bool then s = s or (x[i][k] and y[k][j]) else s = s + x[i][k] * y[k][j] end
      end
      r[i][j] = s
    end
  end
  return r
end

-- The same matrix x in several layouts.
local LAYOUTS = {
  contiguous = function(x, dt) return dlpack.tensor(x, dt) end,
  transposed = function(x, dt) return dlpack.tensor(transpose(x), dt):transpose(1, 2) end,
  -- every other row, every third column of a larger tensor
  sliced = function(x, dt)
    local m, k = #x, #x[1]
    local big = build({2 * m, 3 * k}, function(i, j)
      if i % 2 == 1 and j % 3 == 1 then return x[(i + 1) / 2][(j + 2) / 3] end
      return dt == "bool" or 9
    end)
    return dlpack.tensor(big, dt):slice(1, 1, 2 * m, 2):slice(2, 1, 3 * k, 3)
  end,
  -- rows wider than the matrix (a narrowed view: a leading dimension larger than the size)
  narrowed = function(x, dt)
    local k = #x[1]
    local big = build({#x, k + 3}, function(i, j)
      if j <= k then return x[i][j] end
      return dt == "bool" or 9
    end)
    return dlpack.tensor(big, dt):narrow(2, 1, k)
  end,
  narrowed_transposed = function(x, dt)
    local m = #x
    local big = build({#x[1], m + 2}, function(i, j)
      if j <= m then return x[j][i] end
      return dt == "bool" or 9
    end)
    return dlpack.tensor(big, dt):narrow(2, 1, m):transpose(1, 2)
  end,
  flipped = function(x, dt)
    local rev = {}
    for i = 1, #x do
      rev[#x - i + 1] = {}
      for j = 1, #x[1] do rev[#x - i + 1][#x[1] - j + 1] = x[i][j] end
    end
    return dlpack.tensor(rev, dt):flip({1, 2})
  end,
  reversed_slice = function(x, dt)
    local rev = {}
    for i = 1, #x do rev[#x - i + 1] = x[i] end
    return dlpack.tensor(rev, dt):slice(1, -1, 1, -1)
  end,
}
local LAYOUT_NAMES = {"contiguous", "transposed", "sliced", "narrowed", "narrowed_transposed", "flipped",
                      "reversed_slice"}

-- The source of a chunk that computes products in many layouts and dtypes and returns their
-- values as one string: run here and in a process without BLAS, the two must agree.
local CASES = [[
  local dlpack = require "dlpack"
  local out = {}
  -- a tensor of the shape whose element n (row-major, from 0) is n % mod - off
  local function grid(shape, mod, off, dt)
    local n = 1
    for _, size in ipairs(shape) do n = n * size end
    return (dlpack.arange(n):view(shape) % mod - off):to(dt)
  end
  local function add(t)
    out[#out + 1] = t:tobytes()
  end
  for _, dt in ipairs({"float32", "float64", "float16", "int32"}) do
    for _, size in ipairs({{1, 1, 1}, {1, 5, 1}, {3, 1, 4}, {5, 7, 3}, {9, 17, 33}, {70, 300, 530}}) do
      local m, k, n = size[1], size[2], size[3]
      local a, b = grid({m, k}, 9, 4, dt), grid({k, n}, 7, 3, dt)
      add(dlpack.matmul(a, b))
      add(dlpack.matmul(b:transpose(1, 2):contiguous():transpose(1, 2):transpose(1, 2), a:transpose(1, 2)))
      add(dlpack.matmul(a:flip(1), b:flip(2)))
      add(dlpack.matmul(a:select(1, 1):contiguous():view({1, k}):expand({m, k}), b))
      add(dlpack.matmul(a:to("float64"), b))
    end
    local a, b = grid({2, 1, 3, 4}, 5, 2, dt), grid({5, 4, 2}, 3, 1, dt)
    add(dlpack.matmul(a, b))
    add(dlpack.matmul(a:select(1, 2):select(1, 1):select(1, 3), b))
  end
  return table.concat(out, "\n")
]]

describe("dlpack.matmul", function()
  it("multiplies 2-d tensors of every real dtype exactly", function()
    for _, dt in ipairs(REAL) do
      local x, y = matrix(3, 4, dt, 1), matrix(4, 5, dt, 2)
      local r = dlpack.matmul(dlpack.tensor(x, dt), dlpack.tensor(y, dt))
      assert.are.equal(dt, r.dtype)
      assert.are.same({3, 5}, r.shape)
      assert.are.same(ref(x, y, dt == "bool"), r:totable(), dt)
    end
  end)

  it("reads every layout in place or packed: transposed, sliced, narrowed, flipped, reversed", function()
    for _, dt in ipairs({"float32", "float64", "int32", "float16", "bool"}) do
      for _, size in ipairs({{3, 4, 5}, {1, 4, 5}, {3, 1, 5}, {3, 4, 1}, {1, 1, 1}, {6, 9, 2}}) do
        local x, y = matrix(size[1], size[2], dt, 3), matrix(size[2], size[3], dt, 4)
        local want, xs, ys = ref(x, y, dt == "bool"), {}, {}
        local bytes = dlpack.tensor(want, dt):tobytes()
        for _, l in ipairs(LAYOUT_NAMES) do xs[l], ys[l] = LAYOUTS[l](x, dt), LAYOUTS[l](y, dt) end
        -- every pair for the dtypes CBLAS takes in place; the others are always packed
        local blas = dt == "float32" or dt == "float64"
        for _, la in ipairs(LAYOUT_NAMES) do
          for _, lb in ipairs(LAYOUT_NAMES) do
            if blas or la == lb or la == "contiguous" or lb == "contiguous" then
              local r = dlpack.matmul(xs[la], ys[lb]):tobytes()
              if r ~= bytes then assert.are.same(want, dlpack.matmul(xs[la], ys[lb]):totable(), la .. " x " .. lb) end
            end
          end
        end
      end
    end
  end)

  it("reads expanded (stride 0) operands", function()
    for _, dt in ipairs({"float32", "float64", "int16"}) do
      local row = dlpack.tensor({{1, 2, 3}}, dt):expand({4, 3})
      local col = dlpack.tensor({{2}, {-1}, {1}}, dt):expand({3, 2})
      assert.are.same({{3, 3}, {3, 3}, {3, 3}, {3, 3}}, dlpack.matmul(row, col):totable())
      local same = dlpack.tensor({5}, dt):expand({3})
      assert.are.same({{30, 30, 30}, {30, 30, 30}, {30, 30, 30}, {30, 30, 30}},
                      dlpack.matmul(row, dlpack.tensor({{5, 5, 5}}, dt):expand({3, 3})):totable())
      assert.are.equal(30, dlpack.matmul(dlpack.tensor({1, 2, 3}, dt), same))
    end
  end)

  it("reads elements wherever a producer puts them (misaligned)", function()
    local fab = require "fabricate"
    local d = "\0" .. string.pack("<dddd", 1, 2, 3, 4) .. "\0\0\0\0\0\0\0"
    local f = "\0" .. string.pack("<ffff", 1, 2, 3, 4) .. "\0\0\0"
    local a = dlpack.from_dlpack((fab.versioned {code = 2, bits = 64, shape = {2, 2}, byte_offset = 1, data = d}))
    local b = dlpack.from_dlpack((fab.versioned {code = 2, bits = 32, shape = {2, 2}, byte_offset = 1, data = f}))
    assert.are.same({{7, 10}, {15, 22}}, dlpack.matmul(a, a):totable())
    assert.are.same({{7, 10}, {15, 22}}, dlpack.matmul(b, b):totable())
    assert.are.same({{7, 15}, {10, 22}}, dlpack.matmul(b:transpose(1, 2), a:transpose(1, 2)):totable())
    assert.are.equal(7, dlpack.matmul(a:select(1, 1), b:select(2, 1)))
  end)

  it("promotes mixed dtypes as the arithmetic does", function()
    local cases = {
      {"int8", "uint8", "int16"}, {"int32", "float32", "float64"}, {"float16", "bfloat16", "float32"},
      {"bool", "int8", "int8"}, {"int64", "uint64", "float64"}, {"uint8", "float16", "float16"},
      {"bool", "float32", "float32"}, {"int16", "float32", "float32"},
    }
    for _, c in ipairs(cases) do
      local x, y = matrix(2, 3, c[1], 5), matrix(3, 2, c[2], 6)
      local r = dlpack.matmul(dlpack.tensor(x, c[1]), dlpack.tensor(y, c[2]))
      assert.are.equal(c[3], r.dtype, c[1] .. " x " .. c[2])
      -- bool operands count as 0 and 1
      local function num(m)
        return build({#m, #m[1]}, function(i, j)
          local e = m[i][j]
          if type(e) == "boolean" then return e and 1 or 0 end
          return e
        end)
      end
      assert.are.same(ref(num(x), num(y)), r:totable(), c[1] .. " x " .. c[2])
    end
  end)

  it("promotes 1-d operands and removes the added dimension", function()
    local m = dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "float32")
    local r = dlpack.matmul(dlpack.tensor({1, -1}, "float32"), m)
    assert.are.same({3}, r.shape)
    assert.are.same({-3, -3, -3}, r:totable())
    r = dlpack.matmul(m, dlpack.tensor({1, 0, 2}, "float32"))
    assert.are.same({2}, r.shape)
    assert.are.same({7, 16}, r:totable())
    -- with batches
    local b = grid({2, 3, 2}, 12, 0, "float64")
    r = dlpack.matmul(dlpack.tensor({1, 1, 1}, "float64"), b)
    assert.are.same({2, 2}, r.shape)
    assert.are.same({{6, 9}, {24, 27}}, r:totable())
    r = dlpack.matmul(b:transpose(2, 3), dlpack.tensor({1, 2, 0}, "float64"))
    assert.are.same({{4, 7}, {22, 25}}, r:totable())
  end)

  it("gives a Lua value for two 1-d operands: a number, an integer, a boolean", function()
    local x = dlpack.tensor({1, 2, 3}, "float32")
    assert.are.equal(32, dlpack.matmul(x, dlpack.tensor({4, 5, 6}, "float32")))
    assert.are.equal("number", type(x:matmul(x)))
    assert.are.equal(14, x:flip(1):matmul(x:flip(1)))
    assert.are.equal(10, x:flip(1):matmul(x))
    for _, dt in ipairs(support.INTS) do
      local v = dlpack.matmul(dlpack.tensor({1, 2, 3}, dt), dlpack.tensor({3, 2, 1}, dt))
      assert.are.equal(10, v, dt)
      if support.INTEGERS then assert.are.equal("integer", math.type(v), dt) end
    end
    assert.are.equal(10, dlpack.matmul(dlpack.tensor({1, 2, 3}, "float16"), dlpack.tensor({3, 2, 1}, "bfloat16")))
    assert.is_true(dlpack.matmul(dlpack.tensor({false, true}), dlpack.tensor({true, true})))
    assert.is_false(dlpack.matmul(dlpack.tensor({false, true}), dlpack.tensor({true, false})))
  end)

  it("broadcasts the batch dimensions", function()
    local a = grid({2, 1, 3, 4}, 5, 0, "float32")
    local b = grid({5, 4, 2}, 3, 0, "float32")
    local r = dlpack.matmul(a, b)
    assert.are.same({2, 5, 3, 2}, r.shape)
    for i = 1, 2 do
      for j = 1, 5 do
        local want = ref(a:select(1, i):select(1, 1):totable(), b:select(1, j):totable())
        assert.are.same(want, r:select(1, i):select(1, j):totable(), i .. "," .. j)
      end
    end
    -- a 2-d operand against a batch, and the same with integers (the module's kernel)
    local m = dlpack.tensor({{1, 0, 0, 1}, {0, 1, 1, 0}}, "int32")
    local bi = b:to("int32")
    local ri = dlpack.matmul(m, bi)
    assert.are.same({5, 2, 2}, ri.shape)
    for j = 1, 5 do assert.are.same(ref(m:totable(), bi:select(1, j):totable()), ri:select(1, j):totable()) end
    -- a batch of one stretched, in a transposed view
    local one = grid({1, 2, 4}, 8, 0, "float64"):transpose(2, 3)
    r = dlpack.matmul(dlpack.ones({3, 2, 4}, "float64"), one)
    assert.are.same({3, 2, 2}, r.shape)
    assert.are.same({{6, 22}, {6, 22}}, r:select(1, 3):totable())
  end)

  it("wraps integer products as NumPy does", function()
    assert.are.equal(16, dlpack.matmul(dlpack.tensor({{100}}, "int8"), dlpack.tensor({{100}}, "int8")):get(1, 1))
    assert.are.equal(32, dlpack.matmul(dlpack.tensor({100, 100}, "int8"), dlpack.tensor({100, 100}, "int8")))
    assert.are.equal(-128, dlpack.matmul(dlpack.tensor({64, 64}, "int8"), dlpack.tensor({1, 1}, "int8")))
    assert.are.equal(24464, dlpack.matmul(dlpack.tensor({300}, "int16"), dlpack.tensor({300}, "int16")))
    assert.are.equal(0, dlpack.matmul(dlpack.tensor({65536}, "int32"), dlpack.tensor({65536}, "int32")))
    assert.are.equal(144, dlpack.matmul(dlpack.tensor({200}, "uint8"), dlpack.tensor({2}, "uint8")))
    assert.are.equal(0, dlpack.matmul(dlpack.tensor({{16, 16}}, "uint8"), dlpack.tensor({{16}, {0}}, "uint8"))
      :get(1, 1))
    -- bool counts past any small type: 300 true products are still true
    assert.is_true(dlpack.matmul(dlpack.ones({300}, "bool"), dlpack.ones({300}, "bool")))
  end)

  it_int("wraps int64 and uint64 products", function()
    local big, two32, top = math.maxinteger, math.tointeger(2 ^ 32), math.mininteger -- top: 2^63 as uint64
    assert.are.equal(-2, dlpack.matmul(dlpack.tensor({big}, "int64"), dlpack.tensor({2}, "int64")))
    assert.are.equal(0, dlpack.matmul(dlpack.tensor({two32}, "int64"), dlpack.tensor({two32}, "int64")))
    local u = dlpack.matmul(dlpack.tensor({{top}}, "uint64"), dlpack.tensor({{3}}, "uint64"))
    assert.are.equal(top, u:get(1, 1))
    assert.are.equal(0, dlpack.matmul(dlpack.tensor({top, top}, "uint64"), dlpack.tensor({1, 1}, "uint64")))
  end)

  it("computes float16 and bfloat16 in float32 and rounds once", function()
    -- summed in float16, 2048 + 1 would round to 2048 (to even) and stay there: in float32 2050
    local r = dlpack.matmul(dlpack.tensor({{2048, 1, 1}}, "float16"), dlpack.tensor({{1}, {1}, {1}}, "float16"))
    assert.are.equal(2050, r:get(1, 1))
    -- rounded once at the end: 2049 to even
    r = dlpack.matmul(dlpack.tensor({{1024, 1, 1024}}, "float16"), dlpack.tensor({{1}, {1}, {1}}, "float16"))
    assert.are.equal(2048, r:get(1, 1))
    -- likewise bfloat16: 256 + 1 + 1 is 258 in float32, 256 step by step
    r = dlpack.matmul(dlpack.tensor({256, 1, 1}, "bfloat16"), dlpack.tensor({1, 1, 1}, "bfloat16"))
    assert.are.equal(258, r)
  end)

  it("handles empty dimensions: k = 0 gives zeros", function()
    for _, dt in ipairs({"float32", "float64", "int32", "bool", "float16"}) do
      local r = dlpack.matmul(dlpack.zeros({2, 0}, dt), dlpack.zeros({0, 3}, dt))
      assert.are.same({2, 3}, r.shape)
      local zero = 0
      if dt == "bool" then zero = false end
      assert.are.same({{zero, zero, zero}, {zero, zero, zero}}, r:totable(), dt)
      assert.are.same({0, 4}, dlpack.matmul(dlpack.zeros({0, 3}, dt), dlpack.zeros({3, 4}, dt)).shape)
      assert.are.same({2, 0}, dlpack.matmul(dlpack.zeros({2, 3}, dt), dlpack.zeros({3, 0}, dt)).shape)
      assert.are.same({0, 2, 4}, dlpack.matmul(dlpack.zeros({0, 2, 3}, dt), dlpack.zeros({3, 4}, dt)).shape)
      assert.are.equal(zero, dlpack.matmul(dlpack.zeros({0}, dt), dlpack.zeros({0}, dt)), dt)
    end
    if support.INTEGERS then
      assert.are.equal("integer", math.type(dlpack.matmul(dlpack.zeros({0}, "int8"), dlpack.zeros({0}, "int8"))))
    end
  end)

  it("agrees with itself with and without BLAS (DLPACK_LUA_BLAS=none in a child process)", function()
    local load = rawget(_G, "loadstring") or load
    local here = load(CASES)()
    local script = "print(({require('dlpack').blas()})[2])\nio.write((function() " .. CASES .. " end)())\n"
    local out = support.run_lua(script, {DLPACK_LUA_BLAS = "none", LUA_PATH = package.path, LUA_CPATH = package.cpath})
    local reason, rest = out:match("^([^\n]*)\n(.*)$")
    assert.are.equal("DLPACK_LUA_BLAS=none", reason, out:sub(1, 500))
    assert.is_true(#here > 100000)
    assert.is_true(rest == here, "the products differ without BLAS")
  end)

  -- Debian's reference BLAS, found as libblas.so.3 by a search where no libopenblas.so.0 has
  -- CBLAS (a library without it stands in for one): passed by, the module's kernel computes.
  local function exists(path)
    local f = io.open(path)
    if f then f:close() end
    return f ~= nil
  end
  local reference, libm
  for _, triplet in ipairs({"x86_64-linux-gnu", "aarch64-linux-gnu"}) do
    local r = "/usr/lib/" .. triplet .. "/blas/libblas.so.3"
    local m = "/lib/" .. triplet .. "/libm.so.6"
    if exists(r) and exists(m) then reference, libm = r, m end
  end
  local it_reference = reference and not support.WINDOWS and it
    or function(name) pending(name .. ": no Debian reference BLAS here") end
  it_reference("passes by the reference BLAS in its search (slower than its own kernel)", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir .. " && ln -s " .. reference .. " " .. dir .. "/libblas.so.3 && ln -s " ..
                      libm .. " " .. dir .. "/libopenblas.so.0"))
    local run = "LD_LIBRARY_PATH=%s %s LUA_PATH='lua/?.lua;;' LUA_CPATH='%s/?.so;;' %s -e " ..
                "'local d = require \"dlpack\"; print(d.blas()); print(d.matmul(d.ones({3}), d.ones({3})) == 3)' 2>&1"
    local p = assert(io.popen(string.format(run, dir, "", support.BUILD, support.LUA)))
    local out = p:read("*a")
    p:close()
    p = assert(io.popen(string.format(run, dir, "DLPACK_LUA_BLAS=libblas.so.3", support.BUILD, support.LUA)))
    local forced = p:read("*a")
    p:close()
    os.execute("rm -r " .. dir)
    assert.are.equal("nil\tlibblas.so.3 is the reference BLAS, slower than the module's own kernel " ..
                     "(DLPACK_LUA_BLAS=libblas.so.3 uses it)\ntrue\n", out)
    assert.matches("^libblas%.so%.3\ttable: [^\n]*\ntrue\n$", forced) -- the name, then its details
  end)

  it("says which BLAS it uses", function()
    local name, why = dlpack.blas()
    if name then
      assert.are.equal("string", type(name))
      assert.are.equal(name, why.library) -- and more: spec/blas_spec.lua
    else
      assert.are.equal("string", type(why))
    end
  end)

  it("computes blocks larger than the kernel's tiles exactly", function()
    local m, k, n = 37, 300, 530
    for _, dt in ipairs({"float32", "int32", "int64", "float64"}) do
      local a, b = grid({m, k}, 9, 0, dt), grid({k, n}, 7, 0, dt)
      local r = dlpack.matmul(a, b:transpose(1, 2):contiguous():transpose(1, 2))
      assert.are.same({m, n}, r.shape)
      for _, ij in ipairs({{1, 1}, {37, 530}, {5, 257}, {36, 513}, {20, 512}}) do
        local i, j, s = ij[1], ij[2], 0
        for q = 1, k do s = s + ((i - 1) * k + q - 1) % 9 * (((q - 1) * n + j - 1) % 7) end
        assert.are.equal(s, r:get(i, j), dt .. " at " .. i .. "," .. j)
      end
    end
  end)

  describe("refuses", function()
    local m = dlpack.zeros({2, 3})
    it("0-d operands and Lua scalars, as NumPy's matmul", function()
      raises(function() dlpack.matmul(dlpack.zeros({}), m) end, "operand 1 is 0%-d")
      raises(function() m:matmul(dlpack.zeros({})) end, "matmul: operand 2 is 0%-d")
      raises(function() dlpack.matmul(m, 2) end, "operand 2 is a lua number")
      raises(function() dlpack.matmul(true, m) end, "operand 1 is a lua boolean")
      raises(function() dlpack.matmul(m, {1, 2}) end, "operand 2 must be a tensor, got table")
      raises(function() dlpack.matmul(m) end, "operand 2 must be a tensor, got no value")
      raises(function() dlpack.matmul(m, m:transpose(1, 2), {}) end, "matmul")
    end)

    it("mismatched inner sizes, naming both shapes", function()
      raises(function() dlpack.matmul(m, m) end, "dlpack.matmul: shapes {2, 3} and {2, 3} do not multiply")
      raises(function() m:matmul(dlpack.zeros({4})) end, "matmul: shapes {2, 3} and {4} .*%(3 and 4%)")
      raises(function() dlpack.matmul(dlpack.zeros({3}), m) end, "{3} and {2, 3}")
      raises(function() dlpack.matmul(dlpack.zeros({2, 2, 3}), dlpack.zeros({3, 3, 4})) end,
             "shapes {2, 2, 3} and {3, 3, 4} do not broadcast")
    end)

    it("complex, 8-bit float and released operands, naming them", function()
      raises(function() dlpack.matmul(dlpack.zeros({2, 2}, "complex64"), dlpack.zeros({2, 2})) end, "complex64")
      raises(function() dlpack.matmul(dlpack.zeros({2, 2}), dlpack.zeros({2, 2}, "float8_e4m3fn")) end,
             "float8_e4m3fn")
      local t = dlpack.zeros({3, 2})
      t:release()
      raises(function() dlpack.matmul(m, t) end, "operand 2 was released")
    end)

    it("sizes whose products do not fit, before any work", function()
      local col = dlpack.zeros({1, 1}):expand({2 ^ 32, 1})
      local row = dlpack.zeros({1, 1}):expand({1, 2 ^ 32})
      raises(function() dlpack.matmul(col, row) end, "more elements than fit")
      raises(function() dlpack.matmul(col:narrow(1, 1, 2 ^ 31), row:narrow(2, 1, 2 ^ 31)) end, "bytes")
      local long = dlpack.zeros({1}):expand({2 ^ 62})
      raises(function() dlpack.matmul(long, long) end, "temporaries")
      local long64 = dlpack.zeros({1}, "float64"):expand({2 ^ 62})
      raises(function() dlpack.dot(long64, long64) end, "temporaries")
    end)
  end)
end)

describe("dlpack.dot", function()
  it("gives a Lua value for 1-d operands and NumPy's products for 2-d", function()
    local x = dlpack.tensor({1, 2, 3}, "int32")
    assert.are.equal(14, dlpack.dot(x, x))
    assert.are.equal(14, x:dot(x))
    local a = dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "float64")
    assert.are.same({{14, 32}, {32, 77}}, dlpack.dot(a, a:transpose(1, 2)):totable())
    assert.are.same({14, 32}, a:dot(x):totable())
    assert.are.same({5, 7, 9}, dlpack.dot(dlpack.tensor({1, 1}, "int8"), a):totable())
    assert.are.equal("float64", a:dot(x).dtype)
  end)

  it("refuses 0-d and more than 2-d operands, saying what to use", function()
    local x = dlpack.zeros({2})
    raises(function() dlpack.dot(dlpack.zeros({}), x) end, "dlpack.dot: operand 1 is 0%-d.*use mul")
    raises(function() x:dot(dlpack.zeros({2, 2, 2})) end, "dot: operand 2 has 3 dimensions.*use matmul")
    raises(function() dlpack.dot(x, dlpack.zeros({3})) end, "{2} and {3}")
  end)
end)

describe("matrix products from several threads", function()
  it("give every state its own exact products at once (one BLAS, one kernel)", function()
    local fab = require "fabricate"
    local results = fab.run_threads([[
      local dlpack = require "dlpack"
      local _, index = ...
      wait_all()
      for round = 1, 20 do
        for _, dt in ipairs({"float32", "float64", "int32"}) do
          local n = 64 + index + round
          local a = dlpack.ones({n, 100}, dt)
          local b = dlpack.full({100, n}, index, dt)
          local r = dlpack.matmul(a, b:transpose(1, 2):contiguous():transpose(1, 2))
          assert(r:get(n, n) == 100 * index and r:get(1, 1) == 100 * index, dt)
        end
      end
      return index
    ]], 4)
    for i, r in ipairs(results) do assert.is_true(r.ok, tostring(r.value) .. " in thread " .. i) end
  end)
end)

describe("matrix products under hostile finalizers", function()
  it("fail cleanly when an operand is released during the call", function()
    local fab = require "fabricate"
    local chunk = string.format([[
      local dlpack = require "dlpack"
      %s
      %s
      local current, fired = nil, 0
      local inside = false
      local function arm()
        setmetatable({}, {__gc = function()
          if inside then fired = fired + 1 end
          if current then current:release() end
        end})
      end
      -- until finalizers fired inside calls a few times (how often depends on the collector)
      for round = 1, 3000 do
        if round > 300 and fired >= 5 then break end
        current = dlpack.ones({64, 64}, round %% 2 == 0 and "float32" or "int32")
        local other = dlpack.ones({64, 64}, "float32")
        for _ = 1, round %% 7 do local _ = {} end
        for _ = 1, 4 do arm() end
        inside = true
        local ok, err = pcall(dlpack.matmul, round %% 3 == 0 and other or current, current)
        inside = false
        if ok then assert(err:get(1, 1) == 64) end
        if not ok and not tostring(err):find("released", 1, true) then error(err, 0) end
      end
      return fired
    ]], support.EAGER_GC, support.GC_SETMETATABLE)
    local r = fab.run_threads(chunk, 1)[1]
    assert(r.ok, tostring(r.value))
    -- as in join_spec: the older collectors may run no finalizer inside any of the calls
    if r.value == 0 and not support.LUA54 then return pending("no finalizer ran inside matmul this time") end
    assert.is_true(r.value > 0, "no finalizer ran inside matmul")
  end)
end)
