/* Large CPU operations on several threads: the module's own pool, or a host's job system.
 *
 * An operation that splits its work calls dlp_parallel_for(n_tasks, task, ctx) after every Lua-side
 * check, allocation and conversion is done. How it splits depends on its sizes only, never on how
 * many threads there are (a sum is the same on any thread count), but for splits that give the
 * same result however they split, which may take one part per thread (dlp_parallel_width: min and
 * max over rows, where parts that alternate between the threads measured twice as slow as one
 * part for each on a 2-core machine). This file only decides who runs
 * the tasks: the host's parallel_for when one is installed (dlpack_lua_set_parallel_for), else the
 * calling thread with dlpack.get_num_threads() - 1 threads of the pool, else the calling thread
 * alone. The settings are process-wide, as the threads are: a host runs one job system per
 * process, and the C loops that split work never see a lua_State.
 *
 * Why tasks are safe without the Lua state: a task runs C loops over memory the operation took
 * before it split (tensors its arguments hold, scratch it allocated): it never touches a lua_State,
 * allocates no Lua object and never raises. The calling thread is inside a Lua C function for the
 * whole call and dlp_parallel_for returns only when every task has returned (the pool's caller
 * waits for each worker to leave the job; a host's parallel_for must not return earlier, the
 * contract in dlpack_lua.h). So while tasks run no Lua code runs on that state: no collection, no
 * finalizer can release an operand, and lua_close cannot happen in the middle. A host job system
 * whose threads outlive the call (or the state, or every state) is fine too: after parallel_for
 * returns the module hands it nothing more, and the module stays loaded for the life of the
 * process (module.c pins it), so a thread of the host's that held a task pointer holds code that
 * stays valid. A task that runs a nested split (a sum inside a task of an outer split) runs it
 * inline: the thread-local mark below says it is inside a task, so a host's job system is never
 * entered from its own workers and the pool never waits on itself.
 *
 * Several states on several threads may compute at once: one job at a time uses the pool; a
 * second caller meanwhile runs its tasks on its own thread (same results: the split is the same). */
#include <fenv.h>
#include <math.h>
#include <stdlib.h>

#include "internal.h"

#define MAX_THREADS 256 /* what set_num_threads and DLPACK_LUA_NUM_THREADS accept */

/* Tasks run in the caller's floating-point environment (rounding, and the x87 precision that
 * Windows' C library uses for exp and log: a new thread there starts with less precision than
 * the main one, so a task's exp gave other bits on a worker than on the caller). */
typedef struct Job {
  dlp_TaskFn task;
  void *ctx;
  int64_t n_tasks;
  int64_t next; /* the next task to claim (atomic) */
  int active;   /* pool workers in the job now (under the lock) */
  fenv_t env;   /* the caller's */
} Job;

static dlp_once_flag init_once = DLP_ONCE_INIT;
static dlp_mutex lock = DLP_MUTEX_INIT; /* everything below */
static dlp_cond finished;
static dlp_thread_key in_task; /* non-NULL on a thread while it runs a task */
static int in_task_ok;         /* the key could be made */
static char in_task_marker;
static int wanted;             /* threads that run a job, the caller among them; 0: the default */
static int default_threads;
static int started;            /* pool workers running */
static dlp_thread workers[MAX_THREADS - 1];
/* each worker waits on a condition of its own, so that a job wakes only the workers it takes: one
 * shared condition woke every started worker for each job, and after one large operation had
 * started 63 of them, a loop of 2-task operations ran 6-8 times slower (the workers not taken
 * woke only to queue on the lock and wait again) */
static dlp_cond wake[MAX_THREADS - 1];
static uint64_t born_at[MAX_THREADS - 1]; /* the generation before a worker's first job */
static Job *job;               /* the pool's job, while one runs */
static int job_workers;        /* workers that may still join it: those numbered below this */
static uint64_t generation;    /* counts jobs: a worker joins each new one once */
static int busy;
static dlpack_lua_parallel_for host_parallel_for;
static void *host_job_ctx;

