/* policy.h — the policy layer: WHAT to hand out, to whom and when.
 *
 * Owns the free trees (best fit), splitting and merging with PyTorch's rules,
 * the block map, stream-ordered reuse (events, fences), the retry ladder and
 * every choice of what goes back to the device or moves (policy/move.c), the
 * private pools of CUDA-graph capture, tags and sleep/wake. It calls down
 * into segment/ for the mechanics and into device/ for streams and events.
 *
 * Internal functions return 0 or a GA_DEV_* code (errors.h). The entry
 * points api.c dispatches to are named after the public call (*_locked) and
 * return its ga_status_t with the error text set, since only they know what
 * to say. Every *_locked function needs the allocator's lock.
 */
#ifndef GA_POLICY_H
#define GA_POLICY_H

#include "../segment/segment.h"
#include "rounding.h"
#include "state.h"

/* ---- Free trees (free_tree.c) ---- */
/* An empty tree of blocks of space's segments. */
void ga_free_tree_init(ga_free_tree *t, const ga_space *space);
/* pre: b in no tree. */
void ga_free_tree_insert(ga_free_tree *t, ga_block *b);
/* pre: b in t. */
void ga_free_tree_remove(ga_free_tree *t, ga_block *b);
/* Tree order is (stream, size, tie, ptr): among free blocks of one stream
 * and size, with deterministic:True the one of the earliest created segment
 * first (ga_block.tie), then (and always otherwise) the lowest address. */
/* x is in t under the key (x->stream, xsize, x->tie, xptr); y (x itself,
 * changed, or a block of its segment that took its memory) goes there
 * instead, in one descent when it fits x's place. */
void ga_free_tree_rekey(ga_free_tree *t, ga_block *x, size_t xsize, uintptr_t xptr, ga_block *y);
/* The first block of `stream` at least `size` long in tree order (best fit),
 * or the first block after them (another stream's, or NULL). */
ga_block *ga_free_tree_lower_bound(const ga_free_tree *t, ga_stream_t stream, size_t size);
/* The block after b's key in tree order (b in t or not), or NULL. */
ga_block *ga_free_tree_next(const ga_free_tree *t, const ga_block *b);
/* The first block at or after the key (stream, size, tie, ptr) in tree
 * order, or NULL: a walk goes on from a key whose block has changed. */
ga_block *ga_free_tree_at(const ga_free_tree *t, ga_stream_t stream, size_t size, uint32_t tie,
                          uintptr_t ptr);
/* Would lower_bound(stream, size) give a block keyed as kb (not in the tree)
 * but with the size ksize >= size, were it in the tree, with `instead` (a
 * block of the tree, or NULL) taken out? One descent; *after is then the
 * block that would follow it in tree order (NULL when none). */
int ga_free_tree_first_is(const ga_free_tree *t, ga_stream_t stream, size_t size, size_t ksize,
                          const ga_block *kb, const ga_block *instead, ga_block **after);
/* The last block before the first of (stream, size) in tree order, or NULL. */
ga_block *ga_free_tree_before(const ga_free_tree *t, ga_stream_t stream, size_t size);
/* The block before b's key in tree order (b in t or not), or NULL. */
ga_block *ga_free_tree_prev(const ga_free_tree *t, const ga_block *b);
/* Does t find b (FREE) under its key? */
int ga_free_tree_holds(const ga_free_tree *t, const ga_block *b);
/* Calls fn on every block in order; stops early when fn returns non-zero.
 * fn must not change the tree. */
int ga_free_tree_walk(const ga_free_tree *t, int (*fn)(ga_block *, void *), void *arg);
/* Is the tree ordered, a heap, with every node marked in_tree? Counts nodes into *n. */
int ga_free_tree_valid(const ga_free_tree *t, size_t *n);
/* Do the tree's sums and marks of whole granules hold? *bad: a block with
 * wrong marks, or NULL. */
int ga_free_tree_sums_valid(const ga_free_tree *t, const ga_block **bad);
/* The first block at or after the key (stream, size, tie, ptr) in tree order
 * (of that stream or a later one) that holds a whole granule of an
 * expandable segment that could be unmapped (ga_expandable_movable_locked
 * holds), or NULL: O(log n) amortised, however many blocks it passes. It
 * tightens marks in the tree: not during a walk. */
