/* hotpath.c — `ga-bench hotpath`: allocate+free pairs served from the cache,
 * at sizes from 4 KiB to 64 MiB, in native mode, with expandable segments
 * and with PyTorch's expandable policy, next to the C library's malloc/free
 * of the same sizes.
 *
 * Times are ratios taken in one interleaved run: batches of gardenalloc
 * pairs and of malloc/free pairs alternate, so a machine that slows down
 * slows both. They are taken in the main thread and in a worker thread (the
 * C library serves the two from different arenas).
 *
 * Instructions per pair come from the CPU's counter (perf_event_open) where
 * the machine exposes one. Elsewhere --instructions runs this program again
 * under valgrind's callgrind, twice per size and mode with different
 * numbers of pairs, and divides the difference (so set-up costs cancel).
 *
 * --threads 1,2,4,... measures instead how pairs scale with threads on one
 * allocator, every thread on the same stream or each on its own, next to
 * the C library and to mimalloc when libmimalloc.so.2 can be loaded. Figures
 * from a machine whose threads share cores say nothing about scaling.
 */
#include <dlfcn.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* ---- What is measured ---- */

typedef struct hp_size {
  char name[32];
  size_t bytes;
} hp_size;

typedef struct hp_mode {
  const char *name, *conf;
} hp_mode;

static const hp_size default_sizes[] = {{"4 KiB", 4096},
                                        {"64 KiB", 64 << 10},
                                        {"1 MiB", 1 << 20},
                                        {"8 MiB", (size_t)8 << 20},
                                        {"16 MiB", (size_t)16 << 20},
                                        {"64 MiB", (size_t)64 << 20}};
static const hp_mode all_modes[] = {
    {"native", ""},
    {"expandable", "expandable_segments:True"},
    {"pytorch", "expandable_segments:True,expandable_policy:pytorch"},
};
#define NMODES ((int)(sizeof all_modes / sizeof *all_modes))

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* "4096", "4k", "64KiB", "8m", "16 MiB": bytes, or 0 when malformed. */
static size_t parse_bytes(const char *str, char *name, size_t namelen) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(str, &end, 10);
  if (errno || end == str || v == 0) return 0;
  while (*end == ' ') end++;
  int shift = 0;
  switch (*end) {
    case 'k':
    case 'K':
      shift = 10;
      end++;
      break;
    case 'm':
    case 'M':
      shift = 20;
      end++;
      break;
    case 'g':
    case 'G':
      shift = 30;
      end++;
      break;
    default: break;
  }
  if (shift && !strcmp(end, "iB")) end += 2;
  if (!strcmp(end, "B") || (!shift && !strcmp(end, "B"))) end++;
  if (*end || v > (1ULL << 40) >> shift) return 0;
  size_t b = (size_t)v << shift;
  if (shift)
    snprintf(name, namelen, "%llu %s", v, shift == 10 ? "KiB" : shift == 20 ? "MiB" : "GiB");
  else
    snprintf(name, namelen, "%zu B", b);
  return b;
}

/* ---- Instructions from the CPU's counter ---- */

