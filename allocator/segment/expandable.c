/* expandable.c — expandable segments: one reserved address range per
 * (stream, pool) — of the general pools or of a private pool — mapped
 * granule by granule.
 *
 * The blocks of an expandable segment tile its whole reservation; UNMAPPED
 * blocks have no memory behind them and are granule-aligned. A run of
 * granules of one handle is mapped with one map call (a mapping), and each
 * range mapped gets access with one call. Free memory can later be unmapped
 * and mapped where a contiguous range is needed, in whole mappings: the part
 * of a mapping that stays is mapped again.
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
static void granule_event(ga_space *sp, const ga_segment *s, ga_granule m, uintptr_t va, int mapped) {
  ga_pages_attribute_locked(sp, m.handle, s->pool, mapped);
  ga_space_history_locked(sp, mapped ? GA_H_SEGMENT_MAP : GA_H_SEGMENT_UNMAP, va, sp->gran, s->stream);
}

static void *granule_va(const ga_space *sp, const ga_segment *s, size_t i) {
  return (void *)(s->base + i * sp->gran);
}

/* Room for the first n entries of s->granules: the table for the whole
 * reservation at once, from fresh pages that read as zero until first
 * touched (ga_host_zeroed). A reservation of 90 GiB has 46080 granules,
 * 720 KiB of entries, and the default maps the rest of a new page as a free
 * tail up to the end of the segment's unmapped space, so the first mapping
 * of a segment asks for all of it: grown by doubling, every entry was
 * zeroed then (81 % of the replay's instructions on MiniMalloc A, sizes
 * x64); now an entry costs something only once a granule is mapped there. */
static int granules_room(const ga_space *sp, ga_segment *s, size_t n) {
  if (n <= s->ngranules) return 0;
  size_t cap = s->size / sp->gran;
  GA_ASSERT(n <= cap && !s->granules);
  ga_granule *v = ga_host_zeroed(cap * sizeof *v);
  if (!v) return GA_DEV_ENOMEM;
  s->granules = v;
  s->ngranules = cap;
  return 0;
}

/* ---- Segments ---- */

int ga_expandable_new_locked(ga_space *sp, struct ga_private *owner, int pool, ga_stream_t stream,
                             size_t min_size, ga_segment **out) {
  GA_ASSERT_SPACE_LOCKED(sp);
  size_t g = sp->gran;
  size_t size = sp->reserve_size > min_size ? sp->reserve_size : round_up(min_size, g);
  ga_segment *s;
  ga_block *b;
  void *va = NULL;
  int rc = ga_tiles_segment_records_locked(sp, &s, &b);
  if (rc) return rc;
  if ((rc = ga_dev_reserve(sp->dev, size, g, &va))) {
    ga_tiles_segment_drop_locked(sp, s, b);
    return rc;
  }
  *s = (ga_segment){.base = (uintptr_t)va,
                    .size = size,
                    .pool = (uint8_t)pool,
                    .expandable = 1,
                    .stream = stream,
                    .priv = owner};
  ga_tiles_segment_open_locked(sp, s, b, GA_BLOCK_UNMAPPED);
  *out = s;
  return 0;
}

int ga_expandable_delete_locked(ga_space *sp, ga_segment *s) {
  GA_ASSERT_SPACE_LOCKED(sp);
  GA_ASSERT(s->expandable && !s->head->next && s->head->state == GA_BLOCK_UNMAPPED);
  int rc = ga_dev_unreserve(sp->dev, (void *)s->base, s->size);
  if (rc) return rc;
  ga_unmapped_remove_locked(s->head);
  ga_tiles_unlink_locked(sp, s);
  ga_tiles_delete_locked(sp, s->head);
  ga_host_zeroed_free(s->granules, s->ngranules * sizeof *s->granules);
  free(s);
  return 0;
}

/* ---- Mappings ----
 * A mapping is what one map call made: n granules of one handle, consecutive
 * in the handle and in the segment. granules[i].off is granule i's place in
 * its mapping and .len the mapping's length. An unmap covers whole mappings
 * (the driver's rule), so a part of a mapping moves only when the rest of it
 * is free too: the rest is mapped again. A handle's granules enter the page
 * cache so that taking them gives them back in order, and a run of them is
 * mapped with one call, with one access call per range mapped. */

static size_t map_start(const ga_segment *s, size_t i) { return i - s->granules[i].off; }
static size_t map_end(const ga_segment *s, size_t i) { return map_start(s, i) + s->granules[i].len; }

