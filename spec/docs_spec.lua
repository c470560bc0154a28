-- Every ```lua block of README.md and docs/*.md runs as written, each as its own program in a
-- fresh folder, under Lua 5.4 with this checkout's module (LuaJIT's build for the dlpack.ffi
-- blocks). Before a block, an HTML comment says otherwise:
--   <!-- fragment: why -->             only compiled: it needs what a test cannot give (LÖVE, a file)
--   <!-- peer: runs beside the block before it -->  the second process of a two-process example:
--                                      both run at once and both must succeed
-- The abstract socket names ("@name") get a suffix of this run, so that runs at once do not meet.
local docs = { "README.md" }
for name in io.popen("ls docs/*.md"):lines() do docs[#docs + 1] = name end

local function blocks_of(path)
  local list, lines = {}, {}
  for line in io.lines(path) do lines[#lines + 1] = line end
  local i = 1
  while i <= #lines do
    if lines[i] == "```lua" then
      local j, mark = i + 1, nil
      local k = i - 1
      while k > 0 and lines[k] == "" do k = k - 1 end
      if k > 0 then mark = lines[k]:match("^<!%-%- (%a+):") end
      while lines[j] ~= "```" do j = j + 1 end
      list[#list + 1] = { where = path .. ":" .. i, mark = mark, code = table.concat(lines, "\n", i + 1, j - 1) }
      i = j
    end
    i = i + 1
  end
  return list
end

local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

local function has(program) return os.execute("command -v " .. program .. " >/dev/null 2>&1") == true end

local repo = package.config:sub(1, 1) == "/" and io.popen("pwd"):read("l")
local suffix = tostring(os.time()) .. "-" .. tostring(math.random(1, 1e9))

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

local function read(path)
  local f = io.open(path)
  if not f then return "" end
  local s = f:read("a")
  f:close()
  return s
end

-- Runs the block (and its peer) in a fresh folder; returns true or false and what they printed.
local function run(block, peer)
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir " .. dir))
  local ffi = block.code:find('require "dlpack.ffi"', 1, true)
  local lua, cpath = "lua5.4", repo .. "/build/?.so;;"
  if ffi then lua, cpath = "luajit", repo .. "/build/luajit/?.so;;" end
  local env = "LUA_PATH='" .. repo .. "/lua/?.lua;" .. repo .. "/lua/?/init.lua;;' LUA_CPATH='" .. cpath .. "' "
  local function program(b, name)
    write(dir .. "/" .. name, (b.code:gsub('"@([%w%-]+)"', '"@%1-' .. suffix .. '"')))
    return "(cd " .. dir .. " && " .. env .. "timeout 60 " .. lua .. " " .. name .. " > " .. name
      .. ".out 2>&1; echo $? > " .. name .. ".rc)"
  end
  local command = program(block, "a.lua")
  if peer then command = command .. " & " .. program(peer, "b.lua") .. "; wait" end
  os.execute(command)
  local ok = read(dir .. "/a.lua.rc") == "0\n" and (not peer or read(dir .. "/b.lua.rc") == "0\n")
  local out = read(dir .. "/a.lua.out") .. (peer and read(dir .. "/b.lua.out") or "")
  os.execute("rm -r " .. dir)
  return ok, out
end

describe("the code blocks of the docs", function()
  if _VERSION ~= "Lua 5.4" or rawget(_G, "jit") or package.config:sub(1, 1) == "\\" then
    pending("run under Lua 5.4 with a POSIX shell (stage 10): this is " .. _VERSION)
    return
  end
  for _, path in ipairs(docs) do
    local list = blocks_of(path)
    for n, block in ipairs(list) do
      local peer = list[n + 1] and list[n + 1].mark == "peer" and list[n + 1]
      if block.mark == "fragment" then
        it(block.where .. " compiles (a fragment)", function()
          assert(load(block.code, "=" .. block.where))
        end)
      elseif block.mark ~= "peer" then
        local ffi = block.code:find('require "dlpack.ffi"', 1, true)
        if ffi and not (has("luajit") and exists("build/luajit/dlpack/core.so")) then
          pending(block.where .. " needs LuaJIT and its build (make LUA=luajit)")
        else
          local title = block.where .. (peer and " runs with its peer " .. peer.where or " runs")
          it(title .. (ffi and " under LuaJIT" or ""), function()
            local ok, out = run(block, peer)
            assert(ok, out)
          end)
        end
      end
    end
  end
end)
