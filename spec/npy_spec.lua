-- dlpack.save and dlpack.load: NumPy's .npy files (docs/api.md, "Saving and loading .npy files").
-- NumPy itself reads and writes the files of spec/peers/npy_numpy.py (stage 40); here the module's
-- own round trips, the format's details, mapped files and their lifetime, and hostile files.
local dlpack = require "dlpack"
local support = require "support"

local raises, raises_plain = support.raises, support.raises_plain

-- The dtypes NumPy has, with their descr (native order here: little-endian machines).
local DESCR = {
  bool = "|b1", int8 = "|i1", int16 = "<i2", int32 = "<i4", int64 = "<i8",
  uint8 = "|u1", uint16 = "<u2", uint32 = "<u4", uint64 = "<u8",
  float16 = "<f2", float32 = "<f4", float64 = "<f8", complex64 = "<c8", complex128 = "<c16",
}
local SAVED = {}
for _, d in ipairs(support.DTYPES) do if DESCR[d] then SAVED[#SAVED + 1] = d end end
local ITEMSIZE = {bool = 1, int8 = 1, int16 = 2, int32 = 4, int64 = 8, uint8 = 1, uint16 = 2, uint32 = 4, uint64 = 8,
                  float16 = 2, float32 = 4, float64 = 8, complex64 = 8, complex128 = 16}

local files = {}
local function tmp()
  local name = os.tmpname()
  files[#files + 1] = name
  return name
end

local function write(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
  return path
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

-- n as `width` little-endian bytes (no string.pack: the specs run on Lua 5.1 too)
local function le(n, width)
  local out = {}
  for i = 1, width do
    out[i] = string.char(n % 256)
    n = math.floor(n / 256)
  end
  return table.concat(out)
end

-- A .npy file: the dict padded to a 64-byte boundary with a newline, as NumPy writes it, unless
-- opts.exact (the header as given); opts.version 1, 2 or 3; opts.magic replaces the magic.
local function npy(dict, data, opts)
  opts = opts or {}
  local version = opts.version or 1
  local width = version == 1 and 2 or 4
  local header = dict
  if not opts.exact then
    local total = 8 + width + #dict + 1
    header = dict .. string.rep(" ", (64 - total % 64) % 64) .. "\n"
  end
  return (opts.magic or "\147NUMPY") .. string.char(version, opts.minor or 0) .. le(#header, width) .. header ..
         (data or "")
end

-- n deterministic bytes
local function bytes(n, seed)
  local out, x = {}, seed or 7
  for i = 1, n do
    x = (x * 1103515245 + 12345) % 2147483648
    out[i] = string.char(math.floor(x / 65536) % 256)
  end
  return table.concat(out)
end

local function numel(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

local function filled(dtype, shape, seed)
  return dlpack.frombytes(bytes(numel(shape) * ITEMSIZE[dtype], seed), dtype, shape)
end

local function same_shape(a, b)
  assert.are.same(a.shape, b.shape)
end

local function assert_same(a, b)
  same_shape(a, b)
  assert.are.equal(a.dtype, b.dtype)
  assert.is_true(a:tobytes() == b:tobytes(), "the elements differ")
end

teardown(function()
  for _, f in ipairs(files) do os.remove(f) end
end)

local SHAPES = {{}, {0}, {5}, {2, 3}, {2, 0, 3}, {1, 1, 1}, {3, 1, 4}}

describe("dlpack.save and dlpack.load", function()
  it("round-trip every dtype NumPy has, in every shape (0-d and empty too), with and without mmap", function()
    for _, dtype in ipairs(SAVED) do
      for k, shape in ipairs(SHAPES) do
        local t, path = filled(dtype, shape, k), tmp()
        assert.is_nil(dlpack.save(path, t))
        local a, m = dlpack.load(path), dlpack.load(path, {mmap = true})
        assert_same(t, a)
        assert_same(t, m)
        assert.is_false(a.readonly)
        assert.is_true(m.readonly)
        assert.is_true(a:is_contiguous() and m:is_contiguous())
      end
    end
  end)

  it("writes what NumPy writes: version 1.0, the descr, the shape tuple, data at a multiple of 64", function()
    for _, dtype in ipairs(SAVED) do
      for _, shape in ipairs({{}, {7}, {2, 3}}) do
        local path = tmp()
        dlpack.save(path, filled(dtype, shape))
        local s = read(path)
        assert.are.equal("\147NUMPY\1\0", s:sub(1, 8))
        local hlen = s:byte(9) + 256 * s:byte(10)
        assert.are.equal(0, (10 + hlen) % 64)
        assert.are.equal("\n", s:sub(10 + hlen, 10 + hlen))
        local tuple = #shape == 0 and "()" or #shape == 1 and "(7,)" or "(2, 3)"
        assert.are.equal(("{'descr': '%s', 'fortran_order': False, 'shape': %s, }"):format(DESCR[dtype], tuple),
                         s:sub(11, 10 + hlen):match("^(.-) *\n$"))
        assert.are.equal(10 + hlen + numel(shape) * ITEMSIZE[dtype], #s)
      end
    end
  end)

  it("writes a strided tensor in row-major order (transposed, stepped, expanded)", function()
    local base = filled("int32", {4, 6})
    local views = {base:transpose(1, 2), base:slice(2, 1, 6, 2), dlpack.frombytes(bytes(4), "int32", {1}):expand({5}),
                   base:select(2, 3)}
    for _, v in ipairs(views) do
      local path = tmp()
      dlpack.save(path, v)
      assert_same(v:contiguous(), dlpack.load(path))
      assert.is_truthy(read(path):find("'fortran_order': False", 1, true))
    end
  end)

  it("refuses dtypes NumPy has no descr for, naming them (bfloat16, the 8-, 6- and 4-bit floats)", function()
    for _, dtype in ipairs(support.DTYPES) do
      if not DESCR[dtype] then
        raises_plain(function() dlpack.save(tmp(), dlpack.zeros({2}, dtype)) end, dtype .. " has no .npy descr")
      end
    end
  end)

  it("raises for a released tensor, and for arguments that are not a path and a tensor", function()
    local t = dlpack.zeros({2})
    t:release()
    raises(function() dlpack.save(tmp(), t) end, "released")
    raises(function() dlpack.save(tmp(), {1, 2}) end, "dlpack.tensor expected")
    raises(function() dlpack.save(nil, dlpack.zeros({2})) end, "string expected")
    raises(function() dlpack.save(tmp(), dlpack.zeros({2}), 3) end, "unexpected argument")
    raises(function() dlpack.load(tmp(), {}, 3) end, "unexpected argument")
  end)
end)

describe("dlpack.load reads", function()
  it("headers of versions 1.0, 2.0 and 3.0", function()
    local data = bytes(24)
    for version = 1, 3 do
      local path = write(tmp(), npy("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", data,
                                    {version = version}))
      assert_same(dlpack.frombytes(data, "int32", {2, 3}), dlpack.load(path))
      assert_same(dlpack.frombytes(data, "int32", {2, 3}), dlpack.load(path, {mmap = true}))
    end
  end)

  it("the header in any key order, either quote, spaces, tabs and newlines, with or without trailing commas", function()
    local data = bytes(12)
    local dicts = {
      "{'shape': (3,), 'fortran_order': False, 'descr': '<f4'}",
      '{"descr": "<f4", "fortran_order": False, "shape": (3,)}',
      "{ 'fortran_order' : False ,\t'shape' : ( 3 , ) , 'descr' : '<f4' , }",
      "{'descr':'<f4','fortran_order':False,'shape':(3,),}",
      "{'descr': '<f4',\n 'fortran_order': False,\n 'shape': (3,)}",
    }
    for _, dict in ipairs(dicts) do
      assert_same(dlpack.frombytes(data, "float32", {3}), dlpack.load(write(tmp(), npy(dict, data))))
    end
    -- a header not padded to 64 bytes (older writers padded to 16), and one without a newline
    local exact = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", data, {exact = true})
    assert_same(dlpack.frombytes(data, "float32", {3}), dlpack.load(write(tmp(), exact), {mmap = true}))
  end)

  it("fortran_order True as a column-major tensor, without copying when mapped", function()
    -- NumPy's np.asfortranarray([[0, 1, 2], [3, 4, 5]]) is stored 0 3 1 4 2 5
    local stored = dlpack.tensor({0, 3, 1, 4, 2, 5}, "float64")
    local path = write(tmp(), npy("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", stored:tobytes()))
    for _, opts in ipairs({{}, {mmap = true}}) do
      local t = dlpack.load(path, opts)
      assert.are.same({2, 3}, t.shape)
      assert.are.same({1, 2}, t.strides)
      assert.are.same({{0, 1, 2}, {3, 4, 5}}, t:totable())
      assert.are.equal(stored:tobytes(), t:transpose(1, 2):contiguous():tobytes()) -- the file's bytes as they are
    end
    -- 3-d and 1-d and 0-d Fortran files
    local t3 = dlpack.load(write(tmp(), npy("{'descr': '|u1', 'fortran_order': True, 'shape': (2, 3, 4), }",
                                            bytes(24))), {mmap = true})
    assert.are.same({1, 2, 6}, t3.strides)
    local t1 = dlpack.load(write(tmp(), npy("{'descr': '|u1', 'fortran_order': True, 'shape': (4,), }", bytes(4))))
    assert.are.same({1}, t1.strides)
    local t0 = dlpack.load(write(tmp(), npy("{'descr': '<i2', 'fortran_order': True, 'shape': (), }", "\5\0")))
    assert.are.equal(5, t0:item())
    -- empty with huge sizes: strides saturate, nothing is read
    local e = dlpack.load(write(tmp(), npy("{'descr': '<f4', 'fortran_order': True, 'shape': " ..
                                           "(4611686018427387904, 4, 0), }")))
    assert.are.equal(0, e:numel())
  end)

  it("big-endian files, swapping the bytes (complex numbers part by part); mapping them is refused", function()
    local cases = {
      {">i2", "int16", "\1\2\3\4", "\2\1\4\3"},
      {">u4", "uint32", "\1\2\3\4", "\4\3\2\1"},
      {">f8", "float64", "\1\2\3\4\5\6\7\8", "\8\7\6\5\4\3\2\1"},
      {">c8", "complex64", "\1\2\3\4\5\6\7\8", "\4\3\2\1\8\7\6\5"},
      {">c16", "complex128", "abcdefghijklmnop", "hgfedcbaponmlkji"},
      {">f2", "float16", "\60\0", "\0\60"},
    }
    for _, c in ipairs(cases) do
      local path = write(tmp(), npy(("{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }"):format(
        c[1], #c[3] / ITEMSIZE[c[2]]), c[3]))
      local t = dlpack.load(path)
      assert.are.equal(c[2], t.dtype)
      assert.are.equal(c[4], t:tobytes())
      raises_plain(function() dlpack.load(path, {mmap = true}) end, "load it without mmap, which swaps the bytes")
    end
    -- one-byte types have no byte order: '>' and '<' and '|' and '=' all load, mapped too
    for _, order in ipairs({">", "<", "|", "="}) do
      local t = dlpack.load(write(tmp(), npy("{'descr': '" .. order .. "i1', 'fortran_order': False, 'shape': (2,), }",
                                             "\255\1")), {mmap = true})
      assert.are.same({-1, 1}, t:totable())
    end
    -- '=' is the native order
    assert.are.same({1}, dlpack.load(write(tmp(), npy("{'descr': '=i4', 'fortran_order': False, 'shape': (1,), }",
                                                      "\1\0\0\0"))):totable())
  end)

  it("only the bytes the header describes: bytes after the data are left alone (as np.load does)", function()
    local path = write(tmp(), npy("{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", "\1\2extra"))
    assert.are.same({1, 2}, dlpack.load(path):totable())
    assert.are.same({1, 2}, dlpack.load(path, {mmap = true}):totable())
  end)
end)

describe("dlpack.load with {mmap = true}", function()
  it("gives a read-only view of the file: every write raises", function()
    local path = tmp()
    dlpack.save(path, dlpack.tensor({{1, 2}, {3, 4}}, "float32"))
    local m = dlpack.load(path, {mmap = true})
    assert.is_true(m.readonly)
    raises(function() m[1][1] = 5 end, "read%-only")
    raises(function() m[1] = m[2] end, "read%-only")
    raises(function() m:set(1, 1, 5) end, "read%-only")
    raises(function() m:fill(0) end, "read%-only")
    raises(function() m:copy(dlpack.zeros({2, 2})) end, "read%-only")
    raises(function() m:select(1, 1):fill(0) end, "read%-only")
    raises(function() m:add_(1) end, "read%-only")
    raises(function() dlpack.add(m, m, {out = m}) end, "read%-only")
    assert.are.same({{1, 2}, {3, 4}}, m:totable())
    -- a copy is writable
    local c = m:clone()
    c:fill(0)
    assert.is_false(c.readonly)
  end)

  it("shows a change to the file (the mapping is shared, not a copy)", function()
    local path = tmp()
    dlpack.save(path, dlpack.tensor({1, 2, 3, 4}, "uint8"))
    local m = dlpack.load(path, {mmap = true})
    local s = read(path)
    local f = assert(io.open(path, "r+b"))
    f:seek("set", 10 + s:byte(9) + 256 * s:byte(10))
    f:write("\9")
    f:close()
    assert.are.same({9, 2, 3, 4}, m:totable())
  end)

  it("exports read-only (NumPy and PyTorch see a read-only array)", function()
    local path = tmp()
    dlpack.save(path, dlpack.tensor({1, 2}, "int32"))
    local m = dlpack.load(path, {mmap = true})
    local back = dlpack.from_dlpack(dlpack.to_dlpack(m))
    assert.is_true(back.readonly)
    assert.are.equal(m:data_ptr(), back:data_ptr())
  end)

  local maps = not support.WINDOWS and io.open("/proc/self/maps") -- (Wine shows Linux's, by other names)
  if maps then maps:close() end
  local function mapped(path)
    local f = assert(io.open("/proc/self/maps"))
    local s = f:read("*a")
    f:close()
    return s:find(path, 1, true) ~= nil
  end
  local function collect()
    collectgarbage()
    collectgarbage()
  end

  local it_maps = maps and it or function(name) pending(name .. ": needs /proc/self/maps (Linux)") end

  it_maps("maps the file once per load and unmaps it at release, or when the collector frees the tensor", function()
    local path = tmp()
    dlpack.save(path, dlpack.zeros({1000}, "float64"))
    local m = dlpack.load(path, {mmap = true})
    assert.is_true(mapped(path))
    m:release()
    assert.is_false(mapped(path))
    do
      local garbage = dlpack.load(path, {mmap = true})
      assert.is_true(mapped(path) and garbage.readonly)
    end
    collect()
    assert.is_false(mapped(path))
    -- an empty tensor maps nothing (a file with no data bytes cannot be mapped on Windows)
    local e = tmp()
    dlpack.save(e, dlpack.zeros({0, 3}))
    local t = dlpack.load(e, {mmap = true})
    assert.is_true(t.readonly)
    assert.is_false(mapped(e))
  end)

  it_maps("keeps the mapping while a view, a clone's source or an export lives", function()
    local path = tmp()
    dlpack.save(path, dlpack.arange(100, "int64"))
    local m = dlpack.load(path, {mmap = true})
    local v = m:slice(1, 11, 20)
    local capsule = dlpack.to_dlpack(m)
    m:release()
    assert.is_true(mapped(path))
    assert.are.equal(10, v[1])
    v:release()
    assert.is_true(mapped(path))
    local imported = dlpack.from_dlpack(capsule)
    assert.are.equal(99, imported[100])
    imported:release()
    assert.is_false(mapped(path))
  end)

  it_maps("leaks no mapping over many loads, released or left to the collector", function()
    local path = tmp()
    dlpack.save(path, dlpack.zeros({4096}, "uint8"))
    for i = 1, 300 do
      local m = dlpack.load(path, {mmap = true})
      if i % 2 == 0 then m:release() end
    end
    collect()
    assert.is_false(mapped(path))
  end)

  it("stays valid after the file is removed (the mapping holds the data)", function()
    local path = tmp()
    dlpack.save(path, dlpack.tensor({5, 6, 7}, "int16"))
    local m = dlpack.load(path, {mmap = true})
    if os.remove(path) then assert.are.same({5, 6, 7}, m:totable()) end -- Windows refuses to remove a mapped file
    m:release()
  end)

  -- a finalizer that runs inside load (the tensor's allocation runs the collector) and saves a
  -- small file over the one being mapped: the load maps all of it or raises, never a mapping
  -- longer than the file (SIGBUS at the first read)
  it("maps all of a file, or raises, when a save cuts it during the load", function()
    local path = tmp()
    local whole = dlpack.arange(1, 16385, "float32")
    local small = dlpack.zeros({1}, "float32")
    local inside = false
    local saves = {__gc = function() if inside then pcall(dlpack.save, path, small) end end}
    -- a minor collection every few allocations (5.4's arguments; 5.5 names its parameters), or
    -- the incremental collector never pausing (earlier Luas)
    local generational = _VERSION == "Lua 5.4" or _VERSION == "Lua 5.5"
    local pause
    if _VERSION == "Lua 5.4" then
      collectgarbage("generational", 1, 100)
    elseif _VERSION == "Lua 5.5" then
      collectgarbage("generational")
      pause = collectgarbage("param", "minormul", 1)
    else
      pause = collectgarbage("setpause", 1)
    end
    for i = 1, 800 do
      dlpack.save(path, whole)
      setmetatable({}, saves)
      local _ = string.rep("x", 40 + i % 64 * 8) -- a little garbage of many sizes: collections at every point
      inside = true
      local ok, m = pcall(dlpack.load, path, {mmap = true})
      inside = false
      if ok then
        if m.shape[1] == 16384 then assert.are.equal(16384 * 16385 / 2, m:sum()) end -- every page is there
        m:release()
      else
        assert.is_truthy(m:match("got shorter while it was loaded") or m:match("too short"), m)
      end
    end
    if generational then collectgarbage("incremental") end
    if _VERSION == "Lua 5.5" then collectgarbage("param", "minormul", pause)
    elseif not generational then collectgarbage("setpause", pause) end
    collect()
    os.remove(path)
  end)

  -- cutting a file under its mapping makes a touch of the pages past the new end SIGBUS: a save
  -- of a mapped tensor onto its own file killed the process
  it("keeps a save from writing a file this process maps, until the last tensor on it goes", function()
    local path = tmp()
    dlpack.save(path, dlpack.arange(100000, "float32"))
    local m = dlpack.load(path, {mmap = true})
    local view = m:narrow(1, 99991, 10)
    m:release()
    for _, t in ipairs({view, dlpack.zeros({3})}) do -- itself, or any other tensor
      if support.WINDOWS then -- the system refuses to cut a file with a mapped view
        raises_plain(function() dlpack.save(path, t) end, "dlpack.save: cannot open")
      else
        raises_plain(function() dlpack.save(path, t) end, "dlpack.save: '" .. path .. "' is mapped by a tensor of "
          .. "this process (dlpack.load with mmap = true), which writing it would cut from under")
      end
    end
    local first = view:narrow(1, 1, 3)
    assert.are.same({99990, 99991, 99992}, first:totable()) -- the file was left alone
    first:release()
    view:release() -- the mapping goes with the last tensor on it: saving is allowed again
    dlpack.save(path, dlpack.tensor({1, 2}, "int8"))
    assert.are.same({1, 2}, dlpack.load(path):totable())
    os.remove(path)
  end)
end)

describe("dlpack.load options", function()
  it("refuses unknown keys, a non-boolean mmap, a bad device and options that are not a table", function()
    local path = tmp()
    dlpack.save(path, dlpack.zeros({2}))
    raises_plain(function() dlpack.load(path, {mmap = true, mapped = true}) end, "unknown option 'mapped'")
    raises_plain(function() dlpack.load(path, {[1] = true}) end, "unknown option number")
    raises_plain(function() dlpack.load(path, {mmap = 1}) end, "mmap must be a boolean")
    raises_plain(function() dlpack.load(path, {device = "gpu"}) end, "device")
    raises(function() dlpack.load(path, "mmap") end, "table expected")
    assert.are.equal("cpu", dlpack.load(path, {device = "cpu", mmap = false}).device)
  end)

  it("reads the options table once, before opening the file (a metatable that lies changes nothing)", function()
    local path = tmp()
    dlpack.save(path, dlpack.zeros({2}))
    local reads = 0
    local opts = setmetatable({}, {__index = function(_, k)
      reads = reads + 1
      return k == "mmap" or nil
    end})
    local t = dlpack.load(path, opts) -- no raw key: mmap and device read through __index
    assert.is_true(reads >= 1)
    assert.is_true(t.readonly)
  end)

  it("device = 'cuda:N' loads onto that device (raising, naming CUDA, where there is none)", function()
    local path = tmp()
    dlpack.save(path, dlpack.zeros({2}))
    if dlpack.cuda.is_available() then
      local t = dlpack.load(path, {device = "cuda:0", mmap = true})
      assert.are.equal("cuda:0", t.device)
      assert.is_false(t.readonly)
    else
      raises(function() dlpack.load(path, {device = "cuda:0"}) end, "cuda")
    end
  end)
end)

describe("dlpack.load refuses hostile files with an error naming the problem", function()
  local D = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"
  local function header(body) return npy(body, string.rep("\0", 64)) end
  local cases = {
    {"an empty file", "", "too short"},
    {"a file of 9 bytes", "\147NUMPY\1\0\0", "too short"},
    {"bad magic", npy(D, "12345678", {magic = "\147NUMPZ"}), "not a %.npy file"},
    {"a text file", "hello, world, this is not numpy", "not a %.npy file"},
    {"version 0.0", npy(D, "12345678", {version = 0}), "unsupported %.npy format version 0%.0"},
    {"version 4.0", npy(D, "12345678", {version = 4}), "unsupported %.npy format version 4%.0"},
    {"version 1.1", npy(D, "12345678", {minor = 1}), "unsupported %.npy format version 1%.1"},
    {"a 2.0 file ending in its header length", "\147NUMPY\2\0\1\0", "ends inside the header length"},
    {"a header length past the end", "\147NUMPY\1\0\255\255{}", "runs past the end of the file"},
    {"a 2.0 header length of 4 GiB", "\147NUMPY\2\0\255\255\255\255{}", "more than this reader takes"},
    {"data shorter than the shape", npy(D, "1234567"), "short or truncated"},
    {"no data at all", npy("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000,), }"), "short or truncated"},
    {"a shape larger than memory",
     header("{'descr': '<f8', 'fortran_order': False, 'shape': (9223372036854775807,), }"), "too many bytes"},
    {"a shape whose product overflows", header("{'descr': '|u1', 'fortran_order': False, 'shape': " ..
                                               "(4294967296, 4294967296), }"), "more elements than fit in 64 bits"},
    {"a dimension beyond int64", header("{'descr': '|u1', 'fortran_order': False, 'shape': (9223372036854775808,), }"),
     "does not fit in 64 bits"},
    {"a negative dimension", header("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }"),
     "negative dimension"},
    {"65 dimensions", header("{'descr': '<f4', 'fortran_order': False, 'shape': (" .. string.rep("1, ", 65) .. "), }"),
     "more than 64 dimensions"},
    {"a shape that is a number", header("{'descr': '<f4', 'fortran_order': False, 'shape': (2), }"), "not a tuple"},
    {"a shape that is a list", header("{'descr': '<f4', 'fortran_order': False, 'shape': [2], }"), "not a tuple"},
    {"a dimension with a leading zero", header("{'descr': '<f4', 'fortran_order': False, 'shape': (02,), }"),
     "leading zero"},
    {"a hexadecimal dimension", header("{'descr': '<f4', 'fortran_order': False, 'shape': (0x2,), }"), "leading zero"},
    {"a float dimension", header("{'descr': '<f4', 'fortran_order': False, 'shape': (2.0,), }"), "after a dimension"},
    {"a dimension with an underscore", header("{'descr': '<f4', 'fortran_order': False, 'shape': (1_0,), }"),
     "not a plain decimal"},
    {"a header that is not a dict", header("['descr', '<f4']"), "not a dictionary literal"},
    {"a dict that never closes", header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), "), "no string"},
    {"a missing key", header("{'descr': '<f4', 'shape': (2,), }"), "lacks the key 'fortran_order'"},
    {"a duplicate key", header("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"),
     "the key 'descr' twice"},
    {"an unknown key", header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}"), "the key 'x'"},
    {"trailing garbage", header(D .. " junk"), "trailing garbage"},
    {"a second dict", header(D .. D), "trailing garbage"},
    {"a non-ASCII byte", header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), '\195\169': 1}"),
     "non%-ascii"},
    {"a NUL byte", header("{'descr': '<f4'\0, 'fortran_order': False, 'shape': (2,), }"), "control byte 0x00"},
    {"fortran_order true (lowercase)", header("{'descr': '<f4', 'fortran_order': true, 'shape': (2,), }"),
     "not true or false"},
    {"fortran_order 1", header("{'descr': '<f4', 'fortran_order': 1, 'shape': (2,), }"), "not true or false"},
    {"an object array", header("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }"), "object array"},
    {"a structured dtype", header("{'descr': [('a', '<i4'), ('b', '<f8')], 'fortran_order': False, 'shape': (2,), }"),
     "structured dtype"},
    {"a unicode string dtype", header("{'descr': '<U5', 'fortran_order': False, 'shape': (2,), }"),
     "'<u5', which is not a dtype this module has"},
    {"a datetime dtype", header("{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (2,), }"), "not a dtype"},
    {"long double", header("{'descr': '<f16', 'fortran_order': False, 'shape': (2,), }"), "not a dtype"},
    {"a void dtype", header("{'descr': '|V2', 'fortran_order': False, 'shape': (2,), }"), "not a dtype"},
    {"a descr without byte order", header("{'descr': 'f4', 'fortran_order': False, 'shape': (2,), }"),
     "without a byte order"},
    {"'|' on a 4-byte type", header("{'descr': '|i4', 'fortran_order': False, 'shape': (2,), }"), "one%-byte types"},
    {"a descr that is not a string", header("{'descr': 4, 'fortran_order': False, 'shape': (2,), }"), "no string"},
    {"an escape in a string", header("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,), }"), "escape"},
    {"an unterminated string", header("{'descr': '<f4"), "no closing quote"},
    {"a missing colon", header("{'descr' '<f4', 'fortran_order': False, 'shape': (2,), }"), "no ':'"},
    {"a missing comma", header("{'descr': '<f4' 'fortran_order': False, 'shape': (2,), }"), "other than ','"},
    {"a header of spaces only", header(""), "not a dictionary literal"},
  }
  for _, c in ipairs(cases) do
    it(c[1], function()
      local path = write(tmp(), c[2])
      for _, opts in ipairs({{}, {mmap = true}}) do
        local err = raises(function() dlpack.load(path, opts) end, c[3])
        assert.is_truthy(tostring(err):find("dlpack.load", 1, true))
      end
    end)
  end

  it("paths: a NUL inside, a directory, a missing file, a folder that does not exist", function()
    raises_plain(function() dlpack.load("a\0b.npy") end, "embedded nul")
    raises_plain(function() dlpack.save("a\0b.npy", dlpack.zeros({1})) end, "embedded nul")
    local dir = support.WINDOWS and "." or "/"
    raises_plain(function() dlpack.load(dir) end, "dlpack.load")
    raises_plain(function() dlpack.load(dir, {mmap = true}) end, "dlpack.load")
    raises_plain(function() dlpack.save(dir, dlpack.zeros({1})) end, "dlpack.save: cannot open")
    local missing = tmp() .. "-missing/x.npy"
    raises_plain(function() dlpack.load(missing) end, "cannot open")
    raises_plain(function() dlpack.save(missing, dlpack.zeros({1})) end, "cannot open")
  end)

  it("a FIFO, without waiting for its other end", function()
    if support.WINDOWS then return pending(support.NOT_WINDOWS) end
    local fifo = tmp()
    os.remove(fifo)
    os.execute("mkfifo '" .. fifo .. "'")
    raises_plain(function() dlpack.load(fifo) end, "it is not a regular file")
    raises_plain(function() dlpack.load(fifo, {mmap = true}) end, "it is not a regular file")
    raises_plain(function() dlpack.save(fifo, dlpack.zeros({1})) end, "dlpack.save: cannot open")
  end)

  it("a FIFO that a reader drains: a save goes past the pipe's buffer (64 KiB)", function()
    if support.WINDOWS then return pending(support.NOT_WINDOWS) end
    local fifo = tmp()
    os.remove(fifo)
    os.execute("mkfifo '" .. fifo .. "'")
    local reader = io.popen("cat '" .. fifo .. "' | wc -c")
    local saved, why
    for _ = 1, 200 do -- until the reader has opened its end (a save opens without waiting)
      saved, why = pcall(dlpack.save, fifo, dlpack.zeros({300000}, "float32"))
      if saved then break end
      assert(why:match("cannot open"), why)
      os.execute("sleep 0.05")
    end
    assert(saved, why)
    assert.are.equal(128 + 1200000, tonumber(reader:read("*a")))
    reader:close()
    os.remove(fifo)
  end)

  it("a FIFO whose reader leaves early: the save raises (no SIGPIPE kills the process)", function()
    if support.WINDOWS then return pending(support.NOT_WINDOWS) end
    local fifo = tmp()
    os.remove(fifo)
    os.execute("mkfifo '" .. fifo .. "'")
    local reader = io.popen("head -c 10 < '" .. fifo .. "' | wc -c")
    local why
    for _ = 1, 200 do -- until the reader has opened its end
      local saved
      saved, why = pcall(dlpack.save, fifo, dlpack.zeros({1000000}, "float32"))
      assert(not saved, "a reader of 10 bytes took 4 MB")
      if not why:match("cannot open") then break end
      os.execute("sleep 0.05")
    end
    assert.is_truthy(why:match("dlpack.save: writing '.*' failed: Broken pipe"), why)
    assert.are.equal(10, tonumber(reader:read("*a")))
    reader:close()
    os.remove(fifo)
  end)

  it("a file growing past the size limit (ulimit -f): the save raises (no SIGXFSZ kills the process)", function()
    if support.WINDOWS then return pending(support.NOT_WINDOWS) end
    local chunk, target = tmp(), tmp()
    write(chunk, ("package.path, package.cpath = %q, %q\n"):format(package.path, package.cpath) ..
      "local dlpack = require 'dlpack'\n" ..
      ("local saved, why = pcall(dlpack.save, %q, dlpack.zeros({1000000}, 'uint8'))\n"):format(target) ..
      "print(saved, why)\nprint('alive')\n")
    local p = assert(io.popen(("ulimit -f 64; exec %s %s 2>&1"):format(support.LUA, chunk)))
    local out = p:read("*a")
    p:close()
    assert.is_truthy(out:match("false\tdlpack.save: writing '.*' failed: File too large\nalive\n$"), out)
  end)

  it("a file this process may not read (as another user when run as root)", function()
    if support.WINDOWS then return pending("chmod has no effect on reading under Windows") end
    local path = tmp()
    dlpack.save(path, dlpack.zeros({2}))
    local p = io.popen("chmod 600 '" .. path .. "' && id -u && command -v setpriv")
    local out = p:read("*a")
    p:close()
    if not out:match("^0\n") then
      os.execute("chmod 000 '" .. path .. "'")
      raises_plain(function() dlpack.load(path) end, "permission denied")
      raises_plain(function() dlpack.save(path, dlpack.zeros({1})) end, "permission denied")
      return
    end
    if not out:match("setpriv") then return pending("runs as root, who reads any file, and setpriv is missing") end
    local code = ("package.path = %q; package.cpath = %q; local d = require 'dlpack'; " ..
                  "print(select(2, pcall(d.load, %q))); print(select(2, pcall(d.save, %q, d.zeros({1}))))")
                 :format(package.path, package.cpath, path, path)
    p = io.popen(("setpriv --reuid=65533 --regid=65533 --clear-groups %s -e %q 2>&1"):format(support.LUA, code))
    out = p:read("*a")
    p:close()
    if out:match("module 'dlpack[%.%w]*' not found") then
      return pending("another user cannot load the module from this checkout: " .. out:match("[^\n]*"))
    end
    assert.is_truthy(out:find("dlpack.load: cannot open '" .. path .. "': Permission denied", 1, true), out)
    assert.is_truthy(out:find("dlpack.save: cannot open '" .. path .. "': Permission denied", 1, true), out)
  end)

  it("a file truncated before it is loaded, with and without mmap (the size is checked before mapping)", function()
    local path = tmp()
    dlpack.save(path, dlpack.zeros({1000}, "float64"))
    write(path, read(path):sub(1, 64 + 4000))
    raises(function() dlpack.load(path, {mmap = true}) end, "short or truncated")
    raises(function() dlpack.load(path) end, "short or truncated")
  end)

  it("every prefix of a valid file", function()
    local path = tmp()
    dlpack.save(path, dlpack.tensor({{1, 2, 3}, {4, 5, 6}}, "int16"))
    local full = read(path)
    for n = 0, #full - 1 do
      local cut = write(tmp(), full:sub(1, n))
      raises(function() dlpack.load(cut) end, "dlpack.load")
      raises(function() dlpack.load(cut, {mmap = true}) end, "dlpack.load")
      os.remove(cut)
    end
  end)
end)

describe("dlpack.deny_file_access()", function()
  it("turns save and load off for good in its lua_State, also for a module required again", function()
    local path = tmp()
    dlpack.save(path, dlpack.zeros({2}))
    local out = support.run_lua(([[
      package.path = %q; package.cpath = %q
      local d = require "dlpack"
      d.deny_file_access()
      d.deny_file_access()
      print(select(2, pcall(d.load, %q)))
      print(select(2, pcall(d.save, %q, d.zeros({1}))))
      package.loaded.dlpack, package.loaded["dlpack.core"] = nil, nil
      local again = require "dlpack"
      print(again ~= d, select(2, pcall(again.load, %q, {mmap = true})))
    ]]):format(package.path, package.cpath, path, path, path))
    local _, n = out:gsub("file access is denied in this lua_State %(dlpack.deny_file_access%)", "")
    assert.are.equal(3, n, out)
    assert.is_truthy(out:find("true", 1, true), out)
    assert.are.same({0, 0}, dlpack.load(path):totable()) -- this state is not concerned
  end)
end)
