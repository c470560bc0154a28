/*
 * fabricate: a test-only Lua module (never installed) that plays a foreign
 * DLPack producer and consumer.
 *
 * It fabricates managed tensors with any field values, hands them over as
 * capsules or in the raw protocol form, and counts the calls of their deleter.
 * It does not link the dlpack module: it reaches it only through the function
 * table in the registry (dlpack_lua_get_api), so `require "dlpack"` first.
 *
 *   fab.versioned(spec) / fab.legacy(spec) -> capsule, data address (integer)
 *   fab.raw_versioned(spec) / fab.raw_legacy(spec) -> light userdata, name
 *   fab.c_producer(spec) -> object whose C __dlpack makes a capsule through the registry table
 *       (push_capsule: handed back when the state closes if the script drops it)
 *   fab.isolate(): dlpack_lua_isolate_capsules for the calling state (as a host would call it)
 *   fab.deleted(), fab.live(), fab.double_deletes(), fab.tampered()
 *   fab.delete(ptr) -> true if ptr was a live fabricated tensor (now deleted)
 *   fab.reclaim() -> frees fabricated tensors that have a NULL deleter
 *   fab.delete_on_thread(ptr, name), fab.inspect(ptr, name), fab.addr(p)
 *   fab.consume(cap) -> api->capsule_consume result code [, ptr, name]
 *   fab.race_consume(cap, n) -> successes, "consumed" answers, other answers
 *   fab.export_and_close([form]) -> true, values, info
 *   fab.c_export(t [, form]) -> the flags of t exported through the C API (api->export_versioned,
 *       or api->export_legacy: 0), whose deleter it then calls; the C API's errors propagate
 *   fab.run_threads(code, n [, cap]) -> { {ok =, value =}, ... }
 *   fab.post(p), fab.receive([seconds]) -> p or nil: a process-wide mailbox
 *   fab.note(s), fab.notes() -> the strings noted since the last call (also from finalizers at lua_close)
 *
 * On Windows (fabricate.dll, MinGW-w64) the threads, barriers and condition variables are
 * winpthreads', linked statically (the Makefile's TEST_LIBS), and the ipc_* fields below are absent.
 *
 * Raw descriptors for the dlpack.ipc fuzzer (spec/fuzz/ipc.lua), which plays a hostile peer in the
 * same process (Linux only; each returns nil, a message and errno on failure):
 *   fab.ipc_connect(path) -> fd of an AF_UNIX SOCK_SEQPACKET socket connected to path ('@': abstract)
 *   fab.ipc_send(fd, bytes [, {fd, ...}]) -> true, or false, "EAGAIN" (non-blocking; SCM_RIGHTS)
 *   fab.ipc_recv(fd) -> bytes, {fd, ...}, truncated; or false, "EAGAIN"; or nil, "eof"
 *   fab.ipc_make_fd(kind, size) -> fd: kind "memfd" (unsealed, sealing allowed), "hugetlb" (the same
 *       with MFD_HUGETLB), "file" (a regular file in /tmp, unlinked), "pipe" (a read end whose write
 *       end is closed) or "socket" (one end of a socket pair); size is the file's (memfd, hugetlb, file)
 *   fab.ipc_seal(fd, seals), fab.ipc_write(fd, offset, bytes), fab.ipc_read(fd, offset, n) -> string
 *   fab.ipc_reopen(fd) -> a new descriptor of the same file opened read-only (/proc/self/fd/N)
 *   fab.ipc_dup(fd), fab.ipc_close(fd)
 *   fab.ipc_fd_info(fd) -> {size =, seals = (-1: cannot be sealed), rdonly =, ino =, shmem =}
 *   fab.ipc_counts() -> open descriptors, mappings of memfds (/proc/self/fd, /proc/self/maps)
 *
 * spec fields (all optional): major minor flags device_type device_id code bits
 * lanes ndim shape strides byte_offset data deleter legacy (c_producer only).
 * Defaults: version 1.3, flags 0, cpu:0, float32, shape {4}, row-major strides,
 * byte_offset 0, data 1, 2, 3, ... (float32/float64/integer dtypes; else zeros).
 * shape/strides/data = false give NULL; deleter = false gives a NULL deleter.
 */
#define _GNU_SOURCE /* memfd_create, MSG_CMSG_CLOEXEC, F_ADD_SEALS, O_TMPFILE (ipc_* below) */

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compat.h"
#include <lualib.h>

#include "dlpack_lua.h"

#define FAB_MAX_LEN 4096              /* longest shape/strides table accepted */
#define FAB_MAX_BYTES (64L << 20)     /* largest default data buffer */
#define FAB_MIN_BYTES 64              /* smallest default data buffer */

DLPACK_LUA_API int luaopen_fabricate(lua_State *L);

/* ------------------------------------------------------------------------ */
/* Records of fabricated tensors                                             */

typedef struct fab_record {
  void *managed;   /* the DLManagedTensor(Versioned) */
  int versioned;
  void *data;      /* what the deleter frees */
  int64_t *shape;
  int64_t *strides;
  DLTensor snapshot; /* the DLTensor as fabricated, to detect consumers writing it */
  DLPackVersion version;
  uint64_t flags;
} fab_record;

typedef struct fab_list {
  fab_record *items;
  size_t n, cap;
} fab_list;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static fab_list g_live;    /* fabricated tensors with a deleter that has not run */
static fab_list g_orphans; /* fabricated tensors with a NULL deleter */
static atomic_long g_deleted;
static atomic_long g_double;
static atomic_long g_tampered;

/* Call with g_lock held. Returns 0 when out of memory. */
static int list_add(fab_list *list, const fab_record *rec) {
  if (list->n == list->cap) {
    size_t cap = list->cap ? list->cap * 2 : 16;
    fab_record *items = realloc(list->items, cap * sizeof *items);
    if (items == NULL) return 0;
    list->items = items;
    list->cap = cap;
  }
  list->items[list->n++] = *rec;
  return 1;
}

/* Call with g_lock held. Removes the record of managed (compared by address
 * only: the pointer is never dereferenced here) into *out. */
static int list_take(fab_list *list, const void *managed, fab_record *out) {
  size_t i;
  for (i = 0; i < list->n; i++) {
    if (list->items[i].managed == managed) {
      if (out) *out = list->items[i];
      list->items[i] = list->items[--list->n];
      if (list->n == 0) { /* nothing kept when nothing is live: no leak at exit */
        free(list->items);
        list->items = NULL;
        list->cap = 0;
      }
      return 1;
    }
  }
  return 0;
}

static void free_record(const fab_record *rec) {
  free(rec->data);
  free(rec->shape);
  free(rec->strides);
  free(rec->managed);
}

static int same_tensor(const DLTensor *a, const DLTensor *b) {
  return a->data == b->data && a->device.device_type == b->device.device_type &&
         a->device.device_id == b->device.device_id && a->ndim == b->ndim &&
         a->dtype.code == b->dtype.code && a->dtype.bits == b->dtype.bits &&
         a->dtype.lanes == b->dtype.lanes && a->shape == b->shape && a->strides == b->strides &&
         a->byte_offset == b->byte_offset;
}

