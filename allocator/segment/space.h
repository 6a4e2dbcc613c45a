/* space.h — the segment layer's records: blocks, segments, handles and
 * granules, and ga_space, the state segment/ owns (where the bytes live).
 * segment/ sees these and the leaves below it, never the policy's state or
 * the allocator's record (policy/state.h; built with GA_LAYER_SEGMENT, it
 * cannot include it). Its functions are declared in segment/segment.h.
 * device/, below, cannot include this header (GA_LAYER_DEVICE).
 *
 * Block states:
 *   FREE      in its pool's free tree (in_tree), merged with free neighbours
 *   ALLOCATED handed to a client, in the block map (which also keeps blocks
 *             freed since, until their record is deleted)
 *   PENDING   freed by the client, waiting for events on other streams
 *   UNMAPPED  (expandable segments) reserved address space with no memory
 *             behind it; granule-aligned; merged with UNMAPPED neighbours
 * A FREE block is out of its tree only inside one policy operation.
 * Invariants (ga_check verifies each): the blocks of a segment tile it in
 * address order; no two FREE blocks are neighbours; every FREE block is in
 * exactly one free tree and every ALLOCATED block in the map; the statistics
 * equal what the blocks say. A block keeps its entry in the map after its
 * free (in_map) for as long as its record lives, so that handing it out
 * again writes nothing there; deleting the record takes the entry out.
 */
#ifndef GA_SPACE_H
#define GA_SPACE_H

#ifdef GA_LAYER_DEVICE
#error "segment/space.h is above the device layer: device/ sees device/device.h and the leaves"
#endif

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../blockmap.h"
#include "../config.h"
#include "../debug.h"
#include "../device/device.h"
#include "../errors.h"
#include "../history.h"
#include "../host.h"
#include "../lock.h"
#include "../stats.h"
#include "../text.h"
#include "gardenalloc.h"

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

/* 128 bytes, two cache lines of a record slab (segment/tiles.c). The first
 * line holds what a free tree or the unmapped index compares and follows at
 * each node (key, links, priority, marks), so a search reads one line per
 * node; the second what a free and an allocation read besides. */
struct ga_block {
  /* ---- Line 0 ---- */
  uintptr_t ptr;          /* first byte */
  size_t size;            /* rounded size (bytes of the segment it covers) */
  ga_stream_t stream;     /* allocation stream; free blocks are reused only on it */
  ga_block *left, *right; /* free tree links (FREE), unmapped index links (UNMAPPED) */
  uint32_t prio;          /* their heap priority */
  uint32_t tie;           /* free tree key between size and address: with deterministic:True its
                           * segment's creation number (seg->created), else 0 (policy/free_tree.c) */
  ga_segment *seg;        /* owning segment */
  uint32_t event_count;   /* pending events before a PENDING block is free */
  uint8_t size_class;     /* GA_CLASS_SMALL or GA_CLASS_LARGE */
  uint8_t state;          /* GA_BLOCK_* */
  uint8_t in_tree;        /* in a free tree now (kept by policy/free_tree.c) */
  uint8_t whole;          /* in a free tree: policy/free_tree.c's marks of whole granules */
  /* ---- Line 1 ---- */
  union {
    size_t requested; /* what the client asked for (active blocks) */
    size_t reach;     /* UNMAPPED: its bound in the unmapped index (segment/unmapped.c) */
  };
  ga_block *prev, *next; /* address neighbours inside the segment */
  ga_stream_t *uses;     /* other streams that used the block (record_stream) */
  uint32_t nuses, capuses;
  union {
    uint64_t gc_base; /* FREE: pool's get_free_block count when it became free */
    size_t reach_max; /* UNMAPPED: the largest reach in its subtree of the unmapped index */
  };
  uint64_t free_seq;        /* the policy's free clock (streams.free_clock) at its last client free */
  uint8_t tag;              /* 0 = none, else index + 1 in the policy's sleep.tags */
  uint8_t asleep;           /* some of its granules are asleep (ga_sleep) */
  uint8_t free_at_wake : 1; /* freed by PyTorch while asleep: ga_wake frees it */
  uint8_t in_map : 1;       /* in the policy's block map (put when first handed out, taken out
                             * when the record is deleted: ga_tiles_delete_locked) */
  uint8_t counted_split;    /* counted in inactive_split while in the free tree */
  uint32_t nquarantined;    /* its pending entries without an event (counted in quarantined_bytes) */
};
_Static_assert(sizeof(ga_block) == 128 && offsetof(ga_block, requested) == 64,
               "a block record is two cache lines, the tree's fields in the first");

