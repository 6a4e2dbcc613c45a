/* move.c — expandable segments: which memory moves where, and when that is
 * safe.
 *
 * Physical memory is a device-wide resource. When a range needs memory, it
 * comes from the page cache, then from whole free granules anywhere (any
 * segment, any stream, smallest free blocks first, so large ones stay able to
 * serve large requests), and only then from new handles
 * (expandable_move_pages:when_full tries new handles before moving). A
 * granule is unmapped only once its stream is known to be past the free
 * (a fence that has passed, else a stream synchronisation), and nothing moves
 * while a capture is underway (that would synchronise a stream).
 *
 * With pages larger than a granule (the default 20 MiB), only a free block
 * that ends where its mapped run ends (at the segment's unmapped space or a
 * hole) gives memory, from its back, or an oversize one (it serves no split
 * request), unless the device is full (and not with expandable_move_pages:
 * always or when_full). Memory taken from the middle of a free run splits it
 * around a hole: best fit then puts
 * smaller blocks in the two halves, the hole can no longer be mapped again as
 * one range, and a later request that the whole block would have served
 * makes a new page (MiniMalloc K, sizes x64: 162 MiB reserved where
 * PyTorch's policy reserves 130). A block that ends at unmapped space stays
 * one run with what it gave, which a later growth maps back in place. With
 * pages of one granule, every free granule may move (best fit and placement
 * keep whole granules free for that, see alloc.c and block.c).
 *
 * Moves must not go on for ever in a repeated workload (training steps,
 * decode steps): a segment that has to grow again after memory moved out of
 * it swings, and would swing the same way every step. From then on it keeps
 * the most it has had mapped since: only memory above that moves out, unless
 * the device is full. Each segment's keep only rises, so the moves stop once
 * every segment holds its own peak, by the second repetition (a ratchet; its
 * price is the memory that the moves would have shared between segments).
 * segment/expandable.c does the mapping; this file decides.
 */
#include <stdlib.h>

#include "policy.h"

static size_t round_up(size_t v, size_t g) { return (v + g - 1) / g * g; }

/* ---- Moving whole free granules into the page cache ---- */

int ga_move_unmap_free_locked(ga_allocator_t *a, ga_block *b, size_t g0, size_t g1) {
  GA_ASSERT_LOCKED(a);
  ga_block *front, *back;
  ga_block_from_free_tree_locked(a, b);
  int rc = ga_expandable_unmap_locked(&a->space, b, g0, g1, &front, &back);
  if (rc) {
    ga_block_to_free_tree_locked(a, b);
    return rc;
  }
  if (front) ga_block_to_free_tree_locked(a, front);
  if (back) ga_block_to_free_tree_locked(a, back);
  return 0;
}

typedef struct cand {
  size_t klo, khi; /* granules that must stay: the range being mapped */
  ga_allocator_t *a;
  uint64_t hold; /* frees during which memory that moved in stays (0: none) */
  int keep;      /* segments keep what they swung back to (see above) */
  int edge;      /* only free blocks at the end of a mapped run give memory */
} cand;

/* Whether free block b may give memory, and which of its whole granules:
 * [*pg0, *pg1). */
static int movable(const cand *c, const ga_block *b, size_t *pg0, size_t *pg1) {
  size_t g0, g1;
  if (!b->seg->expandable || !ga_expandable_movable_locked(&c->a->space, b, &g0, &g1)) return 0;
  /* Memory that moved into this segment lately stays a while (expandable_move_hold). */
  uint64_t now = c->a->pol.streams.free_clock, in = b->seg->moved_in;
  if (c->hold && in && now - in < c->hold) return 0;
  if (c->keep && b->seg->keep_mapped && b->seg->above_keep < c->a->space.gran) return 0;
  /* With pages larger than a granule, only a free block that ends where its
   * mapped run ends gives memory (see above), or an oversize one (it serves
   * no split request anyway). */
  if (c->edge && b->size < c->a->cfg.max_split_size && b->next && b->next->state != GA_BLOCK_UNMAPPED)
    return 0;
  if (g0 < c->khi && g1 > c->klo) { /* overlaps the range: only the part outside may move */
    if (g1 > c->khi)
      g0 = c->khi;
    else if (g0 < c->klo)
      g1 = c->klo;
    else
      return 0;
  }
  *pg0 = g0;
  *pg1 = g1;
  return 1;
}

/* Mapped bytes of expandable segment seg (asleep granules count: their
 * blocks hold them). */
