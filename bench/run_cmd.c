/* run_cmd.c — `ga-bench run`: built-in workloads (and traces) under several
 * configurations side by side, with a table (or JSON lines), a CSV and one
 * SVG per workload. Every result file is written under a temporary name and
 * renamed only when the whole run succeeded; the command that made them is in
 * run.cmd beside the CSV (and in each SVG's description), quoted so that it
 * can be pasted back. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "workloads.h"

static const bench_config default_configs[] = {
    {"native", ""},
    {"native_split128", "max_split_size_mb:128"},
    {"pytorch_expandable", "expandable_segments:True,expandable_policy:pytorch"},
    {"expandable", "expandable_segments:True"},
    {"expandable_2m", "expandable_segments:True,expandable_page_size_mb:2"},
    {"expandable_settle", "expandable_segments:True,expandable_move_pages:settle"},
};

static void run_usage(FILE *f) {
  fprintf(
      f,
      "usage: ga-bench run [--workload NAME]... [--trace FILE|DIR]... [--conf [NAME=]STR]...\n"
      "                    [--scale S] [--seed N] [--size-scale N] [--capacity-mb N] [--cost kind=us,...]\n"
      "                    [--out DIR] [--json] [--y-near-data] [--lag-us L] [--pace-us P]\n"
      "                    [--kernel-us K] [--iterations N]\n"
      "  Without --workload/--trace every built-in workload runs; without --conf the\n"
      "  configurations native, native_split128, pytorch_expandable (PyTorch's own expandable\n"
      "  segments, expandable_policy:pytorch), expandable (the default, moves when full),\n"
      "  expandable_2m and expandable_settle (expandable_move_pages:settle) run (--config is\n"
      "  the same option).\n"
      "  --scale 1 is about 10^4 events per workload, 100 about 10^6; --size-scale multiplies\n"
      "  every size (workloads and traces). --out (default bench/results, made with its parents)\n"
      "  receives run.csv, run.cmd (the command) and one SVG per workload; they replace earlier\n"
      "  results only when every replay succeeded. --json prints one JSON object per workload\n"
      "  and configuration instead of the table. --y-near-data starts the plots' y axis just\n"
      "  below the data instead of at 0. On the simulated device, --lag-us makes the GPU run L us\n"
      "  behind the CPU (default 0), --pace-us is the program's time per event (default 10),\n"
      "  --kernel-us the GPU work queued after each event, --iterations repeats each workload.\n"
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
          "reserved_over_requested,fragmentation,ooms,num_alloc_retries,num_unmap_syncs,num_granules_moved");
  for (int k = 0; k < GA_CALL_COUNT; k++) fprintf(f, ",calls_%s", ga_device_call_name((ga_device_call_t)k));
  fprintf(f,
          ",est_driver_ms,num_stalls,stall_ms,lag_us,iterations,steady_memory_calls,cpu_ns_per_alloc_free\n");
}

static void csv_row(FILE *f, const char *wl, const bench_config *c, const replay_result *r) {
  double frag = r->peak_reserved ? 1.0 - (double)r->peak_allocated / (double)r->peak_reserved : 0.0;
  double ns = r->allocs ? r->cpu_seconds * 1e9 / (double)r->allocs : 0.0;
  fprintf(f, "%s,%s,\"%s\",%zu,%llu,%llu,%llu,%.4f,%.4f,%llu,%llu,%lld,%lld", wl, c->name, c->conf, r->events,
          (unsigned long long)r->peak_requested, (unsigned long long)r->peak_allocated,
          (unsigned long long)r->peak_reserved,
          r->peak_requested ? (double)r->peak_reserved / (double)r->peak_requested : 0.0, frag,
          (unsigned long long)r->num_ooms, (unsigned long long)r->num_alloc_retries,
          (long long)r->stats.num_unmap_syncs, (long long)r->stats.num_granules_moved);
  for (int k = 0; k < GA_CALL_COUNT; k++) fprintf(f, ",%llu", (unsigned long long)r->stats.device_calls[k]);
  fprintf(f, ",%.3f,%lld,%.3f,%g,%d,%llu,%.1f\n", cost_ms(&r->stats), (long long)r->stats.num_stalls,
          (double)r->stats.stall_us / 1000.0, r->lag_us, r->iterations,
          (unsigned long long)r->steady_memory_calls, ns);
}

/* The table of a workload, in two parts that fit in BENCH_COLUMNS and are
 * keyed by the same configuration names: memory, then device calls and time
 * (every column of the CSV's summary, which keeps them on one line). */
static void table_header(ga_strbuf *mem, ga_strbuf *calls) {
  strbuf_put(mem, "  %-18s %10s %10s %10s %9s %6s %4s\n", "config", "req MiB", "alloc MiB", "resv MiB",
             "resv/req", "frag", "OOM");
  strbuf_put(calls, "  %-18s %9s %6s %6s %6s %6s %9s %6s %8s %6s %7s\n", "config", "dev alloc", "maps",
             "access", "unmaps", "moved", "driver ms", "stalls", "stall ms", "steady", "ns/op");
}

