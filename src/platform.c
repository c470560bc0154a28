/* The operating system's side of platform.h: libraries opened at run time, memory and mapped
 * files, threads, on POSIX (dlopen, mmap, pthreads) and on Windows (LoadLibrary, VirtualAlloc,
 * MapViewOfFile, CreateThread); the processor's level (cpuid and XGETBV, the same on both). */
#define _GNU_SOURCE /* dladdr, RTLD_NODELETE, RTLD_NOLOAD, RTLD_DEFAULT, MAP_ANONYMOUS, sched_getaffinity */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform.h"

#ifdef _WIN32
#include <io.h>
#include <malloc.h>
#include <sys/stat.h>

void *dlp_library_open(const char *name, int pin, char *why, size_t whylen) {
  HMODULE lib = LoadLibraryExA(name, NULL, 0);
  if (!lib) {
    DWORD err = GetLastError();
    char text[200] = "";
    size_t n = FormatMessageA(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, err, 0, text,
                              sizeof text, NULL);
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' ' || text[n - 1] == '.'))
      text[--n] = 0;
    snprintf(why, whylen, "%s (Windows error %lu)", n ? text : "LoadLibrary failed", (unsigned long)err);
    return NULL;
  }
  if (pin) { /* by address: a name would find whichever loaded DLL has that base name */
    HMODULE pinned;
    GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_PIN, (LPCSTR)lib, &pinned);
  }
  return (void *)lib;
}

void *dlp_library_symbol(void *lib, const char *name) {
  FARPROC fn = GetProcAddress((HMODULE)lib, name);
  void *p;
  memcpy(&p, &fn, sizeof p); /* Windows' function and object pointers have one size */
  return p;
}

void dlp_library_close(void *lib) { FreeLibrary((HMODULE)lib); }

void dlp_library_pin_self(void) {
  HMODULE self;
  GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_PIN,
                     (LPCSTR)(uintptr_t)dlp_library_pin_self, &self);
}

void *dlp_library_export_at(const void *address, const char *name) {
  HMODULE object;
  if (!GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                          (LPCSTR)address, &object))
    return NULL;
  return dlp_library_symbol(object, name);
}

void *dlp_aligned_alloc(size_t alignment, size_t nbytes) { return _aligned_malloc(nbytes, alignment); }
void dlp_aligned_free(void *p) { _aligned_free(p); }

void *dlp_pages_map(size_t nbytes) { return VirtualAlloc(NULL, nbytes, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE); }
void dlp_pages_unmap(void *p, size_t nbytes) {
  (void)nbytes;
  VirtualFree(p, 0, MEM_RELEASE);
}
void dlp_pages_advise_huge(void *p, size_t nbytes) { (void)p, (void)nbytes; } /* large pages need a privilege */

FILE *dlp_file_open(const char *path, int write) { return fopen(path, write ? "wb" : "rb"); }
int dlp_file_truncate(FILE *f) { return (void)f, 1; } /* "wb" did */
void dlp_write_quiet_begin(dlp_WriteQuiet *q) { q->unused = 0; }
void dlp_write_quiet_end(dlp_WriteQuiet *q) { (void)q; }
int dlp_file_identity(FILE *f, uint64_t id[2]) { return (void)f, (void)id, 0; }

int64_t dlp_file_size(FILE *f, char *why, size_t whylen) {
  struct _stat64 st;
  if (_fstat64(_fileno(f), &st) != 0) return snprintf(why, whylen, "%s", strerror(errno)), -1;
  if ((st.st_mode & _S_IFMT) == _S_IFDIR) return snprintf(why, whylen, "it is a directory"), -1;
  if ((st.st_mode & _S_IFMT) != _S_IFREG) return snprintf(why, whylen, "it is not a regular file"), -1;
  return (int64_t)st.st_size;
}

