/* test_badinput.c — every bad input gets a clear error and changes nothing. */
#include <signal.h>
#include <stdlib.h>

#include "fixture.h"
#include "inspect.h"
#include "policy/policy.h"

TestSuite(badinput, .fini = fx_close);

/* Stats must be the same before and after a refused call. */
static void assert_unchanged(const ga_stats_t *before) {
  ga_stats_t after = fx_stats();
  cr_assert_eq(memcmp(before->allocated_bytes, after.allocated_bytes, sizeof after.allocated_bytes), 0);
  cr_assert_eq(memcmp(before->active_bytes, after.active_bytes, sizeof after.active_bytes), 0);
  cr_assert_eq(memcmp(before->reserved_bytes, after.reserved_bytes, sizeof after.reserved_bytes), 0);
  cr_assert_eq(memcmp(before->allocation, after.allocation, sizeof after.allocation), 0);
  cr_assert_eq(ga_check(fx_a), 0);
}

static void expect_bad_free(void *p, const char *phrase) {
  ga_stats_t before = fx_stats();
  cr_assert_eq(ga_free(fx_a, p), GA_ERR_BAD_POINTER);
  cr_assert(strstr(ga_last_error(), "ga_free") != NULL, "%s", ga_last_error());
  cr_assert(strstr(ga_last_error(), phrase) != NULL, "expected '%s' in: %s", phrase, ga_last_error());
  assert_unchanged(&before);
}

Test(badinput, free_of_a_foreign_pointer) {
  fx_open(NULL, GiB);
  void *live = fx_alloc(MiB);
  void *host = malloc(64);
  expect_bad_free(host, "was not allocated by this allocator");
  free(host);
  expect_bad_free((void *)(uintptr_t)0xdead0000, "was not allocated by this allocator");
  fx_free(live);
}

Test(badinput, double_free) {
  fx_open(NULL, GiB);
  void *keep = fx_alloc(4 * MiB);
  void *p = fx_alloc(4 * MiB);
  fx_free(p);
  expect_bad_free(p, "already freed");
  void *q = fx_alloc(4 * MiB); /* the allocator still works and reuses p */
  cr_assert_eq(q, p);
  fx_free(q);
  fx_free(keep);
}

Test(badinput, double_free_while_waiting_on_stream_events) {
  fx_open(NULL, GiB);
  fx_hold(S2, 1);
  void *p = fx_alloc(4 * MiB);
  ga_record_stream(fx_a, p, S2);
  fx_free(p);
  expect_bad_free(p, "already freed (double free");
  fx_hold(S2, 0);
}

Test(badinput, interior_pointer) {
  fx_open(NULL, GiB);
  char *p = fx_alloc(4 * MiB);
  expect_bad_free(p + 4096, "points 4096 bytes inside the allocation at");
  fx_free(p);
}

Test(badinput, size_zero_gives_null_and_changes_nothing) {
  fx_open(NULL, GiB);
  ga_stats_t before = fx_stats();
  void *p = (void *)1;
  cr_assert_eq(ga_malloc(fx_a, 0, S1, &p), GA_OK);
  cr_assert_null(p);
  cr_assert_eq(ga_free(fx_a, NULL), GA_OK);
  assert_unchanged(&before);
  assert_calls(GA_CALL_MALLOC, 0);
}

Test(badinput, null_arguments) {
  fx_open(NULL, GiB);
  void *p;
  cr_assert_eq(ga_malloc(NULL, 1, S1, &p), GA_ERR_INVALID);
  cr_assert(strstr(ga_last_error(), "ga_malloc: the allocator is NULL") != NULL);
  cr_assert_eq(ga_malloc(fx_a, 1, S1, NULL), GA_ERR_INVALID);
  cr_assert_eq(ga_free(NULL, &p), GA_ERR_INVALID);
  cr_assert_eq(ga_stats(fx_a, NULL), GA_ERR_INVALID);
  cr_assert_eq(ga_create(NULL, 0, NULL), GA_ERR_INVALID);
  cr_assert_eq(ga_check(NULL), 1);
  ga_destroy(NULL);
}

