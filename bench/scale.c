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
 * W is N/10 (at least 100, at most 20000) and rounds repeat until at least
 * 2000 of each were timed, after one untimed round (steady state). Times are
 * the thread's CPU time per operation (CLOCK_THREAD_CPUTIME_ID), the
 * simulated device's own bookkeeping included, its modelled driver time not.
 *
 * Each series runs in a child process with a budget of CPU time: a series
 * that reaches it stops filling and says where it was (a mode whose cost
 * grows with N cannot hold up bench/run.sh); a child still running at four
 * times the budget plus a minute of wall time (one call that never returns)
 * is killed. The table, a CSV
 * (scale.csv, its command in scale.cmd) and a log-log plot (scale.svg) go to
 * --out.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* Under valgrind's callgrind (valgrind --tool=callgrind --collect-atstart=no
 * ga-bench scale ...), the random frees of each point are collected alone
 * and dumped with the point's N: instructions (and, with --cache-sim=yes,
 * cache misses) per free, apart from the time. Outside valgrind these are
 * no-ops. */
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define SCALE_CALLGRIND 1
#endif
#endif
#ifndef SCALE_CALLGRIND
#define CALLGRIND_TOGGLE_COLLECT   ((void)0)
#define CALLGRIND_ZERO_STATS       ((void)0)
#define CALLGRIND_DUMP_STATS_AT(s) ((void)(s))
#endif

/* ---- Series ---- */

typedef struct scale_mode {
  const char *name, *conf;
} scale_mode;

static const scale_mode modes[] = {
    {"native", ""},
    {"expandable", "expandable_segments:True"},
    {"pytorch", "expandable_segments:True,expandable_policy:pytorch"},
};
#define NMODES 3
static const char *const patterns[] = {"4k", "mixed"};
#define NPATTERNS 2
#define NSERIES   (NMODES * NPATTERNS)
#define MAXPOINTS 32

typedef struct point {
  uint64_t n, ops;
  double alloc_ns, free_ns, reuse_ns, cpu_s; /* cpu_s: the series' CPU time so far */
  double empty_ns, refused_ns;               /* ga_empty_cache; a request refused after the ladder */
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
  ga_allocator_t *a;
  int pattern;
  void **live;
  size_t n, cap;
  double deadline, t0;
  int out; /* the pipe to the parent */
  char why[320];
} run_state;

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

/* 0, or -1 with r->why set. */
static int alloc_one(run_state *r) {
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 4096;
    void **v = realloc(r->live, cap * sizeof *v);
    if (!v) return snprintf(r->why, sizeof r->why, "host out of memory"), -1;
    r->live = v;
    r->cap = cap;
  }
  size_t size = size_of(r->pattern);
  if (ga_malloc(r->a, size, NULL, &r->live[r->n]) != GA_OK) {
    snprintf(r->why, sizeof r->why, "ga_malloc(%zu) failed with %zu live: %.250s", size, r->n,
             ga_last_error());
    return -1;
  }
  r->n++;
  return 0;
}

static int free_at(run_state *r, size_t i) {
  void *p = r->live[i];
  r->live[i] = r->live[--r->n];
  if (ga_free(r->a, p) != GA_OK) {
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
    if (alloc_one(r)) return -1;
    if (r->pattern == 1 && k % 3 == 2 && free_at(r, (size_t)(rng() % r->n))) return -1;
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
    if (alloc_one(r)) return -1;
  }
  *t += cpu_now() - c0;
  while (r->n > base)
    if (free_at(r, r->n - 1)) return -1;
  if (ga_empty_cache(r->a) != GA_OK) {
    snprintf(r->why, sizeof r->why, "ga_empty_cache failed: %.120s", ga_last_error());
    return -1;
  }
  return 0;
}

/* One round of random frees then as many allocations (both timed). */
static int round_reuse(run_state *r, size_t w, double *tf, double *ta) {
  double c0 = cpu_now();
  int bad = 0;
  CALLGRIND_TOGGLE_COLLECT;
  for (size_t k = 0; k < w && !bad; k++)
    bad = (k % 256 == 0 && over_budget(r)) || free_at(r, (size_t)(rng() % r->n));
  CALLGRIND_TOGGLE_COLLECT;
  if (bad) return -1;
  double c1 = cpu_now();
  for (size_t k = 0; k < w; k++) {
    if (k % 256 == 0 && over_budget(r)) return -1;
    if (alloc_one(r)) return -1;
  }
  *tf += c1 - c0;
  *ta += cpu_now() - c1;
  return 0;
}

