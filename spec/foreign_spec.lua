-- Foreign producers: every field a C producer hands over is validated, every
-- refusal is a clear error, and the producer's deleter runs exactly once on
-- every path (refused, released, closed, collected, viewed, re-exported, taken).
-- The producer is spec/c/fabricate.c (`require "fabricate"`), which counts the
-- deleter calls of the tensors it fabricates.
local dlpack = require "dlpack"
local unsafe = require "dlpack.unsafe"
local fab = require "fabricate"
local support = require "support"

local MARK = "dlpack.BufferError"

local f32 = support.f32

local function ones(n)
  local t = {}
  for i = 1, n do t[i] = 1 end
  return t
end

local function make(form, spec)
  if form == "legacy" then return fab.legacy(spec) end
  return fab.versioned(spec)
end

local function import(spec, form)
  return (dlpack.from_dlpack((make(form, spec))))
end

local deletes = support.deletes

-- errors here are matched as plain text, ignoring case (MARK has a '.')
local raises = support.raises_plain

-- A foreign tensor built from spec is refused with a BufferError that names
-- one of words; its deleter runs exactly once, at once, and the capsule counts
-- as consumed afterwards.
local function refuses(spec, form, words)
  local before = fab.deleted()
  local cap = make(form, spec)
  local ok, err = pcall(dlpack.from_dlpack, cap)
  assert.is_false(ok, "expected the tensor to be refused")
  err = tostring(err)
  assert.is_truthy(err:find(MARK, 1, true), "no '" .. MARK .. "' in: " .. err)
  if words then
    local low, hit = err:lower(), false
    for _, w in ipairs(words) do
      if low:find(w, 1, true) then hit = true end
    end
    assert.is_true(hit, "error '" .. err .. "' names none of: " .. table.concat(words, ", "))
  end
  assert.are.equal(1, fab.deleted() - before, "deleter calls after the refusal")
  assert.are.equal(0, fab.double_deletes())
  raises(function() dlpack.from_dlpack(cap) end, "consumed")
  collectgarbage()
  collectgarbage()
  assert.are.equal(1, fab.deleted() - before, "deleter calls after a full collection")
  assert.are.equal(0, fab.double_deletes())
  return err
end

local FORMS = { "versioned", "legacy" }

