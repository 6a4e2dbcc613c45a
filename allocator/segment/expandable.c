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

/* Granule m at va was just mapped into seg (mapped), or is being unmapped. */
static void granule_event(ga_space *sp, const ga_segment *seg, ga_granule m, uintptr_t va, int mapped) {
  ga_pages_attribute_locked(sp, m.handle, seg->size_class, mapped);
  ga_space_history_locked(sp, mapped ? GA_H_SEGMENT_MAP : GA_H_SEGMENT_UNMAP, va, sp->gran, seg->stream);
}

static void *granule_va(const ga_space *sp, const ga_segment *seg, size_t i) {
  return (void *)(seg->base + i * sp->gran);
}

/* Room for the first n entries of seg->granules: the table for the whole
 * reservation at once, from fresh pages that read as zero until first
 * touched (ga_host_zeroed). A reservation of 90 GiB has 46080 granules,
 * 720 KiB of entries, and the default maps the rest of a new page as a free
 * tail up to the end of the segment's unmapped space, so the first mapping
 * of a segment asks for all of it: grown by doubling, every entry was
 * zeroed then (81 % of the replay's instructions on MiniMalloc A, sizes
 * x64); now an entry costs something only once a granule is mapped there. */
static int granules_room(const ga_space *sp, ga_segment *seg, size_t n) {
  if (n <= seg->ngranules) return 0;
  size_t cap = seg->size / sp->gran;
  GA_ASSERT(n <= cap && !seg->granules);
  ga_granule *v = ga_host_zeroed(cap * sizeof *v);
  if (!v) return GA_DEV_ENOMEM;
  seg->granules = v;
  seg->ngranules = cap;
  return 0;
}

/* ---- Segments ---- */

int ga_expandable_new_locked(ga_space *sp, struct ga_private *priv, int size_class, ga_stream_t stream,
                             size_t min_size, ga_segment **out) {
  GA_ASSERT_SPACE_LOCKED(sp);
  size_t g = sp->gran;
  size_t size = sp->reserve_size > min_size ? sp->reserve_size : round_up(min_size, g);
  ga_segment *seg;
  ga_block *b;
  void *va = NULL;
  int rc = ga_tiles_segment_records_locked(sp, &seg, &b);
  if (rc) return rc;
  if ((rc = ga_dev_reserve(sp->dev, size, g, &va))) {
    ga_tiles_segment_delete_locked(sp, seg, b);
    return rc;
  }
  *seg = (ga_segment){.base = (uintptr_t)va,
                      .size = size,
                      .size_class = (uint8_t)size_class,
                      .expandable = 1,
                      .stream = stream,
                      .priv = priv};
  ga_tiles_segment_open_locked(sp, seg, b, GA_BLOCK_UNMAPPED);
  *out = seg;
  GA_ASSERT(seg->head == b && b->state == GA_BLOCK_UNMAPPED && !b->next && b->size == size &&
            size >= min_size && size % g == 0);
  return 0;
}