/* Instruction counter of this thread, or -1. */
static int counter_open(void) {
  struct perf_event_attr a;
  memset(&a, 0, sizeof a);
  a.type = PERF_TYPE_HARDWARE;
  a.size = sizeof a;
  a.config = PERF_COUNT_HW_INSTRUCTIONS;
  a.disabled = 1;
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  return (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
}

static long long counter_read(int fd) {
  long long v = -1;
  if (fd < 0 || read(fd, &v, sizeof v) != (ssize_t)sizeof v) return -1;
  return v;
}

/* ---- The loops ---- */

/* Who serves a pair: gardenalloc, the C library, or mimalloc. */
enum { BY_GA, BY_LIBC, BY_MI };
static void *(*mi_malloc_fn)(size_t);
static void (*mi_free_fn)(void *);

/* Loads mimalloc without making it the process's malloc; 0 when found. */
static int mimalloc_load(void) {
  static const char *const names[] = {"libmimalloc.so.2", "libmimalloc.so"};
  for (size_t i = 0; i < sizeof names / sizeof *names && !mi_malloc_fn; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    void *m = dlsym(h, "mi_malloc"), *f = dlsym(h, "mi_free");
    if (!m || !f) continue;
    memcpy(&mi_malloc_fn, &m, sizeof m); /* POSIX: a function's address as dlsym returns it */
    memcpy(&mi_free_fn, &f, sizeof f);
  }
  return mi_malloc_fn ? 0 : -1;
}

typedef struct loop_args {
  ga_allocator_t *a;
  int by;
  size_t size;
  ga_stream_t stream;
  char error[256]; /* the first failure (ga_last_error is the failing thread's) */
} loop_args;

/* n pairs; 0, or -1 with l->error set. */
static int pairs(loop_args *l, size_t n) {
  void *p;
  switch (l->by) {
    case BY_LIBC:
      for (size_t i = 0; i < n; i++) {
        p = malloc(l->size);
        __asm__ volatile("" : : "r"(p) : "memory"); /* keep the pair */
        free(p);
      }
      return 0;
    case BY_MI:
      for (size_t i = 0; i < n; i++) {
        p = mi_malloc_fn(l->size);
        __asm__ volatile("" : : "r"(p) : "memory");
        mi_free_fn(p);
      }
      return 0;
    default:
      for (size_t i = 0; i < n; i++) {
        if (ga_malloc(l->a, l->size, l->stream, &p) != GA_OK) {
          snprintf(l->error, sizeof l->error, "ga_malloc of %zu bytes failed: %s", l->size, ga_last_error());
          return -1;
        }
        ga_free(l->a, p);
      }
      return 0;
  }
}

/* ---- Interleaved times, in one thread ---- */

typedef struct interleaved {
  loop_args ga, libc;
  size_t pairs;
  int rounds;
  size_t done;                /* pairs timed on each side */
  double ga_ns, libc_ns;      /* per pair */
  long long ga_ins, libc_ins; /* per pair from the counter, or -1 */
  int failed;
} interleaved;

/* Batches of gardenalloc pairs and of C library pairs alternate; each side's
 * time is the sum of its batches. The first pair of each side (a segment,
 * a heap chunk) is not timed. */
static void *interleave(void *arg) {
  interleaved *r = arg;
  int fd = counter_open();
  long long ins[2] = {0, 0};
  double t[2] = {0, 0};
  r->failed = pairs(&r->ga, 1) || pairs(&r->libc, 1);
  size_t batch = r->pairs / (size_t)r->rounds;
  int k = 0;
  /* At most 2 s a measurement: the C library's pairs of 64 MiB map and
   * unmap memory every time. */
  for (; k < r->rounds && !r->failed && (k == 0 || t[0] + t[1] < 2.0); k++) {
    for (int side = 0; side < 2; side++) {
      loop_args *l = side ? &r->libc : &r->ga;
      long long i0 = counter_read(fd);
      if (fd >= 0) ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
      double t0 = now();
      if (pairs(l, batch)) r->failed = 1;
      t[side] += now() - t0;
      if (fd >= 0) ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
      long long i1 = counter_read(fd);
      ins[side] = (i0 < 0 || i1 < 0 || ins[side] < 0) ? -1 : ins[side] + (i1 - i0);
    }
  }
  size_t n = batch * (size_t)k;
  r->done = n;
  r->ga_ns = t[0] * 1e9 / (double)n;
  r->libc_ns = t[1] * 1e9 / (double)n;
  r->ga_ins = fd < 0 || ins[0] < 0 ? -1 : ins[0] / (long long)n;
  r->libc_ins = fd < 0 || ins[1] < 0 ? -1 : ins[1] / (long long)n;
  if (fd >= 0) close(fd);
  return NULL;
}

/* ---- Instructions from callgrind ---- */

/* Runs argv with stdout and stderr into buf; the exit status, or -1. */
static int run_capture(char *const argv[], char *buf, size_t cap) {
  int fds[2];
  if (pipe(fds)) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(fds[1]);
  size_t len = 0;
  ssize_t got;
  while ((got = read(fds[0], buf + len, cap - 1 - len)) > 0) {
    len += (size_t)got;
    if (len + 1 >= cap) { /* keep the tail: callgrind's summary comes last */
      memmove(buf, buf + cap / 2, len - cap / 2);
      len -= cap / 2;
    }
  }
  buf[len] = 0;
  close(fds[0]);
  int st;
  if (waitpid(pid, &st, 0) < 0) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Instructions of `ga-bench hotpath --only ...` with n pairs under
 * callgrind, or -1 (message printed). */
static long long callgrind_total(const char *conf, const char *mode, size_t bytes, int libc, size_t n) {
  char self[4096], pairs_s[32], size_s[32];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  if (k <= 0) return -1;
  self[k] = 0;
  snprintf(pairs_s, sizeof pairs_s, "%zu", n);
  snprintf(size_s, sizeof size_s, "%zu", bytes);
  char *argv[16];
  int c = 0;
  argv[c++] = "valgrind";
  argv[c++] = "--tool=callgrind";
  argv[c++] = "--callgrind-out-file=/dev/null";
  argv[c++] = self;
  argv[c++] = "hotpath";
  argv[c++] = "--only";
  argv[c++] = size_s;
  argv[c++] = "--mode";
  argv[c++] = (char *)mode;
  argv[c++] = "--pairs";
  argv[c++] = pairs_s;
  argv[c++] = "--conf";
  argv[c++] = (char *)conf;
  if (libc) argv[c++] = "--libc";
  argv[c] = NULL;
  static char out[1 << 16];
  int st = run_capture(argv, out, sizeof out);
  const char *at = strstr(out, "Collected :");
  if (st != 0 || !at) {
    fprintf(stderr, "ga-bench hotpath: valgrind --tool=callgrind failed (exit %d):\n%s\n", st, out);
    return -1;
  }
  return strtoll(at + strlen("Collected :"), NULL, 10);
}

/* Instructions per pair under callgrind: the difference of two runs. */
static double callgrind_per_pair(const char *conf, const char *mode, size_t bytes, int libc) {
  const size_t n1 = 20000, n2 = 60000;
  long long a = callgrind_total(conf, mode, bytes, libc, n1);
  long long b = a < 0 ? -1 : callgrind_total(conf, mode, bytes, libc, n2);
  return b < 0 ? -1.0 : (double)(b - a) / (double)(n2 - n1);
}

/* ---- Allocators ---- */

/* The configuration of a mode: the caller's, then the mode's keys; under
 * valgrind a simulated device of 8 GiB (its reservations of 1.125 x the
 * device's memory do not fit valgrind's address space at 80 GiB). */
static void mode_conf(char *out, size_t cap, const char *base, const hp_mode *m, int small_device) {
  const char *parts[3] = {small_device && !strstr(base, "sim_capacity_mb") ? "sim_capacity_mb:8192" : "",
                          base, m->conf};
  out[0] = 0;
  for (int i = 0; i < 3; i++)
    if (parts[i][0]) snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? "," : "", parts[i]);
}

static ga_allocator_t *open_allocator(const char *conf) {
  ga_allocator_t *a;
  if (ga_create(conf, 0, &a) != GA_OK) {
    fprintf(stderr, "ga-bench hotpath: %s\n", ga_last_error());
    return NULL;
  }
  return a;
}

static int set_history(ga_allocator_t *a, const char *history) {
  if (!strcmp(history, "off")) return 0;
  if (ga_record_history_stacks(a, 1, 1 << 16, !strcmp(history, "stacks") ? GA_STACKS_C : 0) == GA_OK)
    return 0;
  fprintf(stderr, "ga-bench hotpath: %s\n", ga_last_error());
  return -1;
}

/* ---- One loop, for callgrind (--only) ---- */

static int only_loop(const char *conf, const hp_mode *m, size_t bytes, size_t n, int libc,
                     const char *history) {
  char full[1024];
  mode_conf(full, sizeof full, conf, m, 1);
  ga_allocator_t *a = libc ? NULL : open_allocator(full);
  if (!libc && (!a || set_history(a, history))) {
    if (a) ga_destroy(a);
    return 2;
  }
  loop_args l = {.a = a, .by = libc ? BY_LIBC : BY_GA, .size = bytes, .stream = NULL};
  int rc = pairs(&l, 1) || pairs(&l, n);
  if (rc) fprintf(stderr, "ga-bench hotpath: %s\n", l.error);
  if (a) ga_destroy(a);
  return rc ? 1 : 0;
}

/* ---- The table of sizes and modes ---- */

static void fmt_ins(char *out, size_t cap, double v) {
  if (v < 0)
    snprintf(out, cap, "-");
  else
    snprintf(out, cap, "%.0f", v);
}

typedef struct table_opts {
  const char *conf, *history;
  size_t pairs;
  int rounds, json, callgrind;
} table_opts;

static int table_row(const table_opts *o, const hp_mode *m, const hp_size *s) {
  char full[1024];
  mode_conf(full, sizeof full, o->conf, m, 0);
  ga_allocator_t *a = open_allocator(full);
  if (!a || set_history(a, o->history)) {
    if (a) ga_destroy(a);
    return -1;
  }
  interleaved r[2];
  for (int w = 0; w < 2; w++) {
    r[w] = (interleaved){.ga = {.a = a, .by = BY_GA, .size = s->bytes, .stream = NULL},
                         .libc = {.by = BY_LIBC, .size = s->bytes},
                         .pairs = o->pairs,
                         .rounds = o->rounds};
    if (w == 0) {
      interleave(&r[0]); /* the main thread */
    } else {
      pthread_t t;
      pthread_create(&t, NULL, interleave, &r[1]);
      pthread_join(t, NULL);
    }
    if (r[w].failed) {
      fprintf(stderr, "ga-bench hotpath: %s\n", r[w].ga.error);
      ga_destroy(a);
      return -1;
    }
  }
  char backend[16];
  snprintf(backend, sizeof backend, "%s", ga_backend_name(a));
  ga_destroy(a);
  double gi = (double)r[0].ga_ins, li = (double)r[0].libc_ins;
  const char *source = gi >= 0 ? "counter" : "none";
  if (gi < 0 && o->callgrind) {
    gi = callgrind_per_pair(o->conf, m->name, s->bytes, 0);
    li = callgrind_per_pair(o->conf, m->name, s->bytes, 1);
    source = gi >= 0 ? "callgrind" : "none";
  }
  if (o->json) {
    printf("{\"mode\":\"%s\",\"size\":\"%s\",\"bytes\":%zu,\"pairs\":%zu,\"backend\":\"%s\",\"conf\":",
           m->name, s->name, s->bytes, r[0].done, backend);
    json_string(stdout, full);
    printf(",\"main\":{\"ga_ns_per_pair\":%.1f,\"libc_ns_per_pair\":%.1f,\"ga_over_libc\":%.3f}", r[0].ga_ns,
           r[0].libc_ns, r[0].ga_ns / r[0].libc_ns);
    printf(",\"worker\":{\"ga_ns_per_pair\":%.1f,\"libc_ns_per_pair\":%.1f,\"ga_over_libc\":%.3f}",
           r[1].ga_ns, r[1].libc_ns, r[1].ga_ns / r[1].libc_ns);
    char gis[16] = "null", lis[16] = "null";
    if (gi >= 0) fmt_ins(gis, sizeof gis, gi);
    if (li >= 0) fmt_ins(lis, sizeof lis, li);
    printf(
        ",\"ga_instructions_per_pair\":%s,\"libc_instructions_per_pair\":%s,\"instructions_from\":\"%s\"}\n",
        gis, lis, source);
  } else {
    char gis[16], lis[16];
    fmt_ins(gis, sizeof gis, gi);
    fmt_ins(lis, sizeof lis, li);
    printf("  %-11s %-7s %9.1f %9.1f %6.2f   %9.1f %9.1f %6.2f   %8s %8s\n", m->name, s->name, r[0].ga_ns,
           r[0].libc_ns, r[0].ga_ns / r[0].libc_ns, r[1].ga_ns, r[1].libc_ns, r[1].ga_ns / r[1].libc_ns, gis,
           lis);
  }
  fflush(stdout);
  return 0;
}

/* ---- Threads ---- */

typedef struct scale_shot {
  loop_args l;
  size_t pairs;
  pthread_barrier_t *start;
  double seconds;
  int failed;
} scale_shot;

static void *scale_thread(void *arg) {
  scale_shot *s = arg;
  s->failed = pairs(&s->l, 1); /* warm: a segment, a heap chunk, a thread cache */
  pthread_barrier_wait(s->start);
  double t0 = now();
  if (!s->failed) s->failed = pairs(&s->l, s->pairs);
  s->seconds = now() - t0;
  return NULL;
}

/* n threads of `pairs` pairs each at once; ns per pair per thread (the
 * slowest thread's time), or -1. */
static double scale_run(ga_allocator_t *a, int by, int own_streams, size_t bytes, size_t pairs_each, int n) {
  scale_shot *s = calloc((size_t)n, sizeof *s);
  pthread_t *t = calloc((size_t)n, sizeof *t);
  pthread_barrier_t start;
  if (!s || !t) exit(2);
  pthread_barrier_init(&start, NULL, (unsigned)n);
  for (int i = 0; i < n; i++) {
    s[i] = (scale_shot){.l = {.a = a,
                              .by = by,
                              .size = bytes,
                              .stream = own_streams ? (ga_stream_t)(uintptr_t)(0x100 + i) : NULL},
                        .pairs = pairs_each,
                        .start = &start};
    pthread_create(&t[i], NULL, scale_thread, &s[i]);
  }
  double worst = 0;
  int failed = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(t[i], NULL);
    if (s[i].seconds > worst) worst = s[i].seconds;
    if (s[i].failed && !failed) {
      failed = 1;
      fprintf(stderr, "ga-bench hotpath: %s\n", s[i].l.error);
    }
  }
  pthread_barrier_destroy(&start);
  free(s);
  free(t);
  return failed ? -1.0 : worst * 1e9 / (double)pairs_each;
}

