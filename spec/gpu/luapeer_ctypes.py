"""spec/gpu/luapeer_ctypes.py: the `luapeer` module of spec/peers/peers.c for a plain python3.

peers.c embeds CPython and offers `luapeer` as a built-in module; a GPU machine's
python3 (the one with PyTorch and CuPy) may not be embeddable, so this module loads
build/gpu/libluapeer.so (spec/gpu/luapeer.c: Lua + the static dlpack library, no
Python headers) with ctypes and offers the same functions:

    open(), close(), run(code, *args), export(expr, versioned=False, copy=None,
    stream=None, dl_device=None), device(expr), capsule_name(cap), lua_version(),
    flags(cap) (the flags of an unconsumed versioned capsule; peers.c lacks it)

`run` passes None, bool, int, float, str and DLPack capsules (consumed: renamed
"used_*" first, then owned by Lua) and returns None, one value or a tuple, with
Lua tables as lists or dicts and light userdata as ints (as peers.c does).
DLPACK_LUAPEER_LIB overrides the library's path.
"""
import ctypes
import json
import os

_here = os.path.dirname(os.path.abspath(__file__))
_root = os.path.dirname(os.path.dirname(_here))
_path = os.environ.get("DLPACK_LUAPEER_LIB") or os.path.join(
    os.environ.get("DLPACK_BUILD", os.path.join(_root, "build")), "gpu", "libluapeer.so")
# RTLD_GLOBAL: C modules that Lua requires (gpu_kernels) need Lua's symbols.
_lib = ctypes.CDLL(_path, mode=ctypes.RTLD_GLOBAL)

_c = ctypes.c_void_p
_lib.lp_result.restype = ctypes.c_char_p
_lib.lp_lua_version.restype = ctypes.c_char_p
_lib.lp_capsule_name.restype = _c  # static C strings: capsule names must outlive the capsules
_lib.lp_capsule_name.argtypes = [ctypes.c_int, ctypes.c_int]
_lib.lp_arg_int.argtypes = [ctypes.c_longlong]
_lib.lp_arg_num.argtypes = [ctypes.c_double]
_lib.lp_arg_bool.argtypes = [ctypes.c_int]
_lib.lp_arg_str.argtypes = [ctypes.c_char_p]
_lib.lp_arg_managed.argtypes = [_c, ctypes.c_int]
_lib.lp_run.argtypes = [ctypes.c_char_p]
_lib.lp_export.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_longlong,
                           ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_c),
                           ctypes.POINTER(ctypes.c_int)]
_lib.lp_device.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
_lib.lp_flags.argtypes = [_c]
_lib.lp_flags.restype = ctypes.c_ulonglong

_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = _c
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, _c]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, _c]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, _c]
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [_c, _c, _c]
_CapsuleType = type(_api.PyCapsule_New(ctypes.c_void_p(1).value, None, None))
_NAMES = {(v, u): _lib.lp_capsule_name(v, u) for v in (0, 1) for u in (0, 1)}
_DESTRUCTOR = ctypes.cast(_lib.lp_capsule_destructor, _c).value


class LuaError(RuntimeError):
    pass


def _raise():
    msg = _lib.lp_result().decode("utf-8", "replace")
    raise (BufferError if "dlpack.BufferError" in msg else LuaError)(msg)


def open():  # noqa: A001 (the name peers.c uses)
    if _lib.lp_open() != 0:
        _raise()


def close():
    _lib.lp_close()


def lua_version():
    return _lib.lp_lua_version().decode()


def capsule_name(cap):
    name = _api.PyCapsule_GetName(cap)
    return None if name is None else name.decode()


def _consume(cap):
    """Take the managed pointer of an unconsumed DLPack capsule and rename it used_*."""
    name = capsule_name(cap)
    if name not in ("dltensor", "dltensor_versioned"):
        raise LuaError("capsule named '%s' is not an unconsumed DLPack capsule" % name)
    versioned = int(name == "dltensor_versioned")
    ptr = _api.PyCapsule_GetPointer(cap, _NAMES[(versioned, 0)])
    _api.PyCapsule_SetName(cap, _NAMES[(versioned, 1)])
    return ptr, versioned


def run(code, *args):
    _lib.lp_args_reset()
    try:
        for a in args:
            if a is None:
                rc = _lib.lp_arg_nil()
            elif isinstance(a, bool):
                rc = _lib.lp_arg_bool(int(a))
            elif isinstance(a, int):
                rc = _lib.lp_arg_int(a)
            elif isinstance(a, float):
                rc = _lib.lp_arg_num(a)
            elif isinstance(a, str):
                rc = _lib.lp_arg_str(a.encode())
            elif isinstance(a, _CapsuleType):
                ptr, versioned = _consume(a)
                rc = _lib.lp_arg_managed(ptr, versioned)
            else:
                raise LuaError("cannot pass a Python %s to Lua" % type(a).__name__)
            if rc != 0:
                raise LuaError("too many arguments")
    except BaseException:
        _lib.lp_args_reset()  # deletes the capsules already handed over
        raise
    if _lib.lp_run(code.encode()) != 0:
        _raise()
    results = json.loads(_lib.lp_result().decode("utf-8", "replace"))
    if not results:
        return None
    return results[0] if len(results) == 1 else tuple(results)


def export(expr, versioned=False, copy=None, stream=None, dl_device=None):
    managed, out_versioned = _c(), ctypes.c_int()
    rc = _lib.lp_export(expr.encode(), int(bool(versioned)), -1 if copy is None else int(bool(copy)),
                        int(stream is not None), 0 if stream is None else int(stream),
                        int(dl_device is not None), *(dl_device or (0, 0)),
                        ctypes.byref(managed), ctypes.byref(out_versioned))
    if rc != 0:
        _raise()
    return _api.PyCapsule_New(managed.value, _NAMES[(out_versioned.value, 0)], _DESTRUCTOR)


def device(expr):
    out = (ctypes.c_int * 2)()
    if _lib.lp_device(expr.encode(), out) != 0:
        _raise()
    return out[0], out[1]


def flags(cap):
    """DLManagedTensorVersioned.flags of an unconsumed versioned capsule."""
    ptr = _api.PyCapsule_GetPointer(cap, _NAMES[(1, 0)])
    return _lib.lp_flags(ptr)
