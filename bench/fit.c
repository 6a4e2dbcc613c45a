/* fit.c — `ga-bench fit`: the smallest device on which a trace replays with
 * no out-of-memory, for each configuration.
 *
 * Peak reserved bytes at the default capacity (80 GiB) bound it from above:
 * until the device is full, a replay does not depend on its size. Peak live
 * bytes bound it from below: no allocator fits in less. Between the two the
 * simulated capacity is bisected, one replay per step, to 2 MiB (the
 * device's granule); the answer is a capacity that fits where 2 MiB less
 * does not. Fitting need not be monotone in the capacity (a larger device
 * can lead the policy to a placement that fails later), so the bisection
 * finds a smallest capacity, not always the smallest.
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MIB ((uint64_t)1 << 20)

static void fit_usage(FILE *f) {
  fprintf(f,
          "usage: ga-bench fit PATH... [--conf [NAME=]STR]... [--size-scale N] [--json] [--cost STR]\n"
          "                    [--lag-us L] [--pace-us P] [--kernel-us K] [--iterations N]\n"
          "  The smallest simulated device, within 2 MiB, on which each trace replays with no\n"
          "  out-of-memory under each configuration (bisection of sim_capacity_mb between peak\n"
          "  live and the peak reserved on an 80 GiB device), beside peak live and as a ratio.\n"
          "  A PATH may be a built-in workload, workload:NAME, or workload:all (scale 1, seed 1).\n"
          "  --json  one JSON object per trace and configuration\n");
}

/* Replays t on a simulated device of `mib` MiB. 1 fits, 0 does not, -1 error. */
static int fits(const trace *t, const char *conf, uint64_t mib, replay_result *r, char *err, size_t errlen) {
  char c[600];
  snprintf(c, sizeof c, "backend:sim,sim_capacity_mb:%llu%s%s", (unsigned long long)mib, *conf ? "," : "",
           conf);
  if (trace_replay_ex(t, c, r, NULL, 0, err, errlen)) return -1;
  return r->num_ooms == 0;
}

typedef struct fit_result {
  uint64_t live, reserved_80g, fits_mib;
  int replays;
} fit_result;

static int fit_one(const trace *t, const char *conf, fit_result *f, char *err, size_t errlen) {
  replay_result r;
  memset(f, 0, sizeof *f);
  int ok = fits(t, conf, 81920, &r, err, errlen);
  f->replays = 1;
  if (ok < 0) return -1;
  f->live = r.trace_peak_live;
  f->reserved_80g = r.peak_reserved;
  if (!ok) {
    snprintf(err, errlen, "does not fit on 80 GiB (%llu out-of-memory errors)",
             (unsigned long long)r.num_ooms);
    return -1;
  }
  /* Capacities are whole granules of 2 MiB: lo is below live (it fails), hi fits. */
  uint64_t lo = f->live ? (f->live - 1) / (2 * MIB) * 2 : 0,
           hi = (f->reserved_80g + 2 * MIB - 1) / (2 * MIB) * 2;
  if (hi < 2) hi = 2;
  if (lo >= hi) lo = hi - 2;
  while (hi - lo > 2) {
    uint64_t mid = (lo + hi) / 2 / 2 * 2;
    ok = fits(t, conf, mid, &r, err, errlen);
    f->replays++;
    if (ok < 0) return -1;
    if (ok)
      hi = mid;
    else
      lo = mid;
  }
  f->fits_mib = hi;
  return 0;
}

int cmd_fit(int argc, char **argv) {
  replay_args r = {.size_scale = 1};
  paths p = {0};
  for (int i = 0; i < argc; i++) {
    int t = replay_option(argc, argv, &i, "fit", &r);
    if (t < 0) return 2;
    if (t) continue;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      fit_usage(stdout);
      return 0;
    } else if (replay_operand(argv[i], "fit", &p, fit_usage))
      return 2;
  }
  if (replay_args_end("fit", &p, &r, fit_usage)) return 2;
  int failed = 0, key = row_key_width(&p, r.configs, r.nconfigs, BENCH_COLUMNS - 54);
  if (!r.json) {
    printf("the smallest simulated device (within 2 MiB) on which each replay has no out-of-memory\n");
    printf("%-*s %10s %10s %9s %12s %8s\n", key, "trace", "peak live", "fits on", "fits/live", "resv 80 GiB",
           "replays");
    printf("%-*s %10s %10s %9s %12s\n", key, r.nconfigs > 1 ? "  config" : "", "(MiB)", "(MiB)", "", "(MiB)");
  }
  for (size_t i = 0; i < p.n; i++) {
    trace t;
    char err[1024];
    if (input_load(p.v[i], &t, err, sizeof err)) {
      fprintf(stderr, "ga-bench: %s\n", err);
      failed = 1;
      continue;
    }
    trace_scale(&t, r.size_scale);
    int named = 0; /* the trace's name heads its rows */
    for (size_t c = 0; c < r.nconfigs; c++) {
      fit_result f;
      if (fit_one(&t, r.configs[c].conf, &f, err, sizeof err)) {
        fprintf(stderr, "ga-bench fit: %s under %s: %s\n", trace_file_name(p.v[i]), r.configs[c].name, err);
        failed = 1;
        continue;
      }
      double ratio = f.live ? (double)(f.fits_mib * MIB) / (double)f.live : 0.0;
      if (r.json) {
        printf("{\"trace\":");
        json_string(stdout, p.v[i]);
        printf(",\"config\":");
        json_string(stdout, r.configs[c].name);
        printf(",\"conf\":");
        json_string(stdout, r.configs[c].conf);
        printf(
            ",\"peak_live_bytes\":%llu,\"fits_on_bytes\":%llu,\"fits_on_ratio\":%.6f,"
            "\"peak_reserved_80g_bytes\":%llu,\"replays\":%d}\n",
            (unsigned long long)f.live, (unsigned long long)(f.fits_mib * MIB), ratio,
            (unsigned long long)f.reserved_80g, f.replays);
      } else {
        if (r.nconfigs > 1 && !named++) printf("%s\n", trace_file_name(p.v[i]));
        ga_strbuf name = {0}, row = {0};
        if (r.nconfigs > 1)
          strbuf_put(&name, "  %s", r.configs[c].name);
        else
          strbuf_put(&name, "%.*s", trace_key_len(p.v[i]), trace_file_name(p.v[i]));
        key_cell(&row, key, name.s, (int)name.len);
        printf("%s %10.1f %10llu %9.4f %12.1f %8d\n", row.s, (double)f.live / (double)MIB,
               (unsigned long long)f.fits_mib, ratio, (double)f.reserved_80g / (double)MIB, f.replays);
        strbuf_free(&name);
        strbuf_free(&row);
      }
      fflush(stdout);
    }
    trace_free(&t);
  }
  free(r.configs);
  for (size_t i = 0; i < p.n; i++) free(p.v[i]);
  free(p.v);
  return failed;
}
