/* test_badinput.c — every bad input gets a clear error and changes nothing. */
#include <stdlib.h>

#include "fixture.h"

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
      {"no_such_key:1", "no_such_key", "allowed: backend"},
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

Test(badinput, a_bad_config_from_the_environment_is_refused) {
  setenv("GARDENALLOC_CONF", "max_split_size_mb:1", 1);
  ga_allocator_t *a = NULL;
  cr_assert_eq(ga_create(NULL, 0, &a), GA_ERR_CONFIG);
  cr_assert(strstr(ga_last_error(), "max_split_size_mb") != NULL);
  setenv("GARDENALLOC_CONF", "backend:sim,sim_capacity_mb:64,max_split_size_mb:32", 1);
  cr_assert_eq(ga_create(NULL, 0, &a), GA_OK, "%s", ga_last_error());
  cr_assert_str_eq(ga_backend_name(a), "sim");
  ga_stats_t s;
  ga_stats(a, &s);
  cr_assert_eq(s.max_split_size, 32 * MiB);
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