int ga_expandable_release_locked(ga_space *sp, ga_segment *seg) {
  GA_ASSERT_SPACE_LOCKED(sp);
  GA_ASSERT(seg->expandable && !seg->head->next && seg->head->state == GA_BLOCK_UNMAPPED);
  int rc = ga_dev_unreserve(sp->dev, (void *)seg->base, seg->size);
  if (rc) return rc;
  ga_unmapped_remove_locked(seg->head);
  ga_tiles_unlink_locked(sp, seg);
  ga_tiles_delete_locked(sp, seg->head);
  ga_host_zeroed_free(seg->granules, seg->ngranules * sizeof *seg->granules);
  free(seg);
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

static size_t map_start(const ga_segment *seg, size_t i) { return i - seg->granules[i].off; }
static size_t map_end(const ga_segment *seg, size_t i) { return map_start(seg, i) + seg->granules[i].len; }

/* Records the mapping of n granules of h from idx at granule i of seg. */
static void record(ga_space *sp, ga_segment *seg, size_t i, ga_handle *h, uint32_t idx, size_t n) {
  GA_ASSERT(n > 0 && n <= UINT16_MAX && i + n <= seg->ngranules);
  for (size_t j = 0; j < n; j++) {
    seg->granules[i + j] = (ga_granule){h, idx + (uint32_t)j, (uint16_t)j, (uint16_t)n};
    granule_event(sp, seg, seg->granules[i + j], seg->base + (i + j) * sp->gran, 1);
  }
  h->nmapped += (uint32_t)n;
  ga_stat_inc(&sp->stats->mapped_bytes, n * sp->gran);
}

/* Forgets the mapping of granules [i, i + n) of seg (they are unmapped). */
static void forget(ga_space *sp, ga_segment *seg, size_t i, size_t n) {
  for (size_t j = i; j < i + n; j++) {
    granule_event(sp, seg, seg->granules[j], seg->base + j * sp->gran, 0);
    seg->granules[j].handle->nmapped--;
    seg->granules[j] = (ga_granule){0};
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

/* Gives this device and its peers access to granules [i, i + n) of seg, just
 * mapped. On failure the mappings are taken back from the end; one that
 * cannot be unmapped stays mapped with everything before it (they are
 * granted again before anything is handed out), and *n says what stays. */
static int grant_new(ga_space *sp, ga_segment *seg, size_t i, size_t *n) {
  int rc = ga_dev_set_access(sp->dev, granule_va(sp, seg, i), *n * sp->gran, sp->access, sp->naccess);
  if (!rc) {
    sp->nproven = sp->naccess;
    return 0;
  }
  if (rc == GA_DEV_EINVAL && sp->nproven < sp->naccess) refuse_unproven(sp);
  char why[sizeof sp->dev->error];
  memcpy(why, sp->dev->error, sizeof why);
  int stuck = 0;
  while (*n && !stuck) {
    size_t st = map_start(seg, i + *n - 1), k = i + *n - st;
    ga_granule m = seg->granules[st];
    GA_ASSERT(st >= i);
    if (ga_dev_unmap(sp->dev, granule_va(sp, seg, st), k * sp->gran) != 0) {
      stuck = 1;
      sp->regrant = 1;
      break;
    }
    forget(sp, seg, st, k);
    to_cache(sp, m.handle, m.idx, k); /* room: made by the caller, or they came from the cache */
    *n -= k;
  }
  both_errors(sp, why, stuck);
  return rc;
}

/* ---- One granule ---- */

int ga_expandable_fill_locked(ga_space *sp, ga_segment *seg, size_t i, const void *host) {
  GA_ASSERT_SPACE_LOCKED(sp);
  void *va = granule_va(sp, seg, i);
  /* A new mapping has no access yet: this device and its peers get it. */
  int rc = ga_dev_set_access(sp->dev, va, sp->gran, sp->access, sp->naccess);
  if (!rc)
    sp->nproven = sp->naccess;
  else if (rc == GA_DEV_EINVAL && sp->nproven < sp->naccess)
    refuse_unproven(sp);
  if (!rc && host) rc = ga_dev_copy(sp->dev, (void *)host, va, sp->gran, 0);
  return rc;
}

int ga_expandable_map_granule_locked(ga_space *sp, ga_segment *seg, size_t i, const void *host, int *stuck) {
  GA_ASSERT_SPACE_LOCKED(sp);
  size_t g = sp->gran;
  void *va = granule_va(sp, seg, i);
  GA_ASSERT(sp->ncache > 0 && i < seg->ngranules && !seg->granules[i].handle);
  *stuck = 0;
  ga_granule m = ga_pages_take_locked(sp);
  int rc = ga_dev_map(sp->dev, va, g, m.handle->h, (size_t)m.idx * g);
  if (!rc && (rc = ga_expandable_fill_locked(sp, seg, i, host))) {
    char why[sizeof sp->dev->error];
    memcpy(why, sp->dev->error, sizeof why);
    *stuck = ga_dev_unmap(sp->dev, va, g) != 0; /* if so, it is this granule's memory now */
    both_errors(sp, why, *stuck);
  }
  if (rc && !*stuck) {
    to_cache(sp, m.handle, m.idx, 1); /* room: it was just taken */
    return rc;
  }
  record(sp, seg, i, m.handle, m.idx, 1);
  return rc;
}

int ga_expandable_mapping_locked(const ga_segment *seg, size_t i, size_t *start, size_t *n) {
  if (i >= seg->ngranules || !seg->granules[i].handle) return 0;
  *start = map_start(seg, i);
  *n = seg->granules[i].len;
  return 1;
}

int ga_expandable_sleep_locked(ga_space *sp, ga_segment *seg, size_t i, void *const *hosts) {
  GA_ASSERT_SPACE_LOCKED(sp);
  size_t g = sp->gran, n = seg->granules[i].len;
  GA_ASSERT(i < seg->ngranules && seg->granules[i].handle && seg->granules[i].off == 0);
  int rc = ga_pages_room_locked(sp, n);
  for (size_t j = 0; j < n && !rc; j++)
    if (hosts[j]) rc = ga_dev_copy(sp->dev, hosts[j], granule_va(sp, seg, i + j), g, 1);
  if (!rc) rc = ga_dev_unmap(sp->dev, granule_va(sp, seg, i), n * g);
  if (rc) return rc;
  ga_granule m = seg->granules[i];
  forget(sp, seg, i, n);
  to_cache(sp, m.handle, m.idx, n); /* room above */
  for (size_t j = 0; j < n; j++)
    seg->granules[i + j] = (ga_granule){.handle = NULL, .idx = GA_GRANULE_ASLEEP};
  return 0;
}

/* ---- Mapping ranges ---- */

/* Maps `want` granules at the front of UNMAPPED block u, a run of one handle
 * per map call, and on while the last run's handle goes on (up to `room`
 * granules: the rest of a handle just made is mapped with it, as a free
 * tail), then gives them access in one call; *done says how many are mapped. */
static int map_granules(ga_space *sp, ga_block *u, size_t want, size_t room, size_t *done) {
  ga_segment *seg = u->seg;
  size_t g = sp->gran, first = (u->ptr - seg->base) / g;
  int rc = granules_room(sp, seg, first + room);
  while (!rc && *done < want) {
    ga_granule m;
    size_t n = take_run(sp, want - *done, room - *done, &m);
    rc = ga_dev_map(sp->dev, granule_va(sp, seg, first + *done), n * g, m.handle->h, (size_t)m.idx * g);
    if (rc) {
      to_cache(sp, m.handle, m.idx, n); /* room: they were just taken */
      break;
    }
    record(sp, seg, first + *done, m.handle, m.idx, n);
    *done += n;
  }
  if (*done) {
    int r = grant_new(sp, seg, first, done);
    if (!rc) rc = r;
  }
  if (*done) ga_pstat_add(sp->stats->segment, seg->size_class, runs_delta_map(u, *done * g == u->size));
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
  /* The header's promise: run is one FREE block reaching at least hi, in no tree. */
  GA_ASSERT(run->state == GA_BLOCK_FREE && !run->in_tree && run->ptr + run->size >= hi);
  return 0;
}

/* ---- Unmapping ---- */

int ga_expandable_movable_locked(const ga_space *sp, const ga_block *b, size_t *g0, size_t *g1) {
  GA_ASSERT_SPACE_LOCKED(sp);
  const ga_segment *seg = b->seg;
  size_t g = sp->gran, bg = seg->base / g;
  size_t i0 = (b->ptr + g - 1) / g - bg, i1 = (b->ptr + b->size) / g - bg;
  if (i1 <= i0) return 0;
  /* A mapping that reaches past the block's whole granules cannot be unmapped. */
  if (seg->granules[i0].off) i0 = map_end(seg, i0);
  if (i1 > i0 && map_end(seg, i1 - 1) > i1) i1 = map_start(seg, i1 - 1);
  if (i1 <= i0) return 0;
  *g0 = i0 + bg;
  *g1 = i1 + bg;
  return 1;
}

/* Maps the n granules of h from idx at granule i of seg again (the part of a
 * mapping that stays), with access. 1 when they are mapped (one whose access
 * failed and whose unmap failed too stays mapped, to be granted again), 0
 * when they went to the page cache instead. */
static int remap(ga_space *sp, ga_segment *seg, size_t i, ga_handle *h, uint32_t idx, size_t n) {
  size_t g = sp->gran;
  if (ga_dev_map(sp->dev, granule_va(sp, seg, i), n * g, h->h, (size_t)idx * g)) {
    to_cache(sp, h, idx, n);
    return 0;
  }
  record(sp, seg, i, h, idx, n);
  (void)grant_new(sp, seg, i, &n); /* one mapping: it stays whole or goes whole */
  return n != 0;
}

int ga_expandable_unmap_locked(ga_space *sp, ga_block *b, size_t g0, size_t g1, ga_block **front,
                               ga_block **back) {
  GA_ASSERT_SPACE_LOCKED(sp);
  ga_segment *seg = b->seg;
  size_t g = sp->gran, bg = seg->base / g, i0 = g0 - bg, i1 = g1 - bg;
  GA_ASSERT(b->state == GA_BLOCK_FREE && !b->in_tree && seg->expandable);
  GA_ASSERT(g0 < g1 && g0 * g >= b->ptr && g1 * g <= b->ptr + b->size);
  size_t m0 = map_start(seg, i0), m1 = map_end(seg, i1 - 1);
  GA_ASSERT(seg->base + m0 * g >= b->ptr &&
            seg->base + m1 * g <= b->ptr + b->size); /* whole mappings, all free */
  *front = *back = NULL;
  /* Room first: after the unmap nothing may fail. */
  int rc = ga_tiles_reserve_locked(sp, 2);
  if (!rc) rc = ga_pages_room_locked(sp, m1 - m0);
  if (!rc) rc = ga_dev_unmap(sp->dev, granule_va(sp, seg, m0), (m1 - m0) * g);
  if (rc) return rc;
  ga_granule keep_lo = seg->granules[m0], keep_hi = seg->granules[i1 < m1 ? i1 : i1 - 1];
  for (size_t j = i1; j-- > i0;) /* in reverse, so that they are taken in order */
    (void)ga_pages_put_locked(sp, (ga_granule){seg->granules[j].handle, seg->granules[j].idx, 0, 0});
  forget(sp, seg, m0, m1 - m0);
  /* The parts of the mappings outside [g0, g1) are free too: they are mapped
   * again, or, if that fails, join the unmapped range. */
  size_t u0 = i0, u1 = i1;
  if (m0 < i0 && !remap(sp, seg, m0, keep_lo.handle, keep_lo.idx, i0 - m0)) u0 = m0;
  if (i1 < m1 && !remap(sp, seg, i1, keep_hi.handle, keep_hi.idx, m1 - i1)) u1 = m1;
  /* b = [FREE front][UNMAPPED middle][FREE back] */
  uintptr_t lo = seg->base + u0 * g, hi = seg->base + u1 * g;
  ga_block *mid = b;
  if (lo > b->ptr) {
    mid = ga_tiles_split_locked(sp, b, lo - b->ptr);
    *front = b;
  }
  if (hi < mid->ptr + mid->size) *back = ga_tiles_split_locked(sp, mid, hi - lo);
  /* The run this was cut from: a part of it stays on each side where a mapped block touches mid. */
  int left = mid->prev && mid->prev->state != GA_BLOCK_UNMAPPED;
  int right = mid->next && mid->next->state != GA_BLOCK_UNMAPPED;
  ga_pstat_add(sp->stats->segment, seg->size_class, left + right - 1);
  ga_block *u = ga_tiles_merge_unmapped_locked(sp, mid);
  /* The header's promise: [FREE front][UNMAPPED middle][FREE back], the
   * outer parts in no tree, the middle holding granules [g0, g1). */
  GA_ASSERT((!*front || ((*front)->state == GA_BLOCK_FREE && !(*front)->in_tree && (*front)->next == u)) &&
            (!*back || ((*back)->state == GA_BLOCK_FREE && !(*back)->in_tree && (*back)->prev == u)) &&
            u->ptr <= g0 * g && u->ptr + u->size >= g1 * g);
  return 0;
}

/* ---- Access for peer devices ---- */

int ga_expandable_grant_locked(ga_space *sp, const int *devices, int n, size_t *ranges) {
  GA_ASSERT_SPACE_LOCKED(sp);
  size_t g = sp->gran;
  *ranges = 0;
  for (ga_segment *seg = sp->segs; seg; seg = seg->next) {
    if (!seg->expandable) continue;
    /* Each run of mapped granules (asleep and unmapped ones have no memory behind them). */
    size_t ngran = seg->size / g < seg->ngranules ? seg->size / g : seg->ngranules;
    for (size_t i = 0; i < ngran; i++) {
      if (!seg->granules[i].handle) continue;
      size_t end = i + 1;
      while (end < ngran && seg->granules[end].handle) end++;
      int rc = ga_dev_set_access(sp->dev, granule_va(sp, seg, i), (end - i) * g, devices, n);
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