/* The deleter of every fabricated tensor. May run on any thread. */
static void fab_release(void *self) {
  fab_record rec;
  int found;
  pthread_mutex_lock(&g_lock);
  found = list_take(&g_live, self, &rec);
  pthread_mutex_unlock(&g_lock);
  if (!found) { /* a second call (or a pointer we never made): touch nothing */
    atomic_fetch_add(&g_double, 1);
    return;
  }
  if (rec.versioned) {
    const DLManagedTensorVersioned *m = self;
    if (!same_tensor(&m->dl_tensor, &rec.snapshot) || m->version.major != rec.version.major ||
        m->version.minor != rec.version.minor || m->flags != rec.flags)
      atomic_fetch_add(&g_tampered, 1);
  } else {
    const DLManagedTensor *m = self;
    if (!same_tensor(&m->dl_tensor, &rec.snapshot)) atomic_fetch_add(&g_tampered, 1);
  }
  free_record(&rec);
  atomic_fetch_add(&g_deleted, 1);
}

static void fab_deleter_versioned(DLManagedTensorVersioned *self) { fab_release(self); }
static void fab_deleter_legacy(DLManagedTensor *self) { fab_release(self); }

/* ------------------------------------------------------------------------ */
/* Reading a spec                                                            */

static lua_Integer opt_int(lua_State *L, int spec, const char *key, lua_Integer def, int *given) {
  lua_Integer v = def;
  if (given) *given = 0;
  if (lua_getfield(L, spec, key) != LUA_TNIL) {
    int ok;
    v = lua_tointegerx(L, -1, &ok);
    if (!ok) luaL_error(L, "fabricate: spec.%s must be an integer", key);
    if (given) *given = 1;
  }
  lua_pop(L, 1);
  return v;
}

enum { FIELD_NIL, FIELD_FALSE, FIELD_TABLE };

/* Reads spec[key]: nil, false or a table of integers (copied into a scratch
 * userdata left on the stack). */
static int opt_array(lua_State *L, int spec, const char *key, int64_t **out, size_t *n) {
  int t = lua_getfield(L, spec, key);
  *out = NULL;
  *n = 0;
  if (t == LUA_TNIL) { lua_pop(L, 1); return FIELD_NIL; }
  if (t == LUA_TBOOLEAN && !lua_toboolean(L, -1)) { lua_pop(L, 1); return FIELD_FALSE; }
  if (t != LUA_TTABLE) luaL_error(L, "fabricate: spec.%s must be a table or false", key);
  {
    size_t len = (size_t)lua_rawlen(L, -1), i;
    int64_t *buf;
    if (len > FAB_MAX_LEN) luaL_error(L, "fabricate: spec.%s is too long", key);
    buf = lua_newuserdatauv(L, (len ? len : 1) * sizeof(int64_t), 0);
    for (i = 0; i < len; i++) {
      int ok;
      lua_rawgeti(L, -2, (lua_Integer)i + 1);
      buf[i] = (int64_t)lua_tointegerx(L, -1, &ok);
      if (!ok) luaL_error(L, "fabricate: spec.%s[%d] must be an integer", key, (int)i + 1);
      lua_pop(L, 1);
    }
    lua_remove(L, -2); /* the table; the scratch buffer stays on the stack */
    *out = buf;
    *n = len;
  }
  return FIELD_TABLE;
}

static size_t clamp_len(int32_t ndim) {
  if (ndim < 0) return 0;
  return ndim > FAB_MAX_LEN ? FAB_MAX_LEN : (size_t)ndim;
}

/* Bytes needed to hold the elements as laid out, or -1 when not computable. */
static long default_bytes(const int64_t *shape, const int64_t *strides, size_t len, int32_t ndim,
                          size_t itemsize, uint64_t byte_offset) {
  int64_t numel = 1, maxoff = 0, total;
  int32_t k;
  if (shape == NULL || ndim < 0 || (size_t)ndim > len) return -1;
  for (k = 0; k < ndim; k++) {
    if (shape[k] < 0) return -1;
    if (__builtin_mul_overflow(numel, shape[k], &numel)) return -1;
  }
  for (k = 0; k < ndim && numel > 0; k++) {
    int64_t step = strides ? strides[k] : 0, span;
    if (step <= 0) continue;
    if (__builtin_mul_overflow(shape[k] - 1, step, &span)) return -1;
    if (__builtin_add_overflow(maxoff, span, &maxoff)) return -1;
  }
  if (strides == NULL && numel > 0) maxoff = numel - 1;
  total = numel == 0 ? 0 : maxoff + 1;
  if (__builtin_mul_overflow(total, (int64_t)itemsize, &total)) return -1;
  if (byte_offset > (uint64_t)FAB_MAX_BYTES) return -1;
  if (__builtin_add_overflow(total, (int64_t)byte_offset, &total)) return -1;
  if (total > FAB_MAX_BYTES) return -1;
  return (long)total;
}

/* Fills the element slots after byte_offset with 1, 2, 3, ... */
static void fill_counting(unsigned char *data, size_t bytes, uint64_t byte_offset, int code, int bits) {
  size_t itemsize = (size_t)bits / 8, slots, j;
  if ((code != kDLInt && code != kDLUInt && code != kDLFloat) || bits % 8 || itemsize == 0) return;
  if (byte_offset >= bytes) return;
  slots = (bytes - (size_t)byte_offset) / itemsize;
  for (j = 0; j < slots; j++) {
    unsigned char *p = data + byte_offset + j * itemsize;
    double d = (double)(j + 1);
    if (code == kDLFloat && bits == 32) { float f = (float)d; memcpy(p, &f, 4); }
    else if (code == kDLFloat && bits == 64) memcpy(p, &d, 8);
    else if (code == kDLFloat) return; /* float16 etc: zeros */
    else if (bits == 8) { uint8_t v = (uint8_t)(j + 1); memcpy(p, &v, 1); }
    else if (bits == 16) { uint16_t v = (uint16_t)(j + 1); memcpy(p, &v, 2); }
    else if (bits == 32) { uint32_t v = (uint32_t)(j + 1); memcpy(p, &v, 4); }
    else if (bits == 64) { uint64_t v = (uint64_t)(j + 1); memcpy(p, &v, 8); }
    else return;
  }
}

/* Builds a managed tensor from the spec at index spec. Reads everything (which
 * may raise) before allocating anything. */
