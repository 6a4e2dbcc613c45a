/* test_native.c — native mode reproduces PyTorch's numbers: the published
 * cases, rounding, pools, segment sizes, best fit, the split and oversize
 * rules at their boundaries, merging, empty_cache. */
#include "fixture.h"
#include "policy/keep.h"

TestSuite(native, .fini = fx_close);

/* ---- The published PyTorch cases ---- */

Test(native, eight_16MiB_then_four_32MiB_reserves_256MiB) {
  fx_open(NULL, GiB);
  void *p[8];
  for (int i = 0; i < 8; i++) p[i] = fx_alloc(16 * MiB);
  for (int i = 0; i < 8; i++) fx_free(p[i]);
  for (int i = 0; i < 4; i++) p[i] = fx_alloc(32 * MiB);
  assert_reserved(256 * MiB);
  for (int i = 0; i < 4; i++) fx_free(p[i]);
}

Test(native, four_32MiB_then_eight_16MiB_reserves_128MiB) {
  fx_open(NULL, GiB);
  void *p[8];
  for (int i = 0; i < 4; i++) p[i] = fx_alloc(32 * MiB);
  for (int i = 0; i < 4; i++) fx_free(p[i]);
  for (int i = 0; i < 8; i++) p[i] = fx_alloc(16 * MiB);
  assert_reserved(128 * MiB);
  assert_stat(segment, GA_POOL_ALL, 4);
  for (int i = 0; i < 8; i++) fx_free(p[i]);
}

Test(native, two_MiB_then_half_MiB_reserves_22MiB) {
  fx_open(NULL, GiB);
  void *a = fx_alloc(2 * MiB), *b = fx_alloc(MiB / 2);
  assert_reserved(22 * MiB);
  assert_stat(reserved_bytes, GA_POOL_LARGE, 20 * MiB);
  assert_stat(reserved_bytes, GA_POOL_SMALL, 2 * MiB);
  fx_free(a);
  fx_free(b);
}

Test(native, two_MiB_then_two_MiB_reserves_20MiB) {
  fx_open(NULL, GiB);
  void *a = fx_alloc(2 * MiB), *b = fx_alloc(2 * MiB);
  assert_reserved(20 * MiB);
  cr_assert_eq((char *)b, (char *)a + 2 * MiB, "the second block is cut from the first segment's tail");
  fx_free(a);
  fx_free(b);
}

/* ---- Rounding ---- */

Test(native, sizes_round_to_512_bytes) {
  fx_open(NULL, GiB);
  size_t sizes[][2] = {{1, 512},     {512, 512},     {513, 1024},
                       {1000, 1024}, {MiB - 1, MiB}, {3 * MiB + 1, 3 * MiB + 512}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *p = fx_alloc(sizes[i][0]);
    size_t req = 0;
    cr_assert_eq(ga_allocation_size(fx_a, p, &req, NULL), GA_OK);
    cr_assert_eq(req, sizes[i][0]);
    if (sizes[i][0] <= MiB) cr_assert_eq(fx_block_size(p), sizes[i][1], "size %zu", sizes[i][0]);
    assert_stat(requested_bytes, GA_POOL_ALL, sizes[i][0]);
    fx_free(p);
  }
}

Test(native, roundup_power2_divisions_single_value) {
  fx_open("roundup_power2_divisions:4", GiB);
  /* 1200 <= 512*4: plain 512-byte rounding. */
  void *p = fx_alloc(1200);
  cr_assert_eq(fx_block_size(p), 1536);
  fx_free(p);
  /* 3000 > 2048: the four steps between 2048 and 4096 are 512 apart. */
  p = fx_alloc(3000);
  cr_assert_eq(fx_block_size(p), 3072);
  fx_free(p);
  /* 5000: steps of 1024 between 4096 and 8192. */
  p = fx_alloc(5000);
  cr_assert_eq(fx_block_size(p), 5120);
  fx_free(p);
  /* A power of two is left alone. */
  p = fx_alloc(4096);
  cr_assert_eq(fx_block_size(p), 4096);
  fx_free(p);
  /* 1 MiB + 1 (interval 0 covers everything below 2 MiB): steps of 256 KiB.
   * Large pool, 20 MiB segment, split since more than 1 MiB remains. */
  p = fx_alloc(MiB + 1);
  cr_assert_eq(fx_block_size(p), MiB + 256 * KiB);
  fx_free(p);
}

