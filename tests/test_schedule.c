/* test_schedule.c — a deterministic scheduler of logical threads, for every
 * policy.
 *
 * Six logical threads, each with its own stream, its own allocations and a
 * program of its own, are interleaved on one OS thread by a scheduler that a
 * seed drives: at each step it picks a thread, which makes its next call —
 * ga_malloc of a size from bytes to tens of MiB, ga_free (the bytes checked
 * whole first), record_stream onto another thread's stream, holding or
 * releasing its stream's work, empty_cache, tagging and sleep/wake with
 * offload (expandable policies), and, in the graph-pool configurations,
 * captures into a private pool of its own that it later releases. After
 * every call: ga_check finds nothing, no two live allocations overlap,
 * every awake allocation keeps the bytes at both of its ends, and no call
 * invalidated a capture. The same seed gives the same calls: a seed that
 * fails prints the script of calls that reproduces it.
 *
 *   SCHEDULE_SEED=N SCHEDULE_STEPS=M build/tests/test_schedule --filter 'schedule/pytorch*'
 * runs one seed (the default: seeds 1..6, 300 steps each).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "fixture.h"

TestSuite(schedule, .fini = fx_close);

#define NT    6  /* logical threads */
#define MAXL  10 /* live allocations per thread */
#define STAMP 256

typedef struct alloc {
  unsigned char *p;
  size_t size;
  unsigned seed, id;
  int tagged;
} alloc;

typedef struct lthread {
  ga_stream_t stream;
  alloc v[MAXL];
  int n;
  int sk;         /* its stream: S<sk> */
  int routed;     /* its stream allocates into its private pool */
  uint64_t pool;  /* its current private pool (0: none yet) */
  int pool_frees; /* pools it ended and has not released */
} lthread;

typedef struct sched {
  const char *policy;
  int expandable, graphs;
  uint64_t rng;
  unsigned next_id;
  lthread t[NT];
  int held[NT + 1]; /* S<k> holds work */
  char *script;     /* the calls so far, one a line */
  size_t len, cap;
  unsigned long seed;
  int step;
} sched;

static uint64_t next(sched *s) { /* splitmix64 */
  uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static unsigned below(sched *s, unsigned n) { return (unsigned)(next(s) % n); }

static void say(sched *s, const char *fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof line) n = sizeof line - 1;
  if (s->len + (size_t)n + 2 > s->cap) {
    s->cap = (s->cap + (size_t)n + 2) * 2;
    s->script = realloc(s->script, s->cap);
    cr_assert(s->script != NULL);
  }
  memcpy(s->script + s->len, line, (size_t)n);
  s->len += (size_t)n;
  s->script[s->len++] = '\n';
  s->script[s->len] = 0;
}

/* Fails the test with the script that reproduces it. */
#define EXPECT(s, cond, ...)                                                                              \
  do {                                                                                                    \
    if (!(cond)) {                                                                                        \
      fprintf(stderr, "schedule: policy %s, seed %lu, step %d: ", (s)->policy, (s)->seed, (s)->step);     \
      fprintf(stderr, __VA_ARGS__);                                                                       \
      fprintf(stderr, "\nthe calls that reproduce it (SCHEDULE_SEED=%lu):\n%s", (s)->seed,                \
              (s)->script ? (s)->script : "");                                                            \
      cr_assert_fail("policy %s, seed %lu: broken at step %d (script on stderr)", (s)->policy, (s)->seed, \
                     (s)->step);                                                                          \
    }                                                                                                     \
  } while (0)

/* The bytes of an allocation: little-endian words seed * K + word index,
 * written and compared a word at a time. */
static uint64_t word_at(unsigned seed, size_t w) { return (uint64_t)seed * 0x9e3779b97f4a7c15ull + w; }
static unsigned char byte_at(unsigned seed, size_t i) {
  return (unsigned char)(word_at(seed, i / 8) >> (i % 8 * 8));
}

