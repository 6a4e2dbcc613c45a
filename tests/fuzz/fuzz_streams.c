/* fuzz_streams.c — stream-ordered safety under the time model.
 *
 * The first byte picks a configuration (native, native with max_split and
 * GC, expandable, expandable with 2 MiB pages that settle, pages that
 * always move with moved memory held, PyTorch's expandable policy) and the
 * lag of the simulated GPU; the rest is a program on four streams: ga_malloc,
 * kernels queued on a stream that use an allocation (its own stream, or
 * another after record_stream), ga_free, streams that hold their work, CPU
 * time passing, the lag changing, empty_cache, tags with sleep and wake
 * (offload), and device faults of any kind, one-shot or sticky (every later
 * call of that kind fails too, until they are cleared).
 *
 * The promises checked:
 *  - every byte of every allocation is what the program wrote (each is
 *    written whole with a pattern of its own, fz_fill): checked whole at its free,
 *    after every sleep and wake, and at the end; both ends of every awake
 *    allocation after every operation;
 *  - no memory is handed out while a stream that used it has not passed its
 *    free: at each free the harness takes a mark on every stream that used
 *    the allocation (ga_sim_stream_mark, no device call) and notes the
 *    addresses and the physical pieces behind them (ga_mem_ranges: handle
 *    and offset, so memory moved to another address counts too); a live
 *    allocation on stream T that overlaps a freed one, by address or by
 *    physical piece, must find every mark of a stream other than T passed
 *    (work on T itself is ordered after the free). A cudaFree that
 *    succeeded after the free counts as a wait for the whole device, as it
 *    is on a GPU (the simulated device does not wait in it);
 *  - after every operation ga_check finds nothing, and statuses are ones the
 *    call may return (a device error only with a fault armed).
 * At the end: faults cleared, streams released, everything woken and freed,
 * nothing reserved and nothing left on the device after ga_destroy.
 * FUZZ_STREAMS_TRACE=1 prints the operations.
 */
#include <string.h>

#include "device/sim.h"
#include "fuzz_internal.h"

#define MiB      ((size_t)1 << 20)
#define NSTREAMS 4
#define MAXLIVE  32
#define MAXFREED 96
#define MAXP     16 /* physical pieces kept per allocation */

typedef struct piece {
  uint64_t handle; /* 0: cudaMalloc'd memory, identified by base */
  uintptr_t base;
  size_t offset, size;
} piece;

typedef struct live {
  unsigned char *p;
  size_t size;
  unsigned seed;
  int stream;    /* its allocation stream */
  unsigned used; /* bit k: S<k> used it (its own, or after record_stream) */
  int tagged, lost;
} live;

typedef struct freed {
  uintptr_t p;
  size_t size;
  int stream;
  piece pc[MAXP];
  int npc; /* -1: unknown (asleep at its free); the address check still holds */
  ga_sim_mark m[NSTREAMS];
  unsigned marks;    /* bit k: m[k] taken */
  uint64_t cudafree; /* cudaFree calls that had succeeded at its free */
} freed;

typedef struct state {
  ga_allocator_t *a;
  ga_device *dev;
  int expandable;
  live v[MAXLIVE];
  int n;
  freed f[MAXFREED];
  int nf;
  int armed; /* a fault was armed since the last clear */
  unsigned held;
} state;

static int tracing;
#define TRACE(...)                                  \
  do {                                              \
    if (tracing) fprintf(stderr, "  " __VA_ARGS__); \
  } while (0)

static ga_stream_t stream(int k) { return (ga_stream_t)(uintptr_t)(0x2001u * (unsigned)(k + 1)); }

static void fill(const live *l) { fz_fill(l->p, l->size, l->seed); }
static size_t first_wrong(const live *l) { return fz_wrong(l->p, l->size, l->seed); }

