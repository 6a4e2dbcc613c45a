/* test_faults.c — a device call failing at any point of a scenario leaves no
 * leak and a consistent, usable allocator. */
#include "fixture.h"

TestSuite(faults, .fini = fx_close);

/* A true OOM: the whole ladder and the report. */
static int huge_request(void **p, const size_t *sizes) {
  (void)p, (void)sizes;
  void *huge = NULL;
  ga_status_t st = ga_malloc(fx_a, GiB, S1, &huge);
  cr_assert(st == GA_ERR_OOM || st == GA_ERR_DEVICE, "%s", ga_status_str(st));
  return 0;
}

/* A scenario touching every device call native mode makes: segments of both
 * pools, cross-stream events (block 2 freed after a record_stream), the retry
 * ladder, empty_cache. */
static int scenario(void) {
  static const fx_sweep_plan plan = {
      .sizes = {MiB / 2, 3 * MiB, 30 * MiB, 100, 12 * MiB, 60 * MiB, 5 * MiB, 70 * MiB},
      .n = 8,
      .nblocks = 8,
      .record_every = 3,
      .hole_after = 3,
      .hole = 2,
      .hole_waits = 1,
      .last = huge_request,
  };
  return fx_sweep_run(&plan);
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

/* ---- The exhaustive sweep: every call kind, every position, four configurations ----
 * One scenario walks the whole API on a machine of two devices: allocations
 * of both pools on two streams with their bytes written, a free whose block
 * waits on a busy stream's event, the OOM ladder to the end, peer access,
 * (expandable) a tagged allocation put to sleep with offload and woken, a
 * capture on S3 with an allocation from its private pool and an empty_cache
 * during it, the pool released, and empty_cache with the stream idle. For
 * every kind of device call, the scenario is run once to count its calls;
 * then for every n the n-th call of that kind fails (a driver error; for
 * malloc and create also out of memory): the allocator must stay consistent
 * after every step (ga_check), keep the bytes of every live allocation, and
 * once the fault is cleared run the whole scenario again without a failure;
 * after ga_destroy nothing may be left on the device. The chaos walk injects
 * at random; this leaves no position out. */

static int sweep_failures;
static void sweep_call(ga_status_t st, const char *what) {
  cr_assert(st == GA_OK || st == GA_ERR_OOM || st == GA_ERR_DEVICE, "%s: unexpected %s: %s", what,
            ga_status_str(st), ga_last_error());
  if (st != GA_OK) {
    cr_assert(ga_last_error()[0] != 0, "%s failed without saying why", what);
    sweep_failures++;
  }
  cr_assert_eq(ga_check(fx_a), 0, "after %s (see stderr)", what);
}

/* The first and last 64 KiB of an allocation (the whole of a small one). */
static void fill_ends(char *p, size_t n, unsigned seed) {
  size_t k = n < 128 * KiB ? n : 64 * KiB;
  fx_fill(p, k, seed);
  if (k < n) fx_fill(p + n - k, k, seed + 1);
}
static int verify_ends(const char *p, size_t n, unsigned seed) {
  size_t k = n < 128 * KiB ? n : 64 * KiB;
  return fx_verify(p, k, seed) && (k == n || fx_verify(p + n - k, k, seed + 1));
}

#define SWEEP_N 6
static int whole_api_scenario(void) {
  static uint64_t pool = 1000; /* a new id each run: a pool whose release failed keeps its id */
  int exp = fx_a->cfg.expandable_segments;
  static const size_t sizes[SWEEP_N] = {MiB / 2, 3 * MiB, 30 * MiB, 100, 12 * MiB, 60 * MiB};
  char *p[SWEEP_N] = {0};
  sweep_failures = 0;
  for (int i = 0; i < SWEEP_N; i++) {
    sweep_call(ga_malloc(fx_a, sizes[i], i % 2 ? S1 : S2, (void **)&p[i]), "ga_malloc");
    if (p[i]) fill_ends(p[i], sizes[i], (unsigned)i);
  }
  /* A free that waits for a busy stream's event. */
  char *busy = NULL;
  sweep_call(ga_malloc(fx_a, 5 * MiB, S1, (void **)&busy), "ga_malloc");
  fx_hold(S2, 1);
  if (busy) {
    cr_assert_eq(ga_record_stream(fx_a, busy, S2), GA_OK);
    fx_free(busy);
  }
  /* The whole OOM ladder (the device has 512 MiB). */
  void *huge = NULL;
  ga_status_t st = ga_malloc(fx_a, GiB, S1, &huge);
  cr_assert(st == GA_ERR_OOM || st == GA_ERR_DEVICE, "%s", ga_status_str(st));
  if (st == GA_ERR_DEVICE) sweep_failures++;
  cr_assert_eq(ga_check(fx_a), 0);
  fx_hold(S2, 0);
  sweep_call(ga_enable_peer_access(fx_a, 1), "ga_enable_peer_access");
  /* On a stream of its own: sleep with offload, then wake (retried: the
   * fault is one-shot). A granule sleeps with its whole mapping, so the
   * allocation fills its mappings: 6 MiB with 2 MiB pages, a whole page with
   * larger ones. */
  char *kv = NULL;
  size_t kvn = fx_a->pol.large_page > 2 * MiB ? fx_a->pol.large_page : 6 * MiB;
  if (exp) sweep_call(ga_malloc(fx_a, kvn, S3, (void **)&kv), "ga_malloc");
  if (kv) {
    fill_ends(kv, kvn, 11);
    cr_assert_eq(ga_tag(fx_a, kv, "kv"), GA_OK);
    sweep_call(ga_sleep(fx_a, "kv", GA_SLEEP_OFFLOAD), "ga_sleep");
    char *x = NULL; /* the allocator works while memory sleeps */
    sweep_call(ga_malloc(fx_a, 7 * MiB, S2, (void **)&x), "ga_malloc while asleep");
    if (x) fx_free(x);
    for (int tries = 0; tries < 4; tries++) {
      st = ga_wake(fx_a);
      sweep_call(st, "ga_wake");
      if (st == GA_OK) break;
    }
    cr_assert_eq(st, GA_OK, "ga_wake still fails after the fault: %s", ga_last_error());
    cr_assert(verify_ends(kv, kvn, 11), "the woken allocation lost its bytes");
    fx_free(kv);
  }
  /* A capture on S3 with an allocation of its pool and an empty_cache during
   * it (with free memory on S1 to give back: S1 does not capture). */
  if (p[5]) {
    cr_assert(verify_ends(p[5], sizes[5], 5));
    fx_free(p[5]);
    p[5] = NULL;
  }
  fx_capture(S3, 1);
  cr_assert_eq(ga_begin_allocate_to_pool(fx_a, ++pool, S3), GA_OK, "%s", ga_last_error());
  char *g = NULL;
  sweep_call(ga_malloc(fx_a, 4 * MiB, S3, (void **)&g), "ga_malloc during the capture");
  if (g) fill_ends(g, 4 * MiB, 9);
  sweep_call(ga_empty_cache(fx_a), "ga_empty_cache during the capture");
  if (g) {
    cr_assert(verify_ends(g, 4 * MiB, 9), "the capture's block lost its bytes");
    fx_free(g);
  }
  fx_capture(S3, 0);
  sweep_call(ga_end_allocate_to_pool(fx_a, pool), "ga_end_allocate_to_pool");
  sweep_call(ga_release_pool(fx_a, pool), "ga_release_pool");
  ga_sim_usage u;
  fx_usage(&u);
  cr_assert_eq(u.captures_broken, 0, "a capture was invalidated: %s", ga_last_error());
  for (int i = 0; i < SWEEP_N; i++)
    if (p[i]) {
      cr_assert(verify_ends(p[i], sizes[i], (unsigned)i), "block %d (%zu bytes) lost its bytes", i, sizes[i]);
      fx_free(p[i]);
    }
  sweep_call(ga_empty_cache(fx_a), "ga_empty_cache");
  return sweep_failures;
}

static void sweep_all_kinds(const char *name, const char *conf, const ga_device_call_t *must, size_t nmust) {
  unsigned total = 0;
  char reached[512] = "", missed[512] = "";
  size_t nr = 0, nm = 0;
  for (int k = 0; k < GA_CALL_COUNT; k++) {
    for (int e = 0; e < 2; e++) {
      if (e == 1 && k != GA_CALL_MALLOC && k != GA_CALL_CREATE) continue;
      unsigned n = fx_fault_sweep_on(2, conf, 512 * MiB, (ga_device_call_t)k,
                                     e ? GA_DEV_EOOM : GA_DEV_EDRIVER, whole_api_scenario);
      total += n;
      if (e) continue;
      if (n)
        nr += (size_t)snprintf(reached + nr, sizeof reached - nr, " %s:%u", ga_device_call_name(k), n);
      else
        nm += (size_t)snprintf(missed + nm, sizeof missed - nm, " %s", ga_device_call_name(k));
      for (size_t i = 0; i < nmust; i++)
        cr_assert(must[i] != (ga_device_call_t)k || n > 0, "%s: the scenario makes no %s call", name,
                  ga_device_call_name(k));
    }
  }
  fprintf(stderr, "fault sweep %s: %u positions; calls by kind:%s; not made:%s\n", name, total, reached,
          missed);
}

static const ga_device_call_t native_kinds[] = {GA_CALL_MALLOC,       GA_CALL_FREE,
                                                GA_CALL_EVENT_CREATE, GA_CALL_EVENT_RECORD,
                                                GA_CALL_EVENT_QUERY,  GA_CALL_EVENT_SYNCHRONIZE,
                                                GA_CALL_MEM_INFO,     GA_CALL_CAPTURE_MODE};
static const ga_device_call_t expandable_kinds[] = {GA_CALL_RESERVE,
                                                    GA_CALL_UNRESERVE,
                                                    GA_CALL_CREATE,
                                                    GA_CALL_RELEASE,
                                                    GA_CALL_MAP,
                                                    GA_CALL_UNMAP,
                                                    GA_CALL_SET_ACCESS,
                                                    GA_CALL_COPY,
                                                    GA_CALL_EVENT_CREATE,
                                                    GA_CALL_EVENT_RECORD,
                                                    GA_CALL_EVENT_SYNCHRONIZE,
                                                    GA_CALL_STREAM_SYNCHRONIZE,
                                                    GA_CALL_MEM_INFO,
                                                    GA_CALL_CAPTURE_QUERY,
                                                    GA_CALL_CAPTURE_MODE};
#define NK(v) (sizeof v / sizeof v[0])

Test(faults, sweep_native) { sweep_all_kinds("native", NULL, native_kinds, NK(native_kinds)); }
Test(faults, sweep_native_gc_fraction) {
  sweep_all_kinds("native_gc_fraction",
                  "garbage_collection_threshold:0.3,per_process_memory_fraction:0.6,max_split_size_mb:40",
                  native_kinds, NK(native_kinds));
}
Test(faults, sweep_expandable) {
  sweep_all_kinds("expandable", "expandable_segments:True", expandable_kinds, NK(expandable_kinds));
}
Test(faults, sweep_expandable_2m) {
  sweep_all_kinds("expandable_2m", "expandable_segments:True,expandable_page_size_mb:2", expandable_kinds,
                  NK(expandable_kinds));
}

/* ---- Sticky driver errors ----
 * A real driver error can be sticky (an illegal address, a lost device):
 * after it, every call fails. The guarantee is the same as for a one-shot
 * fault, and one more: no block is ever reused before its streams have
 * passed it, whatever the driver answers. A free whose streams can be
 * neither given an event nor waited for keeps its memory out of use
 * (quarantined_bytes) instead. The scenario runs with the n-th call of one
 * kind failing and every call after it too, for every n; it checks after
 * every step ga_check, the bytes of every live allocation, that no capture
 * was invalidated, and that no allocation overlaps memory freed while busy
 * S2 still uses it. Then the fault is cleared and S2 finishes: a clean run
 * must succeed and every byte go back (fx_close). The simulated device only:
 * on the driver double the fixture's own driver calls would fail too. */

#define STICKY_N 5
static struct {
  uintptr_t lo, hi; /* memory S2 used, freed while S2 held work */
  ga_sim_mark mark; /* S2's work then: the memory is S2's until S2 passes it */
  int on;
} busy_range;

static void no_overlap_with_busy(const char *p, size_t n, const char *what) {
  if (!p || !busy_range.on || ga_sim_stream_passed(fx_dev, &busy_range.mark)) return;
  cr_assert((uintptr_t)p + n <= busy_range.lo || (uintptr_t)p >= busy_range.hi,
            "%s handed out %p (+%zu) while busy S2 may still use [%p, %p)", what, (void *)p, n,
            (void *)busy_range.lo, (void *)busy_range.hi);
}

static char *sticky_malloc(size_t n, ga_stream_t stream, unsigned seed, const char *what) {
  char *p = NULL;
  sweep_call(ga_malloc(fx_a, n, stream, (void **)&p), what);
  no_overlap_with_busy(p, n, what);
  if (p) fill_ends(p, n, seed);
  return p;
}

/* Frees p; a device error is allowed only as a quarantine (freed all the same). */
static void sticky_free(char *p) {
  if (!p) return;
  ga_status_t st = ga_free(fx_a, p);
  cr_assert(st == GA_OK || (st == GA_ERR_DEVICE && strstr(ga_last_error(), "is freed, but")),
            "ga_free: %s: %s", ga_status_str(st), ga_last_error());
  sweep_failures += st != GA_OK;
  cr_assert_eq(ga_check(fx_a), 0, "after ga_free");
}

static int sticky_scenario(void) {
  static uint64_t pool = 5000;
  static const size_t sizes[STICKY_N] = {MiB / 2, 3 * MiB, 30 * MiB, 100, 12 * MiB};
  char *p[STICKY_N] = {0};
  int exp = fx_a->cfg.expandable_segments;
  sweep_failures = 0;
  for (int i = 0; i < STICKY_N; i++)
    p[i] = sticky_malloc(sizes[i], i % 2 ? S1 : S2, (unsigned)i, "ga_malloc");
  /* A block S2 still uses, freed: it must not come back while S2 runs. */
  char *busy = sticky_malloc(5 * MiB, S1, 20, "ga_malloc");
  fx_hold(S2, 1);
  if (busy) {
    cr_assert_eq(ga_record_stream(fx_a, busy, S2), GA_OK);
    cr_assert_eq(ga_sim_stream_mark(fx_dev, S2, &busy_range.mark), 0);
    sticky_free(busy);
    busy_range.lo = (uintptr_t)busy, busy_range.hi = (uintptr_t)busy + 5 * MiB, busy_range.on = 1;
  }
  char *again = sticky_malloc(5 * MiB, S1, 21, "ga_malloc on the busy block's stream");
  char *other = sticky_malloc(5 * MiB, S3, 22, "ga_malloc on another stream");
  void *huge = NULL; /* the whole OOM ladder */
  ga_status_t st = ga_malloc(fx_a, GiB, S1, &huge);
  cr_assert(st == GA_ERR_OOM || st == GA_ERR_DEVICE, "%s", ga_status_str(st));
  cr_assert_eq(ga_check(fx_a), 0);
  sweep_call(ga_empty_cache(fx_a), "ga_empty_cache");
  char *after = sticky_malloc(4 * MiB, S3, 23, "ga_malloc after empty_cache");
  if (exp) { /* sleep with offload and wake, while S2 still runs */
    char *kv =
        sticky_malloc(fx_a->pol.large_page > 2 * MiB ? fx_a->pol.large_page : 6 * MiB, S3, 24, "ga_malloc");
    if (kv) {
      size_t n = fx_block_size(kv);
      fill_ends(kv, n, 24);
      cr_assert_eq(ga_tag(fx_a, kv, "kv"), GA_OK);
      sweep_call(ga_sleep(fx_a, "kv", GA_SLEEP_OFFLOAD), "ga_sleep");
      char *x = sticky_malloc(7 * MiB, S1, 25, "ga_malloc while asleep");
      sticky_free(x);
      sweep_call(ga_wake(fx_a), "ga_wake");
      if (!((const ga_block *)ga_blockmap_get(&fx_a->pol.map, (uintptr_t)kv))->asleep) {
        cr_assert(verify_ends(kv, n, 24), "the woken allocation lost its bytes");
        sticky_free(kv);
      } else {
        fx_clear_faults(); /* asleep: it cannot be freed until a wake succeeds */
        cr_assert_eq(ga_wake(fx_a), GA_OK, "%s", ga_last_error());
        cr_assert(verify_ends(kv, n, 24), "the woken allocation lost its bytes");
        sticky_free(kv);
      }
    }
  }
  /* A capture on S3 with an allocation of its pool and an empty_cache during it. */
  fx_capture(S3, 1);
  cr_assert_eq(ga_begin_allocate_to_pool(fx_a, ++pool, S3), GA_OK, "%s", ga_last_error());
  char *g = sticky_malloc(4 * MiB, S3, 26, "ga_malloc during the capture");
  sweep_call(ga_empty_cache(fx_a), "ga_empty_cache during the capture");
  sticky_free(g);
  fx_capture(S3, 0);
  sweep_call(ga_end_allocate_to_pool(fx_a, pool), "ga_end_allocate_to_pool");
  sweep_call(ga_release_pool(fx_a, pool), "ga_release_pool");
  char *late = sticky_malloc(5 * MiB, S1, 27, "ga_malloc after the capture");
  ga_sim_usage u;
  fx_usage(&u);
  cr_assert_eq(u.captures_broken, 0, "a capture was invalidated: %s", ga_last_error());
  /* S2 finishes: its memory may be reused from now on. */
  fx_hold(S2, 0);
  busy_range.on = 0;
  static const unsigned seeds[] = {21, 22, 23, 27};
  char *const kept[] = {again, other, after, late};
  for (int i = 0; i < 4; i++) {
    size_t n = i == 2 ? 4 * MiB : 5 * MiB;
    if (kept[i]) cr_assert(verify_ends(kept[i], n, seeds[i]), "allocation %d lost its bytes", i);
    sticky_free(kept[i]);
  }
  for (int i = 0; i < STICKY_N; i++)
    if (p[i]) {
      cr_assert(verify_ends(p[i], sizes[i], (unsigned)i), "block %d lost its bytes", i);
      sticky_free(p[i]);
    }
  sweep_call(ga_empty_cache(fx_a), "ga_empty_cache");
  return sweep_failures;
}

static void sticky_sweep(const char *name, const char *conf) {
  if (fx_on_cuda()) cr_skip_test("the driver double's own controls would fail under a sticky fault");
  unsigned total = 0, quarantined = 0;
  char reached[512] = "";
  size_t nr = 0;
  for (int k = 0; k < GA_CALL_COUNT; k++) {
    fx_open_on(2, conf, 512 * MiB);
    uint64_t at_create = fx_calls((ga_device_call_t)k);
    cr_assert_eq(sticky_scenario(), 0, "the scenario fails without a fault: %s", ga_last_error());
    unsigned calls = (unsigned)(fx_calls((ga_device_call_t)k) - at_create);
    fx_close();
    for (unsigned nth = 1; nth <= calls; nth++) {
      fx_open_on(2, conf, 512 * MiB);
      fx_inject((ga_device_call_t)k, nth, GA_DEV_EDRIVER, GA_SIM_STICKY);
      sticky_scenario();
      ga_sim_usage u;
      fx_usage(&u);
      cr_assert_geq(u.faults_fired, 1, "the sticky fault at %s call %u did not fire", ga_device_call_name(k),
                    nth);
      quarantined += fx_stats().quarantined_bytes.peak > 0;
      fx_clear_faults();
      cr_assert_eq(sticky_scenario(), 0, "a sticky %s fault at call %u left the allocator unusable: %s",
                   ga_device_call_name(k), nth, ga_last_error());
      cr_assert_eq(fx_stats().quarantined_bytes.current, 0, "quarantined memory came back");
      fx_close();
    }
    total += calls;
    if (calls)
      nr += (size_t)snprintf(reached + nr, sizeof reached - nr, " %s:%u", ga_device_call_name(k), calls);
  }
  cr_assert_gt(quarantined, 0, "no position quarantined a block: the sweep misses the case it is for");
  fprintf(stderr, "sticky fault sweep %s: %u positions (%u quarantined a free); calls by kind:%s\n", name,
          total, quarantined, reached);
}

Test(faults, sticky_sweep_native) { sticky_sweep("native", NULL); }
Test(faults, sticky_sweep_expandable) { sticky_sweep("expandable", "expandable_segments:True"); }
Test(faults, sticky_sweep_expandable_2m) {
  sticky_sweep("expandable_2m", "expandable_segments:True,expandable_page_size_mb:2");
}
Test(faults, sticky_sweep_expandable_pytorch) {
  sticky_sweep("expandable_pytorch", "expandable_segments:True,expandable_policy:pytorch");
}
