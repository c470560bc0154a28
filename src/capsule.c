/* Capsules: process-wide, consume-once handles for unconsumed managed tensors.
 *
 * A capsule is a light userdata whose value is a handle, not a pointer: a tag
 * that no real address carries, a slot index, the slot's generation and the
 * versioned bit. Consuming a capsule bumps its slot's generation, so a second
 * consumption is detected always: after the memory was released, after the
 * slot was reused, from another lua_State or another thread (one mutex guards
 * the table). Slots are reused in FIFO order, which keeps generations young.
 *
 * Light userdata has no finaliser. Capsules are not tied to the lua_State that
 * made them (another state or thread may consume them after it closed), so
 * what scripts leave unconsumed is handed back to its producers when the last
 * lua_State that opened the module closes. Capsules made by C hosts are the
 * host's and are never handed back. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#if UINTPTR_MAX > 0xFFFFFFFFu
/* tag 0xD1C0 in bits 48-63 is a non-canonical address on x86-64 and AArch64 */
#define TAG_SHIFT 48
#define TAG_VALUE ((uintptr_t)0xD1C0)
#define VERSIONED_BIT ((uintptr_t)1 << 47)
#define GEN_SHIFT 20
#define GEN_MASK ((uintptr_t)0x7FFFFFF) /* 27 bits */
#define INDEX_BITS 20
#else
/* 32-bit: 0xF0000000 and up is kernel space, never a user pointer */
#define TAG_SHIFT 28
#define TAG_VALUE ((uintptr_t)0xF)
#define VERSIONED_BIT ((uintptr_t)1 << 27)
#define GEN_SHIFT 14
#define GEN_MASK ((uintptr_t)0x1FFF) /* 13 bits */
#define INDEX_BITS 14
#endif

#define MAX_SLOTS ((size_t)1 << INDEX_BITS)
#define CHUNK_SLOTS 1024
#define NO_SLOT ((size_t)-1)

typedef struct Slot {
  void *managed;   /* while live */
  int from_lua;    /* made by a script, so handed back when the last state closes */
  size_t next_free;
  uint32_t gen;
  unsigned char live;
  unsigned char versioned;
} Slot;

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static Slot *chunks[MAX_SLOTS / CHUNK_SLOTS + 1];
static size_t slot_count; /* slots ever handed out */
static size_t free_head = NO_SLOT, free_tail = NO_SLOT;

static Slot *slot_at(size_t i) {
  return &chunks[i / CHUNK_SLOTS][i % CHUNK_SLOTS];
}

static void *encode(size_t index, uint32_t gen, int versioned) {
  uintptr_t h = (TAG_VALUE << TAG_SHIFT) | ((uintptr_t)gen << GEN_SHIFT) | (uintptr_t)index;
  if (versioned) h |= VERSIONED_BIT;
  return (void *)h;
}

/* Split a handle; 0 when p is not one of ours (caller holds the lock). */
static int decode(void *p, size_t *index, uint32_t *gen, int *versioned) {
  uintptr_t h = (uintptr_t)p;
  if ((h >> TAG_SHIFT) != TAG_VALUE) return 0;
  *index = h & (MAX_SLOTS - 1);
  *gen = (uint32_t)((h >> GEN_SHIFT) & GEN_MASK);
  *versioned = (h & VERSIONED_BIT) != 0;
  return *index < slot_count;
}

void *dlp_capsule_new(void *managed, int versioned, int from_lua) {
  size_t i;
  Slot *s;
  pthread_mutex_lock(&table_lock);
  if (free_head != NO_SLOT) {
    i = free_head;
    free_head = slot_at(i)->next_free;
    if (free_head == NO_SLOT) free_tail = NO_SLOT;
  } else {
    i = slot_count;
    if (i == MAX_SLOTS) goto full;
    if (i % CHUNK_SLOTS == 0) {
      chunks[i / CHUNK_SLOTS] = calloc(CHUNK_SLOTS, sizeof(Slot));
      if (!chunks[i / CHUNK_SLOTS]) goto full;
    }
    slot_count++;
  }
  s = slot_at(i);
  s->managed = managed;
  s->from_lua = from_lua;
  s->live = 1;
  s->versioned = (unsigned char)(versioned != 0);
  void *handle = encode(i, s->gen, versioned);
  pthread_mutex_unlock(&table_lock);
  return handle;
full:
  pthread_mutex_unlock(&table_lock);
  return NULL;
}

/* Mark slot i consumed and queue it for reuse (caller holds the lock). */
static void retire(size_t i) {
  Slot *s = slot_at(i);
  s->live = 0;
  s->managed = NULL;
  s->gen = (uint32_t)((s->gen + 1) & GEN_MASK);
  s->next_free = NO_SLOT;
  if (free_tail != NO_SLOT) slot_at(free_tail)->next_free = i;
  else free_head = i;
  free_tail = i;
}

int dlp_capsule_consume(void *capsule, void **managed, int *versioned) {
  size_t i;
  uint32_t gen;
  int result = DLPACK_LUA_NOT_A_CAPSULE;
  pthread_mutex_lock(&table_lock);
  if (decode(capsule, &i, &gen, versioned)) {
    Slot *s = slot_at(i);
    if (s->live && s->gen == gen) {
      *managed = s->managed;
      retire(i);
      result = DLPACK_LUA_OK;
    } else {
      result = DLPACK_LUA_CONSUMED;
    }
  }
  pthread_mutex_unlock(&table_lock);
  return result;
}

