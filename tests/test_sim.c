/* test_sim.c — the simulated device keeps the driver's rules. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/rtree.h"
#include "device/sim.h"
#include "internal.h"

#define MiB ((size_t)1 << 20)
#define G   (2 * MiB)

static ga_device *d;

static void open_sim(void) {
  char err[128];
  cr_assert_eq(ga_sim_open(0, 64 * MiB, &d, err, sizeof err), 0, "%s", err);
}

static void close_sim(void) {
  ga_sim_usage u;
  ga_sim_usage_get(d, &u);
  cr_expect(u.used == 0 && u.live_handles == 0 && u.live_mappings == 0 && u.live_reservations == 0 &&
                u.live_mallocs == 0 && u.live_events == 0,
            "leak: used %zu handles %zu maps %zu resv %zu mallocs %zu events %zu", u.used, u.live_handles,
            u.live_mappings, u.live_reservations, u.live_mallocs, u.live_events);
  ga_dev_destroy(d);
}

TestSuite(sim, .init = open_sim, .fini = close_sim);

Test(sim, bytes_written_through_one_mapping_are_read_through_another) {
  void *va1, *va2;
  ga_mem_handle h;
  cr_assert_eq(ga_dev_create(d, 2 * G, &h), 0);
  cr_assert_eq(ga_dev_reserve(d, 2 * G, 0, &va1), 0);
  cr_assert_eq(ga_dev_reserve(d, G, 0, &va2), 0);
  cr_assert_eq(ga_dev_map(d, va1, 2 * G, h, 0), 0);
  cr_assert_eq(ga_dev_map(d, va2, G, h, G), 0); /* the handle's second granule */
  memset((char *)va1 + G, 0xab, 4096);
  cr_assert_eq(((unsigned char *)va2)[4095], 0xab);
  ((char *)va2)[7] = 0x11;
  cr_assert_eq(((char *)va1)[G + 7], 0x11);
  cr_assert_eq(ga_dev_release(d, h), 0); /* still mapped: memory stays */
  ga_sim_usage u;
  ga_sim_usage_get(d, &u);
  cr_assert_eq(u.used, 2 * G);
  cr_assert_eq(((char *)va1)[G + 7], 0x11);
  cr_assert_eq(ga_dev_unmap(d, va1, 2 * G), 0);
  cr_assert_eq(ga_dev_unmap(d, va2, G), 0);
  ga_sim_usage_get(d, &u);
  cr_assert_eq(u.used, 0, "released once the last mapping went");
  cr_assert_eq(ga_dev_unreserve(d, va1, 2 * G), 0);
  cr_assert_eq(ga_dev_unreserve(d, va2, G), 0);
}

Test(sim, vmm_calls_enforce_granularity_and_ranges) {
  void *va;
  ga_mem_handle h;
  cr_assert_eq(ga_dev_create(d, G + 4096, &h), GA_DEV_EINVAL);
  cr_assert(strstr(d->error, "create: CUDA_ERROR_INVALID_VALUE") != NULL, "%s", d->error);
  cr_assert_eq(ga_dev_reserve(d, 3 * MiB, 0, &va), GA_DEV_EINVAL);
  cr_assert_eq(ga_dev_reserve(d, 4 * G, 0, &va), 0);
  cr_assert_eq((uintptr_t)va % G, 0);
  cr_assert_eq(ga_dev_create(d, 2 * G, &h), 0);
  cr_assert_eq(ga_dev_map(d, (char *)va + 4096, G, h, 0), GA_DEV_EINVAL);      /* misaligned */
  cr_assert_eq(ga_dev_map(d, va, 3 * G, h, 0), GA_DEV_EINVAL);                 /* beyond handle */
  cr_assert_eq(ga_dev_map(d, (char *)va + 3 * G, 2 * G, h, 0), GA_DEV_EINVAL); /* beyond reservation */
  cr_assert_eq(ga_dev_map(d, va, G, 12345, 0), GA_DEV_EINVAL);                 /* bad handle */
  cr_assert_eq(ga_dev_map(d, va, 2 * G, h, 0), 0);
  cr_assert_eq(ga_dev_map(d, va, G, h, 0), GA_DEV_EINVAL);     /* already mapped */
  cr_assert_eq(ga_dev_unmap(d, va, G), GA_DEV_EINVAL);         /* part of a mapping */
  cr_assert_eq(ga_dev_unreserve(d, va, 4 * G), GA_DEV_EINVAL); /* still mapped */
  cr_assert_eq(ga_dev_unmap(d, va, 2 * G), 0);
  cr_assert_eq(ga_dev_release(d, h), 0);
  cr_assert_eq(ga_dev_release(d, h), GA_DEV_EINVAL);           /* twice */
  cr_assert_eq(ga_dev_unreserve(d, va, 2 * G), GA_DEV_EINVAL); /* not the whole reservation */
  cr_assert_eq(ga_dev_unreserve(d, va, 4 * G), 0);
}

