-- dlpack.unsafe.wrap: memory a Lua value owns, as a tensor with no copy (README, "Lua versions").
local dlpack = require "dlpack"
local unsafe = require "dlpack.unsafe"
local support = require "support"

local raises = support.raises

local function full_collect()
  collectgarbage()
  collectgarbage()
end

-- An owner whose collection is counted: the memory of `base` plus a finalizer.
local function owner_of(base, counter)
  return { base = base, sentinel = support.on_gc(function() counter.n = counter.n + 1 end) }
end

describe("unsafe.wrap", function()
  it("shares the memory, with shape, dtype and element strides", function()
    local base = dlpack.tensor({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, "int32")
    local t = unsafe.wrap(base:data_ptr(), {3, 4}, "int32", base)
    assert.are.same({3, 4}, t.shape)
    assert.are.equal(6, t[2][3])
    t[1][1] = 42
    assert.are.equal(42, base[1])
    local s = unsafe.wrap(base:data_ptr(), {4, 3}, "int32", {1, 4}, base) -- column-major
    assert.are.equal(4, s[1][2])
    assert.are.same({1, 4}, s.strides)
  end)

  it("keeps the owner alive while the tensor or any view lives", function()
    local counter = {n = 0}
    local base = dlpack.zeros({16}, "uint8")
    local t = unsafe.wrap(base:data_ptr(), {4, 4}, "uint8", owner_of(base, counter))
    local v = t:transpose(1, 2)[2]
    t, base = nil, nil -- luacheck: ignore 311
    full_collect()
    assert.are.equal(0, counter.n, "the owner was collected while a view lives")
    v[1] = 7
    assert.are.equal(7, v[1])
    v = nil -- luacheck: ignore 311
    full_collect()
    full_collect()
    assert.are.equal(1, counter.n, "the owner was not collected after the last view")
  end)

  it("exports a copy: the memory never leaves its lua_State", function()
    local base = dlpack.tensor({1, 2, 3}, "float64")
    local t = unsafe.wrap(base:data_ptr(), {3}, "float64", base)
    local cap = dlpack.to_dlpack(t)
    local back = dlpack.from_dlpack(cap)
    assert.are.same({1, 2, 3}, back:totable())
    assert.are_not.equal(base:data_ptr(), back:data_ptr())
    local err = raises(function() dlpack.to_dlpack(t, {copy = false}) end, "owned by a lua value")
    assert.is_true(dlpack.is_buffer_error(err))
    -- sharing inside the state stays free
    assert.are.equal(base:data_ptr(), dlpack.from_dlpack(t):data_ptr())
  end)

  -- the guard needs ephemeron tables (5.2 and later): README, "Memory a Lua value owns"
  local it_ephemeron = support.EPHEMERONS and it or function(name)
    pending(name .. ": weak tables are not ephemerons in " .. (support.LUAJIT and "LuaJIT" or _VERSION))
  end
  it_ephemeron("releases every tensor on the memory before the owner's finalizer can free it", function()
    -- a script's finalizer that runs in the same cycle as the owner's, before it, keeps a view
    local kept
    do
      local base = dlpack.zeros({64}, "uint8") -- the owner: its finalizer frees the memory
      local t = unsafe.wrap(base:data_ptr(), {64}, "uint8", base)
      base = nil -- luacheck: ignore 311
      support.on_gc(function() kept = {t:narrow(1, 1, 8), t} end)
    end
    full_collect()
    full_collect()
    assert.is_truthy(kept, "the script's finalizer ran")
    raises(function() return kept[1][1] end, "released")
    raises(function() kept[1][1] = 42 end, "released")
    raises(function() return kept[2]:clone() end, "released")
  end)

  it("keeps every wrap of one owner valid while the owner lives", function()
    local base = dlpack.tensor({1, 2, 3, 4}, "int32")
    unsafe.wrap(base:data_ptr(), {4}, "int32", base) -- dropped at once: its guard too
    local b = unsafe.wrap(base:data_ptr(), {2, 2}, "int32", base)
    full_collect()
    full_collect()
    assert.are.same({{1, 2}, {3, 4}}, b:totable())
    for _ = 1, 50 do unsafe.wrap(base:data_ptr(), {4}, "int32", base) end
    full_collect()
    assert.are.same({{1, 2}, {3, 4}}, b:totable())
    -- an owner without finalizers (a string) needs no guard
    assert.are.equal(1, unsafe.wrap(base:data_ptr(), {4}, "int32", "a string owner")[1])
  end)

  -- a wrap keeps its owner alive, and an owner tensor's memory went with release() all the same
  it("holds the memory of an owner tensor that is released (release, __close) while the wrap lives", function()
    local base = dlpack.arange(1000, "float32")
    local t = unsafe.wrap(base:data_ptr(), {1000}, "float32", base)
    local v = t:narrow(1, 991, 10)
    base:release()
    collectgarbage()
    assert.are.equal(999 * 1000 / 2, t:sum())
    assert.are.same({990, 991, 992, 993, 994, 995, 996, 997, 998, 999}, v:totable())
    t:release()
    assert.are.equal(990, v[1], "a view holds it too")
  end)

  it("is refused by the C API's exports, which cannot copy", function()
    local fab = require "fabricate"
    local base = dlpack.tensor({1, 2, 3}, "float64")
    local t = unsafe.wrap(base:data_ptr(), {3}, "float64", base)
    for _, form in ipairs({"versioned", "legacy"}) do
      local err = raises(function() fab.c_export(t, form) end, "owned by a lua value")
      assert.is_true(dlpack.is_buffer_error(err), form)
    end
    assert.are.equal(0, fab.c_export(base, "legacy")) -- the same call on the owner's own tensor exports
    assert.are.same({1, 2, 3}, t:totable(), "t is untouched")
  end)

  it("refuses layouts beyond 64 bits, NULL pointers and a missing owner", function()
    local base = dlpack.zeros({4})
    raises(function() unsafe.wrap(base:data_ptr(), {4}, "float32") end)
    raises(function() unsafe.wrap(base:data_ptr(), {2, 2}, "float32", {2 ^ 62, 1}, base) end, "64")
    raises(function() unsafe.wrap(0, {4}, "float32", base) end, "null")
    raises(function() unsafe.wrap("x", {4}, "float32", base) end, "integer address")
  end)
end)

describe("unsafe.wrap and dlpack.ffi under LuaJIT", function()
  if not support.LUAJIT then
    pending("LuaJIT only: FFI pointers and typed element pointers (this is " .. _VERSION .. ")")
    return
  end
  local ffi = require "ffi"
  local dlffi = require "dlpack.ffi"

  it("wraps an FFI buffer that owns its memory", function()
    local buf = ffi.new("float[?]", 6)
    for i = 0, 5 do buf[i] = i end
    local t = unsafe.wrap(buf, {2, 3}, "float32", buf)
    assert.are.equal(5, t[2][3])
    t[1][2] = 9
    assert.are.equal(9, buf[1])
  end)

  it("gives a typed pointer and element strides that keep the tensor alive", function()
    local p, strides = dlffi.pointer(dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "int16"):transpose(1, 2))
    full_collect()
    assert.are.same({1, 3}, strides)
    assert.is_true(ffi.istype("int16_t *", p))
    assert.are.equal(5, p[1 * strides[1] + 1 * strides[2]])
  end)

  it("gives a pointer to const elements for a read-only tensor: a write raises, also on a mapped file", function()
    local p = dlffi.pointer(dlpack.tensor({1, 2, 3}, "float32"):as_readonly())
    assert.is_true(ffi.istype("const float *", p))
    assert.are.equal(2, p[1])
    support.raises_plain(function() p[1] = 7 end, "constant")
    local path = os.tmpname()
    dlpack.save(path, dlpack.arange(4, "float64"))
    local mapped = dlpack.load(path, {mmap = true})
    local q = dlffi.pointer(mapped)
    assert.is_true(ffi.istype("const double *", q))
    support.raises_plain(function() q[0] = 7 end, "constant")
    assert.are.equal(3, q[3])
    mapped:release()
    os.remove(path)
    assert.is_true(ffi.istype("float *", (dlffi.pointer(dlpack.zeros({2}, "float32"))))) -- writable stays writable
  end)

  it("refuses a value that is not a tensor, naming dlpack.ffi.pointer and the argument", function()
    for _, v in ipairs({{}, "t", 1, io.stdout, rawget(_G, "newproxy")(true), ffi.new("int[1]")}) do
      support.raises_plain(function() dlffi.pointer(v) end,
        "bad argument #1 to 'dlpack.ffi.pointer' (dlpack.Tensor expected, got " .. type(v) .. ")")
    end
    support.raises_plain(function() dlffi.pointer() end, "dlpack.Tensor expected, got nil")
    local t = dlpack.zeros({2})
    t:release()
    support.raises_plain(function() dlffi.pointer(t) end,
      "bad argument #1 to 'dlpack.ffi.pointer' (tensor was released)")
  end)
end)