int dlp_capsule_state(void *p, int *versioned, int *consumed) {
  size_t i;
  uint32_t gen;
  int found;
  pthread_mutex_lock(&table_lock);
  found = decode(p, &i, &gen, versioned);
  if (found) {
    Slot *s = slot_at(i);
    /* the current generation is live or free for the next capsule; older ones were consumed */
    if (gen == s->gen) {
      found = s->live;
      *consumed = 0;
    } else {
      *consumed = 1;
    }
  }
  pthread_mutex_unlock(&table_lock);
  return found;
}

static int open_states; /* lua_States that opened the module and are not closed; under table_lock */

void dlp_capsule_state_opened(void) {
  pthread_mutex_lock(&table_lock);
  open_states++;
  pthread_mutex_unlock(&table_lock);
}

/* When the last state closes, no script can consume what scripts left: hand it back. */
void dlp_capsule_state_closed(void) {
  size_t i = 0;
  pthread_mutex_lock(&table_lock);
  open_states--;
  for (;;) {
    void *managed = NULL;
    int versioned = 0;
    for (; i < slot_count && open_states == 0; i++) {
      Slot *s = slot_at(i);
      if (s->live && s->from_lua) {
        managed = s->managed;
        versioned = s->versioned;
        retire(i);
        break;
      }
    }
    pthread_mutex_unlock(&table_lock);
    if (!managed) return;
    dlp_managed_delete(managed, versioned); /* outside the lock: a deleter may make capsules */
    pthread_mutex_lock(&table_lock);
  }
}

/* ---- the Lua side ---- */

static void *check_capsule(lua_State *L, int arg) {
  void *p = lua_touserdata(L, arg);
  int versioned, consumed;
  if (lua_type(L, arg) != LUA_TLIGHTUSERDATA || !dlp_capsule_state(p, &versioned, &consumed))
    luaL_argexpected(L, 0, arg, "capsule");
  return p;
}

static int l_is_capsule(lua_State *L) {
  int versioned, consumed;
  lua_pushboolean(L, lua_type(L, 1) == LUA_TLIGHTUSERDATA &&
                         dlp_capsule_state(lua_touserdata(L, 1), &versioned, &consumed));
  return 1;
}

static int l_capsule_info(lua_State *L) {
  int versioned, consumed;
  dlp_capsule_state(check_capsule(L, 1), &versioned, &consumed);
  lua_createtable(L, 0, 3);
  lua_pushboolean(L, versioned);
  lua_setfield(L, -2, "versioned");
  lua_pushboolean(L, consumed);
  lua_setfield(L, -2, "consumed");
  lua_pushstring(L, consumed ? (versioned ? "used_dltensor_versioned" : "used_dltensor")
                             : (versioned ? "dltensor_versioned" : "dltensor"));
  lua_setfield(L, -2, "name");
  return 1;
}

/* Consume the capsule at arg or raise; the caller then owns *managed. */
void *dlp_capsule_take(lua_State *L, int arg, int *versioned, const char *what) {
  void *managed = NULL;
  int r = dlp_capsule_consume(check_capsule(L, arg), &managed, versioned);
  if (r == DLPACK_LUA_CONSUMED)
    luaL_error(L, "%s: the capsule was already consumed (a capsule can be consumed only once)", what);
  return managed;
}

static int l_release_capsule(lua_State *L) {
  int versioned;
  void *managed = dlp_capsule_take(L, 1, &versioned, "release_capsule");
  dlp_managed_delete(managed, versioned);
  return 0;
}

void dlp_capsule_register(lua_State *L, int module) {
  static const luaL_Reg functions[] = {
    {"is_capsule", l_is_capsule}, {"capsule_info", l_capsule_info}, {"release_capsule", l_release_capsule},
    {NULL, NULL},
  };
  dlp_register(L, module, functions);
}

/* ---- dlpack.unsafe: raw pointers in and out ---- */

static int check_name(lua_State *L, int arg) {
  static const char *const names[] = {"dltensor", "dltensor_versioned", NULL};
  return luaL_checkoption(L, arg, NULL, names);
}

static int l_adopt(lua_State *L) {
  void *managed = lua_touserdata(L, 1);
  if (lua_type(L, 1) != LUA_TLIGHTUSERDATA || !managed) luaL_argexpected(L, 0, 1, "non-NULL light userdata");
  int versioned = check_name(L, 2);
  void *capsule = dlp_capsule_new(managed, versioned, 1);
  if (!capsule) return luaL_error(L, "unsafe.adopt: too many unconsumed capsules");
  lua_pushlightuserdata(L, capsule);
  return 1;
}

static int l_take(lua_State *L) {
  int versioned;
  void *managed = dlp_capsule_take(L, 1, &versioned, "unsafe.take");
  lua_pushlightuserdata(L, managed);
  lua_pushstring(L, versioned ? "dltensor_versioned" : "dltensor");
  return 2;
}

void dlp_unsafe_register(lua_State *L, int module) {
  static const luaL_Reg functions[] = {{"adopt", l_adopt}, {"take", l_take}, {NULL, NULL}};
  dlp_register(L, module, functions);
}
