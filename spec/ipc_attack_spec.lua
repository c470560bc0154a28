-- dlpack.ipc under attack: a hostile peer process and a hostile script (src/internal.h's rules:
-- finalizers that close channels or receive in the middle of a call, descriptors running out,
-- listeners that never accept, paths that are not sockets). docs/ipc.md, "Threat model".
-- Windows has no dlpack.ipc (docs/windows.md): the whole file is one pending spec there.
if package.config:sub(1, 1) == "\\" then
  describe("dlpack.ipc (ipc_attack_spec.lua)", function() pending(require("support").NOT_WINDOWS) end)
  return
end

local support = require "support"
local dlpack = require "dlpack"
local ipc = require "dlpack.ipc"

local raises = support.raises
local unique = 0

-- A listener and the two ends of a channel through it.
local function pair()
  unique = unique + 1
  local name = ("@dlpack-attack-%s-%d-%d"):format(tostring({}):match("0x%x+") or "x", os.time(), unique)
  local l = ipc.listen(name)
  local c = ipc.connect(name)
  local s = assert(l:accept(1))
  return c, s, l, name
end

-- Runs a chunk in a child interpreter (this one, with this module: under ASan its preload too)
-- with at most `files` descriptors and at most `seconds` of time (and the other `limits`, ulimit
-- commands); returns its output and whether it ended well. The chunk sees `ipc`, `dlpack` and `check(cond, what)`.
local function child(code, files, seconds, as, limits)
  local file = os.tmpname()
  local f = assert(io.open(file, "w"))
  f:write("package.path = ", ("%q"):format(package.path), "\npackage.cpath = ", ("%q"):format(package.cpath), "\n",
          "local dlpack, ipc = require 'dlpack', require 'dlpack.ipc'\n",
          "local function check(c, what) if not c then error(what, 2) end end\n", code,
          "\nio.write('END\\n')\n")
  f:close()
  os.execute("chmod 644 " .. file)
  local cmd = ("ulimit -n %d; %s exec timeout -s KILL %d %s %s %s 2>&1"):format(files or 1024, limits or "",
                                                                             seconds or 20, as or "", support.LUA, file)
  local p = assert(io.popen(cmd))
  local out = p:read("*a")
  p:close()
  os.remove(file)
  return out, out:match("END\n$") ~= nil
end

-- How many sockets and memfds this process has open, after a full collection (spec/ipc/proc.lua).
local proc = require "ipc.proc"
local function fd_count()
  return (proc.descriptors(nil, {only = "ipc", collect = true}))
end

local function has_python()
  local p = io.popen("python3 -c 'import socket; print(hasattr(socket, \"send_fds\"))' 2>/dev/null")
  local out = p and p:read("*a") or ""
  if p then p:close() end
  return out:match("True") ~= nil
end

