/* pages.c — physical memory behind expandable segments: the handles and the
 * page cache.
 *
 * Memory is created in handles (cuMemCreate) of one or more granules; each
 * granule of a handle is either mapped into some segment or in the page
 * cache. A handle goes back to the device once all its granules are cached
 * (ga_pages_release_locked, when the policy asks). Records reserved_bytes,
 * page_cache_bytes and the device alloc/free counts of expandable mode.
 * Invariant: for every handle, nmapped + (its granules in the cache) == ngran.
 */
#include <stdlib.h>

#include "segment.h"

/* ---- The cache ---- */

int ga_pages_room_locked(ga_space *sp, size_t n) {
  GA_ASSERT_SPACE_LOCKED(sp);
  return GA_VEC_ROOM(sp->cache, sp->cap_cache, sp->ncache + n);
}

int ga_pages_put_locked(ga_space *sp, ga_granule g) {
  GA_ASSERT_SPACE_LOCKED(sp);
  int rc = ga_pages_room_locked(sp, 1);
  if (rc) return rc;
  sp->cache[sp->ncache++] = g;
  ga_stat_inc(&sp->stats->page_cache_bytes, sp->gran);
  return 0;
}

ga_granule ga_pages_take_locked(ga_space *sp) {
  GA_ASSERT_SPACE_LOCKED(sp);
  GA_ASSERT(sp->ncache > 0);
  ga_stat_dec(&sp->stats->page_cache_bytes, sp->gran);
  return sp->cache[--sp->ncache];
}

void ga_pages_attribute_locked(ga_space *sp, const ga_handle *h, int size_class, int mapped) {
  GA_ASSERT_SPACE_LOCKED(sp);
  if (h->size_class == size_class) return;
  ga_stat_t *to = ga_pool_stat(sp->stats->reserved_bytes, mapped ? size_class : h->size_class);
  ga_stat_t *from = ga_pool_stat(sp->stats->reserved_bytes, mapped ? h->size_class : size_class);
  ga_stat_dec(from, sp->gran);
  ga_stat_inc(to, sp->gran);
}

size_t ga_pages_cached_bytes_locked(const ga_space *sp, int size_class) {
  GA_ASSERT_SPACE_LOCKED(sp);
  size_t n = 0;
  for (size_t i = 0; i < sp->ncache; i++) n += sp->cache[i].handle->size_class == size_class;
  return n * sp->gran;
}

/* ---- Handles ---- */

static void handle_unlink(ga_space *sp, ga_handle *h) {
  if (h->prev)
    h->prev->next = h->next;
  else
    sp->handles = h->next;
  if (h->next) h->next->prev = h->prev;
  sp->nhandles--;
}

/* Releases a handle whose granules are all cached. */
static int handle_release(ga_space *sp, ga_handle *h) {
  GA_ASSERT(h->nmapped == 0);
  int rc = ga_dev_release(sp->dev, h->h);
  if (rc) return rc;
  size_t kept = 0;
  for (size_t i = 0; i < sp->ncache; i++)
    if (sp->cache[i].handle != h) sp->cache[kept++] = sp->cache[i];
  ga_stat_dec(&sp->stats->page_cache_bytes, (sp->ncache - kept) * sp->gran);
  sp->ncache = kept;
  ga_pstat_dec(sp->stats->reserved_bytes, h->size_class, h->size);
  sp->reserved -= h->size;
  sp->stats->num_device_free++;
  handle_unlink(sp, h);
  free(h);
  return 0;
}

/* ga_pages_release_locked's promise: the cache holds at most `keep` bytes,
 * or every handle left has a granule mapped. */
static int released(const ga_space *sp, size_t keep) {
  if (sp->ncache * sp->gran <= keep) return 1;
  for (const ga_handle *h = sp->handles; h; h = h->next)
    if (!h->nmapped) return 0;
  return 1;
}

int ga_pages_release_locked(ga_space *sp, size_t keep) {
  GA_ASSERT_SPACE_LOCKED(sp);
  for (ga_handle *h = sp->handles, *next; h && sp->ncache * sp->gran > keep; h = next) {
    next = h->next;
    if (h->nmapped) continue;
    int rc = handle_release(sp, h);
    if (rc) return rc;
  }
  GA_ASSERT(released(sp, keep));
  return 0;
}

int ga_pages_create_locked(ga_space *sp, size_t size, int size_class) {
  GA_ASSERT_SPACE_LOCKED(sp);
  GA_ASSERT(size > 0 && size % sp->gran == 0);
  ga_handle *h = ga_host_calloc(1, sizeof *h);
  if (!h || ga_pages_room_locked(sp, size / sp->gran)) {
    free(h);
    return GA_DEV_ENOMEM;
  }
  int rc = ga_dev_create(sp->dev, size, &h->h);
  if (rc) {
    free(h);
    return rc;
  }
  h->size = size;
  h->ngran = (uint32_t)(size / sp->gran);
  h->size_class = (uint8_t)size_class;
  h->next = sp->handles;
  if (sp->handles) sp->handles->prev = h;
  sp->handles = h;
  sp->nhandles++;
  ga_pstat_inc(sp->stats->reserved_bytes, size_class, size);
  sp->reserved += size;
  sp->stats->num_device_alloc++;
  /* In reverse, so that they are taken in order: a run maps with one call. */
  for (uint32_t i = h->ngran; i-- > 0;)
    (void)ga_pages_put_locked(sp, (ga_granule){h, i, 0, 0}); /* room above */
  return 0;
}