static void fill(alloc *x) {
  size_t words = x->size / 8;
  for (size_t w = 0; w < words; w++) {
    uint64_t v = word_at(x->seed, w);
    memcpy(x->p + w * 8, &v, 8);
  }
  for (size_t i = words * 8; i < x->size; i++) x->p[i] = byte_at(x->seed, i);
}

/* The first byte that differs, or SIZE_MAX. */
static size_t first_wrong(const alloc *x) {
  size_t words = x->size / 8;
  for (size_t w = 0; w < words; w++) {
    uint64_t v = word_at(x->seed, w), got;
    memcpy(&got, x->p + w * 8, 8);
    if (got != v)
      for (size_t i = w * 8;; i++)
        if (x->p[i] != byte_at(x->seed, i)) return i;
  }
  for (size_t i = words * 8; i < x->size; i++)
    if (x->p[i] != byte_at(x->seed, i)) return i;
  return SIZE_MAX;
}

static int asleep(const alloc *x) {
  const ga_block *b = ga_blockmap_get(&fx_a->pol.map, (uintptr_t)x->p);
  return b && b->asleep;
}

static void check_ends(sched *s, const alloc *x) {
  size_t n = x->size < STAMP ? x->size : STAMP;
  for (size_t k = 0; k < n; k++) {
    EXPECT(s, x->p[k] == byte_at(x->seed, k), "allocation #%u (%zu bytes at %p) lost byte %zu", x->id,
           x->size, (void *)x->p, k);
    size_t e = x->size - n + k;
    EXPECT(s, x->p[e] == byte_at(x->seed, e), "allocation #%u (%zu bytes at %p) lost byte %zu", x->id,
           x->size, (void *)x->p, e);
  }
}

static int by_address(const void *a, const void *b) {
  const alloc *x = *(alloc *const *)a, *y = *(alloc *const *)b;
  return x->p < y->p ? -1 : x->p > y->p;
}

/* ga_check, no capture invalidated, no overlap, the ends of awake memory. */
static void invariants(sched *s) {
  EXPECT(s, ga_check(fx_a) == 0, "ga_check found broken invariants (see stderr above)");
  ga_sim_usage u;
  fx_usage(&u);
  EXPECT(s, u.captures_broken == 0, "a call invalidated a capture");
  alloc *all[NT * MAXL];
  int n = 0;
  for (int i = 0; i < NT; i++)
    for (int k = 0; k < s->t[i].n; k++) all[n++] = &s->t[i].v[k];
  qsort(all, (size_t)n, sizeof *all, by_address);
  for (int k = 1; k < n; k++)
    EXPECT(s, all[k - 1]->p + all[k - 1]->size <= all[k]->p,
           "allocations #%u (%p, %zu bytes) and #%u (%p) overlap", all[k - 1]->id, (void *)all[k - 1]->p,
           all[k - 1]->size, all[k]->id, (void *)all[k]->p);
  for (int k = 0; k < n; k++)
    if (!asleep(all[k])) check_ends(s, all[k]);
}

static size_t pick_size(sched *s) {
  switch (below(s, 8)) {
    case 0: return 1 + below(s, 4096);
    case 1:
    case 2: return 4096 + below(s, 1 << 20);
    case 3:
    case 4:
    case 5: return MiB + (size_t)below(s, 12 << 20);
    case 6: return 2 * MiB * (1 + below(s, 6)); /* whole granules */
    default: return 16 * MiB + (size_t)below(s, 16 << 20);
  }
}

