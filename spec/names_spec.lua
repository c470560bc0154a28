-- Names a script passes (dtypes, devices, capsule names, fields) are compared with their length,
-- and messages about a name quote it and say what is accepted (README.md, "Decisions where the
-- contract is silent": Names).
local dlpack = require "dlpack"
local unsafe = require "dlpack.unsafe"
local support = require "support"

local raises, raises_plain = support.raises, support.raises_plain

-- Every way a script hands the module a dtype name, as functions of that name.
local function dtype_takers()
  local t = dlpack.zeros({2})
  return {
    empty = function(name) dlpack.empty({2}, name) end,
    zeros = function(name) dlpack.zeros({2}, name) end,
    ones = function(name) dlpack.ones({2}, name) end,
    full = function(name) dlpack.full({2}, 1, name) end,
    arange = function(name) dlpack.arange(3, name) end,
    tensor = function(name) dlpack.tensor({1, 2}, name) end,
    ["tensor of a tensor"] = function(name) dlpack.tensor(t, name) end,
    frombytes = function(name) dlpack.frombytes("abcd", name) end,
    ["t:to(dtype)"] = function(name) t:to(name) end,
    ["t:to(device, dtype)"] = function(name) t:to("cpu", name) end,
    ["t:to{dtype =}"] = function(name) t:to({dtype = name}) end,
    ["unsafe.wrap"] = function(name) unsafe.wrap(t:data_ptr(), {2}, name, t) end,
  }
end

-- Every way a script hands the module a device name.
local function device_takers()
  local t = dlpack.zeros({2})
  return {
    empty = function(name) dlpack.empty({2}, "float32", name) end,
    zeros = function(name) dlpack.zeros({2}, "float32", name) end,
    ones = function(name) dlpack.ones({2}, "float32", name) end,
    full = function(name) dlpack.full({2}, 1, "float32", name) end,
    ["t:to(device)"] = function(name) t:to(name) end,
    ["t:to(dtype, device)"] = function(name) t:to("float64", name) end,
    ["t:to{device =}"] = function(name) t:to({device = name}) end,
    ["to_dlpack{device =}"] = function(name) dlpack.to_dlpack(t, {device = name}) end,
    ["to_dlpack{dl_device =}"] = function(name) dlpack.to_dlpack(t, {dl_device = name}) end,
    ["from_dlpack{device =}"] = function(name) dlpack.from_dlpack(t, {device = name}) end,
  }
end

describe("names with an embedded NUL", function()
  it("refuses a dtype name with an embedded NUL, wherever a dtype is taken", function()
    for what, take in pairs(dtype_takers()) do
      for _, name in ipairs({"float32\0x", "float32\0", "int8\0\0"}) do
        local err = raises(function() take(name) end, "embedded nul")
        -- t:to(name) says "dtype or device name": a string there may be either
        assert.is_truthy(err:find("name '" .. name:gsub("%z", "\\0") .. "' contains", 1, true), what .. ": " .. err)
      end
    end
  end)

  it("refuses a device name with an embedded NUL, wherever a device is taken", function()
    for what, take in pairs(device_takers()) do
      for _, name in ipairs({"cpu\0", "cpu\0x", "cuda:0\0", "cuda\0:1", "opencl:1\0"}) do
        local err = raises(function() take(name) end, "embedded nul")
        assert.is_truthy(err:find("name '" .. name:gsub("%z", "\\0") .. "' contains", 1, true), what .. ": " .. err)
      end
    end
  end)

  it("refuses a capsule name with an embedded NUL (dlpack.unsafe.adopt)", function()
    local t = dlpack.zeros({2})
    for _, name in ipairs({"dltensor\0", "dltensor_versioned\0x"}) do
      raises_plain(function() unsafe.adopt(t:data_ptr(), name) end,
        "capsule name '" .. name:gsub("%z", "\\0") .. "' contains an embedded NUL")
    end
    raises_plain(function() unsafe.adopt(t:data_ptr(), "dltensor_v") end, "invalid capsule name 'dltensor_v'")
  end)

  it("refuses a field name with an embedded NUL", function()
    local t = dlpack.zeros({2, 3})
    for _, name in ipairs({"shape\0", "ndim\0x", "dtype\0"}) do
      raises_plain(function() return t[name] end, "no field or method '" .. name:gsub("%z", "\\0") .. "'")
      raises_plain(function() return t[name] end, "embedded NUL")
    end
    assert.are.same({2, 3}, t.shape)
  end)
end)

describe("device names in messages", function()
  it("names an unknown device and lists the accepted forms, without the CUDA id range", function()
    local err = raises_plain(function() dlpack.zeros({2}, nil, "gpu") end, "unknown device 'gpu'")
    for _, form in ipairs({"cpu", "cuda_host", "cuda_managed", "rocm_host", "KIND:N", "cuda", "rocm", "opencl",
                           "vulkan", "metal", "vpi", "ext_dev", "oneapi", "webgpu", "hexagon", "maia", "trn"}) do
      assert.is_truthy(err:find(form, 1, true), form .. " missing from: " .. err)
    end
    assert.is_falsy(err:find("63", 1, true), err)
    raises_plain(function() dlpack.zeros({2}, nil, "tpu:0") end, "unknown device 'tpu:0'")
    raises_plain(function() dlpack.zeros({2}, nil, "") end, "unknown device ''")
  end)

  it("gives the id range only when the id is what is wrong", function()
    local cases = {
      ["cuda:64"] = "device 'cuda:64': CUDA device ids go from 0 to 63",
      ["cuda:99999999999"] = "device 'cuda:99999999999': CUDA device ids go from 0 to 63",
      ["opencl:2147483648"] = "device 'opencl:2147483648': device ids go from 0 to 2147483647",
      ["cuda:-1"] = "device 'cuda:-1': the device id must be a non-negative integer",
      ["cuda:"] = "device 'cuda:': the device id must be a non-negative integer",
      ["rocm:x"] = "device 'rocm:x': the device id must be a non-negative integer",
      ["cpu:0"] = "device 'cpu:0': cpu takes no device id",
      ["cuda_host:1"] = "device 'cuda_host:1': cuda_host takes no device id",
    }
    for name, message in pairs(cases) do
      for what, take in pairs(device_takers()) do
        local err = raises_plain(function() take(name) end, message)
        assert.is_falsy(err:find("unknown device", 1, true), what .. ": " .. err)
      end
    end
  end)

  it("says when a string for t:to is neither a dtype nor a device", function()
    local t = dlpack.zeros({2})
    raises_plain(function() t:to("gpu") end, "'gpu' is neither a dtype nor a device")
    raises_plain(function() t:to({device = "gpu"}) end, "device: unknown device 'gpu'")
    raises_plain(function() t:to({dtype = "float128"}) end, "dtype: unknown dtype 'float128'")
    raises_plain(function() t:to({dtype = 32}) end, "dtype: a dtype name expected, got number")
  end)
end)
