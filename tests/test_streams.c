/* test_streams.c — stream-ordered reuse and record_stream. */
#include "fixture.h"

TestSuite(streams, .fini = fx_close);

Test(streams, no_reuse_before_recorded_events_complete_and_reuse_after) {
  fx_open(NULL, GiB);
  fx_hold(S2, 1); /* S2 is still running its work */
  void *p = fx_alloc_on(8 * MiB, S1);
  cr_assert_eq(ga_record_stream(fx_a, p, S2), GA_OK);
  fx_free(p);
  assert_stat(active, GA_POOL_ALL, 1);     /* pending: still active */
  assert_stat(allocation, GA_POOL_ALL, 0); /* but no longer allocated */
  assert_stat(requested_bytes, GA_POOL_ALL, 8 * MiB);
  void *q = fx_alloc_on(8 * MiB, S1);
  cr_assert_neq(q, p, "reused while S2 may still read it");
  fx_free(q);
  fx_hold(S2, 0); /* S2 finishes */
  void *r = fx_alloc_on(8 * MiB, S1);
  cr_assert_eq(r, p, "reusable once the event completed");
  assert_stat(active, GA_POOL_ALL, 1);
  fx_free(r);
}

Test(streams, the_allocation_stream_itself_needs_no_event) {
  fx_open(NULL, GiB);
  void *p = fx_alloc_on(MiB, S1);
  cr_assert_eq(ga_record_stream(fx_a, p, S1), GA_OK);
  fx_free(p);
  assert_calls(GA_CALL_EVENT_RECORD, 0);
  cr_assert_eq(fx_alloc_on(MiB, S1), p);
  fx_free(p);
}

Test(streams, one_event_per_recorded_stream_and_events_are_recycled) {
  fx_open(NULL, GiB);
  ga_stream_t s3 = S3;
  for (int round = 0; round < 3; round++) {
    void *p = fx_alloc_on(MiB, S1);
    ga_record_stream(fx_a, p, S2);
    ga_record_stream(fx_a, p, s3);
    ga_record_stream(fx_a, p, S2); /* twice: one use */
    fx_free(p);
  }
  assert_calls(GA_CALL_EVENT_RECORD, 6);
  void *q = fx_alloc_on(MiB, S1); /* retires the last two events */
  assert_calls(GA_CALL_EVENT_CREATE, 2);
  fx_free(q);
}

Test(streams, a_block_waits_for_every_recorded_stream) {
  fx_open(NULL, GiB);
  ga_stream_t s3 = S3;
  fx_hold(S2, 1);
  fx_hold(s3, 1);
  void *p = fx_alloc_on(4 * MiB, S1);
  ga_record_stream(fx_a, p, S2);
  ga_record_stream(fx_a, p, s3);
  fx_free(p);
  fx_hold(S2, 0);
  void *q = fx_alloc_on(4 * MiB, S1);
  cr_assert_neq(q, p, "s3 is still running");
  fx_free(q);
  fx_hold(s3, 0);
  q = fx_alloc_on(4 * MiB, S1);
  cr_assert_eq(q, p);
  fx_free(q);
}

Test(streams, empty_cache_waits_for_pending_events_then_frees) {
  fx_open(NULL, GiB);
  fx_hold(S2, 1);
  void *p = fx_alloc_on(30 * MiB, S1);
  ga_record_stream(fx_a, p, S2);
  fx_free(p);
  cr_assert_eq(ga_empty_cache(fx_a), GA_OK);
  assert_reserved(0);
  assert_scalar(num_sync_all_streams, 1);
  ga_sim_usage u;
  fx_usage(&u);
  cr_assert_eq(u.waits, 1, "empty_cache had to wait for S2");
  fx_hold(S2, 0);
}

