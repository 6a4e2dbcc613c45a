/* test_chaos.c — every feature at once, under injected device faults.
 *
 * A seeded random walk over the whole API: allocations of heavy-tailed sizes
 * on three streams, frees, record_stream with held streams, empty_cache,
 * memory fractions, private pools around simulated captures, tags and
 * sleep/wake with offload, peer access on a two-device machine, snapshots
 * with history recording switched on and off, and device faults armed at
 * random moments on any call kind. empty_cache, sleep and wake happen during
 * captures too, peer access is turned on while allocations sleep, and calls
 * with out-of-range arguments are mixed in (each refused by name, changing
 * nothing). After every step ga_check() must pass and no capture may have
 * been invalidated (the device counts every call that would); every live
 * allocation keeps its bytes (checked every few steps and at the end); a
 * failed call returns an error named in the status and leaves the allocator
 * usable. The fixture then checks that nothing is left on the device.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fixture.h"

TestSuite(chaos, .fini = fx_close);

#define MAXLIVE 256
#define STAMP   4096 /* bytes checked at each end of an allocation */

typedef struct live {
  unsigned char *p;
  size_t size;
  uint32_t seed;
  int kv; /* tagged "kv" */
} live;

static uint64_t rng;
static uint32_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}

static unsigned char byte_at(uint32_t seed, size_t i) {
  return (unsigned char)((seed * 2654435761u) >> 24 ^ (i * 31));
}

static void stamp(const live *l) {
  size_t n = l->size < STAMP ? l->size : STAMP;
  for (size_t i = 0; i < n; i++) l->p[i] = byte_at(l->seed, i);
  for (size_t i = 0; i < n; i++) l->p[l->size - n + i] = byte_at(l->seed, l->size - n + i);
}

/* Is every granule of l mapped? (Reading an unmapped one would crash.) */
static uint64_t want_access = 1; /* device 0, and 1 once peer access is on */

/* Is every granule of l mapped, for every device that should see it?
 * (Reading an unmapped one would crash.) */
static int mapped(const live *l) {
  uint64_t mask;
  const ga_block *b = ga_blockmap_get(&fx_a->pol.map, (uintptr_t)l->p);
  if (!b) return 0;
  if (!b->seg->expandable) return 1; /* a malloc'd segment */
  /* (A refused ga_enable_peer_access may have granted some ranges already.) */
  for (size_t off = 0; off < l->size; off += 2 * MiB)
    if (fx_access(l->p + off, &mask) != 0 || (mask & want_access) != want_access) return 0;
  return fx_access(l->p + l->size - 1, &mask) == 0 && (mask & want_access) == want_access;
}

static int intact(const live *l) {
  if (!mapped(l)) return 0;
  size_t n = l->size < STAMP ? l->size : STAMP;
  for (size_t i = 0; i < n; i++)
    if (l->p[i] != byte_at(l->seed, i) || l->p[l->size - n + i] != byte_at(l->seed, l->size - n + i))
      return 0;
  return 1;
}

static size_t pick_size(void) {
  uint32_t r = next() % 100;
  if (r < 50) return 1 + next() % (1u << 20);            /* small pool */
  if (r < 85) return (1u << 20) + next() % (12u << 20);  /* large, under 13 MiB */
  if (r < 97) return (13u << 20) + next() % (50u << 20); /* large, past a 20 MiB page */
  return (64u << 20) + next() % (200u << 20);            /* rare and big */
}

/* The statuses a call may return while faults are armed. */
static void assert_clean(ga_status_t st, const char *what) {
  cr_assert(st == GA_OK || st == GA_ERR_OOM || st == GA_ERR_DEVICE, "%s: unexpected %s: %s", what,
            ga_status_str(st), ga_last_error());
  if (st != GA_OK) cr_assert(ga_last_error()[0] != 0, "%s failed without saying why", what);
}

static uint64_t captures_broken(void) {
  ga_sim_usage u;
  fx_usage(&u);
  return u.captures_broken;
}

/* Calls with arguments out of range: each is refused with its own status and
 * a message, and changes nothing. */