/* The mapping object can be closed at once: the view keeps it (and the file) open. */
void *dlp_file_map_readonly(FILE *f, size_t length, char *why, size_t whylen) {
  HANDLE file = (HANDLE)_get_osfhandle(_fileno(f));
  HANDLE mapping = CreateFileMappingA(file, NULL, PAGE_READONLY, 0, 0, NULL);
  void *p = mapping ? MapViewOfFile(mapping, FILE_MAP_READ, 0, 0, length) : NULL;
  if (!p) snprintf(why, whylen, "%s failed (Windows error %lu)", mapping ? "MapViewOfFile" : "CreateFileMapping",
                   (unsigned long)GetLastError());
  if (mapping) CloseHandle(mapping);
  return p;
}

void dlp_file_unmap(void *p, size_t length) {
  (void)length;
  UnmapViewOfFile(p);
}

typedef struct ThreadStart {
  void (*fn)(void *);
  void *arg;
} ThreadStart;

static DWORD WINAPI thread_main(LPVOID p) {
  ThreadStart start = *(ThreadStart *)p;
  free(p);
  start.fn(start.arg);
  return 0;
}

int dlp_thread_start(dlp_thread *t, void (*fn)(void *), void *arg) {
  ThreadStart *start = malloc(sizeof *start);
  if (!start) return 0;
  start->fn = fn;
  start->arg = arg;
  *t = CreateThread(NULL, 0, thread_main, start, 0, NULL);
  if (!*t) free(start);
  return *t != NULL;
}

void dlp_thread_join(dlp_thread t) {
  WaitForSingleObject(t, INFINITE);
  CloseHandle(t);
}

int dlp_cpu_count(void) {
  DWORD_PTR process, system;
  int n = 0;
  if (GetProcessAffinityMask(GetCurrentProcess(), &process, &system))
    for (; process; process &= process - 1) n++;
  return n > 0 ? n : 1;
}

size_t dlp_last_level_cache(void) { return 0; }

#else
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void *dlp_library_open(const char *name, int pin, char *why, size_t whylen) {
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL | (pin ? RTLD_NODELETE : 0));
  if (!lib) {
    const char *err = dlerror();
    snprintf(why, whylen, "%s", err ? err : "not found");
  }
  return lib;
}

void *dlp_library_symbol(void *lib, const char *name) { return dlsym(lib, name); }

void dlp_library_close(void *lib) { dlclose(lib); }

void dlp_library_pin_self(void) {
  Dl_info self;
  if (dladdr((void *)dlp_library_pin_self, &self) && self.dli_fname) {
    void *handle = dlopen(self.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    if (handle) dlclose(handle); /* the NODELETE mark stays */
  }
}

void *dlp_library_export_at(const void *address, const char *name) {
  Dl_info at, found;
  if (!dladdr(address, &at)) return NULL;
  /* the program itself has no name dlopen takes: the global scope, where it comes first */
  void *handle = at.dli_fname ? dlopen(at.dli_fname, RTLD_LAZY | RTLD_NOLOAD) : NULL;
  void *symbol = dlsym(handle ? handle : RTLD_DEFAULT, name);
  if (handle) dlclose(handle); /* RTLD_NOLOAD took a reference to a library that stays loaded */
  if (!symbol || !dladdr(symbol, &found) || found.dli_fbase != at.dli_fbase) return NULL;
  return symbol;
}

void *dlp_aligned_alloc(size_t alignment, size_t nbytes) {
  void *p;
  return posix_memalign(&p, alignment, nbytes) == 0 ? p : NULL;
}
void dlp_aligned_free(void *p) { free(p); }

void *dlp_pages_map(size_t nbytes) {
  void *p = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}
void dlp_pages_unmap(void *p, size_t nbytes) { munmap(p, nbytes); }
void dlp_pages_advise_huge(void *p, size_t nbytes) {
#ifdef MADV_HUGEPAGE
  madvise(p, nbytes, MADV_HUGEPAGE); /* advice: failure changes nothing */
#else
  (void)p, (void)nbytes;
#endif
}

/* O_NONBLOCK: opening a FIFO would wait for its other end (it changes nothing for regular files).
 * Once open, the file blocks again: a FIFO or pipe that a reader drains takes more than its
 * buffer (64 KiB) instead of failing with EAGAIN. */
FILE *dlp_file_open(const char *path, int write) {
  int fd = open(path, (write ? O_WRONLY | O_CREAT : O_RDONLY) | O_NONBLOCK | O_CLOEXEC, 0666);
  if (fd < 0) return NULL;
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
    int err = errno;
    close(fd);
    errno = err;
    return NULL;
  }
  FILE *f = fdopen(fd, write ? "wb" : "rb");
  if (!f) {
    int err = errno;
    close(fd);
    errno = err;
  }
  return f;
}