Test(streams, oom_path_waits_for_pending_blocks_before_giving_up) {
  fx_open(NULL, 100 * MiB);
  fx_hold(S2, 1);
  void *p = fx_alloc_on(60 * MiB, S1);
  ga_record_stream(fx_a, p, S2);
  fx_free(p);
  /* 60 MiB is pending on S2; 60 MiB more does not fit beside it. */
  void *q = fx_alloc_on(60 * MiB, S1);
  assert_scalar(num_sync_all_streams, 1);
  assert_scalar(num_alloc_retries, 1);
  assert_scalar(num_ooms, 0);
  ga_sim_usage u;
  fx_usage(&u);
  cr_assert_eq(u.waits, 1);
  fx_free(q);
  fx_hold(S2, 0);
}

Test(streams, record_stream_of_a_bad_pointer_is_refused) {
  fx_open(NULL, GiB);
  int x;
  cr_assert_eq(ga_record_stream(fx_a, &x, S2), GA_ERR_BAD_POINTER);
  cr_assert(strstr(ga_last_error(), "ga_record_stream") &&
                strstr(ga_last_error(), "not allocated by this allocator"),
            "%s", ga_last_error());
}

/* A free whose recorded stream can be neither given an event nor waited for
 * (a sticky driver error: every call fails) cannot know when that stream is
 * done with the memory: the block stays out of use, counted in
 * quarantined_bytes, and ga_free says so (the pointer is freed all the same).
 * Once the driver answers again, the block comes back with an event. */
static void quarantine_scenario(const char *conf) {
  fx_open(conf, GiB);
  fx_hold(S2, 1);
  char *p = fx_alloc_on(6 * MiB, S1);
  cr_assert_eq(ga_record_stream(fx_a, p, S2), GA_OK);
  fx_inject(GA_CALL_EVENT_RECORD, 1, GA_DEV_EDRIVER, 1);
  fx_inject(GA_CALL_STREAM_SYNCHRONIZE, 1, GA_DEV_EDRIVER, 1);
  fx_inject(GA_CALL_SYNCHRONIZE, 1, GA_DEV_EDRIVER, 1);
  fx_inject(GA_CALL_EVENT_SYNCHRONIZE, 1, GA_DEV_EDRIVER, 1);
  ga_status_t st = ga_free(fx_a, p);
  cr_assert_eq(st, GA_ERR_DEVICE, "%s", ga_status_str(st));
  cr_assert(strstr(ga_last_error(), "is freed, but") && strstr(ga_last_error(), "quarantined_bytes"), "%s",
            ga_last_error());
  cr_assert_eq(fx_stats().quarantined_bytes.current, (int64_t)fx_stats().active_bytes[0].current);
  cr_assert_gt(fx_stats().quarantined_bytes.current, 0);
  cr_assert_eq(ga_free(fx_a, p), GA_ERR_BAD_POINTER, "freed all the same: a second free is a double free");
  char *q = NULL;
  st = ga_malloc(fx_a, 6 * MiB, S1, (void **)&q);
  if (st == GA_OK) {
    cr_assert(q + 6 * MiB <= p || q >= p + 6 * MiB, "handed out again while S2 may still use it");
    fx_free(q);
  }
  cr_assert_eq(ga_check(fx_a), 0);
  st = ga_empty_cache(fx_a);
  cr_assert_eq(st, GA_ERR_DEVICE, "S2 still cannot be waited for: %s", ga_status_str(st));
  cr_assert_gt(fx_stats().quarantined_bytes.current, 0, "still out of use");
  fx_clear_faults();
  fx_hold(S2, 0);
  char *r = fx_alloc_on(6 * MiB, S1); /* the block gets its event now, and S2 is done */
  cr_assert_eq(fx_stats().quarantined_bytes.current, 0);
  cr_assert_eq(r, p, "back in use once S2 is known to be done");
  fx_free(r);
}
Test(streams, a_free_that_cannot_wait_keeps_the_block_out_of_use) { quarantine_scenario(NULL); }
Test(streams, a_free_that_cannot_wait_keeps_the_block_out_of_use_expandable) {
  quarantine_scenario("expandable_segments:True");
}
