/* options.c — the command-line options ga-bench's commands share: trace paths
 * (files, folders, globs), --conf [NAME=]STR, --capacity-mb, the time model's
 * options and --size-scale. A leaf of ga-bench: every command calls it, and it
 * calls none of them.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "trace.h"
#include "workloads.h"

/* ---- Paths ---- */

static void add_path(paths *p, const char *path) {
  if (p->n == p->cap) {
    p->cap = p->cap ? p->cap * 2 : 32;
    p->v = realloc(p->v, p->cap * sizeof *p->v);
    if (!p->v) exit(2);
  }
  p->v[p->n++] = strdup(path);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

#define WORKLOAD_PREFIX "workload:"

int expand(const char *arg, paths *out) {
  size_t np = strlen(WORKLOAD_PREFIX);
  if (!strncmp(arg, WORKLOAD_PREFIX, np)) { /* a built-in workload, or all of them */
    if (!strcmp(arg + np, "all")) {
      for (size_t i = 0; i < ga_nworkloads; i++) {
        char name[128];
        snprintf(name, sizeof name, WORKLOAD_PREFIX "%s", ga_workloads[i].name);
        add_path(out, name);
      }
      return 0;
    }
    if (!workload_find(arg + np)) {
      fprintf(stderr, "ga-bench: %s: no such built-in workload (ga-bench run --help lists them)\n", arg);
      return -1;
    }
    add_path(out, arg);
    return 0;
  }
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

int input_load(const char *path, trace *t, char *err, size_t errlen) {
  size_t np = strlen(WORKLOAD_PREFIX);
  if (strncmp(path, WORKLOAD_PREFIX, np)) return trace_load(path, t, err, errlen);
  const workload *w = workload_find(path + np);
  if (!w) {
    snprintf(err, errlen, "%s: no such built-in workload", path);
    return -1;
  }
  if (w->generate(t, 1.0, 1)) {
    snprintf(err, errlen, "%s: out of memory generating it", path);
    return -1;
  }
  return 0;
}

/* ---- Configurations ---- */

/* Is the n bytes at key a configuration key? */
static int is_config_key(const char *key, size_t n) {
  const char *name;
  for (int i = 0; ga_config_key(i, &name, NULL, NULL, NULL, NULL); i++)
    if (strlen(name) == n && memcmp(name, key, n) == 0) return 1;
  return 0;
}

int config_add(bench_config **v, size_t *n, const char *arg, const char *who) {
  bench_config c = {0};
  char kv[sizeof c.conf];
  const char *eq = strchr(arg, '='), *colon = strchr(arg, ':');
  if (eq && !colon && !strchr(eq + 1, '=') && !strchr(eq + 1, ',') &&
      is_config_key(arg, (size_t)(eq - arg))) {
    /* KEY=VALUE of one key, which no configuration name would be: KEY:VALUE. */
    snprintf(kv, sizeof kv, "%.*s:%s", (int)(eq - arg), arg, eq + 1);
    snprintf(c.name, sizeof c.name, "%.*s", (int)sizeof c.name - 1, kv);
    arg = kv;
  } else if (eq && (!colon || eq < colon)) { /* NAME=CONF */
    if (is_config_key(arg, (size_t)(eq - arg))) {
      fprintf(stderr,
              "ga-bench %s: '%s': %.*s is a configuration key, and the separator between a key and its value "
              "is ':' (NAME=STR gives a configuration a name)\n",
              who, arg, (int)(eq - arg), arg);
      return -1;
    }
    if (eq == arg || (size_t)(eq - arg) >= sizeof c.name) {
      fprintf(stderr, "ga-bench %s: '%s': the name before '=' must be 1 to %zu characters\n", who, arg,
              sizeof c.name - 1);
      return -1;
    }
    memcpy(c.name, arg, (size_t)(eq - arg));
    arg = eq + 1;
  } else
    snprintf(c.name, sizeof c.name, "%s", *arg ? arg : "default");
  if (strlen(arg) >= sizeof c.conf) {
    fprintf(stderr, "ga-bench %s: configuration %s is too long\n", who, c.name);
    return -1;
  }
  snprintf(c.conf, sizeof c.conf, "%s", arg);
  if (ga_config_validate(c.conf) != GA_OK) {
    fprintf(stderr, "ga-bench %s: configuration %s: %s\n", who, c.name, ga_last_error());
    return -1;
  }
  bench_config *nv = realloc(*v, (*n + 1) * sizeof *nv);
  if (!nv) return -1;
  nv[(*n)++] = c;
  *v = nv;
  return 0;
}

int config_set_capacity(bench_config *v, size_t n, const char *capacity_mb, const char *who) {
  for (size_t c = 0; capacity_mb && c < n; c++) {
    char buf[sizeof v->conf];
    int k =
        snprintf(buf, sizeof buf, "sim_capacity_mb:%s%s%s", capacity_mb, v[c].conf[0] ? "," : "", v[c].conf);
    if (k < 0 || (size_t)k >= sizeof buf) {
      fprintf(stderr, "ga-bench %s: configuration %s is too long\n", who, v[c].name);
      return -1;
    }
    if (ga_config_validate(buf) != GA_OK) {
      fprintf(stderr, "ga-bench %s: --capacity-mb %s: %s\n", who, capacity_mb, ga_last_error());
      return -1;
    }
    memcpy(v[c].conf, buf, (size_t)k + 1);
  }
  return 0;
}

int time_option(int argc, char **argv, int *i, const char *who) {
  static const struct {
    const char *flag;
    double lo, hi;
  } opts[] = {
      {"--lag-us", 0, 1e9}, {"--pace-us", 0, 1e9}, {"--kernel-us", 0, 1e9}, {"--iterations", 1, 1000}};
  for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++) {
    if (strcmp(argv[*i], opts[k].flag)) continue;
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    char *end = NULL;
    double x = v ? strtod(v, &end) : -1;
    if (!v || !*v || *end || !(x >= opts[k].lo && x <= opts[k].hi) || (k == 3 && x != (int)x)) {
      fprintf(stderr, "ga-bench %s: %s '%s' must be a %s from %g to %g\n", who, opts[k].flag, v ? v : "",
              k == 3 ? "whole number" : "number", opts[k].lo, opts[k].hi);
      return -1;
    }
    replay_opts o = *trace_replay_options();
    if (k == 0) o.lag_us = x;
    if (k == 1) o.pace_us = x;
    if (k == 2) o.kernel_us = x;
    if (k == 3) o.iterations = (int)x;
    trace_replay_set_options(&o);
    (*i)++;
    return 1;
  }
  return 0;
}

int replay_option(int argc, char **argv, int *i, const char *who, replay_args *r) {
  int t = time_option(argc, argv, i, who);
  if (t) return t;
  const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  if (!strcmp(a, "--json")) {
    r->json = 1;
    return 1;
  }
  if (!v) return 0;
  if (!strcmp(a, "--cost")) {
    char err[600];
    if (cost_parse(v, err, sizeof err)) {
      fprintf(stderr, "ga-bench %s: %s\n", who, err);
      return -1;
    }
  } else if (!strcmp(a, "--conf") || !strcmp(a, "--config")) {
    if (config_add(&r->configs, &r->nconfigs, v, who)) return -1;
  } else if (!strcmp(a, "--size-scale")) {
    if (parse_scale(v, &r->size_scale, who)) return -1;
  } else
    return 0;
  (*i)++;
  return 1;
}

int replay_operand(const char *arg, const char *who, paths *p, void (*usage)(FILE *)) {
  if (arg[0] == '-') {
    fprintf(stderr, "ga-bench %s: unknown or incomplete option '%s'\n", who, arg);
    usage(stderr);
    return -1;
  }
  return expand(arg, p) ? -1 : 0;
}

int replay_args_end(const char *who, const paths *p, replay_args *r, void (*usage)(FILE *)) {
  if (p->n == 0) {
    fprintf(stderr, "ga-bench %s: no trace given\n", who);
    usage(stderr);
    return -1;
  }
  if (r->nconfigs) return 0;
  const char *env = getenv("GARDENALLOC_CONF");
  return config_add(&r->configs, &r->nconfigs, env ? env : "", who) ? -1 : 0;
}

int parse_scale(const char *v, uint64_t *out, const char *who) {
  char *end;
  unsigned long long n = strtoull(v, &end, 10);
  if (!*v || *end || n == 0 || n > (1ull << 20) || v[0] == '-') {
    fprintf(stderr, "ga-bench %s: --size-scale '%s' must be a whole number from 1 to 1048576\n", who, v);
    return -1;
  }
  *out = n;
  return 0;
}

void trace_scale(trace *t, uint64_t scale) {
  for (size_t k = 0; scale > 1 && k < t->n; k++) t->ev[k].size *= scale;
}
