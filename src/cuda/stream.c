/* The dlpack.cuda table: is_available, device_count, the default streams, and the Lua objects
 * Stream and Event, over the driver, contexts and stream records of cuda.c. */
#include <limits.h>
#include <string.h>

#include "cuda_private.h"

#define STREAM_MT "dlpack.cuda.Stream"
#define EVENT_MT "dlpack.cuda.Event"

/* ---- stream objects ---- */

typedef struct StreamObject {
  dlp_CudaStream *s; /* NULL once closed */
  dlp_Tracked track; /* see dlp_state_for_new */
} StreamObject;

static void close_stream_object(StreamObject *o) {
  dlp_untrack(&o->track);
  if (o->s && !o->s->is_static) { /* the default streams own nothing: closing them does nothing */
    dlp_CudaStream *s = o->s;
    o->s = NULL;
    dlp_cuda_stream_release(s);
  }
}

/* node is the track member of a StreamObject (or EventObject), so the enclosing object is as aligned as its type: the cast goes
 * through void * (Clang's -Wcast-align warns on any char * to T *). */
static void close_tracked_stream(dlp_Tracked *node) {
  close_stream_object((StreamObject *)(void *)((char *)node - offsetof(StreamObject, track)));
}

static StreamObject *push_stream_object(lua_State *L) {
  dlp_State *st = dlp_state_for_new(L, "a stream");
  StreamObject *o = lua_newuserdatauv(L, sizeof *o, 0);
  memset(o, 0, sizeof *o);
  luaL_setmetatable(L, STREAM_MT);
  if (st) dlp_track(st, &o->track, close_tracked_stream);
  return o;
}

static dlp_CudaStream *check_open_stream(lua_State *L, int idx) {
  StreamObject *o = luaL_checkudata(L, idx, STREAM_MT);
  if (!o->s) luaL_argerror(L, idx, "stream was closed");
  return o->s;
}

/* The integer option `field` of the options table at argument 2 (its value on top), in [lo, hi]. */
static lua_Integer option_integer(lua_State *L, const char *field, lua_Integer lo, lua_Integer hi) {
  int isint = 0;
  lua_Integer v = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isint) : 0;
  if (!isint || v < lo || v > hi)
    luaL_argerror(L, 2, lua_pushfstring(L, "%s must be an integer from %I to %I, got %s", field, lo, hi,
                                        lua_type(L, -1) == LUA_TNUMBER ? lua_tostring(L, -1) : luaL_typename(L, -1)));
  return v;
}

static int l_stream_new(lua_State *L) {
  lua_Integer device = 0, priority = 0;
  CUstream handle = NULL; /* set when rc is CUDA_SUCCESS; dlp_cuda_check raises otherwise */
  dlp_CudaScope scope;
  CUresult rc;
  if (!lua_isnoneornil(L, 2)) { /* argument 1 is the Stream table (__call) */
    luaL_checktype(L, 2, LUA_TTABLE);
    if (lua_getfield(L, 2, "device") != LUA_TNIL) device = option_integer(L, "device", 0, INT_MAX);
    if (lua_getfield(L, 2, "priority") != LUA_TNIL) priority = option_integer(L, "priority", INT_MIN, INT_MAX);
  }
  dlp_cuda_require(L, "dlpack.cuda.Stream");
  dlp_cuda_check_device(L, device, "dlpack.cuda.Stream");
  StreamObject *o = push_stream_object(L);
  rc = dlp_cuda_enter((int)device, &scope);
  if (rc == CUDA_SUCCESS) rc = dlp_cuda.fn.cuStreamCreateWithPriority(&handle, CU_STREAM_NON_BLOCKING, (int)priority);
  dlp_cuda_leave(&scope);
  dlp_cuda_check(L, rc, "dlpack.cuda.Stream");
  if (!(o->s = dlp_cuda_new_record(handle, (int)device, 1))) {
    if (dlp_cuda_enter((int)device, &scope) == CUDA_SUCCESS) dlp_cuda.fn.cuStreamDestroy_v2(handle);
    dlp_cuda_leave(&scope);
    return luaL_error(L, "dlpack.cuda.Stream: not enough memory");
  }
  return 1;
}

