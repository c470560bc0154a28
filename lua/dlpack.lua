--- dlpack: exchange tensors with any DLPack producer or consumer without copying.
-- The whole contract is implemented in C, in `dlpack.core`, so that a host that
-- embeds the static library (luaL_requiref(L, "dlpack", luaopen_dlpack, 0)) gets
-- exactly what scripts get from `require "dlpack"`. This file is the entry point
-- that `require "dlpack"` finds on package.path when the module is installed.
local dlpack = require "dlpack.core"
-- The module has one name: Lua names a function in an error message by where it finds it in
-- package.loaded, and would otherwise say 'dlpack.core.zeros' or 'dlpack.zeros' at random.
package.loaded["dlpack.core"] = nil
return dlpack
