/* block.c — splitting and merging of blocks (PyTorch's rules), and the
 * free kept back for the hot path. Rounding is rounding.c's.
 *
 * Split: the allocation takes the front; the small pool splits when at least
 * 512 B remain, the large pool only for requests below max_split_size with
 * strictly more than 1 MiB remaining. Merge: a freed block absorbs FREE
 * neighbours of its own segment (segments never merge with each other).
 */
#include <stdlib.h>

#include "policy.h"

/* Would a block of `bsize` bytes of b's pool and segment be split for `size`? */
static int split_at(const ga_allocator_t *a, const ga_block *b, size_t bsize, size_t size) {
  size_t remaining = bsize - size;
  if (b->size_class == GA_CLASS_SMALL || b->seg->expandable) return remaining >= GA_MIN_BLOCK;
  return size < a->cfg.max_split_size && remaining > GA_SMALL_SIZE;
}

static int should_split(const ga_allocator_t *a, const ga_block *b, size_t size) {
  return split_at(a, b, b->size, size);
}

/* ---- Free trees with the inactive_split bookkeeping ---- */

/* b (about to join tree p) becomes FREE; returns whether it counts in
 * inactive_split (a split block of a native segment). */
static int becomes_free(const ga_free_tree *p, ga_block *b) {
  b->state = GA_BLOCK_FREE;
  b->gc_base = p->gc_calls;
  b->counted_split = (uint8_t)(ga_tiles_is_split(b) && !b->seg->expandable);
  return b->counted_split;
}

void ga_block_to_free_tree_locked(ga_allocator_t *a, ga_block *b) {
  GA_ASSERT_LOCKED(a);
  ga_free_tree *p = &ga_trees_of(a, b)[b->size_class];
  if (becomes_free(p, b)) ga_hot_split(&a->stats, &a->hot, b->size_class, 1, (int64_t)b->size);
  ga_free_tree_insert(p, b);
}

void ga_block_from_free_tree_locked(ga_allocator_t *a, ga_block *b) {
  GA_ASSERT_LOCKED(a);
  ga_free_tree_remove(&ga_trees_of(a, b)[b->size_class], b);
  if (b->counted_split) {
    ga_hot_split(&a->stats, &a->hot, b->size_class, -1, -(int64_t)b->size);
    b->counted_split = 0;
  }
}

/* x is in its free tree under (xsize, xptr); y (x itself, changed, or a
 * neighbour that took its memory) goes there instead: one tree update, and
 * the inactive_split counts change by the net difference, as PyTorch counts
 * them (its allocated/freed totals see only the net). `removed` is a free
 * block already taken out of the tree by the same merge, counted `removed`
 * times with `removed_bytes`. */
static void retree(ga_allocator_t *a, ga_block *x, size_t xsize, uintptr_t xptr, ga_block *y, int removed,
                   size_t removed_bytes) {
  ga_free_tree *p = &ga_trees_of(a, x)[x->size_class];
  int was = x->counted_split;
  x->counted_split = 0;
  int counted = becomes_free(p, y);
  int64_t n = counted - was - removed;
  int64_t bytes = (counted ? (int64_t)y->size : 0) - (was ? (int64_t)xsize : 0) - (int64_t)removed_bytes;
  if (n | bytes) ga_hot_split(&a->stats, &a->hot, y->size_class, n, bytes);
  ga_free_tree_rekey(p, x, xsize, xptr, y);
  GA_ASSERT(y->in_tree && (x == y || !x->in_tree));
}

/* ---- Hand out and take back ---- */

static size_t whole_granules(uintptr_t lo, uintptr_t hi, size_t g) {
  uintptr_t a = (lo + g - 1) / g, b = hi / g;
  return b > a ? b - a : 0;
}

/* Expandable segments: take the back of the block instead of the front when
 * that leaves more whole free granules (which can move elsewhere) behind. */
static int take_back(const ga_allocator_t *a, const ga_block *b, size_t rounded) {
  /* With pages of one granule only: PyTorch always takes the front, which
   * serves larger pages better. */
  if (ga_alloc_fit_is_plain(a, b->seg)) return 0;
  uintptr_t lo = b->ptr, hi = b->ptr + b->size;
  return whole_granules(lo, hi - rounded, a->space.gran) > whole_granules(lo + rounded, hi, a->space.gran);
}