static void out_of_range_call(int expandable, const live *v, int n) {
  ga_stats_t before = fx_stats();
  double fraction = ga_get_memory_fraction(fx_a);
  void *p = (void *)1;
  switch (next() % 7) {
    case 0: {
      static const double bad[] = {-0.25, 1.5, 1e300, -1e-9};
      cr_assert_eq(ga_set_memory_fraction(fx_a, bad[next() % 4]), GA_ERR_INVALID);
      cr_assert_eq(ga_get_memory_fraction(fx_a), fraction, "a refused fraction changes nothing");
      break;
    }
    case 1: {
      static const int bad[] = {2, -1, 64, 1000, INT32_MIN, INT32_MAX, 0};
      cr_assert_eq(ga_enable_peer_access(fx_a, bad[next() % 7]), GA_ERR_INVALID, "%s", ga_last_error());
      break;
    }
    case 2:
      cr_assert_eq(ga_malloc(fx_a, ((size_t)1 << 60) + 1 + next(), S1, &p), GA_ERR_OOM);
      cr_assert_null(p);
      break;
    case 3:
      if (n > 0) {
        cr_assert_eq(ga_tag(fx_a, v[next() % (unsigned)n].p, "a tag of more than thirty-one characters"),
                     GA_ERR_INVALID);
      }
      break;
    case 4:
      if (n > 0 && v[0].size > 1) {
        cr_assert_eq(ga_free(fx_a, v[0].p + 1), GA_ERR_BAD_POINTER);
        cr_assert(strstr(ga_last_error(), "inside the allocation"), "%s", ga_last_error());
      }
      break;
    case 5:
      if (!expandable) {
        cr_assert_eq(ga_sleep(fx_a, "kv", 0), GA_ERR_UNSUPPORTED);
      } else {
        cr_assert_eq(ga_tag(fx_a, (void *)(uintptr_t)0x10, "kv"), GA_ERR_BAD_POINTER);
      }
      break;
    default: cr_assert_eq(ga_config_validate("max_split_size_mb:99999999999999999999"), GA_ERR_CONFIG); break;
  }
  cr_assert(ga_last_error()[0] != 0 || n == 0, "refused without saying why");
  ga_stats_t after = fx_stats();
  cr_assert_eq(after.allocated_bytes[GA_POOL_ALL].current, before.allocated_bytes[GA_POOL_ALL].current);
  cr_assert_eq(after.reserved_bytes[GA_POOL_ALL].current, before.reserved_bytes[GA_POOL_ALL].current);
}

