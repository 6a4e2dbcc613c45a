/* internal.h — the allocator's shared structures and internal functions.
 *
 * Layers: api.c (validate, lock, dispatch) → policy/ (what to hand out) →
 * segment/ (where the bytes live) → device/ (how memory is obtained).
 * Functions named *_locked require the caller to hold a->mu.
 *
 * Block states:
 *   FREE      in its pool's free tree, merged with free neighbours
 *   ALLOCATED in the block map, handed to a client
 *   PENDING   freed by the client, waiting for events on other streams
 *   UNMAPPED  (expandable segments) reserved address space with no memory
 *             behind it; granule-aligned; merged with UNMAPPED neighbours
 * Invariants (ga_check verifies each): the blocks of a segment tile it in
 * address order; no two FREE blocks are neighbours; every FREE block is in
 * exactly one free tree and every ALLOCATED block in the map; the statistics
 * equal what the blocks say.
 */
#ifndef GA_INTERNAL_H
#define GA_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blockmap.h"
#include "config.h"
#include "device/device.h"
#include "errors.h"
#include "gardenalloc.h"
#include "history.h"
#include "lock.h"
#include "report.h"
#include "stats.h"
#include "text.h"

/* ---- Constants (PyTorch's) ---- */
#define GA_MIN_BLOCK       ((size_t)512)      /* kMinBlockSize */
#define GA_SMALL_SIZE      ((size_t)1 << 20)  /* kSmallSize: <= goes to the small pool */
#define GA_SMALL_BUFFER    ((size_t)2 << 20)  /* kSmallBuffer: small-pool segment */
#define GA_MIN_LARGE_ALLOC ((size_t)10 << 20) /* kMinLargeAlloc */
#define GA_ROUND_LARGE     ((size_t)2 << 20)  /* kRoundLarge */
#define GA_MAX_REQUEST     ((size_t)1 << 60)  /* 1 EiB: larger requests fail early */

enum { GA_BLOCK_FREE = 0, GA_BLOCK_ALLOCATED = 1, GA_BLOCK_PENDING = 2, GA_BLOCK_UNMAPPED = 3 };

typedef struct ga_segment ga_segment;
typedef struct ga_block ga_block;

struct ga_block {
  uintptr_t ptr;          /* first byte */
  size_t size;            /* rounded size (bytes of the segment it covers) */
  size_t requested;       /* what the client asked for (active blocks) */
  ga_stream_t stream;     /* allocation stream; free blocks are reused only on it */
  ga_segment *seg;        /* owning segment */
  ga_block *prev, *next;  /* address neighbours inside the segment */
  ga_block *left, *right; /* free tree links */
  uint32_t prio;          /* free tree heap priority */
  uint8_t pool;           /* GA_P_SMALL or GA_P_LARGE */
  uint8_t state;          /* GA_BLOCK_* */
  uint8_t counted_split;  /* counted in inactive_split while in the free tree */
  uint32_t event_count;   /* pending events before a PENDING block is free */
  ga_stream_t *uses;      /* other streams that used the block (record_stream) */
  uint32_t nuses, capuses;
  uint64_t gc_base;  /* pool's get_free_block count when it became free */
  uint64_t free_seq; /* a->pol.streams.free_clock when its memory was last freed by a client */
  uint8_t tag;       /* 0 = none, else index + 1 in a->pol.sleep.tags */
  uint8_t asleep;    /* some of its granules are asleep (ga_sleep) */
};

typedef struct ga_handle ga_handle;

/* ---- Words ----
 * granule  the 2 MiB unit of the device (its granularity): of address space
 *          (a segment's granule i) and of physical memory (granule idx of a
 *          handle, a ga_granule). Expandable segments map, unmap and move
 *          memory granule by granule.
 * handle   one physical allocation (cuMemCreate), of one or more granules;
 *          its size when created is the page size of its pool
 *          (expandable_page_size_mb for the large pool, 2 MiB for the small).
 * pool     small (requests up to 1 MiB) or large: GA_P_SMALL / GA_P_LARGE.
 * free tree  the best-fit index of free blocks (policy/free_tree.c), one per
 *          pool, and one pair per private pool.
 * private pool  memory kept apart for a CUDA-graph capture (policy/private.c).
 */

/* Marks a granule of a sleeping allocation in ga_segment.granules (handle NULL). */
#define GA_GRANULE_ASLEEP UINT32_MAX