static size_t mapped_bytes(const ga_segment *seg) { return seg->size - seg->unmapped_bytes; }

/* Whether segments keep memory they swung back to (expandable_move_pages:
 * settle): not while moving only because the device is full (`wait`), nor
 * with moves only when full (then the policy is PyTorch's until the device
 * is full) or always. */
static int keeps(const ga_allocator_t *a, int wait) {
  return !wait && !a->cfg.expandable_move_when_full && !a->cfg.expandable_move_always;
}

/* The free blocks of one stream in one general free tree that may give
 * memory, in the tree's (size, tie, address) order: b is the next one (NULL:
 * none left), found under the key (size, tie, ptr), and may give [g0, g1).
 * Blocks without a whole granule of an expandable segment are skipped by the
 * tree (ga_free_tree_whole_at), however many there are. */
typedef struct cursor {
  ga_free_tree *t;
  ga_stream_t stream;
  ga_block *b;
  size_t size, g0, g1;
  uint32_t tie;
  uintptr_t ptr;
} cursor;

/* k's next block from the key (size, tie, ptr) on. */
static void advance(const cand *c, cursor *k, size_t size, uint32_t tie, uintptr_t ptr) {
  ga_block *b = ga_free_tree_whole_at(k->t, k->stream, size, tie, ptr);
  while (b && b->stream == k->stream && !movable(c, b, &k->g0, &k->g1))
    b = ga_free_tree_whole_at(k->t, b->stream, b->size, b->tie, b->ptr + 1);
  k->b = b && b->stream == k->stream ? b : NULL;
  if (k->b) k->size = b->size, k->tie = b->tie, k->ptr = b->ptr;
}

/* free_tree.c's order across streams. */
static int before(const cursor *x, const cursor *y) {
  if (x->size != y->size) return x->size < y->size;
  return x->tie != y->tie ? x->tie < y->tie : x->ptr < y->ptr;
}

static int by_head(const void *x, const void *y) {
  const cursor *a = x, *b = y;
  return before(a, b) ? -1 : before(b, a);
}

/* A cursor for every stream of the general free trees with a block that may
 * give memory, sorted by that block. */
static int cursors(const cand *c, cursor **v, size_t *n) {
  size_t cap = 0;
  *v = NULL;
  *n = 0;
  for (int p = 0; p < 2; p++) {
    ga_free_tree *t = &c->a->pol.trees[p];
    /* Streams with no block that holds a whole granule are skipped. */
    for (ga_block *f = ga_free_tree_whole_at(t, NULL, 0, 0, 0); f;) {
      cursor k = {.t = t, .stream = f->stream};
      advance(c, &k, c->a->space.gran, 0, 0);
      if (k.b) {
        if (GA_VEC_ROOM(*v, cap, *n + 1)) return GA_DEV_ENOMEM;
        (*v)[(*n)++] = k;
      }
      uintptr_t st = (uintptr_t)f->stream;
      f = st == UINTPTR_MAX ? NULL : ga_free_tree_whole_at(t, (ga_stream_t)(st + 1), 0, 0, 0);
    }
  }
  if (*n > 1) qsort(*v, *n, sizeof **v, by_head);
  return 0;
}

/* Moves up to `want` free granules of the general pools into the page
 * cache, smallest free blocks first (the large ones stay able to serve large
 * requests). Only granules whose stream is known to be past their free move,
 * unless `wait`: then their streams are synchronised as needed (a stall on a
 * GPU, counted in num_unmap_syncs). The blocks are visited in order, each
 * stream's free tree from where it was, until enough moved: what moves
 * never depends on more than the blocks visited. */
