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
  cr_assert_eq(ga_enable_peer_access(a, 5), GA_ERR_INVALID, "no device 5 on this machine");
  cr_assert(strstr(ga_last_error(), "5 is not a peer of device 0") && strstr(ga_last_error(), "0 to 1"), "%s",
            ga_last_error());
  cr_assert_eq(access_of(a, p), 3u, "a refused peer leaves access as it was");
  ga_stats_t stats;
  ga_stats(a, &stats);
  cr_assert_gt(stats.device_calls[GA_CALL_SET_ACCESS], 0);
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

/* A peer ordinal is checked against the machine's devices when it is given:
 * before anything is mapped, an unknown device used to be accepted, and then
 * every expandable allocation failed (the driver refused the grant of each
 * new page) with no way to take the peer back. */
Test(devices, a_device_the_machine_does_not_have_is_refused_at_the_call) {
  fx_open_on(1, "expandable_segments:True,expandable_page_size_mb:2", 256 * MiB);
  static const int bad[] = {5, 1, -1, 64, 1000, INT32_MIN, INT32_MAX, 0};
  uint64_t grants = fx_calls(GA_CALL_SET_ACCESS);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_eq(ga_enable_peer_access(fx_a, bad[i]), GA_ERR_INVALID, "peer %d accepted", bad[i]);
    cr_assert(strstr(ga_last_error(), "is not a peer of device 0") && strstr(ga_last_error(), "0 to 0"), "%s",
              ga_last_error());
  }
  cr_assert_eq(fx_calls(GA_CALL_SET_ACCESS), grants, "refused without a driver call");
  for (int i = 0; i < 4; i++) {
    char *p = fx_alloc((size_t)(i + 1) * 3 * MiB);
    uint64_t mask = 0;
    cr_assert_eq(fx_access(p, &mask), 0);
    cr_assert_eq(mask, 1u);
    fx_free(p);
  }
}

/* The driver refuses a peer in a grant's argument list (CUDA_ERROR_INVALID_DEVICE:
 * a device without peer-to-peer access to this one, say) when it first sees
 * it; with nothing mapped that is the next allocation's grant. That
 * allocation fails and says so, the peer is turned off, and the allocator
 * goes on working without it: one refused peer never makes every later
 * allocation fail. */
static void refuse_next_grant(void) {
#ifdef GA_HAVE_CUDA
  if (fx_on_cuda()) {
    FX_CU_OK(fx_cu.cudadouble_inject("cuMemSetAccess", 1, CUDA_ERROR_INVALID_DEVICE, 0));
    return;
  }
#endif
  cr_assert_eq(ga_sim_inject(fx_dev, GA_CALL_SET_ACCESS, 1, GA_DEV_EINVAL, 0), 0);
}

Test(devices, a_peer_the_driver_refuses_later_is_turned_off) {
  fx_open_on(2, "expandable_segments:True,expandable_page_size_mb:2", 256 * MiB);
  cr_assert_eq(ga_enable_peer_access(fx_a, 1), GA_OK, "%s", ga_last_error());
  refuse_next_grant();
  void *p = NULL;
  cr_assert_eq(ga_malloc(fx_a, 5 * MiB, S1, &p), GA_ERR_DEVICE);
  cr_assert(strstr(ga_last_error(), "the access of device 1, enabled while nothing was mapped, is refused"),
            "%s", ga_last_error());
  cr_assert_eq(ga_check(fx_a), 0);
  uint64_t mask = 0;
  for (int i = 0; i < 3; i++) {
    char *q = fx_alloc(5 * MiB);
    cr_assert_eq(fx_access(q + 4 * MiB, &mask), 0);
    cr_assert_eq(mask, 1u, "device 0 only: the peer is off");
    fx_fill(q, 5 * MiB, (unsigned)i);
    cr_assert(fx_verify(q, 5 * MiB, (unsigned)i));
    fx_free(q);
  }
  /* Asked again with memory mapped, the grant is tried at once (and works). */
  char *r = fx_alloc(5 * MiB);
  cr_assert_eq(ga_enable_peer_access(fx_a, 1), GA_OK, "%s", ga_last_error());
  cr_assert_eq(fx_access(r, &mask), 0);
  cr_assert_eq(mask, 3u);
  /* Once granted on real memory, a failing grant is an error of that call
   * only: the peer stays. */
  fx_inject(GA_CALL_SET_ACCESS, 1, GA_DEV_EDRIVER, 0);
  cr_assert_eq(ga_malloc(fx_a, 9 * MiB, S2, &p), GA_ERR_DEVICE);
  char *t = fx_alloc_on(9 * MiB, S2);
  cr_assert_eq(fx_access(t + 8 * MiB, &mask), 0);
  cr_assert_eq(mask, 3u, "the peer keeps its access");
  fx_free(t);
  fx_free(r);
}

/* A grant left pending (granting a new page failed and so did taking it
 * back), then allocations go to sleep: the pending grant covers what is
 * mapped, so the next allocation works, and the error named the first
 * failure (the grant) before the second (the unmap). */
Test(devices, a_pending_grant_then_a_sleep_blocks_nothing) {
  fx_open_on(2, "expandable_segments:True,expandable_page_size_mb:2", 256 * MiB);
  char *kv = fx_alloc(8 * MiB);
  cr_assert_eq(ga_tag(fx_a, kv, "kv"), GA_OK);
  fx_fill(kv, 8 * MiB, 4);
  cr_assert_eq(ga_enable_peer_access(fx_a, 1), GA_OK, "%s", ga_last_error());
  fx_inject(GA_CALL_SET_ACCESS, 1, GA_DEV_EDRIVER, 0);
  fx_inject(GA_CALL_UNMAP, 1, GA_DEV_EDRIVER, 0);
  void *p = NULL;
  cr_assert_eq(ga_malloc(fx_a, 6 * MiB, S1, &p), GA_ERR_DEVICE);
  const char *e = ga_last_error(), *grant = strstr(e, fx_call_name(GA_CALL_SET_ACCESS)),
             *unmap = strstr(e, fx_call_name(GA_CALL_UNMAP));
  cr_assert(grant && unmap && grant < unmap, "the first cause first: %s", e);
  cr_assert(fx_a->space.regrant, "a grant is pending");
  cr_assert_eq(ga_sleep(fx_a, "kv", GA_SLEEP_OFFLOAD), GA_OK, "%s", ga_last_error());
  cr_assert_gt(fx_stats().asleep_granules, 0);
  char *q = fx_alloc(6 * MiB); /* not blocked by the pending grant */
  uint64_t mask = 0;
  for (size_t off = 0; off < 6 * MiB; off += 2 * MiB) {
    cr_assert_eq(fx_access(q + off, &mask), 0);
    cr_assert_eq(mask, 3u);
  }
  cr_assert_eq(fx_a->space.regrant, 0);
  cr_assert_eq(ga_wake(fx_a), GA_OK, "%s", ga_last_error());
  cr_assert(fx_verify(kv, 8 * MiB, 4));
  cr_assert_eq(fx_access(kv, &mask), 0);
  cr_assert_eq(mask, 3u, "woken pages: both devices");
  fx_free(q);
  fx_free(kv);
}