typedef struct ga_handle ga_handle;

/* ---- Words ----
 * granule  the 2 MiB unit of the device (its granularity): of address space
 *          (a segment's granule i) and of physical memory (granule idx of a
 *          handle, a ga_granule). Expandable segments map, unmap and move
 *          memory granule by granule.
 * handle   one physical allocation (cuMemCreate), of one or more granules;
 *          its size when created is the page size of its pool
 *          (expandable_page_size_mb for the large pool, 2 MiB for the small).
 * pool     small (requests up to 1 MiB) or large: GA_CLASS_SMALL / GA_CLASS_LARGE.
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
  uint8_t size_class;     /* the size class whose growth created it (per-pool stats) */
  ga_handle *prev, *next; /* all handles of the allocator */
};

struct ga_segment {
  uintptr_t base;
  size_t size;
  uint8_t size_class;
  uint8_t expandable;      /* a reserved range mapped granule by granule */
  struct ga_private *priv; /* private pool owning it, or NULL (an opaque tag below policy/) */
  ga_stream_t stream;
  uint64_t created;        /* its creation number: 1 for the allocator's first segment, then 2, ... */
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

/* What segment/ owns: where the bytes live; and what it works with, lent by
 * its owner (the allocator) before ga_space_init_locked. */
typedef struct ga_space {
  ga_lock *mu;          /* the owner's lock: every *_locked function of segment/ needs it held */
  ga_device *dev;       /* where the bytes come from */
  ga_stats_t *stats;    /* segment, reserved, mapped and page-cache bytes, device call counts */
  ga_history *history;  /* the segment history entries */
  ga_blockmap *map;     /* the policy's block map: a record deleted with in_map leaves it */
  const ga_config *cfg; /* the settings (max_split_size: oversize_segments; deterministic) */
  ga_segment *segs;     /* every segment */
  size_t nsegs;
  uint64_t created;              /* segments created so far (the last one's ga_segment.created) */
  size_t reserved;               /* bytes obtained from the device (native segments + handles) */
  ga_block *block_cache;         /* recycled block structs, linked by ->next */
  ga_block *slabs;               /* the slabs records come from, linked through their first record */
  uintptr_t slab_next, slab_end; /* the current slab: where its next record goes, its end */
  size_t gran;                   /* device granularity (2 MiB): the unit of map/unmap */
  size_t reserve_size;           /* address space reserved per expandable segment */
  ga_handle *handles;            /* every live handle */
  size_t nhandles;
  ga_granule *cache; /* the page cache: unmapped granules of live handles */
  size_t ncache, cap_cache;
  int access[65]; /* devices given access to expandable memory: this one first */
  int naccess;
  int nproven; /* the first nproven of them were granted on real memory (this one always) */
  int regrant; /* a granule is mapped without its peers' access: grant again before handing out */
} ga_space;

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

/* ---- Preconditions (debug.h: GA_ASSERT) ---- */
/* The calling thread holds the lock of sp's owner (lock.h records the holder
 * where asserts are on). Every *_locked function of segment/ states it first. */
#define GA_ASSERT_SPACE_LOCKED(sp) GA_ASSERT(ga_lock_held((sp)->mu))

/* ---- History ---- */
/* Records one segment history entry when recording is on. */
static inline void ga_space_history_locked(const ga_space *sp, int action, uintptr_t addr, size_t size,
                                           ga_stream_t stream) {
  GA_ASSERT_SPACE_LOCKED(sp);
  if (ga_history_on(sp->history)) ga_history_add(sp->history, action, addr, size, (uintptr_t)stream);
}

#endif /* GA_SPACE_H */