/* A whole number from 1 to MAX_THREADS, else 0 (the default): DLPACK_LUA_NUM_THREADS's values. */
static int parse_threads(const char *s) {
  if (!s || *s < '0' || *s > '9') return 0; /* strtol would also take spaces and a sign first */
  char *end;
  long v = strtol(s, &end, 10);
  return end != s && *end == 0 && v >= 1 && v <= MAX_THREADS ? (int)v : 0;
}

#ifndef _WIN32
/* A child of fork has only the thread that forked: its pool starts again from none. */
static void after_fork_in_child(void) {
  dlp_mutex_init(&lock);
  dlp_cond_init(&finished);
  for (int w = 0; w < MAX_THREADS - 1; w++) dlp_cond_init(&wake[w]);
  started = 0;
  job = NULL;
  job_workers = 0;
  busy = 0;
}
#endif

static void init(void) {
  dlp_cond_init(&finished);
  for (int w = 0; w < MAX_THREADS - 1; w++) dlp_cond_init(&wake[w]);
  in_task_ok = dlp_thread_key_create(&in_task);
  int cpus = dlp_cpu_count();
  default_threads = parse_threads(getenv("DLPACK_LUA_NUM_THREADS"));
  if (!default_threads) default_threads = cpus < MAX_THREADS ? cpus : MAX_THREADS;
#ifndef _WIN32
  pthread_atfork(NULL, NULL, after_fork_in_child);
#endif
}

static int inside_task(void) { return in_task_ok && dlp_thread_key_get(in_task) != NULL; }

static void run_tasks(Job *j) {
  for (;;) {
    int64_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
    if (i >= j->n_tasks) return;
    j->task(j->ctx, i);
  }
}

static void worker_main(void *arg) {
  int index = (int)(intptr_t)arg;
  if (in_task_ok) dlp_thread_key_set(in_task, &in_task_marker); /* a pool thread only ever runs tasks */
  dlp_mutex_lock(&lock);
  uint64_t seen = born_at[index];
  for (;;) {
    if (generation != seen) {
      seen = generation;
      if (index < job_workers) {
        Job *j = job;
        j->active++;
        dlp_mutex_unlock(&lock);
        fenv_t own;
        fegetenv(&own);
        fesetenv(&j->env);
        run_tasks(j);
        fesetenv(&own);
        dlp_mutex_lock(&lock);
        if (--j->active == 0) dlp_cond_signal(&finished);
        continue;
      }
    }
    dlp_cond_wait(&wake[index], &lock);
  }
}

/* A host's parallel_for runs this around each task: the mark for nested splits and the caller's
 * floating-point environment, on whatever thread. */
typedef struct Marked {
  dlp_TaskFn task;
  void *ctx;
  fenv_t env;
} Marked;

static void marked_task(void *ctx, int64_t i) {
  const Marked *m = ctx;
  void *before = in_task_ok ? dlp_thread_key_get(in_task) : NULL;
  fenv_t own;
  fegetenv(&own);
  fesetenv(&m->env);
  if (in_task_ok) dlp_thread_key_set(in_task, &in_task_marker);
  m->task(m->ctx, i);
  if (in_task_ok) dlp_thread_key_set(in_task, before);
  fesetenv(&own);
}

static void run_inline(int64_t n_tasks, dlp_TaskFn task, void *ctx) {
  for (int64_t i = 0; i < n_tasks; i++) task(ctx, i);
}

int dlp_parallel_enabled(void) {
  dlp_call_once(&init_once, init);
  if (inside_task()) return 0;
  dlp_mutex_lock(&lock);
  int yes = host_parallel_for != NULL || (wanted ? wanted : default_threads) > 1;
  dlp_mutex_unlock(&lock);
  return yes;
}

int dlp_parallel_width(void) {
  dlp_call_once(&init_once, init);
  dlp_mutex_lock(&lock);
  int n = host_parallel_for ? 0 : wanted ? wanted : default_threads;
  dlp_mutex_unlock(&lock);
  return n;
}

