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
 * call that would invalidate a capture: device calls run in the relaxed
 * capture mode (capture_mode.c), events are neither queried nor
 * synchronised, pages are not moved, no capturing stream and never the whole
 * device is synchronised, frees with recorded streams wait for the end of the
 * capture, and so does the part of an empty_cache that would wait.
 */
#include "policy.h"

ga_status_t ga_capture_begin_locked(ga_allocator_t *a, uint64_t id, ga_stream_t stream) {
  GA_ASSERT_LOCKED(a);
  ga_private *priv = ga_private_find_locked(a, id);
  if (priv && priv->released) {
    ga_error_set("ga_begin_allocate_to_pool: pool %llu was released", (unsigned long long)id);
    return GA_ERR_INVALID;
  }
  for (int i = 0; priv && i < priv->nstreams; i++)
    if (priv->streams[i] == stream) return GA_OK;
  if (priv && priv->nstreams == 8) {
    ga_error_set("ga_begin_allocate_to_pool: pool %llu already serves 8 streams", (unsigned long long)id);
    return GA_ERR_INVALID;
  }
  if (!priv && ga_private_new_locked(a, id, &priv)) {
    return ga_fail(GA_DEV_ENOMEM, "ga_begin_allocate_to_pool", NULL, NULL);
  }
  priv->streams[priv->nstreams++] = stream;
  a->pol.capture.routing++;
  return GA_OK;
}

/* When the last capture has ended: the frees it deferred, then a flush left
 * for its end. */
static int captures_ended(ga_allocator_t *a) {
  if (a->pol.capture.routing) return 0;
  ga_stream_capture_ended_locked(a);
  if (!a->pol.capture.flush_deferred) return 0;
  a->pol.capture.flush_deferred = 0;
  return ga_reclaim_all_locked(a);
}

/* The pool serves no stream any more. */
static int stop_routing(ga_allocator_t *a, ga_private *priv) {
  a->pol.capture.routing -= priv->nstreams;
  priv->nstreams = 0;
  return captures_ended(a);
}

static ga_status_t flush_failed(ga_allocator_t *a, const char *fn, ga_err rc);

ga_status_t ga_capture_announce_locked(ga_allocator_t *a, int begin) {
  GA_ASSERT_LOCKED(a);
  if (begin) {
    a->pol.capture.routing++;
    return GA_OK;
  }
  if (!a->pol.capture.routing) return GA_OK;
  a->pol.capture.routing--;
  int rc = captures_ended(a);
  return rc ? flush_failed(a, "ga_end_allocate_to_pool", rc) : GA_OK;
}

/* Pool `id`, which stops serving its streams; NULL (the error text naming
 * `fn`) when there is none. *rc: the deferred flush's code. */
static ga_private *stop(ga_allocator_t *a, uint64_t id, const char *fn, int *rc) {
  ga_private *priv = ga_private_find_locked(a, id);
  *rc = 0;
  if (priv)
    *rc = stop_routing(a, priv);
  else
    ga_error_set("%s: no pool %llu", fn, (unsigned long long)id);
  return priv;
}

static ga_status_t flush_failed(ga_allocator_t *a, const char *fn, ga_err rc) {
  ga_error_set(
      "%s: the pool serves no stream now, but finishing the ga_empty_cache left for the end of the "
      "capture failed: %s",
      fn, ga_err_words(rc, a->dev->error));
  return ga_err_status(rc);
}

ga_status_t ga_capture_end_locked(ga_allocator_t *a, uint64_t id) {
  GA_ASSERT_LOCKED(a);
  int rc;
  if (!stop(a, id, "ga_end_allocate_to_pool", &rc)) return GA_ERR_INVALID;
  return rc ? flush_failed(a, "ga_end_allocate_to_pool", rc) : GA_OK;
}

ga_status_t ga_capture_release_locked(ga_allocator_t *a, uint64_t id) {
  GA_ASSERT_LOCKED(a);
  int flush_rc, rc = 0;
  ga_private *priv = stop(a, id, "ga_release_pool", &flush_rc);
  if (!priv) return GA_ERR_INVALID;
  priv->released = 1;
  if (priv->nsegs == 0) {
    ga_private_delete_locked(a, priv);
  } else {
    /* Expandable memory goes back now unless another capture is underway
     * (that waits for its streams); else at the next empty_cache. Either step
     * may free priv once its last segment is gone. Another capture's calls must
     * not break it: they run in the relaxed mode. */
    size_t native = ga_private_native_segments_locked(a, priv);
    int expandable = native < priv->nsegs && !a->pol.capture.routing;
    ga_relax r;
    if ((expandable || native) && (rc = ga_capture_relax_locked(a, &r)) == 0) {
      if (expandable) rc = ga_reclaim_expandable_locked(a, priv);
      if (!rc && native) rc = ga_reclaim_private_locked(a, priv);
      ga_capture_unrelax_locked(a, &r);
    }
  }
  if (rc) {
    ga_error_set("ga_release_pool: %s; what is left goes back at the next ga_empty_cache",
                 ga_err_words(rc, a->dev->error));
    return ga_err_status(rc);
  }
  return flush_rc ? flush_failed(a, "ga_release_pool", flush_rc) : GA_OK;
}
