-- The hostile-peer corpus of dlpack.ipc (issue 17; docs/ipc.md, "Threat model"). spec/ipc/hostile.py
-- (Python 3, standard library only) connects to a listener here and sends, case by case, records and
-- descriptors that are wrong in one way each (garbage, huge lengths, truncated records, a regular file,
-- a pipe, an unsealed memfd, one shrunk after sending, hundreds of descriptors, ...), each followed by a
-- valid control message. Every wrong one must make ch:recv raise a clear error that names the problem,
-- after which the same channel still receives the control tensor with its values; the cases that must
-- succeed give their tensor exactly; a peer that goes away gives an error containing "closed"; and the
-- receiver's descriptors and mappings are the same after the corpus as before. Stage 50 runs this file
-- under ASan and UBSan.
-- Windows has no dlpack.ipc (docs/windows.md): the whole file is one pending spec there.
if package.config:sub(1, 1) == "\\" then
  describe("dlpack.ipc (ipc_hostile_spec.lua)", function() pending(require("support").NOT_WINDOWS) end)
  return
end

local HAVE_IPC, ipc = pcall(require, "dlpack.ipc")

local HOSTILE = "spec/ipc/hostile.py"

local function first_line(cmd)
  local p = io.popen(cmd)
  if not p then return nil end
  local line = p:read("*l")
  p:close()
  return line
end

local PYTHON = first_line("command -v python3 2>/dev/null")

local proc = require "ipc.proc"
local PID = proc.pid()