/* ---- The block map ----
 * An entry (ptr, b) is put when b is first handed out and stays while b's
 * record lives: its frees and later hand-outs leave the map alone (at 10^6
 * blocks the put was a cache miss in every reuse of a hole), and the
 * segment layer takes it out when it deletes the record (in a merge, or
 * with its segment). A record is never deleted ALLOCATED (a freed block is
 * PENDING before it merges), so the entry at ptr is the live allocation
 * exactly when its block is ALLOCATED, or is the free kept back. */
ga_block *ga_block_live_locked(const ga_allocator_t *a, uintptr_t ptr) {
  GA_ASSERT_LOCKED(a);
  ga_block *b = ga_blockmap_get(&a->pol.map, ptr);
  GA_ASSERT(!b || (b->in_map && b->ptr == ptr));
  return b && (b->state == GA_BLOCK_ALLOCATED || b == a->pol.kept) ? b : NULL;
}

/* b, out of every tree, is allocated for `size` bytes asked (room in the map reserved). */
static void handed(ga_allocator_t *a, ga_block *b, size_t size) {
  b->state = GA_BLOCK_ALLOCATED;
  b->requested = size;
  b->tag = 0; /* the struct may have served a tagged allocation before */
  if (!b->in_map) {
    (void)ga_blockmap_put(&a->pol.map, b->ptr, b); /* cannot fail: room reserved by the caller */
    b->in_map = 1;
  }
  ga_hot_alloc(&a->stats, &a->hot, b->size_class, b->size, size);
  if (b->size >= a->cfg.max_split_size) ga_stat_inc(&a->stats.oversize_allocations, 1);
  ga_history_add_locked(a, GA_H_ALLOC, b->ptr, size, b->stream);
}

/* What ga_block_hand_out_locked promises: the block handed out is ALLOCATED
 * for `size` bytes, at least `rounded` long and within what b covered, in no
 * tree; the remainder of a split (its address neighbour) is FREE in its tree. */
static int handed_out_well(const ga_block *got, const ga_block *rest, size_t size, size_t rounded,
                           uintptr_t lo, uintptr_t hi) {
  return got->state == GA_BLOCK_ALLOCATED && got->requested == size && got->size >= rounded &&
         size <= rounded && !got->in_tree && got->ptr >= lo && got->ptr + got->size <= hi &&
         (!rest ||
          (rest->state == GA_BLOCK_FREE && rest->in_tree && (rest == got->prev || rest == got->next)));
}

ga_block *ga_block_hand_out_locked(ga_allocator_t *a, ga_block *b, size_t size, size_t rounded, int in_tree) {
  GA_ASSERT_LOCKED(a);
  GA_ASSERT(b->state == GA_BLOCK_FREE && b->in_tree == (in_tree != 0) && b->size >= rounded);
  uintptr_t lo = b->ptr, hi = b->ptr + b->size; /* for the postcondition */
  ga_block *rest = NULL;                        /* the remainder of a split */
  if (ga_blockmap_reserve(&a->pol.map)) return NULL;
  if (should_split(a, b, rounded)) {
    int back = take_back(a, b, rounded);
    size_t bsize = b->size;
    rest = ga_tiles_split_locked(&a->space, b, back ? b->size - rounded : rounded);
    if (!rest) return NULL;
    if (back) {
      ga_block *front = b;
      b = rest;
      rest = front;
    }
    /* The remainder is where the next fresh block starts when blocks are
     * carved one after the other from a segment's end: its map slot, a miss
     * at 10^6 blocks, starts loading now, ahead of that block's put (its
     * address from lo, not from its record, which the split has only
     * written). */
    ga_blockmap_prefetch(&a->pol.map, back ? lo : lo + rounded);
    /* The remainder takes the whole block's place in the tree. */
    if (in_tree)
      retree(a, back ? rest : b, bsize, back ? rest->ptr : b->ptr, rest, 0, 0);
    else
      ga_block_to_free_tree_locked(a, rest);
  } else if (in_tree) {
    ga_block_from_free_tree_locked(a, b);
  }
  handed(a, b, size);
  GA_ASSERT(handed_out_well(b, rest, size, rounded, lo, hi));
  return b;
}

/* m, just freed or grown, touches unmapped space: the runs that growth
 * looks for hold more now (the segment layer's unmapped index). m is what
 * merge_insert promises: FREE in its tree, with no FREE address neighbour
 * (the merge is whole). */
