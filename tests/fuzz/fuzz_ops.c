/* fuzz_ops.c — sequences of calls over the whole API, with device faults.
 *
 * The first byte picks a configuration (native, native with max_split, GC
 * and rounding, expandable, expandable with 2 MiB pages that settle, smaller
 * pages with a small page cache, PyTorch's expandable policy, pages that
 * always move with moved memory held for a few frees) and the device's
 * size; the
 * rest is a sequence of operations on a simulated machine of two devices:
 * malloc on three streams, free, record_stream, streams that hold work,
 * empty_cache, tags, sleep and wake (with and without offload), captures
 * (begin, end, release of private pools while a stream captures), memory
 * fractions, peer access (good and bad ordinals), one-shot device faults of
 * any kind, statistics and snapshot JSON, history on and off.
 *
 * After every operation: ga_check finds nothing, no capture was invalidated
 * (the device counts every call that would), every live allocation that is
 * awake keeps its bytes (both ends), and the status is one the call may
 * return — with no fault armed, a device error is a bug. At the end: faults
 * cleared, streams idle, the capture ended, everything woken, freed and
 * released; then nothing is reserved, the device holds nothing, and after
 * ga_destroy nothing is left on it.
 */
#include <string.h>

#include "device/sim.h"
#include "fuzz_internal.h"

#define MiB     ((size_t)1 << 20)
#define MAXLIVE 64
#define STAMP   256

typedef struct live {
  unsigned char *p;
  size_t size;
  unsigned seed;
  int tag;  /* 0 none, 1 "kv", 2 "w" */
  int lost; /* went to sleep without offload: its contents are gone until written again */
} live;

typedef struct state {
  ga_allocator_t *a;
  ga_device *dev;
  int expandable;
  live v[MAXLIVE];
  int n;
  int armed;  /* a fault was armed since the last clear: device errors are allowed */
  int routed; /* S3 captures, routed to pool 100 + pools */
  int pools;  /* pools made */
  int held;   /* bit k: stream k holds work */
  int peer;   /* peer access to device 1 is on */
} state;

/* FUZZ_OPS_TRACE=1 prints every operation and its status to stderr (to read
 * what a crashing input does). */
static int tracing;
#define TRACE(...)                                  \
  do {                                              \
    if (tracing) fprintf(stderr, "  " __VA_ARGS__); \
  } while (0)

static ga_stream_t stream(unsigned k) { return (ga_stream_t)(uintptr_t)(0x1001u * (k % 3 + 1)); }
#define S3 stream(2)

static unsigned char byte_at(unsigned seed, size_t i) {
  return (unsigned char)(seed * 131u + i * 7u + (i >> 9));
}

static void stamp(const live *l) {
  size_t n = l->size < STAMP ? l->size : STAMP;
  for (size_t i = 0; i < n; i++)
    l->p[i] = byte_at(l->seed, i), l->p[l->size - n + i] = byte_at(l->seed, l->size - n + i);
}

static void verify(state *s, const char *after) {
  for (int i = 0; i < s->n; i++) {
    live *l = &s->v[i];
    if (fz_asleep(s->a, l->p)) continue;
    if (l->lost) { /* woken without its contents (discarded by design): the program writes them again */
      stamp(l);
      l->lost = 0;
      continue;
    }
    size_t n = l->size < STAMP ? l->size : STAMP;
    for (size_t k = 0; k < n; k++) {
      FZ_CHECK(l->p[k] == byte_at(l->seed, k), "after %s: allocation %p (%zu bytes) lost byte %zu", after,
               (void *)l->p, l->size, k);
      FZ_CHECK(l->p[l->size - n + k] == byte_at(l->seed, l->size - n + k),
               "after %s: allocation %p (%zu bytes) lost byte %zu", after, (void *)l->p, l->size,
               l->size - n + k);
    }
  }
}

/* A status the call may return: OK, OOM, and with a fault armed a device or
 * host error; `also` one more it may return by design. */