Test(sim, capacity_is_enforced_for_malloc_and_create) {
  void *p, *q;
  ga_mem_handle h;
  size_t f, t;
  cr_assert_eq(ga_dev_malloc(d, 40 * MiB, &p), 0);
  cr_assert_eq(ga_dev_mem_info(d, &f, &t), 0);
  cr_assert_eq(t, 64 * MiB);
  cr_assert_eq(f, 24 * MiB);
  cr_assert_eq(ga_dev_malloc(d, 30 * MiB, &q), GA_DEV_EOOM);
  cr_assert(strstr(d->error, "CUDA_ERROR_OUT_OF_MEMORY") != NULL);
  cr_assert_eq(ga_dev_create(d, 26 * MiB, &h), GA_DEV_EOOM);
  cr_assert_eq(ga_dev_create(d, 24 * MiB, &h), 0);
  cr_assert_eq(ga_dev_release(d, h), 0);
  cr_assert_eq(ga_dev_free(d, (char *)p + 512), GA_DEV_EINVAL);
  cr_assert_eq(ga_dev_free(d, p), 0);
  cr_assert_eq(ga_dev_free(d, p), GA_DEV_EINVAL);
  cr_assert_eq(ga_dev_mem_info(d, &f, &t), 0);
  cr_assert_eq(f, 64 * MiB);
}

Test(sim, malloc_memory_is_real_and_scattered_granules_still_work) {
  void *p[8];
  for (int i = 0; i < 8; i++) cr_assert_eq(ga_dev_malloc(d, G, &p[i]), 0);
  for (int i = 0; i < 8; i += 2) cr_assert_eq(ga_dev_free(d, p[i]), 0);
  void *big; /* 4 granules from 4 holes: not contiguous in device memory */
  cr_assert_eq(ga_dev_malloc(d, 4 * G + 24 * MiB, &big), 0);
  memset(big, 0x5a, 4 * G + 24 * MiB);
  for (int i = 1; i < 8; i += 2) {
    memset(p[i], i, 64);
    cr_assert_eq(ga_dev_free(d, p[i]), 0);
  }
  cr_assert_eq(((unsigned char *)big)[4 * G + 24 * MiB - 1], 0x5a);
  cr_assert_eq(ga_dev_free(d, big), 0);
}

Test(sim, events_complete_at_once_unless_the_stream_is_held) {
  ga_event e;
  ga_stream_t stream = (ga_stream_t)(uintptr_t)7;
  cr_assert_eq(ga_dev_event_create(d, &e), 0);
  cr_assert_eq(ga_dev_event_record(d, e, stream), 0);
  cr_assert_eq(ga_dev_event_query(d, e), 0);
  ga_sim_hold_stream(d, stream, 1);
  cr_assert_eq(ga_dev_event_record(d, e, stream), 0);
  cr_assert_eq(ga_dev_event_query(d, e), GA_DEV_ENOTREADY);
  cr_assert_eq(ga_dev_event_record(d, e, NULL), 0); /* re-recorded on another stream */
  cr_assert_eq(ga_dev_event_query(d, e), 0);
  cr_assert_eq(ga_dev_event_record(d, e, stream), 0);
  cr_assert_eq(ga_dev_stream_synchronize(d, stream), 0);
  cr_assert_eq(ga_dev_event_query(d, e), 0);
  ga_sim_usage u;
  ga_sim_usage_get(d, &u);
  cr_assert_eq(u.waits, 1);
  cr_assert_eq(ga_dev_event_record(d, e, stream), 0);
  ga_sim_hold_stream(d, stream, 0);
  cr_assert_eq(ga_dev_event_query(d, e), 0);
  cr_assert_eq(ga_dev_event_destroy(d, e), 0);
}

Test(sim, injected_faults_fire_on_the_nth_call_and_are_counted) {
  void *p[4];
  ga_sim_inject(d, GA_CALL_MALLOC, 3, GA_DEV_EDRIVER, 0);
  cr_assert_eq(ga_dev_malloc(d, G, &p[0]), 0);
  cr_assert_eq(ga_dev_malloc(d, G, &p[1]), 0);
  cr_assert_eq(ga_dev_malloc(d, G, &p[2]), GA_DEV_EDRIVER);
  cr_assert(strstr(d->error, "injected") != NULL);
  cr_assert_eq(ga_dev_malloc(d, G, &p[2]), 0, "a one-shot fault is disarmed");
  cr_assert_eq(d->calls[GA_CALL_MALLOC], 4);
  cr_assert_eq(d->failures[GA_CALL_MALLOC], 1);
  ga_sim_inject(d, GA_CALL_FREE, 1, GA_DEV_EDRIVER, 1);
  cr_assert_eq(ga_dev_free(d, p[0]), GA_DEV_EDRIVER);
  cr_assert_eq(ga_dev_free(d, p[0]), GA_DEV_EDRIVER, "repeat keeps failing");
  ga_sim_clear_faults(d);
  ga_sim_usage u;
  ga_sim_usage_get(d, &u);
  cr_assert_eq(u.faults_fired, 3);
  for (int i = 0; i < 3; i++) cr_assert_eq(ga_dev_free(d, p[i]), 0);
}

