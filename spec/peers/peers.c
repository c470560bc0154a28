/*
 * spec/peers/peers.c: real DLPack peers in one process.
 *
 * Embeds CPython (Py_Initialize) and Lua (the static library) and runs
 * spec/peers/peers.py, which exchanges tensors between Lua and PyTorch /
 * NumPy both ways and prints TAP. This file is the C glue: a built-in Python
 * module `luapeer` that runs Lua code and turns PyCapsules into Lua tensors
 * and back, exactly as a C extension bridging the two worlds would.
 *
 *   make build/peers && ./build/peers
 *
 * Environment: DLPACK_PEERS_PYTHONPATH (default build/pydeps) is put first on
 * sys.path by peers.py; DLPACK_PEERS_SCRIPT overrides the script's path;
 * DLPACK_PEERS_GC picks the Lua collector (see open_state).
 *
 * Threads: everything runs on the main thread, which holds the GIL all along,
 * so the deleters of Python producers (NumPy's takes the GIL, PyTorch's does
 * not need it) may be called by Lua at any release, GC step or lua_close.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "dlpack_lua.h"

/* Capsule names (DLPack Python spec): static, renamed on consumption. */
static const char LEGACY[] = "dltensor", USED_LEGACY[] = "used_dltensor";
static const char VERSIONED[] = "dltensor_versioned", USED_VERSIONED[] = "used_dltensor_versioned";

/* The one Lua state of this test program (closed and reopened by the tests). */
static lua_State *L;
static PyObject *LuaError;

/* ---- Lua state ------------------------------------------------------------ */

static int traceback(lua_State *S) {
  const char *msg = lua_tostring(S, 1);
  luaL_traceback(S, S, msg ? msg : luaL_tolstring(S, 1, NULL), 1);
  return 1;
}

/* DLPACK_PEERS_GC=incremental (near-continuous collection) or generational
 * runs the same tests under another collector: cheap hunting for lifetime bugs. */
static void open_state(void) {
  const char *gc = getenv("DLPACK_PEERS_GC");
  L = luaL_newstate();
  luaL_openlibs(L);
  luaL_requiref(L, "dlpack", luaopen_dlpack, 1);
  lua_pop(L, 1);
  if (gc != NULL && strcmp(gc, "incremental") == 0) lua_gc(L, LUA_GCINC, 1, 1000, 0);
  else if (gc != NULL && strcmp(gc, "generational") == 0) lua_gc(L, LUA_GCGEN, 0, 0);
}

/* The Lua error on top of the stack becomes a Python exception: BufferError when
 * it carries the module's buffer-error marker, LuaError otherwise. */
static PyObject *raise_lua_error(int base) {
  const char *msg = lua_tostring(L, -1);
  if (msg == NULL) msg = "(error object is not a string)";
  PyErr_SetString(strstr(msg, DLPACK_LUA_BUFFER_ERROR) ? PyExc_BufferError : LuaError, msg);
  lua_settop(L, base);
  return NULL;
}

static int need_state(void) {
  if (L != NULL) return 1;
  PyErr_SetString(LuaError, "the Lua state is closed (call luapeer.open())");
  return 0;
}

/* ---- Python -> Lua -------------------------------------------------------- */

/* Consume a DLPack PyCapsule and push it as a tensor. The capsule is renamed
 * "used_*" before anything that can fail (DLPACK.md 2.4): from then on the push,
 * which takes ownership, is responsible for the deleter. */
static void push_capsule(lua_State *S, PyObject *cap) {
  const char *name = PyCapsule_GetName(cap);
  PyErr_Clear();
  if (name != NULL && strcmp(name, VERSIONED) == 0) {
    DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, VERSIONED);
    if (m == NULL || PyCapsule_SetName(cap, USED_VERSIONED) != 0) {
      PyErr_Clear();
      luaL_error(S, "cannot take the pointer of a dltensor_versioned capsule");
    }
    dlpack_lua_push_versioned(S, m);
  } else if (name != NULL && strcmp(name, LEGACY) == 0) {
    DLManagedTensor *m = PyCapsule_GetPointer(cap, LEGACY);
    if (m == NULL || PyCapsule_SetName(cap, USED_LEGACY) != 0) {
      PyErr_Clear();
      luaL_error(S, "cannot take the pointer of a dltensor capsule");
    }
    dlpack_lua_push_legacy(S, m);
  } else {
    luaL_error(S, "capsule named '%s' is not an unconsumed DLPack capsule", name ? name : "(null)");
  }
}