static void allowed(state *s, ga_status_t st, ga_status_t also, const char *what) {
  TRACE("%s: %s%s%s\n", what, ga_status_str(st), st == GA_OK ? "" : ": ", st == GA_OK ? "" : ga_last_error());
  if (st == GA_OK || st == GA_ERR_OOM || st == also) return;
  FZ_CHECK(s->armed && (st == GA_ERR_DEVICE || st == GA_ERR_HOST_MEMORY), "%s: %s: %s", what,
           ga_status_str(st), ga_last_error());
  FZ_CHECK(ga_last_error()[0] != 0, "%s failed without saying why", what);
}

static uint64_t broken(state *s) {
  ga_sim_usage u;
  FZ_CHECK(ga_sim_usage_get(s->dev, &u) == 0, "usage");
  return u.captures_broken;
}

static size_t pick_size(fz_in *in) {
  unsigned c = fz_byte(in);
  unsigned x = fz_byte(in) << 8; /* high byte first (operands of | have no order) */
  x |= fz_byte(in);
  switch (c % 5) {
    case 0: return 1 + x % 4096;
    case 1: return 1 + (size_t)x * 16;         /* small pool, up to 1 MiB */
    case 2: return MiB + (size_t)x * 192;      /* large, under 13 MiB */
    case 3: return 13 * MiB + (size_t)x * 800; /* past a 20 MiB page */
    default: return 60 * MiB + (size_t)(x % 64) * 4 * MiB;
  }
}

static void op_malloc(state *s, fz_in *in) {
  if (s->n == MAXLIVE) return;
  ga_stream_t st = stream(fz_byte(in));
  size_t size = pick_size(in);
  void *p = NULL;
  ga_status_t r = ga_malloc(s->a, size, st, &p);
  TRACE("ga_malloc(%zu, stream %p) = %p\n", size, (void *)st, p);
  allowed(s, r, GA_OK, "ga_malloc");
  if (r != GA_OK) {
    FZ_CHECK(p == NULL, "a failed malloc gave %p", p);
    return;
  }
  FZ_CHECK(p && ((uintptr_t)p & 511) == 0, "ga_malloc gave %p", p);
  s->v[s->n] = (live){p, size, fz_byte(in) | 1u, 0, 0};
  stamp(&s->v[s->n]);
  s->n++;
}

static void op_free(state *s, fz_in *in) {
  if (!s->n) return;
  int i = (int)(fz_byte(in) % (unsigned)s->n);
  int sleeping = fz_asleep(s->a, s->v[i].p);
  ga_status_t r = ga_free(s->a, s->v[i].p);
  TRACE("ga_free(%p)%s: %s\n", (void *)s->v[i].p, sleeping ? " (asleep)" : "", ga_status_str(r));
  if (sleeping) {
    FZ_CHECK(r == GA_ERR_INVALID && strstr(ga_last_error(), "asleep"), "free of an asleep allocation: %s: %s",
             ga_status_str(r), ga_last_error());
    return;
  }
  /* With faults armed, a free whose streams can be neither given an event
   * nor waited for is a device error, and freed all the same (quarantined). */
  FZ_CHECK(r == GA_OK || (s->armed && r == GA_ERR_DEVICE && strstr(ga_last_error(), "is freed, but")),
           "ga_free: %s: %s", ga_status_str(r), ga_last_error());
  s->v[i] = s->v[--s->n];
}

static void op_sleep(state *s, fz_in *in) {
  unsigned b = fz_byte(in);
  static const char *const tags[] = {"kv", "w", "kv,w", NULL};
  const char *t = tags[b % 4];
  size_t was[MAXLIVE];
  for (int i = 0; i < s->n; i++) was[i] = fz_mapped_granules(s->a, s->v[i].p, s->v[i].size);
  ga_status_t r = ga_sleep(s->a, t, (b & 4) ? GA_SLEEP_OFFLOAD : 0);
  TRACE("ga_sleep(%s%s): %s\n", t ? t : "NULL", (b & 4) ? ", offload" : "", ga_status_str(r));
  /* What went to sleep now without offload was discarded: an allocation one
   * of whose granules was mapped before (awake, or woken by a ga_wake that
   * failed half-way) and is not now. Sleep maps nothing. */
  for (int i = 0; i < s->n; i++) {
    size_t now = fz_mapped_granules(s->a, s->v[i].p, s->v[i].size);
    FZ_CHECK(now <= was[i], "ga_sleep mapped a granule");
    if (!(b & 4)) s->v[i].lost |= now < was[i];
  }
  if (t && !s->expandable) {
    FZ_CHECK(r == GA_ERR_UNSUPPORTED, "ga_sleep with tags in native mode: %s: %s", ga_status_str(r),
             ga_last_error());
  } else if (t && s->routed) {
    FZ_CHECK(r == GA_ERR_INVALID && strstr(ga_last_error(), "capture is underway"),
             "ga_sleep with tags during a capture: %s: %s", ga_status_str(r), ga_last_error());
  } else {
    allowed(s, r, GA_OK, "ga_sleep");
  }
}

