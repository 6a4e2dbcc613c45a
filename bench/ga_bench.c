/* ga-bench — replays allocation traces through gardenalloc and reports peak
 * requested / allocated / reserved bytes, OOMs and device calls, next to
 * PyTorch's own reserved memory where a trace has a .meta.json baseline.
 *
 *   ga-bench replay PATH... [--conf STR] [--capacity-mb N] [--json]
 *   ga-bench keys [--markdown]
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "trace.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage:\n"
          "  ga-bench replay PATH... [--conf STR] [--capacity-mb N] [--json]\n"
          "      PATH is an RMM CSV trace or a directory of them (*.csv).\n"
          "      --conf        GARDENALLOC_CONF string (default: the environment variable)\n"
          "      --capacity-mb memory of the simulated device (default 81920)\n"
          "      --size-scale N multiply every size in the trace by N (e.g. 64 for MiniMalloc)\n"
          "      --json        one JSON object per trace instead of the table\n"
          "  ga-bench run [--workload NAME]... [--config NAME=CONF]... [--scale S] ...\n"
          "      built-in workloads under several configurations (ga-bench run --help)\n"
          "  ga-bench hotpath [--pairs N] [--threads N]   allocate+free from the cache vs libc\n"
          "  ga-bench drivercost [--backend B] [--reps N]  what each device call costs here\n"
          "  ga-bench keys [--markdown]   the configuration keys\n");
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

/* ---- Paths ---- */

static void add_path(paths *p, const char *s) {
  if (p->n == p->cap) {
    p->cap = p->cap ? p->cap * 2 : 32;
    p->v = realloc(p->v, p->cap * sizeof *p->v);
    if (!p->v) exit(2);
  }
  p->v[p->n++] = strdup(s);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int expand(const char *arg, paths *out) {
  DIR *d = opendir(arg);
  if (!d) {
    add_path(out, arg);
    return 0;
  }
  size_t first = out->n;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (n > 4 && strcmp(e->d_name + n - 4, ".csv") == 0) {
      char full[4096];
      snprintf(full, sizeof full, "%s/%s", arg, e->d_name);
      add_path(out, full);
    }
  }
  closedir(d);
  if (out->n > first) qsort(out->v + first, out->n - first, sizeof *out->v, cmp_str);
  if (out->n == first) {
    fprintf(stderr, "ga-bench: %s: no .csv traces in this directory\n", arg);
    return -1;
  }
  return 0;
}

/* ---- Output ---- */

static double gib(unsigned long long b) { return (double)b / (double)(1ULL << 30); }

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

static void print_json(const char *path, const char *conf, const trace *t, const replay_result *r,
                       const baseline *b) {
  printf(
      "{\"trace\":\"%s\",\"conf\":\"%s\",\"device\":\"%s\",\"device_total_bytes\":%zu,\"events\":%zu,"
      "\"skipped_failures\":%zu,",
      path, conf ? conf : "", r->backend, r->device_total, r->events, t->skipped_failures);
  printf("\"peak_requested_bytes\":%llu,\"peak_allocated_bytes\":%llu,\"peak_reserved_bytes\":%llu,",
         (unsigned long long)r->peak_requested, (unsigned long long)r->peak_allocated,
         (unsigned long long)r->peak_reserved);
  printf("\"num_ooms\":%llu,\"num_alloc_retries\":%llu,\"seconds\":%.6f,", (unsigned long long)r->num_ooms,
         (unsigned long long)r->num_alloc_retries, r->seconds);
  if (b->have) printf("\"pytorch_reserved_bytes\":%llu,", b->pytorch_reserved);
  printf("\"device_calls\":{");
  for (int k = 0; k < GA_CALL_COUNT; k++)
    printf("\"%s\":%llu%s", ga_device_call_name((ga_device_call_t)k),
           (unsigned long long)r->stats.device_calls[k], k + 1 < GA_CALL_COUNT ? "," : "");
  printf("}}\n");
}

static void print_header(void) {
  printf("%-36s %7s %10s %10s %10s %9s %10s %7s %4s %9s %7s %7s\n", "trace", "events", "peak live",
         "peak alloc", "peak resv", "resv/live", "PyTorch", "vs PT", "OOM", "dev alloc", "maps", "moved");
  printf("%-36s %7s %10s %10s %10s %9s %10s %7s %4s %9s %7s %7s\n", "", "", "(MiB)", "(MiB)", "(MiB)", "",
         "resv (MiB)", "", "", "", "", "");
}

static double mib(unsigned long long b) { return (double)b / (double)(1ULL << 20); }