static int steal(ga_allocator_t *a, size_t want, uintptr_t keep_lo, uintptr_t keep_hi, int wait) {
  size_t g = a->space.gran;
  int keep = keeps(a, wait);
  cand c = {.klo = keep_lo / g,
            .khi = round_up(keep_hi, g) / g,
            .a = a,
            .hold = wait ? 0 : a->cfg.expandable_move_hold,
            .keep = keep,
            .edge = keep && a->pol.large_page != g};
  if (c.keep)
    for (ga_segment *seg = a->space.segs; seg; seg = seg->next)
      if (seg->expandable && seg->keep_mapped) {
        size_t m = mapped_bytes(seg);
        seg->above_keep = m > seg->keep_mapped ? m - seg->keep_mapped : 0;
      }
  cursor *v;
  size_t nv;
  int rc = cursors(&c, &v, &nv);
  /* The streams with memory that may move, for the fences below (taken now:
   * the blocks change as they give). */
  ga_stream_t *streams = rc || !nv ? NULL : ga_host_malloc(nv * sizeof *streams);
  if (!rc && nv && !streams) rc = GA_DEV_ENOMEM;
  if (rc) {
    free(v);
    return rc;
  }
  for (size_t i = 0; i < nv; i++) streams[i] = v[i].stream;
  while (want > 0 && !rc) {
    cursor *k = NULL;
    for (size_t i = 0; i < nv; i++)
      if (v[i].b && (!k || before(&v[i], k))) k = &v[i];
    if (!k) break;
    ga_block *b = k->b;
    size_t g0 = k->g0, g1 = k->g1, bsize = k->size;
    uint32_t btie = k->tie;
    uintptr_t bptr = k->ptr;
    size_t n = g1 - g0 < want ? g1 - g0 : want;
    if (c.keep && b->seg->keep_mapped && n > b->seg->above_keep / g) n = b->seg->above_keep / g;
    if (n) {
      /* Work queued on the block's stream before its free may still touch it:
       * unmap only once the stream is known to be past that free. */
      int idle, waited;
      /* deterministic:True: what moves may not depend on which fences the GPU
       * has passed, so a stream not known to be past the free is waited for. */
      int must = wait || a->cfg.deterministic;
      if ((rc = ga_stream_fence_locked(a, b->stream, b->free_seq, must, &idle, &waited))) break;
      a->stats.num_unmap_syncs += waited;
      if (idle) {
        if ((rc = ga_move_unmap_free_locked(a, b, g1 - n, g1))) break;
        a->stats.num_granules_moved += (int64_t)n;
        b->seg->gave = 1;
        if (c.keep && b->seg->keep_mapped) b->seg->above_keep -= n * g;
        want -= n;
      }
    }
    /* What b left in the tree is smaller than b: behind the cursor. */
    advance(&c, k, bsize, btie, bptr + 1);
  }
  /* Fence every stream with free memory that may move: a later move of
   * memory freed before this point then needs no wait once it has passed. */
  for (size_t i = 0; i < nv; i++) ga_stream_fence_watch_locked(a, streams[i]);
  free(streams);
  free(v);
  ga_stream_fences_refresh_locked(a);
  return rc;
}

/* ---- Creating memory ---- */

/* New handles for r's pool until the cache holds n granules, within the
 * limit on reserved bytes (r->limit_refused when it refuses). `whole` (the
 * default policy): each a whole page where the device has room (the rest
 * waits in the page cache for the next request: fewer, larger handles map
 * in fewer calls), else only what is needed; each within the whole limit.
 * Otherwise (PyTorch's policy) the pages of the request, each tested
 * against the budget (max_reserved_mb, headroom_mb) alone: the memory
 * fraction was tested once, on alloc_size (alloc_block_expandable in
 * alloc.c), and PyTorch's ExpandableSegment::map then maps whole pages,
 * which may pass it by less than a page. */
static int create_until(ga_allocator_t *a, ga_request *r, size_t n, int whole) {
  ga_space *sp = &a->space;
  size_t page = ga_page_of(a, r->size_class), lim = whole ? a->pol.allowed_max : a->pol.budget_max;
  while (sp->ncache < n) {
    size_t need = (n - sp->ncache) * sp->gran, size = need < page ? need : page;
    if (!ga_limit_room(lim, sp->reserved, size)) {
      r->limit_refused = 1;
      return GA_DEV_EOOM;
    }
    int rc = GA_DEV_EOOM;
    if (whole && size < page && ga_limit_room(lim, sp->reserved, page))
      rc = ga_pages_create_locked(&a->space, page, r->size_class);
    if (rc == GA_DEV_EOOM) rc = ga_pages_create_locked(&a->space, size, r->size_class);
    if (rc) return rc;
  }
  return 0;
}

/* The ladder past new memory: moves of idle free granules, new memory, then
 * moves after waiting on the streams. Out of line: most growths end at the
 * page cache or at new memory (obtain). */