/* Records the mapping of n granules of h from idx at granule i of s. */
static void record(ga_space *sp, ga_segment *s, size_t i, ga_handle *h, uint32_t idx, size_t n) {
  GA_ASSERT(n > 0 && n <= UINT16_MAX && i + n <= s->ngranules);
  for (size_t j = 0; j < n; j++) {
    s->granules[i + j] = (ga_granule){h, idx + (uint32_t)j, (uint16_t)j, (uint16_t)n};
    granule_event(sp, s, s->granules[i + j], s->base + (i + j) * sp->gran, 1);
  }
  h->nmapped += (uint32_t)n;
  ga_stat_inc(&sp->stats->mapped_bytes, n * sp->gran);
}

/* Forgets the mapping of granules [i, i + n) of s (they are unmapped). */
static void forget(ga_space *sp, ga_segment *s, size_t i, size_t n) {
  for (size_t j = i; j < i + n; j++) {
    granule_event(sp, s, s->granules[j], s->base + j * sp->gran, 0);
    s->granules[j].handle->nmapped--;
    s->granules[j] = (ga_granule){0};
  }
  ga_stat_dec(&sp->stats->mapped_bytes, n * sp->gran);
}

/* Puts n granules of h from idx into the page cache, to be taken in order.
 * The caller made room. */
static void to_cache(ga_space *sp, ga_handle *h, uint32_t idx, size_t n) {
  for (size_t j = n; j-- > 0;) (void)ga_pages_put_locked(sp, (ga_granule){h, idx + (uint32_t)j, 0, 0});
}

/* Takes from the page cache a run of consecutive granules of one handle,
 * which one map call can map: up to `max`, and on to `extend` while the
 * handle's run goes on. Returns how many, the first in *m. */
static size_t take_run(ga_space *sp, size_t max, size_t extend, ga_granule *m) {
  *m = ga_pages_take_locked(sp);
  size_t n = 1;
  while ((n < max || n < extend) && n < UINT16_MAX && sp->ncache &&
         sp->cache[sp->ncache - 1].handle == m->handle && sp->cache[sp->ncache - 1].idx == m->idx + n) {
    (void)ga_pages_take_locked(sp);
    n++;
  }
  return n;
}

/* Keeps the first failure's text, adding the second's when there is one. */
static void both_errors(ga_space *sp, const char *why, int second_failed) {
  if (second_failed) {
    char second[sizeof sp->dev->error];
    memcpy(second, sp->dev->error, sizeof second);
    ga_dev_set_error(sp->dev, "%s; taking the page back failed too: %s", why, second);
  } else {
    memcpy(sp->dev->error, why, sizeof sp->dev->error);
  }
}

/* A grant that names peers added while nothing was mapped was refused as an
 * argument error: the driver does not accept those peers. They are turned
 * off (the grant that follows, and every later one, leaves them out), so
 * that one refused peer does not make every later mapping fail. */
static void refuse_unproven(ga_space *sp) {
  char why[sizeof sp->dev->error], peers[64] = "";
  memcpy(why, sp->dev->error, sizeof why);
  for (int k = sp->nproven, n = 0; k < sp->naccess; k++)
    n += snprintf(peers + n, sizeof peers - (size_t)n, "%s%d", k > sp->nproven ? ", " : "", sp->access[k]);
  ga_dev_set_error(
      sp->dev,
      "%s; the access of device %s, enabled while nothing was mapped, is refused by the driver and "
      "turned off (ga_enable_peer_access can ask again)",
      why, peers);
  sp->naccess = sp->nproven;
}

/* Gives this device and its peers access to granules [i, i + n) of s, just
 * mapped. On failure the mappings are taken back from the end; one that
 * cannot be unmapped stays mapped with everything before it (they are
 * granted again before anything is handed out), and *n says what stays. */
static int grant_new(ga_space *sp, ga_segment *s, size_t i, size_t *n) {
  int rc = ga_dev_set_access(sp->dev, granule_va(sp, s, i), *n * sp->gran, sp->access, sp->naccess);
  if (!rc) {
    sp->nproven = sp->naccess;
    return 0;
  }
  if (rc == GA_DEV_EINVAL && sp->nproven < sp->naccess) refuse_unproven(sp);
  char why[sizeof sp->dev->error];
  memcpy(why, sp->dev->error, sizeof why);
  int stuck = 0;
  while (*n && !stuck) {
    size_t st = map_start(s, i + *n - 1), k = i + *n - st;
    ga_granule m = s->granules[st];
    GA_ASSERT(st >= i);
    if (ga_dev_unmap(sp->dev, granule_va(sp, s, st), k * sp->gran) != 0) {
      stuck = 1;
      sp->regrant = 1;
      break;
    }
    forget(sp, s, st, k);
    to_cache(sp, m.handle, m.idx, k); /* room: made by the caller, or they came from the cache */
    *n -= k;
  }
  both_errors(sp, why, stuck);
  return rc;
}

