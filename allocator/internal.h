/* internal.h — the records every layer shares: blocks, segments, handles,
 * private pools, and the allocator itself, grouped by the layer that owns
 * each part. The functions of each layer are declared in its own header:
 * policy/policy.h and segment/segment.h (device/device.h below them; the
 * leaves config.h, errors.h, text.h, report.h, history.h, stats.h and
 * blockmap.h below all).
 *
 * Layers: api.c (validate, lock, dispatch) -> policy/ (what to hand out) ->
 * segment/ (where the bytes live) -> device/ (how memory is obtained). No
 * layer calls up; scripts/layers.py checks it. Functions named *_locked
 * require the caller to hold a->mu.
 *
 * Block states:
 *   FREE      in its pool's free tree (in_tree), merged with free neighbours
 *   ALLOCATED in the block map, handed to a client
 *   PENDING   freed by the client, waiting for events on other streams
 *   UNMAPPED  (expandable segments) reserved address space with no memory
 *             behind it; granule-aligned; merged with UNMAPPED neighbours
 * A FREE block is out of its tree only inside one policy operation.
 * Invariants (ga_check verifies each): the blocks of a segment tile it in
 * address order; no two FREE blocks are neighbours; every FREE block is in
 * exactly one free tree and every ALLOCATED block in the map; the statistics
 * equal what the blocks say.
 */
#ifndef GA_INTERNAL_H
#define GA_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blockmap.h"
#include "config.h"
#include "debug.h"
#include "device/device.h"
#include "errors.h"
#include "gardenalloc.h"
#include "history.h"
#include "host.h"
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
  uintptr_t ptr; /* first byte */
  size_t size;   /* rounded size (bytes of the segment it covers) */
  union {
    size_t requested; /* what the client asked for (active blocks) */
    size_t reach;     /* UNMAPPED: its bound in the unmapped index (segment/unmapped.c) */
  };
  ga_stream_t stream;     /* allocation stream; free blocks are reused only on it */
  ga_segment *seg;        /* owning segment */
  ga_block *prev, *next;  /* address neighbours inside the segment */
  ga_block *left, *right; /* free tree links (FREE), unmapped index links (UNMAPPED) */
  uint32_t prio;          /* their heap priority */
  uint8_t pool;           /* GA_P_SMALL or GA_P_LARGE */
  uint8_t state;          /* GA_BLOCK_* */
  uint8_t counted_split;  /* counted in inactive_split while in the free tree */
  uint8_t in_tree;        /* in a free tree now (kept by policy/free_tree.c) */
  uint32_t event_count;   /* pending events before a PENDING block is free */
  ga_stream_t *uses;      /* other streams that used the block (record_stream) */
  uint32_t nuses, capuses;
  union {
    uint64_t gc_base; /* FREE: pool's get_free_block count when it became free */
    size_t reach_max; /* UNMAPPED: the largest reach in its subtree of the unmapped index */
  };
  uint64_t free_seq;     /* a->pol.streams.free_clock when its memory was last freed by a client */
  uint8_t tag;           /* 0 = none, else index + 1 in a->pol.sleep.tags */
  uint8_t asleep;        /* some of its granules are asleep (ga_sleep) */
  uint8_t free_at_wake;  /* freed by PyTorch while asleep: ga_wake frees it */
  uint32_t nquarantined; /* its pending entries without an event (counted in quarantined_bytes) */
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

/* A granule of physical memory: granule `idx` of `handle`. In a segment's
 * granules array it also says which mapping (one map call) holds it: it is
 * granule `off` of a mapping of `len` granules (consecutive in the handle and
 * in the segment). */
typedef struct ga_granule {
  ga_handle *handle;
  uint32_t idx;
  uint16_t off, len;
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
  uint64_t moved_in;       /* policy: the free count when memory last moved into it (0: never) */
  uint8_t gave;            /* policy: memory moved out of it since it last grew */
  size_t keep_mapped;      /* policy: mapped bytes that no longer move out (0: all may) */
  size_t above_keep;       /* policy: scratch of a move, mapped bytes above keep_mapped */
  ga_granule *granules;    /* expandable: the memory behind granule i (handle NULL: none) */
  ga_block *unmapped_root; /* expandable: its UNMAPPED blocks by address (segment/unmapped.c) */
  size_t unmapped_bytes;   /* expandable: their bytes */
  size_t nunmapped;        /* expandable: their number */
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
  uint64_t generation; /* ga_pool_generation: bumped when memory under its addresses could change */
  struct ga_private *next;
} ga_private;

/* A free waiting for a stream: ev recorded on it, or NULL when no event
 * could be recorded and no wait succeeded (the block is quarantined: out of
 * use until an event can be recorded on `stream` or a wait for it succeeds). */
typedef struct ga_pending {
  ga_event ev;
  ga_block *block;
  ga_stream_t stream;
} ga_pending;