static void *fab_build(lua_State *L, int spec, int versioned) {
  int top = lua_gettop(L), given_ndim, st_shape, st_strides, data_kind, has_deleter;
  lua_Integer major, minor, flags, device_type, device_id, code, bits, lanes, ndim_i, byte_offset;
  int64_t *tshape, *tstrides, *shape = NULL, *strides = NULL;
  size_t nshape, nstrides, len_shape = 0, len_strides = 0, i, data_len = 0, itemsize;
  const char *data_str = NULL;
  int32_t ndim;
  void *data = NULL, *managed = NULL;
  DLTensor *dl;
  fab_record rec;

  spec = lua_absindex(L, spec);
  major = opt_int(L, spec, "major", DLPACK_MAJOR_VERSION, NULL);
  minor = opt_int(L, spec, "minor", DLPACK_MINOR_VERSION, NULL);
  flags = opt_int(L, spec, "flags", 0, NULL);
  device_type = opt_int(L, spec, "device_type", kDLCPU, NULL);
  device_id = opt_int(L, spec, "device_id", 0, NULL);
  code = opt_int(L, spec, "code", kDLFloat, NULL);
  bits = opt_int(L, spec, "bits", 32, NULL);
  lanes = opt_int(L, spec, "lanes", 1, NULL);
  byte_offset = opt_int(L, spec, "byte_offset", 0, NULL);
  ndim_i = opt_int(L, spec, "ndim", 0, &given_ndim);
  st_shape = opt_array(L, spec, "shape", &tshape, &nshape);
  st_strides = opt_array(L, spec, "strides", &tstrides, &nstrides);

  switch (lua_getfield(L, spec, "data")) {
    case LUA_TNIL: data_kind = FIELD_NIL; break;
    case LUA_TSTRING: data_kind = FIELD_TABLE; data_str = lua_tolstring(L, -1, &data_len); break;
    case LUA_TBOOLEAN:
      if (!lua_toboolean(L, -1)) { data_kind = FIELD_FALSE; break; }
      /* fall through */
    default: return (void *)(intptr_t)luaL_error(L, "fabricate: spec.data must be a string or false");
  }
  /* the string (if any) stays on the stack until we return */
  lua_getfield(L, spec, "deleter");
  has_deleter = lua_isnil(L, -1) || lua_toboolean(L, -1);
  lua_pop(L, 1);

  if (given_ndim) ndim = (int32_t)ndim_i;
  else ndim = st_shape == FIELD_TABLE ? (int32_t)nshape : st_shape == FIELD_FALSE ? 0 : 1;

  /* ---- nothing below raises until the record is registered ---- */
  if (st_shape != FIELD_FALSE) {
    len_shape = nshape > clamp_len(ndim) ? nshape : clamp_len(ndim);
    if (len_shape == 0) len_shape = 1;
    shape = malloc(len_shape * sizeof *shape);
    if (shape == NULL) goto oom;
    for (i = 0; i < len_shape; i++)
      shape[i] = i < nshape ? tshape[i] : (st_shape == FIELD_NIL && !given_ndim) ? 4 : 1;
  }
  if (st_strides != FIELD_FALSE) {
    size_t want = clamp_len(ndim);
    uint64_t prod = 1;
    len_strides = nstrides > want ? nstrides : want;
    if (len_strides == 0) len_strides = 1;
    strides = malloc(len_strides * sizeof *strides);
    if (strides == NULL) goto oom;
    for (i = 0; i < len_strides; i++) strides[i] = 1;
    for (i = want; i-- > 0;) { /* row-major, wrapping: garbage shapes give garbage strides */
      strides[i] = (int64_t)prod;
      prod *= (uint64_t)(shape && i < len_shape ? shape[i] : 1);
    }
    if (st_strides == FIELD_TABLE)
      for (i = 0; i < nstrides; i++) strides[i] = tstrides[i];
  }
  itemsize = ((size_t)(uint8_t)bits * (uint16_t)lanes + 7) / 8;
  if (itemsize == 0) itemsize = 1;
  if (data_kind == FIELD_TABLE) {
    data = malloc(data_len ? data_len : 1);
    if (data == NULL) goto oom;
    memcpy(data, data_str, data_len);
  } else if (data_kind == FIELD_NIL) {
    long want = default_bytes(shape, strides, len_shape, ndim, itemsize, (uint64_t)byte_offset);
    size_t bytes = want < FAB_MIN_BYTES ? FAB_MIN_BYTES : (size_t)want;
    data = calloc(1, bytes);
    if (data == NULL) goto oom;
    if (want >= 0) fill_counting(data, bytes, (uint64_t)byte_offset, (int)(uint8_t)code, (int)(uint8_t)bits);
  }

  if (versioned) {
    DLManagedTensorVersioned *m = calloc(1, sizeof *m);
    if (m == NULL) goto oom;
    m->version.major = (uint32_t)major;
    m->version.minor = (uint32_t)minor;
    m->manager_ctx = NULL;
    m->deleter = has_deleter ? fab_deleter_versioned : NULL;
    m->flags = (uint64_t)flags;
    dl = &m->dl_tensor;
    managed = m;
    rec.version = m->version;
    rec.flags = m->flags;
  } else {
    DLManagedTensor *m = calloc(1, sizeof *m);
    if (m == NULL) goto oom;
    m->manager_ctx = NULL;
    m->deleter = has_deleter ? fab_deleter_legacy : NULL;
    dl = &m->dl_tensor;
    managed = m;
    rec.version.major = rec.version.minor = 0;
    rec.flags = 0;
  }
  dl->data = data;
  dl->device.device_type = (DLDeviceType)(int32_t)device_type;
  dl->device.device_id = (int32_t)device_id;
  dl->ndim = ndim;
  dl->dtype.code = (uint8_t)code;
  dl->dtype.bits = (uint8_t)bits;
  dl->dtype.lanes = (uint16_t)lanes;
  dl->shape = shape;
  dl->strides = strides;
  dl->byte_offset = (uint64_t)byte_offset;

  rec.managed = managed;
  rec.versioned = versioned;
  rec.data = data;
  rec.shape = shape;
  rec.strides = strides;
  rec.snapshot = *dl;
  pthread_mutex_lock(&g_lock);
  i = (size_t)list_add(has_deleter ? &g_live : &g_orphans, &rec);
  pthread_mutex_unlock(&g_lock);
  if (!i) goto oom;
  lua_settop(L, top);
  return managed;

oom:
  free(managed);
  free(data);
  free(shape);
  free(strides);
  return (void *)(intptr_t)luaL_error(L, "fabricate: out of memory");
}

static const dlpack_lua_api *need_api(lua_State *L) {
  const dlpack_lua_api *api = dlpack_lua_get_api(L);
  if (api == NULL) luaL_error(L, "fabricate: require \"dlpack\" first (no %s in the registry)", DLPACK_LUA_API_KEY);
  return api;
}

static int spec_arg(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) {
    lua_newtable(L);
    lua_replace(L, idx);
  } else {
    luaL_checktype(L, idx, LUA_TTABLE);
  }
  return idx;
}

static int versioned_name(lua_State *L, int idx) {
  static const char *const names[] = {"dltensor", "dltensor_versioned", NULL};
  return luaL_checkoption(L, idx, "dltensor_versioned", names);
}

/* ------------------------------------------------------------------------ */
/* Capsules and the raw form                                                 */

static int make_capsule(lua_State *L, int versioned) {
  const dlpack_lua_api *api = need_api(L);
  void *m, *cap;
  const DLTensor *dl;
  lua_settop(L, 1);
  spec_arg(L, 1);
  m = fab_build(L, 1, versioned);
  dl = versioned ? &((DLManagedTensorVersioned *)m)->dl_tensor : &((DLManagedTensor *)m)->dl_tensor;
  lua_pushinteger(L, (lua_Integer)(uintptr_t)dl->data);
  cap = api->capsule_new(m, versioned);
  if (cap == NULL) {
    fab_release(m);
    return luaL_error(L, "fabricate: capsule_new returned NULL");
  }
  lua_pushlightuserdata(L, cap);
  lua_insert(L, -2);
  return 2;
}

static int f_versioned(lua_State *L) { return make_capsule(L, 1); }
static int f_legacy(lua_State *L) { return make_capsule(L, 0); }

static int make_raw(lua_State *L, int versioned) {
  void *m;
  lua_settop(L, 1);
  spec_arg(L, 1);
  m = fab_build(L, 1, versioned);
  lua_pushlightuserdata(L, m);
  lua_pushstring(L, versioned ? "dltensor_versioned" : "dltensor");
  return 2;
}

static int f_raw_versioned(lua_State *L) { return make_raw(L, 1); }
static int f_raw_legacy(lua_State *L) { return make_raw(L, 0); }

/* __dlpack of a C producer that does not link the module: it makes its capsule through the
 * registry function table, as API.md asks. Upvalue 1 is the spec. Records its calls in self. */
