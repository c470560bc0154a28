"""dlpack_lupa: DLPack tensors between Python and Lua run by lupa, no copy.

lupa (https://pypi.org/project/lupa/) embeds a Lua runtime in Python. The Lua
module `dlpack` is a C module that needs the Lua C API from the process, so
lupa's Lua must be loaded with its symbols global (`load_lupa` does that).
Python's DLPack capsules are PyCapsules and the module's are light userdata;
this file turns one into the other through `dlpack.unsafe` (integer
addresses: `unsafe.address`, `unsafe.pointer`; never strings) and ctypes' PyCapsule functions:

    import dlpack_lupa
    lupa = dlpack_lupa.load_lupa()            # the runtime of the Lua of the module on LUA_CPATH
    lua = lupa.LuaRuntime()
    bridge = dlpack_lupa.Bridge(lua)          # require "dlpack" in that runtime
    t = bridge.to_lua(numpy_array)            # a Lua tensor sharing the array's memory
    a = numpy.from_dlpack(bridge.wrap(t))     # a NumPy array sharing the tensor's memory

Both ways follow the Python DLPack protocol: a consumed PyCapsule is renamed
`used_dltensor[_versioned]`, and an unconsumed one hands its tensor back (calls
the deleter) when Python collects it. The bridge opens `dlpack.unsafe` in the
runtime: use it with trusted Lua code only.

A module is built for one Lua (5.1 to 5.5, LuaJIT) and runs only in that Lua:
`load_lupa()` picks the lupa runtime of the module found on LUA_CPATH, and
`Bridge` refuses, with ImportError, a runtime of another Lua, or a process
whose global Lua C API is another Lua's, before anything reaches the module.
"""
import ctypes
import importlib
import importlib.util
import os
import pkgutil
import re

__all__ = ["load_lupa", "module_lua", "Bridge", "LuaTensor"]

# The lupa runtime of each Lua a module can be built for (a LuaJIT build reads "Lua 5.1" too:
# pass load_lupa("luajit21") for it).
_LUPA = {"Lua 5.1": "lua51", "Lua 5.2": "lua52", "Lua 5.3": "lua53", "Lua 5.4": "lua54", "Lua 5.5": "lua55"}


def module_lua(path):
    """The Lua a build of the module is for ("Lua 5.4"), read from the file (src/runtime.c);
    None when the file does not say."""
    with open(path, "rb") as f:
        found = re.search(rb"dlpack_lua built for (Lua \d\.\d+)", f.read())
    return found.group(1).decode() if found else None


def _find_module(cpath):
    """The first dlpack.core that a Lua with this package.cpath (or LUA_CPATH) would load."""
    for template in (cpath or "").split(";"):
        path = template.replace("?", os.path.join("dlpack", "core"))
        if template and os.path.isfile(path):
            return path
    return None

# A PyCapsule keeps the pointer to its name, not a copy: every name given to PyCapsule_New or
# PyCapsule_SetName is one of these bytes objects, which live as long as the module.
_VERSIONED, _LEGACY = b"dltensor_versioned", b"dltensor"
_USED = {_VERSIONED: b"used_dltensor_versioned", _LEGACY: b"used_dltensor"}
_NAMES = {_VERSIONED: "dltensor_versioned", _LEGACY: "dltensor"}
_CAPSULE_NAMES = {"dltensor_versioned": _VERSIONED, "dltensor": _LEGACY}  # Lua's names -> the constants


