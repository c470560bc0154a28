/* Capsules: process-wide, consume-once handles for unconsumed managed tensors.
 *
 * A capsule is a light userdata whose value is a handle, not a pointer: a tag
 * that no real address carries, a slot index, the slot's generation and the
 * versioned bit. Consuming a capsule bumps its slot's generation, so a second
 * consumption is detected always: after the memory was released, after the
 * slot was reused, from another lua_State or another thread (one mutex guards
 * the table). Slots are reused in FIFO order, and a slot whose generation
 * would wrap is retired for good, so no handle is ever issued twice: a
 * process can make 2^47 capsules in all (2^20 slots of 2^27 generations).
 *
 * Light userdata has no finaliser. Capsules that scripts make (to_dlpack) are
 * not tied to the lua_State that made them (another state or thread may
 * consume them after it closed), so what scripts leave unconsumed is handed
 * back to its producers when the last lua_State that opened the module closes.
 * A capsule a C producer makes for a script (dlpack_lua_push_capsule) belongs
 * to that script's state and goes back when it closes. Capsules made by C
 * hosts for themselves (dlpack_lua_capsule_new) are never handed back. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#if UINTPTR_MAX > 0xFFFFFFFFu
/* tag 0xD1C0 in bits 48-63 is a non-canonical address on x86-64 and AArch64 */
#define TAG_SHIFT 48
#define TAG_VALUE ((uintptr_t)0xD1C0)
#define VERSIONED_BIT ((uintptr_t)1 << 47)
#define GEN_SHIFT 20
#define GEN_BITS 27
#define INDEX_BITS 20
#else
/* 32-bit: 0xF0000000 and up is kernel space, never a user pointer */
#define TAG_SHIFT 28
#define TAG_VALUE ((uintptr_t)0xF)
#define VERSIONED_BIT ((uintptr_t)1 << 27)
#define GEN_SHIFT 14
#define GEN_BITS 13
#define INDEX_BITS 14
#endif

/* A test build may make generations short, to reach the end of a slot's life quickly. */
#ifdef DLPACK_LUA_TEST_GEN_BITS
#undef GEN_BITS
#define GEN_BITS DLPACK_LUA_TEST_GEN_BITS
#endif
#define GEN_MASK (((uintptr_t)1 << GEN_BITS) - 1)
#define MAX_SLOTS ((size_t)1 << INDEX_BITS)
#define CHUNK_SLOTS 1024
#define NO_SLOT ((size_t)-1)

typedef struct Slot {
  void *managed;   /* while live */
  uint64_t holder; /* who gets it back unconsumed: DLP_CAPSULE_HOST, _SCRIPT or a state id */
  size_t next_free;
  uint32_t gen;    /* of the live or next capsule; GEN_MASK + 1 once the slot is retired */
  unsigned char live;
  unsigned char versioned;
} Slot;

/* The table's lock: a spin lock, since every critical section is a few dozen instructions (the
 * longest, once per CHUNK_SLOTS slots, is a calloc); a waiter yields after a short spin. */
static atomic_flag table_flag = ATOMIC_FLAG_INIT;

static void lock_table(void) {
  for (int spins = 0; atomic_flag_test_and_set_explicit(&table_flag, memory_order_acquire); spins++)
    if (spins >= 64) dlp_thread_yield();
}

static void unlock_table(void) {
  atomic_flag_clear_explicit(&table_flag, memory_order_release);
}
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

void *dlp_capsule_new(void *managed, int versioned, uint64_t holder) {
  size_t i;
  Slot *s;
  lock_table();
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
  s->holder = holder;
  s->live = 1;
  s->versioned = (unsigned char)(versioned != 0);
  void *handle = encode(i, s->gen, versioned);
  unlock_table();
  return handle;
full:
  unlock_table();
  return NULL;
}

/* Mark slot i consumed and queue it for reuse, unless its generations are used up: then it
 * stays retired, and every handle it gave out stays consumed (caller holds the lock). */
static void retire(size_t i) {
  Slot *s = slot_at(i);
  s->live = 0;
  s->managed = NULL;
  s->gen++;
  if (s->gen > GEN_MASK) return;
  s->next_free = NO_SLOT;
  if (free_tail != NO_SLOT) slot_at(free_tail)->next_free = i;
  else free_head = i;
  free_tail = i;
}

int dlp_capsule_consume(void *capsule, void **managed, int *versioned) {
  size_t i;
  uint32_t gen;
  int result = DLPACK_LUA_NOT_A_CAPSULE;
  lock_table();
  if (decode(capsule, &i, &gen, versioned)) {
    Slot *s = slot_at(i);
    if (s->gen != gen) {
      result = DLPACK_LUA_CONSUMED;
    } else if (s->live && s->versioned == *versioned) { /* a flipped versioned bit is no handle of ours */
      *managed = s->managed;
      retire(i);
      result = DLPACK_LUA_OK;
    }
  }
  unlock_table();
  return result;
}

