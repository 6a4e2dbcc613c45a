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
  ga_stats_t stats = fx_stats();
  cr_assert_eq(stats.num_granules_moved, 2, "a's granules moved to S2");
  cr_assert_eq(stats.num_stalls, (int64_t)(u.stalls - stalls0), "the statistics count the device's stalls");
  cr_assert_eq(stats.stall_us, (int64_t)(u.stall_ns / 1000));
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

Test(time, with_room_on_the_device_memory_whose_free_is_not_passed_stays_and_new_memory_is_made) {
  fx_open(EXP2 ",expandable_move_pages:settle", 64 * MiB); /* moves before creating memory */
  cr_assert_eq(ga_sim_set_lag(fx_dev, 5 * MS), 0);
  void *a = fx_alloc_on(4 * MiB, S1);
  ga_sim_enqueue(fx_dev, S1, 1 * MS);
  fx_free(a);
  void *b = fx_alloc_on(4 * MiB, S2);
  ga_stats_t stats = fx_stats();
  cr_assert_eq(stats.num_stalls, 0, "no wait while the device has room");
  cr_assert_eq(stats.num_granules_moved, 0, "a's memory may still be in use: it stays");
  cr_assert_eq(stats.reserved_bytes[GA_POOL_ALL].current, 8 * MiB, "new memory for b");
  ga_sim_advance(fx_dev, 7 * MS); /* S1 is past the free now */
  fx_free(b);
  void *c = fx_alloc_on(8 * MiB, fx_stream(3)); /* a's and b's memory move, without a wait */
  cr_assert_eq(fx_stats().num_stalls, 0);
  cr_assert_eq(fx_stats().reserved_bytes[GA_POOL_ALL].current, 8 * MiB);
  fx_free(c);
}

/* A repeated iteration (a step of a training loop, with a second stream and
 * both pools). PyTorch's policy, and gardenalloc's default, which moves only
 * when the device is full (expandable_move_pages:when_full, PyTorch's policy
 * until then), make no map, unmap, access, create or release call after the
 * first iteration. expandable_move_pages:settle moves free pages between the
 * segments in the first iteration; in the second the segments that gave
 * memory away grow back (calls) and learn to keep what they need, so from the
 * third on nothing moves, with less memory than PyTorch's policy.
 * expandable_move_pages:always moves the same pages back and forth every
 * iteration; expandable_move_hold keeps moved memory where it went, which
 * stops those calls after the second iteration too. */
static uint64_t vmm(void) {
  return fx_calls(GA_CALL_MAP) + fx_calls(GA_CALL_UNMAP) + fx_calls(GA_CALL_SET_ACCESS) +
         fx_calls(GA_CALL_CREATE) + fx_calls(GA_CALL_RELEASE);
}
static void iteration(void) {
  void *w[6], *s[4];
  size_t sizes[6] = {40 * MiB, 3 * MiB, 17 * MiB, 64 * MiB, 5 * MiB + 7, 9 * MiB};
  for (int i = 0; i < 6; i++) w[i] = fx_alloc_on(sizes[i], i % 3 ? S1 : S2);
  for (int i = 0; i < 4; i++) s[i] = fx_alloc_on(100 * KiB * (size_t)(i + 1), S1);
  fx_free(w[1]);
  fx_free(w[3]);
  void *x = fx_alloc_on(70 * MiB, S1);
  for (int i = 0; i < 4; i++) fx_free(s[i]);
  fx_free(x);
  for (int i = 0; i < 6; i++)
    if (i != 1 && i != 3) fx_free(w[i]);
}
/* The memory calls of iteration `nth` (1-based) of four; *reserved: at the end. */
static uint64_t calls_in_iteration(const char *conf, int nth, int64_t *reserved) {
  fx_open(conf, GiB);
  uint64_t calls = 0;
  for (int i = 1; i <= 4; i++) {
    uint64_t before = vmm();
    iteration();
    if (i == nth) calls = vmm() - before;
  }
  *reserved = fx_stats().reserved_bytes[GA_POOL_ALL].peak;
  return calls;
}

Test(time, a_repeated_iteration_reaches_a_state_without_memory_calls) {
  int64_t pt, full, moves, hold;
  cr_assert_eq(calls_in_iteration("expandable_segments:True,expandable_policy:pytorch", 2, &pt), 0);
  fx_close();
  cr_assert_eq(calls_in_iteration("expandable_segments:True", 2, &full), 0);
  cr_assert_eq(full, pt, "the default moves only when full: PyTorch's memory while there is room");
  fx_close();
  const char *settle = "expandable_segments:True,expandable_move_pages:settle";
  cr_assert_gt(calls_in_iteration(settle, 2, &moves), 0, "pages move back once");
  fx_close();
  for (int nth = 3; nth <= 4; nth++) {
    cr_assert_eq(calls_in_iteration(settle, nth, &moves), 0, "iteration %d", nth);
    fx_close();
  }
  cr_assert_lt(moves, pt, "and the peak is lower");
  fx_close();
  cr_assert_eq(
      calls_in_iteration("expandable_segments:True,expandable_move_pages:always,expandable_move_hold:1000", 3,
                         &hold),
      0);
  cr_assert(hold <= pt, "hold: no more than PyTorch's (%lld, %lld MiB)", (long long)(hold >> 20),
            (long long)(pt >> 20));
  fx_close();
  int64_t always;
  cr_assert_gt(calls_in_iteration("expandable_segments:True,expandable_move_pages:always", 4, &always), 0,
               "without settling the same pages move back and forth in every iteration");
  cr_assert_leq(always, moves, "for the least memory (%lld, %lld MiB)", (long long)(always >> 20),
                (long long)(moves >> 20));
}