/* ---- One granule ---- */

int ga_expandable_fill_locked(ga_space *sp, ga_segment *s, size_t i, const void *host) {
  GA_ASSERT_SPACE_LOCKED(sp);
  void *va = granule_va(sp, s, i);
  /* A new mapping has no access yet: this device and its peers get it. */
  int rc = ga_dev_set_access(sp->dev, va, sp->gran, sp->access, sp->naccess);
  if (!rc)
    sp->nproven = sp->naccess;
  else if (rc == GA_DEV_EINVAL && sp->nproven < sp->naccess)
    refuse_unproven(sp);
  if (!rc && host) rc = ga_dev_copy(sp->dev, (void *)host, va, sp->gran, 0);
  return rc;
}

int ga_expandable_map_granule_locked(ga_space *sp, ga_segment *s, size_t i, const void *host, int *stuck) {
  GA_ASSERT_SPACE_LOCKED(sp);
  size_t g = sp->gran;
  void *va = granule_va(sp, s, i);
  GA_ASSERT(sp->ncache > 0 && i < s->ngranules && !s->granules[i].handle);
  *stuck = 0;
  ga_granule m = ga_pages_take_locked(sp);
  int rc = ga_dev_map(sp->dev, va, g, m.handle->h, (size_t)m.idx * g);
  if (!rc && (rc = ga_expandable_fill_locked(sp, s, i, host))) {
    char why[sizeof sp->dev->error];
    memcpy(why, sp->dev->error, sizeof why);
    *stuck = ga_dev_unmap(sp->dev, va, g) != 0; /* if so, it is this granule's memory now */
    both_errors(sp, why, *stuck);
  }
  if (rc && !*stuck) {
    to_cache(sp, m.handle, m.idx, 1); /* room: it was just taken */
    return rc;
  }
  record(sp, s, i, m.handle, m.idx, 1);
  return rc;
}

int ga_expandable_mapping_locked(const ga_segment *s, size_t i, size_t *start, size_t *n) {
  if (i >= s->ngranules || !s->granules[i].handle) return 0;
  *start = map_start(s, i);
  *n = s->granules[i].len;
  return 1;
}

int ga_expandable_sleep_locked(ga_space *sp, ga_segment *s, size_t i, void *const *hosts) {
  GA_ASSERT_SPACE_LOCKED(sp);
  size_t g = sp->gran, n = s->granules[i].len;
  GA_ASSERT(i < s->ngranules && s->granules[i].handle && s->granules[i].off == 0);
  int rc = ga_pages_room_locked(sp, n);
  for (size_t j = 0; j < n && !rc; j++)
    if (hosts[j]) rc = ga_dev_copy(sp->dev, hosts[j], granule_va(sp, s, i + j), g, 1);
  if (!rc) rc = ga_dev_unmap(sp->dev, granule_va(sp, s, i), n * g);
  if (rc) return rc;
  ga_granule m = s->granules[i];
  forget(sp, s, i, n);
  to_cache(sp, m.handle, m.idx, n); /* room above */
  for (size_t j = 0; j < n; j++) s->granules[i + j] = (ga_granule){.handle = NULL, .idx = GA_GRANULE_ASLEEP};
  return 0;
}

/* ---- Mapping ranges ---- */

/* Maps `want` granules at the front of UNMAPPED block u, a run of one handle
 * per map call, and on while the last run's handle goes on (up to `room`
 * granules: the rest of a handle just made is mapped with it, as a free
 * tail), then gives them access in one call; *done says how many are mapped. */
static int map_granules(ga_space *sp, ga_block *u, size_t want, size_t room, size_t *done) {
  ga_segment *s = u->seg;
  size_t g = sp->gran, first = (u->ptr - s->base) / g;
  int rc = granules_room(sp, s, first + room);
  while (!rc && *done < want) {
    ga_granule m;
    size_t n = take_run(sp, want - *done, room - *done, &m);
    rc = ga_dev_map(sp->dev, granule_va(sp, s, first + *done), n * g, m.handle->h, (size_t)m.idx * g);
    if (rc) {
      to_cache(sp, m.handle, m.idx, n); /* room: they were just taken */
      break;
    }
    record(sp, s, first + *done, m.handle, m.idx, n);
    *done += n;
  }
  if (*done) {
    int r = grant_new(sp, s, first, done);
    if (!rc) rc = r;
  }
  if (*done) ga_pstat_add(sp->stats->segment, s->pool, runs_delta_map(u, *done * g == u->size));
  return rc;
}

