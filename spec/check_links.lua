-- Checks the links of README.md and docs/*.md: every relative link names a file
-- inside the repository, and every #anchor a heading of its file (GitHub's
-- slugs). Prints TAP, one line per file. Run from the repository root:
--   lua5.4 spec/check_links.lua README.md docs/*.md
local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function slug(heading)
  local s = heading:lower():gsub("`", "")
  s = s:gsub("[^%w%s%-_\128-\255]", ""):gsub("%s", "-")
  return s
end

local function anchors(text)
  local set, seen = {}, {}
  local in_code = false
  for line in text:gmatch("[^\n]*") do
    if line:match("^```") then in_code = not in_code end
    local heading = not in_code and line:match("^#+%s+(.-)%s*$")
    if heading then
      local s = slug(heading)
      local n = seen[s]
      set[n and (s .. "-" .. n) or s] = true
      seen[s] = (n or 0) + 1
    end
  end
  return set
end

local function dirname(path) return path:match("^(.*)/") or "." end

-- Resolves `rel` against `dir`; nil when it leaves the repository.
local function resolve(dir, rel)
  local parts = {}
  for p in (dir .. "/" .. rel):gmatch("[^/]+") do
    if p == ".." then
      if #parts == 0 then return nil end
      parts[#parts] = nil
    elseif p ~= "." then
      parts[#parts + 1] = p
    end
  end
  return table.concat(parts, "/")
end

local failed, n = 0, 0
for _, file in ipairs(arg) do
  local text = assert(read(file), file)
  local problems, count = {}, 0
  local stripped = text:gsub("```.-```", "")
  for target in stripped:gmatch("%]%(([^)%s]+)%)") do
    count = count + 1
    if not target:match("^%a[%w+.-]*:") then -- not http:, https:, mailto:
      local path, anchor = target:match("^([^#]*)#?(.*)$")
      local dest = path == "" and file or resolve(dirname(file), path)
      local body = dest and read(dest)
      if not dest then
        problems[#problems + 1] = target .. " points outside the repository"
      elseif not body and not os.rename(dest, dest) then
        problems[#problems + 1] = target .. " does not exist"
      elseif anchor ~= "" and body and not anchors(body)[anchor] then
        problems[#problems + 1] = target .. ": no heading #" .. anchor .. " in " .. dest
      end
    end
  end
  n = n + 1
  if #problems == 0 then
    print(("ok %d - links of %s resolve inside the repository (%d links)"):format(n, file, count))
  else
    failed = failed + 1
    print(("not ok %d - links of %s resolve inside the repository"):format(n, file))
    for _, p in ipairs(problems) do print("# " .. p) end
  end
end
print("1.." .. n)
os.exit(failed == 0 and 0 or 1)
