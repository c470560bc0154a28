-- The bulk paths (typed conversion loops, merged and tiled walks, register transposes, memset
-- fills, gathers) give exactly what the element rules give, for every dtype pair and layout:
-- contiguous, strided, transposed (with sizes that leave remainders around every tile),
-- negative strides, stride 0, 0-d and empty, and copies between overlapping views of one tensor.
-- The reference here is pure Lua: C casts (wrap, truncate and saturate, ~= 0 for bool), and for
-- float16/bfloat16/float32 the rounding of a single element written through t[i] = v.
local dlpack = require "dlpack"
local support = require "support"
-- Specs of integer subtypes and of the int64 range (Lua 5.3+): pending elsewhere, with why.
local it_int = support.INTEGERS and it or function(name) pending(name .. ": " .. support.NO_INTEGERS) end

local NUMERIC, ACCESSIBLE, IS_INT = support.NUMERIC, support.ACCESSIBLE, support.IS_INT

local BITS = {int8 = 8, int16 = 16, int32 = 32, int64 = 64, uint8 = 8, uint16 = 16, uint32 = 32, uint64 = 64}
local SIGNED = {int8 = true, int16 = true, int32 = true, int64 = true}
local FLOAT = {float16 = true, bfloat16 = true, float32 = true, float64 = true}

-- What a float dtype stores for the double v: one element written the element way.
local function round_to(dtype, v)
  if dtype == "float64" then return v end
  local t = dlpack.zeros({1}, dtype)
  t[1] = v
  return t[1]
end

-- An integer of `bits` bits (signed or not) from the 64-bit integer v, wrapped as C does.
local function wrap(v, bits, signed)
  if bits == 64 then return v end
  local m = math.floor(2 ^ bits) -- an integer where Lua has them
  v = v % m
  if signed and v >= math.floor(m / 2) then v = v - m end
  return v
end

-- A float truncated toward zero and saturated into an integer dtype; NaN gives 0.
local function saturate(v, dtype)
  if v ~= v then return 0 end
  local bits = BITS[dtype]
  if dtype == "uint64" then
    if v <= 0 then return 0 end
    if v >= 2 ^ 64 then return -1 end -- UINT64_MAX, as Lua reads it
    if v >= 2 ^ 63 then return math.tointeger(v - 2 ^ 64) end
    return math.tointeger(v >= 0 and math.floor(v) or math.ceil(v))
  end
  local lo, hi
  if SIGNED[dtype] then lo, hi = -math.floor(2 ^ (bits - 1)), math.floor(2 ^ (bits - 1)) - 1
  else lo, hi = 0, math.floor(2 ^ bits) - 1 end
  if dtype == "int64" then
    if v >= 2 ^ 63 then return math.maxinteger end
    if v < -2 ^ 63 then return math.mininteger end
  else
    if v <= lo then return lo end
    if v >= hi then return hi end
  end
  return math.tointeger(v >= 0 and math.floor(v) or math.ceil(v))
end

-- The value a source element converts to in dtype d (src_value as the source reads it).
local function convert(src_value, s, d)
  if d == "bool" then
    if s == "bool" then return src_value end
    return src_value ~= 0
  end
  local v = src_value
  if s == "bool" then v = v and 1 or 0 end
  if IS_INT[d] then
    if FLOAT[s] then return saturate(v, d) end
    return wrap(v, BITS[d], SIGNED[d])
  end
  -- to a float: integers go through double first (so int64/uint64 may round twice, as in C)
  if s == "uint64" and v < 0 then v = v + 2.0 ^ 64 end
  return round_to(d, v + 0.0)
end

-- Source values that exercise every rule, as the source dtype holds them.
local function values_for(s)
  if s == "bool" then return {true, false, true, true, false, false} end
  if IS_INT[s] then
    local bits = BITS[s]
    local hi = bits == 64 and math.maxinteger
      or (SIGNED[s] and math.floor(2 ^ (bits - 1)) - 1 or math.floor(2 ^ bits) - 1)
    local lo = SIGNED[s] and (bits == 64 and math.mininteger or -math.floor(2 ^ (bits - 1))) or 0
    return {0, 1, hi, lo, 100, SIGNED[s] and -3 or 3}
  end
  return {round_to(s, 0.5), round_to(s, -1.75), round_to(s, 300.25), round_to(s, -70000.0),
          round_to(s, 1e10), 0 / 0, 1 / 0, -1 / 0, round_to(s, 3.0e-6), round_to(s, 65519.0),
          round_to(s, -0.0), round_to(s, 2.0 ^ 40 + 3)}
