/* test_sleep.c — ga_sleep / ga_wake: memory goes back to the device, virtual
 * addresses stay, offloaded contents come back byte for byte. */
#include <stdio.h>
#include <stdlib.h>

#include "fixture.h"

TestSuite(sleep, .fini = fx_close);

#define EXP2 "expandable_segments:True,expandable_page_size_mb:2"

static size_t device_free(void) {
  size_t f = 0;
  cr_assert_eq(ga_mem_get_info(fx_a, &f, NULL), GA_OK);
  return f;
}

Test(sleep, offloaded_allocations_come_back_at_the_same_addresses) {
  fx_open(EXP2, 256 * MiB);
  char *w = fx_alloc(20 * MiB), *kv = fx_alloc(30 * MiB), *other = fx_alloc(3 * MiB);
  cr_assert_eq(ga_tag(fx_a, w, "weights"), GA_OK);
  cr_assert_eq(ga_tag(fx_a, kv, "kv_cache"), GA_OK);
  fx_fill(w, 20 * MiB, 1);
  fx_fill(other, 3 * MiB, 3);
  size_t before = device_free();
  cr_assert_eq(ga_sleep(fx_a, "weights", GA_SLEEP_OFFLOAD), GA_OK, "%s", ga_last_error());
  cr_assert_eq(ga_sleep(fx_a, "kv_cache", 0), GA_OK, "%s", ga_last_error());
  /* weights: 10 whole pages; kv_cache: 15 (the page it shares with `other` stays). */
  cr_assert_eq(device_free() - before, 50 * MiB, "%zu MiB given back", (device_free() - before) >> 20);
  cr_assert_eq(fx_stats().asleep_granules, 25);
  cr_assert_eq(ga_check(fx_a), 0);
  cr_assert_eq(ga_free(fx_a, w), GA_ERR_INVALID);
  cr_assert(strstr(ga_last_error(), "is asleep") != NULL, "%s", ga_last_error());
  cr_assert(fx_verify(other, 3 * MiB, 3), "untagged memory stays");
  char *x = fx_alloc(8 * MiB); /* the allocator keeps working */
  memset(x, 1, 8 * MiB);
  fx_free(x);
  cr_assert_eq(ga_wake(fx_a), GA_OK, "%s", ga_last_error());
  cr_assert_eq(fx_stats().asleep_granules, 0);
  cr_assert(fx_verify(w, 20 * MiB, 1), "weights restored byte for byte at the same address");
  memset(kv, 7, 30 * MiB); /* discarded, but mapped again */
  cr_assert(fx_verify(other, 3 * MiB, 3));
  fx_free(w);
  fx_free(kv);
  fx_free(other);
}

/* A tag belongs to one allocation: memory freed and handed out again (the
 * same address, the same block record) starts untagged, so a later sleep
 * does not take it. */
Test(sleep, a_tag_ends_with_its_allocation) {
  fx_open(EXP2, 256 * MiB);
  char *kv = fx_alloc(8 * MiB);
  cr_assert_eq(ga_tag(fx_a, kv, "kv_cache"), GA_OK);
  fx_free(kv);
  char *again = fx_alloc(8 * MiB);
  cr_assert_eq(again, kv, "the same memory is reused");
  fx_fill(again, 8 * MiB, 5);
  cr_assert_eq(ga_sleep(fx_a, "kv_cache", 0), GA_OK, "%s", ga_last_error());
  cr_assert_eq(fx_stats().asleep_granules, 0, "nothing tagged kv_cache is live");
  cr_assert(fx_verify(again, 8 * MiB, 5));
  cr_assert_eq(ga_wake(fx_a), GA_OK);
  fx_free(again);
}

Test(sleep, wake_without_memory_reports_and_can_be_retried) {
  fx_open(EXP2, 64 * MiB);
  char *w = fx_alloc(30 * MiB);
  ga_tag(fx_a, w, "weights");
  fx_fill(w, 30 * MiB, 5);
  cr_assert_eq(ga_sleep(fx_a, "weights", GA_SLEEP_OFFLOAD), GA_OK);
  char *filler = fx_alloc(50 * MiB); /* takes the memory the weights gave back */
  cr_assert_eq(ga_wake(fx_a), GA_ERR_OOM);
  cr_assert(strstr(ga_last_error(), "ga_wake:") && strstr(ga_last_error(), "still asleep") &&
                strstr(ga_last_error(), "CUDA out of memory"),
            "%s", ga_last_error());
  cr_assert_eq(ga_check(fx_a), 0);
  cr_assert_gt(fx_stats().asleep_granules, 0);
  fx_free(filler);
  cr_assert_eq(ga_wake(fx_a), GA_OK, "%s", ga_last_error());
  cr_assert(fx_verify(w, 30 * MiB, 5));
  fx_free(w);
}