static void do_malloc(sched *s, int ti) {
  lthread *t = &s->t[ti];
  if (t->n == MAXL) return;
  size_t size = pick_size(s);
  /* While memory sleeps, what is allocated stays within what the device can
   * wake (an engine that oversubscribes cannot wake or free what sleeps). */
  if (s->expandable && fx_stats().asleep_granules &&
      (size_t)fx_stats().allocated_bytes[GA_POOL_ALL].current + size > 224 * MiB)
    return;
  void *p = NULL;
  ga_status_t st = ga_malloc(fx_a, size, t->stream, &p);
  unsigned id = ++s->next_id;
  say(s, "t%d: #%u = ga_malloc(%zu, S%d)%s -> %s", ti, id, size, t->sk, t->routed ? " [pool]" : "",
      ga_status_str(st));
  EXPECT(s, st == GA_OK || st == GA_ERR_OOM, "ga_malloc: %s: %s", ga_status_str(st), ga_last_error());
  if (st != GA_OK) return;
  alloc *x = &t->v[t->n++];
  *x = (alloc){p, size, (unsigned)next(s) | 1u, id, 0};
  fill(x);
  if (s->expandable && below(s, 2)) { /* half of them sleep with "kv" */
    x->tagged = 1;
    st = ga_tag(fx_a, x->p, "kv");
    say(s, "t%d: ga_tag(#%u, kv) -> %s", ti, id, ga_status_str(st));
    EXPECT(s, st == GA_OK, "ga_tag: %s", ga_last_error());
  }
}

static void free_at(sched *s, int ti, int k) {
  lthread *t = &s->t[ti];
  alloc *x = &t->v[k];
  int sleeping = asleep(x);
  size_t wrong = sleeping ? SIZE_MAX : first_wrong(x);
  EXPECT(s, wrong == SIZE_MAX, "allocation #%u lost byte %zu before its free", x->id, wrong);
  ga_status_t st = ga_free(fx_a, x->p);
  say(s, "t%d: ga_free(#%u)%s -> %s", ti, x->id, sleeping ? " [asleep]" : "", ga_status_str(st));
  if (sleeping) {
    EXPECT(s, st == GA_ERR_INVALID, "free of an allocation asleep: %s", ga_status_str(st));
    return;
  }
  EXPECT(s, st == GA_OK, "ga_free: %s: %s", ga_status_str(st), ga_last_error());
  *x = t->v[--t->n];
}

static void do_free(sched *s, int ti) {
  if (s->t[ti].n) free_at(s, ti, (int)below(s, (unsigned)s->t[ti].n));
}

static void free_last(sched *s, int ti) { free_at(s, ti, s->t[ti].n - 1); }

static void do_capture(sched *s, int ti) {
  lthread *t = &s->t[ti];
  if (!t->routed) {
    t->pool = 1000 * (uint64_t)(ti + 1) + ++t->pool_frees;
    fx_capture(t->stream, 1);
    ga_status_t st = ga_begin_allocate_to_pool(fx_a, t->pool, t->stream);
    say(s, "t%d: capture S%d into pool %llu -> %s", ti, t->sk, (unsigned long long)t->pool,
        ga_status_str(st));
    EXPECT(s, st == GA_OK, "ga_begin_allocate_to_pool: %s", ga_last_error());
    t->routed = 1;
    return;
  }
  fx_capture(t->stream, 0);
  ga_status_t st = ga_end_allocate_to_pool(fx_a, t->pool);
  say(s, "t%d: end the capture of pool %llu -> %s", ti, (unsigned long long)t->pool, ga_status_str(st));
  EXPECT(s, st == GA_OK, "ga_end_allocate_to_pool: %s", ga_last_error());
  t->routed = 0;
  if (below(s, 2)) { /* the graph is dropped: its pool goes */
    st = ga_release_pool(fx_a, t->pool);
    say(s, "t%d: ga_release_pool(%llu) -> %s", ti, (unsigned long long)t->pool, ga_status_str(st));
    EXPECT(s, st == GA_OK, "ga_release_pool: %s", ga_last_error());
  }
}

static int anyone_routed(const sched *s) {
  for (int i = 0; i < NT; i++)
    if (s->t[i].routed) return 1;
  return 0;
}