static ga_block *touched(ga_block *m) {
  GA_ASSERT(m->state == GA_BLOCK_FREE && m->in_tree && (!m->prev || m->prev->state != GA_BLOCK_FREE) &&
            (!m->next || m->next->state != GA_BLOCK_FREE));
  if ((m->next && m->next->state == GA_BLOCK_UNMAPPED) || (m->prev && m->prev->state == GA_BLOCK_UNMAPPED))
    ga_unmapped_touch_locked(m);
  return m;
}

/* Merges a FREE-to-be block with its FREE neighbours and inserts it (no stats). */
static ga_block *merge_insert(ga_allocator_t *a, ga_block *b) {
  b->requested = 0;
  ga_block *p = b->prev && b->prev->state == GA_BLOCK_FREE ? b->prev : NULL;
  ga_block *n = b->next && b->next->state == GA_BLOCK_FREE ? b->next : NULL;
  if (p) {
    /* The merged block keeps p's struct and address: p's node is updated. */
    size_t psize = p->size, removed_bytes = 0;
    int removed = 0;
    if (n) {
      /* n leaves the tree; its inactive_split share joins p's net change. */
      ga_free_tree_remove(&ga_trees_of(a, n)[n->size_class], n);
      removed = n->counted_split;
      removed_bytes = removed ? n->size : 0;
      n->counted_split = 0;
    }
    ga_tiles_absorb_next_locked(&a->space, p);
    if (n) ga_tiles_absorb_next_locked(&a->space, p);
    retree(a, p, psize, p->ptr, p, removed, removed_bytes);
    return touched(p);
  }
  if (n) {
    /* b takes n's node; n's struct (and key) lives until the tree is updated. */
    b->size += n->size;
    (void)ga_tiles_unlink_next(b);
    retree(a, n, n->size, n->ptr, b, 0, 0);
    ga_tiles_delete_locked(&a->space, n);
    return touched(b);
  }
  ga_block_to_free_tree_locked(a, b);
  return touched(b);
}

void ga_block_free_locked(ga_allocator_t *a, ga_block *b) {
  GA_ASSERT_LOCKED(a);
  GA_ASSERT((b->state == GA_BLOCK_ALLOCATED || b->state == GA_BLOCK_PENDING) && !b->in_tree);
  size_t size = b->size, requested = b->requested;
  int size_class = b->size_class;
  b->free_seq = ++a->pol.streams.free_clock;
  ga_history_add_locked(a, GA_H_FREE_COMPLETED, b->ptr, requested, b->stream);
  merge_insert(a, b); /* b may be merged into its predecessor */
  ga_hot_done(&a->hot, size_class, size, requested);
}

/* ---- The free kept back ----
 * A client's free of block b is kept back when b would merge with nothing
 * or with its next neighbour n alone, in a segment where best fit is plain
 * (ga_alloc_fit_is_plain) and the front of a split is handed out: b stays
 * PENDING, out of the trees, with its entry in the map, and the counters of
 * its free wait.
 * The free as it would have been leaves one free block M in the tree: b
 * itself, or b and n merged at b's address (n's node re-keyed). The next
 * allocation of b's rounded size on b's stream, from the general trees,
 * would be served by M when best fit answers M, and would be cut from M's
 * front, giving back exactly b, and n as it was. So when
 * ga_free_tree_first_is says best fit would answer M (with n's node
 * standing for M's), b is handed out again with the bookkeeping both steps
 * would have made (the free, its completion and the allocation counted at
 * once by ga_hot_reuse, inactive_split up and back, n's GC age and free
 * sequence number), and neither the merge nor the split is made. Anything else
 * completes the free first (ga_block_keep_flush_locked), as it would have
 * been made: no other event of the allocator came between, and every
 * entry point but ga_malloc and ga_free completes it before it looks. The
 * placement test replays every trace event by event against the digests
 * made before this existed. */

int ga_block_free_keep_locked(ga_allocator_t *a, ga_block *b) {
  GA_ASSERT_LOCKED(a);
  GA_ASSERT(!a->pol.kept && b->state == GA_BLOCK_PENDING);
  ga_block *p = b->prev;
  /* Not when the next allocation would first do something else: retire
   * events, grant peers access, serve a capture (none of which can start
   * before the free kept back is completed or reused). */
  if ((p && p->state == GA_BLOCK_FREE) || b->seg->priv || a->pol.streams.npending || a->space.regrant ||
      a->pol.capture.routing || !ga_alloc_fit_is_plain(a, b->seg))
    return 0;
  size_t requested = b->requested;
  b->free_seq = ++a->pol.streams.free_clock;
  ga_history_add_locked(a, GA_H_FREE_COMPLETED, b->ptr, requested, b->stream);
  a->pol.kept = b;
  return 1;
}