Test(sim, a_sticky_fault_makes_every_later_call_of_every_kind_fail) {
  void *p = NULL, *q = NULL;
  ga_event ev = NULL;
  cr_assert_eq(ga_dev_malloc(d, G, &p), 0);
  cr_assert_eq(ga_dev_event_create(d, &ev), 0);
  ga_sim_inject(d, GA_CALL_EVENT_RECORD, 2, GA_DEV_EDRIVER, GA_SIM_STICKY);
  cr_assert_eq(ga_dev_event_record(d, ev, NULL), 0, "the first call of the kind still works");
  cr_assert_eq(ga_dev_malloc(d, G, &q), 0, "other kinds work until the fault fires");
  cr_assert_eq(ga_dev_event_record(d, ev, NULL), GA_DEV_EDRIVER);
  cr_assert(strstr(d->error, "sticky") != NULL, "%s", d->error);
  cr_assert_eq(ga_dev_free(d, q), GA_DEV_EDRIVER, "every later call fails");
  cr_assert_eq(ga_dev_stream_synchronize(d, NULL), GA_DEV_EDRIVER);
  cr_assert_eq(ga_dev_synchronize(d), GA_DEV_EDRIVER);
  cr_assert_eq(ga_dev_event_query(d, ev), GA_DEV_EDRIVER);
  size_t f, t;
  cr_assert_eq(ga_dev_mem_info(d, &f, &t), GA_DEV_EDRIVER);
  ga_sim_clear_faults(d);
  ga_sim_usage u;
  ga_sim_usage_get(d, &u);
  cr_assert_eq(u.faults_fired, 6);
  cr_assert_eq(ga_dev_free(d, q), 0, "cleared: the device works again");
  cr_assert_eq(ga_dev_free(d, p), 0);
  cr_assert_eq(ga_dev_event_destroy(d, ev), 0);
}

Test(sim, capture_state_is_reported) {
  int c = -1;
  ga_stream_t stream = (ga_stream_t)(uintptr_t)9;
  cr_assert_eq(ga_dev_stream_capturing(d, stream, &c), 0);
  cr_assert_eq(c, 0);
  ga_sim_set_capturing(d, stream, 1);
  cr_assert_eq(ga_dev_stream_capturing(d, stream, &c), 0);
  cr_assert_eq(c, 1);
}

Test(sim, an_80GiB_device_costs_nothing_until_touched) {
  ga_device *big;
  char err[128];
  cr_assert_eq(ga_sim_open(0, (size_t)80 << 30, &big, err, sizeof err), 0, "%s", err);
  void *p;
  cr_assert_eq(ga_dev_malloc(big, (size_t)40 << 30, &p), 0);
  ((char *)p)[((size_t)40 << 30) - 1] = 1;
  cr_assert_eq(ga_dev_free(big, p), 0);
  ga_dev_destroy(big);
}

/* ---- Time: queued work lags behind the CPU ---- */

#define US ((uint64_t)1000)
#define MS ((uint64_t)1000000)
#define SA ((ga_stream_t)(uintptr_t)0x51)

static ga_sim_usage usage(void) {
  ga_sim_usage u;
  cr_assert_eq(ga_sim_usage_get(d, &u), 0);
  return u;
}

Test(sim, an_event_query_answers_from_the_clock_and_never_waits) {
  ga_event e;
  cr_assert_eq(ga_sim_set_lag(d, 5 * MS), 0);
  cr_assert_eq(ga_dev_event_create(d, &e), 0);
  cr_assert_eq(ga_sim_enqueue(d, SA, 100 * US), 0); /* done at now + 5.1 ms */
  cr_assert_eq(ga_dev_event_record(d, e, SA), 0);
  uint64_t t0 = usage().now_ns;
  cr_assert_eq(ga_dev_event_query(d, e), GA_DEV_ENOTREADY);
  cr_assert_eq(usage().stalls, 0, "a query does not wait");
  cr_assert_lt(usage().now_ns - t0, 10 * US, "a query costs its call only");
  ga_sim_advance(d, 5 * MS + 100 * US);
  cr_assert_eq(ga_dev_event_query(d, e), 0, "the work has completed by now");
  cr_assert_eq(ga_dev_event_destroy(d, e), 0);
}

