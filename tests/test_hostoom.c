/* test_hostoom.c — the host running out of memory at any allocation of a
 * public call: the call answers GA_ERR_HOST_MEMORY with a message that names
 * it and says host memory, the allocator stays consistent (ga_check) and
 * usable, and nothing leaks (the sanitizer build checks host memory, the
 * fixture device memory). Every host allocation of allocator/ goes through
 * host.h's wrappers, whose hook fails the Nth one. Also the layout of what
 * the allocator reads at random from the host: its tables and the slabs of
 * its block records. */
#include "fixture.h"
#include "host.h"

#if defined(__SANITIZE_ADDRESS__)
#define HO_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HO_LSAN 1
#endif
#endif
#ifdef HO_LSAN
#include <sanitizer/lsan_interface.h>
/* Host memory still allocated and unreachable now (LeakSanitizer): a leak
 * fails the test here, not only in a report at exit. */
static int host_leaks(void) { return __lsan_do_recoverable_leak_check(); }
#else
static int host_leaks(void) { return 0; }
#endif

TestSuite(hostoom, .fini = fx_close);

static int failures;

/* A call's status: GA_OK, or GA_ERR_HOST_MEMORY named for `fn`; the
 * allocator consistent either way. */
static ga_status_t checked(const char *fn, ga_status_t st) {
  if (st != GA_OK) {
    failures++;
    const char *e = ga_last_error();
    size_t n = strlen(fn);
    cr_assert_eq(st, GA_ERR_HOST_MEMORY, "%s: %s: %s", fn, ga_status_str(st), e);
    cr_assert(strncmp(e, fn, n) == 0 && e[n] == ':', "the message does not name %s: \"%s\"", fn, e);
    cr_assert(strstr(e, "host memory"), "the message of %s does not say host memory: \"%s\"", fn, e);
  }
  cr_assert_eq(ga_check(fx_a), 0, "after %s (%s)", fn, ga_status_str(st));
  return st;
}
#define CALL(fn, ...) checked(#fn, fn(__VA_ARGS__))

/* Every public call that may take host memory, on both pools, several
 * streams, history, a private pool, tags, sleep and wake (expandable), the
 * fit model, with what it allocates freed again at the end. Returns the
 * number of calls that failed. */
static int scenario_with(int expandable) {
  failures = 0;
  enum { N = 8 };
  void *p[N] = {0};
  size_t sizes[N] = {MiB / 2, 3 * MiB, 30 * MiB, 100, 12 * MiB, 60 * MiB, 5 * MiB, 2 * MiB};
  CALL(ga_record_history, fx_a, 1, 64);
  for (int i = 0; i < N; i++) {
    if (CALL(ga_malloc, fx_a, sizes[i], i % 2 ? S1 : S2, &p[i]) != GA_OK)
      cr_assert_null(p[i]);
    else
      fx_fill(p[i], sizes[i] < 4096 ? sizes[i] : 4096, (unsigned)i);
  }
  for (int i = 0; i < N; i += 2)
    if (p[i]) CALL(ga_record_stream, fx_a, p[i], S3);
  if (p[2]) CALL(ga_record_stream, fx_a, p[2], S1);
  char *buf = malloc(1 << 20);
  cr_assert(ga_snapshot_json(fx_a, buf, 1 << 20) > 0);
  cr_assert(ga_stats_json(fx_a, buf, 1 << 20) > 0);
  free(buf);
  size_t want[3] = {MiB, 40 * MiB, 700}, cached = 0, device = 0;
  size_t fits = 0;
  CALL(ga_would_fit, fx_a, want, 3, S1, &fits);
  CALL(ga_largest_free, fx_a, S1, &cached, &device);
  if (p[1]) CALL(ga_free, fx_a, p[1]), p[1] = NULL;
  if (p[2]) CALL(ga_free, fx_a, p[2]), p[2] = NULL; /* events on S1 and S3 */
  /* A private pool. */
  void *q = NULL;
  if (CALL(ga_begin_allocate_to_pool, fx_a, 7, S3) == GA_OK) {
    CALL(ga_malloc, fx_a, 4 * MiB, S3, &q);
    CALL(ga_end_allocate_to_pool, fx_a, 7);
    if (q) CALL(ga_free, fx_a, q);
    CALL(ga_release_pool, fx_a, 7);
  }
  if (expandable) {
    void *c = NULL;
    if (CALL(ga_malloc_flags, fx_a, 9 * MiB, S1, GA_ALLOC_CONTIGUOUS_HANDLE, &c) == GA_OK)
      CALL(ga_free, fx_a, c);
    if (p[5]) CALL(ga_tag, fx_a, p[5], "weights");
    if (p[4]) CALL(ga_tag, fx_a, p[4], "kv");
    CALL(ga_sleep_mode, fx_a, "kv", GA_RESTORE_ZERO);
    if (CALL(ga_sleep, fx_a, "weights,kv", GA_SLEEP_OFFLOAD) != GA_OK) {
      /* What slept stays asleep: wake it. */
    }
    while (CALL(ga_wake, fx_a) != GA_OK) {}
    if (p[4]) {
      fx_fill(p[4], 4096, 4u); /* zeroed by the wake when it slept */
      CALL(ga_tag, fx_a, p[4], NULL);
    }
  }
  void *huge = NULL; /* the whole ladder, and the out-of-memory report */
  ga_status_t st = ga_malloc(fx_a, 2 * GiB, S1, &huge);
  cr_assert(st == GA_ERR_OOM || st == GA_ERR_HOST_MEMORY, "%s: %s", ga_status_str(st), ga_last_error());
  if (st == GA_ERR_HOST_MEMORY) checked("ga_malloc", st);
  cr_assert_eq(ga_check(fx_a), 0);
  for (int i = 0; i < N; i++) {
    if (!p[i]) continue;
    cr_assert(fx_verify(p[i], sizes[i] < 4096 ? sizes[i] : 4096, (unsigned)i), "contents of block %d", i);
    while (CALL(ga_free, fx_a, p[i]) != GA_OK) {}
  }
  CALL(ga_record_history, fx_a, 0, 0);
  CALL(ga_empty_cache, fx_a);
  CALL(ga_reset_peak_stats, fx_a);
  return failures;
}
static int scenario_native(void) { return scenario_with(0); }
static int scenario_expandable(void) { return scenario_with(1); }