static int scaling(const char *conf, const int *threads, int nthreads, const hp_size *sizes, int nsizes,
                   size_t pairs_each, int json) {
  int have_mi = mimalloc_load() == 0;
  static const char *const names[] = {"gardenalloc, one stream", "gardenalloc, stream per thread",
                                      "C library", "mimalloc"};
  if (!json) {
    printf(
        "thread scaling: %zu allocate+free pairs per thread; ns per pair in each thread (the slowest; flat "
        "is\n"
        "linear scaling); gardenalloc: one allocator (conf \"%s\"), on the default stream or a stream per "
        "thread\n",
        pairs_each, conf);
    printf(
        "  (%ld cores online; threads beyond the cores, or threads sharing one core, measure no scaling)\n",
        sysconf(_SC_NPROCESSORS_ONLN));
    if (!have_mi) printf("  mimalloc: libmimalloc.so.2 not found (Debian: libmimalloc2.0), left out\n");
  }
  for (int k = 0; k < nsizes; k++) {
    ga_allocator_t *a = open_allocator(conf);
    if (!a) return 2;
    if (!json) {
      printf("\n  %-34s", sizes[k].name);
      for (int j = 0; j < nthreads; j++) printf(" %7d thr", threads[j]);
      printf("\n");
    }
    for (int w = 0; w < 4; w++) {
      if (w == 3 && !have_mi) continue;
      if (!json) printf("  %-34s", names[w]);
      for (int j = 0; j < nthreads; j++) {
        int by = w < 2 ? BY_GA : w == 2 ? BY_LIBC : BY_MI;
        double ns = scale_run(a, by, w == 1, sizes[k].bytes, pairs_each, threads[j]);
        if (ns < 0) {
          ga_destroy(a);
          return 1;
        }
        if (json)
          printf(
              "{\"threads\":%d,\"allocator\":\"%s\",\"size\":\"%s\",\"bytes\":%zu,\"pairs_per_thread\":%zu,"
              "\"ns_per_pair\":%.1f,\"mpairs_per_s\":%.2f}\n",
              threads[j], names[w], sizes[k].name, sizes[k].bytes, pairs_each, ns, threads[j] * 1e3 / ns);
        else
          printf(" %8.1f ns", ns);
        fflush(stdout);
      }
      if (!json) printf("\n");
    }
    ga_destroy(a);
  }
  return 0;
}