static int c_dlpack(lua_State *L) {
  const dlpack_lua_api *api = need_api(L);
  int legacy;
  void *m, *cap;
  if (lua_istable(L, 1)) {
    lua_Integer calls;
    lua_getfield(L, 1, "calls");
    calls = lua_tointeger(L, -1);
    lua_pop(L, 1);
    lua_pushinteger(L, calls + 1);
    lua_setfield(L, 1, "calls");
    lua_pushvalue(L, 2);
    lua_setfield(L, 1, "opts");
  }
  lua_getfield(L, lua_upvalueindex(1), "legacy");
  legacy = lua_toboolean(L, -1);
  lua_pop(L, 1);
  m = fab_build(L, lua_upvalueindex(1), !legacy);
  if (api->version < 3) {
    cap = api->capsule_new(m, !legacy);
    if (cap == NULL) {
      fab_release(m);
      return luaL_error(L, "fabricate: capsule_new returned NULL");
    }
    lua_pushlightuserdata(L, cap);
    return 1;
  }
  api->push_capsule(L, m, !legacy); /* handed back when L closes if the script drops it */
  return 1;
}

static int c_dlpack_device(lua_State *L) {
  if (lua_istable(L, 1)) {
    lua_Integer calls;
    lua_getfield(L, 1, "device_calls");
    calls = lua_tointeger(L, -1);
    lua_pop(L, 1);
    lua_pushinteger(L, calls + 1);
    lua_setfield(L, 1, "device_calls");
  }
  lua_pushinteger(L, opt_int(L, lua_upvalueindex(1), "device_type", kDLCPU, NULL));
  lua_pushinteger(L, opt_int(L, lua_upvalueindex(1), "device_id", 0, NULL));
  return 2;
}

/* What a test producer's __dlpack makes: the capsule form a C producer uses (push_capsule). */
static int f_c_producer(lua_State *L) {
  lua_settop(L, 1);
  spec_arg(L, 1);
  lua_newtable(L); /* 2: the producer */
  lua_newtable(L); /* 3: its metatable */
  lua_pushvalue(L, 1);
  lua_pushcclosure(L, c_dlpack, 1);
  lua_setfield(L, 3, "__dlpack");
  lua_pushvalue(L, 1);
  lua_pushcclosure(L, c_dlpack_device, 1);
  lua_setfield(L, 3, "__dlpack_device");
  lua_setmetatable(L, 2);
  return 1;
}

/* ------------------------------------------------------------------------ */
/* Counters and deleting                                                     */

/* The host's dlpack_lua_isolate_capsules for the calling state. */
static int f_isolate(lua_State *L) {
  need_api(L)->isolate_capsules(L);
  return 0;
}

static int f_deleted(lua_State *L) { lua_pushinteger(L, atomic_load(&g_deleted)); return 1; }
static int f_double_deletes(lua_State *L) { lua_pushinteger(L, atomic_load(&g_double)); return 1; }
static int f_tampered(lua_State *L) { lua_pushinteger(L, atomic_load(&g_tampered)); return 1; }