__attribute__((noinline)) static int obtain_moving(ga_allocator_t *a, ga_request *r, size_t n,
                                                   uintptr_t keep_lo, uintptr_t keep_hi) {
  /* Free granules move first, but only those known idle: nothing waits. */
  int capture = a->pol.capture.routing != 0, rc;
  if (!capture && (rc = steal(a, n - a->space.ncache, keep_lo, keep_hi, 0))) return rc;
  rc = create_until(a, r, n, 1);
  /* The device is full: wait for the streams whose frees are not known done
   * (never during a capture: that would synchronise a stream). */
  if (rc != GA_DEV_EOOM || capture) return rc;
  int limit_refused = r->limit_refused;
  if ((rc = steal(a, n - a->space.ncache, keep_lo, keep_hi, 1))) return rc;
  r->limit_refused = limit_refused;
  return a->space.ncache >= n ? 0 : GA_DEV_EOOM;
}

static inline int obtain(ga_allocator_t *a, ga_request *r, size_t n, uintptr_t keep_lo, uintptr_t keep_hi) {
  r->limit_refused = 0;
  if (a->space.ncache >= n) return 0;
  /* expandable_move_pages:when_full: new memory first, moves only when the
   * device (or the fraction) has no room left. */
  if (a->cfg.expandable_move_when_full) {
    int rc = create_until(a, r, n, 1);
    if (rc != GA_DEV_EOOM) return rc;
    r->limit_refused = 0;
  }
  return obtain_moving(a, r, n, keep_lo, keep_hi);
}

int ga_move_obtain_locked(ga_allocator_t *a, ga_request *r, size_t n, uintptr_t keep_lo, uintptr_t keep_hi) {
  GA_ASSERT_LOCKED(a);
  return obtain(a, r, n, keep_lo, keep_hi);
}

/* ---- Growing a range ---- */

/* The lowest-address run of FREE/UNMAPPED blocks on (size_class, stream) of the
 * private pool `priv` (NULL: the general pools) that holds `size` bytes and
 * reaches unmapped space. For both policies this is PyTorch's
 * find_expandable_block: each unmapped block of the stream, lowest address
 * first, with the free block before it, walking forward over free and
 * unmapped blocks; none: a new segment (one reservation per stream and pool).
 * Each segment answers from its unmapped index (segment/unmapped.c), in
 * O(log n), in the order of the segment list. */
static ga_block *find_run(ga_allocator_t *a, ga_private *priv, int size_class, ga_stream_t stream,
                          size_t size) {
  for (ga_segment *seg = a->space.segs; seg; seg = seg->next) {
    if (!seg->expandable || seg->size_class != size_class || seg->stream != stream || seg->priv != priv)
      continue;
    ga_block *run = ga_unmapped_find_run_locked(seg, size);
    if (run) return run;
  }
  return NULL;
}

/* The FREE blocks that mapping [run, hi) may merge: from run on, up to one
 * starting at hi. Out of their trees for the map (into: 0); back after
 * (into: 1), but for `keep` and those already back. */
static void run_trees(ga_allocator_t *a, ga_block *run, uintptr_t hi, int into, const ga_block *keep) {
  for (ga_block *b = run; b && b->ptr <= hi && (b->state == GA_BLOCK_FREE || b->state == GA_BLOCK_UNMAPPED);
       b = b->next) {
    if (b->state != GA_BLOCK_FREE || b == keep) continue;
    if (!into)
      ga_block_from_free_tree_locked(a, b);
    else if (!b->in_tree)
      ga_block_to_free_tree_locked(a, b);
  }
}

/* The end of the run of FREE and UNMAPPED blocks that starts at b: a grow
 * maps nothing past it (a live block ends it, and the FREE blocks beyond are
 * in their trees). */
static uintptr_t run_end(const ga_block *b) {
  while (b->next && (b->next->state == GA_BLOCK_FREE || b->next->state == GA_BLOCK_UNMAPPED)) b = b->next;
  return b->ptr + b->size;
}

/* Where mapping for [run, hi_g) may reach: the end of the UNMAPPED block
 * holding hi_g's last granule (the rest of a handle is mapped as a free tail). */
static uintptr_t reach(const ga_block *run, uintptr_t hi_g, int extend) {
  const ga_block *b = run;
  while (b->next && b->ptr + b->size < hi_g) b = b->next;
  return extend && b->state == GA_BLOCK_UNMAPPED ? b->ptr + b->size : hi_g;
}