Test(sleep, native_mode_releases_the_cache_only) {
  fx_open(NULL, 256 * MiB);
  void *a = fx_alloc(30 * MiB), *b = fx_alloc(40 * MiB);
  ga_tag(fx_a, a, "weights");
  fx_free(b);
  cr_assert_eq(ga_sleep(fx_a, "weights", 0), GA_ERR_UNSUPPORTED);
  cr_assert(strstr(ga_last_error(), "expandable_segments:True") != NULL, "%s", ga_last_error());
  cr_assert_eq(ga_sleep(fx_a, NULL, 0), GA_OK);
  assert_reserved(30 * MiB);
  cr_assert_eq(ga_wake(fx_a), GA_OK, "nothing sleeps");
  fx_free(a);
}

Test(sleep, a_failing_copy_leaves_a_consistent_allocator) {
  fx_open(EXP2, 256 * MiB);
  char *w = fx_alloc(12 * MiB);
  ga_tag(fx_a, w, "weights");
  fx_fill(w, 12 * MiB, 9);
  fx_inject(GA_CALL_COPY, 3, GA_DEV_EDRIVER, 0); /* the third page's copy fails */
  cr_assert_eq(ga_sleep(fx_a, "weights", GA_SLEEP_OFFLOAD), GA_ERR_DEVICE);
  cr_assert(strstr(ga_last_error(), "2 granules sleep") != NULL, "%s", ga_last_error());
  cr_assert_eq(ga_check(fx_a), 0);
  cr_assert_eq(ga_wake(fx_a), GA_OK, "%s", ga_last_error());
  cr_assert(fx_verify(w, 12 * MiB, 9), "nothing lost");
  fx_free(w);
}

/* A wake whose copy fails and whose undo (the unmap) fails too keeps the
 * offloaded contents and copies them in at the next wake. */
Test(sleep, a_wake_that_cannot_undo_keeps_the_contents_for_the_next) {
  fx_open(EXP2, 256 * MiB);
  char *w = fx_alloc(6 * MiB);
  ga_tag(fx_a, w, "weights");
  fx_fill(w, 6 * MiB, 4);
  cr_assert_eq(ga_sleep(fx_a, "weights", GA_SLEEP_OFFLOAD), GA_OK, "%s", ga_last_error());
  cr_assert_eq(fx_stats().asleep_granules, 3);
  fx_inject(GA_CALL_COPY, 1, GA_DEV_EDRIVER, 0);
  fx_inject(GA_CALL_UNMAP, 1, GA_DEV_EDRIVER, 0);
  cr_assert_eq(ga_wake(fx_a), GA_ERR_DEVICE);
  cr_assert(strstr(ga_last_error(), "6.00 MiB still asleep") != NULL, "%s", ga_last_error());
  cr_assert_eq(ga_check(fx_a), 0);
  cr_assert_eq(ga_free(fx_a, w), GA_ERR_INVALID, "still asleep: not freed");
  fx_inject(GA_CALL_COPY, 1, GA_DEV_EDRIVER, 0);
  cr_assert_eq(ga_wake(fx_a), GA_ERR_DEVICE, "the restore itself can fail again");
  cr_assert_eq(ga_check(fx_a), 0);
  cr_assert_eq(ga_wake(fx_a), GA_OK, "%s", ga_last_error());
  cr_assert_eq(fx_stats().asleep_granules, 0);
  cr_assert(fx_verify(w, 6 * MiB, 4), "every byte came back");
  fx_free(w);
}

Test(sleep, tags_are_checked) {
  fx_open(EXP2, 256 * MiB);
  void *p = fx_alloc(MiB);
  int x;
  cr_assert_eq(ga_tag(fx_a, &x, "weights"), GA_ERR_BAD_POINTER);
  cr_assert_eq(ga_tag(fx_a, p, "a-tag-name-that-is-far-too-long-to-keep"), GA_ERR_INVALID);
  char name[8];
  for (int i = 0; i < 32; i++) {
    snprintf(name, sizeof name, "t%d", i);
    cr_assert_eq(ga_tag(fx_a, p, name), GA_OK, "%s: %s", name, ga_last_error());
  }
  cr_assert_eq(ga_tag(fx_a, p, "one-more"), GA_ERR_INVALID);
  cr_assert_eq(ga_tag(fx_a, p, NULL), GA_OK, "removing a tag");
  fx_free(p);
}

/* Peer access turned on while allocations sleep: the awake pages are
 * granted now, the asleep ones when they wake (granting an unmapped range is
 * refused by the driver). */