static void op_capture(state *s, fz_in *in) {
  unsigned b = fz_byte(in);
  uint64_t id = 100 + (uint64_t)s->pools;
  if (!s->routed) {
    FZ_CHECK(ga_sim_set_capturing(s->dev, S3, 1) == 0, "set_capturing");
    ga_status_t r = ga_begin_allocate_to_pool(s->a, id, S3);
    TRACE("ga_begin_allocate_to_pool(%llu): %s\n", (unsigned long long)id, ga_status_str(r));
    FZ_CHECK(r == GA_OK, "ga_begin_allocate_to_pool: %s", ga_last_error());
    s->routed = 1;
    return;
  }
  if (b % 3 == 0) { /* another pool, made earlier, released during the capture */
    if (s->pools)
      allowed(s, ga_release_pool(s->a, 100 + b % (unsigned)s->pools), GA_ERR_INVALID, "ga_release_pool");
    return;
  }
  FZ_CHECK(ga_sim_set_capturing(s->dev, S3, 0) == 0, "set_capturing");
  TRACE("pool %llu:\n", (unsigned long long)id);
  allowed(s, ga_end_allocate_to_pool(s->a, id), GA_OK, "ga_end_allocate_to_pool");
  if (b % 3 == 1) allowed(s, ga_release_pool(s->a, id), GA_OK, "ga_release_pool");
  s->routed = 0;
  s->pools++;
}

/* Calls with bad arguments: refused (or a no-op) and nothing changes. */
static void op_bad(state *s, unsigned b) {
  ga_stats_t before, after;
  FZ_CHECK(ga_stats(s->a, &before) == GA_OK, "stats");
  void *p = (void *)1;
  ga_status_t r;
  switch ((b >> 3) % 4) {
    case 0: /* size 0: GA_OK and NULL, as cudaMalloc(0) */
      r = ga_malloc(s->a, 0, stream(b), &p);
      TRACE("ga_malloc(0): %s\n", ga_status_str(r));
      FZ_CHECK(r == GA_OK && p == NULL, "ga_malloc(0): %s, %p", ga_status_str(r), p);
      break;
    case 1: /* past the largest request (1 EiB): out of memory at once */
      r = ga_malloc(s->a, (b & 1) ? SIZE_MAX - (b >> 5) : ((size_t)1 << 60) + 1, stream(b), &p);
      TRACE("ga_malloc(huge): %s\n", ga_status_str(r));
      FZ_CHECK(r == GA_ERR_OOM && p == NULL, "ga_malloc(huge): %s, %p", ga_status_str(r), p);
      break;
    case 2: /* a tag too long */
      if (!s->n) return;
      r = ga_tag(s->a, s->v[0].p, "a-tag-of-more-than-31-characters-is-refused");
      FZ_CHECK(r == GA_ERR_INVALID && strstr(ga_last_error(), "31 characters"), "long tag: %s: %s",
               ga_status_str(r), ga_last_error());
      break;
    default: /* record_stream of a pointer that is no allocation */
      r = ga_record_stream(s->a, s->n ? s->v[0].p + 1 : (void *)(uintptr_t)0x2000, stream(b));
      FZ_CHECK(r == GA_ERR_BAD_POINTER, "record_stream of a bad pointer: %s", ga_status_str(r));
      break;
  }
  FZ_CHECK(ga_stats(s->a, &after) == GA_OK, "stats");
  FZ_CHECK(after.reserved_bytes[GA_POOL_ALL].current == before.reserved_bytes[GA_POOL_ALL].current &&
               after.allocated_bytes[GA_POOL_ALL].current == before.allocated_bytes[GA_POOL_ALL].current &&
               after.num_alloc_retries == before.num_alloc_retries,
           "a refused call changed the statistics");
}