int dlp_capsule_state(void *p, int *versioned, int *consumed) {
  size_t i;
  uint32_t gen;
  int found;
  lock_table();
  found = decode(p, &i, &gen, versioned);
  if (found) {
    Slot *s = slot_at(i);
    /* the current generation is live or free for the next capsule; older ones were consumed */
    if (gen == s->gen) {
      found = s->live && s->versioned == *versioned; /* a flipped versioned bit is no handle of ours */
      *consumed = 0;
    } else {
      *consumed = 1;
    }
  }
  unlock_table();
  return found;
}

static int open_states; /* lua_States that opened the module and are not closed; under the table's lock */

void dlp_capsule_state_opened(void) {
  lock_table();
  open_states++;
  unlock_table();
}

/* A state closed: what was made for it goes back, and what scripts left when it was the last
 * one (no script can consume those any more). */
void dlp_capsule_state_closed(uint64_t state) {
  size_t i = 0;
  lock_table();
  open_states--;
  for (;;) {
    void *managed = NULL;
    int versioned = 0;
    for (; i < slot_count; i++) {
      Slot *s = slot_at(i);
      if (s->live && (s->holder == state || (s->holder == DLP_CAPSULE_SCRIPT && open_states == 0))) {
        managed = s->managed;
        versioned = s->versioned;
        retire(i);
        break;
      }
    }
    unlock_table();
    if (!managed) return;
    dlp_managed_delete(managed, versioned); /* outside the lock: a deleter may make capsules */
    lock_table();
  }
}

/* States a host isolated, ever: while there is none, no export pays for a look at its state. */
static atomic_int isolated_states;

void dlp_capsule_isolate(dlp_State *st) {
  if (!st->isolated) atomic_fetch_add(&isolated_states, 1);
  st->isolated = 1;
}

uint64_t dlp_capsule_holder(lua_State *L) {
  dlp_State *st;
  if (atomic_load_explicit(&isolated_states, memory_order_relaxed) == 0) return DLP_CAPSULE_SCRIPT;
  st = dlp_state(L);
  return st && st->isolated ? st->id : DLP_CAPSULE_SCRIPT;
}

void dlp_capsule_push_for_state(lua_State *L, void *managed, int versioned, const char *what) {
  dlp_State *st;
  void *capsule = NULL;
  if (!managed) luaL_error(L, "%s: the managed tensor is NULL", what);
  st = dlp_state(L);
  if (st && !st->closing) capsule = dlp_capsule_new(managed, versioned, st->id);
  if (!capsule) {
    dlp_managed_delete(managed, versioned);
    luaL_error(L, "%s: %s", what, !st ? "the dlpack module is not open in this lua_State"
                                  : st->closing ? "this lua_State is closing" : "too many unconsumed capsules");
  }
  lua_pushlightuserdata(L, capsule);
}

/* ---- the Lua side ---- */

static void *check_capsule(lua_State *L, int arg) {
  void *p = lua_touserdata(L, arg);
  int versioned, consumed;
  if (lua_type(L, arg) != LUA_TLIGHTUSERDATA || !dlp_capsule_state(p, &versioned, &consumed))
    luaL_argexpected(L, 0, arg, "capsule");
  return p;
}

int dlp_capsule_peek(void *capsule, int (*look)(void *managed, int versioned)) {
  size_t i;
  uint32_t gen;
  int versioned, result = -1;
  lock_table();
  if (decode(capsule, &i, &gen, &versioned)) {
    Slot *s = slot_at(i);
    if (s->live && s->gen == gen && s->versioned == versioned) result = look(s->managed, versioned);
  }
  unlock_table();
  return result;
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
  int r = lua_type(L, arg) == LUA_TLIGHTUSERDATA ? dlp_capsule_consume(lua_touserdata(L, arg), &managed, versioned)
                                                 : DLPACK_LUA_NOT_A_CAPSULE;
  if (r == DLPACK_LUA_NOT_A_CAPSULE) luaL_argexpected(L, 0, arg, "capsule");
  if (r != DLPACK_LUA_OK)
    luaL_error(L, "%s: the capsule was already consumed (a capsule can be consumed only once)", what);
  return managed;
}

static int l_release_capsule(lua_State *L) {
  int versioned;
  void *managed = dlp_capsule_take(L, 1, &versioned, "dlpack.release_capsule");
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
