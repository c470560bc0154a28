/*
 * spec/c/host_threads.c: a host that hands the module its own job system
 * (dlpack_lua_set_parallel_for, docs/api.md "Threads"), so that large CPU
 * operations run on the host's threads instead of the module's pool. It prints
 * TAP (stage 30):
 *   - the same bytes with one thread, with a job system that runs the tasks
 *     inline (in order, and backwards), on one other thread, and on the host's
 *     own pool of 3 threads; with the module's pool again once it is unset;
 *   - every task runs exactly once per call, none calls parallel_for again
 *     (a split inside a task runs inline), and the host's threads ran tasks;
 *   - two lua_States computing at the same time on two threads, through the
 *     host's pool;
 *   - the setter reached through the registry's function table (version 5).
 *   make build/host-threads && ./build/host-threads
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "dlpack_lua.h"
#include "tap.h"

/* Large operations whose results depend on how work is split if anything does: elementwise with
 * broadcasting and strides, whole and per-dimension float sums, means and variances; max and
 * argmin over outer dims, whose parts of rows are joined (a job system's width is not known: they
 * split into a fixed number of parts there); and functions of whole lines (softmax, scans, sorts),
 * whose parts of lines each have a scratch of their own. The chunk returns all results as one
 * string. */
#define LINES                                                                                         \
  "  dlpack.softmax(a, 2):tobytes(), dlpack.log_softmax(a, 1):tobytes(), dlpack.cumsum(a, 1):tobytes(),\n" \
  "  dlpack.sort(a, 2):tobytes(), dlpack.argsort(a, 1):tobytes(), dlpack.sort(a, 2, {indices = false}):tobytes(),\n"
/* Only the functions of whole lines, each of which should call the job system. */
static const char *const LINE_WORK =
    "local dlpack = require 'dlpack'\n"
    "local a = dlpack.randn({517, 1031}, 'float32')\n"
    "return table.concat({\n" LINES "})\n";
static const char *const WORK =
    "local dlpack = require 'dlpack'\n"
    "local threads = ...\n"
    "if threads then dlpack.set_num_threads(threads) end\n"
    "dlpack.manual_seed(5)\n"
    "local a = dlpack.randn({517, 1031}, 'float32')\n"
    "local b = dlpack.randn({1031}, 'float32')\n"
    "local y = dlpack.randn({1000003}, 'float64')\n"
    "local rows = dlpack.randn({517 * 89, 3}, 'float32')\n"
    "local top, at = dlpack.max(a, 1)\n"
    "return table.concat({\n"
    "  top:tobytes(), at:tobytes(), dlpack.argmin(a.T, 2):tobytes(),\n"
    "  dlpack.add(a, b):tobytes(), dlpack.exp(a.T):tobytes(),\n"
    "  dlpack.add(rows, dlpack.tensor({1, 2, 3}, 'float32')):tobytes(),\n"
    "  string.format('%.17g %.17g %.17g', dlpack.sum(a), dlpack.sum(y), dlpack.var(y)),\n"
    "  dlpack.sum(a, 1):tobytes(), dlpack.mean(a, 2):tobytes(), dlpack.var(a.T, 2):tobytes(),\n"
    LINES
    "})\n";

/* Runs chunk in a fresh lua_State (threads: set_num_threads first, 0 for no call); returns its
 * result, malloc'd, or NULL after printing why. */
static char *run_chunk(const char *chunk, int threads) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luaL_requiref(L, "dlpack", luaopen_dlpack, 0);
  lua_pop(L, 1);
  char *result = NULL;
  if (luaL_loadstring(L, chunk) != LUA_OK) {
    printf("# %s\n", lua_tostring(L, -1));
  } else {
    if (threads) lua_pushinteger(L, threads);
    else lua_pushnil(L);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
      printf("# %s\n", lua_tostring(L, -1));
    } else {
      size_t len;
      const char *s = lua_tolstring(L, -1, &len);
      result = malloc(len + sizeof(size_t));
      memcpy(result, &len, sizeof len);
      memcpy(result + sizeof len, s, len);
    }
  }
  lua_close(L);
  return result;
}

static char *compute(int threads) {
  return run_chunk(WORK, threads);
}

static int same(const char *a, const char *b) {
  size_t la, lb;
  if (!a || !b) return 0;
  memcpy(&la, a, sizeof la);
  memcpy(&lb, b, sizeof lb);
  return la == lb && memcmp(a + sizeof la, b + sizeof lb, la) == 0;
}

/* ---- what every job system here records ---- */

static atomic_int calls, tasks_run, twice, nested, off_caller;
static _Thread_local int inside_call; /* this thread is in parallel_for (or in a task it runs) */

typedef struct Call {
  int64_t n;
  dlpack_lua_task task;
  void *task_ctx;
  atomic_int *seen; /* one per task: how often it ran */
  atomic_llong next;
  pthread_t caller;
} Call;