Test(sim, a_synchronisation_moves_the_clock_to_the_work_and_counts_the_stall) {
  cr_assert_eq(ga_sim_set_lag(d, 5 * MS), 0);
  ga_sim_enqueue(d, SA, 1 * MS);
  uint64_t queued = usage().now_ns, done = queued + 6 * MS;
  cr_assert_eq(ga_dev_stream_synchronize(d, SA), 0);
  ga_sim_usage u = usage();
  cr_assert_eq(u.stalls, 1);
  cr_assert_geq(u.now_ns, done, "the CPU is past the work");
  cr_assert_eq(u.stall_ns, done - (queued + 5 * US), "the wait: completion minus the call's start and cost");
  cr_assert_eq(ga_dev_stream_synchronize(d, SA), 0);
  cr_assert_eq(usage().stalls, 1, "nothing left to wait for: no second stall");
  ga_event e;
  cr_assert_eq(ga_dev_event_create(d, &e), 0);
  ga_sim_enqueue(d, SA, 0);
  cr_assert_eq(ga_dev_event_record(d, e, SA), 0);
  cr_assert_eq(ga_dev_event_synchronize(d, e), 0);
  cr_assert_eq(usage().stalls, 2, "an event synchronisation waits too");
  cr_assert_eq(ga_dev_event_destroy(d, e), 0);
}

Test(sim, calls_take_the_time_of_the_cost_table) {
  void *va;
  ga_mem_handle h;
  cr_assert_eq(ga_sim_set_cost(d, GA_CALL_CREATE, 10, 3), 0);
  cr_assert_eq(ga_sim_set_cost(d, GA_CALL_SET_ACCESS, 2, 40), 0);
  uint64_t t0 = usage().driver_ns;
  cr_assert_eq(ga_dev_create(d, 4 * G, &h), 0);
  cr_assert_eq(usage().driver_ns - t0, 10 * US + 4 * 3 * US, "per call plus per granule");
  cr_assert_eq(ga_dev_reserve(d, 4 * G, 0, &va), 0);
  for (int i = 0; i < 4; i++) cr_assert_eq(ga_dev_map(d, (char *)va + i * G, G, h, i * G), 0);
  int self = 0;
  t0 = usage().driver_ns;
  cr_assert_eq(ga_dev_set_access(d, va, 4 * G, &self, 1), 0);
  cr_assert_eq(usage().driver_ns - t0, 2 * US + 4 * 40 * US, "one access call over four mappings");
  cr_assert_eq(ga_dev_unmap(d, va, 4 * G), 0);
  cr_assert_eq(ga_dev_map(d, va, 4 * G, h, 0), 0);
  t0 = usage().driver_ns;
  cr_assert_eq(ga_dev_set_access(d, va, 4 * G, &self, 1), 0);
  cr_assert_eq(usage().driver_ns - t0, 2 * US + 40 * US, "over one mapping of the whole handle");
  cr_assert_eq(d->ns[GA_CALL_SET_ACCESS], 2 * US + 4 * 40 * US + 2 * US + 40 * US, "the device layer agrees");
  cr_assert_eq(ga_dev_unmap(d, va, 4 * G), 0);
  cr_assert_eq(ga_dev_unreserve(d, va, 4 * G), 0);
  cr_assert_eq(ga_dev_release(d, h), 0);
}

/* The published figures are per handle: the Blackwell probe made 10 GiB in
 * 2, 16 and 64 MiB handles in about 13.8 us each, whatever the size. */
static uint64_t cost_of_create(size_t size) {
  ga_mem_handle h;
  uint64_t t0 = usage().driver_ns;
  cr_assert_eq(ga_dev_create(d, size, &h), 0);
  uint64_t ns = usage().driver_ns - t0;
  cr_assert_eq(ga_dev_release(d, h), 0);
  return ns;
}