/* The Nth host allocation of the scenario fails, for every N it makes. */
static unsigned host_sweep(const char *conf, int (*scenario)(void)) {
  fx_open(conf, 256 * MiB);
  uint64_t before = ga_host_allocations();
  cr_assert_eq(scenario(), 0, "the scenario fails without a fault: %s", ga_last_error());
  unsigned calls = (unsigned)(ga_host_allocations() - before), failed = 0;
  fx_close();
  cr_assert_gt(calls, 0);
  for (unsigned nth = 1; nth <= calls; nth++) {
    fx_open(conf, 256 * MiB);
    ga_host_fault(nth, 0);
    failed += scenario() > 0;
    uint64_t fired = ga_host_faults_fired();
    ga_host_fault(0, 0);
    cr_assert_eq(fired, 1, "the host allocation %u did not fail", nth);
    cr_assert_eq(scenario(), 0, "host allocation %u failing left the allocator unusable: %s", nth,
                 ga_last_error());
    fx_close();
  }
  cr_assert_eq(host_leaks(), 0, "host memory leaked (see the report above)");
  cr_log_info("%s: %u host allocations, %u of them failing a call", conf ? conf : "native", calls, failed);
  return calls;
}

Test(hostoom, every_host_allocation_of_native_mode) { host_sweep(NULL, scenario_native); }
Test(hostoom, every_host_allocation_of_expandable_segments) {
  host_sweep("expandable_segments:True", scenario_expandable);
}

/* ga_create: the allocator's record, the device's, the block map... */
Test(hostoom, every_host_allocation_of_ga_create) {
  const char *conf = "backend:sim,sim_capacity_mb:256";
  uint64_t before = ga_host_allocations();
  ga_allocator_t *a = NULL;
  cr_assert_eq(ga_create(conf, 0, &a), GA_OK, "%s", ga_last_error());
  unsigned calls = (unsigned)(ga_host_allocations() - before);
  ga_destroy(a);
  cr_assert_gt(calls, 0);
  for (unsigned nth = 1; nth <= calls; nth++) {
    a = NULL;
    ga_host_fault(nth, 0);
    ga_status_t st = ga_create(conf, 0, &a);
    ga_host_fault(0, 0);
    cr_assert_eq(st, GA_ERR_HOST_MEMORY, "host allocation %u of ga_create: %s: %s", nth, ga_status_str(st),
                 ga_last_error());
    cr_assert_null(a);
    cr_assert(strncmp(ga_last_error(), "ga_create:", 10) == 0 && strstr(ga_last_error(), "host memory"), "%s",
              ga_last_error());
  }
  cr_assert_eq(host_leaks(), 0, "host memory leaked (see the report above)");
}