static void run_on(const char *conf, size_t capacity, uint64_t seed, int steps) {
  /* Device 0 of a machine with two, so that peer access can be turned on. */
  fx_open_on(2, conf, capacity);
  want_access = 1;
  int expandable = conf && strstr(conf, "expandable_segments:True");
  live v[MAXLIVE];
  int n = 0, held = 0, routed = 0, pools_made = 0, asleep = 0;
  /* CHAOS_SEED=N explores another walk (the default ones run in CI);
   * CHAOS_EVERY=1 checks every allocation's bytes after every step;
   * CHAOS_TRACE=1 prints each step. */
  int every = getenv("CHAOS_EVERY") != NULL, trace = getenv("CHAOS_TRACE") != NULL;
  rng = seed ^ (getenv("CHAOS_SEED") ? strtoull(getenv("CHAOS_SEED"), NULL, 0) * 0x9e3779b97f4a7c15ull : 0);
  if (!rng) rng = 1;
  for (int step = 0; step < steps; step++) {
    uint32_t op = next() % 100;
    ga_stream_t streams[3] = {S1, S2, S3};
    if (op < 40 && n < MAXLIVE) { /* allocate */
      ga_stream_t stream = streams[next() % 3];
      size_t size = pick_size();
      void *p = NULL;
      ga_status_t st = ga_malloc(fx_a, size, stream, &p);
      assert_clean(st, "ga_malloc");
      if (st == GA_OK) {
        v[n] = (live){p, size, next(), 0};
        stamp(&v[n]);
        if (expandable && next() % 3 == 0) {
          cr_assert_eq(ga_tag(fx_a, p, "kv"), GA_OK, "%s", ga_last_error());
          v[n].kv = 1;
        }
        n++;
      }
    } else if (op < 72 && n > 0) { /* free */
      int i = (int)(next() % (unsigned)n);
      if (!(asleep && v[i].kv))
        cr_assert(intact(&v[i]), "step %d: allocation %p lost its bytes before its free", step,
                  (void *)v[i].p);
      ga_status_t st = ga_free(fx_a, v[i].p);
      if (asleep && v[i].kv && st == GA_ERR_INVALID) {
        cr_assert(strstr(ga_last_error(), "asleep"), "%s", ga_last_error());
        continue; /* an asleep allocation cannot be freed */
      }
      /* Freed all the same when its streams could not be waited for (quarantined). */
      cr_assert(st == GA_OK || (st == GA_ERR_DEVICE && strstr(ga_last_error(), "is freed, but")),
                "step %d: ga_free: %s", step, ga_last_error());
      v[i] = v[--n];
    } else if (op < 77 && n > 0) { /* use on another stream */
      ga_status_t st = ga_record_stream(fx_a, v[next() % (unsigned)n].p, streams[next() % 3]);
      cr_assert_eq(st, GA_OK, "%s", ga_last_error());
    } else if (op < 80) { /* a stream starts or finishes work */
      int k = (int)(next() % 3);
      held ^= 1 << k;
      fx_hold(streams[k], (held >> k) & 1);
    } else if (op < 84) { /* arm a fault on any call kind */
      ga_device_call_t kind = (ga_device_call_t)(next() % GA_CALL_COUNT);
      fx_inject(kind, 1 + next() % 4, next() % 2 ? GA_DEV_EOOM : GA_DEV_EDRIVER, 0);
    } else if (op < 86) {
      fx_clear_faults();
    } else if (op < 88) { /* during a capture too */
      assert_clean(ga_empty_cache(fx_a), "ga_empty_cache");
    } else if (op == 88 && want_access == 1 && (asleep || !expandable || next() % 4 == 0)) {
      /* A peer (NCCL) needs the memory too; mostly while allocations sleep. */
      ga_status_t st = ga_enable_peer_access(fx_a, 1);
      assert_clean(st, "ga_enable_peer_access");
      if (st == GA_OK) want_access = 3;
    } else if (op < 89) {
      double f = next() % 2 ? 1.0 : 0.5 + (double)(next() % 50) / 100.0;
      cr_assert_eq(ga_set_memory_fraction(fx_a, f), GA_OK);
    } else if (op < 93) { /* a capture on S3 begins or ends */
      if (!routed) {
        fx_capture(S3, 1);
        cr_assert_eq(ga_begin_allocate_to_pool(fx_a, 100 + (uint64_t)pools_made, S3), GA_OK, "%s",
                     ga_last_error());
        routed = 1;
      } else {
        fx_capture(S3, 0); /* the capture ends, then the pool stops (as PyTorch does) */
        /* (A flush an empty_cache left for the end may fail under faults.) */
        assert_clean(ga_end_allocate_to_pool(fx_a, 100 + (uint64_t)pools_made), "ga_end_allocate_to_pool");
        /* The graph is dropped at once half the time, else kept until later. */
        if (next() % 2) assert_clean(ga_release_pool(fx_a, 100 + (uint64_t)pools_made), "ga_release_pool");
        pools_made++;
        routed = 0;
      }
    } else if (op == 96 || op == 97) {
      out_of_range_call(expandable, v, n);
    } else if (op == 95) { /* a snapshot, with history recording switched at random */
      cr_assert_eq(ga_record_history(fx_a, (int)(next() % 2), 64 + next() % 512), GA_OK, "%s",
                   ga_last_error());
      size_t len = ga_snapshot_json(fx_a, NULL, 0);
      char *json = malloc(len + 1);
      cr_assert(json != NULL);
      cr_assert_eq(ga_snapshot_json(fx_a, json, len + 1), len);
      cr_assert(len > 2 && json[0] == '{' && json[len - 1] == '}', "a JSON object");
      free(json);
      char stats[64];
      cr_assert_gt(ga_stats_json(fx_a, stats, sizeof stats), sizeof stats, "the length of the whole text");
    } else if (op < 95 && expandable) { /* sleep and wake the "kv" allocations, during captures too */
      if (!asleep && routed) {
        /* Live memory cannot go to sleep without waiting for the device. */
        cr_assert_eq(ga_sleep(fx_a, "kv", GA_SLEEP_OFFLOAD), GA_ERR_INVALID);
        cr_assert(strstr(ga_last_error(), "capture is underway"), "%s", ga_last_error());
        assert_clean(ga_sleep(fx_a, NULL, 0), "ga_sleep without tags");
      } else if (!asleep) {
        ga_status_t st = ga_sleep(fx_a, "kv", GA_SLEEP_OFFLOAD);
        assert_clean(st, "ga_sleep");
        asleep = 1; /* after a failure, what did go to sleep stays asleep */
      } else {
        ga_status_t st = ga_wake(fx_a);
        assert_clean(st, "ga_wake");
        asleep = st != GA_OK;
      }
    }
    if (trace)
      fprintf(stderr, "step %d op %u live %d asleep %d routed %d: %s\n", step, op, n, asleep, routed,
              ga_last_error());
    cr_assert_eq(ga_check(fx_a), 0, "step %d (op %u) broke an invariant (see stderr)", step, op);
    cr_assert_eq(captures_broken(), 0, "step %d (op %u, routed %d) invalidated a capture: %s", step, op,
                 routed, ga_last_error());
    for (int i = 0; i < n && (step % 16 == 0 || every); i++) {
      if (asleep && v[i].kv) continue;
      const ga_block *b = ga_blockmap_get(&fx_a->pol.map, (uintptr_t)v[i].p);
      uint64_t m0 = 0, m1 = 0;
      int r0 = fx_access(v[i].p, &m0), r1 = fx_access(v[i].p + v[i].size - 1, &m1);
      cr_assert(
          intact(&v[i]),
          "step %d: allocation %p (%zu bytes, tagged %d, mapped %d, block asleep %d, tag %d; access %d/%llx "
          "%d/%llx, want %llx) lost its bytes",
          step, (void *)v[i].p, v[i].size, v[i].kv, mapped(&v[i]), b ? b->asleep : -1, b ? b->tag : -1, r0,
          (unsigned long long)m0, r1, (unsigned long long)m1, (unsigned long long)want_access);
    }
  }
  /* Wind down: no faults, streams idle, everything awake, freed and released. */
  fx_clear_faults();
  ga_stream_t streams[3] = {S1, S2, S3};
  for (int k = 0; k < 3; k++) fx_hold(streams[k], 0);
  if (routed) {
    fx_capture(S3, 0);
    cr_assert_eq(ga_end_allocate_to_pool(fx_a, 100 + (uint64_t)pools_made), GA_OK);
  }
  cr_assert_eq(ga_set_memory_fraction(fx_a, 1.0), GA_OK);
  /* Free what can be freed, give the pools and the cache back, then wake the
   * rest: that must now find memory. */
  for (int i = 0; i < n;) {
    if (asleep && v[i].kv && ga_free(fx_a, v[i].p) == GA_ERR_INVALID) {
      i++;
      continue;
    }
    if (!(asleep && v[i].kv)) {
      cr_assert(intact(&v[i]), "allocation %p lost its bytes", (void *)v[i].p);
      cr_assert_eq(ga_free(fx_a, v[i].p), GA_OK, "%s", ga_last_error());
    }
    v[i] = v[--n];
  }
  for (int k = 0; k <= pools_made; k++) (void)ga_release_pool(fx_a, 100 + (uint64_t)k);
  cr_assert_eq(ga_empty_cache(fx_a), GA_OK, "%s", ga_last_error());
  if (asleep) cr_assert_eq(ga_wake(fx_a), GA_OK, "%s", ga_last_error());
  for (int i = 0; i < n; i++) {
    cr_assert(intact(&v[i]), "allocation %p lost its bytes across sleep and wake", (void *)v[i].p);
    cr_assert_eq(ga_free(fx_a, v[i].p), GA_OK, "%s", ga_last_error());
  }
  cr_assert_eq(ga_check(fx_a), 0);
}

