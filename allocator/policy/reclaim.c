/* reclaim.c — giving cached memory back: the OOM retry ladder's steps,
 * empty_cache and the garbage-collection threshold (PyTorch's rules).
 *
 * Only whole-segment FREE blocks can go back to the device. A device free
 * that fails leaves the block cached and the error is returned: nothing is
 * lost, and the caller reports it.
 */
#include <stdlib.h>

#include "../internal.h"

/* Gives a whole-segment FREE block back. 0 or a GA_DEV_* code. */
static int release_free_block(ga_allocator_t *a, ga_block *b) {
  ga_block_from_free_tree_locked(a, b);
  int rc = ga_native_segment_release_locked(a, b);
  if (rc) ga_block_to_free_tree_locked(a, b);
  return rc;
}

/* ---- Collecting candidates (the tree must not change during a walk) ---- */

typedef struct blist {
  ga_block **v;
  size_t n, cap;
  int oom;
} blist;

static int collect_unsplit(ga_block *b, void *arg) {
  blist *l = arg;
  if (ga_block_is_split(b) || b->seg->expandable) return 0;
  if (GA_VEC_ROOM(l->v, l->cap, l->n + 1)) return l->oom = 1;
  l->v[l->n++] = b;
  return 0;
}

/* ---- Garbage collection ---- */

static int gc_enabled(const ga_allocator_t *a) {
  return a->pol.allowed_max != SIZE_MAX && a->cfg.gc_threshold > 0.0;
}

int ga_reclaim_gc_locked(ga_allocator_t *a) {
  if (!gc_enabled(a)) return 0;
  ga_free_tree *p = &a->pol.trees[GA_P_LARGE];
  size_t threshold = (size_t)(a->cfg.gc_threshold * (double)a->pol.allowed_max);
  if (a->space.reserved <= threshold) return 0;
  size_t target = a->space.reserved - threshold, reclaimed = 0;
  blist l = {0};
  ga_free_tree_walk(p, collect_unsplit, &l);
  double total_age = 0.0;
  for (size_t i = 0; i < l.n; i++) total_age += (double)(p->gc_calls - l.v[i]->gc_base);
  size_t left = l.n;
  int freed = 1, rc = 0;
  /* Free every block at least as old as the average; a pass is never cut
   * short, and passes repeat until the target is met or nothing was freed. */
  while (reclaimed < target && freed && left > 0 && !rc) {
    double avg = total_age / (double)left;
    freed = 0;
    for (size_t i = 0; i < l.n && !rc; i++) {
      ga_block *b = l.v[i];
      if (!b) continue;
      double age = (double)(p->gc_calls - b->gc_base);
      if (age < avg) continue;
      size_t size = b->size;
      if ((rc = release_free_block(a, b))) break;
      l.v[i] = NULL;
      freed = 1;
      reclaimed += size;
      total_age -= age;
      left--;
    }
  }
  free(l.v);
  return rc;
}

/* ---- Oversize blocks (step 4.4 of the ladder) ---- */

int ga_reclaim_oversize_locked(ga_allocator_t *a, int pool, ga_stream_t stream, size_t size) {
  size_t max_split = a->cfg.max_split_size;
  if (max_split == SIZE_MAX) return 0;
  ga_free_tree *p = &a->pol.trees[pool];
  size_t key = size < max_split ? max_split : size;
  ga_block *b = ga_free_tree_lower_bound(p, stream, key, 0);
  if (b && b->stream == stream && !ga_block_is_split(b) && !b->seg->expandable) {
    int rc = release_free_block(a, b);
    return rc ? -rc : 1;
  }
  if (b && b->stream == stream) return 0; /* a split block cannot be given back */
  /* No single block is large enough: free oversize blocks of this stream,
   * largest first, until enough was freed. */
  size_t released = 0;
  ga_block *it = ga_free_tree_before(p, stream, key, 0);
  while (it && released < key && it->size >= max_split && it->stream == stream) {
    ga_block *prev = ga_free_tree_before(p, it->stream, it->size, it->ptr);
    if (!ga_block_is_split(it) && !it->seg->expandable) {
      size_t sz = it->size;
      int rc = release_free_block(a, it);
      if (rc) return -rc;
      released += sz;
    }
    it = prev;
  }
  return released >= key;
}

/* ---- Everything (empty_cache, last step of the native ladder) ----
 * Expandable segments unmap every whole free granule and drop empty
 * reservations; handles whose granules are all unmapped go back. */

int ga_reclaim_all_locked(ga_allocator_t *a) {
  /* A failed event wait keeps those blocks pending; the rest still goes back. */
  int rc_sync = ga_stream_sync_all_locked(a), rc = 0;
  for (int pool = GA_P_LARGE; pool >= GA_P_SMALL && !rc; pool--) {
    blist l = {0};
    ga_free_tree_walk(&a->pol.trees[pool], collect_unsplit, &l);
    for (size_t i = 0; i < l.n && !rc; i++) rc = release_free_block(a, l.v[i]);
    free(l.v);
    if (l.oom && !rc) rc = GA_DEV_EDRIVER;
  }
  if (!rc) rc = ga_expandable_release_all_locked(a);
  if (!rc) rc = ga_private_release_all_locked(a);
  return rc ? rc : rc_sync;
}