static void run_one(Call *c, int64_t i) {
  int was = inside_call;
  inside_call = 1;
  if (atomic_fetch_add(&c->seen[i], 1) != 0) atomic_fetch_add(&twice, 1);
  if (!pthread_equal(pthread_self(), c->caller)) atomic_fetch_add(&off_caller, 1);
  c->task(c->task_ctx, i);
  atomic_fetch_add(&tasks_run, 1);
  inside_call = was;
}

static void begin(Call *c, int64_t n, dlpack_lua_task task, void *task_ctx) {
  if (inside_call) atomic_fetch_add(&nested, 1);
  atomic_fetch_add(&calls, 1);
  c->n = n;
  c->task = task;
  c->task_ctx = task_ctx;
  c->seen = calloc((size_t)n, sizeof *c->seen);
  atomic_init(&c->next, 0);
  c->caller = pthread_self();
}

static void end(Call *c) {
  for (int64_t i = 0; i < c->n; i++)
    if (atomic_load(&c->seen[i]) != 1) atomic_fetch_add(&twice, 1); /* missed or repeated */
  free(c->seen);
}

/* ---- job systems ---- */

static void inline_forward(void *job_ctx, int64_t n, dlpack_lua_task task, void *task_ctx) {
  Call c;
  (void)job_ctx;
  begin(&c, n, task, task_ctx);
  for (int64_t i = 0; i < n; i++) run_one(&c, i);
  end(&c);
}

static void inline_backward(void *job_ctx, int64_t n, dlpack_lua_task task, void *task_ctx) {
  Call c;
  (void)job_ctx;
  begin(&c, n, task, task_ctx);
  for (int64_t i = n - 1; i >= 0; i--) run_one(&c, i);
  end(&c);
}

static void *run_all(void *p) {
  Call *c = p;
  for (int64_t i = 0; i < c->n; i++) run_one(c, i);
  return NULL;
}

/* every task on one thread of the host's, started for the call */
static void one_other_thread(void *job_ctx, int64_t n, dlpack_lua_task task, void *task_ctx) {
  Call c;
  pthread_t t;
  (void)job_ctx;
  begin(&c, n, task, task_ctx);
  if (pthread_create(&t, NULL, run_all, &c) != 0) run_all(&c);
  else pthread_join(t, NULL);
  end(&c);
}

/* The host's own pool: WORKERS threads that take calls from a queue of one slot at a time per
 * caller (callers queue on the lock), tasks claimed from a counter by the workers and the caller. */
enum { WORKERS = 3 };
typedef struct Pool {
  pthread_mutex_t lock;
  pthread_cond_t work, done;
  Call *call; /* the call being worked on */
  int busy_workers, stop;
  unsigned long generation;
  pthread_t threads[WORKERS];
} Pool;

static void claim_tasks(Call *c) {
  for (;;) {
    long long i = atomic_fetch_add(&c->next, 1);
    if (i >= c->n) return;
    run_one(c, i);
  }
}

static void *pool_worker(void *p) {
  Pool *pool = p;
  unsigned long seen = 0;
  pthread_mutex_lock(&pool->lock);
  for (;;) {
    while (!pool->stop && pool->generation == seen) pthread_cond_wait(&pool->work, &pool->lock);
    if (pool->stop) break;
    seen = pool->generation;
    Call *c = pool->call;
    if (!c) continue; /* woke after that call ended */
    pool->busy_workers++;
    pthread_mutex_unlock(&pool->lock);
    claim_tasks(c);
    pthread_mutex_lock(&pool->lock);
    if (--pool->busy_workers == 0) pthread_cond_broadcast(&pool->done);
  }
  pthread_mutex_unlock(&pool->lock);
  return NULL;
}

static pthread_mutex_t pool_callers = PTHREAD_MUTEX_INITIALIZER; /* one call in the pool at a time */

static void host_pool(void *job_ctx, int64_t n, dlpack_lua_task task, void *task_ctx) {
  Pool *pool = job_ctx;
  Call c;
  begin(&c, n, task, task_ctx);
  pthread_mutex_lock(&pool_callers);
  pthread_mutex_lock(&pool->lock);
  pool->call = &c;
  pool->generation++;
  pthread_cond_broadcast(&pool->work);
  pthread_mutex_unlock(&pool->lock);
  claim_tasks(&c);
  pthread_mutex_lock(&pool->lock);
  /* a worker that has not woken yet may still join: wait for the counter to run out first, then for every worker
   * that joined to leave */
  while (pool->busy_workers > 0 || atomic_load(&c.next) < c.n) pthread_cond_wait(&pool->done, &pool->lock);
  pool->call = NULL;
  pthread_mutex_unlock(&pool->lock);
  pthread_mutex_unlock(&pool_callers);
  end(&c);
}

static void *compute_on_thread(void *result) {
  *(char **)result = compute(0);
  return NULL;
}

static void reset_counts(void) {
  atomic_store(&calls, 0);
  atomic_store(&tasks_run, 0);
  atomic_store(&twice, 0);
  atomic_store(&nested, 0);
  atomic_store(&off_caller, 0);
}