def load_lupa(version=None, module=None):
    """Import `lupa.<version>` ("lua54", "lua55", ...) with its Lua C API global, so that C
    modules load. Without a version, the runtime of the Lua the module is built for: the module
    file `module`, else the first dlpack/core.so on LUA_CPATH, else lupa's default runtime.

    Works before or after lupa was imported: opening the extension again with
    RTLD_GLOBAL makes its symbols global (Linux, macOS). lupa's other runtimes are imported
    first: one imported after another Lua's symbols became global would call that Lua's
    functions for its own (Lua aborts: "PANIC: unprotected error in call to Lua API").
    """
    import lupa
    if version is None:
        module = module or _find_module(os.environ.get("LUA_CPATH"))
        version = _LUPA.get(module_lua(module)) if module else None
    if version is None:
        version = lupa.LuaRuntime.__module__.split(".")[-1]
    return _make_global("lupa." + version)[0]


def _make_global(name):
    """Import the lupa runtime `name` with its symbols global; returns the module and the
    ctypes handle of its extension."""
    import lupa
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ImportError("no module named %r (pip install lupa)" % name)
    for other in pkgutil.iter_modules(lupa.__path__, "lupa."):
        if re.fullmatch(r"lupa\.lua(jit)?\d+", other.name):
            try:
                importlib.import_module(other.name)
            except ImportError:
                pass  # a runtime this lupa could not build
    handle = ctypes.CDLL(spec.origin, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    return importlib.import_module(name), handle


# The CPython capsule functions. The destructor works on the raw PyObject* of a
# capsule being freed, so it uses prototypes taking void* (no new references).
_api = ctypes.pythonapi
_IsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_SetName = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", _api))
_RawIsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_RawGetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_Destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_New = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _Destructor)(("PyCapsule_New", _api))
_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

# Offset of `deleter` in DLManagedTensorVersioned (version, manager_ctx, deleter)
# and in DLManagedTensor (a 48-byte DLTensor, manager_ctx, deleter), 64-bit ABI.
_P = ctypes.sizeof(ctypes.c_void_p)
_DELETER_AT = {_VERSIONED: 8 + _P, _LEGACY: 6 * 8 + _P}


def _delete(managed, name):
    fn = ctypes.c_void_p.from_address(managed + _DELETER_AT[name]).value
    if fn:
        _Deleter(fn)(managed)


@_Destructor
def _capsule_destructor(capsule):
    # An unconsumed capsule keeps its original name: its tensor goes back to Lua's side.
    for name in (_VERSIONED, _LEGACY):
        if _RawIsValid(capsule, name):
            _delete(_RawGetPointer(capsule, name), name)
            return


_LUA = """
local dlpack = require "dlpack"
local unsafe = require "dlpack.unsafe"
local function adopt(address, name)
  return dlpack.from_dlpack(unsafe.adopt(unsafe.pointer(address), name))
end
-- stream: the consumer's, as __dlpack__ gives it (nil, -1, 1, 2 or a cudaStream_t handle)
local function export(t, major, minor, copy, stream)
  local opts = {copy = copy}
  if major then opts.max_version = {major, minor} end
  if stream == nil or stream == -1 or stream == 1 or stream == 2 then
    opts.stream = stream
  else -- a foreign handle, on the tensor's device
    opts.stream = unsafe.wrap_stream(stream, select(2, getmetatable(t).__dlpack_device(t)))
  end
  local ptr, name = unsafe.take(dlpack.to_dlpack(t, opts))
  return unsafe.address(ptr), name
end
local function device(t)
  return getmetatable(t).__dlpack_device(t)
end
local function is_tensor(v)
  return getmetatable(v) == getmetatable(dlpack.zeros({}))
end
return adopt, export, device, is_tensor
"""


def _text(value):
    return value.decode() if isinstance(value, bytes) else value  # a runtime made with encoding=None


