/* drivercost.c — `ga-bench drivercost`: measures what each device call costs
 * on the device at hand, for the driver-time estimate of `ga-bench run`.
 *
 * Each kind is timed around the device layer's own call (the code path the
 * allocator takes), `reps` times, on an idle device, and the median is kept:
 * reserve/unreserve of 1 GiB of address space, create/release of one
 * granule, map (cuMemMap + cuMemSetAccess), a further cuMemSetAccess (as
 * granted to peers) and unmap of one granule, malloc
 * and free of 20 MiB (PyTorch's large segment), the event calls on the
 * default stream, stream/device synchronisation with nothing queued,
 * mem_info and the capture query. On the simulated device the figures are
 * the simulator's, not a GPU's; `ga-bench run` keeps its assumed table there.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../allocator/device/device.h"
#include "bench.h"
#include "device/sim.h"

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int by_value(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

typedef struct samples {
  double *v[GA_CALL_COUNT];
  int n[GA_CALL_COUNT];
} samples;

#define TIMED(k, call)                   \
  do {                                   \
    double t0_ = now_us();               \
    rc = (call);                         \
    s->v[k][s->n[k]++] = now_us() - t0_; \
    if (rc) {                            \
      failed = ga_device_call_name(k);   \
      goto out;                          \
    }                                    \
  } while (0)

/* One round of every kind. Returns NULL or the name of the call that failed. */
static const char *round_once(ga_device *d, size_t gran, samples *s) {
  const char *failed = NULL;
  void *va = NULL, *p = NULL;
  ga_mem_handle h = 0;
  ga_event ev = NULL;
  int mapped = 0, rc;
  size_t f, t;
  int capturing;
  TIMED(GA_CALL_RESERVE, ga_dev_reserve(d, (size_t)1 << 30, gran, &va));
  TIMED(GA_CALL_CREATE, ga_dev_create(d, gran, &h));
  TIMED(GA_CALL_MAP, ga_dev_map(d, va, gran, h, 0));
  mapped = 1;
  TIMED(GA_CALL_SET_ACCESS, ga_dev_set_access(d, va, gran, &d->ordinal, 1));
  TIMED(GA_CALL_UNMAP, ga_dev_unmap(d, va, gran));
  mapped = 0;
  TIMED(GA_CALL_RELEASE, ga_dev_release(d, h));
  h = 0;
  TIMED(GA_CALL_UNRESERVE, ga_dev_unreserve(d, va, (size_t)1 << 30));
  va = NULL;
  TIMED(GA_CALL_MALLOC, ga_dev_malloc(d, 20u << 20, &p));
  TIMED(GA_CALL_FREE, ga_dev_free(d, p));
  p = NULL;
  TIMED(GA_CALL_EVENT_CREATE, ga_dev_event_create(d, &ev));
  TIMED(GA_CALL_EVENT_RECORD, ga_dev_event_record(d, ev, NULL));
  TIMED(GA_CALL_EVENT_SYNCHRONIZE, ga_dev_event_synchronize(d, ev));
  TIMED(GA_CALL_EVENT_QUERY, ga_dev_event_query(d, ev));
  TIMED(GA_CALL_EVENT_DESTROY, ga_dev_event_destroy(d, ev));
  ev = NULL;
  TIMED(GA_CALL_STREAM_SYNCHRONIZE, ga_dev_stream_synchronize(d, NULL));
  TIMED(GA_CALL_SYNCHRONIZE, ga_dev_synchronize(d));
  TIMED(GA_CALL_MEM_INFO, ga_dev_mem_info(d, &f, &t));
  TIMED(GA_CALL_CAPTURE_QUERY, ga_dev_stream_capturing(d, NULL, &capturing));
out:
  if (mapped) (void)ga_dev_unmap(d, va, gran);
  if (h) (void)ga_dev_release(d, h);
  if (va) (void)ga_dev_unreserve(d, va, (size_t)1 << 30);
  if (p) (void)ga_dev_free(d, p);
  if (ev) (void)ga_dev_event_destroy(d, ev);
  return failed;
}

