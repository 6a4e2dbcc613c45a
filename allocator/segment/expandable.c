/* expandable.c — expandable segments: one reserved address range per
 * (stream, pool) — of the general pools or of a private pool — mapped
 * granule by granule as it grows.
 *
 * The blocks of an expandable segment tile its whole reservation; UNMAPPED
 * blocks have no memory behind them and are granule-aligned. Each granule is
 * mapped with its own map call, so any whole free granule can later be
 * unmapped alone and its memory mapped where a contiguous range is needed
 * (pages.c decides where memory comes from).
 *
 * Failure handling: every device call is followed at once by the structural
 * change it made, so a failure part-way leaves a consistent state (mapped
 * granules become FREE blocks, nothing is half-mapped or lost) and is
 * returned to the caller.
 */
#include <stdlib.h>
#include <string.h>

#include "../internal.h"

static size_t round_up(size_t v, size_t g) { return (v + g - 1) / g * g; }

/* Enough spare block structs for n splits, so structure updates after a
 * device call cannot fail. */
static int spare_blocks(ga_allocator_t *a, int n) {
  ga_block *got[4];
  int k = 0;
  for (; k < n; k++)
    if (!(got[k] = ga_block_new_locked(a))) break;
  int ok = k == n;
  while (k-- > 0) ga_block_delete_locked(a, got[k]);
  return ok ? 0 : -1;
}

static int granules_room(ga_segment *s, size_t granules) {
  if (granules <= s->ngranules) return 0;
  size_t n = s->ngranules ? s->ngranules : 64;
  while (n < granules) n *= 2;
  ga_granule *v = realloc(s->granules, n * sizeof *v);
  if (!v) return -1;
  for (size_t i = s->ngranules; i < n; i++) v[i] = (ga_granule){0};
  s->granules = v;
  s->ngranules = n;
  return 0;
}

/* ---- Segments ---- */

static int segment_new(ga_allocator_t *a, ga_private *priv, int pool, ga_stream_t stream, size_t min_size,
                       ga_segment **out) {
  size_t size = a->space.reserve_size > min_size ? a->space.reserve_size : round_up(min_size, a->space.gran);
  ga_segment *s = calloc(1, sizeof *s);
  ga_block *b = ga_block_new_locked(a);
  void *va = NULL;
  int rc = -1;
  if (!s || !b) goto fail;
  if ((rc = ga_dev_reserve(a->dev, size, a->space.gran, &va))) goto fail;
  *s = (ga_segment){.base = (uintptr_t)va,
                    .size = size,
                    .pool = (uint8_t)pool,
                    .expandable = 1,
                    .stream = stream,
                    .head = b,
                    .priv = priv};
  if (priv) priv->nsegs++;
  b->ptr = s->base;
  b->size = size;
  b->stream = stream;
  b->pool = (uint8_t)pool;
  b->seg = s;
  b->state = GA_BLOCK_UNMAPPED;
  s->next = a->space.segs;
  if (a->space.segs) a->space.segs->prev = s;
  a->space.segs = s;
  a->space.nsegs++;
  *out = s;
  return 0;
fail:
  free(s);
  if (b) ga_block_delete_locked(a, b);
  return rc;
}

static int segment_delete(ga_allocator_t *a, ga_segment *s) {
  int rc = ga_dev_unreserve(a->dev, (void *)s->base, s->size);
  if (rc) return rc;
  ga_private *priv = s->priv;
  if (s->prev)
    s->prev->next = s->next;
  else
    a->space.segs = s->next;
  if (s->next) s->next->prev = s->prev;
  a->space.nsegs--;
  ga_block_delete_locked(a, s->head);
  free(s->granules);
  free(s);
  if (priv) ga_private_segment_gone_locked(a, priv); /* may free a released pool */
  return 0;
}

/* ---- Finding room ---- */

/* The lowest-address run of FREE/UNMAPPED blocks on (pool, stream) of the
 * private pool `priv` (NULL: the general pools) that holds `size` bytes and
 * reaches unmapped space; *run_end is where the run ends. */