Test(badinput, bad_config_strings_are_refused_with_key_value_and_allowed) {
  static const char *cases[][3] = {
      {"max_split_size_mb:10", "max_split_size_mb", "10 MiB is too small"},
      {"max_split_size_mb:abc", "max_split_size_mb", "'abc' is not a whole number"},
      {"max_split_size_mb:-5", "max_split_size_mb", "'-5'"},
      {"garbage_collection_threshold:1.5", "garbage_collection_threshold", "(0.0, 1.0)"},
      {"garbage_collection_threshold:0", "garbage_collection_threshold", "out of range"},
      {"expandable_segments:true", "expandable_segments", "True or False"},
      {"roundup_power2_divisions:3", "roundup_power2_divisions", "power of 2"},
      {"roundup_power2_divisions:[100:4]", "roundup_power2_divisions", "interval '100'"},
      {"roundup_power2_divisions:[256:3]", "roundup_power2_divisions", "power of 2 or 0"},
      {"roundup_power2_divisions:[256:4", "roundup_power2_divisions", "malformed list"},
      {"backend:cudaMallocAsync", "backend", "not supported"},
      {"backend:tpu", "backend", "auto, cuda, sim, native"},
      {"no_such_key:1", "no_such_key", "the keys are backend,"},
      {"max_split_size_mb", "max_split_size_mb", "expected ':'"},
      {"max_split_size_mb:", "max_split_size_mb", "missing value"},
      {"max_split_size_mb:40;", "max_split_size_mb", "not a whole number"},
      {"max_split_size_mb:40:expandable_segments", "max_split_size_mb", "expected ','"},
      {"per_process_memory_fraction:2", "per_process_memory_fraction", "[0.0, 1.0]"},
      {"large_segment_size_mb:8", "large_segment_size_mb", "> 10"},
      {"large_segment_size_mb:64,max_split_size_mb:40", "max_split_size_mb", "here 64"},
      {"sim_capacity_mb:1", "sim_capacity_mb", ">= 2"},
      {"pinned_num_register_threads:3", "pinned_num_register_threads", "power of 2"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ga_allocator_t *a = (ga_allocator_t *)1;
    cr_assert_eq(ga_create(cases[i][0], 0, &a), GA_ERR_CONFIG, "'%s' accepted", cases[i][0]);
    cr_assert_null(a);
    const char *e = ga_last_error();
    cr_assert(strstr(e, cases[i][1]) && strstr(e, cases[i][2]), "'%s' -> %s", cases[i][0], e);
    cr_assert_eq(ga_config_validate(cases[i][0]), GA_ERR_CONFIG);
  }
}

/* Is `conf` refused by both validate and create, naming `key` and `phrase`? */
static void expect_refused(const char *conf, const char *key, const char *phrase) {
  ga_allocator_t *a = (ga_allocator_t *)1;
  cr_assert_eq(ga_config_validate(conf), GA_ERR_CONFIG, "'%s' validated", conf);
  cr_assert(strstr(ga_last_error(), key) && strstr(ga_last_error(), phrase), "'%s' -> %s", conf,
            ga_last_error());
  cr_assert_eq(ga_create(conf, 0, &a), GA_ERR_CONFIG, "'%s' created: %s", conf, ga_last_error());
  cr_assert_null(a);
  cr_assert(strstr(ga_last_error(), key) && strstr(ga_last_error(), phrase), "'%s' -> %s", conf,
            ga_last_error());
}

/* Every integer setting: its largest value is accepted by validate and by
 * create (and the allocator works), the next one and every larger number,
 * however many digits, is refused as too large in the same words. */
Test(badinput, out_of_range_numbers_have_one_rule_and_one_message) {
  static const struct {
    const char *key, *max, *over;
  } keys[] = {
      {"sim_capacity_mb", "16777216", "16777217"},
      {"sim_devices", "64", "65"},
      {"max_split_size_mb", "1099511627776", "1099511627777"},
      {"max_non_split_rounding_mb", "1099511627776", "1099511627777"},
      {"large_segment_size_mb", "1099511627776", "1099511627777"},
      {"expandable_page_size_mb", "1099511627776", "1099511627778"},
      {"expandable_cache_max_mb", "1099511627776", "1099511627777"},
      {"expandable_move_hold", "1099511627776", "1099511627777"},
      {"pinned_reserve_segment_size_mb", "1099511627776", "1099511627777"},
      {"pinned_num_register_threads", "128", "256"},
      {"roundup_power2_divisions", "67108864", "134217728"},
  };
  static const char *huge[] = {"18446744073709551615", "18446744073709551616", "99999999999999999999",
                               "1000000000000000000000000000000000000000000000000000000"};
  char conf[256];
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    /* The largest value works from the parser to a running allocator. */
    snprintf(conf, sizeof conf, "backend:sim,sim_capacity_mb:64,%s:%s", keys[i].key, keys[i].max);
    if (!strcmp(keys[i].key, "sim_capacity_mb"))
      snprintf(conf, sizeof conf, "backend:sim,%s:%s", keys[i].key, keys[i].max);
    cr_assert_eq(ga_config_validate(conf), GA_OK, "'%s': %s", conf, ga_last_error());
    ga_allocator_t *a = NULL;
    cr_assert_eq(ga_create(conf, 0, &a), GA_OK, "'%s': %s", conf, ga_last_error());
    void *p = NULL;
    ga_status_t st = ga_malloc(a, 3 * MiB + 1, NULL, &p);
    cr_assert(st == GA_OK || st == GA_ERR_OOM, "'%s': %s: %s", conf, ga_status_str(st), ga_last_error());
    cr_assert_eq(ga_free(a, p), GA_OK);
    cr_assert_eq(ga_check(a), 0);
    ga_destroy(a);
    /* One past it, and every number past 64 bits, in the same words. */
    snprintf(conf, sizeof conf, "%s:%s", keys[i].key, keys[i].over);
    expect_refused(conf, keys[i].key, "is too large (allowed: ");
    for (size_t h = 0; h < sizeof huge / sizeof huge[0]; h++) {
      snprintf(conf, sizeof conf, "%s:%s", keys[i].key, huge[h]);
      expect_refused(conf, keys[i].key, "is too large (allowed: ");
    }
    snprintf(conf, sizeof conf, "%s:12x", keys[i].key);
    expect_refused(conf, keys[i].key,
                   strcmp(keys[i].key, "roundup_power2_divisions") ? "'12x' is not a whole number" : "'12x'");
  }
  /* The same inside a roundup list. */
  expect_refused("roundup_power2_divisions:[64:134217728]", "roundup_power2_divisions", "is too large");
  expect_refused("roundup_power2_divisions:[64:36028797018963968]", "roundup_power2_divisions",
                 "is too large");
  expect_refused("roundup_power2_divisions:[64:2,>:99999999999999999999]", "roundup_power2_divisions",
                 "is too large");
  /* What broke before: a value validate accepted and create died of (a page
   * size rounded past SIZE_MAX to 0, then divided by), or refused as a
   * device error; divisions whose product with 512 bytes wrapped. */
  expect_refused("backend:sim,large_segment_size_mb:18446744073709551615", "large_segment_size_mb",
                 "18446744073709551615 MiB is too large");
  expect_refused("backend:sim,large_segment_size_mb:17592186044415", "large_segment_size_mb", "too large");
  expect_refused("backend:sim,expandable_segments:True,expandable_page_size_mb:18446744073709551614",
                 "expandable_page_size_mb", "too large");
  expect_refused("backend:sim,sim_capacity_mb:18446744073709551615", "sim_capacity_mb", "too large");
  expect_refused("roundup_power2_divisions:36028797018963968", "roundup_power2_divisions", "too large");
  expect_refused("max_split_size_mb:99999999999999999999", "max_split_size_mb", "is too large (allowed: ");
  expect_refused("max_split_size_mb:18446744073709551615", "max_split_size_mb", "is too large (allowed: ");
  expect_refused("pinned_reserve_segment_size_mb:99999999999999999999", "pinned_reserve_segment_size_mb",
                 "is too large (allowed: ");
  expect_refused("pinned_reserve_segment_size_mb:0", "pinned_reserve_segment_size_mb", "0 MiB is too small");
  expect_refused("sim_devices:0", "sim_devices", "0 is too small");
}