describe("dlpack.ipc timeouts against a listener that never accepts", function()
  it("connect returns nil after its timeout when the listener's queue is full (it waited forever)", function()
    local out, ok = child([[
      local name = "@dlpack-attack-backlog-" .. os.time() .. "-" .. tostring({}):match("0x%x+")
      local l = ipc.listen(name)                 -- accepts nothing: its queue (64) fills
      local kept, full = {}, false
      for _ = 1, 80 do
        local t0 = os.time()
        local c = ipc.connect(name, 0.2)
        check(os.time() - t0 <= 2, "connect waited past its timeout")
        if not c then full = true break end
        kept[#kept + 1] = c
      end
      check(full, "the queue never filled")
      check(#kept >= 1, "no connection at all")
      -- without a timeout: raises at once, as when nobody listens
      local ok, err = pcall(ipc.connect, name)
      check(not ok and tostring(err):find("cannot connect", 1, true), tostring(err))
      io.write("connections ", #kept, "\n")
      l:close()
    ]], 1024, 15)
    assert.is_true(ok, out)
  end)

  it("listen on the path of a live listener whose queue is full raises 'in use' (it hung)", function()
    local out, ok = child([[
      local dir = os.tmpname()
      os.remove(dir)
      local path = dir .. ".sock"
      local l = ipc.listen(path)
      local kept = {}
      for _ = 1, 80 do
        local c = ipc.connect(path, 0.05)
        if not c then break end
        kept[#kept + 1] = c
      end
      local ok, err = pcall(ipc.listen, path)
      check(not ok and tostring(err):find("in use", 1, true), tostring(err))
      l:close()
    ]], 1024, 15)
    assert.is_true(ok, out)
  end)
end)

describe("dlpack.ipc when a process has no free descriptor", function()
  it("recv raises a clear error and the message waits, not lost", function()
    local out, ok = child([[
      local name = "@dlpack-attack-emfile-" .. os.time() .. "-" .. tostring({}):match("0x%x+")
      local l = ipc.listen(name)
      local c = ipc.connect(name)
      local s = l:accept(1)
      local t = ipc.zeros({4}, "int32")
      t:fill(7)
      c:send(t)
      t:release()
      local files = {}
      while true do
        local f = io.open("/dev/null")
        if not f then break end
        files[#files + 1] = f
      end
      local ok, err = pcall(s.recv, s, 0)
      check(not ok, "recv without a free descriptor gave " .. tostring(err))
      err = tostring(err)
      check(err:find("descriptor", 1, true) and not err:find("attached", 1, true), "unclear: " .. err)
      files[#files]:close()
      files[#files] = nil
      local r = s:recv(0)                        -- the same message, now that one is free
      check(r and r[1] == 7 and r[4] == 7, "the message was lost: " .. tostring(r))
    ]], 40, 15)
    assert.is_true(ok, out)
  end)

  it("a read-only send collects garbage tensors' descriptors before it gives up (it raised EMFILE)", function()
    local out, ok = child([[
      local name = "@dlpack-attack-emfile-send-" .. os.time() .. "-" .. tostring({}):match("0x%x+")
      local l = ipc.listen(name)
      local c = ipc.connect(name)
      local s = l:accept(1)
      local t = ipc.zeros({4}, "int32")
      t:fill(7)
      local kept = {}
      for i = 1, 10 do kept[i] = ipc.empty({1}) end
      local files = {}
      while true do
        local f = io.open("/dev/null")
        if not f then break end
        files[#files + 1] = f
      end
      kept = nil -- garbage now, holding ten descriptors; none is free
      local sent, err = pcall(c.send, c, t, {readonly = true}) -- reopens its memfd read-only: one more
      check(sent, "send: " .. tostring(err))
      local r = s:recv(0)
      check(r and r.readonly and r[4] == 7, "received " .. tostring(r))
    ]], 40, 15)
    assert.is_true(ok, out)
  end)

  it("accept, connect and listen collect garbage channels' descriptors before they give up (EMFILE)", function()
    local out, ok = child([[
      local name = "@dlpack-attack-emfile-accept-" .. os.time() .. "-" .. tostring({}):match("0x%x+")
      local l = ipc.listen(name)
      local waiting = ipc.connect(name)           -- in the listener's queue
      local other = ipc.listen(name .. "-other")
      local kept = {}
      for _ = 1, 5 do
        kept[#kept + 1] = ipc.connect(name .. "-other")
        kept[#kept + 1] = other:accept(1)
      end
      local files = {}
      while true do
        local f = io.open("/dev/null")
        if not f then break end
        files[#files + 1] = f
      end
      kept = nil -- garbage now, holding ten descriptors; none is free
      local got, ch = pcall(l.accept, l, 0)
      check(got and ch, "accept: " .. tostring(ch))
      local connected, c2 = pcall(ipc.connect, name)
      check(connected and c2, "connect: " .. tostring(c2))
      local listening, l2 = pcall(ipc.listen, name .. "-2")
      check(listening and l2, "listen: " .. tostring(l2))
      check(waiting and other, "kept")
    ]], 40, 15)
    assert.is_true(ok, out)
  end)

  it("ipc.empty collects garbage tensors' descriptors before it gives up", function()
    local out, ok = child([[
      for _ = 1, 100 do ipc.empty({16}, "uint8") end -- each holds a descriptor until collected
      local t = ipc.empty({16}, "uint8")
      check(t.shareable, "not shareable")
    ]], 64, 15)
    assert.is_true(ok, out)
  end)
end)

describe("dlpack.ipc under a file size limit (ulimit -f)", function()
  it("refuses shareable memory beyond it with an error (SIGXFSZ killed the process)", function()
    local out, ok = child([[
      local small = ipc.zeros({1000}, "uint8")            -- within the 100 KiB limit
      check(small.shareable, "not shareable")
      for _, make in ipairs({
        function() return ipc.zeros({1000000}, "uint8") end,
        function() return ipc.empty({1000, 1000}, "uint8") end,
        function() return ipc.share(dlpack.zeros({1000000}, "uint8")) end,
      }) do
        local made, err = pcall(make)
        check(not made and tostring(err):find("ulimit -f", 1, true), "made: " .. tostring(err))
      end
      local name = "@dlpack-attack-fsize-" .. os.time() .. "-" .. tostring({}):match("0x%x+")
      local l = ipc.listen(name)
      local c = ipc.connect(name)
      local s = l:accept(1)
      local sent, err = pcall(c.send, c, dlpack.zeros({1000000}, "uint8")) -- copied into a memfd first
      check(not sent and tostring(err):find("ulimit -f", 1, true), "sent: " .. tostring(err))
      c:send(small)
      check(s:recv(0).shareable, "the channel still works")
    ]], 1024, 15, nil, "ulimit -f 100;")
    assert.is_true(ok, out)
  end)
end)

describe("dlpack.ipc between users", function()
  it("a tensor received read-only from another user's process can be sent on (reopening it was refused)", function()
    local p = io.popen("id -u; command -v setpriv")
    local out = p:read("*a")
    p:close()
    if not out:match("^0\n.*setpriv") then return pending("needs root and setpriv (runs two users' processes)") end
    -- the other users must be able to load the module: not from a checkout under a folder only
    -- root may enter (mktemp -d makes them 0700)
    local probe = io.popen(("setpriv --reuid=65533 --regid=65533 --clear-groups %s -e %q 2>&1"):format(support.LUA,
      ("package.path = %q; package.cpath = %q; require 'dlpack.ipc'"):format(package.path, package.cpath)))
    local refused = probe:read("*a")
    probe:close()
    if refused:match("module 'dlpack[%.%w]*' not found") or refused:match("[Pp]ermission denied") then
      return pending("another user cannot load the module from this checkout (a parent folder closed to "
                     .. "others, as mktemp -d makes): " .. refused:match("[^\n]*"))
    end
    local name = "@dlpack-attack-users-" .. os.time() .. "-" .. tostring({}):match("0x%x+")
    local sender = io.popen(("sleep 0.3; %s %s -e %q 2>&1"):format(
      "setpriv --reuid=65533 --regid=65533 --clear-groups timeout -s KILL 20", support.LUA,
      ("package.path = %q; package.cpath = %q; local ipc = require 'dlpack.ipc'; local c = ipc.connect(%q, 10); "
       .. "local t = ipc.zeros({4}, 'int32'); t:fill(3); c:send(t, {readonly = true}); c:recv(10)")
        :format(package.path, package.cpath, name)))
    local got, ok = child(([[
      local l = ipc.listen(%q)
      local ch = assert(l:accept(10))
      local t = assert(ch:recv(10))
      check(t.readonly and t[1] == 3, "received")
      local l2 = ipc.listen(%q .. "-2")
      local c2 = ipc.connect(%q .. "-2")
      local s2 = l2:accept(1)
      c2:send(t)                                  -- read-only stays so: it needed a reopen
      c2:send(t:slice(1, 2, 3), {readonly = true})
      local a, b = s2:recv(1), s2:recv(1)
      check(a.readonly and b.readonly and a[4] == 3 and b[2] == 3, "forwarded")
      ch:close()
    ]]):format(name, name, name), 1024, 20, "setpriv --reuid=65534 --regid=65534 --clear-groups")
    sender:close()
    assert.is_true(ok, got)
  end)
end)

describe("dlpack.ipc against a hostile peer's memfd", function()
  it("refuses a hugetlb memfd (a peer that punches a hole in it kills the receiver with SIGBUS)", function()
    if not has_python() then return pending("python3 >= 3.9 not found") end
    local c, s, l, name = pair()
    c:close()
    s:close()
    local p = assert(io.popen("python3 spec/ipc/attack_peer.py " .. name .. " hugetlb 2>&1"))
    local line = p:read("*l") or ""
    if line:match("^skip") then
      p:close()
      l:close()
      return pending(line)
    end
    local ch = assert(l:accept(5), line)
    local err = raises(function() ch:recv(5) end, "hugetlb")
    assert.matches("recv:", err)
    ch:close()
    p:close()
    l:close()
  end)

  -- found by the fuzzer (spec/fuzz/ipc.lua): the mapping starts at the page boundary before the
  -- first element, and a packed tensor must start where its memory does, so these were refused
  -- ("the result would reach outside the tensor's memory")
  it("takes packed sub-byte tensors that do not start at a page boundary", function()
    if not has_python() then return pending("python3 >= 3.9 not found") end
    local c, s, l, name = pair()
    c:close()
    s:close()
    local p = assert(io.popen("python3 spec/ipc/attack_peer.py " .. name .. " packed-offset 2>&1"))
    local ch = assert(l:accept(5), p:read("*l"))
    local function bytes(from, n)
      local b = {}
      for i = from, from + n - 1 do b[#b + 1] = string.char(i % 251) end
      return table.concat(b)
    end
    local fp4 = ch:recv(5)
    assert.are.same({5}, fp4.shape)
    assert.are.equal("float4_e2m1fn", fp4.dtype)
    assert.are.equal(bytes(4099, 3), fp4:tobytes())
    local fp6 = ch:recv(5)
    assert.are.same({4}, fp6.shape)
    assert.are.equal(bytes(7, 3), fp6:tobytes())
    assert.are.equal(fp6, ipc.share(fp6))
    raises(function() fp4:narrow(1, 2, 2) end, "not supported") -- packed views stay refused
    ch:close()
    p:close()
    l:close()
  end)
end)

describe("dlpack.ipc and finalizers inside recv", function()
  -- Runs chunk in a fresh lua_State under a collector that runs finalizers almost at every
  -- allocation; the chunk sees `pair()`, `armed(attack)` (an attack the next finalizer does,
  -- once), and returns how often an armed attack ran. Checks that no descriptor leaked.
  local function eager(chunk)
    local fab = require "fabricate"
    local before = fd_count()
    local r = fab.run_threads(support.GC_SETMETATABLE .. support.EAGER_GC .. [[
      local dlpack, ipc = require "dlpack", require "dlpack.ipc"
      local unique = 0
      local function pair()
        unique = unique + 1
        local name = "@dlpack-attack-gc-" .. tostring({}):match("0x%x+") .. os.time() .. "-" .. unique
        local l = ipc.listen(name)
        local c = ipc.connect(name)
        return c, assert(l:accept(1)), l
      end
      local attack, fired = nil, 0
      local function armed(f)
        if f then local _ = {("x"):rep(4096 * math.random(1, 64))} end -- debt: the next allocation steps
        attack = f
      end
      local function sentinel()
        setmetatable({}, {__gc = function()
          local a = attack
          attack = nil
          if a then fired = fired + 1; a() end
          sentinel()
        end})
      end
      sentinel()
    ]] .. chunk .. "\nreturn fired", 1)[1]
    assert.is_true(r.ok, tostring(r.value))
    -- Lua 5.4 fires inside nearly every call; the others' collectors, now and then in none of
    -- 3000 rounds: visible as pending there, a failure on 5.4
    if r.value == 0 and not support.LUA54 then return pending("no finalizer ran inside the call this time") end
    assert.is_true(r.value > 0, "the finalizer never fired inside the call")
    assert.are.equal(before, fd_count(), "descriptors leaked")
  end

  it("a nested recv takes the next message; the outer one gets its own (it lost it, saying 'closed')", function()
    eager([[
      local c, s, l = pair()
      for _ = 1, 3000 do
        if fired >= 5 then break end
        local a, b = ipc.zeros({4}, "int32"), ipc.zeros({4}, "int32")
        a:fill(1)
        b:fill(2)
        c:send(a)
        c:send(b)
        local inner
        armed(function() inner = {pcall(s.recv, s, 0)} end)
        local ok, r = pcall(s.recv, s, 0)
        armed(nil)
        assert(ok, tostring(r))
        local got = {r[1]}                      -- the finalizer may have run before recv too
        if inner then
          assert(inner[1], tostring(inner[2]))
          got[2] = inner[2][1]
        else
          got[2] = s:recv(0)[1]
        end
        table.sort(got)
        assert(got[1] == 1 and got[2] == 2, "got " .. got[1] .. ", " .. got[2])
        assert(s:recv(0) == nil)
      end
      c:close(); s:close(); l:close()
    ]])
  end)

  it("a channel closed by a finalizer during recv: an error naming it, or the tensor; nothing leaked", function()
    eager([[
      for _ = 1, 3000 do
        if fired >= 5 then break end
        local c, s, l = pair()
        c:send(ipc.zeros({4}, "int32"))
        armed(function() s:close() end)
        local ok, r = pcall(s.recv, s, 0)
        armed(nil)
        if not ok then assert(tostring(r):find("closed"), tostring(r)) else assert(r[1] == 0) end
        c:close(); s:close(); l:close()
      end
    ]])
  end)

  it("a listener closed by a finalizer during accept: an error naming it", function()
    eager([[
      for _ = 1, 3000 do
        if fired >= 5 then break end
        local c, s, l = pair()
        local c2 = ipc.connect(l and tostring(l):match("%((.-)%)") or "", 1)
        armed(function() l:close() end)
        local ok, r = pcall(l.accept, l, 0)
        armed(nil)
        if not ok then assert(tostring(r):find("closed"), tostring(r)) else assert(r) end
        c:close(); c2:close(); s:close(); l:close()
      end
    ]])
  end)
end)

describe("dlpack.ipc listener paths", function()
  local dir
  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir))
  end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  it("never unlinks what is not a socket, and says what is there", function()
    local f = assert(io.open(dir .. "/regular", "w"))
    f:write("precious")
    f:close()
    assert(os.execute("mkfifo " .. dir .. "/fifo"))
    assert(os.execute("mkdir " .. dir .. "/sub"))
    for _, name in ipairs({"regular", "fifo", "sub"}) do
      local err = raises(function() ipc.listen(dir .. "/" .. name) end, "dlpack.ipc.listen")
      assert.matches("not a socket", err)
    end
    assert.are.equal("precious", io.open(dir .. "/regular"):read("*a"))
    for _, name in ipairs({"regular", "fifo", "sub"}) do -- at once, not after the timeout
      local t0 = os.time()
      raises(function() ipc.connect(dir .. "/" .. name, 30) end, "it is not a socket")
      assert.is_true(os.time() - t0 <= 2)
    end
  end)

  it("a symlink to a live or a stale socket is left alone", function()
    local l = ipc.listen(dir .. "/live")
    assert(os.execute("ln -s " .. dir .. "/live " .. dir .. "/link"))
    raises(function() ipc.listen(dir .. "/link") end, "dlpack.ipc.listen")
    local c = assert(ipc.connect(dir .. "/link", 1))
    assert.is_truthy(l:accept(1))
    c:close()
    l:close()
    assert.is_nil(io.open(dir .. "/live"))                  -- close removed the file it made
  end)

  it("takes paths of 107 bytes and refuses 108; '@' alone is an abstract name", function()
    local p107 = dir .. "/" .. ("x"):rep(107 - #dir - 1)
    local l = ipc.listen(p107)
    l:close()
    raises(function() ipc.listen(p107 .. "y") end, "at most 107 bytes")
    raises(function() ipc.listen("@" .. ("z"):rep(107)) end, "at most 107 bytes")
    raises(function() ipc.listen("") end, "non%-empty")
    raises(function() ipc.listen("a\0b") end, "no nul")
  end)
end)

describe("dlpack.ipc arguments from a hostile script", function()
  it("timeouts: NaN, negative, strings that are not numbers raise; huge and inf wait", function()
    local c, s, l = pair()
    for _, bad in ipairs({0 / 0, -1, -1e-300, -1 / 0, "soon", {}}) do
      local what = type(bad) == "number" and "timeout" or "number expected"
      raises(function() s:recv(bad) end, what)
      raises(function() l:accept(bad) end, what)
      raises(function() ipc.connect("@nobody-listens-here", bad) end, what)
    end
    c:send(ipc.zeros({1}))
    assert.is_truthy(s:recv(1 / 0))
    c:send(ipc.zeros({1}))
    assert.is_truthy(s:recv(2 ^ 62))
    assert.is_nil(s:recv(1e-300))
    c:close(); s:close(); l:close()
  end)

  it("send options are read raw: metatables and lying __index do not run", function()
    local c, s, l = pair()
    local ran = false
    local opts = setmetatable({}, {__index = function() ran = true return true end,
                                   __pairs = function() ran = true return next, {}, nil end})
    c:send(dlpack.zeros({2}), opts)
    assert.is_false(ran)
    assert.is_false(s:recv(1).readonly)
    raises(function() c:send(dlpack.zeros({2}), {readonly = 1}) end, "boolean")
    raises(function() c:send(dlpack.zeros({2}), {[1] = true}) end, "unknown option")
    c:close(); s:close(); l:close()
  end)

  it("a released tensor, and a view of a received read-only tensor", function()
    local c, s, l = pair()
    local t = ipc.zeros({4, 4}, "float32")
    t:release()
    raises(function() c:send(t) end, "released")
    local u = ipc.zeros({16}, "float32")
    u[7] = 5
    c:send(u, {readonly = true})
    local r = s:recv(1)
    assert.is_true(r.readonly)
    raises(function() r:fill(1) end, "read%-only")
    s:send(r:slice(1, 7, 16, 3), {readonly = false}) -- back to the sender: stays read-only
    local back = c:recv(1)
    assert.is_true(back.readonly)
    assert.are.same({5, 0, 0, 0}, back:totable())
    raises(function() back:fill(1) end, "read%-only")
    u[10] = 6                                     -- the sender's writes are seen through both
    assert.are.equal(6, back[2])
    c:close(); s:close(); l:close()
  end)

  it("layouts that stop within a page, at an odd offset, packed, empty", function()
    local c, s, l = pair()
    local t = ipc.zeros({3 * 4096 + 7}, "uint8")
    t[4096 * 2 + 3] = 9
    c:send(t:slice(1, 4096 * 2 + 3, 4096 * 2 + 5))     -- an odd offset in the third page
    local r = s:recv(1)
    assert.are.same({9, 0, 0}, r:totable())
    c:send(ipc.zeros({0, 5}, "float64"))
    assert.are.same({0, 5}, s:recv(1).shape)
    local p = ipc.zeros({3}, "float4_e2m1fn")
    c:send(p)
    assert.are.same({3}, s:recv(1).shape)
    c:close(); s:close(); l:close()
  end)

  it("every descriptor is close-on-exec: a child sees none of them", function()
    local function child_fds()
      local p = assert(io.popen("ls /proc/self/fd | wc -l"))
      local n = tonumber(p:read("*a"))
      p:close()
      return n
    end
    local before = child_fds()
    local c, s, l = pair()
    c:send(ipc.zeros({8}))
    local r = s:recv(1)
    c:send(ipc.zeros({8}), {readonly = true})
    local ro = s:recv(1)
    assert.are.equal(before, child_fds())
    assert.is_truthy(r and ro)
    c:close(); s:close(); l:close()
  end)
end)

describe("dlpack.ipc and lua_close", function()
  it("received tensors exported, then deleted on another thread after their state closed", function()
    local fab = require "fabricate"
    local before = fd_count()
    local results = fab.run_threads(support.GC_SETMETATABLE .. [[
      local fab, d, ipc = require "fabricate", require "dlpack", require "dlpack.ipc"
      local name = "@dlpack-attack-close-" .. tostring({}):match("0x%x+") .. os.time()
      local l = ipc.listen(name)
      local c = ipc.connect(name)
      local s = l:accept(1)
      local t = ipc.zeros({3}, "float32")
      t:fill(2.5)
      c:send(t)
      c:send(t, {readonly = true})
      local r, ro = s:recv(1), s:recv(1)
      assert(r[1] == 2.5 and ro[3] == 2.5)
      for _, x in ipairs({r, ro:slice(1, 2, 3)}) do
        local rc, managed = fab.consume(d.to_dlpack(x, {max_version = {1, 0}}))
        assert(rc == 0 and managed, "consume")
        fab.post(managed)
      end
      c:send(t)                                  -- left unreceived in the socket at close
      kept = {l, c, s, r, ro}                    -- all alive when the state closes
      return true
    ]], 1)
    assert.is_true(results[1].ok, tostring(results[1].value))
    for _ = 1, 2 do
      local managed = assert(fab.receive(1))
      local info = fab.inspect(managed, "dltensor_versioned")
      assert.is_truthy(info)
      assert.is_true(fab.delete_on_thread(managed, "dltensor_versioned"))
    end
    assert.are.equal(before, fd_count(), "descriptors left open")
  end)
end)
