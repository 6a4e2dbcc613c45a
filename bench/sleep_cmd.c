/* sleep_cmd.c — ga-bench sleep: how long ga_sleep and ga_wake take for N
 * MiB of tagged memory in each restore mode, against the copy bandwidth of
 * the cost table (the simulated device's, or --cost). Times are the
 * device's clock: on a GPU the wall time of the driver calls, on the
 * simulated device its cost table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "device/sim.h"
#include "internal.h"

static double device_ms(const ga_stats_t *stats) {
  uint64_t ns = 0;
  for (int k = 0; k < GA_CALL_COUNT; k++) ns += stats->device_ns[k];
  return (double)ns / 1e6;
}

/* pageable: on the simulated device, pinning is refused (the host copy then
 * goes to plain memory); table_gbs: the table's pageable copy rate. */
static int one(const char *backend, size_t mib, int mode, const char *mode_name, double table_gbs,
               int pageable) {
  char conf[256];
  snprintf(conf, sizeof conf, "backend:%s,expandable_segments:True,expandable_page_size_mb:2%s", backend,
           strcmp(backend, "sim") ? "" : ",sim_capacity_mb:81920");
  ga_allocator_t *a;
  if (ga_create(conf, 0, &a) != GA_OK) {
    fprintf(stderr, "ga-bench sleep: %s\n", ga_last_error());
    return -1;
  }
  cost_apply(a);
  size_t chunk = 64 << 20, n = (mib << 20) / chunk;
  void **p = calloc(n ? n : 1, sizeof *p);
  int rc = p ? 0 : -1;
  for (size_t i = 0; i < n && !rc; i++)
    if (ga_malloc(a, chunk, NULL, &p[i]) != GA_OK || ga_tag(a, p[i], "w") != GA_OK) rc = -1;
  if (!rc && ga_sleep_mode(a, "w", mode) != GA_OK) rc = -1;
  ga_device *d = ga_allocator_device(a);
  if (pageable && (!ga_sim_is(d) || ga_sim_inject(d, GA_CALL_HOST_ALLOC, 1, GA_DEV_EOOM, 1))) {
    ga_destroy(a);
    free(p);
    return 0; /* only the simulated device can be made to refuse pinning */
  }
  ga_stats_t s0, s1, s2;
  ga_stats(a, &s0);
  if (!rc && ga_sleep(a, "w", 0) != GA_OK) rc = -1;
  ga_stats(a, &s1);
  if (!rc && ga_wake(a) != GA_OK) rc = -1;
  ga_stats(a, &s2);
  if (rc) fprintf(stderr, "ga-bench sleep: %s\n", ga_last_error());
  double sleep_ms = device_ms(&s1) - device_ms(&s0), wake_ms = device_ms(&s2) - device_ms(&s1);
  double bytes = (double)(n * chunk), gb = bytes / 1e9;
  if (!rc) {
    printf("%-8s %8zu %10.1f %10.1f", mode_name, n * chunk >> 20, sleep_ms, wake_ms);
    if (mode == GA_RESTORE_HOST && pageable)
      printf(" %9.1f %9.1f %9.1f %9.1f\n", gb / (sleep_ms / 1e3), gb / (wake_ms / 1e3), table_gbs, table_gbs);
    else if (mode == GA_RESTORE_HOST) /* the sim's pinned rate: sim.h's ratios */
      printf(" %9.1f %9.1f %9.1f %9.1f\n", gb / (sleep_ms / 1e3), gb / (wake_ms / 1e3),
             table_gbs / GA_SIM_PINNED_TO_HOST, table_gbs / GA_SIM_PINNED_TO_DEVICE);
    else
      printf(" %9s %9s %9s %9s\n", "-", "-", "-", "-");
  }
  for (size_t i = 0; i < n && p; i++)
    if (p[i]) ga_free(a, p[i]);
  free(p);
  ga_destroy(a);
  return rc;
}

int cmd_sleep(int argc, char **argv) {
  size_t mib = 4096;
  const char *backend = "auto";
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--mib") && i + 1 < argc)
      mib = (size_t)strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--backend") && i + 1 < argc)
      backend = argv[++i];
    else if (!strcmp(argv[i], "--cost") && i + 1 < argc) {
      char err[512];
      if (cost_parse(argv[++i], err, sizeof err)) {
        fprintf(stderr, "ga-bench sleep: %s\n", err);
        return 2;
      }
    } else {
      int help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
      fprintf(help ? stdout : stderr,
              "usage: ga-bench sleep [--mib N] [--backend auto|cuda|sim] [--cost KIND=US[+UNIT],...]\n"
              "  ga_sleep and ga_wake of N MiB (default 4096) of tagged 64 MiB allocations in each restore\n"
              "  mode (host copy to pinned memory, to pageable memory (simulated device: pinning\n"
              "  refused), zero, none), in device time (a GPU's driver calls, or the simulated device's\n"
              "  cost table); for host copies the bandwidth reached each way, beside the table's copy\n"
              "  bandwidth each way (simulated device).\n");
      return help ? 0 : 2;
    }
  }
  if (mib < 64) mib = 64;
  /* The copy bandwidth of the table: a granule per unit. */
  double table_gbs = NAN;
  ga_allocator_t *probe;
  char conf[64];
  snprintf(conf, sizeof conf, "backend:%s,sim_capacity_mb:64", backend);
  if (ga_create(conf, 0, &probe) == GA_OK) {
    cost_apply(probe);
    ga_device *d = ga_allocator_device(probe);
    double call_us = 0, unit_us = 0;
    if (ga_sim_is(d) && ga_sim_get_cost(d, GA_CALL_COPY, &call_us, &unit_us) == 0 && unit_us > 0)
      table_gbs = (double)(2 << 20) / 1e9 / (unit_us / 1e6);
    snprintf(conf, sizeof conf, "%s", ga_backend_name(probe));
    ga_destroy(probe);
  }
  printf("# ga_sleep / ga_wake of %zu MiB on the %s device (times: device clock)\n", mib, conf);
  printf("%-8s %8s %10s %10s %9s %9s %9s %9s\n", "mode", "MiB", "sleep ms", "wake ms", "out GB/s", "in GB/s",
         "table out", "table in");
  static const struct {
    int mode, pageable;
    const char *name;
  } modes[] = {{GA_RESTORE_HOST, 0, "host"},
               {GA_RESTORE_HOST, 1, "pageable"},
               {GA_RESTORE_ZERO, 0, "zero"},
               {GA_RESTORE_NONE, 0, "none"}};
  for (int m = 0; m < 4; m++)
    if (one(conf, mib, modes[m].mode, modes[m].name, table_gbs, modes[m].pageable)) return 1;
  return 0;
}