/* The physical pieces under [p, p + size) of a live allocation; -1 if asleep. */
static int pieces(state *s, void *p, size_t size, piece out[MAXP]) {
  ga_mem_range_t r[MAXP];
  size_t n = 0;
  ga_status_t st = ga_mem_ranges(s->a, p, r, MAXP, &n);
  if (st == GA_ERR_INVALID) return -1;
  FZ_CHECK(st == GA_OK, "ga_mem_ranges(%p): %s: %s", p, ga_status_str(st), ga_last_error());
  int k = 0;
  uintptr_t lo = (uintptr_t)p, hi = lo + size;
  for (size_t i = 0; i < n && i < MAXP; i++) {
    uintptr_t a = (uintptr_t)r[i].ptr, b = a + r[i].size;
    if (b <= lo || a >= hi) continue;
    uintptr_t from = a > lo ? a : lo, to = b < hi ? b : hi;
    out[k++] = (piece){r[i].handle, (uintptr_t)r[i].base, r[i].offset + (from - a), to - from};
  }
  return k;
}

static int pieces_overlap(const piece *x, int nx, const piece *y, int ny) {
  for (int i = 0; i < nx; i++)
    for (int j = 0; j < ny; j++) {
      if (x[i].handle != y[j].handle || (!x[i].handle && x[i].base != y[j].base)) continue;
      if (x[i].offset < y[j].offset + y[j].size && y[j].offset < x[i].offset + x[i].size) return 1;
    }
  return 0;
}

static uint64_t cudafrees(const state *s) {
  return s->dev->calls[GA_CALL_FREE] - s->dev->failures[GA_CALL_FREE];
}

/* Drops freed entries whose every stream has passed the free. */
static void prune(state *s) {
  for (int i = 0; i < s->nf;) {
    freed *f = &s->f[i];
    int all = 1;
    for (int k = 0; k < NSTREAMS && all; k++)
      if ((f->marks >> k) & 1) all = ga_sim_stream_passed(s->dev, &f->m[k]) == 1;
    if (all || cudafrees(s) != f->cudafree)
      s->f[i] = s->f[--s->nf];
    else
      i++;
  }
}

/* No live allocation lies on memory a stream other than its own may still use. */
static void check_reuse(state *s, const char *after) {
  prune(s);
  for (int i = 0; i < s->n; i++) {
    live *l = &s->v[i];
    piece pc[MAXP];
    int npc = -2; /* not asked yet */
    for (int j = 0; j < s->nf; j++) {
      freed *f = &s->f[j];
      int addr = (uintptr_t)l->p < f->p + f->size && f->p < (uintptr_t)l->p + l->size;
      if (!addr && f->npc > 0) {
        if (npc == -2) npc = pieces(s, l->p, l->size, pc);
        addr = npc > 0 && pieces_overlap(pc, npc, f->pc, f->npc);
      }
      if (!addr) continue;
      for (int k = 0; k < NSTREAMS; k++)
        if (((f->marks >> k) & 1) && k != l->stream)
          FZ_CHECK(ga_sim_stream_passed(s->dev, &f->m[k]) == 1,
                   "after %s: %p (%zu bytes, stream %d) lies on memory freed at %p (%zu bytes, stream %d) "
                   "that stream %d has not passed",
                   after, (void *)l->p, l->size, l->stream, (void *)f->p, f->size, f->stream, k);
    }
  }
}

static int ends_wrong(const live *l) { return fz_ends_wrong(l->p, l->size, l->seed) != SIZE_MAX; }

/* Every awake allocation: whole, or its ends. */
static void verify(state *s, const char *after, int whole) {
  for (int i = 0; i < s->n; i++) {
    live *l = &s->v[i];
    if (fz_asleep(s->a, l->p)) continue;
    if (l->lost) { /* woken without its contents: written again */
      fill(l);
      l->lost = 0;
      continue;
    }
    size_t bad = whole ? first_wrong(l) : ends_wrong(l) ? first_wrong(l) : SIZE_MAX;
    FZ_CHECK(bad == SIZE_MAX, "after %s: allocation %p (%zu bytes, stream %d) lost byte %zu", after,
             (void *)l->p, l->size, l->stream, bad);
  }
}

