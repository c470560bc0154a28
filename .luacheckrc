-- luacheck configuration: `luacheck lua spec examples bench` (make lint).
std = "lua54"
max_line_length = 120
exclude_files = { "build/**", ".whl/**", "spec/.tmp/**" }

files["spec/**/*_spec.lua"] = { std = "+busted" }
files["spec/helper.lua"] = { std = "+busted" }
-- The fuzzer plays a sandbox, which removes package.loadlib (and puts it back).
files["spec/fuzz/edges.lua"] = { read_globals = { package = { fields = { loadlib = { read_only = false } },
  other_fields = true } } }
files[".busted"] = { std = "lua54" }

-- The LÖVE engine test (spec/love, stage 85) runs under LÖVE's LuaJIT.
files["spec/love/**/*.lua"] = { std = "luajit", globals = { "love" } }
-- LuaJIT-only modules and the Lua 5.1 fallbacks read these where they exist.
files["lua/dlpack/ffi.lua"] = { std = "luajit" }