/* ---- The command ---- */

static const char usage[] =
    "usage: ga-bench hotpath [--pairs N] [--sizes LIST] [--modes LIST] [--conf STR] [--instructions]\n"
    "                        [--threads LIST] [--history off|on|stacks] [--json]\n"
    "  Allocate+free pairs served from the cache, for each size (default 4k,64k,1m,8m,16m,64m) and mode\n"
    "  (native, expandable, pytorch = expandable_policy:pytorch; default all), next to the C library's\n"
    "  malloc/free of the same size: ns per pair and the ratio, taken interleaved, in the main thread\n"
    "  and in a worker thread (at most 2 s each), and instructions per pair from the CPU's counter\n"
    "  where there is one.\n"
    "  --instructions: where there is none, from valgrind's callgrind (this program run under it twice\n"
    "  per size and mode, the difference of 20000 and 60000 pairs, on a simulated device of 8 GiB).\n"
    "  --threads 1,2,4,8,16: thread scaling instead, on one native allocator (--conf), every thread on\n"
    "  one stream or each on its own, next to the C library and mimalloc (when libmimalloc.so.2 loads),\n"
    "  at the sizes given (default 4k,8m). --history on records the allocation history (3 entries per\n"
    "  pair), stacks with C stacks as well. --only SIZE --mode MODE [--libc]: one loop in the main\n"
    "  thread, no output (what --instructions runs under callgrind).\n";

