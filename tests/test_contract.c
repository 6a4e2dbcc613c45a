/* test_contract.c — one contract, two segment kinds: every behaviour here
 * must hold for native segments and for expandable segments alike. */
#include <stdlib.h>

#include "fixture.h"
#include "threads_work.h"

#define CONTRACT(name)                                                  \
  static void name(void);                                               \
  Test(contract_native, name, .fini = fx_close) {                       \
    fx_open("expandable_segments:False", GiB);                          \
    name();                                                             \
  }                                                                     \
  Test(contract_expandable, name, .fini = fx_close) {                   \
    fx_open("expandable_segments:True,expandable_page_size_mb:2", GiB); \
    name();                                                             \
  }                                                                     \
  static void name(void)

CONTRACT(contents_survive_until_the_free) {
  size_t sizes[] = {1, 511, 512, 4097, MiB - 1, MiB, MiB + 1, 3 * MiB + 7, 10 * MiB, 21 * MiB + 3};
  enum { N = sizeof sizes / sizeof sizes[0] };
  char *p[N];
  for (int i = 0; i < N; i++) {
    p[i] = fx_alloc(sizes[i]);
    cr_assert_eq((uintptr_t)p[i] % 512, 0, "512-byte aligned");
    fx_fill(p[i], sizes[i], (unsigned)i);
  }
  for (int i = 0; i < N; i++) {
    cr_assert(fx_verify(p[i], sizes[i], (unsigned)i), "block %d", i);
    for (int j = 0; j < N; j++)
      if (i != j)
        cr_assert(p[i] + sizes[i] <= p[j] || p[j] + sizes[j] <= p[i], "blocks %d and %d overlap", i, j);
  }
  for (int i = 0; i < N; i++) fx_free(p[i]);
}

CONTRACT(a_freed_block_is_reused_at_once_on_its_stream) {
  void *keep = fx_alloc(3 * MiB);
  void *p = fx_alloc(5 * MiB);
  fx_free(p);
  cr_assert_eq(fx_alloc(5 * MiB), p);
  fx_free(p);
  fx_free(keep);
}

CONTRACT(no_reuse_for_another_stream_until_its_events_complete) {
  fx_hold(S2, 1);
  void *p = fx_alloc_on(6 * MiB, S1);
  ga_record_stream(fx_a, p, S2);
  fx_free(p);
  void *q = fx_alloc_on(6 * MiB, S1);
  cr_assert_neq(q, p);
  fx_hold(S2, 0);
  void *r = fx_alloc_on(6 * MiB, S1);
  cr_assert_eq(r, p);
  fx_free(q);
  fx_free(r);
}

CONTRACT(bad_pointers_are_named_and_change_nothing) {
  char *p = fx_alloc(4 * MiB);
  ga_stats_t before = fx_stats();
  int x;
  cr_assert_eq(ga_free(fx_a, &x), GA_ERR_BAD_POINTER);
  cr_assert(strstr(ga_last_error(), "not allocated by this allocator") != NULL, "%s", ga_last_error());
  cr_assert_eq(ga_free(fx_a, p + 512), GA_ERR_BAD_POINTER);
  cr_assert(strstr(ga_last_error(), "inside the allocation") != NULL, "%s", ga_last_error());
  fx_free(p);
  cr_assert_eq(ga_free(fx_a, p), GA_ERR_BAD_POINTER);
  cr_assert(strstr(ga_last_error(), "already freed") != NULL, "%s", ga_last_error());
  ga_stats_t after = fx_stats();
  cr_assert_eq(after.reserved_bytes[0].current, before.reserved_bytes[0].current);
  cr_assert_eq(ga_check(fx_a), 0);
}

CONTRACT(size_zero_and_impossible_sizes) {
  void *p = (void *)1;
  cr_assert_eq(ga_malloc(fx_a, 0, S1, &p), GA_OK);
  cr_assert_null(p);
  cr_assert_eq(ga_malloc(fx_a, SIZE_MAX, S1, &p), GA_ERR_OOM);
  cr_assert_eq(ga_malloc(fx_a, (size_t)1 << 40, S1, &p), GA_ERR_OOM);
  cr_assert(strstr(ga_last_error(), "CUDA out of memory. Tried to allocate") != NULL, "%s", ga_last_error());
  assert_reserved(0);
}

