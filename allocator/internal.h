/* internal.h — the allocator's record (struct ga_allocator) on top of each
 * layer's state: ga_policy (policy/state.h) and ga_space with the records it
 * shares, blocks, segments and handles (segment/space.h). The functions of
 * each layer are declared in its own header: policy/policy.h and
 * segment/segment.h (device/device.h below them; the leaves config.h,
 * errors.h, text.h, report.h, history.h, stats.h and blockmap.h below all).
 *
 * Layers: api.c (validate, lock, dispatch) -> policy/ (what to hand out) ->
 * segment/ (where the bytes live) -> device/ (how memory is obtained). No
 * layer calls up; scripts/layers.py checks it. Functions named *_locked
 * require the caller to hold a->mu.
 */
#ifndef GA_INTERNAL_H
#define GA_INTERNAL_H

#include <stdatomic.h>

#include "policy/state.h"

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
