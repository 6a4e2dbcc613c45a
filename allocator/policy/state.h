/* state.h — the policy layer's state: the free trees, the private pools of
 * CUDA-graph capture, stream-ordered reuse, sleep and wake (ga_policy), on
 * top of the segment layer's records (segment/space.h); and the allocator's
 * record (struct ga_allocator), which holds both and is what the policy's
 * functions take. They are declared in policy/policy.h. segment/ cannot
 * include this header (GA_LAYER_SEGMENT, see internal.h).
 */
#ifndef GA_POLICY_STATE_H
#define GA_POLICY_STATE_H

#if defined(GA_LAYER_SEGMENT) || defined(GA_LAYER_DEVICE)
#error "policy/state.h is the policy layer's: segment/ and device/ see only their own headers and below"
#endif

#include "../blockmap.h"
#include "../report.h"
#include "../segment/space.h"

typedef struct ga_free_tree {
  ga_block *root;        /* a treap ordered by (stream, size, tie, ptr) */
  size_t count;          /* blocks in the tree */
  uint64_t gc_calls;     /* get_free_block calls, the GC age clock */
  const ga_space *space; /* its granule, and the mappings that say what may be unmapped */
  size_t bytes;          /* the sums over its blocks: bytes, */
  size_t whole_bytes;    /* bytes in their whole granules, */
  size_t stranded;       /* and bytes of expandable segments' blocks outside whole granules */
  size_t unused[2];      /* 72 bytes: trees[pool] is one lea on the hot path (56 took two more) */
} ga_free_tree;

/* A private pool (CUDA-graph capture, ga_begin_allocate_to_pool): its own
 * free trees and segments, kept out of general reuse until released. */
typedef struct ga_private {
  uint64_t id;
  ga_free_tree trees[2];  /* by size class */
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
  int pinned;     /* host is pinned host memory (ga_dev_host_alloc), else plain */
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
  ga_free_tree trees[2]; /* the general free trees, by size class */
  ga_blockmap map;       /* pointer handed out -> its block */
  ga_block *kept;        /* a client free kept back for the next allocation (policy/block.c), or NULL */
  size_t device_total;   /* total device memory, from mem_info at create */
  size_t allowed_max;    /* the limit on reserved bytes: the lower of fraction_max and budget_max */
  size_t fraction_max;   /* the fraction's limit alone (PyTorch's allowed_memory_maximum); SIZE_MAX = none */
  size_t budget_max;     /* max_reserved_mb / headroom_mb in bytes; SIZE_MAX = none */
  double fraction;
  size_t large_page; /* bytes of a handle created for the large pool */
  /* Set once at create from the settings, so that the fit's tests on every
   * call read one flag under either expandable policy (ga_alloc_policy_walks,
   * ga_alloc_fit_is_plain). */
  uint8_t fit_walks;  /* best fit walks by expandable size (PyTorch's get_free_block) */
  uint8_t fit_weighs; /* expandable, the default policy, pages of one granule: weigh the few best fits */
  struct {            /* policy/stream.c: stream-ordered reuse */
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
    void **pinned;        /* pinned granule buffers no sleeper holds, kept for the next sleep */
    size_t npinned, cap_pinned;
    size_t pinned_total; /* pinned granule buffers in all (held by sleepers or kept) */
    int pin_refused;     /* this sleep's pinning was refused: the rest goes to plain memory */
  } sleep;
  struct ga_ipc *ipc; /* policy/ipc.c: exports and imports (NULL until the first) */
} ga_policy;

/* The allocator's record: the policy's state and the segment layer's, with
 * what both work with (the lock, settings, device, statistics and history,
 * lent to ga_space by ga_policy_init_locked). */
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
  unsigned long calls_unchecked; /* GA_CHECK_EVERY_CALL (api.c): calls since ga_check last ran */
};

/* ---- Preconditions (debug.h: GA_ASSERT) ---- */
/* The calling thread holds the allocator's lock (lock.h records the holder
 * where asserts are on). Every *_locked function states it first. */
#define GA_ASSERT_LOCKED(a) GA_ASSERT(ga_lock_held((ga_lock *)&(a)->mu))

/* ---- History ---- */
/* Records one history entry when recording is on. */
static inline void ga_history_add_locked(ga_allocator_t *a, int action, uintptr_t addr, size_t size,
                                         ga_stream_t stream) {
  GA_ASSERT_LOCKED(a);
  if (ga_history_on(&a->history)) ga_history_add(&a->history, action, addr, size, (uintptr_t)stream);
}

#endif /* GA_POLICY_STATE_H */