/* The signals a write to a file can raise, whose default action ends the process. */
static const int write_signals[2] = {SIGPIPE, SIGXFSZ};

/* Only a signal left to its default action is held off: one the host handles or ignores is its
 * own business, and its handler still runs. */
void dlp_write_quiet_begin(dlp_WriteQuiet *q) {
  sigset_t blocked, pending;
  int known = sigpending(&pending) == 0;
  sigemptyset(&blocked);
  for (int i = 0; i < 2; i++) {
    struct sigaction now;
    q->held[i] = sigaction(write_signals[i], NULL, &now) == 0 && now.sa_handler == SIG_DFL &&
                 !(now.sa_flags & SA_SIGINFO);
    q->was_pending[i] = known && sigismember(&pending, write_signals[i]) == 1;
    if (q->held[i]) sigaddset(&blocked, write_signals[i]);
  }
  pthread_sigmask(SIG_BLOCK, &blocked, &q->old);
}

void dlp_write_quiet_end(dlp_WriteQuiet *q) {
  sigset_t pending;
  int sig;
  for (int i = 0; i < 2; i++) {
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, write_signals[i]);
    /* held, pending now and not before: the writes raised it (sigwait returns at once then) */
    if (q->held[i] && !q->was_pending[i] && sigpending(&pending) == 0 && sigismember(&pending, write_signals[i]) == 1)
      sigwait(&one, &sig);
  }
  pthread_sigmask(SIG_SETMASK, &q->old, NULL);
}

int dlp_file_truncate(FILE *f) {
  struct stat st;
  if (fstat(fileno(f), &st) != 0) return 0;
  return !S_ISREG(st.st_mode) || ftruncate(fileno(f), 0) == 0; /* a FIFO or device has no length */
}

int dlp_file_identity(FILE *f, uint64_t id[2]) {
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  id[0] = (uint64_t)st.st_dev;
  id[1] = (uint64_t)st.st_ino;
  return 1;
}

int64_t dlp_file_size(FILE *f, char *why, size_t whylen) {
  struct stat st;
  if (fstat(fileno(f), &st) != 0) return snprintf(why, whylen, "%s", strerror(errno)), -1;
  if (S_ISDIR(st.st_mode)) return snprintf(why, whylen, "it is a directory"), -1;
  if (!S_ISREG(st.st_mode)) return snprintf(why, whylen, "it is not a regular file"), -1;
  return (int64_t)st.st_size;
}

void *dlp_file_map_readonly(FILE *f, size_t length, char *why, size_t whylen) {
  void *p = mmap(NULL, length, PROT_READ, MAP_SHARED, fileno(f), 0);
  if (p != MAP_FAILED) return p;
  snprintf(why, whylen, "mmap failed: %s", strerror(errno));
  return NULL;
}

void dlp_file_unmap(void *p, size_t length) { munmap(p, length); }

typedef struct ThreadStart {
  void (*fn)(void *);
  void *arg;
} ThreadStart;

static void *thread_main(void *p) {
  ThreadStart start = *(ThreadStart *)p;
  free(p);
  start.fn(start.arg);
  return NULL;
}

int dlp_thread_start(dlp_thread *t, void (*fn)(void *), void *arg) {
  ThreadStart *start = malloc(sizeof *start);
  if (!start) return 0;
  start->fn = fn;
  start->arg = arg;
  if (pthread_create(t, NULL, thread_main, start) == 0) return 1;
  free(start);
  return 0;
}

