/* test_capture.c — private pools for CUDA-graph capture: allocations on a
 * capturing stream come from a pool kept out of general reuse, and nothing
 * the allocator does would invalidate the capture (the simulated device
 * refuses such calls and counts them). */
#include "fixture.h"

TestSuite(capture, .fini = fx_close);

static uint64_t broken(void) {
  ga_sim_usage u;
  fx_usage(&u);
  return u.captures_broken;
}

static void capture(int on) {
  fx_capture(S1, on);
  if (on)
    cr_assert_eq(ga_begin_allocate_to_pool(fx_a, 7, S1), GA_OK, "%s", ga_last_error());
  else
    cr_assert_eq(ga_end_allocate_to_pool(fx_a, 7), GA_OK, "%s", ga_last_error());
}

Test(capture, the_sim_refuses_allocation_calls_during_a_capture) {
  fx_open(NULL, GiB);
  fx_capture(S1, 1);
  void *p;
  cr_assert_eq(ga_dev_malloc(fx_dev, 2 * MiB, &p), GA_DEV_ECAPTURE);
  cr_assert_eq(broken(), 1);
  int prev = -1;
  cr_assert_eq(ga_dev_capture_mode(fx_dev, 1, &prev), 0);
  cr_assert_eq(prev, 0);
  cr_assert_eq(ga_dev_malloc(fx_dev, 2 * MiB, &p), 0, "relaxed mode allows it");
  cr_assert_eq(ga_dev_free(fx_dev, p), 0);
  ga_dev_capture_mode(fx_dev, 0, NULL);
  fx_capture(S1, 0);
}

Test(capture, allocations_during_capture_come_from_the_private_pool) {
  fx_open(NULL, GiB);
  capture(1);
  char *g = fx_alloc_on(4 * MiB, S1);     /* a new segment for the pool, made in relaxed mode */
  char *other = fx_alloc_on(4 * MiB, S2); /* another stream: the general pool, also relaxed */
  fx_free(g);                             /* back to the pool, not to general reuse */
  capture(0);
  cr_assert_eq(broken(), 0, "nothing invalidated the capture");
  char *h = fx_alloc_on(4 * MiB, S1);
  cr_assert(h < g || h >= g + 20 * MiB, "the graph's memory is not handed out outside the pool");
  capture(1);
  char *again = fx_alloc_on(4 * MiB, S1); /* a replay of the capture reuses the pool */
  cr_assert_eq(again, g);
  capture(0);
  fx_free(again);
  fx_free(h);
  fx_free(other);
  ga_stats_t stats = fx_stats();
  cr_assert_eq(stats.reserved_bytes[GA_POOL_ALL].current, 60 * MiB, "three segments: pool, S1, S2");
  cr_assert_eq(ga_release_pool(fx_a, 7), GA_OK);
  stats = fx_stats();
  cr_assert_eq(stats.reserved_bytes[GA_POOL_ALL].current, 40 * MiB,
               "the released pool's free segment went back");
  cr_assert_eq(ga_begin_allocate_to_pool(fx_a, 7, S1), GA_OK, "a released id may be used again once gone");
  cr_assert_eq(ga_end_allocate_to_pool(fx_a, 7), GA_OK);
}

Test(capture, a_released_pool_returns_blocks_freed_later_at_empty_cache) {
  fx_open(NULL, GiB);
  capture(1);
  void *g = fx_alloc_on(30 * MiB, S1);
  capture(0);
  cr_assert_eq(ga_release_pool(fx_a, 7), GA_OK);
  assert_reserved(30 * MiB); /* still in use */
  fx_free(g);
  cr_assert_eq(ga_empty_cache(fx_a), GA_OK);
  assert_reserved(0);
}

Test(capture, no_event_query_sync_or_flush_during_a_capture) {
  fx_open(NULL, 100 * MiB);
  fx_hold(S2, 1);
  void *x = fx_alloc_on(40 * MiB, S2);
  ga_record_stream(fx_a, x, S1);
  capture(1);
  uint64_t queries = fx_stats().device_calls[GA_CALL_EVENT_QUERY];
  void *y = fx_alloc_on(8 * MiB, S1);
  fx_free(x); /* used on S1: its free waits for the end of the capture */
  cr_assert_eq(fx_stats().device_calls[GA_CALL_EVENT_RECORD], 0, "no event recorded during the capture");
  void *p;
  cr_assert_eq(ga_malloc(fx_a, 90 * MiB, S1, &p), GA_ERR_OOM, "no flush of the cache while capturing");
  cr_assert_eq(fx_stats().device_calls[GA_CALL_EVENT_QUERY], queries);
  cr_assert_eq(fx_stats().num_sync_all_streams, 0);
  cr_assert_eq(broken(), 0);
  capture(0);
  cr_assert_eq(fx_stats().device_calls[GA_CALL_EVENT_RECORD], 1, "the deferred free recorded its event");
  fx_hold(S2, 0);
  fx_free(y);
  cr_assert_eq(ga_release_pool(fx_a, 7), GA_OK);
}

