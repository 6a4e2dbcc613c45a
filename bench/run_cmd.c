/* run_cmd.c — `ga-bench run`: built-in workloads (and traces) under several
 * configurations side by side, with a table, a CSV and one SVG per workload. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "workloads.h"

typedef struct config {
  char name[64];
  char conf[448];
} config;

static const config default_configs[] = {
    {"native", ""},
    {"native_split128", "max_split_size_mb:128"},
    {"expandable", "expandable_segments:True"},
    {"expandable_2m", "expandable_segments:True,expandable_page_size_mb:2"},
    {"expandable_nomove", "expandable_segments:True,expandable_move_pages:when_full"},
};

static void run_usage(FILE *f) {
  fprintf(f,
          "usage: ga-bench run [--workload NAME]... [--trace FILE|DIR]... [--config NAME=CONF]...\n"
          "                    [--scale S] [--seed N] [--capacity-mb N] [--cost kind=us,...] [--out DIR]\n"
          "  Without --workload/--trace every built-in workload runs; without --config the\n"
          "  configurations native, native_split128, expandable, expandable_2m and\n"
          "  expandable_nomove (expandable_move_pages:when_full) run.\n"
          "  --scale 1 is about 10^4 events per workload, 100 about 10^6. --out (default\n"
          "  bench/results) receives run.csv and one SVG per workload.\n"
          "workloads:\n");
  for (size_t i = 0; i < ga_nworkloads; i++)
    fprintf(f, "  %-18s %s\n", ga_workloads[i].name, ga_workloads[i].about);
}

typedef struct job {
  const char *name; /* workload name or trace path */
  const workload *w;
} job;

static double mib(uint64_t b) { return (double)b / (double)(1ull << 20); }

static void csv_header(FILE *f) {
  fprintf(f,
          "workload,config,conf,events,peak_requested_bytes,peak_allocated_bytes,peak_reserved_bytes,"
          "reserved_over_requested,fragmentation,ooms,num_alloc_retries,num_unmap_syncs,num_pages_moved");
  for (int k = 0; k < GA_CALL_COUNT; k++) fprintf(f, ",calls_%s", ga_device_call_name((ga_device_call_t)k));
  fprintf(f, ",est_driver_ms,cpu_ns_per_alloc_free\n");
}

static void csv_row(FILE *f, const char *wl, const config *c, const replay_result *r) {
  double frag = r->peak_reserved ? 1.0 - (double)r->peak_allocated / (double)r->peak_reserved : 0.0;
  double ns = r->allocs ? r->seconds * 1e9 / (double)r->allocs : 0.0;
  fprintf(f, "%s,%s,\"%s\",%zu,%llu,%llu,%llu,%.4f,%.4f,%llu,%llu,%lld,%lld", wl, c->name, c->conf, r->events,
          (unsigned long long)r->peak_requested, (unsigned long long)r->peak_allocated,
          (unsigned long long)r->peak_reserved,
          r->peak_requested ? (double)r->peak_reserved / (double)r->peak_requested : 0.0, frag,
          (unsigned long long)r->num_ooms, (unsigned long long)r->num_alloc_retries,
          (long long)r->stats.num_unmap_syncs, (long long)r->stats.num_pages_moved);
  for (int k = 0; k < GA_CALL_COUNT; k++) fprintf(f, ",%llu", (unsigned long long)r->stats.device_calls[k]);
  fprintf(f, ",%.3f,%.1f\n", cost_ms(&r->stats), ns);
}

static void table_header(const char *wl, size_t events) {
  printf("\n%s (%zu events)\n", wl, events);
  printf("  %-18s %10s %10s %10s %9s %6s %4s %7s %7s %7s %10s %8s\n", "config", "peak req", "peak alloc",
         "peak resv", "resv/req", "frag", "OOM", "dev alloc", "maps", "moved", "driver ms", "ns/op");
}