ga_block *ga_free_tree_whole_at(ga_free_tree *t, ga_stream_t stream, size_t size, uint32_t tie,
                                uintptr_t ptr);
/* The size of the largest block, 0 when none: O(log n) per stream. */
size_t ga_free_tree_largest(const ga_free_tree *t);

/* The free trees a block belongs to: its private pool's or the general ones. */
static inline ga_free_tree *ga_trees_of(ga_allocator_t *a, const ga_block *b) {
  return b->seg->priv ? b->seg->priv->trees : a->pol.trees;
}

/* ---- Blocks (block.c) ---- */
/* Puts a FREE-to-be block into its pool's free tree, counting inactive_split. */
void ga_block_to_free_tree_locked(ga_allocator_t *a, ga_block *b);
/* Takes a block out of its free tree, undoing the inactive_split count. */
void ga_block_from_free_tree_locked(ga_allocator_t *a, ga_block *b);
/* Hands out `b` (in its free tree when in_tree, else in none) for `size`
 * bytes asked, rounded to `rounded`; returns the allocated block (the front
 * of b, or in expandable segments possibly its back), NULL on host OOM (b
 * unchanged, still where it was). */
ga_block *ga_block_hand_out_locked(ga_allocator_t *a, ga_block *b, size_t size, size_t rounded, int in_tree);
/* The live allocation at ptr (ALLOCATED, or the free kept back, which
 * still counts as allocated), or NULL. The block map also holds blocks freed
 * since they were handed out (policy/block.c). */
ga_block *ga_block_live_locked(const ga_allocator_t *a, uintptr_t ptr);
/* Makes an ALLOCATED/PENDING block FREE: merge with free neighbours, insert. */
void ga_block_free_locked(ga_allocator_t *a, ga_block *b);

/* The client's free of b (PENDING, no stream uses): kept back for the next
 * allocation when block.c's conditions hold (1: it still counts as
 * allocated until then), else 0 and nothing done. At most one free is kept
 * back (a->pol.kept). */
int ga_block_free_keep_locked(ga_allocator_t *a, ga_block *b);
/* The allocation of `size` bytes (<= GA_MAX_REQUEST) on `stream` from the general
 * trees, served by the free kept back when the allocation as made would
 * give exactly that block; NULL (nothing changed) otherwise. */
ga_block *ga_block_keep_reuse_locked(ga_allocator_t *a, size_t size, ga_stream_t stream);
/* Completes the free kept back (a->pol.kept, not NULL); callers use
 * keep.h's ga_block_keep_flush_locked. */
void ga_block_keep_flush_slow_locked(ga_allocator_t *a);

/* ---- Streams (stream.c) ---- */
/* Adds stream to the streams that use b (record_stream): 0, or GA_DEV_ENOMEM. */
ga_err ga_stream_record_locked(ga_allocator_t *a, ga_block *b, ga_stream_t stream);
/* Room for the pending entries the free of b may need (0 or GA_DEV_ENOMEM):
 * called before anything changes, so that the free itself cannot fail. */
int ga_stream_free_room_locked(ga_allocator_t *a, const ga_block *b);
/* Client free of an allocated block: events for other streams, else free.
 * Returns how many of its streams could be neither given an event nor
 * waited for: the block is then quarantined (quarantined_bytes). */
int ga_stream_free_locked(ga_allocator_t *a, ga_block *b);
/* Frees the blocks whose events have completed. */
void ga_stream_process_events_locked(ga_allocator_t *a);
/* Waits for every pending event and frees the blocks. */
int ga_stream_sync_all_locked(ga_allocator_t *a);
/* A capture ended: the frees it deferred record their events now. */
void ga_stream_capture_ended_locked(ga_allocator_t *a);
/* Is memory freed on `stream` at free_seq surely no longer used by it?
 * *idle = 1 when a fence the stream has passed proves it (one recorded now
 * passes at once when nothing is queued on the stream). Otherwise, with
 * `wait`, the stream is synchronised (*waited = 1, and *idle = 1); without,
 * *idle = 0 and nothing waits. */