/* Many frees deferred by a capture: at its end each gets its event, with room
 * made for all of them (it was made for none: the pending list overflowed). */
Test(capture, many_frees_deferred_by_a_capture) {
  fx_open(NULL, 256 * MiB);
  enum { N = 60 };
  void *x[N], *y[N];
  fx_hold(S2, 1);
  for (int i = 0; i < N; i++) {
    x[i] = fx_alloc_on(4096, S1);
    cr_assert_eq(ga_record_stream(fx_a, x[i], S2), GA_OK);
  }
  capture(1);
  for (int i = 0; i < N; i++) fx_free(x[i]);
  capture(0);
  cr_assert_eq(fx_stats().device_calls[GA_CALL_EVENT_RECORD], N, "one event per deferred free");
  cr_assert_eq(ga_check(fx_a), 0);
  for (int i = 0; i < N; i++) { /* S2 still uses them: none is handed out */
    y[i] = fx_alloc_on(4096, S1);
    for (int k = 0; k < N; k++) cr_assert_neq(y[i], x[k], "a block S2 still uses was handed out");
  }
  fx_hold(S2, 0);
  for (int i = 0; i < N; i++) fx_free(y[i]);
  cr_assert_eq(ga_release_pool(fx_a, 7), GA_OK);
}

Test(capture, expandable_mode_does_not_move_pages_during_a_capture) {
  fx_open("expandable_segments:True,expandable_page_size_mb:2", 64 * MiB);
  ga_stream_t s3 = S3;
  void *a = fx_alloc_on(40 * MiB, S2);
  fx_free(a);
  capture(1);
  void *b;
  /* Only S2's free pages could serve this; moving them would synchronise S2. */
  cr_assert_eq(ga_malloc(fx_a, 40 * MiB, s3, &b), GA_ERR_OOM);
  cr_assert_eq(broken(), 0);
  cr_assert_eq(fx_stats().num_granules_moved, 0);
  cr_assert_eq(fx_stats().num_unmap_syncs, 0);
  capture(0);
  b = fx_alloc_on(40 * MiB, s3); /* after the capture the pages move */
  cr_assert_gt(fx_stats().num_granules_moved, 0);
  fx_free(b);
  cr_assert_eq(ga_release_pool(fx_a, 7), GA_OK);
}

/* With expandable segments, a private pool grows expandable segments of its
 * own (as current PyTorch does): memory is mapped as the capture needs it,
 * kept from general reuse, and goes back once the pool is released. */
Test(capture, private_pools_use_expandable_segments) {
  fx_open("expandable_segments:True,expandable_page_size_mb:2", 256 * MiB);
  capture(1);
  char *g = fx_alloc_on(5 * MiB, S1);
  char *h = fx_alloc_on(7 * MiB, S1);
  const ga_block *b = ga_blockmap_get(&fx_a->pol.map, (uintptr_t)g);
  cr_assert(b->seg->expandable && b->seg->priv != NULL, "an expandable segment of the pool");
  cr_assert_eq(((const ga_block *)ga_blockmap_get(&fx_a->pol.map, (uintptr_t)h))->seg, b->seg,
               "the pool's segment grows");
  fx_free(g);
  capture(0);
  cr_assert_eq(broken(), 0, "nothing invalidated the capture");
  char *other = fx_alloc_on(5 * MiB, S1);
  cr_assert(other < g || other >= h + 7 * MiB, "the graph's memory is not handed out outside the pool");
  capture(1);
  cr_assert_eq(fx_alloc_on(5 * MiB, S1), g, "a replay of the capture reuses the pool");
  capture(0);
  fx_free(g);
  fx_free(h);
  fx_free(other);
  cr_assert_eq(ga_empty_cache(fx_a), GA_OK);
  cr_assert_eq(fx_stats().reserved_bytes[GA_POOL_ALL].current, 12 * MiB, "the pool keeps its memory");
  cr_assert_eq(ga_release_pool(fx_a, 7), GA_OK, "%s", ga_last_error());
  cr_assert_eq(fx_stats().reserved_bytes[GA_POOL_ALL].current, 0, "released: every page went back");
  cr_assert_eq(fx_a->pol.capture.privates, NULL, "the pool is gone with its last segment");
}

