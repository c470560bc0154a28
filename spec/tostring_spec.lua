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

  it("does not change the tensor", function()
    local t = dlpack.tensor({1, 2, 3})
    local _ = tostring(t)
    assert.are.same({1, 2, 3}, t:totable())
  end)
end)
