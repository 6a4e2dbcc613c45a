/* reclaim.c — giving cached memory back: the OOM retry ladder's steps,
 * empty_cache and the garbage-collection threshold (PyTorch's rules).
 *
 * Only whole-segment FREE blocks can go back to the device. A device free
 * that fails leaves the block cached and the error is returned: nothing is
 * lost, and the caller reports it.
 */
#include <stdlib.h>

#include "policy.h"

int ga_reclaim_native_locked(ga_allocator_t *a, ga_block *b) {
  GA_ASSERT_LOCKED(a);
  ga_private *priv = b->seg->priv;
  int rc = ga_native_release_locked(&a->space, b);
  if (!rc && priv) ga_private_segment_released_locked(a, priv); /* may delete a released pool's record */
  return rc;
}

/* Gives a whole-segment FREE block (in its tree) back. */
static int release_free_block(ga_allocator_t *a, ga_block *b) {
  ga_block_from_free_tree_locked(a, b);
  int rc = ga_reclaim_native_locked(a, b);
  if (rc) ga_block_to_free_tree_locked(a, b);
  return rc;
}

/* ---- Collecting candidates (the tree must not change during a walk) ---- */

typedef struct blist {
  ga_block **v;
  size_t n, cap;
  int oom;
} blist;

/* No native segment of `size_class` is smaller than this (ga_allocation_size_for:
 * small segments are one size; a large one is the large buffer or, for a
 * request of GA_MIN_LARGE_ALLOC or more, at least that), so neither is an
 * unsplit free native block. */
static size_t least_native(const ga_allocator_t *a, int size_class) {
  if (size_class == GA_CLASS_SMALL) return ga_allocation_size_for(&a->cfg, GA_MIN_BLOCK);
  size_t buffer = ga_allocation_size_for(&a->cfg, GA_SMALL_SIZE + GA_MIN_BLOCK),
         large = ga_allocation_size_for(&a->cfg, GA_MIN_LARGE_ALLOC);
  return buffer < large ? buffer : large;
}

/* The unsplit free blocks of native segments in t (of `size_class`), in tree
 * order. Within each stream the walk starts at least_native: it visits the
 * free blocks that large, not every free block (fragments of split segments
 * are most of a busy cache). */
static int collect_unsplit(const ga_allocator_t *a, const ga_free_tree *t, int size_class, blist *l) {
  size_t least = least_native(a, size_class);
  for (ga_block *b = ga_free_tree_lower_bound(t, NULL, least); b;) {
    if (b->size < least) { /* the first block of the next stream */
      b = ga_free_tree_lower_bound(t, b->stream, least);
      continue;
    }
    if (!ga_tiles_is_split(b) && !b->seg->expandable) {
      if (GA_VEC_ROOM(l->v, l->cap, l->n + 1)) return l->oom = 1;
      l->v[l->n++] = b;
    }
    b = ga_free_tree_next(t, b);
  }
  return 0;
}

/* ---- Garbage collection ---- */

