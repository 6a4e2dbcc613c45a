/* workloads.h — built-in allocation workloads, generated as traces.
 *
 * Each generator is seeded and written from first principles (sizes are
 * explained where they are made). `scale` 1 gives about 10^4 events, 100
 * about 10^6.
 */
#ifndef GA_BENCH_WORKLOADS_H
#define GA_BENCH_WORKLOADS_H

#include "trace.h"

typedef struct workload {
  const char *name;
  const char *about;
  int (*generate)(trace *t, double scale, uint64_t seed);
} workload;

extern const workload ga_workloads[];
extern const size_t ga_nworkloads;

/* The workload called `name`, or NULL. */
const workload *workload_find(const char *name);

#endif
