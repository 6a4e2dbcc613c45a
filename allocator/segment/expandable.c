/* expandable.c — expandable segments: one reserved address range per
 * (stream, pool) — of the general pools or of a private pool — mapped
 * granule by granule.
 *
 * The blocks of an expandable segment tile its whole reservation; UNMAPPED
 * blocks have no memory behind them and are granule-aligned. Each granule is
 * mapped with its own map call, so any whole free granule can later be
 * unmapped alone and its memory mapped where a contiguous range is needed.
 * Which granules move, where, and when that is safe is the policy's choice
 * (policy/move.c); this file does the mapping and keeps the tiles right.
 *
 * Failure handling: every device call is followed at once by the structural
 * change it made, so a failure part-way leaves a consistent state (mapped
 * granules become FREE blocks, nothing is half-mapped or lost) and is
 * returned to the caller.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "segment.h"

static size_t round_up(size_t v, size_t g) { return (v + g - 1) / g * g; }

/* ---- Accounting: the snapshot's view ----
 * The snapshot lists each run of mapped blocks of an expandable segment as a
 * segment of its own (as PyTorch does), and the `segment` statistic counts
 * the same runs, so both views agree. reserved_bytes per pool follows where
 * a granule is mapped (the segment's pool) and, while it is cached, the pool
 * whose growth created its handle: the snapshot's small/large split. Each
 * granule mapped or unmapped is one history event: PyTorch's viewer cannot
 * replay a range mapped in one event and unmapped later in part. */

/* The change in the number of mapped runs when the front of UNMAPPED block u
 * (all of it: whole) is mapped: a new run, joined with the runs it touches
 * (an UNMAPPED block's neighbours are mapped). */
static int runs_delta_map(const ga_block *u, int whole) {
  return 1 - (u->prev != NULL) - (whole && u->next != NULL);
}

/* Granule m at va was just mapped into s (mapped), or is being unmapped. */
static void granule_event(ga_allocator_t *a, const ga_segment *s, ga_granule m, uintptr_t va, int mapped) {
  ga_pages_attribute_locked(a, m.handle, s->pool, mapped);
  ga_history_add_locked(a, mapped ? GA_H_SEGMENT_MAP : GA_H_SEGMENT_UNMAP, va, a->space.gran, s->stream);
}
static void *granule_va(const ga_allocator_t *a, const ga_segment *s, size_t i) {
  return (void *)(s->base + i * a->space.gran);
}

/* Room for the first n entries of s->granules. */
static int granules_room(ga_segment *s, size_t n) {
  if (n <= s->ngranules) return 0;
  size_t cap = s->ngranules ? s->ngranules : 64;
  while (cap < n) cap *= 2;
  ga_granule *v = realloc(s->granules, cap * sizeof *v);
  if (!v) return GA_DEV_ENOMEM;
  for (size_t i = s->ngranules; i < cap; i++) v[i] = (ga_granule){0};
  s->granules = v;
  s->ngranules = cap;
  return 0;
}

/* ---- Segments ---- */

int ga_expandable_new_locked(ga_allocator_t *a, ga_private *owner, int pool, ga_stream_t stream,
                             size_t min_size, ga_segment **out) {
  size_t g = a->space.gran;
  size_t size = a->space.reserve_size > min_size ? a->space.reserve_size : round_up(min_size, g);
  ga_segment *s = calloc(1, sizeof *s);
  ga_block *b = ga_tiles_new_locked(a);
  void *va = NULL;
  int rc = GA_DEV_ENOMEM;
  if (!s || !b) goto fail;
  if ((rc = ga_dev_reserve(a->dev, size, g, &va))) goto fail;
  *s = (ga_segment){.base = (uintptr_t)va,
                    .size = size,
                    .pool = (uint8_t)pool,
                    .expandable = 1,
                    .stream = stream,
                    .head = b,
                    .priv = owner};
  b->ptr = s->base;
  b->size = size;
  b->stream = stream;
  b->pool = (uint8_t)pool;
  b->seg = s;
  b->state = GA_BLOCK_UNMAPPED;
  ga_tiles_link_locked(a, s);
  *out = s;
  return 0;
fail:
  free(s);
  if (b) ga_tiles_delete_locked(a, b);
  return rc;
}

int ga_expandable_delete_locked(ga_allocator_t *a, ga_segment *s) {
  GA_ASSERT(s->expandable && !s->head->next && s->head->state == GA_BLOCK_UNMAPPED);
  int rc = ga_dev_unreserve(a->dev, (void *)s->base, s->size);
  if (rc) return rc;
  ga_tiles_unlink_locked(a, s);
  ga_tiles_delete_locked(a, s->head);
  free(s->granules);
  free(s);
  return 0;
}

/* ---- One granule ---- */

/* A grant that names peers added while nothing was mapped was refused as an
 * argument error: the driver does not accept those peers. They are turned
 * off (the grant that follows, and every later one, leaves them out), so
 * that one refused peer does not make every later mapping fail. */
