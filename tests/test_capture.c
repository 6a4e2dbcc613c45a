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
  ga_stats_t s = fx_stats();
  cr_assert_eq(s.reserved_bytes[GA_POOL_ALL].current, 60 * MiB, "three segments: pool, S1, S2");
  cr_assert_eq(ga_release_pool(fx_a, 7), GA_OK);
  s = fx_stats();
  cr_assert_eq(s.reserved_bytes[GA_POOL_ALL].current, 40 * MiB, "the released pool's free segment went back");
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
