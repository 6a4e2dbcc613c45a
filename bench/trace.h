/* trace.h — RMM CSV allocation traces: reading and replaying.
 *
 * Format (RAPIDS RMM logging_resource_adaptor):
 *   Thread,Time,Action,Pointer,Size,Stream
 *   1,16:44:27.632574,allocate,0x1,40960000,0
 * Action is "allocate", "free" or "allocate failure" (skipped). Pointer is an
 * id that pairs a free with its allocate. Stream is a number (decimal or 0x
 * hex); 0 is the default stream.
 */
#ifndef GA_BENCH_TRACE_H
#define GA_BENCH_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gardenalloc.h"

typedef struct trace_event {
  uint64_t id;      /* Pointer column */
  uint64_t size;    /* bytes asked (allocate) */
  uint64_t stream;  /* Stream column */
  uint64_t time_ns; /* Time column (HH:MM:SS.ffffff) as ns; 0 when absent */
  uint8_t is_free;
} trace_event;

typedef struct trace {
  char *path;
  trace_event *ev;
  size_t n, cap;
  size_t skipped_failures; /* "allocate failure" rows */
  int timed;               /* the Time column gives the program's pace (it rises) */
} trace;

/* How a replay runs on the simulated device (ignored on a GPU, where time
 * is real). The program's CPU time between events is the trace's (Time
 * column) when it has one, else pace_us; after each event it queues GPU work
 * on the event's stream (kernel_us), which completes at least lag_us after it
 * was queued. iterations > 1 replays the trace again that many times in a
 * row, freeing what is still live between iterations. */
typedef struct replay_opts {
  double lag_us;                        /* default 0: streams idle, nothing stalls */
  double pace_us;                       /* default 10 */
  double kernel_us;                     /* default 0 */
  int iterations;                       /* default 1 */
  void (*on_create)(ga_allocator_t *a); /* called with each new allocator (NULL: none) */
} replay_opts;
/* The options of every later replay (ga-bench sets them from its flags). */
void trace_replay_set_options(const replay_opts *o);
const replay_opts *trace_replay_options(void);

/* Reads a trace file. On error returns -1 and writes "<path>:<line>: <what>".
 * Every 64-bit value is a valid id; a line longer than 4096 bytes or holding
 * a NUL byte is refused by name. */
int trace_load(const char *path, trace *t, char *err, size_t errlen);
/* The same from an open stream; `name` stands for the path in messages. */
int trace_read(FILE *f, const char *name, trace *t, char *err, size_t errlen);
void trace_free(trace *t);

typedef struct replay_result {
  size_t events, allocs, frees;
  uint64_t peak_requested;  /* largest sum of live requested bytes that were served */
  uint64_t trace_peak_live; /* the same for the trace as written, served or not (the floor) */
  size_t first_oom_event;   /* 1-based event of the first OOM; 0 = none */
  uint64_t first_oom_size;  /* bytes it asked for */
  uint64_t first_oom_reserved, first_oom_allocated, first_oom_live; /* bytes at that moment */
  char first_oom_report[1024];                                      /* its report (ga_last_error) */
  uint64_t peak_allocated, peak_reserved;
  uint64_t num_ooms, num_alloc_retries;
  double seconds;     /* wall time of the replay loop */
  double cpu_seconds; /* the replaying thread's CPU time in that loop (what cpu_ns_per_alloc_free
                         and ns/op divide: on a loaded machine the wall time waits for a core) */
  ga_stats_t stats;   /* at the end, before teardown */
  uint64_t
      steady_memory_calls; /* malloc/free/create/map/set_access/unmap/release after the first iteration */
  int iterations;          /* the options the replay ran with */
  double lag_us;
  char backend[8];     /* "sim" or "cuda" */
  size_t device_total; /* device memory in bytes */
} replay_result;

/* Reserved, allocated and live bytes over the replay, for plots: one point
 * per bucket of events, each the largest value the bucket reached (a rise to
 * a new peak is never lost between two points). */
typedef struct replay_samples {
  size_t max; /* at most this many points (set by the caller) */
  size_t n;
  uint64_t *event, *reserved, *allocated, *live; /* n points each */
} replay_samples;

void replay_samples_free(replay_samples *s);

/* As trace_replay; also fills `samples` (may be NULL) and, with `progress`,
 * reports progress of long replays on stderr. */
int trace_replay_ex(const trace *t, const char *conf, replay_result *r, replay_samples *samples, int progress,
                    char *err, size_t errlen);

/* Replays a trace on a new allocator created from `conf`. A free of an id
 * whose allocate failed with OOM is skipped. Returns -1 with a message for a
 * trace that frees an unknown id or allocates a live one, or when the
 * allocator cannot be created. */
int trace_replay(const trace *t, const char *conf, replay_result *r, char *err, size_t errlen);

#endif
