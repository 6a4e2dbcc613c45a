/* scale.c — `ga-bench scale`: the CPU cost of one allocation and one free
 * with N blocks live, for N from 10^3 up to 10^6, in every mode.
 *
 * A series is a mode (native, expandable, expandable_policy:pytorch) and a
 * pattern of sizes:
 *   4k     every block 4 KiB, allocated one after the other;
 *   mixed  sizes log-uniform from 512 B to 4 MiB, and one random live block
 *          freed after every third allocation, so free holes lie between
 *          live blocks.
 * Each series fills one allocator up to N live blocks and, at N, measures:
 *   alloc  allocations of fresh blocks (memory grows: new segments, pages
 *          mapped); each round allocates W blocks, frees them again and
 *          empties the cache untimed, so every round starts at N;
 *   free   frees of blocks picked at random among the live ones;
 *   reuse  the allocations that follow those frees (the holes they left);
 *   empty  ga_empty_cache right after RELEASE_K random live blocks were freed
 *          (what it gives back is a few blocks; what is live is N);
 *   refused  a request of 1 GiB (larger than anything cached) right after
 *          RELEASE_K random frees, with the memory fraction set to what is
 *          reserved: it goes down the whole retry ladder (free-and-retry:
 *          native and PyTorch's policy release every cached block, the
 *          default waits for the streams and tries to move pages) and fails.
 *          Both run RELEASE_ROUNDS times per point; the blocks freed are
 *          allocated again untimed.
 *   fit    ga_would_fit of FIT_REQUESTS sizes of the pattern (a dry run of
 *          as many mallocs on a model of the free blocks), and
 *   grow   ga_would_fit of FIT_REQUESTS sizes of 32 to 64 MiB, which no
 *          free block of either pattern serves: each goes to the retry
 *          ladder's first step (a new segment, or a growth of the stream's
 *          mapped range), and
 *   largest  ga_largest_free without the device's call (the largest request
 *          the cache serves), each FIT_ROUNDS times after the release
 *          rounds, ga_largest_free first: a model of 10^5 free blocks is
 *          megabytes that push out of the caches what the other figures
 *          touch, so none of them is measured right after one.
 * W is N/10 (at least 100, at most 20000) and batches repeat until at least
 * 2000 of each were timed, after one untimed batch (steady state). Times are
 * the thread's CPU time per operation (CLOCK_THREAD_CPUTIME_ID), the
 * simulated device's own bookkeeping included, its modelled driver time not.
 * All of that is one round; each point repeats it --rounds times (default 5)
 * and reports each figure's median, minimum and maximum over the rounds (on a
 * shared machine one round's figure moves by up to 2x). A series that reaches
 * its budget after its first round at a point reports the rounds it finished.
 *
 * The glibc series run the same patterns (the same sizes, the same random
 * picks) with the C library's malloc and free at the same N: a floor for the
 * memory-latency growth any allocator pays with N records scattered in
 * memory. Only alloc, free and reuse apply to them. Their child sets
 * M_MMAP_THRESHOLD to its largest value (every block up to 4 MiB comes from
 * the heap: 10^6 separate mappings would pass the host's map limit) and
 * M_TRIM_THRESHOLD past anything reached (freed memory stays with the
 * process), and turns transparent huge pages off (a block touches its first
 * page, not 2 MiB). Their fresh allocations include the kernel's first touch
 * of new pages. A build under AddressSanitizer, ThreadSanitizer or
 * MemorySanitizer replaces malloc with the sanitizer's: there is no C library
 * to measure, so the glibc series are left out of the default list and
 * refused by name.
 *
 * Each series runs in a child process with a budget of CPU time: a series
 * that reaches it stops filling and says where it was (a mode whose cost
 * grows with N cannot hold up bench/run.sh); a child still running at four
 * times the budget plus a minute of wall time (one call that never returns)
 * is killed. The table, a CSV
 * (scale.csv, its command in scale.cmd) and a log-log plot (scale.svg) go to
 * --out.
 *
 * Instructions, under valgrind's callgrind: every timed call goes through a
 * function of its own that does nothing else (scale_op_alloc, scale_op_free,
 * scale_op_reuse, scale_op_empty, scale_op_refused, scale_op_would_fit,
 * scale_op_largest, scale_op_would_grow; for the glibc series the first three call malloc and
 * free), and only timed calls go through them: filling, the untimed frees and
 * allocations around the rounds and the benchmark's own loop call the API
 * directly. Run as
 *   valgrind --tool=callgrind --collect-atstart=no --toggle-collect=scale_op_alloc
 *     (one --toggle-collect per function) ga-bench scale --rounds 1 ...
 * callgrind collects exactly what those calls execute. At each point the
 * child zeroes what it collected before the measured rounds (the warm-up
 * batch goes through the same functions) and, after them, dumps a profile
 * whose trigger names the series, N and the calls of each metric:
 *   scale native 4k n=1000 rounds=1 alloc=2000 free=2000 reuse=2000
 *     empty_cache=20 refused=20 would_fit=5 largest_free=5 would_grow=5
 * so a function's inclusive instructions divided by its metric's calls is
 * the count per call (bench/tools/scale_instructions.py does it, with and
 * without the simulated device's operations). Outside valgrind the requests
 * are no-ops, and each function costs a call.
 */
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Whether malloc is a sanitizer's in this build (GCC defines the first two,
 * Clang answers __has_feature). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MALLOC_IS_SANITIZERS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define MALLOC_IS_SANITIZERS 1
#endif
#endif
#ifndef MALLOC_IS_SANITIZERS
#define MALLOC_IS_SANITIZERS 0
#endif

#include "bench.h"

/* Callgrind's client requests (see the top of the file): the zeroing before
 * a point's measured rounds and the dump after them. No-ops outside valgrind,
 * and where the header is missing. */
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define SCALE_CALLGRIND 1
#endif
#endif
#ifndef SCALE_CALLGRIND
#define CALLGRIND_ZERO_STATS       ((void)0)
#define CALLGRIND_DUMP_STATS_AT(s) ((void)(s))
#endif

/* The functions callgrind's --toggle-collect names must exist under their own
 * names: never inlined, and (GCC) never cloned for constant arguments nor
 * folded into a twin with the same body (scale_op_alloc and scale_op_reuse
 * are such twins), which noipa forbids; Clang neither clones nor folds
 * functions without being asked to. */
#if defined(__has_attribute)
#if __has_attribute(noipa)
#define SCALE_OP __attribute__((noipa))
#endif
#endif
#ifndef SCALE_OP
#define SCALE_OP __attribute__((noinline))
#endif

