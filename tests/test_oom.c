/* test_oom.c — the retry ladder, the memory fraction, the GC threshold and
 * the OOM report, at a capped device capacity. */
#include <stdio.h>
#include <string.h>

#include "fixture.h"

TestSuite(oom, .fini = fx_close);

Test(oom, flushing_the_cache_makes_room_where_pytorch_would) {
  fx_open(NULL, 100 * MiB);
  void *a = fx_alloc(30 * MiB), *b = fx_alloc(30 * MiB);
  fx_free(a);
  fx_free(b);
  void *c = fx_alloc(80 * MiB); /* neither cached block fits; 60 + 80 > 100 */
  assert_reserved(80 * MiB);
  assert_scalar(num_alloc_retries, 1);
  assert_scalar(num_device_free, 2);
  assert_scalar(num_ooms, 0);
  fx_free(c);
}

Test(oom, oversize_blocks_are_freed_first_largest_down) {
  fx_open("max_split_size_mb:40", 200 * MiB);
  void *p[3];
  for (int i = 0; i < 3; i++) p[i] = fx_alloc((50 + i) * MiB);
  for (int i = 0; i < 3; i++) fx_free(p[i]);
  /* 150+ MiB cached in oversize blocks; 60 MiB does not fit beside them. */
  void *q = fx_alloc(60 * MiB);
  assert_scalar(num_alloc_retries, 0); /* no full flush was needed */
  assert_scalar(num_device_free, 2);   /* 52 then 51: 103 >= 60 */
  assert_reserved(50 * MiB + 60 * MiB);
  fx_free(q);
}

Test(oom, a_single_large_enough_oversize_block_is_freed) {
  fx_open("max_split_size_mb:40", 200 * MiB);
  void *a = fx_alloc(120 * MiB);
  fx_free(a);
  void *b = fx_alloc(60 * MiB); /* 120 >= 60 + 20: not reused; 120 + 60 fits */
  fx_free(b);
  void *c = fx_alloc(80 * MiB); /* 180 + 80 > 200: frees the 120 (>= 80) alone */
  assert_scalar(num_device_free, 1);
  assert_scalar(num_alloc_retries, 0);
  assert_reserved(140 * MiB);
  fx_free(c);
}

Test(oom, true_oom_returns_the_full_report_and_stays_usable) {
  fx_open(NULL, 100 * MiB);
  void *a = fx_alloc(40 * MiB), *b = fx_alloc(10 * MiB + 1);
  fx_free(b);
  void *p = (void *)1;
  cr_assert_eq(ga_malloc(fx_a, 70 * MiB, S1, &p), GA_ERR_OOM);
  cr_assert_null(p);
  char want[1024];
  snprintf(
      want, sizeof want,
      "CUDA out of memory. Tried to allocate 70.00 MiB. GPU 0 has a total capacity of 100.00 MiB of which "
      "60.00 MiB is free. Of the allocated memory 40.00 MiB is allocated by gardenalloc, and 0 bytes is "
      "reserved by gardenalloc but unallocated. The largest free block in the cache is 0 bytes. Free in the "
      "cache: 0 bytes (largest free block: 0 bytes in the small pool, 0 bytes in the large pool). Used on "
      "the "
      "device outside gardenalloc: 0 bytes.");
  cr_assert_str_eq(ga_last_error(), want);
  assert_scalar(num_ooms, 1);
  assert_scalar(num_alloc_retries, 1);
  cr_assert_eq(ga_check(fx_a), 0);
  void *c = fx_alloc(50 * MiB); /* still usable */
  fx_free(c);
  fx_free(a);
}

/* Four 20 MiB segments, each holding two 9 MiB blocks and a free 2 MiB tail,
 * on a 95 MiB device: 15 MiB free there, 8 MiB cached in whole granules. A
 * 7.5 MiB request needs a new 20 MiB segment in native mode and fails;
 * expandable segments map 8 MiB and serve it. */
static void tails_and_request(const char *conf, void *keep[8], ga_status_t *st) {
  fx_open(conf, 95 * MiB);
  for (int i = 0; i < 8; i++) keep[i] = fx_alloc(9 * MiB);
  void *p = NULL;
  *st = ga_malloc(fx_a, 7 * MiB + MiB / 2, S1, &p);
  if (p) fx_free(p);
}