static void table_row(const config *c, const replay_result *r) {
  double frag = r->peak_reserved ? 1.0 - (double)r->peak_allocated / (double)r->peak_reserved : 0.0;
  printf("  %-18s %9.1fM %9.1fM %9.1fM %9.3f %6.3f %4llu %7lld %7llu %7lld %10.1f %8.0f\n", c->name,
         mib(r->peak_requested), mib(r->peak_allocated), mib(r->peak_reserved),
         r->peak_requested ? (double)r->peak_reserved / (double)r->peak_requested : 0.0, frag,
         (unsigned long long)r->num_ooms, (long long)r->stats.num_device_alloc,
         (unsigned long long)r->stats.device_calls[GA_CALL_MAP], (long long)r->stats.num_pages_moved,
         cost_ms(&r->stats), r->allocs ? r->seconds * 1e9 / (double)r->allocs : 0.0);
}

static int add_config(config **v, size_t *n, const char *arg) {
  const char *eq = strchr(arg, '=');
  if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof(*v)->name) {
    fprintf(stderr, "ga-bench run: --config '%s' is not NAME=CONF\n", arg);
    return -1;
  }
  config c = {0};
  memcpy(c.name, arg, (size_t)(eq - arg));
  snprintf(c.conf, sizeof c.conf, "%s", eq + 1);
  if (ga_config_validate(c.conf) != GA_OK) {
    fprintf(stderr, "ga-bench run: --config %s: %s\n", c.name, ga_last_error());
    return -1;
  }
  config *nv = realloc(*v, (*n + 1) * sizeof *nv);
  if (!nv) return -1;
  nv[(*n)++] = c;
  *v = nv;
  return 0;
}