int ga_stream_fence_locked(ga_allocator_t *a, ga_stream_t stream, uint64_t free_seq, int wait, int *idle,
                           int *waited);
/* Keeps a fence for `stream` from now on (it has free memory that may move). */
void ga_stream_fence_watch_locked(ga_allocator_t *a, ga_stream_t stream);
/* Records fences on the streams watched, for the next time. */
void ga_stream_fences_refresh_locked(ga_allocator_t *a);
/* Destroys the cached events (at teardown). */
void ga_stream_teardown_locked(ga_allocator_t *a);

/* ---- CUDA-graph capture (capture.c) ---- */
/* ga_begin_allocate_to_pool, ga_end_allocate_to_pool, ga_release_pool. */
ga_status_t ga_capture_begin_locked(ga_allocator_t *a, uint64_t id, ga_stream_t stream);
ga_status_t ga_capture_end_locked(ga_allocator_t *a, uint64_t id);
/* A capture began (begin != 0) whose streams are routed later, or it ended:
 * until then a capture is underway as if a stream were routed. */
ga_status_t ga_capture_announce_locked(ga_allocator_t *a, int begin);
ga_status_t ga_capture_release_locked(ga_allocator_t *a, uint64_t id);
/* The relaxed capture mode around device calls made while a capture is
 * underway (a no-op otherwise): relax, the calls, unrelax. Relax returns the
 * device's code when the mode cannot be changed: the caller then makes no
 * call that a capture forbids. */
typedef struct ga_relax {
  int on, prev;
} ga_relax;
int ga_capture_relax_locked(ga_allocator_t *a, ga_relax *r);
void ga_capture_unrelax_locked(ga_allocator_t *a, ga_relax *r);
/* During a capture: is `stream` capturing (or can that not be told)? Such a
 * stream may not be synchronised. 0 when no capture is underway. */
int ga_capture_is_capturing_locked(ga_allocator_t *a, ga_stream_t stream);

/* ---- Private pools' records (private.c) ---- */
ga_private *ga_private_find_locked(ga_allocator_t *a, uint64_t id);
/* A new private pool `id` (serving no stream yet). */
int ga_private_new_locked(ga_allocator_t *a, uint64_t id, ga_private **out);
/* Frees the record (it holds no segment). */
void ga_private_delete_locked(ga_allocator_t *a, ga_private *priv);
/* The private pool serving `stream` now, or NULL. */
ga_private *ga_private_routed_locked(ga_allocator_t *a, ga_stream_t stream);
/* A segment of private pool priv was created / released; priv's record is
 * deleted when the last segment of a released pool that serves no stream is
 * released. */
void ga_private_segment_new_locked(ga_allocator_t *a, ga_private *priv);
void ga_private_segment_released_locked(ga_allocator_t *a, ga_private *priv);
/* Native segments of priv (the rest are expandable). */
size_t ga_private_native_segments_locked(ga_allocator_t *a, ga_private *priv);
void ga_private_teardown_locked(ga_allocator_t *a);
/* ga_pool_generation. */
ga_status_t ga_private_generation_locked(ga_allocator_t *a, uint64_t id, uint64_t *gen);

/* ---- One request on its way down the retry ladder (alloc.c) ----
 * What ga_malloc was asked for, once the cache has missed (PyTorch's
 * AllocParams): each step of the ladder reads the request, fills in what it
 * found and returns 0 or a GA_DEV_* code (the error). */
typedef struct ga_request {
  size_t rounded;     /* ga_round_size of what the client asked for: the size of the block handed out */
  size_t alloc_size;  /* a new native segment's size for it (ga_allocation_size_for) */
  ga_stream_t stream; /* the stream it is for */
  int size_class;     /* its size class: GA_CLASS_SMALL or GA_CLASS_LARGE */
  ga_private *priv;   /* the private pool it is routed to, or NULL */
  /* What the ladder found */
  ga_block *block;   /* a FREE block of at least `rounded` bytes, in no tree */
  int limit_refused; /* the limit on reserved bytes refused a new segment or handle */
} ga_request;

