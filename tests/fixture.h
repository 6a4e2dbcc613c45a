/* fixture.h — an allocator on a simulated device the test owns.
 *
 * fx_open() builds both; the suite's .fini (fx_close) checks ga_check() == 0,
 * that emptying the cache after the test's frees gives every byte back to the
 * device, and that nothing is left on the device after ga_destroy.
 */
#ifndef GA_TEST_FIXTURE_H
#define GA_TEST_FIXTURE_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/sim.h"
#include "gardenalloc.h"
#include "internal.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

static ga_device *fx_dev;
static ga_allocator_t *fx_a;

/* Criterion does not fail a test for an assertion in its .fini (it prints
 * it and counts a pass). Teardown checks therefore go through FX_TEARDOWN:
 * a teardown that found a problem ends the test process with a failure
 * status, which the runner reports and ctest counts. */
static int fx_teardown_failed;
#define FX_TEARDOWN(cond, ...)   \
  do {                           \
    if (!(cond)) {               \
      fx_teardown_failed = 1;    \
      cr_log_error(__VA_ARGS__); \
    }                            \
  } while (0)
static inline void fx_teardown_verdict(void) {
  if (!fx_teardown_failed) return;
  fprintf(stderr, "fixture: the teardown found the problems above\n");
  fflush(NULL);
  exit(1);
}

#define S1 ((ga_stream_t)(uintptr_t)0x1001)
#define S2 ((ga_stream_t)(uintptr_t)0x2002)

static inline void fx_open(const char *conf, size_t capacity) {
  char err[256];
  cr_assert_eq(ga_sim_open(0, capacity, &fx_dev, err, sizeof err), 0, "sim: %s", err);
  ga_status_t st = ga_create_on_device(conf, fx_dev, &fx_a);
  cr_assert_eq(st, GA_OK, "ga_create_on_device(\"%s\"): %s: %s", conf ? conf : "", ga_status_str(st),
               ga_last_error());
}

static inline ga_stats_t fx_stats(void) {
  ga_stats_t s;
  cr_assert_eq(ga_stats(fx_a, &s), GA_OK);
  return s;
}

static inline void fx_close(void) {
  if (!fx_a) return;
  FX_TEARDOWN(ga_check(fx_a) == 0, "ga_check found broken invariants (see stderr)");
  ga_stats_t s = fx_stats();
  if (s.allocation[GA_POOL_ALL].current == 0) {
    FX_TEARDOWN(ga_empty_cache(fx_a) == GA_OK, "%s", ga_last_error());
    ga_sim_usage u;
    ga_sim_usage_get(fx_dev, &u);
    s = fx_stats();
    FX_TEARDOWN(s.reserved_bytes[GA_POOL_ALL].current == 0, "reserved after empty_cache: %lld",
                (long long)s.reserved_bytes[GA_POOL_ALL].current);
    FX_TEARDOWN(u.used == 0, "device memory still used after empty_cache: %zu", u.used);
  }
  ga_destroy(fx_a);
  fx_a = NULL;
  ga_sim_usage u;
  ga_sim_usage_get(fx_dev, &u);
  FX_TEARDOWN(u.used == 0 && u.live_mallocs == 0 && u.live_handles == 0 && u.live_reservations == 0 &&
                  u.live_mappings == 0 && u.live_events == 0,
              "device leak after ga_destroy: used %zu, mallocs %zu, handles %zu, reservations %zu, "
              "mappings %zu, events %zu",
              u.used, u.live_mallocs, u.live_handles, u.live_reservations, u.live_mappings, u.live_events);
  ga_dev_destroy(fx_dev);
  fx_dev = NULL;
  fx_teardown_verdict();
}