static int f_live(lua_State *L) {
  size_t n;
  pthread_mutex_lock(&g_lock);
  n = g_live.n;
  pthread_mutex_unlock(&g_lock);
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

static void call_deleter(void *managed, int versioned) {
  if (versioned) {
    DLManagedTensorVersioned *m = managed;
    if (m->deleter) m->deleter(m);
  } else {
    DLManagedTensor *m = managed;
    if (m->deleter) m->deleter(m);
  }
}

static int f_delete(lua_State *L) {
  void *p = lua_touserdata(L, 1);
  int found = 0, versioned = 0;
  size_t i;
  luaL_argexpected(L, lua_islightuserdata(L, 1), 1, "light userdata");
  pthread_mutex_lock(&g_lock);
  for (i = 0; i < g_live.n; i++) {
    if (g_live.items[i].managed == p) {
      found = 1;
      versioned = g_live.items[i].versioned;
      break;
    }
  }
  pthread_mutex_unlock(&g_lock);
  if (found) call_deleter(p, versioned);
  lua_pushboolean(L, found);
  return 1;
}

static int f_reclaim(lua_State *L) {
  fab_list orphans;
  size_t i;
  pthread_mutex_lock(&g_lock);
  orphans = g_orphans;
  memset(&g_orphans, 0, sizeof g_orphans);
  pthread_mutex_unlock(&g_lock);
  for (i = 0; i < orphans.n; i++) free_record(&orphans.items[i]);
  free(orphans.items);
  lua_pushinteger(L, (lua_Integer)orphans.n);
  return 1;
}

/* Frees what is left of NULL-deleter tensors when the state closes. */
static int sentinel_gc(lua_State *L) { return f_reclaim(L); }

typedef struct delete_job {
  void *managed;
  int versioned;
} delete_job;

static void *delete_main(void *arg) {
  delete_job *job = arg;
  call_deleter(job->managed, job->versioned);
  return NULL;
}

static int delete_on_thread(void *managed, int versioned) {
  pthread_t th;
  delete_job job;
  job.managed = managed;
  job.versioned = versioned;
  if (pthread_create(&th, NULL, delete_main, &job) != 0) return 0;
  pthread_join(th, NULL);
  return 1;
}

static int f_delete_on_thread(lua_State *L) {
  void *p = lua_touserdata(L, 1);
  int versioned = versioned_name(L, 2), has;
  luaL_argexpected(L, lua_islightuserdata(L, 1) && p != NULL, 1, "managed tensor pointer");
  has = versioned ? ((DLManagedTensorVersioned *)p)->deleter != NULL : ((DLManagedTensor *)p)->deleter != NULL;
  if (!delete_on_thread(p, versioned)) return luaL_error(L, "fabricate: pthread_create failed");
  lua_pushboolean(L, has);
  return 1;
}

/* ------------------------------------------------------------------------ */
/* Inspecting managed tensors                                                */

static void set_int(lua_State *L, const char *k, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

static void push_int_array(lua_State *L, const int64_t *a, int32_t n) {
  int32_t i;
  if (a == NULL) { lua_pushboolean(L, 0); return; }
  lua_createtable(L, n, 0);
  for (i = 0; i < n; i++) {
    lua_pushinteger(L, a[i]);
    lua_rawseti(L, -2, i + 1);
  }
}

/* A table of the fields of a managed tensor; shape/strides are false when NULL. */
static void push_info(lua_State *L, void *managed, int versioned) {
  const DLTensor *dl;
  lua_newtable(L);
  if (versioned) {
    const DLManagedTensorVersioned *m = managed;
    set_int(L, "major", m->version.major);
    set_int(L, "minor", m->version.minor);
    set_int(L, "flags", (lua_Integer)m->flags);
    lua_pushboolean(L, m->deleter != NULL);
    lua_setfield(L, -2, "has_deleter");
    if (m->version.major != DLPACK_MAJOR_VERSION) return;
    dl = &m->dl_tensor;
  } else {
    const DLManagedTensor *m = managed;
    lua_pushboolean(L, m->deleter != NULL);
    lua_setfield(L, -2, "has_deleter");
    dl = &m->dl_tensor;
  }
  lua_pushboolean(L, versioned);
  lua_setfield(L, -2, "versioned");
  set_int(L, "data", (lua_Integer)(uintptr_t)dl->data);
  set_int(L, "device_type", dl->device.device_type);
  set_int(L, "device_id", dl->device.device_id);
  set_int(L, "ndim", dl->ndim);
  set_int(L, "code", dl->dtype.code);
  set_int(L, "bits", dl->dtype.bits);
  set_int(L, "lanes", dl->dtype.lanes);
  set_int(L, "byte_offset", (lua_Integer)dl->byte_offset);
  if (dl->ndim >= 0 && dl->ndim <= 1024) {
    push_int_array(L, dl->shape, dl->ndim);
    lua_setfield(L, -2, "shape");
    push_int_array(L, dl->strides, dl->ndim);
    lua_setfield(L, -2, "strides");
  }
}

static int f_inspect(lua_State *L) {
  void *p = lua_touserdata(L, 1);
  int versioned = versioned_name(L, 2);
  luaL_argexpected(L, lua_islightuserdata(L, 1) && p != NULL, 1, "managed tensor pointer");
  push_info(L, p, versioned);
  return 1;
}

/* Reads `count` doubles of a float64 tensor (or floats of a float32 one) as laid out. */
static int push_values(lua_State *L, const DLTensor *dl) {
  int64_t idx[8] = {0}, count = 1, k, n;
  int32_t d;
  if (dl->ndim < 0 || dl->ndim > 8 || (dl->ndim > 0 && dl->shape == NULL) || dl->dtype.code != kDLFloat || dl->dtype.lanes != 1 ||
      (dl->dtype.bits != 32 && dl->dtype.bits != 64))
    return 0;
  for (d = 0; d < dl->ndim; d++) count *= dl->shape[d];
  lua_createtable(L, (int)count, 0);
  for (n = 0; n < count; n++) {
    int64_t off = 0, rem = n, stride = 1;
    for (d = dl->ndim - 1; d >= 0; d--) {
      idx[d] = rem % dl->shape[d];
      rem /= dl->shape[d];
    }
    for (d = dl->ndim - 1; d >= 0; d--) {
      k = dl->strides ? dl->strides[d] : stride;
      off += idx[d] * k;
      stride *= dl->shape[d];
    }
    {
      const char *base = (const char *)dl->data + dl->byte_offset;
      if (dl->dtype.bits == 64) {
        double v;
        memcpy(&v, base + off * 8, 8);
        lua_pushnumber(L, v);
      } else {
        float v;
        memcpy(&v, base + off * 4, 4);
        lua_pushnumber(L, v);
      }
    }
    lua_rawseti(L, -2, n + 1);
  }
  return 1;
}

static int f_addr(lua_State *L) {
  luaL_argexpected(L, lua_islightuserdata(L, 1), 1, "light userdata");
  lua_pushinteger(L, (lua_Integer)(uintptr_t)lua_touserdata(L, 1));
  return 1;
}

/* ------------------------------------------------------------------------ */
/* The capsule functions of the API table                                    */

static int f_consume(lua_State *L) {
  const dlpack_lua_api *api = need_api(L);
  void *managed = NULL;
  int versioned = 0, rc;
  luaL_argexpected(L, lua_islightuserdata(L, 1), 1, "light userdata");
  rc = api->capsule_consume(lua_touserdata(L, 1), &managed, &versioned);
  lua_pushinteger(L, rc);
  if (rc != DLPACK_LUA_OK) return 1;
  lua_pushlightuserdata(L, managed);
  lua_pushstring(L, versioned ? "dltensor_versioned" : "dltensor");
  return 3;
}

typedef struct race {
  const dlpack_lua_api *api;
  void *capsule;
  atomic_int ready;
  atomic_int go;
} race;

typedef struct racer {
  race *r;
  int rc;
  void *managed;
  int versioned;
} racer;

static void *race_main(void *arg) {
  racer *me = arg;
  atomic_fetch_add(&me->r->ready, 1);
  while (!atomic_load(&me->r->go)) { /* spin: start together */
  }
  me->rc = me->r->api->capsule_consume(me->r->capsule, &me->managed, &me->versioned);
  return NULL;
}

/* n threads consume one capsule at once; the winner's tensor is then deleted. */
static int f_race_consume(lua_State *L) {
  race r;
  racer racers[64];
  pthread_t th[64];
  int n = (int)luaL_optinteger(L, 2, 8), i, started = 0, ok = 0, consumed = 0, other = 0;
  luaL_argexpected(L, lua_islightuserdata(L, 1), 1, "capsule");
  luaL_argcheck(L, n >= 1 && n <= 64, 2, "1..64 threads");
  r.api = need_api(L);
  r.capsule = lua_touserdata(L, 1);
  atomic_init(&r.ready, 0);
  atomic_init(&r.go, 0);
  for (i = 0; i < n; i++) {
    racers[i].r = &r;
    racers[i].rc = -1;
    racers[i].managed = NULL;
    racers[i].versioned = 0;
    if (pthread_create(&th[i], NULL, race_main, &racers[i]) != 0) break;
    started++;
  }
  while (atomic_load(&r.ready) < started) {
  }
  atomic_store(&r.go, 1);
  for (i = 0; i < started; i++) pthread_join(th[i], NULL);
  for (i = 0; i < started; i++) {
    if (racers[i].rc == DLPACK_LUA_OK) {
      ok++;
      if (racers[i].managed) call_deleter(racers[i].managed, racers[i].versioned);
    } else if (racers[i].rc == DLPACK_LUA_CONSUMED) {
      consumed++;
    } else {
      other++;
    }
  }
  lua_pushinteger(L, ok);
  lua_pushinteger(L, consumed);
  lua_pushinteger(L, other);
  return 3;
}

/* ------------------------------------------------------------------------ */
/* Other lua_States                                                          */

/* Reads package.path and package.cpath of L (the strings stay reachable from package). */
static void copy_paths(lua_State *L, const char **path, const char **cpath) {
  *path = *cpath = NULL;
  lua_getglobal(L, "package");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "path");
    *path = lua_tostring(L, -1);
    lua_getfield(L, -2, "cpath");
    *cpath = lua_tostring(L, -1);
    lua_pop(L, 2);
  }
  lua_pop(L, 1);
}

static void set_paths(lua_State *L2, const char *path, const char *cpath) {
  lua_getglobal(L2, "package");
  if (path) { lua_pushstring(L2, path); lua_setfield(L2, -2, "path"); }
  if (cpath) { lua_pushstring(L2, cpath); lua_setfield(L2, -2, "cpath"); }
  lua_pop(L2, 1);
}

/* In the new state: export the tensor at 1 (legacy when 2 is true). */
static int export_in_state(lua_State *L2) {
  const dlpack_lua_api *api = need_api(L2);
  void *m = lua_toboolean(L2, 2) ? (void *)api->export_legacy(L2, 1) : (void *)api->export_versioned(L2, 1);
  lua_pushlightuserdata(L2, m);
  return 1;
}

static int f_c_export(lua_State *L) {
  static const char *const forms[] = {"versioned", "legacy", NULL};
  const dlpack_lua_api *api = need_api(L);
  if (luaL_checkoption(L, 2, "versioned", forms) == 1) {
    DLManagedTensor *m = api->export_legacy(L, 1);
    if (m->deleter) m->deleter(m);
    lua_pushinteger(L, 0);
  } else {
    DLManagedTensorVersioned *m = api->export_versioned(L, 1);
    lua_pushinteger(L, (lua_Integer)m->flags);
    if (m->deleter) m->deleter(m);
  }
  return 1;
}

