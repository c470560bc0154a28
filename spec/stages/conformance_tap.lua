-- The conformance suite's output as TAP (stages 20 and 47):
--   lua spec/stages/conformance_tap.lua SUITE OUTPUT STATUS [PREFIX]
-- SUITE is the suite's source (case names in declaration order), OUTPUT what it printed, STATUS
-- its exit status; PREFIX, when given, starts every test name (the runtime it ran under).
local suite, outfile, rc, prefix = arg[1], arg[2], tonumber(arg[3]), arg[4] and arg[4] .. ": " or ""

-- Case names in the order the suite declares them.
local names, known = {}, {}
for line in io.lines(suite) do
  local name = line:match('^%s*case%("([^"]*)"') or line:match("^%s*case%('([^']*)'")
  if name then names[#names + 1] = name; known[name] = true end
end

-- Its output: "FAIL name" followed by indented message lines, then "N passed, M failed".
local failures, order, current, passed, failed, other = {}, {}, nil, nil, nil, {}
for line in io.lines(outfile) do
  local name = line:match("^FAIL (.*)$")
  local p, f = line:match("^(%d+) passed, (%d+) failed$")
  if name then
    current = {}; failures[name] = current; order[#order + 1] = name
  elseif p then
    passed, failed, current = tonumber(p), tonumber(f), nil
  elseif current and line:match("^  ") then
    current[#current + 1] = line
  else
    current = nil; other[#other + 1] = line
  end
end

local n = 0
local function emit(ok, desc, comments)
  n = n + 1
  print(string.format("%s %d - %s%s", ok and "ok" or "not ok", n, prefix, desc))
  for _, c in ipairs(comments or {}) do print("# " .. c) end
end

if not passed then
  -- The suite died before its summary line.
  local lines = {}
  for line in io.lines(outfile) do lines[#lines + 1] = line end
  emit(false, "conformance suite ran to its summary line (exit status " .. rc .. ")", lines)
else
  local by_name = #names == passed + failed
  for _, name in ipairs(order) do by_name = by_name and known[name] end
  if by_name then
    for _, name in ipairs(names) do
      if failures[name] then emit(false, name, failures[name]) else emit(true, name) end
    end
  else
    -- Names could not be matched with the source: counts only.
    for i = 1, passed do emit(true, "conformance case " .. i .. " of " .. passed .. " passed") end
    for _, name in ipairs(order) do emit(false, name, failures[name]) end
    for _ = #order + 1, failed do emit(false, "conformance case failed (unnamed)") end
  end
  if rc ~= 0 and failed == 0 then emit(false, "conformance suite exit status " .. rc, other) end
  if rc == 0 and failed > 0 then emit(false, "conformance suite exited 0 despite failures") end
end
