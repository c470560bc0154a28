-- luacheck configuration: `luacheck lua spec examples bench` (make lint).
std = "lua54"
max_line_length = 120
exclude_files = { "build/**", ".whl/**", "spec/.tmp/**" }

files["spec/**/*_spec.lua"] = { std = "+busted" }
files["spec/helper.lua"] = { std = "+busted" }
files[".busted"] = { std = "lua54" }