Test(native, roundup_power2_divisions_per_interval) {
  fx_open("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", 8 * GiB);
  /* [512 MiB, 1 GiB): 2 divisions -> 600 MiB rounds to 768 MiB. */
  void *p = fx_alloc(600 * MiB);
  cr_assert_eq(fx_block_size(p), 768 * MiB);
  fx_free(p);
  /* Below 512 MiB the first entry (1) applies: no power-2 rounding. */
  p = fx_alloc(300 * MiB + 1);
  cr_assert_eq(fx_block_size(p), 300 * MiB + 512);
  fx_free(p);
  /* [1, 2) GiB: 4 divisions -> 1.1 GiB rounds to 1.25 GiB. */
  p = fx_alloc(GiB + 100 * MiB);
  cr_assert_eq(fx_block_size(p), GiB + 256 * MiB);
  fx_free(p);
  /* >= 2 GiB: 8 divisions -> 2.1 GiB rounds to 2.25 GiB. */
  p = fx_alloc(2 * GiB + 100 * MiB);
  cr_assert_eq(fx_block_size(p), 2 * GiB + 256 * MiB);
  fx_free(p);
}

/* ---- Pools and segment sizes ---- */

static void expect_segment(size_t request, size_t segment, int pool) {
  void *p = fx_alloc(request);
  assert_reserved(segment);
  assert_stat(segment, pool, 1);
  fx_free(p);
  cr_assert_eq(ga_empty_cache(fx_a), GA_OK);
}

Test(native, segment_size_at_each_boundary) {
  fx_open(NULL, GiB);
  expect_segment(1, 2 * MiB, GA_POOL_SMALL);
  expect_segment(MiB, 2 * MiB, GA_POOL_SMALL);
  expect_segment(MiB + 1, 20 * MiB, GA_POOL_LARGE);
  expect_segment(10 * MiB - 512, 20 * MiB, GA_POOL_LARGE);
  expect_segment(10 * MiB - 511, 10 * MiB, GA_POOL_LARGE);
  expect_segment(10 * MiB, 10 * MiB, GA_POOL_LARGE);
  expect_segment(10 * MiB + 1, 12 * MiB, GA_POOL_LARGE);
  expect_segment(100 * MiB + 1, 102 * MiB, GA_POOL_LARGE);
}

Test(native, large_segment_size_mb_changes_the_large_buffer) {
  fx_open("large_segment_size_mb:32", GiB);
  expect_segment(5 * MiB, 32 * MiB, GA_POOL_LARGE);
}

/* ---- Splitting ---- */

Test(native, small_pool_splits_when_512_bytes_remain) {
  fx_open(NULL, GiB);
  char *a = fx_alloc(MiB);
  char *b = fx_alloc(MiB - 512); /* from the 1 MiB tail: 512 B remain -> split */
  cr_assert_eq(b, a + MiB);
  cr_assert_eq(fx_block_size(b), MiB - 512);
  char *c = fx_alloc(512);
  cr_assert_eq(c, b + MiB - 512, "the 512 B remainder serves the next 512 B request");
  assert_stat(segment, GA_POOL_SMALL, 1);
  fx_free(a);
  fx_free(b);
  fx_free(c);
}

Test(native, small_pool_with_nothing_left_does_not_split) {
  fx_open(NULL, GiB);
  char *a = fx_alloc(MiB);
  char *b = fx_alloc(MiB);
  cr_assert_eq(b, a + MiB);
  assert_stat(inactive_split, GA_POOL_ALL, 0);
  fx_free(a);
  fx_free(b);
}

Test(native, large_pool_needs_more_than_1MiB_remaining_to_split) {
  fx_open(NULL, GiB);
  /* 20 MiB segment, 19 MiB asked: exactly 1 MiB remains -> no split. */
  void *p = fx_alloc(19 * MiB);
  cr_assert_eq(fx_block_size(p), 20 * MiB);
  assert_stat(allocated_bytes, GA_POOL_ALL, 20 * MiB);
  assert_stat(inactive_split, GA_POOL_ALL, 0);
  fx_free(p);
  /* 19 MiB - 512: 1 MiB + 512 remains -> split. */
  p = fx_alloc(19 * MiB - 512);
  cr_assert_eq(fx_block_size(p), 19 * MiB - 512);
  assert_stat(inactive_split, GA_POOL_LARGE, 1);
  assert_stat(inactive_split_bytes, GA_POOL_LARGE, MiB + 512);
  fx_free(p);
  assert_stat(inactive_split, GA_POOL_ALL, 0);
}

Test(native, allocation_takes_the_front_and_tail_stays_free) {
  fx_open(NULL, GiB);
  char *a = fx_alloc(4 * MiB);
  char *b = fx_alloc(4 * MiB);
  cr_assert_eq(b, a + 4 * MiB);
  assert_stat(inactive_split_bytes, GA_POOL_ALL, 12 * MiB);
  fx_free(a);
  fx_free(b);
}