/* ---- Series ---- */

typedef struct scale_mode {
  const char *name, *conf; /* conf NULL: the C library's malloc/free */
} scale_mode;

static const scale_mode modes[] = {
    {"native", ""},
    {"expandable", "expandable_segments:True"},
    {"pytorch", "expandable_segments:True,expandable_policy:pytorch"},
    {"glibc", NULL},
};
#define NMODES 4
#define GLIBC  3 /* the index of the C library's series in modes[] */
#define NGA    3 /* the allocator's modes come first */
static const char *const mode_names[] = {"native", "expandable", "pytorch", "glibc"};
static const char *const patterns[] = {"4k", "mixed"};
#define NPATTERNS 2
#define NSERIES   (NMODES * NPATTERNS)
#define MAXPOINTS 32
#define MAXROUNDS 99

/* The figures of a point, each as median, minimum and maximum over the rounds. */
enum { M_ALLOC, M_FREE, M_REUSE, M_EMPTY, M_REFUSED, M_FIT, M_LARGEST, M_GROW, NMETRIC };
static const char *const metric_csv[NMETRIC] = {"alloc_ns",        "free_ns",      "reuse_ns",
                                                "empty_cache_ns",  "refused_ns",   "would_fit_ns",
                                                "largest_free_ns", "would_grow_ns"};

typedef struct point {
  uint64_t n, ops; /* ops: operations timed per round */
  int rounds;
  double v[NMETRIC][3]; /* ns per call: median, min, max (NAN: does not apply) */
  double cpu_s;         /* the series' CPU time so far */
} point;

typedef struct series {
  int mode, pattern, run;
  point p[MAXPOINTS];
  size_t np;
  char status[400]; /* "done", or why it stopped */
  const char *stop; /* for the plot: NULL (done), "budget", "failed", "killed" */
  uint64_t stop_n;  /* blocks live when it stopped */
} series;

/* ---- The child: one series ---- */

static uint64_t rng_state;
static uint64_t rng(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1DULL;
}

static size_t size_of(int pattern) {
  if (pattern == 0) return 4096;
  unsigned e = 9 + (unsigned)(rng() % 13); /* 512 B .. 2 MiB, then up to twice that */
  return ((size_t)1 << e) + (size_t)(rng() % ((uint64_t)1 << e));
}

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
/* The series' own CPU time: its budget, the same on a busy machine. */
static double process_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static double wall_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct run_state {
  ga_allocator_t *a; /* NULL: the C library's malloc/free */
  const char *name;  /* the series, "native 4k" */
  int pattern;
  void **live;
  size_t n, cap;
  double deadline, t0;
  int out; /* the pipe to the parent */
  char why[320];
  uint64_t calls[NMETRIC]; /* timed calls of each metric since the point's zeroing */
} run_state;

/* ---- The timed calls ----
 * One function per metric, called only where that metric is timed (see the
 * top of the file); a is NULL for the C library's series. */

static SCALE_OP int scale_op_alloc(ga_allocator_t *a, size_t size, void **p) {
  if (!a) return (*p = malloc(size)) ? 0 : -1;
  return ga_malloc(a, size, NULL, p) == GA_OK ? 0 : -1;
}

static SCALE_OP int scale_op_reuse(ga_allocator_t *a, size_t size, void **p) {
  if (!a) return (*p = malloc(size)) ? 0 : -1;
  return ga_malloc(a, size, NULL, p) == GA_OK ? 0 : -1;
}

static SCALE_OP int scale_op_free(ga_allocator_t *a, void *p) {
  if (!a) {
    free(p);
    return 0;
  }
  return ga_free(a, p) == GA_OK ? 0 : -1;
}

static SCALE_OP ga_status_t scale_op_empty(ga_allocator_t *a) { return ga_empty_cache(a); }

static SCALE_OP ga_status_t scale_op_refused(ga_allocator_t *a, size_t size, void **p) {
  return ga_malloc(a, size, NULL, p);
}

static SCALE_OP ga_status_t scale_op_would_fit(ga_allocator_t *a, const size_t *sizes, size_t n,
                                               size_t *fit) {
  return ga_would_fit(a, sizes, n, NULL, fit);
}

static SCALE_OP ga_status_t scale_op_would_grow(ga_allocator_t *a, const size_t *sizes, size_t n,
                                                size_t *fit) {
  return ga_would_fit(a, sizes, n, NULL, fit);
}

static SCALE_OP ga_status_t scale_op_largest(ga_allocator_t *a, size_t *cached) {
  return ga_largest_free(a, NULL, cached, NULL);
}

static void say(run_state *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void say(run_state *r, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (k < 0) return;
  if ((size_t)k > sizeof line - 2) k = (int)sizeof line - 2;
  line[k++] = '\n';
  if (write(r->out, line, (size_t)k) != k) _exit(3);
}

/* How alloc_one and free_at call the allocator: directly (untimed), or
 * through the timed metric's function, counting the call. */
#define UNTIMED (-1)

/* 0, or -1 with r->why set. */
static int alloc_one(run_state *r, int metric) {
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 4096;
    void **v = realloc(r->live, cap * sizeof *v);
    if (!v) return snprintf(r->why, sizeof r->why, "host out of memory"), -1;
    r->live = v;
    r->cap = cap;
  }
  size_t size = size_of(r->pattern);
  int bad;
  if (metric == UNTIMED)
    bad = r->a ? ga_malloc(r->a, size, NULL, &r->live[r->n]) != GA_OK : !(r->live[r->n] = malloc(size));
  else {
    r->calls[metric]++;
    if (metric == M_ALLOC)
      bad = scale_op_alloc(r->a, size, &r->live[r->n]);
    else
      bad = scale_op_reuse(r->a, size, &r->live[r->n]);
  }
  if (bad && !r->a)
    return snprintf(r->why, sizeof r->why, "malloc(%zu) failed with %zu live", size, r->n), -1;
  if (bad) {
    snprintf(r->why, sizeof r->why, "ga_malloc(%zu) failed with %zu live: %.250s", size, r->n,
             ga_last_error());
    return -1;
  }
  r->n++;
  return 0;
}

static int free_at(run_state *r, size_t i, int metric) {
  void *p = r->live[i];
  r->live[i] = r->live[--r->n];
  int bad;
  if (metric == UNTIMED) {
    if (!r->a) {
      free(p);
      return 0;
    }
    bad = ga_free(r->a, p) != GA_OK;
  } else {
    r->calls[metric]++;
    bad = scale_op_free(r->a, p);
  }
  if (bad) {
    snprintf(r->why, sizeof r->why, "ga_free failed: %.120s", ga_last_error());
    return -1;
  }
  return 0;
}