void dlp_thread_join(dlp_thread t) { pthread_join(t, NULL); }

int dlp_cpu_count(void) {
  long n = 0;
#ifdef CPU_COUNT
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
#endif
  if (n <= 0) n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (n < 4096 ? (int)n : 4096) : 1;
}

/* Linux's sysfs says what the first processor shares its last level with (on an AMD EPYC, one
 * core complex's 32 MiB, where sysconf's _SC_LEVEL3_CACHE_SIZE said 320 MiB, every complex's). */
size_t dlp_last_level_cache(void) {
  size_t best = 0;
  for (int i = 0; i < 8; i++) {
    char path[64];
    unsigned long long kib = 0;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    FILE *f = fopen(path, "r");
    if (!f) break;
    if (fscanf(f, "%lluK", &kib) == 1 && kib < (unsigned long long)SIZE_MAX / 1024 && kib * 1024 > best)
      best = (size_t)kib * 1024;
    fclose(f);
  }
  return best;
}
#endif

/* ---- the processor ---- */
#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>

static int detect_level(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return DLP_CPU_BASELINE;
  int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
  if (!osxsave || !avx) return DLP_CPU_BASELINE;
  unsigned xcr0_lo, xcr0_hi; /* the state the system saves on a context switch (XCR0) */
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  (void)xcr0_hi;
  if ((xcr0_lo & 0x6) != 0x6) return DLP_CPU_BASELINE; /* SSE and YMM state */
  if (__get_cpuid_max(0, NULL) < 7) return DLP_CPU_BASELINE;
  __cpuid_count(7, 0, a, b, c, d);
  if (!((b >> 5) & 1)) return DLP_CPU_BASELINE; /* AVX2 */
  unsigned avx512 = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31); /* F, DQ, BW, VL */
  /* opmask, the upper halves of ZMM0-15 and ZMM16-31 saved too */
  if ((b & avx512) == avx512 && fma && f16c && (xcr0_lo & 0xE6) == 0xE6) return DLP_CPU_AVX512;
  return DLP_CPU_AVX2;
}

/* F16C (the float16 conversions of the AVX generation): cpuid 1, ECX bit 29. */
static int detect_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1);
}
#else
static int detect_level(void) { return DLP_CPU_BASELINE; }
#endif

static const char *const level_names[] = {"baseline", "avx2", "avx512"};

const char *dlp_cpu_level_name(int level) {
  return level >= DLP_CPU_BASELINE && level <= DLP_CPU_AVX512 ? level_names[level] : "unknown";
}

/* Both cached after the first call; threads that race compute and store the same value. */
static int detected_level = -1, chosen_level = -1;

int dlp_cpu_detected_level(void) {
  int level = __atomic_load_n(&detected_level, __ATOMIC_RELAXED);
  if (level < 0) {
    level = detect_level();
    __atomic_store_n(&detected_level, level, __ATOMIC_RELAXED);
  }
  return level;
}

int dlp_cpu_level(void) {
  int level = __atomic_load_n(&chosen_level, __ATOMIC_RELAXED);
  if (level < 0) {
    level = dlp_cpu_detected_level();
    const char *forced = getenv("DLPACK_LUA_CPU"); /* an unknown value changes nothing */
    for (int k = DLP_CPU_BASELINE; forced && k < level; k++)
      if (strcmp(forced, level_names[k]) == 0) level = k;
    __atomic_store_n(&chosen_level, level, __ATOMIC_RELAXED);
  }
  return level;
}

#if defined(__x86_64__) || defined(_M_X64)
int dlp_cpu_has_f16c(void) {
  static int f16c = -1;
  int has = __atomic_load_n(&f16c, __ATOMIC_RELAXED);
  if (has < 0) {
    has = detect_f16c();
    __atomic_store_n(&f16c, has, __ATOMIC_RELAXED);
  }
  return has && dlp_cpu_level() >= DLP_CPU_AVX2;
}
#endif