static void allowed(state *s, ga_status_t st, const char *what) {
  TRACE("%s: %s%s%s\n", what, ga_status_str(st), st == GA_OK ? "" : ": ", st == GA_OK ? "" : ga_last_error());
  if (st == GA_OK || st == GA_ERR_OOM) return;
  FZ_CHECK(s->armed && (st == GA_ERR_DEVICE || st == GA_ERR_HOST_MEMORY), "%s: %s: %s", what,
           ga_status_str(st), ga_last_error());
  FZ_CHECK(ga_last_error()[0] != 0, "%s failed without saying why", what);
}

static size_t pick_size(fz_in *in) {
  unsigned c = fz_byte(in), x = fz_byte(in) << 8;
  x |= fz_byte(in);
  switch (c % 4) {
    case 0: return 1 + x % 8192;
    case 1: return 1 + (size_t)x * 16;         /* up to 1 MiB */
    case 2: return MiB + (size_t)x * 96;       /* up to 7 MiB */
    default: return 4 * MiB + (size_t)x * 128; /* up to 12 MiB */
  }
}

static void op_malloc(state *s, fz_in *in) {
  if (s->n == MAXLIVE) return;
  int k = (int)(fz_byte(in) % NSTREAMS);
  size_t size = pick_size(in);
  void *p = NULL;
  ga_status_t r = ga_malloc(s->a, size, stream(k), &p);
  TRACE("ga_malloc(%zu, S%d) = %p\n", size, k, p);
  allowed(s, r, "ga_malloc");
  if (r != GA_OK) return;
  live *l = &s->v[s->n++];
  *l = (live){p, size, fz_byte(in) * 2654435761u | 1u, k, 1u << k, 0, 0};
  fill(l);
  if (s->expandable && (fz_byte(in) & 1)) {
    l->tagged = 1;
    FZ_CHECK(ga_tag(s->a, p, "kv") == GA_OK, "tag: %s", ga_last_error());
  }
}

static void op_free(state *s, fz_in *in) {
  if (!s->n) return;
  int i = (int)(fz_byte(in) % (unsigned)s->n);
  live *l = &s->v[i];
  if (fz_asleep(s->a, l->p)) {
    ga_status_t r = ga_free(s->a, l->p);
    FZ_CHECK(r == GA_ERR_INVALID, "free of an allocation asleep: %s", ga_status_str(r));
    return;
  }
  size_t bad = l->lost ? SIZE_MAX : first_wrong(l);
  FZ_CHECK(bad == SIZE_MAX, "allocation %p (%zu bytes, stream %d) lost byte %zu before its free",
           (void *)l->p, l->size, l->stream, bad);
  freed f = {.p = (uintptr_t)l->p, .size = l->size, .stream = l->stream, .cudafree = cudafrees(s)};
  f.npc = pieces(s, l->p, l->size, f.pc);
  for (int k = 0; k < NSTREAMS; k++)
    if ((l->used >> k) & 1) {
      FZ_CHECK(ga_sim_stream_mark(s->dev, stream(k), &f.m[k]) == 0, "mark");
      f.marks |= 1u << k;
    }
  ga_status_t r = ga_free(s->a, l->p);
  TRACE("ga_free(%p, used by 0x%x): %s\n", (void *)l->p, l->used, ga_status_str(r));
  FZ_CHECK(r == GA_OK || (s->armed && r == GA_ERR_DEVICE && strstr(ga_last_error(), "is freed, but")),
           "ga_free: %s: %s", ga_status_str(r), ga_last_error());
  if (s->nf == MAXFREED) prune(s);
  if (s->nf == MAXFREED) s->f[0] = s->f[--s->nf]; /* forgets the oldest check, never a wrong one */
  s->f[s->nf++] = f;
  *l = s->v[--s->n];
}

/* A kernel that uses allocation i runs on stream k (record_stream first when
 * k is not its own, as PyTorch requires). */
static void op_kernel(state *s, fz_in *in) {
  if (!s->n) return;
  live *l = &s->v[fz_byte(in) % (unsigned)s->n];
  int k = (int)(fz_byte(in) % NSTREAMS);
  uint64_t us = 1 + fz_byte(in) * 40u;
  if (k != l->stream) {
    ga_status_t r = ga_record_stream(s->a, l->p, stream(k));
    FZ_CHECK(r == GA_OK, "record_stream: %s", ga_last_error());
  }
  l->used |= 1u << k;
  TRACE("kernel of %llu us on S%d using %p\n", (unsigned long long)us, k, (void *)l->p);
  FZ_CHECK(ga_sim_enqueue(s->dev, stream(k), us * 1000) == 0, "enqueue");
}

