/* alloc.c — malloc and free: PyTorch's allocation sequence.
 *
 * malloc: retire completed events; round; pick the pool and segment size;
 * best fit; on a miss: GC (with a fraction), a new segment, free oversize
 * cached blocks and retry, flush the whole cache and retry (counted in
 * num_alloc_retries); then the OOM report. A device error other than OOM
 * stops the ladder and is returned as GA_ERR_DEVICE.
 * free: find the block by pointer (hash map), diagnose bad pointers without
 * touching any state, then free now or after the recorded streams' events.
 */
#include <stdio.h>

#include "keep.h"

/* Free bytes that taking `size` from b would leave in partly used granules
 * (the better of front and back placement). */
static size_t partial(uintptr_t lo, uintptr_t hi, size_t g) {
  if (hi <= lo) return 0;
  uintptr_t a = (lo + g - 1) / g * g, b = hi / g * g;
  return b > a ? (a - lo) + (hi - b) : hi - lo;
}
static size_t stranded(const ga_allocator_t *a, const ga_block *b, size_t size) {
  uintptr_t lo = b->ptr, hi = b->ptr + b->size;
  size_t front = partial(lo + size, hi, a->space.gran), back = partial(lo, hi - size, a->space.gran);
  return front < back ? front : back;
}

/* What a free block can grow to without moving: its size and the unmapped
 * block after it (PyTorch's expandable_size in get_free_block). */
static size_t expandable_size(const ga_block *b) { return ga_alloc_growable(b->size, b->next); }

/* Best fit on (stream, size, tie, address) with the oversize rules; the block
 * found stays in its tree. Changes nothing (get_free_block counts the call). */
static inline ga_block *free_block_for(const ga_allocator_t *a, const ga_free_tree *p, ga_stream_t stream,
                                       size_t size) {
  ga_block *b = ga_free_tree_lower_bound(p, stream, size);
  if (!b || b->stream != stream) return NULL;
  if (ga_alloc_policy_walks(a)) {
    /* PyTorch's get_free_block (DeviceCachingAllocator): best fit by the size
     * a block can expand to. From the lower bound, step to the next free
     * block of the stream while that one's expandable size is smaller; stop
     * at a block of a native segment. So an interior hole is taken before
     * a free block at the growing end of a segment, which stays for growth.
     * expandable_move_pages:when_full is PyTorch's policy until the device
     * is full, so it walks too. */
    for (ga_block *n; b->seg->expandable && (n = ga_free_tree_next(p, b)) && n->stream == stream &&
                      expandable_size(n) < expandable_size(b);)
      b = n; /* the next is looked up only from a block of an expandable segment */
  } else if (!ga_alloc_fit_is_plain(a, b->seg)) {
    /* With pages of one granule (each free to move alone): among the few
     * best fits, take the one that strands the least free memory in partly
     * used granules. With larger pages, plain best fit serves better. */
    ga_block *best = b;
    size_t best_w = stranded(a, b, size);
    int k = 0;
    for (ga_block *n = ga_free_tree_next(p, b); n && n->stream == stream && k < 8;
         n = ga_free_tree_next(p, n), k++) {
      size_t w = stranded(a, n, size);
      if (w < best_w) best = n, best_w = w;
    }
    b = best;
  }
  if (ga_alloc_oversize_refuses(&a->cfg, size, b->size)) return NULL;
  GA_ASSERT(b->state == GA_BLOCK_FREE && b->in_tree && b->stream == stream && b->size >= size);
  return b; /* still in its tree: hand_out updates the tree once */
}

static ga_block *get_free_block(ga_allocator_t *a, ga_free_tree *trees, int size_class, ga_stream_t stream,
                                size_t size) {
  ga_free_tree *p = &trees[size_class];
  if (ga_limit_gc_on(a)) p->gc_calls++;
  ga_block *b = free_block_for(a, p, stream, size);
  GA_ASSERT(!b || b->size_class == size_class);
  return b;
}

const ga_block *ga_alloc_best_fit_locked(const ga_allocator_t *a, const ga_free_tree *trees, int size_class,
                                         ga_stream_t stream, size_t size) {
  GA_ASSERT_LOCKED(a);
  return free_block_for(a, &trees[size_class], stream, size);
}

/* Best fit among the blocks of native segments alone (one cudaMalloc'd
 * range each: GA_ALLOC_CONTIGUOUS_HANDLE in expandable mode). */