static void table_row(ga_strbuf *mem, ga_strbuf *calls, const bench_config *c, const replay_result *r) {
  double frag = r->peak_reserved ? 1.0 - (double)r->peak_allocated / (double)r->peak_reserved : 0.0;
  char steady[24] = "-";
  if (r->iterations > 1) snprintf(steady, sizeof steady, "%llu", (unsigned long long)r->steady_memory_calls);
  for (int k = 0; k < 2; k++) { /* a longer name than the column's goes on a line of its own */
    strbuf_put(k ? calls : mem, "  ");
    key_cell(k ? calls : mem, 18, c->name, (int)strlen(c->name));
  }
  strbuf_put(mem, " %10.1f %10.1f %10.1f %9.3f %6.3f %4llu\n", mib(r->peak_requested), mib(r->peak_allocated),
             mib(r->peak_reserved),
             r->peak_requested ? (double)r->peak_reserved / (double)r->peak_requested : 0.0, frag,
             (unsigned long long)r->num_ooms);
  strbuf_put(calls, " %9lld %6llu %6llu %6llu %6lld %9.1f %6lld %8.1f %6s %7.0f\n",
             (long long)r->stats.num_device_alloc, (unsigned long long)r->stats.device_calls[GA_CALL_MAP],
             (unsigned long long)r->stats.device_calls[GA_CALL_SET_ACCESS],
             (unsigned long long)r->stats.device_calls[GA_CALL_UNMAP], (long long)r->stats.num_granules_moved,
             cost_ms(&r->stats), (long long)r->stats.num_stalls, (double)r->stats.stall_us / 1000.0, steady,
             r->allocs ? r->cpu_seconds * 1e9 / (double)r->allocs : 0.0);
}

/* The staged files of a run: committed together, or all discarded. */
typedef struct outputs {
  staged *v;
  size_t n, cap;
} outputs;