/* Push a Python value: None, bool, int, float, str, list/tuple (as a sequence
 * table) or a DLPack capsule (consumed). Runs in protected mode. */
static void push_py(lua_State *S, PyObject *o, int depth) {
  luaL_checkstack(S, 3, "nested too deep");
  if (depth > 32) luaL_error(S, "Python value nested too deep");
  if (o == Py_None) {
    lua_pushnil(S);
  } else if (PyBool_Check(o)) {
    lua_pushboolean(S, o == Py_True);
  } else if (PyLong_Check(o)) {
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      luaL_error(S, "Python int does not fit a Lua integer");
    }
    lua_pushinteger(S, (lua_Integer)v);
  } else if (PyFloat_Check(o)) {
    lua_pushnumber(S, PyFloat_AS_DOUBLE(o));
  } else if (PyUnicode_Check(o)) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(o, &n);
    if (s == NULL) {
      PyErr_Clear();
      luaL_error(S, "cannot encode a Python str");
    }
    lua_pushlstring(S, s, (size_t)n);
  } else if (PyList_Check(o) || PyTuple_Check(o)) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    lua_createtable(S, (int)n, 0);
    for (Py_ssize_t i = 0; i < n; i++) {
      push_py(S, PySequence_Fast_GET_ITEM(o, i), depth + 1);
      lua_rawseti(S, -2, (lua_Integer)i + 1);
    }
  } else if (PyCapsule_CheckExact(o)) {
    push_capsule(S, o);
  } else {
    luaL_error(S, "cannot pass a Python %s to Lua", Py_TYPE(o)->tp_name);
  }
}

typedef struct {
  PyObject *args; /* a tuple */
  Py_ssize_t first;
} push_ctx;

static int push_args(lua_State *S) {
  push_ctx *c = lua_touserdata(S, 1);
  Py_ssize_t n = PyTuple_GET_SIZE(c->args) - c->first;
  lua_settop(S, 0);
  luaL_checkstack(S, (int)n + 3, "too many arguments");
  for (Py_ssize_t i = 0; i < n; i++) push_py(S, PyTuple_GET_ITEM(c->args, c->first + i), 0);
  return (int)n;
}

/* ---- Lua -> Python -------------------------------------------------------- */

static PyObject *to_py(int idx, int depth) {
  idx = lua_absindex(L, idx);
  if (depth > 32) return PyErr_Format(PyExc_ValueError, "Lua table nested too deep");
  switch (lua_type(L, idx)) {
  case LUA_TNIL: Py_RETURN_NONE;
  case LUA_TBOOLEAN: return PyBool_FromLong(lua_toboolean(L, idx));
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) return PyLong_FromLongLong((long long)lua_tointeger(L, idx));
    return PyFloat_FromDouble((double)lua_tonumber(L, idx));
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, "replace");
  }
  case LUA_TLIGHTUSERDATA: return PyLong_FromVoidPtr(lua_touserdata(L, idx));
  case LUA_TTABLE: {
    /* A sequence becomes a list, anything else a dict. */
    lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
    lua_pushnil(L);
    int empty = lua_next(L, idx) == 0;
    if (!empty) lua_pop(L, 2);
    luaL_checkstack(L, 4, "to_py");
    if (n > 0 || empty) {
      PyObject *list = PyList_New((Py_ssize_t)n);
      for (lua_Integer i = 1; list != NULL && i <= n; i++) {
        lua_rawgeti(L, idx, i);
        PyObject *v = to_py(-1, depth + 1);
        lua_pop(L, 1);
        if (v == NULL) Py_CLEAR(list);
        else PyList_SET_ITEM(list, (Py_ssize_t)i - 1, v);
      }
      return list;
    }
    PyObject *dict = PyDict_New();
    lua_pushnil(L);
    while (dict != NULL && lua_next(L, idx) != 0) {
      PyObject *k = to_py(-2, depth + 1), *v = k ? to_py(-1, depth + 1) : NULL;
      if (v == NULL || PyDict_SetItem(dict, k, v) != 0) Py_CLEAR(dict);
      Py_XDECREF(k);
      Py_XDECREF(v);
      lua_pop(L, dict != NULL ? 1 : 2);
    }
    return dict;
  }
  default:
    return PyErr_Format(PyExc_TypeError, "cannot return a Lua %s to Python (keep tensors in Lua globals)",
                        luaL_typename(L, idx));
  }
}