/* The largest divisions leave every request of up to 32 GiB unrounded (a
 * step would be below 512 bytes); 4 divisions round 3 MiB + 1 to 3.5 MiB. */
Test(badinput, the_largest_roundup_divisions_round_sanely) {
  static const struct {
    const char *conf;
    size_t want;
  } cases[] = {
      {"roundup_power2_divisions:67108864", 3 * MiB + 512},
      {"roundup_power2_divisions:[1:67108864]", 3 * MiB + 512},
      {"roundup_power2_divisions:4", 3 * MiB + MiB / 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char conf[256];
    snprintf(conf, sizeof conf, "%s,%s", fx_machine_conf(1, 256), cases[i].conf);
    ga_allocator_t *a = NULL;
    cr_assert_eq(ga_create(conf, 0, &a), GA_OK, "%s", ga_last_error());
    void *p = NULL;
    size_t block = 0;
    cr_assert_eq(ga_malloc(a, 3 * MiB + 1, NULL, &p), GA_OK, "%s", ga_last_error());
    cr_assert_eq(ga_allocation_size(a, p, NULL, &block), GA_OK);
    cr_assert_eq(block, cases[i].want, "%s: a block of %zu bytes", cases[i].conf, block);
    cr_assert_eq(ga_free(a, p), GA_OK);
    ga_destroy(a);
  }
  /* Past the parser (a configuration built by hand), the rounding does not
   * wrap either: 512 x 2^55 is 2^64. */
  ga_config c;
  char err[256];
  cr_assert_eq(ga_config_parse(NULL, &c, err, sizeof err), 0);
  c.any_roundup = 1;
  for (int i = 0; i < GA_ROUNDUP_INTERVALS; i++) c.roundup_divisions[i] = (size_t)1 << 55;
  cr_assert_eq(ga_round_size(&c, 3 * MiB + 1), 3 * MiB + 512);
  for (int i = 0; i < GA_ROUNDUP_INTERVALS; i++) c.roundup_divisions[i] = (size_t)1 << 54;
  cr_assert_eq(ga_round_size(&c, 3 * MiB + 1), 3 * MiB + 512);
}

/* A device that reports more memory than any size derived from it can hold:
 * creating an allocator on it is a configuration error, not a wrapped size. */
static int huge_granularity(ga_device *d, size_t *g) {
  (void)d;
  *g = 2 * MiB;
  return 0;
}
static int huge_mem_info(ga_device *d, size_t *f, size_t *t) {
  (void)d;
  *f = *t = SIZE_MAX - 4096;
  return 0;
}
static void huge_destroy(ga_device *d) { (void)d; }

Test(badinput, sizes_derived_from_a_huge_device_are_checked) {
  static const ga_device_ops ops = {
      .name = "huge", .granularity = huge_granularity, .mem_info = huge_mem_info, .destroy = huge_destroy};
  ga_device dev = {.ops = &ops};
  ga_allocator_t *a = (ga_allocator_t *)1;
  cr_assert_eq(ga_create_on_device("expandable_segments:True", &dev, &a), GA_ERR_CONFIG);
  cr_assert(strstr(ga_last_error(), "too large for a device of"), "%s", ga_last_error());
}

/* No handle can be larger than the device: a page size past the device's
 * memory (any the parser accepts, up to 2^40 MiB) is the device's memory, so
 * that the allocator works and a segment's reservation, and the table of its
 * granules, stays about 1.125 x the device. (With 2^40 MiB every allocation
 * failed; with 67 TiB each took half a second and a ga_check a fifth.) */
Test(badinput, an_expandable_page_past_the_device_is_the_device) {
  static const char *pages[] = {"1099511627776", "70000100", "66"};
  char conf[128];
  for (size_t i = 0; i < sizeof pages / sizeof pages[0]; i++) {
    snprintf(conf, sizeof conf, "expandable_segments:True,expandable_page_size_mb:%s", pages[i]);
    fx_open(conf, 64 * MiB);
    cr_assert_eq(fx_a->pol.large_page, 64 * MiB, "%s: a page of %zu bytes", conf, fx_a->pol.large_page);
    cr_assert_leq(fx_a->space.reserve_size, 128 * MiB, "%s: reservations of %zu bytes", conf,
                  fx_a->space.reserve_size);
    void *small = fx_alloc(1), *large = fx_alloc(3 * MiB + 1);
    fx_free(large);
    void *most = fx_alloc(56 * MiB);
    for (const ga_segment *seg = fx_a->space.segs; seg; seg = seg->next)
      cr_assert_leq(seg->ngranules, 64, "%s: a segment of %zu granules", conf, seg->ngranules);
    fx_free(most);
    fx_free(small);
    cr_assert_eq(ga_empty_cache(fx_a), GA_OK);
    cr_assert_eq(ga_check(fx_a), 0);
    fx_close();
  }
}

Test(badinput, a_bad_config_from_the_environment_is_refused) {
  setenv("GARDENALLOC_CONF", "max_split_size_mb:1", 1);
  ga_allocator_t *a = NULL;
  cr_assert_eq(ga_create(NULL, 0, &a), GA_ERR_CONFIG);
  cr_assert(strstr(ga_last_error(), "max_split_size_mb") != NULL);
  setenv("GARDENALLOC_CONF", "backend:sim,sim_capacity_mb:64,max_split_size_mb:32", 1);
  cr_assert_eq(ga_create(NULL, 0, &a), GA_OK, "%s", ga_last_error());
  cr_assert_str_eq(ga_backend_name(a), "sim");
  ga_stats_t stats;
  ga_stats(a, &stats);
  cr_assert_eq(stats.max_split_size, 32 * MiB);
  ga_destroy(a);
  unsetenv("GARDENALLOC_CONF");
}

Test(badinput, backend_cuda_without_a_driver_fails_clearly) {
  ga_allocator_t *a = NULL;
  ga_status_t st = ga_create("backend:cuda", 0, &a);
  if (st == GA_OK) {
    ga_destroy(a);
    cr_skip_test("a CUDA driver and device are present");
  }
  cr_assert_eq(st, GA_ERR_NO_BACKEND);
  cr_assert(strstr(ga_last_error(), "backend:cuda") != NULL, "%s", ga_last_error());
  st = ga_create("backend:auto,sim_capacity_mb:64", 0, &a);
  cr_assert_eq(st, GA_OK, "%s", ga_last_error());
  cr_assert_str_eq(ga_backend_name(a), "sim");
  ga_destroy(a);
}

/* ---- The lock's holder (GA_ASSERT_LOCKED) ---- */

/* A *_locked function called by the thread that holds the lock runs. */
Test(badinput, a_locked_function_runs_under_this_threads_lock) {
  fx_open(NULL, GiB);
  void *p = fx_alloc(MiB);
  ga_lock_acquire(&fx_a->mu);
  int broken = ga_check_locked(fx_a);
  ga_lock_release(&fx_a->mu);
  cr_assert_eq(broken, 0);
  fx_free(p);
}

#ifdef GA_ASSERTS
/* Where asserts are on, a *_locked function called without the lock stops
 * the process (a broken precondition, not an error to return). */
Test(badinput, a_locked_function_without_the_lock_aborts, .signal = SIGABRT) {
  fx_open(NULL, GiB);
  (void)ga_check_locked(fx_a);
}

static void *hold_lock(void *arg) {
  ga_allocator_t *a = arg;
  ga_lock_acquire(&a->mu);
  return NULL;
}

/* Another thread holding the lock is not this thread holding it. */
Test(badinput, a_locked_function_under_another_threads_lock_aborts, .signal = SIGABRT) {
  fx_open(NULL, GiB);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, hold_lock, fx_a), 0);
  cr_assert_eq(pthread_join(t, NULL), 0); /* it exits holding the lock */
  ga_free_locked(fx_a, NULL);
}