Test(capture, bad_pool_calls_are_refused) {
  fx_open(NULL, GiB);
  cr_assert_eq(ga_end_allocate_to_pool(fx_a, 99), GA_ERR_INVALID);
  cr_assert_eq(ga_release_pool(fx_a, 99), GA_ERR_INVALID);
  cr_assert(strstr(ga_last_error(), "no pool 99") != NULL, "%s", ga_last_error());
}

/* ---- Every capture-time call, in every configuration ----
 * While S1 captures (routed to pool 7): empty_cache, sleep without tags,
 * sleep with tags, wake, peer access, malloc and free, releasing another
 * pool. None may invalidate the capture (the device counts every call that
 * would); what cannot be done without a wait is left for the end of the
 * capture, counted, and done when the capture ends. */

static void assert_unbroken(const char *after) {
  cr_assert_eq(broken(), 0, "%s invalidated the capture: %s", after, ga_last_error());
}

static void capture_time_calls(const char *conf) {
  int expandable = conf && strstr(conf, "expandable_segments:True");
  fx_open_on(2, conf, 512 * MiB);
  /* Before the capture: cached memory on every stream, an event pending on a
   * busy stream, live allocations with contents, and (expandable) a tagged
   * allocation asleep. */
  char *kv = NULL;
  if (expandable) { /* first: a sleep flushes the cache */
    kv = fx_alloc_on(8 * MiB, S2);
    fx_fill(kv, 8 * MiB, 3);
    cr_assert_eq(ga_tag(fx_a, kv, "kv"), GA_OK);
    cr_assert_eq(ga_sleep(fx_a, "kv", GA_SLEEP_OFFLOAD), GA_OK, "%s", ga_last_error());
  }
  char *live = fx_alloc_on(5 * MiB, S2), *keep = fx_alloc_on(40 * MiB, S3);
  fx_fill(live, 5 * MiB, 1);
  fx_fill(keep, 40 * MiB, 2);
  fx_free(fx_alloc_on(30 * MiB, S1));
  fx_free(fx_alloc_on(30 * MiB, S2));
  fx_free(fx_alloc_on(MiB / 2, S3));
  char *busy = fx_alloc_on(12 * MiB, S2);
  fx_hold(S3, 1);
  cr_assert_eq(ga_record_stream(fx_a, busy, S3), GA_OK);
  fx_free(busy); /* pending on S3's event */
  /* Whole free pages on a stream that is neither capturing nor waited on: the
   * memory an empty_cache during the capture can give back. */
  fx_free(fx_alloc_on(45 * MiB, S2));
  /* Another pool, captured and ended earlier, still holding memory. */
  fx_capture(S2, 1);
  cr_assert_eq(ga_begin_allocate_to_pool(fx_a, 8, S2), GA_OK);
  fx_free(fx_alloc_on(3 * MiB, S2));
  fx_capture(S2, 0);
  cr_assert_eq(ga_end_allocate_to_pool(fx_a, 8), GA_OK);

  capture(1);
  void *g = fx_alloc_on(6 * MiB, S1);
  assert_unbroken("ga_malloc");
  /* Measured after the capture's own allocation, which may have grown a new
   * segment (a whole 20 MiB page with expandable segments). */
  int64_t reserved_before = fx_stats().reserved_bytes[GA_POOL_ALL].current;
  cr_assert_eq(ga_empty_cache(fx_a), GA_OK, "%s", ga_last_error());
  assert_unbroken("ga_empty_cache");
  cr_assert_eq(fx_stats().num_capture_deferred_flushes, 1, "the pending event waits for the end");
  cr_assert_lt(fx_stats().reserved_bytes[GA_POOL_ALL].current, reserved_before,
               "what needs no wait went back at once");
  cr_assert_eq(ga_sleep(fx_a, NULL, 0), GA_OK, "%s", ga_last_error());
  assert_unbroken("ga_sleep without tags");
  if (expandable) {
    cr_assert_eq(ga_sleep(fx_a, "kv", 0), GA_ERR_INVALID);
    cr_assert(strstr(ga_last_error(), "capture is underway") && strstr(ga_last_error(), "nothing was put"),
              "%s", ga_last_error());
    assert_unbroken("ga_sleep with tags");
    cr_assert_eq(ga_wake(fx_a), GA_OK, "%s", ga_last_error());
    assert_unbroken("ga_wake");
    cr_assert(fx_verify(kv, 8 * MiB, 3), "woken during the capture with its contents");
  }
  cr_assert_eq(ga_enable_peer_access(fx_a, 1), GA_OK, "%s", ga_last_error());
  assert_unbroken("ga_enable_peer_access");
  cr_assert_eq(ga_release_pool(fx_a, 8), GA_OK, "%s", ga_last_error());
  assert_unbroken("ga_release_pool of another pool");
  fx_free(g);
  void *h = fx_alloc_on(2 * MiB, S1);
  assert_unbroken("ga_free and ga_malloc");
  cr_assert(fx_verify(live, 5 * MiB, 1) && fx_verify(keep, 40 * MiB, 2));
  cr_assert_eq(ga_check(fx_a), 0);
  fx_free(h);
  assert_unbroken("ga_free");

  /* The capture ends: the flush left for it happens now. */
  fx_hold(S3, 0);
  capture(0);
  ga_stats_t stats = fx_stats();
  cr_assert_eq(stats.active_bytes[GA_POOL_ALL].current, stats.allocated_bytes[GA_POOL_ALL].current,
               "the pending block was freed by the deferred flush");
  cr_assert_eq(ga_release_pool(fx_a, 7), GA_OK, "%s", ga_last_error());
  cr_assert_eq(ga_empty_cache(fx_a), GA_OK, "%s", ga_last_error());
  cr_assert(fx_verify(live, 5 * MiB, 1) && fx_verify(keep, 40 * MiB, 2));
  fx_free(live);
  fx_free(keep);
  if (kv) {
    cr_assert(fx_verify(kv, 8 * MiB, 3));
    fx_free(kv);
  }
  cr_assert_eq(ga_empty_cache(fx_a), GA_OK, "%s", ga_last_error());
  stats = fx_stats();
  cr_assert_eq(stats.reserved_bytes[GA_POOL_ALL].current, 0, "nothing live: every page went back");
  cr_assert_eq(stats.page_cache_bytes.current, 0);
  assert_unbroken("the whole scenario");
}