static int f_export_and_close(lua_State *L) {
  static const char *const forms[] = {"versioned", "legacy", NULL};
  int legacy = luaL_checkoption(L, 1, "versioned", forms);
  const char *path, *cpath;
  lua_State *L2;
  void *m;
  const DLTensor *dl;
  copy_paths(L, &path, &cpath);
  L2 = luaL_newstate();
  if (L2 == NULL) return luaL_error(L, "fabricate: luaL_newstate failed");
  luaL_openlibs(L2);
  set_paths(L2, path, cpath);
  lua_pushcfunction(L2, export_in_state);
  if (luaL_dostring(L2, "local d = require 'dlpack'\n"
                        "return d.tensor({{1.5, 2.5, 3.5}, {4.5, 5.5, 6.5}}):transpose(1, 2)") != LUA_OK) {
    lua_pushstring(L, lua_tostring(L2, -1));
    lua_close(L2);
    return lua_error(L);
  }
  lua_pushboolean(L2, legacy);
  if (lua_pcall(L2, 2, 1, 0) != LUA_OK) {
    lua_pushstring(L, lua_tostring(L2, -1));
    lua_close(L2);
    return lua_error(L);
  }
  m = lua_touserdata(L2, -1);
  lua_close(L2); /* the tensor must outlive its state */
  if (m == NULL) return luaL_error(L, "fabricate: export returned NULL");
  dl = legacy ? &((DLManagedTensor *)m)->dl_tensor : &((DLManagedTensorVersioned *)m)->dl_tensor;
  lua_pushboolean(L, 1);
  if (!push_values(L, dl)) lua_pushnil(L);
  push_info(L, m, !legacy);
  if (!delete_on_thread(m, !legacy)) return luaL_error(L, "fabricate: pthread_create failed");
  return 3;
}

typedef struct thread_job {
  const char *code;
  size_t code_len;
  const char *path, *cpath;
  void *capsule;
  int index;
  pthread_barrier_t *barrier;
  int waited;
  int ok;
  int type;
  int isfloat;
  lua_Integer ival;
  lua_Number nval;
  void *pval;
  char *sval;
  size_t slen;
} thread_job;

static void job_wait(thread_job *job) {
  if (!job->waited) {
    job->waited = 1;
    pthread_barrier_wait(job->barrier);
  }
}

static int thread_wait_all(lua_State *L2) {
  job_wait(lua_touserdata(L2, lua_upvalueindex(1)));
  return 0;
}

static void job_string(thread_job *job, const char *s, size_t len) {
  job->type = LUA_TSTRING;
  job->sval = malloc(len + 1);
  if (job->sval) {
    memcpy(job->sval, s, len);
    job->sval[len] = 0;
    job->slen = len;
  }
}

static void *thread_main(void *arg) {
  thread_job *job = arg;
  lua_State *L2 = luaL_newstate();
  job->type = LUA_TNIL;
  if (L2 == NULL) {
    job_wait(job);
    job_string(job, "luaL_newstate failed", 20);
    return NULL;
  }
  luaL_openlibs(L2);
  set_paths(L2, job->path, job->cpath);
  lua_pushlightuserdata(L2, job);
  lua_pushcclosure(L2, thread_wait_all, 1);
  lua_setglobal(L2, "wait_all");
  if (luaL_loadbuffer(L2, job->code, job->code_len, "=thread") == LUA_OK) {
    if (job->capsule) lua_pushlightuserdata(L2, job->capsule);
    else lua_pushnil(L2);
    lua_pushinteger(L2, job->index);
    job->ok = lua_pcall(L2, 2, 1, 0) == LUA_OK;
  }
  job_wait(job);
  switch (lua_type(L2, -1)) {
    case LUA_TBOOLEAN: job->type = LUA_TBOOLEAN; job->ival = lua_toboolean(L2, -1); break;
    case LUA_TNUMBER:
      job->type = LUA_TNUMBER;
      job->isfloat = !lua_isinteger(L2, -1);
      job->ival = lua_tointeger(L2, -1);
      job->nval = lua_tonumber(L2, -1);
      break;
    case LUA_TLIGHTUSERDATA: job->type = LUA_TLIGHTUSERDATA; job->pval = lua_touserdata(L2, -1); break;
    case LUA_TSTRING: {
      size_t len;
      const char *s = lua_tolstring(L2, -1, &len);
      job_string(job, s, len);
      break;
    }
    case LUA_TNIL: break;
    default: {
      const char *s = luaL_tolstring(L2, -1, NULL);
      job_string(job, s, strlen(s));
      break;
    }
  }
  lua_close(L2);
  return NULL;
}

/* Runs chunk `code` in n new lua_States on n threads at once; each gets
 * (capsule or nil, thread index) and a global wait_all() that waits for all. */
static int f_run_threads(lua_State *L) {
  size_t len;
  const char *code = luaL_checklstring(L, 1, &len);
  int n = (int)luaL_optinteger(L, 2, 1), i, started = 0;
  void *cap = lua_islightuserdata(L, 3) ? lua_touserdata(L, 3) : NULL;
  const char *path, *cpath;
  thread_job jobs[64];
  pthread_t th[64];
  pthread_barrier_t barrier;
  luaL_argcheck(L, n >= 1 && n <= 64, 2, "1..64 threads");
  copy_paths(L, &path, &cpath);
  if (pthread_barrier_init(&barrier, NULL, (unsigned)n) != 0) return luaL_error(L, "fabricate: barrier");
  for (i = 0; i < n; i++) {
    memset(&jobs[i], 0, sizeof jobs[i]);
    jobs[i].code = code;
    jobs[i].code_len = len;
    jobs[i].path = path;
    jobs[i].cpath = cpath;
    jobs[i].capsule = cap;
    jobs[i].index = i + 1;
    jobs[i].barrier = &barrier;
    if (pthread_create(&th[i], NULL, thread_main, &jobs[i]) != 0) break;
    started++;
  }
  if (started < n) { /* cannot happen in practice; the barrier would hang */
    for (i = 0; i < started; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&barrier);
    return luaL_error(L, "fabricate: pthread_create failed");
  }
  for (i = 0; i < n; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&barrier);
  lua_createtable(L, n, 0);
  for (i = 0; i < n; i++) {
    thread_job *job = &jobs[i];
    lua_createtable(L, 0, 2);
    lua_pushboolean(L, job->ok);
    lua_setfield(L, -2, "ok");
    switch (job->type) {
      case LUA_TBOOLEAN: lua_pushboolean(L, (int)job->ival); break;
      case LUA_TNUMBER:
        if (job->isfloat) lua_pushnumber(L, job->nval);
        else lua_pushinteger(L, job->ival);
        break;
      case LUA_TLIGHTUSERDATA: lua_pushlightuserdata(L, job->pval); break;
      case LUA_TSTRING:
        if (job->sval) lua_pushlstring(L, job->sval, job->slen);
        else lua_pushliteral(L, "(out of memory)");
        break;
      default: lua_pushnil(L); break;
    }
    lua_setfield(L, -2, "value");
    free(job->sval);
    job->sval = NULL;
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* ------------------------------------------------------------------------ */
/* A process-wide mailbox, to pass capsules between states on threads        */

#define FAB_BOX 64
static pthread_mutex_t g_box_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_box_cond = PTHREAD_COND_INITIALIZER;
static void *g_box[FAB_BOX];
static int g_box_n;

static int f_post(lua_State *L) {
  int ok = 0;
  luaL_argexpected(L, lua_islightuserdata(L, 1), 1, "light userdata");
  pthread_mutex_lock(&g_box_lock);
  if (g_box_n < FAB_BOX) {
    g_box[g_box_n++] = lua_touserdata(L, 1);
    ok = 1;
    pthread_cond_broadcast(&g_box_cond);
  }
  pthread_mutex_unlock(&g_box_lock);
  if (!ok) return luaL_error(L, "fabricate: mailbox full");
  return 0;
}

/* Waits up to `seconds` (default 10) for a posted value; nil on timeout. */
static int f_receive(lua_State *L) {
  lua_Number seconds = luaL_optnumber(L, 1, 10);
  struct timespec until;
  void *p = NULL;
  int got = 0, i;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += (time_t)seconds;
  until.tv_nsec += (long)((seconds - (lua_Number)(time_t)seconds) * 1e9);
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&g_box_lock);
  while (g_box_n == 0)
    if (pthread_cond_timedwait(&g_box_cond, &g_box_lock, &until) != 0) break;
  if (g_box_n > 0) {
    p = g_box[0];
    for (i = 1; i < g_box_n; i++) g_box[i - 1] = g_box[i];
    g_box_n--;
    got = 1;
  }
  pthread_mutex_unlock(&g_box_lock);
  if (got) lua_pushlightuserdata(L, p);
  else lua_pushnil(L);
  return 1;
}

/* ------------------------------------------------------------------------ */
/* Notes: strings a chunk leaves for the test, also from finalizers that run during lua_close */

#define FAB_NOTES 256
static pthread_mutex_t g_notes_lock = PTHREAD_MUTEX_INITIALIZER;
static char *g_notes[FAB_NOTES];
static int g_notes_n;

static int f_note(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  char *copy = malloc(len + 1);
  if (!copy) return luaL_error(L, "fabricate: out of memory");
  memcpy(copy, s, len + 1);
  pthread_mutex_lock(&g_notes_lock);
  if (g_notes_n < FAB_NOTES) g_notes[g_notes_n++] = copy;
  else free(copy);
  pthread_mutex_unlock(&g_notes_lock);
  return 0;
}

/* -> the notes left since the last call, in order; clears them */
static int f_notes(lua_State *L) {
  char *notes[FAB_NOTES];
  int n;
  pthread_mutex_lock(&g_notes_lock);
  n = g_notes_n;
  memcpy(notes, g_notes, (size_t)n * sizeof notes[0]);
  g_notes_n = 0;
  pthread_mutex_unlock(&g_notes_lock);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushstring(L, notes[i]);
    lua_rawseti(L, -2, i + 1);
  }
  for (int i = 0; i < n; i++) free(notes[i]);
  return 1;
}