static void op_fault(state *s, fz_in *in) {
  ga_device_call_t kind = (ga_device_call_t)(fz_byte(in) % GA_CALL_COUNT);
  unsigned b = fz_byte(in);
  unsigned nth = 1 + b % 8;
  int sticky = (b >> 3) & 1, code = (b >> 4) & 1 ? GA_DEV_EOOM : GA_DEV_EDRIVER;
  TRACE("fault: call kind %d fails at its call %u from now%s (%s)\n", (int)kind, nth,
        sticky ? " and after" : "", code == GA_DEV_EOOM ? "out of memory" : "driver error");
  FZ_CHECK(ga_sim_inject(s->dev, kind, nth, code, sticky) == 0, "inject");
  s->armed = 1;
}

static void step(state *s, fz_in *in) {
  unsigned op = fz_byte(in) % 16;
  int whole = 0;
  switch (op) {
    case 0:
    case 1:
    case 2:
    case 3: op_malloc(s, in); break;
    case 4:
    case 5:
    case 6: op_free(s, in); break;
    case 7:
    case 8: op_kernel(s, in); break;
    case 9: {
      int k = (int)(fz_byte(in) % NSTREAMS);
      s->held ^= 1u << k;
      TRACE("S%d %s\n", k, (s->held >> k) & 1 ? "holds work" : "is released");
      FZ_CHECK(ga_sim_hold_stream(s->dev, stream(k), (int)((s->held >> k) & 1)) == 0, "hold");
      break;
    }
    case 10: {
      uint64_t us = (uint64_t)fz_byte(in) * 100;
      TRACE("the CPU works %llu us\n", (unsigned long long)us);
      FZ_CHECK(ga_sim_advance(s->dev, us * 1000) == 0, "advance");
      break;
    }
    case 11: {
      uint64_t us = (uint64_t)(fz_byte(in) % 16) * 1000;
      TRACE("lag %llu us\n", (unsigned long long)us);
      FZ_CHECK(ga_sim_set_lag(s->dev, us * 1000) == 0, "lag");
      break;
    }
    case 12: allowed(s, ga_empty_cache(s->a), "ga_empty_cache"); break;
    case 13: {
      unsigned b = fz_byte(in);
      if (!s->expandable) break;
      if (b & 1) {
        allowed(s, ga_wake(s->a), "ga_wake");
      } else {
        /* With offload the bytes stay; without, what had a granule mapped
         * before and not after is lost (written again when it wakes). */
        int offload = (b & 2) != 0;
        size_t was[MAXLIVE];
        for (int i = 0; i < s->n; i++) was[i] = fz_mapped_granules(s->a, s->v[i].p, s->v[i].size);
        ga_status_t r = ga_sleep(s->a, "kv", offload ? GA_SLEEP_OFFLOAD : 0);
        allowed(s, r, offload ? "ga_sleep(kv, offload)" : "ga_sleep(kv)");
        for (int i = 0; i < s->n; i++) {
          size_t now = fz_mapped_granules(s->a, s->v[i].p, s->v[i].size);
          FZ_CHECK(now <= was[i], "ga_sleep mapped a granule");
          if (!offload) s->v[i].lost |= now < was[i];
        }
      }
      whole = 1;
      break;
    }
    case 14: op_fault(s, in); break;
    default:
      if (fz_byte(in) & 1) {
        TRACE("faults cleared\n");
        FZ_CHECK(ga_sim_clear_faults(s->dev) == 0, "clear");
        s->armed = 0;
      } else {
        op_malloc(s, in);
      }
      break;
  }
  FZ_CHECK(ga_check(s->a) == 0, "op %u broke an invariant (see stderr)", op);
  check_reuse(s, "an operation");
  verify(s, "an operation", whole);
}