int ga_reclaim_gc_locked(ga_allocator_t *a) {
  GA_ASSERT_LOCKED(a);
  if (!ga_limit_gc_on(a)) return 0;
  ga_free_tree *p = &a->pol.trees[GA_CLASS_LARGE];
  size_t threshold = ga_limit_gc_threshold(a);
  if (a->space.reserved <= threshold) return 0;
  size_t target = a->space.reserved - threshold, reclaimed = 0;
  blist l = {0};
  collect_unsplit(a, p, GA_CLASS_LARGE, &l);
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

int ga_reclaim_oversize_locked(ga_allocator_t *a, int size_class, ga_stream_t stream, size_t size,
                               int *enough) {
  GA_ASSERT_LOCKED(a);
  size_t max_split = a->cfg.max_split_size;
  *enough = 0;
  if (max_split == SIZE_MAX) return 0;
  ga_free_tree *t = &a->pol.trees[size_class];
  size_t key = size < max_split ? max_split : size;
  ga_block *b = ga_free_tree_lower_bound(t, stream, key);
  if (b && b->stream == stream && !ga_tiles_is_split(b) && !b->seg->expandable) {
    int rc = release_free_block(a, b);
    *enough = rc == 0;
    return rc;
  }
  if (b && b->stream == stream) return 0; /* a split block cannot be given back */
  /* No single block is large enough: free oversize blocks of this stream,
   * largest first, until enough was freed. */
  size_t released = 0;
  ga_block *it = ga_free_tree_before(t, stream, key);
  while (it && released < key && it->size >= max_split && it->stream == stream) {
    ga_block *prev = ga_free_tree_prev(t, it);
    if (!ga_tiles_is_split(it) && !it->seg->expandable) {
      size_t sz = it->size;
      int rc = release_free_block(a, it);
      if (rc) return rc;
      released += sz;
    }
    it = prev;
  }
  *enough = released >= key;
  return 0;
}

/* ---- Everything (empty_cache, last step of the native ladder) ----
 * Expandable segments unmap every whole free granule and drop empty
 * reservations; handles whose granules are all unmapped go back.
 * During a capture nothing waits: pending events stay pending, the memory of
 * a capturing stream stays mapped (unmapping it needs a wait on that stream),
 * everything else goes back in the relaxed capture mode, and what was left
 * is flushed when the capture ends (flush_deferred). */

/* reclaim_all's promise, which collect_unsplit's shortcut (least_native)
 * must keep: no unsplit FREE block of a native segment is left in the
 * general trees. */
static int is_whole_native(ga_block *b, void *arg) {
  (void)arg;
  return !ga_tiles_is_split(b) && !b->seg->expandable;
}
static int no_whole_native(const ga_allocator_t *a) {
  return !ga_free_tree_walk(&a->pol.trees[GA_CLASS_SMALL], is_whole_native, NULL) &&
         !ga_free_tree_walk(&a->pol.trees[GA_CLASS_LARGE], is_whole_native, NULL);
}

static int reclaim_all(ga_allocator_t *a) {
  int rc_sync = 0, rc = 0;
  if (!a->pol.capture.routing)
    rc_sync = ga_stream_sync_all_locked(a); /* a failed wait keeps those blocks pending; the rest goes back */
  else if (a->pol.streams.npending || a->pol.capture.ndeferred)
    a->pol.capture.flush_deferred = 1;
  for (int size_class = GA_CLASS_LARGE; size_class >= GA_CLASS_SMALL && !rc; size_class--) {
    blist l = {0};
    collect_unsplit(a, &a->pol.trees[size_class], size_class, &l);
    for (size_t i = 0; i < l.n && !rc; i++) rc = release_free_block(a, l.v[i]);
    free(l.v);
    if (l.oom && !rc) rc = GA_DEV_ENOMEM;
  }
  GA_ASSERT(rc || no_whole_native(a));
  if (!rc) rc = ga_reclaim_expandable_locked(a, NULL);
  /* Released private pools: their free native segments. */
  for (ga_private *priv = a->pol.capture.privates, *next; priv && !rc; priv = next) {
    next = priv->next;
    if (priv->released && !priv->nstreams && ga_private_native_segments_locked(a, priv))
      rc = ga_reclaim_private_locked(a, priv);
  }
  return rc ? rc : rc_sync;
}

int ga_reclaim_all_locked(ga_allocator_t *a) {
  GA_ASSERT_LOCKED(a);
  ga_relax r;
  int rc = ga_capture_relax_locked(a, &r), before = a->pol.capture.flush_deferred;
  if (rc) return rc; /* nothing safe to do: the mode cannot be relaxed */
  a->pol.capture.flush_deferred = 0;
  rc = reclaim_all(a);
  ga_capture_unrelax_locked(a, &r);
  if (a->pol.capture.flush_deferred) a->stats.num_capture_deferred_flushes++;
  a->pol.capture.flush_deferred |= before;
  return rc;
}

/* ---- Expandable segments: whole free granules, empty reservations ---- */

typedef struct frees {
  ga_block **v;
  size_t n, cap;
} frees;

/* May the free memory of seg go back? General segments, and those of a
 * released pool that no stream uses any more (`priv`: that pool's alone). */
static int releasable(const ga_segment *seg, const ga_private *priv) {
  if (!seg->expandable) return 0;
  if (priv) return seg->priv == priv;
  return !seg->priv || (seg->priv->released && !seg->priv->nstreams);
}

static int by_address(const void *x, const void *y) {
  const ga_block *a = *(ga_block *const *)x, *b = *(ga_block *const *)y;
  return a->ptr < b->ptr ? -1 : a->ptr > b->ptr;
}

/* Unmaps the whole free granules of seg; gives seg back when nothing is mapped.
 * In PyTorch's policy a mapping is one page, so this is release_cached_blocks
 * -> release_blocks -> unmap_block: the whole pages inside each free block
 * (ExpandableSegment::unmap, after a synchronisation of the segment's stream
 * as in unmapHandles), then release_expandable_segment once nothing is mapped. */
static int release_segment(ga_allocator_t *a, ga_segment *seg, frees *f) {
  int rc = 0;
  /* Collect first: unmapping a free block never touches another FREE one.
   * seg's FREE blocks are in its owner's tree under its stream; the tree finds
   * those that hold a whole granule without a walk over the others. They go
   * in address order. */
  ga_free_tree *t = &(seg->priv ? seg->priv->trees : a->pol.trees)[seg->size_class];
  f->n = 0;
  for (ga_block *b = ga_free_tree_whole_at(t, seg->stream, a->space.gran, 0, 0);
       b && b->stream == seg->stream; b = ga_free_tree_whole_at(t, b->stream, b->size, b->tie, b->ptr + 1)) {
    size_t g0, g1;
    if (b->seg != seg || !ga_expandable_movable_locked(&a->space, b, &g0, &g1)) continue;
    if ((rc = GA_VEC_ROOM(f->v, f->cap, f->n + 1))) return rc;
    f->v[f->n++] = b;
  }
  if (f->n > 1) qsort(f->v, f->n, sizeof *f->v, by_address);
  if (f->n) {
    /* Work queued before the frees may still touch this memory: wait for it,
     * unless the stream is capturing (that would invalidate the capture). */
    if (ga_capture_is_capturing_locked(a, seg->stream)) {
      a->pol.capture.flush_deferred = 1;
      return 0;
    }
    if ((rc = ga_dev_stream_synchronize(a->dev, seg->stream))) return rc;
    a->stats.num_unmap_syncs++;
  }
  for (size_t i = 0; i < f->n && !rc; i++) {
    size_t g0, g1;
    if (ga_expandable_movable_locked(&a->space, f->v[i], &g0, &g1))
      rc = ga_move_unmap_free_locked(a, f->v[i], g0, g1);
  }
  if (f->n && seg->priv) seg->priv->generation++; /* a graph's addresses lost their memory */
  if (!rc && !seg->head->next && seg->head->state == GA_BLOCK_UNMAPPED) {
    ga_private *priv = seg->priv;
    rc = ga_expandable_release_locked(&a->space, seg);
    if (!rc && priv) ga_private_segment_released_locked(a, priv); /* may delete a released pool's record */
  }
  return rc;
}

int ga_reclaim_expandable_locked(ga_allocator_t *a, ga_private *priv) {
  GA_ASSERT_LOCKED(a);
  int rc = 0;
  frees f = {0};
  /* Expandable segments exist only in expandable mode: without it the walk
   * over every (native) segment is skipped. */
  for (ga_segment *seg = a->cfg.expandable_segments ? a->space.segs : NULL, *next; seg && !rc; seg = next) {
    next = seg->next;
    if (releasable(seg, priv)) rc = release_segment(a, seg, &f);
  }
  free(f.v);
  int rc2 = ga_pages_release_locked(&a->space, 0);
  return rc ? rc : rc2;
}

/* ---- Private pools: their free native segments ---- */

int ga_reclaim_private_locked(ga_allocator_t *a, ga_private *priv) {
  GA_ASSERT_LOCKED(a);
  for (int p = 0; p < 2; p++) {
    for (;;) {
      ga_block *b = NULL;
      /* Take any unsplit free block (the tree changes after each release). */
      for (ga_block *x = ga_free_tree_lower_bound(&priv->trees[p], NULL, 0); x;
           x = ga_free_tree_next(&priv->trees[p], x))
        if (!ga_tiles_is_split(x) && !x->seg->expandable) {
          b = x;
          break;
        }
      if (!b) break;
      int last = priv->nsegs == 1 && priv->released && priv->nstreams == 0;
      int rc = release_free_block(a, b);
      if (rc) return rc;
      if (last) return 0; /* priv is gone */
    }
  }
  return 0;
}