int main(void) {
  char *reference = compute(1), *got;
  check(reference != NULL, "the work runs on one thread (set_num_threads(1))");
  if (!reference) return 1;
  got = compute(3);
  check(same(got, reference), "the module's pool of 3 threads gives the same bytes");
  free(got);

  struct {
    const char *name;
    dlpack_lua_parallel_for fn;
  } inline_systems[] = {{"a job system that runs the tasks inline, in order", inline_forward},
                        {"a job system that runs the tasks inline, backwards", inline_backward},
                        {"a job system that runs every task on one other thread", one_other_thread}};
  for (int k = 0; k < 3; k++) {
    char what[200];
    reset_counts();
    dlpack_lua_set_parallel_for(inline_systems[k].fn, NULL);
    got = compute(1); /* the host's job system is used whatever the script's thread count */
    snprintf(what, sizeof what, "%s: the same bytes", inline_systems[k].name);
    check(same(got, reference), what);
    snprintf(what, sizeof what, "%s: called (%d calls, %d tasks), each task once, none nested", inline_systems[k].name,
             atomic_load(&calls), atomic_load(&tasks_run));
    check(atomic_load(&calls) > 0 && atomic_load(&tasks_run) > atomic_load(&calls) && atomic_load(&twice) == 0 &&
              atomic_load(&nested) == 0,
          what);
    free(got);
  }
  check(atomic_load(&off_caller) == atomic_load(&tasks_run), "the one other thread ran every task");
  reset_counts();
  dlpack_lua_set_parallel_for(inline_forward, NULL);
  free(run_chunk(LINE_WORK, 0));
  check(atomic_load(&calls) == 6 && atomic_load(&tasks_run) > 6,
        "softmax, log_softmax, cumsum, sort and argsort of long lines each split them into parts (6 calls)");
  printf("# lines: %d calls, %d tasks\n", atomic_load(&calls), atomic_load(&tasks_run));

  Pool pool;
  memset(&pool, 0, sizeof pool);
  pthread_mutex_init(&pool.lock, NULL);
  pthread_cond_init(&pool.work, NULL);
  pthread_cond_init(&pool.done, NULL);
  for (int i = 0; i < WORKERS; i++) pthread_create(&pool.threads[i], NULL, pool_worker, &pool);
  reset_counts();
  dlpack_lua_set_parallel_for(host_pool, &pool);
  got = compute(0);
  check(same(got, reference), "the host's pool of 3 threads gives the same bytes");
  check(atomic_load(&calls) > 0 && atomic_load(&twice) == 0 && atomic_load(&nested) == 0,
        "the host's pool: each task once, none nested");
  printf("# the host's pool: %d calls, %d tasks, %d of them on its threads\n", atomic_load(&calls),
         atomic_load(&tasks_run), atomic_load(&off_caller));
  free(got);

  char *results[2] = {NULL, NULL};
  pthread_t states[2];
  for (int i = 0; i < 2; i++) pthread_create(&states[i], NULL, compute_on_thread, &results[i]);
  for (int i = 0; i < 2; i++) pthread_join(states[i], NULL);
  check(same(results[0], reference) && same(results[1], reference),
        "two lua_States computing at once on two threads through the host's pool: the same bytes");
  check(atomic_load(&twice) == 0 && atomic_load(&nested) == 0, "... each task once, none nested");
  free(results[0]);
  free(results[1]);

  int before = atomic_load(&calls);
  dlpack_lua_set_parallel_for(NULL, NULL);
  got = compute(2);
  check(same(got, reference) && atomic_load(&calls) == before,
        "unset (NULL): the module's own pool again, the host's not called");
  free(got);

  /* a C module loaded with require reaches the setter through the registry's function table */
  lua_State *L = luaL_newstate();
  luaL_requiref(L, "dlpack", luaopen_dlpack, 0);
  const dlpack_lua_api *api = dlpack_lua_get_api(L);
  check(api != NULL && api->version >= 5 && api->set_parallel_for == dlpack_lua_set_parallel_for,
        "the registry's function table (version 5) holds set_parallel_for");
  if (api != NULL && api->version >= 5) {
    reset_counts();
    api->set_parallel_for(inline_forward, NULL);
    got = compute(2);
    check(same(got, reference) && atomic_load(&calls) > 0,
          "set through the function table: the host's job system is called, the same bytes");
    free(got);
    api->set_parallel_for(NULL, NULL);
  }
  lua_close(L);

  pthread_mutex_lock(&pool.lock);
  pool.stop = 1;
  pthread_cond_broadcast(&pool.work);
  pthread_mutex_unlock(&pool.lock);
  for (int i = 0; i < WORKERS; i++) pthread_join(pool.threads[i], NULL);
  pthread_mutex_destroy(&pool.lock);
  pthread_cond_destroy(&pool.work);
  pthread_cond_destroy(&pool.done);
  free(reference);
  return done_testing();
}
