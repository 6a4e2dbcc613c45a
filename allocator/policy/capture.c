/* capture.c — CUDA-graph capture: ga_begin_allocate_to_pool,
 * ga_end_allocate_to_pool and ga_release_pool.
 *
 * While a stream is routed to a private pool, its allocations come from the
 * pool's own free trees and segments (expandable ones with
 * expandable_segments:True, as in current PyTorch), and go back to them when
 * freed, so memory a captured graph uses is never handed to anyone else.
 * Releasing the pool gives its free segments back (now, and at empty_cache
 * for those freed later).
 *
 * While any stream is routed (a capture is underway) the allocator makes no
 * call that would invalidate a capture: device allocations run in the relaxed
 * capture mode, events are neither queried nor synchronised, pages are not
 * moved, and frees with recorded streams wait for the end of the capture.
 */
#include "policy.h"

ga_status_t ga_capture_begin_locked(ga_allocator_t *a, uint64_t id, ga_stream_t stream) {
  ga_private *v = ga_private_find_locked(a, id);
  if (v && v->released) {
    ga_error_set("ga_begin_allocate_to_pool: pool %llu was released", (unsigned long long)id);
    return GA_ERR_INVALID;
  }
  for (int i = 0; v && i < v->nstreams; i++)
    if (v->streams[i] == stream) return GA_OK;
  if (v && v->nstreams == 8) {
    ga_error_set("ga_begin_allocate_to_pool: pool %llu already serves 8 streams", (unsigned long long)id);
    return GA_ERR_INVALID;
  }
  if (!v && ga_private_new_locked(a, id, &v)) {
    ga_error_set("ga_begin_allocate_to_pool: host out of memory");
    return GA_ERR_HOST_MEMORY;
  }
  v->streams[v->nstreams++] = stream;
  a->pol.capture.routing++;
  return GA_OK;
}

/* The pool serves no stream any more; a capture that ended releases the
 * frees it deferred. */
static void stop_routing(ga_allocator_t *a, ga_private *v) {
  a->pol.capture.routing -= v->nstreams;
  v->nstreams = 0;
  if (!a->pol.capture.routing) ga_stream_capture_ended_locked(a);
}

/* Pool `id`, which stops serving its streams; NULL (the error text naming
 * `fn`) when there is none. */
static ga_private *stop(ga_allocator_t *a, uint64_t id, const char *fn) {
  ga_private *v = ga_private_find_locked(a, id);
  if (v)
    stop_routing(a, v);
  else
    ga_error_set("%s: no pool %llu", fn, (unsigned long long)id);
  return v;
}

ga_status_t ga_capture_end_locked(ga_allocator_t *a, uint64_t id) {
  return stop(a, id, "ga_end_allocate_to_pool") ? GA_OK : GA_ERR_INVALID;
}

ga_status_t ga_capture_release_locked(ga_allocator_t *a, uint64_t id) {
  ga_private *v = stop(a, id, "ga_release_pool");
  if (!v) return GA_ERR_INVALID;
  v->released = 1;
  if (v->nsegs == 0) {
    ga_private_drop_locked(a, v);
    return GA_OK;
  }
  /* Expandable memory goes back now unless another capture is underway
   * (that waits for its streams); else at the next empty_cache. Either step
   * may free v once its last segment is gone. */
  size_t native = ga_private_native_segments_locked(a, v);
  int rc = 0;
  if (native < v->nsegs && !a->pol.capture.routing) rc = ga_reclaim_expandable_locked(a, v);
  if (!rc && native) rc = ga_reclaim_private_locked(a, v);
  if (rc) {
    ga_error_set("ga_release_pool: %s", rc == GA_DEV_ENOMEM ? "host out of memory" : a->dev->error);
    return rc == GA_DEV_ENOMEM ? GA_ERR_HOST_MEMORY : GA_ERR_DEVICE;
  }
  return GA_OK;
}