Test(sim, the_named_cost_tables_charge_per_handle) {
  cr_assert_str_eq(ga_sim_cost_table(d), "blackwell", "the default");
  cr_assert_eq(cost_of_create(G), 13800, "13.8 us for one 2 MiB handle");
  cr_assert_eq(cost_of_create(32 * G), 13800, "and for one of 64 MiB");
  void *va;
  ga_mem_handle h;
  int self = 0;
  cr_assert_eq(ga_dev_create(d, 4 * G, &h), 0);
  cr_assert_eq(ga_dev_reserve(d, 4 * G, 0, &va), 0);
  for (int i = 0; i < 4; i++) cr_assert_eq(ga_dev_map(d, (char *)va + i * G, G, h, i * G), 0);
  uint64_t t0 = usage().driver_ns;
  cr_assert_eq(ga_dev_set_access(d, va, 4 * G, &self, 1), 0);
  cr_assert_eq(usage().driver_ns - t0, 4 * 69 * US, "69 us per mapping");
  t0 = usage().driver_ns;
  cr_assert_eq(ga_dev_unmap(d, va, 4 * G), 0);
  cr_assert_eq(usage().driver_ns - t0, 4 * 39 * US, "39 us per mapping");
  cr_assert_eq(ga_sim_set_cost_table(d, "a100"), 0);
  cr_assert_str_eq(ga_sim_cost_table(d), "a100");
  cr_assert_eq(cost_of_create(16 * G), 30 * US, "30 us for one handle of 32 MiB");
  cr_assert_eq(ga_dev_map(d, va, 4 * G, h, 0), 0);
  t0 = usage().driver_ns;
  cr_assert_eq(ga_dev_set_access(d, va, 4 * G, &self, 1), 0);
  cr_assert_eq(usage().driver_ns - t0, 21 * US, "one mapping of the whole handle");
  t0 = usage().driver_ns;
  cr_assert_eq(ga_dev_unmap(d, va, 4 * G), 0);
  cr_assert_eq(usage().driver_ns - t0, 11 * US);
  cr_assert_eq(ga_sim_set_cost_table(d, "h100"), GA_DEV_EINVAL);
  cr_assert_str_eq(ga_sim_cost_table(d), "a100", "an unknown name changes nothing");
  cr_assert_eq(ga_dev_unreserve(d, va, 4 * G), 0);
  cr_assert_eq(ga_dev_release(d, h), 0);
}

Test(sim, without_queued_work_nothing_waits) {
  cr_assert_eq(ga_sim_set_lag(d, 5 * MS), 0);
  cr_assert_eq(ga_dev_stream_synchronize(d, SA), 0);
  cr_assert_eq(ga_dev_synchronize(d), 0);
  cr_assert_eq(usage().stalls, 0);
}

/* ---- Host failures: the host's, never the device's ---- */

Test(sim, a_host_that_cannot_reserve_or_map_is_a_host_failure_not_device_oom) {
  void *va;
  ga_mem_handle h;
  cr_assert_eq(ga_sim_inject_host(d, 1, ENOMEM, 0), 0);
  cr_assert_eq(ga_dev_reserve(d, 2 * G, 0, &va), GA_DEV_ENOMEM);
  cr_assert(strstr(d->error, "reserve: host: ") && strstr(d->error, "vm.max_map_count") &&
                !strstr(d->error, "CUDA_ERROR_OUT_OF_MEMORY"),
            "%s", d->error);
  cr_assert_eq(usage().live_reservations, 0);
  cr_assert_eq(ga_dev_reserve(d, 2 * G, 0, &va), 0, "the fault fired once");
  cr_assert_eq(ga_dev_create(d, 2 * G, &h), 0);
  cr_assert_eq(ga_sim_inject_host(d, 1, ENOMEM, 0), 0);
  cr_assert_eq(ga_dev_map(d, va, 2 * G, h, 0), GA_DEV_ENOMEM);
  cr_assert(strstr(d->error, "map: host: ") != NULL, "%s", d->error);
  ga_sim_usage u = usage();
  cr_assert(u.live_mappings == 0 && u.used == 2 * G && u.host_failures == 2 && u.faults_fired == 2,
            "mappings %zu used %zu host failures %llu", u.live_mappings, u.used,
            (unsigned long long)u.host_failures);
  cr_assert_eq(ga_dev_map(d, va, 2 * G, h, 0), 0, "%s", d->error);
  memset(va, 0x3c, 2 * G);
  cr_assert_eq(ga_dev_unmap(d, va, 2 * G), 0);
  cr_assert_eq(ga_dev_release(d, h), 0);
  cr_assert_eq(ga_dev_unreserve(d, va, 2 * G), 0);
}