int cmd_run(int argc, char **argv) {
  job jobs[64];
  size_t njobs = 0, nconfigs = 0, traces_used = 0;
  paths traces = {0}; /* kept until the end: jobs point into it */
  config *configs = NULL;
  double scale = 1.0;
  unsigned long long seed = 1;
  const char *capacity = NULL, *out = "bench/results";
  char err[512];
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    if (!strcmp(a, "--help")) {
      run_usage(stdout);
      return 0;
    } else if (!strcmp(a, "--workload") && v) {
      const workload *w = workload_find(v);
      if (!w) {
        fprintf(stderr, "ga-bench run: unknown workload '%s'\n", v);
        run_usage(stderr);
        return 2;
      }
      if (njobs < 64) jobs[njobs++] = (job){w->name, w};
      i++;
    } else if (!strcmp(a, "--trace") && v) {
      if (expand(v, &traces)) return 2;
      for (size_t k = traces_used; k < traces.n && njobs < 64; k++) jobs[njobs++] = (job){traces.v[k], NULL};
      traces_used = traces.n;
      i++;
    } else if (!strcmp(a, "--config") && v) {
      if (add_config(&configs, &nconfigs, v)) return 2;
      i++;
    } else if (!strcmp(a, "--scale") && v) {
      scale = strtod(v, &end);
      if (*end || !(scale > 0.0) || scale > 1000.0) {
        fprintf(stderr, "ga-bench run: --scale '%s' must be a number in (0, 1000]\n", v);
        return 2;
      }
      i++;
    } else if (!strcmp(a, "--seed") && v) {
      seed = strtoull(v, &end, 10);
      if (*end) {
        fprintf(stderr, "ga-bench run: --seed '%s' is not an integer\n", v);
        return 2;
      }
      i++;
    } else if (!strcmp(a, "--capacity-mb") && v) {
      capacity = v;
      i++;
    } else if (!strcmp(a, "--cost") && v) {
      if (cost_parse(v, err, sizeof err)) {
        fprintf(stderr, "ga-bench run: %s\n", err);
        return 2;
      }
      i++;
    } else if (!strcmp(a, "--out") && v) {
      out = v;
      i++;
    } else {
      fprintf(stderr, "ga-bench run: unknown or incomplete option '%s'\n", a);
      run_usage(stderr);
      return 2;
    }
  }
  if (njobs == 0)
    for (size_t i = 0; i < ga_nworkloads && njobs < 64; i++)
      jobs[njobs++] = (job){ga_workloads[i].name, &ga_workloads[i]};
  if (nconfigs == 0) {
    configs = malloc(sizeof default_configs);
    if (!configs) return 2;
    memcpy(configs, default_configs, sizeof default_configs);
    nconfigs = sizeof default_configs / sizeof default_configs[0];
  }
  if (capacity) { /* prefix every configuration with the simulated capacity */
    for (size_t c = 0; c < nconfigs; c++) {
      char buf[1024];
      int n = snprintf(buf, sizeof buf, "sim_capacity_mb:%s%s%s", capacity, configs[c].conf[0] ? "," : "",
                       configs[c].conf);
      if (n < 0 || (size_t)n >= sizeof configs[c].conf) {
        fprintf(stderr, "ga-bench run: configuration %s is too long\n", configs[c].name);
        return 2;
      }
      if (ga_config_validate(buf) != GA_OK) {
        fprintf(stderr, "ga-bench run: %s\n", ga_last_error());
        return 2;
      }
      memcpy(configs[c].conf, buf, (size_t)n + 1);
    }
  }
  if (mkdir(out, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "ga-bench run: cannot create %s: %s\n", out, strerror(errno));
    return 2;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/run.csv", out);
  FILE *csv = fopen(path, "w");
  if (!csv) {
    fprintf(stderr, "ga-bench run: cannot write %s: %s\n", path, strerror(errno));
    return 2;
  }
  fprintf(csv, "# ga-bench run");
  for (int i = 0; i < argc; i++) fprintf(csv, " %s", argv[i]);
  fprintf(csv, "\n");
  csv_header(csv);
  /* On a GPU the cost table is measured there and then, unless --cost gave it. */
  if (!strcmp(cost_source, "assumed") && cost_measure("cuda", 50, err, sizeof err) == 0)
    fprintf(stderr, "ga-bench: device call costs %s\n", cost_source);
  cost_print(stdout);
  int failed = 0;
  for (size_t j = 0; j < njobs; j++) {
    trace t;
    int rc = jobs[j].w ? jobs[j].w->generate(&t, scale, seed) : trace_load(jobs[j].name, &t, err, sizeof err);
    if (rc) {
      fprintf(stderr, "ga-bench run: %s: %s\n", jobs[j].name, jobs[j].w ? "out of memory" : err);
      failed = 1;
      continue;
    }
    const char *wl = jobs[j].w ? jobs[j].w->name : jobs[j].name;
    const char *slash = strrchr(wl, '/');
    const char *short_name = slash ? slash + 1 : wl;
    table_header(short_name, t.n);
    replay_samples *samples = calloc(nconfigs, sizeof *samples);
    svg_series *series = calloc(nconfigs, sizeof *series);
    for (size_t c = 0; c < nconfigs && samples && series; c++) {
      replay_result r;
      samples[c].max = 600;
      fprintf(stderr, "ga-bench: %s under %s\n", short_name, configs[c].name);
      if (trace_replay_ex(&t, configs[c].conf, &r, &samples[c], 1, err, sizeof err)) {
        fprintf(stderr, "ga-bench run: %s / %s: %s\n", short_name, configs[c].name, err);
        failed = 1;
        continue;
      }
      table_row(&configs[c], &r);
      csv_row(csv, short_name, &configs[c], &r);
      series[c] = (svg_series){configs[c].name, &samples[c]};
    }
    snprintf(path, sizeof path, "%s/%s.svg", out, short_name);
    if (samples && series && svg_write(path, short_name, series, nconfigs)) {
      fprintf(stderr, "ga-bench run: cannot write %s\n", path);
      failed = 1;
    }
    for (size_t c = 0; samples && c < nconfigs; c++) replay_samples_free(&samples[c]);
    free(samples);
    free(series);
    trace_free(&t);
  }
  fclose(csv);
  printf("\nCSV: %s/run.csv, plots: %s/<workload>.svg\n", out, out);
  free(configs);
  for (size_t k = 0; k < traces.n; k++) free(traces.v[k]);
  free(traces.v);
  return failed;
}
