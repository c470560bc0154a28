-- tostring: values, shape, dtype and device; summaries for large tensors.
local dlpack = require "dlpack"

local function contains(s, needle)
  assert.is_truthy(s:find(needle, 1, true), "'" .. needle .. "' not in: " .. s)
end

describe("tostring", function()
  it("returns a string", function()
    assert.are.equal("string", type(tostring(dlpack.zeros({2}))))
  end)

  it("shows integer values", function()
    local s = tostring(dlpack.tensor({11, 22, 33}, "int32"))
    contains(s, "11"); contains(s, "22"); contains(s, "33")
  end)

  it("shows float values", function()
    local s = tostring(dlpack.tensor({1.5, -2.25}, "float64"))
    contains(s, "1.5"); contains(s, "-2.25")
    contains(tostring(dlpack.tensor({0.5}, "float16")), "0.5")
    contains(tostring(dlpack.tensor({0.75}, "bfloat16")), "0.75")
  end)

  it("shows NaN and infinities", function()
    local s = tostring(dlpack.tensor({0 / 0, math.huge, -math.huge}, "float32")):lower()
    contains(s, "nan"); contains(s, "inf")
  end)

  it("shows every NaN as nan, never -nan, and the infinities as inf and -inf", function()
    local nan = 0 / 0
    for _, dtype in ipairs({"float16", "bfloat16", "float32", "float64"}) do
      local s = tostring(dlpack.tensor({nan, -nan, math.huge, -math.huge}, dtype))
      assert.is_truthy(s:find("{nan, nan, inf, -inf}", 1, true), s)
    end
    local z = tostring(dlpack.tensor(-nan))
    assert.is_truthy(z:find("(nan,", 1, true), z)
    assert.is_falsy(z:find("-nan", 1, true), z)
    local c = tostring(dlpack.frombytes(string.pack("dd", -nan, -math.huge), "complex128"))
    assert.is_truthy(c:find("{nan-infi}", 1, true), c)
  end)

  it("wraps long rows at 80 columns, continuing under the first element", function()
    local s = tostring(dlpack.tensor((function() local t = {} for i = 1, 100 do t[i] = i * 1000 end return t end)()))
    local lines = {}
    for line in s:gmatch("[^\n]+") do lines[#lines + 1] = line end
    assert.is_true(#lines > 3, s)
    for i, line in ipairs(lines) do
      assert.is_true(#line <= 80, "line " .. i .. " has " .. #line .. " columns:\n" .. s)
      if i > 1 and i < #lines then
        assert.is_truthy(line:find("^               %d"), "line " .. i .. " is not indented by 15:\n" .. s)
      end
    end
    assert.is_truthy(lines[1]:find("^dlpack%.Tensor%({1000, 2000, "), s)
    -- every value is there, in order, each once
    local seen = {}
    for v in s:match("%b{}"):gmatch("%d+") do seen[#seen + 1] = tonumber(v) end
    assert.are.equal(100, #seen, s)
    for i = 1, 100 do assert.are.equal(i * 1000, seen[i]) end
  end)

  it("wraps the rows of an n-d tensor under their own brace, and the shape under the first", function()
    local s = tostring(dlpack.zeros({2, 30}, "float32"))
    local lines = {}
    for line in s:gmatch("[^\n]+") do lines[#lines + 1] = line end
    for i, line in ipairs(lines) do assert.is_true(#line <= 80, "line " .. i .. ":\n" .. s) end
    assert.is_truthy(lines[2]:find("^                0%.0"), s)            -- inside the first row: 16 spaces
    assert.is_truthy(s:find("\n               {0%.0, "), s)            -- the second row: 15 spaces
    assert.is_truthy(lines[#lines]:find("}}, shape={2, 30}, dtype=float32, device=cpu)", 1, true), s)
  end)

  it("puts the shape, dtype and device on a line of their own when they do not fit", function()
    assert.are.equal("dlpack.Tensor({0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0},\n" ..
                     "              shape={8}, dtype=float32, device=cpu)", tostring(dlpack.arange(8, "float32")))
    local s = tostring(dlpack.tensor((function() local t = {} for i = 1, 100 do t[i] = i * 1000 end return t end)()))
    assert.is_truthy(s:find("\n              shape={100}, dtype=int64, device=cpu)", 1, true), s)
  end)

  it("keeps a short tensor on one line", function()
    assert.are.equal("dlpack.Tensor({1, 2, 3}, shape={3}, dtype=int64, device=cpu)",
      tostring(dlpack.tensor({1, 2, 3})))
    assert.are.equal("dlpack.Tensor({{1, 2},\n               {3, 4}}, shape={2, 2}, dtype=int64, device=cpu)",
      tostring(dlpack.tensor({{1, 2}, {3, 4}})))
  end)

  it("wraps a summary's rows too", function()
    local s = tostring(dlpack.full({3000}, 123456.5, "float64"))
    for line in s:gmatch("[^\n]+") do assert.is_true(#line <= 80, s) end
    assert.is_truthy(s:find("...", 1, true), s)
  end)

  it("shows booleans", function()
    local s = tostring(dlpack.tensor({true, false}))
    contains(s, "true"); contains(s, "false")
  end)

  it("shows values in the logical order of a view", function()
    local s = tostring(dlpack.tensor({{101, 202}, {303, 404}}, "int64"):transpose(1, 2))
    local a, b, c, d = s:find("101", 1, true), s:find("303", 1, true), s:find("202", 1, true), s:find("404", 1, true)
    assert.is_truthy(a and b and c and d, s)
    assert.is_true(a < b and b < c and c < d, s)
  end)

  it("shows the shape, dtype and device", function()
    local s = tostring(dlpack.zeros({7, 5}, "int16"))
    contains(s, "7"); contains(s, "5")
    contains(s, "int16")
    contains(s, "cpu")
    assert.is_truthy(s:find("7%s*[,x]%s*5") or s:find("7%s*%*%s*5"), s)
  end)

  it("shows the value of a 0-d tensor", function()
    local s = tostring(dlpack.tensor(42))
    contains(s, "42")
    contains(s, "int64")
  end)

  it("describes empty tensors", function()
    local s = tostring(dlpack.zeros({0, 3}, "float64"))
    contains(s, "float64")
    contains(s, "3")
  end)

  it("names dtypes that have no element access without raising", function()
    for _, dtype in ipairs({"complex64", "complex128", "float8_e4m3fn", "float8_e5m2", "float6_e2m3fn",
        "float4_e2m1fn"}) do
      local ok, s = pcall(tostring, dlpack.zeros({2, 2}, dtype))
      assert.is_true(ok, s)
      contains(s, dtype)
    end
  end)

  it("summarises large tensors", function()
    for _, shape in ipairs({{1000, 1000}, {1000000}, {100, 100, 100}}) do
      local s = tostring(dlpack.zeros(shape, "float32"))
      assert.is_true(#s < 4000, #s .. " characters for " .. table.concat(shape, "x"))
      contains(s, "float32")
    end
  end)

  it("keeps the first and last values in a summary", function()
    local t = dlpack.zeros({100000}, "int32")
    t[1] = 12345
    t[-1] = 54321
    local s = tostring(t)
    assert.is_true(#s < 4000, #s .. " characters")
    contains(s, "12345"); contains(s, "54321")
    contains(s, "100000")
  end)

  it("mentions released for a released tensor, without raising", function()
    local t = dlpack.zeros({2})
    t:release()
    local ok, s = pcall(tostring, t)
    assert.is_true(ok, tostring(s))
    assert.are.equal("string", type(s))
    assert.is_truthy(s:lower():find("released"), s)
  end)

  it("keeps every line within 80 columns for 0 to 64 dimensions, any dtype, device and width", function()
    local fab = require "fabricate"
    -- the widest element of each dtype with element access, as the bytes of one element
    local widest = {
      int64 = string.pack("<I4I4", 0, 2 ^ 31), uint64 = string.rep("\255", 8), int32 = string.pack("<i4", -2 ^ 31),
      float64 = string.pack("<d", -1.7976931348623157e308), float32 = string.pack("<f", -3.4028234e38),
      complex128 = string.pack("<dd", -1.7976931348623157e308, -1.7976931348623157e308),
      complex64 = string.pack("<ff", -3.4028234e38, -3.4028234e38), bool = "\0",
    }
    local function check(t, what)
      local s = tostring(t)
      for line in s:gmatch("[^\n]+") do
        if #line > 80 then error(what .. ": a line of " .. #line .. " columns:\n" .. s) end
      end
    end
    for ndim = 0, 64 do
      for _, size in ipairs({1, 2, 3}) do
        local shape = {}
        for i = 1, ndim do shape[i] = size end
        if size ^ ndim <= 2 ^ 11 then -- 2^11: summarised
          for dtype, bytes in pairs(widest) do
            check(dlpack.frombytes(string.rep(bytes, size ^ ndim), dtype, shape), ndim .. "-d " .. dtype)
          end
        end
      end
      local shape = {}
      for i = 1, ndim do shape[i] = 1 end
      check(dlpack.frombytes(widest.complex128, "complex128", shape):as_readonly(), ndim .. "-d read-only")
      check(dlpack.zeros(shape, "float8_e4m3b11fnuz"), ndim .. "-d float8_e4m3b11fnuz")
      local big = {}
      for i = 1, ndim do big[i] = i == 1 and 0 or 2 ^ 53 - i end -- long sizes, no elements
      check(dlpack.zeros(big, "uint8"), ndim .. "-d, long sizes")
      -- other devices: pinned memory (shown) and a device the CPU cannot read (not shown)
      for _, device in ipairs({{3, 0}, {12, 2 ^ 31 - 1}}) do
        local t = dlpack.from_dlpack((fab.versioned {device_type = device[1], device_id = device[2], shape = shape}))
        check(t, ndim .. "-d on device type " .. device[1])
        t:release() -- the producer's deleter runs now, not in another spec's count
      end
    end
  end)

  it("wraps before an element whose closing braces and comma would pass 80 columns", function()
    for _, t in ipairs({dlpack.full({22}, 1, "int64"), dlpack.full({11}, 1000, "int64"),
                        dlpack.full({1, 16}, 10, "int64"), dlpack.full({1, 1, 13}, 100, "int64")}) do
      local s = tostring(t)
      for line in s:gmatch("[^\n]+") do assert.is_true(#line <= 80, s) end
    end
    assert.are.equal("dlpack.Tensor({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,\n" ..
                     "               1}, shape={22}, dtype=int64, device=cpu)", tostring(dlpack.full({22}, 1, "int64")))
  end)

  it("shows tensors of more than 19 dimensions flattened, in the row-major order of their view", function()
    local shape = {}
    for i = 1, 18 do shape[i] = 1 end
    shape[19], shape[20] = 2, 3
    local t = dlpack.arange(6):view(shape)
    local s = tostring(t:transpose(19, 20))
    assert.is_truthy(s:find("dlpack.Tensor(<flattened> {0, 3, 1, 4, 2, 5},", 1, true), s)
    assert.is_truthy(tostring(t:select(1, 1)):find("^dlpack%.Tensor%({{{"), "19 dimensions stay nested")
    local many = tostring(dlpack.zeros({2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}, "int8"))
    assert.is_truthy(many:find("<flattened> {0, 0, 0, ..., 0, 0, 0},", 1, true), many)
  end)

  it("wraps a long shape under its first size", function()
    local shape = {}
    for i = 1, 64 do shape[i] = 1 end
    local s = tostring(dlpack.zeros(shape))
    assert.are.equal("dlpack.Tensor(<flattened> {0.0},\n" ..
                     "              shape={" .. string.rep("1, ", 19) .. "1,\n" ..
                     "                     " .. string.rep("1, ", 19) .. "1,\n" ..
                     "                     " .. string.rep("1, ", 19) .. "1,\n" ..
                     "                     1, 1, 1, 1}, dtype=float32, device=cpu)", s)
  end)

  it("does not change the tensor", function()
    local t = dlpack.tensor({1, 2, 3})
    local _ = tostring(t)
    assert.are.same({1, 2, 3}, t:totable())
  end)
end)
