/* block.c — sizes, splitting and merging of blocks (PyTorch's rules).
 *
 * Rounding: at least 512 B, multiples of 512 B, or one of N steps between
 * powers of two when roundup_power2_divisions is set for the size's interval.
 * Split: the allocation takes the front; the small pool splits when at least
 * 512 B remain, the large pool only for requests below max_split_size with
 * strictly more than 1 MiB remaining. Merge: a freed block absorbs FREE
 * neighbours of its own segment (segments never merge with each other).
 */
#include <stdlib.h>

#include "policy.h"

/* ---- Sizes ---- */

static size_t floor_log2(size_t v) { return (size_t)(63 - __builtin_clzll((unsigned long long)v)); }

static size_t divisions_for(const ga_config *c, size_t size) {
  size_t lg = floor_log2(size), idx = lg > 20 ? lg - 20 : 0;
  if (idx >= GA_ROUNDUP_INTERVALS) idx = GA_ROUNDUP_INTERVALS - 1;
  return c->roundup_divisions[idx];
}

/* Rounds up to the next of `div` equal steps between two powers of two. */
static size_t next_division(size_t size, size_t div) {
  if ((size & (size - 1)) == 0) return size;
  size_t floor2 = (size_t)1 << floor_log2(size);
  size_t step = floor2 >> floor_log2(div);
  if (step == 0) return floor2 << 1;
  size_t down = size & ~(step - 1);
  return down == size ? size : down + step;
}

size_t ga_round_size(const ga_config *c, size_t size) {
  if (size < GA_MIN_BLOCK) return GA_MIN_BLOCK;
  size_t div = c->any_roundup ? divisions_for(c, size) : 0;
  /* size > GA_MIN_BLOCK * div, without the product (which could wrap). */
  if (div > 1 && (size - 1) / GA_MIN_BLOCK >= div) return next_division(size, div);
  return (size + GA_MIN_BLOCK - 1) / GA_MIN_BLOCK * GA_MIN_BLOCK;
}

size_t ga_allocation_size_for(const ga_config *c, size_t rounded) {
  if (rounded <= GA_SMALL_SIZE) return GA_SMALL_BUFFER;
  if (rounded < GA_MIN_LARGE_ALLOC) return ga_config_large_buffer(c);
  return (rounded + GA_ROUND_LARGE - 1) / GA_ROUND_LARGE * GA_ROUND_LARGE;
}

static int should_split(const ga_allocator_t *a, const ga_block *b, size_t size) {
  size_t remaining = b->size - size;
  if (b->pool == GA_P_SMALL || b->seg->expandable) return remaining >= GA_MIN_BLOCK;
  return size < a->cfg.max_split_size && remaining > GA_SMALL_SIZE;
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
  ga_free_tree *p = &ga_trees_of(a, b)[b->pool];
  if (becomes_free(p, b)) ga_hot_split(&a->stats, &a->hot, b->pool, 1, (int64_t)b->size);
  ga_free_tree_insert(p, b);
}

void ga_block_from_free_tree_locked(ga_allocator_t *a, ga_block *b) {
  ga_free_tree_remove(&ga_trees_of(a, b)[b->pool], b);
  if (b->counted_split) {
    ga_hot_split(&a->stats, &a->hot, b->pool, -1, -(int64_t)b->size);
    b->counted_split = 0;
  }
}

/* x is in its free tree under (xsize, xptr); y (x itself, changed, or a
 * neighbour that took its memory) goes there instead: one tree update, and
 * the inactive_split counts change by the net difference, as PyTorch counts
 * them (its allocated/freed totals see only the net). `gone` is a free
 * block already taken out of the tree by the same merge, counted `gone`
 * times with `gone_bytes`. */
