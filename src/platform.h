/* Every difference between the operating systems the module builds on lives here, as every
 * difference between Lua versions lives in compat.h: POSIX (Linux; macOS untested) and Windows
 * (MinGW-w64: docs/windows.md). The rest of the module calls these and includes no system header
 * of its own for threads, libraries or pages.
 *
 *   once-initialisation   dlp_once_flag, DLP_ONCE_INIT, dlp_call_once
 *   locks                 dlp_mutex, DLP_MUTEX_INIT, dlp_mutex_init, dlp_mutex_lock, dlp_mutex_unlock
 *   threads               dlp_thread_id, dlp_thread_self, dlp_thread_equal, dlp_thread_yield,
 *                         dlp_thread_key (a per-thread pointer), dlp_thread_start, dlp_thread_join,
 *                         dlp_cond (condition variables with dlp_mutex), dlp_cpu_count (platform.c)
 *   caches                dlp_last_level_cache (platform.c)
 *   libraries             dlp_library_open, dlp_library_symbol, dlp_library_close,
 *                         dlp_library_pin_self, dlp_library_export_at (platform.c), DLP_CALLER
 *   memory                dlp_aligned_alloc, dlp_aligned_free, dlp_pages_map, dlp_pages_unmap,
 *                         dlp_pages_advise_huge (platform.c)
 *   files                 dlp_file_open, dlp_file_truncate, dlp_file_identity, dlp_file_size,
 *                         dlp_file_map_readonly, dlp_file_unmap, dlp_write_quiet_begin/end
 *                         (platform.c)
 *   the processor         dlp_cpu_level, dlp_cpu_detected_level, dlp_cpu_level_name (platform.c),
 *                         dlp_cpu_has_avx2
 *
 * Sizes: Windows is LLP64 (long is 32 bits), so the module never uses long for a size or an
 * address; module.c checks the DLPack structures' layout with static assertions on both. */
#ifndef DLPACK_LUA_PLATFORM_H
#define DLPACK_LUA_PLATFORM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef _WIN32
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
#else
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#endif

/* ---- once-initialisation and locks ---- */
#ifdef _WIN32
typedef INIT_ONCE dlp_once_flag;
#define DLP_ONCE_INIT INIT_ONCE_STATIC_INIT
static inline BOOL CALLBACK dlp_once_trampoline(PINIT_ONCE flag, PVOID fn, PVOID *context) {
  void (*call)(void);
  (void)flag, (void)context;
  memcpy(&call, &fn, sizeof call);
  call();
  return TRUE;
}
static inline void dlp_call_once(dlp_once_flag *flag, void (*fn)(void)) {
  PVOID parameter;
  memcpy(&parameter, &fn, sizeof parameter);
  InitOnceExecuteOnce(flag, dlp_once_trampoline, parameter, NULL);
}
typedef SRWLOCK dlp_mutex; /* never taken recursively */
#define DLP_MUTEX_INIT SRWLOCK_INIT
static inline void dlp_mutex_init(dlp_mutex *m) { InitializeSRWLock(m); }
static inline void dlp_mutex_lock(dlp_mutex *m) { AcquireSRWLockExclusive(m); }
static inline void dlp_mutex_unlock(dlp_mutex *m) { ReleaseSRWLockExclusive(m); }
#else
typedef pthread_once_t dlp_once_flag;
#define DLP_ONCE_INIT PTHREAD_ONCE_INIT
static inline void dlp_call_once(dlp_once_flag *flag, void (*fn)(void)) { pthread_once(flag, fn); }
typedef pthread_mutex_t dlp_mutex;
#define DLP_MUTEX_INIT PTHREAD_MUTEX_INITIALIZER
static inline void dlp_mutex_init(dlp_mutex *m) { pthread_mutex_init(m, NULL); }
static inline void dlp_mutex_lock(dlp_mutex *m) { pthread_mutex_lock(m); }
static inline void dlp_mutex_unlock(dlp_mutex *m) { pthread_mutex_unlock(m); }
#endif