static ga_block *get_free_native(ga_allocator_t *a, ga_free_tree *trees, int size_class, ga_stream_t stream,
                                 size_t size) {
  ga_free_tree *p = &trees[size_class];
  for (ga_block *b = ga_free_tree_lower_bound(p, stream, size); b && b->stream == stream;
       b = ga_free_tree_next(p, b)) {
    if (b->seg->expandable) continue;
    if (ga_alloc_oversize_refuses(&a->cfg, size, b->size)) return NULL;
    GA_ASSERT(b->state == GA_BLOCK_FREE && b->in_tree && b->size >= size);
    return b;
  }
  return NULL;
}

/* A new native segment of r->alloc_size bytes for r, within the limit on
 * reserved bytes (r->limit_refused when it refuses). */
static int alloc_block(ga_allocator_t *a, ga_request *r, int retry) {
  if (retry) a->stats.num_alloc_retries++;
  if (!ga_limit_allows(a, a->space.reserved, r->alloc_size)) {
    r->limit_refused = 1;
    return GA_DEV_EOOM;
  }
  r->limit_refused = 0;
  return ga_native_new_locked(&a->space, r->alloc_size, r->size_class, r->stream, &r->block);
}

static ga_status_t device_error(ga_allocator_t *a, const char *what, ga_err rc) {
  return ga_fail(rc, "ga_malloc", a->dev->error, "while %s", what);
}

/* Native mode's ladder: GC, a new segment, free oversize blocks and retry,
 * flush everything and retry. */
static int grow_native(ga_allocator_t *a, ga_request *r) {
  int rc;
  if ((rc = ga_reclaim_gc_locked(a))) return rc;
  rc = alloc_block(a, r, 0);
  if (rc == GA_DEV_EOOM) {
    int enough, e = ga_reclaim_oversize_locked(a, r->size_class, r->stream, r->rounded, &enough);
    if (e) return e;
    if (enough) rc = alloc_block(a, r, 0);
  }
  if (rc == GA_DEV_EOOM && !a->pol.capture.routing) { /* flushing waits on streams: never during a capture */
    int e = ga_reclaim_all_locked(a);
    if (e) return e;
    rc = alloc_block(a, r, 1);
  }
  return rc;
}

/* PyTorch's alloc_block with expandable segments: the memory fraction's
 * test of alloc_size (what a new native segment would take) comes before
 * try_allocate_expandable_block reserves or maps anything, even where the
 * run to grow already has some of it mapped and free. The pages it then
 * maps are not tested against the fraction again (PyTorch maps whole pages,
 * and may pass the fraction by less than one); the budget (max_reserved_mb,
 * headroom_mb), not PyTorch's, bounds them as they are created (move.c). */
static int alloc_block_expandable(ga_allocator_t *a, ga_request *r, int retry) {
  if (retry) a->stats.num_alloc_retries++;
  if (!ga_fraction_allows(a, a->space.reserved, r->alloc_size)) {
    r->limit_refused = 1;
    return GA_DEV_EOOM;
  }
  return ga_move_grow_locked(a, r);
}

/* Expandable mode: map granules (cached, moved from free memory anywhere, or
 * new); if that fails, wait for pending stream events, which frees more
 * memory to move, and retry once. PyTorch's policy instead releases every
 * cached block and free page (release_cached_blocks) and retries. */
static int grow_expandable(ga_allocator_t *a, ga_request *r) {
  int rc = a->cfg.expandable_pytorch ? alloc_block_expandable(a, r, 0) : ga_move_grow_locked(a, r);
  if (rc != GA_DEV_EOOM || a->pol.capture.routing) return rc;
  if (a->cfg.expandable_pytorch) {
    /* PyTorch's malloc: alloc_block (try_allocate_expandable_block) failed;
     * garbage collection and release_available_cached_blocks skip expandable
     * blocks, so the next step is release_cached_blocks and alloc_block again. */
    int e = ga_reclaim_all_locked(a);
    if (e) return e;
    return alloc_block_expandable(a, r, 1);
  }
  int e = ga_stream_sync_all_locked(a);
  if (e) return e;
  a->stats.num_alloc_retries++;
  rc = ga_move_grow_locked(a, r);
  /* Memory pressure: what this failed request gathered goes back. */
  if (rc == GA_DEV_EOOM) (void)ga_pages_release_locked(&a->space, 0);
  return rc;
}

static void report_oom(ga_allocator_t *a, size_t tried, size_t rounded, int limit_refused, int budget);