Test(sim, a_map_that_fails_half_way_on_the_host_leaves_nothing_mapped) {
  ga_mem_handle two;
  void *va, *va2;
  cr_assert_eq(ga_dev_create(d, 2 * G, &two), 0);
  cr_assert_eq(ga_dev_reserve(d, 4 * G, 0, &va), 0);
  /* Each granule mapped on its own, apart, and written: they stay in two
   * places of device memory that do not follow each other. */
  cr_assert_eq(ga_dev_map(d, (char *)va + G, G, two, G), 0);
  cr_assert_eq(ga_dev_map(d, (char *)va + 3 * G, G, two, 0), 0);
  ((char *)va)[G + 5] = 0x15;
  ((char *)va)[3 * G + 5] = 0x05;
  cr_assert_eq(ga_dev_unmap(d, (char *)va + G, G), 0);
  cr_assert_eq(ga_dev_unmap(d, (char *)va + 3 * G, G), 0);
  cr_assert_eq(ga_dev_reserve(d, 2 * G, 0, &va2), 0);
  cr_assert_eq(ga_sim_inject_host(d, 2, ENOMEM, 0), 0); /* the second of two host maps */
  cr_assert_eq(ga_dev_map(d, va2, 2 * G, two, 0), GA_DEV_ENOMEM);
  cr_assert(strstr(d->error, "map: host: mapping device memory of 2097152 bytes failed") != NULL, "%s",
            d->error);
  cr_assert_eq(usage().live_mappings, 0);
  uint64_t mask;
  cr_assert_eq(ga_sim_access(d, va2, &mask), GA_DEV_EINVAL, "no mapping was recorded");
  cr_assert_eq(ga_dev_map(d, va2, 2 * G, two, 0), 0);
  cr_assert_eq(((char *)va2)[5], 0x05, "nothing written was lost");
  cr_assert_eq(((char *)va2)[G + 5], 0x15);
  cr_assert_eq(ga_dev_unmap(d, va2, 2 * G), 0);
  cr_assert_eq(ga_dev_unreserve(d, va2, 2 * G), 0);
  cr_assert_eq(ga_dev_unreserve(d, va, 4 * G), 0);
  cr_assert_eq(ga_dev_release(d, two), 0);
}

/* ---- The ranges' tree (rtree.c) ---- */

enum { SLOTS = 3000, STRIDE = 4096 };
static ga_rnode nodes[SLOTS];
static int in_tree[SLOTS];
static const uintptr_t BASE = (uintptr_t)1 << 40;

static uint64_t xs = 88172645463325252ULL;
static uint64_t rnd(void) {
  xs ^= xs << 13;
  xs ^= xs >> 7;
  xs ^= xs << 17;
  return xs;
}

/* What the tree must answer, by brute force over the slots (slot i starts
 * at BASE + i * STRIDE, so slot order is address order). */
static ga_rnode *ref_lower(uintptr_t key) {
  for (int i = 0; i < SLOTS; i++)
    if (in_tree[i] && nodes[i].va >= key) return &nodes[i];
  return NULL;
}
static ga_rnode *ref_floor(uintptr_t key) {
  for (int i = SLOTS; i-- > 0;)
    if (in_tree[i] && nodes[i].va <= key) return &nodes[i];
  return NULL;
}
static ga_rnode *ref_find(uintptr_t a) {
  for (int i = 0; i < SLOTS; i++)
    if (in_tree[i] && a >= nodes[i].va && a - nodes[i].va < nodes[i].size) return &nodes[i];
  return NULL;
}
static int ref_overlaps(uintptr_t va, size_t size) {
  for (int i = 0; i < SLOTS; i++)
    if (in_tree[i] && nodes[i].va < va + size && va < nodes[i].va + nodes[i].size) return 1;
  return 0;
}

static void compare(const ga_rtree *t) {
  cr_assert_eq(ga_rtree_check(t), 0);
  const ga_rnode *n = t->first;
  for (int i = 0; i < SLOTS; i++)
    if (in_tree[i]) {
      cr_assert_eq(n, &nodes[i], "the list skips or repeats slot %d", i);
      n = n->next;
    }
  cr_assert_null(n);
  for (int k = 0; k < 40; k++) {
    uintptr_t a = BASE - STRIDE + (uintptr_t)(rnd() % ((SLOTS + 2) * (uint64_t)STRIDE));
    size_t size = 1 + (size_t)(rnd() % (3 * STRIDE));
    cr_assert_eq(ga_rtree_lower(t, a), ref_lower(a), "lower(%#lx)", (unsigned long)a);
    cr_assert_eq(ga_rtree_find(t, a), ref_find(a), "find(%#lx)", (unsigned long)a);
    cr_assert_eq(ga_rtree_overlaps(t, a, size), ref_overlaps(a, size), "overlaps(%#lx, %zu)",
                 (unsigned long)a, size);
    cr_assert_eq(ga_rtree_floor(t, a), ref_floor(a), "floor(%#lx)", (unsigned long)a);
  }
}