static void step(sched *s) {
  int ti = (int)below(s, NT);
  lthread *t = &s->t[ti];
  unsigned op = below(s, 100);
  if (op < 36) {
    do_malloc(s, ti);
  } else if (op < 66) {
    do_free(s, ti);
  } else if (op < 71) {
    if (t->n) {
      alloc *x = &t->v[below(s, (unsigned)t->n)];
      int other = (int)below(s, NT);
      ga_status_t st = ga_record_stream(fx_a, x->p, s->t[other].stream);
      say(s, "t%d: ga_record_stream(#%u, S%d) -> %s", ti, x->id, s->t[other].sk, ga_status_str(st));
      EXPECT(s, st == GA_OK, "ga_record_stream: %s", ga_last_error());
    }
  } else if (op < 76) {
    int *held = &s->held[t->sk];
    *held = !*held;
    say(s, "t%d: S%d %s", ti, t->sk, *held ? "holds work" : "is idle");
    fx_hold(t->stream, *held);
  } else if (op < 82) {
    ga_status_t st = ga_empty_cache(fx_a);
    say(s, "t%d: ga_empty_cache -> %s", ti, ga_status_str(st));
    EXPECT(s, st == GA_OK, "ga_empty_cache: %s", ga_last_error());
  } else if (op < 84 && s->expandable) {
    if (t->n) {
      alloc *x = &t->v[below(s, (unsigned)t->n)];
      x->tagged = !x->tagged;
      ga_status_t st = ga_tag(fx_a, x->p, x->tagged ? "kv" : NULL);
      say(s, "t%d: ga_tag(#%u, %s) -> %s", ti, x->id, x->tagged ? "kv" : "NULL", ga_status_str(st));
      EXPECT(s, st == GA_OK, "ga_tag: %s", ga_last_error());
    }
  } else if (op < 91 && s->expandable) {
    ga_status_t st = ga_sleep(fx_a, "kv", GA_SLEEP_OFFLOAD);
    say(s, "t%d: ga_sleep(kv, offload) -> %s", ti, ga_status_str(st));
    EXPECT(s, st == GA_OK || (st == GA_ERR_INVALID && anyone_routed(s)), "ga_sleep: %s: %s",
           ga_status_str(st), ga_last_error());
  } else if (op < 97 && s->expandable) {
    ga_status_t st = ga_wake(fx_a);
    say(s, "t%d: ga_wake -> %s", ti, ga_status_str(st));
    EXPECT(s, st == GA_OK || st == GA_ERR_OOM, "ga_wake: %s: %s", ga_status_str(st), ga_last_error());
  } else if (s->graphs) {
    do_capture(s, ti);
  } else {
    do_malloc(s, ti);
  }
  invariants(s);
}

/* Everything ends: captures, holds, sleep; every allocation freed whole;
 * then nothing is allocated and the cache gives every byte back. */
static void finish(sched *s) {
  s->step = -1;
  for (int i = 0; i < NT; i++) {
    lthread *t = &s->t[i];
    if (s->held[t->sk]) fx_hold(t->stream, 0);
    s->held[t->sk] = 0;
    if (t->routed) {
      fx_capture(t->stream, 0);
      EXPECT(s, ga_end_allocate_to_pool(fx_a, t->pool) == GA_OK, "end: %s", ga_last_error());
      t->routed = 0;
    }
  }
  invariants(s);
  for (int i = 0; i < NT; i++) /* what is awake first, so that the rest can wake */
    for (int k = 0; k < s->t[i].n;) {
      if (asleep(&s->t[i].v[k])) {
        k++;
        continue;
      }
      alloc last = s->t[i].v[s->t[i].n - 1];
      s->t[i].v[s->t[i].n - 1] = s->t[i].v[k];
      s->t[i].v[k] = last;
      free_last(s, i);
    }
  if (s->expandable) EXPECT(s, ga_wake(fx_a) == GA_OK, "the last wake: %s", ga_last_error());
  invariants(s);
  for (int i = 0; i < NT; i++)
    while (s->t[i].n) free_last(s, i);
  for (int i = 0; i < NT; i++)
    for (int k = 1; k <= s->t[i].pool_frees; k++)
      (void)ga_release_pool(fx_a, 1000 * (uint64_t)(i + 1) + (uint64_t)k);
  EXPECT(s, ga_empty_cache(fx_a) == GA_OK, "the last empty_cache: %s", ga_last_error());
  EXPECT(s, ga_check(fx_a) == 0, "ga_check at the end");
  ga_stats_t st = fx_stats();
  EXPECT(s, st.allocated_bytes[GA_POOL_ALL].current == 0 && st.reserved_bytes[GA_POOL_ALL].current == 0,
         "at the end: %lld allocated, %lld reserved", (long long)st.allocated_bytes[GA_POOL_ALL].current,
         (long long)st.reserved_bytes[GA_POOL_ALL].current);
}