/* A granule of physical memory: granule `idx` of `handle`. */
typedef struct ga_granule {
  ga_handle *handle;
  uint32_t idx;
} ga_granule;

/* A physical allocation (create): `size` bytes in granules, each either
 * mapped into a segment or in the page cache. */
struct ga_handle {
  ga_mem_handle h;
  size_t size;
  uint32_t ngran;         /* granules in the handle */
  uint32_t nmapped;       /* granules mapped into a segment */
  uint8_t pool;           /* pool whose growth created it (for per-pool stats) */
  ga_handle *prev, *next; /* all handles of the allocator */
};

struct ga_segment {
  uintptr_t base;
  size_t size;
  uint8_t pool;
  uint8_t expandable;      /* a reserved range mapped granule by granule */
  struct ga_private *priv; /* private pool owning it, or NULL (an opaque tag below policy/) */
  ga_stream_t stream;
  ga_block *head;          /* block at base */
  ga_segment *prev, *next; /* all segments of the allocator */
  ga_granule *granules;    /* expandable: the memory behind granule i (handle NULL: none) */
  size_t ngranules;        /* entries allocated in granules */
};

typedef struct ga_free_tree {
  ga_block *root;    /* a treap ordered by (stream, size, ptr) */
  size_t count;      /* blocks in the tree */
  uint64_t gc_calls; /* get_free_block calls, the GC age clock */
} ga_free_tree;

/* A private pool (CUDA-graph capture, ga_begin_allocate_to_pool): its own
 * free trees and segments, kept out of general reuse until released. */
typedef struct ga_private {
  uint64_t id;
  ga_free_tree trees[2];  /* by pool */
  ga_stream_t streams[8]; /* streams whose allocations it serves now */
  int nstreams;
  int released; /* ga_release_pool called: segments go back once free */
  size_t nsegs;
  struct ga_private *next;
} ga_private;

typedef struct ga_pending {
  ga_event ev;
  ga_block *block;
} ga_pending;

/* A granule given back by ga_sleep: where it was, and its bytes if offloaded. */
typedef struct ga_sleeper {
  ga_segment *seg;
  size_t granule; /* index in the segment */
  void *host;     /* offloaded contents, or NULL (discarded) */
  int restore;    /* mapped again, but the contents are not back yet */
} ga_sleeper;

/* Per stream: what is known to have completed. */
typedef struct ga_fence {
  ga_stream_t stream;
  uint64_t safe_seq; /* memory freed at or before this seq is no longer in use */
  ga_event ev;       /* recorded when the stream was last checked, or NULL */
  uint64_t ev_seq;   /* free_clock when ev was recorded */
} ga_fence;

/* What policy/ owns: what to hand out, to whom, and when. */
typedef struct ga_policy {
  ga_free_tree trees[2]; /* the general free trees, by pool */
  ga_blockmap map;       /* pointer handed out -> its block */
  size_t device_total;   /* total device memory, from mem_info at create */
  size_t allowed_max;    /* memory fraction limit in bytes; SIZE_MAX = none */
  double fraction;
  size_t large_page; /* bytes of a handle created for the large pool */
  struct {           /* policy/stream.c: stream-ordered reuse */
    ga_pending *pending;
    size_t npending, cap_pending;
    ga_event *event_cache; /* recycled events */
    size_t nevent_cache, cap_event_cache;
    uint64_t free_clock; /* counts client frees (free_seq) */
    ga_fence fences[16];
    int nfences;
  } streams;
  struct {                /* policy/private.c: CUDA-graph capture */
    ga_private *privates; /* private pools */
    int routing;          /* streams routed to private pools now: a capture is underway */
    ga_block **deferred;  /* frees with stream uses made during a capture */
    size_t ndeferred, cap_deferred;
  } capture;
  struct {             /* policy/sleep.c: tags, sleep and wake */
    char tags[32][32]; /* allocation tags, by index */
    int ntags;
    ga_sleeper *sleepers; /* granules released by ga_sleep, to map again at wake */
    size_t nsleepers, cap_sleepers;
  } sleep;
} ga_policy;

/* What segment/ owns: where the bytes live. */
typedef struct ga_space {
  ga_segment *segs; /* every segment */
  size_t nsegs;
  size_t reserved;       /* bytes obtained from the device (native segments + handles) */
  ga_block *block_cache; /* recycled block structs, linked by ->next */
  size_t gran;           /* device granularity (2 MiB): the unit of map/unmap */
  size_t reserve_size;   /* address space reserved per expandable segment */
  ga_handle *handles;    /* every live handle */
  size_t nhandles;
  ga_granule *cache; /* the page cache: unmapped granules of live handles */
  size_t ncache, cap_cache;
  int access[65]; /* devices given access to expandable memory: this one first */
  int naccess;
  int regrant; /* a granule is mapped without its peers' access: grant again before handing out */
} ga_space;