Test(sim_ranges, random_inserts_and_removals_keep_order_and_answer_every_query) {
  ga_rtree t = {0};
  size_t live = 0;
  for (int step = 1; step <= 40000; step++) {
    int i = (int)(rnd() % SLOTS);
    if (in_tree[i]) {
      ga_rtree_remove(&t, &nodes[i]);
      live--;
    } else {
      nodes[i].va = BASE + (uintptr_t)i * STRIDE + (uintptr_t)(rnd() % 64);
      nodes[i].size = 1 + (size_t)(rnd() % (STRIDE - 64));
      ga_rtree_insert(&t, &nodes[i]);
      live++;
    }
    in_tree[i] ^= 1;
    cr_assert_eq(t.n, live);
    if (step % 1000 == 0) compare(&t);
  }
  while (t.first) ga_rtree_remove(&t, t.first);
  cr_assert(t.n == 0 && t.root == NULL);
}

Test(sim_ranges, addresses_in_order_make_a_shallow_tree_and_the_check_sees_damage) {
  enum { N = 1 << 16 };
  static ga_rnode v[N];
  ga_rtree t = {0};
  for (size_t i = 0; i < N; i++) {
    v[i].va = BASE + i * G; /* as mallocs in a row come: granule after granule */
    v[i].size = G;
    ga_rtree_insert(&t, &v[i]);
  }
  cr_assert_eq(ga_rtree_check(&t), 0);
  size_t worst = 0;
  for (size_t i = 0; i < N; i += 97) {
    size_t depth = 0;
    for (const ga_rnode *n = t.root; n != &v[i]; n = v[i].va < n->va ? n->left : n->right) depth++;
    if (depth > worst) worst = depth;
  }
  cr_assert_lt(worst, 64, "depth %zu for 2^16 ranges", worst);
  uint32_t p = t.root->prio;
  t.root->prio = 0; /* the heap rule broken: the check must say so */
  cr_assert_gt(ga_rtree_check(&t), 0);
  t.root->prio = p;
  v[5].size = 3 * G; /* overlaps the next */
  cr_assert_gt(ga_rtree_check(&t), 0);
}

/* ---- At scale: the host's limits are not the device's ---- */

/* The host mappings this process holds (lines of /proc/self/maps). The
 * bounds below leave room for the C library's (or a sanitizer's) own heap:
 * what they rule out is a host mapping per segment or per granule. */
static size_t host_mappings(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  cr_assert_not_null(f);
  size_t n = 0;
  for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
  fclose(f);
  return n;
}

Test(sim_scale, a_hundred_thousand_mallocs_take_no_host_mapping_each) {
  enum { N = 100000 };
  static void *p[N];
  ga_device *big;
  char err[128];
  cr_assert_eq(ga_sim_open(0, (size_t)256 << 30, &big, err, sizeof err), 0, "%s", err);
  size_t before = host_mappings();
  for (int i = 0; i < N; i++) cr_assert_eq(ga_dev_malloc(big, G, &p[i]), 0, "malloc %d: %s", i, big->error);
  size_t during = host_mappings();
  cr_assert_lt(during, before + 1000, "%zu host mappings for %d mallocs (%zu before)", during, N, before);
  ((char *)p[0])[0] = 1;
  ((char *)p[N - 1])[G - 1] = 2;
  for (int i = 0; i < N; i += 2) cr_assert_eq(ga_dev_free(big, p[i]), 0);
  /* The free tail taken whole, then 8 granules that can only come from 8
   * holes: a malloc of scattered granules, mapped on its own. */
  void *tail, *q;
  cr_assert_eq(ga_dev_malloc(big, (((size_t)256 << 30) / G - N) * G, &tail), 0, "%s", big->error);
  cr_assert_eq(ga_dev_malloc(big, 8 * G, &q), 0, "%s", big->error);
  memset(q, 0x21, 8 * G);
  cr_assert_eq(((char *)p[N - 1])[G - 1], 2, "a neighbour is untouched");
  cr_assert_eq(((char *)p[1])[0], 0);
  cr_assert_lt(host_mappings(), before + 1000);
  cr_assert_eq(ga_dev_free(big, q), 0);
  cr_assert_eq(ga_dev_free(big, tail), 0);
  for (int i = 1; i < N; i += 2) cr_assert_eq(ga_dev_free(big, p[i]), 0);
  ga_sim_usage u;
  ga_sim_usage_get(big, &u);
  cr_assert(u.used == 0 && u.live_mallocs == 0 && u.live_handles == 0 && u.live_mappings == 0 &&
            u.live_reservations == 0);
  ga_dev_destroy(big);
}

