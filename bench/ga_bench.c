/* ga-bench — replays allocation traces through gardenalloc and reports peak
 * requested / allocated / reserved bytes, OOMs and device calls, next to
 * PyTorch's own reserved memory where a trace has a .meta.json baseline.
 *
 *   ga-bench replay PATH... [--conf [NAME=]STR]... [--capacity-mb N] [--size-scale N] [--json]
 *   ga-bench run | hotpath | drivercost | scale | keys   (each with --help)
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "ranks.h"
#include "trace.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage:\n"
          "  ga-bench replay PATH... [--conf [NAME=]STR]... [--capacity-mb N] [--size-scale N] [--json]\n"
          "      RMM CSV traces (or folders of them) under each configuration (ga-bench replay --help)\n"
          "  ga-bench run [--workload NAME]... [--conf [NAME=]STR]... [--scale S] ...\n"
          "      built-in workloads under several configurations (ga-bench run --help)\n"
          "  ga-bench hotpath [--pairs N] [--threads N]   allocate+free from the cache vs libc\n"
          "  ga-bench drivercost [--backend B] [--reps N]  what each device call costs here\n"
          "  ga-bench scale [--max-n N] [--budget-s S]   CPU time per call with N blocks live\n"
          "  ga-bench ranks PATH... [--ranks N]   N ranks with different GPU timing: alike placement?\n"
          "  ga-bench fit PATH... [--conf [NAME=]STR]...   the smallest device each replay fits on\n"
          "  ga-bench sleep [--mib N]   ga_sleep/ga_wake time per restore mode, against copy bandwidth\n"
          "  ga-bench keys [--markdown|--json]   the configuration keys\n"
          "  ga-bench --version\n"
          "Every command takes --help. STR is a GARDENALLOC_CONF string: key:value,key:value.\n");
}

/* ---- Baselines from <trace>.meta.json ---- */

typedef struct baseline {
  int have;
  unsigned long long peak_live, pytorch_reserved;
} baseline;

static int json_u64_after(const char *text, const char *anchor, const char *key, unsigned long long *out) {
  const char *p = anchor ? strstr(text, anchor) : text;
  if (!p) return -1;
  char pat[128];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  p = strstr(p, pat);
  if (!p) return -1;
  return sscanf(p + strlen(pat), " %llu", out) == 1 ? 0 : -1;
}

static baseline load_baseline(const char *csv) {
  baseline b = {0};
  char path[4096];
  size_t n = strlen(csv);
  if (n < 4 || n + 16 > sizeof path || strcmp(csv + n - 4, ".csv")) return b;
  snprintf(path, sizeof path, "%.*s.meta.json", (int)(n - 4), csv);
  FILE *f = fopen(path, "r");
  if (!f) return b;
  static char text[1 << 16];
  size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[len] = 0;
  if (json_u64_after(text, NULL, "peak_live_requested_bytes", &b.peak_live) == 0 &&
      json_u64_after(text, "\"pytorch_baseline_at_snapshot\"", "reserved_bytes", &b.pytorch_reserved) == 0)
    b.have = 1;
  return b;
}

/* ---- Output ---- */

static double gib(unsigned long long b) { return (double)b / (double)(1ULL << 30); }

/* The replay table, in three parts that fit in BENCH_COLUMNS, keyed by the
 * same rows: memory, device calls, time. A row is a trace (its file name
 * without .csv) or, with several configurations, a configuration under a line
 * naming the trace. The JSON lines keep every field of a row together. */
typedef struct replay_table {
  ga_strbuf part[3];
  int key;      /* width of the row names */
  int several;  /* rows are configurations under their trace */
  size_t named; /* 1 + the trace whose name heads the rows last put */
} replay_table;