int ga_expandable_map_locked(ga_space *sp, ga_block *run, uintptr_t hi, int extend) {
  GA_ASSERT_SPACE_LOCKED(sp);
  size_t g = sp->gran;
  uintptr_t hi_g = round_up(hi, g);
  GA_ASSERT(run->seg->expandable && (!run->prev || run->prev->state != GA_BLOCK_FREE));
  for (ga_block *b = run; b && b->ptr < hi;) {
    if (b->state != GA_BLOCK_UNMAPPED) {
      b = b->next;
      continue;
    }
    uintptr_t end = b->ptr + b->size < hi_g ? b->ptr + b->size : hi_g;
    size_t want = (end - b->ptr) / g, room = extend ? b->size / g : want, done = 0;
    int rc = ga_tiles_reserve_locked(sp, 1); /* the split below cannot fail */
    if (!rc) rc = map_granules(sp, b, want, room, &done);
    if (done) {
      /* The mapped prefix becomes FREE and joins its FREE neighbours; the
       * rest stays in the unmapped index. */
      ga_block *rest = NULL;
      ga_unmapped_remove_locked(b);
      if (done * g < b->size) rest = ga_tiles_split_locked(sp, b, done * g);
      b->state = GA_BLOCK_FREE;
      b = ga_tiles_merge_free_locked(sp, b);
      if (rest) ga_unmapped_add_locked(rest);
    }
    if (rc) return rc;
    b = b->next;
  }
  return 0;
}

/* ---- Unmapping ---- */

int ga_expandable_movable_locked(const ga_space *sp, const ga_block *b, size_t *g0, size_t *g1) {
  GA_ASSERT_SPACE_LOCKED(sp);
  const ga_segment *s = b->seg;
  size_t g = sp->gran, bg = s->base / g;
  size_t i0 = (b->ptr + g - 1) / g - bg, i1 = (b->ptr + b->size) / g - bg;
  if (i1 <= i0) return 0;
  /* A mapping that reaches past the block's whole granules cannot be unmapped. */
  if (s->granules[i0].off) i0 = map_end(s, i0);
  if (i1 > i0 && map_end(s, i1 - 1) > i1) i1 = map_start(s, i1 - 1);
  if (i1 <= i0) return 0;
  *g0 = i0 + bg;
  *g1 = i1 + bg;
  return 1;
}

/* Maps the n granules of h from idx at granule i of s again (the part of a
 * mapping that stays), with access. 1 when they are mapped (one whose access
 * failed and whose unmap failed too stays mapped, to be granted again), 0
 * when they went to the page cache instead. */
static int remap(ga_space *sp, ga_segment *s, size_t i, ga_handle *h, uint32_t idx, size_t n) {
  size_t g = sp->gran;
  if (ga_dev_map(sp->dev, granule_va(sp, s, i), n * g, h->h, (size_t)idx * g)) {
    to_cache(sp, h, idx, n);
    return 0;
  }
  record(sp, s, i, h, idx, n);
  (void)grant_new(sp, s, i, &n); /* one mapping: it stays whole or goes whole */
  return n != 0;
}