Test(oom, the_expandable_hint_appears_when_expandable_segments_would_serve_the_request) {
  void *keep[8];
  ga_status_t st;
  tails_and_request(NULL, keep, &st);
  cr_assert_eq(st, GA_ERR_OOM);
  const char *e = ga_last_error();
  cr_assert(strstr(e, "Tried to allocate 20.00 MiB") != NULL, "%s", e);
  cr_assert(strstr(e, "The largest free block in the cache is 2.00 MiB.") != NULL, "%s", e);
  cr_assert(strstr(e, "Of the cached free memory, 8.00 MiB lies in whole 2 MiB granules") != NULL, "%s", e);
  cr_assert(
      strstr(e, "try setting GARDENALLOC_CONF=expandable_segments:True to avoid fragmentation.") != NULL,
      "%s", e);
  for (int i = 0; i < 8; i++) fx_free(keep[i]);
}

Test(oom, and_expandable_segments_do_serve_it) {
  void *keep[8];
  ga_status_t st;
  tails_and_request("expandable_segments:True", keep, &st);
  cr_assert_eq(st, GA_OK, "%s", ga_last_error());
  for (int i = 0; i < 8; i++) fx_free(keep[i]);
}

/* 80 small blocks of 1 MiB, every other one freed: 40 MiB cached, all of it
 * in half-used 2 MiB granules, 20 MiB free on the device. */
static ga_status_t holes_and_request(const char *conf, size_t ask, void *small[80]) {
  fx_open(conf, 100 * MiB);
  for (int i = 0; i < 80; i++) small[i] = fx_alloc(MiB);
  for (int i = 0; i < 80; i += 2) fx_free(small[i]);
  void *p = NULL;
  ga_status_t st = ga_malloc(fx_a, ask, S1, &p);
  if (p) fx_free(p);
  return st;
}

Test(oom, no_hint_when_the_free_memory_is_stranded_in_partly_used_granules) {
  void *small[80];
  cr_assert_eq(holes_and_request(NULL, 30 * MiB, small), GA_ERR_OOM);
  const char *e = ga_last_error();
  cr_assert(strstr(e, "and 40.00 MiB is reserved by gardenalloc but unallocated") != NULL, "%s", e);
  cr_assert(strstr(e, "largest free block in the cache is 1024.00 KiB") != NULL, "%s", e);
  cr_assert(strstr(e, "expandable_segments") == NULL,
            "40 MiB cached in half-used granules + 20 MiB free cannot hold 30 MiB with expandable segments "
            "either: %s",
            e);
  for (int i = 1; i < 80; i += 2) fx_free(small[i]);
}

Test(oom, where_expandable_segments_fail_as_well) {
  void *small[80];
  cr_assert_eq(holes_and_request("expandable_segments:True", 30 * MiB, small), GA_ERR_OOM);
  cr_assert(strstr(ga_last_error(), "expandable_segments:True to avoid") == NULL, "%s", ga_last_error());
  for (int i = 1; i < 80; i += 2) fx_free(small[i]);
}

Test(oom, no_hint_when_the_request_exceeds_all_free_memory) {
  void *keep[8];
  fx_open(NULL, 95 * MiB);
  for (int i = 0; i < 8; i++) keep[i] = fx_alloc(9 * MiB);
  void *p;
  cr_assert_eq(ga_malloc(fx_a, 40 * MiB, S1, &p), GA_ERR_OOM); /* 8 MiB tails + 15 MiB free < 40 MiB */
  cr_assert(strstr(ga_last_error(), "expandable_segments") == NULL, "%s", ga_last_error());
  for (int i = 0; i < 8; i++) fx_free(keep[i]);
}

Test(oom, huge_requests_fail_early_with_a_clear_error) {
  fx_open(NULL, 100 * MiB);
  void *p;
  size_t sizes[] = {SIZE_MAX, SIZE_MAX - 511, ((size_t)1 << 60) + 1};
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(ga_malloc(fx_a, sizes[i], S1, &p), GA_ERR_OOM);
    cr_assert(strstr(ga_last_error(), "more than 1EB") != NULL, "%s", ga_last_error());
  }
  cr_assert_eq(ga_malloc(fx_a, (size_t)1 << 50, S1, &p), GA_ERR_OOM); /* 1 PiB: a real attempt */
  cr_assert(strstr(ga_last_error(), "Tried to allocate 1048576.00 GiB") != NULL, "%s", ga_last_error());
  assert_reserved(0);
}

