#!/usr/bin/env bash
# The shared conformance suite (../shared/conformance/run.lua, beside the repo)
# as TAP: one line per case, named from the suite's `case("name", ...)` calls.
source "$(dirname "$0")/lib.sh"
SUITE=${DLPACK_CONFORMANCE:-$(dirname "$ROOT")/shared/conformance/run.lua}
[[ -f $SUITE ]] || skip_all "conformance suite not found at $SUITE (CI puts shared/ beside the repo)"
build_or_exit all

out=build/stages/conformance.out
"$LUA" "$SUITE" >"$out" 2>&1 </dev/null
rc=$?

"$LUA" - "$SUITE" "$out" "$rc" <<'LUA'
local suite, outfile, rc = arg[1], arg[2], tonumber(arg[3])

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
  print(string.format("%s %d - %s", ok and "ok" or "not ok", n, desc))
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
LUA