void dlp_cuda_push_wrapped(lua_State *L, uintptr_t handle, int device) {
  StreamObject *o = push_stream_object(L);
  if (!(o->s = dlp_cuda_new_record((CUstream)handle, device, 0))) luaL_error(L, "not enough memory for a stream object");
}

/* dlpack.unsafe.wrap_stream(handle [, device]): a foreign cudaStream_t, given as an integer. */
int dlp_cuda_wrap_stream(lua_State *L) {
  uintptr_t handle;
  if (lua_type(L, 1) == LUA_TLIGHTUSERDATA) handle = (uintptr_t)lua_touserdata(L, 1);
  else handle = (uintptr_t)dlp_checkinteger(L, 1);
  lua_Integer device = dlp_optinteger(L, 2, 0);
  if (handle == 0) return luaL_argerror(L, 1, "stream 0 is ambiguous on CUDA (use 1 for the legacy default stream)");
  if (device < 0 || device >= MAX_DEVICES) return luaL_argerror(L, 2, "invalid device id");
  dlp_cuda_push_wrapped(L, handle, (int)device);
  return 1;
}

dlp_CudaStream *dlp_cuda_test_stream_object(lua_State *L, int idx) {
  StreamObject *o = luaL_testudata(L, idx, STREAM_MT);
  return o ? o->s : NULL;
}

dlp_CudaStream *dlp_cuda_check_stream(lua_State *L, int idx, DLDevice on, int dflt, const char *what) {
  if (!idx && on.device_type == kDLCPU) { /* the common case: no stream asked for, none to find */
    lua_pushnil(L);
    return NULL;
  }
  int isint, device = dlp_cuda_device_of(on);
  lua_Integer v = dflt;
  StreamObject *holder, *o;
  if (idx) idx = lua_absindex(L, idx);
  if (idx && lua_isnil(L, idx)) idx = 0;
  if (!dlp_device_has_streams(on) || on.device_type == kDLROCM) {
    if (idx && !(lua_tointegerx(L, idx, &isint) == -1 && isint)) {
      dlp_push_device_name(L, on);
      luaL_error(L, "%s: stream must be nil or -1 for a tensor on %s%s", what, lua_tostring(L, -1),
                 on.device_type == kDLROCM ? " (ROCm streams are not supported)" : ", which has no streams");
    }
    lua_pushnil(L);
    return NULL;
  }
  /* the holder first: allocating it may run finalizers, which may close the stream given */
  holder = push_stream_object(L);
  if (idx && (o = luaL_testudata(L, idx, STREAM_MT))) {
    if (!o->s) luaL_error(L, "%s: the stream was closed", what);
    holder->s = dlp_cuda_on_device(o->s, device);
    dlp_cuda_stream_retain(holder->s);
    return holder->s;
  }
  if (idx) {
    v = lua_tointegerx(L, idx, &isint);
    if (!isint || !(v == -1 || v == 1 || v == 2))
      luaL_error(L, "%s: stream must be a dlpack.cuda.Stream or one of the DLPack values -1, 1, 2, got %s%s", what,
                 isint ? lua_pushfstring(L, "%I", v) : luaL_typename(L, idx),
                 isint && v > 2 ? " (integer handles are raw pointers: see dlpack.unsafe.wrap_stream)"
                 : isint && v == 0 ? " (stream 0 is ambiguous on CUDA; use 1, the legacy default)" : "");
  }
  /* managed memory where no CUDA driver loads: no work can be queued on it, nothing to order */
  if (v == -1 || (on.device_type == kDLCUDAManaged && !dlp_cuda_ready())) return NULL;
  holder->s = dlp_cuda_default_stream(v == 1 ? CU_STREAM_LEGACY : CU_STREAM_PER_THREAD, device);
  return holder->s;
}