describe("foreign tensors", function()
  local live_before, live_at_start

  setup(function()
    collectgarbage()
    collectgarbage()
    live_at_start = fab.live()
  end)

  before_each(function()
    collectgarbage()
    collectgarbage()
    live_before = fab.live()
  end)

  after_each(function()
    collectgarbage()
    collectgarbage()
    fab.reclaim()
    assert.are.equal(0, fab.double_deletes(), "a deleter ran twice")
    assert.are.equal(0, fab.tampered(), "a consumer wrote into a producer's DLTensor")
  end)

  describe("that are refused", function()
    it("calls the deleter and touches nothing else when the major version is not 1", function()
      -- everything past flags is garbage: a consumer that reads it crashes or misreports
      refuses({ major = 2, ndim = 123456789, shape = false, strides = false, data = false,
                code = 255, bits = 0, lanes = 0, device_type = 0, device_id = -7 },
              "versioned", { "version", "major" })
      refuses({ major = 0 }, "versioned", { "version", "major" })
      refuses({ major = 0xffffffff, minor = 0xffffffff, ndim = -5 }, "versioned", { "version", "major" })
    end)

    it("refuses a major version above 1 from a C producer, deleter called once", function()
      local p = fab.c_producer { major = 3, ndim = 99999, shape = false }
      local n = deletes(function()
        local err = raises(function() dlpack.from_dlpack(p) end)
        assert.is_truthy(err:find(MARK, 1, true), err)
      end)
      assert.are.equal(1, n)
    end)

    for _, form in ipairs(FORMS) do
      describe("(" .. form .. ")", function()
        it("refuses a negative ndim", function()
          refuses({ ndim = -1 }, form, { "ndim", "dim" })
          refuses({ ndim = -2147483648, shape = false, strides = false }, form, { "ndim", "dim" })
        end)

        it("refuses ndim above 64", function()
          refuses({ ndim = 65, shape = ones(65) }, form, { "ndim", "dim" })
          refuses({ ndim = 2147483647, shape = ones(70) }, form, { "ndim", "dim" })
        end)

        it("refuses a NULL shape when ndim > 0", function()
          refuses({ ndim = 2, shape = false }, form, { "shape", "null" })
        end)

        it("refuses negative extents in the shape", function()
          refuses({ shape = { 2, -1 } }, form, { "shape", "negative", "size" })
          refuses({ shape = { -4 } }, form, { "shape", "negative", "size" })
          refuses({ shape = { math.mininteger } }, form, { "shape", "negative", "size" })
        end)

        it("refuses unknown dtype codes", function()
          refuses({ code = 18, bits = 8 }, form, { "dtype", "code", "type" })
          refuses({ code = 255, bits = 32 }, form, { "dtype", "code", "type" })
        end)

        it("refuses the opaque handle code 3", function()
          refuses({ code = 3, bits = 64 }, form, { "dtype", "code", "type", "opaque" })
        end)

        it("refuses bit widths that do not belong to the code", function()
          local bad = {
            { 2, 8 }, { 2, 128 }, { 0, 12 }, { 1, 12 }, { 0, 1 }, { 6, 16 }, { 6, 1 }, { 4, 32 },
            { 5, 16 }, { 7, 16 }, { 8, 4 }, { 10, 16 }, { 12, 6 }, { 14, 16 },
            { 15, 8 }, { 16, 4 }, { 15, 16 }, { 17, 8 }, { 17, 6 },
          }
          for _, cb in ipairs(bad) do
            refuses({ code = cb[1], bits = cb[2] }, form, { "dtype", "bits", "type", "code" })
          end
        end)

        it("refuses vector types (lanes ~= 1)", function()
          refuses({ lanes = 2 }, form, { "lanes", "dtype", "vector", "type" })
          refuses({ lanes = 4, bits = 32 }, form, { "lanes", "dtype", "vector", "type" })
          refuses({ lanes = 0 }, form, { "lanes", "dtype", "vector", "type" })
        end)

        it("refuses unknown device types", function()
          for _, dt in ipairs { 0, 5, 6, 19, -1, 1000 } do
            refuses({ device_type = dt }, form, { "device" })
          end
        end)

        it("refuses a negative device id", function()
          refuses({ device_id = -1 }, form, { "device", "id" })
          refuses({ device_type = 7, device_id = -3 }, form, { "device", "id" })
        end)

        it("refuses NULL data when there are elements", function()
          refuses({ data = false }, form, { "data", "null" })
          refuses({ shape = { 1 }, data = false }, form, { "data", "null" })
        end)

        it("refuses element counts that overflow int64", function()
          refuses({ shape = { 2 ^ 40, 2 ^ 40 } }, form, { "overflow", "size", "large", "shape" })
          refuses({ shape = { 2 ^ 62, 4 }, strides = { 4, 1 } }, form,
                  { "overflow", "size", "large", "shape" })
        end)

        it("refuses byte sizes that overflow int64", function()
          -- 2^61 float64 elements fit an int64 count but not an int64 byte size
          refuses({ shape = { 2 ^ 61 }, strides = { 1 }, code = 2, bits = 64 }, form,
                  { "overflow", "size", "large", "shape", "stride" })
        end)

        it("refuses strides whose extent overflows", function()
          local words = { "overflow", "stride", "large", "size" }
          refuses({ shape = { 3 }, strides = { 2 ^ 62 } }, form, words)
          refuses({ shape = { 3 }, strides = { -2 ^ 62 } }, form, words)
          refuses({ shape = { 2, 2 }, strides = { 2 ^ 62, 2 ^ 62 } }, form, words)
          refuses({ shape = { 2 }, strides = { 2 ^ 61 }, code = 2, bits = 64 }, form, words)
          refuses({ shape = { 2 }, strides = { math.mininteger } }, form, words)
        end)
      end)
    end

    it("does not take ownership of a raw pointer returned by a __dlpack written in Lua", function()
      local ptr, name = fab.raw_versioned {}
      local producer = setmetatable({}, {
        __dlpack_device = function() return 1, 0 end,
        __dlpack = function() return ptr, name end,
      })
      local n = deletes(function() raises(function() dlpack.from_dlpack(producer) end) end)
      assert.are.equal(0, n, "the consumer called a deleter it does not own")
      assert.is_true(fab.delete(ptr), "the producer's tensor was freed by the consumer")
    end)
  end)

  describe("that are accepted", function()
    it("computes row-major strides when strides is NULL (before v1.2, and legacy)", function()
      local specs = {
        { "versioned", 0 }, { "versioned", 1 }, { "legacy" },
      }
      for _, s in ipairs(specs) do
        local n = deletes(function()
          local t = import({ minor = s[2], shape = { 2, 3 }, strides = false, data = f32(1, 2, 3, 4, 5, 6) }, s[1])
          assert.are.same({ 2, 3 }, t.shape)
          assert.are.same({ 3, 1 }, t.strides)
          assert.is_true(t:is_contiguous())
          assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, t:totable())
          assert.are.equal(6, t:get(2, 3))
          t:release()
        end)
        assert.are.equal(1, n)
      end
    end)

    it("accepts a NULL shape (and NULL strides) for a 0-d tensor (v1.3)", function()
      local n = deletes(function()
        local t = import { ndim = 0, shape = false, strides = false, data = f32(7.5) }
        assert.are.equal(0, t.ndim)
        assert.are.same({}, t.shape)
        assert.are.equal(1, t:numel())
        assert.are.equal(7.5, t:item())
        t:release()
      end)
      assert.are.equal(1, n)
    end)

    for _, form in ipairs(FORMS) do
      it("accepts 0-d tensors with a shape pointer (" .. form .. ")", function()
        local t = import({ ndim = 0, data = f32(-2.5) }, form)
        assert.are.equal(0, t.ndim)
        assert.are.equal(-2.5, t:item())
        t:release()
      end)

      it("accepts NULL data for zero-size tensors (" .. form .. ")", function()
        for _, shape in ipairs { { 0 }, { 3, 0 }, { 0, 4 }, { 2, 0, 5 } } do
          local n = deletes(function()
            local t = import({ shape = shape, data = false }, form)
            assert.are.same(shape, t.shape)
            assert.are.equal(0, t:numel())
            assert.are.equal(0, t.nbytes)
            t:release()
          end)
          assert.are.equal(1, n)
        end
      end)

      it("reads from data + byte_offset (" .. form .. ")", function()
        local cap, base = make(form, { data = f32(-1, -1, 10, 20, 30, 40), byte_offset = 8 })
        local t = dlpack.from_dlpack(cap)
        assert.are.same({ 10, 20, 30, 40 }, t:totable())
        assert.are.equal(10, t[1])
        assert.are.equal(base + 8, fab.addr(t:data_ptr()))
        local v = t:narrow(1, 3, 2)
        assert.are.same({ 30, 40 }, v:totable())
        v:release()
        t:release()
      end)

      it("honours negative strides (" .. form .. ")", function()
        local t = import({ shape = { 4 }, strides = { -1 }, byte_offset = 12, data = f32(1, 2, 3, 4) }, form)
        assert.are.same({ -1 }, t.strides)
        assert.are.same({ 4, 3, 2, 1 }, t:totable())
        assert.are.equal(4, t[1])
        assert.are.equal(1, t[-1])
        t:release()
        local m = import({ shape = { 2, 3 }, strides = { -3, 1 }, byte_offset = 12,
                           data = f32(1, 2, 3, 4, 5, 6) }, form)
        assert.are.same({ { 4, 5, 6 }, { 1, 2, 3 } }, m:totable())
        m:release()
      end)

      it("honours zero strides (" .. form .. ")", function()
        local t = import({ shape = { 3 }, strides = { 0 }, data = f32(7) }, form)
        assert.are.same({ 7, 7, 7 }, t:totable())
        t:release()
        local m = import({ shape = { 2, 3 }, strides = { 0, 1 }, data = f32(1, 2, 3) }, form)
        assert.are.same({ { 1, 2, 3 }, { 1, 2, 3 } }, m:totable())
        assert.are.same({ 0, 1 }, m.strides)
        m:release()
      end)

      it("keeps the producer's strides (column-major) (" .. form .. ")", function()
        local t = import({ shape = { 2, 2 }, strides = { 1, 2 }, data = f32(1, 2, 3, 4) }, form)
        assert.are.same({ 1, 2 }, t.strides)
        assert.are.same({ { 1, 3 }, { 2, 4 } }, t:totable())
        assert.is_false(t:is_contiguous())
        t:release()
      end)

      it("accepts 64 dimensions, the module's maximum (" .. form .. ")", function()
        local t = import({ ndim = 64, shape = ones(64), data = f32(3) }, form)
        assert.are.equal(64, t.ndim)
        assert.are.equal(1, t:numel())
        assert.are.equal(3, t:item())
        t:release()
      end)

      it("accepts every DLPack dtype with its name (" .. form .. ")", function()
        local dtypes = {
          { 6, 8, "bool" }, { 0, 8, "int8" }, { 0, 16, "int16" }, { 0, 32, "int32" }, { 0, 64, "int64" },
          { 1, 8, "uint8" }, { 1, 16, "uint16" }, { 1, 32, "uint32" }, { 1, 64, "uint64" },
          { 2, 16, "float16" }, { 4, 16, "bfloat16" }, { 2, 32, "float32" }, { 2, 64, "float64" },
          { 5, 64, "complex64" }, { 5, 128, "complex128" },
          { 7, 8, "float8_e3m4" }, { 8, 8, "float8_e4m3" }, { 9, 8, "float8_e4m3b11fnuz" },
          { 10, 8, "float8_e4m3fn" }, { 11, 8, "float8_e4m3fnuz" }, { 12, 8, "float8_e5m2" },
          { 13, 8, "float8_e5m2fnuz" }, { 14, 8, "float8_e8m0fnu" },
          { 15, 6, "float6_e2m3fn" }, { 16, 6, "float6_e3m2fn" }, { 17, 4, "float4_e2m1fn" },
        }
        for _, d in ipairs(dtypes) do
          local n = deletes(function()
            local t = import({ code = d[1], bits = d[2], shape = { 4 }, data = string.rep("\0", 64) }, form)
            assert.are.equal(d[3], t.dtype)
            assert.are.same({ 4 }, t.shape)
            t:release()
          end)
          assert.are.equal(1, n, d[3])
        end
      end)
    end

    it("reads integer and boolean elements of foreign memory", function()
      local t = import { code = 0, bits = 16, shape = { 3 }, data = string.pack("<i2i2i2", -3, 0, 300) }
      assert.are.same({ -3, 0, 300 }, t:totable())
      t:release()
      local b = import { code = 6, bits = 8, shape = { 3 }, data = "\1\0\1" }
      assert.are.same({ true, false, true }, b:totable())
      b:release()
    end)

    it("accepts minor versions 0 to 3 and a newer minor", function()
      for _, minor in ipairs { 0, 1, 2, 3, 9, 255 } do
        local n = deletes(function()
          local t = import { minor = minor, data = f32(1, 2, 3, 4) }
          assert.are.same({ 1, 2, 3, 4 }, t:totable())
          t:release()
        end)
        assert.are.equal(1, n, "minor " .. minor)
      end
    end)

    it("makes legacy tensors writable, in the producer's memory", function()
      local cap, base = fab.legacy { data = f32(1, 2, 3, 4) }
      local t = dlpack.from_dlpack(cap)
      assert.is_false(t.readonly)
      assert.are.equal(base, fab.addr(t:data_ptr()))
      t[2] = 9
      assert.are.equal(9, t[2])
      local again = dlpack.from_dlpack(t)
      assert.are.equal(9, again[2])
      again:release()
      t:release()
    end)

    it("makes versioned tensors without flags writable", function()
      local t = import { data = f32(1, 2, 3, 4) }
      assert.is_false(t.readonly)
      t:set(4, 0.5)
      assert.are.equal(0.5, t[4])
      t:release()
    end)

    it("maps READ_ONLY to a read-only tensor", function()
      local t = import { flags = 1, data = f32(1, 2, 3, 4) }
      assert.is_true(t.readonly)
      assert.are.same({ 1, 2, 3, 4 }, t:totable())
      raises(function() t[1] = 5 end, "read-only")
      raises(function() t:set(1, 5) end, "read-only")
      raises(function() t:fill(0) end, "read-only")
      assert.are.same({ 1, 2, 3, 4 }, t:totable())
      local v = t:narrow(1, 2, 2)
      assert.is_true(v.readonly)
      raises(function() v[1] = 5 end, "read-only")
      v:release()
      t:release()
    end)

    it("accepts IS_COPIED and the sub-byte padding flag", function()
      local t = import { flags = 2, data = f32(1, 2, 3, 4) }
      assert.is_false(t.readonly)
      assert.are.same({ 1, 2, 3, 4 }, t:totable())
      t:release()
      local p = import { flags = 4, code = 17, bits = 4, data = string.rep("\0", 4) }
      assert.are.equal("float4_e2m1fn", p.dtype)
      p:release()
    end)

    it("accepts a NULL deleter and has nothing to call", function()
      local n = deletes(function()
        local t = import { deleter = false, data = f32(5, 6, 7, 8) }
        assert.are.same({ 5, 6, 7, 8 }, t:totable())
        local v = t:narrow(1, 2, 2)
        t:release()
        assert.are.same({ 6, 7 }, v:totable())
        v:release()
        collectgarbage()
      end)
      assert.are.equal(0, n)
      assert.are.equal(1, fab.reclaim())
      n = deletes(function()
        local t = import({ deleter = false }, "legacy")
        t:release()
      end)
      assert.are.equal(0, n)
      assert.are.equal(1, fab.reclaim())
    end)

    it("shows a foreign device's metadata but refuses its elements, naming the device", function()
      local t = import { device_type = 7, device_id = 1, shape = { 2, 2 }, byte_offset = 16,
                         data = string.rep("\0", 64) }
      assert.are.equal("vulkan:1", t.device)
      assert.are.same({ 2, 2 }, t.shape)
      assert.are.equal("float32", t.dtype)
      assert.are.equal(4, t:numel())
      raises(function() return t[1][1] end, "vulkan")
      raises(function() return t:get(1, 1) end, "vulkan")
      raises(function() t:set(1, 1, 0) end, "vulkan")
      raises(function() return t:totable() end, "vulkan")
      raises(function() return t:tobytes() end, "vulkan")
      raises(function() return dlpack.zeros({ 2, 2 }):copy(t) end, "vulkan")
      raises(function() return t:to("cpu") end, "vulkan")
      assert.is_string(tostring(t))
      t:release()
      local o = import({ device_type = 4, device_id = 2, shape = { 1 } }, "legacy")
      assert.are.equal("opencl:2", o.device)
      raises(function() return o:item() end, "opencl")
      o:release()
    end)

    it("reads host-accessible device kinds (cuda_host, rocm_host, cuda_managed)", function()
      for _, d in ipairs { { 3, "cuda_host" }, { 11, "rocm_host" }, { 13, "cuda_managed" } } do
        local t = import { device_type = d[1], data = f32(1, 2, 3, 4) }
        assert.are.equal(d[2], t.device)
        assert.are.same({ 1, 2, 3, 4 }, t:totable())
        t:release()
      end
    end)

    -- the computing functions give cpu tensors for them, whatever family they belong to: the
    -- scans once allocated their results on the operand's device (a cuda_host result needs the
    -- CUDA driver: "CUDA is not available" where there is none)
    it("computes on host-accessible device kinds into cpu tensors", function()
      for _, d in ipairs { { 3, "cuda_host" }, { 11, "rocm_host" }, { 13, "cuda_managed" } } do
        local t = import { device_type = d[1], shape = { 2, 2 }, data = f32(1, 2, 3, 4) }
        local results = {
          add = dlpack.add(t, t), sum = dlpack.sum(t, 1), sort = dlpack.sort(t, 2),
          cumsum = dlpack.cumsum(t, 2), cumsum_flat = dlpack.cumsum(t), cumprod = dlpack.cumprod(t, 1),
          softmax = dlpack.softmax(t, 2), log_softmax = dlpack.log_softmax(t, 1),
          softmax_half = dlpack.softmax(t, 2, { dtype = "float16" }),
        }
        for name, r in pairs(results) do assert.are.equal("cpu", r.device, d[2] .. " " .. name) end
        assert.are.same({ { 1, 3 }, { 3, 7 } }, results.cumsum:totable())
        assert.are.same({ 1, 3, 6, 10 }, results.cumsum_flat:totable())
        assert.are.same({ { 1, 2 }, { 3, 8 } }, results.cumprod:totable())
        assert.is_true(dlpack.allclose(results.softmax, dlpack.softmax(t:to("float32", "cpu"), 2)))
        t:release()
      end
    end)

    -- functions composed of others (shape.c, norm, unique along a dim) made their copies, ranges and
    -- temporaries on the operand's device: "CUDA is not available" without a driver
    it("computes composed functions of host-accessible device kinds into cpu tensors", function()
      local function cpu_of(t) return t:to(t.dtype, "cpu") end
      for _, d in ipairs { { 3, "cuda_host" }, { 11, "rocm_host" }, { 13, "cuda_managed" } } do
        local t = import { device_type = d[1], shape = { 2, 3 }, data = f32(1, -2, 3, 4, 5, -6) }
        local v = import { device_type = d[1], shape = { 3 }, data = f32(7, 8, 9) }
        local i = import { device_type = d[1], shape = { 2 }, data = string.pack("<i8i8", 3, 4), code = 0, bits = 64 }
        local c, cv, ci = cpu_of(t), cpu_of(v), cpu_of(i)
        local calls = {
          tril = function(x) return dlpack.tril(x[1]) end, triu = function(x) return dlpack.triu(x[1], 1) end,
          diag_of_matrix = function(x) return dlpack.diag(x[1]) end,
          diag_of_vector = function(x) return dlpack.diag(x[2], -1) end,
          tile = function(x) return dlpack.tile(x[1], 2, 1) end,
          ["repeat"] = function(x) return x[1]["repeat"](x[1], 1, 2) end,
          -- more dimensions than an expanded view can double: one dimension at a time (t's shape
          -- was read there after its only reference, the argument, was replaced by the view)
          tile_deep = function(x)
            local shape = { 2, 3 }
            for k = 3, 33 do shape[k] = 1 end
            return dlpack.tile(x[1]:view(shape), 2)
          end,
          repeat_interleave = function(x) return dlpack.repeat_interleave(x[1]:transpose(1, 2), 2) end,
          repeat_interleave_dim = function(x) return dlpack.repeat_interleave(x[1], 2, 1) end,
          roll = function(x) return dlpack.roll(x[1]:transpose(1, 2), 1) end,
          roll_none = function(x) return dlpack.roll(x[1], 0) end,
          outer = function(x) return dlpack.outer(x[1]:transpose(1, 2), x[2]) end,
          einsum = function(x) return dlpack.einsum("ij,kj->ik", x[1], x[1]) end,
          einsum_dtype = function(x) return dlpack.einsum("ij->i", x[1], { dtype = "float64" }) end,
          norm_int = function(x) return dlpack.norm(x[3], 2, 1, true) end,
          norm_2 = function(x) return dlpack.norm(x[1], 2, { 1, 2 }, true) end,
          norm_nuc = function(x) return dlpack.norm(x[1], "nuc", { 1, 2 }, true) end,
          unique_dim = function(x) return (dlpack.unique(x[1], { dim = 2 })) end,
        }
        for name, f in pairs(calls) do
          local ok, r = pcall(f, { t, v, i })
          assert.is_true(ok, d[2] .. " " .. name .. ": " .. tostring(r))
          assert.are.equal("cpu", r.device, d[2] .. " " .. name)
          assert.are.same(f({ c, cv, ci }):totable(), r:totable(), d[2] .. " " .. name)
        end
        for _, x in ipairs { t, v, i } do x:release() end
      end
    end)

    -- tile read t's shape after the view had replaced its only reference, the argument: a
    -- collector that completes cycles at every allocation freed it (ASan: heap-use-after-free)
    it("tiles pinned memory whose only reference is the argument, the collector running hard", function()
      if _VERSION ~= "Lua 5.4" then return pending("the collector's parameters are Lua 5.4's here") end
      local shape, data = { 256, 256 }, string.rep(f32(1.5), 256 * 256)
      for k = 3, 33 do shape[k] = 1 end
      local mode = collectgarbage("incremental", 1, 1000, 63) -- a whole cycle at nearly every step
      local ok, err = pcall(function()
        for _ = 1, 4 do
          local r = dlpack.tile(import { device_type = 3, shape = shape, data = data }:transpose(1, 2), 1)
          assert.are.equal("cpu", r.device)
          assert.are.equal(1.5, r:sum() / r:numel())
        end
      end)
      collectgarbage("incremental", 200, 100, 13) -- Lua 5.4's defaults
      if mode == "generational" then collectgarbage("generational") end
      assert(ok, err)
    end)

    -- no work can be queued on managed memory where no CUDA driver loads: nothing to order, so
    -- it is exchanged and relabelled as pinned memory is (with a driver the consumer's stream waits)
    it("exchanges and relabels managed memory without a CUDA driver", function()
      if dlpack.cuda.is_available() then return pending("a CUDA driver loads here: managed memory is ordered") end
      local m = import { device_type = 13, shape = { 2 }, data = f32(1, 2) }
      local r = dlpack.from_dlpack(m, { device = "cpu" })
      assert.are.equal("cpu", r.device)
      assert.are.same({ 1, 2 }, r:totable())
      assert.are.equal("cuda_managed", dlpack.from_dlpack(m).device)
      assert.are.equal("cuda_managed", dlpack.from_dlpack(dlpack.to_dlpack(m)).device)
      assert.are.equal("cuda_managed", dlpack.from_dlpack(m, { stream = 2 }).device)
      raises(function() return dlpack.from_dlpack(m, { stream = 7 }) end, "stream must be a dlpack.cuda.Stream")
      r:release()
      m:release()
    end)

    it("writes an out= of a host-accessible device kind that overlaps its input, through a cpu temporary", function()
      for _, d in ipairs { { 3, "cuda_host" }, { 11, "rocm_host" }, { 13, "cuda_managed" } } do
        local t = import { device_type = d[1], shape = { 4 }, data = f32(1, 2, 3, 4) }
        dlpack.add(t:flip(1), 0, { out = t }) -- read reversed, written forward: a temporary first
        assert.are.same({ 4, 3, 2, 1 }, t:totable(), d[2] .. " add")
        dlpack.where(t:gt(2), t:flip(1), 0, { out = t })
        assert.are.same({ 1, 2, 0, 0 }, t:totable(), d[2] .. " where")
        t:release()
      end
    end)

    it("re-exports a foreign device tensor with its device, data and byte_offset", function()
      local cap, base = fab.versioned { device_type = 7, device_id = 1, shape = { 2, 3 },
                                        byte_offset = 24, data = string.rep("\0", 64) }
      local t = dlpack.from_dlpack(cap)
      local n = deletes(function()
        local ptr, name = unsafe.take(dlpack.to_dlpack(t))
        local info = fab.inspect(ptr, name)
        assert.are.equal("dltensor_versioned", name)
        assert.are.equal(1, info.major)
        assert.are.equal(7, info.device_type)
        assert.are.equal(1, info.device_id)
        assert.are.equal(base + 24, info.data + info.byte_offset)
        assert.are.equal(24, info.byte_offset, "data may be opaque: byte_offset must be kept")
        assert.are.same({ 2, 3 }, info.shape)
        assert.are.same({ 3, 1 }, info.strides)
        fab.delete_on_thread(ptr, name)
      end)
      assert.are.equal(0, n, "the imported tensor still holds the memory")
      local u = dlpack.from_dlpack(t)
      assert.are.equal("vulkan:1", u.device)
      assert.are.equal(24, u.byte_offset)
      n = deletes(function()
        t:release()
        u:release()
      end)
      assert.are.equal(1, n)
    end)
  end)

  describe("lifetime", function()
    it("calls the deleter once on t:release(), which is idempotent", function()
      local t = import {}
      assert.are.equal(1, deletes(function() t:release() end))
      assert.are.equal(0, deletes(function() t:release() end))
      raises(function() return t[1] end, "released")
      raises(function() return t:totable() end, "released")
      raises(function() return dlpack.to_dlpack(t) end, "released")
    end)

    if support.LUA54 then
      require("close54").foreign(it, import)
    else
      pending("calls the deleter once through <close>: " .. support.NO_CLOSE)
    end

    it("calls the deleter once when the collector finds the tensor", function()
      local n = deletes(function()
        local t = import {}
        assert.are.equal(4, #t)
        t = nil -- luacheck: ignore 311
        collectgarbage()
        collectgarbage()
      end)
      assert.are.equal(1, n)
      assert.are.equal(live_before, fab.live())
    end)

    it("hands back many dropped tensors without an explicit release", function()
      local n = deletes(function()
        for i = 1, 200 do
          local t = import({ shape = { 16 } }, i % 2 == 0 and "legacy" or "versioned")
          assert.are.equal(16, t:numel())
        end
        collectgarbage()
        collectgarbage()
      end)
      assert.are.equal(200, n)
      assert.are.equal(live_before, fab.live())
    end)

    it("keeps the memory alive until the last view is released", function()
      local t = import { shape = { 2, 3 }, data = f32(1, 2, 3, 4, 5, 6) }
      local row = t[2]
      local col = t:select(2, 3)
      local tr = t:transpose(1, 2)
      local flat = t:view { 6 }
      assert.are.equal(0, deletes(function() t:release() end))
      assert.are.same({ 4, 5, 6 }, row:totable())
      assert.are.equal(0, deletes(function() row:release() end))
      assert.are.same({ 3, 6 }, col:totable())
      assert.are.equal(0, deletes(function() col:release() end))
      assert.are.same({ { 1, 4 }, { 2, 5 }, { 3, 6 } }, tr:totable())
      assert.are.equal(0, deletes(function() tr:release() end))
      assert.are.same({ 1, 2, 3, 4, 5, 6 }, flat:totable())
      assert.are.equal(1, deletes(function() flat:release() end))
    end)

    it("keeps the memory alive for views that only the collector releases", function()
      local n = deletes(function()
        local v
        do
          local t = import { shape = { 8 } }
          v = t:narrow(1, 5, 2)
        end
        collectgarbage()
        collectgarbage()
        assert.are.same({ 5, 6 }, v:totable())
        v = nil -- luacheck: ignore 311
        collectgarbage()
        collectgarbage()
      end)
      assert.are.equal(1, n)
    end)

    it("calls the deleter once, after both are gone, when an import is re-exported and consumed", function()
      for _, form in ipairs(FORMS) do
        local t = import({}, form)
        local cap = dlpack.to_dlpack(t)
        local u = dlpack.from_dlpack(cap)
        assert.are.equal(0, deletes(function() t:release() end))
        assert.are.same({ 1, 2, 3, 4 }, u:totable())
        assert.are.equal(1, deletes(function() u:release() end))
        raises(function() dlpack.from_dlpack(cap) end, "consumed")
      end
    end)

    it("calls the deleter once for a re-exported capsule that is never consumed but released", function()
      local t = import {}
      local cap = dlpack.to_dlpack(t, { max_version = { 0, 8 } })
      assert.are.equal(0, deletes(function() t:release() end))
      assert.are.equal(1, deletes(function() dlpack.release_capsule(cap) end))
    end)

    it("calls the deleter once when an unconsumed capsule is released", function()
      for _, form in ipairs(FORMS) do
        local cap = make(form, {})
        assert.is_true(dlpack.is_capsule(cap))
        local info = dlpack.capsule_info(cap)
        assert.are.equal(form == "versioned", info.versioned)
        assert.is_false(info.consumed)
        assert.are.equal(1, deletes(function() dlpack.release_capsule(cap) end))
        assert.is_true(dlpack.capsule_info(cap).consumed)
        assert.are.equal(0, deletes(function()
          raises(function() dlpack.from_dlpack(cap) end, "consumed")
          pcall(dlpack.release_capsule, cap)
        end))
      end
    end)

    it("raises 'consumed' when a capsule is consumed twice, also after the first release", function()
      local cap = fab.versioned {}
      local t = dlpack.from_dlpack(cap)
      assert.is_true(dlpack.capsule_info(cap).consumed)
      raises(function() dlpack.from_dlpack(cap) end, "consumed")
      t:release()
      raises(function() dlpack.from_dlpack(cap) end, "consumed")
      raises(function() unsafe.take(cap) end, "consumed")
      assert.are.equal(0, deletes(function() pcall(dlpack.release_capsule, cap) end))
    end)

    it("consumes the capsule of a C producer that makes it through the registry table, offering max_version",
       function()
      for _, legacy in ipairs { false, true } do
        local p = fab.c_producer { legacy = legacy, shape = { 3 }, data = f32(4, 5, 6) }
        local t = dlpack.from_dlpack(p)
        assert.are.equal(1, p.calls)
        assert.are.equal(1, p.device_calls)
        assert.are.equal("table", type(p.opts))
        local mv = p.opts.max_version
        assert.are.equal("table", type(mv))
        assert.are.equal(1, mv[1] or mv.major)
        assert.is_true((mv[2] or mv.minor) >= 3)
        assert.are.same({ 4, 5, 6 }, t:totable())
        assert.are.equal(1, deletes(function() t:release() end))
      end
    end)

    it("adopts a raw pointer with dlpack.unsafe and calls its deleter once", function()
      for _, form in ipairs(FORMS) do
        local ptr, name = (form == "legacy" and fab.raw_legacy or fab.raw_versioned) {}
        local cap = unsafe.adopt(ptr, name)
        assert.are.equal(form == "versioned", dlpack.capsule_info(cap).versioned)
        local t = dlpack.from_dlpack(cap)
        assert.are.same({ 1, 2, 3, 4 }, t:totable())
        assert.are.equal(1, deletes(function() t:release() end))
      end
    end)

    it("takes an exported import with dlpack.unsafe and deletes it on another thread", function()
      -- order 1: the raw tensor is deleted first, then the Lua tensor is released
      local t = import {}
      local ptr, name = unsafe.take(dlpack.to_dlpack(t))
      assert.are.equal("dltensor_versioned", name)
      assert.are.equal(0, deletes(function() assert.is_true(fab.delete_on_thread(ptr, name)) end))
      assert.are.equal(1, deletes(function() t:release() end))
      -- order 2: the Lua tensor is released first; the thread's deleter hands back the memory
      t = import({}, "legacy")
      ptr, name = unsafe.take(dlpack.to_dlpack(t, { max_version = { 0, 8 } }))
      assert.are.equal("dltensor", name)
      assert.are.equal(0, deletes(function() t:release() end))
      collectgarbage()
      assert.are.equal(1, deletes(function() fab.delete_on_thread(ptr, name) end))
    end)

    it("exports a tensor that outlives its lua_State, deleted on another thread", function()
      for _, form in ipairs(FORMS) do
        local ok, values, info = fab.export_and_close(form)
        assert.is_true(ok)
        assert.are.same({ 1.5, 4.5, 2.5, 5.5, 3.5, 6.5 }, values)
        assert.are.equal(2, info.ndim)
        assert.are.same({ 3, 2 }, info.shape)
        assert.are.equal("table", type(info.strides), "v1.2+: strides are not NULL when ndim > 0")
        assert.are.equal(1, info.device_type)
        assert.are.equal(2, info.code)
        assert.are.equal(64, info.bits)
        if form == "versioned" then
          assert.are.equal(1, info.major)
          assert.are.equal(dlpack.DLPACK_VERSION.minor, info.minor)
          assert.are.equal(0, info.flags % 2)
        end
      end
    end)

    it("calls the deleter once when a refusal happens half-way through an import", function()
      -- valid version, device and dtype; bad strides at the very end
      local n = deletes(function()
        local p = fab.c_producer { shape = { 2, 3 }, strides = { 3, 2 ^ 62 } }
        raises(function() dlpack.from_dlpack(p) end, MARK)
      end)
      assert.are.equal(1, n)
    end)

    it("leaves no fabricated tensor alive", function()
      collectgarbage()
      collectgarbage()
      assert.are.equal(live_at_start, fab.live())
      assert.are.equal(0, fab.double_deletes())
    end)
  end)
end)
