/* test_sim.c — the simulated device keeps the driver's rules. */
#include <criterion/criterion.h>
#include <string.h>

#include "device/sim.h"

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
  ga_stream_t s = (ga_stream_t)(uintptr_t)7;
  cr_assert_eq(ga_dev_event_create(d, &e), 0);
  cr_assert_eq(ga_dev_event_record(d, e, s), 0);
  cr_assert_eq(ga_dev_event_query(d, e), 0);
  ga_sim_hold_stream(d, s, 1);
  cr_assert_eq(ga_dev_event_record(d, e, s), 0);
  cr_assert_eq(ga_dev_event_query(d, e), GA_DEV_ENOTREADY);
  cr_assert_eq(ga_dev_event_record(d, e, NULL), 0); /* re-recorded on another stream */
  cr_assert_eq(ga_dev_event_query(d, e), 0);
  cr_assert_eq(ga_dev_event_record(d, e, s), 0);
  cr_assert_eq(ga_dev_stream_synchronize(d, s), 0);
  cr_assert_eq(ga_dev_event_query(d, e), 0);
  ga_sim_usage u;
  ga_sim_usage_get(d, &u);
  cr_assert_eq(u.waits, 1);
  cr_assert_eq(ga_dev_event_record(d, e, s), 0);
  ga_sim_hold_stream(d, s, 0);
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
  ga_stream_t s = (ga_stream_t)(uintptr_t)9;
  cr_assert_eq(ga_dev_stream_capturing(d, s, &c), 0);
  cr_assert_eq(c, 0);
  ga_sim_set_capturing(d, s, 1);
  cr_assert_eq(ga_dev_stream_capturing(d, s, &c), 0);
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

Test(sim, without_queued_work_nothing_waits) {
  cr_assert_eq(ga_sim_set_lag(d, 5 * MS), 0);
  cr_assert_eq(ga_dev_stream_synchronize(d, SA), 0);
  cr_assert_eq(ga_dev_synchronize(d), 0);
  cr_assert_eq(usage().stalls, 0);
}