Test(oom, memory_fraction_caps_reserved_memory_without_a_device_call) {
  fx_open(NULL, 1000 * MiB);
  cr_assert_eq(ga_set_memory_fraction(fx_a, 0.5), GA_OK);
  cr_assert_float_eq(ga_get_memory_fraction(fx_a), 0.5, 1e-12);
  void *a = fx_alloc(400 * MiB);
  uint64_t mallocs = fx_stats().device_calls[GA_CALL_MALLOC];
  void *p;
  cr_assert_eq(ga_malloc(fx_a, 200 * MiB, S1, &p), GA_ERR_OOM);
  assert_calls(GA_CALL_MALLOC, mallocs);
  cr_assert(strstr(ga_last_error(), "500.00 MiB allowed; Of the allocated memory 400.00 MiB") != NULL, "%s",
            ga_last_error());
  void *b = fx_alloc(100 * MiB); /* 500 exactly fits */
  cr_assert_eq(ga_set_memory_fraction(fx_a, 1.0), GA_OK);
  void *c = fx_alloc(200 * MiB);
  cr_assert_eq(ga_set_memory_fraction(fx_a, 1.5), GA_ERR_INVALID);
  cr_assert_eq(ga_set_memory_fraction(fx_a, -0.1), GA_ERR_INVALID);
  cr_assert(strstr(ga_last_error(), "invalid fraction") != NULL);
  fx_free(a);
  fx_free(b);
  fx_free(c);
}

Test(oom, fraction_from_the_config_string) {
  fx_open("per_process_memory_fraction:0.25", 1000 * MiB);
  void *p;
  cr_assert_eq(ga_malloc(fx_a, 300 * MiB, S1, &p), GA_ERR_OOM);
  p = fx_alloc(250 * MiB);
  fx_free(p);
}

/* Ages: each get_free_block call on the large pool ticks the clock. */
static void scenario_gc(void) {
  void *a100 = fx_alloc(100 * MiB), *a110 = fx_alloc(110 * MiB), *a120 = fx_alloc(120 * MiB);
  fx_free(a100);
  for (int i = 0; i < 4; i++) fx_free(fx_alloc_on(5 * MiB, S2)); /* 20 MiB segment on S2 */
  fx_free(a110);
  fx_free(a120);
  void *b = fx_alloc(130 * MiB); /* a miss */
  fx_free(b);
}

Test(oom, gc_threshold_frees_the_oldest_cached_segments) {
  fx_open("garbage_collection_threshold:0.5", 1000 * MiB);
  cr_assert_eq(ga_set_memory_fraction(fx_a, 0.5), GA_OK); /* 500 MiB allowed, GC above 250 */
  scenario_gc();
  /* 350 MiB cached > 250: ages 5 (a100), 1, 1, 1 -> average 2: only a100 goes. */
  assert_scalar(num_device_free, 1);
  assert_reserved(380 * MiB);
}

Test(oom, gc_threshold_needs_a_memory_fraction) {
  fx_open("garbage_collection_threshold:0.5", 1000 * MiB);
  scenario_gc();
  assert_scalar(num_device_free, 0);
  assert_reserved(480 * MiB);
}

/* A request the limit refuses makes no device call in either expandable
 * policy: the large pool has no segment yet, and none is reserved for it
 * (before, the default reserved one and left it empty for the next
 * ga_empty_cache to give back, and PyTorch's policy reserved twice). */
static void refused_without_a_reservation(const char *conf) {
  fx_open(conf, 1024 * MiB);
  void *s = fx_alloc(64 * 1024); /* the small pool's one 2 MiB page */
  ga_stats_t before = fx_stats();
  cr_assert_eq(before.reserved_bytes[GA_POOL_ALL].current, 2 * (int64_t)MiB);
  cr_assert_eq(ga_set_memory_fraction(fx_a, 2.0 / 1024.0), GA_OK); /* 2 MiB allowed: what is reserved */
  void *p;
  cr_assert_eq(ga_malloc(fx_a, 100 * MiB, S1, &p), GA_ERR_OOM);
  cr_assert(strstr(ga_last_error(), "2.00 MiB allowed;") != NULL, "%s", ga_last_error());
  ga_stats_t after = fx_stats();
  const int memory_calls[] = {GA_CALL_MALLOC,     GA_CALL_RESERVE, GA_CALL_CREATE,  GA_CALL_MAP,
                              GA_CALL_SET_ACCESS, GA_CALL_UNMAP,   GA_CALL_RELEASE, GA_CALL_UNRESERVE};
  for (size_t i = 0; i < sizeof memory_calls / sizeof *memory_calls; i++) {
    int k = memory_calls[i];
    cr_assert_eq(after.device_calls[k], before.device_calls[k], "device call kind %d: %llu, was %llu", k,
                 (unsigned long long)after.device_calls[k], (unsigned long long)before.device_calls[k]);
  }
  cr_assert_eq(ga_empty_cache(fx_a), GA_OK);
  cr_assert_eq(fx_stats().device_calls[GA_CALL_UNRESERVE], 0, "no empty reservation was left");
  cr_assert_eq(ga_set_memory_fraction(fx_a, 1.0), GA_OK);
  fx_free(fx_alloc(100 * MiB)); /* usable */
  fx_free(s);
}

Test(oom, a_request_the_fraction_refuses_reserves_nothing_expandable) {
  refused_without_a_reservation("expandable_segments:True");
}

