/* ranks_cmd.c — ga-bench ranks: do N ranks with different GPU timing place
 * every allocation alike, and at what memory (ranks.h)? */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "ranks.h"

static void ranks_usage(FILE *f) {
  fprintf(f,
          "usage: ga-bench ranks PATH... [--conf STR] [--ranks N] [--lag-max-us US] [--kernel-max-us US]\n"
          "                      [--record-every K] [--seed S] [--scatter]\n"
          "  Replays each RMM CSV trace (or each .csv of a folder) as N ranks (default 4) on simulated\n"
          "  GPUs: each rank's lag uniform in [0, --lag-max-us] (default 3000), each event's kernel in\n"
          "  [0, --kernel-max-us] (default 300), every K-th allocation (default 7; 0: none) also used on\n"
          "  a second stream (record_stream). Once under --conf as given (default: the defaults) and once\n"
          "  with deterministic:True added: whether every rank placed every allocation alike (segment,\n"
          "  offset, size), the peak reserved MiB (the lowest and highest rank), and the waits for the\n"
          "  GPU (stalls, the most of any rank). --scatter: each rank's simulated GPU also puts its\n"
          "  segments at addresses drawn for the rank (sim_scatter_addresses), so that their address\n"
          "  order differs from rank to rank, as on the GPUs of different processes.\n");
}

static int one_path(const char *path, const char *conf, const ranks_opts *o, int *header) {
  trace t;
  char err[1024];
  if (trace_load(path, &t, err, sizeof err)) {
    fprintf(stderr, "ga-bench ranks: %s\n", err);
    return -1;
  }
  char det[1100];
  snprintf(det, sizeof det, "%s%sdeterministic:True", conf, conf[0] ? "," : "");
  ranks_result r[2];
  const char *confs[2] = {conf, det};
  for (int k = 0; k < 2; k++)
    if (ranks_replay(&t, confs[k], o, &r[k], err, sizeof err)) {
      fprintf(stderr, "ga-bench ranks: %s\n", err);
      trace_free(&t);
      return -1;
    }
  /* One line naming the trace, then one per mode: fits in 100 columns. */
  if (!*header) {
    printf("%-32s %7s  %-9s %17s %8s %9s\n", "trace", "allocs", "placement", "peak MiB", "stalls",
           "stall ms");
    printf("%-32s %7s  %-9s %17s %8s\n", "  mode", "", "", "(ranks: min-max)", "(most)");
    *header = 1;
  }
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  printf("%-32s %7zu\n", base, r[0].allocs);
  for (int k = 0; k < 2; k++) {
    uint64_t stalls = 0, stall_ns = 0;
    for (int i = 0; i < o->ranks; i++) {
      if (r[k].stalls[i] > stalls) stalls = r[k].stalls[i];
      if (r[k].stall_ns[i] > stall_ns) stall_ns = r[k].stall_ns[i];
    }
    char peak[40];
    snprintf(peak, sizeof peak, "%.1f-%.1f", (double)r[k].peak_min / 1048576.0,
             (double)r[k].peak_max / 1048576.0);
    printf("%-32s %7s  %-9s %17s %8llu %9.1f\n", k ? "  deterministic:True" : "  as given", "",
           r[k].identical ? "alike" : "DIFFER", peak, (unsigned long long)stalls, (double)stall_ns / 1e6);
  }
  trace_free(&t);
  return 0;
}

static int csv_name(const struct dirent *e) {
  size_t n = strlen(e->d_name);
  return n > 4 && !strcmp(e->d_name + n - 4, ".csv");
}

int cmd_ranks(int argc, char **argv) {
  ranks_opts o = {
      .ranks = 4, .seed = 1, .lag_max_us = 3000, .kernel_max_us = 300, .pace_us = 10, .record_every = 7};
  const char *conf = "";
  const char *paths[256];
  int npaths = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      ranks_usage(stdout);
      return 0;
    }
    if (a[0] != '-') {
      if (npaths < 256) paths[npaths++] = a;
      continue;
    }
    if (!strcmp(a, "--scatter")) {
      o.scatter = 1;
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "ga-bench ranks: %s needs a value\n", a);
      return 2;
    }
    const char *v = argv[++i];
    char *end = NULL;
    double d = strtod(v, &end);
    int bad = !end || *end || d < 0;
    if (!strcmp(a, "--conf"))
      conf = v, bad = 0;
    else if (!strcmp(a, "--ranks"))
      o.ranks = (int)d, bad |= d < 2 || d > RANKS_MAX;
    else if (!strcmp(a, "--lag-max-us"))
      o.lag_max_us = d;
    else if (!strcmp(a, "--kernel-max-us"))
      o.kernel_max_us = d;
    else if (!strcmp(a, "--record-every"))
      o.record_every = (unsigned)d;
    else if (!strcmp(a, "--seed"))
      o.seed = (uint64_t)d;
    else {
      fprintf(stderr, "ga-bench ranks: unknown option '%s'\n", a);
      ranks_usage(stderr);
      return 2;
    }
    if (bad) {
      fprintf(stderr, "ga-bench ranks: bad value '%s' for %s\n", v, a);
      return 2;
    }
  }
  if (!npaths) {
    ranks_usage(stderr);
    return 2;
  }
  ga_strbuf about = {0};
  strbuf_put(&about,
             "# %d ranks, lag 0-%.0f us, kernels 0-%.0f us, every %u-th allocation also on a second stream, "
             "%saddresses, seed %llu, conf '%s'\n",
             o.ranks, o.lag_max_us, o.kernel_max_us, o.record_every,
             o.scatter ? "scattered " : "the device's ", (unsigned long long)o.seed, conf);
  print_wrapped(stdout, about.s, "# ");
  strbuf_free(&about);
  int header = 0, rc = 0;
  for (int p = 0; p < npaths && !rc; p++) {
    struct stat st;
    if (stat(paths[p], &st) == 0 && S_ISDIR(st.st_mode)) {
      struct dirent **ents;
      int m = scandir(paths[p], &ents, csv_name, alphasort);
      for (int i = 0; i < m; i++) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", paths[p], ents[i]->d_name);
        if (!rc) rc = one_path(full, conf, &o, &header);
        free(ents[i]);
      }
      if (m > 0) free(ents);
    } else
      rc = one_path(paths[p], conf, &o, &header);
  }
  return rc ? 1 : 0;
}
