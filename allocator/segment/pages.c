/* pages.c — physical memory behind expandable segments, as a device-wide
 * resource.
 *
 * Memory is created in handles of at most one page (2 MiB for the small pool,
 * 20 MiB by default for the large pool) and never more than a range needs, but
 * mapped, unmapped and moved in granules (2 MiB): a granule of a handle is a
 * piece. A piece is either mapped into some segment or in the
 * page cache. When a range needs memory, pieces come from the cache, then from
 * whole free granules anywhere (any segment, any stream: the owning stream is
 * synchronised before the unmap), and only then from new pages. A handle goes
 * back to the device once all its pieces are cached: on empty_cache, when a
 * request fails for lack of memory, or when the cache grows past
 * expandable_cache_max_mb.
 *
 * Owns: the handle list, the page cache, reserved_bytes / page_cache_bytes.
 * Invariant: for every handle, nmapped + (its pieces in the cache) == ngran.
 */
#include <stdlib.h>

#include "../internal.h"

/* ---- The cache ---- */

int ga_pages_room_locked(ga_allocator_t *a, size_t n) {
  return GA_VEC_ROOM(a->space.cache, a->space.cap_cache, a->space.ncache + n);
}

int ga_pages_put_locked(ga_allocator_t *a, ga_granule p) {
  if (ga_pages_room_locked(a, 1)) return -1;
  a->space.cache[a->space.ncache++] = p;
  ga_stat_add(&a->stats.page_cache_bytes, (int64_t)a->space.gran);
  return 0;
}

ga_granule ga_pages_take_locked(ga_allocator_t *a) {
  ga_stat_add(&a->stats.page_cache_bytes, -(int64_t)a->space.gran);
  return a->space.cache[--a->space.ncache];
}

/* ---- Handles ---- */

static void phys_unlink(ga_allocator_t *a, ga_handle *ph) {
  if (ph->prev)
    ph->prev->next = ph->next;
  else
    a->space.handles = ph->next;
  if (ph->next) ph->next->prev = ph->prev;
  a->space.nhandles--;
}

/* Releases a handle whose pieces are all cached. 0 or a GA_DEV_* code. */
static int phys_release(ga_allocator_t *a, ga_handle *ph) {
  int rc = ga_dev_release(a->dev, ph->h);
  if (rc) return rc;
  size_t kept = 0;
  for (size_t i = 0; i < a->space.ncache; i++)
    if (a->space.cache[i].handle != ph) a->space.cache[kept++] = a->space.cache[i];
  ga_stat_add(&a->stats.page_cache_bytes, -(int64_t)((a->space.ncache - kept) * a->space.gran));
  a->space.ncache = kept;
  ga_pstat_add(a->stats.reserved_bytes, ph->pool, -(int64_t)ph->size);
  a->space.reserved -= ph->size;
  a->stats.num_device_free++;
  phys_unlink(a, ph);
  free(ph);
  return 0;
}

int ga_pages_trim_locked(ga_allocator_t *a, size_t keep) {
  for (ga_handle *ph = a->space.handles, *next; ph && a->space.ncache * a->space.gran > keep; ph = next) {
    next = ph->next;
    if (ph->nmapped) continue;
    int rc = phys_release(a, ph);
    if (rc) return rc;
  }
  return 0;
}

/* A new handle of `size` bytes, all of it into the cache. */
static int phys_create(ga_allocator_t *a, size_t size, int pool) {
  ga_handle *ph = calloc(1, sizeof *ph);
  if (!ph || ga_pages_room_locked(a, size / a->space.gran)) {
    free(ph);
    return -1;
  }
  int rc = ga_dev_create(a->dev, size, &ph->h);
  if (rc) {
    free(ph);
    return rc;
  }
  ph->size = size;
  ph->ngran = (uint32_t)(size / a->space.gran);
  ph->pool = (uint8_t)pool;
  ph->next = a->space.handles;
  if (a->space.handles) a->space.handles->prev = ph;
  a->space.handles = ph;
  a->space.nhandles++;
  ga_pstat_add(a->stats.reserved_bytes, pool, (int64_t)size);
  a->space.reserved += size;
  a->stats.num_device_alloc++;
  for (uint32_t i = 0; i < ph->ngran; i++) (void)ga_pages_put_locked(a, (ga_granule){ph, i});
  return 0;
}

/* ---- Taking free granules from elsewhere ---- */

typedef struct cand {
  struct one {
    ga_block *b;
    size_t g0, g1; /* whole free granules of b that may move */
  } * v;
  size_t n, cap;
  size_t klo, khi; /* granules that must stay: the range being mapped */
  size_t gran;
  int oom;
} cand;

static int whole_granules(const ga_block *b, size_t gran, size_t *g0, size_t *g1) {
  *g0 = (b->ptr + gran - 1) / gran;
  *g1 = (b->ptr + b->size) / gran;
  return *g1 > *g0;
}

