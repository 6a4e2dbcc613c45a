/* ranks.h — one trace replayed as N ranks of one program, each on its own
 * simulated GPU with its own timing, to see whether they place every
 * allocation alike (ga-bench ranks, tests/test_ranks.c).
 *
 * Every rank makes the same requests in the same order. What differs is the
 * GPU: each rank's streams lag by a lag drawn for it, and the kernel queued
 * after each event runs for a time drawn per rank and event. Every
 * `record_every`-th allocation is also used on a second stream
 * (ga_record_stream, with a kernel of its own there), so its free waits on
 * that stream's progress. Each allocation is recorded as (segment, offset in
 * it, block size), a segment named by the order in which it first held an
 * allocation (so where the device put it does not matter), and each rank's
 * sequence is compared with rank 0's. With `scatter`, each rank's device
 * also puts its segments at addresses drawn for the rank
 * (sim_scatter_addresses), so that the address order of the segments
 * differs from rank to rank, as on the GPUs of different processes.
 */
#ifndef GA_BENCH_RANKS_H
#define GA_BENCH_RANKS_H

#include <stddef.h>
#include <stdint.h>

#include "trace.h"

typedef struct ranks_opts {
  int ranks;             /* N >= 2 */
  uint64_t seed;         /* the draws of lags and kernel times */
  double lag_max_us;     /* each rank's lag: uniform in [0, lag_max_us] */
  double kernel_max_us;  /* each event's kernel: uniform in [0, kernel_max_us] */
  double pace_us;        /* CPU time between events of a trace without times */
  unsigned record_every; /* every k-th allocation is used on a second stream; 0: none */
  int scatter;           /* each rank's segments at addresses drawn for it (sim_scatter_addresses) */
} ranks_opts;

#define RANKS_MAX 64

typedef struct ranks_result {
  size_t allocs;       /* allocations each rank made */
  int identical;       /* every rank placed every allocation as rank 0 did */
  size_t first_diff;   /* 1-based allocation at which rank diff_rank first differs; 0: none */
  int diff_rank;       /* that rank */
  char diff_what[160]; /* what rank 0 and that rank did there */
  uint64_t peak_reserved[RANKS_MAX];
  uint64_t lag_ns[RANKS_MAX];
  uint64_t stalls[RANKS_MAX];   /* synchronisations that waited for the GPU */
  uint64_t stall_ns[RANKS_MAX]; /* time they waited */
  uint64_t peak_min, peak_max;  /* over the ranks */
} ranks_result;

/* Replays t as o->ranks ranks under conf (on the simulated device: a conf
 * naming another backend is refused). 0, or -1 with a message. */
int ranks_replay(const trace *t, const char *conf, const ranks_opts *o, ranks_result *r, char *err,
                 size_t errlen);

/* ga-bench ranks (ranks_cmd.c). */
int cmd_ranks(int argc, char **argv);

#endif
