/* bench.h — the pieces of ga-bench shared between its commands. */
#ifndef GA_BENCH_H
#define GA_BENCH_H

#include <stdio.h>

#include "trace.h"

/* ---- Driver time (cost.c) ----
 * Overrides of the simulated device's cost table, in microseconds: per call
 * and per unit (NAN = the device's own figure). */
extern double ga_cost_us[GA_CALL_COUNT];
extern double ga_cost_unit_us[GA_CALL_COUNT];
/* Parses "kind=us[+unit_us],..." into the overrides. -1 with a message on error. */
int cost_parse(const char *spec, char *err, size_t errlen);
/* Applies the overrides to the device of `a` when it is simulated. */
void cost_apply(ga_allocator_t *a);
/* Time spent in the device calls of `stats` (waits excluded), in milliseconds. */
double cost_ms(const ga_stats_t *stats);
/* Prints how driver time is found and the cost table with the lag. */
void cost_print(FILE *f);
/* Where the figures come from. */
extern char cost_source[256];
/* The replay options --lag-us, --pace-us, --kernel-us, --iterations: consumes
 * argv[*i] (and its value) when it is one of them. 1 consumed, 0 not one of
 * them, -1 bad value (message printed). */
int time_option(int argc, char **argv, int *i, const char *who);
/* Measures every call kind `reps` times on device 0 of `backend` and keeps
 * the medians in the table (drivercost.c). -1 with a message on error. */
int cost_measure(const char *backend, int reps, char *err, size_t errlen);

/* ---- Text for a person (table.c) ---- */
typedef struct ga_strbuf {
  char *s;
  size_t len, cap;
} ga_strbuf;
void strbuf_put(ga_strbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void strbuf_free(ga_strbuf *b);
/* Human-readable output keeps within this many columns. */
#define BENCH_COLUMNS 100
/* Writes text word-wrapped to BENCH_COLUMNS, each line it breaks continuing
 * after `indent`; a newline in text starts a new line, which keeps the spaces
 * it starts with. */
void print_wrapped(FILE *f, const char *text, const char *indent);

/* ---- Output (output.c) ---- */
/* argv[0] of ga-bench, for the recorded command. */
extern const char *bench_argv0;
/* "cd DIR && ga-bench SUB ARGS...", each word quoted for a POSIX shell. */
void bench_command(ga_strbuf *b, const char *sub, int argc, char **argv);
/* Writes str as a JSON string (quotes included). */
void json_string(FILE *f, const char *str);
/* Makes a folder and its parents. -1 with a message. */
int mkdir_p(const char *path, char *err, size_t errlen);
/* A result file written under a temporary name beside `path` and renamed
 * over it only by staged_commit: a failed run leaves the old file. */
typedef struct staged {
  char path[4096], tmp[4200];
  FILE *f;
} staged;
FILE *staged_open(staged *s, const char *path);
int staged_close(staged *s);
int staged_commit(staged *s); /* closes if open; -1 when close or rename fails */
void staged_discard(staged *s);

/* One replay as one line of JSON: every counter the tables show, the first
 * OOM's report, the curve when sampled, and the command that made it. */
typedef struct json_fields {
  const char *trace, *config, *conf, *command; /* command may be NULL */
  uint64_t size_scale;
  size_t skipped_failures;
  uint64_t pytorch_reserved; /* 0 = no baseline */
  const replay_result *r;
  const replay_samples *samples; /* NULL = no curve */
} json_fields;
void json_result(FILE *f, const json_fields *j);

/* ---- Plots (svg.c) ---- */
typedef struct svg_series {
  const char *label;
  const replay_samples *s;
  uint64_t peak_reserved; /* for the legend */
} svg_series;
typedef struct svg_opts {
  const char *title;
  const char *command; /* kept in the file's <desc>, or NULL */
  uint64_t peak_live;  /* the lower bound, drawn as a line; 0 = none */
  int y_near_data;     /* start the y axis just below the data instead of at 0 */
} svg_opts;
/* Writes reserved bytes over events, one line style per configuration, the
 * live bytes and the peak-live bound, to an open file. -1 on a write error. */
int svg_write(FILE *f, const svg_opts *o, const svg_series *series, size_t n);
/* Writes text into an SVG document, with <, > and & escaped. */
void svg_text_escaped(FILE *f, const char *text);

/* ---- Trace paths (ga_bench.c) ---- */
typedef struct paths {
  char **v;
  size_t n, cap;
} paths;
/* Adds a file, or every *.csv of a directory in name order, or a built-in
 * workload as "workload:NAME" ("workload:all": every one, at scale 1, seed
 * 1). -1 (with a message) for a directory without traces or an unknown
 * workload. */
int expand(const char *arg, paths *out);
/* Loads what expand() added: a trace file or a built-in workload. */
int input_load(const char *path, trace *t, char *err, size_t errlen);

/* ---- Configurations (ga_bench.c) ---- */
typedef struct bench_config {
  char name[64];
  char conf[448];
} bench_config;
/* Adds "NAME=CONF" or "CONF" (named after itself, or "default"), validated.
 * -1 with a message naming `who`. */
int config_add(bench_config **v, size_t *n, const char *arg, const char *who);
/* Prefixes every configuration with sim_capacity_mb:N (NULL: nothing). */
int config_set_capacity(bench_config *v, size_t n, const char *capacity_mb, const char *who);
/* Row names of the tables (table.c): a trace's file name (after the last
 * '/'), without .csv in a row name; with several configurations each row is
 * "  NAME" under a line naming its trace. row_key_width: the width of that
 * column, at most max (a longer name gets a line of its own: key_cell). */
const char *trace_file_name(const char *path);
int trace_key_len(const char *path);
int row_key_width(const paths *p, const bench_config *configs, size_t nconfigs, int max);
/* Puts the first len bytes of name, padded to width; a longer name goes on
 * a line of its own and its row continues under it. */
void key_cell(ga_strbuf *b, int width, const char *name, int len);
int parse_scale(const char *v, uint64_t *out, const char *who);
/* What the replaying commands (run, replay, fit) share on their command line:
 * the time options, --cost, --json, --conf/--config and --size-scale. */
typedef struct replay_args {
  bench_config *configs;
  size_t nconfigs;
  uint64_t size_scale; /* 1 unless --size-scale is given */
  int json;
} replay_args;
/* Consumes argv[*i] (and its value) when it is one of the shared options.
 * 1 consumed, 0 not one of them, -1 bad value (message naming `who` printed). */
int replay_option(int argc, char **argv, int *i, const char *who, replay_args *r);
/* A word no option took: a trace, a folder or a workload:NAME added to p
 * (0), or an unknown option or bad path (-1, the message and, for an
 * option, the usage printed). */
int replay_operand(const char *arg, const char *who, paths *p, void (*usage)(FILE *));
/* After the command line: -1 (message and usage printed) when no trace was
 * given; without --conf, the GARDENALLOC_CONF variable is the one
 * configuration. */
int replay_args_end(const char *who, const paths *p, replay_args *r, void (*usage)(FILE *));
/* Multiplies every size of the trace. */
void trace_scale(trace *t, uint64_t scale);

/* ---- Commands ---- */
int cmd_run(int argc, char **argv);
int cmd_hotpath(int argc, char **argv);
int cmd_drivercost(int argc, char **argv);
int cmd_scale(int argc, char **argv);
int cmd_fit(int argc, char **argv);
int cmd_sleep(int argc, char **argv);

#endif