static int collect(ga_block *b, void *arg) {
  cand *c = arg;
  size_t g0, g1;
  if (!b->seg->expandable || !whole_granules(b, c->gran, &g0, &g1)) return 0;
  if (g0 < c->khi && g1 > c->klo) { /* overlaps the range: only the part outside may move */
    if (g1 > c->khi)
      g0 = c->khi;
    else if (g0 < c->klo)
      g1 = c->klo;
    else
      return 0;
  }
  if (GA_VEC_ROOM(c->v, c->cap, c->n + 1)) return c->oom = 1;
  c->v[c->n++] = (struct one){b, g0, g1};
  return 0;
}

static int by_size(const void *x, const void *y) {
  const struct one *a = x, *b = y;
  if (a->b->size != b->b->size) return a->b->size < b->b->size ? -1 : 1;
  return a->b->ptr < b->b->ptr ? -1 : a->b->ptr > b->b->ptr;
}

/* Moves up to `want` whole free granules into the cache, smallest free
 * blocks first (the large ones stay able to serve large requests). */
static int steal(ga_allocator_t *a, size_t want, uintptr_t keep_lo, uintptr_t keep_hi) {
  cand c = {.klo = keep_lo / a->space.gran,
            .khi = (keep_hi + a->space.gran - 1) / a->space.gran,
            .gran = a->space.gran};
  for (int p = 0; p < 2; p++) ga_free_tree_walk(&a->pol.trees[p], collect, &c);
  if (c.oom) {
    free(c.v);
    return -1;
  }
  if (c.n) qsort(c.v, c.n, sizeof *c.v, by_size);
  int rc = 0;
  for (size_t i = 0; i < c.n && want > 0 && !rc; i++) {
    ga_block *b = c.v[i].b;
    size_t g0 = c.v[i].g0, g1 = c.v[i].g1;
    size_t k = g1 - g0 < want ? g1 - g0 : want;
    /* Work queued on the block's stream before its free may still touch it:
     * unmap only once the stream is known to be past that free. */
    int waited;
    if ((rc = ga_stream_fence_locked(a, b->stream, b->free_seq, &waited))) break;
    a->stats.num_unmap_syncs += waited;
    if ((rc = ga_expandable_unmap_locked(a, b, g1 - k, g1))) break;
    a->stats.num_granules_moved += (int64_t)k;
    want -= k;
  }
  /* Fence every stream with free memory that may move: a later move of
   * memory freed before this point then needs no wait once it has passed. */
  for (size_t i = 0; i < c.n; i++) ga_stream_fence_watch_locked(a, c.v[i].b->stream);
  free(c.v);
  ga_stream_fences_refresh_locked(a);
  return rc;
}

/* ---- Obtaining granules ---- */

/* New handles until the cache holds n granules: at most one page each and
 * never more than needed, so nothing is created that no range asked for. */
static int create_until(ga_allocator_t *a, size_t n, int pool, size_t page, int *fraction_refused) {
  while (a->space.ncache < n) {
    size_t need = (n - a->space.ncache) * a->space.gran, size = need < page ? need : page;
    if (a->pol.allowed_max != SIZE_MAX &&
        (a->space.reserved > a->pol.allowed_max || size > a->pol.allowed_max - a->space.reserved)) {
      *fraction_refused = 1;
      return GA_DEV_EOOM;
    }
    int rc = phys_create(a, size, pool);
    if (rc) return rc;
  }
  return 0;
}

int ga_pages_obtain_locked(ga_allocator_t *a, size_t n, int pool, size_t page, uintptr_t keep_lo,
                           uintptr_t keep_hi, int *fraction_refused) {
  *fraction_refused = 0;
  /* expandable_move_pages:when_full: new memory first, moves only when the
   * device (or the fraction) has no room left. */
  if (a->cfg.expandable_move_when_full) {
    int rc = create_until(a, n, pool, page, fraction_refused);
    if (rc != GA_DEV_EOOM) return rc;
    *fraction_refused = 0;
  }
  /* Moving pages may synchronise their streams: never during a capture. */
  int rc = 0;
  if (a->space.ncache < n && !a->pol.capture.routing &&
      (rc = steal(a, n - a->space.ncache, keep_lo, keep_hi)))
    return rc;
  return create_until(a, n, pool, page, fraction_refused);
}

/* ---- Reports and teardown ---- */

static int add_partial(ga_block *b, void *arg) {
  size_t *sum = arg, gran = sum[1], g0, g1;
  if (!b->seg->expandable) return 0;
  sum[0] += whole_granules(b, gran, &g0, &g1) ? b->size - (g1 - g0) * gran : b->size;
  return 0;
}

size_t ga_pages_partial_free_locked(ga_allocator_t *a) {
  size_t sum[2] = {0, a->space.gran};
  for (int p = 0; p < 2; p++) ga_free_tree_walk(&a->pol.trees[p], add_partial, sum);
  return sum[0];
}

void ga_pages_teardown_locked(ga_allocator_t *a) {
  while (a->space.handles) {
    ga_handle *ph = a->space.handles;
    (void)ga_dev_release(a->dev, ph->h);
    phys_unlink(a, ph);
    free(ph);
  }
  free(a->space.cache);
  a->space.cache = NULL;
  a->space.ncache = a->space.cap_cache = 0;
}