/* ---- threads ---- */
#ifdef _WIN32
typedef DWORD dlp_thread_id;
static inline dlp_thread_id dlp_thread_self(void) { return GetCurrentThreadId(); }
static inline int dlp_thread_equal(dlp_thread_id a, dlp_thread_id b) { return a == b; }
static inline void dlp_thread_yield(void) { SwitchToThread(); }
typedef DWORD dlp_thread_key;
static inline int dlp_thread_key_create(dlp_thread_key *k) { return (*k = TlsAlloc()) != TLS_OUT_OF_INDEXES; }
static inline void *dlp_thread_key_get(dlp_thread_key k) { return TlsGetValue(k); }
static inline void dlp_thread_key_set(dlp_thread_key k, void *v) { TlsSetValue(k, v); }
#else
typedef pthread_t dlp_thread_id;
static inline dlp_thread_id dlp_thread_self(void) { return pthread_self(); }
static inline int dlp_thread_equal(dlp_thread_id a, dlp_thread_id b) { return pthread_equal(a, b); }
static inline void dlp_thread_yield(void) { sched_yield(); }
typedef pthread_key_t dlp_thread_key;
static inline int dlp_thread_key_create(dlp_thread_key *k) { return pthread_key_create(k, NULL) == 0; }
static inline void *dlp_thread_key_get(dlp_thread_key k) { return pthread_getspecific(k); }
static inline void dlp_thread_key_set(dlp_thread_key k, void *v) { pthread_setspecific(k, v); }
#endif

/* ---- threads the module starts (compute/threads.c's pool): platform.c ----
 * dlp_thread_start: 1 when fn(arg) runs on a new thread, 0 when none could be started.
 * dlp_cond_wait releases m while it waits and holds it again when it returns (it may return
 * spuriously: callers wait in a loop). dlp_cpu_count: the processors this process may run on (its
 * affinity mask where the system has one), at least 1. */
#ifdef _WIN32
typedef HANDLE dlp_thread;
typedef CONDITION_VARIABLE dlp_cond;
static inline void dlp_cond_init(dlp_cond *c) { InitializeConditionVariable(c); }
static inline void dlp_cond_wait(dlp_cond *c, dlp_mutex *m) { SleepConditionVariableSRW(c, m, INFINITE, 0); }
static inline void dlp_cond_signal(dlp_cond *c) { WakeConditionVariable(c); }
#else
typedef pthread_t dlp_thread;
typedef pthread_cond_t dlp_cond;
static inline void dlp_cond_init(dlp_cond *c) { pthread_cond_init(c, NULL); }
static inline void dlp_cond_wait(dlp_cond *c, dlp_mutex *m) { pthread_cond_wait(c, m); }
static inline void dlp_cond_signal(dlp_cond *c) { pthread_cond_signal(c); }
#endif
int dlp_thread_start(dlp_thread *t, void (*fn)(void *), void *arg);
void dlp_thread_join(dlp_thread t);
int dlp_cpu_count(void);
/* The bytes of the largest cache the first processor has, as the system reports them (Linux's
 * sysfs), 0 where it does not. */
size_t dlp_last_level_cache(void);

/* ---- libraries opened at run time (the CUDA driver, a BLAS): platform.c ----
 * dlp_library_open: a handle, or NULL with why filled in. `name` is a file name the system
 * searches for or a path; on Windows it is in the process's code page, as Lua's own package.cpath
 * is. `pin` keeps the library loaded for the life of the process, whatever dlp_library_close is
 * called on it later. */
void *dlp_library_open(const char *name, int pin, char *why, size_t whylen);
void *dlp_library_symbol(void *lib, const char *name); /* NULL when it has none */
void dlp_library_close(void *lib);
void dlp_library_pin_self(void); /* keep this module loaded for the life of the process */
/* The function `name` exported by the very shared library or program that holds the code at
 * `address` (not by whatever else is loaded); NULL when that one does not export it. */
void *dlp_library_export_at(const void *address, const char *name);
/* The return address of the function it is used in: the code that called it. */
#define DLP_CALLER() __builtin_return_address(0)

/* ---- memory: platform.c ---- */
/* A block aligned to `alignment` (a power of two, at least sizeof(void *)), freed with
 * dlp_aligned_free; NULL when there is no memory. */