/* Whether the key k (of length len) is the field name `name`: the whole string, NULs too. */
static int is_field(const char *k, size_t len, const char *name) {
  return len == strlen(name) && memcmp(k, name, len) == 0;
}

static int stream_index(lua_State *L) {
  StreamObject *o = luaL_checkudata(L, 1, STREAM_MT);
  size_t len;
  const char *k = luaL_checklstring(L, 2, &len);
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1; /* a method, by the whole key */
  if (!o->s) return luaL_error(L, "stream was closed (reading field '%s')", k);
  if (is_field(k, len, "handle")) lua_pushinteger(L, (lua_Integer)(uintptr_t)o->s->handle);
  else if (is_field(k, len, "device")) lua_pushinteger(L, o->s->device);
  else if (is_field(k, len, "owned")) lua_pushboolean(L, o->s->owned);
  else lua_pushnil(L);
  return 1;
}

static int l_stream_close(lua_State *L) {
  close_stream_object(luaL_checkudata(L, 1, STREAM_MT));
  return 0;
}

/* Synchronize (or query) the stream at 1, with its device's context current. Streams can be
 * made without the driver (wrap, the default streams), so it is looked up only here. */
static CUresult stream_call(lua_State *L, const char *what, int query) {
  dlp_CudaStream *s = check_open_stream(L, 1);
  dlp_CudaScope scope;
  CUresult rc;
  dlp_cuda_require(L, what);
  rc = dlp_cuda_enter(s->device, &scope);
  if (rc == CUDA_SUCCESS) rc = query ? dlp_cuda.fn.cuStreamQuery(s->handle) : dlp_cuda.fn.cuStreamSynchronize(s->handle);
  dlp_cuda_leave(&scope);
  return rc;
}

static int l_stream_synchronize(lua_State *L) {
  dlp_cuda_check(L, stream_call(L, "synchronize", 0), "synchronize");
  dlp_cuda_drain_pending(0);
  return 0;
}

static int l_stream_query(lua_State *L) {
  CUresult rc = stream_call(L, "query", 1);
  if (rc != CUDA_ERROR_NOT_READY) dlp_cuda_check(L, rc, "query");
  lua_pushboolean(L, rc == CUDA_SUCCESS);
  return 1;
}

/* ---- events ---- */

typedef struct EventObject {
  CUevent ev; /* NULL once closed */
  int device;
  dlp_Tracked track; /* see dlp_state_for_new */
} EventObject;

static void close_event_object(EventObject *e) {
  dlp_untrack(&e->track);
  if (e->ev) {
    dlp_CudaScope scope;
    if (dlp_cuda_enter(e->device, &scope) == CUDA_SUCCESS) dlp_cuda.fn.cuEventDestroy_v2(e->ev);
    dlp_cuda_leave(&scope);
    e->ev = NULL;
  }
}

static void close_tracked_event(dlp_Tracked *node) {
  close_event_object((EventObject *)(void *)((char *)node - offsetof(EventObject, track)));
}

static EventObject *check_event(lua_State *L, int idx) {
  EventObject *e = luaL_checkudata(L, idx, EVENT_MT);
  if (!e->ev) luaL_argerror(L, idx, "event was closed");
  return e;
}

static EventObject *new_event(lua_State *L, int device, int timing) {
  dlp_State *st = dlp_state_for_new(L, "an event");
  EventObject *e = lua_newuserdatauv(L, sizeof *e, 0);
  dlp_CudaScope scope;
  CUresult rc;
  memset(e, 0, sizeof *e);
  e->device = device;
  luaL_setmetatable(L, EVENT_MT);
  if (st) dlp_track(st, &e->track, close_tracked_event);
  rc = dlp_cuda_enter(device, &scope);
  if (rc == CUDA_SUCCESS) rc = dlp_cuda.fn.cuEventCreate(&e->ev, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING);
  dlp_cuda_leave(&scope);
  if (rc != CUDA_SUCCESS) e->ev = NULL;
  dlp_cuda_check(L, rc, "dlpack.cuda.Event");
  return e;
}