Test(sleep, peer_access_turned_on_while_pages_sleep) {
  fx_open_on(2, EXP2, 256 * MiB);
  char *w = fx_alloc(8 * MiB), *other = fx_alloc(3 * MiB);
  cr_assert_eq(ga_tag(fx_a, w, "weights"), GA_OK);
  fx_fill(w, 8 * MiB, 1);
  fx_fill(other, 3 * MiB, 2);
  cr_assert_eq(ga_sleep(fx_a, "weights", GA_SLEEP_OFFLOAD), GA_OK, "%s", ga_last_error());
  cr_assert_eq(ga_enable_peer_access(fx_a, 1), GA_OK, "%s", ga_last_error());
  uint64_t mask = 0;
  cr_assert_eq(fx_access(other, &mask), 0);
  cr_assert_eq(mask, 3u, "awake memory: both devices");
  cr_assert_eq(ga_wake(fx_a), GA_OK, "%s", ga_last_error());
  for (size_t off = 0; off < 8 * MiB; off += 2 * MiB) {
    cr_assert_eq(fx_access(w + off, &mask), 0);
    cr_assert_eq(mask, 3u, "woken granule at +%zu MiB: both devices", off >> 20);
  }
  cr_assert(fx_verify(w, 8 * MiB, 1));
  cr_assert(fx_verify(other, 3 * MiB, 2));
  fx_free(w);
  fx_free(other);
}

/* A sleep with tags that cannot be done is refused before any device call:
 * in native mode it is GA_ERR_UNSUPPORTED even during a capture whose
 * relaxed mode could not be entered (it was that device error). */
Test(sleep, a_refused_sleep_makes_no_device_call) {
  fx_open(NULL, 256 * MiB);
  char *p = fx_alloc(4 * MiB);
  cr_assert_eq(ga_tag(fx_a, p, "kv"), GA_OK);
  fx_capture(S3, 1);
  cr_assert_eq(ga_begin_allocate_to_pool(fx_a, 5, S3), GA_OK);
  fx_inject(GA_CALL_CAPTURE_MODE, 1, GA_DEV_EDRIVER, 0);
  uint64_t modes = fx_calls(GA_CALL_CAPTURE_MODE);
  cr_assert_eq(ga_sleep(fx_a, "kv", 0), GA_ERR_UNSUPPORTED, "%s", ga_last_error());
  cr_assert(strstr(ga_last_error(), "needs expandable_segments:True"), "%s", ga_last_error());
  cr_assert_eq(fx_calls(GA_CALL_CAPTURE_MODE), modes, "no device call");
  fx_clear_faults();
  fx_capture(S3, 0);
  cr_assert_eq(ga_end_allocate_to_pool(fx_a, 5), GA_OK);
  cr_assert_eq(ga_release_pool(fx_a, 5), GA_OK);
  fx_free(p);
}

/* expandable_policy:pytorch maps whole 20 MiB pages, aligned in the segment.
 * After a wake every granule is a mapping of its own, so frees and
 * empty_cache leave holes between live allocations. A grow that starts in
 * one hole is rounded up to the end of the page: it must map only up to the
 * end of its own run of free and unmapped blocks, never past a live
 * allocation into the next hole (whose free neighbour is still in the free
 * tree, and would be merged there and lost). */
Test(sleep, pytorch_policy_grows_within_its_run_after_a_wake, .timeout = 20) {
  fx_open("expandable_segments:True,expandable_policy:pytorch", 256 * MiB);
  static const size_t sizes[5] = {2 * MiB, 6 * MiB, 4 * MiB, 6 * MiB, 2 * MiB};
  char *p[5];
  for (int i = 0; i < 5; i++) {
    p[i] = fx_alloc(sizes[i]); /* one page: [A 2][B 6][C 4][D 6][F 2] */
    cr_assert_eq(ga_tag(fx_a, p[i], "kv"), GA_OK);
    fx_fill(p[i], sizes[i], (unsigned)i);
  }
  cr_assert_eq(p[4] + 2 * MiB - p[0], 20 * MiB, "the five fill one page");
  cr_assert_eq(ga_sleep(fx_a, "kv", GA_SLEEP_OFFLOAD), GA_OK, "%s", ga_last_error());
  cr_assert_eq(ga_wake(fx_a), GA_OK, "%s", ga_last_error());
  fx_free(p[1]);
  fx_free(p[3]);
  cr_assert_eq(ga_empty_cache(fx_a), GA_OK); /* holes where B and D were */
  fx_free(p[4]);                             /* F: a free block in the tree, after D's hole */
  cr_assert_eq(ga_check(fx_a), 0);
  char *x = fx_alloc(5 * MiB); /* too large for F: grows into B's hole */
  cr_assert_eq(ga_check(fx_a), 0, "the grow broke an invariant (see stderr)");
  cr_assert_eq(x, p[1], "served from B's hole");
  fx_fill(x, 5 * MiB, 7);
  char *y = fx_alloc(8 * MiB); /* D's hole and F together, or new memory: never overlapping */
  cr_assert_eq(ga_check(fx_a), 0);
  cr_assert(y >= x + 5 * MiB || y + 8 * MiB <= x, "overlapping allocations: %p and %p", (void *)x, (void *)y);
  fx_fill(y, 8 * MiB, 8);
  cr_assert(fx_verify(p[0], sizes[0], 0) && fx_verify(p[2], sizes[2], 2),
            "the woken allocations kept their bytes");
  cr_assert(fx_verify(x, 5 * MiB, 7) && fx_verify(y, 8 * MiB, 8));
  fx_free(x);
  fx_free(y);
  fx_free(p[0]);
  fx_free(p[2]);
}