static int over_budget(run_state *r) {
  if (process_now() < r->deadline) return 0;
  snprintf(r->why, sizeof r->why, "time budget reached after %.0f s", process_now() - r->t0);
  return 1;
}

/* Fills up to n live blocks (mixed: a random free after every third). */
static int fill(run_state *r, size_t n) {
  for (uint64_t k = 0; r->n < n; k++) {
    if (k % 256 == 0 && over_budget(r)) return -1;
    if (alloc_one(r, UNTIMED)) return -1;
    if (r->pattern == 1 && k % 3 == 2 && free_at(r, (size_t)(rng() % r->n), UNTIMED)) return -1;
  }
  return 0;
}

/* One round of fresh allocations: W allocated (timed), freed last first and
 * the cache emptied (untimed). Adds the seconds to *t. */
static int round_grow(run_state *r, size_t w, double *t) {
  size_t base = r->n;
  double c0 = cpu_now();
  for (size_t k = 0; k < w; k++) {
    if (k % 256 == 0 && over_budget(r)) return -1;
    if (alloc_one(r, M_ALLOC)) return -1;
  }
  *t += cpu_now() - c0;
  while (r->n > base)
    if (free_at(r, r->n - 1, UNTIMED)) return -1;
  if (r->a && ga_empty_cache(r->a) != GA_OK) {
    snprintf(r->why, sizeof r->why, "ga_empty_cache failed: %.120s", ga_last_error());
    return -1;
  }
  return 0;
}

/* One round of random frees then as many allocations (both timed). */
static int round_reuse(run_state *r, size_t w, double *tf, double *ta) {
  double c0 = cpu_now();
  int bad = 0;
  for (size_t k = 0; k < w && !bad; k++)
    bad = (k % 256 == 0 && over_budget(r)) || free_at(r, (size_t)(rng() % r->n), M_FREE);
  if (bad) return -1;
  double c1 = cpu_now();
  for (size_t k = 0; k < w; k++) {
    if (k % 256 == 0 && over_budget(r)) return -1;
    if (alloc_one(r, M_REUSE)) return -1;
  }
  *tf += c1 - c0;
  *ta += cpu_now() - c1;
  return 0;
}

#define RELEASE_K      16
#define RELEASE_ROUNDS 20
#define FIT_REQUESTS   16
#define FIT_ROUNDS     5

/* One round of releases (see the top of the file): adds the seconds of one
 * ga_empty_cache to *te and of one refused request to *to. */
static int round_release(run_state *r, double *te, double *to) {
  for (int k = 0; k < RELEASE_K; k++)
    if (free_at(r, (size_t)(rng() % r->n), UNTIMED)) return -1;
  r->calls[M_EMPTY]++;
  double c0 = cpu_now();
  ga_status_t st = scale_op_empty(r->a);
  *te += cpu_now() - c0;
  if (st != GA_OK)
    return snprintf(r->why, sizeof r->why, "ga_empty_cache failed: %.120s", ga_last_error()), -1;
  for (int k = 0; k < RELEASE_K; k++)
    if (alloc_one(r, UNTIMED)) return -1;
  for (int k = 0; k < RELEASE_K; k++)
    if (free_at(r, (size_t)(rng() % r->n), UNTIMED)) return -1;
  ga_stats_t stats;
  size_t free_b = 0, total = 0;
  if (ga_stats(r->a, &stats) != GA_OK || ga_mem_get_info(r->a, &free_b, &total) != GA_OK || !total)
    return snprintf(r->why, sizeof r->why, "ga_stats/ga_mem_get_info failed: %.120s", ga_last_error()), -1;
  double fraction = (double)stats.reserved_bytes[GA_POOL_ALL].current / (double)total;
  if (ga_set_memory_fraction(r->a, fraction > 1.0 ? 1.0 : fraction) != GA_OK)
    return snprintf(r->why, sizeof r->why, "ga_set_memory_fraction failed: %.120s", ga_last_error()), -1;
  void *p = NULL;
  r->calls[M_REFUSED]++;
  c0 = cpu_now();
  st = scale_op_refused(r->a, (size_t)1 << 30, &p);
  *to += cpu_now() - c0;
  if (st == GA_OK) (void)ga_free(r->a, p);
  if (st != GA_OK && st != GA_ERR_OOM)
    return snprintf(r->why, sizeof r->why, "the refused request failed otherwise: %.120s", ga_last_error()),
           -1;
  if (ga_set_memory_fraction(r->a, 1.0) != GA_OK)
    return snprintf(r->why, sizeof r->why, "ga_set_memory_fraction failed: %.120s", ga_last_error()), -1;
  for (int k = 0; k < RELEASE_K; k++)
    if (alloc_one(r, UNTIMED)) return -1;
  return 0;
}

typedef ga_status_t (*would_fit_op)(ga_allocator_t *, const size_t *, size_t, size_t *);

/* FIT_ROUNDS timed calls of op (metric m) on the FIT_REQUESTS sizes: adds their seconds to *t. */
static int rounds_would_fit(run_state *r, int m, would_fit_op op, const size_t *sizes, double *t,
                            const char *what) {
  size_t fit = 0;
  for (int k = 0; k < FIT_ROUNDS; k++) {
    if (over_budget(r)) return -1;
    r->calls[m]++;
    double c0 = cpu_now();
    ga_status_t st = op(r->a, sizes, FIT_REQUESTS, &fit);
    *t += cpu_now() - c0;
    if (st != GA_OK) return snprintf(r->why, sizeof r->why, "%s failed: %.120s", what, ga_last_error()), -1;
  }
  return 0;
}

/* FIT_ROUNDS calls of ga_largest_free (the cache alone), then as many of
 * ga_would_fit of FIT_REQUESTS sizes of the pattern, then as many of
 * FIT_REQUESTS sizes past every free block: adds their seconds to *tl, *tw
 * and *tg. */