/* ---- luapeer.run(code, *args) -> results ----------------------------------- */

/* Load `code`, push args (capsules are consumed), call; on success the results
 * are on the stack above base + 1 (the message handler). */
static int call_lua(const char *code, Py_ssize_t len, PyObject *args, Py_ssize_t first, int base) {
  lua_pushcfunction(L, traceback);
  if (luaL_loadbuffer(L, code, (size_t)len, "=luapeer") != LUA_OK) return 0;
  push_ctx c = {args, first};
  lua_pushcfunction(L, push_args);
  lua_pushlightuserdata(L, &c);
  if (lua_pcall(L, 1, LUA_MULTRET, base + 1) != LUA_OK) return 0;
  int nargs = lua_gettop(L) - (base + 2);
  return lua_pcall(L, nargs, LUA_MULTRET, base + 1) == LUA_OK;
}

static PyObject *peer_run(PyObject *self, PyObject *args) {
  (void)self;
  Py_ssize_t len;
  const char *code;
  if (!need_state()) return NULL;
  if (PyTuple_GET_SIZE(args) < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(args, 0)))
    return PyErr_Format(PyExc_TypeError, "run(code: str, *args)");
  if ((code = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(args, 0), &len)) == NULL) return NULL;
  int base = lua_gettop(L);
  if (!call_lua(code, len, args, 1, base)) return raise_lua_error(base);
  int n = lua_gettop(L) - (base + 1);
  PyObject *result = NULL;
  if (n == 0) {
    result = Py_NewRef(Py_None);
  } else if (n == 1) {
    result = to_py(-1, 0);
  } else if ((result = PyTuple_New(n)) != NULL) {
    for (int i = 0; i < n; i++) {
      PyObject *v = to_py(base + 2 + i, 0);
      if (v == NULL) {
        Py_CLEAR(result);
        break;
      }
      PyTuple_SET_ITEM(result, i, v);
    }
  }
  lua_settop(L, base);
  return result;
}

/* ---- Lua -> Python: export a tensor as a PyCapsule ------------------------- */

/* The producer's capsule destructor: delete only while still unconsumed. */
static void capsule_destructor(PyObject *cap) {
  if (PyCapsule_IsValid(cap, VERSIONED)) {
    DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, VERSIONED);
    if (m->deleter) m->deleter(m);
  } else if (PyCapsule_IsValid(cap, LEGACY)) {
    DLManagedTensor *m = PyCapsule_GetPointer(cap, LEGACY);
    if (m->deleter) m->deleter(m);
  }
}

typedef struct {
  void *managed;
  int versioned;
} export_out;

/* Pushes the consumer's stream at index `stream` as the safe API takes it: nil, -1, 1 and 2
 * as they are; a larger value is a raw handle from Python, which only dlpack.unsafe wraps
 * (on the device of the tensor at index `tensor`), as a host does. */
static void push_stream(lua_State *S, int tensor, int stream) {
  if (!lua_isinteger(S, stream) || lua_tointeger(S, stream) <= 2) {
    lua_pushvalue(S, stream);
    return;
  }
  luaL_loadstring(S, "local t, h = ...\n"
                     "local id = tonumber(t.device:match(':(%d+)$')) or 0\n"
                     "return require('dlpack.unsafe').wrap_stream(h, id)");
  lua_pushvalue(S, tensor);
  lua_pushvalue(S, stream);
  lua_call(S, 2, 1);
}

/* In protected mode: 1 tensor, 2 versioned, 3 copy (nil or boolean), 4 export_out,
 * 5 stream (nil or integer), 6 dl_device (nil or {type, id}). Without copy, stream
 * and dl_device it uses the C API (dlpack_lua_export_*); otherwise it goes through
 * dlpack.to_dlpack and dlpack_lua_capsule_consume, as a C module would. */