static void run(const char *conf, uint64_t seed, int steps) { run_on(conf, 2 * GiB, seed, steps); }

Test(chaos, native) { run(NULL, 0x9e3779b97f4a7c15ull, 2000); }
Test(chaos, native_max_split) {
  run("max_split_size_mb:40,garbage_collection_threshold:0.6", 0x1234567ull, 2000);
}
Test(chaos, expandable) { run("expandable_segments:True", 0xfeedbeefull, 2000); }
Test(chaos, expandable_2m_settle) {
  run("expandable_segments:True,expandable_page_size_mb:2,expandable_move_pages:settle", 0xabcdefull, 2000);
}
Test(chaos, expandable_knobs) {
  run("expandable_segments:True,expandable_page_size_mb:4,expandable_cache_max_mb:8,roundup_power2_divisions:"
      "4,"
      "max_split_size_mb:64",
      0x5eed5eedull, 1200);
}
Test(chaos, native_rounding) {
  run("roundup_power2_divisions:[256:2,>:4],garbage_collection_threshold:0.5", 0x77ull, 2000);
}
/* A device that is nearly always full: OOM, retry and page moves all the time. */
Test(chaos, expandable_tight) {
  run_on("expandable_segments:True,expandable_page_size_mb:2", 384 * MiB, 0x71647ull, 1500);
}
Test(chaos, native_tight) { run_on(NULL, 384 * MiB, 0x7164ull, 2000); }