int ga_expandable_unmap_locked(ga_space *sp, ga_block *b, size_t g0, size_t g1, ga_block **front,
                               ga_block **back) {
  GA_ASSERT_SPACE_LOCKED(sp);
  ga_segment *s = b->seg;
  size_t g = sp->gran, bg = s->base / g, i0 = g0 - bg, i1 = g1 - bg;
  GA_ASSERT(b->state == GA_BLOCK_FREE && !b->in_tree && s->expandable);
  GA_ASSERT(g0 < g1 && g0 * g >= b->ptr && g1 * g <= b->ptr + b->size);
  size_t m0 = map_start(s, i0), m1 = map_end(s, i1 - 1);
  GA_ASSERT(s->base + m0 * g >= b->ptr &&
            s->base + m1 * g <= b->ptr + b->size); /* whole mappings, all free */
  *front = *back = NULL;
  /* Room first: after the unmap nothing may fail. */
  int rc = ga_tiles_reserve_locked(sp, 2);
  if (!rc) rc = ga_pages_room_locked(sp, m1 - m0);
  if (!rc) rc = ga_dev_unmap(sp->dev, granule_va(sp, s, m0), (m1 - m0) * g);
  if (rc) return rc;
  ga_granule keep_lo = s->granules[m0], keep_hi = s->granules[i1 < m1 ? i1 : i1 - 1];
  for (size_t j = i1; j-- > i0;) /* in reverse, so that they are taken in order */
    (void)ga_pages_put_locked(sp, (ga_granule){s->granules[j].handle, s->granules[j].idx, 0, 0});
  forget(sp, s, m0, m1 - m0);
  /* The parts of the mappings outside [g0, g1) are free too: they are mapped
   * again, or, if that fails, join the unmapped range. */
  size_t u0 = i0, u1 = i1;
  if (m0 < i0 && !remap(sp, s, m0, keep_lo.handle, keep_lo.idx, i0 - m0)) u0 = m0;
  if (i1 < m1 && !remap(sp, s, i1, keep_hi.handle, keep_hi.idx, m1 - i1)) u1 = m1;
  /* b = [FREE front][UNMAPPED middle][FREE back] */
  uintptr_t lo = s->base + u0 * g, hi = s->base + u1 * g;
  ga_block *mid = b;
  if (lo > b->ptr) {
    mid = ga_tiles_split_locked(sp, b, lo - b->ptr);
    *front = b;
  }
  if (hi < mid->ptr + mid->size) *back = ga_tiles_split_locked(sp, mid, hi - lo);
  /* The run this was cut from: a part of it stays on each side where a mapped block touches mid. */
  int left = mid->prev && mid->prev->state != GA_BLOCK_UNMAPPED;
  int right = mid->next && mid->next->state != GA_BLOCK_UNMAPPED;
  ga_pstat_add(sp->stats->segment, s->pool, left + right - 1);
  (void)ga_tiles_merge_unmapped_locked(sp, mid);
  return 0;
}

/* ---- Access for peer devices ---- */

int ga_expandable_grant_locked(ga_space *sp, const int *devices, int n, size_t *ranges) {
  GA_ASSERT_SPACE_LOCKED(sp);
  size_t g = sp->gran;
  *ranges = 0;
  for (ga_segment *s = sp->segs; s; s = s->next) {
    if (!s->expandable) continue;
    /* Each run of mapped granules (asleep and unmapped ones have no memory behind them). */
    size_t ngran = s->size / g < s->ngranules ? s->size / g : s->ngranules;
    for (size_t i = 0; i < ngran; i++) {
      if (!s->granules[i].handle) continue;
      size_t end = i + 1;
      while (end < ngran && s->granules[end].handle) end++;
      int rc = ga_dev_set_access(sp->dev, granule_va(sp, s, i), (end - i) * g, devices, n);
      if (rc) return rc;
      ++*ranges;
      i = end;
    }
  }
  return 0;
}

int ga_expandable_access_add_locked(ga_space *sp, int peer) {
  GA_ASSERT_SPACE_LOCKED(sp);
  size_t ranges = 0;
  GA_ASSERT(sp->naccess < (int)(sizeof sp->access / sizeof sp->access[0]));
  sp->access[sp->naccess] = peer;
  int rc = ga_expandable_grant_locked(sp, sp->access, sp->naccess + 1, &ranges);
  if (rc) {
    /* Back to what it was; the error text stays the first failure's. */
    char why[sizeof sp->dev->error];
    memcpy(why, sp->dev->error, sizeof why);
    (void)ga_expandable_grant_locked(sp, sp->access, sp->naccess, &ranges);
    memcpy(sp->dev->error, why, sizeof why);
    return rc;
  }
  sp->naccess++;
  /* Granted on real memory, or (nothing mapped) still to be tried by the next map. */
  if (ranges && sp->nproven == sp->naccess - 1) sp->nproven = sp->naccess;
  return 0;
}

int ga_expandable_regrant_locked(ga_space *sp) {
  GA_ASSERT_SPACE_LOCKED(sp);
  size_t ranges = 0;
  int rc = ga_expandable_grant_locked(sp, sp->access, sp->naccess, &ranges);
  if (rc == GA_DEV_EINVAL && sp->nproven < sp->naccess) refuse_unproven(sp);
  if (!rc) {
    sp->regrant = 0;
    if (ranges) sp->nproven = sp->naccess;
  }
  return rc;
}