/* With an allocation asleep, what is allocated exceeds what is reserved (its
 * memory went back to the device). The OOM report's "reserved but
 * unallocated" is then nothing, not a size_t that wrapped to 16 EiB. */
Test(sleep, the_oom_report_with_an_allocation_asleep) {
  fx_open(EXP2, 64 * MiB);
  char *w = fx_alloc(40 * MiB);
  cr_assert_eq(ga_tag(fx_a, w, "weights"), GA_OK);
  cr_assert_eq(ga_sleep(fx_a, "weights", 0), GA_OK, "%s", ga_last_error());
  ga_stats_t stats = fx_stats();
  cr_assert_gt(stats.allocated_bytes[GA_POOL_ALL].current, stats.reserved_bytes[GA_POOL_ALL].current,
               "the case under test: %lld > %lld", (long long)stats.allocated_bytes[GA_POOL_ALL].current,
               (long long)stats.reserved_bytes[GA_POOL_ALL].current);
  void *p = NULL;
  cr_assert_eq(ga_malloc(fx_a, 200 * MiB, NULL, &p), GA_ERR_OOM);
  const char *msg = ga_last_error();
  cr_assert(strstr(msg, "and 0 bytes is reserved by gardenalloc but unallocated") != NULL, "%s", msg);
  cr_assert_eq(ga_wake(fx_a), GA_OK, "%s", ga_last_error());
  fx_free(w);
}

/* PyTorch frees a tensor whose memory sleeps (its destructor cannot wait for
 * ga_wake): the free is not refused and lost, the wake that maps it again
 * frees it. */
Test(sleep_torch, pytorch_frees_a_tensor_while_it_sleeps) {
  cr_assert_eq(setenv("GARDENALLOC_CONF", "backend:sim,sim_capacity_mb:256," EXP2, 1), 0);
  ga_allocator_t *a = ga_torch_allocator(0);
  cr_assert_not_null(a, "%s", ga_last_error());
  void *w = ga_torch_alloc_nothrow(20 * MiB, 0, NULL), *kv = ga_torch_alloc_nothrow(6 * MiB, 0, NULL);
  cr_assert(w && kv, "%s", ga_last_error());
  cr_assert_eq(ga_tag(a, w, "weights"), GA_OK);
  cr_assert_eq(ga_tag(a, kv, "weights"), GA_OK);
  cr_assert_eq(ga_sleep(a, "weights", GA_SLEEP_OFFLOAD), GA_OK, "%s", ga_last_error());
  ga_torch_free(w, 20 * MiB, 0, NULL);
  ga_stats_t stats;
  cr_assert_eq(ga_stats(a, &stats), GA_OK);
  cr_assert_eq(stats.allocated_bytes[GA_POOL_ALL].current, 26 * MiB, "still allocated while it sleeps");
  cr_assert_eq(ga_check(a), 0);
  cr_assert_eq(ga_wake(a), GA_OK, "%s", ga_last_error());
  cr_assert_eq(ga_stats(a, &stats), GA_OK);
  cr_assert_eq(stats.allocated_bytes[GA_POOL_ALL].current, 6 * MiB, "the wake freed what PyTorch freed: %lld",
               (long long)stats.allocated_bytes[GA_POOL_ALL].current);
  cr_assert_eq(ga_free(a, w), GA_ERR_BAD_POINTER, "w was freed");
  cr_assert_eq(ga_check(a), 0);
  /* The memory is reused, and a later sleep of the tag does not take it. */
  void *again = ga_torch_alloc_nothrow(20 * MiB, 0, NULL);
  cr_assert_not_null(again);
  cr_assert_eq(ga_sleep(a, "weights", 0), GA_OK);
  cr_assert_eq(ga_free(a, again), GA_OK, "untagged: awake");
  ga_torch_free(kv, 6 * MiB, 0, NULL);
  cr_assert_eq(ga_wake(a), GA_OK, "%s", ga_last_error());
  cr_assert_eq(ga_stats(a, &stats), GA_OK);
  cr_assert_eq(stats.allocated_bytes[GA_POOL_ALL].current, 0);
  cr_assert_eq(ga_check(a), 0);
}