/* A granule given back by ga_sleep: where it was, and its bytes if offloaded. */
typedef struct ga_sleeper {
  ga_segment *seg;
  size_t granule; /* index in the segment */
  void *host;     /* offloaded contents, or NULL (discarded) */
  int restore;    /* mapped again, but the contents are not back yet */
  int zero;       /* GA_RESTORE_ZERO: zeros at wake */
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
  ga_block *kept;        /* a client free kept back for the next allocation (policy/block.c), or NULL */
  size_t device_total;   /* total device memory, from mem_info at create */
  size_t allowed_max;    /* the limit on reserved bytes: the lower of the fraction's and budget_max */
  size_t budget_max;     /* max_reserved_mb / headroom_mb in bytes; SIZE_MAX = none */
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
    int flush_deferred; /* an empty_cache during the capture left work for its end */
  } capture;
  struct {             /* policy/sleep.c: tags, sleep and wake */
    char tags[32][32]; /* allocation tags, by index */
    uint8_t modes[32]; /* restore mode + 1 of each tag (ga_sleep_mode); 0: the flags' */
    int ntags;
    ga_sleeper *sleepers; /* granules released by ga_sleep, to map again at wake */
    size_t nsleepers, cap_sleepers;
    size_t nfree_at_wake; /* blocks with free_at_wake set */
  } sleep;
  struct ga_ipc *ipc; /* policy/ipc.c: exports and imports (NULL until the first) */
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
  int nproven; /* the first nproven of them were granted on real memory (this one always) */
  int regrant; /* a granule is mapped without its peers' access: grant again before handing out */
} ga_space;

struct ga_allocator {
  /* Held by every public call. On a line of its own (two, for the adjacent-
   * line prefetcher), so threads waiting on it do not pull the lines the
   * holder is writing. */
  _Alignas(128) ga_lock mu;
  _Alignas(128) ga_config cfg;
  ga_device *dev;
  ga_stats_t stats; /* exact after ga_stats_sync(&a->stats, &a->hot): read it only then */
  ga_hot hot;       /* what allocations and frees changed since (stats.h) */
  ga_history history;
  ga_policy pol;
  ga_space space;
  int owns_dev;        /* ga_destroy destroys the device too */
  unsigned fork_gen;   /* ga_fork_generation when it was created: another one means a forked child */
  int pid;             /* the process that created it */
  char conf_text[512]; /* the configuration string it was created with */
};

/* ---- Preconditions (debug.h: GA_ASSERT) ---- */
/* The calling thread holds the allocator's lock (lock.h records the holder
 * where asserts are on). Every *_locked function states it first. */
#define GA_ASSERT_LOCKED(a) GA_ASSERT(ga_lock_held((ga_lock *)&(a)->mu))

/* ---- Growable arrays ---- */
static inline void *ga_vec_grow(void *v, size_t *cap, size_t n, size_t elem) {
  size_t c = *cap ? *cap : 16;
  while (c < n) c *= 2;
  void *nv = ga_host_realloc(v, c * elem);
  if (nv) *cap = c;
  return nv;
}
static inline int ga_vec_set(void *slot, void *nv) {
  if (!nv) return GA_DEV_ENOMEM;
  memcpy(slot, &nv, sizeof nv);
  return 0;
}
/* Room for n elements in the array v of capacity cap (doubling). 0, or
 * GA_DEV_ENOMEM with v unchanged. */
#define GA_VEC_ROOM(v, cap, n) \
  ((n) <= (cap) ? 0 : ga_vec_set(&(v), ga_vec_grow((v), &(cap), (n), sizeof *(v))))

/* ---- History ---- */
/* Records one history entry when recording is on. */
static inline void ga_history_add_locked(ga_allocator_t *a, int action, uintptr_t addr, size_t size,
                                         ga_stream_t stream) {
  GA_ASSERT_LOCKED(a);
  if (ga_history_on(&a->history)) ga_history_add(&a->history, action, addr, size, (uintptr_t)stream);
}

/* ---- fork() ----
 * Counts the fork() children this process is (a pthread_atfork child
 * handler, registered by the first ga_create): an allocator whose fork_gen
 * differs was inherited from the parent and refuses every call. */
extern atomic_uint ga_fork_generation;
static inline int ga_inherited(const ga_allocator_t *a) {
  return a->fork_gen != atomic_load_explicit(&ga_fork_generation, memory_order_relaxed);
}

/* ---- For PyTorch's free (api.c) ----
 * ga_free, except that an allocation asleep is freed by the ga_wake that
 * maps it again (PyTorch frees in a destructor and cannot wait), instead of
 * being refused. */
ga_status_t ga_free_even_asleep(ga_allocator_t *a, void *ptr);

/* ---- For PyTorch's capture hooks (torch_abi_throw.cpp) ----
 * A capture began on the allocator's device (begin != 0), whose streams are
 * routed to its pool at their first allocation, or it ended: in between a
 * capture is underway (no call that would invalidate it is made). */
ga_status_t ga_capture_announce(ga_allocator_t *a, int begin);

/* ---- For tests: an allocator on a device the caller owns ---- */
GA_API ga_status_t ga_create_on_device(const char *conf, ga_device *dev, ga_allocator_t **out);
GA_API ga_device *ga_allocator_device(ga_allocator_t *a);

#endif /* GA_INTERNAL_H */