static unsigned long env_num(const char *name, unsigned long dflt) {
  const char *v = getenv(name);
  return v && *v ? strtoul(v, NULL, 10) : dflt;
}

static void run(const char *policy, const char *conf, int graphs) {
  unsigned long only = env_num("SCHEDULE_SEED", 0), steps = env_num("SCHEDULE_STEPS", 300);
  unsigned long first = only ? only : 1, last = only ? only : 6;
  for (unsigned long seed = first; seed <= last; seed++) {
    fx_open(conf, 256 * MiB);
    sched s = {.policy = policy, .graphs = graphs, .seed = seed, .rng = seed * 0x2545f4914f6cdd1dull};
    s.expandable = strstr(conf, "expandable_segments:True") != NULL;
    /* Threads share two streams, as threads of a program share the default
     * stream; with captures each has its own (a capture routes a stream). */
    for (int i = 0; i < NT; i++) {
      s.t[i].sk = graphs ? i + 1 : i % 2 + 1;
      s.t[i].stream = fx_stream(s.t[i].sk);
    }
    say(&s, "ga_create(\"%s\") on a simulated device of 256 MiB; thread ti uses stream S%s", conf,
        graphs ? "(ti+1)" : "(ti%2+1)");
    for (s.step = 0; s.step < (int)steps; s.step++) step(&s);
    finish(&s);
    free(s.script);
    fx_close();
    fx_a = NULL;
    fx_dev = NULL;
  }
}

Test(schedule, native, .timeout = 120) { run("native", "", 0); }
Test(schedule, native_max_split_size, .timeout = 120) {
  run("native_max_split_size", "max_split_size_mb:20,garbage_collection_threshold:0.7", 0);
}
Test(schedule, native_graph_pools, .timeout = 120) { run("native_graph_pools", "", 1); }
Test(schedule, expandable, .timeout = 120) { run("expandable", "expandable_segments:True", 0); }
Test(schedule, expandable_2m_pages, .timeout = 120) {
  run("expandable_2m_pages", "expandable_segments:True,expandable_page_size_mb:2", 0);
}
Test(schedule, expandable_move_pages_always, .timeout = 120) {
  run("expandable_move_pages_always",
      "expandable_segments:True,expandable_move_pages:always,expandable_move_hold:2", 0);
}
Test(schedule, expandable_move_pages_settle, .timeout = 120) {
  run("expandable_move_pages_settle", "expandable_segments:True,expandable_move_pages:settle", 0);
}
Test(schedule, expandable_graph_pools, .timeout = 120) {
  run("expandable_graph_pools", "expandable_segments:True,expandable_move_pages:settle", 1);
}
Test(schedule, pytorch_policy, .timeout = 120) {
  run("pytorch_policy", "expandable_segments:True,expandable_policy:pytorch", 0);
}
Test(schedule, pytorch_policy_graph_pools, .timeout = 120) {
  run("pytorch_policy_graph_pools", "expandable_segments:True,expandable_policy:pytorch", 1);
}
