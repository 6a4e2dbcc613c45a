/* test_faults.c — a device call failing at any point of a scenario leaves no
 * leak and a consistent, usable allocator. */
#include "fixture.h"

TestSuite(faults, .fini = fx_close);

/* A scenario touching every device call native mode makes: segments of both
 * pools, cross-stream events, the retry ladder, empty_cache. */
static int scenario(void) {
  void *p[8] = {0};
  int failures = 0;
  size_t sizes[8] = {MiB / 2, 3 * MiB, 30 * MiB, 100, 12 * MiB, 60 * MiB, 5 * MiB, 70 * MiB};
  for (int i = 0; i < 8; i++) {
    if (ga_malloc(fx_a, sizes[i], i % 2 ? S1 : S2, &p[i]) != GA_OK) {
      failures++;
      cr_assert_null(p[i]);
      cr_assert(ga_last_error()[0] != 0);
    } else {
      fx_fill(p[i], sizes[i] < 4096 ? sizes[i] : 4096, (unsigned)i);
    }
    cr_assert_eq(ga_check(fx_a), 0, "after malloc %d", i);
    if (i == 3 && p[2]) {
      ga_record_stream(fx_a, p[2], S1);
      fx_free(p[2]);
      p[2] = NULL;
    }
  }
  void *huge = NULL; /* a true OOM: the whole ladder and the report */
  ga_status_t st = ga_malloc(fx_a, GiB, S1, &huge);
  cr_assert(st == GA_ERR_OOM || st == GA_ERR_DEVICE, "%s", ga_status_str(st));
  cr_assert_eq(ga_check(fx_a), 0);
  for (int i = 0; i < 8; i++) {
    if (!p[i]) continue;
    cr_assert(fx_verify(p[i], sizes[i] < 4096 ? sizes[i] : 4096, (unsigned)i), "contents of block %d", i);
    if (i % 3 == 0) ga_record_stream(fx_a, p[i], S1);
    fx_free(p[i]);
  }
  if (ga_empty_cache(fx_a) != GA_OK) failures++;
  cr_assert_eq(ga_check(fx_a), 0);
  return failures;
}

static void fail_each_position(ga_device_call_t kind, int err) {
  fx_fault_sweep(NULL, 256 * MiB, kind, err, scenario);
}

Test(faults, failing_malloc_out_of_memory) { fail_each_position(GA_CALL_MALLOC, GA_DEV_EOOM); }
Test(faults, failing_malloc_driver_error) { fail_each_position(GA_CALL_MALLOC, GA_DEV_EDRIVER); }
Test(faults, failing_free) { fail_each_position(GA_CALL_FREE, GA_DEV_EDRIVER); }
Test(faults, failing_event_create) { fail_each_position(GA_CALL_EVENT_CREATE, GA_DEV_EDRIVER); }
Test(faults, failing_event_record) { fail_each_position(GA_CALL_EVENT_RECORD, GA_DEV_EDRIVER); }
Test(faults, failing_event_query) { fail_each_position(GA_CALL_EVENT_QUERY, GA_DEV_EDRIVER); }
Test(faults, failing_event_synchronize) { fail_each_position(GA_CALL_EVENT_SYNCHRONIZE, GA_DEV_EDRIVER); }
Test(faults, failing_mem_info) { fail_each_position(GA_CALL_MEM_INFO, GA_DEV_EDRIVER); }

Test(faults, a_driver_error_is_named_in_the_error) {
  fx_open(NULL, GiB);
  fx_inject(GA_CALL_MALLOC, 1, GA_DEV_EDRIVER, 0);
  void *p;
  cr_assert_eq(ga_malloc(fx_a, MiB, S1, &p), GA_ERR_DEVICE);
  cr_assert(fx_error_names(GA_CALL_MALLOC, "CUDA_ERROR_UNKNOWN"), "%s", ga_last_error());
  assert_scalar(num_ooms, 0);
}

Test(faults, a_failing_device_free_keeps_the_block_cached) {
  fx_open(NULL, GiB);
  void *p = fx_alloc(30 * MiB);
  fx_free(p);
  fx_inject(GA_CALL_FREE, 1, GA_DEV_EDRIVER, 0);
  cr_assert_eq(ga_empty_cache(fx_a), GA_ERR_DEVICE);
  cr_assert(fx_error_names(GA_CALL_FREE, "CUDA_ERROR_UNKNOWN"), "%s", ga_last_error());
  assert_reserved(30 * MiB);
  cr_assert_eq(fx_alloc(30 * MiB), p, "the block is still cached and reusable");
  fx_free(p);
}

Test(faults, device_oom_everywhere_is_an_oom_report) {
  fx_open(NULL, GiB);
  fx_inject(GA_CALL_MALLOC, 1, GA_DEV_EOOM, 1);
  void *p;
  cr_assert_eq(ga_malloc(fx_a, MiB, S1, &p), GA_ERR_OOM);
  cr_assert(strstr(ga_last_error(), "CUDA out of memory. Tried to allocate 2.00 MiB") != NULL, "%s",
            ga_last_error());
  assert_scalar(num_ooms, 1);
  fx_clear_faults();
  fx_free(fx_alloc(MiB));
}