static void op_misc(state *s, fz_in *in) {
  unsigned b = fz_byte(in);
  switch (b % 9) {
    case 8: op_bad(s, b); break;
    case 0: { /* the statistics as JSON, twice the same length */
      size_t n = ga_stats_json(s->a, NULL, 0);
      char *j = malloc(n + 1);
      FZ_CHECK(j && ga_stats_json(s->a, j, n + 1) == n && j[0] == '{' && j[n - 1] == '}', "stats json");
      free(j);
      break;
    }
    case 1: { /* a snapshot */
      size_t n = ga_snapshot_json(s->a, NULL, 0);
      char *j = malloc(n + 1);
      FZ_CHECK(j && ga_snapshot_json(s->a, j, n + 1) == n && j[0] == '{' && j[n - 1] == '}', "snapshot json");
      free(j);
      break;
    }
    case 2:
      FZ_CHECK(ga_record_history(s->a, (int)(b >> 3) & 1, 16 + (b >> 4) * 8) == GA_OK, "history");
      break;
    case 3: FZ_CHECK(ga_reset_peak_stats(s->a) == GA_OK, "reset peaks"); break;
    case 4: { /* a pointer that is not a live allocation */
      ga_status_t r = s->n ? ga_free(s->a, s->v[0].p + 1) : ga_free(s->a, (void *)(uintptr_t)0x1000);
      FZ_CHECK(r == GA_ERR_BAD_POINTER, "free of a bad pointer: %s", ga_status_str(r));
      break;
    }
    case 5: { /* a bad fraction changes nothing */
      double f = ga_get_memory_fraction(s->a);
      FZ_CHECK(ga_set_memory_fraction(s->a, (b & 8) ? -0.5 : 1.5) == GA_ERR_INVALID, "bad fraction");
      FZ_CHECK(ga_get_memory_fraction(s->a) == f, "a refused fraction changed it");
      break;
    }
    case 6: {
      size_t req = 0, blk = 0;
      if (s->n)
        FZ_CHECK(
            ga_allocation_size(s->a, s->v[0].p, &req, &blk) == GA_OK && req == s->v[0].size && blk >= req,
            "size");
      /* The dry runs change nothing and answer (debug builds also check the
       * answer from the cache against the model's, in fit.c). */
      size_t cached = 0, fit = 0,
             asks[3] = {1 + (size_t)b * 4096, (size_t)(b & 7) << 20, 1 + (size_t)b * 512};
      ga_stream_t st = stream(b >> 4);
      FZ_CHECK(ga_largest_free(s->a, st, &cached, NULL) == GA_OK, "largest free: %s", ga_last_error());
      allowed(s, ga_would_fit(s->a, asks, 3, st, &fit), GA_OK,
              "ga_would_fit"); /* its device query may fail */
      FZ_CHECK(fit <= 3, "would fit %zu of 3", fit);
      break;
    }
    default: FZ_CHECK(ga_reset_accumulated_stats(s->a) == GA_OK, "reset"); break;
  }
}