static ga_block *find_run(ga_allocator_t *a, ga_private *priv, int pool, ga_stream_t stream, size_t size,
                          uintptr_t *run_end) {
  for (ga_segment *s = a->space.segs; s; s = s->next) {
    if (!s->expandable || s->pool != pool || s->stream != stream || s->priv != priv) continue;
    ga_block *start = NULL;
    size_t total = 0;
    int unmapped = 0;
    for (ga_block *b = s->head; b; b = b->next) {
      if (b->state != GA_BLOCK_FREE && b->state != GA_BLOCK_UNMAPPED) {
        start = NULL;
        continue;
      }
      if (!start) start = b, total = 0, unmapped = 0;
      total += b->size;
      unmapped |= b->state == GA_BLOCK_UNMAPPED;
      if (total >= size && unmapped) {
        ga_block *e = b;
        while (e->next && (e->next->state == GA_BLOCK_FREE || e->next->state == GA_BLOCK_UNMAPPED))
          e = e->next;
        *run_end = e->ptr + e->size;
        return start;
      }
    }
  }
  return NULL;
}

/* ---- Mapping ---- */

/* The first `bytes` of UNMAPPED block u are now mapped: they become FREE and
 * merge with FREE neighbours. Returns the merged FREE block. */
static ga_block *mapped_prefix(ga_allocator_t *a, ga_block *u, size_t bytes) {
  if (bytes < u->size) (void)ga_block_split_off_locked(a, u, bytes); /* spare struct reserved */
  u->state = GA_BLOCK_FREE;
  return ga_block_merge_insert_locked(a, u);
}

/* Takes back a page whose access could not be set. 1 if done; else the
 * device error names both failures. */
static int unmap_after(ga_allocator_t *a, void *va) {
  char why[sizeof a->dev->error], unmap_why[sizeof a->dev->error];
  memcpy(why, a->dev->error, sizeof why);
  int rc = ga_dev_unmap(a->dev, va, a->space.gran);
  if (rc) {
    memcpy(unmap_why, a->dev->error, sizeof unmap_why);
    ga_dev_set_error(a->dev, "%s; taking the page back failed too: %s", why, unmap_why);
  } else {
    memcpy(a->dev->error, why, sizeof why);
  }
  return rc == 0;
}

/* Maps the first `want` granules of UNMAPPED block u from the cache.
 * *merged gets the FREE block they joined (NULL when none was mapped). */
static int map_granules(ga_allocator_t *a, ga_block *u, size_t want, ga_block **merged) {
  ga_segment *s = u->seg;
  size_t first = (u->ptr - s->base) / a->space.gran, done = 0;
  int rc = granules_room(s, first + want) ? -1 : 0;
  while (!rc && done < want) {
    ga_granule p = ga_pages_take_locked(a);
    void *va = (void *)(u->ptr + done * a->space.gran);
    rc = ga_dev_map(a->dev, va, a->space.gran, p.handle->h, p.idx * a->space.gran);
    /* A new mapping has no access yet: this device and the peers granted
     * access get it now. A page they cannot use is taken back, or, if even
     * that fails, kept and granted again before any block is handed out
     * (a->space.regrant). */
    if (!rc && (rc = ga_dev_set_access(a->dev, va, a->space.gran, a->space.access, a->space.naccess)) &&
        !unmap_after(a, va))
      a->space.regrant = 1;
    else if (rc) {
      (void)ga_pages_put_locked(a, p); /* room: it was just taken */
      break;
    }
    s->granules[first + done] = p;
    p.handle->nmapped++;
    done++;
    if (rc) break;
  }
  ga_stat_add(&a->stats.mapped_bytes, (int64_t)(done * a->space.gran));
  if (done) ga_history_add_locked(a, GA_H_SEGMENT_MAP, u->ptr, done * a->space.gran, s->stream);
  *merged = done ? mapped_prefix(a, u, done * a->space.gran) : NULL;
  return rc;
}