static inline void *fx_alloc_on(size_t size, ga_stream_t s) {
  void *p = NULL;
  ga_status_t st = ga_malloc(fx_a, size, s, &p);
  cr_assert_eq(st, GA_OK, "ga_malloc(%zu): %s: %s", size, ga_status_str(st), ga_last_error());
  cr_assert(p != NULL);
  return p;
}
static inline void *fx_alloc(size_t size) { return fx_alloc_on(size, S1); }

static inline void fx_free(void *p) {
  ga_status_t st = ga_free(fx_a, p);
  cr_assert_eq(st, GA_OK, "ga_free(%p): %s: %s", p, ga_status_str(st), ga_last_error());
}

static inline size_t fx_block_size(void *p) {
  size_t b = 0;
  cr_assert_eq(ga_allocation_size(fx_a, p, NULL, &b), GA_OK, "%s", ga_last_error());
  return b;
}

#define assert_stat(field, pool, want)                                                                    \
  do {                                                                                                    \
    ga_stats_t s_ = fx_stats();                                                                           \
    long long got_ = (long long)s_.field[pool].current, want_ = (long long)(want);                        \
    cr_assert_eq(got_, want_, "%s[%d].current = %lld (%.2f MiB), expected %lld (%.2f MiB)", #field, pool, \
                 got_, got_ / 1048576.0, want_, want_ / 1048576.0);                                       \
  } while (0)
#define assert_reserved(want) assert_stat(reserved_bytes, GA_POOL_ALL, want)
#define assert_scalar(field, want)                                                           \
  do {                                                                                       \
    ga_stats_t s_ = fx_stats();                                                              \
    cr_assert_eq((long long)s_.field, (long long)(want), "%s = %lld, expected %lld", #field, \
                 (long long)s_.field, (long long)(want));                                    \
  } while (0)
#define assert_calls(kind, want)                                                                    \
  do {                                                                                              \
    ga_stats_t s_ = fx_stats();                                                                     \
    cr_assert_eq(s_.device_calls[kind], (uint64_t)(want), "device_calls[%s] = %llu, expected %llu", \
                 ga_device_call_name(kind), (unsigned long long)s_.device_calls[kind],              \
                 (unsigned long long)(want));                                                       \
  } while (0)

/* Runs `scenario` once to count the calls of `kind` it makes, then once per
 * position with that call failing (err), asserting that the fault fired and
 * that a clean run afterwards succeeds with no failure. The fixture checks
 * consistency and leaks after each run. */
static inline void fx_fault_sweep(const char *conf, size_t capacity, ga_device_call_t kind, int err,
                                  int (*scenario)(void)) {
  fx_open(conf, capacity);
  uint64_t at_create = fx_stats().device_calls[kind];
  scenario();
  unsigned calls = (unsigned)(fx_stats().device_calls[kind] - at_create);
  fx_close();
  cr_assert(calls > 0, "the scenario makes no %s call", ga_device_call_name(kind));
  for (unsigned nth = 1; nth <= calls; nth++) {
    fx_open(conf, capacity);
    ga_sim_inject(fx_dev, kind, nth, err, 0);
    scenario();
    ga_sim_clear_faults(fx_dev);
    ga_sim_usage u;
    ga_sim_usage_get(fx_dev, &u);
    cr_assert_eq(u.faults_fired, 1, "the fault at %s call %u did not fire", ga_device_call_name(kind), nth);
    cr_assert_eq(scenario(), 0, "%s fault at call %u left the allocator unusable: %s",
                 ga_device_call_name(kind), nth, ga_last_error());
    fx_close();
  }
}

/* A byte pattern that depends on the address and a seed. */
static inline void fx_fill(void *p, size_t n, unsigned seed) {
  unsigned char *c = p;
  for (size_t i = 0; i < n; i++) c[i] = (unsigned char)((i * 131u + seed * 7u) ^ (i >> 8));
}
static inline int fx_verify(const void *p, size_t n, unsigned seed) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++)
    if (c[i] != (unsigned char)((i * 131u + seed * 7u) ^ (i >> 8))) return 0;
  return 1;
}

#endif