void *dlp_aligned_alloc(size_t alignment, size_t nbytes);
void dlp_aligned_free(void *p);
/* Fresh zeroed pages straight from the system (they cost nothing until touched), freed with
 * dlp_pages_unmap; NULL when there are none. dlp_pages_advise_huge offers a block for huge
 * pages where the system can (advice: nothing changes when it cannot). */
void *dlp_pages_map(size_t nbytes);
void dlp_pages_unmap(void *p, size_t nbytes);
void dlp_pages_advise_huge(void *p, size_t nbytes);

/* ---- files: platform.c ----
 * dlp_file_open: path opened for reading, or for writing (created), in binary mode (on POSIX not
 * inherited by programs it executes); NULL with errno set. On POSIX opening never waits: a FIFO
 * without a peer is refused (ENXIO) or opened, to be refused as not a regular file. A file opened
 * for writing keeps its content until dlp_file_truncate (0 with errno set when it fails), so that
 * the caller can look first at what it is: Windows truncates at once, and refuses a file with a
 * mapped view itself. dlp_file_identity: 1 and the regular file's device and inode in id (POSIX),
 * else 0 (Windows, other kinds of files).
 * dlp_file_size: the size of the regular file open as f, or -1 with why filled in (a directory, a
 * device, a pipe: anything whose size is not its content's). dlp_file_map_readonly: the first
 * `length` bytes (> 0, within the file) of the file open as f mapped read-only and shared (a
 * change to the file shows through; a write to the mapping faults), or NULL with why filled in;
 * the mapping outlives f. dlp_file_unmap undoes it (any thread). */
/* dlp_write_quiet_begin/end, around writes to a file: a pipe's or a FIFO's reader that leaves
 * early makes a write fail with EPIPE instead of killing the process with SIGPIPE, and a file
 * growing past the size limit (ulimit -f) with EFBIG instead of SIGXFSZ (POSIX: each signal left
 * to its default action is blocked on the calling thread meanwhile, and one the writes raised is
 * taken back before the thread's mask is restored; a host's handler runs as it would; Windows
 * has neither signal). */
#ifdef _WIN32
typedef struct dlp_WriteQuiet {
  int unused;
} dlp_WriteQuiet;
#else
typedef struct dlp_WriteQuiet {
  sigset_t old;
  int held[2], was_pending[2]; /* SIGPIPE, SIGXFSZ */
} dlp_WriteQuiet;
#endif
void dlp_write_quiet_begin(dlp_WriteQuiet *q);
void dlp_write_quiet_end(dlp_WriteQuiet *q);
FILE *dlp_file_open(const char *path, int write);
int dlp_file_truncate(FILE *f);
int dlp_file_identity(FILE *f, uint64_t id[2]);
int64_t dlp_file_size(FILE *f, char *why, size_t whylen);
void *dlp_file_map_readonly(FILE *f, size_t length, char *why, size_t whylen);
void dlp_file_unmap(void *p, size_t length);

/* ---- the processor ---- */
/* Which copies of the computing loops may run (kernels.c, reduce.c, scan.c, matmul.c): the
 * portable build, the AVX2 one (AVX2 and the system saving the YMM registers), or the AVX-512 one
 * (AVX-512 F, DQ, BW and VL with FMA and F16C, and the system saving the ZMM and mask registers:
 * cpuid and XGETBV). dlp_cpu_detected_level is what the processor and system allow;
 * dlp_cpu_level what runs: the environment variable DLPACK_LUA_CPU (baseline, avx2 or avx512, read
 * once per process) lowers it, never raises it above the detected level. Always baseline off
 * x86-64. */
enum { DLP_CPU_BASELINE, DLP_CPU_AVX2, DLP_CPU_AVX512 };
int dlp_cpu_detected_level(void);
int dlp_cpu_level(void);
const char *dlp_cpu_level_name(int level);
#if defined(__x86_64__) || defined(_M_X64)
static inline int dlp_cpu_has_avx2(void) { return dlp_cpu_level() >= DLP_CPU_AVX2; }
/* F16C's float16 conversions, at the AVX2 level or above (DLPACK_LUA_CPU=baseline turns them off) */
int dlp_cpu_has_f16c(void);
#endif

#endif