/* ---- What moves, and when that is safe (move.c) ---- */
/* Finds or makes room for r->rounded contiguous bytes on (r->priv, r->size_class,
 * r->stream) in expandable segments, moving or creating memory; r->block is
 * a FREE block of at least that many bytes in no tree. EOOM when even moving
 * every free granule cannot hold it (r->limit_refused: the limit on
 * reserved bytes refused it). */
int ga_move_grow_locked(ga_allocator_t *a, ga_request *r);
/* At least n granules in the page cache for r->size_class: cached ones, then whole
 * free granules anywhere but [keep_lo, keep_hi) (never during a capture),
 * then new handles of at most a page of the pool (GA_SMALL_BUFFER, or
 * pol.large_page); new handles first with expandable_move_pages:when_full.
 * Sets r->limit_refused. */
int ga_move_obtain_locked(ga_allocator_t *a, ga_request *r, size_t n, uintptr_t keep_lo, uintptr_t keep_hi);
/* Unmaps granules [g0, g1) of FREE block b (in its tree; its stream known to
 * be past its free) into the page cache; the free remainders go back to the
 * tree. On failure b is back in its tree. */
int ga_move_unmap_free_locked(ga_allocator_t *a, ga_block *b, size_t g0, size_t g1);
/* Bytes of free cached memory in partly used granules (the OOM report). */
size_t ga_move_stranded_locked(ga_allocator_t *a);

/* ---- Reclaim (reclaim.c) ---- */
int ga_reclaim_gc_locked(ga_allocator_t *a);
/* Frees oversize cached blocks of (size_class, stream) to make room for `size`
 * bytes; *enough says whether it freed enough. */
int ga_reclaim_oversize_locked(ga_allocator_t *a, int size_class, ga_stream_t stream, size_t size,
                               int *enough);
/* empty_cache: wait for events, give back every unsplit cached native block,
 * every whole free granule of expandable segments, released private pools. */
int ga_reclaim_all_locked(ga_allocator_t *a);
/* Gives a whole-segment FREE block (in no tree) back with its segment, and
 * keeps its private pool's count. */
int ga_reclaim_native_locked(ga_allocator_t *a, ga_block *b);
/* Unmaps every whole free granule of the general expandable segments and of
 * released private pools no stream uses (`priv`: that private pool's), and
 * gives back empty reservations and unused handles. */
int ga_reclaim_expandable_locked(ga_allocator_t *a, ga_private *priv);
/* Gives the whole free native segments of private pool priv back (priv may be
 * freed with its last one). */
int ga_reclaim_private_locked(ga_allocator_t *a, ga_private *priv);

/* ---- Sleep and wake (sleep.c) ---- */
/* ga_tag, ga_sleep, ga_wake. */
ga_status_t ga_tag_locked(ga_allocator_t *a, void *ptr, const char *tag);
ga_status_t ga_sleep_locked(ga_allocator_t *a, const char *tags, unsigned flags);
ga_status_t ga_wake_locked(ga_allocator_t *a);
ga_status_t ga_sleep_mode_locked(ga_allocator_t *a, const char *tag, int mode);
/* ga_free, or, for an allocation asleep, marks it to be freed by the wake
 * that maps it again (GA_OK). */
ga_status_t ga_free_at_wake_locked(ga_allocator_t *a, void *ptr);
/* Frees what ga_sleep kept on the host. */
void ga_sleep_teardown_locked(ga_allocator_t *a);

/* ---- Peer devices (peers.c) ---- */
/* ga_enable_peer_access. */
ga_status_t ga_peers_enable_locked(ga_allocator_t *a, int peer);

/* ---- Sharing with other processes (ipc.c) ---- */
/* ga_ipc_export, ga_ipc_import, ga_ipc_close. */
ga_status_t ga_ipc_export_locked(ga_allocator_t *a, void *ptr, ga_ipc_desc_t *desc);
ga_status_t ga_ipc_import_locked(ga_allocator_t *a, const ga_ipc_desc_t *desc, void **ptr);
ga_status_t ga_ipc_close_locked(ga_allocator_t *a, void *ptr);
/* ga_ipc_export_fabric, ga_ipc_import_fabric, ga_ipc_unexport. */
ga_status_t ga_ipc_export_fabric_locked(ga_allocator_t *a, void *ptr, ga_ipc_fabric_desc_t *desc);
ga_status_t ga_ipc_import_fabric_locked(ga_allocator_t *a, const ga_ipc_fabric_desc_t *desc, void **ptr);
ga_status_t ga_ipc_unexport_locked(ga_allocator_t *a, void *ptr);
/* Before ga_free of ptr: GA_OK, or the refusal while another process holds
 * an import of it (the error text set). */