/* The case the issue found: record_stream's list of streams cannot grow. */
Test(hostoom, record_stream_without_host_memory_says_so) {
  fx_open(NULL, 256 * MiB);
  void *p = fx_alloc(MiB);
  ga_host_fault(1, 1);
  ga_status_t st = ga_record_stream(fx_a, p, S2);
  ga_host_fault(0, 0);
  cr_assert_eq(st, GA_ERR_HOST_MEMORY, "%s: %s", ga_status_str(st), ga_last_error());
  cr_assert_str_eq(ga_last_error(), "ga_record_stream: out of host memory");
  cr_assert_eq(ga_record_stream(fx_a, p, S2), GA_OK);
  fx_free(p);
}

/* ---- Tables and record slabs ---- */

Test(hostoom, host_tables_are_zeroed_aligned_and_refusable) {
  const size_t sizes[] = {1, 100, 4096, MiB + 3, 2 * MiB, 5 * MiB + 1};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t n = sizes[i];
    unsigned char *p = ga_host_table(n);
    cr_assert_not_null(p, "%zu bytes", n);
    cr_assert_eq((uintptr_t)p % GA_HOST_TABLE_ALIGN, 0, "%zu bytes at %p", n, (void *)p);
#ifndef HO_LSAN /* under AddressSanitizer every table is on the heap (host.c) */
    if (n >= GA_HOST_HUGE) cr_assert_eq((uintptr_t)p % GA_HOST_HUGE, 0, "%zu bytes at %p", n, (void *)p);
#endif
    size_t nonzero = 0;
    for (size_t k = 0; k < n; k++) nonzero += p[k] != 0;
    cr_assert_eq(nonzero, 0, "%zu of %zu bytes not zeroed", nonzero, n);
    memset(p, 0xA5, n); /* every byte is the caller's */
    ga_host_table_free(p, n);
  }
  cr_assert_null(ga_host_table(0));
  const size_t refused[] = {64, 4 * MiB};
  for (size_t i = 0; i < 2; i++) {
    ga_host_fault(1, 0);
    void *p = ga_host_table(refused[i]);
    uint64_t fired = ga_host_faults_fired();
    ga_host_fault(0, 0);
    cr_assert_null(p, "%zu bytes despite the fault", refused[i]);
    cr_assert_eq(fired, 1);
  }
}

static int by_address(const void *x, const void *y) {
  uintptr_t a = *(const uintptr_t *)x, b = *(const uintptr_t *)y;
  return (a > b) - (a < b);
}

/* Records lie in slabs, two cache lines each, never across a 4 KiB page, the
 * first line of each in an even cache line on an even page and an odd one
 * on an odd page (so the lines a tree search reads use every cache set);
 * the slabs double up to their largest size, and big ones sit on huge-page
 * boundaries. */
Test(hostoom, block_records_fill_slabs_coloured_by_page) {
  enum { N = 40000 };
  fx_open(NULL, 256 * MiB);
  void **p = malloc(N * sizeof *p);
  uintptr_t *rec = malloc(N * sizeof *rec);
  for (size_t i = 0; i < N; i++) p[i] = fx_alloc(512);
  size_t odd = 0;
  for (size_t i = 0; i < N; i++) {
    const ga_block *b = ga_blockmap_get(&fx_a->pol.map, (uintptr_t)p[i]);
    cr_assert_not_null(b);
    cr_assert_eq(b->ptr, (uintptr_t)p[i]);
    uintptr_t at = (uintptr_t)b;
    rec[i] = at;
    cr_assert_eq(at % 64, 0, "record %zu at %#lx", i, (unsigned long)at);
    cr_assert_leq(at % 4096 + sizeof *b, 4096, "record %zu at %#lx crosses a page", i, (unsigned long)at);
    cr_assert_eq((at >> 6) & 1, (at >> 12) & 1, "record %zu at %#lx: line parity is not its page's", i,
                 (unsigned long)at);
    odd += (at >> 12) & 1;
  }
  cr_assert(odd > N * 2 / 5 && odd < N * 3 / 5, "%zu of %d records on odd pages", odd, N);
  qsort(rec, N, sizeof *rec, by_address);
  for (size_t i = 1; i < N; i++) cr_assert_geq(rec[i] - rec[i - 1], sizeof(ga_block), "records overlap");
  size_t slabs = 0, bytes = 0, last = 0, newest = fx_a->space.slabs->size;
  for (const ga_block *slab = fx_a->space.slabs; slab; slab = slab->next, slabs++) {
    /* Newest first: each at most the one before it, and half of it at least. */
    cr_assert(slab->size >= 16384 && slab->size <= 8 * MiB, "slab of %zu bytes", slab->size);
    if (last) cr_assert(slab->size == last || slab->size * 2 == last, "%zu after %zu", slab->size, last);
#ifndef HO_LSAN
    if (slab->size >= GA_HOST_HUGE) cr_assert_eq((uintptr_t)slab % GA_HOST_HUGE, 0);
#endif
    last = slab->size;
    bytes += slab->size;
  }
  /* 63 records per 8 KiB; the newest slab may be almost empty. */
  size_t used = (N + slabs + 64) / 63 * 8192;
  cr_assert_leq(bytes - newest, used, "%zu bytes of slabs for %d records", bytes, N);
  for (size_t i = 0; i < N; i++) fx_free(p[i]);
  free(p);
  free(rec);
}