/* ---- Best fit ---- */

Test(native, best_fit_takes_the_smallest_block_then_the_lowest_address) {
  fx_open(NULL, GiB);
  void *big = fx_alloc(40 * MiB), *mid = fx_alloc(30 * MiB), *mid2 = fx_alloc(30 * MiB);
  fx_free(big);
  fx_free(mid2);
  fx_free(mid);
  char *lo = (uintptr_t)mid < (uintptr_t)mid2 ? mid : mid2;
  char *p = fx_alloc(25 * MiB);
  cr_assert_eq(p, lo, "a 30 MiB block at the lowest address, not the 40 MiB one");
  assert_reserved(100 * MiB);
  fx_free(p);
}

Test(native, free_blocks_merge_inside_a_segment_only) {
  fx_open(NULL, GiB);
  char *a = fx_alloc(5 * MiB), *b = fx_alloc(5 * MiB), *c = fx_alloc(5 * MiB);
  fx_free(a);
  fx_free(c);
  fx_free(b); /* merges with both neighbours and the tail: one 20 MiB block */
  assert_stat(inactive_split, GA_POOL_ALL, 0);
  char *d = fx_alloc(20 * MiB);
  cr_assert_eq(d, a);
  assert_reserved(20 * MiB);
  fx_free(d);
  /* Two separate 20 MiB segments never merge: 30 MiB needs a new segment. */
  void *x = fx_alloc(20 * MiB), *y = fx_alloc(20 * MiB);
  fx_free(x);
  fx_free(y);
  void *z = fx_alloc(30 * MiB);
  assert_reserved(70 * MiB);
  fx_free(z);
}

/* ---- max_split_size and the oversize rules ---- */

Test(native, oversize_blocks_never_serve_small_requests) {
  fx_open("max_split_size_mb:40", GiB);
  void *p = fx_alloc(50 * MiB);
  fx_free(p);
  void *q = fx_alloc(30 * MiB); /* < 40: the cached 50 MiB block is refused */
  cr_assert_neq(q, p);
  assert_reserved(80 * MiB);
  assert_scalar(max_split_size, 40 * MiB);
  fx_free(q);
}

Test(native, oversize_blocks_are_never_split) {
  fx_open("max_split_size_mb:40", GiB);
  void *p = fx_alloc(50 * MiB);
  fx_free(p);
  void *q = fx_alloc(45 * MiB); /* >= 40, 50 < 45 + 20: takes the whole block */
  cr_assert_eq(q, p);
  cr_assert_eq(fx_block_size(q), 50 * MiB);
  assert_stat(allocated_bytes, GA_POOL_ALL, 50 * MiB);
  ga_stats_t stats = fx_stats();
  cr_assert_eq(stats.oversize_allocations.current, 1);
  cr_assert_eq(stats.oversize_segments.current, 1);
  fx_free(q);
}

Test(native, oversize_request_refuses_blocks_20MiB_larger) {
  fx_open("max_split_size_mb:40", GiB);
  void *p = fx_alloc(60 * MiB);
  fx_free(p);
  void *q = fx_alloc(40 * MiB); /* 60 >= 40 + 20: refused */
  cr_assert_neq(q, p);
  fx_free(q);
  cr_assert_eq(ga_empty_cache(fx_a), GA_OK);
  p = fx_alloc(60 * MiB);
  fx_free(p);
  q = fx_alloc(40 * MiB + 512); /* 60 < 40 MiB + 512 + 20 MiB: accepted */
  cr_assert_eq(q, p);
  fx_free(q);
}

Test(native, max_non_split_rounding_mb_sets_the_tolerance) {
  fx_open("max_split_size_mb:40,max_non_split_rounding_mb:30", GiB);
  void *p = fx_alloc(60 * MiB);
  fx_free(p);
  void *q = fx_alloc(40 * MiB); /* 60 < 40 + 30: accepted */
  cr_assert_eq(q, p);
  fx_free(q);
}

Test(native, below_max_split_size_blocks_still_split) {
  fx_open("max_split_size_mb:40", GiB);
  void *p = fx_alloc(38 * MiB);
  fx_free(p);
  char *a = fx_alloc(10 * MiB); /* 38 < 40: not oversize, splits */
  cr_assert_eq((void *)a, p);
  cr_assert_eq(fx_block_size(a), 10 * MiB);
  fx_free(a);
}

/* ---- empty_cache ---- */