struct ga_allocator {
  /* Held by every public call. On a line of its own (two, for the adjacent-
   * line prefetcher), so threads waiting on it do not pull the lines the
   * holder is writing. */
  _Alignas(128) ga_lock mu;
  _Alignas(128) ga_config cfg;
  ga_device *dev;
  ga_stats_t stats;
  ga_history history;
  ga_policy pol;
  ga_space space;
  int owns_dev;        /* ga_destroy destroys the device too */
  char conf_text[512]; /* the configuration string it was created with */
};

/* ---- Growable arrays ---- */
static inline void *ga_vec_grow(void *v, size_t *cap, size_t n, size_t elem) {
  size_t c = *cap ? *cap : 16;
  while (c < n) c *= 2;
  void *nv = realloc(v, c * elem);
  if (nv) *cap = c;
  return nv;
}
static inline int ga_vec_set(void *slot, void *nv) {
  if (!nv) return -1;
  memcpy(slot, &nv, sizeof nv);
  return 0;
}
/* Room for n elements in the array v of capacity cap (doubling). 0, or -1 on
 * host OOM with v unchanged. */
#define GA_VEC_ROOM(v, cap, n) \
  ((n) <= (cap) ? 0 : ga_vec_set(&(v), ga_vec_grow((v), &(cap), (n), sizeof *(v))))

/* ---- Free trees (policy/pool.c) ---- */
void ga_free_tree_insert(ga_free_tree *p, ga_block *b);
void ga_free_tree_remove(ga_free_tree *p, ga_block *b);
void ga_free_tree_rekey(ga_free_tree *p, ga_block *x, size_t xsize, uintptr_t xptr, ga_block *y);
/* Smallest block >= (stream, size, ptr) in tree order, or NULL. */
ga_block *ga_free_tree_lower_bound(const ga_free_tree *p, ga_stream_t stream, size_t size, uintptr_t ptr);
/* Largest block < (stream, size, ptr), or NULL. */
ga_block *ga_free_tree_before(const ga_free_tree *p, ga_stream_t stream, size_t size, uintptr_t ptr);
/* Calls fn on every block in order; stops early when fn returns non-zero.
 * fn must not change the tree. */
int ga_free_tree_walk(const ga_free_tree *p, int (*fn)(ga_block *, void *), void *arg);
/* Is the tree ordered and a heap? Counts nodes into *n. */
int ga_free_tree_valid(const ga_free_tree *p, size_t *n);

/* The free trees a block belongs to: its private pool's or the general ones. */
static inline ga_free_tree *ga_trees_of(ga_allocator_t *a, const ga_block *b) {
  return b->seg->priv ? b->seg->priv->trees : a->pol.trees;
}

/* ---- Blocks (policy/block.c) ---- */
size_t ga_round_size(const ga_config *c, size_t size);
size_t ga_allocation_size_for(const ga_config *c, size_t rounded);
ga_block *ga_block_new_locked(ga_allocator_t *a);
void ga_block_delete_locked(ga_allocator_t *a, ga_block *b);
static inline int ga_block_is_split(const ga_block *b) { return b->prev || b->next; }
/* Puts a block into its pool's free tree, counting inactive_split. */
void ga_block_to_free_tree_locked(ga_allocator_t *a, ga_block *b);
/* Takes a block out of its free tree, undoing the inactive_split count. */
void ga_block_from_free_tree_locked(ga_allocator_t *a, ga_block *b);
/* Hands out `b` (in its free tree when in_tree, else in none) for `size`
 * bytes asked, rounded to `rounded`; returns the allocated block (the front
 * of b, or in expandable segments possibly its back), NULL on host OOM (b
 * unchanged, still where it was). */
ga_block *ga_block_hand_out_locked(ga_allocator_t *a, ga_block *b, size_t size, size_t rounded, int in_tree);
/* Makes an ALLOCATED/PENDING block FREE: merge with free neighbours, insert. */
void ga_block_free_locked(ga_allocator_t *a, ga_block *b);