#define RELEASE_K      16
#define RELEASE_ROUNDS 20

/* One round of releases (see the top of the file): adds the seconds of one
 * ga_empty_cache to *te and of one refused request to *to. */
static int round_release(run_state *r, double *te, double *to) {
  for (int k = 0; k < RELEASE_K; k++)
    if (free_at(r, (size_t)(rng() % r->n))) return -1;
  double c0 = cpu_now();
  ga_status_t st = ga_empty_cache(r->a);
  *te += cpu_now() - c0;
  if (st != GA_OK)
    return snprintf(r->why, sizeof r->why, "ga_empty_cache failed: %.120s", ga_last_error()), -1;
  for (int k = 0; k < RELEASE_K; k++)
    if (alloc_one(r)) return -1;
  for (int k = 0; k < RELEASE_K; k++)
    if (free_at(r, (size_t)(rng() % r->n))) return -1;
  ga_stats_t s;
  size_t free_b = 0, total = 0;
  if (ga_stats(r->a, &s) != GA_OK || ga_mem_get_info(r->a, &free_b, &total) != GA_OK || !total)
    return snprintf(r->why, sizeof r->why, "ga_stats/ga_mem_get_info failed: %.120s", ga_last_error()), -1;
  double fraction = (double)s.reserved_bytes[GA_POOL_ALL].current / (double)total;
  if (ga_set_memory_fraction(r->a, fraction > 1.0 ? 1.0 : fraction) != GA_OK)
    return snprintf(r->why, sizeof r->why, "ga_set_memory_fraction failed: %.120s", ga_last_error()), -1;
  void *p = NULL;
  c0 = cpu_now();
  st = ga_malloc(r->a, (size_t)1 << 30, NULL, &p);
  *to += cpu_now() - c0;
  if (st == GA_OK) (void)ga_free(r->a, p);
  if (st != GA_OK && st != GA_ERR_OOM)
    return snprintf(r->why, sizeof r->why, "the refused request failed otherwise: %.120s", ga_last_error()),
           -1;
  if (ga_set_memory_fraction(r->a, 1.0) != GA_OK)
    return snprintf(r->why, sizeof r->why, "ga_set_memory_fraction failed: %.120s", ga_last_error()), -1;
  for (int k = 0; k < RELEASE_K; k++)
    if (alloc_one(r)) return -1;
  return 0;
}

/* Measures at r->n live blocks and reports one point. */
static int measure_at(run_state *r) {
  size_t n = r->n, w = n / 10;
  if (w < 100) w = 100;
  if (w > 20000) w = 20000;
  size_t rounds = (2000 + w - 1) / w;
  double tg = 0, tf = 0, ta = 0, ignored = 0, ignored2 = 0;
  if (round_grow(r, w, &ignored) || round_reuse(r, w, &ignored, &ignored2)) return -1; /* warm */
  for (size_t k = 0; k < rounds; k++)
    if (round_grow(r, w, &tg)) return -1;
  CALLGRIND_ZERO_STATS;
  for (size_t k = 0; k < rounds; k++)
    if (round_reuse(r, w, &tf, &ta)) return -1;
  char label[96];
  snprintf(label, sizeof label, "random frees at N=%zu: %zu", n, w * rounds);
  CALLGRIND_DUMP_STATS_AT(label);
  double te = 0, to = 0;
  for (int k = 0; k < RELEASE_ROUNDS; k++) {
    if (over_budget(r) || round_release(r, &te, &to)) return -1;
  }
  double ops = (double)(w * rounds);
  say(r, "point %zu %zu %.1f %.1f %.1f %.2f %.1f %.1f", n, w * rounds, tg * 1e9 / ops, tf * 1e9 / ops,
      ta * 1e9 / ops, process_now() - r->t0, te * 1e9 / RELEASE_ROUNDS, to * 1e9 / RELEASE_ROUNDS);
  return 0;
}