ga_status_t ga_ipc_free_check_locked(ga_allocator_t *a, void *ptr);
/* Is the allocation at p exported? */
int ga_ipc_exported_locked(ga_allocator_t *a, uintptr_t p);
/* Device objects the imports hold (ga_check's cross-check). */
void ga_ipc_usage_locked(ga_allocator_t *a, size_t *handles, size_t *mappings, size_t *reservations);
/* Closes every import and export (ga_destroy). */
void ga_ipc_teardown_locked(ga_allocator_t *a);

/* ---- Would these fit? (fit.c) ---- */
/* ga_would_fit and ga_largest_free: a model of the state, nothing changes
 * (one mem_info call). */
ga_status_t ga_fit_would_fit_locked(ga_allocator_t *a, const size_t *sizes, size_t n, ga_stream_t stream,
                                    size_t *fit);
ga_status_t ga_fit_largest_locked(ga_allocator_t *a, ga_stream_t stream, size_t *cached, size_t *with_call);

/* ---- Allocation (alloc.c) ---- */
/* What get_free_block and hand_out choose, for the free kept back
 * (block.c), which relies on these: whatever changes their choice must
 * change these too.
 * Plain: best fit on (stream, size, address), and a split hands out the
 * front. Not so in expandable segments with pages of one granule under
 * gardenalloc's own policy, which weighs the few best fits and may take
 * the back. */
static inline int ga_alloc_fit_is_plain(const ga_allocator_t *a, const ga_segment *seg) {
  return !(a->pol.fit_weighs && seg->expandable);
}
/* PyTorch's walk (expandable_policy:pytorch, expandable_move_pages:when_full):
 * from the best fit in an expandable segment, on to the next free block of
 * the stream while its expandable size (ga_alloc_growable) is smaller. */
static inline int ga_alloc_policy_walks(const ga_allocator_t *a) {
  return a->pol.fit_walks; /* expandable segments under PyTorch's policy or when_full */
}
static inline int ga_alloc_fit_walks(const ga_allocator_t *a, const ga_segment *seg) {
  return seg->expandable && ga_alloc_policy_walks(a);
}
/* PyTorch's oversize rules in get_free_block: a block of `block` bytes
 * refuses a request rounded to `rounded` when the request is under
 * max_split_size and the block is not, or when both are past it and the
 * block would leave max_non_split_rounding or more unused. */
static inline int ga_alloc_oversize_refuses(const ga_config *c, size_t rounded, size_t block) {
  if (rounded < c->max_split_size) return block >= c->max_split_size;
  return block - rounded >= c->max_non_split_rounding;
}
/* The bytes of a handle created for `size_class` in expandable segments: a
 * page of it. */
static inline size_t ga_page_of(const ga_allocator_t *a, int size_class) {
  return size_class == GA_CLASS_SMALL ? GA_SMALL_BUFFER : a->pol.large_page;
}
/* What a free block of `size` bytes followed by `next` can grow to without
 * moving: its size and the unmapped block after it (PyTorch's expandable_size). */
static inline size_t ga_alloc_growable(size_t size, const ga_block *next) {
  return size + (next && next->state == GA_BLOCK_UNMAPPED ? next->size : 0);
}
/* ga_malloc and ga_free (size > 0, ptr != NULL). */
ga_status_t ga_alloc_locked(ga_allocator_t *a, size_t size, ga_stream_t stream, void **out);
/* The free block ga_malloc's best fit would hand out for a request rounded
 * to `size` of pool size_class on `stream` from `trees` (PyTorch's
 * get_free_block: the walk by expandable size, the default policy's choice
 * among best fits, the oversize rules), or NULL; changes nothing. */