/* ---- Streams (policy/stream.c) ---- */
int ga_stream_record_locked(ga_allocator_t *a, ga_block *b, ga_stream_t s);
/* Client free of an allocated block: events for other streams, else free. */
void ga_stream_free_locked(ga_allocator_t *a, ga_block *b);
/* Frees the blocks whose events have completed. */
void ga_stream_process_events_locked(ga_allocator_t *a);
/* Waits for every pending event and frees the blocks. 0 or a device code. */
int ga_stream_sync_all_locked(ga_allocator_t *a);
/* ga_begin_allocate_to_pool, ga_end_allocate_to_pool, ga_release_pool
 * (policy/private.c). */
ga_status_t ga_private_begin_locked(ga_allocator_t *a, uint64_t id, ga_stream_t stream);
ga_status_t ga_private_end_locked(ga_allocator_t *a, uint64_t id);
ga_status_t ga_private_release_locked(ga_allocator_t *a, uint64_t id);
/* empty_cache: the free segments of released private pools go back. */
int ga_private_release_all_locked(ga_allocator_t *a);
void ga_private_teardown_locked(ga_allocator_t *a);
/* A capture ended: the frees it deferred record their events now. */
void ga_stream_capture_ended_locked(ga_allocator_t *a);
/* A segment of private pool v went back to the device. */
void ga_private_segment_gone_locked(ga_allocator_t *a, ga_private *v);
/* Is memory freed on `stream` at free_seq surely no longer used by it? Waits
 * (stream synchronize) only when an earlier fence has not passed that point.
 * 0, or a GA_DEV_* code; *waited tells whether it synchronised. */
int ga_stream_fence_locked(ga_allocator_t *a, ga_stream_t stream, uint64_t free_seq, int *waited);
/* Keeps a fence for `stream` from now on (it has free memory that may move). */
void ga_stream_fence_watch_locked(ga_allocator_t *a, ga_stream_t stream);
/* Records fences on the streams watched, for the next time. */
void ga_stream_fences_refresh_locked(ga_allocator_t *a);
/* Destroys the cached events (at teardown). */
void ga_stream_teardown_locked(ga_allocator_t *a);

/* ---- Native segments (segment/native.c) ---- */
/* Obtains a segment of `size` bytes; *out is its single FREE-to-be block (not
 * in a tree). Returns 0, a GA_DEV_* code, or -1 on host OOM. */
int ga_native_segment_new_locked(ga_allocator_t *a, size_t size, int pool, ga_stream_t stream,
                                 ga_block **out);
/* Gives a whole-segment block (not in a tree) back to the device. */
int ga_native_segment_release_locked(ga_allocator_t *a, ga_block *b);

/* Merges a FREE-to-be block with FREE neighbours and inserts it (no stats). */
ga_block *ga_block_merge_insert_locked(ga_allocator_t *a, ga_block *b);
/* Marks b UNMAPPED and merges it with UNMAPPED neighbours. */
ga_block *ga_block_merge_unmapped_locked(ga_allocator_t *a, ga_block *b);
/* Splits `b` at offset `at` (0 < at < size): b keeps the front, the new block
 * (same state, not in any tree) the rest. NULL on host OOM. */
ga_block *ga_block_split_off_locked(ga_allocator_t *a, ga_block *b, size_t at);

/* ---- Physical pages (segment/pages.c) ---- */
/* Makes at least n granules available in the page cache: cached ones first,
 * then granules of free pages anywhere (never inside [keep_lo, keep_hi)),
 * then new pages of `page` bytes (smaller when the device is nearly full).
 * 0, GA_DEV_* code (EOOM when even that cannot hold them), or -1 host OOM. */
int ga_pages_obtain_locked(ga_allocator_t *a, size_t n, int pool, size_t page, uintptr_t keep_lo,
                           uintptr_t keep_hi, int *fraction_refused);
/* Takes the first cached granule (pre: ncache > 0). */
ga_granule ga_pages_take_locked(ga_allocator_t *a);
/* Room in the cache for n more granules. -1 on host OOM. */
int ga_pages_room_locked(ga_allocator_t *a, size_t n);
/* Puts a granule into the page cache. -1 on host OOM. */
int ga_pages_put_locked(ga_allocator_t *a, ga_granule p);
/* Releases handles whose granules are all cached, while the cache holds more
 * than `keep` bytes. 0 or the GA_DEV_* code of a failed release. */
int ga_pages_trim_locked(ga_allocator_t *a, size_t keep);
/* Bytes of free cached memory that lie in partly used granules. */
size_t ga_pages_partial_free_locked(ga_allocator_t *a);
/* Gives every handle back at teardown (mappings must be gone). */
void ga_pages_teardown_locked(ga_allocator_t *a);