static int l_event_new(lua_State *L) {
  lua_Integer device = 0;
  int timing = 1;
  if (!lua_isnoneornil(L, 2)) { /* argument 1 is the Event table (__call) */
    luaL_checktype(L, 2, LUA_TTABLE);
    if (lua_getfield(L, 2, "device") != LUA_TNIL) device = option_integer(L, "device", 0, INT_MAX);
    if (lua_getfield(L, 2, "timing") != LUA_TNIL) timing = lua_toboolean(L, -1);
    lua_settop(L, 2);
  }
  dlp_cuda_require(L, "dlpack.cuda.Event");
  dlp_cuda_check_device(L, device, "dlpack.cuda.Event");
  new_event(L, (int)device, timing);
  return 1;
}

static void record_event(lua_State *L, EventObject *e, dlp_CudaStream *s) {
  dlp_CudaScope scope;
  CUresult rc = dlp_cuda_enter(e->device, &scope);
  if (rc == CUDA_SUCCESS) rc = dlp_cuda.fn.cuEventRecord(e->ev, s->handle);
  dlp_cuda_leave(&scope);
  dlp_cuda_check(L, rc, "record");
}

static int l_event_record(lua_State *L) {
  EventObject *e = check_event(L, 1);
  dlp_CudaStream *s = dlp_cuda_on_device(lua_isnoneornil(L, 2) ? dlp_cuda_default_stream(CU_STREAM_LEGACY, e->device)
                                                      : check_open_stream(L, 2), e->device);
  dlp_cuda_require(L, "record");
  record_event(L, e, s);
  lua_settop(L, 1);
  return 1;
}

static int event_call(lua_State *L, const char *what, CUresult (*fn)(CUevent)) {
  EventObject *e = check_event(L, 1);
  dlp_CudaScope scope;
  CUresult rc;
  dlp_cuda_require(L, what);
  rc = dlp_cuda_enter(e->device, &scope);
  if (rc == CUDA_SUCCESS) rc = fn(e->ev);
  dlp_cuda_leave(&scope);
  return rc;
}

static int l_event_synchronize(lua_State *L) {
  dlp_cuda_check(L, event_call(L, "synchronize", dlp_cuda.fn.cuEventSynchronize), "synchronize");
  dlp_cuda_drain_pending(0);
  return 0;
}

static int l_event_query(lua_State *L) {
  CUresult rc = event_call(L, "query", dlp_cuda.fn.cuEventQuery);
  if (rc != CUDA_ERROR_NOT_READY) dlp_cuda_check(L, rc, "query");
  lua_pushboolean(L, rc == CUDA_SUCCESS);
  return 1;
}

static int l_event_elapsed(lua_State *L) {
  EventObject *a = check_event(L, 1), *b = check_event(L, 2);
  float ms = 0;
  dlp_CudaScope scope;
  CUresult rc;
  dlp_cuda_require(L, "elapsed");
  rc = dlp_cuda_enter(a->device, &scope);
  if (rc == CUDA_SUCCESS) rc = dlp_cuda.fn.cuEventElapsedTime(&ms, a->ev, b->ev);
  dlp_cuda_leave(&scope);
  dlp_cuda_check(L, rc, "elapsed");
  lua_pushnumber(L, ms);
  return 1;
}

static int l_event_close(lua_State *L) {
  close_event_object(luaL_checkudata(L, 1, EVENT_MT));
  return 0;
}