-- Open descriptors of this process, and their listing (less the listing's own pipe).
local descriptors = proc.descriptors

-- Mappings of files in /proc/PID/maps (those with an inode: what a received descriptor maps, whatever
-- it is; the heap's anonymous mappings come and go with the allocator, ASan's and valgrind's too;
-- shared libraries are left out), and of memfds among them.
local function mappings()
  local f = assert(io.open("/proc/" .. PID .. "/maps"))
  local files, memfds = 0, 0
  for line in f:lines() do
    local inode, file = line:match("^%S+%s+%S+%s+%S+%s+%S+%s+(%d+)%s*(.*)$")
    -- shared libraries left out: a library the process loads late (valgrind's runs do) is no leak
    local library = file and (file:match("%.so$") or file:match("%.so%.[%d.]+$"))
    if inode and inode ~= "0" and not library then files = files + 1 end
    if line:find("/memfd:", 1, true) then memfds = memfds + 1 end
  end
  f:close()
  return files, memfds
end

local function settle()
  collectgarbage()
  collectgarbage()
end

-- The cases, from hostile.py --list: number, name, outcomes (a list), expect, what.
local function cases()
  local p = assert(io.popen(string.format("env -u LD_PRELOAD %s %s --list 2>&1", PYTHON, HOSTILE)))
  local list = {}
  for line in p:lines() do
    local number, name, outcomes, expect, what = line:match("^(%d+)\t([^\t]+)\t([^\t]+)\t([^\t]*)\t(.*)$")
    assert(number, "hostile.py --list: " .. line)
    local o = {}
    for word in outcomes:gmatch("[^,]+") do o[#o + 1] = word end
    list[#list + 1] = {number = tonumber(number), name = name, outcomes = o, expect = expect, what = what}
  end
  p:close()
  return list
end

-- What each error case's message must contain (a Lua pattern over the lowercased message), after
-- "recv": the problem named, not just "invalid message".
local ERRORS = {
  ["garbage"] = "wrong magic",
  ["garbage-with-fd"] = "magic",
  ["garbage-magic-ok"] = "version",
  ["empty-record"] = "short",
  ["empty-record-with-fd"] = "short",
  ["one-byte"] = "short",
  ["truncated-header"] = "short",
  ["truncated-55"] = "short",
  ["truncated-strides"] = "length",
  ["truncated-recrc"] = "length",
  ["record-4096"] = "longer than",
  ["record-max-plus-1"] = "longer than 1080 bytes",
  ["record-64k"] = "longer than",
  ["length-huge"] = "length",
  ["length-zero"] = "length",
  ["length-plus-16"] = "length",
  ["length-minus-16"] = "length",
  ["trailing-bytes"] = "ndim 2 has 96 bytes",
  ["wrong-magic"] = "magic",
  ["magic-lowercase"] = "magic",
  ["version-0"] = "version 0 ",
  ["version-2"] = "version 2 ",
  ["version-65535"] = "version 65535",
  ["kind-0"] = "kind",
  ["kind-2"] = "kind",
  ["bad-crc"] = "checksum",
  ["bad-crc-body"] = "checksum",
  ["crc-zero"] = "checksum",
  ["ndim-65"] = "longer than",
  ["ndim-65-short"] = "ndim",
  ["ndim-huge"] = "ndim",
  ["ndim-wraps"] = "ndim",
  ["ndim-int32-min"] = "ndim",
  ["ndim-more-than-sent"] = "ndim 3 has 88 bytes",
  ["shape-negative"] = "shape",
  ["shape-int64-min"] = "shape",
  ["shape-product-overflow"] = "more elements than fit in 64 bits",
  ["shape-product-overflow-3"] = "more elements than fit in 64 bits",
  ["shape-bytes-overflow"] = "beyond 64%-bit",
  ["stride-overflow"] = "beyond 64%-bit",
  ["stride-int64-min"] = "beyond 64%-bit",
  ["strides-before-start"] = "outside",
  ["strides-before-start-2d"] = "outside",
  ["offset-beyond"] = "outside",
  ["offset-at-end"] = "outside",
  ["offset-huge"] = "outside",
  ["offset-negative"] = "outside",
  ["offset-wraps"] = "outside",
  ["size-larger-than-file"] = "says 8192 bytes, the memfd has 4096",
  ["size-smaller-than-file"] = "says 48 bytes, the memfd has 4096",
  ["size-huge"] = "says 18446744073709551615 bytes, the memfd has 48",
  ["file-too-small"] = "outside",
  ["dtype-unknown-code"] = "dtype",
  ["dtype-bad-bits"] = "dtype",
  ["dtype-zero-bits"] = "dtype",
  ["dtype-opaque"] = "dtype",
  ["lanes-2"] = "lanes",
  ["lanes-0"] = "lanes",
  ["flags-unknown"] = "flags",
  ["flags-high-bit"] = "flags",
  ["flags-padded-float64"] = "not a sub%-byte dtype",
  ["device-unknown"] = "device",
  ["device-zero"] = "device",
  ["cpu-device-id-1"] = "id 1",
  ["cuda-with-memfd"] = "cuda",
  ["float4-packed-strided"] = "contiguous",
  ["float4-packed-short"] = "outside the 1 bytes",
  ["eight-descriptors"] = "came with 8",
  ["nine-descriptors"] = "too many descriptors",
  ["no-descriptor"] = "descriptor",
  ["two-descriptors"] = "descriptor",
  ["hundreds-of-descriptors"] = "descriptor",
  ["hundreds-of-memfds"] = "descriptor",
  ["regular-file"] = "memfd",
  ["pipe"] = "memfd",
  ["socket"] = "memfd",
  ["dev-zero"] = "memfd",
  ["inet-socket"] = "memfd",
  ["memfd-unsealed"] = "seal",
  ["memfd-no-sealing"] = "seal",
  ["memfd-shrunk-after-sending"] = "seal",
  ["memfd-shrunk-before-sending"] = "seal",
  ["memfd-can-grow"] = "seal",
  ["memfd-o-path"] = "memfd",
  ["memfd-write-only"] = "mmap",
  ["memfd-hugetlb"] = "hugetlb",
  ["memfd-hugetlb-at-0"] = "hugetlb",
  ["sparse-32tib-span"] = "mmap", -- when the address space has no room for 32 TiB
  ["garbage-then-close"] = "magic",
  ["three-then-close"] = {"magic", "memfd", "descriptor"},
}

local function pattern_of(case, k)
  local p = ERRORS[case.name]
  if type(p) == "table" then return p[k] end
  return p
end

local function parse_expect(s)
  local dtype, shape, strides, values = s:match("^([^;]*);([^;]*);([^;]*);([^;]*)$")
  assert(dtype, "hostile.py: a tensor outcome without its expected value: " .. s)
  local function list(x)
    local t = {}
    for v in x:gmatch("[^,]+") do
      if v == "true" or v == "false" then
        t[#t + 1] = v == "true"
      elseif v ~= "*" then -- "*": values not compared
        t[#t + 1] = assert(tonumber(v), v)
      end
    end
    return t
  end
  return {dtype = dtype, shape = list(shape), strides = list(strides), values = list(values)}
end

local function flatten(v, out)
  if type(v) == "table" then
    for _, x in ipairs(v) do flatten(x, out) end
  else
    out[#out + 1] = v
  end
  return out
end

local function same_list(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return true
end

local function show(list)
  local s = {}
  for i, v in ipairs(list) do s[i] = tostring(v) end
  return "{" .. table.concat(s, ", ") .. "}"
end

-- Checks a received tensor against an expected "dtype;shape;strides;values"; returns a complaint or nil.
local function check_tensor(t, expect, readonly)
  local e = parse_expect(expect)
  if t.dtype ~= e.dtype then return "dtype " .. tostring(t.dtype) .. ", expected " .. e.dtype end
  if not same_list(t.shape, e.shape) then return "shape " .. show(t.shape) .. ", expected " .. show(e.shape) end
  if #e.values > 0 and not same_list(t.strides, e.strides) then
    return "strides " .. show(t.strides) .. ", expected " .. show(e.strides)
  end
  local values = e.values[1] == nil and expect:find("*", 1, true) and {} or flatten(t:totable(), {})
  if not same_list(values, e.values) then return "values " .. show(values) .. ", expected " .. show(e.values) end
  if #e.values > 0 then -- the copy path reads the same elements
    local copy = t:clone()
    local copied = flatten(copy:totable(), {})
    copy:release()
    if not same_list(copied, e.values) then return "a clone's values " .. show(copied) end
  end
  if t.readonly ~= readonly then return "readonly is " .. tostring(t.readonly) end
  if t.shareable ~= true then return "a received tensor is not shareable" end
  return nil
end

local function control_values(number)
  local v = {}
  for i = 0, 5 do v[#v + 1] = 10 * number + i end
  return v
end

local serial = 0

-- Runs hostile.py with `args` against a fresh listener; calls body(ch, finished) with the accepted
-- channel, where finished() waits until hostile.py has exited and returns its output. Returns that.
local function with_peer(args, body)
  serial = serial + 1
  local path = string.format("@dlpack-hostile-%s-%d", PID, serial)
  local listener = ipc.listen(path)
  local p = assert(io.popen(string.format("env -u LD_PRELOAD %s %s '%s' %s 2>&1", PYTHON, HOSTILE, path, args)))
  local out
  local function finished()
    if not out then
      out = p:read("*a")
      p:close()
    end
    return out
  end
  local ch = listener:accept(20)
  local ok, err = true, nil
  if ch then ok, err = pcall(body, ch, finished) end
  if ch then ch:close() end
  listener:close()
  finished()
  assert(ch, "hostile.py did not connect: " .. out)
  if not ok then error(err, 0) end
  return out
end

-- The error a recv must raise, or a complaint. Releases anything received by mistake.
local function expect_error(ch, pattern, what, timeout)
  local ok, got = pcall(ch.recv, ch, timeout or 20)
  if ok then
    if got == nil then return nil, what .. ": recv timed out instead of raising" end
    local shape = show(got.shape)
    got:release()
    return nil, what .. ": recv gave a tensor of shape " .. shape .. " instead of raising"
  end
  local msg = tostring(got)
  local low = msg:lower()
  if pattern ~= "closed" and low:find("closed", 1, true) then
    return msg, what .. ": '" .. msg .. "' says closed while the peer is still there"
  end
  if not low:find("recv", 1, true) then return msg, what .. ": '" .. msg .. "' does not name recv" end
  if pattern and not low:find(pattern) then
    return msg, what .. ": '" .. msg .. "' does not match '" .. pattern .. "'"
  end
  return msg, nil
end

local describe_ipc = (HAVE_IPC and PYTHON) and describe or function(name)
  pending(name .. ": " .. (HAVE_IPC and "python3 not found" or "no dlpack.ipc here (" .. tostring(ipc) .. ")"))
end

describe_ipc("dlpack.ipc against a hostile peer (spec/ipc/hostile.py)", function()
  local CASES = cases()

  it("lists its cases, and every error case has the words its message must contain here", function()
    assert.is_true(#CASES >= 90, "hostile.py lists " .. #CASES .. " cases")
    for _, case in ipairs(CASES) do
      for k, outcome in ipairs(case.outcomes) do
        if outcome == "error" or outcome == "tensor-or-error" then
          assert.is_truthy(pattern_of(case, k), "no expected words for case " .. case.name)
        end
      end
    end
  end)

  it("gives a clear error for each wrong message on one channel, which then receives the next one", function()
    -- What a message for a CUDA device loads once (the driver, its libraries, its device files: the
    -- fake one in stage 45, a real one on a GPU machine) is loaded before the counts are taken.
    with_peer("cuda-with-memfd", function(ch)
      pcall(ch.recv, ch, 20)
      local control = ch:recv(20)
      if control then control:release() end
    end)
    settle()
    local fds0, fd_list0 = descriptors()
    local maps0, memfds0 = mappings()
    local complaints, seen = {}, {}
    local function complain(s) complaints[#complaints + 1] = s end
    local fds_before, files_before, memfds_before = nil, maps0, memfds0
    local out = with_peer("all", function(ch)
      fds_before = descriptors() -- with the channel and hostile.py's pipe open
      for _, case in ipairs(CASES) do
        if case.outcomes[#case.outcomes] ~= "closed" then
          local what = string.format("case %d %s (%s)", case.number, case.name, case.what)
          local outcome = case.outcomes[1]
          if case.expect:find("^skip:") then
            seen[#seen + 1] = case.name .. ": " .. case.expect -- it sends nothing; see the pending test below
          elseif outcome == "error" then
            local msg, complaint = expect_error(ch, pattern_of(case, 1), what)
            if complaint then complain(complaint) end
            seen[#seen + 1] = case.name .. ": " .. tostring(msg)
          else
            local ok, t = pcall(ch.recv, ch, 20)
            if not ok and outcome == "tensor-or-error" then
              local msg = tostring(t)
              if not msg:lower():find(pattern_of(case, 1)) or msg:lower():find("closed", 1, true) then
                complain(what .. ": '" .. msg .. "' does not match '" .. pattern_of(case, 1) .. "'")
              end
              seen[#seen + 1] = case.name .. ": " .. msg
            elseif not ok then
              complain(what .. ": raised '" .. tostring(t) .. "'")
            elseif t == nil then
              complain(what .. ": recv timed out")
            else
              local c = check_tensor(t, case.expect, outcome == "readonly")
              if c then complain(what .. ": " .. c) end
              t:release()
              seen[#seen + 1] = case.name .. ": a tensor"
            end
          end
          local ok, t = pcall(ch.recv, ch, 20)
          if not ok then
            complain(what .. ": the control message after it raised '" .. tostring(t) .. "'")
            if tostring(t):lower():find("closed", 1, true) then return end
          elseif t == nil then
            complain(what .. ": the control message after it timed out")
          else
            local c = check_tensor(t, "float64;2,3;3,1;" .. table.concat(control_values(case.number), ","), false)
            if c then complain(what .. ": the control message after it: " .. c) end
            t:release()
          end
          settle()
          local files, memfds = mappings()
          if files ~= files_before or memfds ~= memfds_before then
            complain(string.format("%s: %d mapping(s) of files (%d of memfds) more than before it", what,
                                   files - files_before, memfds - memfds_before))
            files_before, memfds_before = files, memfds
          end
          local fds, fd_list = descriptors()
          if fds ~= fds_before then
            complain(what .. ": " .. (fds - fds_before) .. " descriptor(s) more than before it:\n" .. fd_list)
            fds_before = fds
          end
        end
      end
      -- hostile.py has sent everything and closed: end of file now.
      local _, complaint = expect_error(ch, "closed", "after the corpus")
      if complaint then complain(complaint) end
    end)
    settle()
    local fds1, fd_list1 = descriptors()
    local maps1, memfds1 = mappings()
    if os.getenv("DLPACK_HOSTILE_VERBOSE") then print("\n" .. table.concat(seen, "\n")) end
    assert.are.equal(0, #complaints, table.concat(complaints, "\n") .. "\nhostile.py: " .. out)
    assert.are.equal(fds0, fds1, "descriptors before:\n" .. fd_list0 .. "\nafter:\n" .. fd_list1)
    assert.are.equal(memfds0, memfds1, "memfd mappings")
    assert.are.equal(maps0, maps1, "mappings of files")
  end)

  -- Each peer that goes away, on a connection of its own.
  for _, case in ipairs(CASES) do
    if case.outcomes[#case.outcomes] == "closed" then
      it(string.format("case %d %s: %s; then recv raises 'closed'", case.number, case.name, case.what), function()
        settle()
        local fds0, fd_list0 = descriptors()
        local _, memfds0 = mappings()
        local complaints = {}
        local out = with_peer(case.name, function(ch, finished)
          -- A message the peer does not read (close-unread waits for it): its close with a message
          -- unread makes the kernel report ECONNRESET once, even before the records still queued.
          -- Receive only once the peer has exited, so that every case meets that.
          local sent = ipc.zeros({4}, "float32")
          pcall(ch.send, ch, sent)
          sent:release()
          finished()
          for k, outcome in ipairs(case.outcomes) do
            local what = string.format("outcome %d (%s)", k, outcome)
            if outcome == "error" or outcome == "closed" then
              local pattern = outcome == "closed" and "closed" or pattern_of(case, k)
              local _, complaint = expect_error(ch, pattern, what)
              complaints[#complaints + 1] = complaint
            else
              local ok, t = pcall(ch.recv, ch, 20)
              if not ok or t == nil then
                complaints[#complaints + 1] = what .. ": " .. (ok and "timed out" or "raised '" .. tostring(t) .. "'")
              else
                complaints[#complaints + 1] = check_tensor(t, case.expect, outcome == "readonly")
                t:release()
              end
            end
          end
          -- still closed, and still clear, when asked again, and when polled
          local _, complaint = expect_error(ch, "closed", "asked again")
          complaints[#complaints + 1] = complaint
          _, complaint = expect_error(ch, "closed", "polled", 0)
          complaints[#complaints + 1] = complaint
        end)
        assert.are.equal(0, #complaints, table.concat(complaints, "\n") .. "\nhostile.py: " .. out)
        settle()
        local fds1, fd_list1 = descriptors()
        local _, memfds1 = mappings()
        assert.are.equal(fds0, fds1, "descriptors before:\n" .. fd_list0 .. "\nafter:\n" .. fd_list1)
        assert.are.equal(memfds0, memfds1, "memfd mappings")
      end)
    end
  end

  for _, case in ipairs(CASES) do
    if case.expect:find("^skip:") then
      pending(string.format("case %d %s (%s): %s", case.number, case.name, case.what, case.expect))
    end
  end

  it("serves a fresh peer after the corpus, and polls with 0 until that one closes", function()
    local out = with_peer("exact-cover", function(ch)
      local t = ch:recv(20)
      assert.is_truthy(t)
      assert.are.equal(nil, check_tensor(t, "float64;2,3;1,2;0.0,1.25,2.5,3.75,5.0,6.25", false))
      t:release()
      local control = ch:recv(20)
      assert.is_truthy(control)
      control:release()
      local deadline = os.time() + 20
      local closed
      repeat
        local ok, got = pcall(ch.recv, ch, 0)
        assert.is_true(ok == false or got == nil, "a third message")
        closed = not ok and tostring(got):find("closed", 1, true) ~= nil
        assert.is_true(ok or closed, tostring(got))
      until closed or os.time() > deadline
      assert.is_true(closed, "recv(0) never said closed")
    end)
    assert.is_truthy(out:find("sent 1 case", 1, true), out)
  end)
end)