/* Postconditions: a statistic never goes below 0 (stats.h). */
Test(badinput, a_statistic_below_zero_aborts, .signal = SIGABRT) {
  ga_stat_t stat = {0};
  ga_stat_inc(&stat, 512);
  ga_stat_dec(&stat, 512); /* back to 0: fine */
  ga_stat_dec(&stat, 1);
}

/* Postconditions: blocks tile their segment after an absorb (tiles.c). Two
 * allocations in one small segment, the free rest after them; the second is
 * marked freed (PENDING, as a merge finds a block being freed: a record is
 * never deleted ALLOCATED, which tiles.c also asserts) and the rest's address
 * is made wrong by 512 bytes, so the first block absorbing the second no
 * longer ends where the rest begins. */
Test(badinput, an_absorb_that_breaks_the_tiling_aborts, .signal = SIGABRT) {
  fx_open(NULL, GiB);
  void *p = fx_alloc(512 * KiB), *q = fx_alloc(512 * KiB);
  ga_lock_acquire(&fx_a->mu);
  ga_block *b = ga_blockmap_get(&fx_a->pol.map, (uintptr_t)p);
  cr_assert(b && b->next && b->next->ptr == (uintptr_t)q && b->next->next,
            "p, q and a free rest, in that order");
  b->next->state = GA_BLOCK_PENDING;
  b->next->next->ptr += 512;
  ga_tiles_absorb_next_locked(&fx_a->space, b);
}
#endif