static void refuse_unproven(ga_allocator_t *a) {
  ga_space *sp = &a->space;
  char why[sizeof a->dev->error], peers[64] = "";
  memcpy(why, a->dev->error, sizeof why);
  for (int k = sp->nproven, n = 0; k < sp->naccess; k++)
    n += snprintf(peers + n, sizeof peers - (size_t)n, "%s%d", k > sp->nproven ? ", " : "", sp->access[k]);
  ga_dev_set_error(
      a->dev,
      "%s; the access of device %s, enabled while nothing was mapped, is refused by the driver and "
      "turned off (ga_enable_peer_access can ask again)",
      why, peers);
  sp->naccess = sp->nproven;
}

int ga_expandable_fill_locked(ga_allocator_t *a, ga_segment *s, size_t i, const void *host) {
  ga_space *sp = &a->space;
  void *va = granule_va(a, s, i);
  /* A new mapping has no access yet: this device and its peers get it. */
  int rc = ga_dev_set_access(a->dev, va, sp->gran, sp->access, sp->naccess);
  if (!rc)
    sp->nproven = sp->naccess;
  else if (rc == GA_DEV_EINVAL && sp->nproven < sp->naccess)
    refuse_unproven(a);
  if (!rc && host) rc = ga_dev_copy(a->dev, (void *)host, va, sp->gran, 0);
  return rc;
}

/* Takes back a granule whose access or contents could not be set. 0 if
 * done; else the device error names both failures. */
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
  return rc;
}

int ga_expandable_map_granule_locked(ga_allocator_t *a, ga_segment *s, size_t i, const void *host,
                                     int *stuck) {
  size_t g = a->space.gran;
  void *va = granule_va(a, s, i);
  GA_ASSERT(a->space.ncache > 0 && i < s->ngranules && !s->granules[i].handle);
  *stuck = 0;
  ga_granule m = ga_pages_take_locked(a);
  int rc = ga_dev_map(a->dev, va, g, m.handle->h, m.idx * g);
  if (!rc && (rc = ga_expandable_fill_locked(a, s, i, host)) && unmap_after(a, va) != 0)
    *stuck = 1; /* cannot take the mapping back: it is this granule's memory now */
  if (rc && !*stuck) {
    (void)ga_pages_put_locked(a, m); /* room: it was just taken */
    return rc;
  }
  s->granules[i] = m;
  m.handle->nmapped++;
  ga_stat_inc(&a->stats.mapped_bytes, g);
  granule_event(a, s, m, (uintptr_t)va, 1);
  return rc;
}

int ga_expandable_sleep_granule_locked(ga_allocator_t *a, ga_segment *s, size_t i, void *host) {
  size_t g = a->space.gran;
  void *va = granule_va(a, s, i);
  GA_ASSERT(i < s->ngranules && s->granules[i].handle);
  int rc = ga_pages_room_locked(a, 1);
  if (!rc && host) rc = ga_dev_copy(a->dev, host, va, g, 1);
  if (!rc) rc = ga_dev_unmap(a->dev, va, g);
  if (rc) return rc;
  ga_granule m = s->granules[i];
  m.handle->nmapped--;
  granule_event(a, s, m, (uintptr_t)va, 0);
  (void)ga_pages_put_locked(a, m); /* room above */
  s->granules[i] = (ga_granule){.handle = NULL, .idx = GA_GRANULE_ASLEEP};
  ga_stat_dec(&a->stats.mapped_bytes, g);
  return 0;
}

/* ---- Mapping ranges ---- */

/* Maps up to `want` granules at the front of UNMAPPED block u; *done says
 * how many are mapped (a granule left mapped by a failed undo included: its
 * peers' access is granted again before anything is handed out). */
static int map_granules(ga_allocator_t *a, ga_block *u, size_t want, size_t *done) {
  ga_segment *s = u->seg;
  size_t first = (u->ptr - s->base) / a->space.gran;
  int rc = granules_room(s, first + want);
  while (!rc && *done < want) {
    int stuck;
    rc = ga_expandable_map_granule_locked(a, s, first + *done, NULL, &stuck);
    if (stuck) a->space.regrant = 1;
    if (!rc || stuck) (*done)++;
  }
  if (*done) ga_pstat_add(a->stats.segment, s->pool, runs_delta_map(u, *done * a->space.gran == u->size));
  return rc;
}

int ga_expandable_map_locked(ga_allocator_t *a, ga_block *run, uintptr_t hi) {
  size_t g = a->space.gran;
  uintptr_t hi_g = round_up(hi, g);
  GA_ASSERT(run->seg->expandable && (!run->prev || run->prev->state != GA_BLOCK_FREE));
  for (ga_block *b = run; b && b->ptr < hi;) {
    if (b->state != GA_BLOCK_UNMAPPED) {
      b = b->next;
      continue;
    }
    uintptr_t end = b->ptr + b->size < hi_g ? b->ptr + b->size : hi_g;
    size_t done = 0;
    int rc = ga_tiles_reserve_locked(a, 1); /* the split below cannot fail */
    if (!rc) rc = map_granules(a, b, (end - b->ptr) / g, &done);
    if (done) {
      /* The mapped prefix becomes FREE and joins its FREE neighbours. */
      if (done * g < b->size) (void)ga_tiles_split_locked(a, b, done * g);
      b->state = GA_BLOCK_FREE;
      b = ga_tiles_merge_free_locked(a, b);
    }
    if (rc) return rc;
    b = b->next;
  }
  return 0;
}

