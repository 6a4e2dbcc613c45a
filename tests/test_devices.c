/* test_devices.c — one allocator per device on a simulated machine with two
 * devices, and peer access to expandable memory. */
#include "fixture.h"

#define TWO fx_machine_conf(2, 256)

TestSuite(devices, .fini = fx_close);

/* conf followed by more options. */
static const char *with(const char *conf, const char *more) {
  static char buf[256];
  snprintf(buf, sizeof buf, "%s,%s", conf, more);
  return buf;
}

Test(devices, one_allocator_per_device_each_with_its_own_memory) {
  ga_allocator_t *a0, *a1, *a2 = NULL;
  cr_assert_eq(ga_create(TWO, 0, &a0), GA_OK, "%s", ga_last_error());
  cr_assert_eq(ga_create(TWO, 1, &a1), GA_OK, "%s", ga_last_error());
  cr_assert_eq(ga_create(TWO, 2, &a2), GA_ERR_NO_BACKEND);
  cr_assert(strstr(ga_last_error(), "device 2 does not exist") != NULL, "%s", ga_last_error());
  void *p, *q, *r;
  cr_assert_eq(ga_malloc(a0, 200 * MiB, S1, &p), GA_OK);
  cr_assert_eq(ga_malloc(a1, 200 * MiB, S1, &q), GA_OK, "device 1 has its own 256 MiB");
  cr_assert_eq(ga_malloc(a0, 100 * MiB, S1, &r), GA_ERR_OOM);
  cr_assert(strstr(ga_last_error(), "GPU 0 has a total capacity") != NULL, "%s", ga_last_error());
  ga_free(a1, q);
  cr_assert_eq(ga_malloc(a1, 100 * MiB, S1, &r), GA_OK);
  cr_assert_eq(ga_free(a0, r), GA_ERR_BAD_POINTER, "device 1's pointer is not device 0's");
  ga_stats_t s0, s1;
  ga_stats(a0, &s0);
  ga_stats(a1, &s1);
  cr_assert_eq(s0.allocated_bytes[GA_POOL_ALL].current, 200 * MiB);
  cr_assert_eq(s1.allocated_bytes[GA_POOL_ALL].current, 100 * MiB);
  cr_assert_eq(ga_check(a0) + ga_check(a1), 0);
  ga_destroy(a0);
  ga_destroy(a1);
}

static uint64_t access_of(ga_allocator_t *a, void *p) {
  uint64_t mask = 0;
  cr_assert_eq(fx_access_on(ga_allocator_device(a), p, &mask), 0);
  return mask;
}

Test(devices, peers_get_access_to_expandable_memory_now_and_later) {
  ga_allocator_t *a;
  cr_assert_eq(ga_create(with(TWO, "expandable_segments:True,expandable_page_size_mb:2"), 0, &a), GA_OK, "%s",
               ga_last_error());
  char *p;
  cr_assert_eq(ga_malloc(a, 5 * MiB, S1, (void **)&p), GA_OK);
  cr_assert_eq(access_of(a, p), 1u, "only device 0 at first");
  cr_assert_eq(ga_enable_peer_access(a, 1), GA_OK, "%s", ga_last_error());
  cr_assert_eq(access_of(a, p), 3u);
  cr_assert_eq(access_of(a, p + 4 * MiB), 3u, "every granule of the range");
  char *q;
  cr_assert_eq(ga_malloc(a, 9 * MiB, S2, (void **)&q), GA_OK);
  cr_assert_eq(access_of(a, q + 8 * MiB), 3u, "pages mapped later too");
  cr_assert_eq(ga_enable_peer_access(a, 1), GA_OK, "twice is fine");
  cr_assert_eq(ga_enable_peer_access(a, 0), GA_ERR_INVALID, "not its own peer");
  fx_refusals_expected(1); /* the driver refuses the unknown device */
  cr_assert_eq(ga_enable_peer_access(a, 5), GA_ERR_DEVICE, "no device 5 on this machine");
  cr_assert(fx_error_names(GA_CALL_SET_ACCESS, "CUDA_ERROR_INVALID_DEVICE"), "%s", ga_last_error());
  cr_assert_eq(access_of(a, p), 3u, "a refused peer leaves access as it was");
  ga_stats_t s;
  ga_stats(a, &s);
  cr_assert_gt(s.device_calls[GA_CALL_SET_ACCESS], 0);
  ga_free(a, p);
  ga_free(a, q);
  cr_assert_eq(ga_check(a), 0);
  ga_destroy(a);
}

/* A page that peers cannot see is never handed out: when granting a new
 * page fails it is taken back, and when even that fails it is granted again
 * before the next allocation. */
Test(devices, a_failed_grant_never_hands_out_memory_peers_cannot_see) {
  ga_allocator_t *a;
  cr_assert_eq(ga_create(with(TWO, "expandable_segments:True,expandable_page_size_mb:2"), 0, &a), GA_OK, "%s",
               ga_last_error());
  ga_device *d = ga_allocator_device(a);
  cr_assert_eq(ga_enable_peer_access(a, 1), GA_OK, "%s", ga_last_error());
  char *p, *q;
  fx_inject_on(d, GA_CALL_SET_ACCESS, 1, GA_DEV_EDRIVER, 0);
  cr_assert_eq(ga_malloc(a, 3 * MiB, S1, (void **)&p), GA_ERR_DEVICE);
  cr_assert_eq(ga_check(a), 0);
  cr_assert_eq(ga_malloc(a, 3 * MiB, S1, (void **)&p), GA_OK, "%s", ga_last_error());
  cr_assert_eq(access_of(a, p), 3u);
  cr_assert_eq(access_of(a, p + 3 * MiB - 1), 3u);
  /* Granting fails and so does taking the page back: it stays mapped. */
  fx_inject_on(d, GA_CALL_SET_ACCESS, 1, GA_DEV_EDRIVER, 0);
  fx_inject_on(d, GA_CALL_UNMAP, 1, GA_DEV_EDRIVER, 0);
  cr_assert_eq(ga_malloc(a, 6 * MiB, S1, (void **)&q), GA_ERR_DEVICE);
  cr_assert_eq(ga_check(a), 0);
  cr_assert_eq(ga_malloc(a, 6 * MiB, S1, (void **)&q), GA_OK, "%s", ga_last_error());
  for (size_t off = 0; off < 6 * MiB; off += 2 * MiB)
    cr_assert_eq(access_of(a, q + off), 3u, "granule at +%zu MiB", off >> 20);
  ga_free(a, p);
  ga_free(a, q);
  cr_assert_eq(ga_check(a), 0);
  ga_destroy(a);
}
