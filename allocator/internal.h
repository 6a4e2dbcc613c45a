/* internal.h — what api.c and its neighbours above the policy share: the
 * fork() generation, the entry points PyTorch's glue calls past the public
 * API, and the test hooks; on top of the allocator's record (struct
 * ga_allocator, policy/state.h). The functions of each layer are declared in
 * its own header: policy/policy.h and segment/segment.h (device/device.h
 * below them; the leaves config.h, errors.h, text.h, report.h, history.h,
 * stats.h and blockmap.h below all).
 *
 * Layers: api.c (validate, lock, dispatch) -> policy/ (what to hand out) ->
 * segment/ (where the bytes live) -> device/ (how memory is obtained). No
 * layer calls up; scripts/layers.py checks it, and the compiler keeps
 * segment/ from the policy's state: its sources are built with
 * GA_LAYER_SEGMENT, and this header and policy/state.h refuse to compile
 * there; device/'s sources are built with GA_LAYER_DEVICE, under which
 * segment/space.h refuses too. Functions named *_locked require the caller to hold a->mu.
 */
#ifndef GA_INTERNAL_H
#define GA_INTERNAL_H

#if defined(GA_LAYER_SEGMENT) || defined(GA_LAYER_DEVICE)
#error "internal.h is above the segment layer: segment/ includes segment/space.h, device/ device/device.h"
#endif

#include <stdatomic.h>

#include "policy/state.h"

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