CONTRACT(a_true_oom_reports_and_the_allocator_stays_usable) {
  void *a = fx_alloc(400 * MiB), *b = fx_alloc(400 * MiB), *p;
  cr_assert_eq(ga_malloc(fx_a, 400 * MiB, S1, &p), GA_ERR_OOM);
  const char *e = ga_last_error();
  cr_assert(strstr(e, "GPU 0 has a total capacity of 1024.00 MiB") &&
                strstr(e, "800.00 MiB is allocated by gardenalloc"),
            "%s", e);
  assert_scalar(num_ooms, 1);
  cr_assert_eq(ga_check(fx_a), 0);
  fx_free(b);
  p = fx_alloc(400 * MiB);
  fx_free(p);
  fx_free(a);
}

CONTRACT(memory_cached_for_another_stream_serves_a_request_when_needed) {
  void *a = fx_alloc_on(400 * MiB, S1), *b = fx_alloc_on(400 * MiB, S2);
  fx_free(a);
  fx_free(b);
  ga_stream_t s3 = S3;
  void *c = fx_alloc_on(600 * MiB, s3); /* only fits if the cache gives memory back or moves it */
  assert_scalar(num_ooms, 0);
  fx_free(c);
}

CONTRACT(the_memory_fraction_caps_reserved_memory) {
  cr_assert_eq(ga_set_memory_fraction(fx_a, 0.25), GA_OK);
  void *a = fx_alloc(240 * MiB), *p;
  cr_assert_eq(ga_malloc(fx_a, 20 * MiB, S1, &p), GA_ERR_OOM);
  cr_assert(strstr(ga_last_error(), "256.00 MiB allowed;") != NULL, "%s", ga_last_error());
  ga_stats_t stats = fx_stats();
  cr_assert_leq(stats.reserved_bytes[0].peak, 256 * MiB);
  fx_free(a);
}

CONTRACT(statistics_keep_their_order_through_random_work) {
  unsigned seed = 7;
  void *live[32] = {0};
  for (int step = 0; step < 1500; step++) {
    int i = rand_r(&seed) % 32;
    if (live[i]) {
      if (rand_r(&seed) % 4 == 0) ga_record_stream(fx_a, live[i], S2);
      fx_free(live[i]);
      live[i] = NULL;
    } else {
      size_t n = rand_r(&seed) % 3 ? 1 + (size_t)rand_r(&seed) % MiB : 1 + (size_t)rand_r(&seed) % (12 * MiB);
      if (ga_malloc(fx_a, n, rand_r(&seed) % 2 ? S1 : S2, &live[i]) != GA_OK) live[i] = NULL;
    }
    if (step % 300 == 299) ga_empty_cache(fx_a);
    ga_stats_t stats = fx_stats();
    cr_assert_leq(stats.allocated_bytes[0].current, stats.active_bytes[0].current);
    cr_assert_leq(stats.requested_bytes[0].current, stats.active_bytes[0].current);
    cr_assert_leq(stats.active_bytes[0].current, stats.reserved_bytes[0].current);
    if (step % 250 == 0) cr_assert_eq(ga_check(fx_a), 0, "step %d", step);
  }
  for (int i = 0; i < 32; i++)
    if (live[i]) fx_free(live[i]);
}

CONTRACT(threads_allocate_and_free_with_content_checks) {
  tw_a = fx_a;
  tw_dev = fx_dev;
  tw_stream_of = fx_stream;
  for (int k = 1; k < 8; k++) (void)tw_stream(k); /* made here, not racing in the workers */
  pthread_t t[4];
  worker w[4];
  for (int i = 0; i < 4; i++) {
    w[i] = (worker){.id = i};
    pthread_create(&t[i], NULL, work, &w[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    cr_assert_eq(w[i].errors, 0, "thread %d", i);
  }
}