/* ------------------------------------------------------------------------ */
/* Raw descriptors for the dlpack.ipc fuzzer: what a hostile peer does that Lua cannot */

#ifdef __linux__
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <unistd.h>

#ifndef F_ADD_SEALS /* older C libraries; Linux's values */
#define F_ADD_SEALS 1033
#define F_GET_SEALS 1034
#endif
#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif
#define FAB_MAX_SEND_FDS 253  /* SCM_MAX_FD: the most one SCM_RIGHTS message takes */
#define FAB_MAX_RECV_FDS 16
#define FAB_SHMEM_MAGIC 0x01021994

/* nil, strerror(err), err: the failure result of every ipc_ helper */
static int ipc_fail(lua_State *L, int err) {
  lua_pushnil(L);
  lua_pushstring(L, strerror(err));
  lua_pushinteger(L, err);
  return 3;
}

static int ipc_fd_arg(lua_State *L, int idx) {
  lua_Integer fd = luaL_checkinteger(L, idx);
  luaL_argcheck(L, fd >= 0 && fd <= INT32_MAX, idx, "not a descriptor");
  return (int)fd;
}

/* ipc_connect(path): a connected SOCK_SEQPACKET socket (blocking, close-on-exec) */
static int f_ipc_connect(lua_State *L) {
  size_t len;
  const char *path = luaL_checklstring(L, 1, &len);
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  luaL_argcheck(L, len > 0 && len < sizeof a.sun_path, 1, "bad socket path");
  socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (path[0] == '@' ? 0 : 1));
  memcpy(a.sun_path, path, len);
  if (path[0] == '@') a.sun_path[0] = '\0'; /* the abstract namespace */
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return ipc_fail(L, errno);
  if (connect(fd, (struct sockaddr *)&a, alen) != 0) {
    int err = errno;
    close(fd);
    return ipc_fail(L, err);
  }
  lua_pushinteger(L, fd);
  return 1;
}

/* ipc_send(fd, bytes [, fds]): one record, never waiting; false, "EAGAIN" when the queue is full */
static int f_ipc_send(lua_State *L) {
  int sock = ipc_fd_arg(L, 1), nfds = 0, fds[FAB_MAX_SEND_FDS];
  size_t n;
  const char *b = luaL_checklstring(L, 2, &n);
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    nfds = (int)luaL_len(L, 3);
    luaL_argcheck(L, nfds >= 0 && nfds <= FAB_MAX_SEND_FDS, 3, "0 to 253 descriptors");
    for (int i = 0; i < nfds; i++) {
      lua_rawgeti(L, 3, i + 1);
      fds[i] = ipc_fd_arg(L, -1);
      lua_pop(L, 1);
    }
  }
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * FAB_MAX_SEND_FDS)];
  } control;
  struct iovec iov = {(void *)b, n};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  memset(&control, 0, sizeof control);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (nfds > 0) {
    msg.msg_control = control.buf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
  }
  ssize_t sent;
  do sent = sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  while (sent < 0 && errno == EINTR);
  if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "EAGAIN");
    return 2;
  }
  if (sent < 0) return ipc_fail(L, errno);
  lua_pushboolean(L, (size_t)sent == n);
  return 1;
}

/* ipc_recv(fd): one record and the descriptors attached (close-on-exec), never waiting */
static int f_ipc_recv(lua_State *L) {
  int sock = ipc_fd_arg(L, 1);
  char b[4096];
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * FAB_MAX_RECV_FDS)];
  } control;
  struct iovec iov = {b, sizeof b};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.buf;
  msg.msg_controllen = sizeof control.buf;
  ssize_t n;
  do n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "EAGAIN");
    return 2;
  }
  if (n < 0) return ipc_fail(L, errno);
  lua_pushlstring(L, b, (size_t)n);
  lua_newtable(L);
  int k = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      lua_pushinteger(L, fd);
      lua_rawseti(L, -2, ++k);
    }
  }
  if (n == 0 && k == 0) { /* the end of the stream, or an empty record: the caller tells them apart */
    lua_pushboolean(L, (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0);
    lua_pushliteral(L, "empty");
    return 4;
  }
  lua_pushboolean(L, (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0);
  return 3;
}

/* ipc_make_fd(kind, size): the descriptor kinds a hostile peer may attach (see the header) */
static int f_ipc_make_fd(lua_State *L) {
  static const char *const kinds[] = {"memfd", "hugetlb", "file", "pipe", "socket", NULL};
  int kind = luaL_checkoption(L, 1, NULL, kinds), fd = -1, pair[2], err;
  lua_Integer size = luaL_optinteger(L, 2, 0);
  luaL_argcheck(L, size >= 0, 2, "a size, 0 or more");
  switch (kind) {
  case 0:
  case 1:
    fd = memfd_create("fuzzipc", MFD_CLOEXEC | MFD_ALLOW_SEALING | (kind == 1 ? MFD_HUGETLB : 0));
    break;
  case 2:
    fd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) { /* no O_TMPFILE there */
      char name[] = "/tmp/fuzzipc-XXXXXX";
      fd = mkostemp(name, O_CLOEXEC);
      if (fd >= 0) unlink(name);
    }
    break;
  case 3:
    if (pipe2(pair, O_CLOEXEC) == 0) close(pair[1]), fd = pair[0];
    break;
  default:
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0) close(pair[1]), fd = pair[0];
    break;
  }
  if (fd < 0) return ipc_fail(L, errno);
  if (kind <= 2 && ftruncate(fd, (off_t)size) != 0) {
    err = errno;
    close(fd);
    return ipc_fail(L, err);
  }
  lua_pushinteger(L, fd);
  return 1;
}