int ga_move_grow_locked(ga_allocator_t *a, ga_request *r) {
  GA_ASSERT_LOCKED(a);
  size_t g = a->space.gran, size = r->rounded;
  int pytorch = a->cfg.expandable_pytorch, rc;
  int64_t moved = a->stats.num_granules_moved;
  r->limit_refused = 0;
  ga_block *run = find_run(a, r->priv, r->size_class, r->stream, size);
  if (!run) {
    /* A new reservation. The default policy first gathers the granules its
     * run will map (a new segment keeps nothing from a move), so that a
     * request refused for want of memory or by the limit leaves no empty
     * reservation for the next ga_empty_cache to give back. PyTorch's
     * reserves first, as try_allocate_expandable_block does (the memory
     * fraction refused before it, in alloc_block: grow_expandable). */
    if (!pytorch && (rc = obtain(a, r, round_up(size, g) / g, 0, 0))) return rc;
    ga_segment *seg;
    if ((rc = ga_expandable_new_locked(&a->space, r->priv, r->size_class, r->stream, size, &seg))) {
      /* What was gathered for it stays cached, within the cache's bound. */
      if (!pytorch) (void)ga_pages_release_locked(&a->space, a->cfg.expandable_cache_max);
      return rc;
    }
    if (r->priv) ga_private_segment_new_locked(a, r->priv);
    run = seg->head;
  }
  uintptr_t lo = run->ptr, hi = lo + size, hi_g = round_up(hi, g);
  size_t page = ga_page_of(a, r->size_class);
  /* Growing again after memory moved out: it swings (see above). */
  int swing = run->seg->gave && !pytorch && keeps(a, 0);
  run->seg->gave = 0;
  if (pytorch) {
    /* PyTorch's try_allocate_expandable_block and map_block: map the pages
     * that cover the request (ExpandableSegment::map rounds to whole pages,
     * aligned in the segment), each unmapped block of the run in turn, never
     * past the run. */
    uintptr_t page_end = run->seg->base + round_up(hi - run->seg->base, page), end = run_end(run);
    hi = hi_g = page_end < end ? page_end : end;
  }
  size_t n = 0;
  for (ga_block *b = run; b && b->ptr < hi; b = b->next)
    if (b->state == GA_BLOCK_UNMAPPED)
      n += ((b->ptr + b->size < hi_g ? b->ptr + b->size : hi_g) - b->ptr) / g;
  /* Free memory outside the range may move here; `run` survives any merge
   * (the earlier block of a merge is the one kept). PyTorch's policy creates
   * a handle per page instead (ExpandableSegment::map: one cuMemCreate per
   * page; when one runs out of memory, the pages made in that call go back). */
  rc = pytorch ? create_until(a, r, n, 0) : obtain(a, r, n, lo, hi_g);
  if (a->stats.num_granules_moved != moved) run->seg->moved_in = a->pol.streams.free_clock + 1;
  if (rc && pytorch) (void)ga_pages_release_locked(&a->space, 0); /* the pages made for it go back */
  if (rc) {
    run->seg->gave |= (uint8_t)swing; /* it did not grow */
    return rc;
  }
  uintptr_t end = reach(run, hi_g, !pytorch);
  run_trees(a, run, end, 0, NULL);
  rc = ga_expandable_map_locked(&a->space, run, hi, !pytorch);
  /* What was mapped stays, free; on success run is one FREE block of at
   * least size bytes, which stays out of its tree for the caller. */
  run_trees(a, run, end, 1, rc ? NULL : run);
  if (rc) {
    run->seg->gave |= (uint8_t)swing;
    return rc;
  }
  /* The unmapped blocks after the grown run now follow FREE memory. */
  ga_unmapped_touch_locked(run);
  r->block = run;
  if (swing || run->seg->keep_mapped) {
    size_t m = mapped_bytes(run->seg);
    if (m > run->seg->keep_mapped) run->seg->keep_mapped = m;
  }
  /* A failed release keeps the page cached; PyTorch keeps no page cache. */
  (void)ga_pages_release_locked(&a->space, pytorch ? 0 : a->cfg.expandable_cache_max);
  /* The header's promise: a FREE block of at least `size` bytes in no tree,
   * of an expandable segment of r's pool and stream, starting where the run
   * did. */
  GA_ASSERT(run->state == GA_BLOCK_FREE && !run->in_tree && run->size >= size && run->ptr == lo &&
            run->seg->expandable && run->seg->priv == r->priv && run->size_class == r->size_class &&
            run->stream == r->stream);
  return 0;
}

/* ---- For the OOM report ---- */

size_t ga_move_stranded_locked(ga_allocator_t *a) {
  GA_ASSERT_LOCKED(a);
  return a->pol.trees[0].stranded + a->pol.trees[1].stranded; /* the trees' sums */
}