static void run_series(int out, const char *conf, int pattern, const uint64_t *ns, size_t nn, double budget) {
  run_state r = {.pattern = pattern, .out = out};
  r.t0 = process_now();
  r.deadline = r.t0 + budget;
  rng_state = 0x9E3779B97F4A7C15ULL + (uint64_t)pattern;
  if (ga_create(conf, 0, &r.a) != GA_OK) {
    say(&r, "stop 0 cannot create the allocator: %.200s", ga_last_error());
    return;
  }
  for (size_t i = 0; i < nn; i++)
    if (fill(&r, ns[i]) || measure_at(&r)) {
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
  if (sscanf(line, "point %llu %llu %lf %lf %lf %lf %lf %lf", &n, &ops, &p.alloc_ns, &p.free_ns, &p.reuse_ns,
             &p.cpu_s, &p.empty_ns, &p.refused_ns) == 8) {
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
static void run_child(series *s, const char *conf, const uint64_t *ns, size_t nn, double budget) {
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
    run_series(fd[1], conf, s->pattern, ns, nn, budget);
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

static void print_table(const series *sv, size_t nsv, const uint64_t *ns, size_t nn, int which,
                        const char *title) {
  /* Each column is headed by its mode over its pattern: 100 columns hold six. */
  printf("\n%s\n  %-9s", title, "N live");
  for (size_t i = 0; i < nsv; i++) printf(" %12s", modes[sv[i].mode].name);
  printf("\n  %-9s", "");
  for (size_t i = 0; i < nsv; i++) printf(" %12s", patterns[sv[i].pattern]);
  printf("\n");
  for (size_t k = 0; k < nn; k++) {
    printf("  %-9llu", (unsigned long long)ns[k]);
    for (size_t i = 0; i < nsv; i++) {
      const point *p = point_at(&sv[i], ns[k]);
      double v = !p           ? NAN
                 : which == 0 ? p->alloc_ns
                 : which == 1 ? p->free_ns
                 : which == 2 ? p->reuse_ns
                 : which == 3 ? p->empty_ns
                              : p->refused_ns;
      if (!p)
        printf(" %12s", "-");
      else if (v >= 10000)
        printf(" %9.1f us", v / 1000);
      else
        printf(" %9.0f ns", v);
    }
    printf("\n");
  }
}

/* ---- Plot: ns per operation over live blocks, log-log ---- */

static const char *const colours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"};
static const double PW = 980, PH = 560, PL = 80, PR = 260, PT = 56, PB = 60;

static double lx_of(double v, double lo, double hi) {
  return PL + (PW - PL - PR) * (log10(v) - lo) / (hi - lo);
}
static double ly_of(double v, double lo, double hi) {
  return PT + (PH - PT - PB) * (1.0 - (log10(v) - lo) / (hi - lo));
}

static void svg_text(FILE *f, const char *s) {
  for (; *s; s++)
    if (*s == '<')
      fputs("&lt;", f);
    else if (*s == '>')
      fputs("&gt;", f);
    else if (*s == '&')
      fputs("&amp;", f);
    else
      fputc(*s, f);
}

static int plot(FILE *f, const series *sv, size_t nsv, const char *command, const char *backend) {
  double nlo = 1e300, nhi = 0, ylo = 1e300, yhi = 0;
  for (size_t i = 0; i < nsv; i++)
    for (size_t k = 0; k < sv[i].np; k++) {
      const point *p = &sv[i].p[k];
      double v[2] = {p->alloc_ns, p->free_ns};
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
    svg_text(f, command);
    fprintf(f, "</desc>\n");
  }
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f, "<text x=\"%.0f\" y=\"24\" font-size=\"16\">CPU time per operation with N blocks live</text>\n",
          PL);
  fprintf(
      f,
      "<text x=\"%.0f\" y=\"42\" fill=\"#444\">solid: allocation of a fresh block; dotted: free of a random "
      "block; backend %s; log-log</text>\n",
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
    const char *c = colours[i % 6];
    for (int j = 0; j < 2; j++) {
      fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s points=\"", c,
              j ? "1.5" : "2.5", j ? " stroke-dasharray=\"2,3\"" : "");
      for (size_t k = 0; k < sv[i].np; k++) {
        double v = j ? sv[i].p[k].free_ns : sv[i].p[k].alloc_ns;
        if (v > 0) fprintf(f, "%.1f,%.1f ", lx_of((double)sv[i].p[k].n, xl, xh), ly_of(v, yl, yh));
      }
      fprintf(f, "\"/>\n");
    }
    for (size_t k = 0; k < sv[i].np; k++)
      if (sv[i].p[k].alloc_ns > 0)
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                lx_of((double)sv[i].p[k].n, xl, xh), ly_of(sv[i].p[k].alloc_ns, yl, yh), c);
    double yy = PT + 8 + 40.0 * (double)i, lx = PW - PR + 16;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.5\"/>\n",
            lx, yy, lx + 36, yy, c);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", lx + 44, yy + 4);
    svg_text(f, series_label(&sv[i], label, sizeof label));
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
          "usage: ga-bench scale [--max-n N] [--budget-s S] [--modes LIST] [--patterns LIST]\n"
          "                      [--capacity-mb N] [--backend sim|auto|cuda] [--out DIR]\n"
          "  The CPU time of one allocation and one free with N blocks live, N = 10^3, 3*10^3, ...\n"
          "  up to --max-n (default 1000000), for each mode (native, expandable, pytorch =\n"
          "  expandable_policy:pytorch) and pattern (4k; mixed: 512 B to 4 MiB with holes).\n"
          "  --budget-s: CPU time each series may take (default 180); a series that reaches it\n"
          "  stops and says at which N. --capacity-mb: the simulated device (default 4194304, 4 TiB:\n"
          "  untouched memory costs nothing). Writes DIR/scale.csv, scale.cmd and scale.svg\n"
          "  (default DIR bench/results).\n");
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
  const char *mode_list = "native,expandable,pytorch", *pattern_list = "4k,mixed", *out = "bench/results",
             *backend = "sim";
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
    } else if (!strcmp(argv[i], "--capacity-mb")) {
      capacity_mb = strtoull(v, &end, 10);
      if (*end || capacity_mb < 2) return fprintf(stderr, "ga-bench scale: --capacity-mb must be >= 2\n"), 2;
    } else if (!strcmp(argv[i], "--modes")) {
      const char *names[] = {"native", "expandable", "pytorch"};
      if (list_ok(v, names, 3, "--modes")) return 2;
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
      "CPU time per operation with N blocks live\n(backend %s, simulated capacity %llu MiB, budget %.0f s "
      "per series)\n",
      backend, capacity_mb, budget);
  for (size_t i = 0; i < nsv; i++) {
    char conf[512], label[64];
    snprintf(conf, sizeof conf, "backend:%s,sim_capacity_mb:%llu%s%s", backend, capacity_mb,
             modes[sv[i].mode].conf[0] ? "," : "", modes[sv[i].mode].conf);
    fprintf(stderr, "ga-bench scale: %s ...\n", series_label(&sv[i], label, sizeof label));
    run_child(&sv[i], conf, ns, nn, budget);
    fprintf(stderr, "ga-bench scale: %s: %s, %zu points\n", label, sv[i].status, sv[i].np);
  }
  print_table(sv, nsv, ns, nn, 0, "allocation of a fresh block (growth included), CPU time per call:");
  print_table(sv, nsv, ns, nn, 1, "free of a random live block:");
  print_table(sv, nsv, ns, nn, 2, "allocation right after those frees (holes reused):");
  print_table(sv, nsv, ns, nn, 3, "ga_empty_cache right after 16 random frees, CPU time per call:");
  print_table(sv, nsv, ns, nn, 4,
              "a request refused after the whole retry ladder (memory fraction = reserved), 16 random\n"
              "frees before it, CPU time per call:");
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
    fprintf(fc,
            "series,mode,conf,pattern,n_live,ops,alloc_ns,free_ns,reuse_ns,empty_cache_ns,refused_ns,cpu_s,"
            "status\n");
    for (size_t i = 0; i < nsv; i++) {
      char label[64];
      series_label(&sv[i], label, sizeof label);
      for (size_t k = 0; k < sv[i].np; k++) {
        const point *p = &sv[i].p[k];
        fprintf(fc, "%s,%s,\"%s\",%s,%llu,%llu,%.1f,%.1f,%.1f,%.1f,%.1f,%.2f,\"%s\"\n", label,
                modes[sv[i].mode].name, modes[sv[i].mode].conf, patterns[sv[i].pattern],
                (unsigned long long)p->n, (unsigned long long)p->ops, p->alloc_ns, p->free_ns, p->reuse_ns,
                p->empty_ns, p->refused_ns, p->cpu_s, sv[i].status);
      }
      if (!sv[i].np) /* no point: the row says why */
        fprintf(fc, "%s,%s,\"%s\",%s,,,,,,,,,\"%s\"\n", label, modes[sv[i].mode].name, modes[sv[i].mode].conf,
                patterns[sv[i].pattern], sv[i].status);
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