static int rounds_fit(run_state *r, double *tw, double *tl, double *tg) {
  size_t sizes[FIT_REQUESTS], big[FIT_REQUESTS], cached = 0;
  for (int k = 0; k < FIT_REQUESTS; k++) sizes[k] = size_of(r->pattern);
  for (int k = 0; k < FIT_REQUESTS; k++) /* 32 to 64 MiB, the same at every point (no draw from rng) */
    big[k] = ((size_t)32 << 20) + (size_t)((k * 37) % 33) * ((size_t)1 << 20) + (size_t)k * 4096;
  for (int k = 0; k < FIT_ROUNDS; k++) {
    r->calls[M_LARGEST]++;
    double c0 = cpu_now();
    ga_status_t st = scale_op_largest(r->a, &cached);
    *tl += cpu_now() - c0;
    if (st != GA_OK)
      return snprintf(r->why, sizeof r->why, "ga_largest_free failed: %.120s", ga_last_error()), -1;
  }
  if (rounds_would_fit(r, M_FIT, scale_op_would_fit, sizes, tw, "ga_would_fit")) return -1;
  return rounds_would_fit(r, M_GROW, scale_op_would_grow, big, tg, "ga_would_fit past the cache");
}

static int by_value(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* Median, minimum and maximum of v[0..n) (n >= 1; sorts v). */
static void summarise(double *v, int n, double out[3]) {
  qsort(v, (size_t)n, sizeof *v, by_value);
  out[0] = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  out[1] = v[0];
  out[2] = v[n - 1];
}

/* Measures at r->n live blocks, `rounds` times, and reports one point (with
 * the rounds done when the budget ran out after the first). */
static int measure_at(run_state *r, int rounds) {
  size_t n = r->n, w = n / 10;
  if (w < 100) w = 100;
  if (w > 20000) w = 20000;
  size_t batches = (2000 + w - 1) / w;
  double v[NMETRIC][MAXROUNDS], ignored = 0, ignored2 = 0;
  if (round_grow(r, w, &ignored) || round_reuse(r, w, &ignored, &ignored2)) return -1; /* warm */
  int done = 0, bad = 0;
  CALLGRIND_ZERO_STATS;
  memset(r->calls, 0, sizeof r->calls);
  for (; done < rounds && !bad; done++) {
    if (done > 0 && over_budget(r)) break;
    double tg = 0, tf = 0, ta = 0, te = 0, to = 0, tw = 0, tl = 0, tb = 0;
    for (size_t k = 0; k < batches && !bad; k++) bad = round_grow(r, w, &tg);
    for (size_t k = 0; k < batches && !bad; k++) bad = round_reuse(r, w, &tf, &ta);
    for (int k = 0; r->a && k < RELEASE_ROUNDS && !bad; k++)
      bad = over_budget(r) || round_release(r, &te, &to);
    if (r->a && !bad) bad = rounds_fit(r, &tw, &tl, &tb);
    if (bad) break;
    double ops = (double)(w * batches);
    v[M_ALLOC][done] = tg * 1e9 / ops;
    v[M_FREE][done] = tf * 1e9 / ops;
    v[M_REUSE][done] = ta * 1e9 / ops;
    v[M_EMPTY][done] = r->a ? te * 1e9 / RELEASE_ROUNDS : NAN;
    v[M_REFUSED][done] = r->a ? to * 1e9 / RELEASE_ROUNDS : NAN;
    v[M_FIT][done] = r->a ? tw * 1e9 / FIT_ROUNDS : NAN;
    v[M_LARGEST][done] = r->a ? tl * 1e9 / FIT_ROUNDS : NAN;
    v[M_GROW][done] = r->a ? tb * 1e9 / FIT_ROUNDS : NAN;
  }
  /* The calls counted include those of a round cut short (not in `done`). */
  char label[320];
  snprintf(label, sizeof label,
           "scale %s n=%zu rounds=%d alloc=%llu free=%llu reuse=%llu empty_cache=%llu refused=%llu "
           "would_fit=%llu largest_free=%llu would_grow=%llu",
           r->name, n, done, (unsigned long long)r->calls[M_ALLOC], (unsigned long long)r->calls[M_FREE],
           (unsigned long long)r->calls[M_REUSE], (unsigned long long)r->calls[M_EMPTY],
           (unsigned long long)r->calls[M_REFUSED], (unsigned long long)r->calls[M_FIT],
           (unsigned long long)r->calls[M_LARGEST], (unsigned long long)r->calls[M_GROW]);
  CALLGRIND_DUMP_STATS_AT(label);
  if (!done) return -1;
  char line[1024];
  int len = snprintf(line, sizeof line, "point %zu %zu %d %.2f", n, w * batches, done, process_now() - r->t0);
  for (int m = 0; m < NMETRIC; m++) {
    double s[3];
    summarise(v[m], done, s);
    for (int j = 0; j < 3; j++) len += snprintf(line + len, sizeof line - (size_t)len, " %.1f", s[j]);
  }
  say(r, "%s", line);
  return bad || done < rounds ? -1 : 0;
}

static void run_series(int out, const char *name, const char *conf, int pattern, const uint64_t *ns,
                       size_t nn, double budget, int rounds) {
  run_state r = {.name = name, .pattern = pattern, .out = out};
  r.t0 = process_now();
  r.deadline = r.t0 + budget;
  rng_state = 0x9E3779B97F4A7C15ULL + (uint64_t)pattern;
  if (!conf) { /* the C library (see the top of the file) */
    (void)prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
    if (!mallopt(M_MMAP_THRESHOLD, 32 << 20) || !mallopt(M_TRIM_THRESHOLD, INT32_MAX)) {
      say(&r, "stop 0 mallopt refused the thresholds");
      return;
    }
  } else if (ga_create(conf, 0, &r.a) != GA_OK) {
    say(&r, "stop 0 cannot create the allocator: %.200s", ga_last_error());
    return;
  }
  for (size_t i = 0; i < nn; i++)
    if (fill(&r, ns[i]) || measure_at(&r, rounds)) {
      say(&r, "stop %zu %s", r.n, r.why);
      return;
    }
  say(&r, "stop %zu done", r.n);
  /* The process exits without freeing: the allocator's teardown is not measured. */
}

/* ---- The parent ---- */

static void parse_line(series *s, char *line) {
  point p;
  unsigned long long n, ops;
  int used = 0;
  if (sscanf(line, "point %llu %llu %d %lf%n", &n, &ops, &p.rounds, &p.cpu_s, &used) == 4) {
    char *at = line + used, *end;
    for (int m = 0; m < NMETRIC; m++)
      for (int j = 0; j < 3; j++, at = end) {
        p.v[m][j] = strtod(at, &end);
        if (end == at) return; /* a broken line: no point */
      }
    p.n = n;
    p.ops = ops;
    if (s->np < MAXPOINTS) s->p[s->np++] = p;
  } else if (!strncmp(line, "stop ", 5)) {
    char *why = strchr(line + 5, ' ');
    s->stop_n = strtoull(line + 5, NULL, 10);
    s->stop = !why || !strcmp(why + 1, "done")       ? NULL
              : !strncmp(why + 1, "time budget", 11) ? "budget"
                                                     : "failed";
    snprintf(s->status, sizeof s->status, "%s", why ? why + 1 : "stopped");
    if (why && strcmp(why + 1, "done")) {
      size_t len = strlen(s->status);
      snprintf(s->status + len, sizeof s->status - len, " (at %.*s live)", (int)(why - line - 5), line + 5);
    }
  }
}

/* Runs one series in a child; kills it when it runs far past its budget. */
static void run_child(series *s, const char *name, const char *conf, const uint64_t *ns, size_t nn,
                      double budget, int rounds) {
  int fd[2];
  snprintf(s->status, sizeof s->status, "no result");
  s->stop = "failed"; /* until the child says otherwise */
  if (pipe(fd)) {
    snprintf(s->status, sizeof s->status, "pipe: %s", strerror(errno));
    return;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(s->status, sizeof s->status, "fork: %s", strerror(errno));
    close(fd[0]);
    close(fd[1]);
    return;
  }
  if (pid == 0) {
    close(fd[0]);
    run_series(fd[1], name, conf, s->pattern, ns, nn, budget, rounds);
    _exit(0);
  }
  close(fd[1]);
  double deadline = wall_now() + 4 * budget + 60; /* CPU budget; the machine may be shared */
  char buf[4096];
  size_t len = 0;
  int killed = 0;
  for (;;) {
    double left = deadline - wall_now();
    if (left <= 0) {
      kill(pid, SIGKILL);
      killed = 1;
      break;
    }
    struct pollfd pf = {.fd = fd[0], .events = POLLIN};
    int k = poll(&pf, 1, (int)(left * 1000) + 1);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) continue;
    ssize_t got = read(fd[0], buf + len, sizeof buf - 1 - len);
    if (got <= 0) break;
    len += (size_t)got;
    buf[len] = 0;
    char *nl;
    while ((nl = strchr(buf, '\n'))) {
      *nl = 0;
      parse_line(s, buf);
      len -= (size_t)(nl + 1 - buf);
      memmove(buf, nl + 1, len + 1);
    }
    if (len == sizeof buf - 1) len = 0; /* a line longer than the buffer: drop it */
  }
  close(fd[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  uint64_t last = s->np ? s->p[s->np - 1].n : 0;
  if (killed || WIFSIGNALED(st)) s->stop = "killed", s->stop_n = last;
  if (killed)
    snprintf(s->status, sizeof s->status, "killed after %.0f s of wall time (last point %llu)",
             4 * budget + 60, (unsigned long long)last);
  else if (WIFSIGNALED(st))
    snprintf(s->status, sizeof s->status, "crashed with signal %d (last point %llu)", WTERMSIG(st),
             (unsigned long long)last);
}

static const char *series_label(const series *s, char *buf, size_t len) {
  snprintf(buf, len, "%s %s", modes[s->mode].name, patterns[s->pattern]);
  return buf;
}

static const point *point_at(const series *s, uint64_t n) {
  for (size_t i = 0; i < s->np; i++)
    if (s->p[i].n == n) return &s->p[i];
  return NULL;
}

/* Nanoseconds to three significant digits and a unit, at most 7 characters:
 * "83 ns", "999 ns", "1.20 us", "47.3 us", "123 ms", "1.05 s". */
static int time_3(double ns, char *buf, size_t len) {
  static const char *const unit[] = {"ns", "us", "ms", "s"};
  int u = 0;
  while (u < 3 && ns >= 999.5) ns /= 1e3, u++;
  int decimals = u == 0 || ns >= 99.95 ? 0 : ns >= 9.995 ? 1 : 2;
  return snprintf(buf, len, "%.*f %s", decimals, ns, unit[u]);
}

/* "1.20 us (12%)": the median and the spread (max - min) / median, "(>10x)"
 * from 999.5 %, or the median alone with one round; "-" where there is no
 * figure. At most 14 characters ("45.7 us (999%)", "45.7 us (>10x)"): six
 * columns and N fit in 100. */
static const char *cell(const point *p, int m, char *buf, size_t len) {
  if (!p || isnan(p->v[m][0])) return snprintf(buf, len, "-"), buf;
  double v = p->v[m][0];
  int k = time_3(v, buf, len);
  if (p->rounds > 1 && k > 0 && (size_t)k < len) {
    double spread = v > 0 ? 100 * (p->v[m][2] - p->v[m][1]) / v : 0;
    if (spread < 999.5)
      snprintf(buf + k, len - (size_t)k, " (%.0f%%)", spread);
    else
      snprintf(buf + k, len - (size_t)k, " (>10x)");
  }
  return buf;
}

/* One figure over N for the allocator's series (not the C library's): each
 * column is headed by its mode over its pattern, 100 columns hold six. */
static void print_table(const series *sv, size_t nsv, const uint64_t *ns, size_t nn, int m,
                        const char *title) {
  printf("\n%s\n%-8s", title, "N live");
  for (size_t i = 0; i < nsv; i++)
    if (sv[i].mode != GLIBC) printf(" %14s", modes[sv[i].mode].name);
  printf("\n%-8s", "");
  for (size_t i = 0; i < nsv; i++)
    if (sv[i].mode != GLIBC) printf(" %14s", patterns[sv[i].pattern]);
  printf("\n");
  for (size_t k = 0; k < nn; k++) {
    printf("%-8llu", (unsigned long long)ns[k]);
    for (size_t i = 0; i < nsv; i++) {
      char buf[32];
      if (sv[i].mode != GLIBC) printf(" %14s", cell(point_at(&sv[i], ns[k]), m, buf, sizeof buf));
    }
    printf("\n");
  }
}

/* The C library's series: alloc, free and reuse per pattern. */
static void print_floor(const series *sv, size_t nsv, const uint64_t *ns, size_t nn) {
  size_t g[NPATTERNS], ng = 0;
  for (size_t i = 0; i < nsv; i++)
    if (sv[i].mode == GLIBC) g[ng++] = i;
  if (!ng && MALLOC_IS_SANITIZERS)
    printf("\nthe floor: not measured, malloc is the sanitizer's in this build, not the C library's\n");
  if (!ng) return;
  static const char *const what[3] = {"alloc", "free", "reuse"};
  printf("\nthe floor: the C library's malloc/free, the same patterns and N, CPU time per call:\n%-8s",
         "N live");
  for (size_t j = 0; j < ng; j++)
    for (int m = 0; m < 3; m++) printf(" %14s", patterns[sv[g[j]].pattern]);
  printf("\n%-8s", "");
  for (size_t j = 0; j < ng; j++)
    for (int m = 0; m < 3; m++) printf(" %14s", what[m]);
  printf("\n");
  for (size_t k = 0; k < nn; k++) {
    printf("%-8llu", (unsigned long long)ns[k]);
    for (size_t j = 0; j < ng; j++)
      for (int m = 0; m < 3; m++) {
        char buf[32];
        printf(" %14s", cell(point_at(&sv[g[j]], ns[k]), m, buf, sizeof buf));
      }
    printf("\n");
  }
}

/* ---- Memory latency at each N ----
 * A free of a random live block reads that block's record at least (and
 * the block map's slot, and its neighbours), wherever it lies: with N
 * records of 128 bytes, a load that misses every cache once N * 128 bytes
 * outgrow them. This measures that floor alone: loads that each depend on
 * the last, at random over N records of 128 bytes (one cycle through all of
 * them, in a random order), CPU time per load, LAT_ROUNDS rounds. */
#define LAT_LOADS  (1u << 20)
#define LAT_ROUNDS 3

typedef struct lat_rec {
  size_t next; /* the index of the record read next */
  char rest[128 - sizeof(size_t)];
} lat_rec;

/* ns per dependent load over n records: median, min, max in out; 0, or -1
 * when the host has no memory for them. */
static int latency_at(size_t n, double out[3]) {
  lat_rec *r = malloc(n * sizeof *r);
  size_t *order = malloc(n * sizeof *order);
  if (!r || !order) {
    free(r);
    free(order);
    return -1;
  }
  for (size_t i = 0; i < n; i++) order[i] = i;
  for (size_t i = n - 1; i > 0; i--) { /* a random order, then one cycle through it */
    size_t j = (size_t)(rng() % (i + 1)), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (size_t i = 0; i < n; i++) r[order[i]].next = order[(i + 1) % n];
  double v[LAT_ROUNDS];
  size_t at = order[0];
  for (int k = 0; k < LAT_ROUNDS; k++) {
    double c0 = cpu_now();
    for (unsigned i = 0; i < LAT_LOADS; i++) at = r[at].next;
    v[k] = (cpu_now() - c0) * 1e9 / LAT_LOADS;
  }
  volatile size_t sink = at; /* the chain's end is used: the loads stay */
  (void)sink;
  summarise(v, LAT_ROUNDS, out);
  free(r);
  free(order);
  return 0;
}

static void print_latency(const uint64_t *ns, size_t nn) {
  printf(
      "\nmemory latency, the floor under a random free: one load that depends on the last, at\n"
      "random over N records of 128 bytes (a block record's size), CPU time per load:\n%-8s %14s\n",
      "N live", "one load");
  rng_state = 0x9E3779B97F4A7C15ULL;
  for (size_t k = 0; k < nn; k++) {
    double v[3];
    printf("%-8llu", (unsigned long long)ns[k]);
    if (latency_at((size_t)ns[k], v)) {
      printf(" %14s\n", "no memory");
      continue;
    }
    point p = {.n = ns[k], .rounds = LAT_ROUNDS};
    for (int j = 0; j < 3; j++) p.v[0][j] = v[j];
    char buf[32];
    printf(" %14s\n", cell(&p, 0, buf, sizeof buf));
  }
}

/* ---- Plot: ns per operation over live blocks, log-log ---- */

static const char *const colours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                      "#E69F00", "#56B4E9", "#555555", "#999999"};
/* The allocator's series keep their colours; the C library's are grey. */
static const char *colour_of(const series *s) {
  return colours[s->mode == GLIBC ? 6 + s->pattern : s->pattern * NGA + s->mode];
}
static const double PW = 980, PH = 560, PL = 80, PR = 260, PT = 56, PB = 60;

static double lx_of(double v, double lo, double hi) {
  return PL + (PW - PL - PR) * (log10(v) - lo) / (hi - lo);
}
static double ly_of(double v, double lo, double hi) {
  return PT + (PH - PT - PB) * (1.0 - (log10(v) - lo) / (hi - lo));
}

static int plot(FILE *f, const series *sv, size_t nsv, const char *command, const char *backend) {
  double nlo = 1e300, nhi = 0, ylo = 1e300, yhi = 0;
  for (size_t i = 0; i < nsv; i++)
    for (size_t k = 0; k < sv[i].np; k++) {
      const point *p = &sv[i].p[k];
      double v[2] = {p->v[M_ALLOC][0], p->v[M_FREE][0]};
      if ((double)p->n < nlo) nlo = (double)p->n;
      if ((double)p->n > nhi) nhi = (double)p->n;
      for (int j = 0; j < 2; j++) {
        if (v[j] > 0 && v[j] < ylo) ylo = v[j];
        if (v[j] > yhi) yhi = v[j];
      }
    }
  if (nhi == 0) nlo = 1e3, nhi = 1e6, ylo = 10, yhi = 1e4;
  double xl = floor(log10(nlo)), xh = ceil(log10(nhi)), yl = floor(log10(ylo)), yh = ceil(log10(yhi));
  if (xh <= xl) xh = xl + 1;
  if (yh <= yl) yh = yl + 1;
  fprintf(
      f,
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n",
      PW, PH, PW, PH);
  if (command) {
    fprintf(f, "<desc>");
    svg_text_escaped(f, command);
    fprintf(f, "</desc>\n");
  }
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f, "<text x=\"%.0f\" y=\"24\" font-size=\"16\">CPU time per operation with N blocks live</text>\n",
          PL);
  fprintf(
      f,
      "<text x=\"%.0f\" y=\"42\" fill=\"#444\">solid: allocation of a fresh block; dotted: free of a random "
      "block; medians over the rounds; grey: glibc; backend %s; log-log</text>\n",
      PL, backend);
  /* Grid and ticks at powers of ten (and 2, 5 between them on the y axis). */
  fprintf(f, "<g font-size=\"12\">\n");
  for (double e = yl; e <= yh + 1e-9; e++)
    for (int m = 1; m <= (e < yh ? 5 : 1); m += (m == 1 ? 1 : 3)) {
      double v = (double)m * pow(10, e), py = ly_of(v, yl, yh);
      fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n", PL, py, PW - PR,
              py, m == 1 ? "#d8d8d8" : "#efefef");
      if (v >= 1000)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g us</text>\n", PL - 8, py + 4,
                v / 1000);
      else
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g ns</text>\n", PL - 8, py + 4, v);
    }
  for (double e = xl; e <= xh + 1e-9; e++) {
    double px = lx_of(pow(10, e), xl, xh);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d8d8d8\"/>\n", px, PT, px,
            PH - PB);
    fprintf(
        f,
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">10<tspan dy=\"-6\" font-size=\"9\">%.0f</tspan>"
        "</text>\n",
        px, PH - PB + 20, e);
  }
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"13\">N: blocks live</text>\n",
          (PL + PW - PR) / 2, PH - 16);
  fprintf(f,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n"
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n</g>\n",
          PL, PH - PB, PW - PR, PH - PB, PL, PT, PL, PH - PB);
  char label[64];
  for (size_t i = 0; i < nsv; i++) {
    const char *c = colour_of(&sv[i]);
    for (int j = 0; j < 2; j++) {
      fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s points=\"", c,
              j ? "1.5" : "2.5", j ? " stroke-dasharray=\"2,3\"" : "");
      for (size_t k = 0; k < sv[i].np; k++) {
        double v = sv[i].p[k].v[j ? M_FREE : M_ALLOC][0];
        if (v > 0) fprintf(f, "%.1f,%.1f ", lx_of((double)sv[i].p[k].n, xl, xh), ly_of(v, yl, yh));
      }
      fprintf(f, "\"/>\n");
    }
    for (size_t k = 0; k < sv[i].np; k++)
      if (sv[i].p[k].v[M_ALLOC][0] > 0)
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                lx_of((double)sv[i].p[k].n, xl, xh), ly_of(sv[i].p[k].v[M_ALLOC][0], yl, yh), c);
    double yy = PT + 8 + 40.0 * (double)i, lx = PW - PR + 16;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.5\"/>\n",
            lx, yy, lx + 36, yy, c);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", lx + 44, yy + 4);
    svg_text_escaped(f, series_label(&sv[i], label, sizeof label));
    fprintf(f, "</text>\n");
    if (sv[i].stop)
      fprintf(f,
              "<text x=\"%.1f\" y=\"%.1f\" fill=\"#a00\" font-size=\"10\">stopped at %llu live (%s)</text>\n",
              lx + 44, yy + 18, (unsigned long long)sv[i].stop_n, sv[i].stop);
  }
  fprintf(f, "</svg>\n");
  return ferror(f) ? -1 : 0;
}