Test(oom, a_request_the_fraction_refuses_reserves_nothing_with_pytorchs_policy) {
  refused_without_a_reservation("expandable_segments:True,expandable_policy:pytorch");
}

/* PyTorch's alloc_block tests the fraction on alloc_size before it grows an
 * expandable segment, even where part of the request is already mapped and
 * free: 40 MiB reserved (two 20 MiB pages, 10 MiB free after x) and 64 MiB
 * allowed refuse 30 MiB (40 + 30 > 64), which one more page would serve,
 * after release_cached_blocks (nothing to unmap: the free 10 MiB share a page
 * with x) and a retry. The default policy tests what it maps and serves it. */
static void *fraction_on_alloc_size(const char *conf, ga_status_t *st, void **p) {
  fx_open(conf, 1024 * MiB);
  void *x = fx_alloc(30 * MiB);
  assert_reserved(40 * MiB);
  if (!strstr(conf, "max_reserved_mb"))
    cr_assert_eq(ga_set_memory_fraction(fx_a, 1.0 / 16), GA_OK); /* 64 MiB */
  *p = NULL;
  *st = ga_malloc(fx_a, 30 * MiB, S1, p);
  return x;
}

Test(oom, pytorchs_policy_tests_the_fraction_on_alloc_size) {
  ga_status_t st;
  void *p, *x = fraction_on_alloc_size("expandable_segments:True,expandable_policy:pytorch", &st, &p);
  cr_assert_eq(st, GA_ERR_OOM);
  cr_assert(strstr(ga_last_error(), "64.00 MiB allowed;") != NULL, "%s", ga_last_error());
  ga_stats_t s = fx_stats();
  cr_assert_eq(s.num_alloc_retries, 1, "release_cached_blocks and alloc_block again");
  cr_assert_eq(s.device_calls[GA_CALL_CREATE], 2, "no page made for the refused request");
  cr_assert_eq(s.device_calls[GA_CALL_UNMAP], 0, "x's last page is not free");
  assert_reserved(40 * MiB);
  void *y = fx_alloc(24 * MiB); /* 40 + 24 = 64: allowed; one more page */
  assert_reserved(60 * MiB);
  fx_free(y);
  fx_free(x);
}

/* Served within the limit, tested on the pages mapped: 40 + 20 <= 64. */
static void served_on_what_it_maps(const char *conf) {
  ga_status_t st;
  void *p, *x = fraction_on_alloc_size(conf, &st, &p);
  cr_assert_eq(st, GA_OK, "%s", ga_last_error());
  cr_assert_eq(fx_stats().num_alloc_retries, 0);
  assert_reserved(60 * MiB);
  fx_free(p);
  fx_free(x);
}

Test(oom, the_default_tests_the_limit_on_what_it_maps) { served_on_what_it_maps("expandable_segments:True"); }

/* Past alloc_size's test PyTorch's policy maps whole pages, as PyTorch's
 * ExpandableSegment::map does, even past the fraction: with 40 MiB reserved
 * and 50 allowed, a 10 MiB request (alloc_size 10 MiB) maps a 20 MiB page,
 * and reserved is then 60 MiB. The default policy maps granules, each within
 * the fraction: the same request takes 10 MiB, and reserved is 50. Then
 * neither grows any more. */
static void pages_and_the_fraction(const char *conf, size_t reserved) {
  fx_open(conf, 1024 * MiB);
  void *x = fx_alloc(40 * MiB); /* two whole pages */
  assert_reserved(40 * MiB);
  cr_assert_eq(ga_set_memory_fraction(fx_a, 50.0 / 1024), GA_OK);
  void *p = fx_alloc(10 * MiB);
  assert_reserved(reserved);
  void *q;
  cr_assert_eq(ga_malloc(fx_a, 12 * MiB, S1, &q), GA_ERR_OOM, "past the fraction nothing grows");
  cr_assert(strstr(ga_last_error(), "50.00 MiB allowed;") != NULL, "%s", ga_last_error());
  assert_reserved(reserved);
  fx_free(p);
  fx_free(x);
}

Test(oom, pytorchs_policy_maps_whole_pages_past_the_fraction) {
  pages_and_the_fraction("expandable_segments:True,expandable_policy:pytorch", 60 * MiB);
}

Test(oom, the_default_maps_granules_within_the_fraction) {
  pages_and_the_fraction("expandable_segments:True", 50 * MiB);
}

/* The budget is gardenalloc's, not PyTorch's alloc_block test: PyTorch's
 * policy too tests it on the pages it creates. */
Test(oom, pytorchs_policy_tests_the_budget_on_what_it_maps) {
  served_on_what_it_maps("max_reserved_mb:64,expandable_segments:True,expandable_policy:pytorch");
}