Test(native, empty_cache_frees_whole_segments_and_keeps_split_ones) {
  fx_open(NULL, GiB);
  void *a = fx_alloc(30 * MiB), *b = fx_alloc(5 * MiB), *c = fx_alloc(100 * KiB);
  void *d = fx_alloc(100 * KiB);
  fx_free(a);
  fx_free(c);
  cr_assert_eq(ga_empty_cache(fx_a), GA_OK);
  /* a's 30 MiB segment goes; b's 20 MiB and the small 2 MiB stay (split). */
  assert_reserved(22 * MiB);
  assert_stat(inactive_split_bytes, GA_POOL_LARGE, 15 * MiB);
  assert_stat(inactive_split_bytes, GA_POOL_SMALL, 2 * MiB - 100 * KiB); /* c + the tail */
  assert_scalar(num_device_free, 1);
  fx_free(b);
  fx_free(d);
  cr_assert_eq(ga_empty_cache(fx_a), GA_OK);
  assert_reserved(0);
  assert_scalar(num_device_free, 3);
}

/* empty_cache looks for whole free segments among the free blocks at least
 * as large as the smallest segment of their pool, stream by stream, not
 * through every free block. It must give back exactly what a walk over every
 * segment finds (segments whose one block is FREE), on a cache of three
 * streams and every segment size, fragmented by random frees, with
 * `conf` setting the large segment size. */
static size_t walk_whole_free(size_t *n) {
  size_t bytes = 0;
  *n = 0;
  for (ga_segment *seg = fx_a->space.segs; seg; seg = seg->next)
    if (!seg->head->next && seg->head->state == GA_BLOCK_FREE) bytes += seg->size, ++*n;
  return bytes;
}

static void empty_cache_gives_back_what_the_walk_finds(const char *conf) {
  fx_open(conf, 64 * GiB);
  enum { N = 1200 };
  void *p[N];
  unsigned seed = 29;
  for (int i = 0; i < N; i++) {
    int r = rand_r(&seed) % 8;
    size_t n = r < 4   ? 1 + (size_t)rand_r(&seed) % MiB /* small pool */
               : r < 7 ? MiB + 1 + (size_t)rand_r(&seed) % (9 * MiB)
                       : 10 * MiB + (size_t)rand_r(&seed) % (30 * MiB);
    p[i] = fx_alloc_on(n, fx_stream(1 + i % 3));
  }
  for (int i = 0; i < N; i++)
    if (rand_r(&seed) % 3 != 0) fx_free(p[i]), p[i] = NULL;
  size_t n, left;
  ga_lock_acquire(&fx_a->mu);
  ga_block_keep_flush_locked(fx_a); /* the free kept back completes */
  size_t want = walk_whole_free(&n);
  ga_lock_release(&fx_a->mu);
  cr_assert_gt(n, 30, "whole free segments: %zu", n);
  ga_stats_t before = fx_stats();
  cr_assert_eq(ga_empty_cache(fx_a), GA_OK, "%s", ga_last_error());
  ga_stats_t after = fx_stats();
  cr_assert_eq(ga_check(fx_a), 0);
  long long gone =
      (long long)(before.reserved_bytes[GA_POOL_ALL].current - after.reserved_bytes[GA_POOL_ALL].current);
  cr_assert_eq(gone, (long long)want, "gave back %lld MiB, the walk finds %zu MiB in %zu segments",
               gone >> 20, want >> 20, n);
  cr_assert_eq(after.num_device_free - before.num_device_free, (int64_t)n);
  ga_lock_acquire(&fx_a->mu);
  (void)walk_whole_free(&left);
  ga_lock_release(&fx_a->mu);
  cr_assert_eq(left, 0, "%zu whole free segments left", left);
  for (int i = 0; i < N; i++)
    if (p[i]) fx_free(p[i]);
}

Test(native, empty_cache_gives_back_every_whole_free_segment_of_a_fragmented_cache) {
  empty_cache_gives_back_what_the_walk_finds(NULL);
}
Test(native, empty_cache_gives_back_every_whole_free_segment_with_12MiB_large_segments) {
  empty_cache_gives_back_what_the_walk_finds("large_segment_size_mb:12");
}

Test(native, blocks_of_one_stream_are_not_reused_on_another) {
  fx_open(NULL, GiB);
  void *p = fx_alloc_on(8 * MiB, S1);
  fx_free(p);
  void *q = fx_alloc_on(8 * MiB, S2);
  cr_assert_neq(q, p);
  assert_reserved(40 * MiB);
  void *r = fx_alloc_on(8 * MiB, S1);
  cr_assert_eq(r, p);
  fx_free(q);
  fx_free(r);
}