/* ---- Unmapping ---- */

int ga_expandable_unmap_locked(ga_allocator_t *a, ga_block *b, size_t g0, size_t g1, ga_block **front,
                               ga_block **back) {
  ga_segment *s = b->seg;
  size_t g = a->space.gran, k = g1 - g0, first = (g0 * g - s->base) / g;
  GA_ASSERT(b->state == GA_BLOCK_FREE && !b->in_tree && s->expandable);
  GA_ASSERT(g0 < g1 && g0 * g >= b->ptr && g1 * g <= b->ptr + b->size);
  *front = *back = NULL;
  /* Room first: after the unmap nothing may fail. */
  int rc = ga_tiles_reserve_locked(a, 2);
  if (!rc) rc = ga_pages_room_locked(a, k);
  if (!rc) rc = ga_dev_unmap(a->dev, (void *)(g0 * g), k * g);
  if (rc) return rc;
  for (size_t i = 0; i < k; i++) {
    ga_granule m = s->granules[first + i];
    s->granules[first + i] = (ga_granule){0};
    m.handle->nmapped--;
    granule_event(a, s, m, (g0 + i) * g, 0);
    (void)ga_pages_put_locked(a, m);
  }
  ga_stat_dec(&a->stats.mapped_bytes, k * g);
  /* b = [FREE front][UNMAPPED middle][FREE back] */
  ga_block *mid = b;
  if (g0 * g > b->ptr) {
    mid = ga_tiles_split_locked(a, b, g0 * g - b->ptr);
    *front = b;
  }
  if (g1 * g < mid->ptr + mid->size) *back = ga_tiles_split_locked(a, mid, k * g);
  /* The run this was cut from: a part of it stays on each side where a mapped block touches mid. */
  int left = mid->prev && mid->prev->state != GA_BLOCK_UNMAPPED;
  int right = mid->next && mid->next->state != GA_BLOCK_UNMAPPED;
  ga_pstat_add(a->stats.segment, s->pool, left + right - 1);
  (void)ga_tiles_merge_unmapped_locked(a, mid);
  return 0;
}

/* ---- Access for peer devices ---- */

int ga_expandable_grant_locked(ga_allocator_t *a, const int *devices, int n, size_t *ranges) {
  size_t g = a->space.gran;
  *ranges = 0;
  for (ga_segment *s = a->space.segs; s; s = s->next) {
    if (!s->expandable) continue;
    /* Each run of mapped granules (asleep and unmapped ones have no memory behind them). */
    size_t ngran = s->size / g < s->ngranules ? s->size / g : s->ngranules;
    for (size_t i = 0; i < ngran; i++) {
      if (!s->granules[i].handle) continue;
      size_t end = i + 1;
      while (end < ngran && s->granules[end].handle) end++;
      int rc = ga_dev_set_access(a->dev, granule_va(a, s, i), (end - i) * g, devices, n);
      if (rc) return rc;
      ++*ranges;
      i = end;
    }
  }
  return 0;
}

int ga_expandable_access_add_locked(ga_allocator_t *a, int peer) {
  ga_space *sp = &a->space;
  size_t ranges = 0;
  GA_ASSERT(sp->naccess < (int)(sizeof sp->access / sizeof sp->access[0]));
  sp->access[sp->naccess] = peer;
  int rc = ga_expandable_grant_locked(a, sp->access, sp->naccess + 1, &ranges);
  if (rc) {
    /* Back to what it was; the error text stays the first failure's. */
    char why[sizeof a->dev->error];
    memcpy(why, a->dev->error, sizeof why);
    (void)ga_expandable_grant_locked(a, sp->access, sp->naccess, &ranges);
    memcpy(a->dev->error, why, sizeof why);
    return rc;
  }
  sp->naccess++;
  /* Granted on real memory, or (nothing mapped) still to be tried by the next map. */
  if (ranges && sp->nproven == sp->naccess - 1) sp->nproven = sp->naccess;
  return 0;
}

int ga_expandable_regrant_locked(ga_allocator_t *a) {
  size_t ranges = 0;
  int rc = ga_expandable_grant_locked(a, a->space.access, a->space.naccess, &ranges);
  if (rc == GA_DEV_EINVAL && a->space.nproven < a->space.naccess) refuse_unproven(a);
  if (!rc) {
    a->space.regrant = 0;
    if (ranges) a->space.nproven = a->space.naccess;
  }
  return rc;
}
