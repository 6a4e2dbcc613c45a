/* test_time.c — the allocator on a device whose streams lag behind the CPU
 * (the simulated device's clock): memory whose free the stream has not
 * passed is never unmapped without a wait, each wait is counted with its
 * duration, and a stream that has caught up costs no wait. Sim only: the
 * clock is the simulated device's. */
#include "fixture.h"

TestSuite(time, .fini = fx_close);

#define EXP2 "expandable_segments:True,expandable_page_size_mb:2"
#define US   ((uint64_t)1000)
#define MS   ((uint64_t)1000000)

static ga_sim_usage usage(void) {
  ga_sim_usage u;
  cr_assert_eq(ga_sim_usage_get(fx_dev, &u), 0);
  return u;
}

/* A 4 MiB device: a, freed on S1 behind 1 ms of work queued 5 ms behind the
 * CPU, is the only memory a 4 MiB request on S2 can have. `catch_up` lets the
 * CPU run past that work first. Returns the request's stall in ns. */
static uint64_t move_after_free(uint64_t catch_up) {
  fx_open(EXP2, 4 * MiB);
  cr_assert_eq(ga_sim_set_lag(fx_dev, 5 * MS), 0);
  void *a = fx_alloc_on(4 * MiB, S1);
  ga_sim_enqueue(fx_dev, S1, 1 * MS); /* a kernel using a */
  fx_free(a);
  ga_sim_advance(fx_dev, catch_up);
  uint64_t t0 = usage().now_ns, stalls0 = usage().stalls;
  void *b = fx_alloc_on(4 * MiB, S2);
  ga_sim_usage u = usage();
  ga_stats_t s = fx_stats();
  cr_assert_eq(s.num_granules_moved, 2, "a's granules moved to S2");
  cr_assert_eq(s.num_stalls, (int64_t)(u.stalls - stalls0), "the statistics count the device's stalls");
  cr_assert_eq(s.stall_us, (int64_t)(u.stall_ns / 1000));
  cr_assert_geq(u.now_ns - t0, u.stall_ns, "the stall is part of the request's time");
  fx_free(b);
  return u.stall_ns;
}

Test(time, an_unmap_waits_for_the_stream_to_pass_the_free) {
  uint64_t stall = move_after_free(0);
  cr_assert_eq(fx_stats().num_stalls, 1);
  cr_assert_eq(fx_stats().num_unmap_syncs, 1);
  /* The work completes 6 ms after it was queued; the CPU spent only its calls' costs since. */
  cr_assert(stall > 5 * MS && stall <= 6 * MS, "stalled %llu ns", (unsigned long long)stall);
}

Test(time, a_stream_that_has_caught_up_costs_no_wait) {
  cr_assert_eq(move_after_free(7 * MS), 0);
  cr_assert_eq(fx_stats().num_stalls, 0);
}

Test(time, a_reuse_on_the_same_stream_never_waits) {
  fx_open(EXP2, 64 * MiB);
  cr_assert_eq(ga_sim_set_lag(fx_dev, 5 * MS), 0);
  for (int i = 0; i < 100; i++) {
    void *p = fx_alloc_on(3 * MiB, S1);
    ga_sim_enqueue(fx_dev, S1, 50 * US);
    fx_free(p);
    ga_sim_advance(fx_dev, 10 * US);
  }
  cr_assert_eq(fx_stats().num_stalls, 0, "stream order makes the reuse safe");
  cr_assert_eq(fx_stats().device_calls[GA_CALL_STREAM_SYNCHRONIZE], 0);
}

Test(time, record_stream_reuse_waits_on_events_that_answer_from_the_clock) {
  fx_open("", 64 * MiB);
  cr_assert_eq(ga_sim_set_lag(fx_dev, 5 * MS), 0);
  char *p = fx_alloc_on(MiB, S1);
  cr_assert_eq(ga_record_stream(fx_a, p, S2), GA_OK);
  ga_sim_enqueue(fx_dev, S2, 0); /* S2 reads p */
  fx_free(p);
  char *q = fx_alloc_on(MiB, S1);
  cr_assert_neq(q, p, "the block still waits on S2's work");
  ga_sim_advance(fx_dev, 6 * MS);
  fx_free(q);
  char *r = fx_alloc_on(MiB, S1);
  cr_assert(r == p || r == q, "S2 has passed: its block is free again");
  cr_assert_eq(fx_stats().num_stalls, 0, "event queries never wait");
  fx_free(r);
}