static void retree(ga_allocator_t *a, ga_block *x, size_t xsize, uintptr_t xptr, ga_block *y, int gone,
                   size_t gone_bytes) {
  ga_free_tree *p = &ga_trees_of(a, x)[x->pool];
  int was = x->counted_split;
  x->counted_split = 0;
  int counted = becomes_free(p, y);
  int64_t n = counted - was - gone;
  int64_t bytes = (counted ? (int64_t)y->size : 0) - (was ? (int64_t)xsize : 0) - (int64_t)gone_bytes;
  if (n | bytes) ga_hot_split(&a->stats, &a->hot, y->pool, n, bytes);
  ga_free_tree_rekey(p, x, xsize, xptr, y);
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
  if (!b->seg->expandable || a->cfg.expandable_pytorch || a->pol.large_page != a->space.gran) return 0;
  uintptr_t lo = b->ptr, hi = b->ptr + b->size;
  return whole_granules(lo, hi - rounded, a->space.gran) > whole_granules(lo + rounded, hi, a->space.gran);
}

ga_block *ga_block_hand_out_locked(ga_allocator_t *a, ga_block *b, size_t size, size_t rounded, int in_tree) {
  if (ga_blockmap_reserve(&a->pol.map)) return NULL;
  if (should_split(a, b, rounded)) {
    int back = take_back(a, b, rounded);
    size_t bsize = b->size;
    ga_block *rest = ga_tiles_split_locked(a, b, back ? b->size - rounded : rounded);
    if (!rest) return NULL;
    if (back) {
      ga_block *front = b;
      b = rest;
      rest = front;
    }
    /* The remainder takes the whole block's place in the tree. */
    if (in_tree)
      retree(a, back ? rest : b, bsize, back ? rest->ptr : b->ptr, rest, 0, 0);
    else
      ga_block_to_free_tree_locked(a, rest);
  } else if (in_tree) {
    ga_block_from_free_tree_locked(a, b);
  }
  b->state = GA_BLOCK_ALLOCATED;
  b->requested = size;
  b->tag = 0;                                    /* the struct may have served a tagged allocation before */
  (void)ga_blockmap_put(&a->pol.map, b->ptr, b); /* cannot fail: room reserved above */
  ga_hot_alloc(&a->stats, &a->hot, b->pool, b->size, size);
  if (b->size >= a->cfg.max_split_size) ga_stat_inc(&a->stats.oversize_allocations, 1);
  ga_history_add_locked(a, GA_H_ALLOC, b->ptr, size, b->stream);
  return b;
}

/* Merges a FREE-to-be block with its FREE neighbours and inserts it (no stats). */
static ga_block *merge_insert(ga_allocator_t *a, ga_block *b) {
  b->requested = 0;
  ga_block *p = b->prev && b->prev->state == GA_BLOCK_FREE ? b->prev : NULL;
  ga_block *n = b->next && b->next->state == GA_BLOCK_FREE ? b->next : NULL;
  if (p) {
    /* The merged block keeps p's struct and address: p's node is updated. */
    size_t psize = p->size, gone_bytes = 0;
    int gone = 0;
    if (n) {
      /* n leaves the tree; its inactive_split share joins p's net change. */
      ga_free_tree_remove(&ga_trees_of(a, n)[n->pool], n);
      gone = n->counted_split;
      gone_bytes = gone ? n->size : 0;
      n->counted_split = 0;
    }
    ga_tiles_absorb_next_locked(a, p);
    if (n) ga_tiles_absorb_next_locked(a, p);
    retree(a, p, psize, p->ptr, p, gone, gone_bytes);
    return p;
  }
  if (n) {
    /* b takes n's node; n's struct (and key) lives until the tree is updated. */
    b->size += n->size;
    (void)ga_tiles_unlink_next(b);
    retree(a, n, n->size, n->ptr, b, 0, 0);
    ga_tiles_delete_locked(a, n);
    return b;
  }
  ga_block_to_free_tree_locked(a, b);
  return b;
}

void ga_block_free_locked(ga_allocator_t *a, ga_block *b) {
  size_t size = b->size, requested = b->requested;
  int pool = b->pool;
  b->free_seq = ++a->pol.streams.free_clock;
  ga_history_add_locked(a, GA_H_FREE_COMPLETED, b->ptr, requested, b->stream);
  merge_insert(a, b); /* b may be merged into its predecessor */
  ga_hot_done(&a->hot, pool, size, requested);
}