/* A header line, without the spaces its empty columns leave at its end. */
static void header_line(ga_strbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void header_line(ga_strbuf *b, const char *fmt, ...) {
  char line[BENCH_COLUMNS * 4];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  size_t n = strlen(line);
  while (n && (line[n - 1] == ' ' || line[n - 1] == '\n')) n--;
  strbuf_put(b, "%.*s\n", (int)n, line);
}

static double mib(unsigned long long b) { return (double)b / (double)(1ULL << 20); }

static void table_begin(replay_table *t, const paths *p, const bench_config *configs, size_t nconfigs) {
  memset(t, 0, sizeof *t);
  t->several = nconfigs > 1;
  t->key = row_key_width(p, configs, nconfigs, BENCH_COLUMNS - 60); /* the memory part's numbers */
  const char *key1 = t->several ? "  config" : "";
  strbuf_put(&t->part[0], "memory (MiB)\n");
  header_line(&t->part[0], "%*s %9s %9s %9s %6s %9s %6s %4s", -t->key, "trace", "peak", "peak", "peak",
              "resv/", "PyTorch", "vs", "");
  header_line(&t->part[0], "%*s %9s %9s %9s %6s %9s %6s %4s", -t->key, key1, "live", "alloc", "resv", "live",
              "resv", "PT", "OOM");
  strbuf_put(&t->part[1], "\ndevice calls\n");
  header_line(&t->part[1], "%*s %7s %7s %7s %7s %7s %7s %7s", -t->key, "trace", "", "dev", "", "", "", "",
              "");
  header_line(&t->part[1], "%*s %7s %7s %7s %7s %7s %7s %7s", -t->key, key1, "events", "alloc", "maps",
              "access", "unmaps", "moved", "syncs");
  strbuf_put(&t->part[2], "\ntime\n");
  header_line(&t->part[2], "%*s %9s %7s %9s %7s %7s", -t->key, "trace", "driver", "", "stalled", "steady",
              "");
  header_line(&t->part[2], "%*s %9s %7s %9s %7s %7s", -t->key, key1, "ms", "stalls", "ms", "calls", "ns/op");
}

static void table_row(replay_table *t, const char *path, size_t trace_index, const char *config_name,
                      const replay_result *r, const baseline *b) {
  char pt[16] = "-", vs[16] = "-", steady[24] = "-";
  if (b->have) {
    snprintf(pt, sizeof pt, "%.1f", mib(b->pytorch_reserved));
    snprintf(vs, sizeof vs, "%.3f", (double)r->peak_reserved / (double)b->pytorch_reserved);
  }
  if (r->iterations > 1) snprintf(steady, sizeof steady, "%llu", (unsigned long long)r->steady_memory_calls);
  for (int k = 0; k < 3; k++) {
    if (t->several && t->named != trace_index + 1) strbuf_put(&t->part[k], "%s\n", trace_file_name(path));
    ga_strbuf key = {0};
    if (t->several)
      strbuf_put(&key, "  %s", config_name);
    else
      strbuf_put(&key, "%.*s", trace_key_len(path), trace_file_name(path));
    key_cell(&t->part[k], t->key, key.s, (int)key.len);
    strbuf_free(&key);
  }
  t->named = trace_index + 1;
  strbuf_put(&t->part[0], " %9.1f %9.1f %9.1f %6.3f %9s %6s %4llu\n", mib(r->peak_requested),
             mib(r->peak_allocated), mib(r->peak_reserved),
             r->peak_requested ? (double)r->peak_reserved / (double)r->peak_requested : 0.0, pt, vs,
             (unsigned long long)r->num_ooms);
  strbuf_put(&t->part[1], " %7zu %7lld %7llu %7llu %7llu %7lld %7lld\n", r->events,
             (long long)r->stats.num_device_alloc, (unsigned long long)r->stats.device_calls[GA_CALL_MAP],
             (unsigned long long)r->stats.device_calls[GA_CALL_SET_ACCESS],
             (unsigned long long)r->stats.device_calls[GA_CALL_UNMAP], (long long)r->stats.num_granules_moved,
             (long long)r->stats.num_unmap_syncs);
  strbuf_put(&t->part[2], " %9.1f %7lld %9.1f %7s %7.0f\n", cost_ms(&r->stats),
             (long long)r->stats.num_stalls, (double)r->stats.stall_us / 1000.0, steady,
             r->allocs ? r->cpu_seconds * 1e9 / (double)r->allocs : 0.0);
}

/* ---- Commands ---- */

static void replay_usage(FILE *f) {
  fprintf(f,
          "usage: ga-bench replay PATH... [--conf [NAME=]STR]... [--capacity-mb N] [--size-scale N]\n"
          "                       [--json] [--samples N] [--lag-us L] [--pace-us P] [--kernel-us K]\n"
          "                       [--iterations N] [--cost STR]\n"
          "  Replays RMM CSV traces (a PATH may be a folder of *.csv, or a built-in workload:\n"
          "  workload:NAME, workload:all; scale 1, seed 1) under each configuration. A trace's\n"
          "  lines are Thread,Time,Action,Pointer,Size,Stream, or the order its header names.\n"
          "  --conf        a GARDENALLOC_CONF string, optionally named (repeat to compare side by side;\n"
          "                default: the GARDENALLOC_CONF variable)\n"
          "  --capacity-mb memory of the simulated device (default 81920)\n"
          "  --size-scale  multiply every size in the traces by N (e.g. 64 for MiniMalloc)\n"
          "  --json        one JSON object per trace and configuration instead of the table, with every\n"
          "                counter, the first OOM's report and the command\n"
          "  --samples N   with --json: the reserved/allocated/live curve in N points\n"
          "  --lag-us L    the simulated GPU runs L us behind the CPU (default 0: streams idle)\n"
          "  --pace-us P   the program's CPU time per event when the trace has no times (default 10)\n"
          "  --kernel-us K GPU work queued on the event's stream after each event (default 0)\n"
          "  --iterations N replay each trace N times in a row (what is live is freed between)\n"
          "  --cost STR    replace figures of the simulated device's cost table (kind=us[+per_unit],...)\n"
          "  The table is followed by the report of the first out-of-memory of each replay that had one.\n");
}

static int cmd_replay(int argc, char **argv) {
  const char *capacity = NULL;
  size_t nsamples = 0;
  replay_args o = {.size_scale = 1};
  paths p = {0};
  for (int i = 0; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    int t = replay_option(argc, argv, &i, "replay", &o);
    if (t < 0) return 2;
    if (t) continue;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      replay_usage(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--capacity-mb") && v)
      capacity = argv[++i];
    else if (!strcmp(argv[i], "--samples") && v) {
      char *end;
      nsamples = strtoul(argv[++i], &end, 10);
      if (*end || nsamples < 2 || nsamples > 100000) {
        fprintf(stderr, "ga-bench replay: --samples '%s' must be a whole number from 2 to 100000\n", argv[i]);
        return 2;
      }
    } else if (replay_operand(argv[i], "replay", &p, replay_usage))
      return 2;
  }
  if (replay_args_end("replay", &p, &o, replay_usage)) return 2;
  if (config_set_capacity(o.configs, o.nconfigs, capacity, "replay")) return 2;
  ga_strbuf cmd = {0};
  bench_command(&cmd, "replay", argc, argv);
  int several = o.nconfigs > 1, failed = 0, header = 0;
  size_t shown = 0; /* of the memory part, printed as its rows come */
  replay_table tab;
  table_begin(&tab, &p, o.configs, o.nconfigs);
  ga_strbuf ooms = {0};
  for (size_t i = 0; i < p.n; i++) {
    trace t;
    char err[1024];
    if (input_load(p.v[i], &t, err, sizeof err)) {
      fprintf(stderr, "ga-bench: %s\n", err);
      failed = 1;
      continue;
    }
    trace_scale(&t, o.size_scale);
    baseline b = load_baseline(p.v[i]);
    for (size_t c = 0; c < o.nconfigs; c++) {
      replay_result r;
      replay_samples smp = {.max = nsamples};
      if (trace_replay_ex(&t, o.configs[c].conf, &r, o.json && nsamples ? &smp : NULL, 0, err, sizeof err)) {
        fprintf(stderr, "ga-bench: %s%s%s\n", several ? o.configs[c].name : "", several ? ": " : "", err);
        failed = 1;
        continue;
      }
      if (o.json) {
        json_fields j = {p.v[i],
                         o.configs[c].name,
                         o.configs[c].conf,
                         cmd.s,
                         o.size_scale,
                         t.skipped_failures,
                         b.have ? b.pytorch_reserved : 0,
                         &r,
                         nsamples ? &smp : NULL};
        json_result(stdout, &j);
      } else {
        if (!header) { /* above the first result: nothing when every replay failed */
          if (several) {
            printf("configurations%s:\n", o.size_scale > 1 ? " (sizes scaled)" : "");
            for (size_t k = 0; k < o.nconfigs; k++)
              printf(
                  strlen(o.configs[k].conf) + 25 > BENCH_COLUMNS ? "  %s\n    \"%s\"\n" : "  %-20s \"%s\"\n",
                  o.configs[k].name, o.configs[k].conf);
          } else
            printf("configuration: \"%s\"%s\n", o.configs[0].conf, o.size_scale > 1 ? " (sizes scaled)" : "");
          printf("device: %s, %.2f GiB\n", r.backend, gib(r.device_total));
          cost_print(stdout);
          printf("\n");
          header = 1;
        }
        table_row(&tab, p.v[i], i, o.configs[c].name, &r, &b);
        fputs(tab.part[0].s + shown, stdout);
        shown = tab.part[0].len;
        if (r.first_oom_event)
          strbuf_put(
              &ooms,
              "\n%s%s%s: %llu out-of-memory errors; the first, at event %zu (%llu bytes asked):\n  %s\n",
              trace_file_name(p.v[i]), several ? " under " : "", several ? o.configs[c].name : "",
              (unsigned long long)r.num_ooms, r.first_oom_event, (unsigned long long)r.first_oom_size,
              r.first_oom_report);
      }
      fflush(stdout);
      replay_samples_free(&smp);
    }
    trace_free(&t);
  }
  if (header) printf("%s%s", tab.part[1].s, tab.part[2].s);
  for (int k = 0; k < 3; k++) strbuf_free(&tab.part[k]);
  if (ooms.len) print_wrapped(stdout, ooms.s, "  ");
  strbuf_free(&ooms);
  strbuf_free(&cmd);
  free(o.configs);
  for (size_t i = 0; i < p.n; i++) free(p.v[i]);
  free(p.v);
  return failed;
}

static const char *origin_words(const char *origin) {
  return !strcmp(origin, "pytorch") ? "PyTorch's key" : "gardenalloc's key";
}

/* docs/configuration.md's generated part: a table of every key that fits in
 * 100 columns, then one section per key with its values and meaning. */
static void keys_markdown(void) {
  const char *name, *type, *dflt, *origin, *doc;
  printf("| key | default | from |\n|---|---|---|\n");
  for (int i = 0; ga_config_key(i, &name, &type, &dflt, &origin, &doc); i++)
    printf("| [`%s`](#%s) | %s | %s |\n", name, name, dflt, origin);
  for (int i = 0; ga_config_key(i, &name, &type, &dflt, &origin, &doc); i++) {
    printf("\n### %s\n\n%s. Values: `%s`. Default: `%s`.\n\n", name, origin_words(origin), type, dflt);
    print_wrapped(stdout, doc, "");
  }
}

static int cmd_keys(int argc, char **argv) {
  int md = 0, json = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--markdown"))
      md = 1;
    else if (!strcmp(argv[i], "--json"))
      json = 1;
    else {
      int help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
      fprintf(help ? stdout : stderr,
              "usage: ga-bench keys [--markdown|--json]\n"
              "  The configuration keys: name, values, default, origin and meaning (markdown: a table\n"
              "  and a section per key, as in docs/configuration.md; JSON: one object per key).\n");
      return help ? 0 : 2;
    }
  }
  if (md) {
    keys_markdown();
    return 0;
  }
  const char *name, *type, *dflt, *origin, *doc;
  for (int i = 0; ga_config_key(i, &name, &type, &dflt, &origin, &doc); i++) {
    if (json) {
      const char *k[] = {"key", "values", "default", "from", "meaning"},
                 *v[] = {name, type, dflt, origin, doc};
      for (int f = 0; f < 5; f++) {
        printf("%s\"%s\":", f ? "," : "{", k[f]);
        json_string(stdout, v[f]);
      }
      printf("}\n");
    } else {
      /* The key and its values on one line, its default and meaning wrapped below. */
      ga_strbuf about = {0};
      strbuf_put(&about, "    default %s (%s): %s", dflt, origin, doc);
      printf("%-34s %s\n", name, type);
      print_wrapped(stdout, about.s, "    ");
      strbuf_free(&about);
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  bench_argv0 = argv[0];
  replay_opts o = *trace_replay_options();
  o.on_create = cost_apply; /* --cost on every simulated device */
  trace_replay_set_options(&o);
  if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
    printf("ga-bench %s\n", GA_VERSION);
    return 0;
  }
  if (!strcmp(argv[1], "replay")) return cmd_replay(argc - 2, argv + 2);
  if (!strcmp(argv[1], "keys")) return cmd_keys(argc - 2, argv + 2);
  if (!strcmp(argv[1], "fit")) return cmd_fit(argc - 2, argv + 2);
  if (!strcmp(argv[1], "run")) return cmd_run(argc - 2, argv + 2);
  if (!strcmp(argv[1], "hotpath")) return cmd_hotpath(argc - 2, argv + 2);
  if (!strcmp(argv[1], "drivercost")) return cmd_drivercost(argc - 2, argv + 2);
  if (!strcmp(argv[1], "scale")) return cmd_scale(argc - 2, argv + 2);
  if (!strcmp(argv[1], "ranks")) return cmd_ranks(argc - 2, argv + 2);
  if (!strcmp(argv[1], "sleep")) return cmd_sleep(argc - 2, argv + 2);
  fprintf(stderr, "ga-bench: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