static void step(state *s, fz_in *in) {
  unsigned op = fz_byte(in) % 20;
  switch (op) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 4:
    case 5: op_malloc(s, in); break;
    case 6:
    case 7:
    case 8: op_free(s, in); break;
    case 9:
      if (s->n) {
        unsigned i = fz_byte(in) % (unsigned)s->n; /* the index, then the stream */
        FZ_CHECK(ga_record_stream(s->a, s->v[i].p, stream(fz_byte(in))) == GA_OK, "record_stream: %s",
                 ga_last_error());
      }
      break;
    case 10: {
      unsigned k = fz_byte(in) % 3;
      s->held ^= 1 << k;
      TRACE("stream %u %s\n", k, (s->held >> k) & 1 ? "holds work" : "idle");
      FZ_CHECK(ga_sim_hold_stream(s->dev, stream(k), (s->held >> k) & 1) == 0, "hold");
      break;
    }
    case 11: allowed(s, ga_empty_cache(s->a), GA_OK, "ga_empty_cache"); break;
    case 12:
      if (s->n) {
        live *l = &s->v[fz_byte(in) % (unsigned)s->n];
        l->tag = 1 + (int)(fz_byte(in) % 3);
        TRACE("ga_tag(%p, %s)\n", (void *)l->p, l->tag == 1 ? "kv" : l->tag == 2 ? "w" : "NULL");
        FZ_CHECK(ga_tag(s->a, l->p,
                        l->tag == 1   ? "kv"
                        : l->tag == 2 ? "w"
                                      : NULL) == GA_OK,
                 "tag: %s", ga_last_error());
        if (l->tag == 3) l->tag = 0;
      }
      break;
    case 13: op_sleep(s, in); break;
    case 14: allowed(s, ga_wake(s->a), GA_OK, "ga_wake"); break;
    case 15: op_capture(s, in); break;
    case 16: {
      unsigned b = fz_byte(in);
      FZ_CHECK(ga_set_memory_fraction(s->a, b >= 128 ? 1.0 : (double)b / 127.0) == GA_OK, "fraction");
      break;
    }
    case 17: {
      int peer = (int)(fz_byte(in) % 5) - 2; /* -2 .. 2: only 1 is a peer */
      ga_status_t r = ga_enable_peer_access(s->a, peer);
      if (peer != 1) {
        FZ_CHECK(r == GA_ERR_INVALID, "peer %d: %s", peer, ga_status_str(r));
      } else {
        allowed(s, r, GA_OK, "ga_enable_peer_access");
        s->peer |= r == GA_OK;
      }
      break;
    }
    case 18: {
      ga_device_call_t kind = (ga_device_call_t)(fz_byte(in) % GA_CALL_COUNT);
      unsigned nth = 1 + fz_byte(in) % 6;
      int code = (fz_byte(in) & 1) ? GA_DEV_EOOM : GA_DEV_EDRIVER;
      TRACE("fault: call kind %d fails at its call %u from now (%s)\n", (int)kind, nth,
            code == GA_DEV_EOOM ? "out of memory" : "driver error");
      FZ_CHECK(ga_sim_inject(s->dev, kind, nth, code, 0) == 0, "inject");
      s->armed = 1;
      break;
    }
    default:
      if (fz_byte(in) & 1) {
        FZ_CHECK(ga_sim_clear_faults(s->dev) == 0, "clear");
        TRACE("faults cleared\n");
        s->armed = 0;
      } else {
        op_misc(s, in);
      }
      break;
  }
  FZ_CHECK(ga_check(s->a) == 0, "op %u broke an invariant (see stderr)", op);
  FZ_CHECK(broken(s) == 0, "op %u invalidated a capture: %s", op, ga_last_error());
  verify(s, "an operation");
}

/* Faults off, streams idle, the capture over, everything awake, freed and
 * released: then nothing may be left. */