Test(sim_scale, a_hundred_thousand_native_segments_through_the_api_and_back) {
  enum { N = 200000 }; /* 1 MiB blocks: two to a 2 MiB segment */
  static void *p[N];
  /* With ga_check after every call (GA_CHECK_EVERY_CALL), every 4096th: a
   * walk of up to 100,000 segments per call would take hours. */
  setenv("GA_CHECK_STRIDE", "4096", 0);
  ga_device *big;
  ga_allocator_t *a;
  char err[128];
  cr_assert_eq(ga_sim_open(0, (size_t)256 << 30, &big, err, sizeof err), 0, "%s", err);
  cr_assert_eq(ga_create_on_device("", big, &a), GA_OK, "%s", ga_last_error());
  size_t before = host_mappings();
  for (int i = 0; i < N; i++)
    cr_assert_eq(ga_malloc(a, MiB, NULL, &p[i]), GA_OK, "%d: %s", i, ga_last_error());
  ga_stats_t st;
  cr_assert_eq(ga_stats(a, &st), GA_OK);
  cr_assert_eq(st.segment[GA_POOL_ALL].current, N / 2);
  cr_assert_lt(host_mappings(), before + 1000, "%zu host mappings for %d segments", host_mappings(), N / 2);
  cr_assert_eq(ga_check(a), 0);
  for (int i = 0; i < N; i++) cr_assert_eq(ga_free(a, p[i]), GA_OK);
  cr_assert_eq(ga_empty_cache(a), GA_OK);
  ga_sim_usage u;
  ga_sim_usage_get(big, &u);
  cr_assert(u.used == 0 && u.live_mallocs == 0, "used %zu, mallocs %zu", u.used, u.live_mallocs);
  ga_destroy(a);
  ga_dev_destroy(big);
}

Test(sim_scale, expandable_segments_map_twenty_thousand_granules_in_few_host_mappings) {
  ga_device *big;
  ga_allocator_t *a;
  char err[128];
  void *p[100];
  cr_assert_eq(ga_sim_open(0, (size_t)256 << 30, &big, err, sizeof err), 0, "%s", err);
  cr_assert_eq(ga_create_on_device("expandable_segments:True,expandable_page_size_mb:2", big, &a), GA_OK,
               "%s", ga_last_error());
  size_t before = host_mappings();
  for (int i = 0; i < 100; i++)
    cr_assert_eq(ga_malloc(a, 400 * MiB, NULL, &p[i]), GA_OK, "%d: %s", i, ga_last_error());
  ga_sim_usage u;
  ga_sim_usage_get(big, &u);
  cr_assert_geq(u.used, (size_t)40000 << 20);
  cr_assert_lt(host_mappings(), before + 1000, "%zu host mappings for %zu granules", host_mappings(),
               u.used / G);
  for (int i = 0; i < 100; i++) cr_assert_eq(ga_free(a, p[i]), GA_OK);
  cr_assert_eq(ga_check(a), 0);
  ga_destroy(a);
  ga_dev_destroy(big);
}

/* Native and expandable: the host fails every mmap; the allocator says so,
 * stays consistent, and works once the host does. */
Test(sim_scale, ga_malloc_reports_a_host_failure_as_the_hosts_not_as_oom) {
  const char *confs[] = {"", "expandable_segments:True"};
  for (int c = 0; c < 2; c++) {
    ga_device *dev;
    ga_allocator_t *a;
    char err[128];
    void *p;
    cr_assert_eq(ga_sim_open(0, (size_t)1 << 30, &dev, err, sizeof err), 0, "%s", err);
    cr_assert_eq(ga_create_on_device(confs[c], dev, &a), GA_OK, "%s", ga_last_error());
    cr_assert_eq(ga_sim_inject_host(dev, 1, ENOMEM, 1), 0);
    ga_status_t st = ga_malloc(a, 4 * MiB, NULL, &p);
    cr_assert_eq(st, GA_ERR_HOST_MEMORY, "conf '%s': %s (%s)", confs[c], ga_status_str(st), ga_last_error());
    cr_assert(strstr(ga_last_error(), "host") != NULL, "%s", ga_last_error());
    cr_assert(strstr(dev->error, ": host: ") != NULL, "%s", dev->error);
    ga_stats_t stats;
    cr_assert_eq(ga_stats(a, &stats), GA_OK);
    cr_assert_eq(stats.num_ooms, 0, "not an out-of-memory error");
    cr_assert_eq(ga_check(a), 0);
    cr_assert_eq(ga_sim_clear_faults(dev), 0);
    cr_assert_eq(ga_malloc(a, 4 * MiB, NULL, &p), GA_OK, "%s", ga_last_error());
    memset(p, 0x5e, 4 * MiB);
    cr_assert_eq(ga_free(a, p), GA_OK);
    cr_assert_eq(ga_check(a), 0);
    ga_destroy(a);
    ga_sim_usage u;
    ga_sim_usage_get(dev, &u);
    cr_assert(u.used == 0 && u.live_mallocs == 0 && u.live_reservations == 0 && u.live_mappings == 0);
    ga_dev_destroy(dev);
  }
}
