-- The identity of the module: version strings, DLPack codes, dtype names, CUDA probing.
local dlpack = require "dlpack"
local support = require "support"

local DTYPES = support.DTYPES

local DEVICE_CODES = {
  cpu = 1, cuda = 2, cuda_host = 3, opencl = 4, vulkan = 7, metal = 8, vpi = 9,
  rocm = 10, rocm_host = 11, ext_dev = 12, cuda_managed = 13, oneapi = 14,
  webgpu = 15, hexagon = 16, maia = 17, trn = 18,
}

local raises, raises_plain = support.raises, support.raises_plain

describe("module identity", function()
  it("is a table returned by require 'dlpack'", function()
    assert.are.equal("table", type(dlpack))
    assert.are.equal(dlpack, require "dlpack")
  end)

  it("has a non-empty _VERSION string", function()
    assert.are.equal("string", type(dlpack._VERSION))
    assert.is_true(#dlpack._VERSION > 0)
  end)

  it("speaks DLPack 1.3", function()
    assert.are.equal("table", type(dlpack.DLPACK_VERSION))
    assert.are.equal(1, dlpack.DLPACK_VERSION.major)
    assert.are.equal(3, dlpack.DLPACK_VERSION.minor)
    assert.are.equal("integer", math.type(dlpack.DLPACK_VERSION.major))
    assert.are.equal("integer", math.type(dlpack.DLPACK_VERSION.minor))
  end)

  it("exports the functions of the contract", function()
    for _, name in ipairs({"empty", "zeros", "full", "tensor", "frombytes", "to_dlpack", "from_dlpack",
        "is_capsule", "capsule_info", "release_capsule", "is_buffer_error"}) do
      assert.are.equal("function", type(dlpack[name]), "dlpack." .. name)
    end
  end)

  it("keeps raw-pointer functions out of the safe module", function()
    assert.is_nil(dlpack.adopt)
    -- dlpack.take is NumPy's take (a tensor and an index), not dlpack.unsafe.take (a capsule)
    assert.are_not.equal(require("dlpack.unsafe").take, dlpack.take)
    assert.has_error(function() dlpack.take(dlpack.to_dlpack(dlpack.zeros({1}))) end)
    assert.is_nil(dlpack.pointer)
    assert.is_nil(dlpack.address)
    assert.is_nil(dlpack.wrap)
    assert.are.equal("function", type(require("dlpack.unsafe").wrap))
  end)
end)

describe("error messages", function()
  it("name module functions as dlpack.<name>, never dlpack.core.<name>", function()
    -- 5.1, 5.2 and LuaJIT say '?' for a function called through pcall; 5.3 and later look it up
    local names_functions = _VERSION >= "Lua 5.3"
    for _, f in ipairs({"frombytes", "zeros", "to_dlpack", "capsule_info"}) do
      local err = select(2, pcall(dlpack[f], "x"))
      assert.is_falsy(err:find("dlpack.core", 1, true), err)
      if names_functions then assert.is_truthy(err:find("'dlpack." .. f .. "'", 1, true), err) end
    end
  end)
end)

describe("error messages of the module's own", function()
  it("start with the function's name as scripts call it", function()
    local t = dlpack.zeros({2})
    local cases = {
      {function() return dlpack.zeros({2}, nil, "opencl:0") end, "dlpack.zeros: cannot allocate memory on device"},
      {function() return dlpack.empty({2}, nil, "vulkan:1") end, "dlpack.empty: cannot allocate memory on device"},
      {function() return dlpack.full({2}, 300, "uint8") end, "dlpack.full: 300 is out of range for uint8"},
      {function() return dlpack.to_dlpack(t, {stream = 1}) end, "dlpack.to_dlpack: stream must be nil or -1"},
      {function() return dlpack.from_dlpack(setmetatable({}, {__dlpack = function() return 1 end})) end,
        "dlpack.from_dlpack: __dlpack must return a capsule"},
    }
    local cap = dlpack.to_dlpack(t)
    dlpack.release_capsule(cap)
    cases[#cases + 1] = {function() return dlpack.from_dlpack(cap) end, "dlpack.from_dlpack: the capsule was already"}
    cases[#cases + 1] = {function() return dlpack.release_capsule(cap) end, "dlpack.release_capsule: the capsule was"}
    if not dlpack.cuda.is_available() then
      cases[#cases + 1] = {function() return dlpack.zeros({2}, nil, "cuda") end, "dlpack.zeros: CUDA is not available"}
      cases[#cases + 1] = {function() return dlpack.cuda.Stream() end, "dlpack.cuda.Stream: CUDA is not available"}
      cases[#cases + 1] = {function() return dlpack.cuda.Event() end, "dlpack.cuda.Event: CUDA is not available"}
    end
    for _, case in ipairs(cases) do raises_plain(case[1], case[2]) end
  end)
end)

describe("one copy of the library per lua_State", function()
  it("refuses a second copy (another file) opened in a state that has the first", function()
    local other = support.BUILD .. "/gen/dlpack/core.so" -- a test build of the same sources
    local f = io.open(other, "rb")
    if not f then return pending(other .. " not built (make all builds it)") end
    f:close()
    local open = assert(package.loadlib(other, "luaopen_dlpack_core"))
    support.raises_plain(open, "another copy of the dlpack library")
    -- the same copy opened again is the same module
    assert.are.equal("function", type(package.loadlib(package.searchpath("dlpack.core", package.cpath),
      "luaopen_dlpack_core")().zeros))
    assert.are.same({2}, dlpack.zeros({2}).shape)
  end)
end)

describe("device_type", function()
  it("maps every device name of the contract to its DLPack code", function()
    for name, code in pairs(DEVICE_CODES) do
      assert.are.equal(code, dlpack.device_type[name], "device_type." .. name)
      assert.are.equal("integer", math.type(dlpack.device_type[name]), "device_type." .. name)
    end
  end)

  it("uses codes 1..18 only, and never the unused 5 and 6", function()
    for name, code in pairs(dlpack.device_type) do
      assert.are.equal("string", type(name))
      assert.is_true(code >= 1 and code <= 18, "code of " .. name)
      assert.is_true(code ~= 5 and code ~= 6, "code of " .. name)
    end
  end)
end)

describe("dtype names", function()
  it("accepts every dtype name of the contract and reports it back", function()
    for _, name in ipairs(DTYPES) do
      local t = dlpack.zeros({2}, name)
      assert.are.equal(name, t.dtype)
    end
  end)

  it("raises on an unknown dtype name, naming it", function()
    raises(function() dlpack.zeros({2}, "float128") end, "float128")
    raises(function() dlpack.zeros({2}, "Float32") end, "float32")
  end)
end)

describe("cuda probing on a machine without a GPU", function()
  it("has a cuda table", function()
    assert.are.equal("table", type(dlpack.cuda))
  end)

  it("is_available returns false and a reason string, without raising", function()
    local ok, available, reason = pcall(dlpack.cuda.is_available)
    assert.is_true(ok)
    assert.is_false(available)
    assert.are.equal("string", type(reason))
    assert.is_true(#reason > 0)
  end)

  it("device_count returns 0", function()
    assert.are.equal(0, dlpack.cuda.device_count())
  end)
end)

describe("loading the module again in the same state", function()
  -- busted unloads package.loaded between spec files, and hosts may do the same
  local function reload()
    local saved_dlpack, saved_core = package.loaded["dlpack"], package.loaded["dlpack.core"]
    package.loaded["dlpack"], package.loaded["dlpack.core"] = nil, nil
    local again = require "dlpack"
    package.loaded["dlpack"], package.loaded["dlpack.core"] = saved_dlpack, saved_core
    return again
  end

  it("keeps tensors made before usable with both module tables", function()
    local t = dlpack.tensor({1, 2, 3}, "int32")
    local again = reload()
    assert.are.equal(3, t:numel())
    assert.are.equal(2, t[2])
    t[2] = 20
    assert.are.same({1, 20, 3}, again.from_dlpack(t):totable())
    assert.are.same({1, 20, 3}, again.zeros({3}, "int32"):copy(t):totable())
    local u = again.tensor({4, 5})
    assert.are.same({4, 5}, dlpack.from_dlpack(u):totable())
    assert.are.equal(getmetatable(t), getmetatable(u))
  end)

  -- they opened the module again for its metatables: a new dlpack.Tensor, which the tensors'
  -- __index then read, and the script's one (its added methods) no more
  it("is not opened again by dlpack.unsafe and dlpack.ipc: dlpack.Tensor stays the methods", function()
    local script = support.run_lua(([[
      package.path = %q; package.cpath = %q
      local d = require "dlpack"
      d.Tensor.twice = function(t) return t * 2 end
      local t = d.ones({2})
      local mt = getmetatable(t)
      require "dlpack.unsafe"
      pcall(require, "dlpack.ipc") -- (not on every platform)
      d.Tensor.thrice = function(x) return x * 3 end
      print(string.format("%%g %%g %%s", t:twice()[1], t:thrice()[1], tostring(getmetatable(t) == mt)))
    ]]):format(package.path, package.cpath))
    assert.are.equal("2 3 true", script:match("^[^\r\n]*"), script)
  end)

  it("still releases tensors made before", function()
    local t = dlpack.zeros({2})
    reload()
    t:release()
    local ok, err = pcall(function() return t[1] end)
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find("released"), tostring(err))
  end)
end)