/* Can `need` more bytes never fit in the budget (max_reserved_mb,
 * headroom_mb), even with every cached byte given back? Then the request
 * fails before any device call. Allocated bytes are a floor under what stays
 * reserved (expandable: whole granules of them). */
static int past_budget(ga_allocator_t *a, size_t need) {
  size_t budget = a->pol.budget_max;
  if (budget == SIZE_MAX) return 0;
  ga_stats_sync(&a->stats, &a->hot); /* the counters of allocations folded in */
  size_t held = (size_t)a->stats.allocated_bytes[GA_POOL_ALL].current;
  if (a->cfg.expandable_segments) need = (need + a->space.gran - 1) / a->space.gran * a->space.gran;
  return held > budget || need > budget - held;
}

ga_status_t ga_alloc_locked(ga_allocator_t *a, size_t size, ga_stream_t stream, void **out) {
  GA_ASSERT_LOCKED(a);
  /* The free kept back (block.c), when this allocation would take it again. */
  if (a->pol.kept && size <= GA_MAX_REQUEST) {
    ga_block *b = ga_block_keep_reuse_locked(a, size, stream);
    if (b) {
      *out = (void *)b->ptr;
      return GA_OK;
    }
  }
  return ga_alloc_flags_locked(a, size, stream, 0, out);
}

/* Out of line: ga_alloc_locked's path through the free kept back stays short. */
__attribute__((noinline)) ga_status_t ga_alloc_flags_locked(ga_allocator_t *a, size_t size,
                                                            ga_stream_t stream, unsigned flags, void **out) {
  GA_ASSERT_LOCKED(a);
  ga_block_keep_flush_locked(a);
  /* One physical allocation: in expandable mode a native segment. */
  int contiguous = (flags & GA_ALLOC_CONTIGUOUS_HANDLE) && a->cfg.expandable_segments;
  if (size > GA_MAX_REQUEST) {
    ga_error_set("CUDA out of memory. Tried to allocate more than 1EB memory. (ga_malloc of %zu bytes)",
                 size);
    return GA_ERR_OOM;
  }
  /* Not during a capture; with deterministic:True not by the GPU's timing
   * (which events have completed) but at a cache miss, below. */
  if (a->pol.streams.npending && !a->pol.capture.routing && !a->cfg.deterministic)
    ga_stream_process_events_locked(a);
  /* A page mapped earlier without its peers' access is fixed before anything
   * is handed out. */
  if (a->space.regrant) {
    /* During a capture, device calls run in the relaxed capture mode (as
     * PyTorch's cudaMalloc does), so they do not invalidate it. */
    ga_relax r;
    int rc = ga_capture_relax_locked(a, &r);
    if (!rc) rc = ga_expandable_regrant_locked(&a->space);
    ga_capture_unrelax_locked(a, &r);
    if (rc) {
      ga_error_set("ga_malloc: cannot give peer devices access to expandable memory: %s", a->dev->error);
      return GA_ERR_DEVICE;
    }
  }
  size_t rounded = ga_round_size(&a->cfg, size);
  int size_class = rounded <= GA_SMALL_SIZE ? GA_CLASS_SMALL : GA_CLASS_LARGE;
  int fresh = 0, rc, in_tree = 1;
  ga_private *priv = a->pol.capture.routing ? ga_private_routed_locked(a, stream) : NULL;
  ga_free_tree *trees = priv ? priv->trees : a->pol.trees;
  ga_block *b = contiguous ? get_free_native(a, trees, size_class, stream, rounded)
                           : get_free_block(a, trees, size_class, stream, rounded);
  if (!b && a->cfg.deterministic && a->pol.streams.npending && !a->pol.capture.routing) {
    /* deterministic:True: frees waiting on other streams become free at the
     * first cache miss after them, whatever the GPU has done: they are waited
     * for here (a stall only where the GPU is behind), then the cache is
     * searched again. A failed wait leaves those blocks pending. */
    (void)ga_stream_sync_all_locked(a);
    b = contiguous ? get_free_native(a, trees, size_class, stream, rounded)
                   : get_free_block(a, trees, size_class, stream, rounded);
  }
  if (!b) {
    in_tree = 0;
    ga_relax r;
    /* private pools too, as in current PyTorch */
    int expandable = a->cfg.expandable_segments && !contiguous;
    ga_request req = {.rounded = rounded,
                      .alloc_size = ga_allocation_size_for(&a->cfg, rounded),
                      .stream = stream,
                      .size_class = size_class,
                      .priv = priv};
    size_t tried = expandable ? rounded : req.alloc_size; /* PyTorch's "Tried to allocate" */
    if (past_budget(a, tried)) {
      a->stats.num_ooms++;
      report_oom(a, tried, rounded, 0, 1);
      return GA_ERR_OOM;
    }
    fresh = !expandable;
    if ((rc = ga_capture_relax_locked(a, &r)))
      return device_error(a, "entering the relaxed capture mode", rc);
    rc = expandable ? grow_expandable(a, &req) : grow_native(a, &req);
    b = req.block;
    /* The ladder's promise (ga_request.block) */
    GA_ASSERT(rc || (b->state == GA_BLOCK_FREE && !b->in_tree && b->size >= rounded &&
                     b->size_class == size_class && b->stream == stream));
    if (!rc && priv && !expandable) { /* a new native segment joins the pool */
      b->seg->priv = priv;
      ga_private_segment_new_locked(a, priv);
    }
    ga_capture_unrelax_locked(a, &r);
    if (rc == GA_DEV_EOOM) {
      a->stats.num_ooms++;
      ga_alloc_report_oom_locked(a, tried, rounded, req.limit_refused);
      return GA_ERR_OOM;
    }
    if (rc) return device_error(a, "obtaining device memory", rc);
  }
  ga_block *got = ga_block_hand_out_locked(a, b, size, rounded, in_tree);
  if (!got) {
    /* Host OOM for bookkeeping: put the block back where it came from. */
    if (fresh)
      (void)ga_reclaim_native_locked(a, b);
    else if (!in_tree)
      ga_block_to_free_tree_locked(a, b);
    return ga_fail(GA_DEV_ENOMEM, "ga_malloc", NULL, "for bookkeeping (%zu bytes asked)", size);
  }
  GA_ASSERT(ga_block_live_locked(a, got->ptr) == got);
  *out = (void *)got->ptr;
  return GA_OK;
}