/* ga_check_locked run between ga_free and the next call (as the expensive
 * tier, GA_CHECK_EVERY_CALL, does) finds the free kept back consistent: the
 * map and the statistics still count it as allocated until it completes. */
Test(badinput, the_free_kept_back_is_consistent_to_ga_check) {
  fx_open(NULL, GiB);
  void *keep = fx_alloc(MiB);
  void *p = fx_alloc(MiB); /* the front of its segment's free rest: kept back when freed */
  cr_assert_eq(ga_free(fx_a, p), GA_OK);
  ga_lock_acquire(&fx_a->mu);
  int kept = fx_a->pol.kept != NULL;
  int broken = ga_check_locked(fx_a);
  ga_lock_release(&fx_a->mu);
  cr_assert(kept, "the free of p was not kept back: the test no longer tests it");
  cr_assert_eq(broken, 0);
  fx_free(keep);
}

/* ---- Frees of pointers whose block was merged away ----
 * A block keeps its map entry after its free (policy/block.c), until its
 * record is deleted (merged into a neighbour, or with its segment). Three
 * 4 KiB blocks x, y, z in one small segment; y freed, then x, so that x
 * absorbs y and y's record is deleted; the next split takes that record
 * back. */
static ga_block *rec(void *p) { return ga_blockmap_get(&fx_a->pol.map, (uintptr_t)p); }