/* s:wait(event or stream): work issued on s later waits for it. */
static int l_stream_wait(lua_State *L) {
  dlp_CudaStream *s = check_open_stream(L, 1);
  EventObject *e = luaL_testudata(L, 2, EVENT_MT);
  dlp_CudaScope scope;
  CUresult rc;
  dlp_cuda_require(L, "wait");
  if (!e) {
    dlp_CudaStream *other = check_open_stream(L, 2);
    rc = dlp_cuda_make_wait(s, other);
    scope.changed = 0;
  } else {
    if (!e->ev) return luaL_argerror(L, 2, "event was closed");
    rc = dlp_cuda_enter(s->device, &scope);
    if (rc == CUDA_SUCCESS) rc = dlp_cuda.fn.cuStreamWaitEvent(s->handle, e->ev, 0);
  }
  dlp_cuda_leave(&scope);
  dlp_cuda_check(L, rc, "wait");
  lua_settop(L, 1);
  return 1;
}

/* s:record([event]) -> event */
static int l_stream_record(lua_State *L) {
  int device = check_open_stream(L, 1)->device;
  EventObject *e;
  dlp_cuda_require(L, "record");
  if (lua_isnoneornil(L, 2)) {
    e = new_event(L, device, 1);
  } else {
    e = check_event(L, 2);
    lua_settop(L, 2);
  }
  record_event(L, e, check_open_stream(L, 1)); /* again: making the event may have run finalizers */
  return 1;
}

static int l_stream_tostring(lua_State *L) {
  StreamObject *o = luaL_checkudata(L, 1, STREAM_MT);
  if (!o->s) lua_pushliteral(L, "dlpack.cuda.Stream(closed)");
  else lua_pushfstring(L, "dlpack.cuda.Stream(handle=%p, device=%d%s)", (void *)o->s->handle, o->s->device,
                       o->s->owned ? "" : ", wrapped");
  return 1;
}

/* ---- the dlpack.cuda table ---- */

static int l_is_available(lua_State *L) {
  lua_pushboolean(L, dlp_cuda_ready());
  if (dlp_cuda.available) return 1;
  lua_pushstring(L, dlp_cuda.reason);
  return 2;
}

static int l_device_count(lua_State *L) {
  dlp_cuda_ready();
  lua_pushinteger(L, dlp_cuda.device_count);
  return 1;
}

static void push_static_stream(lua_State *L, dlp_CudaStream *s) {
  push_stream_object(L)->s = s;
}

/* A table that constructs when called: Class(...) runs fn(Class, ...). */
static void push_constructor(lua_State *L, lua_CFunction fn) {
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, fn);
  lua_setfield(L, -2, "__call");
  lua_setmetatable(L, -2);
}

void dlp_cuda_register(lua_State *L, int module) {
  static const luaL_Reg functions[] = {
    {"is_available", l_is_available}, {"device_count", l_device_count}, {"blas", dlp_cuda_l_blas}, {NULL, NULL},
  };
  static const luaL_Reg stream_methods[] = {
    {"synchronize", l_stream_synchronize}, {"query", l_stream_query}, {"wait", l_stream_wait},
    {"record", l_stream_record}, {"close", l_stream_close}, {NULL, NULL},
  };
  static const luaL_Reg event_methods[] = {
    {"record", l_event_record}, {"synchronize", l_event_synchronize}, {"query", l_event_query},
    {"elapsed", l_event_elapsed}, {"close", l_event_close}, {NULL, NULL},
  };
  dlp_new_class(L, STREAM_MT, stream_methods, stream_index, l_stream_close, l_stream_tostring);
  dlp_new_class(L, EVENT_MT, event_methods, NULL, l_event_close, NULL);
  luaL_newlib(L, functions);
  /* Stream(...) and Event(...) construct (foreign handles: dlpack.unsafe.wrap_stream) */
  push_constructor(L, l_stream_new);
  lua_setfield(L, -2, "Stream");
  push_constructor(L, l_event_new);
  lua_setfield(L, -2, "Event");
  push_static_stream(L, dlp_cuda_default_stream(CU_STREAM_LEGACY, 0));
  lua_setfield(L, -2, "legacy_stream");
  push_static_stream(L, dlp_cuda_default_stream(CU_STREAM_PER_THREAD, 0));
  lua_setfield(L, -2, "per_thread_stream");
  lua_setfield(L, module, "cuda");
}