Test(capture, calls_during_a_capture_native) { capture_time_calls(NULL); }
Test(capture, calls_during_a_capture_native_gc_fraction) {
  capture_time_calls("max_split_size_mb:40,garbage_collection_threshold:0.6,per_process_memory_fraction:0.9");
}
Test(capture, calls_during_a_capture_expandable) { capture_time_calls("expandable_segments:True"); }
Test(capture, calls_during_a_capture_expandable_2m_settle) {
  capture_time_calls("expandable_segments:True,expandable_page_size_mb:2,expandable_move_pages:settle");
}

/* The flush left for the end of a capture waits for the last routed pool. */
Test(capture, the_deferred_flush_waits_for_the_last_capture) {
  fx_open("expandable_segments:True,expandable_page_size_mb:2", 256 * MiB);
  fx_free(fx_alloc_on(20 * MiB, S1)); /* S1's memory: S1 will capture */
  capture(1);
  fx_capture(S2, 1);
  cr_assert_eq(ga_begin_allocate_to_pool(fx_a, 9, S2), GA_OK);
  cr_assert_eq(ga_empty_cache(fx_a), GA_OK, "%s", ga_last_error());
  assert_unbroken("ga_empty_cache");
  cr_assert_eq(fx_stats().num_capture_deferred_flushes, 1);
  cr_assert_eq(fx_stats().reserved_bytes[GA_POOL_ALL].current, 20 * MiB, "S1 captures: its pages stay");
  fx_capture(S2, 0);
  cr_assert_eq(ga_end_allocate_to_pool(fx_a, 9), GA_OK);
  assert_unbroken("ending one capture");
  cr_assert_eq(fx_stats().reserved_bytes[GA_POOL_ALL].current, 20 * MiB, "S1 still captures");
  capture(0);
  cr_assert_eq(fx_stats().reserved_bytes[GA_POOL_ALL].current, 0, "flushed once no capture was left");
  cr_assert_eq(ga_release_pool(fx_a, 7), GA_OK);
  cr_assert_eq(ga_release_pool(fx_a, 9), GA_OK);
  assert_unbroken("the scenario");
}