/* ---- The command ---- */

static int usage_scale(FILE *f) {
  fprintf(f,
          "usage: ga-bench scale [--max-n N] [--budget-s S] [--rounds R] [--modes LIST]\n"
          "                      [--patterns LIST] [--capacity-mb N] [--backend sim|auto|cuda]\n"
          "                      [--out DIR]\n"
          "  The CPU time of one allocation and one free with N blocks live, N = 10^3, 3*10^3, ...\n"
          "  up to --max-n (default 1000000), for each mode (native, expandable, pytorch =\n"
          "  expandable_policy:pytorch; glibc = the C library's malloc/free, the floor) and\n"
          "  pattern (4k; mixed: 512 B to 4 MiB with holes). --rounds: measurements per point\n"
          "  (default 5, at most 99); each cell is their median and spread, (max - min) / median.\n"
          "  --budget-s: CPU time each series may take (default 180); a series that reaches it\n"
          "  stops and says at which N (after the first round at a point, with the rounds done).\n"
          "  --capacity-mb: the simulated device (default 4194304, 4 TiB: untouched memory costs\n"
          "  nothing). Writes DIR/scale.csv, scale.cmd and scale.svg (default DIR bench/results).\n");
  return f == stdout ? 0 : 2;
}

static int in_list(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; p && *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && !strncmp(p, name, n)) return 1;
    p = e ? e + 1 : NULL;
  }
  return 0;
}

