/* ranks.c — a trace replayed as N ranks with different GPU timing (ranks.h). */
#include "ranks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/sim.h"
#include "internal.h"

/* The second stream of record_every (a stream no trace names). */
#define SIDE_STREAM ((ga_stream_t)(uintptr_t)0x5ade5ade)

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
/* Uniform in [0, max_ns]. */
static uint64_t draw(uint64_t *s, double max_us) {
  uint64_t max_ns = (uint64_t)(max_us * 1000.0);
  return max_ns ? splitmix(s) % (max_ns + 1) : 0;
}

typedef struct place {
  uint64_t seg, off, size; /* seg: UINT64_MAX for a failed allocation (off: its status) */
} place;

typedef struct live {
  uint64_t id;
  void *ptr;
  int used;
} live;

static size_t slot_of(uint64_t id, size_t cap) {
  return (size_t)((id * 0x9e3779b97f4a7c15ULL) >> 20) & (cap - 1);
}

/* Segments named by the order in which they first held an allocation. */
typedef struct seen {
  const ga_segment **seg;
  uintptr_t *base;
  size_t n, cap;
} seen;

static int segment_name(seen *s, const ga_segment *seg, uint64_t *name) {
  for (size_t i = s->n; i-- > 0;)
    if (s->seg[i] == seg && s->base[i] == seg->base) return *name = i, 0;
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 64;
    const ga_segment **ns = realloc(s->seg, cap * sizeof *ns);
    if (!ns) return -1;
    s->seg = ns;
    uintptr_t *nb = realloc(s->base, cap * sizeof *nb);
    if (!nb) return -1;
    s->base = nb;
    s->cap = cap;
  }
  s->seg[s->n] = seg;
  s->base[s->n] = seg->base;
  *name = s->n++;
  return 0;
}

/* One rank: its placements into out (t->n entries at most), *nout of them. */
static int one_rank(const trace *t, const char *conf, const ranks_opts *o, int rank, place *out, size_t *nout,
                    ranks_result *r, char *err, size_t errlen) {
  char full[1024], scatter[64] = "";
  uint64_t rng = o->seed * 0x100000001b3ULL + (uint64_t)rank * 0x9e3779b97f4a7c15ULL + 1;
  uint64_t srng = rng ^ 0x5ca77e4ULL; /* its own draws: the lags stay those without --scatter */
  if (o->scatter)                     /* a seed of the rank's own, never 0 (off) */
    snprintf(scatter, sizeof scatter, ",sim_scatter_addresses:%llu",
             (unsigned long long)(splitmix(&srng) % 0xffffffffULL + 1));
  snprintf(full, sizeof full, "backend:sim%s%s%s", scatter, conf && conf[0] ? "," : "", conf ? conf : "");
  ga_allocator_t *a;
  if (ga_create(full, 0, &a) != GA_OK) {
    snprintf(err, errlen, "%s", ga_last_error());
    return -1;
  }
  ga_device *dev = ga_allocator_device(a);
  if (!ga_sim_is(dev)) {
    ga_destroy(a);
    snprintf(err, errlen, "ranks: the ranks need the simulated device (its timing is drawn per rank)");
    return -1;
  }
  r->lag_ns[rank] = draw(&rng, o->lag_max_us);
  ga_sim_set_lag(dev, r->lag_ns[rank]);
  uint64_t pace_ns = (uint64_t)((o->pace_us > 0 ? o->pace_us : 10.0) * 1000.0);
  size_t cap = 1024;
  while (cap < 2 * t->n + 2) cap *= 2;
  live *m = calloc(cap, sizeof *m);
  seen segs = {0};
  int rc = m ? 0 : -1;
  if (!m) snprintf(err, errlen, "out of memory");
  size_t n = 0, nalloc = 0;
  for (size_t i = 0; i < t->n && !rc; i++) {
    const trace_event *e = &t->ev[i];
    ga_stream_t stream = (ga_stream_t)(uintptr_t)e->stream;
    ga_sim_advance(dev, t->timed && i ? e->time_ns - t->ev[i - 1].time_ns : pace_ns);
    ga_sim_enqueue(dev, stream, draw(&rng, o->kernel_max_us));
    size_t s = slot_of(e->id, cap);
    while (m[s].used && m[s].id != e->id) s = (s + 1) & (cap - 1);
    if (e->is_free) {
      if (!m[s].used) {
        snprintf(err, errlen, "%s: event %zu frees id 0x%llx that is not live", t->path, i + 1,
                 (unsigned long long)e->id);
        rc = -1;
        break;
      }
      if (m[s].ptr && ga_free(a, m[s].ptr) != GA_OK) {
        snprintf(err, errlen, "%s: event %zu: %s", t->path, i + 1, ga_last_error());
        rc = -1;
      }
      size_t hole = s; /* backward-shift deletion keeps the probe chains whole */
      m[hole] = (live){0};
      for (size_t j = (hole + 1) & (cap - 1); m[j].used; j = (j + 1) & (cap - 1)) {
        size_t home = slot_of(m[j].id, cap);
        if (((j - home) & (cap - 1)) >= ((j - hole) & (cap - 1))) {
          m[hole] = m[j];
          m[j] = (live){0};
          hole = j;
        }
      }
      continue;
    }
    if (m[s].used) {
      snprintf(err, errlen, "%s: event %zu allocates id 0x%llx that is already live", t->path, i + 1,
               (unsigned long long)e->id);
      rc = -1;
      break;
    }
    void *p = NULL;
    ga_status_t st = ga_malloc(a, (size_t)e->size, stream, &p);
    if (st != GA_OK && st != GA_ERR_OOM) {
      snprintf(err, errlen, "%s: event %zu: %s", t->path, i + 1, ga_last_error());
      rc = -1;
      break;
    }
    m[s] = (live){e->id, p, 1};
    nalloc++;
    place pl = {UINT64_MAX, (uint64_t)st, 0};
    if (p) {
      const ga_block *b = ga_blockmap_get(&a->pol.map, (uintptr_t)p);
      if (!b || segment_name(&segs, b->seg, &pl.seg)) {
        snprintf(err, errlen, "%s: event %zu: %s", t->path, i + 1, b ? "out of memory" : "no block");
        rc = -1;
        break;
      }
      pl.off = b->ptr - b->seg->base;
      pl.size = b->size;
      if (o->record_every && nalloc % o->record_every == 0) {
        /* Used on a second stream too: its free waits for that stream. */
        if (ga_record_stream(a, p, SIDE_STREAM) != GA_OK) {
          snprintf(err, errlen, "%s: event %zu: %s", t->path, i + 1, ga_last_error());
          rc = -1;
          break;
        }
        ga_sim_enqueue(dev, SIDE_STREAM, draw(&rng, o->kernel_max_us));
      }
    }
    out[n++] = pl;
  }
  *nout = n;
  ga_stats_t st;
  ga_stats(a, &st);
  r->peak_reserved[rank] = (uint64_t)st.reserved_bytes[GA_POOL_ALL].peak;
  r->stalls[rank] = (uint64_t)st.num_stalls;
  r->stall_ns[rank] = (uint64_t)st.stall_us * 1000;
  if (!rc && ga_check(a) != 0) {
    snprintf(err, errlen, "%s: ga_check found broken invariants after rank %d", t->path, rank);
    rc = -1;
  }
  free(segs.seg);
  free(segs.base);
  free(m);
  ga_destroy(a);
  return rc;
}