static void drain(state *s) {
  TRACE("drain\n");
  FZ_CHECK(ga_sim_clear_faults(s->dev) == 0, "clear");
  s->armed = 0;
  for (unsigned k = 0; k < 3; k++) FZ_CHECK(ga_sim_hold_stream(s->dev, stream(k), 0) == 0, "hold");
  if (s->routed) {
    FZ_CHECK(ga_sim_set_capturing(s->dev, S3, 0) == 0, "set_capturing");
    FZ_CHECK(ga_end_allocate_to_pool(s->a, 100 + (uint64_t)s->pools) == GA_OK, "end: %s", ga_last_error());
    s->pools++;
    s->routed = 0;
  }
  FZ_CHECK(ga_set_memory_fraction(s->a, 1.0) == GA_OK, "fraction");
  for (int i = 0; i < s->n;) {
    if (fz_asleep(s->a, s->v[i].p)) {
      i++;
      continue;
    }
    FZ_CHECK(ga_free(s->a, s->v[i].p) == GA_OK, "drain free: %s", ga_last_error());
    s->v[i] = s->v[--s->n];
  }
  for (int k = 0; k < s->pools; k++) (void)ga_release_pool(s->a, 100 + (uint64_t)k);
  FZ_CHECK(ga_empty_cache(s->a) == GA_OK, "drain empty_cache: %s", ga_last_error());
  ga_status_t w = ga_wake(s->a);
  FZ_CHECK(w == GA_OK, "the last wake: %s: %s", ga_status_str(w), ga_last_error());
  verify(s, "the last wake");
  for (int i = 0; i < s->n; i++)
    FZ_CHECK(ga_free(s->a, s->v[i].p) == GA_OK, "drain free: %s", ga_last_error());
  s->n = 0;
  FZ_CHECK(ga_empty_cache(s->a) == GA_OK, "drain empty_cache: %s", ga_last_error());
  FZ_CHECK(ga_check(s->a) == 0, "ga_check after the drain");
  ga_stats_t st;
  FZ_CHECK(ga_stats(s->a, &st) == GA_OK, "stats");
  FZ_CHECK(st.reserved_bytes[GA_POOL_ALL].current == 0 && st.allocated_bytes[GA_POOL_ALL].current == 0 &&
               st.active_bytes[GA_POOL_ALL].current == 0,
           "after the drain: reserved %lld, allocated %lld, active %lld",
           (long long)st.reserved_bytes[0].current, (long long)st.allocated_bytes[0].current,
           (long long)st.active_bytes[0].current);
  ga_sim_usage u;
  FZ_CHECK(ga_sim_usage_get(s->dev, &u) == 0 && u.used == 0, "device memory used after the drain: %zu",
           u.used);
  ga_destroy(s->a);
  FZ_CHECK(ga_sim_usage_get(s->dev, &u) == 0, "usage");
  FZ_CHECK(u.used == 0 && u.live_mallocs == 0 && u.live_handles == 0 && u.live_reservations == 0 &&
               u.live_mappings == 0 && u.live_events == 0,
           "device leak after ga_destroy: handles %zu reservations %zu mappings %zu events %zu",
           u.live_handles, u.live_reservations, u.live_mappings, u.live_events);
  FZ_CHECK(u.captures_broken == 0, "a capture was invalidated");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const confs[] = {
      "",
      ("max_split_size_mb:40,garbage_collection_threshold:0.6,per_process_memory_fraction:0.8,"
       "roundup_power2_divisions:[256:2,>:4]"),
      "expandable_segments:True",
      "expandable_segments:True,expandable_page_size_mb:2,expandable_move_pages:settle",
      "expandable_segments:True,expandable_page_size_mb:4,expandable_cache_max_mb:8,max_split_size_mb:64",
      "expandable_segments:True,expandable_policy:pytorch",
      "expandable_segments:True,expandable_move_pages:always,expandable_move_hold:3,expandable_page_size_mb:"
      "6",
  };
  static const size_t capacity_mb[] = {96, 256, 1024};
  fz_in in = {data, size, 0};
  tracing = getenv("FUZZ_OPS_TRACE") != NULL;
  unsigned c = fz_byte(&in);
  state s = {0};
  char err[256];
  const unsigned nconfs = sizeof confs / sizeof confs[0];
  const char *conf = confs[c % nconfs];
  FZ_CHECK(ga_sim_open_of(0, 2, capacity_mb[(c / nconfs) % 3] * MiB, &s.dev, err, sizeof err) == 0, "sim: %s",
           err);
  FZ_CHECK(ga_create_on_device(conf, s.dev, &s.a) == GA_OK, "create: %s", ga_last_error());
  s.expandable = strstr(conf, "expandable_segments:True") != NULL;
  for (int steps = 0; fz_more(&in) && steps < 400; steps++) step(&s, &in);
  drain(&s);
  ga_dev_destroy(s.dev);
  return 0;
}