static ga_block *merge_y_into_x(char **x, char **y, char **z) {
  *x = fx_alloc(4 * KiB), *y = fx_alloc(4 * KiB), *z = fx_alloc(4 * KiB);
  cr_assert(*y == *x + 4 * KiB && *z == *y + 4 * KiB, "x, y and z side by side");
  ga_block *ry = rec(*y);
  size_t count = fx_a->pol.map.count;
  fx_free(*y);
  cr_assert(rec(*y) == ry && ry->in_map, "a freed block keeps its entry");
  fx_free(*x);
  (void)fx_stats(); /* completes a free kept back */
  cr_assert(rec(*y) == NULL && !ry->in_map, "y's record was deleted, its entry kept");
  cr_assert_eq(fx_a->pol.map.count, count - 1);
  return ry;
}

/* y's record comes back as a block elsewhere, allocated: the free of y is
 * refused and leaves that block alone. */
Test(badinput, a_pointer_merged_away_is_refused_after_its_record_came_back_elsewhere) {
  fx_open(NULL, GiB);
  char *x, *y, *z;
  ga_block *ry = merge_y_into_x(&x, &y, &z);
  /* Too big for x's 8 KiB: split from the segment's rest, whose record is
   * handed out while the remainder takes y's (the last deleted); the next
   * such split hands that one out. */
  char *v = fx_alloc(16 * KiB), *w = fx_alloc(16 * KiB);
  cr_assert(rec(w) == ry && ry->state == GA_BLOCK_ALLOCATED,
            "the test's premise: y's record now holds w (%p)", (void *)w);
  expect_bad_free(y, "is not a live allocation: it lies in cached free memory");
  cr_assert_eq(ry->state, GA_BLOCK_ALLOCATED);
  fx_fill(w, 16 * KiB, 7);
  fx_free(w);
  fx_free(v);
  fx_free(z);
}

/* y's address handed out again (a new record): it gets one entry, its free
 * works and a second free is refused. */
Test(badinput, an_address_merged_away_and_handed_out_again_frees_once) {
  fx_open(NULL, GiB);
  char *x, *y, *z;
  (void)merge_y_into_x(&x, &y, &z);
  size_t count = fx_a->pol.map.count;
  char *x2 = fx_alloc(4 * KiB), *y2 = fx_alloc(4 * KiB);
  cr_assert(x2 == x && y2 == y, "x's block is split again at y");
  cr_assert(rec(y2) && rec(y2)->in_map && rec(y2)->ptr == (uintptr_t)y2);
  cr_assert_eq(fx_a->pol.map.count, count + 1, "x kept its entry; y has one again");
  fx_free(y2);
  (void)fx_stats();
  expect_bad_free(y2, "already freed");
  fx_free(x2);
  fx_free(z);
}