static void drain(state *s) {
  TRACE("drain\n");
  FZ_CHECK(ga_sim_clear_faults(s->dev) == 0, "clear");
  s->armed = 0;
  for (int k = 0; k < NSTREAMS; k++) FZ_CHECK(ga_sim_hold_stream(s->dev, stream(k), 0) == 0, "hold");
  verify(s, "the drain", 1);
  for (int i = 0; i < s->n;) {
    if (fz_asleep(s->a, s->v[i].p)) {
      i++;
      continue;
    }
    FZ_CHECK(ga_free(s->a, s->v[i].p) == GA_OK, "drain free: %s", ga_last_error());
    s->v[i] = s->v[--s->n];
  }
  FZ_CHECK(ga_empty_cache(s->a) == GA_OK, "drain empty_cache: %s", ga_last_error());
  ga_status_t w = ga_wake(s->a);
  FZ_CHECK(w == GA_OK, "the last wake: %s: %s", ga_status_str(w), ga_last_error());
  check_reuse(s, "the last wake");
  verify(s, "the last wake", 1);
  for (int i = 0; i < s->n; i++)
    FZ_CHECK(ga_free(s->a, s->v[i].p) == GA_OK, "drain free: %s", ga_last_error());
  s->n = 0;
  FZ_CHECK(ga_empty_cache(s->a) == GA_OK, "drain empty_cache: %s", ga_last_error());
  FZ_CHECK(ga_check(s->a) == 0, "ga_check after the drain");
  ga_stats_t st;
  FZ_CHECK(ga_stats(s->a, &st) == GA_OK, "stats");
  FZ_CHECK(st.reserved_bytes[GA_POOL_ALL].current == 0 && st.allocated_bytes[GA_POOL_ALL].current == 0 &&
               st.quarantined_bytes.current == 0,
           "after the drain: reserved %lld, allocated %lld, quarantined %lld",
           (long long)st.reserved_bytes[0].current, (long long)st.allocated_bytes[0].current,
           (long long)st.quarantined_bytes.current);
  ga_destroy(s->a);
  ga_sim_usage u;
  FZ_CHECK(ga_sim_usage_get(s->dev, &u) == 0, "usage");
  FZ_CHECK(u.used == 0 && u.live_mallocs == 0 && u.live_handles == 0 && u.live_reservations == 0 &&
               u.live_mappings == 0 && u.live_events == 0,
           "device leak after ga_destroy: handles %zu reservations %zu mappings %zu events %zu",
           u.live_handles, u.live_reservations, u.live_mappings, u.live_events);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const confs[] = {
      "",
      "max_split_size_mb:20,garbage_collection_threshold:0.6",
      "expandable_segments:True",
      "expandable_segments:True,expandable_page_size_mb:2,expandable_move_pages:settle",
      ("expandable_segments:True,expandable_move_pages:always,expandable_move_hold:2,"
       "expandable_page_size_mb:4"),
      "expandable_segments:True,expandable_policy:pytorch",
  };
  fz_in in = {data, size, 0};
  tracing = getenv("FUZZ_STREAMS_TRACE") != NULL;
  unsigned c = fz_byte(&in);
  const unsigned nconfs = sizeof confs / sizeof confs[0];
  state s = {0};
  char err[256];
  FZ_CHECK(ga_sim_open_of(0, 1, 96 * MiB, &s.dev, err, sizeof err) == 0, "sim: %s", err);
  const char *conf = confs[c % nconfs];
  FZ_CHECK(ga_create_on_device(conf, s.dev, &s.a) == GA_OK, "create: %s", ga_last_error());
  s.expandable = strstr(conf, "expandable_segments:True") != NULL;
  FZ_CHECK(ga_sim_set_lag(s.dev, (uint64_t)(c / nconfs % 8) * 1000000) == 0, "lag");
  TRACE("configuration '%s', lag %u ms\n", conf, c / nconfs % 8);
  for (int steps = 0; fz_more(&in) && steps < 300; steps++) step(&s, &in);
  drain(&s);
  ga_dev_destroy(s.dev);
  return 0;
}