const ga_block *ga_alloc_best_fit_locked(const ga_allocator_t *a, const ga_free_tree *trees, int size_class,
                                         ga_stream_t stream, size_t size);
ga_status_t ga_free_locked(ga_allocator_t *a, void *ptr);
/* ga_malloc_flags (size > 0). */
ga_status_t ga_alloc_flags_locked(ga_allocator_t *a, size_t size, ga_stream_t stream, unsigned flags,
                                  void **out);
/* ga_mem_ranges: the physical pieces behind the live allocation holding ptr. */
ga_status_t ga_layout_ranges_locked(ga_allocator_t *a, void *ptr, ga_mem_range_t *out, size_t cap, size_t *n);
/* Sets the error text for a pointer that is not a live allocation. */
ga_status_t ga_bad_pointer_locked(ga_allocator_t *a, const char *fn, void *ptr);
/* The live allocation whose bytes include p, or NULL. */
const ga_block *ga_alloc_containing_locked(ga_allocator_t *a, uintptr_t p);
/* Writes the OOM report into the thread's error text and records the OOM in
 * the history: `tried` is the device allocation attempted (PyTorch's "Tried
 * to allocate"), `rounded` the rounded request. */
void ga_alloc_report_oom_locked(ga_allocator_t *a, size_t tried, size_t rounded, int limit_refused);

/* ---- The layer as a whole (lifetime.c) ---- */
/* Sets up the policy of a new allocator for a device of `total` bytes. 0,
 * GA_DEV_ENOMEM, or GA_DEV_EINVAL when a size derived from the settings (the
 * page size, the expandable reservation) does not fit in a size_t. */
int ga_policy_init_locked(ga_allocator_t *a, size_t total);
/* The memory fraction (1.0: none); the limit is the lower of it and the
 * budget (max_reserved_mb, headroom_mb). */
void ga_policy_set_fraction_locked(ga_allocator_t *a, double fraction);

/* ---- The limit on reserved bytes: the one home of its tests ----
 * a->pol.allowed_max, set by ga_policy_set_fraction_locked: SIZE_MAX when
 * no limit is set. `reserved` is the allocator's (a->space.reserved) or a
 * model's of it (fit.c). */
/* May `bytes` more be reserved? (alloc_block's test against
 * allowed_memory_maximum in PyTorch.) */
static inline int ga_limit_room(size_t lim, size_t reserved, size_t bytes) {
  return lim == SIZE_MAX || (reserved <= lim && bytes <= lim - reserved);
}
static inline int ga_limit_allows(const ga_allocator_t *a, size_t reserved, size_t bytes) {
  return ga_limit_room(a->pol.allowed_max, reserved, bytes);
}
/* PyTorch's test alone: may `bytes` more be reserved under the memory
 * fraction (the budget aside)? */
static inline int ga_fraction_allows(const ga_allocator_t *a, size_t reserved, size_t bytes) {
  return ga_limit_room(a->pol.fraction_max, reserved, bytes);
}
/* The bytes that may still be reserved: SIZE_MAX without a limit, 0 past it. */
static inline size_t ga_limit_left(const ga_allocator_t *a, size_t reserved) {
  size_t lim = a->pol.allowed_max;
  return lim == SIZE_MAX ? SIZE_MAX : lim > reserved ? lim - reserved : 0;
}
/* Does garbage collection run? PyTorch's: a limit is set and
 * garbage_collection_threshold > 0 (each get_free_block then ages the
 * large pool's free blocks). */
static inline int ga_limit_gc_on(const ga_allocator_t *a) {
  return a->pol.allowed_max != SIZE_MAX && a->cfg.gc_threshold > 0.0;
}
/* The reserved bytes garbage collection brings the allocator down to. */
static inline size_t ga_limit_gc_threshold(const ga_allocator_t *a) {
  return (size_t)(a->cfg.gc_threshold * (double)a->pol.allowed_max);
}
/* Waits for pending events, then frees everything the policy holds; the
 * segment layer goes last (ga_space_teardown_locked). */
void ga_policy_teardown_locked(ga_allocator_t *a);

#endif /* GA_POLICY_H */