static int list_ok(const char *list, const char *const *names, size_t n, const char *flag) {
  for (const char *p = list; *p;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p), k;
    for (k = 0; k < n; k++)
      if (strlen(names[k]) == len && !strncmp(p, names[k], len)) break;
    if (k == n) {
      fprintf(stderr, "ga-bench scale: %s: '%.*s' is not one of", flag, (int)len, p);
      for (k = 0; k < n; k++) fprintf(stderr, " %s", names[k]);
      fprintf(stderr, "\n");
      return -1;
    }
    p = e ? e + 1 : p + len;
  }
  return 0;
}

int cmd_scale(int argc, char **argv) {
  unsigned long long max_n = 1000000, capacity_mb = 4194304;
  double budget = 180;
  int rounds = 5;
  const char *mode_list =
                 MALLOC_IS_SANITIZERS ? "native,expandable,pytorch" : "native,expandable,pytorch,glibc",
             *pattern_list = "4k,mixed", *out = "bench/results", *backend = "sim";
  for (int i = 0; i < argc; i++) {
    char *end = NULL;
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage_scale(stdout);
    if (!v) return usage_scale(stderr);
    if (!strcmp(argv[i], "--max-n")) {
      max_n = strtoull(v, &end, 10);
      if (*end || max_n < 1000 || max_n > 100000000)
        return fprintf(stderr, "ga-bench scale: --max-n must be 1000 to 100000000\n"), 2;
    } else if (!strcmp(argv[i], "--budget-s")) {
      budget = strtod(v, &end);
      if (*end || !(budget > 0) || budget > 86400)
        return fprintf(stderr, "ga-bench scale: --budget-s must be positive seconds (at most a day)\n"), 2;
    } else if (!strcmp(argv[i], "--rounds")) {
      long k = strtol(v, &end, 10);
      if (*end || k < 1 || k > MAXROUNDS)
        return fprintf(stderr, "ga-bench scale: --rounds must be 1 to 99\n"), 2;
      rounds = (int)k;
    } else if (!strcmp(argv[i], "--capacity-mb")) {
      capacity_mb = strtoull(v, &end, 10);
      if (*end || capacity_mb < 2) return fprintf(stderr, "ga-bench scale: --capacity-mb must be >= 2\n"), 2;
    } else if (!strcmp(argv[i], "--modes")) {
      if (list_ok(v, mode_names, NMODES, "--modes")) return 2;
      if (MALLOC_IS_SANITIZERS && in_list(v, "glibc"))
        return fprintf(stderr,
                       "ga-bench scale: --modes glibc: malloc is the sanitizer's in this build, not the "
                       "C library's\n"),
               2;
      mode_list = v;
    } else if (!strcmp(argv[i], "--patterns")) {
      if (list_ok(v, patterns, NPATTERNS, "--patterns")) return 2;
      pattern_list = v;
    } else if (!strcmp(argv[i], "--backend")) {
      if (strcmp(v, "sim") && strcmp(v, "auto") && strcmp(v, "cuda"))
        return fprintf(stderr, "ga-bench scale: --backend must be sim, auto or cuda\n"), 2;
      backend = v;
    } else if (!strcmp(argv[i], "--out")) {
      out = v;
    } else
      return usage_scale(stderr);
    i++;
  }
  uint64_t ns[MAXPOINTS];
  size_t nn = 0;
  for (uint64_t d = 1000; d <= max_n && nn + 2 < MAXPOINTS; d *= 10) {
    ns[nn++] = d;
    if (3 * d <= max_n) ns[nn++] = 3 * d;
  }
  series sv[NSERIES];
  size_t nsv = 0;
  for (int p = 0; p < NPATTERNS; p++)
    for (int m = 0; m < NMODES; m++)
      if (in_list(mode_list, modes[m].name) && in_list(pattern_list, patterns[p]))
        sv[nsv++] = (series){.mode = m, .pattern = p};
  char err[256];
  if (mkdir_p(out, err, sizeof err)) return fprintf(stderr, "ga-bench scale: %s\n", err), 2;
  ga_strbuf cmd = {0};
  bench_command(&cmd, "scale", argc, argv);
  printf(
      "CPU time per operation with N blocks live; each cell the median of %d rounds and their\n"
      "spread, (max - min) / median (backend %s, simulated capacity %llu MiB, budget %.0f s per series)\n",
      rounds, backend, capacity_mb, budget);
  for (size_t i = 0; i < nsv; i++) {
    char conf[512], label[64];
    const char *mc = modes[sv[i].mode].conf;
    snprintf(conf, sizeof conf, "backend:%s,sim_capacity_mb:%llu%s%s", backend, capacity_mb,
             mc && mc[0] ? "," : "", mc ? mc : "");
    fprintf(stderr, "ga-bench scale: %s ...\n", series_label(&sv[i], label, sizeof label));
    run_child(&sv[i], label, modes[sv[i].mode].conf ? conf : NULL, ns, nn, budget, rounds);
    fprintf(stderr, "ga-bench scale: %s: %s, %zu points\n", label, sv[i].status, sv[i].np);
  }
  print_table(sv, nsv, ns, nn, 0, "allocation of a fresh block (growth included), CPU time per call:");
  print_table(sv, nsv, ns, nn, 1, "free of a random live block:");
  print_table(sv, nsv, ns, nn, 2, "allocation right after those frees (holes reused):");
  print_table(sv, nsv, ns, nn, 3, "ga_empty_cache right after 16 random frees, CPU time per call:");
  print_table(sv, nsv, ns, nn, 4,
              "a request refused after the whole retry ladder (memory fraction = reserved), 16 random\n"
              "frees before it, CPU time per call:");
  print_table(sv, nsv, ns, nn, M_FIT,
              "ga_would_fit of 16 requests of the pattern's sizes, CPU time per call:");
  print_table(sv, nsv, ns, nn, M_LARGEST,
              "ga_largest_free (the cache alone, no device call), CPU time per call:");
  print_table(sv, nsv, ns, nn, M_GROW,
              "ga_would_fit of 16 requests of 32-64 MiB, past every free block (the ladder's first\n"
              "step: new segments, or growths of the stream's mapped range), CPU time per call:");
  print_floor(sv, nsv, ns, nn);
  print_latency(ns, nn);
  int stopped = 0;
  for (size_t i = 0; i < nsv; i++) {
    char label[64];
    if (strcmp(sv[i].status, "done"))
      printf("%s%s: %s\n", stopped++ ? "" : "\n", series_label(&sv[i], label, sizeof label), sv[i].status);
  }
  /* Files: the CSV, its command, the plot. */
  char path[4096];
  staged csv = {0}, cmdf = {0}, svg = {0};
  snprintf(path, sizeof path, "%s/scale.csv", out);
  FILE *fc = staged_open(&csv, path);
  snprintf(path, sizeof path, "%s/scale.cmd", out);
  FILE *fm = staged_open(&cmdf, path);
  snprintf(path, sizeof path, "%s/scale.svg", out);
  FILE *fs = staged_open(&svg, path);
  int failed = !fc || !fm || !fs;
  if (!failed) {
    fprintf(fm, "%s\n", cmd.s);
    /* Each figure: its median over the rounds, then the minimum and maximum;
     * empty where it does not apply (the C library's empty_cache and refused). */
    fprintf(fc, "series,mode,conf,pattern,n_live,ops,rounds");
    for (int m = 0; m < NMETRIC; m++)
      fprintf(fc, ",%s,%s_min,%s_max", metric_csv[m], metric_csv[m], metric_csv[m]);
    fprintf(fc, ",cpu_s,status\n");
    for (size_t i = 0; i < nsv; i++) {
      char label[64];
      const char *conf = modes[sv[i].mode].conf ? modes[sv[i].mode].conf : "malloc";
      series_label(&sv[i], label, sizeof label);
      for (size_t k = 0; k < sv[i].np; k++) {
        const point *p = &sv[i].p[k];
        fprintf(fc, "%s,%s,\"%s\",%s,%llu,%llu,%d", label, modes[sv[i].mode].name, conf,
                patterns[sv[i].pattern], (unsigned long long)p->n, (unsigned long long)p->ops, p->rounds);
        for (int m = 0; m < NMETRIC; m++)
          for (int j = 0; j < 3; j++)
            if (isnan(p->v[m][j]))
              fputc(',', fc);
            else
              fprintf(fc, ",%.1f", p->v[m][j]);
        fprintf(fc, ",%.2f,\"%s\"\n", p->cpu_s, sv[i].status);
      }
      if (!sv[i].np) /* no point: the row says why */
        fprintf(fc, "%s,%s,\"%s\",%s,,,%.*s,\"%s\"\n", label, modes[sv[i].mode].name, conf,
                patterns[sv[i].pattern], 3 * NMETRIC + 1, ",,,,,,,,,,,,,,,,,,,,,,,,,,,,,,", sv[i].status);
    }
    failed = plot(fs, sv, nsv, cmd.s, backend) != 0;
  }
  if (failed || staged_commit(&csv) || staged_commit(&cmdf) || staged_commit(&svg)) {
    fprintf(stderr, "ga-bench scale: cannot write the results in %s: %s\n", out, strerror(errno));
    staged_discard(&csv);
    staged_discard(&cmdf);
    staged_discard(&svg);
    failed = 1;
  } else
    printf("\nCSV: %s/scale.csv (command in scale.cmd)\nplot: %s/scale.svg\n", out, out);
  strbuf_free(&cmd);
  return failed ? 1 : 0;
}
