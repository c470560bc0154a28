-- Loaded by busted (see .busted) in the same Lua state as the specs, before any
-- spec file runs. DLPACK_SPEC_GC selects the collector mode the specs run under,
-- so that lifetime bugs show up under both of Lua 5.4's collectors:
--   incremental   collectgarbage("incremental", 1, 1000): a tiny pause and a
--                 large step multiplier, so the collector runs almost all the time
--   generational  collectgarbage("generational", 1, 100): a minor collection
--                 after every 1% of growth (lua5.4 already starts in generational
--                 mode with the default 20%, which is what the plain run uses)
-- Lua 5.5 sets the same parameters with collectgarbage("param", ...).
local mode = os.getenv("DLPACK_SPEC_GC")
local LUA55 = _VERSION == "Lua 5.5"
if mode == "incremental" then
  collectgarbage("incremental", 1, 1000)
  if LUA55 then collectgarbage("param", "pause", 1); collectgarbage("param", "stepmul", 1000) end
elseif mode == "generational" then
  collectgarbage("generational", 1, 100)
  if LUA55 then collectgarbage("param", "minormul", 1) end
elseif mode and mode ~= "" then
  error("DLPACK_SPEC_GC must be 'incremental' or 'generational', not '" .. mode .. "'")
end

-- Lua 5.1, 5.2 and LuaJIT: the 5.3 standard library (string.pack, table.unpack, math.type,
-- math.tointeger, ...) from lua-compat-5.3 (Debian lua-compat53), for the specs only. Its
-- math.maxinteger there is 2^53, the largest integer a double holds exactly.
if not math.type then require "compat53" end
-- Where compat53's C half cannot load (the Windows LuaJIT of stage 47), string.pack and unpack
-- come from the FFI.
if not string.pack and rawget(_G, "jit") then
  local p = require "pack_ffi"
  string.pack, string.unpack = p.pack, p.unpack -- luacheck: ignore 122
end