def _check_runtime(runtime):
    """ImportError when `require "dlpack"` in this runtime would reach another Lua: a module built
    for another Lua, or another Lua's C API global in the process (the module's calls would go
    there). The module refuses both itself, with a Lua error; this says what to do instead."""
    lua = _text(runtime.execute("return _VERSION"))
    path = _text(runtime.execute('return package.searchpath and package.searchpath("dlpack.core", package.cpath)'))
    built = module_lua(path) if path else None
    if built and built != lua:
        raise ImportError("%s is built for %s, and this LuaRuntime (%s) is %s: use dlpack_lupa.load_lupa(%r) "
                          "or build the module for %s" % (path, built, type(runtime).__module__, lua,
                                                          _LUPA.get(built), lua))
    own = _make_global(type(runtime).__module__)[1].lua_pushstring  # a function of every Lua
    first = ctypes.CDLL(None).lua_pushstring  # the one a module's calls reach
    if ctypes.cast(own, ctypes.c_void_p).value != ctypes.cast(first, ctypes.c_void_p).value:
        raise ImportError("another Lua's C API was made global in this process before %s's: the module's calls "
                          "would reach it from this %s runtime (make one lupa runtime global per process)"
                          % (type(runtime).__module__, lua))


class Bridge:
    """Tensor exchange between Python and one lupa LuaRuntime that can `require "dlpack"`."""

    def __init__(self, runtime):
        self.runtime = runtime
        _check_runtime(runtime)
        self._adopt, self._export, self._device, self._is_tensor = runtime.execute(_LUA)

    def to_lua(self, obj):
        """A Lua tensor sharing memory with `obj`: a DLPack PyCapsule (consumed) or any
        object with `__dlpack__` (NumPy, PyTorch, CuPy, JAX arrays). Versioned capsules
        are asked for first, legacy ones from producers that do not know `max_version`."""
        if hasattr(obj, "__dlpack__"):
            try:
                obj = obj.__dlpack__(max_version=(1, 3))
            except TypeError:
                obj = obj.__dlpack__()
        for name in (_VERSIONED, _LEGACY):
            if _IsValid(obj, name):
                managed = _GetPointer(obj, name)
                _SetName(obj, _USED[name])  # consumed, before anything can fail
                return self._adopt(managed, _NAMES[name])
        raise TypeError("not an unconsumed DLPack capsule nor a __dlpack__ producer: %r" % (obj,))

    def to_capsule(self, tensor, max_version=(1, 3), copy=None, stream=None):
        """A new PyCapsule for a Lua tensor (or any Lua value with `__dlpack`), for consumers
        that take capsules (`torch.utils.dlpack.from_dlpack`). `max_version=None` or a major
        of 0 gives a legacy `dltensor`, else a `dltensor_versioned`. `stream` is the consumer's
        stream of the Python protocol (None, -1, 1, 2 or a `cudaStream_t` as an integer): for a
        CUDA tensor, that stream waits for the tensor's pending work before the capsule is
        returned."""
        major, minor = (None, None) if max_version is None else max_version
        if major == 0 or major is None:
            major, minor = 0, 8
        address, name = self._export(tensor, major, minor, copy, stream)
        return _New(address, _CAPSULE_NAMES[_text(name)], _capsule_destructor)

    def wrap(self, tensor):
        """A Python producer (`__dlpack__`, `__dlpack_device__`) for a Lua tensor:
        `numpy.from_dlpack(bridge.wrap(t))`, `torch.from_dlpack(bridge.wrap(t))`."""
        return LuaTensor(self, tensor)

    def is_tensor(self, value):
        return bool(self._is_tensor(value))


class LuaTensor:
    """The Python DLPack protocol over a Lua tensor (CPU, host-accessible and CUDA memory; a CUDA
    tensor's export makes the consumer's `stream` wait for its pending work)."""

    def __init__(self, bridge, tensor):
        self.bridge, self.tensor = bridge, tensor

    def __dlpack_device__(self):
        return tuple(self.bridge._device(self.tensor))

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if stream is not None and stream != -1 and self.__dlpack_device__()[0] == 1:
            raise BufferError("a CPU tensor takes stream=None")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError("dlpack_lupa: cannot move a Lua tensor to device %r" % (dl_device,))
        return self.bridge.to_capsule(self.tensor, max_version=max_version, copy=copy, stream=stream)
