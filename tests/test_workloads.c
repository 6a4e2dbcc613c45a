/* test_workloads.c — the built-in workloads of ga-bench: deterministic per
 * seed, sized by scale, well-formed, and replayable in both modes. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bench/workloads.h"

/* Every free matches a live allocation; ids are never reused while live.
 * Returns the number of distinct streams used, or -1 with the problem in
 * why (nothing is left allocated: the caller asserts after its cleanup). */
static int well_formed(const trace *t, char *why, size_t whylen) {
  uint64_t max_id = 0;
  for (size_t i = 0; i < t->n; i++)
    if (t->ev[i].id > max_id) max_id = t->ev[i].id;
  unsigned char *live = calloc(max_id + 1, 1);
  if (!live) {
    snprintf(why, whylen, "out of memory for %llu ids", (unsigned long long)max_id + 1);
    return -1;
  }
  uint64_t streams[8];
  int nstreams = 0;
  for (size_t i = 0; i < t->n && nstreams >= 0; i++) {
    const trace_event *e = &t->ev[i];
    if (e->is_free) {
      if (!live[e->id]) {
        snprintf(why, whylen, "%s: event %zu frees id %llu that is not live", t->path, i,
                 (unsigned long long)e->id);
        nstreams = -1;
      }
      live[e->id] = 0;
    } else if (live[e->id] || e->size == 0) {
      snprintf(why, whylen, "%s: event %zu: id %llu %s", t->path, i, (unsigned long long)e->id,
               live[e->id] ? "allocated twice" : "of size 0");
      nstreams = -1;
    } else {
      live[e->id] = 1;
      int seen = 0;
      for (int s = 0; s < nstreams; s++) seen |= streams[s] == e->stream;
      if (!seen && nstreams < 8) streams[nstreams++] = e->stream;
    }
  }
  free(live);
  return nstreams;
}

/* The first event where two traces differ, field by field (the structs'
 * padding bytes are unspecified, so memcmp cannot compare them); -1 when
 * they are the same. */
static long first_difference(const trace *a, const trace *b) {
  size_t n = a->n < b->n ? a->n : b->n;
  for (size_t i = 0; i < n; i++) {
    const trace_event *x = &a->ev[i], *y = &b->ev[i];
    if (x->id != y->id || x->size != y->size || x->stream != y->stream || x->is_free != y->is_free)
      return (long)i;
  }
  return a->n == b->n ? -1 : (long)n;
}

Test(workloads, each_is_deterministic_sized_by_scale_and_well_formed) {
  cr_assert_geq(ga_nworkloads, 6);
  int two_streams = 0;
  for (size_t w = 0; w < ga_nworkloads; w++) {
    trace a, b, c;
    cr_assert_eq(ga_workloads[w].generate(&a, 1.0, 7), 0);
    cr_assert_eq(ga_workloads[w].generate(&b, 1.0, 7), 0);
    cr_assert_eq(ga_workloads[w].generate(&c, 3.0, 7), 0);
    long diff = first_difference(&a, &b);
    size_t na = a.n, nc = c.n;
    char why[256] = "";
    int streams = well_formed(&a, why, sizeof why);
    trace_free(&a);
    trace_free(&b);
    trace_free(&c);
    cr_assert_eq(diff, -1, "%s: the same seed gave another event %ld", ga_workloads[w].name, diff);
    cr_assert(na >= 10000 && na < 14000, "%s: scale 1 gives %zu events", ga_workloads[w].name, na);
    cr_assert(nc >= 30000 && nc < 36000, "%s: scale 3 gives %zu events", ga_workloads[w].name, nc);
    cr_assert_geq(streams, 0, "%s", why);
    two_streams += streams >= 2;
  }
  cr_assert_geq(two_streams, 1, "at least one workload uses two streams");
}

Test(workloads, seeds_change_the_random_ones) {
  const workload *w = workload_find("heavy_tailed_mix");
  cr_assert(w != NULL);
  cr_assert_null(workload_find("no_such_workload"));
  trace a, b;
  cr_assert_eq(w->generate(&a, 1.0, 1), 0);
  cr_assert_eq(w->generate(&b, 1.0, 2), 0);
  long diff = first_difference(&a, &b);
  trace_free(&a);
  trace_free(&b);
  cr_assert_neq(diff, -1, "seeds 1 and 2 gave the same events");
}

Test(workloads, each_replays_in_both_modes_without_oom) {
  const char *confs[] = {"backend:sim", "backend:sim,expandable_segments:True"};
  for (size_t w = 0; w < ga_nworkloads; w++) {
    trace t;
    cr_assert_eq(ga_workloads[w].generate(&t, 0.5, 3), 0);
    for (int c = 0; c < 2; c++) {
      replay_result r;
      char err[512];
      replay_samples s = {.max = 50};
      cr_assert_eq(trace_replay_ex(&t, confs[c], &r, &s, 0, err, sizeof err), 0, "%s: %s",
                   ga_workloads[w].name, err);
      cr_assert_eq(r.num_ooms, 0, "%s under %s", ga_workloads[w].name, confs[c]);
      cr_assert_geq(r.peak_reserved, r.peak_allocated);
      cr_assert_geq(r.peak_allocated, r.peak_requested);
      cr_assert(s.n >= 2 && s.n <= 52, "%zu samples", s.n);
      cr_assert_eq(s.event[s.n - 1], t.n);
      for (size_t k = 0; k < s.n; k++) cr_assert_leq(s.allocated[k], s.reserved[k]);
      replay_samples_free(&s);
    }
    trace_free(&t);
  }
}
