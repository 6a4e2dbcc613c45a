/* bench.h — the pieces of ga-bench shared between its commands. */
#ifndef GA_BENCH_H
#define GA_BENCH_H

#include <stdio.h>

#include "trace.h"

/* ---- Estimated driver time (cost.c) ----
 * Microseconds per device call, by kind. */
extern double ga_cost_us[GA_CALL_COUNT];
/* Parses "kind=us,kind=us" into the table. -1 with a message on error. */
int cost_parse(const char *s, char *err, size_t errlen);
/* Estimated driver time of the calls in `stats`, in milliseconds. */
double cost_ms(const ga_stats_t *stats);
/* Prints the table and where its figures come from. */
void cost_print(FILE *f);
/* Where the figures come from: "assumed", "given with --cost" or "measured ...". */
extern char cost_source[256];
/* Measures every call kind `reps` times on device 0 of `backend` and keeps
 * the medians in the table (drivercost.c). -1 with a message on error. */
int cost_measure(const char *backend, int reps, char *err, size_t errlen);

/* ---- Plots (svg.c) ---- */
typedef struct svg_series {
  const char *label;
  const replay_samples *s;
} svg_series;
/* Writes reserved (solid) and allocated (dashed) bytes over events for each
 * configuration. -1 if the file cannot be written. */
int svg_write(const char *path, const char *title, const svg_series *series, size_t n);

/* ---- Trace paths (ga_bench.c) ---- */
typedef struct paths {
  char **v;
  size_t n, cap;
} paths;
/* Adds a file, or every *.csv of a directory in name order. -1 (with a
 * message) for a directory without traces. */
int expand(const char *arg, paths *out);

/* ---- Commands ---- */
int cmd_run(int argc, char **argv);
int cmd_hotpath(int argc, char **argv);
int cmd_drivercost(int argc, char **argv);

#endif