void dlp_parallel_for(int64_t n_tasks, dlp_TaskFn task, void *ctx) {
  dlp_call_once(&init_once, init);
  if (n_tasks <= 1 || inside_task()) {
    run_inline(n_tasks, task, ctx);
    return;
  }
  dlp_mutex_lock(&lock);
  dlpack_lua_parallel_for host = host_parallel_for;
  void *host_ctx = host_job_ctx;
  int threads = wanted ? wanted : default_threads;
  if (host || threads <= 1 || busy) {
    dlp_mutex_unlock(&lock);
    if (host) {
      Marked m;
      m.task = task;
      m.ctx = ctx;
      fegetenv(&m.env);
      host(host_ctx, n_tasks, marked_task, &m);
    } else {
      run_inline(n_tasks, task, ctx);
    }
    return;
  }
  busy = 1;
  int helpers = threads - 1 < n_tasks - 1 ? threads - 1 : (int)(n_tasks - 1);
  while (started < helpers) {
    born_at[started] = generation;
    if (!dlp_thread_start(&workers[started], worker_main, (void *)(intptr_t)started)) break; /* work for fewer */
    started++;
  }
  Job j;
  j.task = task;
  j.ctx = ctx;
  j.n_tasks = n_tasks;
  j.next = 0;
  j.active = 0;
  fegetenv(&j.env);
  job = &j;
  job_workers = helpers < started ? helpers : started;
  generation++;
  for (int w = 0; w < job_workers; w++) dlp_cond_signal(&wake[w]);
  dlp_mutex_unlock(&lock);

  if (in_task_ok) dlp_thread_key_set(in_task, &in_task_marker);
  run_tasks(&j);
  if (in_task_ok) dlp_thread_key_set(in_task, NULL);

  /* every task is claimed: a worker that has not woken yet stays out (on a busy machine it may
   * wake much later), and those in the job finish their last task */
  dlp_mutex_lock(&lock);
  job_workers = 0;
  while (j.active > 0) dlp_cond_wait(&finished, &lock);
  job = NULL;
  busy = 0;
  dlp_mutex_unlock(&lock);
}

DLPACK_LUA_API void dlpack_lua_set_parallel_for(dlpack_lua_parallel_for fn, void *job_ctx) {
  dlp_call_once(&init_once, init);
  dlp_mutex_lock(&lock);
  host_parallel_for = fn;
  host_job_ctx = fn ? job_ctx : NULL;
  dlp_mutex_unlock(&lock);
}

/* ---- the Lua functions ---- */

/* dlpack.set_num_threads(n): 1 to 256 threads (the calling one among them), 0 the default. */
static int l_set_num_threads(lua_State *L) {
  const char *what = "dlpack.set_num_threads";
  dlp_check_no_more(L, 2, what, "one number");
  lua_Number x = lua_type(L, 1) == LUA_TNUMBER ? lua_tonumber(L, 1) : -1;
  if (!(x >= 0 && x <= MAX_THREADS && x == floor(x))) /* NaN fails the first test */
    luaL_error(L, "%s: a whole number from 0 (the default) to %d expected, got %s", what, MAX_THREADS,
               lua_type(L, 1) == LUA_TNUMBER ? lua_tostring(L, 1) : luaL_typename(L, 1));
  dlp_call_once(&init_once, init);
  dlp_mutex_lock(&lock);
  wanted = (int)x;
  dlp_mutex_unlock(&lock);
  return 0;
}

/* dlpack.get_num_threads(): the threads a large operation runs on when no host job system is set. */
static int l_get_num_threads(lua_State *L) {
  dlp_call_once(&init_once, init);
  dlp_mutex_lock(&lock);
  int n = wanted ? wanted : default_threads;
  dlp_mutex_unlock(&lock);
  lua_pushinteger(L, n);
  return 1;
}

void dlp_threads_register(lua_State *L, int module) {
  static const luaL_Reg functions[] = {
      {"set_num_threads", l_set_num_threads}, {"get_num_threads", l_get_num_threads}, {NULL, NULL}};
  dlp_register(L, module, functions);
}