/* The process's virtual size (kB) from /proc/self/status. */
static long vm_size_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  cr_assert_not_null(f);
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %ld kB", &kb) == 1) break;
  fclose(f);
  return kb;
}

/* Slabs and tables of 2 MiB and more are mapped by hand: ga_destroy gives
 * every one back. An allocator of 40000 blocks (slabs up to 4 MiB, a 2 MiB
 * block map) made and destroyed twelve times leaves the process no larger
 * than after the third time. */
Test(hostoom, record_slabs_and_tables_go_back_with_the_allocator) {
#ifdef HO_LSAN
  /* Tables are on the heap there (host.c), where LeakSanitizer checks them,
   * and its quarantine keeps freed memory mapped. */
  cr_skip_test("under AddressSanitizer every table is on the heap");
#endif
  enum { N = 40000, CYCLES = 12 };
  void **p = malloc(N * sizeof *p);
  long after3 = 0;
  for (int c = 1; c <= CYCLES; c++) {
    ga_allocator_t *a = NULL;
    cr_assert_eq(ga_create("backend:sim,sim_capacity_mb:1024", 0, &a), GA_OK, "%s", ga_last_error());
    for (size_t i = 0; i < N; i++) cr_assert_eq(ga_malloc(a, 512, NULL, &p[i]), GA_OK, "%s", ga_last_error());
    for (size_t i = 0; i < N; i += 2) cr_assert_eq(ga_free(a, p[i]), GA_OK);
    ga_destroy(a);
    if (c == 3) after3 = vm_size_kb();
  }
  long after = vm_size_kb();
  cr_assert_leq(after, after3 + 8192, "%ld kB after %d allocators, %ld kB after 3", after, CYCLES, after3);
  free(p);
}

/* ---- The block map ----
 * A block keeps its entry after its free; the entry goes when the record is
 * deleted (policy/block.c). Blocks made and dropped at ever new addresses
 * (each round's blocks in a stream of their own, their segment given back):
 * the map stays the size its live entries need. */
Test(hostoom, the_block_map_does_not_grow_with_deleted_records) {
  enum { K = 1000, ROUNDS = 40 };
  fx_open(NULL, GiB);
  void *p[K];
  size_t most = 0;
  for (int r = 0; r < ROUNDS; r++) {
    size_t size = 4 * KiB + (size_t)(r % 8) * 512; /* addresses that differ from round to round */
    ga_stream_t s = r % 2 ? S2 : S1;
    for (size_t i = 0; i < K; i++) p[i] = fx_alloc_on(size, s);
    for (size_t i = 0; i < K; i++) fx_free(p[i]);
    cr_assert_eq(ga_empty_cache(fx_a), GA_OK);
    cr_assert_eq(fx_a->pol.map.count, 0, "round %d: %zu entries left with nothing cached", r,
                 fx_a->pol.map.count);
    if (fx_a->pol.map.cap > most) most = fx_a->pol.map.cap;
  }
  /* K entries need 2048 slots; entries of 40 rounds kept would need 2^17. */
  cr_assert_leq(most, 2048, "the map grew to %zu slots for %d live blocks", most, K);
}