static void describe(char *buf, size_t len, const place *p) {
  if (p->seg == UINT64_MAX)
    snprintf(buf, len, "status %llu", (unsigned long long)p->off);
  else
    snprintf(buf, len, "segment %llu +%llu (%llu bytes)", (unsigned long long)p->seg,
             (unsigned long long)p->off, (unsigned long long)p->size);
}

int ranks_replay(const trace *t, const char *conf, const ranks_opts *o, ranks_result *r, char *err,
                 size_t errlen) {
  memset(r, 0, sizeof *r);
  if (o->ranks < 2 || o->ranks > RANKS_MAX) {
    snprintf(err, errlen, "ranks: between 2 and %d ranks, not %d", RANKS_MAX, o->ranks);
    return -1;
  }
  place *first = malloc((t->n + 1) * sizeof *first), *other = malloc((t->n + 1) * sizeof *other);
  int rc = first && other ? 0 : -1;
  if (rc) snprintf(err, errlen, "out of memory");
  size_t n0 = 0;
  r->identical = 1;
  for (int k = 0; k < o->ranks && !rc; k++) {
    size_t n = 0;
    rc = one_rank(t, conf, o, k, k ? other : first, k ? &n : &n0, r, err, errlen);
    if (rc || !k) continue;
    for (size_t i = 0; i < n && r->identical; i++) {
      if (first[i].seg == other[i].seg && first[i].off == other[i].off && first[i].size == other[i].size)
        continue;
      char x[64], y[64];
      describe(x, sizeof x, &first[i]);
      describe(y, sizeof y, &other[i]);
      r->identical = 0;
      r->first_diff = i + 1;
      r->diff_rank = k;
      snprintf(r->diff_what, sizeof r->diff_what, "rank 0: %s, rank %d: %s", x, k, y);
    }
  }
  r->allocs = n0;
  r->peak_min = UINT64_MAX;
  for (int k = 0; k < o->ranks; k++) {
    if (r->peak_reserved[k] < r->peak_min) r->peak_min = r->peak_reserved[k];
    if (r->peak_reserved[k] > r->peak_max) r->peak_max = r->peak_reserved[k];
  }
  free(first);
  free(other);
  return rc;
}
