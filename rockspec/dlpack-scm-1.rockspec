-- Build and install from a checkout, offline:
--   luarocks --lua-version 5.4 make rockspec/dlpack-scm-1.rockspec   (or 5.1, 5.2, 5.3)
-- A source rock of the working tree, installable offline anywhere (README.md, "Install"):
--   make rock     # build/dist/dlpack-scm-1.src.rock
--   luarocks --lua-version 5.4 install build/dist/dlpack-scm-1.src.rock
-- The build goes through the project's Makefile (`make install`), so the source
-- list, compiler flags and optional CUDA headers are the same as `make all`.
rockspec_format = "3.0"
package = "dlpack"
version = "scm-1"
source = {
  -- `make rock` packs the working tree instead (its copy of this file points at a tarball).
  url = "git+https://github.com/dlpack-lua/dlpack-lua.git",
}
description = {
  summary = "DLPack tensors for Lua 5.1 to 5.4 and LuaJIT: zero-copy exchange with NumPy, PyTorch and C",
  detailed = [[
A C module for Lua 5.1 to 5.4 and LuaJIT that creates, views and copies strided tensors and
exchanges them with other libraries through the DLPack ABI (versioned and legacy
managed tensors, capsules, the __dlpack__ protocol), with explicit lifetime
control and a C API for host programs.
]],
  homepage = "https://github.com/dlpack-lua/dlpack-lua",
  license = "MIT",
  labels = { "dlpack", "tensor", "ffi", "interop" },
}
dependencies = {
  "lua >= 5.1, < 5.6",
}
build = {
  type = "make",
  -- `make install` builds exactly what it installs: dlpack/core.so and the static library.
  build_pass = false,
  variables = {
    CC = "$(CC)",
    CFLAGS = "$(CFLAGS)",
    -- The project's own warnings without -Werror: a newer compiler's new warning
    -- must not stop a user's install.
    WARNINGS = "-Wall -Wextra",
    LUA = "$(LUA)", -- the interpreter's name picks the pkg-config name and the compat headers
    LUA_INC = "-I$(LUA_INCDIR)",
    BUILD = "build/rock$(LUA_INCDIR)", -- one build folder per Lua (build/rock/usr/include/lua5.3)
    INST_LIBDIR = "$(LIBDIR)",
    INST_LUADIR = "$(LUADIR)",
    INST_INCDIR = "$(PREFIX)/include",
    INST_ARCDIR = "$(PREFIX)/static",
  },
  platforms = {
    -- MinGW-w64 (luarocks configured for it: CC=gcc, MSYS2's make; README.md, "Windows"):
    -- a DLL names the Lua library it links against. MSVC's cl cannot build the module (its
    -- loops use GCC's vector extensions): docs/windows.md.
    windows = {
      variables = {
        LUA_LIB = "$(LUA_LIBDIR)/$(LUALIB)",
      },
    },
  },
}
