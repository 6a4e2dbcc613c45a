/* hotpath.c — `ga-bench hotpath`: allocate+free pairs served from the cache,
 * for a small-pool and a large-pool size, on one thread and on every core,
 * next to the C library's malloc/free of the same sizes in the same run.
 *
 * Instructions per pair come from the CPU's counter (perf_event_open) where
 * the machine exposes one; elsewhere they are reported as n/a (bench/run.sh
 * then measures them with valgrind's callgrind).
 */
#include <linux/perf_event.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

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

typedef struct shot {
  ga_allocator_t *a;
  size_t size, pairs;
  int use_libc;
  ga_stream_t stream;
  double seconds;
  long long instructions; /* -1: no counter */
  int errors;
} shot;

static void *loop(void *arg) {
  shot *s = arg;
  int fd = counter_open();
  void *p;
  /* Warm: the first pair creates the segment (or the heap chunk). */
  if (s->use_libc)
    free(malloc(s->size));
  else if (ga_malloc(s->a, s->size, s->stream, &p) == GA_OK)
    ga_free(s->a, p);
  if (fd >= 0) ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
  double t0 = now();
  for (size_t i = 0; i < s->pairs; i++) {
    if (s->use_libc) {
      void *q = malloc(s->size);
      __asm__ volatile("" : : "r"(q) : "memory"); /* keep the pair */
      free(q);
    } else {
      if (ga_malloc(s->a, s->size, s->stream, &p) != GA_OK) {
        s->errors++;
        break;
      }
      ga_free(s->a, p);
    }
  }
  s->seconds = now() - t0;
  if (fd >= 0) ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
  s->instructions = counter_read(fd);
  if (fd >= 0) close(fd);
  return NULL;
}

/* Runs `threads` loops at once; returns ns per pair (per thread) and fills
 * *ipp with instructions per pair (or -1). */
static double measure(ga_allocator_t *a, size_t size, size_t pairs, int threads, int libc, double *ipp) {
  shot s[64];
  pthread_t t[64];
  for (int i = 0; i < threads; i++) {
    s[i] = (shot){.a = a,
                  .size = size,
                  .pairs = pairs,
                  .use_libc = libc,
                  .stream = (ga_stream_t)(uintptr_t)(0x100 + i)};
    pthread_create(&t[i], NULL, loop, &s[i]);
  }
  double ns = 0;
  long long ins = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(t[i], NULL);
    ns += s[i].seconds * 1e9 / (double)pairs;
    ins = (ins < 0 || s[i].instructions < 0) ? -1 : ins + s[i].instructions;
    if (s[i].errors) fprintf(stderr, "ga-bench hotpath: ga_malloc failed: %s\n", ga_last_error());
  }
  *ipp = ins < 0 ? -1.0 : (double)ins / (double)threads / (double)pairs;
  return ns / threads;
}

int cmd_hotpath(int argc, char **argv) {
  size_t pairs = 2000000;
  int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), only_ga = 0;
  const char *conf = getenv("GARDENALLOC_CONF"), *only = NULL, *history = "off";
  int json = 0;
  for (int i = 0; i < argc; i++) {
    char *end = NULL;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf(
          "usage: ga-bench hotpath [--pairs N] [--threads N] [--conf STR] [--only small|large] [--json]\n"
          "                        [--history off|on|stacks]\n"
          "  Allocate+free pairs served from the cache, on one thread and on N (default: every core),\n"
          "  next to the C library's malloc/free of the same sizes. --only runs one single-thread\n"
          "  gardenalloc loop (for callgrind); --json prints one JSON object per row. --history on\n"
          "  records the allocation history (3 entries per pair), stacks with C stacks as well.\n");
      return 0;
    } else if (!strcmp(argv[i], "--json")) {
      json = 1;
    } else if (!strcmp(argv[i], "--history") && i + 1 < argc) {
      history = argv[++i];
      if (strcmp(history, "off") && strcmp(history, "on") && strcmp(history, "stacks"))
        return fprintf(stderr, "ga-bench hotpath: --history '%s' is not off, on or stacks\n", history), 2;
    } else if (!strcmp(argv[i], "--pairs") && i + 1 < argc) {
      pairs = strtoull(argv[++i], &end, 10);
      if (*end || pairs == 0)
        return fprintf(stderr, "ga-bench hotpath: --pairs must be a positive integer\n"), 2;
    } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--conf") && i + 1 < argc) {
      conf = argv[++i];
    } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
      only = argv[++i]; /* small or large: one single-thread gardenalloc loop, for callgrind */
      only_ga = 1;
    } else {
      fprintf(stderr,
              "usage: ga-bench hotpath [--pairs N] [--threads N] [--conf STR] [--only small|large]\n");
      return 2;
    }
  }
  if (threads < 1) threads = 1;
  if (threads > 64) threads = 64;
  ga_allocator_t *a;
  if (ga_create(conf, 0, &a) != GA_OK) {
    fprintf(stderr, "ga-bench hotpath: %s\n", ga_last_error());
    return 2;
  }
  if (strcmp(history, "off") &&
      ga_record_history_stacks(a, 1, 1 << 16, !strcmp(history, "stacks") ? GA_STACKS_C : 0) != GA_OK) {
    fprintf(stderr, "ga-bench hotpath: %s\n", ga_last_error());
    ga_destroy(a);
    return 2;
  }
  const struct {
    const char *name;
    size_t size;
  } sizes[] = {{"small", 4096}, {"large", 8u << 20}};
  double ipp;
  if (only_ga) {
    for (int k = 0; k < 2; k++)
      if (!strcmp(only, sizes[k].name))
        printf("%.1f ns/pair\n", measure(a, sizes[k].size, pairs, 1, 0, &ipp));
    ga_destroy(a);
    return 0;
  }
  if (!json) {
    printf(
        "allocate+free pairs served from the cache (%zu pairs per thread, backend %s, conf \"%s\", "
        "history %s)\n",
        pairs, ga_backend_name(a), conf ? conf : "", history);
    printf("  %-22s %8s %12s %12s %12s %12s %10s\n", "size", "threads", "ga ns/pair", "ga instr/pair",
           "libc ns/pair", "libc instr", "ga/libc");
  }
  for (int k = 0; k < 2; k++) {
    int ths[2] = {1, threads};
    for (int j = 0; j < (threads > 1 ? 2 : 1); j++) {
      double gi, li;
      double g = measure(a, sizes[k].size, pairs, ths[j], 0, &gi);
      double l = measure(a, sizes[k].size, pairs, ths[j], 1, &li);
      char gis[16] = "n/a", lis[16] = "n/a";
      if (gi >= 0) snprintf(gis, sizeof gis, "%.0f", gi);
      if (li >= 0) snprintf(lis, sizeof lis, "%.0f", li);
      char label[32];
      snprintf(label, sizeof label, "%s (%zu B)", sizes[k].name, sizes[k].size);
      if (json) {
        printf("{\"size\":\"%s\",\"bytes\":%zu,\"threads\":%d,\"pairs\":%zu,\"backend\":\"%s\",\"conf\":",
               sizes[k].name, sizes[k].size, ths[j], pairs, ga_backend_name(a));
        json_string(stdout, conf ? conf : "");
        printf(",\"ga_ns_per_pair\":%.1f,\"libc_ns_per_pair\":%.1f,\"ga_over_libc\":%.3f}\n", g, l, g / l);
      } else
        printf("  %-22s %8d %12.1f %12s %12.1f %12s %10.2f\n", label, ths[j], g, gis, l, lis, g / l);
    }
  }
  ga_destroy(a);
  return 0;
}