int cost_measure(const char *backend, int reps, char *err, size_t errlen) {
  ga_device *d = NULL;
  const char *notice = NULL;
  if (ga_device_open(backend, 0, (size_t)80 << 30, 1, &d, err, errlen, &notice)) return -1;
  size_t gran = 0, free_b = 0, total = 0;
  samples s = {0};
  int rc = -1;
  if (ga_dev_granularity(d, &gran) || ga_dev_mem_info(d, &free_b, &total)) {
    snprintf(err, errlen, "cannot query the device: %s", d->error);
    goto done;
  }
  for (int k = 0; k < GA_CALL_COUNT; k++)
    if (!(s.v[k] = malloc((size_t)reps * sizeof(double)))) {
      snprintf(err, errlen, "out of memory");
      goto done;
    }
  (void)round_once(d, gran, &s); /* warm: first calls pay for lazy setup */
  memset(s.n, 0, sizeof s.n);
  for (int r = 0; r < reps; r++) {
    const char *failed = round_once(d, gran, &s);
    if (failed) {
      snprintf(err, errlen, "%s failed: %s", failed, d->error);
      goto done;
    }
  }
  for (int k = 0; k < GA_CALL_COUNT; k++) {
    if (!s.n[k]) continue;
    qsort(s.v[k], (size_t)s.n[k], sizeof(double), by_value);
    ga_cost_us[k] = s.v[k][s.n[k] / 2];
  }
  snprintf(cost_source, sizeof cost_source, "measured on backend %s, device %d (%.1f GiB), median of %d",
           d->ops->name, d->ordinal, (double)total / (double)(1u << 30), reps);
  rc = 0;
done:
  for (int k = 0; k < GA_CALL_COUNT; k++) free(s.v[k]);
  d->ops->destroy(d);
  return rc;
}

int cmd_drivercost(int argc, char **argv) {
  const char *backend = "auto";
  int reps = 200, json = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      printf(
          "usage: ga-bench drivercost [--backend auto|cuda|sim] [--reps N] [--json]\n"
          "  Times every device call kind through the device layer (medians of N rounds) and prints\n"
          "  them as a --cost string for ga-bench run; --json prints one JSON object instead.\n");
      return 0;
    } else if (!strcmp(a, "--json")) {
      json = 1;
    } else if (!strcmp(a, "--backend") && v) {
      backend = v;
      i++;
    } else if (!strcmp(a, "--reps") && v) {
      long n = strtol(v, &end, 10);
      if (*end || n < 1 || n > 100000) {
        fprintf(stderr, "ga-bench drivercost: --reps '%s' must be an integer in [1, 100000]\n", v);
        return 2;
      }
      reps = (int)n;
      i++;
    } else {
      fprintf(stderr,
              "ga-bench drivercost: unknown or incomplete option '%s'\n"
              "usage: ga-bench drivercost [--backend auto|cuda|sim] [--reps N]\n",
              a);
      return 2;
    }
  }
  char err[512];
  if (cost_measure(backend, reps, err, sizeof err)) {
    fprintf(stderr, "ga-bench drivercost: %s\n", err);
    return 1;
  }
  if (json) {
    printf("{\"source\":");
    json_string(stdout, cost_source);
    printf(",\"us_median\":{");
    int first = 1;
    for (int k = 0; k < GA_CALL_COUNT; k++)
      if (k != GA_CALL_COPY && k != GA_CALL_CAPTURE_MODE) {
        printf("%s\"%s\":%.3f", first ? "" : ",", ga_device_call_name((ga_device_call_t)k), ga_cost_us[k]);
        first = 0;
      }
    printf("}}\n");
    return 0;
  }
  printf("device call costs, %s\n", cost_source);
  printf("  %-20s %10s\n", "call", "us (median)");
  for (int k = 0; k < GA_CALL_COUNT; k++)
    if (k != GA_CALL_COPY && k != GA_CALL_CAPTURE_MODE)
      printf("  %-20s %10.2f\n", ga_device_call_name((ga_device_call_t)k), ga_cost_us[k]);
  /* Several --cost options, one a line (each adds to the table), so that the
   * command fits in 100 columns and pastes back whole. */
  printf("for ga-bench run:\n");
  int col = 0;
  for (int k = 0; k < GA_CALL_COUNT; k++)
    if (k != GA_CALL_COPY && k != GA_CALL_CAPTURE_MODE) {
      char item[96];
      /* A call that touches one mapping or granule: its time is the per-unit figure. */
      int n = snprintf(item, sizeof item, "%s=%s%.2f", ga_device_call_name((ga_device_call_t)k),
                       ga_sim_cost_unit((ga_device_call_t)k) ? "0+" : "", ga_cost_us[k]);
      if (col && col + 1 + n + 2 > BENCH_COLUMNS) {
        printf(" \\\n");
        col = 0;
      }
      col += col ? printf(",%s", item) : printf("  --cost %s", item);
    }
  printf("\n");
  return 0;
}