/* Names what is wrong with a pointer that is not a live allocation. */
static void diagnose_bad_free(ga_allocator_t *a, const char *fn, void *ptr) {
  uintptr_t p = (uintptr_t)ptr;
  for (ga_segment *seg = a->space.segs; seg; seg = seg->next) {
    if (p < seg->base || p - seg->base >= seg->size) continue;
    for (ga_block *b = seg->head; b; b = b->next) {
      if (p < b->ptr || p - b->ptr >= b->size) continue;
      if (b->ptr != p && b->state != GA_BLOCK_FREE)
        ga_error_set(
            "%s: %p points %zu bytes inside the allocation at %p (%zu bytes); pass the pointer "
            "ga_malloc returned",
            fn, ptr, (size_t)(p - b->ptr), (void *)b->ptr, b->size);
      else if (b->state == GA_BLOCK_PENDING)
        ga_error_set("%s: %p was already freed (double free; its block still waits on stream events)", fn,
                     ptr);
      else
        ga_error_set(
            "%s: %p is not a live allocation: it lies in cached free memory of this allocator "
            "(already freed: double free?)",
            fn, ptr);
      return;
    }
  }
  ga_error_set("%s: %p was not allocated by this allocator", fn, ptr);
}

/* ga_free of b when it is asleep, has stream uses or waits for events: out
 * of line, so that the common free stays short. */
__attribute__((noinline)) static ga_status_t free_slow(ga_allocator_t *a, ga_block *b) {
  void *ptr = (void *)b->ptr;
  if (b->asleep) {
    ga_error_set("ga_free: %p is asleep (ga_sleep); call ga_wake before freeing it", ptr);
    return GA_ERR_INVALID;
  }
  if (ga_stream_free_room_locked(a, b)) {
    return ga_fail(GA_DEV_ENOMEM, "ga_free", NULL, "for the stream events of %p; it is still allocated", ptr);
  }
  size_t size = b->size;
  ga_history_add_locked(a, GA_H_FREE_REQUESTED, b->ptr, b->requested, b->stream);
  if (b->size >= a->cfg.max_split_size) ga_stat_dec(&a->stats.oversize_allocations, 1);
  ga_hot_free(&a->hot, b->size_class, b->size);
  if (ga_stream_free_locked(a, b)) {
    /* As close(2): the pointer is freed all the same. */
    ga_error_set(
        "ga_free: %p is freed, but a stream that used it could be neither given an event nor waited for "
        "(%s): its %zu bytes stay out of use until one can (quarantined_bytes)",
        ptr, a->dev->error, size);
    return GA_ERR_DEVICE;
  }
  return GA_OK;
}