int ga_expandable_grow_locked(ga_allocator_t *a, ga_private *priv, int pool, ga_stream_t stream, size_t size,
                              int *fraction_refused, ga_block **out) {
  *fraction_refused = 0;
  uintptr_t run_end = 0;
  ga_block *run = find_run(a, priv, pool, stream, size, &run_end);
  if (!run) {
    ga_segment *s;
    int rc = segment_new(a, priv, pool, stream, size, &s);
    if (rc) return rc;
    run = s->head;
    run_end = s->base + s->size;
  }
  uintptr_t lo = run->ptr, hi = lo + size, hi_g = round_up(hi, a->space.gran);
  size_t n = 0;
  for (ga_block *b = run; b && b->ptr < hi; b = b->next)
    if (b->state == GA_BLOCK_UNMAPPED)
      n += ((b->ptr + b->size < hi_g ? b->ptr + b->size : hi_g) - b->ptr) / a->space.gran;
  size_t page = pool == GA_P_SMALL ? GA_SMALL_BUFFER : a->pol.large_page;
  /* Free memory outside the range may move here; `run` survives any merge
   * (the earlier block of a merge is the one kept). */
  int rc = ga_pages_obtain_locked(a, n, pool, page, lo, hi_g, fraction_refused);
  if (rc) return rc;
  ga_block *m = run->state == GA_BLOCK_FREE ? run : NULL, *b = run;
  while (b && b->ptr < hi) {
    if (b->state != GA_BLOCK_UNMAPPED) {
      b = b->next;
      continue;
    }
    uintptr_t end = b->ptr + b->size < hi_g ? b->ptr + b->size : hi_g;
    if (spare_blocks(a, 2)) return -1;
    ga_block *merged;
    rc = map_granules(a, b, (end - b->ptr) / a->space.gran, &merged);
    if (rc) return rc;
    m = merged;
    b = m->next;
  }
  /* m is the FREE block starting at lo, at least size bytes long. */
  ga_block_from_free_tree_locked(a, m);
  *out = m;
  (void)ga_pages_trim_locked(a, a->cfg.expandable_cache_max); /* a failed release keeps the page cached */
  return 0;
}

/* ---- Unmapping ---- */

int ga_expandable_unmap_locked(ga_allocator_t *a, ga_block *b, size_t g0, size_t g1) {
  ga_segment *s = b->seg;
  size_t k = g1 - g0, first = (g0 * a->space.gran - s->base) / a->space.gran;
  /* Room first: after the unmap nothing may fail. */
  if (spare_blocks(a, 2) || ga_pages_room_locked(a, k)) return -1;
  int rc = ga_dev_unmap(a->dev, (void *)(g0 * a->space.gran), k * a->space.gran);
  if (rc) return rc;
  for (size_t i = 0; i < k; i++) {
    ga_granule p = s->granules[first + i];
    s->granules[first + i] = (ga_granule){0};
    p.handle->nmapped--;
    (void)ga_pages_put_locked(a, p);
  }
  ga_stat_add(&a->stats.mapped_bytes, -(int64_t)(k * a->space.gran));
  ga_history_add_locked(a, GA_H_SEGMENT_UNMAP, g0 * a->space.gran, k * a->space.gran, s->stream);
  /* b = [FREE front][UNMAPPED middle][FREE back] */
  ga_block_from_free_tree_locked(a, b);
  ga_block *mid = b;
  if (g0 * a->space.gran > b->ptr) {
    mid = ga_block_split_off_locked(a, b, g0 * a->space.gran - b->ptr);
    ga_block_to_free_tree_locked(a, b);
  }
  if (g1 * a->space.gran < mid->ptr + mid->size) {
    ga_block *back = ga_block_split_off_locked(a, mid, k * a->space.gran);
    ga_block_to_free_tree_locked(a, back);
  }
  ga_block_merge_unmapped_locked(a, mid);
  return 0;
}