static int export_tensor(lua_State *S) {
  int versioned = lua_toboolean(S, 2);
  export_out *out = lua_touserdata(S, 4);
  if (lua_isnil(S, 3) && lua_isnil(S, 5) && lua_isnil(S, 6)) {
    out->versioned = versioned;
    out->managed = versioned ? (void *)dlpack_lua_export_versioned(S, 1) : (void *)dlpack_lua_export_legacy(S, 1);
    return 0;
  }
  lua_getglobal(S, "dlpack");
  lua_getfield(S, -1, "to_dlpack");
  lua_pushvalue(S, 1);
  lua_createtable(S, 0, 4);
  if (!lua_isnil(S, 3)) {
    lua_pushboolean(S, lua_toboolean(S, 3));
    lua_setfield(S, -2, "copy");
  }
  push_stream(S, 1, 5);
  lua_setfield(S, -2, "stream");
  lua_pushvalue(S, 6);
  lua_setfield(S, -2, "dl_device");
  lua_createtable(S, 2, 0);
  lua_pushinteger(S, versioned ? 1 : 0);
  lua_rawseti(S, -2, 1);
  lua_pushinteger(S, versioned ? 3 : 8);
  lua_rawseti(S, -2, 2);
  lua_setfield(S, -2, "max_version");
  lua_call(S, 2, 1);
  int rc = dlpack_lua_capsule_consume(lua_touserdata(S, -1), &out->managed, &out->versioned);
  if (rc != DLPACK_LUA_OK) return luaL_error(S, "dlpack_lua_capsule_consume returned %d", rc);
  return 0;
}

/* luapeer.export(expr, versioned=False, copy=None, stream=None, dl_device=None) -> PyCapsule */
static PyObject *peer_export(PyObject *self, PyObject *args, PyObject *kw) {
  (void)self;
  static char *kwlist[] = {"expr", "versioned", "copy", "stream", "dl_device", NULL};
  const char *expr;
  int versioned = 0, dl_type = 0, dl_id = 0;
  PyObject *copy = Py_None, *stream = Py_None, *dl_device = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "s|pOOO", kwlist, &expr, &versioned, &copy, &stream, &dl_device))
    return NULL;
  long long stream_value = 0;
  if (stream != Py_None && (stream_value = PyLong_AsLongLong(stream)) == -1 && PyErr_Occurred()) return NULL;
  if (dl_device != Py_None && !PyArg_ParseTuple(dl_device, "ii", &dl_type, &dl_id)) return NULL;
  if (!need_state()) return NULL;
  int base = lua_gettop(L);
  export_out out = {NULL, 0};
  lua_pushcfunction(L, traceback);
  lua_pushcfunction(L, export_tensor);
  lua_pushfstring(L, "return %s", expr);
  if (luaL_loadstring(L, lua_tostring(L, -1)) != LUA_OK) return raise_lua_error(base);
  lua_remove(L, -2);
  if (lua_pcall(L, 0, 1, base + 1) != LUA_OK) return raise_lua_error(base);
  lua_pushboolean(L, versioned);
  if (copy == Py_None) lua_pushnil(L);
  else lua_pushboolean(L, PyObject_IsTrue(copy));
  lua_pushlightuserdata(L, &out);
  if (stream == Py_None) lua_pushnil(L);
  else lua_pushinteger(L, (lua_Integer)stream_value);
  if (dl_device == Py_None) {
    lua_pushnil(L);
  } else {
    lua_createtable(L, 2, 0);
    lua_pushinteger(L, dl_type);
    lua_rawseti(L, -2, 1);
    lua_pushinteger(L, dl_id);
    lua_rawseti(L, -2, 2);
  }
  if (lua_pcall(L, 6, 0, base + 1) != LUA_OK) return raise_lua_error(base);
  lua_settop(L, base);
  const char *name = out.versioned ? VERSIONED : LEGACY;
  PyObject *cap = PyCapsule_New(out.managed, name, capsule_destructor);
  if (cap == NULL && out.versioned) ((DLManagedTensorVersioned *)out.managed)->deleter(out.managed);
  else if (cap == NULL) ((DLManagedTensor *)out.managed)->deleter(out.managed);
  return cap;
}

/* ---- Host buffers with a counting deleter ---------------------------------- */

typedef struct {
  DLManagedTensorVersioned managed; /* first: the deleter gets this struct */
  int64_t shape[8], strides[8];
  void *buffer;
} host_tensor;

static atomic_int host_deletes;

static void host_deleter(DLManagedTensorVersioned *self) {
  host_tensor *h = (host_tensor *)self;
  free(h->buffer);
  free(h);
  atomic_fetch_add(&host_deletes, 1); /* any thread */
}

static int push_host_tensor(lua_State *S) {
  dlpack_lua_push_versioned(S, lua_touserdata(S, 1)); /* takes ownership */
  lua_setglobal(S, lua_tostring(S, 2));
  return 0;
}

