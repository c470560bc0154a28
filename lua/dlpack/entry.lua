--- Opens one of the entry points of the dlpack.core library that `require` never reaches
-- (dlpack_lua_open_unsafe, dlpack_lua_open_ipc). They are not named luaopen_*, so a script that
-- can only call `require` cannot open them whatever it does to package.*; this file reaches them
-- through package.loadlib, which a sandbox removes (README, "Safety"). They live in the same
-- library as dlpack.core, so that all share one capsule table and one tensor metatable.
require "dlpack"

-- package.searchpath is 5.2+ (LuaJIT has it); Lua 5.1 gets the same search here.
local function searchpath(name, path)
  if package.searchpath then return package.searchpath(name, path) end
  local file = name:gsub("%.", "/")
  for template in path:gmatch("[^;]+") do
    local candidate = template:gsub("%?", file)
    local f = io.open(candidate, "rb")
    if f then f:close(); return candidate end
  end
end

return function(module, entry)
  if type(package.loadlib) ~= "function" then
    error(module .. " needs package.loadlib, which this Lua does not offer (a sandbox leaves " .. module
          .. " out; a host that links the module opens it with " .. entry .. ")", 3)
  end
  local path = assert(searchpath("dlpack.core", package.cpath))
  local open = assert(package.loadlib(path, entry))
  return open()
end