end

local function same(a, b)
  if type(a) == "number" and a ~= a then return b ~= b end
  return a == b and math.type(a) == math.type(b)
end

local function check_all(got, want, what)
  for i = 1, #want do
    if not same(got[i], want[i]) then
      error(string.format("%s: element %d is %s, the element rules give %s", what, i, tostring(got[i]),
        tostring(want[i])), 2)
    end
  end
end

-- Elements of a 1-d tensor as a Lua list.
local function list(t)
  local out = {}
  for i = 1, #t do out[i] = t[i] end
  return out
end

describe("conversions in bulk", function()
  for _, s in ipairs(ACCESSIBLE) do
    for _, d in ipairs(ACCESSIBLE) do
      -- the element rules' model needs the whole int64 range where a 64-bit integer is involved
      local it_for = (BITS[s] == 64 and IS_INT[s] or BITS[d] == 64 and IS_INT[d]) and it_int or it
      it_for("agree with the element rules from " .. s .. " to " .. d .. ", contiguous and strided", function()
        local vals = values_for(s)
        local n = #vals
        local src = dlpack.tensor(vals, s)
        local want = {}
        for i = 1, n do want[i] = convert(src[i], s, d) end
        -- contiguous into contiguous
        check_all(list(dlpack.zeros({n}, d):copy(src)), want, s .. " -> " .. d)
        -- strided source (every other element of a longer tensor) into a reversed destination
        local wide = dlpack.zeros({2 * n}, s)
        for i = 1, n do wide[2 * i - 1] = vals[i] end
        local dst = dlpack.zeros({n}, d)
        dst:slice(1, -1, 1, -1):copy(wide:slice(1, 1, 2 * n, 2))
        local rev = {}
        for i = 1, n do rev[n + 1 - i] = want[i] end
        check_all(list(dst), rev, s .. " -> " .. d .. " (strided, reversed)")
        -- to() and clone() to the same result
        check_all(list(src:to(d)), want, s .. ":to(" .. d .. ")")
      end)
    end
  end

  it("convert complex to real by the real part, and real to complex with a zero imaginary part", function()
    local c = dlpack.frombytes(string.pack("<dddd", 1.5, -2.0, -7.25, 3.0), "complex128")
    assert.are.same({1.5, -7.25}, list(c:to("float64")))
    assert.are.same({1, -7}, list(c:to("int32")))
    assert.are.same({true, true}, list(c:to("bool")))
    local z = dlpack.frombytes(string.pack("<dd", 0.0, 2.0), "complex128")
    assert.are.same({true}, list(z:to("bool")), "a zero real part and a non-zero imaginary part is true")
    local r = dlpack.tensor({2.5, -1.0}, "float64")
    assert.are.equal(string.pack("<ffff", 2.5, 0, -1.0, 0), r:to("complex64"):tobytes())
    assert.are.equal(string.pack("<dddd", 2.5, 0, -1.0, 0), r:to("complex128"):tobytes())
    assert.are.equal(string.pack("<ff", 1.5, -2.0), c:narrow(1, 1, 1):to("complex64"):tobytes())
  end)

  it("handle 0-d and empty tensors", function()
    for _, d in ipairs(NUMERIC) do
      local z = dlpack.tensor(7, "int16")
      assert.are.equal(convert(7, "int16", d), dlpack.zeros({}, d):copy(z):item())
      local e = dlpack.zeros({0, 3}, d)
      e:copy(dlpack.zeros({0, 3}, "float64"))
      assert.are.equal("", e:tobytes())
    end
  end)
end)

