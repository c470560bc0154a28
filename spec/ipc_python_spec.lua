-- dlpack.ipc between Lua and Python: examples/dlpack_ipc.py (standard library + NumPy) in a
-- second process. Skipped, visibly, when Python with NumPy >= 2 is missing (PYTHON, default
-- /usr/bin/python3, with build/pydeps on PYTHONPATH as stage 40 has it).
-- Windows has no dlpack.ipc (docs/windows.md): the whole file is one pending spec there.
if package.config:sub(1, 1) == "\\" then
  describe("dlpack.ipc (ipc_python_spec.lua)", function() pending(require("support").NOT_WINDOWS) end)
  return
end

local dlpack = require "dlpack"
local ipc = require "dlpack.ipc"
local support = require "support"

local PYTHON = os.getenv("PYTHON") or "/usr/bin/python3"
-- LD_PRELOAD off: under the sanitizer stages it preloads ASan into the Lua process only
local ENV = "env -u LD_PRELOAD PYTHONPATH=build/pydeps:examples" ..
  (os.getenv("PYTHONPATH") and ":" .. os.getenv("PYTHONPATH") or "")

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function capture(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("*a")
  p:close()
  return out
end

local MISSING = (function()
  local out = capture(ENV .. " " .. shell_quote(PYTHON) .. " -c 'import numpy, dlpack_ipc; " ..
    "assert int(numpy.__version__.split(\".\")[0]) >= 2, numpy.__version__; print(\"yes\")'")
  if out:match("yes%s*$") then return nil end
  return "Python with NumPy >= 2 missing (" .. PYTHON .. "): " .. (out:match("([^\n]+)\n?$") or "no output")
end)()

local HAS_TORCH = not MISSING and capture(ENV .. " " .. shell_quote(PYTHON) ..
  " -c 'import torch; print(\"yes\")'"):match("yes%s*$") ~= nil

local it_py = MISSING and function(name) pending(name .. ": " .. MISSING) end or it

local serial = 0
local function socket_name()
  serial = serial + 1
  return string.format("@dlpack-ipc-python-spec-%d-%s-%d", os.time(), tostring({}):match("(%x+)$") or "0", serial)
end

-- A Python peer in the background: `script` (Python source; its argv[1] is the socket path) or
-- dlpack_ipc.py's own command line when `script` is a command name ("echo").
local function spawn(script, path)
  local file
  if script:match("^[%w-]+$") then
    file = "examples/dlpack_ipc.py " .. script
  else
    file = os.tmpname()
    local f = assert(io.open(file, "w"))
    f:write("import sys, os, mmap\nimport numpy as np\nimport dlpack_ipc as d\n", script)
    f:close()
  end
  local p = assert(io.popen(ENV .. " " .. shell_quote(PYTHON) .. " " .. file .. " " .. shell_quote(path) .. " 2>&1"))
  return {p = p, file = not script:match("^[%w-]+$") and file or nil}
end

-- Wait for the peer to end; its output.
local function finish(peer)
  local out = peer.p:read("*a")
  peer.p:close()
  if peer.file then os.remove(peer.file) end
  return out
end

-- listen, start the peer (which connects), accept
local function start(script)
  local path = socket_name()
  local listener = ipc.listen(path)
  local peer = spawn(script, path)
  local ch = listener:accept(30)
  listener:close()
  if not ch then
    error("the Python peer did not connect: " .. finish(peer))
  end
  return ch, peer
end

local function fill(t, values)
  local n = 0
  local flat = t:reshape(-1)
  for i = 1, #values do
    flat:set(i, values[i])
    n = n + 1
  end
  return n
end

describe("dlpack.ipc with Python (examples/dlpack_ipc.py)", function()
  it_py("Lua -> Python echo -> Lua: values of every dtype NumPy has, on the same memory", function()
    local ch, peer = start("echo")
    local dtypes = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                    "float16", "float32", "float64"}
    for _, dtype in ipairs(dtypes) do
      local t = ipc.zeros({2, 3}, dtype)
      if dtype == "bool" then
        fill(t, {true, false, true, true, false, false})
      else
        fill(t, {0, 1, 2, 100, 7, 3})
      end
      ch:send(t)
      local back = assert(ch:recv(20))
      assert.equal(dtype, back.dtype)
      assert.same({2, 3}, back.shape)
      assert.same(t:totable(), back:totable())
      assert.is_true(back.shareable)
      t:set(2, 3, dtype == "bool" and true or 9)
      assert.equal(t:get(2, 3), back:get(2, 3)) -- Python sent back the very memory Lua sent
    end
    for _, dtype in ipairs({"complex64", "complex128"}) do
      ch:send(ipc.zeros({4}, dtype))
      local back = assert(ch:recv(20))
      assert.equal(dtype, back.dtype)
      assert.same({4}, back.shape)
    end
    ch:close()
    assert.equal("", finish(peer))
  end)

  it_py("views travel as views both ways: steps, transposes, flips (negative strides), expanded", function()
    local ch, peer = start("echo")
    local base = ipc.zeros({4, 6}, "float32")
    fill(base, (function()
      local v = {}
      for i = 1, 24 do v[i] = i - 1 end
      return v
    end)())
    local views = {
      base:slice(2, 1, 6, 2), base:transpose(1, 2), base:flip(1), base:flip({1, 2}):slice(2, 2, 5),
      base:slice(1, 3, 3):expand({5, 6}), base[2], ipc.share(dlpack.tensor(3.5, "float32")),
    }
    for i, v in ipairs(views) do
      ch:send(v)
      local back = assert(ch:recv(20))
      assert.same(v.shape, back.shape)
      assert.same(v.strides, back.strides)
      if #v.shape == 0 then
        assert.equal(v:item(), back:item())
      else
        assert.same(v:totable(), back:totable(), "view " .. i)
      end
    end
    local flipped = base:flip(1)
    ch:send(flipped)
    local back = assert(ch:recv(20))
    base:set(4, 1, 1000)
    assert.equal(1000, back:get(1, 1))
    ch:send(ipc.zeros({0, 3}, "int16"))
    back = assert(ch:recv(20))
    assert.same({0, 3}, back.shape)
    assert.equal("int16", back.dtype)
    ch:send(dlpack.tensor({{1, 2}, {3, 4}}, "int32")) -- not shareable: copied into shareable memory
    back = assert(ch:recv(20))
    assert.same({{1, 2}, {3, 4}}, back:totable())
    ch:close()
    assert.equal("", finish(peer))
  end)

  it_py("Python reads a write Lua makes after the round trip (zero-copy Lua -> Python)", function()
    local ch, peer = start([[
ch = d.connect(sys.argv[1], 30)
a = ch.recv(30)
ch.send(a)                      # the same memory back
ch.recv(30)                     # Lua wrote, then said so
ch.send(d.share(a.copy()))      # what Python sees now, as a snapshot
print(a.tolist(), flush=True)
ch.close()
]])
    local t = ipc.zeros({3}, "int64")
    fill(t, {1, 2, 3})
    ch:send(t)
    local back = assert(ch:recv(20))
    back:set(2, 42) -- written through the tensor Python sent back
    t:set(3, 43)    -- and through the original
    ch:send(dlpack.tensor({0}))
    local seen = assert(ch:recv(20))
    assert.same({1, 42, 43}, seen:totable())
    ch:close()
    assert.matches("%[1, 42, 43%]", finish(peer))
  end)

  it_py("Python -> Lua: values, views, read-only arrays, and writes seen on both sides", function()
    local ch, peer = start([[
ch = d.connect(sys.argv[1], 30)
a = d.zeros((2, 3), "int16")
a[...] = np.arange(6).reshape(2, 3)
ch.send(a)
ch.send(a[::-1, ::2])
ch.send(a, readonly=True)
ch.send(np.arange(4.0))         # not shareable: copied
ch.send(np.float32(2.5))        # 0-d
ch.recv(30)                     # Lua wrote
a[0, 2] = -5                    # Python writes too
ch.send(d.share(a.copy()))
ch.close()
print("OK")
]])
    local a = assert(ch:recv(20))
    assert.same({{0, 1, 2}, {3, 4, 5}}, a:totable())
    assert.equal("int16", a.dtype)
    assert.is_true(a.shareable)
    assert.is_false(a.readonly)
    local v = assert(ch:recv(20))
    assert.same({{3, 5}, {0, 2}}, v:totable())
    assert.same({-3, 2}, v.strides)
    local r = assert(ch:recv(20))
    assert.is_true(r.readonly)
    support.raises(function() r:set(1, 1, 7) end, "read%-only")
    local f = assert(ch:recv(20))
    assert.same({0, 1, 2, 3}, f:totable())
    assert.equal("float64", f.dtype)
    local z = assert(ch:recv(20))
    assert.same({}, z.shape)
    assert.equal(2.5, z:item())
    a:set(1, 1, 77)
    ch:send(dlpack.tensor({0}))
    local seen = assert(ch:recv(20))
    assert.same({{77, 1, -5}, {3, 4, 5}}, seen:totable()) -- Python saw Lua's write
    assert.equal(-5, a:get(1, 3))                         -- and Lua sees Python's
    assert.equal(-5, r:get(1, 3))
    ch:close()
    assert.matches("OK%s*$", finish(peer))
  end)

  it_py("Python -> Lua echo -> Python: every dtype, 0-d, empty and strided arrays, on the same memory", function()
    local ch, peer = start([[
ch = d.connect(sys.argv[1], 30)
bad = []
for dtype in ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "float32", "float64", "complex64", "complex128"]:
    x = d.zeros((3, 4), dtype)
    x[...] = (np.arange(12) % 5).reshape(3, 4).astype(dtype)
    for v in [x, x[::-1, 1::2], x.T, x[1, 2], x[:0], np.broadcast_to(x[1], (2, 4))]:
        ch.send(v)
        y = ch.recv(30)
        layout = y.strides != v.strides and v.size > 0   # an empty array's strides say nothing
        if y.dtype != v.dtype or y.shape != v.shape or layout or not np.array_equal(y, v):
            bad.append((dtype, v.shape, v.strides, y.shape, y.strides))
    ch.send(x)
    y = ch.recv(30)
    y[0, 0] = 1                     # the same pages: x sees it
    if x[0, 0] != 1:
        bad.append((dtype, "not the same memory"))
ch.close()
print("OK" if not bad else bad)
]])
    local n = 0
    while true do
      local ok, t = pcall(ch.recv, ch, 30)
      if not ok then
        assert.matches("closed", t)
        break
      end
      ch:send(t)
      n = n + 1
    end
    assert.equal(14 * 7, n)
    ch:close()
    assert.matches("OK%s*$", finish(peer))
  end)

  it_py("readonly from Lua: Python gets a read-only array it cannot map or reopen writable", function()
    local ch, peer = start([[
import fcntl
ch = d.connect(sys.argv[1], 30)
r = ch.recv(30)
out = [int(r.flags.writeable)]
try:
    r[0] = 1
    out.append(1)
except ValueError:
    out.append(0)
b = r.base.block
try:
    mmap.mmap(b.fd, b.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    out.append(1)
except PermissionError:
    out.append(0)
out.append(int(fcntl.fcntl(b.fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY))
out.append(int(r[1]))
def reopens_writable(fd):
    # 1 when a process of another user (uid 65534 when this runs as root) holding fd can open
    # /proc/self/fd/N for writing; 0 when that is refused
    pid = os.fork()
    if pid == 0:
        try:
            if os.getuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            os.close(os.open("/proc/self/fd/%d" % fd, os.O_RDWR))
            os._exit(1)
        except PermissionError:
            os._exit(0)
        except BaseException:
            os._exit(2)
    return os.waitpid(pid, 0)[1] >> 8
out.append(reopens_writable(b.fd))
control = os.memfd_create("control")          # mode 0777, as memfds are made
out.append(reopens_writable(control))
ch.send(np.array(out, dtype=np.int16))
ch.send(r)                      # forwarded: still read-only
ch.recv(30)
]])
    local t = ipc.zeros({4}, "uint8")
    t:set(2, 200)
    ch:send(t, {readonly = true})
    local report = assert(ch:recv(20))
    -- writeable, assignment worked, mmap for writing worked, O_RDONLY, value, another user could
    -- reopen it writable (the memfd's mode is 0400), the same for a memfd of mode 0777 (the control)
    assert.same({0, 0, 0, 1, 200, 0, 1}, report:totable())
    local back = assert(ch:recv(20))
    assert.is_true(back.readonly)
    ch:send(t:as_readonly())
    ch:close()
    finish(peer)
  end)

  it_py("a dtype NumPy lacks (bfloat16) is a clear error in Python, and the channel still works", function()
    local ch, peer = start([[
ch = d.connect(sys.argv[1], 30)
try:
    ch.recv(30)
    print("no error")
except d.ProtocolError as e:
    print(e)
ch.send(ch.recv(30))
]])
    ch:send(ipc.zeros({2}, "bfloat16"))
    ch:send(ipc.zeros({2}, "int8"))
    local back = assert(ch:recv(20))
    assert.same({0, 0}, back:totable())
    ch:close()
    assert.matches("dlpack_ipc.recv: dtype bfloat16 has no NumPy equivalent", finish(peer))
  end)

  it_py("recv and accept with timeouts and polling; the end of the Python peer reads 'closed'", function()
    local ch, peer = start([[
import time
ch = d.connect(sys.argv[1], 30)
time.sleep(0.3)
assert ch.recv(0) is None      # Lua sends only after it got the 5
ch.send(np.array([5], dtype=np.int32))
x = ch.recv(30)
assert x.tolist() == [6], x
ch.close()
print("OK")
]])
    assert.is_nil(ch:recv(0)) -- Python waits 0.3 s before it sends
    local got = assert(ch:recv(20))
    assert.same({5}, got:totable())
    ch:send(dlpack.tensor({6}, "int32"))
    support.raises(function() ch:recv(20) end, "closed")
    assert.matches("OK%s*$", finish(peer))
    ch:close()
  end)

  it_py("Lua connects to a Python listener (serve-echo)", function()
    local path = socket_name()
    local peer = spawn("serve-echo", path)
    local ch = assert(ipc.connect(path, 30))
    local t = ipc.zeros({2, 2}, "float64")
    t:set(1, 2, 0.5)
    ch:send(t)
    local back = assert(ch:recv(20))
    assert.same({{0, 0.5}, {0, 0}}, back:totable())
    ch:close()
    assert.equal("", finish(peer))
  end)

  it_py("1000 round trips leave the descriptor and mapping counts of both processes unchanged", function()
    -- the descriptors and mappings ipc makes: memfds and sockets (the pipes popen makes come and go)
    local proc = require "ipc.proc"
    local function fds() return (proc.descriptors(nil, {only = "ipc"})) end
    local maps = proc.memfd_maps
    local ch, peer = start([[
import gc
def counts():
    gc.collect()
    with open("/proc/self/maps") as f:
        memfd_maps = sum("memfd:" in line for line in f)
    return [len(os.listdir("/proc/self/fd")), memfd_maps, len(d._registry)]
ch = d.connect(sys.argv[1], 30)
for _ in range(50):
    ch.send(ch.recv(30))
before = counts()
for _ in range(1000):
    ch.send(ch.recv(30))
after = counts()
print("OK" if before == after else "before %r after %r" % (before, after))
ch.close()
]])
    local t = ipc.zeros({16, 16}, "float32")
    local function rounds(n)
      for i = 1, n do
        if i % 3 == 0 then
          ch:send(t:flip(1), {readonly = true})
        elseif i % 3 == 1 then
          ch:send(t)
        else
          ch:send(dlpack.zeros({5}))
        end
        assert(ch:recv(20))
      end
    end
    rounds(50)
    collectgarbage()
    collectgarbage()
    local fd0, maps0 = fds(), maps()
    rounds(1000)
    collectgarbage()
    collectgarbage()
    assert.equal(fd0, fds())
    assert.equal(maps0, maps())
    support.raises(function() ch:recv(20) end, "closed")
    ch:close()
    assert.matches("OK%s*$", finish(peer))
  end)

  local it_torch = (MISSING or not HAS_TORCH) and function(name)
    pending(name .. ": " .. (MISSING or "torch does not import in " .. PYTHON))
  end or it
  it_torch("PyTorch: a torch tensor sent from Python, torch.from_dlpack of what Lua sent", function()
    local ch, peer = start([[
import torch
ch = d.connect(sys.argv[1], 30)
ch.send(torch.arange(6, dtype=torch.int32).reshape(2, 3).t())
x = ch.recv(30)
t = torch.from_dlpack(x)
t[1] = 11                       # no copy: Lua sees it
ch.send(np.zeros(1))
ch.send(torch.ones(2, dtype=torch.bfloat16))
ch.recv(30)
print("OK")
]])
    local a = assert(ch:recv(20))
    assert.same({{0, 3}, {1, 4}, {2, 5}}, a:totable())
    local t = ipc.zeros({3}, "float32")
    ch:send(t)
    assert(ch:recv(20))
    assert.same({0, 11, 0}, t:totable())
    local bf = assert(ch:recv(20))
    assert.equal("bfloat16", bf.dtype)
    assert.same({1, 1}, bf:totable())
    ch:send(dlpack.tensor({0}))
    ch:close()
    assert.matches("OK%s*$", finish(peer))
  end)
end)