static int parse_list(const char *list, char items[][32], int max) {
  int n = 0;
  while (*list && n < max) {
    const char *e = strchr(list, ',');
    size_t len = e ? (size_t)(e - list) : strlen(list);
    if (len == 0 || len >= 32) return -1;
    memcpy(items[n], list, len);
    items[n++][len] = 0;
    list += len + (e ? 1 : 0);
  }
  return *list ? -1 : n;
}

int cmd_hotpath(int argc, char **argv) {
  table_opts o = {.conf = getenv("GARDENALLOC_CONF"), .history = "off", .pairs = 2000000};
  const char *only = NULL, *only_mode = "native", *sizes_arg = NULL, *modes_arg = NULL, *threads_arg = NULL;
  int libc = 0, pairs_given = 0;
  for (int i = 0; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strcmp(argv[i], "--json")) {
      o.json = 1;
    } else if (!strcmp(argv[i], "--instructions")) {
      o.callgrind = 1;
    } else if (!strcmp(argv[i], "--libc")) {
      libc = 1;
    } else if (!v) {
      fprintf(stderr, "ga-bench hotpath: '%s' is not an option or lacks its value\n%s", argv[i], usage);
      return 2;
    } else if (!strcmp(argv[i], "--history")) {
      o.history = argv[++i];
      if (strcmp(o.history, "off") && strcmp(o.history, "on") && strcmp(o.history, "stacks"))
        return fprintf(stderr, "ga-bench hotpath: --history '%s' is not off, on or stacks\n", o.history), 2;
    } else if (!strcmp(argv[i], "--pairs")) {
      o.pairs = strtoull(argv[++i], &end, 10);
      if (*end || o.pairs == 0 || v[0] == '-')
        return fprintf(stderr, "ga-bench hotpath: --pairs '%s' must be a positive integer\n", v), 2;
      pairs_given = 1;
    } else if (!strcmp(argv[i], "--threads")) {
      threads_arg = argv[++i];
    } else if (!strcmp(argv[i], "--sizes")) {
      sizes_arg = argv[++i];
    } else if (!strcmp(argv[i], "--modes")) {
      modes_arg = argv[++i];
    } else if (!strcmp(argv[i], "--conf")) {
      o.conf = argv[++i];
    } else if (!strcmp(argv[i], "--only")) {
      only = argv[++i];
    } else if (!strcmp(argv[i], "--mode")) {
      only_mode = argv[++i];
    } else {
      fprintf(stderr, "ga-bench hotpath: unknown option '%s'\n%s", argv[i], usage);
      return 2;
    }
  }
  if (!o.conf) o.conf = "";
  o.rounds =
      o.pairs >= 2000 ? (int)(o.pairs / 1000 < 100000 ? o.pairs / 1000 : 100000) : 1; /* 1000 pairs a batch */

  /* Sizes and modes. */
  hp_size sizes[16];
  int nsizes = 0;
  char items[16][32];
  const char *deflt = threads_arg ? "4k,8m" : NULL;
  if (sizes_arg || deflt) {
    int n = parse_list(sizes_arg ? sizes_arg : deflt, items, 16);
    for (int k = 0; k < n; k++, nsizes++) {
      sizes[k].bytes = parse_bytes(items[k], sizes[k].name, sizeof sizes[k].name);
      if (!sizes[k].bytes) n = -1;
    }
    if (n <= 0)
      return fprintf(stderr, "ga-bench hotpath: --sizes '%s' is not a list of sizes (4k,8m,...)\n",
                     sizes_arg),
             2;
  } else {
    nsizes = (int)(sizeof default_sizes / sizeof *default_sizes);
    memcpy(sizes, default_sizes, sizeof default_sizes);
  }
  const hp_mode *modes[NMODES];
  int nmodes = 0;
  if (modes_arg) {
    int n = parse_list(modes_arg, items, 16);
    for (int k = 0; k < n; k++) {
      int found = -1;
      for (int j = 0; j < NMODES; j++)
        if (!strcmp(items[k], all_modes[j].name)) found = j;
      if (found < 0 || nmodes == NMODES)
        n = -1;
      else
        modes[nmodes++] = &all_modes[found];
    }
    if (n <= 0)
      return fprintf(stderr, "ga-bench hotpath: --modes '%s': each is native, expandable or pytorch\n",
                     modes_arg),
             2;
  } else {
    for (int j = 0; j < NMODES; j++) modes[nmodes++] = &all_modes[j];
  }

  if (only) {
    /* small and large: the sizes of earlier versions. */
    char name[32];
    size_t bytes = !strcmp(only, "small")   ? 4096
                   : !strcmp(only, "large") ? (size_t)8 << 20
                                            : parse_bytes(only, name, sizeof name);
    const hp_mode *m = NULL;
    for (int j = 0; j < NMODES; j++)
      if (!strcmp(only_mode, all_modes[j].name)) m = &all_modes[j];
    if (!bytes || !m)
      return fprintf(stderr, "ga-bench hotpath: --only '%s' --mode '%s'\n", only, only_mode), 2;
    return only_loop(o.conf, m, bytes, pairs_given ? o.pairs : 100000, libc, o.history);
  }

  if (threads_arg) {
    int threads[16];
    int n = parse_list(threads_arg, items, 16);
    for (int k = 0; k < n; k++) {
      threads[k] = atoi(items[k]);
      if (threads[k] < 1 || threads[k] > 256) n = -1;
    }
    if (n <= 0)
      return fprintf(stderr, "ga-bench hotpath: --threads '%s' is not a list of thread counts (1..256)\n",
                     threads_arg),
             2;
    return scaling(o.conf, threads, n, sizes, nsizes, pairs_given ? o.pairs : 1000000, o.json);
  }

  if (!o.json) {
    ga_allocator_t *a = open_allocator(o.conf);
    if (!a) return 2;
    printf(
        "allocate+free pairs served from the cache, %zu per size and mode (or 2 s), interleaved with\n"
        "the C library's malloc/free in %d rounds (backend %s, conf \"%s\", history %s)\n",
        o.pairs, o.rounds, ga_backend_name(a), o.conf, o.history);
    ga_destroy(a);
    printf("  %-19s %-26s   %-26s   %s\n", "", "------ main thread -------", "----- worker thread ------",
           "-- instructions --");
    printf("  %-11s %-7s %9s %9s %6s   %9s %9s %6s   %8s %8s\n", "mode", "size", "ga ns", "libc ns", "ratio",
           "ga ns", "libc ns", "ratio", "ga", "libc");
  }
  for (int j = 0; j < nmodes; j++)
    for (int k = 0; k < nsizes; k++)
      if (table_row(&o, modes[j], &sizes[k])) return 1;
  return 0;
}