describe("copies in bulk", function()
  -- distinct values whatever the dtype: k mod 100, as int16
  local function counting(shape, dtype)
    local n = 1
    for _, s in ipairs(shape) do n = n * s end
    local flat = dlpack.zeros({n}, "int16")
    for i = 1, n do flat[i] = (i - 1) % 100 end
    return flat:view(shape):to(dtype)
  end

  -- Element-by-element copy of a 2-d view, the reference for the tiled and transposed walks.
  local function reference(t)
    local rows, cols = t:size(1), t:size(2)
    local out = {}
    for i = 1, rows do
      for j = 1, cols do out[#out + 1] = t:get(i, j) end
    end
    return out
  end

  for _, dtype in ipairs({"uint8", "int16", "float32", "float64", "int64", "bfloat16"}) do
    for _, shape in ipairs({{37, 53}, {32, 64}, {5, 3}, {1, 9}, {70, 1}}) do
      local name = dtype .. " " .. table.concat(shape, "x")
      it("transposes, permutes and gathers " .. name .. " as element access does", function()
        local t = counting(shape, dtype)
        local tt = t:transpose(1, 2)
        local want = reference(tt)
        check_all(list(tt:contiguous():view({-1})), want, name .. " contiguous()")
        check_all(list(dlpack.zeros(tt.shape, dtype):copy(tt):view({-1})), want, name .. " copy")
        -- the bytes of the view equal the bytes of its contiguous copy
        assert.are.equal(tt:contiguous():tobytes(), tt:tobytes(), name .. " tobytes")
        -- negative strides on both dimensions
        local back = tt:slice(1, -1, 1, -1):slice(2, -1, 1, -1)
        check_all(list(back:contiguous():view({-1})), reference(back), name .. " reversed")
        -- into a transposed destination
        local dst = dlpack.zeros({shape[2], shape[1]}, dtype)
        dst:transpose(1, 2):copy(t)
        check_all(list(dst:view({-1})), want, name .. " into a transposed destination")
      end)
    end
  end

  -- The register transposes move blocks of 16x16 bytes, 8x8 of 2 bytes, 8x8 (AVX2) or 4x4 of 4,
  -- 4x4 or 2x2 of 8 and 2x2 of 16 (AVX2; row by row without), in tiles of 64x64 elements: shapes
  -- that leave blocks and tiles over on either side, checked byte for byte against the source's
  -- bytes moved in Lua, here and in a process whose loops are the baseline's
  -- (DLPACK_LUA_CPU=baseline: the SSE2 blocks, and 16-byte tiles row by row).
  local TRANSPOSES = [=[
    local dlpack = require "dlpack"
    local function transposed_bytes(bytes, n, m, size) -- bytes of an n x m row-major tensor, transposed
      local out = {}
      for j = 0, m - 1 do
        for i = 0, n - 1 do
          local at = (i * m + j) * size
          out[#out + 1] = bytes:sub(at + 1, at + size)
        end
      end
      return table.concat(out)
    end
    local function same_bytes(want, got, what) -- the first byte that differs, not both strings
      if want == got then return end
      local k = 1
      while want:byte(k) == got:byte(k) do k = k + 1 end
      error(string.format("%s: byte %d of %d differs (%s, want %s)", what, k, #want, tostring(got:byte(k)),
        tostring(want:byte(k))), 2)
    end
    local REAL_PART = {complex64 = "float32", complex128 = "float64"}
    local checked = 0
    for _, dtype in ipairs({"uint8", "bfloat16", "float32", "complex64", "complex128"}) do
      for _, shape in ipairs({{130, 75}, {64, 64}, {16, 16}, {17, 200}, {200, 23}, {3, 100}}) do
        local n, m = shape[1], shape[2]
        local name = dtype .. " " .. n .. "x" .. m
        -- distinct values (k mod 251: every byte of uint8); complex from the bytes of both parts
        local parts = dlpack.arange(0, n * m * 2, "int64"):mod(251):reshape({n, m, 2}):to(REAL_PART[dtype] or dtype)
        local t = parts:select(3, 1):contiguous()
        if REAL_PART[dtype] then t = dlpack.frombytes(parts:tobytes(), dtype, {n, m}) end
        local bytes = t:tobytes()
        local want = transposed_bytes(bytes, n, m, #bytes / (n * m))
        local tt = t:transpose(1, 2)
        same_bytes(want, tt:contiguous():tobytes(), name .. " contiguous()")
        same_bytes(want, tt:tobytes(), name .. " tobytes")
        local dst = dlpack.zeros({m, n}, dtype)
        dst:transpose(1, 2):copy(t) -- the destination transposed, the source contiguous
        same_bytes(want, dst:tobytes(), name .. " into a transposed destination")
        -- the tiled dimensions inside a third one, strided: a 3-d permute of two copies
        local two = dlpack.stack({t, t})
        same_bytes(want .. want, two:permute({1, 3, 2}):contiguous():tobytes(), name .. " permute")
        checked = checked + 1
      end
    end
    return checked
  ]=]

  it("moves the bytes of transposes of every element size through the register blocks", function()
    assert.are.equal(30, assert((rawget(_G, "loadstring") or load)(TRANSPOSES))())
  end)

  local baseline = it
  if dlpack.cpu() == "baseline" then
    baseline = function(name) pending(name .. ": the baseline's loops are this process's (the spec above)") end
  elseif os.getenv("LD_PRELOAD") then
    baseline = function(name) pending(name .. ": a preloaded sanitizer runtime crashes new processes") end
  end
  baseline("moves them through the baseline's blocks too (DLPACK_LUA_CPU=baseline, a new process)", function()
    local out = support.run_lua("print(assert((loadstring or load)(" .. string.format("%q", TRANSPOSES) .. "))())",
                                {LUA_PATH = package.path, LUA_CPATH = package.cpath, DLPACK_LUA_CPU = "baseline"})
    assert.are.equal("30\n", out)
  end)

  it("permutes 3-d tensors as element access does", function()
    local t = counting({6, 35, 33}, "float32")
    local p = t:permute({3, 1, 2})
    local c = p:contiguous()
    for a = 1, 33 do
      for b = 1, 6 do
        for k = 1, 35, 7 do assert.are.equal(t:get(b, k, a), c:get(a, b, k)) end
      end
    end
    assert.are.equal(c:tobytes(), p:tobytes())
  end)

  it("copies between overlapping views of one tensor as if through a copy", function()
    for _, dtype in ipairs({"uint8", "float32", "float64"}) do
      local t = counting({40}, dtype)
      local want = list(t:narrow(1, 1, 39))
      t:narrow(1, 2, 39):copy(t:narrow(1, 1, 39)) -- shift right by one
      check_all(list(t:narrow(1, 2, 39)), want, dtype .. " shift right")
      local u = counting({40}, dtype)
      local w2 = list(u:narrow(1, 2, 39))
      u:narrow(1, 1, 39):copy(u:narrow(1, 2, 39)) -- shift left by one
      check_all(list(u:narrow(1, 1, 39)), w2, dtype .. " shift left")
      local sq = counting({16, 16}, dtype)
      local tr = reference(sq:transpose(1, 2))
      sq:copy(sq:transpose(1, 2)) -- in place transpose
      check_all(list(sq:view({-1})), tr, dtype .. " in place transpose")
    end
  end)

  it("reads stride-0 sources", function()
    local row = dlpack.tensor({1, 2, 3}, "float32")
    local e = row:unsqueeze(1):expand({4, 3})
    assert.are.same({{1, 2, 3}, {1, 2, 3}, {1, 2, 3}, {1, 2, 3}}, e:contiguous():totable())
    assert.are.equal(string.rep(string.pack("<fff", 1, 2, 3), 4), e:tobytes())
  end)
end)

describe("fills in bulk", function()
  it("fill every dtype, contiguous and strided, with values whose bytes differ and agree", function()
    for _, dtype in ipairs(ACCESSIBLE) do
      local vals = dtype == "bool" and {true, false} or {0, 7, IS_INT[dtype] and 1 or 1.5}
      for _, v in ipairs(vals) do
        local t = dlpack.zeros({9, 7}, dtype)
        t:fill(v)
        local want = {}
        for i = 1, 63 do want[i] = t:view({-1})[1] end
        check_all(list(t:view({-1})), want, dtype .. " fill")
        local u = dlpack.zeros({9, 7}, dtype)
        u:transpose(1, 2):slice(1, 1, 7, 2):fill(v) -- every other column
        for i = 1, 9 do
          for j = 1, 7 do
            local expected = j % 2 == 1 and t:get(i, j) or (dtype == "bool" and false or u:get(1, 2))
            assert.is_true(same(u:get(i, j), expected), dtype .. " strided fill")
          end
        end
      end
    end
  end)
end)