static FILE *out_open(outputs *o, const char *dir, const char *name) {
  if (o->n == o->cap) {
    o->cap = o->cap ? o->cap * 2 : 16;
    staged *nv = realloc(o->v, o->cap * sizeof *nv);
    if (!nv) return NULL;
    o->v = nv;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = staged_open(&o->v[o->n], path);
  if (f) o->n++;
  return f;
}

static int outputs_finish(outputs *o, int keep) {
  int rc = 0;
  for (size_t i = 0; i < o->n; i++) {
    if (keep && staged_commit(&o->v[i])) {
      fprintf(stderr, "ga-bench run: cannot write %s: %s\n", o->v[i].path, strerror(errno));
      rc = -1;
    } else if (!keep)
      staged_discard(&o->v[i]);
  }
  free(o->v);
  return rc;
}

int cmd_run(int argc, char **argv) {
  job jobs[64];
  size_t njobs = 0, traces_used = 0;
  paths traces = {0}; /* kept until the end: jobs point into it */
  replay_args ra = {.size_scale = 1};
  double scale = 1.0;
  unsigned long long seed = 1;
  int near = 0;
  const char *capacity = NULL, *out = "bench/results";
  char err[512];
  for (int i = 0; i < argc; i++) {
    int t = replay_option(argc, argv, &i, "run", &ra);
    if (t < 0) return 2;
    if (t) continue;
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
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
    } else if (!strcmp(a, "--out") && v) {
      out = v;
      i++;
    } else if (!strcmp(a, "--y-near-data")) {
      near = 1;
    } else {
      fprintf(stderr, "ga-bench run: unknown or incomplete option '%s'\n", a);
      run_usage(stderr);
      return 2;
    }
  }
  if (njobs == 0)
    for (size_t i = 0; i < ga_nworkloads && njobs < 64; i++)
      jobs[njobs++] = (job){ga_workloads[i].name, &ga_workloads[i]};
  if (ra.nconfigs == 0) {
    ra.configs = malloc(sizeof default_configs);
    if (!ra.configs) return 2;
    memcpy(ra.configs, default_configs, sizeof default_configs);
    ra.nconfigs = sizeof default_configs / sizeof default_configs[0];
  }
  if (config_set_capacity(ra.configs, ra.nconfigs, capacity, "run")) return 2;
  if (mkdir_p(out, err, sizeof err)) {
    fprintf(stderr, "ga-bench run: %s\n", err);
    return 2;
  }
  ga_strbuf cmd = {0};
  bench_command(&cmd, "run", argc, argv);
  outputs o = {0};
  FILE *csv = out_open(&o, out, "run.csv"), *cmdf = out_open(&o, out, "run.cmd");
  if (!csv || !cmdf) {
    fprintf(stderr, "ga-bench run: cannot write in %s: %s\n", out, strerror(errno));
    outputs_finish(&o, 0);
    return 2;
  }
  fprintf(cmdf, "%s\n", cmd.s);
  csv_header(csv);
  if (!ra.json) cost_print(stdout);
  int failed = 0;
  for (size_t j = 0; j < njobs; j++) {
    trace t;
    int rc = jobs[j].w ? jobs[j].w->generate(&t, scale, seed) : trace_load(jobs[j].name, &t, err, sizeof err);
    if (rc) {
      /* The reader's message names the file already. */
      if (jobs[j].w)
        fprintf(stderr, "ga-bench run: %s: out of memory\n", jobs[j].name);
      else
        fprintf(stderr, "ga-bench run: %s\n", err);
      failed = 1;
      continue;
    }
    trace_scale(&t, ra.size_scale);
    const char *wl = jobs[j].w ? jobs[j].w->name : jobs[j].name;
    const char *slash = strrchr(wl, '/');
    const char *short_name = slash ? slash + 1 : wl;
    ga_strbuf mem = {0}, calls = {0};
    if (!ra.json) table_header(&mem, &calls);
    replay_samples *samples = calloc(ra.nconfigs, sizeof *samples);
    svg_series *series = calloc(ra.nconfigs, sizeof *series);
    uint64_t peak_live = 0;
    for (size_t c = 0; c < ra.nconfigs && samples && series; c++) {
      replay_result r;
      samples[c].max = 600;
      series[c].label = ra.configs[c].name;
      fprintf(stderr, "ga-bench: %s under %s\n", short_name, ra.configs[c].name);
      if (trace_replay_ex(&t, ra.configs[c].conf, &r, &samples[c], 1, err, sizeof err)) {
        fprintf(stderr, "ga-bench run: %s / %s: %s\n", short_name, ra.configs[c].name, err);
        replay_samples_free(&samples[c]);
        failed = 1;
        continue;
      }
      if (ra.json) {
        json_fields jf = {short_name,
                          ra.configs[c].name,
                          ra.configs[c].conf,
                          cmd.s,
                          ra.size_scale,
                          t.skipped_failures,
                          0,
                          &r,
                          NULL};
        json_result(stdout, &jf);
      } else
        table_row(&mem, &calls, &ra.configs[c], &r);
      csv_row(csv, short_name, &ra.configs[c], &r);
      series[c].s = &samples[c];
      series[c].peak_reserved = r.peak_reserved;
      peak_live = r.trace_peak_live;
    }
    if (!ra.json) printf("\n%s (%zu events)\n%s%s", short_name, t.n, mem.s, calls.s);
    strbuf_free(&mem);
    strbuf_free(&calls);
    char name[300];
    size_t len = strlen(short_name);
    int csv_ext = len > 4 && !strcmp(short_name + len - 4, ".csv");
    snprintf(name, sizeof name, "%.*s.svg", (int)(csv_ext ? len - 4 : len), short_name);
    /* The title names the timing when it is not the default, so that plots of
     * the same trace under a lag or repeated do not read as the same plot. */
    char title[400], when[160] = "";
    const replay_opts *ro = trace_replay_options();
    int nw = 0;
    if (ro->lag_us > 0)
      nw += snprintf(when + nw, sizeof when - (size_t)nw, "GPU %g ms behind", ro->lag_us / 1000);
    if (ro->kernel_us > 0)
      nw += snprintf(when + nw, sizeof when - (size_t)nw, "%s%g us of GPU work per event", nw ? ", " : "",
                     ro->kernel_us);
    if (ro->iterations > 1)
      nw += snprintf(when + nw, sizeof when - (size_t)nw, "%s%d iterations", nw ? ", " : "", ro->iterations);
    snprintf(title, sizeof title, "%.*s%s%s%s", (int)(csv_ext ? len - 4 : len), short_name, nw ? " (" : "",
             when, nw ? ")" : "");
    FILE *svg = samples && series ? out_open(&o, out, name) : NULL;
    svg_opts so = {title, cmd.s, peak_live, near};
    if (!svg || svg_write(svg, &so, series, ra.nconfigs) || staged_close(&o.v[o.n - 1])) {
      fprintf(stderr, "ga-bench run: cannot write %s/%s\n", out, name);
      failed = 1;
    }
    for (size_t c = 0; samples && c < ra.nconfigs; c++) replay_samples_free(&samples[c]);
    free(samples);
    free(series);
    trace_free(&t);
  }
  if (outputs_finish(&o, !failed)) failed = 1;
  if (failed)
    fprintf(stderr, "ga-bench run: a replay failed; the results in %s are unchanged\n", out);
  else if (!ra.json)
    printf("\nCSV: %s/run.csv (command in run.cmd)\nplots: %s/<workload>.svg\n", out, out);
  strbuf_free(&cmd);
  free(ra.configs);
  for (size_t k = 0; k < traces.n; k++) free(traces.v[k]);
  free(traces.v);
  return failed;
}