/* luapeer.push_host(name, dtype, shape): a zeroed host buffer lent to Lua as global `name`. */
static PyObject *peer_push_host(PyObject *self, PyObject *args) {
  (void)self;
  static const struct {
    const char *name;
    DLDataType dtype;
  } dtypes[] = {{"float32", {kDLFloat, 32, 1}}, {"float64", {kDLFloat, 64, 1}}, {"int32", {kDLInt, 32, 1}},
                {"int64", {kDLInt, 64, 1}},     {"uint8", {kDLUInt, 8, 1}}};
  const char *name, *dtype;
  PyObject *shape;
  if (!PyArg_ParseTuple(args, "ssO!", &name, &dtype, &PyTuple_Type, &shape)) return NULL;
  if (!need_state()) return NULL;
  Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
  size_t which = 0;
  while (which < sizeof dtypes / sizeof dtypes[0] && strcmp(dtypes[which].name, dtype) != 0) which++;
  if (which == sizeof dtypes / sizeof dtypes[0] || ndim > 8)
    return PyErr_Format(PyExc_ValueError, "push_host: unsupported dtype or ndim");
  host_tensor *h = calloc(1, sizeof *h);
  if (h == NULL) return PyErr_NoMemory();
  int64_t numel = 1;
  for (Py_ssize_t d = ndim - 1; d >= 0; d--) {
    h->shape[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
    h->strides[d] = numel;
    numel *= h->shape[d];
  }
  if (PyErr_Occurred() || numel < 0) {
    free(h);
    return NULL;
  }
  h->buffer = calloc((size_t)numel + 1, dtypes[which].dtype.bits / 8);
  h->managed.version.major = DLPACK_MAJOR_VERSION;
  h->managed.version.minor = DLPACK_MINOR_VERSION;
  h->managed.deleter = host_deleter;
  h->managed.dl_tensor.data = h->buffer;
  h->managed.dl_tensor.device.device_type = kDLCPU;
  h->managed.dl_tensor.ndim = (int32_t)ndim;
  h->managed.dl_tensor.dtype = dtypes[which].dtype;
  h->managed.dl_tensor.shape = h->shape;
  h->managed.dl_tensor.strides = h->strides;
  int base = lua_gettop(L);
  lua_pushcfunction(L, traceback);
  lua_pushcfunction(L, push_host_tensor);
  lua_pushlightuserdata(L, &h->managed);
  lua_pushstring(L, name);
  if (lua_pcall(L, 2, 0, base + 1) != LUA_OK) return raise_lua_error(base);
  lua_settop(L, base);
  Py_RETURN_NONE;
}

/* ---- small helpers ----------------------------------------------------------- */

/* luapeer.device(expr) -> (device_type, device_id) of a Lua tensor. */
static int device_of(lua_State *S) {
  const DLTensor *t = dlpack_lua_check_tensor(S, 1, NULL);
  lua_pushinteger(S, t->device.device_type);
  lua_pushinteger(S, t->device.device_id);
  return 2;
}

static PyObject *peer_device(PyObject *self, PyObject *args) {
  (void)self;
  const char *expr;
  if (!PyArg_ParseTuple(args, "s", &expr)) return NULL;
  if (!need_state()) return NULL;
  int base = lua_gettop(L);
  lua_pushcfunction(L, traceback);
  lua_pushcfunction(L, device_of);
  lua_pushfstring(L, "return %s", expr);
  if (luaL_loadstring(L, lua_tostring(L, -1)) != LUA_OK) return raise_lua_error(base);
  lua_remove(L, -2);
  if (lua_pcall(L, 0, 1, base + 1) != LUA_OK || lua_pcall(L, 1, 2, base + 1) != LUA_OK) return raise_lua_error(base);
  PyObject *r = Py_BuildValue("(LL)", (long long)lua_tointeger(L, -2), (long long)lua_tointeger(L, -1));
  lua_settop(L, base);
  return r;
}

static PyObject *peer_open(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  if (L == NULL) open_state();
  Py_RETURN_NONE;
}

static PyObject *peer_close(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  if (L != NULL) lua_close(L); /* with the GIL held: Python deleters may run here */
  L = NULL;
  Py_RETURN_NONE;
}

static PyObject *peer_host_deletes(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  return PyLong_FromLong(atomic_load(&host_deletes));
}

static PyObject *peer_capsule_name(PyObject *self, PyObject *cap) {
  (void)self;
  const char *name = PyCapsule_GetName(cap);
  if (name == NULL) return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
  return PyUnicode_FromString(name);
}

/* luapeer.flags(cap): DLManagedTensorVersioned.flags of an unconsumed versioned capsule. */
static PyObject *peer_flags(PyObject *self, PyObject *cap) {
  (void)self;
  DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, VERSIONED);
  return m ? PyLong_FromUnsignedLongLong(m->flags) : NULL;
}