static int f_ipc_seal(lua_State *L) {
  if (fcntl(ipc_fd_arg(L, 1), F_ADD_SEALS, (int)luaL_checkinteger(L, 2)) != 0) return ipc_fail(L, errno);
  lua_pushboolean(L, 1);
  return 1;
}

/* ipc_write(fd, offset, bytes): all of them with pwrite */
static int f_ipc_write(lua_State *L) {
  int fd = ipc_fd_arg(L, 1);
  lua_Integer at = luaL_checkinteger(L, 2);
  size_t n, done = 0;
  const char *b = luaL_checklstring(L, 3, &n);
  luaL_argcheck(L, at >= 0, 2, "an offset, 0 or more");
  while (done < n) {
    ssize_t w = pwrite(fd, b + done, n - done, (off_t)at + (off_t)done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return ipc_fail(L, w < 0 ? errno : EIO);
    done += (size_t)w;
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* ipc_read(fd, offset, n): up to n bytes with pread (fewer at the end of the file) */
static int f_ipc_read(lua_State *L) {
  int fd = ipc_fd_arg(L, 1);
  lua_Integer at = luaL_checkinteger(L, 2), n = luaL_checkinteger(L, 3);
  luaL_argcheck(L, at >= 0, 2, "an offset, 0 or more");
  luaL_argcheck(L, n >= 0 && n <= (1 << 26), 3, "0 to 2^26 bytes");
  char *p = malloc(n > 0 ? (size_t)n : 1);
  size_t done = 0;
  if (!p) return ipc_fail(L, ENOMEM);
  while (done < (size_t)n) {
    ssize_t r = pread(fd, p + done, (size_t)n - done, (off_t)at + (off_t)done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      free(p);
      return ipc_fail(L, err);
    }
    if (r == 0) break;
    done += (size_t)r;
  }
  lua_pushlstring(L, p, done); /* (a memory error here leaks p: a test module) */
  free(p);
  return 1;
}

/* ipc_reopen(fd): the same file opened again, read-only, as dlpack.ipc sends readonly memory */
static int f_ipc_reopen(lua_State *L) {
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", ipc_fd_arg(L, 1));
  int fd = open(proc, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ipc_fail(L, errno);
  lua_pushinteger(L, fd);
  return 1;
}

static int f_ipc_dup(lua_State *L) {
  int fd = fcntl(ipc_fd_arg(L, 1), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return ipc_fail(L, errno);
  lua_pushinteger(L, fd);
  return 1;
}

static int f_ipc_close(lua_State *L) {
  if (close(ipc_fd_arg(L, 1)) != 0) return ipc_fail(L, errno);
  lua_pushboolean(L, 1);
  return 1;
}

/* ipc_fd_info(fd): what the receiver of dlpack.ipc checks about a descriptor */
static int f_ipc_fd_info(lua_State *L) {
  int fd = ipc_fd_arg(L, 1);
  struct stat st;
  struct statfs fs;
  if (fstat(fd, &st) != 0) return ipc_fail(L, errno);
  int seals = fcntl(fd, F_GET_SEALS), access = fcntl(fd, F_GETFL);
  lua_newtable(L);
  lua_pushinteger(L, (lua_Integer)st.st_size);
  lua_setfield(L, -2, "size");
  lua_pushinteger(L, seals < 0 ? -1 : seals);
  lua_setfield(L, -2, "seals");
  lua_pushboolean(L, access >= 0 && (access & O_ACCMODE) == O_RDONLY);
  lua_setfield(L, -2, "rdonly");
  lua_pushinteger(L, (lua_Integer)st.st_ino);
  lua_setfield(L, -2, "ino");
  lua_pushboolean(L, fstatfs(fd, &fs) == 0 && (unsigned long)fs.f_type == FAB_SHMEM_MAGIC);
  lua_setfield(L, -2, "shmem");
  return 1;
}

/* ipc_counts(): this process's open descriptors (/proc/self/fd, less the listing's own) and its
 * mappings of memfds (lines of /proc/self/maps naming "/memfd:"), the fuzzer's leak check */
static int f_ipc_counts(lua_State *L) {
  lua_Integer fds = 0, maps = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return ipc_fail(L, errno);
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') fds++;
  closedir(d);
  FILE *f = fopen("/proc/self/maps", "re");
  if (!f) return ipc_fail(L, errno);
  char line[4096];
  int at_start = 1;
  while (fgets(line, sizeof line, f)) {
    if (at_start && strstr(line, "/memfd:")) maps++;
    at_start = strchr(line, '\n') != NULL; /* a line longer than the buffer: count it once */
  }
  fclose(f);
  lua_pushinteger(L, fds - 1);
  lua_pushinteger(L, maps);
  return 2;
}
#endif

/* ------------------------------------------------------------------------ */

static const luaL_Reg fab_funcs[] = {
  {"note", f_note},
  {"notes", f_notes},
  {"versioned", f_versioned},
  {"legacy", f_legacy},
  {"raw_versioned", f_raw_versioned},
  {"raw_legacy", f_raw_legacy},
  {"c_producer", f_c_producer},
  {"isolate", f_isolate},
  {"deleted", f_deleted},
  {"live", f_live},
  {"double_deletes", f_double_deletes},
  {"tampered", f_tampered},
  {"delete", f_delete},
  {"reclaim", f_reclaim},
  {"delete_on_thread", f_delete_on_thread},
  {"inspect", f_inspect},
  {"addr", f_addr},
  {"consume", f_consume},
  {"race_consume", f_race_consume},
  {"export_and_close", f_export_and_close},
  {"c_export", f_c_export},
  {"run_threads", f_run_threads},
  {"post", f_post},
  {"receive", f_receive},
#ifdef __linux__
  {"ipc_connect", f_ipc_connect},
  {"ipc_send", f_ipc_send},
  {"ipc_recv", f_ipc_recv},
  {"ipc_make_fd", f_ipc_make_fd},
  {"ipc_seal", f_ipc_seal},
  {"ipc_write", f_ipc_write},
  {"ipc_read", f_ipc_read},
  {"ipc_reopen", f_ipc_reopen},
  {"ipc_dup", f_ipc_dup},
  {"ipc_close", f_ipc_close},
  {"ipc_fd_info", f_ipc_fd_info},
  {"ipc_counts", f_ipc_counts},
#endif
  {NULL, NULL}
};

DLPACK_LUA_API int luaopen_fabricate(lua_State *L) {
  static atomic_flag sentinel_made = ATOMIC_FLAG_INIT;
  luaL_newlib(L, fab_funcs);
  /* The first state that loads the module gets a sentinel whose finaliser frees the NULL-deleter
   * tensors left at its lua_close; states on other threads (run_threads) close earlier, while
   * the first one may still hold such tensors. */
  if (atomic_flag_test_and_set(&sentinel_made)) return 1;
  lua_newuserdatauv(L, 1, 0);
  lua_newtable(L);
  lua_pushcfunction(L, sentinel_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_setfield(L, LUA_REGISTRYINDEX, "fabricate.sentinel");
  return 1;
}