/* ---- Expandable segments (segment/expandable.c) ---- */
/* Finds or makes room for `size` contiguous bytes on (pool, stream) by
 * mapping granules; *out is a FREE block of at least `size` bytes, taken out
 * of its tree. 0, a GA_DEV_* code, or -1 on host OOM. */
int ga_expandable_grow_locked(ga_allocator_t *a, ga_private *priv, int pool, ga_stream_t stream, size_t size,
                              int *fraction_refused, ga_block **out);
/* Unmaps granules [g0, g1) of FREE block b's segment, all inside b, into the
 * page cache. The caller has synchronised b's stream. 0 or a GA_DEV_* code. */
int ga_expandable_unmap_locked(ga_allocator_t *a, ga_block *b, size_t g0, size_t g1);
/* empty_cache: unmaps every whole free granule of the general segments and
 * of released private pools no stream uses, drops empty segments.
 * 0 or a GA_DEV_* code. */
int ga_expandable_release_all_locked(ga_allocator_t *a);
/* The same for the segments of one private pool only. */
int ga_expandable_release_locked(ga_allocator_t *a, ga_private *only);
/* Sets access for `devices` on every mapped range. 0 or a GA_DEV_* code. */
int ga_expandable_grant_locked(ga_allocator_t *a, const int *devices, int n);
/* ga_tag, ga_sleep, ga_wake (segment/sleep.c). */
ga_status_t ga_tag_locked(ga_allocator_t *a, void *ptr, const char *tag);
ga_status_t ga_sleep_locked(ga_allocator_t *a, const char *tags, unsigned flags);
ga_status_t ga_wake_locked(ga_allocator_t *a);
/* Frees what ga_sleep kept on the host. */
void ga_sleep_teardown_locked(ga_allocator_t *a);
/* Teardown: unmaps and unreserves every expandable segment. */
void ga_expandable_teardown_locked(ga_allocator_t *a);

/* ---- Reclaim (policy/reclaim.c) ---- */
int ga_reclaim_gc_locked(ga_allocator_t *a);
/* Frees oversize cached blocks to make room; 1 if it freed enough, 0 if not,
 * negative GA_DEV_* code negated on device failure. */
int ga_reclaim_oversize_locked(ga_allocator_t *a, int pool, ga_stream_t stream, size_t size);
/* empty_cache: sync events, release every unsplit cached block. 0 or GA_DEV_*. */
int ga_reclaim_all_locked(ga_allocator_t *a);

/* ---- Allocation (policy/alloc.c) ---- */
ga_status_t ga_alloc_locked(ga_allocator_t *a, size_t size, ga_stream_t stream, void **out);
ga_status_t ga_free_locked(ga_allocator_t *a, void *ptr);
/* Sets the error text for a pointer that is not a live allocation. */
ga_status_t ga_bad_pointer_locked(ga_allocator_t *a, const char *fn, void *ptr);
/* The live allocation whose bytes include p, or NULL. */
const ga_block *ga_alloc_containing_locked(ga_allocator_t *a, uintptr_t p);
/* Writes the OOM report into the thread's error text and records the OOM in
 * the history: `tried` is the device allocation attempted (PyTorch's "Tried
 * to allocate"), `rounded` the rounded request. */
void ga_alloc_report_oom_locked(ga_allocator_t *a, size_t tried, size_t rounded, int fraction_refused);

/* Records one history entry when recording is on. */
static inline void ga_history_add_locked(ga_allocator_t *a, int action, uintptr_t addr, size_t size,
                                         ga_stream_t stream) {
  if (ga_history_on(&a->history)) ga_history_add(&a->history, action, addr, size, (uintptr_t)stream);
}

/* ---- Peer devices (policy/peers.c) ---- */
/* ga_enable_peer_access. */
ga_status_t ga_peers_enable_locked(ga_allocator_t *a, int peer);
/* Grants a->space.access again everywhere (after a->space.regrant was set); clears it.
 * 0 or a GA_DEV_* code. */
int ga_peers_regrant_locked(ga_allocator_t *a);

/* ---- For tests: an allocator on a device the caller owns ---- */
GA_API ga_status_t ga_create_on_device(const char *conf, ga_device *dev, ga_allocator_t **out);
GA_API ga_device *ga_allocator_device(ga_allocator_t *a);

#endif /* GA_INTERNAL_H */