static PyObject *peer_lua_version(PyObject *self, PyObject *noargs) {
  (void)self, (void)noargs;
  return PyUnicode_FromFormat("%s, dlpack_lua %s", LUA_RELEASE, DLPACK_LUA_VERSION);
}

static PyMethodDef peer_methods[] = {
    {"run", peer_run, METH_VARARGS, "run(code, *args): run a Lua chunk; capsules in args are consumed"},
    {"export", (PyCFunction)(void (*)(void))peer_export, METH_VARARGS | METH_KEYWORDS,
     "export(expr, versioned=False, copy=None, stream=None, dl_device=None): a DLPack PyCapsule of a Lua tensor"},
    {"push_host", peer_push_host, METH_VARARGS, "push_host(name, dtype, shape): lend a host buffer to Lua"},
    {"device", peer_device, METH_VARARGS, "device(expr): (device_type, device_id)"},
    {"open", peer_open, METH_NOARGS, "open a fresh Lua state (if closed)"},
    {"close", peer_close, METH_NOARGS, "lua_close the state"},
    {"host_deletes", peer_host_deletes, METH_NOARGS, "how many host buffers were handed back"},
    {"capsule_name", peer_capsule_name, METH_O, "the name of a PyCapsule"},
    {"flags", peer_flags, METH_O, "flags(cap): the flags of an unconsumed versioned capsule"},
    {"lua_version", peer_lua_version, METH_NOARGS, "Lua and dlpack versions"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef peer_module = {PyModuleDef_HEAD_INIT, "luapeer", NULL, -1, peer_methods,
                                         NULL, NULL, NULL, NULL};

static PyObject *init_luapeer(void) {
  PyObject *m = PyModule_Create(&peer_module);
  if (m == NULL) return NULL;
  LuaError = PyErr_NewException("luapeer.LuaError", PyExc_RuntimeError, NULL);
  if (LuaError == NULL || PyModule_AddObjectRef(m, "LuaError", LuaError) != 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}

/* ---- main -------------------------------------------------------------------- */

int main(int argc, char **argv) {
  (void)argc;
  char path[4096];
  const char *script = getenv("DLPACK_PEERS_SCRIPT");
  if (script == NULL) {
    /* build/peers -> spec/peers/peers.py next to this file's folder */
    const char *slash = strrchr(argv[0], '/');
    int dir = slash ? (int)(slash - argv[0]) : 1;
    snprintf(path, sizeof path, "%.*s/../spec/peers/peers.py", dir, slash ? argv[0] : ".");
    FILE *probe = fopen(path, "r");
    if (probe) fclose(probe);
    script = probe ? path : "spec/peers/peers.py";
  }
  FILE *f = fopen(script, "r");
  if (f == NULL) {
    printf("Bail out! cannot open %s\n", script);
    return 1;
  }

  if (PyImport_AppendInittab("luapeer", init_luapeer) != 0) return 1;
  Py_Initialize();
  open_state();

  PyObject *pyargv = Py_BuildValue("[s]", script);
  if (pyargv == NULL || PySys_SetObject("argv", pyargv) != 0) PyErr_Print();
  Py_XDECREF(pyargv);

  int status = PyRun_SimpleFileExFlags(f, script, 1, NULL) == 0 ? 0 : 1;
  if (status) printf("Bail out! %s raised (traceback on stderr)\n", script);
  PyObject *main_module = PyImport_AddModule("__main__"); /* borrowed */
  PyObject *failed = main_module ? PyObject_GetAttrString(main_module, "failures") : NULL;
  if (failed == NULL || PyLong_AsLong(failed) != 0) status = 1;
  Py_XDECREF(failed);
  PyErr_Clear();

  /* Lua first (Python deleters run now, interpreter alive), then Python: the
   * tensors Python still holds call our deleters, which need no lua_State. */
  if (L != NULL) lua_close(L);
  L = NULL;
  if (Py_FinalizeEx() < 0) status = 1;
  return status;
}