__attribute__((noinline)) static ga_status_t bad_free(ga_allocator_t *a, void *ptr) {
  diagnose_bad_free(a, "ga_free", ptr);
  return GA_ERR_BAD_POINTER;
}

ga_status_t ga_free_locked(ga_allocator_t *a, void *ptr) {
  GA_ASSERT_LOCKED(a);
  ga_block_keep_flush_locked(a);
  /* Exported to another process that still imports it: refused, unchanged. */
  if (a->pol.ipc && ga_ipc_free_check_locked(a, ptr) != GA_OK) return GA_ERR_INVALID;
  /* ga_block_live_locked, where no free is kept back (flushed above). */
  ga_block *b = ga_blockmap_get(&a->pol.map, (uintptr_t)ptr);
  if (!b || b->state != GA_BLOCK_ALLOCATED) return bad_free(a, ptr);
  if (b->asleep || b->nuses || b->event_count) return free_slow(a, b);
  /* No stream to wait for (ga_stream_free_locked's case of none): freed
   * now, or kept back for the next allocation (the counters of its free
   * wait until then). Its entry stays in the map either way. */
  ga_history_add_locked(a, GA_H_FREE_REQUESTED, b->ptr, b->requested, b->stream);
  if (b->size >= a->cfg.max_split_size) ga_stat_dec(&a->stats.oversize_allocations, 1);
  b->state = GA_BLOCK_PENDING;
  if (!ga_block_free_keep_locked(a, b)) {
    ga_hot_free(&a->hot, b->size_class, b->size);
    ga_block_free_locked(a, b);
  }
  return GA_OK;
}

ga_status_t ga_bad_pointer_locked(ga_allocator_t *a, const char *fn, void *ptr) {
  GA_ASSERT_LOCKED(a);
  diagnose_bad_free(a, fn, ptr);
  return GA_ERR_BAD_POINTER;
}

const ga_block *ga_alloc_containing_locked(ga_allocator_t *a, uintptr_t p) {
  GA_ASSERT_LOCKED(a);
  for (ga_segment *seg = a->space.segs; seg; seg = seg->next) {
    if (p < seg->base || p - seg->base >= seg->size) continue;
    for (ga_block *b = seg->head; b; b = b->next)
      if (p >= b->ptr && p - b->ptr < b->size) return b->state == GA_BLOCK_ALLOCATED ? b : NULL;
  }
  return NULL;
}

/* ---- The OOM report's facts ---- */

static void report_oom(ga_allocator_t *a, size_t tried, size_t rounded, int limit_refused, int budget) {
  ga_stats_sync(&a->stats, &a->hot);
  ga_oom_facts f = {.device = a->dev->ordinal,
                    .tried = tried,
                    .rounded = rounded,
                    .gran = a->space.gran,
                    .total = a->pol.device_total,
                    .allowed = a->pol.allowed_max,
                    .allocated = (size_t)a->stats.allocated_bytes[GA_POOL_ALL].current,
                    .reserved = a->space.reserved,
                    .expandable = a->cfg.expandable_segments,
                    .limit_refused = limit_refused,
                    .budget_refused = budget,
                    .budget = a->pol.budget_max};
  /* Past the budget no device call is made, not even this query. */
  f.have_free = !budget && ga_dev_mem_info(a->dev, &f.free, &f.total) == 0;
  ga_history_add_locked(a, GA_H_OOM, f.free, rounded, NULL); /* PyTorch records the rounded request */
  /* The largest free block, and the free bytes that lie in whole granules
   * (memory that expandable segments could map elsewhere): from the trees'
   * sums, without a walk over the free blocks. */
  for (int p = 0; p < 2; p++) {
    const ga_free_tree *t = &a->pol.trees[p];
    f.largest_pool[p] = ga_free_tree_largest(t);
    if (f.largest_pool[p] > f.largest_free) f.largest_free = f.largest_pool[p];
    f.cached_free += t->bytes;
    f.movable += t->whole_bytes;
  }
  if (f.expandable) f.stranded = ga_move_stranded_locked(a);
  ga_report_oom(&f);
}

void ga_alloc_report_oom_locked(ga_allocator_t *a, size_t tried, size_t rounded, int limit_refused) {
  GA_ASSERT_LOCKED(a);
  report_oom(a, tried, rounded, limit_refused, 0);
}