typedef struct frees {
  ga_block **v;
  size_t n, cap;
} frees;

int ga_expandable_grant_locked(ga_allocator_t *a, const int *devices, int n) {
  for (ga_segment *s = a->space.segs; s; s = s->next) {
    if (!s->expandable) continue;
    /* Each run of mapped granules (asleep and unmapped ones have no backing). */
    size_t ngran = s->size / a->space.gran < s->ngranules ? s->size / a->space.gran : s->ngranules;
    for (size_t g = 0; g < ngran; g++) {
      if (!s->granules[g].handle) continue;
      size_t end = g + 1;
      while (end < ngran && s->granules[end].handle) end++;
      int rc = ga_dev_set_access(a->dev, (void *)(s->base + g * a->space.gran), (end - g) * a->space.gran,
                                 devices, n);
      if (rc) return rc;
      g = end;
    }
  }
  return 0;
}

/* May the free memory of s go back? General segments, and those of a
 * released pool that no stream uses any more (`only`: that pool's alone). */
static int releasable(const ga_segment *s, const ga_private *only) {
  if (!s->expandable) return 0;
  if (only) return s->priv == only;
  return !s->priv || (s->priv->released && !s->priv->nstreams);
}

int ga_expandable_release_locked(ga_allocator_t *a, ga_private *only) {
  int rc = 0;
  frees f = {0};
  for (ga_segment *s = a->space.segs, *next; s && !rc; s = next) {
    next = s->next;
    if (!releasable(s, only)) continue;
    /* Collect first: unmapping a free block never touches another FREE one. */
    f.n = 0;
    for (ga_block *b = s->head; b; b = b->next) {
      size_t g0 = (b->ptr + a->space.gran - 1) / a->space.gran, g1 = (b->ptr + b->size) / a->space.gran;
      if (b->state != GA_BLOCK_FREE || g1 <= g0) continue;
      if (GA_VEC_ROOM(f.v, f.cap, f.n + 1)) {
        rc = -1;
        break;
      }
      f.v[f.n++] = b;
    }
    if (f.n && !rc) {
      /* Work queued before the frees may still touch this memory. */
      if ((rc = ga_dev_stream_synchronize(a->dev, s->stream))) break;
      a->stats.num_unmap_syncs++;
    }
    for (size_t i = 0; i < f.n && !rc; i++) {
      ga_block *b = f.v[i];
      rc = ga_expandable_unmap_locked(a, b, (b->ptr + a->space.gran - 1) / a->space.gran,
                                      (b->ptr + b->size) / a->space.gran);
    }
    if (!rc && !s->head->next && s->head->state == GA_BLOCK_UNMAPPED) rc = segment_delete(a, s);
  }
  free(f.v);
  int rc2 = ga_pages_trim_locked(a, 0);
  return rc ? rc : rc2;
}

int ga_expandable_release_all_locked(ga_allocator_t *a) { return ga_expandable_release_locked(a, NULL); }

void ga_expandable_teardown_locked(ga_allocator_t *a) {
  for (ga_segment *s = a->space.segs; s; s = s->next) {
    if (!s->expandable) continue;
    for (ga_block *b = s->head; b; b = b->next) {
      if (b->state == GA_BLOCK_UNMAPPED) continue;
      /* Every granule touching a mapped block, once. */
      size_t g0 = b->ptr / a->space.gran, g1 = (b->ptr + b->size + a->space.gran - 1) / a->space.gran;
      for (size_t g = g0; g < g1; g++) {
        ga_granule *p = &s->granules[g - s->base / a->space.gran];
        if (!p->handle) continue;
        (void)ga_dev_unmap(a->dev, (void *)(g * a->space.gran), a->space.gran);
        p->handle->nmapped--;
        *p = (ga_granule){0};
      }
    }
    (void)ga_dev_unreserve(a->dev, (void *)s->base, s->size);
  }
}