static void print_row(const char *path, const replay_result *r, const baseline *b) {
  char pt[16] = "-", vs[16] = "-";
  if (b->have) {
    snprintf(pt, sizeof pt, "%.1f", mib(b->pytorch_reserved));
    snprintf(vs, sizeof vs, "%.3f", (double)r->peak_reserved / (double)b->pytorch_reserved);
  }
  printf("%-36.36s %7zu %10.1f %10.1f %10.1f %9.3f %10s %7s %4llu %9lld %7llu %7lld\n", base_name(path),
         r->events, mib(r->peak_requested), mib(r->peak_allocated), mib(r->peak_reserved),
         r->peak_requested ? (double)r->peak_reserved / (double)r->peak_requested : 0.0, pt, vs,
         (unsigned long long)r->num_ooms, (long long)r->stats.num_device_alloc,
         (unsigned long long)r->stats.device_calls[GA_CALL_MAP], (long long)r->stats.num_pages_moved);
}

/* ---- Commands ---- */

static int cmd_replay(int argc, char **argv) {
  const char *conf = getenv("GARDENALLOC_CONF");
  const char *capacity = NULL;
  unsigned long long scale = 1;
  int json = 0;
  paths p = {0};
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--json"))
      json = 1;
    else if (!strcmp(argv[i], "--conf") && i + 1 < argc)
      conf = argv[++i];
    else if (!strcmp(argv[i], "--capacity-mb") && i + 1 < argc)
      capacity = argv[++i];
    else if (!strcmp(argv[i], "--size-scale") && i + 1 < argc) {
      char *end;
      scale = strtoull(argv[++i], &end, 10);
      if (*end || scale == 0) {
        fprintf(stderr, "ga-bench replay: --size-scale '%s' is not a positive integer\n", argv[i]);
        return 2;
      }
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "ga-bench replay: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    } else if (expand(argv[i], &p))
      return 2;
  }
  if (p.n == 0) {
    fprintf(stderr, "ga-bench replay: no trace given\n");
    usage(stderr);
    return 2;
  }
  char full_conf[1024];
  if (capacity) {
    snprintf(full_conf, sizeof full_conf, "sim_capacity_mb:%s%s%s", capacity, conf && *conf ? "," : "",
             conf ? conf : "");
    conf = full_conf;
  }
  if (ga_config_validate(conf) != GA_OK) {
    fprintf(stderr, "ga-bench: %s\n", ga_last_error());
    return 2;
  }
  if (!json) printf("configuration: \"%s\"%s\n", conf ? conf : "", scale > 1 ? " (sizes scaled)" : "");
  int failed = 0;
  for (size_t i = 0; i < p.n; i++) {
    trace t;
    replay_result r;
    char err[1024];
    int bad = trace_load(p.v[i], &t, err, sizeof err);
    for (size_t k = 0; !bad && k < t.n; k++) t.ev[k].size *= scale;
    if (bad || trace_replay(&t, conf, &r, err, sizeof err)) {
      fprintf(stderr, "ga-bench: %s\n", err);
      failed = 1;
      if (t.path) trace_free(&t);
      continue;
    }
    baseline b = load_baseline(p.v[i]);
    if (!json && i == 0) {
      printf("device: %s, %.2f GiB\n\n", r.backend, gib(r.device_total));
      print_header();
    }
    if (json)
      print_json(p.v[i], conf, &t, &r, &b);
    else
      print_row(p.v[i], &r, &b);
    fflush(stdout);
    trace_free(&t);
  }
  for (size_t i = 0; i < p.n; i++) free(p.v[i]);
  free(p.v);
  return failed;
}

/* Prints s with '|' escaped for a markdown table cell. */
static void md_cell(const char *s) {
  for (; *s; s++) {
    if (*s == '|') putchar('\\');
    putchar(*s);
  }
}

static int cmd_keys(int argc, char **argv) {
  int md = argc > 0 && !strcmp(argv[0], "--markdown");
  const char *name, *type, *dflt, *origin, *doc;
  if (md) printf("| key | values | default | from | meaning |\n|---|---|---|---|---|\n");
  for (int i = 0; ga_config_key(i, &name, &type, &dflt, &origin, &doc); i++) {
    if (md) {
      printf("| `%s` | ", name);
      md_cell(type);
      printf(" | %s | %s | ", dflt, origin);
      md_cell(doc);
      printf(" |\n");
    } else
      printf("%-34s %-36s default %-22s (%s) %s\n", name, type, dflt, origin, doc);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "replay")) return cmd_replay(argc - 2, argv + 2);
  if (!strcmp(argv[1], "keys")) return cmd_keys(argc - 2, argv + 2);
  if (!strcmp(argv[1], "run")) return cmd_run(argc - 2, argv + 2);
  if (!strcmp(argv[1], "hotpath")) return cmd_hotpath(argc - 2, argv + 2);
  if (!strcmp(argv[1], "drivercost")) return cmd_drivercost(argc - 2, argv + 2);
  fprintf(stderr, "ga-bench: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