__attribute__((noinline)) void ga_block_keep_flush_slow_locked(ga_allocator_t *a) {
  GA_ASSERT_LOCKED(a);
  ga_block *b = a->pol.kept;
  size_t size = b->size, requested = b->requested;
  int size_class = b->size_class;
  a->pol.kept = NULL;
  ga_hot_free(&a->hot, size_class, size);
  merge_insert(a, b);
  ga_hot_done(&a->hot, size_class, size, requested);
}

ga_block *ga_block_keep_reuse_locked(ga_allocator_t *a, size_t size, ga_stream_t stream) {
  GA_ASSERT_LOCKED(a);
  ga_block *b = a->pol.kept, *n = b->next;
  size_t rounded = ga_round_size(&a->cfg, size);
  if (rounded != b->size || stream != b->stream) return NULL;
  if (n && n->state != GA_BLOCK_FREE) n = NULL;
  ga_free_tree *p = &a->pol.trees[b->size_class];
  size_t msize = n ? rounded + n->size : rounded, max_split = a->cfg.max_split_size;
  /* get_free_block's answer (its walk past M when it walks) and its
   * oversize rules, then hand_out's split. */
  ga_block *after;
  if (!ga_free_tree_first_is(p, stream, rounded, msize, b, n, &after)) return NULL;
  if (after && after->stream == stream && ga_alloc_fit_walks(a, b->seg) &&
      ga_alloc_growable(after->size, after->next) < ga_alloc_growable(msize, n ? n->next : b->next))
    return NULL;
  /* ga_alloc_oversize_refuses, written out with max_split already loaded:
   * the call costs the cached pair 6 instructions (ga-bench hotpath). */
  if (rounded < max_split && msize >= max_split) return NULL;
  if (rounded >= max_split && msize - rounded >= a->cfg.max_non_split_rounding) return NULL;
  if (n && !split_at(a, b, msize, rounded)) return NULL;
  a->pol.kept = NULL;
  if (ga_limit_gc_on(a)) p->gc_calls++;
  int native = !b->seg->expandable;
  if (n) {
    /* The merge: n's inactive_split count goes and M's comes (M counts when
     * it has a neighbour); the split takes M's and gives n's back. */
    int was = n->counted_split, m = native && (b->prev || n->next);
    if (was == native) {
      /* n counted (native) or not (expandable), as the split leaves it. */
      if (native && m)
        ga_hot_split_swing(&a->stats, &a->hot, b->size_class, 0, (int64_t)rounded);
      else if (native)
        ga_hot_split_dip(&a->hot, b->size_class, 1, n->size);
    } else {
      int64_t n1 = m - was, b1 = (m ? (int64_t)msize : 0) - (was ? (int64_t)n->size : 0);
      int64_t n2 = native - m, b2 = (native ? (int64_t)n->size : 0) - (m ? (int64_t)msize : 0);
      if (n1 | b1) ga_hot_split(&a->stats, &a->hot, b->size_class, n1, b1);
      if (n2 | b2) ga_hot_split(&a->stats, &a->hot, b->size_class, n2, b2);
      n->counted_split = (uint8_t)native;
    }
    n->gc_base = p->gc_calls;
    n->tag = 0; /* the split would have made a new record */
    n->requested = 0;
    n->free_seq = b->free_seq; /* M's: b's free is the later */
  } else if (native && ga_tiles_is_split(b)) {
    /* Into the tree counted, out of it uncounted. */
    ga_hot_split_swing(&a->stats, &a->hot, b->size_class, 1, (int64_t)rounded);
  }
  b->counted_split = 0; /* (its gc_base is read only while it is free) */
  b->state = GA_BLOCK_ALLOCATED;
  b->tag = 0;
  ga_hot_reuse(&a->stats, &a->hot, b->size_class, rounded, b->requested, size);
  b->requested = size;
  if (rounded >= max_split) ga_stat_inc(&a->stats.oversize_allocations, 1);
  ga_history_add_locked(a, GA_H_ALLOC, b->ptr, size, stream);
  return b; /* its entry in the map stayed */
}
