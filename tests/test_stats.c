/* test_stats.c — PyTorch's memory_stats() keys and meanings. */
#include <stdlib.h>

#include "fixture.h"

TestSuite(stats, .fini = fx_close);

Test(stats, every_metric_follows_a_scenario) {
  fx_open(NULL, GiB);
  void *a = fx_alloc(3 * MiB + 100); /* large: 20 MiB segment, block 3 MiB + 512 */
  void *b = fx_alloc(1000);          /* small: 2 MiB segment, block 1024 */
  ga_stats_t s = fx_stats();
  cr_assert_eq(s.allocation[GA_POOL_ALL].current, 2);
  cr_assert_eq(s.allocation[GA_POOL_SMALL].current, 1);
  cr_assert_eq(s.allocated_bytes[GA_POOL_LARGE].current, 3 * MiB + 512);
  cr_assert_eq(s.allocated_bytes[GA_POOL_SMALL].current, 1024);
  cr_assert_eq(s.requested_bytes[GA_POOL_ALL].current, 3 * MiB + 1100);
  cr_assert_eq(s.reserved_bytes[GA_POOL_ALL].current, 22 * MiB);
  cr_assert_eq(s.segment[GA_POOL_ALL].current, 2);
  cr_assert_eq(s.inactive_split_bytes[GA_POOL_ALL].current, 22 * MiB - 3 * MiB - 512 - 1024);
  cr_assert_eq(s.num_device_alloc, 2);
  cr_assert_eq(s.max_split_size, -1);
  fx_free(a);
  s = fx_stats();
  cr_assert_eq(s.allocated_bytes[GA_POOL_ALL].current, 1024);
  cr_assert_eq(s.allocated_bytes[GA_POOL_ALL].peak, 3 * MiB + 512 + 1024);
  cr_assert_eq(s.allocated_bytes[GA_POOL_ALL].allocated, 3 * MiB + 512 + 1024);
  cr_assert_eq(s.allocated_bytes[GA_POOL_ALL].freed, 3 * MiB + 512);
  cr_assert_eq(s.allocation[GA_POOL_LARGE].freed, 1);
  cr_assert_eq(s.inactive_split[GA_POOL_LARGE].current, 0, "the large segment is whole again");
  fx_free(b);
}

/* inactive_split changes by the net difference of each split or merge, as
 * PyTorch counts it, so its allocated/freed totals are PyTorch's too. */
static void assert_split(int64_t cur, int64_t alloc, int64_t freed, int64_t bcur, int64_t balloc,
                         int64_t bfreed) {
  ga_stats_t s = fx_stats();
  const ga_stat_t *n = &s.inactive_split[GA_POOL_LARGE], *b = &s.inactive_split_bytes[GA_POOL_LARGE];
  cr_assert_eq(n->current, cur);
  cr_assert_eq(n->allocated, alloc);
  cr_assert_eq(n->freed, freed);
  cr_assert_eq(b->current, bcur * MiB);
  cr_assert_eq(b->allocated, balloc * MiB);
  cr_assert_eq(b->freed, bfreed * MiB);
  cr_assert_eq(s.inactive_split_bytes[GA_POOL_ALL].allocated, balloc * MiB, "the aggregate follows the pool");
}

Test(stats, inactive_split_counts_net_changes) {
  fx_open(NULL, GiB);
  void *a = fx_alloc(4 * MiB); /* 20 MiB segment: a new split inactive block of 16 MiB */
  assert_split(1, 1, 0, 16, 16, 0);
  void *b = fx_alloc(4 * MiB); /* that block shrinks by 4 MiB */
  assert_split(1, 1, 0, 12, 16, 4);
  fx_free(b); /* merges with it: still one block, 4 MiB longer */
  assert_split(1, 1, 0, 16, 20, 4);
  fx_free(a); /* the segment is whole: no split block left */
  assert_split(0, 1, 1, 0, 20, 20);
}

Test(stats, reset_peak_and_accumulated) {
  fx_open(NULL, GiB);
  void *a = fx_alloc(50 * MiB);
  fx_free(a);
  cr_assert_eq(ga_reset_peak_stats(fx_a), GA_OK);
  ga_stats_t s = fx_stats();
  cr_assert_eq(s.allocated_bytes[GA_POOL_ALL].peak, 0);
  cr_assert_eq(s.reserved_bytes[GA_POOL_ALL].peak, 50 * MiB, "peak = current");
  cr_assert_eq(ga_reset_accumulated_stats(fx_a), GA_OK);
  s = fx_stats();
  cr_assert_eq(s.allocated_bytes[GA_POOL_ALL].allocated, 0);
  cr_assert_eq(s.allocated_bytes[GA_POOL_ALL].freed, 0);
  cr_assert_eq(s.num_device_alloc, 0);
  cr_assert_eq(s.reserved_bytes[GA_POOL_ALL].current, 50 * MiB, "current is kept");
}

Test(stats, json_has_all_122_pytorch_keys_and_device_calls) {
  fx_open(NULL, GiB);
  void *a = fx_alloc(7 * MiB);
  size_t n = ga_stats_json(fx_a, NULL, 0);
  cr_assert_gt(n, 1000);
  char *buf = malloc(n + 1);
  cr_assert_eq(ga_stats_json(fx_a, buf, n + 1), n);
  cr_assert_eq(strlen(buf), n);
  cr_assert_eq(buf[0], '{');
  cr_assert_eq(buf[n - 1], '}');
  int keys = 0;
  for (char *p = buf; (p = strstr(p, "\":")); p++) keys++;
  /* PyTorch's, ours (3 with four metrics and 9 scalars), device calls and time */
  cr_assert_eq(keys, 122 + 3 * 4 + 9 + 2 * GA_CALL_COUNT);
  cr_assert(strstr(buf, "_pages\"") == NULL, "no alias of version 0.1: %s", buf);
  cr_assert(strstr(buf, "\"quarantined_bytes.current\":0,") != NULL, "%s", buf);
  cr_assert(strstr(buf, "\"num_capture_deferred_flushes\":0,") != NULL, "%s", buf);
  cr_assert(strstr(buf, "\"allocated_bytes.all.current\":7340032,") != NULL, "%s", buf);
  cr_assert(strstr(buf, "\"reserved_bytes.large_pool.peak\":20971520,") != NULL);
  cr_assert(strstr(buf, "\"oversize_segments.current\":0,") != NULL);
  cr_assert(strstr(buf, "\"max_split_size\":-1,") != NULL);
  cr_assert(strstr(buf, "\"device_calls.malloc\":1") != NULL);
  char small[16];
  cr_assert_eq(ga_stats_json(fx_a, small, sizeof small), n, "truncation reports the full length");
  cr_assert_eq(strlen(small), sizeof small - 1);
  free(buf);
  fx_free(a);
}
